//! The batch clock on the async runtime: a timerfd registered with tokio's I/O driver, armed for
//! the moment a waiting batch is due, whose expiry wakes a tokio worker that runs the batch
//! itself (the scheduler's [`ClockTarget::on_clock`]).
//!
//! Why not the instance thread's own timed wait: with a queue delay, every batch would cost
//! that thread two sleeps and wake-ups (one to learn that a batch has started waiting, one when
//! it is due), and its answers would then wake a tokio worker from another thread. The tokio
//! worker this clock wakes would be woken for the answers anyway; it runs the batch and answers
//! on its own run queue, and whoever queues the batch's first request arms the timer with one
//! system call instead of waking a thread (`bench/http_floor.py` measures both designs on the
//! floor server: the timerfd saves a few µs per request).
//!
//! Tokio's own timer is not used: it ticks in whole milliseconds, too coarse for a queue delay of
//! a few hundred microseconds.
//!
//! Only on Linux, on a multi-threaded runtime; elsewhere [`BatchClock::start`] gives nothing and
//! the instance threads keep the time with their own timed waits. If the clock's task ever ends
//! (the runtime shuts down, a model run panics on it), it says so ([`BatchClock::alive`]) and the
//! scheduler goes back to its instance threads' timers.

use crate::timerfd::Timer;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

/// What the clock calls: a version's scheduler.
pub(crate) trait ClockTarget: Send + Sync + 'static {
    /// The version's label, for logs.
    fn label(&self) -> &str;
    /// The clock fired: run or hand over the batch that is due, re-arm for a later one.
    fn on_clock(&self);
    /// The clock's task ended: the instance threads keep the time from now on.
    fn clock_stopped(&self);
}

/// A version's batch clock: arm it for an instant, and its task calls the scheduler then.
pub(crate) struct BatchClock {
    shared: Arc<Shared>,
}

struct Shared {
    timer: Timer,
    alive: AtomicBool,
}

impl BatchClock {
    /// Starts the clock's task on the current runtime, for `scheduler`; None where there is no
    /// multi-threaded runtime here or no timerfd on this system (logged).
    pub fn start<S: ClockTarget>(scheduler: Weak<S>) -> Option<BatchClock> {
        let handle = tokio::runtime::Handle::try_current().ok()?;
        if handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
            return None;
        }
        let _runtime = handle.enter();
        let timer = match Timer::new() {
            Ok(timer) => timer,
            Err(e) => {
                tracing::debug!(error = %e, "no batch clock on the runtime: instance threads keep the time");
                return None;
            }
        };
        let shared = Arc::new(Shared {
            timer,
            alive: AtomicBool::new(true),
        });
        let task = shared.clone();
        handle.spawn(async move {
            // However the task ends, returning or dropped with its runtime, the scheduler learns
            // that nobody keeps the time here any more.
            let _stopped = Stopped {
                shared: task.clone(),
                scheduler: scheduler.clone(),
            };
            task.timer
                .run(|| {
                    let Some(scheduler) = scheduler.upgrade() else {
                        return false;
                    };
                    // A model run that panics here must not leave batches waiting for a clock
                    // that is gone: the task ends, and the instance threads take over.
                    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        scheduler.on_clock()
                    }));
                    if ran.is_err() {
                        tracing::error!(model = %scheduler.label(), "a batch run on the batch clock panicked; instance threads keep the time from now on");
                    }
                    ran.is_ok()
                })
                .await;
        });
        Some(BatchClock { shared })
    }

    /// Whether its task still runs: if not, arming it would wake nobody.
    pub fn alive(&self) -> bool {
        self.shared.alive.load(Ordering::Acquire)
    }

    /// Makes the task call the scheduler at `at` (at once if it has passed), replacing any
    /// earlier setting.
    pub fn arm(&self, at: Instant) {
        self.shared
            .timer
            .arm(at.saturating_duration_since(Instant::now()));
    }
}

/// Marks the clock stopped when its task ends.
struct Stopped<S: ClockTarget> {
    shared: Arc<Shared>,
    scheduler: Weak<S>,
}

impl<S: ClockTarget> Drop for Stopped<S> {
    fn drop(&mut self) {
        self.shared.alive.store(false, Ordering::Release);
        if let Some(scheduler) = self.scheduler.upgrade() {
            scheduler.clock_stopped();
        }
    }
}

impl Drop for BatchClock {
    /// The scheduler is gone: wake the task so that it sees so and ends.
    fn drop(&mut self) {
        self.shared.timer.arm(std::time::Duration::ZERO);
    }
}
