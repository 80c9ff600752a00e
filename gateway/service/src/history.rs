//! Per-second history of every model and pipeline, kept on the server so that a dashboard (or a
//! script) sees the last hour whenever it connects, not only what it watched itself.
//!
//! A sampler task reads the cumulative counters once a second — the answers by status and the
//! successful latencies of [`crate::latency`], the engine's queue and batch counters — and
//! appends the differences to a bounded ring per name ([`CAPACITY`] samples; the oldest go
//! first). Chat models also get their text-generation figures: mean time to first token and
//! generated tokens per second. Model state changes go to a bounded activity log with the
//! server's time. Memory is bounded by the number of registered names; a deleted name's ring
//! goes with it. API keys get a ring of their own (requests admitted and refused per second,
//! from [`crate::key_activity`]) while they were used within the hour, for at most
//! [`MAX_KEYS`] keys (the most recently used).

use crate::catalog::model_key;
use crate::catalog::Catalog;
use crate::key_activity::KeyTotals;
use crate::latency::{Counts, StatusCounts};
use crate::metrics::Metrics;
use crate::pipelines::Pipelines;
use infergate_engine::{Engine, ModelState};
use parking_lot::Mutex;
use std::collections::{BTreeMap, VecDeque};

/// One hour of one-second samples per name.
pub const CAPACITY: usize = 3600;
/// State changes kept for the activity feed.
const ACTIVITY: usize = 200;
/// Keys charted at once: 3600 samples of 24 bytes each per key.
pub const MAX_KEYS: usize = 100;

/// What a name in the history is.
pub use infergate_api_types::history::SeriesKind as Kind;
pub use infergate_api_types::history::{Activity, VersionState};

/// One second of one model or pipeline.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The end of the second, Unix milliseconds (server clock).
    pub t_ms: u64,
    /// Answers of every status per second.
    pub requests_per_s: f64,
    pub client_errors_per_s: f64,
    pub server_errors_per_s: f64,
    /// Successful requests' latency, end to end as the gateway saw them; `None` in a second
    /// without one.
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// Mean time requests waited in the model's queue (models only).
    pub avg_queue_ms: Option<f64>,
    /// Mean samples per model execution (models only).
    pub avg_batch: Option<f64>,
    /// Requests queued or running at the end of the second (models only).
    pub in_flight: u64,
    /// Answers in the second by status (non-empty seconds only).
    pub statuses: BTreeMap<u16, u64>,
    /// Chat models: mean time from arrival to the first token of the requests whose first
    /// token came in the second.
    pub ttft_ms: Option<f64>,
    /// Chat models: tokens generated per second (`None` for other models).
    pub tokens_per_s: Option<f64>,
}

/// One second of one API key.
#[derive(Debug, Clone, Copy)]
pub struct KeySample {
    pub t_ms: u64,
    pub requests_per_s: f64,
    /// Refused by the key's rate limit or concurrency cap.
    pub refused_per_s: f64,
    /// Tokens charged (LLM requests).
    pub tokens_per_s: f64,
}

/// Cumulative counters of one name, read at one moment.
#[derive(Clone)]
struct Reading {
    latency: Option<Counts>,
    statuses: Option<StatusCounts>,
    queue: (u64, u64),
    executions: u64,
    inferences: u64,
    in_flight: u64,
    /// Chat models: the time-to-first-token sum (s) and count, and tokens generated.
    llm: Option<(f64, u64, u64)>,
}

impl Reading {
    /// The gateway's counters of `name` (all versions); the engine's are added per version.
    fn answers(metrics: &Metrics, name: &str) -> Reading {
        let (latency, statuses) = metrics
            .latency
            .model_totals(name)
            .map_or((None, None), |(l, s)| (Some(l), Some(s)));
        Reading {
            latency,
            statuses,
            queue: (0, 0),
            executions: 0,
            inferences: 0,
            in_flight: 0,
            llm: None,
        }
    }
}

struct Series {
    kind: Kind,
    samples: VecDeque<Sample>,
    previous: Option<Reading>,
}

struct KeySeries {
    samples: VecDeque<KeySample>,
    previous: KeyTotals,
}

#[derive(Default)]
struct Inner {
    keys: BTreeMap<i64, KeySeries>,
    series: BTreeMap<String, Series>,
    states: BTreeMap<(String, u64), VersionState>,
    activity: VecDeque<Activity>,
    started: bool,
}

