//! The executors of one version: each a loaded session with what running a batch on it needs,
//! and the pool where idle ones wait, kept under the queue's lock (`crate::queue`) so that
//! taking a batch and an executor to run it is one step. Who runs a batch on them is
//! `crate::instance`'s business.

use crate::lifecycle::Reservation;
use crate::session::OrtSession;
use infergate_kernels::Ops;
use std::time::Instant;

/// One loaded session with what running a batch on it needs. Idle executors wait in the queue's
/// [`Pool`]; whoever runs a batch (an instance thread, or the request's own thread when the
/// version is idle) takes one and puts it back.
pub(crate) struct Executor {
    pub session: OrtSession,
    /// The post-ops on a CUDA stream of this executor's own.
    pub ops: Ops,
    /// Dropped with the session: its memory goes back to the budget.
    pub _reservation: Reservation,
}

/// The executors of one version and the threads that serve its queue, kept under the queue's
/// lock so that taking a batch and an executor to run it is one step.
#[derive(Default)]
pub(crate) struct Pool {
    pub idle: Vec<Executor>,
    /// Executors alive, idle or running a batch.
    pub live: usize,
    /// How many of them are dropped instead of put back when they next finish.
    pub retiring: usize,
    /// Instance threads alive; one leaves whenever there are more than executors.
    pub threads: usize,
    /// The earliest time an instance thread waiting for a batch to fill wakes by itself.
    pub timer: Option<Instant>,
}

impl Pool {
    /// Executors that serve (not retiring).
    pub fn serving(&self) -> usize {
        self.live - self.retiring
    }

    /// Returns an executor after its batch, or drops it if it is retiring (given back to the
    /// caller, so the session is dropped outside the lock).
    pub fn put(&mut self, executor: Executor) -> Option<Executor> {
        if self.retiring > 0 {
            self.retiring -= 1;
            self.live -= 1;
            Some(executor)
        } else {
            self.idle.push(executor);
            None
        }
    }
}
