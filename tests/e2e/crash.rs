//! Crash consistency: the real server is killed with SIGKILL at a random point while models,
//! plugins, pipelines and keys are written and deleted concurrently (deletes racing uploads of
//! the same bytes included). After each kill: SQLite's integrity check passes, every row has its
//! file, every acknowledged (2xx) write is there and every acknowledged delete is not; after the
//! restart no file is left that nothing references. The seed is printed; set
//! `INFERGATE_CRASH_SEED` to replay one.

use crate::blobs::plugin_file;
use crate::harness::{model, Options, Server};
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const ITERATIONS: usize = 6;
/// Small plugins, so a debug build compiles each in well under a second.
const PLUGINS: [&str; 3] = ["counter", "mean-pool", "hostile-trap"];

/// What the server acknowledged about one object. `Unknown` while a request about it is in
/// flight (or got no 2xx): a kill may or may not have let it commit.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    Present,
    Absent,
    Unknown,
}

/// Object ("model:NAME", "plugin:NAME@VERSION", "pipeline:NAME", "key:ID") → what must hold.
#[derive(Default)]
struct Ledger {
    expect: Mutex<BTreeMap<String, Expect>>,
    /// Plugin file → the object its upload answered, kept across iterations: a later
    /// iteration's upload of the same file makes that object unknown again before it is sent
    /// (killed after the commit but before the answer, it is present whatever an earlier
    /// iteration's delete said).
    plugin_objects: Mutex<BTreeMap<String, String>>,
}

impl Ledger {
    fn set(&self, object: &str, expect: Expect) {
        self.expect.lock().insert(object.to_string(), expect);
    }
    fn snapshot(&self) -> BTreeMap<String, Expect> {
        self.expect.lock().clone()
    }
}

/// One client of the server under test; every loop ends at the first transport error (the kill).
struct Client {
    http: reqwest::Client,
    base: String,
    key: String,
    ledger: Arc<Ledger>,
}

impl Client {
    /// The status and JSON body of an answer, None when the kill cut the exchange off: no
    /// answer, or an answer whose body did not arrive whole (the status line can reach the
    /// client before the process dies and the body never does).
    async fn send(&self, req: reqwest::RequestBuilder) -> Option<(u16, Value)> {
        let r = req.bearer_auth(&self.key).send().await.ok()?;
        let status = r.status().as_u16();
        let body = r.bytes().await.ok()?;
        if body.is_empty() {
            return Some((status, Value::Null));
        }
        Some((status, serde_json::from_slice(&body).ok()?))
    }

    async fn upload_model(&self, name: &str, bytes: &[u8]) -> Option<()> {
        let object = format!("model:{name}");
        self.ledger.set(&object, Expect::Unknown);
        let url = format!("{}/api/models/{name}/versions", self.base);
        let (status, _) = self.send(self.http.post(url).body(bytes.to_vec())).await?;
        if status == 201 {
            self.ledger.set(&object, Expect::Present);
        }
        Some(())
    }

    async fn delete_model(&self, name: &str) -> Option<()> {
        let object = format!("model:{name}");
        self.ledger.set(&object, Expect::Unknown);
        let url = format!("{}/api/models/{name}", self.base);
        let (status, _) = self.send(self.http.delete(url)).await?;
        if status == 200 {
            self.ledger.set(&object, Expect::Absent);
        }
        Some(())
    }

    /// Models uploaded and some deleted again, alternating two files.
    async fn models(&self, tag: &str, files: &[Vec<u8>]) {
        for n in 0.. {
            let name = format!("m{tag}-{n}");
            if self
                .upload_model(&name, &files[n % files.len()])
                .await
                .is_none()
            {
                return;
            }
            if n % 3 == 2 && self.delete_model(&name).await.is_none() {
                return;
            }
        }
    }

    /// A model deleted while the same bytes are uploaded under another name.
    async fn delete_races(&self, tag: &str, bytes: &[u8]) {
        for n in 0.. {
            let (a, b) = (format!("d{tag}-{n}"), format!("e{tag}-{n}"));
            if self.upload_model(&a, bytes).await.is_none() {
                return;
            }
            let (deleted, uploaded) =
                tokio::join!(self.delete_model(&a), self.upload_model(&b, bytes));
            if deleted.is_none() || uploaded.is_none() {
                return;
            }
        }
    }

