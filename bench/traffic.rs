//! Cost of the traffic policy per request, in ns, with ratios against baselines measured in
//! the same run (the machine is shared: compare ratios, not raw figures, across runs):
//!
//! - choosing the version (sticky by key over three versions, or drawn) and the mirror
//!   decision; a local token reservation and its settlement (one key, and 100k keys shuffled);
//!   all three together per request, against the issue's budget of 5 µs;
//! - the response cache: building the key of a request with a 4 KB input (SHA-256 over it),
//!   a hit on a 4 KB answer (one thread, and two threads on one model), a miss plus insert
//!   (evicting once full); the baselines are copying the 4 KB answer once, what serving it
//!   costs at the least, and building the key, what every cached request pays.
//!
//! Bounded: about 0.3 s per case, a few seconds in all.
//!
//! `cargo bench -p infergate-traffic --bench traffic`

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use infergate_traffic::cache::ResponseCache;
use infergate_traffic::cache_key::{CacheKey, KeyBuilder};
use infergate_traffic::choose::{Pick, Router};
use infergate_traffic::period::Period;
use infergate_traffic::policy::TrafficPolicy;
use infergate_traffic::tokens::{TokenBudget, TokenLimiter, TokenLimits};
use rand::seq::SliceRandom;

const CASE: Duration = Duration::from_millis(300);

/// ns per call of `f`, run in batches of `batch` until `CASE` has passed.
fn measure(batch: u64, mut f: impl FnMut(u64)) -> f64 {
    for i in 0..batch {
        f(i);
    }
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < CASE {
        for i in 0..batch {
            f(n + i);
        }
        n += batch;
    }
    start.elapsed().as_nanos() as f64 / n as f64
}

fn input_key(data: &[u8], salt: u64) -> CacheKey {
    let mut k = KeyBuilder::new("minilm", 1);
    k.file_sha256(&[7u8; 32])
        .config_digest(&[9u8; 32])
        .input("input_ids", "INT64", &[1, 512], data)
        .output("last_hidden_state", b"")
        .parameter("binary_data_output", b"true")
        .parameter("salt", &salt.to_le_bytes());
    k.finish()
}

