//! The gateway's one error type. An error has a [`Kind`] that says whose fault it is; the kind
//! alone decides the HTTP status ([`Kind::http_status`], here) and the gRPC code
//! (`crate::grpc::status`), so both transports report a fault the same way. The message is
//! what the client reads (never a path or SQL text); the cause, when there is one, is kept as
//! the error's `source` and logged by the middleware that writes the answer, not here.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use infergate_engine::{EngineError, Fault};
use infergate_plugin_host::{PluginError, PluginFault};
use infergate_protocol::DecodeError;
use std::sync::Arc;

use crate::store::StoreError;

/// Whose fault an error is, and so how a client should react.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The request is malformed or asks for something impossible: fix it, don't retry.
    Invalid,
    /// The request is well-formed but its content was refused (a plugin rejected its data).
    Unprocessable,
    /// No key, or a key that is unknown or revoked.
    Unauthenticated,
    /// A valid key without the scope the route needs.
    Forbidden,
    NotFound,
    /// The request conflicts with the current state (in use, exists with other content).
    Conflict,
    /// A body over its limit.
    TooLarge,
    /// A request target (URI) over its limit.
    UriTooLong,
    /// Header fields over their limit.
    HeadersTooLarge,
    /// The client sent its body too slowly.
    ClientTimeout,
    /// The key's rate limit or concurrency cap; retry after the hint.
    RateLimited,
    /// The server (or a model's queue, a plugin pool, the workers) cannot take it now; retry
    /// after the hint.
    Overloaded,
    /// The request waited past its deadline and never ran.
    Timeout,
    /// A model failed on valid input, or a plugin trapped: the model's or plugin's author's
    /// fault, not the client's.
    Model,
    /// A worker or another server behind the gateway answered wrongly.
    Upstream,
    /// What the request asks is not implemented here.
    Unsupported,
    /// A bug or an environment problem on the gateway's side.
    Internal,
}

