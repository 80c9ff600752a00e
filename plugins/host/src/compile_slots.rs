//! A bound on Cranelift compiles running at once. One compile of a large component takes
//! hundreds of MB and every core (wasmtime compiles functions in parallel), so uploads beyond
//! the bound wait for a slot, for a bounded time, then fail as busy instead of piling up.

use crate::error::PluginError;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

pub(crate) struct CompileSlots {
    limit: usize,
    wait: Duration,
    busy: Mutex<usize>,
    freed: Condvar,
}

/// One compile's slot; dropping it lets a waiting compile start.
pub(crate) struct CompileSlot<'a> {
    slots: &'a CompileSlots,
}

impl CompileSlots {
    /// `limit` compiles at once (at least one); a compile waits at most `wait` for a slot.
    pub(crate) fn new(limit: usize, wait: Duration) -> CompileSlots {
        CompileSlots {
            limit: limit.max(1),
            wait,
            busy: Mutex::new(0),
            freed: Condvar::new(),
        }
    }

    /// Takes a slot, waiting for one up to the configured time.
    pub(crate) fn acquire(&self) -> Result<CompileSlot<'_>, PluginError> {
        let deadline = Instant::now() + self.wait;
        // The counter stays consistent even if a holder panicked: it is only
        // changed by whole `+= 1` / `-= 1` steps.
        let mut busy = self.busy.lock().unwrap_or_else(PoisonError::into_inner);
        while *busy >= self.limit {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(PluginError::CompilerBusy {
                    limit: self.limit,
                    waited: self.wait,
                });
            }
            busy = self
                .freed
                .wait_timeout(busy, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        *busy += 1;
        Ok(CompileSlot { slots: self })
    }
}

impl Drop for CompileSlot<'_> {
    fn drop(&mut self) {
        let mut busy = self
            .slots
            .busy
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *busy -= 1;
        self.slots.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn a_full_set_refuses_after_the_wait_and_a_freed_slot_is_reused() {
        let slots = CompileSlots::new(1, Duration::from_millis(20));
        let held = slots.acquire().expect("first slot");
        match slots.acquire() {
            Err(PluginError::CompilerBusy { limit: 1, .. }) => {}
            Err(e) => panic!("expected CompilerBusy, got {e}"),
            Ok(_) => panic!("a second slot was handed out over the limit of one"),
        }
        drop(held);
        assert!(slots.acquire().is_ok(), "the freed slot is available again");
    }

    #[test]
    fn compiles_beyond_the_limit_wait_and_never_run_together() {
        let slots = Arc::new(CompileSlots::new(2, Duration::from_secs(60)));
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (slots, running, peak) = (slots.clone(), running.clone(), peak.clone());
                std::thread::spawn(move || {
                    let _slot = slots.acquire().expect("a slot within the wait");
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(5));
                    running.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        for t in threads {
            t.join().expect("no panic");
        }
        let peak = peak.load(Ordering::SeqCst);
        assert!((1..=2).contains(&peak), "peak {peak} compiles at once");
    }
}
