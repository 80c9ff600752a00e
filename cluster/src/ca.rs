//! The cluster CA: the manager's own certificate authority for manager↔worker TLS.
//!
//! A worker that joins gets a certificate for its advertised address, signed by this CA; the
//! manager talks to workers trusting only this CA (not the system roots), and workers pin the
//! CA by its hash from the join secret (see [`crate::join`]). mTLS in both directions without an
//! operator-run PKI. A removed worker's certificate stays valid until it expires, so the manager
//! also checks the certificate's worker id against its registry on every connection: removal
//! takes effect at once, without revocation lists.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use sha2::{Digest, Sha256};

/// A failure to create or load the CA, or to issue from it: the operator's files or a bug, never
/// a client's input.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("cluster CA: {what}")]
    Certificate {
        what: &'static str,
        #[source]
        source: rcgen::Error,
    },
    #[error("cluster CA: the private key does not belong to the certificate")]
    KeyMismatch,
    #[error("cluster CA: the certificate file is not PEM")]
    NotPem,
}

fn ca_error(what: &'static str) -> impl FnOnce(rcgen::Error) -> CaError {
    move |source| CaError::Certificate { what, source }
}

pub struct ClusterCa {
    cluster: String,
    key: KeyPair,
    cert_pem: String,
    cert_der: Vec<u8>,
}

/// A certificate and its private key, PEM.
#[derive(Clone)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued").finish_non_exhaustive()
    }
}

/// The CA's parameters, rebuilt the same way on every start: an issuer needs the CA's name and
/// key usages, and rebuilding them spares parsing X.509 (rcgen's parser is an extra dependency).
fn ca_params(cluster: &str) -> Result<CertificateParams, CaError> {
    let mut params =
        CertificateParams::new(Vec::<String>::new()).map_err(ca_error("parameters"))?;
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, "infergate");
    name.push(
        DnType::CommonName,
        format!("infergate cluster CA {cluster}"),
    );
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(params)
}

impl ClusterCa {
    /// A new CA for the cluster named `cluster` (the manager's id).
    pub fn generate(cluster: &str) -> Result<ClusterCa, CaError> {
        let key = KeyPair::generate().map_err(ca_error("key generation"))?;
        let cert = ca_params(cluster)?
            .self_signed(&key)
            .map_err(ca_error("self-signing"))?;
        Ok(ClusterCa {
            cluster: cluster.to_owned(),
            cert_pem: cert.pem(),
            cert_der: cert.der().to_vec(),
            key,
        })
    }

    /// The CA saved by [`ClusterCa::cert_pem`] and [`ClusterCa::key_pem`].
    pub fn from_pem(cluster: &str, cert_pem: &str, key_pem: &str) -> Result<ClusterCa, CaError> {
        let key = KeyPair::from_pem(key_pem).map_err(ca_error("private key"))?;
        let cert_der = pem_body(cert_pem).ok_or(CaError::NotPem)?;
        // The certificate embeds its public key verbatim: a key from another CA would sign
        // certificates no worker could verify.
        let public = key.public_key_raw();
        if !cert_der.windows(public.len()).any(|w| w == public) {
            return Err(CaError::KeyMismatch);
        }
        Ok(ClusterCa {
            cluster: cluster.to_owned(),
            cert_pem: cert_pem.to_owned(),
            cert_der,
            key,
        })
    }

    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    pub fn cert_der(&self) -> &[u8] {
        &self.cert_der
    }

    /// The private key: the caller writes it with owner-only permissions.
    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// SHA-256 of the CA certificate (hex): what join secrets carry.
    pub fn pin(&self) -> String {
        pin_of(&self.cert_der)
    }

    /// A certificate for worker `worker_id` reachable at `hosts` (DNS names or IP addresses),
    /// valid for both ends of a TLS connection: it serves clients and the manager, and it
    /// presents itself to the manager.
    pub fn issue(&self, worker_id: &str, hosts: &[String]) -> Result<Issued, CaError> {
        let mut params =
            CertificateParams::new(hosts.to_vec()).map_err(ca_error("worker names"))?;
        let mut name = DistinguishedName::new();
        name.push(DnType::OrganizationName, "infergate");
        name.push(DnType::CommonName, worker_id);
        params.distinguished_name = name;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate().map_err(ca_error("worker key"))?;
        let issuer = Issuer::new(ca_params(&self.cluster)?, &self.key);
        let cert = params
            .signed_by(&key, &issuer)
            .map_err(ca_error("signing a worker certificate"))?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// SHA-256 (hex) of a DER certificate.
pub fn pin_of(cert_der: &[u8]) -> String {
    hex::encode(Sha256::digest(cert_der))
}

/// The DER inside the first PEM block.
pub fn pem_body(pem: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    let start = pem.find("-----BEGIN ")?;
    let body_start = start + pem[start..].find('\n')? + 1;
    let body_end = body_start + pem[body_start..].find("-----END ")?;
    let body: String = pem[body_start..body_end].split_whitespace().collect();
    base64::engine::general_purpose::STANDARD.decode(body).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_ca_loads_back_and_keeps_its_pin() {
        let ca = ClusterCa::generate("m1").unwrap();
        let again = ClusterCa::from_pem("m1", ca.cert_pem(), &ca.key_pem()).unwrap();
        assert_eq!(again.pin(), ca.pin());
        assert_eq!(ca.pin().len(), 64);
        let other = ClusterCa::generate("m1").unwrap();
        assert!(matches!(
            ClusterCa::from_pem("m1", ca.cert_pem(), &other.key_pem()),
            Err(CaError::KeyMismatch)
        ));
        assert!(matches!(
            ClusterCa::from_pem("m1", "not pem", &ca.key_pem()),
            Err(CaError::NotPem)
        ));
    }

    #[test]
    fn issued_certificates_are_pem_for_the_worker() {
        let ca = ClusterCa::generate("m1").unwrap();
        let issued = ca
            .issue(
                "w-1",
                &["127.0.0.1".to_owned(), "gpu-1.internal".to_owned()],
            )
            .unwrap();
        assert!(issued.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(issued.key_pem.contains("PRIVATE KEY"));
        assert!(!format!("{issued:?}").contains("PRIVATE"));
        assert_ne!(pem_body(&issued.cert_pem).unwrap(), ca.cert_der());
    }
}
