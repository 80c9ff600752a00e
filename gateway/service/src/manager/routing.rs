//! Where a request runs: the local engine or a worker, chosen among those that hold the model
//! version by `infergate_cluster::routing`; requests outstanding per worker; a scale-out load
//! asked of one more worker when a version's copies fall behind.

use super::{Manager, LOCAL};
use crate::error::{ApiError, ApiResult};
use crate::manager::metrics::RoutingCounters;
use infergate_cluster::liveness::WorkerState;
use infergate_cluster::messages::LoadedModel;
use infergate_cluster::registry::Registry;
use infergate_cluster::routing::{self, Candidate, NoWorker};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

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
        self.pick(&registry, model, &candidates, &tried)
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
            self.pick(&registry, model, &candidates, &[])?
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

    /// Routes among `candidates` (see `infergate_cluster::routing`); a version's affinity key
    /// is `name:version`.
    fn pick(
        &self,
        registry: &Registry,
        model: &LoadedModel,
        candidates: &[Candidate<'_>],
        tried: &[&str],
    ) -> ApiResult<Choice> {
        let key = format!("{}:{}", model.name, model.version);
        let delay = routing::queue_delay(
            candidates
                .iter()
                .filter(|c| c.loaded && c.state.routable() && c.id != LOCAL)
                .filter_map(|c| Some((c.outstanding, registry.report_of(c.id)?.p50_ms))),
        );
        let route = routing::route(
            &key,
            candidates,
            tried,
            delay,
            &self.policy,
            &mut rand::rng(),
        )
        .map_err(|e| {
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

    /// Counts a request as outstanding on `id` until the guard drops.
    pub fn begin(&self, id: &str) -> Outstanding<'_> {
        if id == LOCAL {
            self.local_outstanding.fetch_add(1, Ordering::Relaxed);
        } else {
            self.registry.lock().begin(id);
        }
        Outstanding {
            manager: self,
            id: id.to_owned(),
        }
    }
}

pub struct Outstanding<'a> {
    manager: &'a Manager,
    id: String,
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
