//! Chat models (GGUF files, run by `infergate-llm`) in the gateway: which registered versions
//! are GGUF, loading them on first use, unloading them when idle (`unload_after_s` in the
//! version's config, as for ONNX models), and a memory check against the engine's host memory
//! budget. A version that serves embeddings gets an embedding context of its own beside its
//! chat context (the weights shared), made on its first embeddings request; its memory counts
//! in the budget from then on.

use crate::catalog::model_key;
use crate::error::{ApiError, ApiResult};
use infergate_engine::{Engine, ModelConfig, ModelKey, ModelSignature};
use infergate_llm::{Embedder, Fault, GgufInfo, LlmConfig, LlmError, LlmModel};
use infergate_store::models::ModelRecord;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::OnceCell;

/// `signature.metadata["format"]` of a GGUF version: its record has no tensor inputs/outputs.
pub const FORMAT_KEY: &str = "format";
pub const GGUF: &str = "gguf";

pub fn is_gguf(record: &ModelRecord) -> bool {
    record
        .signature
        .metadata
        .get(FORMAT_KEY)
        .map(String::as_str)
        == Some(GGUF)
}

/// The catalog entry of a GGUF version: no tensors; its description in the metadata.
pub fn signature(info: &GgufInfo) -> ModelSignature {
    let mut metadata: BTreeMap<String, String> = BTreeMap::new();
    metadata.insert(FORMAT_KEY.into(), GGUF.into());
    metadata.insert("architecture".into(), info.architecture.clone());
    if let Some(name) = &info.name {
        metadata.insert("name".into(), name.clone());
    }
    if let Some(n) = info.context_length {
        metadata.insert("context_length".into(), n.to_string());
    }
    metadata.insert(
        "kv_bytes_per_token".into(),
        info.kv_bytes_per_token().to_string(),
    );
    metadata.insert(
        "chat_template".into(),
        if info.chat_template.is_some() {
            "model"
        } else {
            "chatml"
        }
        .into(),
    );
    ModelSignature {
        inputs: vec![],
        outputs: vec![],
        metadata: metadata.into_iter().collect(),
    }
}

/// Checks an uploaded file when it is GGUF (by its magic number): its catalog signature, or 400
/// with the reason. None: not GGUF (ONNX Runtime checks it).
pub fn validate_upload(path: &Path) -> ApiResult<Option<ModelSignature>> {
    if !infergate_llm::gguf::looks_like_gguf(path) {
        return Ok(None);
    }
    let info = infergate_llm::validate(path).map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(Some(signature(&info)))
}

/// An LLM error as the gateway answers it.
pub fn api_error(e: LlmError) -> ApiError {
    let message = e.to_string();
    let error = match e.fault() {
        Fault::Client | Fault::Model => ApiError::bad_request(message),
        Fault::Unavailable => {
            let error = ApiError::unavailable(message);
            match e.retry_after() {
                Some(seconds) => error.retry_after(seconds),
                None => error,
            }
        }
        Fault::Internal => ApiError::internal(message),
    };
    error.caused_by(e)
}

struct Entry {
    model: OnceCell<LlmModel>,
    /// Its embedding context, once a request asked for embeddings.
    embedder: OnceCell<Embedder>,
    last_used: Mutex<Instant>,
    unload_after: Option<Duration>,
    /// Bytes counted against the host memory budget while loaded: the chat model's, and its
    /// embedding context's once made.
    bytes: u64,
    embedding_bytes: AtomicU64,
}

impl Entry {
    fn counted_bytes(&self) -> u64 {
        if self.model.initialized() {
            self.bytes + self.embedding_bytes.load(Ordering::Relaxed)
        } else {
            0
        }
    }
}

/// The loaded chat models, by version.
pub struct LlmModels {
    entries: Mutex<HashMap<ModelKey, Arc<Entry>>>,
    /// `[llm]`: what each model is loaded with.
    config: LlmConfig,
    /// Whose host memory budget the chat models share.
    engine: Arc<Engine>,
}

impl LlmModels {
    pub fn new(config: LlmConfig, engine: Arc<Engine>) -> LlmModels {
        LlmModels {
            entries: Mutex::default(),
            config,
            engine,
        }
    }

    /// The running model of `record`, loading it on first use (once, however many requests
    /// wait for it) from the file `file` resolves to. Refused with 503 when it would exceed the
    /// host memory budget.
    pub async fn get(
        &self,
        record: &ModelRecord,
        file: impl Future<Output = ApiResult<PathBuf>>,
    ) -> ApiResult<LlmModel> {
        let key = model_key(record);
        let config = self.config.for_model(&record.name);
        let entry = {
            let mut entries = self.entries.lock();
            entries
                .entry(key.clone())
                .or_insert_with(|| {
                    let unload_after = ModelConfig::from_json(&record.config)
                        .ok()
                        .and_then(|c| c.unload_after_s)
                        .map(Duration::from_secs);
                    Arc::new(Entry {
                        model: OnceCell::new(),
                        embedder: OnceCell::new(),
                        last_used: Mutex::new(Instant::now()),
                        unload_after,
                        bytes: memory_estimate(record, &config),
                        embedding_bytes: AtomicU64::new(0),
                    })
                })
                .clone()
        };
        *entry.last_used.lock() = Instant::now();
        let bytes = entry.bytes;
        let model = entry
            .model
            .get_or_try_init(|| async move {
                self.check_budget(&key, bytes)?;
                // Chat models are not the ONNX engine's: checked at each (one-time) load.
                let path = file.await?;
                tracing::info!(model = %key, "loading chat model");
                let started = Instant::now();
                let model = tokio::task::spawn_blocking(move || LlmModel::load(&path, config))
                    .await
                    .map_err(|e| ApiError::internal(format!("loading task failed: {e}")))?
                    .map_err(|e| match e {
                        LlmError::InvalidModel(m) => {
                            ApiError::internal(format!("model '{key}' cannot be loaded: {m}"))
                        }
                        other => api_error(other),
                    })?;
                tracing::info!(model = %key, secs = started.elapsed().as_secs_f64(), "chat model loaded");
                Ok::<_, ApiError>(model)
            })
            .await?;
        Ok(model.clone())
    }

