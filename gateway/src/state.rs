//! What every handler shares: configuration, store, engine, the in-memory model catalog and
//! authentication.

use crate::auth::{self, Scope};
use crate::config::Config;
use crate::drain::Drain;
use crate::error::{ApiError, ApiResult};
use crate::metrics::Metrics;
use crate::pipeline::registry::PluginRegistry;
use crate::pipeline::Pipelines;
use crate::ratelimit::{Limiter, Limits};
use crate::store::keys::KeyRecord;
use crate::store::models::ModelRecord;
use crate::store::Store;
use crate::textgen::Vocab;
use infergate_engine::kernels::device::ptx::PtxCache;
use infergate_engine::kernels::Ops;
use infergate_engine::{Engine, ModelConfig, ModelKey};
use infergate_plugin_host::PluginHost;
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub struct AppState {
    pub config: Config,
    pub store: Arc<Store>,
    pub engine: Arc<Engine>,
    pub catalog: Catalog,
    pub plugins: PluginRegistry,
    pub pipelines: Pipelines,
    /// Native ops (resize/normalize, ...) on the GPU when one is usable, else the CPU.
    pub ops: Arc<Ops>,
    ready: AtomicBool,
    /// Per-key admission state and the limits of keys without their own.
    pub limiter: Limiter,
    pub default_limits: Limits,
    pub metrics: Metrics,
    /// The text generator's vocabulary (`[openai] vocab`), for the OpenAI API.
    pub textgen_vocab: Option<Arc<Vocab>>,
    /// Shutdown of WebSocket streams.
    pub drain: Drain,
}

impl AppState {
    pub fn new(
        config: Config,
        store: Arc<Store>,
        engine: Arc<Engine>,
        plugin_host: Arc<PluginHost>,
    ) -> ApiResult<AppState> {
        let catalog = Catalog::default();
        catalog.replace_all(store.list_model_versions()?);
        let plugins = PluginRegistry::load(plugin_host, &store)?;
        let device =
            crate::config::parse_device(&config.engine.device).map_err(ApiError::bad_request)?;
        // Compiled kernels are cached per NVRTC version and GPU architecture in the data dir.
        let ptx_cache = PtxCache::new(store.dir().root().join("ptx-cache"));
        let ops = Arc::new(Ops::new(device, Some(&ptx_cache)));
        let pipelines = Pipelines::load(store.list_pipelines()?);
        let default_limits = config.default_key_limits().map_err(ApiError::bad_request)?;
        let textgen_vocab = match &config.openai.vocab {
            Some(path) => Some(Arc::new(Vocab::load(path).map_err(ApiError::bad_request)?)),
            None => None,
        };
        Ok(AppState {
            config,
            store,
            engine,
            catalog,
            plugins,
            pipelines,
            ops,
            ready: AtomicBool::new(true),
            limiter: Limiter::new(),
            default_limits,
            metrics: Metrics::new(),
            textgen_vocab,
            drain: Drain::default(),
        })
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed)
    }

    /// Authenticates the request's key and checks it has `scope`: 401 without a valid key,
    /// 403 with a valid key lacking the scope.
    pub fn authorize(&self, headers: &http::HeaderMap, scope: Scope) -> ApiResult<KeyRecord> {
        let presented = auth::presented_key(headers).ok_or_else(|| {
            ApiError::unauthorized(
                "missing API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'",
            )
        })?;
        let key = self
            .store
            .authenticate(presented)?
            .ok_or_else(|| ApiError::unauthorized("invalid or revoked API key"))?;
        if !key.scopes().allows(scope) {
            return Err(ApiError::forbidden(format!(
                "this key (scopes: {}) lacks the '{}' scope",
                key.scopes().to_list(),
                scope.as_str()
            )));
        }
        Ok(key)
    }

    /// Hands every stored version's configuration to the engine (at start). A stored config the
    /// engine now refuses is reported and that version runs with defaults.
    pub async fn apply_model_configs(&self) {
        for record in self.catalog.all() {
            let key = model_key(&record);
            let applied = match ModelConfig::from_json(&record.config) {
                Ok(config) => self.engine.set_config(&key, config).await,
                Err(e) => Err(e),
            };
            if let Err(e) = applied {
                tracing::error!(model = %key, error = %e, "stored model config refused; serving with defaults");
            }
        }
    }

    pub fn model_path(&self, record: &ModelRecord) -> PathBuf {
        self.store.dir().model_file(&record.sha256)
    }
}

