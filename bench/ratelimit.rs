//! Cost of the per-key limiter: ns per admitted-or-refused request with 100k keys, one thread
//! (keys in a shuffled order, so shard and cache behaviour is realistic) and two threads
//! hammering one key (the CAS loop under contention). Bounded: ~1 s per case.
//!
//! `cargo bench -p infergate --bench ratelimit`

use infergate_limits::{Limiter, Limits, RateLimit};
use rand::seq::SliceRandom;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEYS: i64 = 100_000;

fn limits() -> Limits {
    Limits {
        rate: Some(RateLimit::new(1000.0, Some(100)).expect("valid limit")),
        max_concurrent: Some(64),
    }
}

fn run(limiter: &Limiter, keys: &[i64], budget: Duration) -> (u64, Duration) {
    let limits = limits();
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < budget {
        for &k in keys {
            black_box(limiter.check(k, &limits).is_ok());
        }
        n += keys.len() as u64;
    }
    (n, start.elapsed())
}

fn main() {
    let limiter = Arc::new(Limiter::new());
    let mut keys: Vec<i64> = (1..=KEYS).collect();
    keys.shuffle(&mut rand::rng());
    // First touch creates each key's state.
    let cold = Instant::now();
    let first = limits();
    for &k in &keys {
        black_box(limiter.check(k, &first).is_ok());
    }
    let cold = cold.elapsed();
    assert_eq!(limiter.len(), KEYS as usize);
    let (n, t) = run(&limiter, &keys, Duration::from_secs(1));
    println!("| case | ns/request |");
    println!("| --- | --- |");
    println!(
        "| first request of each of 100k keys (state created) | {:.0} |",
        cold.as_nanos() as f64 / KEYS as f64
    );
    println!(
        "| 100k keys, shuffled, 1 thread | {:.0} |",
        t.as_nanos() as f64 / n as f64
    );
    let threads = 2;
    let hot = [7i64; 1000];
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let limiter = limiter.clone();
            std::thread::spawn(move || run(&limiter, &hot, Duration::from_secs(1)))
        })
        .collect();
    let mut total = 0u64;
    let mut longest = Duration::ZERO;
    for h in handles {
        let (n, t) = h.join().expect("bench thread");
        total += n;
        longest = longest.max(t);
    }
    println!(
        "| one key, {threads} threads contending (per request, wall) | {:.0} |",
        longest.as_nanos() as f64 / total as f64 * threads as f64
    );
}
