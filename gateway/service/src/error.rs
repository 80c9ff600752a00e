//! The gateway's domain error. An error has a [`Kind`] that says whose fault it is; the kind
//! alone decides the HTTP status (`infergate_server::http_error`) and the gRPC code
//! (`infergate_kserve::status`), so every transport reports a fault the same way, and no
//! transport's types are needed here. The message is what the client reads (never a path or SQL
//! text); the cause, when there is one, is kept as the error's `source` and logged by the
//! transport that writes the answer.

use infergate_engine::{EngineError, Fault};
use infergate_plugin_host::{PluginError, PluginFault};
use infergate_protocol::DecodeError;
use std::sync::Arc;

use infergate_store::StoreError;

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
    /// The kind of an answer relayed from another server (a worker's HTTP status code).
    pub fn from_status_code(status: u16) -> Kind {
        match status {
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

    /// Whether the fault is on the gateway's side or behind it (worth an error in the log):
    /// the kinds HTTP answers with a 5xx status.
    pub fn is_server_fault(self) -> bool {
        matches!(
            self,
            Kind::Overloaded
                | Kind::Timeout
                | Kind::Model
                | Kind::Upstream
                | Kind::Unsupported
                | Kind::Internal
        )
    }
}

/// Items of the `RateLimit-Policy` and `RateLimit` header fields, for a limit a transport
/// reports beside the request limit it already does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitFields {
    pub policy: String,
    pub current: String,
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
    /// A machine-readable reason for clients that branch on one (OpenAI's `code`:
    /// `rate_limit_exceeded`, `insufficient_quota`).
    pub code: Option<&'static str>,
    /// The state of the limit that refused the request, as the `RateLimit-Policy` and
    /// `RateLimit` fields' items (draft-ietf-httpapi-ratelimit-headers).
    pub limit_fields: Option<Arc<LimitFields>>,
    /// The underlying error, kept for the log (may name paths or SQL the client must not see).
    cause: Option<Cause>,
    /// Answered before the request's body was read ([`ApiError::before_body`]).
    body_unread: bool,
}

impl ApiError {
    pub fn new(kind: Kind, message: impl Into<String>) -> ApiError {
        let retry_after = matches!(kind, Kind::Overloaded).then_some(1);
        ApiError {
            kind,
            message: message.into(),
            retry_after,
            code: None,
            limit_fields: None,
            cause: None,
            body_unread: false,
        }
    }

    /// This error answers a request whose body was not read (and will not be): the HTTP
    /// transport drains the body, bounded, before answering, so a client still uploading reads
    /// the answer instead of a reset connection.
    pub fn before_body(mut self) -> ApiError {
        self.body_unread = true;
        self
    }

    /// Whether this error answers a request whose body was not read ([`ApiError::before_body`]).
    pub fn is_before_body(&self) -> bool {
        self.body_unread
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

    /// The same error with a machine-readable reason ([`ApiError::code`]).
    pub fn with_code(mut self, code: &'static str) -> ApiError {
        self.code = Some(code);
        self
    }

    /// The same error with the state of the limit that refused it.
    pub fn with_limit_fields(mut self, fields: LimitFields) -> ApiError {
        self.limit_fields = Some(Arc::new(fields));
        self
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

    /// Logs the error with its causes: `error` for a fault on the server's side, `debug` for
    /// the client's. HTTP answers are logged by the request middleware (`infergate_server::request_id`);
    /// answers written into a stream (WebSocket frames, SSE events, gRPC statuses) call this
    /// where they are written.
    pub fn log(&self, transport: &'static str) {
        self.log_with(transport, None, None);
    }

    /// One line for the answer: an error for the server's fault, a debug line for the
    /// client's, naming the request's method and path where the transport has them. Absent
    /// fields are left out of the line.
    pub fn log_with(&self, transport: &'static str, method: Option<&str>, path: Option<&str>) {
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

/// A worker's error answer, relayed as it was given: its status says whose fault.
impl From<infergate_hop::remote::Refusal> for ApiError {
    fn from(r: infergate_hop::remote::Refusal) -> ApiError {
        let mut error = ApiError::new(Kind::from_status_code(r.status), r.message);
        error.retry_after = r.retry_after;
        error
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

pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relayed_status_keeps_its_kind() {
        for (status, kind) in [
            (400, Kind::Invalid),
            (404, Kind::NotFound),
            (429, Kind::RateLimited),
            (502, Kind::Upstream),
            (503, Kind::Overloaded),
            (504, Kind::Timeout),
        ] {
            assert_eq!(Kind::from_status_code(status), kind);
        }
        assert_eq!(Kind::from_status_code(418), Kind::Invalid);
        assert_eq!(Kind::from_status_code(507), Kind::Internal);
    }

    #[test]
    fn store_details_stay_out_of_the_answer_and_in_the_chain() {
        let e = ApiError::from(StoreError::from(rusqlite::Error::InvalidQuery));
        assert_eq!(e.kind, Kind::Internal);
        assert!(!e.message.contains("Query"), "{}", e.message);
        assert!(e.chain().contains("Query"), "{}", e.chain());
        assert!(std::error::Error::source(&e).is_some());
    }

    #[test]
    fn overloaded_errors_carry_a_retry_hint() {
        assert_eq!(ApiError::unavailable("busy").retry_after, Some(1));
        assert!(Kind::Overloaded.is_server_fault());
        assert!(!Kind::RateLimited.is_server_fault());
    }
}
