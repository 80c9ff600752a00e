//! The registry of model versions the engine serves: lazy loading on first use, explicit
//! load/unload, idle unload, per-version configuration changed at runtime, and the request
//! entry point.

use crate::batcher::BatchPolicy;
use crate::config::{ModelConfig, TimeoutAction};
use crate::error::{EngineError, Result};
use crate::instance::{self, InstancePool, Scheduler};
use crate::lifecycle::{self, MemoryBudget, Reservation};
use crate::postprocess;
use crate::preprocess::ResizeNormalizeExt;
use crate::providers::{ExecutionReport, ProviderPlan};
use crate::queue::{BatchKey, Request, Ticket};
use crate::runtime;
use crate::sequence_slots::{CorrelationId, SequenceFlags, SequenceInfo};
use crate::sequences::Sequencer;
use crate::session::{OrtSession, SessionOptions};
use crate::signature::ModelSignature;
use crate::sizing::{self, Threads};
use crate::stats::ModelStats;
use crate::tensor::Tensor;
use infergate_kernels::device::ptx::PtxCache;
use infergate_kernels::{DeviceChoice, Ops};
use parking_lot::Mutex;
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, OnceCell};

#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Path of `libonnxruntime.so`.
    pub ort_library: PathBuf,
    /// Threads ORT uses inside one operator, per instance; `None` (or 0): sized from the cores
    /// ([`crate::sizing`]).
    pub intra_threads: Option<usize>,
    /// Execution instances per model version whose config names no `instance_group`; `None`
    /// (or 0): sized from the cores ([`crate::sizing`]).
    pub instances: Option<usize>,
    /// The cores instances and intra-op threads are sized for (`sizing::available_cores()`).
    pub cores: usize,
    /// Requests that may wait per model version when its config sets no `max_queue_size`.
    pub max_queue_size: usize,
    /// Host memory all loaded instances together may use, in bytes; `None` = unlimited.
    pub host_memory_budget: Option<u64>,
    /// An instance's estimated host memory is its model file's size times this (unless its
    /// config sets `host_memory_bytes`).
    pub memory_factor: f64,
    /// Where native ops (post-ops; the gateway's pre-ops) run: `Auto` takes GPU 0 when usable.
    pub device: DeviceChoice,
    /// Directory of compiled kernels, per NVRTC version and GPU architecture.
    pub ptx_cache_dir: Option<PathBuf>,
    /// How long an instance that ran out of work spins for the next request before sleeping,
    /// while requests keep arriving within that time (dependent chains such as token-by-token
    /// generation); zero never spins. See `idle_spin`.
    pub idle_spin: Duration,
    /// Whether ORT's intra-op threads spin between operators (see
    /// [`SessionOptions::intra_spinning`]).
    pub intra_spinning: bool,
}

impl EngineConfig {
    pub const DEFAULT_MEMORY_FACTOR: f64 = 2.0;
    pub const DEFAULT_IDLE_SPIN: Duration = Duration::from_micros(200);

    /// Defaults for everything but the library: instances and intra-op threads sized from the
    /// available cores, 64 queued requests, no memory budget.
    pub fn new(ort_library: impl Into<PathBuf>) -> EngineConfig {
        EngineConfig {
            ort_library: ort_library.into(),
            intra_threads: None,
            instances: None,
            cores: sizing::available_cores(),
            max_queue_size: 64,
            host_memory_budget: None,
            memory_factor: EngineConfig::DEFAULT_MEMORY_FACTOR,
            device: DeviceChoice::Cpu,
            ptx_cache_dir: None,
            idle_spin: EngineConfig::DEFAULT_IDLE_SPIN,
            // Off: ORT's threads spinning between runs take CPU the server needs for I/O; it
            // costs more CPU per inference and serves fewer (bench/cpu_per_request.py: about
            // 1.7x the CPU per inference at 2 threads).
            intra_spinning: false,
        }
    }

