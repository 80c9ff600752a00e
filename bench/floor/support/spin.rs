//! Shared by the benchmark examples (`floor_server`, `ping_pong`): a stand-in for a model run.

use std::time::{Duration, Instant};

/// Keeps this thread busy for `time`, as a model run on it would (a sleep would let the core
/// idle, which a computing one does not).
pub fn spin_for(time: Duration) {
    let start = Instant::now();
    while start.elapsed() < time {
        std::hint::spin_loop();
    }
}
