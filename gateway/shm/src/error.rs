//! The crate's error: a message for the client and whose fault it is, so the gateway maps it
//! to a status in one place (no HTTP types here).

/// Who caused a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A bad name, key, offset or size, a region too small, a shrunk object: the caller's
    /// (HTTP 400, gRPC INVALID_ARGUMENT).
    InvalidArgument,
    /// No such region for this caller, whether or not another caller has one of that name
    /// (Triton's NOT_FOUND: "Unable to find system shared memory region").
    NotFound,
    /// The caller holds as many regions as it may (HTTP 429 or 400, gRPC RESOURCE_EXHAUSTED).
    LimitExceeded,
    /// The system refused something it should not have (HTTP 500, gRPC INTERNAL).
    Internal,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ShmError {
    pub kind: ErrorKind,
    pub message: String,
}

impl ShmError {
    pub(crate) fn invalid(message: impl Into<String>) -> ShmError {
        ShmError {
            kind: ErrorKind::InvalidArgument,
            message: message.into(),
        }
    }

    pub(crate) fn not_found(name: &str) -> ShmError {
        ShmError {
            kind: ErrorKind::NotFound,
            message: format!("Unable to find system shared memory region: '{name}'"),
        }
    }

    pub(crate) fn limit(message: impl Into<String>) -> ShmError {
        ShmError {
            kind: ErrorKind::LimitExceeded,
            message: message.into(),
        }
    }

    pub(crate) fn internal(message: impl Into<String>) -> ShmError {
        ShmError {
            kind: ErrorKind::Internal,
            message: message.into(),
        }
    }
}

pub type Result<T, E = ShmError> = std::result::Result<T, E>;
