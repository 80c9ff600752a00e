//! Per model-version counters, kept with atomics so the hot path never locks. The shape follows
//! Triton's statistics extension, which perf_analyzer reads.

use parking_lot::Mutex;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Default)]
struct Counter {
    count: AtomicU64,
    ns: AtomicU64,
}

impl Counter {
    fn add(&self, d: Duration) {
        self.count.fetch_add(1, Relaxed);
        self.ns.fetch_add(d.as_nanos() as u64, Relaxed);
    }
    fn read(&self) -> StatDuration {
        StatDuration {
            count: self.count.load(Relaxed),
            ns: self.ns.load(Relaxed),
        }
    }
}

#[derive(Default)]
pub struct StatsRecorder {
    success: Counter,
    fail: Counter,
    queue: Counter,
    compute_input: Counter,
    compute_infer: Counter,
    compute_output: Counter,
    inference_count: AtomicU64,
    execution_count: AtomicU64,
    last_inference_ms: AtomicU64,
    /// Per executed batch size; locked once per execution, not per request.
    batches: Mutex<BTreeMap<u64, BatchCounters>>,
}

#[derive(Default, Clone, Copy)]
struct BatchCounters {
    compute_input: StatDuration,
    compute_infer: StatDuration,
    compute_output: StatDuration,
}

impl StatDuration {
    fn add(&mut self, d: Duration) {
        self.count += 1;
        self.ns += d.as_nanos() as u64;
    }
}

/// Timings of one executed request, recorded when it completes. A request that ran in a batch
/// carries the batch's compute times, as Triton reports them.
pub struct RequestTimings {
    pub queue: Duration,
    pub compute_input: Duration,
    pub compute_infer: Duration,
    pub compute_output: Duration,
    pub total: Duration,
    /// Samples in the request (its batch dimension, or 1).
    pub samples: u64,
}

impl StatsRecorder {
    pub fn success(&self, t: &RequestTimings) {
        self.success.add(t.total);
        self.queue.add(t.queue);
        self.compute_input.add(t.compute_input);
        self.compute_infer.add(t.compute_infer);
        self.compute_output.add(t.compute_output);
        self.inference_count.fetch_add(t.samples, Relaxed);
        self.touch();
    }

    /// Counts one execution of the session (a batch counts once) of `batch_size` samples.
    pub fn execution(&self, batch_size: u64, input: Duration, infer: Duration, output: Duration) {
        self.execution_count.fetch_add(1, Relaxed);
        let mut batches = self.batches.lock();
        let entry = batches.entry(batch_size).or_default();
        entry.compute_input.add(input);
        entry.compute_infer.add(infer);
        entry.compute_output.add(output);
    }

    /// Counts an execution that failed (no batch statistics: Triton reports successes only).
    pub fn failed_execution(&self) {
        self.execution_count.fetch_add(1, Relaxed);
    }

    pub fn failure(&self, total: Duration) {
        self.fail.add(total);
        self.touch();
    }

    fn touch(&self) {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        self.last_inference_ms.store(ms, Relaxed);
    }

    pub fn snapshot(&self) -> ModelStats {
        ModelStats {
            last_inference: self.last_inference_ms.load(Relaxed),
            inference_count: self.inference_count.load(Relaxed),
            execution_count: self.execution_count.load(Relaxed),
            success: self.success.read(),
            fail: self.fail.read(),
            queue: self.queue.read(),
            compute_input: self.compute_input.read(),
            compute_infer: self.compute_infer.read(),
            compute_output: self.compute_output.read(),
            batch_stats: self
                .batches
                .lock()
                .iter()
                .map(|(&batch_size, c)| BatchStats {
                    batch_size,
                    compute_input: c.compute_input,
                    compute_infer: c.compute_infer,
                    compute_output: c.compute_output,
                })
                .collect(),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct StatDuration {
    pub count: u64,
    pub ns: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ModelStats {
    pub last_inference: u64,
    pub inference_count: u64,
    pub execution_count: u64,
    pub success: StatDuration,
    pub fail: StatDuration,
    pub queue: StatDuration,
    pub compute_input: StatDuration,
    pub compute_infer: StatDuration,
    pub compute_output: StatDuration,
    /// Executions per batch size, ascending, in Triton's `batch_stats` shape.
    pub batch_stats: Vec<BatchStats>,
}

/// Executions of one batch size: each counter's `count` is the number of executions.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct BatchStats {
    pub batch_size: u64,
    pub compute_input: StatDuration,
    pub compute_infer: StatDuration,
    pub compute_output: StatDuration,
}
