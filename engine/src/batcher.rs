//! Dynamic batching: which queued requests run together, and how their tensors are joined along
//! dimension 0 and split back. Batch formation is a pure function of the queue, the policy and
//! the clock, so its rules are unit-tested without threads or timing.

use crate::config::{ModelConfig, TimeoutAction};
use crate::error::{EngineError, Result};
use crate::queue::{Levels, Request};
use crate::tensor::{Tensor, TensorData};
use std::time::{Duration, Instant};

/// The scheduling part of a model config, resolved against the engine's defaults.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BatchPolicy {
    /// 0 = the model does not batch: one request per execution, as given.
    pub max_batch_size: usize,
    /// Ascending.
    pub preferred: Vec<usize>,
    pub max_delay: Duration,
    pub priority_levels: u32,
    pub default_level: u32,
    pub timeout_action: TimeoutAction,
    pub default_timeout: Option<Duration>,
    pub allow_timeout_override: bool,
    pub max_queue_size: usize,
}

impl BatchPolicy {
    pub fn new(config: &ModelConfig, default_queue_size: usize) -> BatchPolicy {
        let db = config.dynamic_batching.as_ref();
        let mut preferred: Vec<usize> = db
            .map(|d| d.preferred_batch_size.iter().map(|&p| p as usize).collect())
            .unwrap_or_default();
        preferred.sort_unstable();
        preferred.dedup();
        let policy = db.map(|d| &d.default_queue_policy);
        BatchPolicy {
            // A stateful version's batches are formed by its sequencer and queued whole: the
            // queue runs them one at a time, as given.
            max_batch_size: if config.sequence_batching.is_some() {
                0
            } else {
                config.max_batch_size as usize
            },
            preferred,
            max_delay: config.queue_delay(),
            priority_levels: db.map_or(0, |d| d.priority_levels),
            default_level: db.map_or(0, |d| d.default_priority_level),
            timeout_action: policy.map_or(TimeoutAction::Reject, |p| p.timeout_action),
            default_timeout: policy
                .map(|p| p.default_timeout_microseconds)
                .filter(|&us| us > 0)
                .map(Duration::from_micros),
            // Without a dynamic_batching section nobody restricted overrides, so a client's
            // own timeout counts.
            allow_timeout_override: policy.is_none_or(|p| p.allow_timeout_override),
            max_queue_size: policy
                .map(|p| p.max_queue_size as usize)
                .filter(|&n| n > 0)
                .unwrap_or(default_queue_size)
                .max(1),
        }
    }

    /// Whether a single-sample request that finds the queue empty runs at once: without
    /// batching, without a queue delay, or when one sample is a batch size it would run at. Only
    /// then does an idle instance gain by spinning for the next request (`idle_spin`); a request
    /// that will wait out the delay anyway gains nothing from being noticed sooner.
    pub fn lone_request_runs_at_once(&self) -> bool {
        self.max_batch_size <= 1 || self.max_delay.is_zero() || self.preferred.contains(&1)
    }

    /// The queue level for a request's priority (0 = default). Level 1 is served first.
    pub fn level(&self, priority: u32) -> Result<u32> {
        if self.priority_levels == 0 {
            return Ok(1);
        }
        match priority {
            0 => Ok(self.default_level),
            p if p <= self.priority_levels => Ok(p),
            p => Err(EngineError::InvalidInput(format!(
                "priority {p} is out of range: this model has levels 1 (highest) to {}",
                self.priority_levels
            ))),
        }
    }

    /// The queue timeout of a request that asked for `requested`.
    pub fn timeout(&self, requested: Option<Duration>) -> Option<Duration> {
        match requested {
            Some(t) if self.allow_timeout_override => Some(t),
            _ => self.default_timeout,
        }
    }
}

/// What an idle instance should do next.
pub(crate) enum Decision {
    Run(Vec<Request>),
    /// Wait for more requests, at most until then.
    WaitUntil(Instant),
    /// Nothing queued.
    Idle,
}

