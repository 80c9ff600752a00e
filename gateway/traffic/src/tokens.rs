//! Token limits per key, for one process: `tokens_per_minute` (GCRA over tokens) and
//! `token_budget` (tokens per UTC day or month), taken as reservations.
//!
//! At admission the gateway reserves the most a request can use (its prompt tokens plus its
//! `max_tokens`, or the model's context when unset) with [`TokenLimiter::reserve`]; the
//! reservation is charged in full at once, against both limits or neither, under the key's
//! lock. When the answer is done it calls [`Reservation::settle`] with the tokens really used
//! and the unused part is refunded. Concurrent requests therefore cannot overshoot: each one
//! was admitted against a budget that already held every other request's maximum.
//!
//! **A reservation dropped without `settle` counts as fully used**: nothing is refunded. That
//! is the safe side for a request whose use is unknown (a panic, a lost worker). A cancelled
//! stream should still be settled, with the prompt plus the tokens generated before the cancel.
//!
//! What can still go past a limit (the worst case):
//! - a request that uses more than it reserved (a prompt counted short): the excess is charged
//!   at settle time, so the key's account is right, but the limit was passed by that excess;
//! - a reservation settled in a later period than it was made (a stream running over midnight
//!   UTC) refunds nothing: the old period keeps the full charge, the new one is not charged;
//!   this errs against the caller by at most one request's unused reservation;
//! - with several replicas limiting locally (Redis down and the policy is fail-open) each
//!   replica admits the whole budget: N replicas, N budgets. With Redis
//!   (`infergate-redis-limit`), reservations are exact across replicas.
//!
//! The GCRA keeps one number per key, the theoretical arrival time (TAT): each token costs
//! `60 s / tokens_per_minute`, the burst is one minute's tokens, and a request of `n` tokens is
//! admitted when `max(TAT, now) + n * cost - now <= 60 s`. A refund moves the TAT back by the
//! unused tokens' cost. A request of more tokens than `tokens_per_minute` (or than the budget)
//! can never be admitted: its refusal says so instead of giving a retry time.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::key_table::KeyTable;
use crate::period::Period;

/// Highest accepted `tokens_per_minute`.
pub const MAX_TOKENS_PER_MINUTE: u64 = 1_000_000_000_000;
/// Highest accepted budget per period.
pub const MAX_BUDGET: u64 = 1_000_000_000_000_000;
const NANOS_PER_MINUTE: u64 = 60_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenBudget {
    pub tokens: u64,
    pub period: Period,
}

/// A key's token limits (its own, or the server's `[limits]` defaults); `None` = unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_minute: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<TokenBudget>,
}

impl TokenLimits {
    pub fn is_unlimited(&self) -> bool {
        self.tokens_per_minute.is_none() && self.token_budget.is_none()
    }

    /// Checks the bounds; the error names the field (`token_budget.tokens: ...`).
    pub fn validate(&self) -> Result<(), String> {
        if let Some(tpm) = self.tokens_per_minute {
            if !(1..=MAX_TOKENS_PER_MINUTE).contains(&tpm) {
                return Err(format!(
                    "tokens_per_minute: must be 1..={MAX_TOKENS_PER_MINUTE}, got {tpm}"
                ));
            }
        }
        if let Some(b) = self.token_budget {
            if !(1..=MAX_BUDGET).contains(&b.tokens) {
                return Err(format!(
                    "token_budget.tokens: must be 1..={MAX_BUDGET}, got {}",
                    b.tokens
                ));
            }
        }
        Ok(())
    }
}

/// Which token limit refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenLimit {
    PerMinute,
    Budget,
}

impl TokenLimit {
    /// The limit's field name, as the API and the error body name it.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenLimit::PerMinute => "tokens_per_minute",
            TokenLimit::Budget => "token_budget",
        }
    }
}