    /// Instances and intra-op threads of a version with `config`: its `instance_group` count
    /// when it names one, else the engine's setting, the rest sized from the cores (and from
    /// whether the version batches: [`sizing`]).
    pub fn threads(&self, config: &ModelConfig) -> Threads {
        let instances = if config.instance_group.is_empty() {
            self.instances
        } else {
            Some(config.instance_count(1))
        };
        sizing::plan(
            self.cores,
            instances,
            self.intra_threads,
            config.max_batch_size > 0,
        )
    }
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

/// Per-request scheduling options (KServe/Triton request parameters `priority` and `timeout`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InferOptions {
    /// 0 = the model's default level; otherwise 1 (highest) to the config's `priority_levels`.
    pub priority: u32,
    /// How long the request may wait in the queue; honoured when the config allows overrides.
    pub timeout: Option<Duration>,
}

/// What a loaded version looks like now, for the repository index and the dashboard.
#[derive(Debug, Clone, Serialize)]
pub struct ModelInfo {
    pub instances: usize,
    /// ONNX Runtime's intra-op threads per instance (the newest instances').
    pub intra_threads: usize,
    /// Host memory reserved against the engine's budget for all its instances.
    pub memory_reserved_bytes: u64,
    /// Change of the process's resident memory while the first instances loaded (Linux only;
    /// blurred by concurrent loads; informs the memory factor).
    pub measured_load_rss_bytes: Option<i64>,
    /// Warm-up executions run before it reported ready.
    pub warmup_runs: u64,
    /// Execution providers it runs on, and why not the requested ones.
    pub execution: ExecutionReport,
    pub queued: usize,
    pub in_flight: usize,
    pub idle_ms: u64,
    /// Batches run on the requesting thread (a lone request to an idle version) instead of an
    /// instance thread.
    pub caller_runs: u64,
    /// Batches closed by their queue delay and run by the batch clock on a tokio worker
    /// instead of an instance thread.
    pub clock_runs: u64,
    pub config: ModelConfig,
}

/// A loaded model version.
struct Loaded {
    key: ModelKey,
    path: PathBuf,
    signature: ModelSignature,
    scheduler: Arc<Scheduler>,
    pool: InstancePool,
    /// The sequence batcher of a version whose config has `sequence_batching`; its requests go
    /// there instead of straight to the queue.
    sequencer: Option<Arc<Sequencer>>,
    config: Mutex<ModelConfig>,
    /// The engine's config generation this version last caught up with.
    applied_generation: AtomicU64,
    per_instance_bytes: AtomicU64,
    in_flight: AtomicUsize,
    last_used: Mutex<Instant>,
    warmup_runs: AtomicU64,
    /// Intra-op threads of the newest instances: planned, or 1 when a lone request ran short
    /// (`crate::lone_run`).
    intra_threads: AtomicUsize,
    /// Its lone runs were short enough for one intra-op thread: instances added later get one.
    short_runs: bool,
    /// Execution providers of the newest instances, and why not the requested ones.
    execution: Mutex<ExecutionReport>,
    measured_load_rss: Option<i64>,
    /// Serialises config changes that add or retire instances.
    resizing: tokio::sync::Mutex<()>,
}

impl Loaded {
    fn touch(&self) {
        *self.last_used.lock() = Instant::now();
    }
}

impl Drop for Loaded {
    /// The last holder is gone (unloaded and no request in flight): instance threads end once
    /// the queue is empty, dropping their sessions.
    fn drop(&mut self) {
        self.scheduler.queue.close();
    }
}

/// A slot in the registry. The cell makes concurrent first requests share one load, and the
/// registry lock is never held while a model loads, so other models stay servable.
#[derive(Default)]
struct Slot {
    cell: OnceCell<Arc<Loaded>>,
    failure: Mutex<Option<String>>,
}

struct Inner {
    config: EngineConfig,
    env: &'static ort::environment::Environment,
    session_options: SessionOptions,
    slots: Mutex<HashMap<ModelKey, Arc<Slot>>>,
    /// Configs set by the gateway, with the generation at which each was set. Kept across
    /// unloads so a reload uses them.
    model_configs: Mutex<HashMap<ModelKey, (u64, ModelConfig)>>,
    generation: AtomicU64,
    budget: Arc<MemoryBudget>,
    ops: Arc<Ops>,
}

