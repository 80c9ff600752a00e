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
use crate::store::{BlobKind, Store, StoreError};
use crate::textgen::Vocab;
use infergate_engine::kernels::Ops;
use infergate_engine::{Engine, ModelConfig, ModelKey, VersionPolicy};
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
    /// Native ops (resize/normalize, ...) on the GPU when one is usable, else the CPU; the
    /// engine's, shared.
    pub ops: Arc<Ops>,
    ready: AtomicBool,
    /// Per-key admission state and the limits of keys without their own.
    pub limiter: Limiter,
    pub default_limits: Limits,
    /// Rate limits shared with other replicas (Redis), when configured.
    pub shared_limits: Option<crate::shared_limits::SharedLimits>,
    pub metrics: Metrics,
    /// The text generator's vocabulary (`[openai] vocab`), for the OpenAI API.
    pub textgen_vocab: Option<Arc<Vocab>>,
    /// Shutdown of WebSocket streams.
    pub drain: Drain,
    /// Loaded chat models (GGUF).
    pub llm: crate::llm::LlmModels,
    /// Workers on other hosts and where each request runs.
    pub workers: Arc<crate::workers::Manager>,
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
        // The engine opened the device (or fell back to the CPU) for its post-ops.
        let ops = engine.ops().clone();
        let pipelines = Pipelines::load(store.list_pipelines()?);
        let default_limits = config.default_key_limits().map_err(ApiError::bad_request)?;
        let shared_limits = match &config.limits.shared_url {
            Some(url) => Some(
                crate::shared_limits::SharedLimits::new(url, config.limits.shared_failure)
                    .map_err(ApiError::bad_request)?,
            ),
            None => None,
        };
        let textgen_vocab = match &config.openai.vocab {
            Some(path) => Some(Arc::new(Vocab::load(path).map_err(ApiError::bad_request)?)),
            None => None,
        };
        let workers = crate::workers::Manager::new(&store, config.cluster.clone())
            .map(Arc::new)
            .map_err(|e| ApiError::internal(format!("cluster: {e:#}")))?;
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
            shared_limits,
            metrics: Metrics::new(),
            textgen_vocab,
            drain: Drain::default(),
            llm: crate::llm::LlmModels::default(),
            workers,
        })
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed)
    }

    /// Authenticates the request's key and checks it has `scope`: 401 without a valid key,
    /// 403 with a valid key lacking the scope. HTTP handlers take
    /// [`crate::api::authorized::Authorized`] instead; this serves gRPC and WebSocket keys.
    pub fn authorize(&self, headers: &http::HeaderMap, scope: Scope) -> ApiResult<KeyRecord> {
        let key = self.authenticate(headers)?;
        check_scopes(&key, &[scope])?;
        crate::connection::authenticated();
        Ok(key)
    }

    /// The active key the request presents (from the in-memory key cache): 401 without one.
    pub fn authenticate(&self, headers: &http::HeaderMap) -> ApiResult<KeyRecord> {
        let presented = auth::presented_key(headers).ok_or_else(|| {
            ApiError::unauthorized(
                "missing API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'",
            )
        })?;
        self.store
            .authenticate(presented)?
            .ok_or_else(|| ApiError::unauthorized("invalid or revoked API key"))
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

    /// The model repository over this server's store and engine.
    pub fn models(&self) -> crate::model_repository::ModelRepository {
        crate::model_repository::ModelRepository::new(self.store.clone(), self.engine.clone())
    }

    /// The data directory's copy of a version's file, to load it from: checked against its
    /// sha256 and, with PostgreSQL, fetched from the database when missing or damaged
    /// (`Store::local_blob`). `ready`: the engine serves the version already (the caller has
    /// asked it), so its file is not checked again on every request.
    pub async fn model_file(&self, record: &ModelRecord, ready: bool) -> ApiResult<PathBuf> {
        if ready {
            return Ok(self.store.dir().model_file(&record.sha256));
        }
        let store = self.store.clone();
        let sha256 = record.sha256.clone();
        tokio::task::spawn_blocking(move || store.local_blob(BlobKind::Model, &sha256))
            .await
            .map_err(|e| ApiError::internal(format!("model file task failed: {e}")))?
            .map_err(|e| match e {
                // Names the file and what is wrong with it, no SQL: the operator's answer.
                StoreError::Corrupt(why) => ApiError::internal(format!(
                    "model '{}' version {}: {why}",
                    record.name, record.version
                )),
                e => ApiError::from(e),
            })
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
    models: RwLock<BTreeMap<String, ModelVersions>>,
}

/// One model's versions and the version policy its newest version's config names, parsed
/// when the versions change so the request path never parses configuration.
#[derive(Default)]
struct ModelVersions {
    versions: BTreeMap<u64, Arc<ModelRecord>>,
    policy: Option<VersionPolicy>,
}

impl ModelVersions {
    fn refresh_policy(&mut self) {
        self.policy = self.versions.values().next_back().and_then(|newest| {
            newest.config.get("version_policy")?;
            ModelConfig::from_json(&newest.config)
                .ok()
                .and_then(|c| c.version_policy)
        });
    }
}

impl Catalog {
    pub fn replace_all(&self, records: Vec<ModelRecord>) {
        let mut map: BTreeMap<String, ModelVersions> = BTreeMap::new();
        for r in records {
            map.entry(r.name.clone())
                .or_default()
                .versions
                .insert(r.version, Arc::new(r));
        }
        map.values_mut().for_each(ModelVersions::refresh_policy);
        *self.models.write() = map;
    }

    pub fn insert(&self, record: ModelRecord) {
        let mut models = self.models.write();
        let entry = models.entry(record.name.clone()).or_default();
        entry.versions.insert(record.version, Arc::new(record));
        entry.refresh_policy();
    }

    pub fn remove(&self, name: &str, version: u64) {
        let mut models = self.models.write();
        if let Some(entry) = models.get_mut(name) {
            entry.versions.remove(&version);
            if entry.versions.is_empty() {
                models.remove(name);
            } else {
                entry.refresh_policy();
            }
        }
    }

    /// A version the newest version's `version_policy` serves, or the policy's default when
    /// `version` is None (the newest without a policy). 404 names what is missing.
    pub fn resolve(&self, name: &str, version: Option<u64>) -> ApiResult<Arc<ModelRecord>> {
        let models = self.models.read();
        let entry = models
            .get(name)
            .ok_or_else(|| ApiError::not_found(format!("unknown model '{name}'")))?;
        let versions = &entry.versions;
        let newest = versions
            .values()
            .next_back()
            .ok_or_else(|| ApiError::not_found(format!("unknown model '{name}'")))?;
        // Without a policy every stored version is addressable and the newest is the default.
        let Some(policy) = &entry.policy else {
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
            .map(|v| v.versions.values().cloned().collect())
            .unwrap_or_default()
    }

    pub fn all(&self) -> Vec<Arc<ModelRecord>> {
        self.models
            .read()
            .values()
            .flat_map(|v| v.versions.values().cloned())
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

/// Names of models, pipelines and plugins (see [`infergate_protocol::names`]); a bad one is a
/// 400.
pub fn validate_name(kind: &str, name: &str) -> ApiResult<()> {
    Ok(infergate_protocol::names::check(kind, name)?)
}

/// 403 unless `key` holds one of `scopes` (`admin` implies every scope).
pub fn check_scopes(key: &KeyRecord, scopes: &[Scope]) -> ApiResult<()> {
    if scopes.iter().any(|&s| key.scopes().allows(s)) {
        return Ok(());
    }
    let wanted: Vec<&str> = scopes.iter().map(|s| s.as_str()).collect();
    let wanted = match wanted.as_slice() {
        [one] => format!("the '{one}' scope"),
        many => format!("any of the '{}' scopes", many.join("', '")),
    };
    Err(ApiError::forbidden(format!(
        "this key (scopes: {}) lacks {wanted}",
        key.scopes().to_list(),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(version: u64, config: serde_json::Value) -> ModelRecord {
        ModelRecord {
            name: "m".into(),
            version,
            sha256: format!("{version:064}"),
            size_bytes: 1,
            signature: infergate_engine::ModelSignature {
                inputs: vec![],
                outputs: vec![],
                metadata: Default::default(),
            },
            config,
            created_at: 0,
        }
    }

    #[test]
    fn the_newest_versions_policy_decides_what_resolves() {
        let catalog = Catalog::default();
        catalog.replace_all(vec![record(1, serde_json::json!({}))]);
        catalog.insert(record(2, serde_json::json!({"version_policy": "latest:1"})));
        assert_eq!(catalog.resolve("m", None).unwrap().version, 2);
        let refused = catalog.resolve("m", Some(1)).unwrap_err();
        assert_eq!(refused.status(), http::StatusCode::NOT_FOUND);
        assert!(
            refused.message.contains("version policy"),
            "{}",
            refused.message
        );
        // Version 1 names no policy: once it is the newest, every version is addressable.
        catalog.remove("m", 2);
        assert_eq!(catalog.resolve("m", Some(1)).unwrap().version, 1);
        assert!(catalog.resolve("m", Some(2)).is_err());
    }

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
