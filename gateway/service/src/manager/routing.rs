//! Where a request runs: the local engine or a worker, chosen among those that hold the model
//! version by `infergate_cluster::routing`; requests outstanding per worker; a scale-out load
//! asked of one more worker when a version's copies fall behind.

use super::{Manager, Signal, LOCAL};
use crate::error::{ApiError, ApiResult};
use crate::manager::metrics::RoutingCounters;
use infergate_cluster::liveness::WorkerState;
use infergate_cluster::messages::LoadedModel;
use infergate_cluster::registry::Registry;
use infergate_cluster::routing::{self, Candidate, NoWorker};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Where a request goes.
pub enum Choice {
    Local,
    Worker { id: String, advertise: String },
}

impl Manager {
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

    /// Where a request of sequence `correlation` of `model` goes: the first of the ready workers
    /// in the rendezvous order of the model version and correlation id, which every replica
    /// computes alike from the same workers, so a sequence keeps its worker (and its state)
    /// whichever replica a request reaches; the local engine only when no worker is ready
    /// (another replica's local engine holds other state). Never the local engine of a
    /// manager that only routes.
    pub fn choose_for_sequence(&self, model: &LoadedModel, correlation: &str) -> ApiResult<Choice> {
        let registry = self.registry.lock();
        let candidates = registry.candidates(model, Instant::now());
        let ready = candidates
            .iter()
            .filter(|c| c.state.routable())
            .map(|c| c.id);
        let key = format!("{}:{}/{correlation}", model.name, model.version);
        let Some(first) = infergate_cluster::rendezvous::rank(&key, ready)
            .first()
            .copied()
        else {
            if self.config.local_engine {
                return Ok(Choice::Local);
            }
            RoutingCounters::count(&self.counters.no_worker);
            return Err(no_worker(model, NoWorker::NoneReady));
        };
        let advertise = registry
            .address(first)
            .ok_or_else(|| ApiError::internal("a ranked worker has no address"))?;
        Ok(Choice::Worker {
            id: first.to_owned(),
            advertise: advertise.to_owned(),
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClusterConfig;
    use infergate_cluster::messages::Report;
    use infergate_store::Store;

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
}