/// The per-minute limit's state, for the RateLimit header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MinuteQuota {
    pub limit: u64,
    /// Tokens that could be reserved right now.
    pub remaining: u64,
    /// Seconds until the whole minute's tokens are available again.
    pub reset_s: u64,
}

/// The budget's state, for the RateLimit header fields and the usage API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetQuota {
    pub limit: u64,
    pub remaining: u64,
    pub period: Period,
    /// The current period, `[start, end)` in Unix seconds.
    pub period_start: i64,
    pub period_end: i64,
    /// Seconds until the period ends and the budget is whole again.
    pub reset_s: u64,
}

/// A key's token quotas after a reservation (or a refusal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TokenQuota {
    pub per_minute: Option<MinuteQuota>,
    pub budget: Option<BudgetQuota>,
}

impl TokenQuota {
    /// Items for the `RateLimit-Policy` field (draft-ietf-httpapi-ratelimit-headers), in the
    /// request policy's format (`"default";q=10;w=2`): the gateway appends them after its
    /// request policy, separated by `", "`. `None` when the key has no token limit. No `qu`
    /// parameter: the draft's registry has no unit for tokens, and the policy names say it.
    pub fn policy_header(&self) -> Option<String> {
        let minute = self
            .per_minute
            .map(|m| format!("\"tokens-per-minute\";q={};w=60", m.limit));
        let budget = self.budget.map(|b| {
            format!(
                "\"token-budget\";q={};w={}",
                b.limit,
                (b.period_end - b.period_start).max(1)
            )
        });
        join(minute, budget)
    }

    /// Items for the `RateLimit` field: remaining `r` and seconds `t` until whole again.
    pub fn header(&self) -> Option<String> {
        let minute = self
            .per_minute
            .map(|m| format!("\"tokens-per-minute\";r={};t={}", m.remaining, m.reset_s));
        let budget = self
            .budget
            .map(|b| format!("\"token-budget\";r={};t={}", b.remaining, b.reset_s));
        join(minute, budget)
    }
}

fn join(a: Option<String>, b: Option<String>) -> Option<String> {
    match (a, b) {
        (Some(a), Some(b)) => Some(format!("{a}, {b}")),
        (a, b) => a.or(b),
    }
}

/// A refused reservation: answer 429 (or 400 when it can never fit, `retry_after` None).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub limit: TokenLimit,
    /// Tokens the request tried to reserve.
    pub requested: u64,
    /// When a reservation of this size would be admitted; `None`: never (larger than the
    /// limit itself: the caller must ask for fewer `max_tokens`).
    pub retry_after: Option<Duration>,
    pub quota: TokenQuota,
}

impl Refusal {
    /// Whole seconds for `Retry-After` (at least 1); `None` when waiting cannot help.
    pub fn retry_after_s(&self) -> Option<u64> {
        self.retry_after
            .map(|d| d.as_nanos().div_ceil(1_000_000_000).max(1) as u64)
    }

    /// OpenAI's error code: a spent budget is `insufficient_quota`, a rate
    /// `rate_limit_exceeded`.
    pub fn openai_code(&self) -> &'static str {
        match self.limit {
            TokenLimit::PerMinute => "rate_limit_exceeded",
            TokenLimit::Budget => "insufficient_quota",
        }
    }

    /// The error message: which limit, what the request asked, when it frees up.
    pub fn message(&self) -> String {
        let asked = format!(
            "this request reserves {} tokens (its prompt plus max_tokens)",
            self.requested
        );
        match (self.limit, self.retry_after_s()) {
            (TokenLimit::PerMinute, None) => format!(
                "{asked}, more than this API key's tokens_per_minute ({}): ask for fewer max_tokens",
                self.quota.per_minute.map_or(0, |m| m.limit)
            ),
            (TokenLimit::PerMinute, Some(s)) => format!(
                "token rate limit exceeded for this API key (tokens_per_minute {}, {} available now); {asked}; retry after {s} s",
                self.quota.per_minute.map_or(0, |m| m.limit),
                self.quota.per_minute.map_or(0, |m| m.remaining)
            ),
            (TokenLimit::Budget, None) => format!(
                "{asked}, more than this API key's whole token_budget ({} per {}): ask for fewer max_tokens",
                self.quota.budget.map_or(0, |b| b.limit),
                self.quota.budget.map_or("period", |b| b.period.as_str())
            ),
            (TokenLimit::Budget, Some(s)) => {
                let b = self.quota.budget;
                format!(
                    "token budget of this API key is spent ({} of {} tokens left this {}); {asked}; it resets at the start of the next UTC {}, in {s} s",
                    b.map_or(0, |b| b.remaining),
                    b.map_or(0, |b| b.limit),
                    b.map_or("period", |b| b.period.as_str()),
                    b.map_or("period", |b| b.period.as_str()),
                )
            }
        }
    }
}

