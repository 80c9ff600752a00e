//! The bookkeeping of a stateful model version's sequences, without threads or timing: which
//! sequences are live, which slot each holds (or that it waits in the backlog for one), their
//! queued requests and implicit state, which batches run next under the Direct or Oldest
//! strategy, and which idle sequences expire. `crate::sequences` drives it and runs the
//! batches; everything here is a function of the registry and the clock, so its rules are
//! unit-tested as such.
//!
//! A sequence has at most one request in a batch at a time: its next request needs the state
//! the previous one leaves.

use crate::error::{EngineError, Result};
use crate::queue::BatchKey;
use crate::sequence_config::{SequencePlan, Strategy};
use crate::tensor::Tensor;
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// A sequence's correlation id: an unsigned integer or a string, as Triton takes them
/// (request parameter `sequence_id`). 0 and the empty string mean "no sequence".
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(untagged)]
pub enum CorrelationId {
    Int(u64),
    Str(String),
}

impl std::fmt::Display for CorrelationId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CorrelationId::Int(n) => write!(f, "{n}"),
            CorrelationId::Str(s) => write!(f, "'{s}'"),
        }
    }
}

impl CorrelationId {
    /// Triton's "no correlation id": 0 or "".
    pub fn is_none(&self) -> bool {
        matches!(self, CorrelationId::Int(0))
            || matches!(self, CorrelationId::Str(s) if s.is_empty())
    }
}

/// A request's place in a sequence (request parameters `sequence_id`, `sequence_start`,
/// `sequence_end`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequenceFlags {
    pub id: CorrelationId,
    pub start: bool,
    pub end: bool,
}

/// A live sequence, as an operator sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SequenceInfo {
    pub id: CorrelationId,
    /// Its batch slot (Direct) or candidate place (Oldest); `None` while it waits in the
    /// backlog for one.
    pub slot: Option<usize>,
    /// Requests answered so far.
    pub requests: u64,
    /// Requests queued, not yet in a batch.
    pub queued: usize,
    /// Whether one of its requests is in a batch now.
    pub running: bool,
    /// Whether its END request has arrived.
    pub ending: bool,
    pub age_ms: u64,
    /// Time since its last request arrived or was answered.
    pub idle_ms: u64,
}

/// A request waiting in its sequence.
pub(crate) struct Pending {
    pub inputs: Vec<Tensor>,
    /// Outputs asked for; empty = every output but the state outputs.
    pub outputs: Vec<String>,
    pub start: bool,
    pub end: bool,
    pub enqueued: Instant,
    pub reply: oneshot::Sender<Result<Vec<Tensor>>>,
}

/// One request taken into a batch, at `row`, with the state it runs on.
pub(crate) struct Member {
    pub id: CorrelationId,
    pub row: usize,
    pub pending: Pending,
    pub state: Vec<Tensor>,
}

/// A batch to run: `rows` rows (Direct fills the rows of empty or not-ready slots below the
/// highest ready one with null rows), `members` in row order.
pub(crate) struct Formed {
    pub rows: usize,
    pub members: Vec<Member>,
    /// The Direct slot group it runs for (one batch at a time per group).
    pub group: Option<usize>,
}

/// What a member's run left: its state after the run, or the state it had (the run failed).
pub(crate) struct Outcome {
    pub id: CorrelationId,
    pub end: bool,
    pub state: Vec<Tensor>,
}

struct Seq {
    slot: Option<usize>,
    /// The state the next request runs on; `None` = the initial state.
    state: Option<Vec<Tensor>>,
    pending: VecDeque<Pending>,
    running: bool,
    /// Its END request has arrived: no request may follow.
    ending: bool,
    /// Cleared by an operator while a request of it ran: dropped when that run ends.
    cleared: bool,
    started: Instant,
    last_active: Instant,
    requests: u64,
}

impl Seq {
    fn is_idle(&self) -> bool {
        !self.running && self.pending.is_empty()
    }
}

