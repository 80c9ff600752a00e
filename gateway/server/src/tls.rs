//! TLS with rustls: the operator's PEM files, or a self-signed certificate generated on first
//! start and kept in the data directory; optional client-certificate verification (mTLS).

use infergate_hop::tls::provider;
use infergate_service::config::TlsConfig;
use infergate_store::files::{write_atomic, write_new};
use infergate_store::DataDir;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where the certificate in use lives, for logs and for clients to trust.
pub struct TlsSetup {
    pub config: Arc<ServerConfig>,
    pub cert_path: PathBuf,
    pub self_signed: bool,
}

pub fn server_config(cfg: &TlsConfig, dir: &DataDir) -> Result<TlsSetup, String> {
    let (cert_path, key_path, self_signed) = match (&cfg.cert, &cfg.key) {
        (Some(c), Some(k)) => (c.clone(), k.clone(), false),
        (None, None) => {
            let (c, k) = ensure_self_signed(dir)?;
            (c, k, true)
        }
        _ => return Err("--tls-cert and --tls-key must be given together".into()),
    };
    let certs = CertificateDer::pem_file_iter(&cert_path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("reading certificate {}: {e}", cert_path.display()))?;
    if certs.is_empty() {
        return Err(format!("no certificate found in {}", cert_path.display()));
    }
    let key = PrivateKeyDer::from_pem_file(&key_path)
        .map_err(|e| format!("reading private key {}: {e}", key_path.display()))?;

    let builder = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| e.to_string())?;
    let builder = match &cfg.client_ca {
        Some(ca) => builder.with_client_cert_verifier(client_verifier(ca)?),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("certificate and key do not match: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsSetup {
        config: Arc::new(config),
        cert_path,
        self_signed,
    })
}

fn client_verifier(
    ca: &Path,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, String> {
    let mut roots = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(ca)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("reading client CA {}: {e}", ca.display()))?;
    for cert in certs {
        roots
            .add(cert)
            .map_err(|e| format!("client CA {}: {e}", ca.display()))?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .map_err(|e| format!("client CA {}: {e}", ca.display()))
}

/// Generates `tls/cert.pem` + `tls/key.pem` for localhost on first start; reuses them after.
fn ensure_self_signed(dir: &DataDir) -> Result<(PathBuf, PathBuf), String> {
    let cert_path = dir.tls().join("cert.pem");
    let key_path = dir.tls().join("key.pem");
    if cert_path.is_file() && key_path.is_file() {
        return Ok((cert_path, key_path));
    }
    let names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    let generated = rcgen::generate_simple_self_signed(names)
        .map_err(|e| format!("generating certificate: {e}"))?;
    // Key first with 0600, certificate last: a present certificate implies a present key.
    write_new_or_replace(
        &key_path,
        generated.signing_key.serialize_pem().as_bytes(),
        0o600,
    )?;
    write_atomic(&cert_path, generated.cert.pem().as_bytes(), 0o644)
        .map_err(|e| format!("writing {}: {e}", cert_path.display()))?;
    tracing::info!(cert = %cert_path.display(), "generated a self-signed TLS certificate for localhost");
    Ok((cert_path, key_path))
}

fn write_new_or_replace(path: &Path, bytes: &[u8], mode: u32) -> Result<(), String> {
    let _ = std::fs::remove_file(path);
    write_new(path, bytes, mode).map_err(|e| format!("writing {}: {e}", path.display()))
}
