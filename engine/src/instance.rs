//! Execution instances: each is a loaded ORT session (an [`Executor`]) plus a thread that forms
//! batches from its version's queue and runs them. Sessions run outside the async runtime's
//! scheduling so a slow model never stalls I/O. Instances can be added and retired while the
//! version serves.
//!
//! Sessions are not tied to threads: an idle executor waits in the queue's pool (`crate::pool`), and a
//! lone request to an idle version (every executor idle, nothing else queued), with nothing it
//! would have to wait for, runs on its own thread ([`Scheduler::submit`]); it then pays no
//! thread wake-up on its way to the model and none on its way back. Under load, requests queue
//! and the instance threads batch them: a batch is always what the batcher decides.

use crate::batch_clock::{BatchClock, ClockTarget};
use crate::batcher::{self, BatchPolicy, Decision};
use crate::config::ModelConfig;
use crate::error::{EngineError, Result};
use crate::idle_spin::{self, IdleSpin};
use crate::lifecycle::Reservation;
use crate::lone_run;
use crate::pool::Executor;
use crate::providers::{ExecutionReport, ProviderPlan};
use crate::queue::{Levels, Request, RequestQueue};
use crate::session::{OrtSession, SessionOptions, StageTimes};
use crate::signature::ModelSignature;
use crate::stats::{RequestTimings, StatsRecorder};
use crate::tensor::Tensor;
use crate::warmup;
use infergate_kernels::Ops;
use parking_lot::{MutexGuard, RwLock};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
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
    /// Batches run on the requesting thread rather than an instance thread.
    caller_runs: std::sync::atomic::AtomicU64,
    /// How long the last of them took, in µs (0: none yet): decides how the next one blocks
    /// its thread ([`Scheduler::run_here`]).
    last_caller_run_us: std::sync::atomic::AtomicU64,
    /// The batch clock on the async runtime, when there is one ([`crate::batch_clock`]).
    clock: std::sync::OnceLock<BatchClock>,
    /// Batches run by it, on a tokio worker.
    clock_runs: std::sync::atomic::AtomicU64,
    /// How long the last batch took, in µs (0: none yet): whether the clock may run the next
    /// one on its tokio worker ([`CLOCK_RUN_LIMIT`]).
    last_batch_us: std::sync::atomic::AtomicU64,
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
            caller_runs: Default::default(),
            last_caller_run_us: Default::default(),
            clock: Default::default(),
            clock_runs: Default::default(),
            last_batch_us: Default::default(),
        }
    }

    /// Starts the batch clock on the current runtime, if there is one it can use.
    pub fn start_clock(self: &Arc<Self>) {
        if let Some(clock) = BatchClock::start(Arc::downgrade(self)) {
            let _ = self.clock.set(clock);
        }
    }

    /// Batches run so far by the batch clock on a tokio worker.
    pub fn clock_runs(&self) -> u64 {
        self.clock_runs.load(Ordering::Relaxed)
    }

    pub fn policy(&self) -> Arc<BatchPolicy> {
        self.policy.read().clone()
    }

    /// Batches run so far on the requesting thread ([`Scheduler::submit`]).
    pub fn caller_runs(&self) -> u64 {
        self.caller_runs.load(Ordering::Relaxed)
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
    /// The intra-op threads the sessions run on: `options`', or 1 after a short probe.
    pub intra_threads: usize,
}

