//! A server on a host that limits it: it starts and serves with what it is given, and says what
//! it does without.

use crate::blobs::plugin_file;
use crate::harness::{Options, Server};

/// The plugin host reserves address space for a pool of instance memories (several GiB per
/// slot, guard regions included). Under a process address-space limit (`ulimit -v`, some
/// container and batch schedulers) that reservation fails; the server used to exit at start
/// with "failed to create memory pool mapping". It now maps each instance's memory on demand,
/// logs why, and plugins still compile and run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_an_address_space_limit_the_server_starts_and_runs_plugins() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let s = Server::start_in(
        tmp.path(),
        Options {
            address_space_kib: Some(16 << 20), // 16 GiB
            ..Options::default()
        },
    );
    assert!(
        s.startup_log
            .iter()
            .any(|l| l.contains("memory pool cannot be reserved")),
        "the fallback is logged at start: {:#?}",
        s.startup_log
    );
    // An upload compiles the component and calls its `describe` export in a store: guest
    // code runs under the on-demand allocator.
    let wasm = std::fs::read(plugin_file("mean-pool")).expect("plugin bytes");
    let r = s
        .client
        .post(s.url("/api/plugins"))
        .bearer_auth(&s.admin_key)
        .body(wasm)
        .send()
        .await
        .expect("upload reaches the server");
    let status = r.status();
    let body: serde_json::Value = r.json().await.expect("JSON answer");
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["name"], "mean-pool", "{body}");
    let ready = s
        .client
        .get(s.url("/v2/health/ready"))
        .send()
        .await
        .expect("ready reaches the server");
    assert_eq!(ready.status(), 200);
}
