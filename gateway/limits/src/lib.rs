//! Per-key admission control: a GCRA rate limit (requests per second + burst) and a cap on
//! concurrent requests.
//!
//! Each key costs one [`KeyState`] (a few atomics) in a sharded table, created on the key's
//! first limited request. The limit itself is not stored here: every check passes the key's
//! effective [`Limits`] (its own, or the server default), so an admin change takes effect on
//! the key's next request with no invalidation.
//!
//! GCRA keeps one number per key, the theoretical arrival time (TAT). With emission interval
//! `T = 1/rps` and tolerance `tau = burst * T`, a request at `now` is allowed when
//! `max(TAT, now) + T - now <= tau`, and then TAT moves to `max(TAT, now) + T`. The TAT is
//! updated with a compare-and-swap loop, so concurrent requests can never both take the last
//! slot: the limit is exact under any concurrency.
//!
//! It owns the limits' types and the in-process limiter only. It must not do I/O (no tokio,
//! hyper or store: `scripts/check_layers.sh`): limits shared by replicas (Redis) and where a
//! key's limits come from are the service's (`infergate_service::admission`).

use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

const NANOS: u64 = 1_000_000_000;
const SHARDS: usize = 64;
/// Highest accepted rate; beyond it a limit is pointless and the interval would round to 0 ns.
pub const MAX_RPS: f64 = 1_000_000.0;
pub const MAX_BURST: u32 = 1_000_000;

/// A rate limit: `rps` requests per second on average, up to `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    pub rps: f64,
    pub burst: u32,
}

impl RateLimit {
    /// The limit as the API shows it.
    pub fn shown(self) -> infergate_api_types::keys::RateLimit {
        infergate_api_types::keys::RateLimit {
            rps: self.rps,
            burst: self.burst,
        }
    }

    /// Checks the bounds; `burst` defaults to the rate rounded up (at least 1).
    pub fn new(rps: f64, burst: Option<u32>) -> Result<RateLimit, String> {
        if !rps.is_finite() || rps <= 0.0 || rps > MAX_RPS {
            return Err(format!(
                "rate limit rps must be a number in (0, {MAX_RPS}], got {rps}"
            ));
        }
        let burst = burst.unwrap_or_else(|| (rps.ceil() as u32).max(1));
        if burst == 0 || burst > MAX_BURST {
            return Err(format!(
                "rate limit burst must be 1..={MAX_BURST}, got {burst}"
            ));
        }
        Ok(RateLimit { rps, burst })
    }

    fn interval_ns(&self) -> u64 {
        ((NANOS as f64 / self.rps).round() as u64).max(1)
    }

    /// The refusal of a request that must wait `wait_ns` for this rate (the same words from
    /// the local and the shared limiter).
    pub fn exceeded(&self, wait_ns: u64, quota: Quota) -> Rejection {
        Rejection {
            kind: LimitKind::Rate,
            retry_after_s: wait_ns.div_ceil(NANOS).max(1),
            quota: Some(quota),
            message: format!(
                "rate limit exceeded for this API key ({} requests/s, burst {}); retry after the Retry-After delay",
                self.rps, self.burst
            ),
        }
    }

    /// Seconds needed to refill the whole burst: the policy's window.
    pub fn window_s(&self) -> u64 {
        (self.interval_ns().saturating_mul(self.burst as u64)).div_ceil(NANOS)
    }
}

/// The limits a key is admitted under; `None` = unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Limits {
    pub rate: Option<RateLimit>,
    pub max_concurrent: Option<u32>,
}

impl Limits {
    pub fn is_unlimited(&self) -> bool {
        self.rate.is_none() && self.max_concurrent.is_none()
    }
}

/// What a key's limiter knows: O(1) memory per key.
#[derive(Default)]
struct KeyState {
    /// Theoretical arrival time, in ns since the limiter's epoch.
    tat: AtomicU64,
    in_flight: AtomicU32,
    allowed: AtomicU64,
    rejected_rate: AtomicU64,
    rejected_concurrency: AtomicU64,
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    Rate,
    Concurrency,
    /// The shared limiter (Redis) could not answer and the policy is to fail closed.
    Unavailable,
}