    /// Plugins uploaded and deleted in turn. The object is named after the response, so a
    /// plugin whose first upload is cut off is simply not checked.
    async fn plugins(&self, plugins: &[(String, Vec<u8>)]) {
        for n in 0.. {
            let (file, bytes) = &plugins[n % plugins.len()];
            let known = self.ledger.plugin_objects.lock().get(file).cloned();
            if let Some(object) = known {
                self.ledger.set(&object, Expect::Unknown);
            }
            let url = format!("{}/api/plugins", self.base);
            let Some((status, body)) = self.send(self.http.post(url).body(bytes.clone())).await
            else {
                return;
            };
            if status != 200 && status != 201 {
                continue;
            }
            let (name, version) = (body["name"].as_str(), body["version"].as_str());
            let (Some(name), Some(version)) = (name, version) else {
                panic!("plugin upload answered {status} without name and version: {body}")
            };
            let object = format!("plugin:{name}@{version}");
            self.ledger.set(&object, Expect::Present);
            self.ledger
                .plugin_objects
                .lock()
                .insert(file.clone(), object.clone());
            self.ledger.set(&object, Expect::Unknown);
            let url = format!("{}/api/plugins/{name}/versions/{version}", self.base);
            let Some((status, _)) = self.send(self.http.delete(url)).await else {
                return;
            };
            if status == 200 {
                self.ledger.set(&object, Expect::Absent);
            }
        }
    }

    /// Pipelines saved (every second one deleted again).
    async fn pipelines(&self, tag: &str) {
        for n in 0.. {
            let name = format!("p{tag}-{n}");
            let object = format!("pipeline:{name}");
            self.ledger.set(&object, Expect::Unknown);
            let url = format!("{}/api/pipelines/{name}", self.base);
            let spec = json!({"model": "base"});
            let Some((status, body)) = self.send(self.http.put(&url).json(&spec)).await else {
                return;
            };
            assert!(
                status == 201 || status == 200,
                "saving {name}: {status} {body}"
            );
            self.ledger.set(&object, Expect::Present);
            if n % 2 == 1 {
                self.ledger.set(&object, Expect::Unknown);
                let Some((status, _)) = self.send(self.http.delete(&url)).await else {
                    return;
                };
                if status == 200 {
                    self.ledger.set(&object, Expect::Absent);
                }
            }
        }
    }

    /// API keys created (their id is known only from the answer).
    async fn keys(&self, tag: &str) {
        for n in 0.. {
            let url = format!("{}/api/keys", self.base);
            let body = json!({"name": format!("k{tag}-{n}"), "scopes": ["infer"]});
            let Some((status, body)) = self.send(self.http.post(url).json(&body)).await else {
                return;
            };
            assert_eq!(status, 201, "{body}");
            let id = body["id"].as_i64().expect("key id");
            self.ledger.set(&format!("key:{id}"), Expect::Present);
        }
    }
}

/// The rows that reference content, read straight from the database.
struct Rows {
    objects: BTreeSet<String>,
    model_files: BTreeSet<String>,
    plugin_files: BTreeSet<String>,
}

/// After a kill, with no server running: integrity, every row's file, every acknowledged write.
fn check_after_kill(data: &Path, ledger: &Ledger, context: &str) -> Rows {
    let db = rusqlite::Connection::open(data.join("infergate.db")).expect("open the database");
    let integrity: String = db
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("integrity_check");
    assert_eq!(integrity, "ok", "{context}");
    let strings = |sql: &str| -> Vec<(String, String)> {
        let mut stmt = db.prepare(sql).expect(sql);
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect(sql)
            .collect::<Result<Vec<_>, _>>()
            .expect(sql);
        rows
    };
    let mut rows = Rows {
        objects: BTreeSet::new(),
        model_files: BTreeSet::new(),
        plugin_files: BTreeSet::new(),
    };
    for (name, sha) in strings("SELECT name, sha256 FROM model_versions") {
        let file = format!("{sha}.onnx");
        assert!(
            data.join("models").join(&file).is_file(),
            "{context}: model {name} is stored but models/{file} is missing"
        );
        rows.objects.insert(format!("model:{name}"));
        rows.model_files.insert(file);
    }
    for (name, sha) in strings("SELECT name || '@' || version, sha256 FROM plugins") {
        let file = format!("{sha}.wasm");
        assert!(
            data.join("plugins").join(&file).is_file(),
            "{context}: plugin {name} is stored but plugins/{file} is missing"
        );
        rows.objects.insert(format!("plugin:{name}"));
        rows.plugin_files.insert(sha);
    }
    for (name, _) in strings("SELECT name, name FROM pipelines") {
        rows.objects.insert(format!("pipeline:{name}"));
    }
    for (id, _) in strings("SELECT CAST(id AS TEXT), public_id FROM api_keys") {
        rows.objects.insert(format!("key:{id}"));
    }
    for (object, expect) in ledger.snapshot() {
        let present = rows.objects.contains(&object);
        match expect {
            Expect::Present => assert!(present, "{context}: acknowledged {object} is missing"),
            Expect::Absent => assert!(
                !present,
                "{context}: acknowledged delete of {object} undone"
            ),
            Expect::Unknown => {}
        }
    }
    rows
}

