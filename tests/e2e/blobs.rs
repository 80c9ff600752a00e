//! Content-addressed files under concurrent uploads and deletes, and the compiled-plugin cache:
//! no listed model or plugin without its file, no file or artifact nothing references.

use crate::harness::{model, Options, Server};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A plugin built by plugins/build.sh (`INFERGATE_PLUGINS`, else `plugins/dist`).
pub fn plugin_file(name: &str) -> PathBuf {
    let dir = std::env::var("INFERGATE_PLUGINS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugins/dist"));
    let path = dir.join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "{} missing: run plugins/build.sh",
        path.display()
    );
    path
}

/// Files in `dir` (names), sorted.
fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
}

async fn upload_model(s: &Server, name: &str, bytes: &[u8]) -> reqwest::Response {
    s.client
        .post(s.url(&format!("/api/models/{name}/versions")))
        .bearer_auth(&s.admin_key)
        .body(bytes.to_vec())
        .send()
        .await
        .expect("upload reaches the server")
}

async fn infer_cls(s: &Server, name: &str) -> reqwest::Response {
    let body = json!({"inputs": [{"name": "x", "shape": [1, 3, 48, 100], "datatype": "FP32",
        "data": vec![0.5f32; 3 * 48 * 100]}]});
    s.client
        .post(s.url(&format!("/v2/models/{name}/infer")))
        .bearer_auth(&s.admin_key)
        .json(&body)
        .send()
        .await
        .expect("infer reaches the server")
}

/// A delete of a model racing an upload of the same bytes under another name could
/// remove the shared file after the upload stored it and before its row was written (10 of 100
/// tries), leaving a listed model whose every inference failed. The delete is fired at a random
/// point of the upload (seeded; printed) many times; each time the deleted model holds the only
/// reference, so the delete removes the file unless the upload's row is written first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_model_while_its_bytes_are_uploaded_again_keeps_the_file() {
    let s = Server::with_models(&[]);
    let bytes = std::fs::read(model("ocr-cls.onnx")).expect("model bytes");
    let seed: u64 = rand::rng().random();
    println!("seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    // How long an upload takes here, so that deletes land anywhere within one.
    let started = Instant::now();
    let probe = upload_model(&s, "probe", &bytes).await;
    assert_eq!(probe.status(), 201);
    let upload_time = started.elapsed();
    let probe_gone = s
        .client
        .delete(s.url("/api/models/probe"))
        .bearer_auth(&s.admin_key)
        .send()
        .await
        .unwrap();
    assert_eq!(probe_gone.status(), 200);
    for round in 0..20 {
        let a = format!("a{round}");
        let b = format!("b{round}");
        let up = upload_model(&s, &a, &bytes).await;
        assert_eq!(up.status(), 201, "round {round}");
        let delay = Duration::from_micros(rng.random_range(0..=upload_time.as_micros() as u64));
        let racing_upload = upload_model(&s, &b, &bytes);
        let delete = async {
            tokio::time::sleep(delay).await;
            s.client
                .delete(s.url(&format!("/api/models/{a}")))
                .bearer_auth(&s.admin_key)
                .send()
                .await
                .unwrap()
        };
        let (uploaded, deleted) = tokio::join!(racing_upload, delete);
        assert_eq!(uploaded.status(), 201, "round {round}");
        assert_eq!(deleted.status(), 200, "round {round}");
        let listed: Value = s.get_json("/api/models", &s.admin_key).await;
        for m in listed["models"].as_array().expect("models") {
            let sha = m["sha256"].as_str().expect("sha256");
            let file = s.data.join("models").join(format!("{sha}.onnx"));
            assert!(
                file.is_file(),
                "round {round} (seed {seed}, delete after {delay:?}): {} v{} is listed but {} is gone",
                m["name"],
                m["version"],
                file.display()
            );
        }
        let r = infer_cls(&s, &b).await;
        assert_eq!(
            r.status(),
            200,
            "round {round} (seed {seed}): {:?}",
            r.text().await
        );
        let gone = s
            .client
            .delete(s.url(&format!("/api/models/{b}")))
            .bearer_auth(&s.admin_key)
            .send()
            .await
            .unwrap();
        assert_eq!(gone.status(), 200);
        assert!(
            files_in(&s.data.join("models")).is_empty(),
            "round {round}: the last delete removes the file"
        );
    }
}

