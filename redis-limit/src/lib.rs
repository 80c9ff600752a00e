//! Per-key limits that hold across gateway replicas, kept in Redis.
//!
//! The rate limit is the gateway's GCRA (see `gateway/limits`) moved into one Lua
//! script: Redis runs a script atomically, so replicas racing for a key's last slot cannot
//! both win, and the script reads Redis's `TIME`, so replicas with skewed clocks still agree.
//! Scripts run by hash (`EVALSHA`, loaded on first use), one round trip per check.
//!
//! The concurrency cap is a set of leases per key, each expiring unless renewed: a replica that
//! crashes mid-request cannot leak its slots, they lapse after the lease time.
//!
//! Token limits (tokens per minute and a budget per UTC day or month) are reservations taken at
//! admission and settled when the answer is done, by one script (`tokens.lua`): see
//! [`RedisLimiter::reserve_tokens`].
//!
//! Errors are returned, never hidden: the gateway decides whether an unreachable Redis means
//! "admit under the local limiter" (fail-open) or 503 (fail-closed).

#![forbid(unsafe_code)]

mod tokens;

use std::time::Duration;

use infergate_traffic::tokens::{Refusal, Settlement, TokenLimits};

use rand::RngCore;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, Script};

pub use tokens::TokenReservation;
use tokens::TokenScript;

/// Redis could not give an answer: unreachable, timed out, or refused the script.
#[derive(Debug, thiserror::Error)]
#[error("rate-limit store (Redis) unavailable: {0}")]
pub struct Unavailable(#[from] redis::RedisError);

/// The answer to a rate check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateDecision {
    pub allowed: bool,
    /// Requests still allowed right now.
    pub remaining: u64,
    /// Until the whole burst is available again.
    pub reset: Duration,
    /// When refused, how long until a request would be allowed.
    pub retry_after: Duration,
}

/// A held concurrency slot. Release it with [`RedisLimiter::release`]; one that is never
/// released (a crash) lapses after the lease time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    key: String,
    id: String,
}

/// Connection settings. Timeouts are short: a limiter that waits seconds for Redis is worse
/// than one that gives up and lets the gateway apply its fallback policy.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub response_timeout: Duration,
    pub connect_timeout: Duration,
    /// How long a concurrency lease lives without renewal.
    pub lease_ttl: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            response_timeout: Duration::from_millis(250),
            connect_timeout: Duration::from_millis(500),
            lease_ttl: Duration::from_secs(60),
        }
    }
}

pub struct RedisLimiter {
    connection: ConnectionManager,
    prefix: String,
    lease_ttl: Duration,
    gcra: Script,
    acquire: Script,
    renew: Script,
    tokens: TokenScript,
}

