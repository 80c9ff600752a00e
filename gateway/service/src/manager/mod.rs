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
//! - [`material`]: the cluster CA and token signing key in the manager's data directory.
//! - [`metrics`]: per-worker gauges and routing counters for `/metrics`.
//!
//! Where a request runs: an all-in-one server counts its local engine as one more worker
//! (`local`), so joining workers adds capacity; `--no-local-engine` makes a manager that only
//! routes (it still validates uploads with its engine but never runs requests on it). The hop
//! to a worker is `infergate_hop`'s; the worker process is `infergate_worker`.
//!
//! A worker declared lost (its heartbeats stopped) or removed takes its requests with it:
//! each request in flight there holds the worker's signal ([`Outstanding::lost`]), fired on
//! that transition, so the request ends at once (tried on another worker, or failed) instead
//! of waiting on a host that stopped answering; its idle pooled connections are closed. The
//! signal is renewed for the requests sent after the worker comes back.

pub mod material;
pub mod metrics;

use crate::config::ClusterConfig;
use crate::error::{ApiError, ApiResult};
use infergate_cluster::credential;
use infergate_cluster::join::JoinSecret;
use infergate_cluster::liveness::{Heartbeat, WorkerState};
use infergate_cluster::messages::{JoinRequest, JoinResponse, LoadedModel, Report};
use infergate_cluster::registry::{Observed, Registry, Transition, WorkerView};
use infergate_cluster::routing::{self, Candidate, NoWorker, Policy};
use infergate_store::workers::WorkerRecord;
use infergate_store::{now_secs, Store, StoreError};
use material::Material;
use metrics::RoutingCounters;
use parking_lot::Mutex;
use rand::RngCore;
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

/// Where a request goes.
pub enum Choice {
    Local,
    Worker { id: String, advertise: String },
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

    /// A worker presenting a join secret: on success it is registered (durably and live) and
    /// gets its certificate and credential. A refused join records nothing.
    pub fn join(
        &self,
        store: &Store,
        secret: &str,
        request: JoinRequest,
    ) -> ApiResult<JoinResponse> {
        let join = JoinSecret::parse(secret).map_err(|e| ApiError::unauthorized(e.to_string()))?;
        if join.ca_pin != self.material.ca.pin() {
            return Err(ApiError::unauthorized(
                "join secret was made for another cluster (its CA pin is not this manager's)",
            ));
        }
        join.verify(
            store.join_secret(&join.id)?.as_ref(),
            now_secs().max(0) as u64,
        )
        .map_err(|e| ApiError::unauthorized(e.to_string()))?;
        let host = advertised_host(&request.advertise)?;
        let id = match request.worker_id {
            Some(id) if is_worker_id(&id) => id,
            Some(id) => {
                return Err(ApiError::bad_request(format!(
                    "worker id '{id}' is not one this manager issues (w- and 16 hex digits)"
                )))
            }
            None => new_worker_id(),
        };
        let removed = || {
            ApiError::unauthorized(format!(
                "worker '{id}' was removed by an operator: it may join again only as a new worker (delete worker-id in its data directory)"
            ))
        };
        if store.worker(&id)?.is_some_and(|w| w.removed_at.is_some()) {
            return Err(removed());
        }
        let issued =
            self.material.ca.issue(&id, &[host]).map_err(|e| {
                ApiError::internal(format!("issuing the worker's certificate: {e}"))
            })?;
        let credential = credential::issue(&id);
        let record = WorkerRecord {
            id: id.clone(),
            advertise: request.advertise.clone(),
            version: request.version.clone(),
            devices: request.devices.clone(),
            credential_sha256: credential.sha256,
            joined_with: join.id.clone(),
            joined_at: now_secs(),
            removed_at: None,
        };
        if !store.upsert_worker(&record)? {
            return Err(removed());
        }
        if self.shared {
            // Every replica learns of the join from the store; this one at once.
            let observed = Observed {
                info: record.info(),
                report: Report::default(),
                drained: false,
                revision: store.worker_joined(&id)?,
                age: Duration::ZERO,
            };
            let mut registry = self.registry.lock();
            let transition = registry.apply(observed, Instant::now());
            transition.iter().for_each(|t| self.announce(t));
        } else {
            let transition = self.registry.lock().join(record.info(), Instant::now());
            log_transition(&transition);
        }
        tracing::info!(worker = %id, advertise = %request.advertise, version = %request.version, "worker joined");
        Ok(JoinResponse {
            worker_id: id,
            cert_pem: issued.cert_pem,
            key_pem: issued.key_pem,
            ca_pem: self.material.ca.cert_pem().to_owned(),
            token_public_key: hex::encode(self.material.signer.public_key()),
            credential: credential.text,
            heartbeat_interval_ms: self.heartbeat().interval.as_millis() as u64,
        })
    }

