//! What keeps models loaded only while they are wanted and within the host's means: the memory
//! budget that admits instances before they load, and the reaper that unloads idle versions.

use crate::error::{EngineError, Result};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

/// Host memory promised to loaded instances. Instances reserve their estimate *before* loading,
/// so two concurrent loads cannot both squeeze under the limit, and give it back when their
/// thread ends (the session is dropped with it).
#[derive(Debug)]
pub(crate) struct MemoryBudget {
    limit: Option<u64>,
    used: Mutex<u64>,
}

impl MemoryBudget {
    pub fn new(limit: Option<u64>) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget {
            limit,
            used: Mutex::new(0),
        })
    }

    pub fn reserve(self: &Arc<Self>, model: &str, bytes: u64) -> Result<Reservation> {
        let mut used = self.used.lock();
        if let Some(limit) = self.limit {
            let available = limit.saturating_sub(*used);
            if bytes > available {
                return Err(EngineError::OverMemoryBudget {
                    model: model.to_string(),
                    needed: bytes,
                    available,
                    budget: limit,
                });
            }
        }
        *used += bytes;
        Ok(Reservation {
            budget: self.clone(),
            bytes,
        })
    }

    pub fn used(&self) -> u64 {
        *self.used.lock()
    }

    pub fn limit(&self) -> Option<u64> {
        self.limit
    }
}

/// Memory held by one instance; released on drop.
#[derive(Debug)]
pub(crate) struct Reservation {
    budget: Arc<MemoryBudget>,
    bytes: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut used = self.budget.used.lock();
        *used = used.saturating_sub(self.bytes);
    }
}

/// Estimated host memory of one instance of a model file: its size times `factor` (weights are
/// copied into the session and ORT adds arenas and optimised graphs on top).
pub(crate) fn estimate_instance_bytes(file_len: u64, factor: f64) -> u64 {
    (file_len as f64 * factor.max(1.0)).ceil() as u64
}

/// The process's resident set size, for logging what a load really cost (Linux only; other
/// systems report `None`). Concurrent loads blur it, so it informs operators but never decides.
pub(crate) fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// How often the reaper looks for idle versions. Unload times are in whole seconds, so a
/// quarter second keeps the error small without measurable cost.
pub(crate) const REAPER_PERIOD: Duration = Duration::from_millis(250);

/// Runs `sweep` every [`REAPER_PERIOD`] on its own thread until `sweep` returns false (the
/// engine is gone) or the returned sender is dropped.
pub(crate) fn start_reaper(
    mut sweep: impl FnMut() -> bool + Send + 'static,
) -> Result<crossbeam_channel::Sender<()>> {
    let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
    std::thread::Builder::new()
        .name("model-reaper".into())
        .spawn(move || {
            while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                stopped.recv_timeout(REAPER_PERIOD)
            {
                if !sweep() {
                    break;
                }
            }
        })
        .map_err(|e| EngineError::Internal(format!("starting the reaper thread: {e}")))?;
    Ok(stop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_refuses_beyond_the_limit_and_frees_on_drop() {
        let budget = MemoryBudget::new(Some(100));
        let a = budget.reserve("a", 60).unwrap();
        let e = budget.reserve("b", 50).unwrap_err();
        assert!(matches!(
            e,
            EngineError::OverMemoryBudget {
                needed: 50,
                available: 40,
                budget: 100,
                ..
            }
        ));
        assert!(e.to_string().contains("'b'"), "{e}");
        drop(a);
        assert_eq!(budget.used(), 0);
        let _b = budget.reserve("b", 50).unwrap();
        assert_eq!(budget.used(), 50);
        let unlimited = MemoryBudget::new(None);
        assert!(unlimited.reserve("c", u64::MAX / 2).is_ok());
    }

    #[test]
    fn estimate_never_goes_below_the_file() {
        assert_eq!(estimate_instance_bytes(1000, 2.0), 2000);
        assert_eq!(estimate_instance_bytes(1000, 0.1), 1000);
    }
}
