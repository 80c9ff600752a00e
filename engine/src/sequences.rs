//! Sequence batching for a stateful model version (Triton's `sequence_batching`): requests
//! tagged with a correlation id and start/end flags join their sequence
//! (`crate::sequence_slots`), batches of sequences are formed under the Direct or Oldest
//! strategy, built into the model's tensors with the control inputs and implicit state filled
//! in (`crate::sequence_rows`), and run on the version's executors through its ordinary queue
//! as one request each. A keeper task ends idle sequences and wakes batches that wait for a
//! delay.
//!
//! A version without `sequence_batching` has no sequencer and never comes here.
//!
//! A request whose client went away still runs when its turn comes: the sequence's state must
//! advance in order, and later requests of the sequence depend on it.

use crate::error::{EngineError, Result};
use crate::instance::Scheduler;
use crate::queue::{BatchKey, Request, Ticket};
use crate::sequence_config::SequencePlan;
use crate::sequence_rows;
use crate::sequence_slots::{
    CorrelationId, Formed, Outcome, Pending, Registry, SequenceFlags, SequenceInfo,
};
use crate::signature::ModelSignature;
use crate::tensor::Tensor;
use parking_lot::Mutex;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, Notify};

pub(crate) struct Sequencer {
    label: String,
    plan: SequencePlan,
    signature: ModelSignature,
    /// The inputs a client gives: the model's, less those the engine fills.
    client: ModelSignature,
    scheduler: Arc<Scheduler>,
    registry: Mutex<Registry>,
    /// Wakes the keeper to look at the registry again (a batch now waits for a delay, or the
    /// sequencer is gone).
    keeper: Arc<Notify>,
}

impl Sequencer {
    /// A sequencer for a loaded version whose `groups` instances run on `scheduler`, with its
    /// keeper task on the current runtime.
    pub fn start(
        label: &str,
        plan: SequencePlan,
        signature: ModelSignature,
        scheduler: Arc<Scheduler>,
        groups: usize,
        max_queued: usize,
    ) -> Arc<Sequencer> {
        let client = ModelSignature {
            inputs: signature
                .inputs
                .iter()
                .filter(|s| !plan.fills(&s.name))
                .cloned()
                .collect(),
            ..signature.clone()
        };
        let sequencer = Arc::new(Sequencer {
            label: label.to_string(),
            registry: Mutex::new(Registry::new(&plan, groups, max_queued)),
            plan,
            signature,
            client,
            scheduler,
            keeper: Arc::new(Notify::new()),
        });
        tokio::spawn(keep(Arc::downgrade(&sequencer), sequencer.keeper.clone()));
        sequencer
    }

    /// Runs one request of a sequence and returns its outputs (those asked for; without a
    /// list, every output but the state outputs).
    pub async fn infer(
        self: &Arc<Self>,
        flags: Option<&SequenceFlags>,
        inputs: Vec<Tensor>,
        outputs: Vec<String>,
    ) -> Result<Vec<Tensor>> {
        let model = &self.label;
        let flags = flags.ok_or_else(|| {
            EngineError::InvalidInput(format!(
                "inference request to model '{model}' must specify a non-zero or non-empty correlation ID (request parameter sequence_id): it serves sequences"
            ))
        })?;
        if let Some(filled) = inputs.iter().find(|t| self.plan.fills(&t.name)) {
            return Err(EngineError::InvalidInput(format!(
                "input '{}' of model '{model}' is filled by the sequence batcher (a control or state input); leave it out",
                filled.name
            )));
        }
        crate::signature::check_inputs(model, &self.client, &inputs)?;
        crate::signature::check_outputs(&self.signature, &outputs)?;
        if self.plan.max_batch_size > 0 {
            if let Some(t) = inputs.iter().find(|t| t.shape.first() != Some(&1)) {
                return Err(EngineError::InvalidInput(format!(
                    "inference request to model '{model}' must specify batch-size 1 due to requirements of sequence batcher (input '{}' has shape {:?})",
                    t.name, t.shape
                )));
            }
        }
        sequence_rows::check_id(&self.plan, model, &flags.id)?;
        let (reply, response) = oneshot::channel();
        let now = Instant::now();
        let pending = Pending {
            inputs,
            outputs,
            start: flags.start,
            end: flags.end,
            enqueued: now,
            reply,
        };
        let formed = {
            let mut registry = self.registry.lock();
            registry.admit(model, flags, pending, self.plan.idle, now)?;
            self.form(&mut registry, now)
        };
        self.launch(formed);
        response.await.map_err(|_| {
            EngineError::Unavailable(format!(
                "model '{model}' was unloaded before the request of sequence {} ran",
                flags.id
            ))
        })?
    }

    /// The live sequences.
    pub fn list(&self) -> Vec<SequenceInfo> {
        self.registry.lock().list(Instant::now())
    }