    /// The worker a credential belongs to: 401 (join again) when unknown, wrong or removed.
    pub fn authenticate(&self, store: &Store, presented: &str) -> ApiResult<WorkerRecord> {
        let refused = || {
            ApiError::unauthorized(
                "worker credential is unknown, wrong or removed: join again with a join secret",
            )
        };
        let presented = credential::parse(presented).ok_or_else(refused)?;
        let id = presented.worker_id;
        let record = match store.worker(id) {
            Ok(record) => record.filter(|r| r.removed_at.is_none()),
            // The store is down: a credential this replica checked while it was up still
            // admits its worker (heartbeats and model fetches go on; nothing can be removed
            // meanwhile, as removing is a write).
            Err(StoreError::Unavailable(why)) => match self.admitted.lock().get(id) {
                Some(known) => Some(known.clone()),
                None => return Err(StoreError::Unavailable(why).into()),
            },
            Err(e) => return Err(e.into()),
        };
        match record {
            Some(record) if presented.matches(&record.credential_sha256) => {
                self.admitted.lock().insert(id.to_owned(), record.clone());
                Ok(record)
            }
            _ => {
                self.admitted.lock().remove(id);
                Err(refused())
            }
        }
    }

    /// A heartbeat from an authenticated worker. One the live registry does not know (this
    /// manager restarted since it joined, or it joined through another replica) is registered
    /// again from the store. With a shared store the report goes there too, for the other
    /// replicas; if it cannot, this replica still counts the worker alive.
    ///
    /// `seen`: [`Manager::removals`] read before the worker's credential was checked. A worker
    /// removed (or deregistered) between that check and this report must not come back into
    /// routing: so when any removal happened meanwhile, the store is asked again before the
    /// registry takes the report, and the registry takes it only if no removal happened since
    /// that answer (both under the registry's lock, which removals also take).
    pub fn report(&self, store: &Store, record: &WorkerRecord, report: Report, seen: u64) {
        if self.shared {
            match store.worker_reported(&record.id, &report) {
                Ok(written) => {
                    self.store_answered();
                    let observed = Observed {
                        info: record.info(),
                        report,
                        drained: written.drained,
                        revision: written.revision,
                        age: Duration::ZERO,
                    };
                    let Some(mut registry) = self.registry_unless_removed(store, &record.id, seen)
                    else {
                        return;
                    };
                    let transition = registry.apply(observed, Instant::now());
                    transition.iter().for_each(|t| self.announce(t));
                    return;
                }
                Err(e) => self.store_failed(
                    &e,
                    "a heartbeat could not be written to the shared store: only this replica knows of it",
                ),
            }
        }
        let Some(mut registry) = self.registry_unless_removed(store, &record.id, seen) else {
            return;
        };
        let now = Instant::now();
        let transition = match registry.report(&record.id, report.clone(), now) {
            Ok(t) => t,
            Err(_) => {
                log_transition(&registry.join(record.info(), now));
                registry.report(&record.id, report, now).ok().flatten()
            }
        };
        if let Some(t) = transition {
            self.announce(&t);
        }
    }