fn main() {
    let answer = vec![3u8; 4096];
    let copy_ns = measure(1000, |_| {
        black_box(black_box(&answer[..]).to_vec());
    });

    // The split: the issue's example policy over three versions.
    let policy = TrafficPolicy::from_json(
        br#"{"split": [{"version": 1, "weight": 80}, {"version": 2, "weight": 15}, {"version": 3, "weight": 5}],
             "sticky": "key", "mirror": {"version": 4, "percent": 10}}"#,
    )
    .expect("valid policy");
    let router = Router::new(&policy);
    let callers: Vec<String> = (0..1024).map(|i| format!("{}", 100_000 + i)).collect();
    let sticky_ns = measure(1024, |i| {
        let caller = callers[(i % 1024) as usize].as_bytes();
        black_box(router.choose(Pick::Caller(black_box(caller))));
    });
    let draw_ns = measure(1024, |i| {
        black_box(router.choose(Pick::Draw(black_box(i))));
    });
    let mirror_ns = measure(1024, |i| {
        black_box(router.mirror(1, black_box(i)));
    });

    // Token limits: both limits, generous enough that nothing is refused.
    let limits = TokenLimits {
        tokens_per_minute: Some(1_000_000_000),
        token_budget: Some(TokenBudget {
            tokens: 1_000_000_000_000,
            period: Period::Month,
        }),
    };
    let tokens = TokenLimiter::new();
    let one_key_ns = measure(1000, |_| {
        if let Ok(Some(r)) = tokens.reserve(black_box(7), &limits, 300) {
            black_box(r.settle(120));
        }
    });
    let mut keys: Vec<i64> = (1..=100_000).collect();
    keys.shuffle(&mut rand::rng());
    for &k in &keys {
        drop(tokens.reserve(k, &limits, 1));
    }
    let many_keys_ns = measure(1000, |i| {
        let k = keys[(i % keys.len() as u64) as usize];
        if let Ok(Some(r)) = tokens.reserve(k, &limits, 300) {
            black_box(r.settle(120));
        }
    });
    let per_request_ns = measure(1000, |i| {
        let k = keys[(i % keys.len() as u64) as usize];
        let caller = callers[(i % 1024) as usize].as_bytes();
        let version = router.choose(Pick::Caller(caller)).unwrap_or(1);
        black_box(router.mirror(version, i));
        if let Ok(Some(r)) = tokens.reserve(k, &limits, 300) {
            black_box(r.settle(120));
        }
    });

    // The response cache, 64 MiB, with 1000 answers of 4 KB in it.
    let cache: ResponseCache<u64> = ResponseCache::new(64 << 20);
    let model = cache.model("minilm");
    let data = vec![5u8; 4096];
    let stored: Vec<CacheKey> = (0..1000).map(|i| input_key(&data, i)).collect();
    for (i, k) in stored.iter().enumerate() {
        model.insert(*k, 1, Bytes::from(answer.clone()), i as u64);
    }
    let key_ns = measure(200, |i| {
        black_box(input_key(black_box(&data), i % 1000));
    });
    let hit_ns = measure(1000, |i| {
        black_box(model.get(&stored[(i % 1000) as usize]).expect("stored"));
    });
    let threads = 2;
    let per_thread: Vec<_> = (0..threads)
        .map(|t| {
            let (model, stored) = (model.clone(), stored.clone());
            std::thread::spawn(move || {
                measure(1000, |i| {
                    black_box(model.get(&stored[((i + t * 500) % 1000) as usize]));
                })
            })
        })
        .collect();
    let contended: Vec<f64> = per_thread
        .into_iter()
        .map(|h| h.join().expect("bench thread"))
        .collect();
    let contended_ns = contended.iter().sum::<f64>() / contended.len() as f64;
    // Keys never stored (the cache fills up and evicts, as a busy one does), made beforehand.
    let fresh: Vec<CacheKey> = (0..200_000u64)
        .map(|i| {
            let mut k = KeyBuilder::new("fresh", 1);
            k.parameter("i", &i.to_le_bytes());
            k.finish()
        })
        .collect();
    let body = Bytes::from(answer.clone());
    let miss_insert_ns = measure(1000, |i| {
        let k = fresh[(i % fresh.len() as u64) as usize];
        if model.get(&k).is_none() {
            model.insert(k, 1, body.clone(), i);
        }
    });
    let stats = cache.stats();
    assert!(stats.hits > 0 && stats.inserts > 0);

    println!("| case | ns | ratio |");
    println!("| --- | --- | --- |");
    println!("| baseline: copy a 4 KB answer | {copy_ns:.0} | 1.00 |");
    let row = |name: &str, ns: f64, base: f64, of: &str| {
        println!("| {name} | {ns:.0} | {:.2} {of} |", ns / base);
    };
    row(
        "choose, sticky by key, 3 versions",
        sticky_ns,
        copy_ns,
        "of the copy",
    );
    row("choose, drawn", draw_ns, copy_ns, "of the copy");
    row("mirror decision", mirror_ns, copy_ns, "of the copy");
    row(
        "reserve + settle, one key",
        one_key_ns,
        copy_ns,
        "of the copy",
    );
    row(
        "reserve + settle, 100k keys shuffled",
        many_keys_ns,
        copy_ns,
        "of the copy",
    );
    row(
        "choose + mirror + reserve + settle per request (100k keys)",
        per_request_ns,
        5000.0,
        "of the 5 µs budget",
    );
    row(
        "cache key for a 4 KB input (SHA-256)",
        key_ns,
        copy_ns,
        "of the copy",
    );
    row(
        "cache hit, 4 KB answer, 1 thread",
        hit_ns,
        key_ns,
        "of building the key",
    );
    row(
        &format!("cache hit, 4 KB answer, {threads} threads on one model"),
        contended_ns,
        key_ns,
        "of building the key",
    );
    row(
        "cache miss + insert of a 4 KB answer",
        miss_insert_ns,
        key_ns,
        "of building the key",
    );
    println!(
        "\nlookup key + hit = {:.0} ns, {:.2} of the 4 KB copy; entries {}, bytes {}",
        key_ns + hit_ns,
        (key_ns + hit_ns) / copy_ns,
        cache.size().entries,
        cache.size().bytes
    );
}