pub fn model_key(record: &ModelRecord) -> ModelKey {
    ModelKey {
        name: record.name.clone(),
        version: record.version,
    }
}

/// The model versions in the database, kept in memory so the request path never queries SQLite
/// for them. Updated by the handlers that change the database.
#[derive(Default)]
pub struct Catalog {
    models: RwLock<BTreeMap<String, BTreeMap<u64, Arc<ModelRecord>>>>,
}

impl Catalog {
    pub fn replace_all(&self, records: Vec<ModelRecord>) {
        let mut map: BTreeMap<String, BTreeMap<u64, Arc<ModelRecord>>> = BTreeMap::new();
        for r in records {
            map.entry(r.name.clone())
                .or_default()
                .insert(r.version, Arc::new(r));
        }
        *self.models.write() = map;
    }

    pub fn insert(&self, record: ModelRecord) {
        self.models
            .write()
            .entry(record.name.clone())
            .or_default()
            .insert(record.version, Arc::new(record));
    }

    pub fn remove(&self, name: &str, version: u64) {
        let mut models = self.models.write();
        if let Some(versions) = models.get_mut(name) {
            versions.remove(&version);
            if versions.is_empty() {
                models.remove(name);
            }
        }
    }

    /// A version the newest version's `version_policy` serves, or the policy's default when
    /// `version` is None (the newest without a policy). 404 names what is missing.
    pub fn resolve(&self, name: &str, version: Option<u64>) -> ApiResult<Arc<ModelRecord>> {
        let models = self.models.read();
        let versions = models
            .get(name)
            .ok_or_else(|| ApiError::not_found(format!("unknown model '{name}'")))?;
        let newest = versions
            .values()
            .next_back()
            .ok_or_else(|| ApiError::not_found(format!("unknown model '{name}'")))?;
        let policy = match newest.config.get("version_policy") {
            None => None,
            Some(_) => ModelConfig::from_json(&newest.config)
                .ok()
                .and_then(|c| c.version_policy),
        };
        // Without a policy every stored version is addressable and the newest is the default.
        let Some(policy) = policy else {
            return match version {
                Some(v) => versions.get(&v).cloned().ok_or_else(|| {
                    ApiError::not_found(format!("model '{name}' has no version {v}"))
                }),
                None => Ok(newest.clone()),
            };
        };
        let available: Vec<u64> = versions.keys().copied().collect();
        let servable = policy.servable(&available);
        let wanted = match version {
            Some(v) if !versions.contains_key(&v) => {
                return Err(ApiError::not_found(format!(
                    "model '{name}' has no version {v}"
                )))
            }
            Some(v) if !servable.versions.contains(&v) => {
                return Err(ApiError::not_found(format!(
                    "model '{name}' version {v} is not served by its version policy"
                )))
            }
            Some(v) => v,
            None => servable.default.ok_or_else(|| {
                ApiError::not_found(format!("model '{name}' has no version its policy serves"))
            })?,
        };
        versions
            .get(&wanted)
            .cloned()
            .ok_or_else(|| ApiError::not_found(format!("model '{name}' has no version {wanted}")))
    }

    pub fn versions(&self, name: &str) -> Vec<Arc<ModelRecord>> {
        self.models
            .read()
            .get(name)
            .map(|v| v.values().cloned().collect())
            .unwrap_or_default()
    }

    pub fn all(&self) -> Vec<Arc<ModelRecord>> {
        self.models
            .read()
            .values()
            .flat_map(|v| v.values().cloned())
            .collect()
    }
}

/// Parses a version path segment.
pub fn parse_version(v: &str) -> ApiResult<u64> {
    v.parse().map_err(|_| {
        ApiError::bad_request(format!(
            "model version must be a positive integer, got '{v}'"
        ))
    })
}

/// Model names: 1–128 characters of letters, digits, '-', '_', '.', not starting with '.',
/// so a name can never escape a directory or hide control characters in logs.
pub fn validate_name(kind: &str, name: &str) -> ApiResult<()> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "invalid {kind} name '{}': use 1-128 letters, digits, '-', '_' or '.', not starting with '.'",
            name.escape_debug()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_reject_traversal_and_control_characters() {
        for good in ["ocr", "mini-lm_v2", "a.b"] {
            validate_name("model", good).unwrap();
        }
        for bad in [
            "",
            "..",
            ".hidden",
            "a/b",
            "a\\b",
            "a\nb",
            "a b",
            &"x".repeat(129),
        ] {
            assert!(validate_name("model", bad).is_err(), "{bad:?}");
        }
    }
}