/// How many expired ids are remembered, to tell a late request why its sequence is gone.
const EXPIRED_REMEMBERED: usize = 1024;

pub(crate) struct Registry {
    strategy: Strategy,
    /// Direct: slots per group (the model's batch); Oldest: the largest batch.
    width: usize,
    /// Groups: instances. Direct runs one batch per group at a time; Oldest at most this many.
    groups: usize,
    slots: Vec<Option<CorrelationId>>,
    group_busy: Vec<bool>,
    running_batches: usize,
    sequences: HashMap<CorrelationId, Seq>,
    backlog: VecDeque<CorrelationId>,
    expired: VecDeque<CorrelationId>,
    queued: usize,
    /// Requests that may wait, all sequences together, before new ones are refused.
    max_queued: usize,
    /// Sequences that may wait in the backlog for a slot.
    max_backlog: usize,
}

impl Registry {
    /// A registry for `groups` instances; `max_queued` bounds the requests waiting and the
    /// sequences waiting for a slot.
    pub fn new(plan: &SequencePlan, groups: usize, max_queued: usize) -> Registry {
        let groups = groups.max(1);
        let width = plan.max_batch_size.max(1);
        let per_group = match plan.strategy {
            Strategy::Direct { .. } => width,
            Strategy::Oldest { candidates, .. } => candidates.max(1),
        };
        Registry {
            strategy: plan.strategy,
            width,
            groups,
            slots: vec![None; per_group * groups],
            group_busy: vec![false; groups],
            running_batches: 0,
            sequences: HashMap::new(),
            backlog: VecDeque::new(),
            expired: VecDeque::new(),
            queued: 0,
            max_queued: max_queued.max(1),
            max_backlog: max_queued.max(1),
        }
    }

    /// Queues a request in its sequence: a START makes the sequence (in a free slot, else in
    /// the backlog); any other request must belong to a live sequence that has not ended.
    pub fn admit(
        &mut self,
        model: &str,
        flags: &SequenceFlags,
        pending: Pending,
        idle: Duration,
        now: Instant,
    ) -> Result<()> {
        let id = &flags.id;
        if id.is_none() {
            return Err(no_sequence(model));
        }
        if self.queued >= self.max_queued {
            return Err(EngineError::QueueFull {
                model: model.to_string(),
                queued: self.queued,
                retry_after: Duration::from_secs(1),
            });
        }
        if flags.start {
            if let Some(live) = self.sequences.get(id) {
                return Err(EngineError::InvalidInput(format!(
                    "sequence {id} of model '{model}' is already in progress ({} requests answered); end it with sequence_end, or wait {} ms for it to expire, before starting it again",
                    live.requests,
                    idle.as_millis()
                )));
            }
            let slot = self.slots.iter().position(Option::is_none);
            if slot.is_none() && self.backlog.len() >= self.max_backlog {
                return Err(EngineError::Unavailable(format!(
                    "model '{model}' has every sequence slot taken and {} sequences waiting for one; retry later",
                    self.backlog.len()
                )));
            }
            match slot {
                Some(s) => self.slots[s] = Some(id.clone()),
                None => self.backlog.push_back(id.clone()),
            }
            self.expired.retain(|e| e != id);
            self.sequences.insert(
                id.clone(),
                Seq {
                    slot,
                    state: None,
                    pending: VecDeque::new(),
                    running: false,
                    ending: false,
                    cleared: false,
                    started: now,
                    last_active: now,
                    requests: 0,
                },
            );
        }
        let Some(seq) = self.sequences.get_mut(id) else {
            return Err(if self.expired.contains(id) {
                EngineError::InvalidInput(format!(
                    "sequence {id} of model '{model}' expired: it was idle longer than {} ms and its state is gone; start it again with sequence_start",
                    idle.as_millis()
                ))
            } else {
                EngineError::InvalidInput(format!(
                    "inference request for sequence {id} to model '{model}' must specify the START flag on the first request of the sequence"
                ))
            });
        };
        if seq.ending || seq.cleared {
            return Err(EngineError::InvalidInput(format!(
                "sequence {id} of model '{model}' has ended (its END request came, or it was cleared); start it again with sequence_start"
            )));
        }
        seq.ending = flags.end;
        seq.last_active = now;
        seq.pending.push_back(pending);
        self.queued += 1;
        Ok(())
    }

