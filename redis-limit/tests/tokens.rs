//! Token reservations against a real Redis: two limiters stand for two gateway replicas
//! sharing one key's tokens.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::RedisServer;
use infergate_redis_limit::{RedisLimiter, Settings, TokenReservation};
use infergate_traffic::period::{days_from_civil, Period};
use infergate_traffic::tokens::{TokenBudget, TokenLimit, TokenLimits};

fn replica(server: &RedisServer) -> RedisLimiter {
    RedisLimiter::new(&server.url(), "test", Settings::default()).unwrap()
}

fn budget(tokens: u64, period: Period) -> TokenLimits {
    TokenLimits {
        tokens_per_minute: None,
        token_budget: Some(TokenBudget { tokens, period }),
    }
}

fn per_minute(tpm: u64) -> TokenLimits {
    TokenLimits {
        tokens_per_minute: Some(tpm),
        token_budget: None,
    }
}

async fn pttl(server: &RedisServer, key: &str) -> i64 {
    let client = redis::Client::open(server.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("PTTL")
        .arg(key)
        .query_async(&mut c)
        .await
        .unwrap()
}

const SEC: u64 = 1_000_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_admit_one_budget_not_two() {
    let server = RedisServer::start();
    let replicas = Arc::new([replica(&server), replica(&server)]);
    let lim = budget(1000, Period::Day);
    // 40 requests of 70 tokens race from both replicas at once: 14 fit in 1000.
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..40 {
        let replicas = replicas.clone();
        tasks.spawn(async move { replicas[i % 2].reserve_tokens("k", &lim, 70).await.unwrap() });
    }
    let mut held: Vec<TokenReservation> = Vec::new();
    let mut refused = Vec::new();
    while let Some(answer) = tasks.join_next().await {
        match answer.unwrap() {
            Ok(r) => held.push(r.expect("the key has a limit")),
            Err(refusal) => refused.push(refusal),
        }
    }
    assert_eq!(
        held.len(),
        14,
        "admitted {} reservations of 70 from a budget of 1000",
        held.len()
    );
    for r in &refused {
        assert_eq!(r.limit, TokenLimit::Budget);
        let wait = r.retry_after_s().expect("a later day has room");
        assert!((1..=86_400).contains(&wait), "{wait}");
        assert!(r.message().contains("next UTC day"), "{}", r.message());
    }
    // Ten of them used only 20 of their 70: 500 come back, through either replica.
    for (i, r) in held.drain(..10).enumerate() {
        let s = replicas[i % 2].settle_tokens(r, 20).await.unwrap();
        assert_eq!(s.refunded, 50);
    }
    let b = replicas[1]
        .reserve_tokens("k", &lim, 520)
        .await
        .unwrap()
        .expect("20 left plus 500 refunded")
        .expect("limited");
    assert_eq!(b.quota().budget.unwrap().remaining, 0);
    let r = replicas[0]
        .reserve_tokens("k", &lim, 1)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(r.quota.budget.unwrap().remaining, 0);
    // Larger than the whole budget: never, whatever the wait.
    let r = replicas[0]
        .reserve_tokens("other", &lim, 1001)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(r.retry_after, None);
    // No limit: nothing to reserve.
    assert!(replicas[0]
        .reserve_tokens("k", &TokenLimits::default(), 5)
        .await
        .unwrap()
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn per_minute_refunds_and_both_limits_or_neither() {
    let server = RedisServer::start();
    let (a, b) = (replica(&server), replica(&server));
    // One instant for every call, so the figures are exact: 2025-06-01 12:00 UTC.
    let t = (days_from_civil(2025, 6, 1) as u64 * 86_400 + 43_200) * SEC;
    let lim = per_minute(600); // 10 tokens per second, a minute's worth at once
    let first = a
        .reserve_tokens_at("k", &lim, 400, t)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.quota().per_minute.unwrap().remaining, 200);
    let r = b
        .reserve_tokens_at("k", &lim, 300, t)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(r.limit, TokenLimit::PerMinute);
    // 100 tokens short at 10 per second.
    assert_eq!(r.retry_after, Some(Duration::from_secs(10)));
    assert_eq!(r.quota.per_minute.unwrap().remaining, 200);
    // Ten seconds later it fits.
    let later = b
        .reserve_tokens_at("k", &lim, 300, t + 10 * SEC)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(later.quota().per_minute.unwrap().remaining, 0);
    // The first used 100 of its 400: 300 are back at once, on the other replica too.
    assert_eq!(
        a.settle_tokens_at(first, 100, t + 10 * SEC)
            .await
            .unwrap()
            .refunded,
        300
    );
    let third = b
        .reserve_tokens_at("k", &lim, 300, t + 10 * SEC)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(third.quota().per_minute.unwrap().remaining, 0);
    let never = b
        .reserve_tokens_at("k", &lim, 601, t)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(never.retry_after, None);
    assert!(
        never.message().contains("fewer max_tokens"),
        "{}",
        never.message()
    );

    // Both limits: a refusal by the budget charges the minute nothing.
    let both = TokenLimits {
        tokens_per_minute: Some(1000),
        token_budget: Some(TokenBudget {
            tokens: 100,
            period: Period::Month,
        }),
    };
    let r = a
        .reserve_tokens_at("both", &both, 150, t)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(r.limit, TokenLimit::Budget);
    assert_eq!(r.retry_after, None);
    let ok = a
        .reserve_tokens_at("both", &both, 100, t)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        ok.quota().per_minute.unwrap().remaining,
        900,
        "the refused 150 left the minute alone"
    );
    // Using more than reserved charges the excess to both.
    assert_eq!(a.settle_tokens_at(ok, 130, t).await.unwrap().extra, 30);
    let r = a
        .reserve_tokens_at("both", &both, 1, t)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(r.quota.budget.unwrap().remaining, 0);
    assert_eq!(r.quota.per_minute.unwrap().remaining, 870);

    // On Redis's own clock: the same rules (no exact figures, time passes).
    let real = a
        .reserve_tokens("clock", &lim, 600)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let r = b
        .reserve_tokens("clock", &lim, 600)
        .await
        .unwrap()
        .unwrap_err();
    assert!(r.retry_after.unwrap() <= Duration::from_secs(60));
    a.settle_tokens(real, 0).await.unwrap();
    let r = b
        .reserve_tokens("clock", &lim, 600)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    b.settle_tokens(r, 600).await.unwrap();
}

#[tokio::test]
async fn periods_roll_over_at_utc_midnight_and_month_start() {
    let server = RedisServer::start();
    let l = replica(&server);
    let lim = budget(100, Period::Month);
    let april = days_from_civil(2024, 4, 1) as u64 * 86_400 * SEC;
    let last_second_of_march = april - SEC;
    let march = l
        .reserve_tokens_at("k", &lim, 100, last_second_of_march)
        .await
        .unwrap()
        .unwrap();
    let q = march.quota().budget.unwrap();
    assert_eq!(q.period_start, days_from_civil(2024, 3, 1) * 86_400);
    assert_eq!(q.period_end as u64 * SEC, april);
    let r = l
        .reserve_tokens_at("k", &lim, 1, last_second_of_march)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(r.retry_after, Some(Duration::from_secs(1)));
    // April: a fresh budget.
    let fresh = l
        .reserve_tokens_at("k", &lim, 100, april)
        .await
        .unwrap()
        .unwrap();
    // March's reservation settles in April: its refund does not go to April.
    assert_eq!(
        l.settle_tokens_at(march, 0, april).await.unwrap().refunded,
        100
    );
    assert!(l
        .reserve_tokens_at("k", &lim, 1, april)
        .await
        .unwrap()
        .is_err());
    // April's own refund does.
    l.settle_tokens_at(fresh, 40, april).await.unwrap();
    let again = l
        .reserve_tokens_at("k", &lim, 60, april)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.quota().budget.unwrap().remaining, 0);
    // The budget key lives until a minute after its period: April has 30 days.
    let ttl = pttl(&server, "test:tok:{k}:budget").await;
    assert!(
        (30 * 86_400_000..=30 * 86_400_000 + 60_000).contains(&ttl),
        "{ttl}"
    );

    // A daily budget at midnight UTC.
    let day = budget(10, Period::Day);
    let midnight = days_from_civil(2025, 1, 1) as u64 * 86_400 * SEC;
    let late = l
        .reserve_tokens_at("d", &day, 10, midnight - 1)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        late.quota().budget.unwrap().reset_s,
        1,
        "less than a second left, rounded up"
    );
    assert!(l
        .reserve_tokens_at("d", &day, 10, midnight)
        .await
        .unwrap()
        .is_ok());
}