impl Kind {
    /// The one place that decides the HTTP status.
    pub fn http_status(self) -> StatusCode {
        match self {
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

    /// The kind of an answer relayed from another server (a worker's HTTP status).
    pub fn from_http_status(status: StatusCode) -> Kind {
        match status.as_u16() {
            400 => Kind::Invalid,
            401 => Kind::Unauthenticated,
            403 => Kind::Forbidden,
            404 => Kind::NotFound,
            408 => Kind::ClientTimeout,
            409 => Kind::Conflict,
            413 => Kind::TooLarge,
            414 => Kind::UriTooLong,
            422 => Kind::Unprocessable,
            429 => Kind::RateLimited,
            431 => Kind::HeadersTooLarge,
            501 => Kind::Unsupported,
            502 => Kind::Upstream,
            503 => Kind::Overloaded,
            504 => Kind::Timeout,
            s if (400..500).contains(&s) => Kind::Invalid,
            _ => Kind::Internal,
        }
    }

    /// Whether the fault is on the gateway's side (worth an error in the log).
    pub fn is_server_fault(self) -> bool {
        self.http_status().is_server_error()
    }
}

/// The cause behind an error, for the log only.
pub type Cause = Arc<dyn std::error::Error + Send + Sync>;

#[derive(Debug, Clone)]
pub struct ApiError {
    pub kind: Kind,
    /// What the client reads.
    pub message: String,
    /// Seconds a client should wait before retrying (429/503).
    pub retry_after: Option<u64>,
    /// The underlying error, kept for the log (may name paths or SQL the client must not see).
    cause: Option<Cause>,
    /// Answered before the request's body was read ([`ApiError::before_body`]).
    body_unread: bool,
}

/// The mark on an answer given before the request's body was read: the admission middleware
/// drains the body, bounded, before sending it (`api::unread`), so a client still uploading
/// reads this answer instead of a reset connection.
#[derive(Clone, Copy)]
pub struct DrainRequestBody;

impl ApiError {
    pub fn new(kind: Kind, message: impl Into<String>) -> ApiError {
        let retry_after = matches!(kind, Kind::Overloaded).then_some(1);
        ApiError {
            kind,
            message: message.into(),
            retry_after,
            cause: None,
            body_unread: false,
        }
    }

    /// This error answers a request whose body was not read (and will not be): the response
    /// carries [`DrainRequestBody`] for the admission middleware.
    pub fn before_body(mut self) -> ApiError {
        self.body_unread = true;
        self
    }
    pub fn bad_request(m: impl Into<String>) -> ApiError {
        ApiError::new(Kind::Invalid, m)
    }
    pub fn unauthorized(m: impl Into<String>) -> ApiError {
        ApiError::new(Kind::Unauthenticated, m)
    }
    pub fn forbidden(m: impl Into<String>) -> ApiError {
        ApiError::new(Kind::Forbidden, m)
    }
    pub fn not_found(m: impl Into<String>) -> ApiError {
        ApiError::new(Kind::NotFound, m)
    }
    pub fn conflict(m: impl Into<String>) -> ApiError {
        ApiError::new(Kind::Conflict, m)
    }
    pub fn too_large(m: impl Into<String>) -> ApiError {
        ApiError::new(Kind::TooLarge, m)
    }
    pub fn unavailable(m: impl Into<String>) -> ApiError {
        ApiError::new(Kind::Overloaded, m)
    }
    pub fn internal(m: impl Into<String>) -> ApiError {
        ApiError::new(Kind::Internal, m)
    }
    pub fn upstream(m: impl Into<String>) -> ApiError {
        ApiError::new(Kind::Upstream, m)
    }

    /// The same error with a retry hint.
    pub fn retry_after(mut self, seconds: u64) -> ApiError {
        self.retry_after = Some(seconds);
        self
    }

    /// The same error, remembering what caused it (logged, never shown to the client).
    pub fn caused_by(mut self, cause: impl std::error::Error + Send + Sync + 'static) -> ApiError {
        self.cause = Some(Arc::new(cause));
        self
    }

    pub fn status(&self) -> StatusCode {
        self.kind.http_status()
    }

    /// Logs the error with its causes: `error` for a fault on the server's side, `debug` for
    /// the client's. HTTP answers are logged by the request middleware (`crate::request_id`);
    /// answers written into a stream (WebSocket frames, SSE events, gRPC statuses) call this
    /// where they are written.
    pub fn log(&self, transport: &'static str) {
        self.log_with(transport, None, None);
    }

    /// [`ApiError::log`] for an HTTP answer, naming the request's method and path.
    pub fn log_http(&self, method: &http::Method, path: &str) {
        self.log_with("http", Some(method), Some(path));
    }

    /// One line for the answer: an error for the server's fault, a debug line for the
    /// client's. Absent fields are left out of the line.
    fn log_with(&self, transport: &'static str, method: Option<&http::Method>, path: Option<&str>) {
        let method = method.map(tracing::field::display);
        if self.kind.is_server_fault() {
            tracing::error!(transport, method, path, kind = ?self.kind, error = %self.chain(), "request failed");
        } else {
            tracing::debug!(transport, method, path, kind = ?self.kind, error = %self.chain(), "request refused");
        }
    }

    /// The message followed by the chain of causes, for the log.
    pub fn chain(&self) -> String {
        let mut out = self.message.clone();
        let mut next: Option<&(dyn std::error::Error + 'static)> =
            self.cause.as_deref().map(|c| c as _);
        while let Some(e) = next {
            out.push_str(": ");
            out.push_str(&e.to_string());
            next = e.source();
        }
        out
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ApiError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause.as_deref().map(|c| c as _)
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> ApiError {
        // Clients get the message without file paths; the cause keeps them for the log.
        let message = e.client_message();
        let error = match e.fault() {
            Fault::Client => ApiError::bad_request(message),
            Fault::Model => ApiError::new(Kind::Model, message),
            Fault::Unavailable => ApiError::unavailable(message)
                .retry_after(e.retry_after().map_or(1, |d| d.as_secs().max(1))),
            Fault::Timeout => ApiError::new(Kind::Timeout, message),
            Fault::Internal => ApiError::internal(message),
        };
        error.caused_by(e)
    }
}

/// A request that does not decode (any transport) is the client's fault.
impl From<DecodeError> for ApiError {
    fn from(e: DecodeError) -> ApiError {
        ApiError::bad_request(e.0)
    }
}

impl From<PluginError> for ApiError {
    fn from(e: PluginError) -> ApiError {
        let kind = match e.fault() {
            PluginFault::Invalid => Kind::Invalid,
            PluginFault::BadInput => Kind::Unprocessable,
            PluginFault::Plugin => Kind::Model,
            PluginFault::Busy => Kind::Overloaded,
            PluginFault::Internal => Kind::Internal,
        };
        ApiError::new(kind, e.to_string()).caused_by(e)
    }
}

/// The store's text (SQL, paths) stays in the log. A database that cannot be reached now
/// (PostgreSQL down) is 503: the request may succeed when it is back.
impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        match e {
            StoreError::Unavailable(_) => ApiError::unavailable(
                "the store (database) is unavailable; try again when it is back",
            )
            .caused_by(e),
            e => ApiError::internal("storage failure (see the server's log)").caused_by(e),
        }
    }
}

/// Carried in the extensions of an error answer so that the request's log line can name the
/// cause (`crate::request_id`), which the answer itself leaves out.
#[derive(Clone, Debug)]
pub struct Logged(pub Arc<ApiError>);

impl ApiError {
    /// `body` (the error in some route's shape) as this error's response: its status,
    /// `Retry-After`, the drain mark when answered before the body was read, and the error for
    /// the request's log line (`crate::request_id`). Every error shape goes through here.
    pub fn respond_with(self, body: impl serde::Serialize) -> Response {
        let mut response = (self.status(), axum::Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(http::header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.body_unread {
            response.extensions_mut().insert(DrainRequestBody);
        }
        response.extensions_mut().insert(Logged(Arc::new(self)));
        response
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = infergate_api_types::ErrorBody {
            error: self.message.clone(),
        };
        self.respond_with(body)
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relayed_status_keeps_its_kind() {
        for status in [
            400, 401, 403, 404, 408, 409, 413, 414, 422, 429, 431, 501, 502, 503, 504,
        ] {
            let status = StatusCode::from_u16(status).unwrap();
            assert_eq!(Kind::from_http_status(status).http_status(), status);
        }
        assert_eq!(
            Kind::from_http_status(StatusCode::IM_A_TEAPOT),
            Kind::Invalid
        );
        assert_eq!(
            Kind::from_http_status(StatusCode::INSUFFICIENT_STORAGE),
            Kind::Internal
        );
    }

    #[test]
    fn store_details_stay_out_of_the_answer_and_in_the_chain() {
        let e = ApiError::from(StoreError::from(rusqlite::Error::InvalidQuery));
        assert_eq!(e.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!e.message.contains("Query"), "{}", e.message);
        assert!(e.chain().contains("Query"), "{}", e.chain());
        assert!(std::error::Error::source(&e).is_some());
    }

    #[test]
    fn overloaded_answers_carry_a_retry_hint() {
        let response = ApiError::unavailable("busy").into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[http::header::RETRY_AFTER], "1");
        assert!(response.extensions().get::<Logged>().is_some());
    }
}
