//! Gateway replicas on one PostgreSQL store (`--store postgres://...`; a real server started
//! here, `crate::test_postgres`). Most tests give the replicas one data directory, as they
//! would share a volume; the last gives each its own, and the files travel through
//! PostgreSQL. Keys, models and the rest live in PostgreSQL.

use crate::blobs::plugin_file;
use crate::harness::{model, register_with_env, Options, Server};
use crate::test_postgres::PgServer;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Registers a model in the PostgreSQL store through the offline CLI (`INFERGATE_STORE`).
fn register(data: &Path, pg: &PgServer, name: &str, file: &str) {
    register_with_env(data, name, &model(file), &[("INFERGATE_STORE", &pg.url())]);
}

fn replica(data: &Path, pg: &PgServer, resync_s: u64) -> Server {
    replica_with(
        data,
        pg,
        vec!["--store-resync-s".into(), resync_s.to_string()],
    )
}

/// A replica on `pg` with its files in `data` and more `serve` flags.
pub(crate) fn replica_with(data: &Path, pg: &PgServer, mut extra_args: Vec<String>) -> Server {
    extra_args.splice(0..0, ["--store".into(), pg.url()]);
    Server::start_in(
        data,
        Options {
            extra_args,
            ..Options::default()
        },
    )
}

pub(crate) fn cls_body() -> Value {
    json!({"inputs": [{"name": "x", "shape": [1, 3, 48, 192], "datatype": "FP32",
                       "data": vec![0.0f32; 3 * 48 * 192]}]})
}

/// Asks `s`'s admin API for a new `infer` key.
async fn create_key(s: &Server, name: &str) -> reqwest::Response {
    s.post_json(
        "/api/keys",
        &s.admin_key,
        &json!({"name": name, "scopes": ["infer"]}),
    )
    .await
}

async fn status_with(s: &Server, key: &str) -> u16 {
    s.post_json("/v2/models/cls/infer", key, &cls_body())
        .await
        .status()
        .as_u16()
}

