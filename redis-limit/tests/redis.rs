//! Against a real Redis (Debian's redis-server, started here on a random port): two limiters
//! stand for two gateway replicas sharing one key.

mod common;

use std::time::{Duration, Instant};

use common::RedisServer;
use infergate_redis_limit::{RedisLimiter, Settings};

fn limiter(server: &RedisServer, ttl: Duration) -> RedisLimiter {
    let settings = Settings {
        lease_ttl: ttl,
        ..Settings::default()
    };
    RedisLimiter::new(&server.url(), "test", settings).unwrap()
}

#[tokio::test]
async fn two_replicas_share_one_rate_budget() {
    let server = RedisServer::start();
    let replicas = [
        limiter(&server, Duration::from_secs(60)),
        limiter(&server, Duration::from_secs(60)),
    ];
    let mut remaining = Vec::new();
    for i in 0..5 {
        let d = replicas[i % 2].check_rate("key-1", 5.0, 5).await.unwrap();
        assert!(d.allowed, "request {i} of the burst refused: {d:?}");
        remaining.push(d.remaining);
    }
    // The burst's last slots are counted across both replicas (a request or two of refill
    // may land while the loop runs: 200 ms per request at 5/s).
    assert_eq!(remaining[0], 4);
    assert!(remaining[4] <= 1, "{remaining:?}");
    let mut refused = None;
    for _ in 0..3 {
        let d = replicas[1].check_rate("key-1", 5.0, 5).await.unwrap();
        if !d.allowed {
            refused = Some(d);
            break;
        }
    }
    let refused = refused.expect("the budget of 5 was not exhausted by 8 quick requests");
    assert!(
        refused.retry_after > Duration::ZERO && refused.retry_after <= Duration::from_millis(200),
        "{refused:?}"
    );
    // Another key is untouched.
    assert!(
        replicas[0]
            .check_rate("key-2", 5.0, 5)
            .await
            .unwrap()
            .allowed
    );
    // Waiting the advertised time is enough.
    tokio::time::sleep(refused.retry_after + Duration::from_millis(20)).await;
    assert!(
        replicas[0]
            .check_rate("key-1", 5.0, 5)
            .await
            .unwrap()
            .allowed
    );
}

#[tokio::test]
async fn concurrency_slots_are_shared_and_lapse_when_not_released() {
    let server = RedisServer::start();
    let a = limiter(&server, Duration::from_millis(300));
    let b = limiter(&server, Duration::from_millis(300));
    let first = a.acquire("k", 2).await.unwrap().expect("slot 1");
    let second = b.acquire("k", 2).await.unwrap().expect("slot 2");
    assert_eq!(
        a.acquire("k", 2).await.unwrap(),
        None,
        "a third slot past the cap of 2"
    );
    b.release(second).await.unwrap();
    let third = a
        .acquire("k", 2)
        .await
        .unwrap()
        .expect("a released slot is free again");
    assert!(a.renew(&first).await.unwrap());
    // A replica "crashes": its leases are neither released nor renewed.
    drop(third);
    drop(first);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let after = b
        .acquire("k", 2)
        .await
        .unwrap()
        .expect("lapsed leases free their slots");
    assert!(b.acquire("k", 2).await.unwrap().is_some());
    assert!(b.acquire("k", 2).await.unwrap().is_none());
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        !b.renew(&after).await.unwrap(),
        "a lapsed lease cannot be renewed"
    );
}

#[tokio::test]
async fn an_unreachable_redis_is_reported_promptly_and_recovery_is_automatic() {
    let server = RedisServer::start();
    let lim = limiter(&server, Duration::from_secs(60));
    assert!(lim.check_rate("k", 100.0, 10).await.unwrap().allowed);
    let port = server.stop();
    let started = Instant::now();
    let err = lim.check_rate("k", 100.0, 10).await.unwrap_err();
    assert!(err.to_string().contains("Redis"), "{err}");
    // Bounded by the short timeouts, not a TCP default of minutes (generous for a busy CI).
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let _back = RedisServer::start_on(port);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match lim.check_rate("k", 100.0, 10).await {
            Ok(d) => {
                assert!(d.allowed);
                break;
            }
            Err(e) => assert!(Instant::now() < deadline, "no recovery within 10 s: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
