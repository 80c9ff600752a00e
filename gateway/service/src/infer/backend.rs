//! Where a model version runs. Every inference reaches a model through [`run_model`]: KServe
//! on a model, a pipeline's model stage, text generation. The manager chooses the local engine
//! or a worker (`workers::Manager::choose`: power of two choices among the copies, rendezvous
//! affinity); a unary request whose worker fails before answering is tried once more on
//! another, so every protocol gains workers and failover at once.
//!
//! A request in flight on a worker ends as soon as the manager declares that worker lost (its
//! heartbeats stopped) or it is removed, or when the hop's link goes silent (`[cluster]
//! link_timeout_ms`): it does not wait out the partition. What happens next depends on whether
//! it may have run there. One that never reached the worker is tried on another. One that did
//! (its answer is what was lost) is run again on another when it is a unary request outside a
//! sequence and `[cluster] retry_in_flight` is on (the default: a model's run has no effect
//! beyond its answer, so a second run costs only compute; `infergate_worker_retries_sent_total`
//! counts them). A request of a sequence of a stateful model ([`run_sequence`]; its state lives
//! on that worker) is never run elsewhere: it fails with 503 naming the worker. A model without
//! sequence batching ignores sequence parameters, as Triton does, so its requests are retried
//! like any other (which is also why a body that names a sequence is decoded, never relayed).
//!
//! A pipeline's model stage comes with its native op ([`run_stage`]): it runs where the model
//! runs, so on a worker next to its GPU, and the manager sends the smaller pre-op tensors
//! (`[cluster] pipeline_ops = "worker"`, the default; `"manager"` runs it here and sends the
//! model's inputs). Either way the same op runs on the same tensors, so the answer is the same.

use crate::catalog::model_key;
use crate::config::PipelineOps;
use crate::error::{ApiError, ApiResult, Kind};
use crate::manager::metrics::RoutingCounters;
use crate::manager::routing::Choice;
use crate::manager::Manager;
use crate::state::AppState;
use infergate_cluster::messages::LoadedModel;
use infergate_engine::kernels::Ops;
use infergate_engine::preprocess::{ResizeNormalize, ResizeNormalizeExt};
use infergate_engine::{InferOptions, ModelState, SequenceFlags, Tensor};
use infergate_hop::remote::{self, Failure};
use infergate_store::models::ModelRecord;
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
    let mut routing = Routing::new(state, record);
    let mut encoded = None;
    loop {
        let worker = match routing.next()? {
            Some(Choice::Local) => {
                let _outstanding = routing.manager.begin(crate::manager::LOCAL);
                // A version the engine serves needs no file: the path is built only if it was
                // unloaded in the meantime.
                let checked = if routing.local_loaded {
                    None
                } else {
                    Some(state.model_file(record, false).await?)
                };
                if let Some(op) = op {
                    inputs = preprocess(state.ops().clone(), op.clone(), inputs).await?;
                }
                let path = || checked.unwrap_or_else(|| state.model_path(record));
                let loaded = routing.local_loaded;
                return Ok(infergate_telemetry::traced!(
                    state
                        .engine()
                        .infer_with(&routing.local_key, path, inputs, outputs, options),
                    infergate_telemetry::model_run_span!(
                        model = %record.name,
                        version = record.version as i64,
                        loaded,
                    )
                )?);
            }
            Some(Choice::Worker { id, advertise }) => (id, advertise),
            None => return Err(routing.exhausted()),
        };
        let body = encoded.get_or_insert_with(|| match op {
            Some(op) => remote::encode_stage(&inputs, op, &outputs, options),
            None => remote::encode(&inputs, &outputs, options),
        });
        if let Some(answer) = routing.attempt(&worker.0, &worker.1, body).await? {
            return remote::decode_answer(&worker.1, &answer).map_err(ApiError::from);
        }
    }
}

