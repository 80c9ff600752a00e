//! Whether a worker is alive, judged by the manager's own clock.
//!
//! A worker's heartbeat says what it believes (ready, draining); the manager trusts it only
//! while heartbeats keep arriving. The age of the last one, measured on the manager, decides
//! `lost`: a hung host (SIGSTOP, a partition) sends nothing and so reports nothing, and its last
//! report must not keep it in routing.

use std::time::Duration;

// The states a worker reports and the manager routes by are part of the API's answers.
pub use infergate_api_types::workers::{Reported, WorkerState};

/// How often workers report and how many reports may be missed before a worker is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heartbeat {
    pub interval: Duration,
    pub missed: u32,
}

impl Default for Heartbeat {
    /// Every 2 s, lost after three missed (6 s), as the workers issue asks.
    fn default() -> Self {
        Heartbeat {
            interval: Duration::from_secs(2),
            missed: 3,
        }
    }
}

impl Heartbeat {
    /// The age of the last heartbeat after which a worker is lost.
    pub fn deadline(&self) -> Duration {
        self.interval.saturating_mul(self.missed)
    }

    /// The state of a worker whose last heartbeat, `age` ago on the manager's clock, said
    /// `reported`.
    pub fn judge(&self, reported: Reported, age: Duration) -> WorkerState {
        if age >= self.deadline() {
            return WorkerState::Lost;
        }
        match reported {
            Reported::Ready => WorkerState::Ready,
            Reported::Draining => WorkerState::Draining,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_missed_intervals_make_a_worker_lost_whatever_it_said() {
        let hb = Heartbeat::default();
        let s = Duration::from_secs;
        assert_eq!(hb.judge(Reported::Ready, s(0)), WorkerState::Ready);
        assert_eq!(
            hb.judge(Reported::Ready, Duration::from_millis(5999)),
            WorkerState::Ready
        );
        assert_eq!(hb.judge(Reported::Ready, s(6)), WorkerState::Lost);
        assert_eq!(hb.judge(Reported::Draining, s(1)), WorkerState::Draining);
        assert_eq!(hb.judge(Reported::Draining, s(60)), WorkerState::Lost);
        assert!(WorkerState::Ready.routable());
        assert!(!WorkerState::Draining.routable() && !WorkerState::Lost.routable());
    }

    #[test]
    fn a_huge_interval_does_not_overflow() {
        let hb = Heartbeat {
            interval: Duration::MAX,
            missed: 3,
        };
        assert_eq!(hb.deadline(), Duration::MAX);
        assert_eq!(
            hb.judge(Reported::Ready, Duration::from_secs(1)),
            WorkerState::Ready
        );
    }
}
