//! The manager's live view of its workers: who joined, what each last reported, when (on the
//! manager's clock), and how many requests the manager has outstanding there.
//!
//! The durable part (identities, addresses, credentials) lives in the store so that a shared
//! store can hold it for several gateway replicas; this is the in-memory part each manager keeps
//! and routes from. Every change that an operator would want to see comes back as a
//! [`Transition`] for the events stream.
//!
//! Several gateway replicas on one shared store (PostgreSQL) also share what heartbeats report:
//! the replica a heartbeat lands on writes it to the store, and every replica brings its registry
//! up to date from the store each interval ([`Registry::sync`]), so that each routes to every
//! live worker from memory. A row carries a revision (one sequence for the whole store) so that
//! a replica never replaces what it knows with an older row, and the age of the last heartbeat
//! by the store's clock, so that replicas whose clocks disagree still agree on who is lost.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::liveness::{Heartbeat, Reported, WorkerState};
use crate::messages::{LoadedModel, Report};
use crate::routing::Candidate;

// A worker as `GET /api/workers` lists it is part of the API's answers.
pub use infergate_api_types::workers::{WorkerInfo, WorkerView};

/// A worker's state changed (`None`: not registered).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Transition {
    pub worker: String,
    pub from: Option<WorkerState>,
    pub to: Option<WorkerState>,
}

/// A heartbeat or request for a worker the registry does not know: removed, or never joined.
/// The worker must join again with a valid secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("worker '{0}' is not registered (removed, or it never joined): join again")]
pub struct UnknownWorker(pub String);

#[derive(Debug)]
struct Entry {
    info: WorkerInfo,
    report: Report,
    last_seen: Instant,
    outstanding: u32,
    /// The state last announced as a transition.
    announced: WorkerState,
    /// An operator asked for no new requests here (until the worker joins again).
    drained: bool,
    /// Direct-mode grants naming this worker since its last report. The manager never sees
    /// direct traffic; its clients show up in the worker's next report's in-flight count, and
    /// until then this keeps a burst of `/assign` calls from all naming the same worker.
    granted: u32,
    /// The shared store's revision this entry reflects (0: none, a registry of its own).
    revision: i64,
    /// When this replica last wrote or learnt the entry: a snapshot of the store begun before
    /// then may not hold it yet, so it cannot make the entry go.
    stamped: Instant,
}

/// One worker as a shared store holds it (several gateway replicas on one PostgreSQL): what its
/// last heartbeat said, whichever replica it reached.
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    pub info: WorkerInfo,
    pub report: Report,
    /// An operator drained it, on any replica.
    pub drained: bool,
    /// Grows with every write of the worker's row (one sequence for the whole store).
    pub revision: i64,
    /// How long before the row was read (or written) its last heartbeat arrived, by the
    /// store's clock.
    pub age: Duration,
}

#[derive(Debug)]
pub struct Registry {
    heartbeat: Heartbeat,
    entries: BTreeMap<String, Entry>,
}

impl Registry {
    pub fn new(heartbeat: Heartbeat) -> Registry {
        Registry {
            heartbeat,
            entries: BTreeMap::new(),
        }
    }

    pub fn heartbeat(&self) -> Heartbeat {
        self.heartbeat
    }

    fn state_of(&self, entry: &Entry, now: Instant) -> WorkerState {
        judge(self.heartbeat, entry, now)
    }

    /// A worker joined (or rejoined after being lost or restarting): it starts ready with an
    /// empty report. Requests still outstanding from before a rejoin keep being counted.
    pub fn join(&mut self, info: WorkerInfo, now: Instant) -> Transition {
        let id = info.id.clone();
        let from = self.entries.get(&id).map(|e| e.announced);
        let outstanding = self.entries.get(&id).map_or(0, |e| e.outstanding);
        self.entries.insert(
            id.clone(),
            Entry {
                info,
                report: Report::default(),
                last_seen: now,
                outstanding,
                announced: WorkerState::Ready,
                drained: false,
                granted: 0,
                revision: 0,
                stamped: now,
            },
        );
        Transition {
            worker: id,
            from,
            to: Some(WorkerState::Ready),
        }
    }

    /// A heartbeat arrived. Returns the transition it caused, if any (a lost worker that
    /// reports again is ready again, or a worker starts draining).
    pub fn report(
        &mut self,
        id: &str,
        report: Report,
        now: Instant,
    ) -> Result<Option<Transition>, UnknownWorker> {
        let entry = self
            .entries
            .get_mut(id)
            .ok_or_else(|| UnknownWorker(id.to_owned()))?;
        entry.report = report;
        entry.last_seen = now;
        entry.stamped = now;
        entry.granted = 0;
        let to = judge(self.heartbeat, entry, now);
        Ok(announce(id, entry, to))
    }

