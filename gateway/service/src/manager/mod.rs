//! The manager's side of the cluster: admitting workers (join secrets, credentials, the cluster
//! CA), keeping the live registry from their heartbeats, and choosing where a model version
//! runs: the local engine (an all-in-one server counts it as one worker) or a worker.
//!
//! With a shared store (PostgreSQL, gateway replicas) every replica is the same manager: the
//! cluster material comes from the store ([`material`]), a join, heartbeat or drain that
//! lands on this replica is written there as well as applied here, and [`Manager::refresh`]
//! brings this replica's registry up to date with what reached the others, each heartbeat
//! interval. Routing still reads memory only. While the store is unreachable, each replica goes
//! on with the heartbeats it receives itself.
//!
//! - [`admission`]: workers joining with a join secret, and their credentials checked.
//! - [`registry`]: the live registry kept from heartbeats (and the shared store), drains,
//!   removals, lost workers.
//! - [`routing`]: where a request runs, outstanding requests, scale-out loads.
//! - [`material`]: the cluster CA and token signing key in the manager's data directory.
//! - [`metrics`]: per-worker gauges and routing counters for `/metrics`.
//!
//! This file holds the [`Manager`] itself and what every part shares; each part is an `impl
//! Manager` block of its own file, which reaches the manager's fields as a child module.
//!
//! Where a request runs: an all-in-one server counts its local engine as one more worker
//! (`local`), so joining workers adds capacity; `--no-local-engine` makes a manager that only
//! routes (it still validates uploads with its engine but never runs requests on it). The hop
//! to a worker is `infergate_hop`'s; the worker process is `infergate_worker`.
//!
//! A worker declared lost (its heartbeats stopped) or removed takes its requests with it:
//! each request in flight there holds the worker's signal (`routing::Outstanding::lost`),
//! fired on that transition, so the request ends at once (tried on another worker, or failed)
//! instead of waiting on a host that stopped answering; its idle pooled connections are closed.
//! The signal is renewed for the requests sent after the worker comes back.

pub mod admission;
pub mod material;
pub mod metrics;
pub mod registry;
pub mod routing;
#[cfg(test)]
mod tests;

use crate::config::ClusterConfig;
use infergate_cluster::liveness::{Heartbeat, WorkerState};
use infergate_cluster::registry::{Registry, Transition, WorkerView};
use infergate_cluster::routing::Policy;
use infergate_store::workers::WorkerRecord;
use infergate_store::Store;
use material::Material;
use metrics::RoutingCounters;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The id the local engine has among the workers (worker ids are `w-` + 16 hex digits).
pub const LOCAL: &str = "local";

pub struct Manager {
    material: Material,
    registry: Mutex<Registry>,
    /// The mutual-TLS client for calls to workers other than inference (loads).
    pub client: reqwest::Client,
    /// Inference on workers: HTTP/1.1 over mutual TLS, driven by each request's task.
    pub pool: infergate_hop::pool::WorkerPool,
    pub config: ClusterConfig,
    policy: Policy,
    /// Requests running on the local engine, for routing.
    local_outstanding: AtomicU32,
    counters: RoutingCounters,
    /// Scale-out loads under way (`worker model:version`), so one is asked once.
    warming: Arc<Mutex<HashSet<String>>>,
    /// Where this server listens (bound, so a port 0 is the real one): the local engine's
    /// address among the workers.
    local_address: std::sync::OnceLock<String>,
    /// Other replicas share the store: live status goes through it too.
    shared: bool,
    /// The shared store failed the last time it was asked (logged once until it answers).
    store_failing: AtomicBool,
    /// Workers whose credentials this manager checked against the store, by id: they are
    /// admitted while the store is unreachable.
    admitted: Mutex<HashMap<String, WorkerRecord>>,
    /// Workers removed from this registry so far (counted under its lock): a snapshot of the
    /// store read meanwhile may still hold one, and is not applied.
    removals: AtomicU64,
    /// Each worker's "lost or removed" signal, held by the requests in flight there (taken
    /// under the registry's lock, after it: see [`Manager::begin`]).
    signals: Mutex<HashMap<String, Signal>>,
    /// Workers whose hop failed, until when they are routed around ([`Manager::suspect`]).
    suspected: Mutex<HashMap<String, Instant>>,
}

/// What ends a worker's requests when it is lost or removed, and where its pooled connections
/// go.
struct Signal {
    token: CancellationToken,
    advertise: String,
}

impl Manager {
    pub fn new(store: &Store, config: ClusterConfig) -> anyhow::Result<Manager> {
        let material = Material::open(store)?;
        let tls = infergate_hop::tls::manager_client_config(&material.ca)?;
        let link = config.link();
        let pool = infergate_hop::pool::WorkerPool::new(tls.clone(), link);
        let client = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .connect_timeout(link.connect_timeout)
            .tcp_keepalive(link.probe_every())
            .tcp_user_timeout(link.silence)
            .build()?;
        let heartbeat = Heartbeat {
            interval: Duration::from_millis(config.heartbeat_ms.max(100)),
            missed: config.missed_heartbeats.get(),
        };
        Ok(Manager {
            material,
            registry: Mutex::new(Registry::new(heartbeat)),
            client,
            pool,
            policy: Policy {
                scale_out_queue_delay: Duration::from_millis(config.scale_out_queue_delay_ms),
            },
            local_outstanding: AtomicU32::new(0),
            counters: RoutingCounters::default(),
            warming: Arc::new(Mutex::new(HashSet::new())),
            local_address: std::sync::OnceLock::new(),
            shared: store.is_shared(),
            store_failing: AtomicBool::new(false),
            admitted: Mutex::new(HashMap::new()),
            removals: AtomicU64::new(0),
            signals: Mutex::new(HashMap::new()),
            suspected: Mutex::new(HashMap::new()),
            config,
        })
    }

    pub fn material(&self) -> &Material {
        &self.material
    }

    pub fn heartbeat(&self) -> Heartbeat {
        self.registry.lock().heartbeat()
    }

    pub fn view(&self) -> Vec<WorkerView> {
        self.registry.lock().view(Instant::now())
    }

    pub fn counters(&self) -> &RoutingCounters {
        &self.counters
    }

    /// Records the address the server bound (once, at start).
    pub fn set_local_address(&self, addr: std::net::SocketAddr) {
        let _ = self.local_address.set(addr.to_string());
    }

    /// The local engine's address: the bound one, else (before the bind) `configured`.
    pub fn local_address(&self, configured: std::net::SocketAddr) -> String {
        self.local_address
            .get()
            .cloned()
            .unwrap_or_else(|| configured.to_string())
    }

    pub fn local_outstanding(&self) -> u32 {
        self.local_outstanding.load(Ordering::Relaxed)
    }
}

/// Refreshes `workers` from a shared store each heartbeat interval (see [`Manager::refresh`]);
/// nothing to do without one.
pub fn spawn_refresh(workers: Arc<Manager>, store: Arc<Store>) {
    if !workers.shared {
        return;
    }
    let period = workers.heartbeat().interval;
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            workers.refresh(&store);
        }
    });
}

pub(crate) fn log_transition(t: &Transition) {
    let show = |s: Option<WorkerState>| s.map_or("unregistered", WorkerState::as_str);
    if t.to == Some(WorkerState::Lost) {
        tracing::warn!(worker = %t.worker, from = show(t.from), "worker lost: no heartbeat");
    } else {
        tracing::info!(worker = %t.worker, from = show(t.from), to = show(t.to), "worker state");
    }
}
