//! Workers on other hosts (issue 14), the manager's side: one manager (`infergate serve`) and
//! worker hosts (`infergate worker --join ...`, the [`crate::worker`] module) in the same
//! binary. The decisions (routing, liveness, join secrets, the CA, direct tokens) are
//! `infergate_cluster`'s, pure and tested; this module does their I/O. The manager's endpoints
//! for workers (`/cluster/v1`) and operators (`/api/workers`) are `crate::api::workers`.
//!
//! - [`material`]: the cluster CA and token signing key in the manager's data directory.
//! - [`tls`]: certificates and verifiers between manager and workers (pinned CA, mutual TLS).
//! - [`manager`]: admitting workers, the live registry, choosing where a request runs.
//! - [`remote`]: one inference on a worker (KServe v2 binary over HTTP, mutual TLS), on
//!   [`pool`]'s connections.
//! - [`host`]: a host's devices and a process's CPU and memory, for reports.
//! - [`metrics`]: per-worker gauges and routing counters for `/metrics`.
//!
//! Where a request runs: an all-in-one server counts its local engine as one more worker
//! (`local`), so joining workers adds capacity; `--no-local-engine` makes a manager that only
//! routes (it still validates uploads with its engine but never runs requests on it).

pub mod host;
pub mod manager;
pub mod material;
pub mod metrics;
pub mod pool;
pub mod remote;
pub mod tls;

pub use manager::Manager;

use std::time::Duration;

/// Time for a TLS handshake on a worker's listener, and for a request's headers after it (hyper
/// runs this timer while a kept-alive connection waits for its next request too: the manager's
/// pool reuses a connection for half of it).
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