    /// An operator drains the worker: no new requests go there, those running finish. It
    /// stays registered (and draining) until it joins again or is removed.
    pub fn drain(&mut self, id: &str, now: Instant) -> Result<Option<Transition>, UnknownWorker> {
        let heartbeat = self.heartbeat;
        let entry = self
            .entries
            .get_mut(id)
            .ok_or_else(|| UnknownWorker(id.to_owned()))?;
        entry.drained = true;
        entry.stamped = now;
        let to = judge(heartbeat, entry, now);
        Ok(announce(id, entry, to))
    }

    /// An operator removed the worker, or it deregistered after draining: out of routing at
    /// once.
    pub fn remove(&mut self, id: &str) -> Option<Transition> {
        self.entries.remove(id).map(|e| Transition {
            worker: id.to_owned(),
            from: Some(e.announced),
            to: None,
        })
    }

    /// A worker as the shared store holds it, written or read at `at`. A row newer than what this
    /// registry knows (by revision) replaces the report, the drain and the identity; the last
    /// heartbeat is the later of the two; a worker not known here is added (it joined, or
    /// reported, through another replica). Requests outstanding here keep being counted.
    pub fn apply(&mut self, observed: Observed, at: Instant) -> Option<Transition> {
        let heartbeat = self.heartbeat;
        // An age older than this process's clock reaches (a worker silent since before the
        // host booted) counts as long enough ago to be lost.
        let seen = at
            .checked_sub(observed.age)
            .or_else(|| at.checked_sub(heartbeat.deadline()))
            .unwrap_or(at);
        let id = observed.info.id.clone();
        let Some(entry) = self.entries.get_mut(&id) else {
            let mut entry = Entry {
                info: observed.info,
                report: observed.report,
                last_seen: seen,
                outstanding: 0,
                announced: WorkerState::Ready,
                drained: observed.drained,
                granted: 0,
                revision: observed.revision,
                stamped: at,
            };
            let to = judge(heartbeat, &entry, at);
            entry.announced = to;
            self.entries.insert(id.clone(), entry);
            return Some(Transition {
                worker: id,
                from: None,
                to: Some(to),
            });
        };
        if observed.revision > entry.revision {
            entry.info = observed.info;
            entry.report = observed.report;
            entry.drained = observed.drained;
            entry.revision = observed.revision;
            entry.granted = 0;
        }
        entry.last_seen = entry.last_seen.max(seen);
        entry.stamped = entry.stamped.max(at);
        let to = judge(heartbeat, entry, at);
        announce(&id, entry, to)
    }

    /// Makes the registry what a snapshot of the shared store holds, the snapshot begun at
    /// `taken`: its rows applied (see [`Registry::apply`]), and the workers it lacks (removed or
    /// deregistered through any replica) forgotten, unless this replica wrote or learnt of them
    /// after the snapshot began.
    pub fn sync(&mut self, snapshot: Vec<Observed>, taken: Instant) -> Vec<Transition> {
        let present: HashSet<String> = snapshot.iter().map(|o| o.info.id.clone()).collect();
        let mut transitions: Vec<Transition> = snapshot
            .into_iter()
            .filter_map(|o| self.apply(o, taken))
            .collect();
        let gone: Vec<String> = self
            .entries
            .iter()
            .filter(|(id, e)| !present.contains(*id) && e.stamped < taken)
            .map(|(id, _)| id.clone())
            .collect();
        transitions.extend(gone.iter().filter_map(|id| self.remove(id)));
        transitions
    }

    /// `id`'s entry reflects the store's `revision` (this replica just wrote it): a snapshot row
    /// older than that no longer replaces it.
    pub fn stamp(&mut self, id: &str, revision: i64) {
        if let Some(e) = self.entries.get_mut(id) {
            e.revision = e.revision.max(revision);
        }
    }

    /// Workers whose heartbeats stopped: called on a timer, returns the ones that just became
    /// lost.
    pub fn sweep(&mut self, now: Instant) -> Vec<Transition> {
        let heartbeat = self.heartbeat;
        self.entries
            .iter_mut()
            .filter_map(|(id, entry)| {
                let state = judge(heartbeat, entry, now);
                announce(id, entry, state)
            })
            .collect()
    }

    /// A registered worker's state at `now`; None when it is not registered.
    pub fn state(&self, id: &str, now: Instant) -> Option<WorkerState> {
        self.entries.get(id).map(|e| self.state_of(e, now))
    }

