//! Registering model files: validate with ONNX Runtime (GGUF chat models: with their own
//! validator) first, then store the file under its content address and record the version (one
//! step with respect to deletes, see `Store::add_model_version`). Any failure leaves neither a
//! file nor a row behind.

use crate::error::{ApiError, ApiResult};
use crate::store::files::BlobWriter;
use crate::store::models::ModelRecord;
use crate::store::Store;
use infergate_engine::{Engine, EngineError};
use std::sync::Arc;

/// Registers the content of a finished upload as the next version of `name`. Blocking: run it
/// on a blocking thread.
pub fn register(
    store: &Store,
    engine: &Engine,
    name: &str,
    upload: BlobWriter,
    config: &serde_json::Value,
) -> ApiResult<ModelRecord> {
    if upload.is_empty() {
        return Err(ApiError::bad_request("the model file is empty"));
    }
    let size = upload.len();
    let (sha256, tmp) = upload
        .finish()
        .map_err(|e| ApiError::internal(format!("writing the upload: {e}")))?;
    // A GGUF file is a chat model: checked by its own validator, and its config holds no tensor
    // settings to check against a signature.
    let gguf = crate::llm::validate_upload(tmp.path())?;
    let signature = match gguf {
        Some(signature) => signature,
        None => engine.inspect(tmp.path()).map_err(|e| match e {
            EngineError::InvalidModel(reason) => {
                ApiError::bad_request(format!("ONNX Runtime rejected the model: {reason}"))
            }
            other => ApiError::from(other),
        })?,
    };
    // A config that cannot run this model (e.g. batching over a fixed first dimension) is the
    // uploader's mistake: refuse it before anything is stored.
    infergate_engine::ModelConfig::from_json(config)
        .and_then(|c| c.validate_for(&signature))
        .map_err(ApiError::from)?;
    Ok(store.add_model_version(tmp, name, &sha256, size, &signature, config)?)
}

/// Registers a file from disk (the offline `models add` command and the demo setup).
pub fn register_file(
    store: &Arc<Store>,
    engine: &Engine,
    name: &str,
    path: &std::path::Path,
    config: &serde_json::Value,
) -> ApiResult<ModelRecord> {
    crate::state::validate_name("model", name)?;
    let bytes = std::fs::read(path)
        .map_err(|e| ApiError::bad_request(format!("reading {}: {e}", path.display())))?;
    let mut upload = BlobWriter::new(store.dir()).map_err(|e| ApiError::internal(e.to_string()))?;
    upload
        .write(&bytes)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    register(store, engine, name, upload, config)
}