/// Drops requests nobody waits for, and applies queue timeouts: REJECT answers the request with
/// a timeout error (it never runs), DELAY moves it behind every request still in time.
fn sweep(queue: &mut Levels, policy: &BatchPolicy, model: &str, now: Instant) {
    // The common case, nothing to drop or move, allocates nothing (this runs for every batch).
    let due = |r: &Request| !r.is_wanted() || r.deadline.is_some_and(|d| d <= now);
    if !queue.iter().any(due) {
        return;
    }
    let mut delayed = Vec::new();
    for level in queue.levels.values_mut() {
        let mut kept = std::collections::VecDeque::with_capacity(level.len());
        for mut request in level.drain(..) {
            if !request.is_wanted() {
                continue;
            }
            match request.deadline {
                Some(deadline) if deadline <= now => match policy.timeout_action {
                    TimeoutAction::Reject => {
                        if request.ticket.abandon() {
                            let waited_ms = (now - request.enqueued).as_millis() as u64;
                            let _ = request.reply.send(Err(EngineError::Timeout {
                                model: model.to_string(),
                                waited_ms,
                            }));
                        }
                    }
                    TimeoutAction::Delay => {
                        request.deadline = None;
                        request.level = u32::MAX;
                        delayed.push(request);
                    }
                },
                _ => kept.push_back(request),
            }
        }
        *level = kept;
    }
    if !delayed.is_empty() {
        queue.levels.entry(u32::MAX).or_default().extend(delayed);
    }
}

/// The head batch as the queue stands: its members' positions (level, index) in service order,
/// and how many of them run now (None: the batch waits until `wake`).
struct Plan {
    members: Members,
    take: Option<usize>,
    wake: Instant,
}

/// A batch's members: on the stack up to 16 (planning runs for every request that queues, and
/// for every batch).
type Members = smallvec::SmallVec<[(u32, usize); 16]>;

/// Forms the head batch without taking it (see [`next_batch`] for the rules); None when nothing
/// is queued. Requests nobody waits for any more are passed over, as [`sweep`] would drop them.
fn plan(queue: &Levels, policy: &BatchPolicy, now: Instant) -> Option<Plan> {
    let (head_level, head_index, head) = queue
        .levels
        .iter()
        .flat_map(|(&level, requests)| requests.iter().enumerate().map(move |(i, r)| (level, i, r)))
        .find(|(_, _, r)| r.is_wanted())?;
    let max = policy.max_batch_size;
    // The members, the largest member count whose sample count is a preferred size, and the
    // oldest arrival among them.
    let mut members = Members::new();
    let mut preferred = None;
    let mut total = 0usize;
    let mut oldest = head.enqueued;
    if max == 0 || head.samples >= max || head.samples == 0 {
        // No batching, or a request that fills a batch by itself.
        members.push((head_level, head_index));
        total = max;
    } else {
        let key = &head.key;
        'scan: for (&level, requests) in &queue.levels {
            for (i, r) in requests.iter().enumerate() {
                if r.key != *key || r.samples == 0 || total + r.samples > max || !r.is_wanted() {
                    continue;
                }
                total += r.samples;
                members.push((level, i));
                if policy.preferred.binary_search(&total).is_ok() {
                    preferred = Some(members.len());
                }
                oldest = oldest.min(r.enqueued);
                if total == max {
                    break 'scan;
                }
            }
        }
    }
    let take = if total >= max || now >= oldest + policy.max_delay {
        Some(members.len())
    } else {
        preferred
    };
    let wake = match take {
        Some(_) => now,
        None => {
            let next_deadline = queue.iter().filter_map(|r| r.deadline).min();
            let wake = oldest + policy.max_delay;
            next_deadline.map_or(wake, |d| d.min(wake))
        }
    };
    Some(Plan {
        members,
        take,
        wake,
    })
}

