//! `GET /v2/events` (WebSocket, admin scope): live server events for the dashboard. The key
//! comes as on `/v2/stream` (headers, or offered as a subprotocol next to `infergate.v1`).
//!
//! Every second one frame `{"type": "tick", "time_ms", "websocket_connections", "memory":
//! {"host_reserved_bytes", "host_budget_bytes", "gpu_pools"}, "models":
//! [{"model", "version", "state", "in_flight", "requests_per_s", "failures_per_s",
//! "client_errors_per_s", "server_errors_per_s", "avg_latency_ms", "avg_queue_ms", "p50_ms",
//! "p99_ms"}]}` over the last second: rates and means from the engine's counters
//! (`failures_per_s`: requests the engine failed); `client_errors_per_s` (4xx) and
//! `server_errors_per_s` (5xx) from the answers the gateway gave, refusals before the engine
//! included; `p50_ms`/`p99_ms` from the per-version histograms in [`infergate_service::latency`]
//! (successful inference requests end to end as the gateway saw them; `null` in a second
//! without one). And, when a model version changes state, `{"type": "model_state", "time_ms",
//! "model", "version", "state", "reason"}` (loaded, loading, unloaded, failed; registered and
//! removed versions included; `time_ms` is the server's clock).
//!
//! Workers (the local engine of a server that runs one is the worker `local`): the
//! tick's `"workers": [{"id", "address", "state", "last_seen_ms", "outstanding", "models",
//! "in_flight", "queued", "requests_per_s", "p50_ms", "p99_ms", "cpu_percent", "rss_bytes",
//! "gpus"}]`. `state` is ready, draining or lost as the manager judges it; `last_seen_ms` is
//! the age of its last heartbeat on the manager's clock; `outstanding` counts the manager's
//! requests there. The rest is what the worker measured over its last heartbeat interval
//! (`p50_ms`/`p99_ms` null in one without requests), and all of it null while the worker is
//! lost. For `local` they are this second's: requests the engine ran, this process's CPU (% of
//! one core) and memory, and the gateway's percentiles while no worker shares the traffic (null
//! once one does: they would mix in the workers' requests). And, when a worker joins, changes
//! state or leaves, `{"type": "worker_state", "time_ms", "worker", "address", "state",
//! "previous"}`: `state` ready, draining, lost or removed (removed by an operator or
//! deregistered after draining); `previous` null for a worker first seen (joined, or already
//! there when the connection opened).
//!
//! The client has nothing to send; what it sends anyway costs what it costs on `/v2/stream`:
//! control frames beyond that endpoint's allowance close the connection with 1008, a frame
//! over `[websocket] max_message_bytes` with 1009 before its payload is read.

