//! llama.cpp's process-wide initialisation, done once for every model and embedder.

use crate::error::LlmError;
use llama_cpp_2::llama_backend::LlamaBackend;
use std::sync::OnceLock;

/// llama.cpp's process-wide initialisation, once. Public for code that drives llama.cpp beside
/// this crate in the same process (benchmarks and reference tests): llama.cpp refuses a second
/// initialisation.
pub fn backend() -> Result<&'static LlamaBackend, LlmError> {
    static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
            LlamaBackend::init().map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| LlmError::Internal(format!("initialising llama.cpp: {e}")))
}