/// GCRA cost of `tokens` at `tpm` tokens per minute, in units of which a minute has
/// `units_per_minute` (ns locally, µs in Redis). Rounded up, so a reservation never costs less
/// than its tokens; a refund of `charge(n) - charge(used)` is then exact.
pub fn minute_charge(tokens: u64, tpm: u64, units_per_minute: u64) -> u64 {
    let units =
        (u128::from(tokens) * u128::from(units_per_minute)).div_ceil(u128::from(tpm.max(1)));
    u64::try_from(units).unwrap_or(u64::MAX)
}

/// The per-minute quota of a key whose TAT is `ahead` units in the future.
pub fn minute_quota(tpm: u64, ahead: u64, units_per_minute: u64) -> MinuteQuota {
    let free = units_per_minute.saturating_sub(ahead);
    MinuteQuota {
        limit: tpm,
        remaining: u64::try_from(u128::from(free) * u128::from(tpm) / u128::from(units_per_minute))
            .unwrap_or(u64::MAX),
        reset_s: ahead.div_ceil(units_per_minute / 60),
    }
}

/// The budget quota given what was spent in the period `[start, end)`, at `now_s`.
pub fn budget_quota(
    budget: TokenBudget,
    spent: u64,
    start: i64,
    end: i64,
    now_s: i64,
) -> BudgetQuota {
    BudgetQuota {
        limit: budget.tokens,
        remaining: budget.tokens.saturating_sub(spent),
        period: budget.period,
        period_start: start,
        period_end: end,
        reset_s: u64::try_from(end - now_s).unwrap_or(0),
    }
}

/// The clock a decision is made at: monotonic for the rate, wall clock (UTC) for the period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    /// Nanoseconds since the limiter was created.
    pub mono_ns: u64,
    /// Unix time, seconds.
    pub unix_s: i64,
}

#[derive(Debug, Default)]
struct KeyTokens {
    /// Theoretical arrival time, ns since the limiter's epoch.
    tat: u64,
    /// Start of the period `spent` belongs to (Unix s); 0 before the first budgeted request.
    period_start: i64,
    spent: u64,
}

/// A reservation taken at admission: settle it when the answer is done. Dropped without
/// [`settle`](Self::settle), it counts as fully used (nothing is refunded).
#[must_use = "settle the reservation with the tokens used, or the whole reservation is charged"]
#[derive(Debug)]
pub struct Reservation {
    state: Arc<Mutex<KeyTokens>>,
    epoch: Instant,
    tokens: u64,
    tpm: Option<u64>,
    /// The budget period the tokens were charged to.
    period_start: Option<i64>,
    quota: TokenQuota,
}

/// What a settle changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settlement {
    /// Tokens given back (reserved but not used).
    pub refunded: u64,
    /// Tokens charged on top (used beyond the reservation).
    pub extra: u64,
}

impl Reservation {
    pub fn tokens(&self) -> u64 {
        self.tokens
    }

    /// The key's quotas right after this reservation (for the response's headers).
    pub fn quota(&self) -> &TokenQuota {
        &self.quota
    }

