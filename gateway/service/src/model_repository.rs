//! The model repository: a model version's life cycle (register an upload, change its
//! configuration, delete it) in one place, for the HTTP handlers and the offline CLI alike.
//! Handlers decode the request, call this, and encode the answer; the checks, the store and the
//! engine are driven from here.
//!
//! Registering validates with ONNX Runtime (GGUF chat models: with their own validator) first,
//! then stores the file under its content address and records the version (one step with
//! respect to deletes, see `Store::add_model_version`). Any failure leaves neither a file nor a
//! row behind.

use crate::catalog::model_key;
use crate::error::{ApiError, ApiResult};
use infergate_engine::{Engine, EngineError, ModelConfig};
use infergate_store::files::BlobWriter;
use infergate_store::models::ModelRecord;
use infergate_store::Store;
use serde_json::Value;
use std::sync::Arc;

/// A model configuration as the client wrote it (kept and shown as written) and as the engine
/// reads it, parsed once (Triton's field names: `max_batch_size`, `dynamic_batching`,
/// `instance_group`, `version_policy`, `unload_after_s`, `model_warmup`, ...).
#[derive(Debug, Clone)]
pub struct ParsedConfig {
    pub value: Value,
    pub config: ModelConfig,
}

impl ParsedConfig {
    /// Unknown fields and bad values are 400s naming the field.
    pub fn parse(text: &str) -> ApiResult<ParsedConfig> {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| ApiError::bad_request(format!("config is not JSON: {e}")))?;
        ParsedConfig::from_value(value)
    }

    pub fn from_value(value: Value) -> ApiResult<ParsedConfig> {
        if !value.is_object() {
            return Err(ApiError::bad_request("config must be a JSON object"));
        }
        let config = ModelConfig::from_json(&value).map_err(ApiError::from)?;
        Ok(ParsedConfig { value, config })
    }

    /// No settings: the engine's defaults.
    pub fn empty() -> ParsedConfig {
        ParsedConfig {
            value: serde_json::json!({}),
            config: ModelConfig::default(),
        }
    }
}

/// The store and the engine a model version lives in (cheap to clone: two `Arc`s).
#[derive(Clone)]
pub struct ModelRepository {
    store: Arc<Store>,
    engine: Arc<Engine>,
}

impl ModelRepository {
    pub fn new(store: Arc<Store>, engine: Arc<Engine>) -> ModelRepository {
        ModelRepository { store, engine }
    }

    /// Registers the content of a finished upload as the next version of `name`, with its
    /// configuration. Blocking (ONNX Runtime reads the model, the store writes): run it on a
    /// blocking thread. The engine gets the configuration from [`ModelRepository::serve`].
    pub fn register(
        &self,
        name: &str,
        upload: BlobWriter,
        config: &ParsedConfig,
    ) -> ApiResult<ModelRecord> {
        if upload.is_empty() {
            return Err(ApiError::bad_request("the model file is empty"));
        }
        let size = upload.len();
        let (sha256, tmp) = upload
            .finish()
            .map_err(|e| ApiError::internal(format!("writing the upload: {e}")))?;
        // A GGUF file is a chat model: checked by its own validator, and its config holds no
        // tensor settings to check against a signature.
        let gguf = crate::chat_models::validate_upload(tmp.path())?;
        let signature = match gguf {
            Some(signature) => signature,
            None => self.engine.inspect(tmp.path()).map_err(|e| match e {
                EngineError::InvalidModel(reason) => {
                    ApiError::bad_request(format!("ONNX Runtime rejected the model: {reason}"))
                }
                other => ApiError::from(other),
            })?,
        };
        // A config that cannot run this model (e.g. batching over a fixed first dimension) is
        // the uploader's mistake: refuse it before anything is stored.
        config
            .config
            .validate_for(&signature)
            .map_err(ApiError::from)?;
        Ok(self
            .store
            .add_model_version(tmp, name, &sha256, size, &signature, &config.value)?)
    }

    /// Registers a file from disk (the offline `models add` command and the demo setup).
    pub fn register_file(
        &self,
        name: &str,
        path: &std::path::Path,
        config: &ParsedConfig,
    ) -> ApiResult<ModelRecord> {
        crate::names::validate_name("model", name)?;
        let bytes = std::fs::read(path)
            .map_err(|e| ApiError::bad_request(format!("reading {}: {e}", path.display())))?;
        let mut upload =
            BlobWriter::new(self.store.dir()).map_err(|e| ApiError::internal(e.to_string()))?;
        upload
            .write(&bytes)
            .map_err(|e| ApiError::internal(e.to_string()))?;
        self.register(name, upload, config)
    }

    /// Hands a newly registered version's configuration to the engine, so its first request
    /// loads it with these settings.
    pub async fn serve(&self, record: &ModelRecord, config: &ParsedConfig) -> ApiResult<()> {
        self.engine
            .set_config(&model_key(record), config.config.clone())
            .await?;
        Ok(())
    }

    /// Replaces a version's configuration: checked against its signature, applied by the
    /// engine (new batches use it at once, requests in flight are not failed), then stored.
    /// Returns the updated record.
    pub async fn set_config(
        &self,
        record: &ModelRecord,
        config: ParsedConfig,
    ) -> ApiResult<ModelRecord> {
        config
            .config
            .validate_for(&record.signature)
            .map_err(ApiError::from)?;
        self.engine
            .set_config(&model_key(record), config.config)
            .await?;
        if !self
            .store
            .set_model_config(&record.name, record.version, &config.value)?
        {
            return Err(ApiError::not_found(format!(
                "model '{}' version {} was deleted meanwhile",
                record.name, record.version
            )));
        }
        let mut updated = record.clone();
        updated.config = config.value;
        Ok(updated)
    }

    /// Deletes a version from the store (on a blocking thread) and unloads it from the engine.
    /// `Ok(false)`: it was deleted meanwhile. Whether anything still uses it (pipelines,
    /// requests in flight) is the caller's to check first.
    pub async fn delete(&self, record: &ModelRecord) -> ApiResult<bool> {
        let (name, version, store) = (record.name.clone(), record.version, self.store.clone());
        let deleted =
            tokio::task::spawn_blocking(move || store.delete_model_version(&name, version))
                .await
                .map_err(|e| ApiError::internal(e.to_string()))??;
        self.engine.unload(&model_key(record));
        Ok(deleted.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Kind;

    /// The book's model configuration example is accepted as documented.
    #[test]
    fn the_books_model_config_example_parses() {
        let readme = include_str!("../../../docs/src/model-configuration.md");
        let section = readme
            .find("# Model configuration")
            .expect("the book documents model configuration");
        let start = readme[section..].find("```json\n").expect("a JSON example") + section + 8;
        let len = readme[start..].find("```").expect("its end");
        let parsed = ParsedConfig::parse(&readme[start..start + len]).unwrap();
        assert_eq!(parsed.config.max_batch_size, 16);
        assert!(parsed.config.version_policy.is_some());
    }

    #[test]
    fn unknown_config_fields_are_client_errors() {
        let err =
            ParsedConfig::parse(r#"{"max_batch_size": 4, "dynamic_batchin": {}}"#).unwrap_err();
        assert_eq!(err.kind, Kind::Invalid);
        assert!(err.message.contains("dynamic_batchin"), "{}", err.message);
        assert!(ParsedConfig::parse("[1]").is_err());
    }
}