/// Runs one request of a sequence of a stateful model version. The sequence's state lives
/// where its first request ran, so its copy is chosen from its correlation id
/// ([`crate::manager::Manager::choose_for_sequence`], the same on every replica) and never
/// changes: a worker that fails before answering is not retried elsewhere, and the sequence
/// ends there with an error that says so.
pub async fn run_sequence(
    state: &AppState,
    record: &ModelRecord,
    inputs: Vec<Tensor>,
    outputs: Vec<String>,
    options: InferOptions,
    sequence: SequenceFlags,
) -> ApiResult<Vec<Tensor>> {
    let manager = state.workers();
    let model = LoadedModel {
        name: record.name.clone(),
        version: u32::try_from(record.version).unwrap_or(u32::MAX),
    };
    let (id, advertise) = match manager.choose_for_sequence(&model, &sequence.id.to_string())? {
        Choice::Local => {
            let _outstanding = manager.begin(crate::manager::LOCAL);
            let key = model_key(record);
            let checked = if state.engine().state(&key) == ModelState::Ready {
                None
            } else {
                Some(state.model_file(record, false).await?)
            };
            let path = || checked.unwrap_or_else(|| state.model_path(record));
            return Ok(state
                .engine()
                .infer_in_sequence(&key, path, inputs, outputs, options, sequence)
                .await?);
        }
        Choice::Worker { id, advertise } => (id, advertise),
    };
    let _outstanding = manager.begin(&id);
    let body = remote::encode_sequence(&inputs, &outputs, options, &sequence);
    manager
        .counters()
        .sent_bytes
        .fetch_add(body.wire_bytes() as u64, Ordering::Relaxed);
    let timeout = Duration::from_secs(manager.config.request_timeout_s.max(1));
    let digest = remote::config_digest(&record.config);
    let to = remote::Destination {
        advertise: &advertise,
        model: &record.name,
        version: record.version,
        config_digest: &digest,
    };
    match remote::send(&manager.pool, &to, &body, timeout).await {
        Ok(answer) => remote::decode_answer(&advertise, &answer).map_err(ApiError::from),
        Err(Failure::Answered(refusal)) => Err(refusal.into()),
        Err(Failure::TimedOut(why)) => Err(ApiError::new(Kind::Timeout, why)),
        Err(Failure::Unreachable { why, .. }) => {
            tracing::warn!(worker = %id, model = %record.name, sequence = %sequence.id, error = %why, "the worker of a sequence failed; the sequence ends");
            Err(ApiError::unavailable(format!(
                "sequence {} of model '{}' ran on worker {id}, which failed before answering ({why}): its state is lost and the sequence has ended; start it again with sequence_start",
                sequence.id, record.name
            )))
        }
    }
}

/// Where [`forward`] ran a KServe v2 request.
pub enum Forwarded {
    /// A worker answered it: its body as the client asked for it (JSON, or a JSON header and
    /// binary tensors).
    Worker(remote::Answer),
    /// The local engine is the choice: the caller decodes the body and runs it through
    /// [`run_model`].
    Local,
}

/// A KServe v2 request over HTTP as the client sent it, relayed to a worker undecoded, and the
/// worker's answer relayed back likewise: a manager that only routes decodes no tensor and
/// encodes none (at concurrency 1 every microsecond it spends is added to the client's
/// latency). The worker decodes and validates the request as this server would (its errors
/// are relayed with their status), and it sees the client's own parameters (priority, queue
/// timeout, output encoding). Failover as in [`run_stage`]: the body is sent again as it is.
pub async fn forward(
    state: &AppState,
    record: &ModelRecord,
    body: bytes::Bytes,
    header_len: Option<usize>,
) -> ApiResult<Forwarded> {
    let mut routing = Routing::new(state, record);
    let request = remote::Encoded::relayed(body, header_len);
    loop {
        let (id, advertise) = match routing.next()? {
            Some(Choice::Local) => return Ok(Forwarded::Local),
            Some(Choice::Worker { id, advertise }) => (id, advertise),
            None => return Err(routing.exhausted()),
        };
        if let Some(answer) = routing.attempt(&id, &advertise, &request).await? {
            return Ok(Forwarded::Worker(answer));
        }
    }
}

/// One request's way to a model version's copies: the manager's choice for each attempt, the
/// workers already tried and why the last one failed.
struct Routing<'a> {
    manager: &'a crate::manager::Manager,
    record: &'a ModelRecord,
    model: LoadedModel,
    /// Whether the local engine held the version at the last choice.
    local_loaded: bool,
    local_key: infergate_engine::ModelKey,
    local_engine: &'a infergate_engine::Engine,
    tried: Vec<String>,
    last_failure: String,
    digest: Option<String>,
}