/// Loads one session per reservation, checks `config` against the model and runs the warm-up
/// on each. Nothing starts unless all succeed. Blocking: call from a blocking thread.
///
/// `probe`: the intra-op threads in `options` were sized from the cores, not set by the
/// operator. If the first session runs on the CPU alone and a lone request of one sample runs
/// on it in less than [`crate::sizing::SHORT_RUN`], that session is reloaded with one intra-op thread
/// and so are the others (see `lone_run`).
pub(crate) fn prepare(
    env: &ort::environment::Environment,
    label: &str,
    path: &Path,
    options: &SessionOptions,
    config: &ModelConfig,
    reservations: Vec<Reservation>,
    probe: bool,
) -> Result<Prepared> {
    let plan = ProviderPlan::new(options.device, options.device_explicit, config)?;
    let mut options = options.clone();
    let mut instances = Vec::with_capacity(reservations.len());
    let mut first = None;
    let mut warmup_runs = 0;
    for reservation in reservations {
        let mut session = OrtSession::load(env, path, label, &options, &plan)?;
        if first.is_none() {
            config.validate_for(session.signature())?;
            if probe && options.intra_threads > 1 && !session.execution().on_gpu() {
                if let Some(lone) = lone_run::short(label, config, &mut session) {
                    tracing::info!(
                        model = label,
                        lone_run_us = lone.as_micros() as u64,
                        planned_intra_threads = options.intra_threads,
                        "a lone request runs short: one intra-op thread per instance"
                    );
                    options.intra_threads = 1;
                    session = OrtSession::load(env, path, label, &options, &plan)?;
                }
            }
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
        intra_threads: options.intra_threads,
    })
}

/// The running instances of one version.
pub(crate) struct InstancePool {
    scheduler: Arc<Scheduler>,
    started: std::sync::atomic::AtomicUsize,
}

impl InstancePool {
    pub fn new(scheduler: Arc<Scheduler>) -> InstancePool {
        InstancePool {
            scheduler,
            started: Default::default(),
        }
    }

    pub fn count(&self) -> usize {
        self.scheduler.queue.lock().pool.serving()
    }

    /// Adds each prepared instance's session to the pool, with a thread to serve the queue.
    pub fn start(&self, instances: Vec<ReadyInstance>) -> Result<()> {
        for instance in instances {
            let index = self.started.fetch_add(1, Ordering::Relaxed);
            let executor = Executor {
                session: instance.session,
                // Each executor gets its own CUDA stream for its post-ops.
                ops: self.scheduler.ops.for_instance(),
                _reservation: instance.reservation,
            };
            {
                let mut queue = self.scheduler.queue.lock();
                queue.pool.idle.push(executor);
                queue.pool.live += 1;
                queue.pool.threads += 1;
            }
            let scheduler = self.scheduler.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("instance-{}-{index}", self.scheduler.label))
                .spawn(move || {
                    run_instance(&scheduler);
                    // This instance's session is dropped: give its memory back (crate::heap).
                    drop(scheduler);
                    crate::heap::release_free_memory();
                });
            if let Err(e) = spawned {
                self.scheduler.queue.lock().pool.threads -= 1;
                return Err(EngineError::Internal(format!(
                    "starting an instance thread: {e}"
                )));
            }
        }
        self.scheduler.queue.notify();
        Ok(())
    }

    /// Retires `n` instances (at least one stays): idle executors are dropped at once, busy ones
    /// when their batch is answered, and as many threads leave. Queued requests stay for the
    /// others.
    pub fn retire(&self, n: usize) {
        let dropped = {
            let mut queue = self.scheduler.queue.lock();
            let pool = &mut queue.pool;
            let serving = pool.serving();
            pool.retiring += serving - serving.saturating_sub(n).max(1);
            let mut dropped = Vec::new();
            while pool.retiring > 0 {
                let Some(executor) = pool.idle.pop() else {
                    break;
                };
                dropped.extend(pool.put(executor));
            }
            dropped
        };
        drop(dropped);
        self.scheduler.queue.notify();
    }
}

