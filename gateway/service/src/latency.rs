//! Latency distributions and answer statuses per model version for the live dashboard
//! (`/v2/events`, `/api/metrics/history`).
//!
//! Each version has a fixed histogram of log-spaced buckets (four per octave, 10 µs to ~170 s)
//! and one counter per HTTP status: recording a request is one bucket index and two atomic
//! adds, whatever the traffic. Everything only grows; a reader takes [`Counts`] /
//! [`StatusCounts`] now and a second later and asks the difference, so every reader gets
//! per-second figures without the recording side knowing about seconds or readers. A quantile
//! is exact to the bucket (within ±9%) and interpolated inside it.

use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

const BUCKETS_PER_OCTAVE: f64 = 4.0;
/// The lower edge of the first bucket; faster requests count in it.
const FLOOR_US: f64 = 10.0;
/// 24 octaves above 10 µs: up to ~168 s; slower requests count in the last bucket.
const BUCKETS: usize = 96;
/// HTTP statuses 100..=599, one counter each.
const FIRST_STATUS: u16 = 100;
const STATUSES: usize = 500;

/// The lower edge of bucket `i`, in microseconds.
fn lower_us(i: usize) -> f64 {
    FLOOR_US * (i as f64 / BUCKETS_PER_OCTAVE).exp2()
}

fn bucket(elapsed: Duration) -> usize {
    let us = elapsed.as_secs_f64() * 1e6;
    if us <= FLOOR_US {
        return 0;
    }
    ((us / FLOOR_US).log2() * BUCKETS_PER_OCTAVE).min((BUCKETS - 1) as f64) as usize
}

/// One version's recordings: successful latencies and every answer's status.
struct Recorder {
    latency: [AtomicU64; BUCKETS],
    statuses: [AtomicU64; STATUSES],
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            latency: std::array::from_fn(|_| AtomicU64::new(0)),
            statuses: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// Every model version's recordings, by model name then version (looked up with `&str`s, so
/// recording allocates nothing once a version has been seen). Requests that failed before a
/// version was chosen count under the version `""`.
#[derive(Default)]
pub struct LatencyHistograms {
    models: RwLock<HashMap<String, HashMap<String, Arc<Recorder>>>>,
}

impl LatencyHistograms {
    fn recorder(&self, model: &str, version: &str) -> Arc<Recorder> {
        let found = self
            .models
            .read()
            .get(model)
            .and_then(|versions| versions.get(version))
            .cloned();
        match found {
            Some(r) => r,
            None => self
                .models
                .write()
                .entry(model.to_string())
                .or_default()
                .entry(version.to_string())
                .or_default()
                .clone(),
        }
    }

    /// One answered request: its status, and its latency when it succeeded (2xx).
    pub fn record(&self, model: &str, version: &str, status: u16, elapsed: Duration) {
        let recorder = self.recorder(model, version);
        if (200..300).contains(&status) {
            recorder.latency[bucket(elapsed)].fetch_add(1, Relaxed);
        }
        let index = usize::from(status.clamp(FIRST_STATUS, FIRST_STATUS + STATUSES as u16 - 1))
            - usize::from(FIRST_STATUS);
        recorder.statuses[index].fetch_add(1, Relaxed);
    }

    /// The cumulative latency counts of one version; `None` before its first recorded request.
    pub fn counts(&self, model: &str, version: &str) -> Option<Counts> {
        let models = self.models.read();
        let r = models.get(model)?.get(version)?;
        Some(Counts(r.latency.iter().map(|c| c.load(Relaxed)).collect()))
    }

    /// The cumulative status counts of one version; `None` before its first request.
    pub fn statuses(&self, model: &str, version: &str) -> Option<StatusCounts> {
        let models = self.models.read();
        let r = models.get(model)?.get(version)?;
        Some(StatusCounts::read(r))
    }

    /// Latency and status counts of every version of `model` added up (failures before a
    /// version was chosen included); `None` before its first recorded request.
    pub fn model_totals(&self, model: &str) -> Option<(Counts, StatusCounts)> {
        let models = self.models.read();
        let versions = models.get(model)?;
        let mut latency = Counts(vec![0; BUCKETS]);
        let mut statuses = StatusCounts(vec![0; STATUSES]);
        for r in versions.values() {
            for (sum, c) in latency.0.iter_mut().zip(&r.latency) {
                *sum += c.load(Relaxed);
            }
            for (sum, c) in statuses.0.iter_mut().zip(&r.statuses) {
                *sum += c.load(Relaxed);
            }
        }
        Some((latency, statuses))
    }
}

/// Counters now minus the same counters read earlier.
fn difference(now: &[u64], earlier: Option<&[u64]>) -> Vec<u64> {
    match earlier {
        Some(then) => now
            .iter()
            .zip(then)
            .map(|(n, t)| n.saturating_sub(*t))
            .collect(),
        None => now.to_vec(),
    }
}

/// Answers by HTTP status, read at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusCounts(Vec<u64>);

impl StatusCounts {
    fn read(r: &Recorder) -> StatusCounts {
        StatusCounts(r.statuses.iter().map(|c| c.load(Relaxed)).collect())
    }

    /// The answers counted after `earlier` (everything when there is no earlier reading).
    pub fn since(&self, earlier: Option<&StatusCounts>) -> StatusCounts {
        StatusCounts(difference(&self.0, earlier.map(|e| &e.0[..])))
    }