/// A rejected plugin upload left its compiled artifact in the cache (tens of MB for
/// a large plugin) and nothing ever removed it. Now a rejected upload removes it, a delete
/// removes the deleted version's, and a start removes what no stored plugin uses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_cache_holds_only_artifacts_of_stored_plugins() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let s = Server::start_in(tmp.path(), Options::default());
    let cache = s.data.join("plugin-cache");
    let upload = |name: &str| {
        let bytes = std::fs::read(plugin_file(name)).expect("plugin bytes");
        s.client
            .post(s.url("/api/plugins"))
            .bearer_auth(&s.admin_key)
            .body(bytes)
            .send()
    };
    // Compiles (an artifact is written), then fails the world check.
    let rejected = upload("wrong-world").await.expect("upload");
    assert_eq!(rejected.status(), 400);
    assert_eq!(
        files_in(&cache),
        Vec::<String>::new(),
        "rejected upload's artifact"
    );

    let stored = upload("passthrough").await.expect("upload");
    assert_eq!(stored.status(), 201);
    let sha = stored.json::<Value>().await.unwrap()["sha256"]
        .as_str()
        .unwrap()
        .to_string();
    let artifacts = files_in(&cache);
    assert_eq!(artifacts.len(), 1, "{artifacts:?}");
    assert!(artifacts[0].starts_with(&sha), "{artifacts:?}");

    // What an older binary, a crash mid-write or a lost delete leaves behind.
    let stale = artifacts[0].replacen(&sha, &"0".repeat(64), 1);
    std::fs::copy(cache.join(&artifacts[0]), cache.join(&stale)).unwrap();
    std::fs::write(cache.join(format!(".{sha}.1.2.tmp")), b"half").unwrap();
    std::fs::write(cache.join(format!("{sha}-oldengine.cwasm")), b"old").unwrap();
    let data = s.stop();
    let s = Server::start_in(&data, Options::default());
    assert_eq!(
        files_in(&cache),
        artifacts,
        "start keeps only stored plugins' artifacts"
    );

    let deleted = s
        .client
        .delete(s.url("/api/plugins/passthrough"))
        .bearer_auth(&s.admin_key)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200);
    assert_eq!(
        files_in(&cache),
        Vec::<String>::new(),
        "deleted plugin's artifact"
    );
    assert_eq!(files_in(&s.data.join("plugins")), Vec::<String>::new());
}

/// Parallel plugin uploads are compiled at most `max_concurrent_compiles` at a time; one that
/// waits too long for a slot gets 503 with Retry-After and succeeds when retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_plugin_uploads_wait_for_a_compile_slot_or_get_503() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let config = tmp.path().join("infergate.toml");
    std::fs::write(
        &config,
        "[plugins]\nmax_concurrent_compiles = 1\ncompile_wait_s = 0\n",
    )
    .unwrap();
    let data = tmp.path().join("data");
    let s = Server::start_in(
        &data,
        Options {
            extra_args: vec!["--config".into(), config.display().to_string()],
            ..Options::default()
        },
    );
    let names = ["passthrough", "counter", "mean-pool", "hostile-trap"];
    let uploads = names.iter().map(|name| {
        let bytes = std::fs::read(plugin_file(name)).expect("plugin bytes");
        let s = &s;
        async move {
            for attempt in 0..60 {
                let r = s
                    .client
                    .post(s.url("/api/plugins"))
                    .bearer_auth(&s.admin_key)
                    .body(bytes.clone())
                    .send()
                    .await
                    .expect("upload reaches the server");
                match r.status().as_u16() {
                    201 => return attempt,
                    503 => {
                        let retry = r.headers().get("retry-after").cloned();
                        let body: Value = r.json().await.expect("a JSON error");
                        assert!(retry.is_some(), "503 without Retry-After: {body}");
                        assert!(
                            body["error"].as_str().unwrap_or("").contains("busy"),
                            "{body}"
                        );
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    other => panic!("{name}: unexpected {other}: {:?}", r.text().await),
                }
            }
            panic!("{name} never got a compile slot in 60 attempts");
        }
    });
    let attempts = futures_util::future::join_all(uploads).await;
    println!("attempts before a slot: {attempts:?}");
    let listed: Value = s.get_json("/api/plugins", &s.admin_key).await;
    assert_eq!(
        listed["plugins"].as_array().map(Vec::len),
        Some(names.len())
    );
}