impl Scheduler {
    /// Queues `request`. When it is the version's only request and every executor is idle (a
    /// lone request to an idle version) and the batcher would run it now, runs it on this
    /// thread instead of waking an instance thread, and returns once it is answered.
    ///
    /// Only then: under load the instance threads serve the queue. Running a busy version's
    /// batches on the callers' threads too would make each such run hand the tokio worker's
    /// tasks to another thread (a wake-up and a migration per batch), and a caller that found
    /// an idle executor would take the batch early, before more requests joined it: more CPU
    /// per inference and less throughput (`bench/cpu_per_request.py`, batching at concurrency
    /// 8: about 20 % more CPU, 15 % less throughput).
    ///
    /// The caller is usually a tokio worker: how it blocks for the run is
    /// [`Scheduler::run_here`]'s choice. On a current-thread runtime, which cannot hand its tasks
    /// over, the request always goes through the instance threads.
    pub fn submit(
        &self,
        request: Request,
        capacity: usize,
        retry_after: impl FnOnce(usize, usize) -> Duration,
    ) -> Result<()> {
        let mut queue = self.queue.lock();
        self.queue
            .enqueue(&mut queue, request, capacity, retry_after)?;
        if !may_block_here() || !lone_on_idle_version(&queue) {
            // With every executor busy, no thread could run it now: the first to finish looks
            // at the queue. Nor is one needed while a timer comes no later than the queue's
            // next need (see `needs_instance`).
            let wake = !queue.pool.idle.is_empty() && self.needs_instance(&mut queue);
            drop(queue);
            if wake {
                self.queue.notify_one();
            }
            return Ok(());
        }
        let Some(executor) = queue.pool.idle.pop() else {
            return Ok(()); // lone_on_idle_version saw one
        };
        let policy = self.policy();
        match batcher::next_batch(&mut queue, &policy, &self.label, Instant::now()) {
            Decision::Run(batch) => {
                drop(queue);
                let batching = policy.max_batch_size > 0;
                let mut executor = executor;
                self.caller_runs.fetch_add(1, Ordering::Relaxed);
                self.run_here(|| execute(&mut executor, self, batch, batching));
                self.finished(executor);
            }
            Decision::WaitUntil(t) => {
                queue.pool.idle.push(executor);
                // A timer set for then (or earlier), or the batch clock armed now, sees this
                // request when it fires; otherwise an instance must set its timer.
                let timed = self.timer_fires_by(&mut queue, t);
                drop(queue);
                if !timed {
                    self.queue.notify_one();
                }
            }
            // Only if the request was abandoned meanwhile: nothing to do.
            Decision::Idle => queue.pool.idle.push(executor),
        }
        Ok(())
    }

    /// Runs `work` (a lone request's model run) on this thread. On a tokio worker, a run that
    /// is expected to be short blocks the worker outright; a longer one, or one of unknown
    /// length, goes through `block_in_place`.
    ///
    /// Why not always `block_in_place`: it hands the worker's other tasks to a thread from the
    /// blocking pool for every run, and that thread's wake-up and its search for work take a
    /// core while the model runs: for a small model at concurrency 1 that is about a fifth more
    /// latency and CPU per request (`bench/cpu_per_request.py` without batching). Why not always
    /// block: a blocked worker runs none of its other tasks meanwhile (the other workers steal its
    /// queued ones). So only a run the version's last one says is short ([`DIRECT_RUN_LIMIT`]), and
    /// only one such run at a time in the process: with two workers or more, at least one always
    /// keeps serving I/O. A runtime of a single worker (the default on 2 cores,
    /// `sizing::async_threads`) has no other worker to keep it: there only a run as short as a
    /// batch the clock may run ([`CLOCK_RUN_LIMIT`]) blocks I/O for its length. A longer one would
    /// leave the requests that arrive meanwhile unread while other instances idle (a model of about
    /// 10 ms per run on 2 instances would serve about half as much whenever its requests come one
    /// at a time; `bench/sizing.py`, EfficientNet-Lite0). Only lone requests to idle versions get
    /// here at all.
    fn run_here(&self, work: impl FnOnce()) {
        let last = Duration::from_micros(self.last_caller_run_us.load(Ordering::Relaxed));
        let started = Instant::now();
        let runtime = tokio::runtime::Handle::try_current();
        let limit = match &runtime {
            Ok(handle) if handle.metrics().num_workers() == 1 => CLOCK_RUN_LIMIT,
            _ => DIRECT_RUN_LIMIT,
        };
        let expected_short = !last.is_zero() && last <= limit;
        match runtime {
            Ok(_) if expected_short => match DirectRun::start() {
                Some(_running) => work(),
                None => tokio::task::block_in_place(work),
            },
            Ok(_) => tokio::task::block_in_place(work),
            // A plain thread: nothing else to serve.
            Err(_) => work(),
        }
        let took = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.last_caller_run_us
            .store(took.max(1), Ordering::Relaxed);
    }