    /// The routing view of every worker for one model version.
    pub fn candidates(&self, model: &LoadedModel, now: Instant) -> Vec<Candidate<'_>> {
        self.routing_view(model, now, |e| e.outstanding)
    }

    /// The view for choosing a direct-mode worker: a worker's load is what the manager
    /// forwards to it or what it reported in flight (direct clients included), whichever is
    /// more, plus the grants naming it since that report.
    pub fn direct_candidates(&self, model: &LoadedModel, now: Instant) -> Vec<Candidate<'_>> {
        self.routing_view(model, now, |e| {
            e.outstanding
                .max(e.report.in_flight)
                .saturating_add(e.granted)
        })
    }

    /// Every worker as a routing candidate for `model`, its load as `load` counts it.
    fn routing_view(
        &self,
        model: &LoadedModel,
        now: Instant,
        load: impl Fn(&Entry) -> u32,
    ) -> Vec<Candidate<'_>> {
        self.entries
            .values()
            .map(|e| Candidate {
                id: &e.info.id,
                state: self.state_of(e, now),
                loaded: e.report.models.contains(model),
                outstanding: load(e),
            })
            .collect()
    }

    /// A direct-mode client was sent to `id`.
    pub fn grant(&mut self, id: &str) {
        if let Some(e) = self.entries.get_mut(id) {
            e.granted = e.granted.saturating_add(1);
        }
    }

    /// What a worker last reported.
    pub fn report_of(&self, id: &str) -> Option<&Report> {
        self.entries.get(id).map(|e| &e.report)
    }

    /// Where to reach a worker.
    pub fn address(&self, id: &str) -> Option<&str> {
        self.entries.get(id).map(|e| e.info.advertise.as_str())
    }

    /// A request was sent to `id`.
    pub fn begin(&mut self, id: &str) {
        if let Some(e) = self.entries.get_mut(id) {
            e.outstanding = e.outstanding.saturating_add(1);
        }
    }

    /// A request sent to `id` was answered or failed.
    pub fn end(&mut self, id: &str) {
        if let Some(e) = self.entries.get_mut(id) {
            e.outstanding = e.outstanding.saturating_sub(1);
        }
    }

    pub fn view(&self, now: Instant) -> Vec<WorkerView> {
        self.entries
            .values()
            .map(|e| WorkerView {
                info: e.info.clone(),
                state: self.state_of(e, now),
                last_seen_ms: millis(now.saturating_duration_since(e.last_seen)),
                report: e.report.clone(),
                outstanding: e.outstanding,
            })
            .collect()
    }
}

/// The state the manager routes by: silence makes a worker lost whatever it said; an operator's
/// drain overrides a worker that says it is ready.
fn judge(heartbeat: Heartbeat, entry: &Entry, now: Instant) -> WorkerState {
    let reported = if entry.drained {
        Reported::Draining
    } else {
        entry.report.state
    };
    heartbeat.judge(reported, now.saturating_duration_since(entry.last_seen))
}

