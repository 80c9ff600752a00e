//! Workers across gateway replicas: two replicas on one PostgreSQL (a real server,
//! `crate::test_postgres`), neither running models itself (`--no-local-engine`), each with a data
//! directory of its own (so the cluster CA and token key can only agree through the store), and
//! one worker joined with A's URL first and B's second. Whichever replica its heartbeats reach,
//! both route to it; when A dies (kill -9) the worker reports to B, which goes on serving; a
//! removal on one replica stops routing on the other.

use crate::harness::{model, register_with_env, Server};
use crate::replicas::replica_with;
use crate::test_postgres::PgServer;
use crate::workers::{close, infer_at, state_of, until, workers_cli, Worker};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Fast heartbeats, so that a worker whose reports stopped reaching the store is lost within
/// 600 ms (three missed).
const HEARTBEAT_MS: u64 = 200;

fn replica(data: &Path, pg: &PgServer, config: &Path) -> Server {
    let config = config.display().to_string();
    replica_with(
        data,
        pg,
        vec!["--no-local-engine".into(), "--config".into(), config],
    )
}

async fn infer(s: &Server, key: &str) -> Result<Vec<f64>, (u16, String)> {
    infer_at(&s.client, &s.url("/v2/models/minilm/infer"), key).await
}

/// `POST path` on `s` as its admin, expecting `201 Created`; the answer's JSON.
async fn created(s: &Server, path: &str, body: Value) -> Value {
    let r = s.post_json(path, &s.admin_key, &body).await;
    assert_eq!(r.status(), 201, "POST {path}");
    r.json().await.unwrap()
}

/// Polls `s` until its inference answers `status` (at most 10 s); how long that took.
async fn until_infer_status(s: &Server, key: &str, status: u16) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        let now = match infer(s, key).await {
            Ok(_) => 200,
            Err((code, _)) => code,
        };
        if now == status {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_serves_every_replica_and_moves_its_heartbeats_when_one_dies() {
    const CLIENTS: usize = 4;
    const PER_CLIENT: usize = 30;
    let pg = PgServer::start();
    let (a_dir, b_dir, scratch) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let config = scratch.path().join("infergate.toml");
    std::fs::write(
        &config,
        format!("[cluster]\nheartbeat_ms = {HEARTBEAT_MS}\n"),
    )
    .unwrap();
    register_with_env(
        a_dir.path(),
        "minilm",
        &model("minilm.onnx"),
        &[("INFERGATE_STORE", &pg.url())],
    );
    let a = replica(a_dir.path(), &pg, &config);
    // The first replica made the admin key; B reads the same one from the store.
    std::fs::copy(
        a_dir.path().join("admin.key"),
        b_dir.path().join("admin.key"),
    )
    .unwrap();
    let b = replica(b_dir.path(), &pg, &config);

    // A join secret made on B admits the worker through A: one cluster CA, from the store.
    let secret = created(&b, "/api/workers/tokens", json!({})).await["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let key = created(&a, "/api/keys", json!({"name": "c", "scopes": ["infer"]})).await["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let worker = Worker::start(
        &format!("{},{}", a.addr, b.addr),
        &secret,
        &scratch.path().join("worker"),
    );

    // B never heard from the worker, yet lists it ready (a recent heartbeat, through A) ...
    let listed = until(&b, Duration::from_secs(10), "the worker ready on B", |l| {
        l.len() == 1 && state_of(l, l[0]["id"].as_str().unwrap()) == Some("ready")
    })
    .await;
    let id = listed[0]["id"].as_str().unwrap().to_owned();
    let seen = listed[0]["last_seen_ms"].as_u64().unwrap();
    assert!(seen < 3 * HEARTBEAT_MS, "last seen {seen} ms ago");
    // ... and routes to it: neither replica has an engine of its own. The worker fetches the
    // model on the first request and answers B and A alike.
    let via_b = infer(&b, &key)
        .await
        .expect("B answered through the worker");
    let via_a = infer(&a, &key)
        .await
        .expect("A answered through the worker");
    assert!(close(&via_a, &via_b));

    // A killed under a bounded load through B (by the first client, a quarter of the way
    // through, while the others' requests are in flight): B answers every request.
    let target = Arc::new((
        b.client.clone(),
        b.url("/v2/models/minilm/infer"),
        key.clone(),
    ));
    let doomed = Arc::new(Mutex::new(Some(a)));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (target, doomed) = (target.clone(), doomed.clone());
            tokio::spawn(async move {
                let mut failed = Vec::new();
                for i in 0..PER_CLIENT {
                    if c == 0 && i == PER_CLIENT / 4 {
                        let a = doomed.lock().unwrap().take();
                        a.map(Server::stop);
                    }
                    if let Err(e) = infer_at(&target.0, &target.1, &target.2).await {
                        failed.push(e);
                    }
                }
                failed
            })
        })
        .collect();
    let mut failed = Vec::new();
    for client in clients {
        failed.extend(client.await.unwrap());
    }
    assert!(
        failed.is_empty(),
        "B failed {} of {} requests: {failed:?}",
        failed.len(),
        CLIENTS * PER_CLIENT
    );
    let moved = worker.wait_for_log("talking to the next one", Duration::from_secs(10));
    assert!(
        moved.is_some(),
        "the worker never moved its heartbeats to B"
    );
    // Well past the three intervals after which a worker that stopped reporting is lost: B
    // still routes to it, because its heartbeats now reach B.
    tokio::time::sleep(Duration::from_millis(5 * HEARTBEAT_MS)).await;
    for _ in 0..CLIENTS * 5 {
        infer(&b, &key)
            .await
            .expect("B answered after A died, through the worker");
    }
    let on_b = until(&b, Duration::from_secs(5), "the worker ready on B", |l| {
        state_of(l, &id) == Some("ready")
    })
    .await;
    eprintln!(
        "replica A killed (SIGKILL) under {} requests through B: B answered all; the worker reports to B (last seen {} ms ago)",
        CLIENTS * PER_CLIENT,
        on_b[0]["last_seen_ms"]
    );

    // A started again knows the worker from the store (it heartbeats to B only) and routes to
    // it. Then the worker is removed on B: B stops at once, A within one refresh.
    let a = replica(a_dir.path(), &pg, &config);
    assert!(
        until_infer_status(&a, &key, 200).await.is_some(),
        "the restarted replica A never routed to the worker"
    );
    let ca_cert = b.data.join("tls/cert.pem").display().to_string();
    workers_cli(&[
        "remove",
        "--url",
        &b.addr,
        "--api-key",
        &b.admin_key,
        "--ca-cert",
        &ca_cert,
        &id,
    ]);
    let refused = infer(&b, &key)
        .await
        .expect_err("B routes to a removed worker");
    assert_eq!(refused.0, 503, "{refused:?}");
    let took = until_infer_status(&a, &key, 503)
        .await
        .expect("A still routes to a worker removed on B after 10 s");
    eprintln!(
        "removal on B stopped routing on A after {:.1} ms (refresh every {HEARTBEAT_MS} ms)",
        took.as_secs_f64() * 1e3
    );
    assert!(
        worker
            .wait_for_log("refused this worker", Duration::from_secs(10))
            .is_some(),
        "the removed worker was not refused"
    );
}