    /// How many workers were removed from this registry so far; see [`Manager::report`].
    pub fn removals(&self) -> u64 {
        self.removals.load(Ordering::Acquire)
    }

    /// The registry, locked, when worker `id` was not removed since `seen`; None when it was.
    fn registry_unless_removed(
        &self,
        store: &Store,
        id: &str,
        mut seen: u64,
    ) -> Option<parking_lot::MutexGuard<'_, Registry>> {
        loop {
            let registry = self.registry.lock();
            if self.removals.load(Ordering::Acquire) == seen {
                return Some(registry);
            }
            drop(registry);
            // Some worker was removed meanwhile; the store says whether it was this one (the
            // removal is written there before it reaches the registry).
            seen = self.removals.load(Ordering::Acquire);
            match store.worker(id) {
                Ok(Some(record)) if record.removed_at.is_none() => {}
                Ok(_) => return None,
                // The store is down: nothing can be removed while it is (removing is a write).
                Err(_) => {}
            }
        }
    }

    /// Brings the registry up to date with the shared store: workers that joined or reported
    /// through other replicas, drains and removals made there. Run each heartbeat interval; a
    /// no-op without a shared store.
    pub fn refresh(&self, store: &Store) {
        if !self.shared {
            return;
        }
        let taken = Instant::now();
        let removals = self.removals.load(Ordering::Acquire);
        match store.live_workers() {
            Ok(snapshot) => {
                self.store_answered();
                let mut registry = self.registry.lock();
                // A worker removed here while the snapshot was read may be in it: applying it
                // would bring the worker back until the next refresh. The next one is current.
                if self.removals.load(Ordering::Acquire) != removals {
                    return;
                }
                for t in registry.sync(snapshot, taken) {
                    self.announce(&t);
                }
            }
            Err(e) => self.store_failed(
                &e,
                "could not read the workers' status from the shared store: routing by what reached this replica",
            ),
        }
    }

    fn store_failed(&self, e: &StoreError, what: &str) {
        if !self.store_failing.swap(true, Ordering::Relaxed) {
            tracing::warn!(error = %e, "{what}");
        }
    }

    fn store_answered(&self) {
        if self.store_failing.swap(false, Ordering::Relaxed) {
            tracing::info!(
                "the shared store answers again: worker status shared with the other replicas"
            );
        }
    }

    /// The worker leaves routing at once (operator removal or its own deregistration).
    pub fn forget(&self, id: &str) -> bool {
        self.admitted.lock().remove(id);
        let mut registry = self.registry.lock();
        self.removals.fetch_add(1, Ordering::AcqRel);
        let transition = registry.remove(id);
        if let Some(t) = &transition {
            self.announce(t);
        }
        transition.is_some()
    }

    /// An operator drains a worker: no new requests, here at once and on every replica from
    /// its next refresh; false when it is not registered.
    pub fn drain(&self, store: &Store, id: &str) -> ApiResult<bool> {
        let revision = if self.shared {
            store.worker_drained(id)?
        } else {
            None
        };
        let mut registry = self.registry.lock();
        match registry.drain(id, Instant::now()) {
            Ok(transition) => {
                if let Some(t) = &transition {
                    self.announce(t);
                }
                // A snapshot read before the drain was written must not undo it here.
                if let Some(revision) = revision {
                    registry.stamp(id, revision);
                }
                Ok(true)
            }
            // Live through another replica only: this one learns of it (drained) next refresh.
            Err(_) => Ok(revision.is_some()),
        }
    }

    /// Turns workers whose heartbeats stopped into `lost`; run on a timer.
    pub fn sweep(&self) {
        let mut registry = self.registry.lock();
        for t in registry.sweep(Instant::now()) {
            self.announce(&t);
        }
    }

    /// Logs a transition; a worker that is lost or removed has its requests in flight ended
    /// (their signal fired) and its idle connections closed. Called with the registry locked,
    /// so that a request beginning meanwhile either holds the signal fired here or sees the
    /// worker gone (see [`Manager::begin`]).
    fn announce(&self, t: &Transition) {
        log_transition(t);
        if !matches!(t.to, None | Some(WorkerState::Lost)) {
            return;
        }
        let Some(signal) = self.signals.lock().remove(&t.worker) else {
            return;
        };
        signal.token.cancel();
        let closed = self.pool.evict(&signal.advertise);
        tracing::info!(worker = %t.worker, idle_connections_closed = closed, "requests in flight there ended");
    }

    /// Where one request for `model` goes, skipping the workers in `tried`. The local engine
    /// is a candidate like any worker unless the server runs without one.
    pub fn choose(
        &self,
        model: &LoadedModel,
        local_loaded: bool,
        tried: &[String],
    ) -> ApiResult<Choice> {
        let registry = self.registry.lock();
        let mut candidates: Vec<Candidate<'_>> = registry.candidates(model, Instant::now());
        if self.config.local_engine {
            if candidates.is_empty() {
                return Ok(Choice::Local);
            }
            candidates.push(Candidate {
                id: LOCAL,
                state: WorkerState::Ready,
                loaded: local_loaded,
                outstanding: self.local_outstanding.load(Ordering::Relaxed),
            });
        }
        let tried: Vec<&str> = tried.iter().map(String::as_str).collect();
        let suspects = self.suspects(Instant::now());
        let suspects: Vec<&str> = suspects.iter().map(String::as_str).collect();
        self.pick(&registry, model, &candidates, &tried, &suspects)
    }

    /// The hop to worker `id` failed (no connection, or one that went silent or broke): it is
    /// left out of routing for one heartbeat deadline while another copy can serve, so that
    /// the requests that follow do not each wait out the hop's deadlines there. A worker that
    /// the manager can no longer reach while its heartbeats still arrive (a partition one way)
    /// is otherwise never declared lost.
    pub fn suspect(&self, id: &str) {
        let until = Instant::now() + self.heartbeat().deadline();
        if self.suspected.lock().insert(id.to_owned(), until).is_none() {
            tracing::warn!(worker = %id, for_ms = self.heartbeat().deadline().as_millis() as u64, "worker suspect: its hop failed; routing around it while another copy serves");
        }
    }

    /// Workers suspect at `now` (the expired ones forgotten).
    fn suspects(&self, now: Instant) -> Vec<String> {
        let mut suspected = self.suspected.lock();
        if suspected.is_empty() {
            return Vec::new();
        }
        suspected.retain(|_, until| *until > now);
        suspected.keys().cloned().collect()
    }

    /// A worker (never the local engine) for a direct-mode client of `model`: its id, its
    /// address and its gRPC address (as its last heartbeat gave it). Direct traffic never passes the manager, so the load compared is what workers
    /// report in flight plus the grants since (see `Registry::direct_candidates`).
    pub fn choose_worker(
        &self,
        model: &LoadedModel,
    ) -> ApiResult<(String, String, Option<String>)> {
        let mut registry = self.registry.lock();
        let choice = {
            let candidates = registry.direct_candidates(model, Instant::now());
            // Direct clients reach workers themselves: the manager's own hop failures say
            // nothing about their links.
            self.pick(&registry, model, &candidates, &[], &[])?
        };
        match choice {
            Choice::Worker { id, advertise } => {
                registry.grant(&id);
                let grpc = registry.report_of(&id).and_then(|r| r.grpc.clone());
                Ok((id, advertise, grpc))
            }
            Choice::Local => Err(ApiError::internal(
                "the local engine is not a direct-mode worker",
            )),
        }
    }

    /// Routes among `candidates` (see `infergate_cluster::routing`) other than those in
    /// `tried`, and other than the `suspects` while another can serve; a version's affinity key
    /// is `name:version`.
    fn pick(
        &self,
        registry: &Registry,
        model: &LoadedModel,
        candidates: &[Candidate<'_>],
        tried: &[&str],
        suspects: &[&str],
    ) -> ApiResult<Choice> {
        let key = format!("{}:{}", model.name, model.version);
        let delay = routing::queue_delay(
            candidates
                .iter()
                .filter(|c| c.loaded && c.state.routable() && c.id != LOCAL)
                .filter_map(|c| Some((c.outstanding, registry.report_of(c.id)?.p50_ms))),
        );
        let route = |avoid: &[&str]| {
            routing::route(
                &key,
                candidates,
                avoid,
                delay,
                &self.policy,
                &mut rand::rng(),
            )
        };
        let avoid: Vec<&str> = tried.iter().chain(suspects).copied().collect();
        let routed = match route(&avoid) {
            Err(_) if avoid.len() > tried.len() => route(tried),
            routed => routed,
        };
        let route = routed.map_err(|e| {
            RoutingCounters::count(&self.counters.no_worker);
            no_worker(model, e)
        })?;
        if let Some(also) = route.load_also.filter(|w| *w != LOCAL) {
            if let Some(advertise) = registry.address(also) {
                self.scale_out(also, advertise, model, &key);
            }
        }
        if route.worker == LOCAL {
            return Ok(Choice::Local);
        }
        let advertise = registry
            .address(route.worker)
            .ok_or_else(|| ApiError::internal("a routed worker has no address"))?;
        Ok(Choice::Worker {
            id: route.worker.to_owned(),
            advertise: advertise.to_owned(),
        })
    }

    /// Asks `worker` (in the background, once at a time) to load a model whose copies fall
    /// behind; it then reports the version loaded and shares the traffic.
    fn scale_out(&self, worker: &str, advertise: &str, model: &LoadedModel, key: &str) {
        let task = format!("{worker} {key}");
        if !self.warming.lock().insert(task.clone()) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.warming.lock().remove(&task);
            return;
        };
        tracing::info!(worker = %worker, model = %key, "scale-out: loading the model on one more worker");
        let client = self.client.clone();
        let url = format!(
            "https://{advertise}/v2/repository/models/{}/versions/{}/load",
            model.name, model.version
        );
        let timeout = Duration::from_secs(self.config.request_timeout_s.max(1));
        let warming = self.warming.clone();
        runtime.spawn(async move {
            let answer = client.post(&url).timeout(timeout).send().await;
            match answer {
                Ok(r) if r.status().is_success() => {}
                Ok(r) => tracing::warn!(url = %url, status = %r.status(), "scale-out load refused"),
                Err(e) => tracing::warn!(url = %url, error = %e, "scale-out load failed"),
            }
            warming.lock().remove(&task);
        });
    }

    /// Counts a request as outstanding on `id` until the guard drops; the guard's
    /// [`Outstanding::lost`] ends when the worker is lost or removed (at once when it already
    /// is: a request routed just before the worker's last heartbeat aged out).
    pub fn begin(&self, id: &str) -> Outstanding<'_> {
        let lost = if id == LOCAL {
            self.local_outstanding.fetch_add(1, Ordering::Relaxed);
            None
        } else {
            let mut registry = self.registry.lock();
            registry.begin(id);
            let live = registry
                .state(id, Instant::now())
                .is_some_and(|s| s != WorkerState::Lost);
            let token = match registry.address(id) {
                Some(advertise) if live => self
                    .signals
                    .lock()
                    .entry(id.to_owned())
                    .or_insert_with(|| Signal {
                        token: CancellationToken::new(),
                        advertise: advertise.to_owned(),
                    })
                    .token
                    .clone(),
                _ => {
                    let gone = CancellationToken::new();
                    gone.cancel();
                    gone
                }
            };
            Some(token)
        };
        Outstanding {
            manager: self,
            id: id.to_owned(),
            lost,
        }
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