pub struct Engine {
    inner: Arc<Inner>,
    /// Dropping it stops the reaper thread.
    _reaper: crossbeam_channel::Sender<()>,
}

/// Decrements a model's in-flight count however the request ends (including cancellation).
struct InFlight<'a>(&'a Loaded);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Gives a queued request up when its caller stops waiting (the client went away), so no
/// instance runs it. A no-op once an instance took it.
struct AbandonOnDrop(Arc<Ticket>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        self.0.abandon();
    }
}

impl Engine {
    pub fn new(config: EngineConfig) -> Result<Engine> {
        let env = runtime::init(&config.ort_library)?;
        let ptx_cache = config.ptx_cache_dir.clone().map(PtxCache::new);
        let ops = Arc::new(Ops::new(config.device, ptx_cache.as_ref()));
        // Sessions follow the device: `cuda:N` is tried (and any failure reported per model);
        // `auto` means CUDA only when the driver showed a usable GPU to the native ops.
        let device = match config.device {
            DeviceChoice::Cpu => None,
            DeviceChoice::Cuda(n) => i32::try_from(n).ok(),
            DeviceChoice::Auto => ops.gpu().is_some().then_some(0),
        };
        let defaults = config.threads(&ModelConfig::default());
        let batching = config.threads(&ModelConfig {
            max_batch_size: 1,
            ..ModelConfig::default()
        });
        tracing::info!(
            cores = config.cores,
            instances = defaults.instances,
            intra_threads = defaults.intra_threads,
            batching_instances = batching.instances,
            batching_intra_threads = batching.intra_threads,
            "engine threads per model version (unless set; a version that batches: batching_*)"
        );
        // Intra-op threads are set per version when it loads (`EngineConfig::threads`).
        let session_options = SessionOptions {
            intra_threads: 1,
            intra_spinning: config.intra_spinning,
            device,
            device_explicit: matches!(config.device, DeviceChoice::Cuda(_)),
        };
        let inner = Arc::new(Inner {
            budget: MemoryBudget::new(config.host_memory_budget),
            ops,
            config,
            env,
            session_options,
            slots: Mutex::new(HashMap::new()),
            model_configs: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
        });
        let weak: Weak<Inner> = Arc::downgrade(&inner);
        let reaper = lifecycle::start_reaper(move || match weak.upgrade() {
            Some(inner) => {
                inner.unload_idle();
                true
            }
            None => false,
        })?;
        Ok(Engine {
            inner,
            _reaper: reaper,
        })
    }

    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// The native ops (GPU when one was opened, else the CPU), shared with the gateway's
    /// pre-ops so the device is opened once.
    pub fn ops(&self) -> &Arc<Ops> {
        &self.inner.ops
    }

    /// Loads a model file into ORT only to read its signature; used to validate uploads.
    /// Blocking: call it from a blocking thread.
    pub fn inspect(&self, path: &Path) -> Result<ModelSignature> {
        let session = OrtSession::load(
            self.inner.env,
            path,
            "inspect",
            &self.inner.session_options,
            &ProviderPlan::default(),
        )?;
        Ok(session.signature().clone())
    }

    /// Sets a version's configuration (validated; checked against the model when it is
    /// loaded). A loaded version applies it to new batches at once and starts or retires
    /// instances to match `instance_group`; requests in flight are not failed. An unloaded
    /// version uses it when it next loads.
    pub async fn set_config(&self, key: &ModelKey, config: ModelConfig) -> Result<()> {
        config.validate()?;
        if let Some(loaded) = self.inner.loaded_now(key) {
            config.validate_for(&loaded.signature)?;
            if loaded.config.lock().sequence_batching != config.sequence_batching {
                return Err(EngineError::InvalidConfig(format!(
                    "sequence_batching of '{key}' cannot change while it is loaded (its sequences hold state); unload it first"
                )));
            }
        }
        let generation = self.inner.generation.fetch_add(1, Ordering::AcqRel) + 1;
        self.inner
            .model_configs
            .lock()
            .insert(key.clone(), (generation, config));
        if let Some(loaded) = self.inner.loaded_now(key) {
            self.inner.catch_up(&loaded).await?;
        }
        Ok(())
    }

