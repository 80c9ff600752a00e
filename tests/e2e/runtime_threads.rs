//! The async runtime's size: half the cores (rounded up) beside a local engine,
//! every core for a manager that only routes, and what `--async-threads` says when it is given.
//! The count checked is the one the server reads back from its runtime at start
//! (`async runtime threads=N`).

use crate::harness::{strip_ansi, Options, Server};

fn logged_threads(s: &Server) -> usize {
    let line = s
        .startup_log
        .iter()
        .map(|l| strip_ansi(l))
        .find(|l| l.contains("async runtime"))
        .unwrap_or_else(|| panic!("no 'async runtime' line at start: {:#?}", s.startup_log));
    line.split("threads=")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no thread count in {line:?}"))
}

fn start(args: &[&str]) -> (tempfile::TempDir, Server) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let s = Server::start_in(
        tmp.path(),
        Options {
            extra_args: args.iter().map(|a| a.to_string()).collect(),
            ..Options::default()
        },
    );
    (tmp, s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_is_sized_from_the_cores_unless_told() {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);

    let (_a, beside_engine) = start(&[]);
    assert_eq!(logged_threads(&beside_engine), cores.div_ceil(2));
    drop(beside_engine);

    let (_b, routing_only) = start(&["--no-local-engine"]);
    assert_eq!(logged_threads(&routing_only), cores);
    drop(routing_only);

    // An explicit count wins, whatever the default, and that server serves.
    let (_c, two) = start(&["--async-threads", "2"]);
    assert_eq!(logged_threads(&two), 2);
    drop(two);
    let (_d, told) = start(&["--async-threads", "3"]);
    assert_eq!(logged_threads(&told), 3);
    let ready = told
        .client
        .get(told.url("/v2/health/ready"))
        .send()
        .await
        .expect("ready reaches the server");
    assert_eq!(ready.status(), 200);
    let models = told
        .client
        .get(told.url("/api/models"))
        .bearer_auth(&told.admin_key)
        .send()
        .await
        .expect("models reaches the server");
    assert_eq!(models.status(), 200);
}