/// Polls `s`'s `/api/whoami` (cheap) with `key` until it answers `status` (see [`until`]).
pub async fn until_status(s: &Server, key: &str, status: u16) -> Option<Duration> {
    until(
        || async {
            match s
                .client
                .get(s.url("/api/whoami"))
                .bearer_auth(key)
                .send()
                .await
            {
                Ok(r) => r.status().as_u16(),
                Err(_) => 0,
            }
        },
        status,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_created_on_one_replica_works_on_the_other_until_revoked_there() {
    let pg = PgServer::start();
    let tmp = tempfile::tempdir().unwrap();
    register(tmp.path(), &pg, "cls", "ocr-cls.onnx");
    // A long resync: only a notification can carry the revocation quickly.
    let a = replica(tmp.path(), &pg, 60);
    let b = replica(tmp.path(), &pg, 60);

    let created: Value = create_key(&a, "shared").await.json().await.unwrap();
    let secret = created["secret"].as_str().unwrap().to_string();
    let id = created["id"].as_i64().unwrap();
    assert!(
        until_status(&b, &secret, 200).await.is_some(),
        "B never accepted a key created on A"
    );
    assert_eq!(
        status_with(&b, &secret).await,
        200,
        "B runs A's key's inference"
    );
    let revoked = a
        .client
        .delete(a.url(&format!("/api/keys/{id}")))
        .bearer_auth(&a.admin_key)
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), 200);
    assert_eq!(status_with(&a, &secret).await, 401, "A refuses at once");
    let took = until_status(&b, &secret, 401).await;
    assert!(
        took.is_some(),
        "B still accepts a key revoked on A after 10 s"
    );
    eprintln!(
        "revocation on A reached replica B in {:.1} ms (measured from A's answer to the DELETE)",
        took.unwrap().as_secs_f64() * 1e3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_postgres_down_cached_keys_infer_and_writes_get_503_until_it_is_back() {
    let mut pg = PgServer::start();
    let tmp = tempfile::tempdir().unwrap();
    register(tmp.path(), &pg, "cls", "ocr-cls.onnx");
    let a = replica(tmp.path(), &pg, 1);
    let created: Value = create_key(&a, "cached").await.json().await.unwrap();
    let secret = created["secret"].as_str().unwrap().to_string();
    assert_eq!(status_with(&a, &secret).await, 200);

    pg.stop();
    for _ in 0..3 {
        assert_eq!(
            status_with(&a, &secret).await,
            200,
            "inference goes on with a cached key"
        );
    }
    let write = create_key(&a, "during").await;
    assert_eq!(write.status(), 503);
    let body: Value = write.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("unavailable"),
        "{body}"
    );

    pg.resume();
    let start = Instant::now();
    let mut recovered = None;
    while start.elapsed() < Duration::from_secs(15) {
        let r = create_key(&a, "after").await;
        if r.status() == 200 || r.status() == 201 {
            recovered = Some(r.json::<Value>().await.unwrap());
            break;
        }
        assert_eq!(r.status(), 503, "only 'unavailable' while it comes back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = recovered.expect("writes did not recover within 15 s of PostgreSQL's return");
    let after = after["secret"].as_str().unwrap().to_string();
    assert_eq!(status_with(&a, &after).await, 200);
    assert_eq!(status_with(&a, &secret).await, 200);
}

/// Polls `s` with `request` every 2 ms for at most 10 s until it answers `status`; returns how
/// long that took (the poll's period is the measurement's resolution).
async fn until<F, Fut>(mut request: F, status: u16) -> Option<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = u16>,
{
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if request().await == status {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    None
}

async fn infer_status(s: &Server, model: &str) -> u16 {
    s.post_json(
        &format!("/v2/models/{model}/infer"),
        &s.admin_key,
        &cls_body(),
    )
    .await
    .status()
    .as_u16()
}

/// Uploads `file` from `$INFERGATE_MODELS` as a new version of `name` through `s` (as its
/// admin), expecting 201; returns how long the answer took.
async fn upload_model(s: &Server, name: &str, file: &str) -> Duration {
    let bytes = std::fs::read(model(file)).unwrap();
    let started = Instant::now();
    let r = s
        .client
        .post(s.url(&format!("/api/models/{name}/versions")))
        .bearer_auth(&s.admin_key)
        .body(bytes)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    started.elapsed()
}

/// Uploads the `passthrough` plugin through `s`, expecting 201.
async fn upload_passthrough(s: &Server) {
    let r = s
        .client
        .post(s.url("/api/plugins"))
        .bearer_auth(&s.admin_key)
        .body(std::fs::read(plugin_file("passthrough")).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
}

/// Puts the pipeline `orient` (the passthrough plugin, then `cls`) through `s`: the status.
async fn put_orient(s: &Server) -> u16 {
    s.client
        .put(s.url("/api/pipelines/orient"))
        .bearer_auth(&s.admin_key)
        .json(&json!({"model": "cls", "pre": ["passthrough"]}))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// How many outputs `s` answers for the classifier (1, or more with a post-op configured).
async fn cls_outputs(s: &Server) -> usize {
    let r = s
        .post_json("/v2/models/cls/infer", &s.admin_key, &cls_body())
        .await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    v["outputs"].as_array().map_or(0, Vec::len)
}

fn ms(d: Option<Duration>, what: &str) -> f64 {
    d.unwrap_or_else(|| panic!("{what} did not happen within 10 s"))
        .as_secs_f64()
        * 1e3
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_and_pipelines_changed_on_one_replica_are_served_by_the_other() {
    let pg = PgServer::start();
    let tmp = tempfile::tempdir().unwrap();
    // A long resync: only the notifications can carry the changes quickly.
    let a = replica(tmp.path(), &pg, 60);
    let b = replica(tmp.path(), &pg, 60);
    assert_eq!(infer_status(&b, "cls").await, 404, "nothing uploaded yet");

    upload_model(&a, "cls", "ocr-cls.onnx").await;
    let uploaded = ms(
        until(|| infer_status(&b, "cls"), 200).await,
        "B serving a model uploaded on A",
    );
    assert_eq!(cls_outputs(&b).await, 1);

    // Reconfigured on A (a post-op adds outputs): B's engine runs the new config.
    let outputs: Value = a
        .post_json("/v2/models/cls/infer", &a.admin_key, &cls_body())
        .await
        .json()
        .await
        .unwrap();
    let output = outputs["outputs"][0]["name"].as_str().unwrap();
    let post_op =
        json!({"infergate": {"postprocess": {"op": "softmax_topk", "output": output, "k": 1}}});
    let put = a
        .client
        .put(a.url("/api/models/cls/versions/1/config"))
        .bearer_auth(&a.admin_key)
        .body(post_op.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 200);
    let start = Instant::now();
    while cls_outputs(&b).await == 1 && start.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let reconfigured = start.elapsed().as_secs_f64() * 1e3;
    assert!(cls_outputs(&b).await > 1, "B never applied A's new config");

    // A plugin uploaded on A is known to B: a pipeline put on B may name it, and runs on A.
    upload_passthrough(&a).await;
    let plugin_known = ms(
        until(|| put_orient(&b), 201).await,
        "B accepting a pipeline that names a plugin uploaded on A",
    );
    let pipeline = ms(
        until(|| infer_status(&a, "orient"), 200).await,
        "A running a pipeline put on B",
    );

    // Deleted on A: B answers 404 for both.
    let delete = |path: &str| {
        a.client
            .delete(a.url(path))
            .bearer_auth(&a.admin_key)
            .send()
    };
    assert_eq!(delete("/api/pipelines/orient").await.unwrap().status(), 200);
    let pipeline_gone = ms(
        until(|| infer_status(&b, "orient"), 404).await,
        "B refusing a pipeline deleted on A",
    );
    assert_eq!(delete("/api/models/cls").await.unwrap().status(), 200);
    let model_gone = ms(
        until(|| infer_status(&b, "cls"), 404).await,
        "B refusing a model deleted on A",
    );
    eprintln!(
        "followed by the other replica (ms after the writer's answer): model upload {uploaded:.1}, \
         config {reconfigured:.1}, plugin upload {plugin_known:.1}, pipeline put {pipeline:.1}, pipeline delete {pipeline_gone:.1}, \
         model delete {model_gone:.1}"
    );
}

/// What clients see when one replica dies (SIGKILL) under load split across both: requests to
/// the dead one fail (printed, not bounded: how many depends on timing), and the survivor
/// answers every request sent to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_one_replica_under_load_leaves_the_other_answering_every_request() {
    const CLIENTS: usize = 8;
    const PER_CLIENT: usize = 30;
    let pg = PgServer::start();
    let tmp = tempfile::tempdir().unwrap();
    register(tmp.path(), &pg, "cls", "ocr-cls.onnx");
    let a = replica(tmp.path(), &pg, 5);
    let b = replica(tmp.path(), &pg, 5);
    assert_eq!(infer_status(&a, "cls").await, 200);
    assert_eq!(infer_status(&b, "cls").await, 200);

    let targets = Arc::new([
        (a.client.clone(), a.url("/v2/models/cls/infer")),
        (b.client.clone(), b.url("/v2/models/cls/infer")),
    ]);
    let key = Arc::new(a.admin_key.clone());
    let sent = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (targets, key, sent) = (targets.clone(), key.clone(), sent.clone());
            tokio::spawn(async move {
                // Per replica: answered 200, answered otherwise, no answer.
                let mut seen = [[0usize; 3]; 2];
                for i in 0..PER_CLIENT {
                    let replica = (c + i) % 2;
                    let (client, url) = &targets[replica];
                    let outcome = client
                        .post(url)
                        .bearer_auth(key.as_str())
                        .json(&cls_body())
                        .timeout(Duration::from_secs(10))
                        .send()
                        .await;
                    let slot = match outcome {
                        Ok(r) if r.status() == 200 => 0,
                        Ok(_) => 1,
                        Err(_) => 2,
                    };
                    seen[replica][slot] += 1;
                    sent.fetch_add(1, Ordering::Relaxed);
                }
                seen
            })
        })
        .collect();
    // A quarter of the load done: replica A dies.
    let start = Instant::now();
    while sent.load(Ordering::Relaxed) < CLIENTS * PER_CLIENT / 4
        && start.elapsed() < Duration::from_secs(60)
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let before_kill = sent.load(Ordering::Relaxed);
    a.stop();
    let mut total = [[0usize; 3]; 2];
    for client in clients {
        let seen = client.await.unwrap();
        for (replica, counts) in seen.iter().enumerate() {
            for (slot, n) in counts.iter().enumerate() {
                total[replica][slot] += n;
            }
        }
    }
    eprintln!(
        "replica A killed (SIGKILL) after {before_kill} of {} requests; clients saw: \
         A {} ok, {} error answers, {} without answer; B {} ok, {} error answers, {} without answer",
        CLIENTS * PER_CLIENT,
        total[0][0],
        total[0][1],
        total[0][2],
        total[1][0],
        total[1][1],
        total[1][2]
    );
    assert_eq!(
        total[1][0],
        CLIENTS * PER_CLIENT / 2,
        "the surviving replica failed requests"
    );
    assert!(total[0][0] > 0, "A answered nothing before it was killed");
}

/// The hex SHA-256 of `bytes`: the name a stored file has in every data directory.
fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// Replicas without a shared volume: each has a data directory of its own (B gets only the
/// admin key's file, as an operator would hand it out) and model and plugin files travel
/// through PostgreSQL. B serves a model uploaded on A, replaces a damaged copy of it instead of
/// loading it, and A runs a plugin uploaded on B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_with_their_own_data_directories_share_files_through_postgres() {
    let pg = PgServer::start();
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = replica(da.path(), &pg, 60);
    std::fs::copy(da.path().join("admin.key"), db.path().join("admin.key")).unwrap();
    let b = replica(db.path(), &pg, 60);

    let model_bytes = std::fs::read(model("ocr-cls.onnx")).unwrap();
    let uploaded = upload_model(&a, "cls", "ocr-cls.onnx").await.as_secs_f64() * 1e3;
    let served = ms(
        until(|| infer_status(&b, "cls"), 200).await,
        "B serving a model uploaded on A",
    );
    let b_copy = db
        .path()
        .join("models")
        .join(format!("{}.onnx", sha256(&model_bytes)));
    assert!(
        std::fs::read(&b_copy).unwrap() == model_bytes,
        "B's copy differs from the upload"
    );

    // B's copy damaged while unloaded: the next load finds it out and fetches it again.
    let unload = b
        .client
        .post(b.url("/v2/repository/models/cls/unload"))
        .bearer_auth(&b.admin_key)
        .send()
        .await
        .unwrap();
    assert_eq!(unload.status(), 200);
    let mut damaged = model_bytes.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0xff;
    std::fs::write(&b_copy, &damaged).unwrap();
    assert_eq!(infer_status(&b, "cls").await, 200);
    assert!(
        b.wait_for_log("damaged", Duration::from_secs(10)).is_some(),
        "B loaded a damaged file without a word"
    );
    assert!(
        std::fs::read(&b_copy).unwrap() == model_bytes,
        "B's damaged copy was not replaced"
    );

    // A plugin uploaded on B runs in A's pipeline.
    let plugin_bytes = std::fs::read(plugin_file("passthrough")).unwrap();
    upload_passthrough(&b).await;
    ms(
        until(|| put_orient(&a), 201).await,
        "A accepting a pipeline that names a plugin uploaded on B",
    );
    assert_eq!(infer_status(&a, "orient").await, 200);
    let a_copy = da
        .path()
        .join("plugins")
        .join(format!("{}.wasm", sha256(&plugin_bytes)));
    assert!(std::fs::read(&a_copy).unwrap() == plugin_bytes);

    // Deleted on one replica: the other's copies leave its data directory too.
    let delete = |s: &Server, path: &str| {
        s.client
            .delete(s.url(path))
            .bearer_auth(&s.admin_key)
            .send()
    };
    assert_eq!(
        delete(&a, "/api/pipelines/orient").await.unwrap().status(),
        200
    );
    assert_eq!(
        delete(&b, "/api/plugins/passthrough")
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(delete(&a, "/api/models/cls").await.unwrap().status(), 200);
    let gone = |path: &Path| {
        let path = path.to_path_buf();
        async move {
            if path.exists() {
                1
            } else {
                0
            }
        }
    };
    ms(
        until(|| gone(&a_copy), 0).await,
        "A dropping its copy of B's deleted plugin",
    );
    ms(
        until(|| gone(&b_copy), 0).await,
        "B dropping its copy of A's deleted model",
    );
    eprintln!(
        "ocr-cls.onnx ({} bytes) uploaded on A in {uploaded:.1} ms (validated, stored in \
         PostgreSQL); served by B {served:.1} ms after A's answer (fetched and loaded)",
        model_bytes.len()
    );
}

/// An infergate process started by hand, killed when dropped.
struct Process(std::process::Child);

impl Process {
    /// Starts `infergate ARGS` and reads its log until a line contains `ready`; returns the
    /// process and the lines read.
    fn start(args: &[&str], data: &Path, ready: &str) -> (Process, Vec<String>) {
        use std::io::BufRead;
        let mut child = std::process::Command::new(crate::harness::BIN)
            .args(args)
            .arg("--data-dir")
            .arg(data)
            .env("INFERGATE_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start infergate");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                // Keeps draining after the line sought, so the process never blocks on its log.
                let _ = tx.send(line);
            }
        });
        let process = Process(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut lines = Vec::new();
        loop {
            let left = deadline
                .checked_duration_since(Instant::now())
                .unwrap_or_else(|| panic!("no '{ready}' logged within 60 s: {lines:#?}"));
            match rx.recv_timeout(left) {
                Ok(line) => {
                    let done = line.contains(ready);
                    lines.push(line);
                    if done {
                        return (process, lines);
                    }
                }
                Err(e) => panic!("infergate {args:?} did not start ({e}): {lines:#?}"),
            }
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Two replicas started together on an empty database: exactly one creates and prints the
/// first admin key, the other says that one exists.
#[test]
fn replicas_starting_together_create_one_admin_key() {
    let pg = PgServer::start();
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let url = pg.url();
    let args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--no-grpc",
        "--store",
        url.as_str(),
    ];
    let started: Vec<_> = std::thread::scope(|s| {
        let racers: Vec<_> = dirs
            .iter()
            .map(|d| s.spawn(|| Process::start(&args, d.path(), "listening on")))
            .collect();
        racers.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let with_key = dirs
        .iter()
        .filter(|d| d.path().join("admin.key").is_file())
        .count();
    assert_eq!(with_key, 1, "exactly one replica writes an admin key");
    let told = started
        .iter()
        .filter(|(_, log)| {
            log.iter()
                .any(|l| l.contains("an admin key already exists"))
        })
        .count();
    assert_eq!(told, 1, "the other replica says one exists");
}

/// A worker fetches model files by sha256 from its manager; a manager replica that never
/// received the upload (its own data directory, no local engine) gets the file from
/// PostgreSQL for it. Also measures, for README, the upload of a 10 MB model on A and its first
/// fetch by another replica (`ocr-rec.onnx`, 11 chunks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_of_a_replica_that_never_received_the_upload_gets_the_file() {
    let pg = PgServer::start();
    let (da, db, dw) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let a = replica(da.path(), &pg, 60);
    std::fs::copy(da.path().join("admin.key"), db.path().join("admin.key")).unwrap();
    let b = Server::start_in(
        db.path(),
        Options {
            extra_args: vec![
                "--store".into(),
                pg.url(),
                "--store-resync-s".into(),
                "60".into(),
                "--no-local-engine".into(),
            ],
            ..Options::default()
        },
    );
    let token: Value = b
        .post_json("/api/workers/tokens", &b.admin_key, &json!({}))
        .await
        .json()
        .await
        .unwrap();
    let join = ["worker", "--join", &b.addr, "--join-token"];
    let token = token["token"].as_str().unwrap();
    let worker_args = [
        &join[..],
        &[
            token,
            "--listen",
            "127.0.0.1:0",
            "--instances",
            "1",
            "--intra-threads",
            "1",
        ],
    ]
    .concat();
    let _worker = Process::start(&worker_args, dw.path(), "worker listening on");

    upload_model(&a, "cls", "ocr-cls.onnx").await;
    ms(
        until(|| infer_status(&b, "cls"), 200).await,
        "B's worker serving a model uploaded on A",
    );
    let models = std::fs::read_dir(dw.path().join("models")).unwrap().count();
    assert_eq!(models, 1, "the worker holds the model file");

    // The measurement: B fetches a new version in the background when A's notification
    // arrives, and logs how long the download took.
    let rec = std::fs::read(model("ocr-rec.onnx")).unwrap();
    let (bytes, sha) = (rec.len(), sha256(&rec));
    let uploaded = upload_model(&a, "rec", "ocr-rec.onnx").await;
    let fetched = loop {
        let line = b
            .wait_for_log(&sha, Duration::from_secs(30))
            .expect("B never fetched the model uploaded on A");
        if line.contains("fetched a stored file from PostgreSQL") {
            break line;
        }
    };
    // `secs=0.123` in the log line, between colour codes (ESC [ ... m).
    let mut parts = fetched.split('\x1b');
    let first = parts.next();
    let plain: String = first
        .into_iter()
        .chain(parts.map(|p| p.split_once('m').map_or(p, |(_, rest)| rest)))
        .collect();
    let secs: f64 = plain
        .split("secs=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no secs in {plain}"));
    // The baseline, in the same run: the same upload to a gateway on SQLite (no shared copy).
    let sqlite = Server::with_models(&[]);
    let alone = upload_model(&sqlite, "rec", "ocr-rec.onnx").await;
    eprintln!(
        "ocr-rec.onnx ({bytes} bytes): upload on A answered in {:.1} ms (ORT validation, local \
         file and PostgreSQL chunks; the same upload on SQLite {:.1} ms); B's first fetch from \
         PostgreSQL took {:.1} ms",
        uploaded.as_secs_f64() * 1e3,
        alone.as_secs_f64() * 1e3,
        secs * 1e3
    );
}