impl LimitKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LimitKind::Rate => "rate",
            LimitKind::Concurrency => "concurrency",
            LimitKind::Unavailable => "unavailable",
        }
    }
}

/// The rate-limit state reported in the IETF `RateLimit` headers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quota {
    pub policy: RateLimit,
    /// Requests still allowed right now.
    pub remaining: u64,
    /// Seconds until the whole burst is available again.
    pub reset_s: u64,
}

impl Quota {
    /// `RateLimit-Policy` (draft-ietf-httpapi-ratelimit-headers): quota `q` per window `w`
    /// seconds; for GCRA, the burst and the time it takes to refill.
    pub fn policy_header(&self) -> String {
        format!(
            "\"default\";q={};w={}",
            self.policy.burst,
            self.policy.window_s().max(1)
        )
    }

    /// `RateLimit`: remaining `r` and seconds `t` until the quota is whole again.
    pub fn header(&self) -> String {
        format!("\"default\";r={};t={}", self.remaining, self.reset_s)
    }
}

/// A refused request.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    pub kind: LimitKind,
    /// Seconds to wait (at least 1, as `Retry-After` counts whole seconds).
    pub retry_after_s: u64,
    pub quota: Option<Quota>,
    pub message: String,
}

/// An admitted request: holds its concurrency slot until dropped.
pub struct Admission {
    pub quota: Option<Quota>,
    slot: Option<Slot>,
}

impl Admission {
    /// This admission with the rate quota another limiter (the shared one) granted.
    pub fn with_quota(self, quota: Quota) -> Admission {
        Admission {
            quota: Some(quota),
            ..self
        }
    }

    /// Whether dropping this admission frees a concurrency slot (the response must keep it
    /// alive until its body ends).
    pub fn holds_slot(&self) -> bool {
        self.slot.is_some()
    }
}

