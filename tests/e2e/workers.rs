//! Workers on other hosts: a manager and worker processes on 127.0.0.1, joined with a
//! join secret, mutual TLS between them, requests routed to workers, kill -9 under load, lost
//! workers, removal, draining on SIGTERM.

use crate::harness::{Options, Server, BIN};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// An infergate process (a worker, or a manager started by hand), killed when dropped.
pub(crate) struct Worker {
    child: Child,
    logs: mpsc::Receiver<String>,
}

impl Worker {
    /// Starts `infergate worker` joined to `manager` and waits until it serves.
    pub(crate) fn start(manager: &str, token: &str, data: &Path) -> Worker {
        let mut command = Command::new(BIN);
        command
            .args(["worker", "--join", manager, "--join-token", token])
            .args(["--listen", "127.0.0.1:0", "--instances", "1"])
            .args(["--intra-threads", "1", "--data-dir"])
            .arg(data);
        Worker::spawn(command, "worker listening on")
    }

    /// Runs `command` (an infergate process), reading its log, until it logs `ready`.
    fn spawn(mut command: Command, ready: &str) -> Worker {
        let mut child = command
            .env("INFERGATE_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start infergate");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, logs) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut process = Worker { child, logs };
        // A worker that exits or stalls on its way up is reported with what it logged last and
        // how it ended, not as a bare timeout.
        if let Err(last) = process.log_line(ready, Duration::from_secs(60), 30) {
            // Its log closed when it exited: give the exit a moment to be collected.
            let ended = process.wait(Duration::from_secs(2));
            panic!(
                "no '{ready}' logged within 60 s (process {}); its last lines:\n{}",
                ended.map_or("still running".to_string(), |s| format!("exited: {s}")),
                last.join("\n")
            );
        }
        process
    }

    pub(crate) fn wait_for_log(&self, needle: &str, timeout: Duration) -> Option<String> {
        self.log_line(needle, timeout, 0).ok()
    }

    /// The first log line containing `needle` within `timeout`; without one, the last `keep`
    /// lines read (the log ended or the time ran out).
    fn log_line(
        &self,
        needle: &str,
        timeout: Duration,
        keep: usize,
    ) -> Result<String, Vec<String>> {
        let deadline = Instant::now() + timeout;
        let mut last = std::collections::VecDeque::with_capacity(keep);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.logs.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return Ok(line),
                Ok(line) if keep > 0 => {
                    if last.len() == keep {
                        last.pop_front();
                    }
                    last.push_back(line);
                }
                Ok(_) => {}
                Err(_) => return Err(last.into()),
            }
        }
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn terminate(&mut self) -> ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.wait(Duration::from_secs(30))
            .expect("worker exits after SIGTERM")
    }

    fn wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A manager that runs nothing itself (`--no-local-engine`) with these models registered.
pub(crate) fn manager(models: &[(&str, &str)], extra: &[String]) -> (tempfile::TempDir, Server) {
    let data = tempfile::tempdir().unwrap();
    for (name, file) in models {
        crate::harness::register(data.path(), name, &crate::harness::model(file));
    }
    let mut extra_args = vec!["--no-local-engine".to_owned()];
    extra_args.extend_from_slice(extra);
    let s = Server::start_in(
        data.path(),
        Options {
            extra_args,
            ..Options::default()
        },
    );
    (data, s)
}

/// A manager with minilm and `[cluster]` settings, and two workers joined and ready. Bind
/// every field: the directories and processes live as long as their binding.
struct Two {
    s: Server,
    key: String,
    dirs: tempfile::TempDir,
    a: Worker,
    b: Worker,
    _data: tempfile::TempDir,
    _config: tempfile::TempDir,
}

async fn two_workers(cluster: &str) -> Two {
    let config_dir = tempfile::tempdir().unwrap();
    let config = config_dir.path().join("infergate.toml");
    std::fs::write(&config, format!("[cluster]\n{cluster}\n")).unwrap();
    let (data, s) = manager(
        &[("minilm", "minilm.onnx")],
        &["--config".into(), config.display().to_string()],
    );
    let key = s.key("infer");
    let secret = token(data.path());
    let dirs = tempfile::tempdir().unwrap();
    let a = Worker::start(&s.addr, &secret, &dirs.path().join("a"));
    let b = Worker::start(&s.addr, &secret, &dirs.path().join("b"));
    until(&s, Duration::from_secs(10), "two ready workers", |l| {
        l.len() == 2
    })
    .await;
    Two {
        s,
        key,
        dirs,
        a,
        b,
        _data: data,
        _config: config_dir,
    }
}

