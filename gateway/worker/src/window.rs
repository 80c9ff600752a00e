//! A worker's request latencies between two heartbeats, for the report's requests/s, p50 and
//! p99, and the requests it answered since it started (`answered_total`: summed over workers,
//! it tells how many requests ran twice after a manager retried them).

use std::time::{Duration, Instant};

/// Samples kept per interval; beyond it the rate still counts every request, the percentiles
/// come from the first ones.
const MAX_SAMPLES: usize = 1 << 16;

pub struct LatencyWindow {
    samples: Vec<Duration>,
    count: u64,
    /// Every request answered since the worker started.
    total: u64,
    since: Instant,
}

/// What one interval saw.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub requests_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub answered_total: u64,
}

impl LatencyWindow {
    pub fn new(now: Instant) -> LatencyWindow {
        LatencyWindow {
            samples: Vec::new(),
            count: 0,
            total: 0,
            since: now,
        }
    }

    pub fn record(&mut self, elapsed: Duration) {
        self.count += 1;
        self.total += 1;
        if self.samples.len() < MAX_SAMPLES {
            self.samples.push(elapsed);
        }
    }

    /// The interval's figures; starts the next interval at `now`.
    pub fn take(&mut self, now: Instant) -> Summary {
        let seconds = now.saturating_duration_since(self.since).as_secs_f64();
        let mut samples = std::mem::take(&mut self.samples);
        samples.sort_unstable();
        let at = |q: f64| {
            samples
                .get(((samples.len() as f64 - 1.0) * q).round() as usize)
                .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
        };
        let summary = Summary {
            requests_per_s: if seconds > 0.0 {
                self.count as f64 / seconds
            } else {
                0.0
            },
            p50_ms: at(0.5),
            p99_ms: at(0.99),
            answered_total: self.total,
        };
        self.count = 0;
        self.since = now;
        summary
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_gives_rate_and_percentiles_then_starts_afresh() {
        let t0 = Instant::now();
        let mut w = LatencyWindow::new(t0);
        for ms in 1..=100 {
            w.record(Duration::from_millis(ms));
        }
        let s = w.take(t0 + Duration::from_secs(2));
        assert_eq!(s.requests_per_s, 50.0);
        assert!((s.p50_ms - 51.0).abs() < 1.01, "{s:?}");
        assert!((s.p99_ms - 99.0).abs() < 1.01, "{s:?}");
        assert_eq!(s.answered_total, 100);
        let empty = w.take(t0 + Duration::from_secs(3));
        assert_eq!(
            (empty.requests_per_s, empty.p50_ms, empty.p99_ms),
            (0.0, 0.0, 0.0)
        );
        // The total goes on across intervals.
        assert_eq!(empty.answered_total, 100);
        w.record(Duration::from_millis(1));
        assert_eq!(w.take(t0 + Duration::from_secs(4)).answered_total, 101);
    }
}