    /// Takes the batches that run now. Also returns when formation must look again (a batch
    /// waiting for its delay), if it must.
    pub fn form(
        &mut self,
        plan: &SequencePlan,
        now: Instant,
        key: impl Fn(&Pending, Option<&[Tensor]>) -> RowKey,
    ) -> (Vec<Formed>, Option<Instant>) {
        match self.strategy {
            Strategy::Direct {
                delay,
                min_utilization,
            } => self.form_direct(plan, now, delay, min_utilization, &key),
            Strategy::Oldest { delay, .. } => self.form_oldest(plan, now, delay, &key),
        }
    }

    /// The sequences whose next request can run now, by slot: its key and arrival.
    fn ready(
        &self,
        slots: std::ops::Range<usize>,
        key: &impl Fn(&Pending, Option<&[Tensor]>) -> RowKey,
    ) -> Vec<(usize, RowKey, Instant)> {
        slots
            .filter_map(|s| {
                let id = self.slots[s].as_ref()?;
                let seq = self.sequences.get(id)?;
                let head = seq.pending.front().filter(|_| !seq.running)?;
                Some((s, key(head, seq.state.as_deref()), head.enqueued))
            })
            .collect()
    }

    fn form_direct(
        &mut self,
        plan: &SequencePlan,
        now: Instant,
        delay: Duration,
        min_utilization: f32,
        key: &impl Fn(&Pending, Option<&[Tensor]>) -> RowKey,
    ) -> (Vec<Formed>, Option<Instant>) {
        let mut formed = Vec::new();
        let mut wake: Option<Instant> = None;
        for group in 0..self.groups {
            if self.group_busy[group] {
                continue;
            }
            let base = group * self.width;
            let ready = self.ready(base..base + self.width, key);
            let Some((_, first, _)) = ready.first() else {
                continue;
            };
            // Rows that run together share shapes: the lowest ready slot's decide.
            let members: Vec<(usize, Instant)> = ready
                .iter()
                .filter(|(_, k, _)| k == first)
                .map(|&(s, _, at)| (s, at))
                .collect();
            let oldest = members.iter().map(|&(_, at)| at).min().unwrap_or(now);
            let utilization = members.len() as f32 / self.width as f32;
            if utilization < min_utilization && now < oldest + delay {
                wake = Some(wake.map_or(oldest + delay, |w| w.min(oldest + delay)));
                continue;
            }
            let rows = members
                .iter()
                .map(|&(s, _)| s - base + 1)
                .max()
                .unwrap_or(1);
            let members = members
                .into_iter()
                .filter_map(|(s, _)| self.take(plan, s, s - base))
                .collect();
            self.group_busy[group] = true;
            self.running_batches += 1;
            formed.push(Formed {
                rows,
                members,
                group: Some(group),
            });
        }
        (formed, wake)
    }

    fn form_oldest(
        &mut self,
        plan: &SequencePlan,
        now: Instant,
        delay: Duration,
        key: &impl Fn(&Pending, Option<&[Tensor]>) -> RowKey,
    ) -> (Vec<Formed>, Option<Instant>) {
        let mut formed = Vec::new();
        while self.running_batches < self.groups {
            let mut ready = self.ready(0..self.slots.len(), key);
            ready.sort_by_key(|&(s, _, at)| (at, s));
            let Some((_, head, oldest)) = ready.first().cloned() else {
                break;
            };
            let same: Vec<usize> = ready
                .iter()
                .filter(|(_, k, _)| *k == head)
                .take(self.width)
                .map(|&(s, _, _)| s)
                .collect();
            let take = if same.len() == self.width || now >= oldest + delay {
                same.len()
            } else {
                match plan.preferred.iter().rev().find(|&&p| p <= same.len()) {
                    Some(&p) => p,
                    None => return (formed, Some(oldest + delay)),
                }
            };
            let members: Vec<Member> = same
                .into_iter()
                .take(take)
                .enumerate()
                .filter_map(|(row, s)| self.take(plan, s, row))
                .collect();
            self.running_batches += 1;
            formed.push(Formed {
                rows: members.len(),
                members,
                group: None,
            });
        }
        (formed, None)
    }

