//! The queue mirrored copies wait in for a runner (`crate::traffic::spawn`): short and bounded,
//! so that a copy is shed (and counted) rather than ever delaying a caller.

use crate::traffic_metrics::{MirrorOutcome, TrafficMetrics};
use infergate_engine::Tensor;
use infergate_store::models::ModelRecord;
use parking_lot::Mutex;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Copies waiting for a runner; more are shed.
pub const MIRROR_QUEUE: usize = 32;
/// Copies running at once (each on its own task, at the mirror version's lowest priority).
pub const MIRROR_RUNNERS: usize = 4;

/// A copy of a request for the mirror's version.
pub struct MirrorJob {
    pub record: Arc<ModelRecord>,
    pub inputs: Vec<Tensor>,
    pub outputs: Vec<String>,
}

pub struct Mirrors {
    sender: mpsc::Sender<MirrorJob>,
    receiver: Mutex<Option<mpsc::Receiver<MirrorJob>>>,
}

impl Default for Mirrors {
    fn default() -> Mirrors {
        let (sender, receiver) = mpsc::channel(MIRROR_QUEUE);
        Mirrors {
            sender,
            receiver: Mutex::new(Some(receiver)),
        }
    }
}

impl Mirrors {
    /// Queues `job`, or sheds it (counted in `metrics`) when `busy` or the queue is full.
    pub fn send(&self, busy: bool, job: MirrorJob, metrics: &TrafficMetrics) {
        let (name, version) = (job.record.name.clone(), job.record.version);
        if busy || self.sender.try_send(job).is_err() {
            metrics.mirror(&name, version, MirrorOutcome::Shed, None);
        }
    }

    /// The receiving end, for the one runner (None once taken).
    pub fn take_receiver(&self) -> Option<mpsc::Receiver<MirrorJob>> {
        self.receiver.lock().take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::registry::Registry;

    fn job(version: u64) -> MirrorJob {
        MirrorJob {
            record: Arc::new(ModelRecord {
                name: "m".into(),
                version,
                sha256: String::new(),
                size_bytes: 0,
                signature: Default::default(),
                config: serde_json::Value::Null,
                created_at: 0,
            }),
            inputs: Vec::new(),
            outputs: Vec::new(),
        }
    }

    #[test]
    fn copies_are_shed_when_busy_or_the_queue_is_full() {
        let mut registry = Registry::default();
        let metrics = TrafficMetrics::register(&mut registry);
        let mirrors = Mirrors::default();
        mirrors.send(true, job(2), &metrics);
        for _ in 0..MIRROR_QUEUE + 3 {
            mirrors.send(false, job(2), &metrics);
        }
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        // One shed for being busy, three for the full queue; the queue holds the rest.
        assert!(
            text.contains("mirror_requests_total{model=\"m\",version=\"2\",outcome=\"shed\"} 4"),
            "{text}"
        );
        let mut receiver = mirrors.take_receiver().expect("the receiver");
        assert!(mirrors.take_receiver().is_none(), "one runner");
        let mut queued = 0;
        while receiver.try_recv().is_ok() {
            queued += 1;
        }
        assert_eq!(queued, MIRROR_QUEUE);
    }
}
