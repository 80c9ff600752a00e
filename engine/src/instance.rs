//! Execution instances: each is an OS thread that owns one ORT session, forms batches from its
//! version's queue and runs them. Sessions run outside the async runtime so a slow model never
//! stalls I/O. Instances can be added and retired while the version serves.

use crate::batcher::{self, BatchPolicy, Decision};
use crate::config::ModelConfig;
use crate::error::{EngineError, Result};
use crate::idle_spin::{self, IdleSpin};
use crate::lifecycle::Reservation;
use crate::providers::{ExecutionReport, ProviderPlan};
use crate::queue::{Request, RequestQueue};
use crate::session::{OrtSession, SessionOptions, StageTimes};
use crate::signature::ModelSignature;
use crate::stats::{RequestTimings, StatsRecorder};
use crate::tensor::Tensor;
use crate::warmup;
use infergate_kernels::Ops;
use parking_lot::{Mutex, MutexGuard, RwLock};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the instances of one version share: the queue, the current policy, the counters.
pub(crate) struct Scheduler {
    pub label: String,
    /// Runs the post-ops of requests that asked for their outputs.
    pub ops: Arc<Ops>,
    pub queue: RequestQueue,
    /// How long an instance may spin for the next request after running out of work
    /// ([`crate::idle_spin`]).
    pub idle_spin: Duration,
    policy: RwLock<Arc<BatchPolicy>>,
    pub stats: Arc<StatsRecorder>,
}

impl Scheduler {
    pub fn new(label: &str, policy: BatchPolicy, ops: Arc<Ops>, idle_spin: Duration) -> Scheduler {
        Scheduler {
            label: label.to_string(),
            ops,
            queue: RequestQueue::new(label),
            idle_spin,
            policy: RwLock::new(Arc::new(policy)),
            stats: Arc::new(StatsRecorder::default()),
        }
    }

    pub fn policy(&self) -> Arc<BatchPolicy> {
        self.policy.read().clone()
    }

    /// New batches follow `policy`; batches already running finish under the old one.
    pub fn set_policy(&self, policy: BatchPolicy) {
        *self.policy.write() = Arc::new(policy);
        self.queue.notify();
    }
}

/// A session loaded, checked and warmed up, with the memory it was admitted for.
pub(crate) struct ReadyInstance {
    session: OrtSession,
    reservation: Reservation,
}

/// Sessions loaded, checked and warmed up, ready to start.
pub(crate) struct Prepared {
    pub signature: ModelSignature,
    pub instances: Vec<ReadyInstance>,
    pub warmup_runs: u64,
    /// The providers the sessions run on (the first session's: all share one plan).
    pub execution: ExecutionReport,
}

/// Loads one session per reservation, checks `config` against the model and runs the warm-up
/// on each. Nothing starts unless all succeed. Blocking: call from a blocking thread.
pub(crate) fn prepare(
    env: &ort::environment::Environment,
    label: &str,
    path: &Path,
    options: &SessionOptions,
    config: &ModelConfig,
    reservations: Vec<Reservation>,
) -> Result<Prepared> {
    let plan = ProviderPlan::new(options, config)?;
    let mut instances = Vec::with_capacity(reservations.len());
    let mut first = None;
    let mut warmup_runs = 0;
    for reservation in reservations {
        let mut session = OrtSession::load(env, path, label, options, &plan)?;
        if first.is_none() {
            config.validate_for(session.signature())?;
            first = Some((session.signature().clone(), session.execution().clone()));
        }
        warmup_runs += warmup::run(config, &mut session)?;
        instances.push(ReadyInstance {
            session,
            reservation,
        });
    }
    let (signature, execution) =
        first.ok_or_else(|| EngineError::Internal(format!("{label}: no instance to load")))?;
    Ok(Prepared {
        signature,
        instances,
        warmup_runs,
        execution,
    })
}

struct InstanceHandle {
    retired: Arc<AtomicBool>,
    _thread: JoinHandle<()>,
}

/// The running instances of one version.
pub(crate) struct InstancePool {
    scheduler: Arc<Scheduler>,
    handles: Mutex<Vec<InstanceHandle>>,
    started: std::sync::atomic::AtomicUsize,
}

impl InstancePool {
    pub fn new(scheduler: Arc<Scheduler>) -> InstancePool {
        InstancePool {
            scheduler,
            handles: Mutex::new(Vec::new()),
            started: Default::default(),
        }
    }

    pub fn count(&self) -> usize {
        self.handles.lock().len()
    }

