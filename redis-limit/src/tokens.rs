//! Token limits shared by replicas: `infergate-traffic`'s reservations (per-minute GCRA and a
//! UTC day/month budget) kept in Redis by one script (`tokens.lua`), one round trip to reserve
//! and one to settle, on Redis's clock.
//!
//! The rules are the local limiter's (`infergate_traffic::tokens`): a reservation is charged
//! in full at admission against both limits or neither, settling refunds the unused part to
//! the period that was charged, an excess is charged on top, and a reservation never settled
//! counts as fully used. N replicas together admit one budget, not N.

use std::time::Duration;

use infergate_traffic::tokens::{
    budget_quota, minute_charge, minute_quota, Refusal, Settlement, TokenLimit, TokenLimits,
    TokenQuota,
};
use redis::aio::ConnectionLike;
use redis::{RedisError, Script};

const MICROS_PER_MINUTE: u64 = 60_000_000;

/// A reservation held in Redis. Settle it with the tokens used; dropped without settling it
/// counts as fully used. Not `Clone`: a reservation settles once.
#[must_use = "settle the reservation with the tokens used, or the whole reservation is charged"]
#[derive(Debug)]
pub struct TokenReservation {
    minute_key: String,
    budget_key: String,
    tokens: u64,
    tpm: Option<u64>,
    /// The budget's period and the start of the period the tokens were charged to.
    budget: Option<(&'static str, i64)>,
    quota: TokenQuota,
}

impl TokenReservation {
    pub fn tokens(&self) -> u64 {
        self.tokens
    }

    /// The key's quotas right after this reservation (for the response's headers).
    pub fn quota(&self) -> &TokenQuota {
        &self.quota
    }
}

pub(crate) struct TokenScript {
    script: Script,
}

/// The Unix time (µs) a call runs at: `None` is Redis's `TIME`.
pub(crate) type At = Option<u64>;

fn at_arg(at: At) -> String {
    at.map(|us| us.to_string()).unwrap_or_default()
}

impl TokenScript {
    pub(crate) fn new() -> TokenScript {
        TokenScript {
            script: Script::new(include_str!("tokens.lua")),
        }
    }

    pub(crate) async fn reserve<C: ConnectionLike>(
        &self,
        connection: &mut C,
        prefix: &str,
        key: &str,
        limits: &TokenLimits,
        tokens: u64,
        at: At,
    ) -> Result<Result<TokenReservation, Refusal>, RedisError> {
        // One hash tag for both keys: a Redis Cluster keeps them in one slot, as a script
        // touching both needs.
        let minute_key = format!("{prefix}:tok:{{{key}}}:minute");
        let budget_key = format!("{prefix}:tok:{{{key}}}:budget");
        let charge = limits
            .tokens_per_minute
            .map_or(0, |tpm| minute_charge(tokens, tpm, MICROS_PER_MINUTE));
        let period = limits.token_budget.map_or("", |b| b.period.as_str());
        let budget = limits.token_budget.map_or(0, |b| b.tokens);
        let (admitted, refused_by, retry_us, ahead, spent, start, end, now_s): (
            i64,
            i64,
            i64,
            i64,
            i64,
            i64,
            i64,
            i64,
        ) = self
            .script
            .key(&minute_key)
            .key(&budget_key)
            .arg("reserve")
            .arg(at_arg(at))
            .arg(period)
            .arg(tokens)
            .arg(charge)
            .arg(budget)
            .invoke_async(connection)
            .await?;
        let count = |v: i64| u64::try_from(v).unwrap_or(0);
        let quota = TokenQuota {
            per_minute: limits
                .tokens_per_minute
                .map(|tpm| minute_quota(tpm, count(ahead), MICROS_PER_MINUTE)),
            budget: limits
                .token_budget
                .map(|b| budget_quota(b, count(spent), start, end, now_s)),
        };
        if admitted != 1 {
            return Ok(Err(Refusal {
                limit: if refused_by == 1 {
                    TokenLimit::PerMinute
                } else {
                    TokenLimit::Budget
                },
                requested: tokens,
                retry_after: (retry_us >= 0).then(|| Duration::from_micros(count(retry_us))),
                quota,
            }));
        }
        Ok(Ok(TokenReservation {
            minute_key,
            budget_key,
            tokens,
            tpm: limits.tokens_per_minute,
            budget: limits.token_budget.map(|b| (b.period.as_str(), start)),
            quota,
        }))
    }

    pub(crate) async fn settle<C: ConnectionLike>(
        &self,
        connection: &mut C,
        reservation: TokenReservation,
        used: u64,
        at: At,
    ) -> Result<Settlement, RedisError> {
        let r = reservation;
        let charged = |n: u64| {
            r.tpm
                .map_or(0, |tpm| minute_charge(n, tpm, MICROS_PER_MINUTE))
        };
        // Signed changes: negative refunds, positive charges the excess.
        let minute_delta = i128::from(charged(used)) - i128::from(charged(r.tokens));
        let tokens_delta = i128::from(used) - i128::from(r.tokens);
        if minute_delta == 0 && tokens_delta == 0 {
            return Ok(Settlement {
                refunded: 0,
                extra: 0,
            });
        }
        let (period, start) = r.budget.unwrap_or(("", 0));
        let _: (i64, i64) = self
            .script
            .key(&r.minute_key)
            .key(&r.budget_key)
            .arg("settle")
            .arg(at_arg(at))
            .arg(period)
            .arg(minute_delta.to_string())
            .arg(tokens_delta.to_string())
            .arg(start)
            .invoke_async(connection)
            .await?;
        Ok(Settlement {
            refunded: r.tokens.saturating_sub(used),
            extra: used.saturating_sub(r.tokens),
        })
    }
}