    /// Whether an idle instance thread must be woken for the queue as it stands: yes when the
    /// batch it now forms runs at once (it filled up, reached a preferred size, or its oldest
    /// request has waited long enough); no when it waits and a timer already set (the batch
    /// clock's, or an instance thread's) fires no later than it needs to (an earlier request
    /// deadline), or the batch clock could be armed for it now. Waking the instance only to
    /// form the same batch and sleep again would be, under load with a queue delay, most of
    /// the instance thread's wake-ups: one futex wake per request on the request's thread and
    /// a sleep and wake of the instance.
    fn needs_instance(&self, queue: &mut Levels) -> bool {
        if queue.pool.timer.is_none() && self.live_clock().is_none() {
            // No timer is set and none can be: only an instance can keep the time, so the
            // batch need not be planned to know it.
            return true;
        }
        let waits = {
            let policy = self.policy.read();
            batcher::waits_until(queue, &policy, Instant::now())
        };
        let Some(t) = waits else {
            return true;
        };
        !self.timer_fires_by(queue, t)
    }

    /// Whether a timer looks at the queue by `t`: one already set (the batch clock's or an
    /// instance thread's) for then or earlier, or the batch clock armed for it now.
    fn timer_fires_by(&self, queue: &mut Levels, t: Instant) -> bool {
        queue.pool.timer.is_some_and(|w| w <= t) || self.arm_clock(queue, t)
    }

    /// The batch clock, while its task runs.
    fn live_clock(&self) -> Option<&BatchClock> {
        self.clock.get().filter(|c| c.alive())
    }

    /// Arms the batch clock for `t` (the queue's timer, under its lock); false when there is
    /// no live clock, and an instance thread must keep the time.
    fn arm_clock(&self, queue: &mut Levels, t: Instant) -> bool {
        let Some(clock) = self.live_clock() else {
            return false;
        };
        if queue.pool.timer.is_none_or(|w| w > t) {
            clock.arm(t);
            queue.pool.timer = Some(t);
        }
        true
    }

    /// The batch clock fired, on a tokio worker: runs the batch that is due on this worker,
    /// when its last batch was short and no other model run blocks a worker; otherwise wakes an
    /// instance thread to run it. Re-arms the clock for a batch that is not due yet.
    pub(crate) fn on_clock(&self) {
        let now = Instant::now();
        let mut queue = self.queue.lock();
        match queue.pool.timer {
            // Re-armed for later since it fired: that expiry is the one to act on.
            Some(w) if w > now => return,
            _ => queue.pool.timer = None,
        }
        if queue.pool.idle.is_empty() {
            // Every executor is running a batch; the first to finish looks at the queue.
            return;
        }
        let last = Duration::from_micros(self.last_batch_us.load(Ordering::Relaxed));
        let short = !last.is_zero() && last <= CLOCK_RUN_LIMIT;
        let direct = if short { DirectRun::start() } else { None };
        let Some(_running) = direct else {
            drop(queue);
            self.queue.notify_one();
            return;
        };
        let Some(mut executor) = queue.pool.idle.pop() else {
            return;
        };
        let policy = self.policy();
        match batcher::next_batch(&mut queue, &policy, &self.label, now) {
            Decision::Run(batch) => {
                drop(queue);
                self.clock_runs.fetch_add(1, Ordering::Relaxed);
                execute(&mut executor, self, batch, policy.max_batch_size > 0);
                self.finished(executor);
            }
            Decision::WaitUntil(t) => {
                queue.pool.idle.push(executor);
                if !self.arm_clock(&mut queue, t) {
                    drop(queue);
                    self.queue.notify_one();
                }
            }
            Decision::Idle => {
                queue.pool.idle.push(executor);
                if queue.closed {
                    // Instance threads waiting for the clock must see the end.
                    drop(queue);
                    self.queue.notify();
                }
            }
        }
    }

    /// The batch clock's task ended: the instance threads keep the time from now on.
    pub(crate) fn clock_stopped(&self) {
        self.queue.lock().pool.timer = None;
        self.queue.notify();
    }

