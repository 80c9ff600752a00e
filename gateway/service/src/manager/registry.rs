//! The live registry kept from the workers' heartbeats: reports, drains, removals, workers
//! lost for want of a heartbeat; with a shared store (gateway replicas), what reached the other
//! replicas is brought in each heartbeat interval and what reaches this one is written there.

use super::{log_transition, Manager};
use crate::error::ApiResult;
use infergate_cluster::liveness::WorkerState;
use infergate_cluster::messages::Report;
use infergate_cluster::registry::{Observed, Registry, Transition};
use infergate_store::workers::WorkerRecord;
use infergate_store::{Store, StoreError};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

impl Manager {
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
    pub(super) fn announce(&self, t: &Transition) {
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
}
