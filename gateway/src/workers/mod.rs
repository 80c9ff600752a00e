//! Workers on other hosts (issue 14): one manager (`infergate serve`) and worker hosts
//! (`infergate worker --join ...`) in the same binary. The decisions (routing, liveness, join
//! secrets, the CA, direct tokens) are `infergate_cluster`'s, pure and tested; this module does
//! their I/O.
//!
//! - [`material`]: the cluster CA and token signing key in the manager's data directory.
//! - [`tls`]: certificates and verifiers between manager and workers (pinned CA, mutual TLS).
//! - [`manager`]: admitting workers, the live registry, choosing where a request runs.
//! - [`api`]: the manager's endpoints for workers (`/cluster/v1`) and operators (`/api/workers`).
//! - [`remote`]: one inference on a worker (KServe v2 binary over HTTP, mutual TLS), on
//!   [`pool`]'s connections.
//! - [`link`]: a worker's calls to its manager.
//! - [`agent`]: the `infergate worker` process; [`cache`]: its model files under a disk budget;
//!   [`grpc`]: its KServe gRPC listener for direct clients.
//! - [`host`]: a host's devices and a process's CPU and memory, for reports.
//! - [`window`]: a worker's request rate and latency percentiles between heartbeats.
//! - [`metrics`]: per-worker gauges and routing counters for `/metrics`.
//!
//! Where a request runs: an all-in-one server counts its local engine as one more worker
//! (`local`), so joining workers adds capacity; `--no-local-engine` makes a manager that only
//! routes (it still validates uploads with its engine but never runs requests on it).

pub mod agent;
pub mod api;
pub mod cache;
pub mod grpc;
pub mod host;
pub mod link;
pub mod manager;
pub mod material;
pub mod metrics;
pub mod pool;
pub mod remote;
pub mod tls;
pub mod window;

pub use manager::Manager;

use serde::Deserialize;

/// `[cluster]` in the configuration file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// Run requests on this server's own engine too (one more worker); false: route to workers
    /// only.
    pub local_engine: bool,
    /// How often workers report.
    pub heartbeat_ms: u64,
    /// Reports a worker may miss before it is lost (out of routing).
    pub missed_heartbeats: u32,
    /// How long the manager waits for a worker's answer to one request.
    pub request_timeout_s: u64,
    /// When a model's least loaded copy would keep a new request waiting longer than this,
    /// one more worker loads it.
    pub scale_out_queue_delay_ms: u64,
    /// Where a pipeline's native ops (resize/normalize) run when its model stage goes to a
    /// worker: on the worker, next to the model and its GPU (the manager sends the smaller
    /// pre-op tensors), or on the manager (it sends the model's input tensors).
    pub pipeline_ops: PipelineOps,
}

/// `[cluster] pipeline_ops`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PipelineOps {
    #[default]
    Worker,
    Manager,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            local_engine: true,
            heartbeat_ms: 2000,
            missed_heartbeats: 3,
            request_timeout_s: 60,
            scale_out_queue_delay_ms: 50,
            pipeline_ops: PipelineOps::Worker,
        }
    }
}