    /// Ends a sequence now: its queued requests are refused, a running one finishes. False
    /// when no such sequence is live.
    pub fn clear(self: &Arc<Self>, id: &CorrelationId) -> bool {
        let (dropped, formed) = {
            let mut registry = self.registry.lock();
            let Some(dropped) = registry.clear(id) else {
                return false;
            };
            // A slot it freed may go to a sequence in the backlog.
            (dropped, self.form(&mut registry, Instant::now()))
        };
        for pending in dropped {
            let _ = pending.reply.send(Err(EngineError::Unavailable(format!(
                "sequence {id} of model '{}' was cleared by an operator before this request ran",
                self.label
            ))));
        }
        self.launch(formed);
        true
    }

    /// Takes the batches that run now; tells the keeper when one waits for its delay.
    fn form(&self, registry: &mut Registry, now: Instant) -> Vec<Formed> {
        let (formed, wake) = registry.form(&self.plan, now, |p, s| {
            sequence_rows::row_key(&self.plan, p, s)
        });
        if wake.is_some() {
            self.keeper.notify_one();
        }
        formed
    }

    fn launch(self: &Arc<Self>, formed: Vec<Formed>) {
        for batch in formed {
            tokio::spawn(self.clone().run(batch));
        }
    }

    /// Runs a formed batch, keeps each sequence's new state and answers its members.
    async fn run(self: Arc<Self>, formed: Formed) {
        let result = match self.execute(&formed).await {
            Ok(outputs) => {
                sequence_rows::split(&self.label, &self.plan, &self.signature, &formed, outputs)
            }
            Err(e) => Err(e),
        };
        let group = formed.group;
        let mut outcomes = Vec::with_capacity(formed.members.len());
        let mut replies = Vec::with_capacity(formed.members.len());
        match result {
            Ok(rows) => {
                for (member, (answer, state)) in formed.members.into_iter().zip(rows) {
                    outcomes.push(Outcome {
                        id: member.id,
                        end: member.pending.end,
                        state,
                    });
                    replies.push((member.pending.reply, Ok(answer)));
                }
            }
            Err(e) => {
                // The sequences keep the state they had; the request may be sent again.
                for member in formed.members {
                    outcomes.push(Outcome {
                        id: member.id,
                        end: member.pending.end,
                        state: member.state,
                    });
                    replies.push((member.pending.reply, Err(e.clone())));
                }
            }
        }
        // The registry learns first: a client that sends its next request as soon as it has
        // this answer finds its sequence ready for it.
        let now = Instant::now();
        let next = {
            let mut registry = self.registry.lock();
            registry.complete(group, outcomes, now);
            self.form(&mut registry, now)
        };
        for (reply, answer) in replies {
            // A send error means the client left; its sequence has moved on all the same.
            let _ = reply.send(answer);
        }
        self.launch(next);
    }

    /// The batch through the version's queue and executors, as one request.
    async fn execute(&self, formed: &Formed) -> Result<Vec<Tensor>> {
        let inputs = sequence_rows::inputs(&self.plan, formed)?;
        let outputs = sequence_rows::fetched(&self.plan, &self.signature, formed);
        let policy = self.scheduler.policy();
        let (reply, response) = oneshot::channel();
        let request = Request {
            key: BatchKey::of(&inputs, &outputs),
            inputs,
            outputs,
            post: None,
            samples: formed.members.len(),
            level: policy.level(0)?,
            enqueued: Instant::now(),
            deadline: None,
            ticket: Arc::new(Ticket::default()),
            reply,
            span: tracing::Span::none(),
        };
        // At most one batch per instance is formed at a time, so the queue is never full of
        // them; should it be, the members are told to retry.
        self.scheduler
            .submit(request, policy.max_queue_size, |_, _| {
                Duration::from_secs(1)
            })?;
        response.await.map_err(|_| {
            EngineError::Unavailable(format!(
                "model '{}' was unloaded while a sequence batch waited",
                self.label
            ))
        })?
    }

    /// Ends idle sequences and runs what is due; returns when to look again.
    fn tick(self: &Arc<Self>) -> Instant {
        let now = Instant::now();
        let (formed, wake, expiry) = {
            let mut registry = self.registry.lock();
            let expiry = registry.reap(self.plan.idle, now);
            let (formed, wake) = registry.form(&self.plan, now, |p, s| {
                sequence_rows::row_key(&self.plan, p, s)
            });
            (formed, wake, expiry)
        };
        self.launch(formed);
        [wake, expiry, Some(now + self.plan.idle)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(now + self.plan.idle)
    }
}

impl Drop for Sequencer {
    /// Wakes the keeper so that it sees the sequencer gone and ends.
    fn drop(&mut self) {
        self.keeper.notify_one();
    }
}

/// The keeper: looks at the registry when an idle sequence may have expired, when a waiting
/// batch's delay is up, or when told to; ends when the sequencer is gone.
async fn keep(sequencer: Weak<Sequencer>, wake: Arc<Notify>) {
    loop {
        let next = match sequencer.upgrade() {
            Some(s) => s.tick(),
            None => return,
        };
        tokio::select! {
            _ = tokio::time::sleep_until(next.into()) => {}
            _ = wake.notified() => {}
        }
    }
}
