//! Keeps an instance thread awake for a moment after it runs out of work, when the requests it
//! serves tend to arrive right after it answers.
//!
//! Token-by-token generation is a chain of dependent requests: the caller gets one answer,
//! samples, and queues the next request some tens of microseconds later. An instance that has
//! gone to sleep on the queue's condition variable must then be woken by the kernel, which can
//! cost a sizeable share of a small model's own step time (tens to a hundred and more µs on a
//! busy VM; the queue time of `bench/streaming.rs`'s text generation). Spinning on the queue's
//! push counter for up to `limit` catches the next request without a sleep and a wake-up.
//!
//! Spinning burns a core, so it is adaptive: an instance spins only while the idle gaps it has
//! seen recently were shorter than `limit` (the last one decides). A model fed by independent
//! clients with longer gaps never spins; a gap that turns short again turns spinning back on.
//! Nor does an instance whose model batches with a queue delay (`BatchPolicy::
//! lone_request_runs_at_once`): the request it would notice sooner waits for the delay anyway.

use std::time::{Duration, Instant};

/// Per instance thread: whether to spin at the start of the next idle period.
#[derive(Debug)]
pub(crate) struct IdleSpin {
    limit: Duration,
    worthwhile: bool,
}

impl IdleSpin {
    pub fn new(limit: Duration) -> IdleSpin {
        IdleSpin {
            limit,
            worthwhile: !limit.is_zero(),
        }
    }

    /// How long to spin when going idle now; zero: sleep at once.
    pub fn budget(&self) -> Duration {
        if self.worthwhile {
            self.limit
        } else {
            Duration::ZERO
        }
    }

    /// Records how long the idle period that just ended lasted.
    pub fn observe(&mut self, gap: Duration) {
        self.worthwhile = !self.limit.is_zero() && gap <= self.limit;
    }
}

/// Spins until `changed()` is true or `budget` has passed; true if it changed.
pub(crate) fn spin_until(budget: Duration, changed: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    loop {
        // Reading the clock costs more than a check: look a few times between readings.
        for _ in 0..32 {
            if changed() {
                return true;
            }
            std::hint::spin_loop();
        }
        if start.elapsed() >= budget {
            return changed();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn spins_only_while_gaps_stay_short() {
        let mut spin = IdleSpin::new(Duration::from_micros(100));
        assert_eq!(spin.budget(), Duration::from_micros(100));
        spin.observe(Duration::from_millis(5));
        assert_eq!(
            spin.budget(),
            Duration::ZERO,
            "a long gap turns spinning off"
        );
        spin.observe(Duration::from_micros(30));
        assert_eq!(
            spin.budget(),
            Duration::from_micros(100),
            "a short one back on"
        );
        let mut off = IdleSpin::new(Duration::ZERO);
        assert_eq!(off.budget(), Duration::ZERO);
        off.observe(Duration::ZERO);
        assert_eq!(off.budget(), Duration::ZERO, "a zero limit never spins");
    }

    #[test]
    fn spinning_ends_on_a_change_or_at_the_budget() {
        assert!(!spin_until(Duration::from_micros(200), || false));
        let flag = Arc::new(AtomicBool::new(false));
        let setter = {
            let flag = flag.clone();
            std::thread::spawn(move || flag.store(true, Ordering::Release))
        };
        // Generous budget: the other thread's store ends the spin long before it.
        assert!(spin_until(Duration::from_secs(10), || flag.load(Ordering::Acquire)));
        setter.join().unwrap();
    }
}