/// When the queue as it stands would next need an instance: None if a batch could run now (or
/// nothing is queued), else the time its head batch waits until. Read-only, so a request can
/// ask it when it queues, to wake an instance only if the one already sleeping on a timer would
/// wake too late.
pub(crate) fn waits_until(queue: &Levels, policy: &BatchPolicy, now: Instant) -> Option<Instant> {
    plan(queue, policy, now).and_then(|p| p.take.is_none().then_some(p.wake))
}

/// Picks the next batch. Rules, after Triton's dynamic batcher:
/// - the head (highest level, oldest) decides the batch's shapes; only requests with the same
///   non-batch dimensions, datatypes and outputs join it, in service order, up to
///   `max_batch_size` samples;
/// - a full batch runs at once; so does the largest preferred size that can be formed;
/// - otherwise the batch waits until the oldest member has waited `max_delay`, then runs as is.
pub(crate) fn next_batch(
    queue: &mut Levels,
    policy: &BatchPolicy,
    model: &str,
    now: Instant,
) -> Decision {
    sweep(queue, policy, model, now);
    let Some(Plan {
        mut members,
        take,
        wake,
    }) = plan(queue, policy, now)
    else {
        return Decision::Idle;
    };
    let Some(take) = take else {
        return Decision::WaitUntil(wake);
    };
    members.truncate(take);
    // Remove from the back so earlier indices stay valid.
    members.sort_unstable_by(|a, b| b.cmp(a));
    let mut batch: Vec<Request> = members
        .into_iter()
        .filter_map(|(level, i)| queue.levels.get_mut(&level)?.remove(i))
        .collect();
    batch.reverse();
    // Emptied levels stay (at most one per priority level, plus the DELAY level): removing
    // them made the next request to each allocate its level again.
    // A caller may give up between the sweep and here; such requests must not run.
    batch.retain(|r| r.ticket.take());
    if batch.is_empty() {
        // Everything chosen was abandoned meanwhile: look again.
        return next_batch(queue, policy, model, now);
    }
    Decision::Run(batch)
}

/// Joins the batch's inputs along dimension 0, in the first request's input order.
pub(crate) fn concat(batch: &[Request]) -> Result<Vec<Tensor>> {
    let first = batch
        .first()
        .ok_or_else(|| EngineError::Internal("empty batch".into()))?;
    first
        .inputs
        .iter()
        .map(|proto| {
            let parts: Vec<&Tensor> = batch
                .iter()
                .map(|r| {
                    r.inputs
                        .iter()
                        .find(|t| t.name == proto.name)
                        .ok_or_else(|| {
                            EngineError::Internal(format!(
                                "batch member lacks input '{}'",
                                proto.name
                            ))
                        })
                })
                .collect::<Result<_>>()?;
            join(proto, &parts)
        })
        .collect()
}

/// Joins `parts` (tensors shaped like `proto` but for dimension 0) along dimension 0, under
/// `proto`'s name and datatype.
pub(crate) fn join(proto: &Tensor, parts: &[&Tensor]) -> Result<Tensor> {
    let rows: i64 = parts.iter().map(|t| t.shape[0]).sum();
    let mut shape = proto.shape.clone();
    shape[0] = rows;
    let data = match &proto.data {
        TensorData::Raw(_) => {
            let mut bytes = Vec::with_capacity(parts.iter().map(|t| t.byte_len()).sum());
            for t in parts {
                if let TensorData::Raw(b) = &t.data {
                    bytes.extend_from_slice(b);
                }
            }
            TensorData::Raw(bytes)
        }
        TensorData::Bytes(_) => {
            let mut items = Vec::new();
            for t in parts {
                if let TensorData::Bytes(b) = &t.data {
                    items.extend(b.iter().cloned());
                }
            }
            TensorData::Bytes(items)
        }
    };
    Ok(Tensor::new(
        proto.name.clone(),
        proto.datatype,
        shape,
        data,
    )?)
}

