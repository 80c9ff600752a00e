//! What every handler shares: configuration, store, engine, the in-memory model catalog and
//! authentication. It is built from its parts (catalog, pipelines, metrics, chat models,
//! workers, ...), which know nothing of it: a part that needs another gets it handed in.

use crate::auth::{self, Scope};
use crate::catalog::Catalog;
use crate::config::Config;
use crate::drain::Drain;
use crate::error::{ApiError, ApiResult};
use crate::history::History;
use crate::llm::LlmModels;
use crate::metrics::Metrics;
use crate::pipeline::registry::PluginRegistry;
use crate::pipeline::Pipelines;
use crate::ratelimit::{Limiter, Limits};
use crate::shared_limits::SharedLimits;
use crate::store::keys::KeyRecord;
use crate::store::models::model_key;
use crate::store::models::ModelRecord;
use crate::store::{BlobKind, Store, StoreError};
use crate::textgen::Vocab;
use crate::workers::Manager;
use infergate_engine::kernels::Ops;
use infergate_engine::{Engine, ModelConfig};
use infergate_plugin_host::PluginHost;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Built once at start ([`AppState::new`]) and shared by every handler. Its fields are
/// private: handlers read a part through its accessor, and a module that needs one or two
/// parts is handed those, not the state.
pub struct AppState {
    config: Config,
    store: Arc<Store>,
    engine: Arc<Engine>,
    catalog: Catalog,
    plugins: PluginRegistry,
    pipelines: Pipelines,
    /// Native ops (resize/normalize, ...) on the GPU when one is usable, else the CPU; the
    /// engine's, shared.
    ops: Arc<Ops>,
    ready: AtomicBool,
    /// Per-key admission state and the limits of keys without their own.
    limiter: Arc<Limiter>,
    default_limits: Limits,
    /// Rate limits shared with other replicas (Redis), when configured.
    shared_limits: Option<SharedLimits>,
    metrics: Metrics,
    /// The last hour per model and pipeline (`/api/metrics/history`).
    history: History,
    /// The text generator's vocabulary (`[openai] vocab`), for the OpenAI API.
    textgen_vocab: Option<Arc<Vocab>>,
    /// Shutdown of WebSocket streams.
    drain: Drain,
    /// Loaded chat models (GGUF).
    llm: Arc<LlmModels>,
    /// Workers on other hosts and where each request runs.
    workers: Arc<Manager>,
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
                SharedLimits::new(url, config.limits.shared_failure)
                    .map_err(ApiError::bad_request)?,
            ),
            None => None,
        };
        let textgen_vocab = match &config.openai.vocab {
            Some(path) => Some(Arc::new(Vocab::load(path).map_err(ApiError::bad_request)?)),
            None => None,
        };
        let workers = Manager::new(&store, config.cluster.clone())
            .map(Arc::new)
            .map_err(|e| ApiError::internal(format!("cluster: {e:#}")))?;
        let llm = Arc::new(LlmModels::new(config.llm.clone(), engine.clone()));
        Ok(AppState {
            config,
            store,
            engine,
            catalog,
            plugins,
            pipelines,
            ops,
            ready: AtomicBool::new(true),
            limiter: Arc::new(Limiter::new()),
            default_limits,
            shared_limits,
            metrics: Metrics::new(),
            history: History::default(),
            textgen_vocab,
            drain: Drain::default(),
            llm,
            workers,
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    pub fn plugins(&self) -> &PluginRegistry {
        &self.plugins
    }

    pub fn pipelines(&self) -> &Pipelines {
        &self.pipelines
    }

    pub fn ops(&self) -> &Arc<Ops> {
        &self.ops
    }

    pub fn limiter(&self) -> &Arc<Limiter> {
        &self.limiter
    }

    pub fn default_limits(&self) -> &Limits {
        &self.default_limits
    }

    pub fn shared_limits(&self) -> Option<&SharedLimits> {
        self.shared_limits.as_ref()
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn history(&self) -> &History {
        &self.history
    }

    pub fn textgen_vocab(&self) -> Option<&Arc<Vocab>> {
        self.textgen_vocab.as_ref()
    }

    pub fn drain(&self) -> &Drain {
        &self.drain
    }

    pub fn llm(&self) -> &Arc<LlmModels> {
        &self.llm
    }

    pub fn workers(&self) -> &Arc<Manager> {
        &self.workers
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
    pub fn authorize(&self, headers: &http::HeaderMap, scope: Scope) -> ApiResult<Arc<KeyRecord>> {
        let key = self.authenticate(headers)?;
        check_scopes(&key, &[scope])?;
        crate::connection::authenticated();
        Ok(key)
    }

    /// The active key the request presents (from the in-memory key cache): 401 without one.
    pub fn authenticate(&self, headers: &http::HeaderMap) -> ApiResult<Arc<KeyRecord>> {
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

    /// Where a version's file lies in the data directory, unchecked (see [`Self::model_file`]).
    pub fn model_path(&self, record: &ModelRecord) -> PathBuf {
        self.store.dir().model_file(&record.sha256)
    }

    /// The data directory's copy of a version's file, to load it from: checked against its
    /// sha256 and, with PostgreSQL, fetched from the database when missing or damaged
    /// (`Store::local_blob`). `ready`: the engine serves the version already (the caller has
    /// asked it), so its file is not checked again on every request.
    pub async fn model_file(&self, record: &ModelRecord, ready: bool) -> ApiResult<PathBuf> {
        if ready {
            return Ok(self.model_path(record));
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

/// 403 unless `key` holds one of `scopes` (`admin` implies every scope).
pub fn check_scopes(key: &KeyRecord, scopes: &[Scope]) -> ApiResult<()> {
    if scopes.iter().any(|&s| key.allows(s)) {
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