    /// The configuration a version is served with (the default when none was set).
    pub fn model_config(&self, key: &ModelKey) -> ModelConfig {
        self.inner.stored_config(key).1
    }

    /// Triton's config JSON for a version (`GET /v2/models/{m}/config`).
    pub fn triton_config(&self, key: &ModelKey, signature: &ModelSignature) -> serde_json::Value {
        let config = self.model_config(key);
        let instances = self.inner.config.threads(&config).instances;
        config.to_triton_json(&key.name, signature, instances)
    }

    /// Loads a model version ahead of traffic.
    pub async fn load(&self, key: &ModelKey, path: &Path) -> Result<ModelSignature> {
        Ok(self
            .inner
            .loaded(key, || path.to_path_buf())
            .await?
            .signature
            .clone())
    }

    /// Unloads a model version: queued jobs still finish, new requests load it again.
    /// Returns whether it was loaded.
    pub fn unload(&self, key: &ModelKey) -> bool {
        let removed = self.inner.slots.lock().remove(key);
        let was_loaded = removed.as_ref().is_some_and(|s| s.cell.initialized());
        if was_loaded {
            tracing::info!(model = %key, "model unloaded");
        }
        was_loaded
    }

    pub fn state(&self, key: &ModelKey) -> ModelState {
        let Some(slot) = self.inner.slots.lock().get(key).cloned() else {
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
        self.inner
            .loaded_now(key)
            .map(|l| l.scheduler.stats.snapshot())
    }

    /// Requests currently queued or running on a model version.
    pub fn in_flight(&self, key: &ModelKey) -> usize {
        self.inner
            .loaded_now(key)
            .map_or(0, |l| l.in_flight.load(Ordering::Relaxed))
    }

    /// Requests waiting in a version's queue (not yet taken by an instance).
    pub fn queued(&self, key: &ModelKey) -> usize {
        self.inner
            .loaded_now(key)
            .map_or(0, |l| l.scheduler.queue.len())
    }

    pub fn model_info(&self, key: &ModelKey) -> Option<ModelInfo> {
        let l = self.inner.loaded_now(key)?;
        let instances = l.pool.count();
        let idle_ms = l.last_used.lock().elapsed().as_millis() as u64;
        let info = ModelInfo {
            instances,
            intra_threads: l.intra_threads.load(Ordering::Relaxed),
            memory_reserved_bytes: instances as u64 * l.per_instance_bytes.load(Ordering::Relaxed),
            measured_load_rss_bytes: l.measured_load_rss,
            warmup_runs: l.warmup_runs.load(Ordering::Relaxed),
            execution: l.execution.lock().clone(),
            queued: l.scheduler.queue.len(),
            in_flight: l.in_flight.load(Ordering::Relaxed),
            idle_ms,
            caller_runs: l.scheduler.caller_runs(),
            clock_runs: l.scheduler.clock_runs(),
            config: l.config.lock().clone(),
        };
        Some(info)
    }

    /// The GPU memory pools of the native ops (sizes, hits, misses); `None` on the CPU.
    pub fn gpu_memory(&self) -> Option<infergate_kernels::device::memory::MemoryStats> {
        self.inner.ops.memory_stats()
    }

    /// The execution providers a loaded version runs on, and why not the requested ones.
    pub fn execution(&self, key: &ModelKey) -> Option<ExecutionReport> {
        self.inner
            .loaded_now(key)
            .map(|l| l.execution.lock().clone())
    }

    /// Host memory reserved by loaded instances, and the budget.
    pub fn memory(&self) -> (u64, Option<u64>) {
        (self.inner.budget.used(), self.inner.budget.limit())
    }

    /// Runs one request with default options; see [`Engine::infer_with`].
    pub async fn infer(
        &self,
        key: &ModelKey,
        path: &Path,
        inputs: Vec<Tensor>,
        outputs: Vec<String>,
    ) -> Result<Vec<Tensor>> {
        self.infer_with(
            key,
            || path.to_path_buf(),
            inputs,
            outputs,
            InferOptions::default(),
        )
        .await
    }

    /// Runs one request: loads the version if needed, checks the tensors against its
    /// signature and config, queues it at its priority and waits for an instance (possibly
    /// batched with others). Dropping the future (client gone) removes the request before it
    /// executes; a request still queued at its timeout fails with `EngineError::Timeout` and
    /// never executes. `path` says where the version's file is; it is asked only when the
    /// version must be loaded, so a request to a loaded version builds no path.
    pub async fn infer_with(
        &self,
        key: &ModelKey,
        path: impl FnOnce() -> PathBuf + Send,
        inputs: Vec<Tensor>,
        outputs: Vec<String>,
        options: InferOptions,
    ) -> Result<Vec<Tensor>> {
        self.infer_request(key, path, inputs, outputs, options, None)
            .await
    }

    /// Runs one request of a sequence (request parameters `sequence_id`, `sequence_start`,
    /// `sequence_end`) on a version whose config has `sequence_batching`: the engine fills its
    /// control inputs and carries its implicit state from the previous request of the same
    /// sequence. The outputs are those asked for; without a list, every output but the state
    /// outputs. A version without `sequence_batching` ignores the flags, as Triton does.
    ///
    /// Errors (the client's): no or zero id, a request of a sequence that was never started,
    /// has ended or expired (idle longer than `max_sequence_idle_microseconds`), a START for an
    /// id whose sequence is still live, a batch of more than one sample, a control or state
    /// input given by the client. A full backlog is `Unavailable`, too many queued requests
    /// `QueueFull`. Dropping the future does not withdraw the request: it runs in its turn, as
    /// its sequence's later requests depend on it.
    pub async fn infer_in_sequence(
        &self,
        key: &ModelKey,
        path: impl FnOnce() -> PathBuf + Send,
        inputs: Vec<Tensor>,
        outputs: Vec<String>,
        options: InferOptions,
        sequence: SequenceFlags,
    ) -> Result<Vec<Tensor>> {
        self.infer_request(key, path, inputs, outputs, options, Some(sequence))
            .await
    }

    /// The live sequences of a loaded stateful version; `None` when the version is not loaded
    /// or has no `sequence_batching`.
    pub fn sequences(&self, key: &ModelKey) -> Option<Vec<SequenceInfo>> {
        let loaded = self.inner.loaded_now(key)?;
        loaded.sequencer.as_ref().map(|s| s.list())
    }

    /// Ends a live sequence of a loaded stateful version now, freeing its slot and state: its
    /// queued requests fail, one already running finishes. Returns whether it was live.
    pub fn clear_sequence(&self, key: &ModelKey, id: &CorrelationId) -> bool {
        self.inner
            .loaded_now(key)
            .and_then(|l| l.sequencer.clone())
            .is_some_and(|s| s.clear(id))
    }

    async fn infer_request(
        &self,
        key: &ModelKey,
        path: impl FnOnce() -> PathBuf + Send,
        inputs: Vec<Tensor>,
        outputs: Vec<String>,
        options: InferOptions,
        sequence: Option<SequenceFlags>,
    ) -> Result<Vec<Tensor>> {
        let loaded = self.inner.loaded(key, path).await?;
        if loaded.applied_generation.load(Ordering::Acquire)
            != self.inner.generation.load(Ordering::Acquire)
        {
            self.inner.catch_up(&loaded).await?;
        }
        let (pre_op, post_ops) = {
            let config = loaded.config.lock();
            (config.pre_op().cloned(), config.post_ops().to_vec())
        };
        // Raw images for an input the config preprocesses: resized and normalised here,
        // before batching, so differently sized images batch together.
        let inputs = match pre_op {
            Some(pre) if pre.wanted_by(&inputs) => {
                let ops = self.inner.ops.clone();
                tokio::task::spawn_blocking(move || pre.apply_for_model(&ops, inputs))
                    .await
                    .map_err(|e| EngineError::Internal(format!("preprocess task failed: {e}")))??
            }
            _ => inputs,
        };
        if let Some(sequencer) = &loaded.sequencer {
            loaded.in_flight.fetch_add(1, Ordering::Relaxed);
            let _in_flight = InFlight(&loaded);
            return sequencer.infer(sequence.as_ref(), inputs, outputs).await;
        }
        crate::signature::check_inputs(&key.name, &loaded.signature, &inputs)?;
        let (outputs, post) = postprocess::plan(key, &post_ops, &loaded.signature, outputs)?;
        let policy = loaded.scheduler.policy();
        let samples = if policy.max_batch_size > 0 {
            batch_samples(&inputs, policy.max_batch_size)?
        } else {
            1
        };
        let level = policy.level(options.priority)?;
        let enqueued = Instant::now();
        let deadline = policy.timeout(options.timeout).map(|t| enqueued + t);
        loaded.in_flight.fetch_add(1, Ordering::Relaxed);
        let _in_flight = InFlight(&loaded);
        let ticket = Arc::new(Ticket::default());
        let _abandon = AbandonOnDrop(ticket.clone());
        let (reply, mut response) = oneshot::channel();
        let request = Request {
            key: BatchKey::of(&inputs, &outputs),
            inputs,
            outputs,
            post,
            samples,
            level,
            enqueued,
            deadline,
            ticket: ticket.clone(),
            reply,
            span: crate::queue::figures_span(),
        };
        let stats = &loaded.scheduler.stats;
        loaded
            .scheduler
            .submit(request, policy.max_queue_size, |queued, instances| {
                retry_hint(&stats.snapshot(), queued, instances.max(1))
            })?;
        let result = match deadline {
            Some(deadline) if policy.timeout_action == TimeoutAction::Reject => {
                match tokio::time::timeout_at(deadline.into(), &mut response).await {
                    Ok(result) => result,
                    Err(_) if ticket.abandon() => {
                        return Err(EngineError::Timeout {
                            model: key.to_string(),
                            waited_ms: enqueued.elapsed().as_millis() as u64,
                        })
                    }
                    // An instance took it just in time: it runs, so wait for its answer.
                    Err(_) => response.await,
                }
            }
            _ => response.await,
        };
        result.map_err(|_| EngineError::Internal(format!("model '{key}' dropped a request")))?
    }
}

/// The samples along dimension 0 of a request to a batching model: every input must have the
/// same first dimension, at most `max`.
fn batch_samples(inputs: &[Tensor], max: usize) -> Result<usize> {
    let mut samples = None;
    for t in inputs {
        let Some(&rows) = t.shape.first() else {
            return Err(EngineError::InvalidInput(format!(
                "input '{}' is a scalar, but this model batches along dimension 0",
                t.name
            )));
        };
        match samples {
            None => samples = Some(rows),
            Some(s) if s != rows => {
                return Err(EngineError::InvalidInput(format!(
                    "inputs disagree on the batch size (dimension 0): {s} and {rows} ('{}')",
                    t.name
                )))
            }
            _ => {}
        }
    }
    let rows = samples.unwrap_or(0) as usize;
    if rows > max {
        return Err(EngineError::InvalidInput(format!(
            "batch of {rows} exceeds the model's max_batch_size {max}"
        )));
    }
    Ok(rows)
}

/// How long a client should wait before retrying a full queue: the queue's work at the
/// observed mean execution time, spread over the instances; between 1 and 60 seconds.
fn retry_hint(stats: &ModelStats, queued: usize, instances: usize) -> Duration {
    let per_request_ns = stats
        .compute_infer
        .ns
        .checked_div(stats.compute_infer.count)
        .unwrap_or(0);
    let ns = per_request_ns.saturating_mul(queued as u64) / instances as u64;
    Duration::from_secs(ns.div_ceil(1_000_000_000).clamp(1, 60))
}

impl Inner {
    fn slot(&self, key: &ModelKey) -> Arc<Slot> {
        let mut slots = self.slots.lock();
        // Looked up before `entry`, which would copy the key's name for every request.
        if let Some(slot) = slots.get(key) {
            return slot.clone();
        }
        slots.entry(key.clone()).or_default().clone()
    }