fn announce(id: &str, entry: &mut Entry, to: WorkerState) -> Option<Transition> {
    if entry.announced == to {
        return None;
    }
    let from = std::mem::replace(&mut entry.announced, to);
    Some(Transition {
        worker: id.to_owned(),
        from: Some(from),
        to: Some(to),
    })
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::Devices;

    fn info(id: &str) -> WorkerInfo {
        WorkerInfo {
            id: id.into(),
            advertise: format!("{id}.internal:8443"),
            version: "0.1.0".into(),
            devices: Devices::default(),
        }
    }

    fn holding(name: &str) -> Report {
        Report {
            models: vec![LoadedModel {
                name: name.into(),
                version: 1,
            }],
            ..Report::default()
        }
    }

    fn model(name: &str) -> LoadedModel {
        LoadedModel {
            name: name.into(),
            version: 1,
        }
    }

    #[test]
    fn a_silent_worker_is_lost_after_three_intervals_and_ready_again_when_it_reports() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut reg = Registry::new(Heartbeat::default());
        let joined = reg.join(info("a"), t0);
        assert_eq!(joined.from, None);
        assert_eq!(joined.to, Some(WorkerState::Ready));
        assert_eq!(reg.report("a", holding("m"), t0 + s(2)), Ok(None));
        assert!(reg.sweep(t0 + s(7)).is_empty());
        let lost = reg.sweep(t0 + s(8));
        assert_eq!(lost.len(), 1);
        assert_eq!(
            (lost[0].from, lost[0].to),
            (Some(WorkerState::Ready), Some(WorkerState::Lost))
        );
        // Announced once.
        assert!(reg.sweep(t0 + s(9)).is_empty());
        assert_eq!(
            reg.candidates(&model("m"), t0 + s(9))[0].state,
            WorkerState::Lost
        );
        assert_eq!(reg.state("a", t0 + s(9)), Some(WorkerState::Lost));
        assert_eq!(reg.state("ghost", t0 + s(9)), None);
        assert_eq!(reg.view(t0 + s(9))[0].last_seen_ms, 7_000);
        let back = reg.report("a", holding("m"), t0 + s(10)).unwrap().unwrap();
        assert_eq!(
            (back.from, back.to),
            (Some(WorkerState::Lost), Some(WorkerState::Ready))
        );
        let c = reg.candidates(&model("m"), t0 + s(10));
        assert!(c[0].loaded && c[0].state == WorkerState::Ready);
        assert!(!reg.candidates(&model("other"), t0 + s(10))[0].loaded);
    }

    #[test]
    fn draining_leaves_routing_and_removal_forgets_the_worker() {
        let t0 = Instant::now();
        let mut reg = Registry::new(Heartbeat::default());
        reg.join(info("a"), t0);
        let draining = Report {
            state: Reported::Draining,
            ..Report::default()
        };
        let t = reg.report("a", draining, t0).unwrap().unwrap();
        assert_eq!(t.to, Some(WorkerState::Draining));
        assert!(!reg.candidates(&model("m"), t0)[0].state.routable());
        let gone = reg.remove("a").unwrap();
        assert_eq!((gone.from, gone.to), (Some(WorkerState::Draining), None));
        assert!(reg.candidates(&model("m"), t0).is_empty());
        assert_eq!(
            reg.report("a", Report::default(), t0),
            Err(UnknownWorker("a".into()))
        );
        assert_eq!(reg.remove("a"), None);
    }

    #[test]
    fn an_operator_drain_holds_against_ready_reports_until_a_rejoin() {
        let t0 = Instant::now();
        let mut reg = Registry::new(Heartbeat::default());
        reg.join(info("a"), t0);
        let t = reg.drain("a", t0).unwrap().unwrap();
        assert_eq!(t.to, Some(WorkerState::Draining));
        assert_eq!(reg.drain("a", t0), Ok(None), "announced once");
        assert_eq!(reg.report("a", holding("m"), t0), Ok(None));
        assert_eq!(
            reg.candidates(&model("m"), t0)[0].state,
            WorkerState::Draining
        );
        // Silence still makes it lost.
        assert_eq!(reg.sweep(t0 + Duration::from_secs(7)).len(), 1);
        assert_eq!(reg.drain("ghost", t0), Err(UnknownWorker("ghost".into())));
        reg.join(info("a"), t0);
        assert_eq!(reg.candidates(&model("m"), t0)[0].state, WorkerState::Ready);
    }

    #[test]
    fn outstanding_requests_are_counted_per_worker_and_survive_a_rejoin() {
        let t0 = Instant::now();
        let mut reg = Registry::new(Heartbeat::default());
        reg.join(info("a"), t0);
        reg.join(info("b"), t0);
        reg.begin("a");
        reg.begin("a");
        reg.begin("b");
        reg.end("b");
        reg.end("b");
        reg.begin("ghost");
        let counts: Vec<(&str, u32)> = reg
            .candidates(&model("m"), t0)
            .iter()
            .map(|c| (c.id, c.outstanding))
            .collect();
        assert_eq!(counts, vec![("a", 2), ("b", 0)]);
        reg.join(info("a"), t0);
        assert_eq!(reg.view(t0)[0].outstanding, 2);
        assert_eq!(reg.address("a"), Some("a.internal:8443"));
        assert_eq!(reg.address("ghost"), None);
    }

    #[test]
    fn direct_grants_count_as_load_until_the_next_report() {
        let t0 = Instant::now();
        let mut reg = Registry::new(Heartbeat::default());
        reg.join(info("a"), t0);
        reg.join(info("b"), t0);
        let loads = |candidates: Vec<Candidate>| -> Vec<u32> {
            candidates.iter().map(|c| c.outstanding).collect()
        };
        reg.grant("a");
        reg.grant("a");
        reg.grant("ghost");
        reg.begin("b");
        assert_eq!(loads(reg.direct_candidates(&model("m"), t0)), vec![2, 1]);
        // Forwarded requests alone: grants do not touch the proxy's view.
        assert_eq!(loads(reg.candidates(&model("m"), t0)), vec![0, 1]);
        // A report replaces the grants with what the worker has in flight (its direct clients
        // included), or the forwarded count when that is larger.
        let busy = Report {
            in_flight: 5,
            ..holding("m")
        };
        reg.report("a", busy, t0).unwrap();
        reg.report("b", holding("m"), t0).unwrap();
        assert_eq!(loads(reg.direct_candidates(&model("m"), t0)), vec![5, 1]);
    }

    fn observed(id: &str, revision: i64, age_ms: u64, report: Report) -> Observed {
        Observed {
            info: info(id),
            report,
            drained: false,
            revision,
            age: Duration::from_millis(age_ms),
        }
    }

    #[test]
    fn a_snapshot_adds_updates_and_forgets_workers_but_never_goes_back_in_revision() {
        let t0 = Instant::now() + Duration::from_secs(60);
        let s = Duration::from_secs;
        let mut reg = Registry::new(Heartbeat::default());
        // Two workers that heartbeat through other replicas; one silent for 7 s by the store's
        // clock is lost at once.
        let first = reg.sync(
            vec![
                observed("a", 5, 500, holding("m")),
                observed("b", 6, 7_000, Report::default()),
            ],
            t0,
        );
        let states: Vec<_> = first
            .iter()
            .map(|t| (t.worker.as_str(), t.from, t.to))
            .collect();
        assert_eq!(
            states,
            vec![
                ("a", None, Some(WorkerState::Ready)),
                ("b", None, Some(WorkerState::Lost))
            ]
        );
        assert_eq!(reg.view(t0)[0].last_seen_ms, 500);
        assert!(reg.candidates(&model("m"), t0)[0].loaded);
        reg.begin("a");
        reg.grant("a");

        // An older row (a snapshot begun before this replica's own write) changes nothing but
        // cannot make the last heartbeat older either.
        reg.stamp("a", 9);
        assert_eq!(
            reg.apply(observed("a", 8, 3_000, Report::default()), t0),
            None
        );
        assert!(
            reg.candidates(&model("m"), t0)[0].loaded,
            "kept the newer report"
        );
        assert_eq!(reg.view(t0)[0].last_seen_ms, 500);

        // A newer one replaces the report and the drain, and ends the grants; what this replica
        // forwards there is still counted.
        let mut drained = observed("a", 10, 0, Report::default());
        drained.drained = true;
        let t = reg.apply(drained, t0 + s(1)).unwrap();
        assert_eq!(t.to, Some(WorkerState::Draining));
        assert_eq!(reg.view(t0 + s(1))[0].outstanding, 1);
        assert_eq!(
            reg.direct_candidates(&model("m"), t0 + s(1))[0].outstanding,
            1
        );
        assert!(!reg.candidates(&model("m"), t0 + s(1))[0].loaded);

        // Gone from the store (removed through another replica): forgotten; "c", which this
        // replica learnt of after the snapshot began, stays.
        reg.join(info("c"), t0 + s(3));
        let gone = reg.sync(vec![observed("b", 11, 9_000, Report::default())], t0 + s(2));
        assert_eq!(
            gone,
            vec![Transition {
                worker: "a".into(),
                from: Some(WorkerState::Draining),
                to: None
            }]
        );
        let ids: Vec<String> = reg.view(t0 + s(3)).into_iter().map(|v| v.info.id).collect();
        assert_eq!(ids, ["b", "c"]);
        // The next snapshot without it forgets "c" as well.
        assert_eq!(reg.sync(Vec::new(), t0 + s(4)).len(), 2);
        assert!(reg.view(t0 + s(4)).is_empty());
    }

    #[test]
    fn a_worker_heard_through_the_store_is_lost_when_its_age_passes_the_deadline() {
        let t0 = Instant::now() + Duration::from_secs(60);
        let mut reg = Registry::new(Heartbeat::default());
        reg.sync(vec![observed("a", 1, 4_000, Report::default())], t0);
        assert_eq!(reg.candidates(&model("m"), t0)[0].state, WorkerState::Ready);
        // No newer heartbeat reaches the store: two seconds later it is lost here too.
        let lost = reg.sweep(t0 + Duration::from_secs(2));
        assert_eq!(lost.len(), 1);
        assert_eq!(lost[0].to, Some(WorkerState::Lost));
        // Reported again through another replica: ready.
        let back = reg.sync(
            vec![observed("a", 2, 100, Report::default())],
            t0 + Duration::from_secs(3),
        );
        assert_eq!(back[0].to, Some(WorkerState::Ready));
        // An age beyond what the monotonic clock reaches is long ago, not just now.
        let ancient = observed("z", 3, u64::MAX / 4, Report::default());
        assert_eq!(reg.apply(ancient, t0).unwrap().to, Some(WorkerState::Lost));
    }
}