impl<'a> Routing<'a> {
    fn new(state: &'a AppState, record: &'a ModelRecord) -> Routing<'a> {
        Routing {
            manager: state.workers(),
            record,
            model: LoadedModel {
                name: record.name.clone(),
                version: u32::try_from(record.version).unwrap_or(u32::MAX),
            },
            local_loaded: false,
            local_key: model_key(record),
            local_engine: state.engine(),
            tried: Vec::new(),
            last_failure: String::new(),
            digest: None,
        }
    }

    /// The next copy to try; None once every attempt is spent. No copy at all is the
    /// manager's error (503 naming the model), with the last failure when there was one.
    fn next(&mut self) -> ApiResult<Option<Choice>> {
        if self.tried.len() >= ATTEMPTS {
            return Ok(None);
        }
        self.local_loaded = self.local_engine.state(&self.local_key) == ModelState::Ready;
        match self
            .manager
            .choose(&self.model, self.local_loaded, &self.tried)
        {
            Ok(choice) => Ok(Some(choice)),
            Err(e) if self.tried.is_empty() => Err(e),
            Err(mut e) => {
                e.message = format!("{} (last failure: {})", e.message, self.last_failure);
                Err(e)
            }
        }
    }

    /// Sends `body` to worker `id`, counted outstanding meanwhile: its answer, or None when
    /// the worker failed before answering and another may be tried, or the error to give the
    /// client (the worker's answer, the deadline, or a failure that may not be retried).
    async fn attempt(
        &mut self,
        id: &str,
        advertise: &str,
        body: &remote::Encoded,
    ) -> ApiResult<Option<remote::Answer>> {
        let manager = self.manager;
        let record = self.record;
        let to = remote::Destination {
            advertise,
            model: &record.name,
            version: record.version,
            config_digest: self
                .digest
                .get_or_insert_with(|| remote::config_digest(&record.config)),
        };
        let sent = send_to_worker(manager, id, &to, body).await;
        let (why, reached) = match sent {
            Ok(answer) => return Ok(Some(answer)),
            Err(Failure::Answered(refusal)) => return Err(refusal.into()),
            Err(Failure::TimedOut(why)) => return Err(ApiError::new(Kind::Timeout, why)),
            Err(Failure::Unreachable { why, reached }) => (why, reached),
        };
        if reached && !manager.config.retry_in_flight {
            let reason = "it may have run there, and [cluster] retry_in_flight is off";
            return Err(ApiError::unavailable(format!(
                "model '{}' version {}: {why}; not tried on another worker: {reason}",
                self.record.name, self.record.version
            )));
        }
        tracing::warn!(worker = %id, model = %self.local_key, error = %why, reached, "worker failed before answering; trying another");
        RoutingCounters::count(&manager.counters().retries);
        if reached {
            RoutingCounters::count(&manager.counters().retries_sent);
        }
        self.last_failure = why;
        self.tried.push(id.to_owned());
        Ok(None)
    }

    /// Every attempt failed before an answer.
    fn exhausted(&self) -> ApiError {
        RoutingCounters::count(&self.manager.counters().no_worker);
        ApiError::unavailable(format!(
            "model '{}' version {}: {} workers failed before answering (last: {})",
            self.record.name, self.record.version, ATTEMPTS, self.last_failure
        ))
    }
}

/// Sends `body` to worker `id` (counted outstanding there meanwhile) and reads its answer. It
/// ends at once, as [`Failure::Unreachable`] with `reached`, when the manager declares the
/// worker lost or it is removed meanwhile, rather than waiting on a host that stopped
/// answering; a worker that failed to answer is routed around for a while
/// (`Manager::suspect`). Every request to a worker goes through here.
pub async fn send_to_worker(
    manager: &Manager,
    id: &str,
    to: &remote::Destination<'_>,
    body: &remote::Encoded,
) -> Result<remote::Answer, Failure> {
    let span = infergate_telemetry::span!(
        "worker hop",
        worker = %id,
        advertise = to.advertise,
        model = to.model,
        version = to.version as i64,
        request_bytes = body.wire_bytes() as i64,
        answer_bytes = tracing::field::Empty,
        failure = tracing::field::Empty
    );
    let sent =
        infergate_telemetry::traced!(send_to_worker_within(manager, id, to, body), span.clone());
    match &sent {
        Ok(answer) => {
            span.record("answer_bytes", answer.body.len() as i64);
        }
        Err(failure) => {
            span.record("failure", failure_kind(failure));
        }
    }
    sent
}

/// What became of an attempt that got no answer, as a span attribute.
fn failure_kind(failure: &Failure) -> &'static str {
    match failure {
        Failure::Answered(_) => "answered with an error",
        Failure::TimedOut(_) => "timed out",
        Failure::Unreachable { reached: true, .. } => "failed after the request reached it",
        Failure::Unreachable { reached: false, .. } => "unreachable",
    }
}

async fn send_to_worker_within(
    manager: &Manager,
    id: &str,
    to: &remote::Destination<'_>,
    body: &remote::Encoded,
) -> Result<remote::Answer, Failure> {
    let outstanding = manager.begin(id);
    manager
        .counters()
        .sent_bytes
        .fetch_add(body.wire_bytes() as u64, Ordering::Relaxed);
    let timeout = Duration::from_secs(manager.config.request_timeout_s.max(1));
    let sent = tokio::select! {
        biased;
        sent = remote::send(&manager.pool, to, body, timeout) => sent,
        () = outstanding.lost() => {
            RoutingCounters::count(&manager.counters().cut);
            Err(Failure::Unreachable {
                why: format!(
                    "worker {id} at {} was declared lost (no heartbeat for {:?}) or removed while the request was there",
                    to.advertise,
                    manager.heartbeat().deadline()
                ),
                reached: true,
            })
        }
    };
    drop(outstanding);
    if let Err(Failure::Unreachable { .. }) = &sent {
        manager.suspect(id);
    }
    sent
}