#[derive(Default)]
pub struct History {
    inner: Mutex<Inner>,
}

/// One name's samples, as `GET /api/metrics/history` reads them.
pub struct SeriesView {
    pub name: String,
    pub kind: Kind,
    pub samples: Vec<Sample>,
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A model state as the API names it, and the reason of a failure.
pub fn state_name(s: &ModelState) -> (VersionState, Option<String>) {
    match s {
        ModelState::Unloaded => (VersionState::Unloaded, None),
        ModelState::Loading => (VersionState::Loading, None),
        ModelState::Ready => (VersionState::Loaded, None),
        ModelState::Failed(reason) => (VersionState::Failed, Some(reason.clone())),
    }
}

impl History {
    /// Reads every counter now (the catalog's versions on `engine`, `pipelines`, the gateway's
    /// `metrics`) and appends one sample per name, covering `seconds`.
    pub fn sample(
        &self,
        catalog: &Catalog,
        pipelines: &Pipelines,
        engine: &Engine,
        metrics: &Metrics,
        seconds: f64,
        t_ms: u64,
    ) {
        let records = catalog.all();
        let mut readings: BTreeMap<String, (Kind, Reading)> = BTreeMap::new();
        let mut states = BTreeMap::new();
        for r in &records {
            let key = model_key(r);
            let (st, reason) = state_name(&engine.state(&key));
            states.insert((r.name.clone(), r.version), (st, reason));
            let entry = readings
                .entry(r.name.clone())
                .or_insert_with(|| (Kind::Model, Reading::answers(metrics, &r.name)));
            let reading = &mut entry.1;
            if reading.llm.is_none() && crate::chat_models::is_gguf(r) {
                reading.llm = Some(metrics.llm_totals(&r.name));
            }
            reading.in_flight += engine.in_flight(&key) as u64;
            if let Some(stats) = engine.stats(&key) {
                reading.queue.0 += stats.queue.count;
                reading.queue.1 += stats.queue.ns;
                reading.executions += stats.execution_count;
                reading.inferences += stats.inference_count;
            }
        }
        for p in pipelines.all() {
            let name = p.record.name.clone();
            let reading = Reading::answers(metrics, &name);
            readings.entry(name).or_insert((Kind::Pipeline, reading));
        }

        let keys = metrics.keys.all();

        let mut inner = self.inner.lock();
        inner.record_keys(keys, seconds, t_ms);
        inner.record_states(states, t_ms);
        inner.series.retain(|name, _| readings.contains_key(name));
        for (name, (kind, reading)) in readings {
            let series = inner.series.entry(name).or_insert_with(|| Series {
                kind,
                samples: VecDeque::new(),
                previous: None,
            });
            series.kind = kind;
            if let Some(previous) = &series.previous {
                if series.samples.len() == CAPACITY {
                    series.samples.pop_front();
                }
                series
                    .samples
                    .push_back(difference(previous, &reading, seconds, t_ms));
            }
            series.previous = Some(reading);
        }
    }

    /// Samples after `after_ms` (and within the last `seconds`), per name; `name` picks one.
    pub fn read(&self, after_ms: u64, name: Option<&str>) -> Vec<SeriesView> {
        let inner = self.inner.lock();
        inner
            .series
            .iter()
            .filter(|(n, _)| name.is_none_or(|wanted| wanted == n.as_str()))
            .map(|(n, s)| SeriesView {
                name: n.clone(),
                kind: s.kind,
                samples: s
                    .samples
                    .iter()
                    .filter(|x| x.t_ms > after_ms)
                    .cloned()
                    .collect(),
            })
            .collect()
    }

    /// Each charted key's samples after `after_ms`, by key id.
    pub fn read_keys(&self, after_ms: u64) -> Vec<(i64, Vec<KeySample>)> {
        let inner = self.inner.lock();
        inner
            .keys
            .iter()
            .map(|(id, k)| {
                let samples = k.samples.iter().filter(|x| x.t_ms > after_ms).copied();
                (*id, samples.collect())
            })
            .collect()
    }