    /// Starts a thread for each prepared instance.
    pub fn start(&self, instances: Vec<ReadyInstance>) -> Result<()> {
        for instance in instances {
            let index = self.started.fetch_add(1, Ordering::Relaxed);
            let retired = Arc::new(AtomicBool::new(false));
            let scheduler = self.scheduler.clone();
            let flag = retired.clone();
            let thread = std::thread::Builder::new()
                .name(format!("instance-{}-{index}", self.scheduler.label))
                .spawn(move || {
                    // Each instance gets its own CUDA stream for its post-ops.
                    let ops = scheduler.ops.for_instance();
                    run_instance(instance.session, &scheduler, &ops, &flag);
                    // The session is gone; give its memory back.
                    drop(instance.reservation);
                })
                .map_err(|e| EngineError::Internal(format!("starting an instance thread: {e}")))?;
            self.handles.lock().push(InstanceHandle {
                retired,
                _thread: thread,
            });
        }
        Ok(())
    }

    /// Retires the newest `n` instances. Each finishes the batch it is running, if any; queued
    /// requests stay for the others.
    pub fn retire(&self, n: usize) {
        let mut handles = self.handles.lock();
        let keep = handles.len().saturating_sub(n).max(1);
        for handle in handles.drain(keep..) {
            handle.retired.store(true, Ordering::Release);
        }
        drop(handles);
        self.scheduler.queue.notify();
    }
}

fn run_instance(mut session: OrtSession, scheduler: &Scheduler, ops: &Ops, retired: &AtomicBool) {
    let mut spin = IdleSpin::new(scheduler.idle_spin);
    loop {
        let (batch, batching) = {
            let mut queue = scheduler.queue.lock();
            // When this instance ran out of work, and whether it has spun since.
            let mut idle: Option<(Instant, bool)> = None;
            loop {
                if retired.load(Ordering::Acquire) {
                    return;
                }
                let policy = scheduler.policy();
                match batcher::next_batch(&mut queue, &policy, &scheduler.label, Instant::now()) {
                    Decision::Run(batch) => {
                        if let Some((since, _)) = idle {
                            spin.observe(since.elapsed());
                        }
                        break (batch, policy.max_batch_size > 0);
                    }
                    Decision::WaitUntil(t) => scheduler.queue.wait(&mut queue, Some(t)),
                    // The version was unloaded and nothing is left: the thread ends.
                    Decision::Idle if queue.closed => return,
                    Decision::Idle => {
                        let (_, spun) = idle.get_or_insert((Instant::now(), false));
                        let budget = spin.budget();
                        if !*spun && !budget.is_zero() {
                            *spun = true;
                            // Read under the lock: any later push changes it.
                            let seen = scheduler.queue.pushes();
                            MutexGuard::unlocked(&mut queue, || {
                                idle_spin::spin_until(budget, || scheduler.queue.pushes() != seen)
                            });
                        } else {
                            scheduler.queue.wait(&mut queue, None);
                        }
                    }
                }
            }
        };
        execute(&mut session, scheduler, ops, batch, batching);
    }
}

/// Runs one batch and answers each request with its share of the outputs.
fn execute(
    session: &mut OrtSession,
    scheduler: &Scheduler,
    ops: &Ops,
    batch: Vec<Request>,
    batching: bool,
) {
    let started = Instant::now();
    let samples: Vec<usize> = batch.iter().map(|r| r.samples).collect();
    let outcome = if let [only] = batch.as_slice() {
        session
            .run(&only.inputs, &only.outputs)
            .map(|(outputs, times)| (vec![outputs], times))
    } else {
        run_batch(session, &scheduler.label, &batch, &samples)
    };
    let stats = &scheduler.stats;
    match outcome {
        Ok((parts, times)) => {
            let batch_size = if batching {
                samples.iter().sum::<usize>() as u64
            } else {
                1
            };
            stats.execution(batch_size, times.input, times.infer, times.output);
            for (request, outputs) in batch.into_iter().zip(parts) {
                let post_started = Instant::now();
                let outputs = match &request.post {
                    Some(plan) => plan.apply(ops, outputs),
                    None => Ok(outputs),
                };
                if outputs.is_err() {
                    stats.failure(request.enqueued.elapsed());
                } else {
                    stats.success(&RequestTimings {
                        queue: started.saturating_duration_since(request.enqueued),
                        compute_input: times.input,
                        compute_infer: times.infer,
                        compute_output: times.output + post_started.elapsed(),
                        total: request.enqueued.elapsed(),
                        samples: request.samples as u64,
                    });
                }
                // A send error means the client left meanwhile; nothing else to do.
                let _ = request.reply.send(outputs);
            }
        }
        Err(e) => {
            stats.failed_execution();
            for request in batch {
                stats.failure(request.enqueued.elapsed());
                let _ = request.reply.send(Err(e.clone()));
            }
        }
    }
}

fn run_batch(
    session: &mut OrtSession,
    label: &str,
    batch: &[Request],
    samples: &[usize],
) -> Result<(Vec<Vec<Tensor>>, StageTimes)> {
    let joining = Instant::now();
    let inputs = batcher::concat(batch)?;
    let joined = joining.elapsed();
    let (outputs, mut times) = session.run(&inputs, &batch[0].outputs)?;
    let splitting = Instant::now();
    let parts = batcher::split(label, outputs, samples)?;
    times.input += joined;
    times.output += splitting.elapsed();
    Ok((parts, times))
}
