//! Execution instances: each is an OS thread that owns one ORT session and takes jobs from the
//! model's queue. Sessions run outside the async runtime so a slow model never stalls I/O.

use crate::error::{EngineError, Result};
use crate::session::{OrtSession, SessionOptions};
use crate::signature::ModelSignature;
use crate::stats::{RequestTimings, StatsRecorder};
use crate::tensor::Tensor;
use crossbeam_channel::Receiver;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;
use tokio::sync::oneshot;

/// One queued request.
pub(crate) struct Job {
    pub inputs: Vec<Tensor>,
    pub outputs: Vec<String>,
    pub enqueued: Instant,
    pub reply: oneshot::Sender<Result<Vec<Tensor>>>,
}

/// Loads `count` sessions of the model and starts one thread for each. Loading happens before
/// any thread starts, so a model that fails to load leaves nothing running.
pub(crate) fn spawn(
    env: &ort::environment::Environment,
    label: &str,
    path: &Path,
    options: &SessionOptions,
    count: usize,
    queue: Receiver<Job>,
    stats: Arc<StatsRecorder>,
) -> Result<(ModelSignature, Vec<JoinHandle<()>>)> {
    let sessions = (0..count.max(1))
        .map(|_| OrtSession::load(env, path, label, options))
        .collect::<Result<Vec<_>>>()?;
    let signature = sessions[0].signature().clone();
    let mut handles = Vec::with_capacity(sessions.len());
    for (index, session) in sessions.into_iter().enumerate() {
        let queue = queue.clone();
        let stats = stats.clone();
        let handle = std::thread::Builder::new()
            .name(format!("instance-{label}-{index}"))
            .spawn(move || run_instance(session, queue, stats))
            .map_err(|e| EngineError::Internal(format!("starting an instance thread: {e}")))?;
        handles.push(handle);
    }
    Ok((signature, handles))
}

fn run_instance(mut session: OrtSession, queue: Receiver<Job>, stats: Arc<StatsRecorder>) {
    // The loop ends when the model is unloaded: the engine drops the queue's sender.
    while let Ok(job) = queue.recv() {
        if job.reply.is_closed() {
            // The client went away while the job waited: never execute it.
            continue;
        }
        let started = Instant::now();
        let queue_time = started - job.enqueued;
        let result = session.run(&job.inputs, &job.outputs);
        stats.execution();
        let reply = match result {
            Ok((outputs, times)) => {
                stats.success(&RequestTimings {
                    queue: queue_time,
                    compute_input: times.input,
                    compute_infer: times.infer,
                    compute_output: times.output,
                    total: job.enqueued.elapsed(),
                    // Without a batch dimension in the config, Triton counts one inference per request.
                    samples: 1,
                });
                Ok(outputs)
            }
            Err(e) => {
                stats.failure(job.enqueued.elapsed());
                Err(e)
            }
        };
        // A send error means the client left meanwhile; nothing else to do.
        let _ = job.reply.send(reply);
    }
}
