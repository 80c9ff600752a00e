//! What every handler shares: configuration, store, engine, the in-memory model catalog and
//! authentication. It is built from its parts (catalog, pipelines, metrics, chat models,
//! workers, ...), which know nothing of it: a part that needs another gets it handed in.

use crate::anonymous::{AnonymousAccess, TrustedProxies};
use crate::caller::Caller;
use crate::catalog::model_key;
use crate::catalog::Catalog;
use crate::chat_models::LlmModels;
use crate::config::Config;
use crate::drain::Drain;
use crate::error::{ApiError, ApiResult};
use crate::history::History;
use crate::manager::Manager;
use crate::metrics::Metrics;
use crate::mirror_queue::Mirrors;
use crate::model_settings::ModelSettings;
use crate::payload_log::{PayloadLogPolicy, PayloadLogs};
use crate::phases::{Phases, Policy};
use crate::pipelines::registry::PluginRegistry;
use crate::pipelines::Pipelines;
use crate::response_cache::{AnswerCache, CachePolicy};
use crate::shared_limits::SharedLimits;
use crate::textgen::Vocab;
use crate::token_accounting::TokenAccounting;
use crate::token_limits::{TokenGate, TokenPolicy};
use infergate_engine::kernels::Ops;
use infergate_engine::{Engine, ModelConfig};
use infergate_limits::{Limiter, Limits};
use infergate_plugin_host::PluginHost;
use infergate_store::auth::Scope;
use infergate_store::models::ModelRecord;
use infergate_store::{BlobKind, Store, StoreError};
use infergate_traffic::tokens::TokenLimits;
use std::net::IpAddr;
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
    shared_limits: Option<Arc<SharedLimits>>,
    metrics: Arc<Metrics>,
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
    /// The policies attached to the request phases.
    phases: Phases,
    /// What callers without a key get, when anonymous access is on.
    anonymous: Option<AnonymousAccess>,
    /// The proxies whose `X-Forwarded-For` names the client.
    proxies: TrustedProxies,
    /// Triton's system shared-memory regions, when `[shared_memory] enabled`.
    shared_memory: Option<infergate_shm::SharedMemory>,
    /// Models' own settings (traffic policies), next to the catalog.
    model_settings: Arc<ModelSettings>,
    payload_logs: Arc<PayloadLogs>,
    /// The token limits of keys without their own.
    default_token_limits: TokenLimits,
    /// Token limits and their accounting (LLM requests).
    tokens: Arc<TokenGate>,
    /// The response cache (`[cache] bytes`).
    cache: AnswerCache,
    /// Mirrored copies waiting to run.
    mirrors: Mirrors,
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
            Some(url) => Some(Arc::new(
                SharedLimits::new(url, config.limits.shared_failure)
                    .map_err(ApiError::bad_request)?,
            )),
            None => None,
        };
        let default_token_limits = config.default_token_limits();
        default_token_limits
            .validate()
            .map_err(|e| ApiError::bad_request(format!("[limits] default_{e}")))?;
        let model_settings = Arc::new(ModelSettings::load(&store)?);
        let metrics = Arc::new(Metrics::new());
        let cache = AnswerCache::new(config.cache.bytes);
        metrics.traffic.attach_cache(cache.clone());
        let tokens = Arc::new(TokenGate::new(
            shared_limits.clone(),
            Arc::new(TokenAccounting::default()),
            metrics.clone(),
        ));
        tokens.restore(&store, &default_token_limits)?;
        // Built-in policies, in order: a cached chat answer is charged its tokens, so the token
        // limits admit first.
        let mut phases = Phases::default();
        phases.attach(Arc::new(TokenPolicy::new(tokens.clone())));
        phases.attach(Arc::new(CachePolicy::new(cache.clone())));
        // Last: an entry holds what the policies before it let through.
        let payload_logs =
            Arc::new(PayloadLogs::start(&config.payload_log).map_err(ApiError::bad_request)?);
        metrics.traffic.attach_payload_logs(payload_logs.clone());
        // Attached even without sinks: an admin may define one at run time. With no setting on
        // the model and the key it costs two lookups.
        phases.attach(Arc::new(PayloadLogPolicy::new(
            payload_logs.clone(),
            model_settings.clone(),
        )));
        let textgen_vocab = match &config.openai.vocab {
            Some(path) => Some(Arc::new(Vocab::load(path).map_err(ApiError::bad_request)?)),
            None => None,
        };
        let workers = Manager::new(&store, config.cluster.clone())
            .map(Arc::new)
            .map_err(|e| ApiError::internal(format!("cluster: {e:#}")))?;
        let llm = Arc::new(LlmModels::new(config.llm.clone(), engine.clone()));
        let anonymous = config.anonymous_access().map_err(ApiError::bad_request)?;
        let proxies = TrustedProxies::new(&config.auth).map_err(ApiError::bad_request)?;
        let shared_memory = if config.shared_memory.enabled {
            let limits = infergate_shm::Limits {
                max_regions_per_owner: config.shared_memory.max_regions_per_caller,
                max_transfer_bytes: config.limits.max_request_bytes as u64,
            };
            Some(
                infergate_shm::SharedMemory::new(&config.shared_memory.key_prefix, limits)
                    .map_err(|e| ApiError::bad_request(format!("[shared_memory] {e}")))?,
            )
        } else {
            None
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
            limiter: Arc::new(Limiter::new()),
            default_limits,
            shared_limits,
            metrics,
            history: History::default(),
            textgen_vocab,
            drain: Drain::default(),
            llm,
            workers,
            anonymous,
            proxies,
            shared_memory,
            phases,
            model_settings,
            payload_logs,
            default_token_limits,
            tokens,
            cache,
            mirrors: Mirrors::default(),
        })
    }

    /// The same state with `policy` attached to the request phases, after those attached
    /// before (at start, before the state is shared).
    pub fn with_policy(mut self, policy: Arc<dyn Policy>) -> AppState {
        self.phases.attach(policy);
        self
    }

    pub fn phases(&self) -> &Phases {
        &self.phases
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
        self.shared_limits.as_deref()
    }

    /// The payload log sinks of `[payload_log]`.
    pub fn payload_logs(&self) -> &PayloadLogs {
        &self.payload_logs
    }

    pub fn model_settings(&self) -> &ModelSettings {
        &self.model_settings
    }

    pub fn default_token_limits(&self) -> &TokenLimits {
        &self.default_token_limits
    }

    pub fn tokens(&self) -> &Arc<TokenGate> {
        &self.tokens
    }

    pub fn cache(&self) -> &AnswerCache {
        &self.cache
    }

    pub fn mirrors(&self) -> &Mirrors {
        &self.mirrors
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

    /// What callers without a key get; `None` when anonymous access is off.
    pub fn anonymous(&self) -> Option<&AnonymousAccess> {
        self.anonymous.as_ref()
    }

    /// The client behind a connection from `peer`: the peer itself, or the address a trusted
    /// proxy names in `forwarded_for` (see [`TrustedProxies::client`]).
    pub fn client_address(&self, peer: IpAddr, forwarded_for: &[&str]) -> IpAddr {
        self.proxies.client(peer, forwarded_for)
    }

    /// The system shared-memory regions; `None` when `[shared_memory] enabled` is false.
    pub fn shared_memory(&self) -> Option<&infergate_shm::SharedMemory> {
        self.shared_memory.as_ref()
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed)
    }

    /// Authenticates the key a request presents (`None`: it presented none) and checks it has
    /// `scope`: 401 without a valid key, 403 with a valid key lacking the scope. HTTP handlers
    /// take the server's `Authorized` extractor instead; this serves gRPC and WebSocket keys.
    /// Keys only: [`Self::authorize_from`] also serves anonymous callers.
    pub fn authorize(&self, presented: Option<&str>, scope: Scope) -> ApiResult<Caller> {
        self.authorize_from(presented, None, scope)
    }

    /// [`Self::authorize`] for a caller at `client` (its address, when known): without a key, a
    /// caller from a network granted anonymous access is served as anonymous.
    pub fn authorize_from(
        &self,
        presented: Option<&str>,
        client: Option<IpAddr>,
        scope: Scope,
    ) -> ApiResult<Caller> {
        let caller = self.authenticate_from(presented, client)?;
        caller.check_scopes(&[scope])?;
        Ok(caller)
    }

    /// The caller holding the active key the request presents (from the in-memory key cache),
    /// with its limits: 401 without one. Keys only: [`Self::authenticate_from`] also serves
    /// anonymous callers.
    pub fn authenticate(&self, presented: Option<&str>) -> ApiResult<Caller> {
        self.authenticate_from(presented, None)
    }

    /// [`Self::authenticate`] for a caller at `client`: without a key, the anonymous caller at
    /// `client` when anonymous access covers it. A key that does not check out is a 401 even
    /// where anonymous access would have served the caller without one.
    pub fn authenticate_from(
        &self,
        presented: Option<&str>,
        client: Option<IpAddr>,
    ) -> ApiResult<Caller> {
        const MISSING: &str =
            "missing API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'";
        let Some(presented) = presented else {
            return match (&self.anonymous, client) {
                (Some(access), Some(addr)) if access.admits(addr) => {
                    Ok(Caller::anonymous(addr, access, &self.default_token_limits))
                }
                (Some(_), Some(addr)) => Err(ApiError::unauthorized(format!(
                    "{MISSING} (anonymous access is not granted to {})",
                    addr.to_canonical()
                ))),
                _ => Err(ApiError::unauthorized(MISSING)),
            };
        };
        let key = self
            .store
            .authenticate(presented)?
            .ok_or_else(|| ApiError::unauthorized("invalid or revoked API key"))?;
        Ok(Caller::of_key_with(
            key,
            &self.default_limits,
            &self.default_token_limits,
        ))
    }

    /// A version's config changed: its cached answers go (they could not be hit any more:
    /// the key has the config's digest; this frees their bytes).
    pub fn version_reconfigured(&self, name: &str, version: u64) {
        self.cache.invalidate_version(name, version);
    }

    /// A version was deleted (its catalog entry already removed): its cached answers go, and
    /// when the model has no version left, its settings (the store dropped them with the last
    /// version) and every answer and counter of its cache.
    pub fn version_deleted(&self, name: &str, version: u64) {
        self.cache.invalidate_version(name, version);
        if self.catalog.versions(name).is_empty() {
            self.cache.invalidate_model(name);
            self.model_settings.remove(name);
        }
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
