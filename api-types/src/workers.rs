//! `GET /api/workers` and the worker figures of the `/v2/events` ticks, with the worker
//! messages they carry: what a worker said when it joined (its devices) and in its last
//! heartbeat (`POST /cluster/v1/heartbeat`, [`Report`]). The cluster crate uses these same
//! types on the wire between manager and workers.
//!
//! Every message field is optional-friendly for rolling upgrades: a manager ignores fields it
//! does not know, and a missing field takes its default.

use serde::{Deserialize, Serialize};

/// The hardware a worker offers.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default)]
pub struct Devices {
    pub cpu_model: String,
    pub cores: u32,
    pub ram_bytes: u64,
    pub gpus: Vec<Gpu>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default)]
pub struct Gpu {
    pub name: String,
    pub memory_bytes: u64,
}

/// A model version a worker holds in memory.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LoadedModel {
    pub name: String,
    pub version: u32,
}

/// What a worker says about itself in its heartbeat.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Reported {
    /// Serving, accepting new requests.
    Ready,
    /// Finishing in-flight work before it exits: no new requests.
    Draining,
}

/// A worker's heartbeat (`POST /cluster/v1/heartbeat`, every interval), and the `report` of
/// each worker in `GET /api/workers`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default)]
pub struct Report {
    pub state: Reported,
    pub models: Vec<LoadedModel>,
    pub in_flight: u32,
    pub queued: u32,
    pub requests_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Requests the worker answered since it started (its models ran them to an answer,
    /// whether or not the answer reached the caller): summed over workers and compared with
    /// what clients were answered, it counts requests that ran twice.
    pub answered_total: u64,
    pub cpu_percent: f64,
    pub rss_bytes: u64,
    pub gpus: Vec<GpuUsage>,
    /// `host:port` of the worker's KServe v2 gRPC listener (its advertised host, its gRPC
    /// port), for direct-mode clients; `None` from a worker that serves no gRPC.
    pub grpc: Option<String>,
}

impl Default for Report {
    fn default() -> Self {
        Report {
            state: Reported::Ready,
            models: Vec::new(),
            in_flight: 0,
            queued: 0,
            requests_per_s: 0.0,
            p50_ms: 0.0,
            p99_ms: 0.0,
            answered_total: 0,
            cpu_percent: 0.0,
            rss_bytes: 0,
            gpus: Vec::new(),
            grpc: None,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default)]
pub struct GpuUsage {
    /// Bytes in use on the device (all processes), from NVML when it answers, else from the
    /// CUDA driver.
    pub memory_used_bytes: u64,
    /// Busy time in percent over NVML's last sample period; `None` (`null`) when not
    /// measured: a host without NVML, or a device NVML does not answer for. Never 0 for
    /// "unknown".
    pub utilisation_percent: Option<f64>,
}

/// The state the manager routes by, judged on its own clock.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum WorkerState {
    Ready,
    Draining,
    /// No heartbeat for `missed` intervals: out of routing until it reports again.
    Lost,
}

impl WorkerState {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerState::Ready => "ready",
            WorkerState::Draining => "draining",
            WorkerState::Lost => "lost",
        }
    }

    /// Whether new requests may go to a worker in this state.
    pub fn routable(self) -> bool {
        self == WorkerState::Ready
    }
}

/// Who a worker is: what it said when it joined.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerInfo {
    pub id: String,
    /// `host:port` of its KServe v2 endpoints.
    pub advertise: String,
    pub version: String,
    pub devices: Devices,
}

/// One host of `GET /api/workers`: a worker, or the server's own engine (`local`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerView {
    #[serde(flatten)]
    pub info: WorkerInfo,
    pub state: WorkerState,
    /// How long ago the manager last heard from it, by the manager's clock.
    pub last_seen_ms: u64,
    pub report: Report,
    /// The manager's requests outstanding there.
    pub outstanding: u32,
}

/// `GET /api/workers`: every worker the manager knows, the local engine first.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerList {
    pub workers: Vec<WorkerView>,
}

/// One worker in a `/v2/events` tick: the manager's judgement (`state`, `last_seen_ms`,
/// `outstanding`) and what the worker measured over its last heartbeat interval (`null` while
/// it is lost, and the percentiles in an interval without requests).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerFigures {
    pub id: String,
    pub address: String,
    pub state: WorkerState,
    pub last_seen_ms: u64,
    pub outstanding: u32,
    pub models: Option<Vec<LoadedModel>>,
    pub in_flight: Option<u32>,
    pub queued: Option<u32>,
    pub requests_per_s: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub cpu_percent: Option<f64>,
    pub rss_bytes: Option<u64>,
    pub gpus: Option<Vec<GpuUsage>>,
}

/// `POST /api/workers/tokens`: a new join secret, shown once.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JoinTokenCreated {
    pub id: String,
    /// What `infergate worker --join-token` takes.
    pub token: String,
    /// Unix seconds; `null`: until revoked.
    pub expires_at: Option<u64>,
}

/// `POST /v2/models/{model}/assign`: the worker a direct client talks to, and its token.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Assignment {
    /// `https://host:port` of the worker's KServe v2 HTTP endpoints.
    pub worker: String,
    /// `host:port` for a KServe gRPC client (TLS, the same token); `null` from a worker that
    /// has not reported one.
    pub grpc: Option<String>,
    pub worker_id: String,
    pub model: String,
    pub version: u64,
    /// The bearer token the worker verifies offline.
    pub token: String,
    /// Unix seconds.
    pub expires_at: u64,
    /// The cluster CA that signed the worker's certificate, for the client to pin.
    pub ca_pem: String,
}

/// `DELETE /api/workers/{id}`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerRemoved {
    pub removed: String,
}

/// `POST /api/workers/{id}/drain`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerDraining {
    pub draining: String,
}

/// `DELETE /api/workers/tokens/{id}`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TokenRevoked {
    pub revoked: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_worker_keeps_its_shape() {
        let host = serde_json::json!({
            "id": "local", "advertise": "127.0.0.1:1", "version": "0.1.0",
            "devices": {"cpu_model": "x", "cores": 2, "ram_bytes": 1, "gpus": []},
            "state": "lost", "last_seen_ms": 7,
            "report": {"state": "draining", "models": [{"name": "m", "version": 2}],
                "in_flight": 1, "queued": 0, "requests_per_s": 0.5, "p50_ms": 1.0,
                "p99_ms": 2.0, "cpu_percent": 3.0, "rss_bytes": 4, "answered_total": 0,
                "gpus": [{"memory_used_bytes": 5, "utilisation_percent": null}], "grpc": null},
            "outstanding": 0,
        });
        let parsed: WorkerView = serde_json::from_value(host.clone()).unwrap();
        assert_eq!(parsed.state, WorkerState::Lost);
        assert_eq!(parsed.report.state, Reported::Draining);
        assert_eq!(serde_json::to_value(&parsed).unwrap(), host);
    }
}