use super::stream::{
    limited, read_failure_close, too_many_control_frames, upgrade_key, ControlBudget, SUBPROTOCOL,
};
use super::workers::listing;
use super::ws_frame::encoded;
use axum::extract::ws::{close_code, CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::Response;
use futures_util::{SinkExt, StreamExt};
use http::HeaderMap;
use infergate_api_types::events::{
    Event, GpuPools, Memory, ModelFigures, Pool, Tick, WorkerChange, WorkerStateChange,
};
use infergate_api_types::history::{Activity, VersionState};
use infergate_api_types::workers::WorkerFigures;
use infergate_cluster::liveness::WorkerState;
use infergate_cluster::messages::Report;
use infergate_cluster::registry::WorkerView;
use infergate_engine::kernels::device::pool::PoolStats;
use infergate_engine::ModelStats;
use infergate_kserve::http_error::HttpResult;
use infergate_service::catalog::model_key;
use infergate_service::error::ApiError;
use infergate_service::history::{now_ms, state_name};
use infergate_service::host::CpuSampler;
use infergate_service::latency::{Counts, StatusCounts};
use infergate_service::manager::LOCAL;
use infergate_service::state::AppState;
use infergate_store::auth::Scope;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

pub async fn upgrade(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> HttpResult<Response> {
    if upgrade_key(&state, &headers, &ws, Scope::Admin)?.is_none() {
        return Err(ApiError::unauthorized(format!(
            "missing API key: send 'Authorization: Bearer <key>' or offer it as a subprotocol with '{SUBPROTOCOL}'"
        )).into());
    }
    Ok(limited(ws, &state).on_upgrade(move |socket| events(state, socket)))
}

/// One version as read at a tick.
struct Reading {
    state: VersionState,
    reason: Option<String>,
    stats: Option<ModelStats>,
    latency: Option<Counts>,
    statuses: Option<StatusCounts>,
}

type Versions = BTreeMap<(String, u64), Reading>;

/// What one tick reads: every model version and every worker (the local engine included).
struct Snapshot {
    versions: Versions,
    workers: BTreeMap<String, WorkerView>,
}

fn snapshot(state: &AppState) -> Snapshot {
    let versions = state
        .catalog()
        .all()
        .iter()
        .map(|r| {
            let key = model_key(r);
            let (name, reason) = state_name(&state.engine().state(&key));
            let reading = Reading {
                state: name,
                reason,
                stats: state.engine().stats(&key),
                latency: state
                    .metrics()
                    .latency
                    .counts(&r.name, &r.version.to_string()),
                statuses: state
                    .metrics()
                    .latency
                    .statuses(&r.name, &r.version.to_string()),
            };
            ((r.name.clone(), r.version), reading)
        })
        .collect();
    let workers = listing(state)
        .into_iter()
        .map(|w| (w.info.id.clone(), w))
        .collect();
    Snapshot { versions, workers }
}

/// The frames for one second: state changes first, then the tick. `local_cpu_percent`: this
/// process's CPU over the second, the local engine's figure.
fn frames(
    state: &AppState,
    before: &Snapshot,
    now: &Snapshot,
    seconds: f64,
    local_cpu_percent: f64,
) -> Vec<Event> {
    let mut out = Vec::new();
    let time_ms = now_ms();
    for ((model, version), reading) in &now.versions {
        let changed = before
            .versions
            .get(&(model.clone(), *version))
            .is_none_or(|old| old.state != reading.state);
        if changed {
            out.push(Event::ModelState(Activity {
                time_ms,
                model: model.clone(),
                version: *version,
                state: reading.state,
                reason: reading.reason.clone(),
            }));
        }
    }
    for (model, version) in before
        .versions
        .keys()
        .filter(|k| !now.versions.contains_key(*k))
    {
        out.push(Event::ModelState(Activity {
            time_ms,
            model: model.clone(),
            version: *version,
            state: VersionState::Removed,
            reason: None,
        }));
    }
    out.extend(worker_states(&before.workers, &now.workers, time_ms));
    // The local engine's whole second: requests it ran, and their latencies.
    let mut local_done = 0u64;
    let mut local_window = Counts::empty();
    let mut models = Vec::new();
    for ((model, version), reading) in &now.versions {
        let zero = ModelStats::default();
        // A version first seen at this tick (the connection's first tick included) has no
        // window yet: its counters since start are not one second's worth.
        let earlier = before.versions.get(&(model.clone(), *version));
        let old = earlier.map(|v| v.stats.clone().unwrap_or_default());
        let new = reading.stats.as_ref().unwrap_or(&zero);
        let window = earlier.and_then(|e| {
            let now = reading.latency.as_ref()?;
            Some(now.since(e.latency.as_ref()))
        });
        if let Some(w) = &window {
            local_window.add(w);
        }
        let quantile = |q: f64| window.as_ref().and_then(|w| w.quantile_ms(q));
        let answers = earlier.and_then(|e| {
            let now = reading.statuses.as_ref()?;
            Some(now.since(e.statuses.as_ref()))
        });
        let errors = |range: std::ops::Range<u16>| {
            answers.as_ref().map_or(0, |a| a.in_range(range)) as f64 / seconds
        };
        let old = old.as_ref().unwrap_or(new);
        let done = new.success.count.saturating_sub(old.success.count);
        local_done += done;
        let failed = new.fail.count.saturating_sub(old.fail.count);
        let avg_ms = |ns_new: u64, ns_old: u64| {
            (done > 0).then(|| ns_new.saturating_sub(ns_old) as f64 / done as f64 / 1e6)
        };
        let key = infergate_engine::ModelKey {
            name: model.clone(),
            version: *version,
        };
        models.push(ModelFigures {
            model: model.clone(),
            version: *version,
            state: reading.state,
            in_flight: state.engine().in_flight(&key) as u64,
            requests_per_s: done as f64 / seconds,
            failures_per_s: failed as f64 / seconds,
            client_errors_per_s: errors(400..500),
            server_errors_per_s: errors(500..600),
            avg_latency_ms: avg_ms(new.success.ns, old.success.ns),
            avg_queue_ms: avg_ms(new.queue.ns, old.queue.ns),
            p50_ms: quantile(0.5),
            p99_ms: quantile(0.99),
        });
    }
    // The gateway's latency histograms count every request it answered, wherever it ran: they
    // are the local engine's only while no worker shares the traffic.
    let alone = now.workers.keys().all(|id| id == LOCAL);
    let local = Figures {
        requests_per_s: local_done as f64 / seconds,
        p50_ms: local_window.quantile_ms(0.5).filter(|_| alone),
        p99_ms: local_window.quantile_ms(0.99).filter(|_| alone),
        cpu_percent: local_cpu_percent,
    };
    let workers: Vec<WorkerFigures> = now
        .workers
        .values()
        .map(|w| {
            let figures = if w.info.id == LOCAL {
                local
            } else {
                Figures::reported(&w.report)
            };
            worker_figures(w, figures)
        })
        .collect();
    out.push(Event::Tick(Tick {
        time_ms,
        websocket_connections: state.drain().open_streams() as u64,
        memory: memory(state),
        models,
        workers,
    }));
    out
}

/// `worker_state` frames: a worker first seen (joined, or already there when the connection
/// opened: `previous` is null), one whose state changed, one no longer listed (`removed`).
fn worker_states(
    before: &BTreeMap<String, WorkerView>,
    now: &BTreeMap<String, WorkerView>,
    time_ms: u64,
) -> Vec<Event> {
    let event = |w: &WorkerView, state: WorkerChange, previous: Option<WorkerState>| {
        Event::WorkerState(WorkerStateChange {
            time_ms,
            worker: w.info.id.clone(),
            address: w.info.advertise.clone(),
            state,
            previous,
        })
    };
    let mut out: Vec<Event> = now
        .values()
        .filter_map(|w| {
            let previous = before.get(&w.info.id).map(|old| old.state);
            (previous != Some(w.state)).then(|| event(w, w.state.into(), previous))
        })
        .collect();
    out.extend(
        before
            .values()
            .filter(|w| !now.contains_key(&w.info.id))
            .map(|w| event(w, WorkerChange::Removed, Some(w.state))),
    );
    out
}

/// A worker's rate, percentiles and CPU for a tick.
#[derive(Clone, Copy)]
struct Figures {
    requests_per_s: f64,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    cpu_percent: f64,
}

impl Figures {
    /// What a worker measured over its last heartbeat interval (no percentiles in an interval
    /// without requests).
    fn reported(r: &Report) -> Figures {
        let measured = |v: f64| (r.requests_per_s > 0.0).then_some(v);
        Figures {
            requests_per_s: r.requests_per_s,
            p50_ms: measured(r.p50_ms),
            p99_ms: measured(r.p99_ms),
            cpu_percent: r.cpu_percent,
        }
    }
}

/// One worker in a tick. A lost worker's last report says nothing about now: its reported
/// figures are null (the manager's own count of requests outstanding there stays).
fn worker_figures(w: &WorkerView, f: Figures) -> WorkerFigures {
    let live = w.state != WorkerState::Lost;
    let r = &w.report;
    WorkerFigures {
        id: w.info.id.clone(),
        address: w.info.advertise.clone(),
        state: w.state,
        last_seen_ms: w.last_seen_ms,
        outstanding: w.outstanding,
        models: live.then(|| r.models.clone()),
        in_flight: live.then_some(r.in_flight),
        queued: live.then_some(r.queued),
        requests_per_s: live.then_some(f.requests_per_s),
        p50_ms: f.p50_ms.filter(|_| live),
        p99_ms: f.p99_ms.filter(|_| live),
        cpu_percent: live.then_some(f.cpu_percent),
        rss_bytes: live.then_some(r.rss_bytes),
        gpus: live.then(|| r.gpus.clone()),
    }
}

/// Host memory reserved by loaded model instances (and the budget, null when unlimited), and
/// the native ops' GPU memory pools (null when they run on the CPU).
fn memory(state: &AppState) -> Memory {
    let (reserved, budget) = state.engine().memory();
    let pool = |p: &PoolStats| Pool {
        held_bytes: p.held_bytes as u64,
        free_bytes: p.free_bytes as u64,
        limit_bytes: p.limit_bytes as u64,
        hits: p.hits,
        misses: p.misses,
    };
    let gpu_pools = state.engine().gpu_memory().map(|m| GpuPools {
        device: pool(&m.device),
        pinned: pool(&m.pinned),
    });
    Memory {
        host_reserved_bytes: reserved,
        host_budget_bytes: budget,
        gpu_pools,
    }
}

async fn events(state: Arc<AppState>, socket: WebSocket) {
    let _open = state.metrics().websocket_opened();
    let _stream = state.drain().stream_opened();
    let (mut sink, mut incoming) = socket.split();
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut before = Snapshot {
        versions: Versions::new(),
        workers: BTreeMap::new(),
    };
    let mut cpu = CpuSampler::new();
    let mut last = tokio::time::Instant::now();
    let mut control = ControlBudget::new();
    let draining = state.drain().signal();
    tokio::pin!(draining);
    loop {
        tokio::select! {
            _ = ticker.tick() => {
                let now = snapshot(&state);
                let seconds = last.elapsed().as_secs_f64().max(1e-3);
                last = tokio::time::Instant::now();
                for f in frames(&state, &before, &now, seconds, cpu.sample()) {
                    // Plain data (strings, numbers, options): encoding it cannot fail.
                    let Ok(frame) = encoded(&f) else { continue };
                    // A reader too slow for one frame a second is dropped rather than buffered.
                    let send = sink.send(frame);
                    match tokio::time::timeout(Duration::from_secs(5), send).await {
                        Ok(Ok(())) => {}
                        _ => return,
                    }
                }
                before = now;
            }
            message = incoming.next() => {
                let refusal = match message {
                    None | Some(Ok(Message::Close(_))) => return,
                    Some(Err(e)) => read_failure_close(&e, state.config().websocket.max_message_bytes),
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) if !control.take() => {
                        Some(too_many_control_frames())
                    }
                    Some(Ok(_)) => continue,
                };
                if let Some(close) = refusal {
                    let _ = tokio::time::timeout(Duration::from_secs(5), sink.send(close)).await;
                }
                return;
            }
            _ = &mut draining => {
                let _ = sink.send(Message::Close(Some(CloseFrame {
                    code: close_code::AWAY,
                    reason: Utf8Bytes::from_static("server shutting down"),
                }))).await;
                return;
            }
        }
    }
}