/// Splits a batch's outputs back into one set per request, by sample counts.
pub(crate) fn split(
    model: &str,
    outputs: Vec<Tensor>,
    samples: &[usize],
) -> Result<Vec<Vec<Tensor>>> {
    let total: usize = samples.iter().sum();
    let mut per_request: Vec<Vec<Tensor>> = samples.iter().map(|_| Vec::new()).collect();
    for output in outputs {
        if output.shape.first().copied() != Some(total as i64) {
            return Err(EngineError::ModelFailed {
                model: model.to_string(),
                reason: format!(
                    "output '{}' has shape {:?}, whose first dimension is not the batch of {total}; set max_batch_size 0 for this model",
                    output.name, output.shape
                ),
            });
        }
        let count = output.element_count().unwrap_or(0);
        let per_sample = count.checked_div(total).unwrap_or(0);
        let mut offset = 0usize;
        for (slot, &n) in per_request.iter_mut().zip(samples) {
            let mut shape = output.shape.clone();
            shape[0] = n as i64;
            let (start, end) = (offset * per_sample, (offset + n) * per_sample);
            let data = match &output.data {
                TensorData::Raw(bytes) => {
                    let size = output.datatype.size().unwrap_or(1);
                    TensorData::Raw(bytes[start * size..end * size].to_vec())
                }
                TensorData::Bytes(items) => TensorData::Bytes(items[start..end].to_vec()),
            };
            slot.push(Tensor::new(
                output.name.clone(),
                output.datatype,
                shape,
                data,
            )?);
            offset += n;
        }
    }
    Ok(per_request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::{BatchKey, Ticket};
    use std::sync::Arc;
    use tokio::sync::oneshot;

    fn policy(max: usize, preferred: &[usize], delay_ms: u64) -> BatchPolicy {
        BatchPolicy {
            max_batch_size: max,
            preferred: preferred.to_vec(),
            max_delay: Duration::from_millis(delay_ms),
            priority_levels: 2,
            default_level: 2,
            timeout_action: TimeoutAction::Reject,
            default_timeout: None,
            allow_timeout_override: true,
            max_queue_size: 100,
        }
    }

    #[test]
    fn only_a_policy_that_runs_a_lone_request_at_once_makes_spinning_worthwhile() {
        // No batching, batches of one, no delay, or one as a preferred size: a request that
        // finds the queue empty runs at once.
        assert!(policy(0, &[], 5).lone_request_runs_at_once());
        assert!(policy(1, &[], 5).lone_request_runs_at_once());
        assert!(policy(16, &[], 0).lone_request_runs_at_once());
        assert!(policy(16, &[1, 8], 5).lone_request_runs_at_once());
        // Dynamic batching with a delay: it waits for company whenever it is noticed.
        assert!(!policy(16, &[], 5).lone_request_runs_at_once());
        assert!(!policy(16, &[4, 8], 5).lone_request_runs_at_once());
        assert!(!policy(2, &[], 1).lone_request_runs_at_once());
    }

    type Replies = Vec<oneshot::Receiver<Result<Vec<Tensor>>>>;

    /// Queues a request of `rows` samples with feature width `width` (the batch key) and an id
    /// in its data, so tests can see which request ran.
    fn push(
        q: &mut Levels,
        replies: &mut Replies,
        id: f32,
        rows: usize,
        width: usize,
        level: u32,
        at: Instant,
    ) -> Arc<Ticket> {
        let t = Tensor::from_f32(
            "x",
            vec![rows as i64, width as i64],
            &vec![id; rows * width],
        )
        .unwrap();
        let (reply, rx) = oneshot::channel();
        replies.push(rx);
        let ticket = Arc::new(Ticket::default());
        let outputs = vec![];
        q.levels.entry(level).or_default().push_back(Request {
            key: BatchKey::of(std::slice::from_ref(&t), &outputs),
            inputs: vec![t],
            outputs,
            post: None,
            samples: rows,
            level,
            enqueued: at,
            deadline: None,
            ticket: ticket.clone(),
            reply,
            span: tracing::Span::none(),
        });
        ticket
    }

    fn ids(d: Decision) -> Vec<f32> {
        match d {
            Decision::Run(b) => b.iter().map(|r| r.inputs[0].to_f32().unwrap()[0]).collect(),
            Decision::WaitUntil(_) => panic!("waits"),
            Decision::Idle => panic!("idle"),
        }
    }

    #[test]
    fn fills_up_to_max_and_waits_for_more_otherwise() {
        let t0 = Instant::now();
        let (mut q, mut r) = (Levels::default(), Vec::new());
        let p = policy(4, &[], 100);
        push(&mut q, &mut r, 1.0, 1, 3, 2, t0);
        match next_batch(&mut q, &p, "m", t0) {
            Decision::WaitUntil(t) => assert_eq!(t, t0 + Duration::from_millis(100)),
            _ => panic!("a lone request waits for the delay"),
        }
        push(&mut q, &mut r, 2.0, 2, 3, 2, t0);
        push(&mut q, &mut r, 3.0, 2, 3, 2, t0); // would overflow 4: stays for the next batch
        push(&mut q, &mut r, 4.0, 1, 3, 2, t0);
        assert_eq!(ids(next_batch(&mut q, &p, "m", t0)), vec![1.0, 2.0, 4.0]);
        // The delay passed: what is left runs as is.
        assert_eq!(
            ids(next_batch(&mut q, &p, "m", t0 + Duration::from_millis(100))),
            vec![3.0]
        );
        assert!(matches!(next_batch(&mut q, &p, "m", t0), Decision::Idle));
    }

    #[test]
    fn waits_until_says_when_the_queue_next_needs_an_instance_without_taking_anything() {
        let t0 = Instant::now();
        let (mut q, mut r) = (Levels::default(), Vec::new());
        let p = policy(4, &[3], 100);
        assert_eq!(waits_until(&q, &p, t0), None, "nothing queued");
        let first = push(&mut q, &mut r, 1.0, 1, 3, 2, t0);
        let later = t0 + Duration::from_millis(10);
        push(&mut q, &mut r, 2.0, 1, 3, 2, later);
        // The oldest member decides; nothing was taken.
        assert_eq!(
            waits_until(&q, &p, later),
            Some(t0 + Duration::from_millis(100))
        );
        assert_eq!(q.len(), 2);
        // An earlier request deadline comes first.
        let soon = t0 + Duration::from_millis(30);
        q.levels.get_mut(&2).unwrap()[1].deadline = Some(soon);
        assert_eq!(waits_until(&q, &p, later), Some(soon));
        // A preferred size, a full batch, or the delay passed: it runs now.
        push(&mut q, &mut r, 3.0, 1, 3, 2, later);
        assert_eq!(waits_until(&q, &p, later), None, "preferred size 3");
        assert_eq!(waits_until(&q, &p, t0 + Duration::from_millis(100)), None);
        // A request nobody waits for is passed over, as the sweep would drop it: the head is
        // then the second request.
        let (mut q, mut r) = (Levels::default(), Vec::new());
        let gone = push(&mut q, &mut r, 1.0, 1, 3, 2, t0);
        push(&mut q, &mut r, 2.0, 1, 3, 2, later);
        assert!(gone.abandon());
        assert_eq!(
            waits_until(&q, &p, later),
            Some(later + Duration::from_millis(100))
        );
        drop(first);
    }

    #[test]
    fn prefers_the_largest_preferred_size_without_waiting() {
        let t0 = Instant::now();
        let (mut q, mut r) = (Levels::default(), Vec::new());
        let p = policy(8, &[2, 4], 1000);
        for id in 1..=5 {
            push(&mut q, &mut r, id as f32, 1, 3, 2, t0);
        }
        assert_eq!(
            ids(next_batch(&mut q, &p, "m", t0)),
            vec![1.0, 2.0, 3.0, 4.0]
        );
        assert!(matches!(
            next_batch(&mut q, &p, "m", t0),
            Decision::WaitUntil(_)
        ));
    }

    #[test]
    fn mismatched_shapes_go_in_separate_batches() {
        let t0 = Instant::now();
        let (mut q, mut r) = (Levels::default(), Vec::new());
        let p = policy(8, &[], 0);
        push(&mut q, &mut r, 1.0, 1, 3, 2, t0);
        push(&mut q, &mut r, 2.0, 1, 5, 2, t0);
        push(&mut q, &mut r, 3.0, 1, 3, 2, t0);
        assert_eq!(ids(next_batch(&mut q, &p, "m", t0)), vec![1.0, 3.0]);
        assert_eq!(ids(next_batch(&mut q, &p, "m", t0)), vec![2.0]);
    }

    #[test]
    fn higher_priority_runs_first() {
        let t0 = Instant::now();
        let (mut q, mut r) = (Levels::default(), Vec::new());
        let p = policy(2, &[], 0);
        push(&mut q, &mut r, 1.0, 1, 3, 2, t0);
        push(&mut q, &mut r, 2.0, 1, 3, 2, t0);
        push(&mut q, &mut r, 3.0, 1, 3, 1, t0);
        assert_eq!(ids(next_batch(&mut q, &p, "m", t0)), vec![3.0, 1.0]);
        assert_eq!(ids(next_batch(&mut q, &p, "m", t0)), vec![2.0]);
    }

    #[test]
    fn abandoned_and_timed_out_requests_never_run() {
        let t0 = Instant::now();
        let (mut q, mut r) = (Levels::default(), Vec::new());
        let p = policy(0, &[], 0);
        let gone = push(&mut q, &mut r, 1.0, 1, 3, 2, t0);
        assert!(gone.abandon());
        push(&mut q, &mut r, 2.0, 1, 3, 2, t0);
        drop(r.remove(1)); // the client of request 2 went away
        push(&mut q, &mut r, 3.0, 1, 3, 2, t0);
        q.levels.get_mut(&2).unwrap()[2].deadline = Some(t0);
        push(&mut q, &mut r, 4.0, 1, 3, 2, t0);
        assert_eq!(ids(next_batch(&mut q, &p, "m", t0)), vec![4.0]);
        assert!(matches!(next_batch(&mut q, &p, "m", t0), Decision::Idle));
        // Request 3 was answered with the timeout error.
        let answer = r[1].try_recv().unwrap();
        assert!(matches!(answer, Err(EngineError::Timeout { .. })));
    }

    #[test]
    fn delay_action_serves_late_requests_last() {
        let t0 = Instant::now();
        let (mut q, mut r) = (Levels::default(), Vec::new());
        let mut p = policy(0, &[], 0);
        p.timeout_action = TimeoutAction::Delay;
        push(&mut q, &mut r, 1.0, 1, 3, 1, t0);
        q.levels.get_mut(&1).unwrap()[0].deadline = Some(t0);
        push(&mut q, &mut r, 2.0, 1, 3, 2, t0);
        assert_eq!(ids(next_batch(&mut q, &p, "m", t0)), vec![2.0]);
        assert_eq!(ids(next_batch(&mut q, &p, "m", t0)), vec![1.0]);
    }

    #[test]
    fn concat_and_split_round_trip() {
        let t0 = Instant::now();
        let (mut q, mut r) = (Levels::default(), Vec::new());
        push(&mut q, &mut r, 1.0, 1, 2, 1, t0);
        push(&mut q, &mut r, 2.0, 2, 2, 1, t0);
        let batch: Vec<Request> = q.levels.remove(&1).unwrap().into_iter().collect();
        let joined = concat(&batch).unwrap();
        assert_eq!(joined[0].shape, vec![3, 2]);
        assert_eq!(
            joined[0].to_f32().unwrap(),
            vec![1.0, 1.0, 2.0, 2.0, 2.0, 2.0]
        );
        let parts = split("m", joined, &[1, 2]).unwrap();
        assert_eq!(parts[0][0], batch[0].inputs[0]);
        assert_eq!(parts[1][0], batch[1].inputs[0]);
        let scalar = Tensor::from_f32("y", vec![1], &[0.0]).unwrap();
        assert!(split("m", vec![scalar], &[1, 2]).is_err());
    }
}