    /// Takes the head request of the sequence in slot `slot` into a batch at `row`.
    fn take(&mut self, plan: &SequencePlan, slot: usize, row: usize) -> Option<Member> {
        let id = self.slots[slot].clone()?;
        let seq = self.sequences.get_mut(&id)?;
        let pending = seq.pending.pop_front()?;
        self.queued -= 1;
        seq.running = true;
        let state = match seq.state.take() {
            Some(state) if !pending.start => state,
            _ => initial_state(plan),
        };
        Some(Member {
            id,
            row,
            pending,
            state,
        })
    }

    /// A batch ended: each member's sequence keeps the state it left, and ends with its END
    /// request; freed slots go to the backlog's oldest sequence.
    pub fn complete(&mut self, group: Option<usize>, outcomes: Vec<Outcome>, now: Instant) {
        if let Some(g) = group {
            self.group_busy[g] = false;
        }
        self.running_batches = self.running_batches.saturating_sub(1);
        for outcome in outcomes {
            let Some(seq) = self.sequences.get_mut(&outcome.id) else {
                continue;
            };
            seq.running = false;
            seq.requests += 1;
            seq.last_active = now;
            seq.state = Some(outcome.state);
            let done = seq.cleared || (outcome.end && seq.pending.is_empty());
            if done {
                self.remove(&outcome.id);
            }
        }
    }

    /// Ends every idle sequence past `idle` (its slot and state freed, its id remembered as
    /// expired). Returns when the next one would expire.
    pub fn reap(&mut self, idle: Duration, now: Instant) -> Option<Instant> {
        let expired: Vec<CorrelationId> = self
            .sequences
            .iter()
            .filter(|(_, s)| s.is_idle() && now >= s.last_active + idle)
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            tracing::debug!(sequence = %id, "sequence expired after being idle");
            self.remove(&id);
            self.expired.push_back(id);
            if self.expired.len() > EXPIRED_REMEMBERED {
                self.expired.pop_front();
            }
        }
        self.sequences
            .values()
            .filter(|s| s.is_idle())
            .map(|s| s.last_active + idle)
            .min()
    }

    /// Ends a sequence on an operator's word: its queued requests are handed back (to be
    /// refused); a request of it that is running finishes, then the sequence is dropped.
    /// None when no such sequence is live.
    pub fn clear(&mut self, id: &CorrelationId) -> Option<Vec<Pending>> {
        let seq = self.sequences.get_mut(id)?;
        let dropped: Vec<Pending> = seq.pending.drain(..).collect();
        self.queued -= dropped.len();
        if seq.running {
            seq.cleared = true;
        } else {
            self.remove(id);
        }
        Some(dropped)
    }

    /// Every live sequence, by id.
    pub fn list(&self, now: Instant) -> Vec<SequenceInfo> {
        let mut out: Vec<SequenceInfo> = self
            .sequences
            .iter()
            .map(|(id, s)| SequenceInfo {
                id: id.clone(),
                slot: s.slot,
                requests: s.requests,
                queued: s.pending.len(),
                running: s.running,
                ending: s.ending,
                age_ms: now.saturating_duration_since(s.started).as_millis() as u64,
                idle_ms: now.saturating_duration_since(s.last_active).as_millis() as u64,
            })
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out
    }

    /// Drops a sequence and hands its slot to the oldest sequence in the backlog.
    fn remove(&mut self, id: &CorrelationId) {
        let Some(seq) = self.sequences.remove(id) else {
            return;
        };
        self.queued -= seq.pending.len();
        match seq.slot {
            Some(slot) => {
                self.slots[slot] = None;
                while let Some(next) = self.backlog.pop_front() {
                    if let Some(waiting) = self.sequences.get_mut(&next) {
                        waiting.slot = Some(slot);
                        self.slots[slot] = Some(next);
                        break;
                    }
                }
            }
            None => self.backlog.retain(|b| b != id),
        }
    }
}

