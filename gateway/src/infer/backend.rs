//! Where a model version runs. Every inference reaches a model through [`run_model`]: KServe
//! on a model, a pipeline's model stage, text generation. The manager chooses the local engine
//! or a worker (`workers::Manager::choose`: power of two choices among the copies, rendezvous
//! affinity); a unary request whose worker fails before answering is tried once more on
//! another, so every protocol gains workers and failover at once.
//!
//! A pipeline's model stage comes with its native op ([`run_stage`]): it runs where the model
//! runs, so on a worker next to its GPU, and the manager sends the smaller pre-op tensors
//! (`[cluster] pipeline_ops = "worker"`, the default; `"manager"` runs it here and sends the
//! model's inputs). Either way the same op runs on the same tensors, so the answer is the same.

use crate::config::PipelineOps;
use crate::error::{ApiError, ApiResult, Kind};
use crate::state::AppState;
use crate::store::models::model_key;
use crate::store::models::ModelRecord;
use crate::workers::manager::Choice;
use crate::workers::remote::{self, Failure};
use infergate_cluster::messages::LoadedModel;
use infergate_engine::kernels::Ops;
use infergate_engine::preprocess::{ResizeNormalize, ResizeNormalizeExt};
use infergate_engine::{InferOptions, ModelState, Tensor};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Workers tried for one request: the first choice and one retry.
const ATTEMPTS: usize = 2;

/// Runs `inputs` through one model version, answering `outputs` (all when empty), queued at
/// the options' priority and timeout. Dropping the future takes the request out of the queue
/// (locally) or closes its request to the worker.
pub async fn run_model(
    state: &AppState,
    record: &ModelRecord,
    inputs: Vec<Tensor>,
    outputs: Vec<String>,
    options: InferOptions,
) -> ApiResult<Vec<Tensor>> {
    run_stage(state, record, inputs, None, outputs, options).await
}

/// The native op (resize + normalize) on `tensors`, on a blocking thread: CPU-bound, or a GPU
/// launch and wait when `ops` has a device.
pub async fn preprocess(
    ops: Arc<Ops>,
    op: ResizeNormalize,
    tensors: Vec<Tensor>,
) -> ApiResult<Vec<Tensor>> {
    tokio::task::spawn_blocking(move || op.apply(&ops, tensors))
        .await
        .map_err(|e| ApiError::internal(format!("preprocessing task failed: {e}")))?
        .map_err(ApiError::from)
}

/// [`run_model`] for a pipeline stage: `op` (when given) turns `inputs` into the model's inputs
/// where the model runs, or on this server when `[cluster] pipeline_ops = "manager"`.
pub async fn run_stage(
    state: &AppState,
    record: &ModelRecord,
    mut inputs: Vec<Tensor>,
    mut op: Option<&ResizeNormalize>,
    outputs: Vec<String>,
    options: InferOptions,
) -> ApiResult<Vec<Tensor>> {
    if let Some(here) = op.filter(|_| state.workers().config.pipeline_ops == PipelineOps::Manager) {
        inputs = preprocess(state.ops().clone(), here.clone(), inputs).await?;
        op = None;
    }
    let key = model_key(record);
    let model = LoadedModel {
        name: record.name.clone(),
        version: u32::try_from(record.version).unwrap_or(u32::MAX),
    };
    let manager = state.workers();
    let mut tried: Vec<String> = Vec::new();
    let mut encoded = None;
    let mut digest = None;
    let mut last_failure = String::new();
    for _ in 0..ATTEMPTS {
        let local_loaded = state.engine().state(&key) == ModelState::Ready;
        let choice = match manager.choose(&model, local_loaded, &tried) {
            Ok(choice) => choice,
            Err(e) if tried.is_empty() => return Err(e),
            Err(mut e) => {
                e.message = format!("{} (last failure: {last_failure})", e.message);
                return Err(e);
            }
        };
        let (id, advertise) = match choice {
            Choice::Local => {
                let _outstanding = manager.begin(crate::workers::manager::LOCAL);
                let path = state.model_file(record, local_loaded).await?;
                if let Some(op) = op {
                    inputs = preprocess(state.ops().clone(), op.clone(), inputs).await?;
                }
                return Ok(state
                    .engine()
                    .infer_with(&key, &path, inputs, outputs, options)
                    .await?);
            }
            Choice::Worker { id, advertise } => (id, advertise),
        };
        let body = encoded.get_or_insert_with(|| match op {
            Some(op) => remote::encode_stage(&inputs, op, &outputs, options),
            None => remote::encode(&inputs, &outputs, options),
        });
        let _outstanding = manager.begin(&id);
        manager
            .counters()
            .sent_bytes
            .fetch_add(body.wire_bytes() as u64, Ordering::Relaxed);
        let timeout = Duration::from_secs(manager.config.request_timeout_s.max(1));
        let to = remote::Destination {
            advertise: &advertise,
            model: &record.name,
            version: record.version,
            config_digest: digest.get_or_insert_with(|| remote::config_digest(&record.config)),
        };
        match remote::infer(&manager.pool, &to, body, timeout).await {
            Ok(outputs) => return Ok(outputs),
            Err(Failure::Answered(e)) => return Err(e),
            Err(Failure::TimedOut(why)) => return Err(ApiError::new(Kind::Timeout, why)),
            Err(Failure::Unreachable(why)) => {
                tracing::warn!(worker = %id, model = %key, error = %why, "worker failed before answering; trying another");
                crate::workers::metrics::RoutingCounters::count(&manager.counters().retries);
                last_failure = why;
                tried.push(id);
            }
        }
    }
    crate::workers::metrics::RoutingCounters::count(&manager.counters().no_worker);
    Err(ApiError::unavailable(format!(
        "model '{}' version {}: {} workers failed before answering (last: {last_failure})",
        record.name, record.version, ATTEMPTS
    )))
}
