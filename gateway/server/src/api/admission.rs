//! The HTTP side of keys and per-key limits: a middleware that authenticates each request's key
//! once, leaves the record in the request's extensions for the handler's `Authorized` extractor
//! (`api::authorized`), and admits or refuses the request before its handler runs (a refused
//! request starts no work; its body is only drained, bounded, so the client can read the
//! answer), answers 429 with `Retry-After` and
//! the IETF `RateLimit`/`RateLimit-Policy` headers, and keeps the key's concurrency slot until
//! the response body has been sent (a streamed response holds it until the stream ends).
//!
//! Requests without a key, or with an invalid one, pass through: their handler's extractor
//! answers 401, or the handler serves them when the route needs no key. A request without a key
//! from a network granted anonymous access is admitted as the anonymous caller of its address
//! (`infergate_service::anonymous`), with the anonymous limits. Any answer marked as
//! given before the body was read has the body drained first (`api::unread`).

use crate::api::authorized::Authenticated;
use crate::api::unread::Unread;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderName, HeaderValue};
use infergate_kserve::http_error::DrainRequestBody;
use infergate_kserve::http_error::HttpError;
use infergate_limits::Quota;
use infergate_service::state::AppState;
use std::future::Future;

pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");

/// The request policy's items, before any the handler set for another limit (a token
/// budget's), in one field each.
fn set_quota_headers(headers: &mut HeaderMap, quota: &Quota) {
    for (name, value) in [
        (RATELIMIT_POLICY, quota.policy_header()),
        (RATELIMIT, quota.header()),
    ] {
        let value = match headers.get(&name).and_then(|v| v.to_str().ok()) {
            Some(more) => format!("{value}, {more}"),
            None => value,
        };
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
    let presented = infergate_kserve::credentials::presented_key(request.headers());
    // Without a key, only a caller that anonymous access may cover is admitted here.
    let client = match (presented, state.anonymous()) {
        (None, None) => return next(request).await,
        (None, Some(_)) => crate::client_addr::of(state, request.extensions(), request.headers()),
        (Some(_), _) => None,
    };
    // The key's id and whether limits apply: never the secret.
    let span = infergate_telemetry::span!(
        "admission",
        key_id = tracing::field::Empty,
        anonymous = tracing::field::Empty,
        limited = tracing::field::Empty,
        refused = tracing::field::Empty
    );
    let caller = match span.in_scope(|| state.authenticate_from(presented, client)) {
        Ok(caller) => caller,
        // Unknown keys and store failures are the handler's extractor's to report.
        Err(_) => return next(request).await,
    };
    span.record("key_id", caller.id());
    span.record("anonymous", caller.is_anonymous());
    span.record("limited", !caller.limits().is_unlimited());
    let admitted = infergate_telemetry::traced!(
        infergate_service::admission::admit(state, &caller),
        span.clone()
    );
    span.record("refused", admitted.is_err());
    // The span ends here: what follows is the request's own time.
    drop(span);
    match admitted {
        Err(rejection) => {
            let error = infergate_service::admission::rejection_error(&rejection).before_body();
            let mut response = HttpError(error).into_response();
            if let Some(quota) = &rejection.quota {
                set_quota_headers(response.headers_mut(), quota);
            }
            response
        }
        Ok(admission) => {
            request.extensions_mut().insert(Authenticated(caller));
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