    /// State changes after `after_ms`, oldest first.
    pub fn activity(&self, after_ms: u64) -> Vec<Activity> {
        let inner = self.inner.lock();
        inner
            .activity
            .iter()
            .filter(|a| a.time_ms > after_ms)
            .cloned()
            .collect()
    }
}

impl Inner {
    /// Appends a second to each key's ring. A key gets a ring at the first sample after it was
    /// used (its samples start with the next second); the ring
    /// goes when the key made none for an hour, or was revoked, or when more recently used
    /// keys fill [`MAX_KEYS`].
    fn record_keys(&mut self, mut now: Vec<(i64, KeyTotals)>, seconds: f64, t_ms: u64) {
        now.sort_by_key(|(_, t)| std::cmp::Reverse(t.last_used_ms));
        now.truncate(MAX_KEYS);
        let hour_ago = t_ms.saturating_sub(CAPACITY as u64 * 1000);
        now.retain(|(_, t)| t.last_used_ms.is_some_and(|last| last > hour_ago));
        let current: BTreeMap<i64, KeyTotals> = now.into_iter().collect();
        self.keys.retain(|id, _| current.contains_key(id));
        for (id, totals) in current {
            match self.keys.get_mut(&id) {
                Some(series) => {
                    if series.samples.len() == CAPACITY {
                        series.samples.pop_front();
                    }
                    let sample = key_difference(&series.previous, &totals, seconds, t_ms);
                    series.samples.push_back(sample);
                    series.previous = totals;
                }
                // A key's counters count since the server started: the ring starts from them.
                None => {
                    let series = KeySeries {
                        samples: VecDeque::new(),
                        previous: totals,
                    };
                    self.keys.insert(id, series);
                }
            }
        }
    }