    /// (status, answers) for every status answered at least once, ascending.
    pub fn nonzero(&self) -> Vec<(u16, u64)> {
        self.0
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(i, &n)| (FIRST_STATUS + i as u16, n))
            .collect()
    }

    /// Answers whose status is in `range` (e.g. `400..500` for client errors).
    pub fn in_range(&self, range: std::ops::Range<u16>) -> u64 {
        self.nonzero()
            .into_iter()
            .filter(|(s, _)| range.contains(s))
            .map(|(_, n)| n)
            .sum()
    }
}

/// Bucket counts read at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct Counts(Vec<u64>);

impl Counts {
    /// The requests recorded after `earlier` (everything when there is no earlier reading).
    pub fn since(&self, earlier: Option<&Counts>) -> Counts {
        Counts(difference(&self.0, earlier.map(|e| &e.0[..])))
    }

    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// Adds `other`'s requests (another version's, for a whole engine's percentiles).
    pub fn add(&mut self, other: &Counts) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        for (sum, n) in self.0.iter_mut().zip(&other.0) {
            *sum += n;
        }
    }

    pub fn empty() -> Counts {
        Counts(vec![0; BUCKETS])
    }

    /// The `q`-quantile (0 < q ≤ 1) in milliseconds, `None` when no request was counted.
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut below = 0u64;
        for (i, &n) in self.0.iter().enumerate() {
            if n > 0 && below + n >= rank {
                // Geometric interpolation: buckets are log-spaced.
                let within = (rank - below) as f64 / n as f64;
                let us = lower_us(i) * (within / BUCKETS_PER_OCTAVE).exp2();
                return Some(us / 1e3);
            }
            below += n;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: f64) -> Duration {
        Duration::from_secs_f64(v / 1e3)
    }

    #[test]
    fn quantiles_are_within_a_bucket_of_the_exact_ones() {
        let h = LatencyHistograms::default();
        // 1..=1000 ms: exact p50 = 500 ms, p99 = 990 ms.
        for i in 1..=1000 {
            h.record("m", "1", 200, ms(i as f64));
        }
        let c = h.counts("m", "1").unwrap();
        assert_eq!(c.total(), 1000);
        for (q, exact) in [(0.5, 500.0), (0.99, 990.0)] {
            let got = c.quantile_ms(q).unwrap();
            assert!((got / exact - 1.0).abs() < 0.1, "q{q}: {got} vs {exact}");
        }
    }

    #[test]
    fn versions_add_up_to_one_engine_s_percentiles() {
        let h = LatencyHistograms::default();
        for _ in 0..90 {
            h.record("a", "1", 200, ms(2.0));
        }
        for _ in 0..10 {
            h.record("b", "1", 200, ms(500.0));
        }
        let mut all = Counts::empty();
        assert_eq!(all.quantile_ms(0.5), None);
        all.add(&h.counts("a", "1").unwrap());
        all.add(&h.counts("b", "1").unwrap());
        assert_eq!(all.total(), 100);
        assert!((all.quantile_ms(0.5).unwrap() / 2.0 - 1.0).abs() < 0.1);
        assert!((all.quantile_ms(0.99).unwrap() / 500.0 - 1.0).abs() < 0.1);
    }

    #[test]
    fn a_window_counts_only_the_requests_after_the_earlier_reading() {
        let h = LatencyHistograms::default();
        for _ in 0..100 {
            h.record("m", "1", 200, ms(100.0));
        }
        let before = h.counts("m", "1");
        for _ in 0..10 {
            h.record("m", "1", 200, ms(2.0));
        }
        let window = h.counts("m", "1").unwrap().since(before.as_ref());
        assert_eq!(window.total(), 10);
        let p99 = window.quantile_ms(0.99).unwrap();
        assert!((p99 / 2.0 - 1.0).abs() < 0.1, "{p99}");
        assert_eq!(
            window.since(Some(&window)).quantile_ms(0.5),
            None,
            "an empty window has no quantiles"
        );
    }

    #[test]
    fn versions_and_extremes_are_kept_apart() {
        let h = LatencyHistograms::default();
        h.record("m", "1", 200, Duration::ZERO);
        h.record("m", "2", 200, Duration::from_secs(3600));
        assert!(h.counts("m", "3").is_none() && h.counts("other", "1").is_none());
        let fast = h.counts("m", "1").unwrap().quantile_ms(0.5).unwrap();
        let slow = h.counts("m", "2").unwrap().quantile_ms(0.5).unwrap();
        assert!(fast <= 0.02, "{fast}");
        assert!(slow > 100_000.0, "{slow}");
    }

    #[test]
    fn statuses_count_every_answer_and_only_successes_have_latencies() {
        let h = LatencyHistograms::default();
        for _ in 0..9 {
            h.record("m", "1", 200, ms(1.0));
        }
        h.record("m", "1", 400, ms(1.0));
        h.record("m", "", 404, ms(1.0));
        h.record("m", "2", 503, ms(1.0));
        assert_eq!(h.counts("m", "1").unwrap().total(), 9);
        let one = h.statuses("m", "1").unwrap();
        assert_eq!(one.nonzero(), vec![(200, 9), (400, 1)]);
        let (latency, all) = h.model_totals("m").unwrap();
        assert_eq!(latency.total(), 9);
        assert_eq!(all.in_range(400..500), 2);
        assert_eq!(all.in_range(500..600), 1);
        h.record("m", "1", 400, ms(1.0));
        let window = h.model_totals("m").unwrap().1.since(Some(&all));
        assert_eq!(window.nonzero(), vec![(400, 1)]);
    }
}