pub struct Outstanding<'a> {
    manager: &'a Manager,
    id: String,
    /// The worker's signal (None for the local engine, which is never lost).
    lost: Option<CancellationToken>,
}

impl Outstanding<'_> {
    /// Ends when the worker is lost or removed; never for the local engine.
    pub async fn lost(&self) {
        match &self.lost {
            Some(token) => token.cancelled().await,
            None => std::future::pending().await,
        }
    }
}

impl Drop for Outstanding<'_> {
    fn drop(&mut self) {
        if self.id == LOCAL {
            self.manager
                .local_outstanding
                .fetch_sub(1, Ordering::Relaxed);
        } else {
            self.manager.registry.lock().end(&self.id);
        }
    }
}

fn no_worker(model: &LoadedModel, e: NoWorker) -> ApiError {
    let why = match e {
        NoWorker::NoneReady => "no worker is ready to serve it",
        NoWorker::AllTried => "its worker failed and no other worker is ready",
    };
    ApiError::unavailable(format!(
        "model '{}' version {}: {why}",
        model.name, model.version
    ))
}

fn log_transition(t: &Transition) {
    let show = |s: Option<WorkerState>| s.map_or("unregistered", WorkerState::as_str);
    if t.to == Some(WorkerState::Lost) {
        tracing::warn!(worker = %t.worker, from = show(t.from), "worker lost: no heartbeat");
    } else {
        tracing::info!(worker = %t.worker, from = show(t.from), to = show(t.to), "worker state");
    }
}