    /// Refuses a load that would take the gateway over `host_memory_budget_bytes`, counting
    /// ONNX instances (the engine's reservation) and loaded chat models.
    fn check_budget(&self, key: &ModelKey, bytes: u64) -> ApiResult<()> {
        let (onnx, budget) = self.engine.memory();
        let Some(budget) = budget else {
            return Ok(());
        };
        let chat: u64 = self
            .entries
            .lock()
            .values()
            .map(|e| e.counted_bytes())
            .sum();
        if onnx + chat + bytes > budget {
            return Err(ApiError::unavailable(format!(
                "loading chat model '{key}' needs ~{bytes} bytes; {} of the {budget}-byte host memory budget are in use",
                onnx + chat
            )));
        }
        Ok(())
    }

    /// The embedding context of `record` (a GGUF version), made on first use beside its chat
    /// model (loaded first if it is not), with `[llm.embeddings]` (or the model's own). Its
    /// estimated memory (the KV cache of one batch) must fit the budget; what it measured
    /// once made is counted from then on.
    pub async fn embedder(
        &self,
        record: &ModelRecord,
        file: impl Future<Output = ApiResult<PathBuf>>,
    ) -> ApiResult<Embedder> {
        let model = self.get(record, file).await?;
        let key = model_key(record);
        let Some(entry) = self.entries.lock().get(&key).cloned() else {
            return Err(
                ApiError::unavailable(format!("chat model '{key}' was unloaded; retry"))
                    .retry_after(1),
            );
        };
        let config = self.config.for_model(&record.name).embeddings;
        let embedder = entry
            .embedder
            .get_or_try_init(|| async {
                let per_token = record
                    .signature
                    .metadata
                    .get("kv_bytes_per_token")
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
                self.check_budget(&key, per_token * u64::from(config.batch_tokens))?;
                tracing::info!(model = %key, "starting an embedding context");
                let embedder = tokio::task::spawn_blocking(move || model.embedder(config))
                    .await
                    .map_err(|e| ApiError::internal(format!("embedding start failed: {e}")))?
                    .map_err(api_error)?;
                entry
                    .embedding_bytes
                    .store(embedder.memory_bytes(), Ordering::Relaxed);
                Ok::<_, ApiError>(embedder)
            })
            .await?;
        *entry.last_used.lock() = Instant::now();
        Ok(embedder.clone())
    }

    /// The loaded chat models, for `/metrics` and the model views.
    pub fn loaded(&self) -> Vec<(ModelKey, LlmModel)> {
        self.entries
            .lock()
            .iter()
            .filter_map(|(k, e)| e.model.get().map(|m| (k.clone(), m.clone())))
            .collect()
    }

    pub fn is_loaded(&self, key: &ModelKey) -> bool {
        self.entries
            .lock()
            .get(key)
            .is_some_and(|e| e.model.initialized())
    }

    /// Bytes a version's embedding context counts in the memory budget (0 without one).
    pub fn embedding_bytes(&self, key: &ModelKey) -> u64 {
        self.entries
            .lock()
            .get(key)
            .map_or(0, |e| e.embedding_bytes.load(Ordering::Relaxed))
    }

    /// Sequences running or waiting on a version (0 when not loaded).
    pub fn in_flight(&self, key: &ModelKey) -> u64 {
        self.entries
            .lock()
            .get(key)
            .and_then(|e| e.model.get())
            .map_or(0, |m| {
                let s = m.stats();
                s.running + s.waiting
            })
    }

    /// Forgets a version; its scheduler stops once its last sequence is done.
    pub fn unload(&self, key: &ModelKey) -> bool {
        self.entries.lock().remove(key).is_some()
    }

    /// Unloads versions idle for longer than their `unload_after_s`.
    pub fn unload_idle(&self) {
        let now = Instant::now();
        self.entries.lock().retain(|key, e| {
            let idle = e.unload_after.is_some_and(|after| {
                now.duration_since(*e.last_used.lock()) >= after
                    && e.model.get().is_none_or(|m| {
                        let s = m.stats();
                        s.running + s.waiting == 0
                    })
            });
            if idle {
                tracing::info!(model = %key, "chat model unloaded after its idle time");
            }
            !idle
        });
    }

    /// Runs [`LlmModels::unload_idle`] every second until the models are dropped.
    pub fn spawn_idle_unloader(models: &Arc<LlmModels>) {
        let weak = Arc::downgrade(models);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                match weak.upgrade() {
                    Some(models) => models.unload_idle(),
                    None => return,
                }
            }
        });
    }
}

/// Host memory a loaded version takes: the weights (the file) and its KV cache (f16 keys and
/// values for every layer, over the context of all sequences).
fn memory_estimate(record: &ModelRecord, config: &LlmConfig) -> u64 {
    let meta = &record.signature.metadata;
    let context_length = meta
        .get("context_length")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(u64::from(config.context_per_sequence));
    let tokens =
        context_length.min(u64::from(config.context_per_sequence)) * config.max_sequences as u64;
    let per_token = meta
        .get("kv_bytes_per_token")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    record.size_bytes + tokens * per_token
}
