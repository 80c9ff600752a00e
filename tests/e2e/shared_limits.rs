//! Rate limits shared by two gateway replicas through a real Redis (Debian's redis-server,
//! started here on a random port). The replicas share one data directory (SQLite serves
//! several processes), as they would share a store.

use crate::harness::{client_for, Options, Server};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) struct Redis {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Redis {
    pub(crate) fn start(port: Option<u16>) -> Redis {
        let port = port.unwrap_or_else(|| {
            TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        });
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server (installed by scripts/setup.sh)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Redis {
            child,
            port,
            _dir: dir,
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn replica(data: &std::path::Path, redis: &Redis, failure: &str) -> Server {
    let extra_args = vec![
        "--ratelimit".to_string(),
        redis.url(),
        "--ratelimit-failure".to_string(),
        failure.to_string(),
    ];
    Server::start_in(
        data,
        Options {
            extra_args,
            ..Options::default()
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_admit_one_keys_rate_together() {
    const RPS: f64 = 5.0;
    const BURST: f64 = 5.0;
    const WINDOW: Duration = Duration::from_secs(3);
    let tmp = tempfile::tempdir().unwrap();
    let redis = Redis::start(None);
    let a = replica(tmp.path(), &redis, "closed");
    let b = replica(tmp.path(), &redis, "closed");
    let key = a.key_with("infer", &["--rps", "5", "--burst", "5"]);

    // 32 clients, 16 on each replica, connected before the window opens.
    let mut clients = Vec::new();
    for i in 0..32 {
        let s = if i % 2 == 0 { &a } else { &b };
        let c = client_for(tmp.path(), false);
        let live = c.get(s.url("/v2/health/live")).send().await.unwrap();
        assert_eq!(live.status(), 200);
        clients.push((c, s.url("/api/whoami")));
    }
    let ok = Arc::new(AtomicU64::new(0));
    let limited = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(tokio::sync::Barrier::new(clients.len() + 1));
    let mut tasks = Vec::new();
    for (c, url) in clients {
        let (ok, limited, barrier, key) =
            (ok.clone(), limited.clone(), barrier.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let start = Instant::now();
            let mut last = start;
            while start.elapsed() < WINDOW {
                let r = c.get(&url).bearer_auth(&key).send().await.unwrap();
                match r.status().as_u16() {
                    200 => {
                        assert_eq!(r.headers()["ratelimit-policy"], "\"default\";q=5;w=1");
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    429 => {
                        assert!(r.headers().contains_key("retry-after"));
                        let body: serde_json::Value = r.json().await.unwrap();
                        assert!(
                            body["error"].as_str().unwrap().contains("rate limit"),
                            "{body}"
                        );
                        limited.fetch_add(1, Ordering::Relaxed);
                    }
                    other => panic!("unexpected status {other}: {:?}", r.text().await),
                }
                last = Instant::now();
            }
            (start, last)
        }));
    }
    barrier.wait().await;
    let (mut first, mut end) = (None::<Instant>, None::<Instant>);
    for t in tasks {
        let (start, last) = t.await.unwrap();
        first = Some(first.map_or(start, |f| f.min(start)));
        end = Some(end.map_or(last, |e| e.max(last)));
    }
    let elapsed = (end.unwrap() - first.unwrap()).as_secs_f64();
    let (ok, limited) = (ok.load(Ordering::Relaxed), limited.load(Ordering::Relaxed));
    let expected = BURST + RPS * elapsed;
    eprintln!(
        "two replicas: {ok} allowed, {limited} refused in {elapsed:.3} s (expected {expected:.2})"
    );
    // Each replica alone would have allowed the whole budget: together they allow it once.
    assert!(
        (ok as f64 - expected).abs() <= 2.0,
        "{ok} allowed in {elapsed:.3} s across two replicas; expected {expected:.2} ± 2"
    );
    assert!(limited > 50, "the clients must have pushed past the limit");
}

#[tokio::test]
async fn redis_down_fails_open_or_closed_as_configured_and_recovers() {
    let tmp = tempfile::tempdir().unwrap();
    let redis = Redis::start(None);
    let port = redis.port;
    let open = replica(tmp.path(), &redis, "open");
    let closed = replica(tmp.path(), &redis, "closed");
    let key = open.key_with("infer", &["--rps", "1000", "--burst", "1000"]);
    let whoami = |s: &Server| {
        let (client, url, key) = (s.client.clone(), s.url("/api/whoami"), key.clone());
        async move { client.get(url).bearer_auth(key).send().await.unwrap() }
    };
    assert_eq!(whoami(&open).await.status(), 200);
    assert_eq!(whoami(&closed).await.status(), 200);

    drop(redis);
    let r = whoami(&closed).await;
    assert_eq!(r.status(), 503);
    assert!(r.headers().contains_key("retry-after"));
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("shared rate limiter is unavailable"),
        "{body}"
    );
    // Fail-open: served under the replica's own limiter.
    let r = whoami(&open).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers().contains_key("ratelimit"));
    assert!(open
        .wait_for_log(
            "shared rate limiter (Redis) unavailable",
            Duration::from_secs(5)
        )
        .is_some());

    let _back = Redis::start(Some(port));
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let status = whoami(&closed).await.status();
        if status == 200 {
            break;
        }
        assert_eq!(status, 503);
        assert!(
            Instant::now() < deadline,
            "the closed replica did not recover within 15 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(closed
        .wait_for_log(
            "shared rate limiter (Redis) answers again",
            Duration::from_secs(5)
        )
        .is_some());
}
