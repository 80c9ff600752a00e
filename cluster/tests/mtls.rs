//! Certificates from the cluster CA work for real TLS in both directions (rustls, the library
//! the gateway serves with): a worker's certificate is accepted by a client that trusts only the
//! CA, the manager's client certificate is accepted by a worker that requires one, and a
//! certificate from another cluster is refused both ways.

use std::sync::Arc;

use infergate_cluster::ca::{pem_body, ClusterCa, Issued};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn chain(issued: &Issued) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
    let cert = CertificateDer::from(pem_body(&issued.cert_pem).unwrap());
    let key = PrivatePkcs8KeyDer::from(pem_body(&issued.key_pem).unwrap());
    (vec![cert], key.into())
}

fn roots(ca: &ClusterCa) -> Arc<RootCertStore> {
    let mut store = RootCertStore::empty();
    store
        .add(CertificateDer::from(ca.cert_der().to_vec()))
        .unwrap();
    Arc::new(store)
}

/// Runs a TLS handshake in memory: `worker` serves (requiring a client certificate from
/// `worker_trusts`), `manager` connects to `host` trusting `manager_trusts`.
fn handshake(
    worker: &Issued,
    worker_trusts: &ClusterCa,
    manager: &Issued,
    manager_trusts: &ClusterCa,
    host: &str,
) -> Result<(), rustls::Error> {
    let verifier = WebPkiClientVerifier::builder_with_provider(roots(worker_trusts), provider())
        .build()
        .unwrap();
    let (cert, key) = chain(worker);
    let server = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(cert, key)
        .unwrap();
    let (cert, key) = chain(manager);
    let client = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots(manager_trusts))
        .with_client_auth_cert(cert, key)
        .unwrap();
    let mut s = ServerConnection::new(Arc::new(server)).unwrap();
    let mut c = ClientConnection::new(
        Arc::new(client),
        ServerName::try_from(host.to_owned()).unwrap(),
    )
    .unwrap();
    for _ in 0..10 {
        let mut wire = Vec::new();
        c.write_tls(&mut wire).unwrap();
        s.read_tls(&mut wire.as_slice()).unwrap();
        s.process_new_packets()?;
        let mut wire = Vec::new();
        s.write_tls(&mut wire).unwrap();
        c.read_tls(&mut wire.as_slice()).unwrap();
        c.process_new_packets()?;
        if !c.is_handshaking() && !s.is_handshaking() {
            // The client's last flight (its certificate and Finished) may still be queued.
            let mut wire = Vec::new();
            c.write_tls(&mut wire).unwrap();
            s.read_tls(&mut wire.as_slice()).unwrap();
            s.process_new_packets()?;
            return Ok(());
        }
    }
    panic!("handshake did not finish in 10 round trips");
}

#[test]
fn workers_and_the_manager_trust_each_other_through_the_cluster_ca() {
    let ca = ClusterCa::generate("m1").unwrap();
    let worker = ca
        .issue("w-1", &["127.0.0.1".into(), "gpu-1.internal".into()])
        .unwrap();
    let manager = ca.issue("manager", &["127.0.0.1".into()]).unwrap();
    handshake(&worker, &ca, &manager, &ca, "127.0.0.1").unwrap();
    handshake(&worker, &ca, &manager, &ca, "gpu-1.internal").unwrap();
    // A CA loaded back from its files issues certificates the same clients accept.
    let reloaded = ClusterCa::from_pem("m1", ca.cert_pem(), &ca.key_pem()).unwrap();
    let later = reloaded.issue("w-2", &["127.0.0.1".into()]).unwrap();
    handshake(&later, &ca, &manager, &ca, "127.0.0.1").unwrap();
}

#[test]
fn another_clusters_certificates_and_wrong_names_are_refused() {
    let ca = ClusterCa::generate("m1").unwrap();
    let stranger_ca = ClusterCa::generate("m1").unwrap();
    let worker = ca.issue("w-1", &["127.0.0.1".into()]).unwrap();
    let manager = ca.issue("manager", &["127.0.0.1".into()]).unwrap();
    let impostor = stranger_ca.issue("w-1", &["127.0.0.1".into()]).unwrap();
    // A worker certificate from another CA: the manager refuses it.
    assert!(handshake(&impostor, &ca, &manager, &ca, "127.0.0.1").is_err());
    // A manager certificate from another CA: the worker refuses it.
    let fake_manager = stranger_ca.issue("manager", &["127.0.0.1".into()]).unwrap();
    assert!(handshake(&worker, &ca, &fake_manager, &ca, "127.0.0.1").is_err());
    // The right CA, but the worker is not who the address says.
    assert!(handshake(&worker, &ca, &manager, &ca, "10.0.0.9").is_err());
}
