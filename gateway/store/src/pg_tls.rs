//! TLS to PostgreSQL (`--store postgres://…?sslmode=require&sslrootcert=FILE`), on the rustls
//! the gateway already serves with.
//!
//! A small adapter of our own instead of `tokio-postgres-rustls`: that crate pulls `sha2` and
//! `x509-cert` with features that rebuild half the dependency tree (wasmtime included), only to
//! compute the SCRAM channel binding. Without channel binding, SCRAM-SHA-256 still
//! authenticates both ways through the password; the server's identity is proven by the
//! certificate check below, which is stricter than libpq's `require` (libpq verifies only with
//! `verify-ca`/`verify-full`): an encrypted connection to an unverified server is not offered.
//!
//! `sslrootcert` is libpq's parameter, which tokio-postgres does not know: it is taken out of
//! the URL here. `sslrootcert=system` reads the operating system's bundle.

use super::StoreError;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::config::SslMode;
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};

/// Debian's (and Ubuntu's) bundle of the system's trusted roots.
const SYSTEM_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The connector every connection of a store uses: TLS with the configured roots, or none
/// when the URL did not ask for it (then tokio-postgres never calls it: see [`parse`]).
#[derive(Clone)]
pub struct PgTls {
    config: Option<Arc<ClientConfig>>,
}

/// Parses a store URL (URL or `key=value` form) into tokio-postgres's config and the TLS
/// connector it needs.
pub fn parse(url: &str) -> Result<(tokio_postgres::Config, PgTls), StoreError> {
    let (url, root_file) = take_root_cert(url);
    let mut config: tokio_postgres::Config = url
        .parse()
        .map_err(|e| StoreError::Config(format!("--store: not a PostgreSQL URL: {e}")))?;
    if config.get_ssl_mode() != SslMode::Require {
        if root_file.is_some() {
            return Err(StoreError::Config(
                "--store: sslrootcert is given but sslmode is not require: add sslmode=require \
                 to connect over TLS"
                    .into(),
            ));
        }
        // tokio-postgres's default is `prefer`, which tries TLS when the connector can do it.
        // Without `require` this store has always connected in the clear; `disable` keeps it
        // so, explicitly, instead of trying a handshake with no roots to check it against.
        config.ssl_mode(SslMode::Disable);
        return Ok((config, PgTls { config: None }));
    }
    let Some(root_file) = root_file else {
        return Err(StoreError::Config(
            "--store: sslmode=require needs sslrootcert=FILE (the PEM certificate of the CA \
             that signed PostgreSQL's certificate) or sslrootcert=system (the system's trusted \
             roots): the server's certificate is always verified"
                .into(),
        ));
    };
    let roots = roots(&root_file)?;
    let tls =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| StoreError::Config(format!("--store: TLS setup: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
    Ok((
        config,
        PgTls {
            config: Some(Arc::new(tls)),
        },
    ))
}

/// Splits `sslrootcert` off the URL's query (or the `key=value` list).
fn take_root_cert(url: &str) -> (String, Option<String>) {
    let is_url = url.starts_with("postgres://") || url.starts_with("postgresql://");
    let (head, params, separator) = match is_url {
        true => match url.split_once('?') {
            Some((head, query)) => (
                format!("{head}?"),
                query.split('&').collect::<Vec<_>>(),
                "&",
            ),
            None => return (url.to_owned(), None),
        },
        false => (String::new(), url.split_whitespace().collect(), " "),
    };
    let mut root = None;
    let kept: Vec<&str> = params
        .into_iter()
        .filter(|p| match p.strip_prefix("sslrootcert=") {
            Some(value) => {
                root = Some(value.to_owned());
                false
            }
            None => true,
        })
        .collect();
    let rest = kept.join(separator);
    let url = match (is_url, rest.is_empty()) {
        (true, true) => head.trim_end_matches('?').to_owned(),
        _ => format!("{head}{rest}"),
    };
    (url, root)
}

fn roots(file: &str) -> Result<RootCertStore, StoreError> {
    let path = if file == "system" { SYSTEM_ROOTS } else { file };
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| StoreError::Config(format!("--store: sslrootcert {path}: {e}")))?;
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(StoreError::Config(format!(
            "--store: sslrootcert {path} holds no usable CA certificate"
        )));
    }
    Ok(roots)
}

impl<S> MakeTlsConnect<S> for PgTls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = PgTlsStream<S>;
    type TlsConnect = PgTlsConnect;
    type Error = io::Error;

    /// tokio-postgres asks for a connector before it looks at `sslmode`: one without TLS is
    /// handed out and never used (`sslmode=disable`), so it fails only if it ever were.
    fn make_tls_connect(&mut self, host: &str) -> io::Result<PgTlsConnect> {
        let Some(config) = self.config.clone() else {
            return Ok(PgTlsConnect { tls: None });
        };
        let name = ServerName::try_from(host.to_owned())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok(PgTlsConnect {
            tls: Some((tokio_rustls::TlsConnector::from(config), name)),
        })
    }
}

pub struct PgTlsConnect {
    tls: Option<(tokio_rustls::TlsConnector, ServerName<'static>)>,
}

impl<S> TlsConnect<S> for PgTlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = PgTlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<PgTlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let (connector, name) = self.tls.ok_or_else(|| {
                io::Error::other("TLS was not configured for this store (sslmode=require)")
            })?;
            Ok(PgTlsStream(connector.connect(name, stream).await?))
        })
    }
}

pub struct PgTlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for PgTlsStream<S> {
    /// None: see the module's comment.
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for PgTlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for PgTlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
#[path = "pg_tls_tests.rs"]
mod tests;