    /// Puts an executor back after a batch run outside the instance threads, and wakes one of
    /// them if requests that queued meanwhile need it.
    fn finished(&self, executor: Executor) {
        let mut queue = self.queue.lock();
        let dropped = queue.pool.put(executor);
        // Requests that queued meanwhile need an instance only if their batch is due now;
        // otherwise a timer set for it will do (`needs_instance`).
        let waiting = queue.iter().next().is_some() && self.needs_instance(&mut queue);
        let closed = queue.closed;
        drop(queue);
        drop(dropped);
        if closed {
            // Instance threads waiting for the batch clock must see the end.
            self.queue.notify();
        } else if waiting {
            self.queue.notify_one();
        }
    }
}

impl ClockTarget for Scheduler {
    fn label(&self) -> &str {
        &self.label
    }

    fn on_clock(&self) {
        Scheduler::on_clock(self)
    }

    fn clock_stopped(&self) {
        Scheduler::clock_stopped(self)
    }
}

/// The longest model run a lone request may make its tokio worker wait for outright
/// ([`Scheduler::run_here`]); longer ones hand the worker's tasks over first.
const DIRECT_RUN_LIMIT: Duration = Duration::from_millis(20);

/// The longest batch (going by the version's last one) the batch clock runs on its tokio worker
/// ([`Scheduler::on_clock`]); longer ones go to an instance thread. A batch blocks the worker
/// for its whole run, while any other workers serve the connections (on a single worker, none
/// does): short enough that this costs no client a noticeable wait, long enough for the small
/// models whose batches are dominated by the hand-off.
const CLOCK_RUN_LIMIT: Duration = Duration::from_millis(2);

/// The one model run in the process that is blocking a tokio worker outright, if any.
static DIRECT_RUN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Holds [`DIRECT_RUN`] for the run's duration (released even if the run panics).
struct DirectRun;

impl DirectRun {
    fn start() -> Option<DirectRun> {
        DIRECT_RUN
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| DirectRun)
    }
}

impl Drop for DirectRun {
    fn drop(&mut self) {
        DIRECT_RUN.store(false, Ordering::Release);
    }
}

/// One request queued and every executor idle: a lone request to an idle version, which its
/// caller may run itself.
fn lone_on_idle_version(queue: &Levels) -> bool {
    !queue.pool.idle.is_empty() && queue.pool.idle.len() == queue.pool.live && queue.len() == 1
}

/// Whether this thread may block for a model run: yes on a multi-threaded runtime (a worker
/// hands its tasks over in `block_in_place`) and outside any runtime; not on a current-thread
/// runtime, whose only thread would stall every other task.
fn may_block_here() -> bool {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread,
        Err(_) => true,
    }
}