/// Runs `infergate workers ARGS`, expecting success; its stdout.
pub(crate) fn workers_cli(args: &[&str]) -> String {
    let out = Command::new(BIN)
        .arg("workers")
        .args(args)
        .output()
        .expect("infergate workers");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

pub(crate) fn token(data: &Path) -> String {
    workers_cli(&["token", "create", "--data-dir", &data.display().to_string()])
}

async fn workers(s: &Server) -> Vec<Value> {
    let v = s.get_json("/api/workers", &s.admin_key).await;
    v["workers"].as_array().cloned().unwrap_or_default()
}

/// `DELETE /api/workers/{id}` as the admin: the answer's status.
async fn remove(s: &Server, id: &str) -> u16 {
    s.client
        .delete(s.url(&format!("/api/workers/{id}")))
        .bearer_auth(&s.admin_key)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Polls `/api/workers` until `done` holds (at most `timeout`).
pub(crate) async fn until(
    s: &Server,
    timeout: Duration,
    what: &str,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let deadline = Instant::now() + timeout;
    loop {
        let list = workers(s).await;
        if done(&list) {
            return list;
        }
        assert!(
            Instant::now() < deadline,
            "{what} within {timeout:?}; workers: {list:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The id of the worker that reports the model loaded (waiting for its heartbeat).
async fn holding_the_model(s: &Server) -> String {
    let holds = |w: &Value| !w["report"]["models"].as_array().unwrap().is_empty();
    let list = until(
        s,
        Duration::from_secs(10),
        "the model reported loaded",
        |l| l.iter().any(holds),
    )
    .await;
    list.into_iter().find(holds).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Polls until worker `id` is in `state` (at most 20 s: a lost worker needs three heartbeats).
async fn until_state(s: &Server, id: &str, state: &str) -> Vec<Value> {
    let what = format!("worker {id} {state}");
    until(s, Duration::from_secs(20), &what, |l| {
        state_of(l, id) == Some(state)
    })
    .await
}

pub(crate) fn state_of<'a>(list: &'a [Value], id: &str) -> Option<&'a str> {
    list.iter()
        .find(|w| w["id"] == id)
        .and_then(|w| w["state"].as_str())
}

fn body() -> Value {
    json!({"inputs": [
        {"name": "input_ids", "shape": [1, 6], "datatype": "INT64", "data": [101, 1996, 4937, 7719, 1012, 102]},
        {"name": "attention_mask", "shape": [1, 6], "datatype": "INT64", "data": [1, 1, 1, 1, 1, 1]},
        {"name": "token_type_ids", "shape": [1, 6], "datatype": "INT64", "data": [0, 0, 0, 0, 0, 0]},
    ]})
}

async fn infer(s: &Server, key: &str) -> Result<Vec<f64>, (u16, String)> {
    infer_at(&s.client, &s.url("/v2/models/minilm/infer"), key).await
}

pub(crate) async fn infer_at(
    client: &reqwest::Client,
    url: &str,
    key: &str,
) -> Result<Vec<f64>, (u16, String)> {
    let resp = client
        .post(url)
        .bearer_auth(key)
        .json(&body())
        .send()
        .await
        .map_err(|e| (0, e.to_string()))?;
    let status = resp.status().as_u16();
    let retry_after = resp.headers().get("retry-after").is_some();
    let v: Value = resp.json().await.map_err(|e| (status, e.to_string()))?;
    if status != 200 {
        let message = v["error"].as_str().unwrap_or_default().to_owned();
        return Err((status, format!("{message} (retry-after: {retry_after})")));
    }
    Ok(v["outputs"][0]["data"]
        .as_array()
        .expect("output data")
        .iter()
        .map(|x| x.as_f64().unwrap_or(f64::NAN))
        .collect())
}

/// The manager relays a KServe body and its answer undecoded: the worker's answer carries the
/// client's request id and the encoding the client asked for, and the worker's refusal of a
/// malformed request reaches the client as a 400 with its reason.
async fn relayed_as_the_client_asked(s: &Server, key: &str) {
    let url = s.url("/v2/models/minilm/infer");
    let post = |body: Value| s.client.post(&url).bearer_auth(key).json(&body).send();
    let mut asked = body();
    asked["id"] = json!("request-7");
    asked["parameters"] = json!({"binary_data_output": true});
    let resp = post(asked).await.unwrap();
    assert_eq!(resp.status(), 200);
    let header_len: usize = resp.headers()["inference-header-content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let bytes = resp.bytes().await.unwrap();
    let header: Value = serde_json::from_slice(&bytes[..header_len]).unwrap();
    assert_eq!(header["id"], "request-7", "{header}");
    assert_eq!(header["model_name"], "minilm", "{header}");
    assert_eq!(bytes.len() - header_len, 6 * 384 * 4, "{header}");

    let mut malformed = body();
    malformed["inputs"][0]["shape"] = json!([1, 7]);
    let resp = post(malformed).await.unwrap();
    assert_eq!(resp.status(), 400);
    let error: Value = resp.json().await.unwrap();
    assert!(
        error["error"]
            .as_str()
            .unwrap_or_default()
            .contains("input_ids"),
        "{error}"
    );
}

/// A direct-mode client for an assign answer: it trusts the cluster CA the answer carries.
/// minilm's three INT64 inputs for one four-token sentence, as a gRPC message.
fn grpc_request(model: &str) -> infergate_kserve::proto::ModelInferRequest {
    use infergate_kserve::proto::model_infer_request::InferInputTensor;
    let tensor = |values: [i64; 4]| values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let input = |name: &str| InferInputTensor {
        name: name.into(),
        datatype: "INT64".into(),
        shape: vec![1, 4],
        ..Default::default()
    };
    infergate_kserve::proto::ModelInferRequest {
        model_name: model.into(),
        inputs: vec![
            input("input_ids"),
            input("attention_mask"),
            input("token_type_ids"),
        ],
        raw_input_contents: vec![
            tensor([101, 7592, 2088, 102]),
            tensor([1; 4]),
            tensor([0; 4]),
        ],
        ..Default::default()
    }
}

fn direct_client(grant: &Value) -> reqwest::Client {
    let ca = grant["ca_pem"]
        .as_str()
        .expect("the cluster CA in the answer");
    reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
        .build()
        .unwrap()
}

pub(crate) fn close(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-3)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_join_serve_fail_over_and_leave() {
    let (data, s) = manager(&[("minilm", "minilm.onnx")], &[]);
    let key = s.key("infer");

    // No worker yet: 503 with Retry-After, naming the model.
    let (status, message) = infer(&s, &key).await.unwrap_err();
    assert_eq!(status, 503, "{message}");
    assert!(
        message.contains("'minilm'") && message.contains("retry-after: true"),
        "{message}"
    );

    // Bad join secrets are refused and record nothing.
    let secret = token(data.path());
    let forged = {
        let (head, _) = secret.rsplit_once('.').unwrap();
        let (id, _) = head.split_once('.').unwrap();
        format!(
            "{id}.{}.{}",
            "A".repeat(43),
            secret.rsplit_once('.').unwrap().1
        )
    };
    // A revoked join secret admits nobody.
    let revoked = token(data.path());
    let revoked_id = revoked
        .trim_start_matches("igj_")
        .split('.')
        .next()
        .unwrap();
    workers_cli(&[
        "token",
        "revoke",
        revoked_id,
        "--data-dir",
        &data.path().display().to_string(),
    ]);
    for bad in ["nonsense", forged.as_str(), revoked.as_str()] {
        let resp = s
            .client
            .post(s.url("/cluster/v1/join"))
            .bearer_auth(bad)
            .json(&json!({"advertise": "127.0.0.1:1", "version": "x"}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401, "{bad}");
    }
    let heartbeat = s
        .client
        .post(s.url("/cluster/v1/heartbeat"))
        .bearer_auth("igw_w-0000000000000000.nope")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(heartbeat.status(), 401);
    let oversized = s
        .client
        .post(s.url("/cluster/v1/join"))
        .bearer_auth(&secret)
        .body(vec![b' '; 100 << 10])
        .send()
        .await
        .unwrap();
    assert_eq!(oversized.status(), 413);
    assert!(workers(&s).await.is_empty());
    let bad_worker = Command::new(BIN)
        .args([
            "worker",
            "--join",
            &s.addr,
            "--join-token",
            &forged,
            "--listen",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(data.path().join("refused-worker"))
        .output()
        .unwrap();
    assert!(!bad_worker.status.success());
    assert!(
        String::from_utf8_lossy(&bad_worker.stderr).contains("refused"),
        "{}",
        String::from_utf8_lossy(&bad_worker.stderr)
    );

    // Two workers join and serve through the manager.
    let dirs = tempfile::tempdir().unwrap();
    let mut a = Worker::start(&s.addr, &secret, &dirs.path().join("a"));
    let mut b = Worker::start(&s.addr, &secret, &dirs.path().join("b"));
    let list = until(&s, Duration::from_secs(10), "two ready workers", |l| {
        l.len() == 2 && l.iter().all(|w| w["state"] == "ready")
    })
    .await;
    let id_a = std::fs::read_to_string(dirs.path().join("a/worker-id")).unwrap();
    let id_b = std::fs::read_to_string(dirs.path().join("b/worker-id")).unwrap();
    assert_ne!(id_a, id_b);
    assert!(
        list.iter()
            .all(|w| w["devices"]["cores"].as_u64().unwrap_or(0) >= 1),
        "{list:#?}"
    );
    let expected = infer(&s, &key)
        .await
        .expect("inference through the manager");
    assert_eq!(expected.len(), 6 * 384);
    relayed_as_the_client_asked(&s, &key).await;

    // The worker holding the model is killed under 8 concurrent connections: no request fails.
    let serving = holding_the_model(&s).await;
    let (victim, survivor_id) = if serving == id_a {
        (&mut a, &id_b)
    } else {
        (&mut b, &id_a)
    };
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (client, url) = (s.client.clone(), s.url("/v2/models/minilm/infer"));
        let (key, done, expected) = (key.clone(), done.clone(), expected.clone());
        tasks.push(tokio::spawn(async move {
            let mut failures = Vec::new();
            for _ in 0..25 {
                match infer_at(&client, &url, &key).await {
                    Ok(out) if close(&out, &expected) => {}
                    Ok(_) => failures.push("a different answer".to_owned()),
                    Err((status, m)) => failures.push(format!("{status}: {m}")),
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
            failures
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while done.load(Ordering::Relaxed) < 40 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    victim.kill9();
    let mut failures = Vec::new();
    for t in tasks {
        failures.extend(t.await.unwrap());
    }
    assert_eq!(done.load(Ordering::Relaxed), 200);
    assert!(
        failures.is_empty(),
        "{} failed: {failures:?}",
        failures.len()
    );
    let victim_id = serving.clone();
    let list = until_state(&s, &victim_id, "lost").await;
    assert_eq!(state_of(&list, survivor_id), Some("ready"));
    // The survivor took the traffic over: it fetched the model from the manager and loaded it.
    until(
        &s,
        Duration::from_secs(10),
        "the survivor reporting the model",
        |l| {
            l.iter().any(|w| {
                w["id"] == survivor_id.as_str()
                    && w["report"]["models"] == json!([{"name": "minilm", "version": 1}])
            })
        },
    )
    .await;

    // The failover shows in the metrics: retries, the lost worker down, the survivor up.
    use crate::websocket::metric;
    assert!(metric(&s, "infergate_worker_retries_total", &[]).await >= 1.0);
    // The 503 before any worker joined.
    assert!(metric(&s, "infergate_worker_unavailable_total", &[]).await >= 1.0);
    let up = "infergate_worker_up";
    assert_eq!(metric(&s, up, &[("worker", &victim_id)]).await, 0.0);
    assert_eq!(metric(&s, up, &[("worker", survivor_id)]).await, 1.0);

    // Restarted on its data directory, it rejoins under the same id.
    let victim_dir = dirs.path().join(if serving == id_a { "a" } else { "b" });
    let _back = Worker::start(&s.addr, &secret, &victim_dir);
    until_state(&s, &victim_id, "ready").await;

    // An operator drains the survivor (CLI on the running manager): no new requests go there.
    let cert = data.path().join("tls/cert.pem").display().to_string();
    let online = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend([
            "--url",
            &s.addr,
            "--api-key",
            &s.admin_key,
            "--ca-cert",
            &cert,
        ]);
        workers_cli(&all)
    };
    online(&["drain", survivor_id]);
    assert_eq!(state_of(&workers(&s).await, survivor_id), Some("draining"));
    let listed = online(&["list"]);
    assert!(
        listed.contains(survivor_id.as_str()) && listed.contains("draining"),
        "{listed}"
    );

    // An operator removes the survivor: out at once, and its rejoin is refused (it stops).
    assert_eq!(remove(&s, survivor_id).await, 200);
    assert_eq!(state_of(&workers(&s).await, survivor_id), None);
    let survivor = if serving == id_a { &mut b } else { &mut a };
    let status = survivor
        .wait(Duration::from_secs(20))
        .expect("a removed worker stops");
    assert!(!status.success());

    // SIGTERM on the other: it drains, deregisters and exits cleanly; then nobody serves.
    let mut back = _back;
    assert!(back.terminate().success());
    until(&s, Duration::from_secs(10), "no worker left", |l| {
        l.is_empty()
    })
    .await;
    let (status, message) = infer(&s, &key).await.unwrap_err();
    assert_eq!(status, 503, "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_tokens_are_checked_on_the_worker_and_tampered_model_files_refused() {
    let (data, s) = manager(&[("minilm", "minilm.onnx"), ("cls", "ocr-cls.onnx")], &[]);
    let key = s.key("infer");
    let dirs = tempfile::tempdir().unwrap();
    let _worker = Worker::start(&s.addr, &token(data.path()), &dirs.path().join("w"));
    until(&s, Duration::from_secs(10), "the worker ready", |l| {
        l.len() == 1
    })
    .await;

    let assign = |key: String, ttl: u64| {
        let request = s
            .client
            .post(s.url("/v2/models/minilm/assign"))
            .bearer_auth(key)
            .json(&json!({ "ttl_s": ttl }));
        async move {
            let grant: Value = request.send().await.unwrap().json().await.unwrap();
            grant
        }
    };
    let grant = assign(key.clone(), 300).await;
    let worker_url = grant["worker"]
        .as_str()
        .expect("a worker address")
        .to_owned();
    let direct = direct_client(&grant);
    let call = |model: &str, token: Option<&str>| {
        let mut request = direct
            .post(format!("{worker_url}/v2/models/{model}/infer"))
            .json(&body());
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send()
    };
    let token = grant["token"].as_str().unwrap();
    let answer = call("minilm", Some(token)).await.unwrap();
    assert_eq!(answer.status(), 200);
    let answer: Value = answer.json().await.unwrap();
    assert_eq!(answer["outputs"][0]["shape"], json!([1, 6, 384]));
    // A token for minilm does not run cls; no token, a forged one or an expired one: 401.
    assert_eq!(call("cls", Some(token)).await.unwrap().status(), 403);
    assert_eq!(call("minilm", None).await.unwrap().status(), 401);
    let forged = format!("{}x", &token[..token.len() - 1]);
    assert_eq!(call("minilm", Some(&forged)).await.unwrap().status(), 401);
    let short = assign(key.clone(), 1).await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let expired = call("minilm", short["token"].as_str()).await.unwrap();
    assert_eq!(expired.status(), 401);
    let message: Value = expired.json().await.unwrap();
    assert!(
        message["error"].as_str().unwrap().contains("expired"),
        "{message}"
    );

    // The same token over gRPC, on the worker's own gRPC listener (reported with its
    // heartbeats): minilm runs; cls is PERMISSION_DENIED, no token or an expired one
    // UNAUTHENTICATED.
    until(
        &s,
        Duration::from_secs(10),
        "the worker's gRPC address",
        |l| l.len() == 1 && l[0]["report"]["grpc"].is_string(),
    )
    .await;
    let grant = assign(key.clone(), 300).await;
    let grpc = grant["grpc"].as_str().expect("a gRPC address").to_owned();
    assert_ne!(format!("https://{grpc}"), grant["worker"].as_str().unwrap());
    let token = grant["token"].as_str().unwrap();
    let grpc_call = |model: &str, token: Option<&str>| {
        let mut request = direct
            .post(format!(
                "https://{grpc}/inference.GRPCInferenceService/ModelInfer"
            ))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(crate::grpc::frame(&grpc_request(model)));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send()
    };
    let answer = grpc_call("minilm", Some(token)).await.unwrap();
    assert_eq!(answer.version(), reqwest::Version::HTTP_2);
    assert!(answer.headers().get("grpc-status").is_none(), "{answer:?}");
    let bytes = answer.bytes().await.unwrap();
    let decoded =
        <infergate_kserve::proto::ModelInferResponse as prost::Message>::decode(&bytes[5..])
            .expect("an inference answer");
    assert_eq!(decoded.outputs[0].shape, [1, 4, 384]);
    for (model, token, code, says) in [
        (
            "cls",
            Some(token),
            tonic::Code::PermissionDenied,
            "direct token is for model 'minilm'",
        ),
        (
            "minilm",
            None,
            tonic::Code::Unauthenticated,
            "missing direct token",
        ),
        (
            "minilm",
            short["token"].as_str(),
            tonic::Code::Unauthenticated,
            "expired",
        ),
    ] {
        let refused = grpc_call(model, token).await.unwrap();
        let status = tonic::Status::from_header_map(refused.headers()).expect("a gRPC status");
        assert_eq!(status.code(), code, "{model}: {status:?}");
        assert!(status.message().contains(says), "{status:?}");
    }

    // A key's rate limit travels in its token: the worker keeps the client to it.
    let limited = Command::new(BIN)
        .args([
            "keys",
            "create",
            "--scope",
            "infer",
            "--rps",
            "0.1",
            "--burst",
            "2",
            "--data-dir",
        ])
        .arg(data.path())
        .output()
        .unwrap();
    let limited = String::from_utf8(limited.stdout).unwrap().trim().to_owned();
    let grant = assign(limited, 300).await;
    let token = grant["token"].as_str().expect("a token");
    let statuses = futures_util::future::join_all(
        (0..3).map(|_| async { call("minilm", Some(token)).await.unwrap() }),
    )
    .await;
    let mut codes: Vec<u16> = statuses.iter().map(|r| r.status().as_u16()).collect();
    codes.sort_unstable();
    assert_eq!(
        codes,
        [200, 200, 429],
        "burst 2: the third request at once is refused"
    );
    assert!(statuses
        .iter()
        .any(|r| r.headers().contains_key("retry-after")));

    // A model file altered on the manager after registration: the manager checks it before
    // sending it (and the worker would refuse it too): the worker cannot fetch it (503).
    let models: Value = s.get_json("/api/models/cls", &s.admin_key).await;
    let sha = models["versions"][0]["sha256"]
        .as_str()
        .expect("cls sha256")
        .to_owned();
    let path = data.path().join(format!("models/{sha}.onnx"));
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(b"tampered");
    std::fs::write(&path, bytes).unwrap();
    let resp = s
        .client
        .post(s.url("/v2/models/cls/infer"))
        .bearer_auth(&key)
        .json(&json!({"inputs": [{"name": "x", "shape": [1, 3, 48, 192], "datatype": "FP32", "data": vec![0.0f32; 3 * 48 * 192]}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    let message: Value = resp.json().await.unwrap();
    assert!(
        message["error"].as_str().unwrap().contains("sha256"),
        "{message}"
    );
    assert!(!dirs.path().join(format!("w/models/{sha}.onnx")).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_worker_is_cut_off_by_the_deadline_and_by_heartbeats() {
    // Fast heartbeats (lost after 3 × 0.5 s) and a short deadline keep this test short.
    let Two {
        s,
        key,
        dirs,
        a,
        b,
        _data,
        _config,
    } = two_workers("heartbeat_ms = 500\nrequest_timeout_s = 2").await;
    let expected = infer(&s, &key).await.expect("a first answer");
    let serving = holding_the_model(&s).await;
    let id_a = std::fs::read_to_string(dirs.path().join("a/worker-id")).unwrap();
    let hung = if serving == id_a { &a } else { &b };
    let signal = |sig: &str| {
        let status = Command::new("kill")
            .args([sig, &hung.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    signal("-STOP");
    // Requests sent before the manager sees the worker lost end at the deadline (504); then
    // traffic moves to the other worker.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut failures, mut streak) = (Vec::new(), 0);
    while streak < 5 {
        assert!(
            Instant::now() < deadline,
            "traffic did not move: {failures:?}"
        );
        match infer(&s, &key).await {
            Ok(out) => {
                assert!(close(&out, &expected));
                streak += 1;
            }
            Err((status, message)) => {
                assert_eq!(status, 504, "{message}");
                failures.push(message);
                streak = 0;
            }
        }
    }
    assert!(failures.len() <= 3, "{failures:?}");
    // While requests flow, a worker's heartbeat carries its request rate and latency.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        infer(&s, &key).await.expect("traffic on the other worker");
        let reports = workers(&s).await;
        let measured = |w: &Value| {
            w["report"]["requests_per_s"].as_f64().unwrap_or(0.0) > 0.0
                && w["report"]["p50_ms"].as_f64().unwrap_or(0.0) > 0.0
                && w["report"]["p99_ms"].as_f64().unwrap_or(0.0)
                    >= w["report"]["p50_ms"].as_f64().unwrap_or(0.0)
        };
        if reports.iter().any(measured) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no rate or latency reported: {reports:#?}"
        );
    }
    let lost = until_state(&s, &serving, "lost").await;
    assert!(lost.iter().any(|w| w["state"] == "ready"));
    // Resumed, it reports again and is ready.
    signal("-CONT");
    until_state(&s, &serving, "ready").await;
}

/// Starts `infergate serve` as a manager on a fixed address (to restart it where its workers
/// expect it); returns the process (killed when dropped) once it listens.
fn manager_at(data: &Path, listen: &str, config: &Path) -> Worker {
    let mut command = Command::new(BIN);
    command
        .args(["serve", "--no-local-engine", "--listen", listen])
        .args(["--grpc-listen", "127.0.0.1:0", "--config"])
        .arg(config)
        .arg("--data-dir")
        .arg(data);
    Worker::spawn(command, "listening on")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_serve_direct_clients_while_the_manager_restarts_then_report_again() {
    let data = tempfile::tempdir().unwrap();
    crate::harness::register(data.path(), "minilm", &crate::harness::model("minilm.onnx"));
    crate::harness::register(data.path(), "cls", &crate::harness::model("ocr-cls.onnx"));
    let config = data.path().join("manager.toml");
    std::fs::write(&config, "[cluster]\nheartbeat_ms = 500\n").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let url = format!("https://{listen}");
    let mut manager = manager_at(data.path(), &listen, &config);
    let client = crate::harness::client_for(data.path(), false);
    let admin = std::fs::read_to_string(data.path().join("admin.key")).unwrap();
    let admin = admin.trim();
    let listed = |client: reqwest::Client| {
        let url = format!("{url}/api/workers");
        async move {
            let v: Value = client
                .get(url)
                .bearer_auth(admin)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            v["workers"].as_array().cloned().unwrap_or_default()
        }
    };
    let dirs = tempfile::tempdir().unwrap();
    let _worker = Worker::start(&url, &token(data.path()), &dirs.path().join("w"));
    let grant: Value = client
        .post(format!("{url}/v2/models/minilm/assign"))
        .bearer_auth(admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let direct = direct_client(&grant);
    let worker_infer = format!(
        "{}/v2/models/minilm/infer",
        grant["worker"].as_str().unwrap()
    );
    let token = grant["token"].as_str().unwrap();
    let expected = infer_at(&direct, &worker_infer, token)
        .await
        .expect("direct");

    // A configuration changed on the manager reaches the worker with the next request: a
    // post-op added to cls adds its outputs to the worker's answer.
    let cls_outputs = || async {
        let v: Value = client
            .post(format!("{url}/v2/models/cls/infer"))
            .bearer_auth(admin)
            .json(&json!({"inputs": [{"name": "x", "shape": [1, 3, 48, 192], "datatype": "FP32", "data": vec![0.5f32; 3 * 48 * 192]}]}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let names: Vec<String> = v["outputs"]
            .as_array()
            .unwrap_or_else(|| panic!("{v}"))
            .iter()
            .map(|o| o["name"].as_str().unwrap().to_owned())
            .collect();
        names
    };
    let before = cls_outputs().await;
    assert_eq!(before.len(), 1, "{before:?}");
    let post_op =
        json!({"infergate": {"postprocess": {"op": "softmax_topk", "output": before[0], "k": 1}}});
    let put = client
        .put(format!("{url}/api/models/cls/versions/1/config"))
        .bearer_auth(admin)
        .body(post_op.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 200);
    let after = cls_outputs().await;
    assert!(after.len() > 1, "{after:?}");

    // The manager dies: the worker keeps serving the direct client (the token is checked
    // offline, the model file is cached).
    manager.kill9();
    for _ in 0..3 {
        let out = infer_at(&direct, &worker_infer, token)
            .await
            .expect("direct without the manager");
        assert!(close(&out, &expected));
    }

    // Back on the same address and data directory, it learns the worker again from its next
    // heartbeat (no new join) and routes to it.
    let _manager = manager_at(data.path(), &listen, &config);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let list = listed(client.clone()).await;
        if list.len() == 1 && list[0]["state"] == "ready" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the worker did not report again: {list:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let through = infer_at(&client, &format!("{url}/v2/models/minilm/infer"), admin)
        .await
        .expect("through the restarted manager");
    assert!(close(&through, &expected));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_model_whose_copy_falls_behind_is_loaded_on_one_more_worker() {
    // Any wait at all counts as falling behind here, and workers report every 0.5 s.
    let Two {
        s,
        key,
        dirs: _dirs,
        a: _a,
        b: _b,
        _data,
        _config,
    } = two_workers("heartbeat_ms = 500\nscale_out_queue_delay_ms = 1").await;
    let loaded_on = |l: &[Value]| {
        l.iter()
            .filter(|w| w["report"]["models"] == json!([{"name": "minilm", "version": 1}]))
            .count()
    };
    // Eight connections at once until both workers hold the model (bounded in time and count).
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (client, url) = (s.client.clone(), s.url("/v2/models/minilm/infer"));
        let (key, stop) = (key.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut failed = 0;
            for _ in 0..400 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                failed += usize::from(infer_at(&client, &url, &key).await.is_err());
            }
            failed
        }));
    }
    let list = until(
        &s,
        Duration::from_secs(30),
        "the model on both workers",
        |l| loaded_on(l) == 2,
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    let mut failed = 0;
    for t in tasks {
        failed += t.await.unwrap();
    }
    assert_eq!(failed, 0);
    assert_eq!(loaded_on(&list), 2);

    // Direct-mode clients spread over the copies too, although the manager never sees their
    // traffic: once the reports say nothing is in flight, a burst of grants names both workers
    // (each grant counts against its worker until that worker's next report).
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let mut named = std::collections::BTreeSet::new();
    for _ in 0..8 {
        let grant: Value = s
            .post_json("/v2/models/minilm/assign", &key, &json!({}))
            .await
            .json()
            .await
            .unwrap();
        named.insert(grant["worker_id"].as_str().expect("a worker id").to_owned());
    }
    assert_eq!(named.len(), 2, "grants named {named:?}");
}

/// The next `/v2/events` frame that `wanted` accepts, reading at most 40 frames (a tick a
/// second, plus events).
async fn frame_where(
    ws: &mut crate::websocket::Ws,
    what: &str,
    wanted: impl Fn(&Value) -> bool,
) -> Value {
    for _ in 0..40 {
        let f = crate::websocket::next_json(ws).await;
        if wanted(&f) {
            return f;
        }
    }
    panic!("no frame with {what} among 40");
}

/// The next `worker_state` event for worker `id`: (state, previous).
async fn next_state(ws: &mut crate::websocket::Ws, id: &str) -> (Value, Value) {
    let f = frame_where(ws, &format!("a worker_state for {id}"), |f| {
        f["type"] == "worker_state" && f["worker"] == id
    })
    .await;
    (f["state"].clone(), f["previous"].clone())
}

/// A manager without an engine of its own, minilm registered, and fast heartbeats (a worker is
/// lost after 3 × 0.5 s without one). Keep the config directory as long as the server.
fn fast_manager(extra: &[String]) -> (tempfile::TempDir, tempfile::TempDir, Server) {
    let config_dir = tempfile::tempdir().unwrap();
    let config = config_dir.path().join("infergate.toml");
    std::fs::write(&config, "[cluster]\nheartbeat_ms = 500\n").unwrap();
    let mut args = vec!["--config".to_owned(), config.display().to_string()];
    args.extend_from_slice(extra);
    let (data, s) = manager(&[("minilm", "minilm.onnx")], &args);
    (config_dir, data, s)
}

/// This worker in a tick.
fn in_tick<'a>(tick: &'a Value, id: &str) -> Option<&'a Value> {
    tick["workers"].as_array()?.iter().find(|w| w["id"] == id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_follow_a_worker_that_joins_serves_is_lost_and_removed() {
    let (_config, data, s) = fast_manager(&[]);
    let key = s.key("infer");
    let (mut ws, _) = crate::websocket::connect(&s, "/v2/events", &[("x-api-key", &s.admin_key)])
        .await
        .unwrap();
    let is_tick = |f: &Value| f["type"] == "tick";
    // A manager without a local engine and no worker yet: nobody to list.
    let first = frame_where(&mut ws, "a tick", is_tick).await;
    assert_eq!(first["workers"], json!([]), "{first}");

    let dirs = tempfile::tempdir().unwrap();
    let mut worker = Worker::start(&s.addr, &token(data.path()), &dirs.path().join("w"));
    let joined = frame_where(&mut ws, "a worker_state", |f| f["type"] == "worker_state").await;
    let id = std::fs::read_to_string(dirs.path().join("w/worker-id")).unwrap();
    assert_eq!(joined["worker"], id.as_str(), "{joined}");
    assert_eq!(
        (&joined["state"], &joined["previous"]),
        (&json!("ready"), &Value::Null)
    );
    let listed = workers(&s).await;
    assert_eq!(joined["address"], listed[0]["advertise"], "{listed:#?}");
    assert!(joined["time_ms"].as_u64().unwrap() > 0);

    // Requests through the manager: the worker's heartbeats carry them into the ticks. They
    // are sent without a pause by a task of their own: one request per tick could fall, tick
    // after tick, in the heartbeat window that the next tick no longer shows (the tick and
    // heartbeat timers keep their phase).
    infer(&s, &key).await.expect("an answer from the worker");
    let sending = Arc::new(AtomicBool::new(true));
    let sender = {
        let (client, url, key, sending) = (
            s.client.clone(),
            s.url("/v2/models/minilm/infer"),
            key.clone(),
            sending.clone(),
        );
        tokio::spawn(async move {
            let mut sent = 0u32;
            while sending.load(Ordering::Relaxed) && sent < 2000 {
                infer_at(&client, &url, &key)
                    .await
                    .expect("an answer from the worker");
                sent += 1;
            }
        })
    };
    let mut measured = None;
    for _ in 0..40 {
        let tick = frame_where(&mut ws, "a tick", is_tick).await;
        let w = in_tick(&tick, &id)
            .expect("the worker in every tick")
            .clone();
        assert_eq!(w["state"], "ready", "{w}");
        // Ready means heard from within the three intervals, on the manager's clock.
        assert!(w["last_seen_ms"].as_u64().unwrap() < 1500, "{w}");
        assert!(
            w["rss_bytes"].as_u64().is_some() && w["in_flight"].as_u64().is_some(),
            "{w}"
        );
        if w["requests_per_s"].as_f64().unwrap() > 0.0 {
            measured = Some(w);
            break;
        }
    }
    sending.store(false, Ordering::Relaxed);
    sender.await.unwrap();
    let w = measured.expect("a tick with the worker's request rate");
    let p50 = w["p50_ms"].as_f64().expect("p50 with requests");
    assert!(p50 > 0.0 && w["p99_ms"].as_f64().unwrap() >= p50, "{w}");
    assert!(w["rss_bytes"].as_u64().unwrap() > 0, "{w}");
    assert!(w["cpu_percent"].as_f64().unwrap() >= 0.0, "{w}");
    assert_eq!(
        w["models"],
        json!([{"name": "minilm", "version": 1}]),
        "{w}"
    );

    // kill -9: no more heartbeats; three missed intervals later the manager calls it lost.
    worker.kill9();
    assert_eq!(
        next_state(&mut ws, &id).await,
        (json!("lost"), json!("ready"))
    );
    let tick = frame_where(&mut ws, "a tick", is_tick).await;
    let w = in_tick(&tick, &id).expect("a lost worker stays listed");
    assert_eq!(w["state"], "lost");
    assert!(w["last_seen_ms"].as_u64().unwrap() >= 1500, "{w}");
    for stale in [
        "requests_per_s",
        "p50_ms",
        "cpu_percent",
        "in_flight",
        "models",
    ] {
        assert!(w[stale].is_null(), "{stale} of a lost worker: {w}");
    }
    assert_eq!(w["outstanding"], 0);

    // Removed by an operator: announced, and gone from the ticks.
    assert_eq!(remove(&s, &id).await, 200);
    assert_eq!(
        next_state(&mut ws, &id).await,
        (json!("removed"), json!("lost"))
    );
    let tick = frame_where(&mut ws, "a tick", is_tick).await;
    assert_eq!(tick["workers"], json!([]), "{tick}");
}

/// The Workers page in a real browser: a manager (no engine of its own) and two live workers,
/// one killed with kill -9; the page shows that one lost and the other ready, and a host's
/// detail charts its ticks. Screenshots go with the dashboard test's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_shows_live_workers_and_a_killed_one_as_lost() {
    let (chromium, chromedriver) = crate::webdriver::browser_binaries();
    let dist = crate::dashboard::dist();
    let (_config, data, s) = fast_manager(&["--dashboard-dir".into(), dist.display().to_string()]);
    let secret = token(data.path());
    let dirs = tempfile::tempdir().unwrap();
    let a = Worker::start(&s.addr, &secret, &dirs.path().join("a"));
    let b = Worker::start(&s.addr, &secret, &dirs.path().join("b"));
    until(&s, Duration::from_secs(10), "two ready workers", |l| {
        l.len() == 2 && l.iter().all(|w| w["state"] == "ready")
    })
    .await;
    // One request loads the model on one of them: that one serves and is charted, the other
    // is killed.
    let key = s.key("infer");
    infer(&s, &key).await.expect("an answer");
    let serving = holding_the_model(&s).await;
    let id_a = std::fs::read_to_string(dirs.path().join("a/worker-id")).unwrap();
    let (mut idle, idle_dir) = if serving == id_a { (b, "b") } else { (a, "a") };
    let killed = std::fs::read_to_string(dirs.path().join(idle_dir).join("worker-id")).unwrap();

    let cert = std::fs::read_to_string(s.data.join("tls/cert.pem")).unwrap();
    let driver = crate::webdriver::Driver::start(&chromedriver).await;
    let browser = driver
        .session(&chromium, &crate::webdriver::spki_sha256(&cert))
        .await;
    let shots = crate::dashboard::screenshots();
    browser.set_viewport(1400, 900).await;
    browser.goto(&format!("{}/workers", s.addr)).await;
    browser.type_into("#api-key", &s.admin_key).await;
    browser.click("#sign-in").await;
    browser
        .wait_text(".page-header h1", |t| t == "Workers")
        .await;
    let row = |id: &str| format!("#hosts-table tr.host[data-worker='{id}']");
    for w in [&serving, &killed] {
        browser
            .wait_text(&format!("{} .host-state", row(w)), |t| t == "ready")
            .await;
    }
    let table = browser
        .wait_text("#hosts-table", |t| t.contains("minilm v1"))
        .await;
    let version = workers(&s).await[0]["version"].as_str().unwrap().to_owned();
    for shown in ["Last seen", "core", "RAM", "127.0.0.1:", &version] {
        assert!(
            table.contains(shown),
            "'{shown}' missing from the hosts table:\n{table}"
        );
    }
    browser
        .screenshot(&shots.join("10-workers-hosts.png"))
        .await;

    // A host's detail: its live charts fill from the events ticks while requests flow (at most
    // 200 of them, one after another).
    browser
        .click(&format!("{} .host-link", row(&serving)))
        .await;
    browser
        .wait_text(&format!(".host-detail[data-worker='{serving}'] h2"), |t| {
            t == serving
        })
        .await;
    let charts = browser
        .script(
            "return document.querySelectorAll('.host-detail figure.chart').length",
            json!([]),
        )
        .await;
    assert_eq!(charts, json!(5));
    let traffic = {
        let (client, url) = (s.client.clone(), s.url("/v2/models/minilm/infer"));
        tokio::spawn(async move {
            for _ in 0..200 {
                infer_at(&client, &url, &key).await.expect("an answer");
            }
        })
    };
    browser
        .wait_text(".host-detail .chart .legend-value", |t| {
            t.ends_with("/s") && t != "0.0/s"
        })
        .await;
    traffic.abort();
    match traffic.await {
        Ok(()) => {}
        Err(e) if e.is_cancelled() => {}
        Err(e) => panic!("a request failed while the detail was open: {e}"),
    }
    browser
        .screenshot(&shots.join("10b-workers-host-detail.png"))
        .await;

    // kill -9 one worker: three missed heartbeats later the page shows it lost, the other ready.
    idle.kill9();
    browser
        .wait_text(&format!("{} .host-state", row(&killed)), |t| t == "lost")
        .await;
    assert_eq!(
        browser
            .text_of(&format!("{} .host-state", row(&serving)))
            .await
            .as_deref(),
        Some("ready")
    );
    let lost_row = browser.text_of(&row(&killed)).await.unwrap_or_default();
    assert!(
        lost_row.contains("s ago"),
        "last-seen age of a lost worker: {lost_row}"
    );
    browser
        .wait_text(".host-feed", |t| {
            t.contains(&killed) && t.contains("ready → lost")
        })
        .await;
    browser
        .screenshot(&shots.join("10c-workers-lost.png"))
        .await;
    let errors = crate::dashboard::unexpected(browser.severe_logs().await);
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    browser.close().await;
}
