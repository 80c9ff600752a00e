//! A model's traffic policy on the request path: which version serves a request that names
//! none (the weighted split, sticky by key or by a header), and the mirrored copies.
//!
//! The policy belongs to the model (`crate::model_settings`), so it survives new uploads; it
//! applies to every protocol that resolves a model name through the inference service (KServe
//! HTTP and gRPC, WebSocket, pipelines' model stages, the OpenAI routes on a chat model). A
//! request that names a version is served by that version, untouched; so is a stateful one
//! (`crate::infer::Request::is_stateful`).
//!
//! Mirrored copies run in the background on the mirror's version, at its lowest priority
//! level, their answers dropped and their outcome and latency counted apart
//! (`infergate_mirror_requests_total`). They never delay a caller: a copy waits in a short
//! queue for one of a few runners, and is shed (counted) when the queue is full or the mirror
//! version is busy with callers of its own.

use crate::caller::Caller;
use crate::catalog::model_key;
use crate::infer::backend;
use crate::mirror_queue::{MirrorJob, MIRROR_RUNNERS};
use crate::model_settings::TrafficRoute;
use crate::state::AppState;
use crate::traffic_metrics::MirrorOutcome;
use infergate_engine::{InferOptions, ModelConfig, Tensor};
use infergate_store::models::ModelRecord;
use infergate_traffic::choose::Pick;
use infergate_traffic::policy::Sticky;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Semaphore;

/// The version `record`'s model sends a request that named none to, by its traffic split;
/// `record` itself (the version policy's choice) when the model has no split or the version
/// the split chose is gone. `caller` and `headers` place sticky requests.
pub fn split(
    state: &AppState,
    caller: Option<&Caller>,
    record: Arc<ModelRecord>,
    headers: &http::HeaderMap,
) -> (Arc<ModelRecord>, Option<Arc<TrafficRoute>>) {
    let Some(route) = state.model_settings().traffic(&record.name) else {
        return (record, None);
    };
    if !route.router.splits() {
        return (record, Some(route));
    }
    let key_id;
    let pick = match route.router.sticky() {
        Some(Sticky::Key) => match caller.and_then(Caller::key) {
            Some(key) => {
                key_id = key.public_id.clone();
                Pick::Caller(key_id.as_bytes())
            }
            None => Pick::Draw(rand::random()),
        },
        Some(Sticky::Header(name)) => match headers.get(name.as_str()) {
            Some(value) => Pick::Caller(value.as_bytes()),
            None => Pick::Draw(rand::random()),
        },
        None => Pick::Draw(rand::random()),
    };
    let chosen = route
        .router
        .choose(pick)
        .filter(|&v| v != record.version)
        .and_then(|v| state.catalog().version(&record.name, v));
    let record = chosen.unwrap_or(record);
    state.metrics().traffic.split(&record.name, record.version);
    (record, Some(route))
}

/// The version a copy of this request goes to, when the policy mirrors it.
pub fn mirror_of(
    state: &AppState,
    route: &TrafficRoute,
    served: &ModelRecord,
) -> Option<Arc<ModelRecord>> {
    let version = route.router.mirror(served.version, rand::random())?;
    state.catalog().version(&served.name, version)
}

/// Queues a copy of a request (its inputs and the outputs it asked for) for `record`, or
/// sheds it when the queue is full or the version is busy with callers.
pub fn mirror(
    state: &AppState,
    record: Arc<ModelRecord>,
    inputs: Vec<Tensor>,
    outputs: Vec<String>,
) {
    let busy = state.engine().in_flight(&model_key(&record)) >= MIRROR_RUNNERS;
    state.mirrors().send(
        busy,
        MirrorJob {
            record,
            inputs,
            outputs,
        },
        &state.metrics().traffic,
    );
}

/// The lowest priority level of a version (its config's `priority_levels`; 0, the default
/// level, when it has none).
fn lowest_priority(record: &ModelRecord) -> u32 {
    ModelConfig::from_json(&record.config)
        .ok()
        .and_then(|c| c.dynamic_batching)
        .map_or(0, |d| d.priority_levels)
}

/// Runs mirrored copies until the service is dropped.
pub fn spawn(state: &Arc<AppState>) {
    let Some(mut receiver) = state.mirrors().take_receiver() else {
        return;
    };
    let weak = Arc::downgrade(state);
    let runners = Arc::new(Semaphore::new(MIRROR_RUNNERS));
    tokio::spawn(async move {
        while let Some(job) = receiver.recv().await {
            let Ok(permit) = runners.clone().acquire_owned().await else {
                return;
            };
            let Some(state) = weak.upgrade() else {
                return;
            };
            tokio::spawn(async move {
                let _permit = permit;
                let started = Instant::now();
                let options = InferOptions {
                    priority: lowest_priority(&job.record),
                    timeout: None,
                };
                let result =
                    backend::run_model(&state, &job.record, job.inputs, job.outputs, options).await;
                let outcome = match &result {
                    Ok(_) => MirrorOutcome::Ok,
                    Err(e) => {
                        tracing::debug!(model = %job.record.name, version = job.record.version, error = %e.message, "mirrored copy failed");
                        MirrorOutcome::Error
                    }
                };
                state.metrics().traffic.mirror(
                    &job.record.name,
                    job.record.version,
                    outcome,
                    Some(started.elapsed()),
                );
            });
        }
    });
}
