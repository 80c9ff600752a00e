//! The PostgreSQL store against SQLite, in one run: creating an API key (a write: PostgreSQL's
//! includes the round trips and the replica's own cache refresh) and checking one (the request
//! path: both read an in-memory cache, so the target is a ratio of ~1). A real PostgreSQL is
//! started for it (`scripts/setup.sh` installs it). Bounded: 300 creates and 200k checks each.
//!
//! `cargo bench -p infergate --bench store` (release), or `cargo test --workspace --bench store`
//! (debug, the same ratios less precisely).

// The bench starts a plain server only; the TLS variant is for the tests.
#[allow(dead_code)]
use infergate_store::test_postgres;

use infergate_store::auth::Scopes;
use infergate_store::{Store, StoreConfig};
use std::hint::black_box;
use std::time::{Duration, Instant};

const CREATES: usize = 300;
const CHECKS: usize = 200_000;

struct Figures {
    create_p50: Duration,
    create_p99: Duration,
    check_ns: f64,
}

fn measure(store: &Store) -> Figures {
    let scopes = Scopes::parse_list("infer").expect("scopes");
    let mut creates = Vec::with_capacity(CREATES);
    let mut secrets = Vec::with_capacity(CREATES);
    for i in 0..CREATES {
        let start = Instant::now();
        let (_, secret) = store.create_key(&format!("k{i}"), &scopes).expect("create");
        creates.push(start.elapsed());
        secrets.push(secret);
    }
    creates.sort();
    let start = Instant::now();
    for i in 0..CHECKS {
        let ok = store
            .authenticate(&secrets[i % secrets.len()])
            .expect("check");
        assert!(black_box(ok).is_some());
    }
    Figures {
        create_p50: creates[CREATES / 2],
        create_p99: creates[CREATES * 99 / 100],
        check_ns: start.elapsed().as_nanos() as f64 / CHECKS as f64,
    }
}

fn main() {
    let server = test_postgres::PgServer::start();
    let (sqlite_dir, pg_dir) = (
        tempfile::tempdir().expect("tmp"),
        tempfile::tempdir().expect("tmp"),
    );
    let sqlite = Store::open(sqlite_dir.path()).expect("SQLite store");
    let pg = Store::open_with(
        pg_dir.path(),
        &StoreConfig {
            url: Some(server.url()),
            ..StoreConfig::default()
        },
    )
    .expect("PostgreSQL store");
    let s = measure(&sqlite);
    let p = measure(&pg);
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!("| case | SQLite | PostgreSQL | PostgreSQL / SQLite |");
    println!("| --- | --- | --- | --- |");
    println!(
        "| key check (request path), ns | {:.0} | {:.0} | {:.2} |",
        s.check_ns,
        p.check_ns,
        p.check_ns / s.check_ns
    );
    println!(
        "| key create p50, µs | {:.0} | {:.0} | {:.2} |",
        us(s.create_p50),
        us(p.create_p50),
        us(p.create_p50) / us(s.create_p50)
    );
    println!(
        "| key create p99, µs | {:.0} | {:.0} | {:.2} |",
        us(s.create_p99),
        us(p.create_p99),
        us(p.create_p99) / us(s.create_p99)
    );
}