    /// Settles with the tokens the request used (prompt plus completion, for a cancelled
    /// stream those generated before the cancel).
    /// A refund reads no clock; only an excess over the reservation does.
    pub fn settle(self, used: u64) -> Settlement {
        let epoch = self.epoch;
        self.settle_with(used, || epoch.elapsed().as_nanos() as u64)
    }

    /// [`settle`](Self::settle) at a given clock (tests, replays).
    pub fn settle_at(self, used: u64, now: Now) -> Settlement {
        self.settle_with(used, || now.mono_ns)
    }

    fn settle_with(self, used: u64, mono_ns: impl FnOnce() -> u64) -> Settlement {
        let mut s = self.state.lock();
        if used <= self.tokens {
            let refund = self.tokens - used;
            if let Some(tpm) = self.tpm {
                let back = minute_charge(self.tokens, tpm, NANOS_PER_MINUTE)
                    - minute_charge(used, tpm, NANOS_PER_MINUTE);
                s.tat = s.tat.saturating_sub(back);
            }
            // A period that ended since the reservation keeps its charge (see the module doc).
            if self.period_start == Some(s.period_start) {
                s.spent = s.spent.saturating_sub(refund);
            }
            Settlement {
                refunded: refund,
                extra: 0,
            }
        } else {
            let extra = used - self.tokens;
            if let Some(tpm) = self.tpm {
                let more = minute_charge(used, tpm, NANOS_PER_MINUTE)
                    - minute_charge(self.tokens, tpm, NANOS_PER_MINUTE);
                s.tat = s.tat.max(mono_ns()).saturating_add(more);
            }
            if self.period_start.is_some() {
                // Charged to the period it was used in, the current one.
                s.spent = s.spent.saturating_add(extra);
            }
            Settlement { refunded: 0, extra }
        }
    }
}

/// Token limits for the keys of one process.
pub struct TokenLimiter {
    epoch: Instant,
    keys: KeyTable<Mutex<KeyTokens>>,
}

impl Default for TokenLimiter {
    fn default() -> Self {
        TokenLimiter::new()
    }
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

impl TokenLimiter {
    pub fn new() -> TokenLimiter {
        TokenLimiter {
            epoch: Instant::now(),
            keys: KeyTable::new(),
        }
    }

    pub fn now(&self) -> Now {
        Now {
            mono_ns: self.epoch.elapsed().as_nanos() as u64,
            unix_s: unix_now(),
        }
    }

    /// Keys with state.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Restores what a key spent in the budget period starting at `period_start` (Unix s), as
    /// the store's accounting has it: the budget survives a restart. Call it before serving;
    /// a key that already spent more in this process keeps the larger figure.
    pub fn restore_spent(&self, key: i64, period_start: i64, spent: u64) {
        let state = self.keys.state(key);
        let mut s = state.lock();
        if s.period_start != period_start {
            s.period_start = period_start;
            s.spent = 0;
        }
        s.spent = s.spent.max(spent);
    }

    /// Forgets a key (revoked or deleted). Its open reservations still settle harmlessly.
    pub fn forget(&self, key: i64) {
        self.keys.forget(key);
    }

    /// Reserves `tokens` for a request of `key` under `limits`, against both limits or
    /// neither. `Ok(None)`: the key has no token limit (nothing to settle).
    pub fn reserve(
        &self,
        key: i64,
        limits: &TokenLimits,
        tokens: u64,
    ) -> Result<Option<Reservation>, Refusal> {
        if limits.is_unlimited() {
            return Ok(None);
        }
        // Only the clocks the limits need: each read costs tens of ns.
        let now = Now {
            mono_ns: limits
                .tokens_per_minute
                .map_or(0, |_| self.epoch.elapsed().as_nanos() as u64),
            unix_s: limits.token_budget.map_or(0, |_| unix_now()),
        };
        self.reserve_at(key, limits, tokens, now).map(Some)
    }