    /// Session options for a version's instances.
    fn session_options(&self, threads: Threads) -> SessionOptions {
        SessionOptions {
            intra_threads: threads.intra_threads,
            ..self.session_options.clone()
        }
    }

    fn loaded_now(&self, key: &ModelKey) -> Option<Arc<Loaded>> {
        let slot = self.slots.lock().get(key).cloned()?;
        slot.cell.get().cloned()
    }

    fn stored_config(&self, key: &ModelKey) -> (u64, ModelConfig) {
        self.model_configs
            .lock()
            .get(key)
            .cloned()
            .unwrap_or_default()
    }

    fn instance_bytes(&self, path: &Path, config: &ModelConfig) -> Result<u64> {
        if let Some(bytes) = config.host_memory_bytes {
            return Ok(bytes);
        }
        let len = std::fs::metadata(path)
            .map_err(|e| EngineError::InvalidModel(format!("model file {}: {e}", path.display())))?
            .len();
        Ok(lifecycle::estimate_instance_bytes(
            len,
            self.config.memory_factor,
        ))
    }

    fn reserve(&self, key: &ModelKey, count: usize, bytes: u64) -> Result<Vec<Reservation>> {
        // All or nothing: refusing the third instance drops (releases) the first two.
        (0..count)
            .map(|_| self.budget.reserve(&key.to_string(), bytes))
            .collect()
    }

