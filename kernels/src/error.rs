//! The crate's one error type. Every variant says whose fault it is, so the
//! engine can map it to a status in one place (bad input → 400-style, device
//! or internal → 500/503-style) without matching on strings.

/// Who has to act for the call to succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The caller passed inputs that violate the op's contract (shapes,
    /// lengths, non-finite scores...). Retrying the same call cannot succeed.
    Input,
    /// The CUDA driver, NVRTC or the GPU is missing or failed. The CPU path
    /// can still serve the call.
    Device,
    /// A bug or an environment problem on our side (kernel source that does
    /// not compile, unwritable cache directory).
    Internal,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid input: {0}")]
    InvalidInput(String),
    #[error("CUDA unavailable: {0}")]
    DeviceUnavailable(String),
    #[error("CUDA driver error during {op}: {message}")]
    Device { op: &'static str, message: String },
    #[error("NVRTC failed to compile {kernel} for {arch}: {log}")]
    Compile {
        kernel: &'static str,
        arch: String,
        log: String,
    },
    #[error("PTX cache at {path}: {source}")]
    Cache {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

impl Error {
    pub fn fault(&self) -> Fault {
        match self {
            Error::InvalidInput(_) => Fault::Input,
            Error::DeviceUnavailable(_) | Error::Device { .. } => Fault::Device,
            Error::Compile { .. } | Error::Cache { .. } => Fault::Internal,
        }
    }

    pub(crate) fn input(message: impl Into<String>) -> Self {
        Error::InvalidInput(message.into())
    }

    pub(crate) fn device(op: &'static str, err: impl std::fmt::Display) -> Self {
        Error::Device {
            op,
            message: err.to_string(),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
