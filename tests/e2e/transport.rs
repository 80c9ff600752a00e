use crate::harness::{client_for, Options, Server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_http2_and_http1() {
    let s = Server::with_models(&[]);
    let h2 = s.client.get(s.url("/v2/health/live")).send().await.unwrap();
    assert_eq!(h2.version(), reqwest::Version::HTTP_2, "ALPN negotiates h2");
    let pem = std::fs::read(s.data.join("tls/cert.pem")).unwrap();
    let h1_client = reqwest::Client::builder()
        .use_rustls_tls()
        .http1_only()
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
        .build()
        .unwrap();
    let h1 = h1_client
        .get(s.url("/v2/health/live"))
        .send()
        .await
        .unwrap();
    assert_eq!(h1.version(), reqwest::Version::HTTP_11);
    assert_eq!(h1.status(), 200);
    assert!(s.addr.starts_with("https://"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_http_is_explicit_and_warns() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start_in(
        tmp.path(),
        Options {
            insecure_http: true,
            ..Options::default()
        },
    );
    assert!(s.addr.starts_with("http://"));
    let r = client_for(&s.data, true)
        .get(s.url("/v2/health/live"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let warned = s.startup_log.iter().any(|l| l.contains("insecure-http"));
    assert!(warned, "plain HTTP logs a warning");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_refuses_clients_without_a_certificate_from_the_ca() {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let tmp = tempfile::tempdir().unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(vec![]).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
    let client_key = KeyPair::generate().unwrap();
    let client_cert = CertificateParams::new(vec!["client".to_string()])
        .unwrap()
        .signed_by(&client_key, &issuer)
        .unwrap();
    let ca_path = tmp.path().join("client-ca.pem");
    std::fs::write(&ca_path, ca.pem()).unwrap();
    let data = tmp.path().join("data");

    let s = Server::start_in(
        &data,
        Options {
            extra_args: vec!["--tls-client-ca".into(), ca_path.display().to_string()],
            ..Options::default()
        },
    );
    // No client certificate: the handshake fails, no HTTP response at all.
    let refused = s.client.get(s.url("/v2/health/live")).send().await;
    assert!(
        refused.is_err(),
        "a client without a certificate must be refused"
    );

    let identity = reqwest::Identity::from_pem(
        format!("{}{}", client_cert.pem(), client_key.serialize_pem()).as_bytes(),
    )
    .unwrap();
    let pem = std::fs::read(data.join("tls/cert.pem")).unwrap();
    let with_cert = reqwest::Client::builder()
        .use_rustls_tls()
        .identity(identity)
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
        .build()
        .unwrap();
    let ok = with_cert
        .get(s.url("/v2/health/live"))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_cleanly() {
    let s = Server::with_models(&[]);
    assert_eq!(
        s.client
            .get(s.url("/v2/health/ready"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let status = s.terminate();
    assert!(status.success(), "exit status after SIGTERM: {status}");
}
