//! TLS between the manager and its workers.
//!
//! - Worker → manager (join, heartbeats, model files): the worker knows only the pin in its join
//!   secret (the SHA-256 of the cluster CA, as kubeadm's discovery hash). It connects to the
//!   manager's HTTPS port with the server name [`MANAGER_NAME`]; the manager answers that name
//!   with a certificate from the cluster CA (the CA included in the chain), every other name with
//!   its usual certificate. The worker accepts the chain only if it carries the pinned CA and
//!   verifies against it, so nobody in between can collect the join secret.
//! - Manager → worker (inference): mutual TLS. The worker serves with the certificate the manager
//!   issued at join; the manager presents its own from the cluster CA, issued at start. A client
//!   without a certificate is a direct-mode client: each request needs a manager-signed token.

use anyhow::{anyhow, Context};
use infergate_cluster::ca::{pin_of, ClusterCa, Issued};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};
use std::sync::Arc;

/// The one crypto provider every TLS configuration of the gateway is built with (ring: it needs
/// no cmake, unlike aws-lc-rs).
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The TLS server name workers use for the manager; it never needs to resolve in DNS (the
/// worker's HTTP client maps it to the address of its `--join` URL).
pub const MANAGER_NAME: &str = "manager.infergate-cluster";

const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

fn certs(pem: &str) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .context("reading PEM certificates")?;
    if certs.is_empty() {
        return Err(anyhow!("no certificate in the PEM text"));
    }
    Ok(certs)
}

fn key(pem: &str) -> anyhow::Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).context("reading a PEM private key")
}

fn roots(ca_pem: &str) -> anyhow::Result<Arc<RootCertStore>> {
    let mut roots = RootCertStore::empty();
    for cert in certs(ca_pem)? {
        roots.add(cert).context("adding the cluster CA")?;
    }
    Ok(Arc::new(roots))
}

/// An issued certificate followed by the CA, as a server or client sends its chain.
fn chain(issued: &Issued, ca_pem: &str) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let mut chain = certs(&issued.cert_pem)?;
    chain.extend(certs(ca_pem)?);
    Ok(chain)
}

/// The manager's HTTPS certificate choice: the cluster certificate for [`MANAGER_NAME`], the
/// listener's own certificate for everyone else.
#[derive(Debug)]
pub struct ManagerSni {
    cluster: Arc<CertifiedKey>,
    default: Arc<dyn ResolvesServerCert>,
}

impl ResolvesServerCert for ManagerSni {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if client_hello.server_name() == Some(MANAGER_NAME) {
            return Some(self.cluster.clone());
        }
        self.default.resolve(client_hello)
    }
}

/// The manager's listener config with the cluster certificate added for workers.
pub fn manager_server_config(
    config: &ServerConfig,
    ca: &ClusterCa,
) -> anyhow::Result<Arc<ServerConfig>> {
    let issued = ca
        .issue("infergate-manager", &[MANAGER_NAME.to_owned()])
        .map_err(|e| anyhow!(e))?;
    let signing = provider()
        .key_provider
        .load_private_key(key(&issued.key_pem)?)
        .context("loading the manager's cluster key")?;
    let cluster = Arc::new(CertifiedKey::new(chain(&issued, ca.cert_pem())?, signing));
    let mut config = config.clone();
    config.cert_resolver = Arc::new(ManagerSni {
        cluster,
        default: config.cert_resolver.clone(),
    });
    Ok(Arc::new(config))
}

/// The manager's client for inference on workers: trusts only the cluster CA and presents a
/// certificate from it.
pub fn manager_client_config(ca: &ClusterCa) -> anyhow::Result<ClientConfig> {
    let issued = ca
        .issue("infergate-manager", &[MANAGER_NAME.to_owned()])
        .map_err(|e| anyhow!(e))?;
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots(ca.cert_pem())?)
        .with_client_auth_cert(chain(&issued, ca.cert_pem())?, key(&issued.key_pem)?)?;
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// A worker's listener: its issued certificate. A client certificate, when sent, must come
/// from the cluster CA (the manager); a client without one is a direct-mode client and needs a
/// token on each request.
pub fn worker_server_config(issued: &Issued, ca_pem: &str) -> anyhow::Result<Arc<ServerConfig>> {
    let verifier = WebPkiClientVerifier::builder_with_provider(roots(ca_pem)?, provider())
        .allow_unauthenticated()
        .build()
        .context("building the worker's client verifier")?;
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain(issued, ca_pem)?, key(&issued.key_pem)?)
        .context("the issued certificate and key do not match")?;
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// A worker's client for the manager: accepts only a chain that carries the pinned CA.
pub fn worker_client_config(pin: &str) -> anyhow::Result<ClientConfig> {
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(PinnedCa {
            pin: pin.to_ascii_lowercase(),
        }))
        .with_no_client_auth();
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// Verifies the manager's chain against the CA whose SHA-256 is the join secret's pin.
#[derive(Debug)]
struct PinnedCa {
    pin: String,
}

impl ServerCertVerifier for PinnedCa {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let refuse = |why: &str| rustls::Error::General(why.to_owned());
        let ca = intermediates
            .iter()
            .find(|c| pin_of(c.as_ref()) == self.pin)
            .ok_or_else(|| {
                refuse("the manager's certificate does not carry the cluster CA pinned in the join secret (wrong manager, or its data directory was replaced)")
            })?;
        let mut roots = RootCertStore::empty();
        roots
            .add(ca.clone().into_owned())
            .map_err(|e| refuse(&format!("the pinned cluster CA is not usable: {e}")))?;
        let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .map_err(|e| refuse(&format!("building a verifier for the cluster CA: {e}")))?;
        verifier.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}