    /// Logs what changed since the last sample. At the first sample only versions that are
    /// already past "unloaded" are worth a line (a fresh start has every version unloaded).
    fn record_states(
        &mut self,
        now: BTreeMap<(String, u64), (VersionState, Option<String>)>,
        t_ms: u64,
    ) {
        let first = !self.started;
        self.started = true;
        let mut log = Vec::new();
        for ((model, version), (st, reason)) in &now {
            let before = self.states.get(&(model.clone(), *version)).copied();
            let changed = match before {
                Some(old) => old != *st,
                None if first => *st != VersionState::Unloaded,
                None => true,
            };
            if changed {
                let state = if before.is_none() && !first && *st == VersionState::Unloaded {
                    VersionState::Registered
                } else {
                    *st
                };
                log.push((model.clone(), *version, state, reason.clone()));
            }
        }
        for (model, version) in self.states.keys() {
            if !now.contains_key(&(model.clone(), *version)) {
                log.push((model.clone(), *version, VersionState::Removed, None));
            }
        }
        for (model, version, state, reason) in log {
            if self.activity.len() == ACTIVITY {
                self.activity.pop_front();
            }
            self.activity.push_back(Activity {
                time_ms: t_ms,
                model,
                version,
                state,
                reason,
            });
        }
        self.states = now.into_iter().map(|(k, (st, _))| (k, st)).collect();
    }
}

fn key_difference(before: &KeyTotals, now: &KeyTotals, seconds: f64, t_ms: u64) -> KeySample {
    KeySample {
        t_ms,
        requests_per_s: now.admitted.saturating_sub(before.admitted) as f64 / seconds,
        refused_per_s: now.refused.saturating_sub(before.refused) as f64 / seconds,
        tokens_per_s: now.tokens.saturating_sub(before.tokens) as f64 / seconds,
    }
}

/// Mean time to first token (ms) and tokens per second between two readings of a chat model.
fn generation(before: &Reading, now: &Reading, seconds: f64) -> (Option<f64>, Option<f64>) {
    let (Some((sum0, count0, tokens0)), Some((sum1, count1, tokens1))) = (before.llm, now.llm)
    else {
        return (None, None);
    };
    let firsts = count1.saturating_sub(count0);
    let ttft = (firsts > 0).then(|| (sum1 - sum0).max(0.0) / firsts as f64 * 1e3);
    (ttft, Some(tokens1.saturating_sub(tokens0) as f64 / seconds))
}

fn difference(before: &Reading, now: &Reading, seconds: f64, t_ms: u64) -> Sample {
    let (ttft_ms, tokens_per_s) = generation(before, now, seconds);
    let statuses = match &now.statuses {
        Some(s) => s.since(before.statuses.as_ref()),
        None => {
            return Sample {
                ttft_ms,
                tokens_per_s,
                ..empty(t_ms, now.in_flight)
            }
        }
    };
    let latency = now
        .latency
        .as_ref()
        .map(|l| l.since(before.latency.as_ref()));
    let quantile = |q: f64| latency.as_ref().and_then(|l| l.quantile_ms(q));
    let queued = now.queue.0.saturating_sub(before.queue.0);
    let executions = now.executions.saturating_sub(before.executions);
    let answered: u64 = statuses.nonzero().iter().map(|(_, n)| n).sum();
    Sample {
        t_ms,
        requests_per_s: answered as f64 / seconds,
        client_errors_per_s: statuses.in_range(400..500) as f64 / seconds,
        server_errors_per_s: statuses.in_range(500..600) as f64 / seconds,
        p50_ms: quantile(0.5),
        p99_ms: quantile(0.99),
        avg_queue_ms: (queued > 0)
            .then(|| now.queue.1.saturating_sub(before.queue.1) as f64 / queued as f64 / 1e6),
        avg_batch: (executions > 0)
            .then(|| now.inferences.saturating_sub(before.inferences) as f64 / executions as f64),
        in_flight: now.in_flight,
        statuses: statuses.nonzero().into_iter().collect(),
        ttft_ms,
        tokens_per_s,
    }
}

fn empty(t_ms: u64, in_flight: u64) -> Sample {
    Sample {
        t_ms,
        requests_per_s: 0.0,
        client_errors_per_s: 0.0,
        server_errors_per_s: 0.0,
        p50_ms: None,
        p99_ms: None,
        avg_queue_ms: None,
        avg_batch: None,
        in_flight,
        statuses: BTreeMap::new(),
        ttft_ms: None,
        tokens_per_s: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn llm(ttft_sum_s: f64, firsts: u64, tokens: u64) -> Reading {
        Reading {
            latency: None,
            statuses: None,
            queue: (0, 0),
            executions: 0,
            inferences: 0,
            in_flight: 0,
            llm: Some((ttft_sum_s, firsts, tokens)),
        }
    }

    #[test]
    fn generation_figures_are_the_seconds_differences() {
        let (ttft, rate) = generation(&llm(1.0, 2, 100), &llm(1.9, 5, 160), 2.0);
        assert!((ttft.unwrap() - 300.0).abs() < 1e-9, "{ttft:?}");
        assert_eq!(rate, Some(30.0));
        // No first token in the second: no time to first token, but tokens still flow.
        assert_eq!(
            generation(&llm(1.0, 2, 100), &llm(1.0, 2, 110), 1.0),
            (None, Some(10.0))
        );
        let plain = Reading {
            llm: None,
            ..llm(0.0, 0, 0)
        };
        assert_eq!(generation(&plain, &plain, 1.0), (None, None));
    }

    fn used(admitted: u64, refused: u64, last: u64) -> KeyTotals {
        KeyTotals {
            admitted,
            refused,
            last_used_ms: Some(last),
            tokens: admitted * 10,
        }
    }

    #[test]
    fn key_rings_start_after_first_use_and_go_after_an_hour_idle() {
        let mut inner = Inner::default();
        let t0 = 10_000_000;
        inner.record_keys(vec![(1, used(5, 0, t0))], 1.0, t0);
        assert!(inner.keys[&1].samples.is_empty());
        inner.record_keys(vec![(1, used(8, 1, t0 + 900))], 1.0, t0 + 1000);
        let s = inner.keys[&1].samples[0];
        assert_eq!(
            (s.requests_per_s, s.refused_per_s, s.tokens_per_s),
            (3.0, 1.0, 30.0)
        );
        inner.record_keys(vec![(1, used(8, 1, t0 + 900))], 1.0, t0 + 3_700_000);
        assert!(inner.keys.is_empty());
    }

    #[test]
    fn only_the_most_recently_used_keys_are_charted() {
        let mut inner = Inner::default();
        let now = 10_000_000;
        let keys = (0..MAX_KEYS as i64 + 5).map(|id| (id, used(1, 0, now - 1000 + id as u64)));
        inner.record_keys(keys.collect(), 1.0, now);
        assert_eq!(inner.keys.len(), MAX_KEYS);
        assert!(!inner.keys.contains_key(&0) && inner.keys.contains_key(&(MAX_KEYS as i64 + 4)));
    }
}
