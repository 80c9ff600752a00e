//! Per-caller admission, whatever the transport: a caller's limits, checked against the
//! limiter in this process or the one replicas share (Redis), and the error a refusal is. The
//! transports add their own framing (HTTP's `RateLimit` headers, gRPC's status).

use crate::caller::Caller;
use crate::error::{ApiError, Kind};
use crate::shared_limits::{SharedLimits, Verdict};
use crate::state::AppState;
use infergate_limits::{Admission, LimitKind, Limits, RateLimit, Rejection};

/// Checks one request (or WebSocket message) of `caller` against its limits, counting refusals
/// in the metrics. With a shared limiter the rate is checked there and the concurrency cap
/// here (caps hold per replica). Anonymous callers are limited per client address and counted
/// together.
pub async fn admit(state: &AppState, caller: &Caller) -> Result<Admission, Rejection> {
    let (id, limits) = (caller.limit_id(), caller.limits());
    let admitted = match (state.shared_limits(), &limits.rate) {
        (Some(shared), Some(rate)) => admit_shared(state, shared, id, limits, rate).await,
        _ => state.limiter().check(id, limits),
    };
    let now = crate::history::now_ms();
    state
        .metrics()
        .keys
        .record(caller.id(), admitted.is_ok(), now);
    admitted.inspect_err(|r| {
        state
            .metrics()
            .rate_limited(&caller.label(), r.kind.as_str());
        tracing::debug!(
            key_id = caller.id(),
            reason = r.kind.as_str(),
            "request refused by the limiter"
        );
    })
}

async fn admit_shared(
    state: &AppState,
    shared: &SharedLimits,
    id: i64,
    limits: &Limits,
    rate: &RateLimit,
) -> Result<Admission, Rejection> {
    // The slot first, so a request refused for concurrency spends no shared rate.
    let local = Limits {
        rate: None,
        max_concurrent: limits.max_concurrent,
    };
    let admission = state.limiter().check(id, &local)?;
    match shared.check(id, rate).await {
        Verdict::Allowed(quota) => Ok(admission.with_quota(quota)),
        Verdict::Refused(rejection) => Err(rejection),
        Verdict::Fallback => {
            drop(admission);
            state.limiter().check(id, limits)
        }
    }
}

/// The error for a refusal (429, or 503 when the shared limiter is down and fails closed).
pub fn rejection_error(rejection: &Rejection) -> ApiError {
    let kind = match rejection.kind {
        LimitKind::Rate | LimitKind::Concurrency => Kind::RateLimited,
        LimitKind::Unavailable => Kind::Overloaded,
    };
    ApiError::new(kind, rejection.message.clone()).retry_after(rejection.retry_after_s)
}