    /// [`reserve`](Self::reserve) at a given clock (tests, replays); `limits` not unlimited.
    pub fn reserve_at(
        &self,
        key: i64,
        limits: &TokenLimits,
        tokens: u64,
        now: Now,
    ) -> Result<Reservation, Refusal> {
        let state = self.keys.state(key);
        let mut s = state.lock();
        let (quota, ahead) = Self::decide(&s, limits, tokens, now)?;
        if let Some(ahead) = ahead {
            s.tat = now.mono_ns + ahead;
        }
        let period_start = limits.token_budget.map(|b| {
            let (start, _) = b.period.bounds(now.unix_s);
            if s.period_start != start {
                s.period_start = start;
                s.spent = 0;
            }
            s.spent += tokens;
            start
        });
        drop(s);
        Ok(Reservation {
            state,
            epoch: self.epoch,
            tokens,
            tpm: limits.tokens_per_minute,
            period_start,
            quota,
        })
    }

    /// Whether `tokens` fit now under both limits; the quota after taking them (before, when
    /// refused) and the new TAT's lead.
    fn decide(
        s: &KeyTokens,
        limits: &TokenLimits,
        tokens: u64,
        now: Now,
    ) -> Result<(TokenQuota, Option<u64>), Refusal> {
        // The per-minute limit: (tpm, lead now, lead after, refusal's wait if refused).
        let minute = limits.tokens_per_minute.map(|tpm| {
            let ahead = s.tat.saturating_sub(now.mono_ns);
            let after = ahead.saturating_add(minute_charge(tokens, tpm, NANOS_PER_MINUTE));
            let refused = if tokens > tpm {
                Some(None)
            } else if after > NANOS_PER_MINUTE {
                Some(Some(Duration::from_nanos(after - NANOS_PER_MINUTE)))
            } else {
                None
            };
            (tpm, ahead, after, refused)
        });
        // The budget: (budget, period, spent in it, refusal's wait if refused).
        let budget = limits.token_budget.map(|b| {
            let (start, end) = b.period.bounds(now.unix_s);
            let spent = if s.period_start == start { s.spent } else { 0 };
            let refused = (spent.saturating_add(tokens) > b.tokens).then(|| {
                (tokens <= b.tokens)
                    .then(|| Duration::from_secs(u64::try_from(end - now.unix_s).unwrap_or(0)))
            });
            (b, (start, end), spent, refused)
        });
        let refusal = match (minute.and_then(|m| m.3), budget.and_then(|b| b.3)) {
            (Some(wait), _) => Some((TokenLimit::PerMinute, wait)),
            (None, Some(wait)) => Some((TokenLimit::Budget, wait)),
            (None, None) => None,
        };
        let taken = refusal.is_none();
        let quota = TokenQuota {
            per_minute: minute.map(|(tpm, ahead, after, _)| {
                minute_quota(tpm, if taken { after } else { ahead }, NANOS_PER_MINUTE)
            }),
            budget: budget.map(|(b, (start, end), spent, _)| {
                let spent = if taken { spent + tokens } else { spent };
                budget_quota(b, spent, start, end, now.unix_s)
            }),
        };
        match refusal {
            Some((limit, retry_after)) => Err(Refusal {
                limit,
                requested: tokens,
                retry_after,
                quota,
            }),
            None => Ok((quota, minute.map(|m| m.2))),
        }
    }

    /// A key's quotas now, spending nothing (the usage API, headers of other responses).
    pub fn quota(&self, key: i64, limits: &TokenLimits) -> TokenQuota {
        self.quota_at(key, limits, self.now())
    }

