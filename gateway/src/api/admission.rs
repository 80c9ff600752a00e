//! The HTTP side of keys and per-key limits: a middleware that authenticates each request's key
//! once, leaves the record in the request's extensions for the handler's `Authorized` extractor
//! (`api::authorized`), and admits or refuses the request before its handler runs (a refused
//! request starts no work; its body is only drained, bounded, so the client can read the
//! answer), answers 429 with `Retry-After` and
//! the IETF `RateLimit`/`RateLimit-Policy` headers, and keeps the key's concurrency slot until
//! the response body has been sent (a streamed response holds it until the stream ends).
//!
//! Requests without a key, or with an invalid one, pass through: their handler's extractor
//! answers 401, or the handler serves them when the route needs no key. Any answer marked as
//! given before the body was read has the body drained first (`api::unread`).

use crate::api::authorized::Authenticated;
use crate::api::unread::Unread;
use crate::auth;
use crate::error::DrainRequestBody;
use crate::error::{ApiError, Kind};
use crate::ratelimit::{Admission, LimitKind, Limits, Quota, RateLimit, Rejection};
use crate::shared_limits::{SharedLimits, Verdict};
use crate::state::AppState;
use crate::store::keys::KeyRecord;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderName, HeaderValue};
use std::future::Future;

pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");

/// A key's effective limits: its own where set, the server default otherwise.
pub fn limits_for(key: &KeyRecord, default: &Limits) -> Limits {
    Limits {
        rate: key.rate_limit.or(default.rate),
        max_concurrent: key.max_concurrent.or(default.max_concurrent),
    }
}

/// Checks one request (or WebSocket message) of `key` against its limits, counting refusals
/// in the metrics. With a shared limiter the rate is checked there and the concurrency cap
/// here (caps hold per replica).
pub async fn admit(state: &AppState, key: &KeyRecord) -> Result<Admission, Rejection> {
    let limits = limits_for(key, state.default_limits());
    let admitted = match (state.shared_limits(), &limits.rate) {
        (Some(shared), Some(rate)) => admit_shared(state, shared, key, &limits, rate).await,
        _ => state.limiter().check(key.id, &limits),
    };
    let now = crate::history::now_ms();
    state.metrics().keys.record(key.id, admitted.is_ok(), now);
    admitted.inspect_err(|r| {
        state.metrics().rate_limited(key.id, r.kind.as_str());
        tracing::debug!(
            key_id = key.id,
            reason = r.kind.as_str(),
            "request refused by the limiter"
        );
    })
}

async fn admit_shared(
    state: &AppState,
    shared: &SharedLimits,
    key: &KeyRecord,
    limits: &Limits,
    rate: &RateLimit,
) -> Result<Admission, Rejection> {
    // The slot first, so a request refused for concurrency spends no shared rate.
    let local = Limits {
        rate: None,
        max_concurrent: limits.max_concurrent,
    };
    let admission = state.limiter().check(key.id, &local)?;
    match shared.check(key.id, rate).await {
        Verdict::Allowed(quota) => Ok(admission.with_quota(quota)),
        Verdict::Refused(rejection) => Err(rejection),
        Verdict::Fallback => {
            drop(admission);
            state.limiter().check(key.id, limits)
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

fn set_quota_headers(headers: &mut HeaderMap, quota: &Quota) {
    for (name, value) in [
        (RATELIMIT_POLICY, quota.policy_header()),
        (RATELIMIT, quota.header()),
    ] {
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert(name, v);
        }
    }
}

/// Authenticates and admits `request`, then runs `next` with it (`api::front`).
pub async fn admitted<F, Fut>(state: &AppState, request: Request, next: F) -> Response
where
    F: FnOnce(Request) -> Fut,
    Fut: Future<Output = Response>,
{
    let (request, unread) = Unread::keep(request);
    let response = authenticate_and_admit(state, request, next).await;
    // An answer given before the body was read (a refused key, a limit): drain the body,
    // bounded, so the client reads the answer rather than a reset connection.
    if let Some(unread) = unread {
        if response.extensions().get::<DrainRequestBody>().is_some() {
            unread.drain().await;
        }
    }
    response
}

async fn authenticate_and_admit<F, Fut>(state: &AppState, mut request: Request, next: F) -> Response
where
    F: FnOnce(Request) -> Fut,
    Fut: Future<Output = Response>,
{
    let Some(presented) = auth::presented_key(request.headers()) else {
        return next(request).await;
    };
    let key = match state.store().authenticate(presented) {
        Ok(Some(key)) => key,
        // Unknown keys and store failures are the handler's extractor's to report.
        _ => return next(request).await,
    };
    match admit(state, &key).await {
        Err(rejection) => {
            let mut response = rejection_error(&rejection).before_body().into_response();
            if let Some(quota) = &rejection.quota {
                set_quota_headers(response.headers_mut(), quota);
            }
            response
        }
        Ok(admission) => {
            request.extensions_mut().insert(Authenticated(key));
            let response = next(request).await;
            let (mut parts, body) = response.into_parts();
            if let Some(quota) = &admission.quota {
                set_quota_headers(&mut parts.headers, quota);
            }
            let body = if admission.holds_slot() {
                crate::hold_body::hold(body, admission)
            } else {
                body
            };
            Response::from_parts(parts, body)
        }
    }
}