/// What must match for two sequences' requests to share a batch: the request's inputs'
/// datatypes and non-batch dimensions, and the shapes of the states they run on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RowKey {
    pub inputs: BatchKey,
    pub states: Vec<Vec<i64>>,
}

/// Zeros of each state's initial shape (empty strings for BYTES). The shapes come from the
/// checked config (positive dimensions), so they are valid.
pub(crate) fn initial_state(plan: &SequencePlan) -> Vec<Tensor> {
    plan.states
        .iter()
        .filter_map(|s| Tensor::zeros(s.input.clone(), s.datatype, s.initial_shape.clone()).ok())
        .collect()
}

fn no_sequence(model: &str) -> EngineError {
    EngineError::InvalidInput(format!(
        "inference request to model '{model}' must specify a non-zero or non-empty correlation ID (request parameter sequence_id): it serves sequences"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(strategy: Strategy, max_batch_size: usize, preferred: &[usize]) -> SequencePlan {
        SequencePlan {
            strategy,
            preferred: preferred.to_vec(),
            idle: Duration::from_millis(100),
            max_batch_size,
            controls: vec![],
            states: vec![],
        }
    }

    fn direct(delay_ms: u64, min_utilization: f32) -> Strategy {
        Strategy::Direct {
            delay: Duration::from_millis(delay_ms),
            min_utilization,
        }
    }

    fn oldest(candidates: usize, delay_ms: u64) -> Strategy {
        Strategy::Oldest {
            candidates,
            delay: Duration::from_millis(delay_ms),
        }
    }

    type Replies = Vec<oneshot::Receiver<Result<Vec<Tensor>>>>;

    /// Queues a request of sequence `id` whose input `x` holds `value`.
    fn send(
        r: &mut Registry,
        replies: &mut Replies,
        id: u64,
        (start, end): (bool, bool),
        value: f32,
        at: Instant,
    ) -> Result<()> {
        let (reply, rx) = oneshot::channel();
        replies.push(rx);
        let pending = Pending {
            inputs: vec![Tensor::from_f32("x", vec![1, 1], &[value]).unwrap()],
            outputs: vec![],
            start,
            end,
            enqueued: at,
            reply,
        };
        let flags = SequenceFlags {
            id: CorrelationId::Int(id),
            start,
            end,
        };
        r.admit("m", &flags, pending, Duration::from_millis(100), at)
    }

    fn key(p: &Pending, _: Option<&[Tensor]>) -> RowKey {
        RowKey {
            inputs: BatchKey::of(&p.inputs, &[]),
            states: vec![],
        }
    }

    /// (row, id, x) of each member.
    fn rows(f: &Formed) -> Vec<(usize, u64, f32)> {
        f.members
            .iter()
            .map(|m| {
                let CorrelationId::Int(id) = m.id else {
                    panic!("string id")
                };
                (m.row, id, m.pending.inputs[0].to_f32().unwrap()[0])
            })
            .collect()
    }

    fn finish(r: &mut Registry, f: Formed, now: Instant) {
        let outcomes = f
            .members
            .into_iter()
            .map(|m| Outcome {
                id: m.id,
                end: m.pending.end,
                state: m.state,
            })
            .collect();
        r.complete(f.group, outcomes, now);
    }

    #[test]
    fn direct_pins_each_sequence_to_its_slot_and_backlogs_the_rest() {
        let p = plan(direct(0, 0.0), 2, &[]);
        let mut r = Registry::new(&p, 1, 16);
        let mut replies = Vec::new();
        let t0 = Instant::now();
        send(&mut r, &mut replies, 1, (true, false), 1.0, t0).unwrap();
        send(&mut r, &mut replies, 2, (true, false), 2.0, t0).unwrap();
        // Both slots are taken: sequence 3 waits in the backlog.
        send(&mut r, &mut replies, 3, (true, false), 3.0, t0).unwrap();
        let (formed, wake) = r.form(&p, t0, key);
        assert_eq!(wake, None);
        assert_eq!(formed.len(), 1);
        assert_eq!(formed[0].rows, 2);
        assert_eq!(rows(&formed[0]), [(0, 1, 1.0), (1, 2, 2.0)]);
        // One batch per group at a time: the next requests wait for this one.
        send(&mut r, &mut replies, 2, (false, true), 20.0, t0).unwrap();
        assert!(r.form(&p, t0, key).0.is_empty());
        finish(&mut r, formed.into_iter().next().unwrap(), t0);

        // Only slot 1 is ready: a batch of 2 rows whose row 0 is a null row.
        let formed = r.form(&p, t0, key).0;
        assert_eq!(formed[0].rows, 2);
        assert_eq!(rows(&formed[0]), [(1, 2, 20.0)]);
        finish(&mut r, formed.into_iter().next().unwrap(), t0);
        // Sequence 2 ended: its slot went to sequence 3, from the backlog.
        let formed = r.form(&p, t0, key).0;
        assert_eq!(rows(&formed[0]), [(1, 3, 3.0)]);
        let listed = r.list(t0);
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[1].slot, Some(1));
    }

    #[test]
    fn direct_waits_for_utilization_until_the_delay() {
        let p = plan(direct(10, 1.0), 2, &[]);
        let mut r = Registry::new(&p, 1, 16);
        let mut replies = Vec::new();
        let t0 = Instant::now();
        send(&mut r, &mut replies, 1, (true, false), 1.0, t0).unwrap();
        let (formed, wake) = r.form(&p, t0, key);
        assert!(formed.is_empty());
        assert_eq!(wake, Some(t0 + Duration::from_millis(10)));
        // Both slots ready: utilization 1 runs at once.
        send(&mut r, &mut replies, 2, (true, false), 2.0, t0).unwrap();
        assert_eq!(rows(&r.form(&p, t0, key).0[0]), [(0, 1, 1.0), (1, 2, 2.0)]);
    }

    #[test]
    fn oldest_batches_one_request_per_sequence_oldest_first() {
        let p = plan(oldest(4, 10), 2, &[]);
        let mut r = Registry::new(&p, 1, 16);
        let mut replies = Vec::new();
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        send(&mut r, &mut replies, 5, (true, false), 5.0, ms(0)).unwrap();
        send(&mut r, &mut replies, 5, (false, false), 50.0, ms(1)).unwrap();
        // Alone and before the delay: it waits for company.
        let (formed, wake) = r.form(&p, ms(1), key);
        assert!(formed.is_empty());
        assert_eq!(wake, Some(ms(10)));
        send(&mut r, &mut replies, 6, (true, false), 6.0, ms(2)).unwrap();
        // Full (2): sequence 5's first request and sequence 6's, never two of sequence 5.
        let formed = r.form(&p, ms(2), key).0;
        assert_eq!(formed.len(), 1);
        assert_eq!(rows(&formed[0]), [(0, 5, 5.0), (1, 6, 6.0)]);
        finish(&mut r, formed.into_iter().next().unwrap(), ms(3));
        // Sequence 5's second request runs alone once the delay is up.
        assert!(r.form(&p, ms(3), key).0.is_empty());
        let formed = r.form(&p, ms(12), key).0;
        assert_eq!(rows(&formed[0]), [(0, 5, 50.0)]);
    }

    #[test]
    fn oldest_runs_a_preferred_size_at_once() {
        let p = plan(oldest(4, 1000), 4, &[2]);
        let mut r = Registry::new(&p, 1, 16);
        let mut replies = Vec::new();
        let t0 = Instant::now();
        for id in 1..=3 {
            send(&mut r, &mut replies, id, (true, false), id as f32, t0).unwrap();
        }
        let formed = r.form(&p, t0, key).0;
        assert_eq!(rows(&formed[0]), [(0, 1, 1.0), (1, 2, 2.0)]);
    }

    #[test]
    fn requests_outside_a_live_sequence_are_refused_clearly() {
        let p = plan(direct(0, 0.0), 1, &[]);
        let mut r = Registry::new(&p, 1, 16);
        let mut replies = Vec::new();
        let t0 = Instant::now();
        let e = send(&mut r, &mut replies, 9, (false, false), 1.0, t0).unwrap_err();
        assert!(e.to_string().contains("must specify the START flag"), "{e}");
        let e = send(&mut r, &mut replies, 0, (true, false), 1.0, t0).unwrap_err();
        assert!(e.to_string().contains("non-zero"), "{e}");
        send(&mut r, &mut replies, 9, (true, false), 1.0, t0).unwrap();
        let e = send(&mut r, &mut replies, 9, (true, false), 1.0, t0).unwrap_err();
        assert!(e.to_string().contains("already in progress"), "{e}");
        send(&mut r, &mut replies, 9, (false, true), 1.0, t0).unwrap();
        let e = send(&mut r, &mut replies, 9, (false, false), 1.0, t0).unwrap_err();
        assert!(e.to_string().contains("has ended"), "{e}");
    }

    #[test]
    fn idle_sequences_expire_and_say_so() {
        let p = plan(direct(0, 0.0), 1, &[]);
        let mut r = Registry::new(&p, 1, 16);
        let mut replies = Vec::new();
        let t0 = Instant::now();
        let idle = Duration::from_millis(100);
        send(&mut r, &mut replies, 4, (true, false), 1.0, t0).unwrap();
        // Queued requests never expire.
        assert_eq!(r.reap(idle, t0 + idle * 5), None);
        let formed = r.form(&p, t0, key).0;
        finish(&mut r, formed.into_iter().next().unwrap(), t0);
        assert_eq!(r.reap(idle, t0), Some(t0 + idle));
        assert_eq!(r.reap(idle, t0 + idle), None);
        assert!(r.list(t0).is_empty());
        let e = send(&mut r, &mut replies, 4, (false, false), 1.0, t0).unwrap_err();
        assert!(e.to_string().contains("expired"), "{e}");
        // Starting it again is allowed.
        send(&mut r, &mut replies, 4, (true, false), 1.0, t0).unwrap();
    }

    #[test]
    fn queued_requests_and_the_backlog_are_bounded() {
        let p = plan(direct(0, 0.0), 1, &[]);
        let mut r = Registry::new(&p, 1, 2);
        let mut replies = Vec::new();
        let t0 = Instant::now();
        send(&mut r, &mut replies, 1, (true, false), 1.0, t0).unwrap();
        send(&mut r, &mut replies, 2, (true, false), 1.0, t0).unwrap();
        let e = send(&mut r, &mut replies, 3, (true, false), 1.0, t0).unwrap_err();
        assert!(matches!(e, EngineError::QueueFull { .. }), "{e}");
        let cleared = r.clear(&CorrelationId::Int(2)).unwrap();
        assert_eq!(cleared.len(), 1);
        let e = send(&mut r, &mut replies, 3, (true, false), 1.0, t0);
        assert!(e.is_ok(), "a cleared sequence frees its place");
        let e = send(&mut r, &mut replies, 4, (true, false), 1.0, t0).unwrap_err();
        assert!(matches!(e, EngineError::QueueFull { .. }), "{e}");
    }
}
