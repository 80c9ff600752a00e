//! The epoch ticker: advances the engine's epoch every tick while a call is in progress, which
//! is what makes call deadlines fire (epoch interruption).
//!
//! It ticks only while some call's store exists. A ticker that ran all the time would wake every
//! infergate process 200 times a second (at the default 5 ms tick) whether or not it ever ran a
//! plugin, and every wake-up competes for a core with the request path, in a process that only
//! routes as much as in one that runs plugins. A store holds a [`TickHold`] for its whole life; a
//! call's deadline counts ticks from when its store was made, so parking between calls changes no
//! deadline.

use crate::error::PluginError;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;
use wasmtime::{Engine, EngineWeak};

/// How many stores exist, whether the ticker is parked waiting for one, and whether it must
/// stop (all under one lock, so a stop or a first store can never slip past a parking ticker).
#[derive(Default)]
struct Count {
    stores: usize,
    parked: bool,
    stop: bool,
}

/// The store count, and a way to wake the parked ticker when the first store appears.
struct Gate {
    stores: Mutex<Count>,
    wake: Condvar,
    /// Ticks made so far (for tests: whether the ticker parks).
    ticks: AtomicU64,
}

impl Gate {
    fn stores(&self) -> MutexGuard<'_, Count> {
        // The count stays right even if a holder panicked with the lock held: nothing else is
        // guarded, so a poisoned lock is used as is.
        self.stores.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Keeps the ticker running while it lives: one per call's store.
pub(crate) struct TickHold(Arc<Gate>);

impl Drop for TickHold {
    fn drop(&mut self) {
        let mut count = self.0.stores();
        count.stores = count.stores.saturating_sub(1);
    }
}

/// Owns the ticker thread; dropping it stops the thread.
pub(crate) struct Ticker {
    gate: Arc<Gate>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    pub(crate) fn start(engine: &Engine, tick: Duration) -> Result<Self, PluginError> {
        let gate = Arc::new(Gate {
            stores: Mutex::new(Count::default()),
            wake: Condvar::new(),
            ticks: AtomicU64::new(0),
        });
        let engine = engine.weak();
        let thread = std::thread::Builder::new()
            .name("plugin-epoch".into())
            .spawn({
                let gate = Arc::clone(&gate);
                move || run(&gate, &engine, tick)
            })
            .map_err(|e| PluginError::Internal(format!("starting the epoch ticker: {e}")))?;
        Ok(Ticker {
            gate,
            thread: Some(thread),
        })
    }

    /// Keeps the epoch advancing until the hold is dropped; wakes the ticker if it is parked
    /// (only then: calls in quick succession cost no wake-up each while it is ticking).
    pub(crate) fn hold(&self) -> TickHold {
        let mut count = self.gate.stores();
        count.stores += 1;
        if count.parked {
            count.parked = false;
            self.gate.wake.notify_one();
        }
        TickHold(Arc::clone(&self.gate))
    }
}

fn run(gate: &Gate, engine: &EngineWeak, tick: Duration) {
    loop {
        {
            let mut count = gate.stores();
            while count.stores == 0 && !count.stop {
                count.parked = true;
                count = gate.wake.wait(count).unwrap_or_else(|e| e.into_inner());
            }
            count.parked = false;
            if count.stop {
                return;
            }
        }
        std::thread::sleep(tick);
        match engine.upgrade() {
            Some(engine) => engine.increment_epoch(),
            None => return,
        }
        gate.ticks.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.gate.stores().stop = true;
        self.gate.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ticks(ticker: &Ticker) -> u64 {
        ticker.gate.ticks.load(Ordering::Relaxed)
    }

    fn wait_for(what: &str, done: impl Fn() -> bool) {
        for _ in 0..2000 {
            if done() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("{what} never happened");
    }

    #[test]
    fn ticks_only_while_a_store_holds_it_and_stops_when_dropped() {
        let engine = Engine::new(wasmtime::Config::new().epoch_interruption(true)).unwrap();
        let ticker = Ticker::start(&engine, Duration::from_millis(1)).unwrap();
        // Parked: fifty ticks' time passes without one.
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(ticks(&ticker), 0, "no store, no ticks");
        let first = ticker.hold();
        let second = ticker.hold();
        wait_for("ticks while stores exist", || ticks(&ticker) >= 3);
        drop(first);
        let before = ticks(&ticker);
        wait_for("ticks while one store is left", || {
            ticks(&ticker) > before + 2
        });
        drop(second);
        // At most the tick in progress completes after the last store goes.
        let at_drop = ticks(&ticker);
        std::thread::sleep(Duration::from_millis(100));
        let parked = ticks(&ticker);
        assert!(
            parked <= at_drop + 1,
            "parked again once the last store is gone"
        );
        // A later store wakes it again, and dropping the ticker ends the thread while parked
        // or ticking.
        let again = ticker.hold();
        wait_for("ticks again", || ticks(&ticker) > parked);
        drop(ticker);
        drop(again);
    }
}