struct Slot(Arc<KeyState>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A key's counters for the admin API, in the API's own type.
pub use infergate_api_types::keys::KeyUsage as Usage;

type Shard = RwLock<HashMap<i64, Arc<KeyState>>>;

/// The per-key limiter table.
pub struct Limiter {
    epoch: Instant,
    shards: Box<[Shard]>,
}

impl Default for Limiter {
    fn default() -> Self {
        Limiter::new()
    }
}

impl Limiter {
    pub fn new() -> Limiter {
        Limiter {
            epoch: Instant::now(),
            shards: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect(),
        }
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn shard(&self, key: i64) -> &Shard {
        // Key ids are sequential: the low bits spread them evenly.
        &self.shards[(key as u64 as usize) % SHARDS]
    }

    fn state(&self, key: i64) -> Arc<KeyState> {
        let shard = self.shard(key);
        if let Some(s) = shard.read().get(&key) {
            return s.clone();
        }
        shard.write().entry(key).or_default().clone()
    }

    /// Number of keys with state (for tests and benchmarks).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.read().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets a key (revoked): its memory goes.
    pub fn forget(&self, key: i64) {
        self.shard(key).write().remove(&key);
    }

    /// Admits or refuses one request of `key` under `limits`. The concurrency cap is checked
    /// first so a request refused for concurrency does not spend rate.
    pub fn check(&self, key: i64, limits: &Limits) -> Result<Admission, Rejection> {
        if limits.is_unlimited() {
            return Ok(Admission {
                quota: None,
                slot: None,
            });
        }
        let state = self.state(key);
        self.check_state(&state, limits, self.now_ns())
    }

    fn check_state(
        &self,
        state: &Arc<KeyState>,
        limits: &Limits,
        now: u64,
    ) -> Result<Admission, Rejection> {
        let slot = match limits.max_concurrent {
            Some(max) => {
                let before = state.in_flight.fetch_add(1, Ordering::AcqRel);
                let slot = Slot(state.clone());
                if before >= max {
                    drop(slot);
                    state.rejected_concurrency.fetch_add(1, Ordering::Relaxed);
                    return Err(Rejection {
                        kind: LimitKind::Concurrency,
                        retry_after_s: 1,
                        quota: None,
                        message: format!(
                            "too many concurrent requests for this API key (limit {max}); retry when one finishes"
                        ),
                    });
                }
                Some(slot)
            }
            None => None,
        };
        let quota = match &limits.rate {
            Some(rate) => match gcra(&state.tat, rate, now) {
                Ok(quota) => Some(quota),
                Err((wait_ns, quota)) => {
                    // `slot` drops here and frees the concurrency slot.
                    state.rejected_rate.fetch_add(1, Ordering::Relaxed);
                    return Err(rate.exceeded(wait_ns, quota));
                }
            },
            None => None,
        };
        state.allowed.fetch_add(1, Ordering::Relaxed);
        Ok(Admission { quota, slot })
    }

    /// A key's current usage under `limits` (spends nothing).
    pub fn usage(&self, key: i64, limits: &Limits) -> Usage {
        let state = self.shard(key).read().get(&key).cloned();
        let now = self.now_ns();
        let (remaining, reset_s) = match (&limits.rate, &state) {
            (Some(rate), Some(s)) => {
                let q = peek(s.tat.load(Ordering::Acquire), rate, now);
                (Some(q.remaining), Some(q.reset_s))
            }
            (Some(rate), None) => (Some(rate.burst as u64), Some(0)),
            (None, _) => (None, None),
        };
        let read = |f: fn(&KeyState) -> u64| state.as_ref().map(|s| f(s)).unwrap_or(0);
        Usage {
            in_flight: state
                .as_ref()
                .map(|s| s.in_flight.load(Ordering::Acquire))
                .unwrap_or(0),
            remaining,
            reset_s,
            allowed_total: read(|s| s.allowed.load(Ordering::Relaxed)),
            rejected_rate_total: read(|s| s.rejected_rate.load(Ordering::Relaxed)),
            rejected_concurrency_total: read(|s| s.rejected_concurrency.load(Ordering::Relaxed)),
        }
    }
}

/// One GCRA step on `tat`: Ok with the quota left, or Err with the ns to wait.
fn gcra(tat: &AtomicU64, rate: &RateLimit, now: u64) -> Result<Quota, (u64, Quota)> {
    let interval = rate.interval_ns();
    let tau = interval.saturating_mul(rate.burst as u64);
    let mut current = tat.load(Ordering::Acquire);
    loop {
        let new_tat = current.max(now).saturating_add(interval);
        let ahead = new_tat - now;
        if ahead > tau {
            return Err((ahead - tau, peek(current, rate, now)));
        }
        match tat.compare_exchange_weak(current, new_tat, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                return Ok(Quota {
                    policy: *rate,
                    remaining: (tau - ahead) / interval,
                    reset_s: ahead.div_ceil(NANOS),
                })
            }
            Err(actual) => current = actual,
        }
    }
}

/// The quota at `now` for a key whose TAT is `tat`, without spending any.
fn peek(tat: u64, rate: &RateLimit, now: u64) -> Quota {
    let interval = rate.interval_ns();
    let tau = interval.saturating_mul(rate.burst as u64);
    let ahead = tat.saturating_sub(now);
    Quota {
        policy: *rate,
        remaining: tau.saturating_sub(ahead) / interval,
        reset_s: ahead.div_ceil(NANOS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(rps: f64, burst: u32) -> Limits {
        Limits {
            rate: Some(RateLimit::new(rps, Some(burst)).unwrap()),
            max_concurrent: None,
        }
    }

    #[test]
    fn burst_then_one_per_interval() {
        let l = Limiter::new();
        let limits = rate(10.0, 3);
        let s = l.state(1);
        let t0 = 5 * NANOS;
        for i in 0..3 {
            let a = l.check_state(&s, &limits, t0).unwrap();
            assert_eq!(a.quota.unwrap().remaining, 2 - i);
        }
        let r = l.check_state(&s, &limits, t0).err().unwrap();
        assert_eq!(r.kind, LimitKind::Rate);
        assert_eq!(r.retry_after_s, 1);
        assert_eq!(r.quota.unwrap().remaining, 0);
        // 100 ms later exactly one more.
        let t1 = t0 + NANOS / 10;
        l.check_state(&s, &limits, t1).unwrap();
        assert!(l.check_state(&s, &limits, t1).is_err());
        // A long pause refills the burst, never more.
        let t2 = t1 + 100 * NANOS;
        for _ in 0..3 {
            l.check_state(&s, &limits, t2).unwrap();
        }
        assert!(l.check_state(&s, &limits, t2).is_err());
        let u = l.usage(1, &limits);
        assert_eq!(u.allowed_total, 7);
        assert_eq!(u.rejected_rate_total, 3);
    }

    #[test]
    fn allowed_count_is_burst_plus_rate_times_time() {
        let l = Limiter::new();
        let limits = rate(50.0, 7);
        let s = l.state(9);
        let start = NANOS;
        let mut allowed = 0u64;
        // A request every millisecond for 2 s.
        for ms in 0..=2000u64 {
            if l.check_state(&s, &limits, start + ms * 1_000_000).is_ok() {
                allowed += 1;
            }
        }
        assert_eq!(allowed, 7 + 100);
    }

    #[test]
    fn exact_under_concurrency() {
        let l = Arc::new(Limiter::new());
        // A rate so low that nothing refills during the test: exactly the burst passes.
        let limits = rate(0.001, 100);
        let allowed = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (l, allowed) = (l.clone(), allowed.clone());
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        if l.check(42, &limits).is_ok() {
                            allowed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(allowed.load(Ordering::Relaxed), 100);
        let u = l.usage(42, &limits);
        assert_eq!(u.allowed_total, 100);
        assert_eq!(u.rejected_rate_total, 7900);
    }

    #[test]
    fn concurrency_cap_frees_slots_and_spends_no_rate() {
        let l = Limiter::new();
        let limits = Limits {
            rate: Some(RateLimit::new(1.0, Some(10)).unwrap()),
            max_concurrent: Some(2),
        };
        let a = l.check(3, &limits).unwrap();
        let b = l.check(3, &limits).unwrap();
        assert!(a.holds_slot());
        let r = l.check(3, &limits).err().unwrap();
        assert_eq!(r.kind, LimitKind::Concurrency);
        assert_eq!(l.usage(3, &limits).in_flight, 2);
        // The refused request did not spend a rate token: 8 remain.
        assert_eq!(l.usage(3, &limits).remaining, Some(8));
        drop(a);
        let c = l.check(3, &limits).unwrap();
        assert_eq!(l.usage(3, &limits).in_flight, 2);
        drop((b, c));
        assert_eq!(l.usage(3, &limits).in_flight, 0);
        // A rate rejection frees the slot it took.
        let low = Limits {
            rate: Some(RateLimit::new(0.001, Some(1)).unwrap()),
            max_concurrent: Some(1),
        };
        drop(l.check(4, &low).unwrap());
        assert_eq!(l.check(4, &low).err().unwrap().kind, LimitKind::Rate);
        assert_eq!(l.usage(4, &low).in_flight, 0);
    }

    #[test]
    fn unlimited_keys_cost_nothing_and_bounds_are_checked() {
        let l = Limiter::new();
        assert!(l.check(1, &Limits::default()).is_ok());
        assert!(l.is_empty());
        assert!(RateLimit::new(0.0, None).is_err());
        assert!(RateLimit::new(f64::NAN, None).is_err());
        assert!(RateLimit::new(5.0, Some(0)).is_err());
        assert_eq!(RateLimit::new(2.5, None).unwrap().burst, 3);
        let q = Quota {
            policy: RateLimit::new(5.0, Some(10)).unwrap(),
            remaining: 4,
            reset_s: 2,
        };
        assert_eq!(q.policy_header(), "\"default\";q=10;w=2");
        assert_eq!(q.header(), "\"default\";r=4;t=2");
    }
}