    /// [`quota`](Self::quota) at a given clock (tests, replays).
    pub fn quota_at(&self, key: i64, limits: &TokenLimits, now: Now) -> TokenQuota {
        let state = self.keys.get(key);
        let s = state.as_ref().map(|s| s.lock());
        let empty = KeyTokens::default();
        let s = s.as_deref().unwrap_or(&empty);
        TokenQuota {
            per_minute: limits
                .tokens_per_minute
                .map(|tpm| minute_quota(tpm, s.tat.saturating_sub(now.mono_ns), NANOS_PER_MINUTE)),
            budget: limits.token_budget.map(|b| {
                let (start, end) = b.period.bounds(now.unix_s);
                let spent = if s.period_start == start { s.spent } else { 0 };
                budget_quota(b, spent, start, end, now.unix_s)
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SEC: u64 = 1_000_000_000;
    /// 2024-03-15 12:00:00 UTC.
    const NOON: i64 = 1_710_504_000;

    fn at(mono_s: f64, unix_s: i64) -> Now {
        Now {
            mono_ns: (mono_s * SEC as f64) as u64,
            unix_s,
        }
    }

    fn tpm(n: u64) -> TokenLimits {
        TokenLimits {
            tokens_per_minute: Some(n),
            token_budget: None,
        }
    }

    fn budget(tokens: u64, period: Period) -> TokenLimits {
        TokenLimits {
            tokens_per_minute: None,
            token_budget: Some(TokenBudget { tokens, period }),
        }
    }

    #[test]
    fn per_minute_burst_refund_and_refill() {
        let l = TokenLimiter::new();
        let lim = tpm(600); // 10 tokens per second, 600 at once
        let t0 = at(100.0, NOON);
        let a = l.reserve_at(1, &lim, 400, t0).unwrap();
        assert_eq!(a.quota().per_minute.unwrap().remaining, 200);
        let r = l.reserve_at(1, &lim, 300, t0).unwrap_err();
        assert_eq!(r.limit, TokenLimit::PerMinute);
        // 100 tokens short at 10 per second.
        assert_eq!(r.retry_after, Some(Duration::from_secs(10)));
        assert_eq!(r.retry_after_s(), Some(10));
        assert_eq!(r.quota.per_minute.unwrap().remaining, 200);
        assert_eq!(r.openai_code(), "rate_limit_exceeded");
        // The first request used only 100 of its 400: 300 come back at once.
        assert_eq!(
            a.settle_at(100, t0),
            Settlement {
                refunded: 300,
                extra: 0
            }
        );
        let b = l.reserve_at(1, &lim, 500, t0).unwrap();
        assert_eq!(b.quota().per_minute.unwrap().remaining, 0);
        assert!(l.reserve_at(1, &lim, 1, t0).is_err());
        // Dropped without settle: fully used. One token refills in 0.1 s.
        drop(b);
        assert!(l.reserve_at(1, &lim, 1, at(100.05, NOON)).is_err());
        l.reserve_at(1, &lim, 1, at(100.1, NOON))
            .unwrap()
            .settle_at(1, at(100.1, NOON));
        // A long pause refills a minute's worth, never more.
        let later = at(1000.0, NOON);
        l.reserve_at(1, &lim, 600, later)
            .unwrap()
            .settle_at(600, later);
        assert!(l.reserve_at(1, &lim, 1, later).is_err());
        // More than a minute's tokens can never be admitted.
        let never = l.reserve_at(2, &lim, 601, t0).unwrap_err();
        assert_eq!(never.retry_after, None);
        assert!(
            never.message().contains("ask for fewer max_tokens"),
            "{}",
            never.message()
        );
    }

    #[test]
    fn daily_budget_resets_at_midnight_utc() {
        let l = TokenLimiter::new();
        let lim = budget(1000, Period::Day);
        let t = at(1.0, NOON);
        let a = l.reserve_at(7, &lim, 700, t).unwrap();
        let q = a.quota().budget.unwrap();
        assert_eq!((q.remaining, q.reset_s), (300, 12 * 3600));
        let r = l.reserve_at(7, &lim, 400, t).unwrap_err();
        assert_eq!(r.limit, TokenLimit::Budget);
        assert_eq!(r.retry_after_s(), Some(12 * 3600));
        assert_eq!(r.openai_code(), "insufficient_quota");
        assert!(r.message().contains("next UTC day"), "{}", r.message());
        a.settle_at(200, t);
        let b = l.reserve_at(7, &lim, 800, t).unwrap();
        assert_eq!(b.quota().budget.unwrap().remaining, 0);
        // A second past midnight: a fresh budget. The old reservation, settled now, refunds
        // nothing to the new day.
        let tomorrow = at(2.0, NOON + 12 * 3600);
        let c = l.reserve_at(7, &lim, 1000, tomorrow).unwrap();
        assert_eq!(b.settle_at(0, tomorrow).refunded, 800);
        assert!(
            l.reserve_at(7, &lim, 1, tomorrow).is_err(),
            "yesterday's refund leaked into today"
        );
        drop(c);
        assert_eq!(
            l.reserve_at(8, &lim, 1001, t).unwrap_err().retry_after,
            None
        );
    }

    #[test]
    fn monthly_budget_and_both_limits_or_neither() {
        let l = TokenLimiter::new();
        let both = TokenLimits {
            tokens_per_minute: Some(100),
            token_budget: Some(TokenBudget {
                tokens: 150,
                period: Period::Month,
            }),
        };
        let t = at(0.0, NOON);
        l.reserve_at(3, &both, 100, t).unwrap().settle_at(100, t);
        // Refused by the minute: the budget is not charged either.
        let r = l.reserve_at(3, &both, 40, t).unwrap_err();
        assert_eq!(r.limit, TokenLimit::PerMinute);
        assert_eq!(r.quota.budget.unwrap().remaining, 50);
        // A minute later the rate allows 100, but only 50 of the budget remain: refused by the
        // budget, and the minute is not charged.
        let t2 = at(60.0, NOON + 60);
        let r = l.reserve_at(3, &both, 60, t2).unwrap_err();
        assert_eq!(r.limit, TokenLimit::Budget);
        assert_eq!(r.quota.per_minute.unwrap().remaining, 100);
        // 2024-04-01 00:00 UTC: the month resets.
        assert_eq!(r.quota.budget.unwrap().period_end, 1_711_929_600);
        let april = at(120.0, 1_711_929_600);
        let r = l.reserve_at(3, &both, 60, april).unwrap();
        assert_eq!(r.quota().budget.unwrap().remaining, 90);
        r.settle_at(60, april);
        let q = l.quota(3, &both);
        assert_eq!(q.budget.unwrap().limit, 150);
    }

    #[test]
    fn a_request_that_uses_more_is_charged_the_excess() {
        let l = TokenLimiter::new();
        let lim = TokenLimits {
            tokens_per_minute: Some(600),
            token_budget: Some(TokenBudget {
                tokens: 1000,
                period: Period::Day,
            }),
        };
        let t = at(5.0, NOON);
        let a = l.reserve_at(1, &lim, 100, t).unwrap();
        assert_eq!(
            a.settle_at(250, t),
            Settlement {
                refunded: 0,
                extra: 150
            }
        );
        let r = l.reserve_at(1, &lim, 400, t).unwrap_err();
        assert_eq!(r.quota.per_minute.unwrap().remaining, 350);
        assert_eq!(r.quota.budget.unwrap().remaining, 750);
    }

    #[test]
    fn headers_match_the_request_policy_format() {
        let q = TokenQuota {
            per_minute: Some(MinuteQuota {
                limit: 1000,
                remaining: 800,
                reset_s: 12,
            }),
            budget: Some(BudgetQuota {
                limit: 50_000,
                remaining: 49_000,
                period: Period::Day,
                period_start: 0,
                period_end: 86_400,
                reset_s: 3600,
            }),
        };
        assert_eq!(
            q.policy_header().unwrap(),
            "\"tokens-per-minute\";q=1000;w=60, \"token-budget\";q=50000;w=86400"
        );
        assert_eq!(
            q.header().unwrap(),
            "\"tokens-per-minute\";r=800;t=12, \"token-budget\";r=49000;t=3600"
        );
        let only_budget = TokenQuota {
            per_minute: None,
            ..q
        };
        assert_eq!(
            only_budget.header().unwrap(),
            "\"token-budget\";r=49000;t=3600"
        );
        assert_eq!(TokenQuota::default().header(), None);
    }

    #[test]
    fn limits_are_checked_and_unlimited_costs_nothing() {
        let l = TokenLimiter::new();
        assert!(l.reserve(1, &TokenLimits::default(), 10).unwrap().is_none());
        assert!(l.is_empty());
        assert!(tpm(0)
            .validate()
            .unwrap_err()
            .starts_with("tokens_per_minute"));
        assert!(budget(0, Period::Day)
            .validate()
            .unwrap_err()
            .starts_with("token_budget.tokens"));
        tpm(5).validate().unwrap();
        let parsed: TokenLimits = serde_json::from_str(
            r#"{"tokens_per_minute": 1000, "token_budget": {"tokens": 5, "period": "month"}}"#,
        )
        .unwrap();
        assert_eq!(parsed.token_budget.unwrap().period, Period::Month);
        assert!(serde_json::from_str::<TokenLimits>(
            r#"{"token_budget": {"tokens": 5, "period": "week"}}"#
        )
        .is_err());
        let r = l.reserve(1, &tpm(10), 5).unwrap().unwrap();
        r.settle(5);
        l.forget(1);
        assert!(l.is_empty());
    }

    #[test]
    fn concurrent_reservations_never_overshoot() {
        let l = Arc::new(TokenLimiter::new());
        let lim = budget(10_000, Period::Month);
        // Eight threads race for reservations of 7 tokens and hold them: exactly
        // floor(10000 / 7) are admitted, however the threads interleave.
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let l = l.clone();
                std::thread::spawn(move || {
                    (0..2000)
                        .filter_map(|_| l.reserve(9, &lim, 7).ok().flatten())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let held: Vec<Reservation> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        assert_eq!(held.len(), 10_000 / 7);
        assert_eq!(l.quota(9, &lim).budget.unwrap().remaining, 10_000 % 7);
        // Each used 3 of its 7: the refunds come back.
        let n = held.len() as u64;
        for r in held {
            r.settle(3);
        }
        assert_eq!(l.quota(9, &lim).budget.unwrap().remaining, 10_000 - 3 * n);
    }

    proptest! {
        // Whatever the order of reserves and settles, a reservation is admitted exactly when
        // the open reservations plus the settled uses leave room for it, and the account ends
        // as that sum.
        #[test]
        fn budget_account_is_the_sum_of_settled_uses(
            ops in prop::collection::vec((1u64..300, 0u64..400), 1..60)
        ) {
            let l = TokenLimiter::new();
            let lim = budget(2000, Period::Day);
            let t = at(0.0, NOON);
            let mut charged = 0u64;
            let mut open = Vec::new();
            for (i, (want, used)) in ops.into_iter().enumerate() {
                match l.reserve_at(1, &lim, want, t) {
                    Ok(r) => {
                        prop_assert!(charged + want <= 2000);
                        charged += want;
                        open.push((r, used));
                    }
                    Err(refusal) => {
                        prop_assert!(charged + want > 2000);
                        prop_assert_eq!(refusal.quota.budget.unwrap().remaining, 2000u64.saturating_sub(charged));
                    }
                }
                if i % 3 == 2 {
                    if let Some((r, used)) = open.pop() {
                        let want = r.tokens();
                        r.settle_at(used, t);
                        charged = charged - want + used;
                    }
                }
            }
            prop_assert_eq!(l.quota_at(1, &lim, t).budget.unwrap().remaining, 2000u64.saturating_sub(charged));
        }
    }
}