impl RedisLimiter {
    /// A limiter on `url` (`redis://host:port/db`, `rediss://` for TLS) whose keys start with
    /// `prefix`. Connects lazily: a gateway starts even while Redis is down, and reconnects by
    /// itself when it is back.
    pub fn new(url: &str, prefix: &str, settings: Settings) -> Result<RedisLimiter, Unavailable> {
        let client = Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(settings.response_timeout))
            .set_connection_timeout(Some(settings.connect_timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        Ok(RedisLimiter {
            connection: ConnectionManager::new_lazy_with_config(client, config)?,
            prefix: prefix.to_owned(),
            lease_ttl: settings.lease_ttl,
            gcra: Script::new(include_str!("gcra.lua")),
            acquire: Script::new(include_str!("acquire.lua")),
            renew: Script::new(include_str!("renew.lua")),
            tokens: TokenScript::new(),
        })
    }

    /// Takes one request from key `key`'s budget of `rps` per second with bursts of `burst`.
    pub async fn check_rate(
        &self,
        key: &str,
        rps: f64,
        burst: u32,
    ) -> Result<RateDecision, Unavailable> {
        let interval_us = ((1e6 / rps).round() as u64).max(1);
        let tau_us = interval_us.saturating_mul(u64::from(burst.max(1)));
        let mut connection = self.connection.clone();
        let (allowed, remaining, reset_us, retry_us): (i64, i64, i64, i64) = self
            .gcra
            .key(format!("{}:rate:{key}", self.prefix))
            .arg(interval_us)
            .arg(tau_us)
            .invoke_async(&mut connection)
            .await?;
        let micros = |v: i64| Duration::from_micros(u64::try_from(v).unwrap_or(0));
        Ok(RateDecision {
            allowed: allowed == 1,
            remaining: u64::try_from(remaining).unwrap_or(0),
            reset: micros(reset_us),
            retry_after: micros(retry_us),
        })
    }

    /// One of key `key`'s `cap` concurrent slots, or `None` when all are held.
    pub async fn acquire(&self, key: &str, cap: u32) -> Result<Option<Lease>, Unavailable> {
        let mut id = [0u8; 12];
        rand::rng().fill_bytes(&mut id);
        let lease = Lease {
            key: format!("{}:slots:{key}", self.prefix),
            id: id.iter().map(|b| format!("{b:02x}")).collect(),
        };
        let mut connection = self.connection.clone();
        let held: i64 = self
            .acquire
            .key(&lease.key)
            .arg(&lease.id)
            .arg(cap)
            .arg(ttl_ms(self.lease_ttl))
            .invoke_async(&mut connection)
            .await?;
        Ok((held >= 0).then_some(lease))
    }

    /// Keeps a long request's slot: call well within the lease time. `false`: the lease had
    /// already lapsed.
    pub async fn renew(&self, lease: &Lease) -> Result<bool, Unavailable> {
        let mut connection = self.connection.clone();
        let held: i64 = self
            .renew
            .key(&lease.key)
            .arg(&lease.id)
            .arg(ttl_ms(self.lease_ttl))
            .invoke_async(&mut connection)
            .await?;
        Ok(held == 1)
    }

    pub async fn release(&self, lease: Lease) -> Result<(), Unavailable> {
        let mut connection = self.connection.clone();
        redis::cmd("ZREM")
            .arg(&lease.key)
            .arg(&lease.id)
            .query_async::<i64>(&mut connection)
            .await?;
        Ok(())
    }

    /// Reserves `tokens` (a request's prompt plus its `max_tokens`) for key `key` under
    /// `limits`, against both limits or neither; one round trip. The inner `Err` is a refusal
    /// (429, or 400 when it can never fit); `Ok(None)`: the key has no token limit.
    pub async fn reserve_tokens(
        &self,
        key: &str,
        limits: &TokenLimits,
        tokens: u64,
    ) -> Result<Result<Option<TokenReservation>, Refusal>, Unavailable> {
        if limits.is_unlimited() {
            return Ok(Ok(None));
        }
        let mut connection = self.connection.clone();
        let r = self
            .tokens
            .reserve(&mut connection, &self.prefix, key, limits, tokens, None)
            .await?;
        Ok(r.map(Some))
    }

    /// Settles a reservation with the tokens the request used (for a cancelled stream, those
    /// generated before the cancel); one round trip, none when it used exactly its reservation.
    /// If this fails (Redis unreachable) the reservation stays fully charged.
    pub async fn settle_tokens(
        &self,
        reservation: TokenReservation,
        used: u64,
    ) -> Result<Settlement, Unavailable> {
        let mut connection = self.connection.clone();
        Ok(self
            .tokens
            .settle(&mut connection, reservation, used, None)
            .await?)
    }

    /// [`reserve_tokens`](Self::reserve_tokens) at a given Unix time (µs) instead of Redis's
    /// clock: for tests that cross a period's end without waiting for it. Never for serving:
    /// replicas would disagree on "now".
    pub async fn reserve_tokens_at(
        &self,
        key: &str,
        limits: &TokenLimits,
        tokens: u64,
        unix_us: u64,
    ) -> Result<Result<TokenReservation, Refusal>, Unavailable> {
        let mut connection = self.connection.clone();
        Ok(self
            .tokens
            .reserve(
                &mut connection,
                &self.prefix,
                key,
                limits,
                tokens,
                Some(unix_us),
            )
            .await?)
    }

    /// [`settle_tokens`](Self::settle_tokens) at a given Unix time (µs); tests only.
    pub async fn settle_tokens_at(
        &self,
        reservation: TokenReservation,
        used: u64,
        unix_us: u64,
    ) -> Result<Settlement, Unavailable> {
        let mut connection = self.connection.clone();
        Ok(self
            .tokens
            .settle(&mut connection, reservation, used, Some(unix_us))
            .await?)
    }

    /// The lease time, for callers that schedule renewals.
    pub fn lease_ttl(&self) -> Duration {
        self.lease_ttl
    }
}

fn ttl_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}
