//! `GET /v2/events` (WebSocket, admin scope): one JSON text frame per event. Every second a
//! [`Tick`]; when a model version or a worker changes state, an [`Activity`] or a
//! [`WorkerStateChange`] before that second's tick. The frame's `type` field names the event.

use crate::history::{Activity, VersionState};
use crate::workers::{WorkerFigures, WorkerState};
use serde::{Deserialize, Serialize};

/// One frame of the feed.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    Tick(Tick),
    /// A model version that changed state: the same record as the history's activity feed.
    ModelState(Activity),
    WorkerState(WorkerStateChange),
}

/// The last second, as the server saw it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Tick {
    /// The server's clock, Unix milliseconds.
    pub time_ms: u64,
    pub websocket_connections: u64,
    pub memory: Memory,
    pub models: Vec<ModelFigures>,
    /// Every worker, the local engine (`local`) included.
    pub workers: Vec<WorkerFigures>,
}

/// Host memory reserved by loaded model instances, and the native ops' GPU memory pools.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Memory {
    pub host_reserved_bytes: u64,
    /// `null` when unlimited.
    pub host_budget_bytes: Option<u64>,
    /// `null` when the native ops run on the CPU.
    pub gpu_pools: Option<GpuPools>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct GpuPools {
    pub device: Pool,
    pub pinned: Pool,
}

/// One GPU memory pool.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub struct Pool {
    /// Blocks lent out plus blocks on free lists.
    pub held_bytes: u64,
    pub free_bytes: u64,
    pub limit_bytes: u64,
    /// Requests served from a free list.
    pub hits: u64,
    /// Requests that called the allocator.
    pub misses: u64,
}

/// One model version over the last second. Rates and means come from the engine's counters
/// (`failures_per_s`: requests the engine failed); the error rates from the answers the
/// gateway gave, refusals before the engine included; the percentiles from the gateway's
/// histograms of successful requests.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ModelFigures {
    pub model: String,
    pub version: u64,
    pub state: VersionState,
    pub in_flight: u64,
    pub requests_per_s: f64,
    pub failures_per_s: f64,
    /// 4xx answers per second.
    pub client_errors_per_s: f64,
    /// 5xx answers per second.
    pub server_errors_per_s: f64,
    /// `null` in a second without a successful request (this and the three below).
    pub avg_latency_ms: Option<f64>,
    pub avg_queue_ms: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

/// A worker that joined, changed state or left.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct WorkerStateChange {
    pub time_ms: u64,
    pub worker: String,
    pub address: String,
    pub state: WorkerChange,
    /// `null` for a worker first seen: joined, or already there when the connection opened.
    pub previous: Option<WorkerState>,
}

/// A worker's state in a [`WorkerStateChange`]: the manager's [`WorkerState`], or `removed`
/// (by an operator, or deregistered after draining).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum WorkerChange {
    Ready,
    Draining,
    Lost,
    Removed,
}

impl From<WorkerState> for WorkerChange {
    fn from(s: WorkerState) -> Self {
        match s {
            WorkerState::Ready => WorkerChange::Ready,
            WorkerState::Draining => WorkerChange::Draining,
            WorkerState::Lost => WorkerChange::Lost,
        }
    }
}

impl WorkerChange {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerChange::Removed => "removed",
            WorkerChange::Ready => WorkerState::Ready.as_str(),
            WorkerChange::Draining => WorkerState::Draining.as_str(),
            WorkerChange::Lost => WorkerState::Lost.as_str(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn frames_keep_their_shape() {
        let frames = [
            json!({"type": "model_state", "time_ms": 1, "model": "m", "version": 2,
                "state": "failed", "reason": "bad graph"}),
            json!({"type": "worker_state", "time_ms": 1, "worker": "w", "address": "h:1",
                "state": "removed", "previous": "lost"}),
            json!({"type": "tick", "time_ms": 3, "websocket_connections": 1,
                "memory": {"host_reserved_bytes": 5, "host_budget_bytes": null,
                    "gpu_pools": {"device": {"held_bytes": 1, "free_bytes": 0, "limit_bytes": 9,
                        "hits": 2, "misses": 1},
                    "pinned": {"held_bytes": 0, "free_bytes": 0, "limit_bytes": 0, "hits": 0,
                        "misses": 0}}},
                "models": [{"model": "m", "version": 1, "state": "loaded", "in_flight": 0,
                    "requests_per_s": 2.0, "failures_per_s": 0.0, "client_errors_per_s": 0.0,
                    "server_errors_per_s": 0.0, "avg_latency_ms": 1.5, "avg_queue_ms": null,
                    "p50_ms": 1.0, "p99_ms": null}],
                "workers": []}),
        ];
        for frame in frames {
            let parsed: Event = serde_json::from_value(frame.clone()).unwrap();
            assert_eq!(serde_json::to_value(&parsed).unwrap(), frame);
        }
    }
}
