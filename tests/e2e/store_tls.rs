//! A gateway whose PostgreSQL store is reached over TLS (`sslmode=require&sslrootcert=FILE`):
//! the offline CLI registers a model through it and the server authenticates and serves
//! through it. The certificate check itself is tested beside the connector
//! (`gateway/store/src/pg_tls.rs`).

use crate::harness::{model, register_with_env, Options, Server};
use crate::test_postgres::PgServer;
use infergate_cluster::ca::ClusterCa;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_runs_on_a_postgresql_store_reached_over_tls() {
    // A CA of the test's own signs the server's certificate for 127.0.0.1 (the cluster CA's
    // code, as in the connector's own test).
    let ca = ClusterCa::generate("pg-test").unwrap();
    let issued = ca.issue("postgres", &["127.0.0.1".into()]).unwrap();
    let pg = PgServer::start_with_tls(&issued.cert_pem, &issued.key_pem);
    let tmp = tempfile::tempdir().unwrap();
    let ca_file = tmp.path().join("pg-ca.pem");
    std::fs::write(&ca_file, ca.cert_pem()).unwrap();
    let url = format!(
        "{}?sslmode=require&sslrootcert={}",
        pg.url(),
        ca_file.display()
    );
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    register_with_env(
        &data,
        "cls",
        &model("ocr-cls.onnx"),
        &[("INFERGATE_STORE", &url)],
    );
    let s = Server::start_in(
        &data,
        Options {
            extra_args: vec!["--store".into(), url],
            ..Options::default()
        },
    );
    let created: Value = s
        .post_json(
            "/api/keys",
            &s.admin_key,
            &json!({"name": "tls", "scopes": ["infer"]}),
        )
        .await
        .json()
        .await
        .unwrap();
    let secret = created["secret"].as_str().expect("a key secret");
    let body = json!({"inputs": [{"name": "x", "shape": [1, 3, 48, 192], "datatype": "FP32",
                                  "data": vec![0.0f32; 3 * 48 * 192]}]});
    let answer = s.post_json("/v2/models/cls/infer", secret, &body).await;
    assert_eq!(answer.status(), 200, "{}", answer.text().await.unwrap());
}
