//! The registry of model versions the engine serves: lazy loading on first use, explicit
//! load/unload, a bounded queue per version, and the request entry point.

use crate::error::{EngineError, Result};
use crate::instance::{self, Job};
use crate::runtime;
use crate::session::{OrtSession, SessionOptions};
use crate::signature::ModelSignature;
use crate::stats::{ModelStats, StatsRecorder};
use crate::tensor::Tensor;
use crossbeam_channel::{Sender, TrySendError};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{oneshot, OnceCell};

#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Path of `libonnxruntime.so`.
    pub ort_library: PathBuf,
    /// Threads ORT uses inside one operator, per instance.
    pub intra_threads: usize,
    /// Execution instances (sessions + threads) per model version.
    pub instances: usize,
    /// Requests that may wait per model version before new ones are refused.
    pub max_queue_size: usize,
}

/// Identifies one model version.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModelKey {
    pub name: String,
    pub version: u64,
}

impl std::fmt::Display for ModelKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.name, self.version)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelState {
    Unloaded,
    Loading,
    Ready,
    Failed(String),
}

/// A loaded model version: its queue, its instance threads and its counters.
struct Loaded {
    signature: ModelSignature,
    queue: Sender<Job>,
    stats: Arc<StatsRecorder>,
    in_flight: AtomicUsize,
    _threads: Vec<std::thread::JoinHandle<()>>,
}

/// A slot in the registry. The cell makes concurrent first requests share one load, and the
/// registry lock is never held while a model loads, so other models stay servable.
#[derive(Default)]
struct Slot {
    cell: OnceCell<Arc<Loaded>>,
    failure: Mutex<Option<String>>,
}

pub struct Engine {
    config: EngineConfig,
    env: &'static ort::environment::Environment,
    session_options: SessionOptions,
    slots: Mutex<HashMap<ModelKey, Arc<Slot>>>,
}

/// Decrements a model's in-flight count however the request ends (including cancellation).
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Engine {
    pub fn new(config: EngineConfig) -> Result<Engine> {
        let env = runtime::init(&config.ort_library)?;
        let session_options = SessionOptions {
            intra_threads: config.intra_threads,
        };
        Ok(Engine {
            config,
            env,
            session_options,
            slots: Mutex::new(HashMap::new()),
        })
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Loads a model file into ORT only to read its signature; used to validate uploads.
    /// Blocking: call it from a blocking thread.
    pub fn inspect(&self, path: &Path) -> Result<ModelSignature> {
        let session = OrtSession::load(self.env, path, "inspect", &self.session_options)?;
        Ok(session.signature().clone())
    }

    fn slot(&self, key: &ModelKey) -> Arc<Slot> {
        self.slots.lock().entry(key.clone()).or_default().clone()
    }

    /// Loads a model version (or returns the loaded one). Concurrent callers share one load.
    async fn loaded(&self, key: &ModelKey, path: &Path) -> Result<Arc<Loaded>> {
        let slot = self.slot(key);
        let result = slot
            .cell
            .get_or_try_init(|| async {
                let env = self.env;
                let options = self.session_options.clone();
                let instances = self.config.instances;
                let (sender, receiver) = crossbeam_channel::bounded(self.config.max_queue_size.max(1));
                let stats = Arc::new(StatsRecorder::default());
                let label = key.to_string();
                let path = path.to_path_buf();
                let stats_for_threads = stats.clone();
                let started = Instant::now();
                let (signature, threads) = tokio::task::spawn_blocking(move || {
                    instance::spawn(env, &label, &path, &options, instances, receiver, stats_for_threads)
                })
                .await
                .map_err(|e| EngineError::Internal(format!("model load task failed: {e}")))??;
                tracing::info!(model = %key, instances, elapsed_ms = started.elapsed().as_millis() as u64, "model loaded");
                Ok::<_, EngineError>(Arc::new(Loaded {
                    signature,
                    queue: sender,
                    stats,
                    in_flight: AtomicUsize::new(0),
                    _threads: threads,
                }))
            })
            .await;
        match result {
            Ok(loaded) => {
                *slot.failure.lock() = None;
                Ok(loaded.clone())
            }
            Err(e) => {
                *slot.failure.lock() = Some(e.to_string());
                Err(e)
            }
        }
    }

    /// Loads a model version ahead of traffic.
    pub async fn load(&self, key: &ModelKey, path: &Path) -> Result<ModelSignature> {
        Ok(self.loaded(key, path).await?.signature.clone())
    }

    /// Unloads a model version: queued jobs still finish, new requests load it again.
    /// Returns whether it was loaded.
    pub fn unload(&self, key: &ModelKey) -> bool {
        let removed = self.slots.lock().remove(key);
        let was_loaded = removed.as_ref().is_some_and(|s| s.cell.initialized());
        if was_loaded {
            tracing::info!(model = %key, "model unloaded");
        }
        was_loaded
    }

    pub fn state(&self, key: &ModelKey) -> ModelState {
        let Some(slot) = self.slots.lock().get(key).cloned() else {
            return ModelState::Unloaded;
        };
        if slot.cell.initialized() {
            return ModelState::Ready;
        }
        let failure = slot.failure.lock().clone();
        match failure {
            Some(reason) => ModelState::Failed(reason),
            None => ModelState::Loading,
        }
    }

    pub fn stats(&self, key: &ModelKey) -> Option<ModelStats> {
        let slot = self.slots.lock().get(key).cloned()?;
        slot.cell.get().map(|l| l.stats.snapshot())
    }

    /// Requests currently queued or running on a model version.
    pub fn in_flight(&self, key: &ModelKey) -> usize {
        let slot = self.slots.lock().get(key).cloned();
        slot.and_then(|s| s.cell.get().map(|l| l.in_flight.load(Ordering::Relaxed)))
            .unwrap_or(0)
    }

    /// Runs one request: loads the version if needed, checks the tensors against its
    /// signature, queues it and waits for an instance. Dropping the future (client gone)
    /// drops the job from the queue before it executes.
    pub async fn infer(
        &self,
        key: &ModelKey,
        path: &Path,
        inputs: Vec<Tensor>,
        outputs: Vec<String>,
    ) -> Result<Vec<Tensor>> {
        let loaded = self.loaded(key, path).await?;
        loaded.signature.check_inputs(&inputs)?;
        loaded.signature.check_outputs(&outputs)?;
        loaded.in_flight.fetch_add(1, Ordering::Relaxed);
        let _in_flight = InFlight(&loaded.in_flight);
        let (reply, response) = oneshot::channel();
        let job = Job {
            inputs,
            outputs,
            enqueued: Instant::now(),
            reply,
        };
        loaded.queue.try_send(job).map_err(|e| match e {
            TrySendError::Full(_) => EngineError::Unavailable(format!(
                "model '{key}' has {} requests queued; retry later",
                self.config.max_queue_size
            )),
            TrySendError::Disconnected(_) => EngineError::NotLoaded(key.to_string()),
        })?;
        response
            .await
            .map_err(|_| EngineError::Internal(format!("model '{key}' dropped a request")))?
    }
}
