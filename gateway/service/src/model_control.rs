//! Triton's model repository extension, for HTTP (`/v2/repository/...`) and gRPC
//! (`RepositoryIndex`, `RepositoryModelLoad`, `RepositoryModelUnload`) alike: the index of the
//! versions and their states, a load now rather than on first request (optionally with a
//! configuration override), and an unload.
//!
//! infergate's repository is its store, so a configuration override given with a load is saved
//! as the newest version's configuration (as `PUT /api/models/{m}/config` saves it) before the
//! load; Triton's override lasts until the next load instead. The override is Triton's model
//! configuration JSON: the fields that describe the model rather than configure it (`name`,
//! `platform`, `backend`, `input`, `output`, ... as `GET /v2/models/{m}/config` shows them) are
//! accepted and left out, a `name` naming another model is refused. Triton's `file:` parameters
//! (model files in the request) are refused: versions are uploaded to `/api/models`.

use crate::catalog::model_key;
use crate::error::{ApiError, ApiResult};
use crate::model_repository::ParsedConfig;
use crate::state::AppState;
use infergate_api_types::kserve::RepositoryEntry;
use infergate_engine::ModelState;
use serde_json::Value;

/// Fields of Triton's model configuration that describe a model rather than configure it: an
/// override may carry them (a configuration read back from the server), and they are dropped.
const DESCRIPTIVE: &[&str] = &[
    "name",
    "platform",
    "backend",
    "runtime",
    "input",
    "output",
    "default_model_filename",
];

/// A load request's parameters, as both transports carry them.
#[derive(Debug, Default)]
pub struct LoadParameters {
    /// `config`: Triton's model configuration JSON, as text.
    pub config: Option<String>,
    /// The names of the `file:...` parameters, refused.
    pub files: Vec<String>,
}

/// Every registered version with its state (`READY`, `LOADING`, `UNAVAILABLE` and why), or only
/// the ready ones.
pub fn index(state: &AppState, only_ready: bool) -> Vec<RepositoryEntry> {
    state
        .catalog()
        .all()
        .iter()
        .filter_map(|r| {
            let (st, reason) = match state.engine().state(&model_key(r)) {
                ModelState::Ready => ("READY", String::new()),
                ModelState::Loading => ("LOADING", String::new()),
                ModelState::Unloaded => ("UNAVAILABLE", "unloaded".to_string()),
                ModelState::Failed(reason) => ("UNAVAILABLE", reason),
            };
            (!only_ready || st == "READY").then(|| RepositoryEntry {
                name: r.name.clone(),
                version: r.version.to_string(),
                state: st.to_owned(),
                reason,
            })
        })
        .collect()
}

/// Loads model `name`'s newest version now (after saving the configuration override, when
/// given).
pub async fn load(state: &AppState, name: &str, parameters: LoadParameters) -> ApiResult<()> {
    if let Some(file) = parameters.files.first() {
        return Err(ApiError::bad_request(format!(
            "failed to load '{name}': model files in the load request ('{file}') are not supported: upload a version with POST /api/models/{name}/versions"
        )));
    }
    let mut record = state.catalog().resolve(name, None)?;
    if let Some(text) = &parameters.config {
        let config = override_config(name, text)?;
        let updated = state.models().set_config(&record, config).await?;
        state.catalog().insert(updated.clone());
        record = std::sync::Arc::new(updated);
    }
    let key = model_key(&record);
    let ready = state.engine().state(&key) == ModelState::Ready;
    state
        .engine()
        .load(&key, &state.model_file(&record, ready).await?)
        .await?;
    Ok(())
}

/// Unloads every loaded version of model `name`; requests already queued finish.
pub fn unload(state: &AppState, name: &str) -> ApiResult<()> {
    state.catalog().resolve(name, None)?;
    for record in state.catalog().versions(name) {
        state.engine().unload(&model_key(&record));
    }
    Ok(())
}

/// A Triton configuration override as the configuration infergate keeps.
fn override_config(name: &str, text: &str) -> ApiResult<ParsedConfig> {
    let mut value: Value = serde_json::from_str(text).map_err(|e| {
        ApiError::bad_request(format!(
            "failed to load '{name}': the config parameter is not JSON: {e}"
        ))
    })?;
    let Some(fields) = value.as_object_mut() else {
        return Err(ApiError::bad_request(format!(
            "failed to load '{name}': the config parameter must be a JSON object"
        )));
    };
    if let Some(named) = fields.get("name").and_then(Value::as_str) {
        if !named.is_empty() && named != name {
            return Err(ApiError::bad_request(format!(
                "failed to load '{name}': the config override names model '{named}'"
            )));
        }
    }
    for field in DESCRIPTIVE {
        fields.remove(*field);
    }
    ParsedConfig::from_value(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_override_drops_what_describes_the_model_and_keeps_what_configures_it() {
        let parsed = override_config(
            "m",
            r#"{"name": "m", "platform": "onnxruntime_onnx", "backend": "onnxruntime",
                "input": [{"name": "x"}], "output": [], "max_batch_size": 4,
                "dynamic_batching": {"max_queue_delay_microseconds": 100}}"#,
        )
        .unwrap();
        assert_eq!(parsed.config.max_batch_size, 4);
        assert!(parsed.value.get("name").is_none());
        assert!(parsed.value.get("dynamic_batching").is_some());
    }

    #[test]
    fn a_bad_override_is_the_clients_fault() {
        for text in [
            "not json",
            "[1]",
            r#"{"name": "other"}"#,
            r#"{"max_batch_size": "four"}"#,
            r#"{"no_such_field": 1}"#,
        ] {
            let e = override_config("m", text).unwrap_err();
            assert_eq!(e.kind, crate::error::Kind::Invalid, "{text}: {}", e.message);
        }
    }
}