    /// Loads a model version (or returns the loaded one). Concurrent callers share one load.
    async fn loaded(
        &self,
        key: &ModelKey,
        path: impl FnOnce() -> PathBuf + Send,
    ) -> Result<Arc<Loaded>> {
        let slot = self.slot(key);
        let result = slot
            .cell
            .get_or_try_init(|| async move { self.load(key, &path()).await })
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

    async fn load(&self, key: &ModelKey, path: &Path) -> Result<Arc<Loaded>> {
        let (generation, config) = self.stored_config(key);
        let threads = self.config.threads(&config);
        let count = threads.instances;
        let per_instance = self.instance_bytes(path, &config)?;
        let reservations = self.reserve(key, count, per_instance)?;
        let env = self.env;
        let options = self.session_options(threads);
        let probe = self.config.intra_threads.is_none_or(|n| n == 0);
        let label = key.to_string();
        let owned_path = path.to_path_buf();
        let load_config = config.clone();
        let started = Instant::now();
        let (prepared, rss) = tokio::task::spawn_blocking(move || {
            let before = lifecycle::resident_bytes();
            let prepared = instance::prepare(
                env,
                &label,
                &owned_path,
                &options,
                &load_config,
                reservations,
                probe,
            )?;
            let rss = before
                .zip(lifecycle::resident_bytes())
                .map(|(b, a)| a as i64 - b as i64);
            Ok::<_, EngineError>((prepared, rss))
        })
        .await
        .map_err(|e| EngineError::Internal(format!("model load task failed: {e}")))??;
        let scheduler = Arc::new(Scheduler::new(
            &key.to_string(),
            BatchPolicy::new(&config, self.config.max_queue_size),
            self.ops.clone(),
            self.config.idle_spin,
        ));
        scheduler.start_clock();
        let pool = InstancePool::new(scheduler.clone());
        let instance::Prepared {
            signature,
            instances,
            warmup_runs,
            execution,
            intra_threads,
        } = prepared;
        let sequencer = match &config.sequence_batching {
            Some(sb) => Some(Sequencer::start(
                &key.to_string(),
                sb.plan(config.max_batch_size, &signature)?,
                signature.clone(),
                scheduler.clone(),
                count,
                self.config.max_queue_size,
            )),
            None => None,
        };
        pool.start(instances)?;
        tracing::info!(
            model = %key,
            instances = count,
            intra_threads,
            providers = ?execution.providers,
            warmup_runs,
            reserved_bytes = per_instance * count as u64,
            measured_rss_bytes = rss,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "model loaded"
        );
        Ok(Arc::new(Loaded {
            key: key.clone(),
            path: path.to_path_buf(),
            signature,
            scheduler,
            pool,
            sequencer,
            config: Mutex::new(config),
            applied_generation: AtomicU64::new(generation),
            per_instance_bytes: AtomicU64::new(per_instance),
            in_flight: AtomicUsize::new(0),
            last_used: Mutex::new(Instant::now()),
            warmup_runs: AtomicU64::new(warmup_runs),
            intra_threads: AtomicUsize::new(intra_threads),
            short_runs: intra_threads < threads.intra_threads,
            execution: Mutex::new(execution),
            measured_load_rss: rss,
            resizing: tokio::sync::Mutex::new(()),
        }))
    }

    /// Brings a loaded version up to its stored config: the policy for new batches, and
    /// instances started (loaded and warmed up first, admitted by the budget) or retired.
    async fn catch_up(&self, loaded: &Arc<Loaded>) -> Result<()> {
        let _resizing = loaded.resizing.lock().await;
        let seen = self.generation.load(Ordering::Acquire);
        let (generation, config) = self.stored_config(&loaded.key);
        if generation <= loaded.applied_generation.load(Ordering::Acquire) {
            loaded.applied_generation.fetch_max(seen, Ordering::AcqRel);
            return Ok(());
        }
        config.validate_for(&loaded.signature)?;
        let threads = self.config.threads(&config);
        let want = threads.instances;
        let have = loaded.pool.count();
        if want > have {
            let per_instance = self.instance_bytes(&loaded.path, &config)?;
            let reservations = self.reserve(&loaded.key, want - have, per_instance)?;
            let env = self.env;
            // Instances added to a version whose lone runs were short get one thread as well
            // (their runs are no longer); the planned count otherwise.
            let options = self.session_options(Threads {
                intra_threads: if loaded.short_runs {
                    1
                } else {
                    threads.intra_threads
                },
                ..threads
            });
            let label = loaded.key.to_string();
            let path = loaded.path.clone();
            let load_config = config.clone();
            let prepared = tokio::task::spawn_blocking(move || {
                instance::prepare(
                    env,
                    &label,
                    &path,
                    &options,
                    &load_config,
                    reservations,
                    false,
                )
            })
            .await
            .map_err(|e| EngineError::Internal(format!("instance load task failed: {e}")))??;
            loaded.pool.start(prepared.instances)?;
            loaded
                .warmup_runs
                .fetch_add(prepared.warmup_runs, Ordering::Relaxed);
            *loaded.execution.lock() = prepared.execution;
            loaded
                .intra_threads
                .store(prepared.intra_threads, Ordering::Relaxed);
            loaded
                .per_instance_bytes
                .store(per_instance, Ordering::Relaxed);
        }
        loaded
            .scheduler
            .set_policy(BatchPolicy::new(&config, self.config.max_queue_size));
        if want < have {
            loaded.pool.retire(have - want);
        }
        tracing::info!(model = %loaded.key, instances = want, "model config applied");
        *loaded.config.lock() = config;
        loaded
            .applied_generation
            .fetch_max(generation.max(seen), Ordering::AcqRel);
        Ok(())
    }

    /// Unloads versions whose config sets `unload_after_s` and that have had no request for
    /// that long. A request that grabbed the version meanwhile still completes: it holds it.
    fn unload_idle(&self) {
        let mut slots = self.slots.lock();
        let idle: Vec<ModelKey> = slots
            .iter()
            .filter_map(|(key, slot)| {
                let loaded = slot.cell.get()?;
                let after = loaded.config.lock().unload_after()?;
                let idle = loaded.in_flight.load(Ordering::Relaxed) == 0
                    && loaded.last_used.lock().elapsed() >= after;
                idle.then(|| key.clone())
            })
            .collect();
        for key in idle {
            slots.remove(&key);
            tracing::info!(model = %key, "model unloaded after being idle");
        }
    }
}
