//! Tests of `pg_tls` against a real store.

use super::take_root_cert;
use crate::test_postgres::PgServer;
use crate::{Store, StoreConfig, StoreError};
use infergate_cluster::ca::ClusterCa;
use std::time::{Duration, Instant};

fn open(url: String, dir: &std::path::Path) -> Result<Store, StoreError> {
    Store::open_with(
        dir,
        &StoreConfig {
            url: Some(url),
            resync_s: 3600,
            ..StoreConfig::default()
        },
    )
}

/// A real PostgreSQL serving TLS with a certificate from a CA of the test's own: the store
/// connects over TLS (pooled queries and the listener alike) when the URL says
/// `sslmode=require`, checks the certificate against `sslrootcert`, and refuses a server
/// whose certificate another CA signed.
#[test]
fn the_store_talks_tls_to_postgres_and_verifies_its_certificate() {
    let ca = ClusterCa::generate("pg-test").unwrap();
    let issued = ca.issue("postgres", &["127.0.0.1".into()]).unwrap();
    let server = PgServer::start_with_tls(&issued.cert_pem, &issued.key_pem);
    let files = tempfile::tempdir().unwrap();
    let ca_file = files.path().join("ca.pem");
    std::fs::write(&ca_file, ca.cert_pem()).unwrap();
    let url = format!(
        "{}?sslmode=require&sslrootcert={}",
        server.url(),
        ca_file.display()
    );
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = open(url.clone(), da.path()).expect("a store over TLS");
    let b = open(url, db.path()).expect("a second store over TLS");
    let ssl: bool = a
        .with(|db| {
            db.query_one(
                "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                &[],
            )?
            .get("ssl")
        })
        .unwrap();
    assert!(ssl, "the store's connection is not encrypted");
    // The listener's connection is TLS too: only its notification can tell B of the key
    // (the full resync is an hour away).
    let (_, secret) = a
        .create_key(
            "over-tls",
            &crate::auth::Scopes::parse_list("infer").unwrap(),
        )
        .unwrap();
    let start = Instant::now();
    while b.authenticate(&secret).unwrap().is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "B never heard of the key A created over TLS"
        );
        std::thread::sleep(Duration::from_millis(5));
    }

    // A server certificate from another CA is refused, and says why.
    let other = ClusterCa::generate("other").unwrap();
    let other_file = files.path().join("other.pem");
    std::fs::write(&other_file, other.cert_pem()).unwrap();
    let dc = tempfile::tempdir().unwrap();
    let refused = open(
        format!(
            "{}?sslmode=require&sslrootcert={}",
            server.url(),
            other_file.display()
        ),
        dc.path(),
    );
    let message = refused
        .err()
        .expect("an untrusted server was accepted")
        .to_string();
    assert!(message.contains("certificate"), "{message}");

    // TLS without roots to check the server against is refused before connecting.
    let message = open(format!("{}?sslmode=require", server.url()), dc.path())
        .err()
        .expect("sslmode=require without sslrootcert was accepted")
        .to_string();
    assert!(message.contains("sslrootcert"), "{message}");
}

#[test]
fn sslrootcert_is_taken_out_of_both_url_forms() {
    assert_eq!(
        take_root_cert("postgres://u@h/db?sslmode=require&sslrootcert=/ca.pem"),
        (
            "postgres://u@h/db?sslmode=require".into(),
            Some("/ca.pem".into())
        )
    );
    assert_eq!(
        take_root_cert("postgres://u@h/db?sslrootcert=system"),
        ("postgres://u@h/db".into(), Some("system".into()))
    );
    assert_eq!(
        take_root_cert("host=h sslrootcert=/ca.pem sslmode=require"),
        ("host=h sslmode=require".into(), Some("/ca.pem".into()))
    );
    assert_eq!(
        take_root_cert("postgres://u@h/db"),
        ("postgres://u@h/db".into(), None)
    );
}