#[tokio::test]
async fn the_script_and_period_rs_agree_on_every_boundary() {
    let server = RedisServer::start();
    let l = replica(&server);
    let mut instants = Vec::new();
    for year in 1970..2110 {
        for month in 1..=12 {
            let t = days_from_civil(year, month, 1) * 86_400;
            instants.extend([t, t + 1, t + 43_200]);
            if t > 0 {
                instants.push(t - 1);
            }
        }
    }
    // And a spread of arbitrary instants (a fixed LCG: the same every run).
    let mut x = 12_345u64;
    for _ in 0..500 {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        instants.push(((x >> 33) % 4_400_000_000) as i64);
    }
    for period in [Period::Month, Period::Day] {
        let lim = budget(1, period);
        for &t in instants
            .iter()
            .step_by(if period == Period::Day { 7 } else { 1 })
        {
            let r = l
                .reserve_tokens_at("p", &lim, 0, t as u64 * SEC)
                .await
                .unwrap()
                .unwrap();
            let q = r.quota().budget.unwrap();
            assert_eq!(
                (q.period_start, q.period_end),
                period.bounds(t),
                "{period:?} at {t}"
            );
        }
    }
}

#[tokio::test]
async fn keys_expire_by_themselves() {
    let server = RedisServer::start();
    let l = replica(&server);
    let r = l
        .reserve_tokens("e", &per_minute(60), 30)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    // Half a minute of lead: the TAT key lives that long.
    let ttl = pttl(&server, "test:tok:{e}:minute").await;
    assert!((1..=30_001).contains(&ttl), "{ttl}");
    // Nothing used: the TAT falls into the past and the key goes at once.
    l.settle_tokens(r, 0).await.unwrap();
    assert_eq!(
        pttl(&server, "test:tok:{e}:minute").await,
        -2,
        "the key should be gone"
    );
    let r = l
        .reserve_tokens("e", &budget(5, Period::Day), 5)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let ttl = pttl(&server, "test:tok:{e}:budget").await;
    let reset_ms = r.quota().budget.unwrap().reset_s as i64 * 1000;
    assert!(ttl > 0 && ttl <= reset_ms + 61_000, "{ttl} vs {reset_ms}");
}
