//! The bounded priority queue of one model version. Requests wait here until an instance takes
//! them into a batch; a request leaves the queue exactly once, either taken for execution or
//! abandoned (client gone, timed out), decided by a compare-and-swap on its [`Ticket`] so a
//! request can never both time out and run.

use crate::error::{EngineError, Result};
use crate::pool::Pool;
use crate::postprocess::PostPlan;
use crate::tensor::{DataType, Tensor};
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;

const QUEUED: u8 = 0;
const TAKEN: u8 = 1;
const ABANDONED: u8 = 2;

/// Who owns a queued request's fate: the instance that takes it or the caller that gives up.
#[derive(Debug, Default)]
pub(crate) struct Ticket(AtomicU8);

impl Ticket {
    fn transition(&self, to: u8) -> bool {
        self.0
            .compare_exchange(QUEUED, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Claims the request for execution; false if the caller already gave up.
    pub fn take(&self) -> bool {
        self.transition(TAKEN)
    }

    /// Gives the request up; false if an instance already took it (it will run).
    pub fn abandon(&self) -> bool {
        self.transition(ABANDONED)
    }

    pub fn is_queued(&self) -> bool {
        self.0.load(Ordering::Acquire) == QUEUED
    }
}

/// What must match for requests to share a batch: every input's datatype and non-batch
/// dimensions, and the requested outputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BatchKey {
    inputs: Vec<(String, DataType, Vec<i64>)>,
    outputs: Vec<String>,
}

impl BatchKey {
    pub fn of(inputs: &[Tensor], outputs: &[String]) -> BatchKey {
        let mut inputs: Vec<_> = inputs
            .iter()
            .map(|t| {
                let rest = t.shape.get(1..).unwrap_or_default().to_vec();
                (t.name.clone(), t.datatype, rest)
            })
            .collect();
        inputs.sort_by(|a, b| a.0.cmp(&b.0));
        BatchKey {
            inputs,
            outputs: outputs.to_vec(),
        }
    }
}

/// One request waiting for an instance.
pub(crate) struct Request {
    pub inputs: Vec<Tensor>,
    /// Model outputs to fetch.
    pub outputs: Vec<String>,
    /// Post-ops to run on them before answering, when the request asked for their outputs.
    pub post: Option<PostPlan>,
    /// Samples along dimension 0 (1 for a model that does not batch).
    pub samples: usize,
    pub key: BatchKey,
    /// Queue level: 1 is served first. Requests past a DELAY timeout move to `u32::MAX`.
    pub level: u32,
    pub enqueued: Instant,
    pub deadline: Option<Instant>,
    pub ticket: Arc<Ticket>,
    pub reply: oneshot::Sender<Result<Vec<Tensor>>>,
    /// The caller's span that takes this request's figures ([`figures_span`]), or none.
    pub span: tracing::Span,
}

/// The fields a caller's span declares to be given a request's figures when its batch ran:
/// microseconds queued and in each stage, the batch's samples and requests.
pub const SPAN_FIGURES: [&str; 6] = [
    "queue_us",
    "compute_input_us",
    "compute_infer_us",
    "compute_output_us",
    "batch_size",
    "batch_requests",
];

/// The current span when it declares [`SPAN_FIGURES`] (a trace's span around the engine call),
/// else none: the executor records a request's figures only where someone reads them.
pub(crate) fn figures_span() -> tracing::Span {
    let current = tracing::Span::current();
    match current.metadata() {
        Some(m) if m.fields().field(SPAN_FIGURES[0]).is_some() => current,
        _ => tracing::Span::none(),
    }
}

impl Request {
    /// Whether anyone still waits for this request's result.
    pub fn is_wanted(&self) -> bool {
        self.ticket.is_queued() && !self.reply.is_closed()
    }
}

/// The queue's contents; batch formation ([`crate::batcher`]) works on it under the lock.
#[derive(Default)]
pub(crate) struct Levels {
    /// By queue level; a level emptied by a batch stays, empty, for the next request.
    pub levels: BTreeMap<u32, VecDeque<Request>>,
    pub closed: bool,
    /// The version's executors, under the same lock so that a batch and an executor to run it
    /// are taken together.
    pub pool: Pool,
}

impl Levels {
    pub fn len(&self) -> usize {
        self.levels.values().map(VecDeque::len).sum()
    }

    /// Requests in service order: by level, then arrival.
    pub fn iter(&self) -> impl Iterator<Item = &Request> {
        self.levels.values().flatten()
    }
}

pub(crate) struct RequestQueue {
    model: String,
    state: Mutex<Levels>,
    changed: Condvar,
    /// Requests ever pushed: an instance spinning for work watches it without the lock.
    pushes: AtomicU64,
}

impl RequestQueue {
    pub fn new(model: &str) -> RequestQueue {
        RequestQueue {
            model: model.to_string(),
            state: Mutex::new(Levels::default()),
            changed: Condvar::new(),
            pushes: AtomicU64::new(0),
        }
    }

    /// Adds a request unless `capacity` requests already wait. Requests nobody wants any more
    /// do not count: they are dropped first. A full queue answers with `retry_after(queued,
    /// serving instances)`. Wakes nobody: the caller decides who runs it.
    pub fn enqueue(
        &self,
        state: &mut Levels,
        request: Request,
        capacity: usize,
        retry_after: impl FnOnce(usize, usize) -> std::time::Duration,
    ) -> Result<()> {
        if state.closed {
            return Err(EngineError::NotLoaded(self.model.clone()));
        }
        if state.len() >= capacity {
            for level in state.levels.values_mut() {
                level.retain(Request::is_wanted);
            }
            let queued = state.len();
            if queued >= capacity {
                return Err(EngineError::QueueFull {
                    model: self.model.clone(),
                    queued,
                    retry_after: retry_after(queued, state.pool.serving()),
                });
            }
        }
        state
            .levels
            .entry(request.level)
            .or_default()
            .push_back(request);
        self.pushes.fetch_add(1, Ordering::Release);
        Ok(())
    }

    pub fn lock(&self) -> MutexGuard<'_, Levels> {
        self.state.lock()
    }

    pub fn wait(&self, guard: &mut MutexGuard<'_, Levels>, until: Option<Instant>) {
        match until {
            Some(t) => {
                self.changed.wait_until(guard, t);
            }
            None => self.changed.wait(guard),
        }
    }

    /// Requests pushed so far; read under the lock to know what a spin is waiting for.
    pub fn pushes(&self) -> u64 {
        self.pushes.load(Ordering::Acquire)
    }

    /// Wakes every waiting instance (a config change, a retirement, shutdown).
    pub fn notify(&self) {
        self.changed.notify_all();
    }

    /// Wakes one waiting instance: there is work, and any of them can take it.
    pub fn notify_one(&self) {
        self.changed.notify_one();
    }

    /// Stops accepting requests; instances exit once nothing is left.
    pub fn close(&self) {
        self.state.lock().closed = true;
        self.changed.notify_all();
    }

    pub fn len(&self) -> usize {
        self.state.lock().iter().filter(|r| r.is_wanted()).count()
    }
}