/// After a start: nothing on disk that no row references (the start collected it).
fn check_no_orphans(data: &Path, rows: &Rows, context: &str) {
    let names = |dir: &str| -> BTreeSet<String> {
        std::fs::read_dir(data.join(dir))
            .unwrap_or_else(|e| panic!("listing {dir}: {e}"))
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect()
    };
    assert_eq!(names("models"), rows.model_files, "{context}: models/");
    let plugin_files: BTreeSet<String> = rows
        .plugin_files
        .iter()
        .map(|sha| format!("{sha}.wasm"))
        .collect();
    assert_eq!(names("plugins"), plugin_files, "{context}: plugins/");
    assert_eq!(names("tmp"), BTreeSet::new(), "{context}: tmp/");
    for artifact in names("plugin-cache") {
        let sha = artifact.split('-').next().unwrap_or_default();
        assert!(
            artifact.ends_with(".cwasm") && rows.plugin_files.contains(sha),
            "{context}: plugin-cache/{artifact} belongs to no stored plugin"
        );
    }
    for dir in [".", "tls"] {
        let leftovers: Vec<String> = names(dir)
            .into_iter()
            .filter(|n| n.starts_with(".tmp-"))
            .collect();
        assert!(leftovers.is_empty(), "{context}: {dir}/{leftovers:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_at_random_points_leaves_a_consistent_store() {
    let seed: u64 = std::env::var("INFERGATE_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    println!("crash seed {seed} (INFERGATE_CRASH_SEED={seed} replays the kill points)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let cls = std::fs::read(model("ocr-cls.onnx")).expect("model");
    let textgen = std::fs::read(model("textgen.onnx")).expect("model");
    let plugins: Vec<(String, Vec<u8>)> = PLUGINS
        .iter()
        .map(|p| {
            let path = plugin_file(p);
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (p.to_string(), bytes)
        })
        .collect();
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path();
    let ledger = Arc::new(Ledger::default());

    let first = Server::start_in(data, Options::default());
    let admin = first.admin_key.clone();
    let base = first
        .client
        .post(first.url("/api/models/base/versions"))
        .bearer_auth(&admin)
        .body(cls.clone())
        .send()
        .await
        .expect("upload base");
    assert_eq!(base.status(), 201);
    ledger.set("model:base", Expect::Present);
    drop(first);

    let mut rows = None;
    for iteration in 0..ITERATIONS {
        let context = format!("iteration {iteration} (seed {seed})");
        let server = Server::start_in(data, Options::default());
        if let Some(rows) = &rows {
            check_no_orphans(data, rows, &context);
        }
        let client = Client {
            http: server.client.clone(),
            base: server.addr.clone(),
            key: admin.clone(),
            ledger: ledger.clone(),
        };
        let tag = iteration.to_string();
        let kill_after = Duration::from_millis(rng.random_range(150..1500));
        let model_files = [cls.clone(), textgen.clone()];
        let work = async {
            tokio::join!(
                client.models(&tag, &model_files),
                client.delete_races(&tag, &cls),
                client.plugins(&plugins),
                client.pipelines(&tag),
                client.keys(&tag),
            )
        };
        let kill = async {
            tokio::time::sleep(kill_after).await;
            server.stop();
        };
        tokio::join!(work, kill);
        println!("{context}: killed after {kill_after:?}");
        rows = Some(check_after_kill(data, &ledger, &context));
    }
    let last = Server::start_in(data, Options::default());
    let rows = rows.expect("at least one iteration");
    check_no_orphans(data, &rows, &format!("final start (seed {seed})"));
    let listed: Value = last.get_json("/api/models", &admin).await;
    let stored_models = rows
        .objects
        .iter()
        .filter(|o| o.starts_with("model:"))
        .count();
    assert_eq!(
        listed["models"].as_array().map(Vec::len),
        Some(stored_models),
        "the server lists what the database holds"
    );
}