fn run_instance(scheduler: &Scheduler) {
    let mut spin = IdleSpin::new(scheduler.idle_spin);
    let mut holding: Option<Executor> = None;
    loop {
        // Sessions to drop once the lock is released.
        let mut dropped: Vec<Executor> = Vec::new();
        let work = {
            let mut queue = scheduler.queue.lock();
            if let Some(executor) = holding.take() {
                dropped.extend(queue.pool.put(executor));
            }
            // When this thread ran out of work, and whether it has spun since.
            let mut idle: Option<(Instant, bool)> = None;
            loop {
                if queue.pool.threads > queue.pool.serving() {
                    queue.pool.threads -= 1;
                    break None;
                }
                let Some(executor) = queue.pool.idle.pop() else {
                    // Every executor is running a batch; the first to finish looks again.
                    scheduler.queue.wait(&mut queue, None);
                    continue;
                };
                let policy = scheduler.policy();
                let decision =
                    batcher::next_batch(&mut queue, &policy, &scheduler.label, Instant::now());
                let Decision::Run(batch) = decision else {
                    queue.pool.idle.push(executor);
                    match decision {
                        // The batch clock keeps the time: it runs the batch, or wakes this
                        // thread when it cannot.
                        Decision::WaitUntil(t) if scheduler.arm_clock(&mut queue, t) => {
                            scheduler.queue.wait(&mut queue, None);
                        }
                        Decision::WaitUntil(t) => {
                            queue.pool.timer = Some(queue.pool.timer.map_or(t, |w| w.min(t)));
                            scheduler.queue.wait(&mut queue, Some(t));
                            if queue.pool.timer == Some(t) {
                                queue.pool.timer = None;
                            }
                        }
                        // The version was unloaded and nothing is left: the thread ends, and the
                        // last one drops the idle sessions.
                        Decision::Idle if queue.closed => {
                            queue.pool.threads -= 1;
                            if queue.pool.threads == 0 {
                                dropped.append(&mut queue.pool.idle);
                                queue.pool.live -= dropped.len();
                            }
                            break None;
                        }
                        Decision::Idle => {
                            let (_, spun) = idle.get_or_insert((Instant::now(), false));
                            let budget = if policy.lone_request_runs_at_once() {
                                spin.budget()
                            } else {
                                Duration::ZERO
                            };
                            if !*spun && !budget.is_zero() {
                                *spun = true;
                                // Read under the lock: any later push changes it.
                                let seen = scheduler.queue.pushes();
                                MutexGuard::unlocked(&mut queue, || {
                                    idle_spin::spin_until(budget, || {
                                        scheduler.queue.pushes() != seen
                                    })
                                });
                            } else {
                                scheduler.queue.wait(&mut queue, None);
                            }
                        }
                        Decision::Run(_) => {} // taken by the `let` above
                    }
                    continue;
                };
                if let Some((since, _)) = idle {
                    spin.observe(since.elapsed());
                }
                break Some((executor, batch, policy.max_batch_size > 0));
            }
        };
        drop(dropped);
        let Some((mut executor, batch, batching)) = work else {
            return;
        };
        execute(&mut executor, scheduler, batch, batching);
        holding = Some(executor);
    }
}

/// Runs one batch and answers each request with its share of the outputs.
fn execute(executor: &mut Executor, scheduler: &Scheduler, batch: Vec<Request>, batching: bool) {
    let (session, ops) = (&mut executor.session, &executor.ops);
    let started = Instant::now();
    let samples: Vec<usize> = batch.iter().map(|r| r.samples).collect();
    let outcome = if let [only] = batch.as_slice() {
        session
            .run(&only.inputs, &only.outputs)
            .map(|(outputs, times)| (vec![outputs], times))
    } else {
        run_batch(session, &scheduler.label, &batch, &samples)
    };
    let took = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    scheduler
        .last_batch_us
        .store(took.max(1), Ordering::Relaxed);
    let stats = &scheduler.stats;
    match outcome {
        Ok((parts, times)) => {
            let batch_size = if batching {
                samples.iter().sum::<usize>() as u64
            } else {
                1
            };
            stats.execution(batch_size, times.input, times.infer, times.output);
            let requests = batch.len() as u64;
            for (request, outputs) in batch.into_iter().zip(parts) {
                let post_started = Instant::now();
                let outputs = match &request.post {
                    Some(plan) => plan.apply(ops, outputs),
                    None => Ok(outputs),
                };
                if outputs.is_err() {
                    stats.failure(request.enqueued.elapsed());
                } else {
                    let timings = RequestTimings {
                        queue: started.saturating_duration_since(request.enqueued),
                        compute_input: times.input,
                        compute_infer: times.infer,
                        compute_output: times.output + post_started.elapsed(),
                        total: request.enqueued.elapsed(),
                        samples: request.samples as u64,
                    };
                    stats.success(&timings);
                    if !request.span.is_none() {
                        record_figures(&request.span, &timings, batch_size, requests);
                    }
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

/// A request's figures on its caller's span ([`crate::queue::SPAN_FIGURES`]).
fn record_figures(span: &tracing::Span, t: &RequestTimings, batch_size: u64, requests: u64) {
    let us = |d: std::time::Duration| i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
    span.record("queue_us", us(t.queue));
    span.record("compute_input_us", us(t.compute_input));
    span.record("compute_infer_us", us(t.compute_infer));
    span.record("compute_output_us", us(t.compute_output));
    span.record("batch_size", batch_size as i64);
    span.record("batch_requests", requests as i64);
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