fn new_worker_id() -> String {
    let mut bytes = [0u8; 8];
    rand::rng().fill_bytes(&mut bytes);
    format!("w-{}", hex::encode(bytes))
}

fn is_worker_id(id: &str) -> bool {
    id.strip_prefix("w-")
        .is_some_and(|hex| hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The host of `host:port` (IPv6 in brackets), for the worker's certificate.
fn advertised_host(advertise: &str) -> ApiResult<String> {
    let bad = || {
        ApiError::bad_request(format!(
            "advertise address '{advertise}' must be host:port (IPv6 as [addr]:port)"
        ))
    };
    let (host, port) = advertise.rsplit_once(':').ok_or_else(bad)?;
    port.parse::<u16>().map_err(|_| bad())?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let plausible = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-.:".contains(&b));
    if !plausible {
        return Err(bad());
    }
    Ok(host.to_owned())
}

/// Makes and stores a join secret for this cluster (the CLI offline and the API alike).
pub fn create_join_secret(
    store: &infergate_store::Store,
    ca: &infergate_cluster::ca::ClusterCa,
    ttl_s: Option<u64>,
) -> ApiResult<(JoinSecret, Option<u64>)> {
    if ttl_s == Some(0) {
        return Err(ApiError::bad_request("ttl_s must be at least 1 second"));
    }
    let expires_at =
        ttl_s.map(|ttl| (infergate_store::now_secs().max(0) as u64).saturating_add(ttl));
    let (secret, stored) = JoinSecret::generate(&ca.pin(), expires_at);
    store.add_join_secret(&stored)?;
    tracing::info!(id = %secret.id, "join secret created");
    Ok((secret, expires_at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advertised_addresses_and_worker_ids_are_checked() {
        assert_eq!(advertised_host("10.0.0.2:8445").unwrap(), "10.0.0.2");
        assert_eq!(advertised_host("[::1]:8445").unwrap(), "::1");
        assert_eq!(advertised_host("gpu-1.lan:1").unwrap(), "gpu-1.lan");
        for bad in ["", "host", "host:port", ":80", "a b:80", "host:99999"] {
            assert!(advertised_host(bad).is_err(), "{bad}");
        }
        assert!(is_worker_id(&new_worker_id()));
        assert!(!is_worker_id(LOCAL));
        assert!(!is_worker_id("w-../../etc"));
    }

    #[test]
    fn a_worker_lost_or_removed_ends_its_requests_and_coming_back_renews_the_signal() {
        use futures_util::FutureExt;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        // A heartbeat budget of 100 ms: the worker is lost, on the real clock, soon after.
        let config = ClusterConfig {
            heartbeat_ms: 100,
            missed_heartbeats: std::num::NonZeroU32::MIN,
            ..ClusterConfig::default()
        };
        let manager = Manager::new(&store, config).unwrap();
        let info = infergate_cluster::registry::WorkerInfo {
            id: "w-1".into(),
            advertise: "127.0.0.1:9".into(),
            version: "test".into(),
            devices: Default::default(),
        };
        manager.registry.lock().join(info, Instant::now());
        let ended = |o: &Outstanding<'_>| o.lost().now_or_never().is_some();

        let held = manager.begin("w-1");
        assert!(!ended(&held), "a ready worker's request goes on");
        std::thread::sleep(manager.heartbeat().deadline() + Duration::from_millis(20));
        manager.sweep();
        assert!(ended(&held), "lost: the request ends");
        assert!(
            ended(&manager.begin("w-1")),
            "one begun on a lost worker ends at once"
        );

        // It reports again: requests sent now hold a fresh signal.
        let report = manager
            .registry
            .lock()
            .report("w-1", Report::default(), Instant::now());
        assert!(report.is_ok());
        let again = manager.begin("w-1");
        assert!(!ended(&again));
        assert!(manager.forget("w-1"));
        assert!(ended(&again), "removed: the request ends");
        assert!(
            ended(&manager.begin("w-1")),
            "an unknown worker's request ends at once"
        );
        assert!(
            !ended(&manager.begin(LOCAL)),
            "the local engine is never lost"
        );
    }

    #[test]
    fn a_worker_whose_hop_failed_is_routed_around_for_one_heartbeat_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let config = ClusterConfig {
            local_engine: false,
            ..ClusterConfig::default()
        };
        let manager = Manager::new(&store, config).unwrap();
        let model = LoadedModel {
            name: "m".into(),
            version: 1,
        };
        for (id, port) in [("w-1", 9), ("w-2", 10)] {
            let info = infergate_cluster::registry::WorkerInfo {
                id: id.into(),
                advertise: format!("127.0.0.1:{port}"),
                version: "test".into(),
                devices: Default::default(),
            };
            let mut registry = manager.registry.lock();
            registry.join(info, Instant::now());
            let holding = Report {
                models: vec![model.clone()],
                ..Report::default()
            };
            assert!(registry.report(id, holding, Instant::now()).is_ok());
        }
        let chosen = |manager: &Manager| match manager.choose(&model, false, &[]) {
            Ok(Choice::Worker { id, .. }) => id,
            _ => panic!("no worker chosen"),
        };
        manager.suspect("w-2");
        assert!(
            (0..20).all(|_| chosen(&manager) == "w-1"),
            "routed around w-2"
        );
        // Both suspect: routing goes on among them rather than refusing.
        manager.suspect("w-1");
        let both: std::collections::HashSet<String> = (0..40).map(|_| chosen(&manager)).collect();
        assert!(!both.is_empty());
        let now = Instant::now();
        let mut suspects = manager.suspects(now);
        suspects.sort();
        assert_eq!(suspects, ["w-1", "w-2"]);
        let deadline = manager.heartbeat().deadline();
        assert!(manager
            .suspects(now + deadline + Duration::from_millis(1))
            .is_empty());
        assert!(
            manager.suspected.lock().is_empty(),
            "forgotten once expired"
        );
    }

    fn replica(
        pg: &infergate_store::test_postgres::PgServer,
    ) -> (tempfile::TempDir, Store, Manager) {
        let dir = tempfile::tempdir().unwrap();
        let config = infergate_store::StoreConfig {
            url: Some(pg.url()),
            ..Default::default()
        };
        let store = Store::open_with(dir.path(), &config).unwrap();
        let manager = Manager::new(&store, ClusterConfig::default()).unwrap();
        (dir, store, manager)
    }

    fn states(manager: &Manager) -> Vec<(String, WorkerState)> {
        manager
            .view()
            .into_iter()
            .map(|v| (v.info.id, v.state))
            .collect()
    }

    #[test]
    fn replicas_share_joins_reports_drains_and_removals_and_go_on_alone_while_the_store_is_down() {
        let mut pg = infergate_store::test_postgres::PgServer::start();
        let (_a_dir, a_store, a) = replica(&pg);
        let (_b_dir, b_store, b) = replica(&pg);
        // A secret made on A admits a worker through B: one cluster.
        let (secret, _) = create_join_secret(&a_store, &a.material().ca, None).unwrap();
        assert_eq!(a.material().ca.pin(), b.material().ca.pin());
        let request = JoinRequest {
            worker_id: None,
            advertise: "127.0.0.1:9".into(),
            version: "0.1.0".into(),
            devices: Default::default(),
        };
        let joined = b.join(&b_store, &secret.to_string(), request).unwrap();
        let id = joined.worker_id.clone();
        assert!(states(&a).is_empty(), "A has not refreshed yet");
        a.refresh(&a_store);
        assert_eq!(states(&a), [(id.clone(), WorkerState::Ready)]);

        // A heartbeat on A reaches B's registry; a drain on B holds on A.
        let record = a.authenticate(&a_store, &joined.credential).unwrap();
        let loaded = LoadedModel {
            name: "m".into(),
            version: 1,
        };
        let report = Report {
            models: vec![loaded.clone()],
            ..Report::default()
        };
        a.report(&a_store, &record, report.clone(), a.removals());
        b.refresh(&b_store);
        assert_eq!(b.view()[0].report.models, [loaded]);
        assert!(b.drain(&b_store, &id).unwrap());
        a.refresh(&a_store);
        assert_eq!(states(&a), [(id.clone(), WorkerState::Draining)]);
        a.report(&a_store, &record, report.clone(), a.removals());
        assert_eq!(
            states(&a),
            [(id.clone(), WorkerState::Draining)],
            "a heartbeat does not undo the drain"
        );

        // PostgreSQL stopped: the credential A checked still admits the worker there, and its
        // heartbeats keep it alive on A; an unknown credential is 503, not 401.
        pg.stop();
        let again = a.authenticate(&a_store, &joined.credential).unwrap();
        assert_eq!(again.id, id);
        let stranger = credential::issue("w-0123456789abcdef").text;
        let err = a.authenticate(&a_store, &stranger).unwrap_err();
        assert_eq!(err.kind, crate::error::Kind::Overloaded);
        a.report(&a_store, &record, Report::default(), a.removals());
        a.refresh(&a_store);
        assert!(a.view()[0].report.models.is_empty(), "applied here alone");
        assert_eq!(a.view().len(), 1, "a failed refresh forgets nobody");

        // Back: removed through B, A drops it at its next refresh.
        pg.resume();
        // A heartbeat whose credential B checked just before the removal reaches the registry
        // after it: it must not bring the worker back.
        let seen = b.removals();
        let late = b.authenticate(&b_store, &joined.credential).unwrap();
        assert!(b_store.remove_worker(&id).unwrap());
        assert!(b.forget(&id));
        assert!(states(&b).is_empty(), "at once where it was removed");
        b.report(&b_store, &late, Report::default(), seen);
        assert!(
            states(&b).is_empty(),
            "a heartbeat checked before the removal"
        );
        a.refresh(&a_store);
        assert!(states(&a).is_empty());
        assert!(a.authenticate(&a_store, &joined.credential).is_err());
    }
}
