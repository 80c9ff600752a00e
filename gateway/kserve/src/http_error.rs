//! The service's errors as HTTP answers: the one place that decides a status from an error's
//! [`Kind`], and the response every error shape (the plain `{"error": ...}` body, OpenAI's) is
//! written through, with `Retry-After`, the mark that the request's body was never read, and the
//! error itself for the request's log line (`infergate_server::request_id`).

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode};
use infergate_service::error::{ApiError, Kind, LimitFields};
use std::sync::Arc;

/// The HTTP status of a kind of error.
pub fn status_of(kind: Kind) -> StatusCode {
    match kind {
        Kind::Invalid => StatusCode::BAD_REQUEST,
        Kind::Unprocessable => StatusCode::UNPROCESSABLE_ENTITY,
        Kind::Unauthenticated => StatusCode::UNAUTHORIZED,
        Kind::Forbidden => StatusCode::FORBIDDEN,
        Kind::NotFound => StatusCode::NOT_FOUND,
        Kind::Conflict => StatusCode::CONFLICT,
        Kind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        Kind::UriTooLong => StatusCode::URI_TOO_LONG,
        Kind::HeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        Kind::ClientTimeout => StatusCode::REQUEST_TIMEOUT,
        Kind::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        Kind::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
        Kind::Timeout => StatusCode::GATEWAY_TIMEOUT,
        Kind::Model | Kind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        Kind::Upstream => StatusCode::BAD_GATEWAY,
        Kind::Unsupported => StatusCode::NOT_IMPLEMENTED,
    }
}

/// The HTTP status of an error.
pub fn status(error: &ApiError) -> StatusCode {
    status_of(error.kind)
}

/// The mark on an answer given before the request's body was read: the admission middleware
/// drains the body, bounded, before sending it (`infergate_server::api::unread`), so a client still uploading
/// reads this answer instead of a reset connection.
#[derive(Clone, Copy)]
pub struct DrainRequestBody;

/// Carried in the extensions of an error answer so that the request's log line can name the
/// cause (`infergate_server::request_id`), which the answer itself leaves out.
#[derive(Clone, Debug)]
pub struct Logged(pub Arc<ApiError>);

/// `body` (the error in some route's shape) as `error`'s response: its status, `Retry-After`,
/// the drain mark when answered before the body was read, and the error for the request's log
/// line. Every error shape goes through here.
pub fn respond_with(error: ApiError, body: impl serde::Serialize) -> Response {
    let mut response = (status(&error), axum::Json(body)).into_response();
    if let Some(secs) = error.retry_after {
        response
            .headers_mut()
            .insert(http::header::RETRY_AFTER, HeaderValue::from(secs));
    }
    if let Some(fields) = &error.limit_fields {
        set_limit_fields(response.headers_mut(), fields);
    }
    if error.is_before_body() {
        response.extensions_mut().insert(DrainRequestBody);
    }
    response.extensions_mut().insert(Logged(Arc::new(error)));
    response
}

/// `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers) with the items of
/// a limit the service reports (a token budget's); the admission middleware puts the request
/// policy's items before them.
pub fn set_limit_fields(headers: &mut http::HeaderMap, fields: &LimitFields) {
    for (name, value) in [
        ("ratelimit-policy", &fields.policy),
        ("ratelimit", &fields.current),
    ] {
        if let Ok(v) = HeaderValue::from_str(value) {
            headers.insert(name, v);
        }
    }
}

/// A service error on its way out of an HTTP handler: `{"error": message}` with the kind's
/// status. Handlers return [`HttpResult`]; `?` turns the service's errors into this.
#[derive(Debug)]
pub struct HttpError(pub ApiError);

/// Every error the service's own errors come from (the store's, the engine's, a decode
/// failure) converts as the service converts it.
impl<E: Into<ApiError>> From<E> for HttpError {
    fn from(error: E) -> HttpError {
        HttpError(error.into())
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let body = infergate_api_types::ErrorBody {
            error: self.0.message.clone(),
        };
        respond_with(self.0, body)
    }
}

/// What an HTTP handler returns.
pub type HttpResult<T> = Result<T, HttpError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relayed_status_keeps_its_kind() {
        for code in [
            400, 401, 403, 404, 408, 409, 413, 414, 422, 429, 431, 501, 502, 503, 504,
        ] {
            assert_eq!(status_of(Kind::from_status_code(code)).as_u16(), code);
        }
    }

    #[test]
    fn overloaded_answers_carry_a_retry_hint() {
        let response = HttpError::from(ApiError::unavailable("busy")).into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[http::header::RETRY_AFTER], "1");
        assert!(response.extensions().get::<Logged>().is_some());
    }

    #[test]
    fn the_server_fault_kinds_are_the_5xx_statuses() {
        for kind in [
            Kind::Invalid,
            Kind::Unprocessable,
            Kind::Unauthenticated,
            Kind::Forbidden,
            Kind::NotFound,
            Kind::Conflict,
            Kind::TooLarge,
            Kind::UriTooLong,
            Kind::HeadersTooLarge,
            Kind::ClientTimeout,
            Kind::RateLimited,
            Kind::Overloaded,
            Kind::Timeout,
            Kind::Model,
            Kind::Upstream,
            Kind::Unsupported,
            Kind::Internal,
        ] {
            assert_eq!(
                kind.is_server_fault(),
                status_of(kind).is_server_error(),
                "{kind:?}"
            );
        }
    }
}
