//! What became of the spans this process recorded, counted by the exporter and read by
//! `/metrics`.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct SpanCounts {
    /// Recorded spans that ended and were handed to the export queue.
    pub ended: AtomicU64,
    /// Taken by the collector.
    pub sent: AtomicU64,
    /// Refused by the collector, or not answered in time.
    pub failed: AtomicU64,
    /// Never queued: the queue was full.
    pub dropped: AtomicU64,
}

/// The process's counts (one export per process).
pub static SPANS: SpanCounts = SpanCounts {
    ended: AtomicU64::new(0),
    sent: AtomicU64::new(0),
    failed: AtomicU64::new(0),
    dropped: AtomicU64::new(0),
};

impl SpanCounts {
    /// Spans queued and not yet sent or failed.
    pub fn queued(&self) -> u64 {
        let done = self.sent.load(Ordering::Relaxed)
            + self.failed.load(Ordering::Relaxed)
            + self.dropped.load(Ordering::Relaxed);
        self.ended.load(Ordering::Relaxed).saturating_sub(done)
    }
}
