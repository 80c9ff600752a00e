//! The gateway's one error type. Each error carries its HTTP status, decided in one place from
//! whose fault it is, and renders as `{"error": "..."}`.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use infergate_engine::{EngineError, Fault};
use infergate_plugin_host::PluginError;
use infergate_protocol::DecodeError;

use crate::store::StoreError;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// Seconds a client should wait before retrying (429/503).
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            retry_after: None,
        }
    }
    pub fn bad_request(m: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, m)
    }
    pub fn unauthorized(m: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, m)
    }
    pub fn forbidden(m: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, m)
    }
    pub fn not_found(m: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, m)
    }
    pub fn conflict(m: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, m)
    }
    pub fn too_large(m: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, m)
    }
    pub fn unavailable(m: impl Into<String>) -> ApiError {
        ApiError {
            retry_after: Some(1),
            ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, m)
        }
    }
    pub fn internal(m: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, m)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> ApiError {
        // Clients get the message without file paths; the log keeps them.
        let message = e.client_message();
        if message != e.to_string() {
            tracing::info!(error = %e, "engine error (paths redacted in the answer)");
        }
        match e.fault() {
            Fault::Client => ApiError::bad_request(message),
            Fault::Model => ApiError::internal(message),
            Fault::Unavailable => ApiError {
                retry_after: Some(e.retry_after().map_or(1, |d| d.as_secs().max(1))),
                ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message)
            },
            Fault::Timeout => ApiError::new(StatusCode::GATEWAY_TIMEOUT, message),
            Fault::Internal => {
                tracing::error!(error = %e, "engine failure");
                ApiError::internal(message)
            }
        }
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
        let status =
            StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if status.is_server_error() {
            tracing::warn!(error = %e, "plugin failure");
        }
        let mut error = ApiError::new(status, e.to_string());
        if status == StatusCode::SERVICE_UNAVAILABLE {
            error.retry_after = Some(1);
        }
        error
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        tracing::error!(error = %e, "store failure");
        ApiError::internal(format!("storage failure: {e}"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.message });
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(http::header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
