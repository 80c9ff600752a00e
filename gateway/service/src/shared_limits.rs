//! Per-key rate limits shared by every gateway replica, through Redis
//! (`[limits] shared_url`, `--ratelimit redis://...`).
//!
//! The rate is checked in Redis (crate `infergate-redis-limit`: the same GCRA as
//! [`infergate_limits`], one Lua script on Redis's clock), so N replicas together admit what one
//! would. Concurrency caps stay per replica: a key capped at 4 may run 4 requests on each
//! replica (the book's replicas page says so). While Redis cannot answer, [`SharedFailure`] decides: `open`
//! admits under this replica's own limiter, `closed` refuses with 503.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use infergate_redis_limit::{RedisLimiter, Settings, TokenReservation};
use infergate_traffic::tokens::{Refusal, TokenLimits};

use crate::config::SharedFailure;
use infergate_limits::{LimitKind, Quota, RateLimit, Rejection};

pub struct SharedLimits {
    redis: RedisLimiter,
    failure: SharedFailure,
    /// Whether the last call failed: outages are logged when they start and end, not per
    /// request.
    down: AtomicBool,
}

/// What the shared limiter said about one request.
pub enum Verdict {
    Allowed(Quota),
    Refused(Rejection),
    /// Redis did not answer and the policy is to fail open: use the local limiter.
    Fallback,
}

impl SharedLimits {
    /// Connects lazily: the gateway starts while Redis is down and picks it up when it is back.
    pub fn new(url: &str, failure: SharedFailure) -> Result<SharedLimits, String> {
        let redis = RedisLimiter::new(url, "infergate", Settings::default())
            .map_err(|e| format!("[limits] shared_url: {e}"))?;
        Ok(SharedLimits {
            redis,
            failure,
            down: AtomicBool::new(false),
        })
    }

    /// Takes one request of key `key_id` from its shared budget.
    pub async fn check(&self, key_id: i64, rate: &RateLimit) -> Verdict {
        match self
            .redis
            .check_rate(&key_id.to_string(), rate.rps, rate.burst)
            .await
        {
            Ok(decision) => {
                if self.down.swap(false, Ordering::Relaxed) {
                    tracing::info!("shared rate limiter (Redis) answers again");
                }
                let quota = Quota {
                    policy: *rate,
                    remaining: decision.remaining,
                    reset_s: whole_seconds(decision.reset),
                };
                if decision.allowed {
                    Verdict::Allowed(quota)
                } else {
                    let wait_ns =
                        u64::try_from(decision.retry_after.as_nanos()).unwrap_or(u64::MAX);
                    Verdict::Refused(rate.exceeded(
                        wait_ns,
                        Quota {
                            remaining: 0,
                            ..quota
                        },
                    ))
                }
            }
            Err(error) => {
                if !self.down.swap(true, Ordering::Relaxed) {
                    tracing::warn!(%error, policy = ?self.failure, "shared rate limiter (Redis) unavailable");
                }
                match self.failure {
                    SharedFailure::Open => Verdict::Fallback,
                    SharedFailure::Closed => Verdict::Refused(Rejection {
                        kind: LimitKind::Unavailable,
                        retry_after_s: 1,
                        quota: None,
                        message: "the shared rate limiter is unavailable (the server's Redis does not answer); retry shortly".into(),
                    }),
                }
            }
        }
    }
}

/// What the shared limiter said about a token reservation.
pub enum TokenVerdict {
    /// Reserved in Redis (`None`: the key has no token limit).
    Reserved(Option<TokenReservation>),
    Refused(Refusal),
    /// Redis did not answer and the policy is to fail open: use the local limiter.
    Fallback,
    /// Redis did not answer and the policy is to fail closed.
    Unavailable,
}

impl SharedLimits {
    /// Reserves `tokens` of key `key_id`'s token limits in Redis, so that every replica admits
    /// one budget between them.
    pub async fn reserve_tokens(
        &self,
        key_id: i64,
        limits: &TokenLimits,
        tokens: u64,
    ) -> TokenVerdict {
        match self
            .redis
            .reserve_tokens(&key_id.to_string(), limits, tokens)
            .await
        {
            Ok(Ok(reservation)) => {
                if self.down.swap(false, Ordering::Relaxed) {
                    tracing::info!("shared rate limiter (Redis) answers again");
                }
                TokenVerdict::Reserved(reservation)
            }
            Ok(Err(refusal)) => TokenVerdict::Refused(refusal),
            Err(error) => {
                if !self.down.swap(true, Ordering::Relaxed) {
                    tracing::warn!(%error, policy = ?self.failure, "shared rate limiter (Redis) unavailable");
                }
                match self.failure {
                    SharedFailure::Open => TokenVerdict::Fallback,
                    SharedFailure::Closed => TokenVerdict::Unavailable,
                }
            }
        }
    }

    /// Settles a reservation made in Redis; if Redis cannot be reached it stays fully charged
    /// (the safe side), which is logged.
    pub async fn settle_tokens(&self, reservation: TokenReservation, used: u64) {
        if let Err(error) = self.redis.settle_tokens(reservation, used).await {
            tracing::warn!(%error, "could not settle a token reservation in Redis: it stays fully charged");
        }
    }
}

fn whole_seconds(d: Duration) -> u64 {
    d.as_nanos()
        .div_ceil(1_000_000_000)
        .try_into()
        .unwrap_or(u64::MAX)
}
