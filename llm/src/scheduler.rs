//! The scheduler: one thread per loaded model owning its llama.cpp context, running continuous
//! batching over up to `n_seq` sequences.
//!
//! Every step computes the next token of every sequence that is generating (so a running
//! stream advances each step) and prompt tokens of sequences still in prefill, up to `n_batch`
//! tokens in all (chunked prefill: a long prompt takes several steps instead of stalling the
//! streams). A request waiting in the queue takes a free slot at the next step (the lowest
//! `priority` value first, then first come; prompts are computed in that order too); a finished
//! one leaves at once. A sequence whose client went away (its event receiver dropped) is freed
//! at the next step. A request with `n` choices computes its prompt once: the other choices then
//! take a copy of its KV and sample from the same logits. The step that computes a prompt's last
//! token samples its first token.
//!
//! Time to first token: a step decodes its prompt chunks first, then the running sequences'
//! next tokens, in two `llama_decode` calls, sampling after each. llama.cpp computes the two
//! apart anyway (below: a prompt chunk and the one-token rows are separate micro-batches), so the
//! running streams wait as long as in one call, while a prompt's first token comes out after
//! its own chunk instead of after the whole step (with the chunk listed after the running rows
//! in one call, a request joining 7 running streams waited for their micro-batch too).
//!
//! Batch order: each sequence has a KV stream of its own, and llama.cpp then splits a batch into
//! micro-batches (one graph computation each) that hold the same number of tokens of every
//! sequence in them, for consecutive sequence ids only, taken in batch order. So the batch lists
//! its tokens by sequence id, and a new sequence takes the lowest free slot among equals: the
//! one-token rows of all running sequences then form one micro-batch (a sequence out of order
//! or a hole in the ids would split them into several), and a prompt chunk adds one more.
//!
//! Prefix cache: each slot keeps the KV of its last sequence after it finishes. A new sequence
//! reuses the longest prefix of its prompt found in any slot: its own (trimmed to the common
//! prefix) or another's, copied with `llama_memory_seq_cp` (llama.cpp copies a stream whole, at
//! the next decode) and trimmed.
//!
//! Reproducibility: a seeded request repeated on an idle server gives the same tokens. That
//! needs bit-identical logits, since a quantised model rounds its activations to 8 bits at
//! every layer and so turns the smallest difference into a visible one. A row (token) of a
//! batch is computed independently of the other rows (the matrix products and norms work row
//! by row), except by llama.cpp's CPU attention, which sums a sequence's cells in cell order (in
//! f16) along one of three paths chosen by how many rows of that sequence the micro-batch holds
//! ([`RowPath`]). So:
//! - streams are not unified: in a shared (unified) cache the cells of a repeated request land
//!   wherever earlier sequences left holes, in another order than on its first run, and the
//!   attention path would depend on the other sequences' rows;
//! - each slot records the path every position of its KV was computed on, and a prompt found
//!   whole in the cache recomputes its last tokens on the path its last token took the first
//!   time (1, 2 or 64 rows: the fewest that path takes), so its first token's logits are the
//!   ones its first run computed, with no step of its own before the first token.
//!
//! Speculative decoding ([`speculative`]): a generating sequence's row may be followed by rows
//! of drafted tokens, all sampled in order until one differs from its draft; the KV of the rows
//! after it is dropped. Fewer than 64 rows of one sequence take the row-by-row attention path,
//! which is also the path of a lone token while its stream holds at most 256 cells, and of
//! every token decoded beside other sequences. Past 256 cells a lone token's attention is split
//! over the threads by cell ranges instead (another order of sums), so a sequence that drafts
//! alone past 256 cells computes other bits than one that does not, and a greedy or seeded
//! answer may then differ where two candidates nearly tie (what a sequence decoded alone and
//! the same sequence decoded in a batch already do). Under that length, answers with and
//! without drafts are bit-identical (tests/speculation.rs). The draft length depends only on
//! token counts (not timings), so a repeated request still repeats.

use crate::event::{Done, Event, Finish, TokenLogprob, TopLogprob};
use crate::output::{Pushed, TextOutput};
use crate::speculative::{self, Candidate, Drafter, Speculation};
use crate::stats::Stats;
use crossbeam_channel::Receiver;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::DecodeError;
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;

/// One choice of a request: its own sampler, and where its events go.
pub(crate) struct Choice {
    pub sampler: LlamaSampler,
    pub events: UnboundedSender<Event>,
}

/// A generation handed to the scheduler.
pub(crate) struct Request {
    pub prompt: Vec<LlamaToken>,
    pub max_tokens: u32,
    pub stop: Vec<String>,
    pub logprobs: Option<u32>,
    /// Lower first (vLLM's `priority`).
    pub priority: i32,
    pub choice: Choice,
    /// The request's other choices (`n > 1`): once `choice`'s prompt is computed, each takes a
    /// copy of its KV (`llama_memory_seq_cp`) and samples from the same logits, so the prompt
    /// is computed once.
    pub forks: Vec<Choice>,
    /// How the request drafts tokens (None: it does not), and the output it predicts.
    pub speculation: Option<Speculation>,
    pub prediction: Vec<LlamaToken>,
}

impl Request {
    /// Whether every client of the request went away.
    fn abandoned(&self) -> bool {
        self.choice.events.is_closed() && self.forks.iter().all(|f| f.events.is_closed())
    }

    /// One of the forks as a request of its own.
    fn fork(&self, choice: Choice) -> Request {
        Request {
            prompt: self.prompt.clone(),
            max_tokens: self.max_tokens,
            stop: self.stop.clone(),
            logprobs: self.logprobs,
            priority: self.priority,
            choice,
            forks: Vec::new(),
            speculation: self.speculation.clone(),
            prediction: self.prediction.clone(),
        }
    }
}

/// Sizes the scheduler runs with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub n_seq: usize,
    pub n_batch: usize,
    pub n_ctx: u32,
    pub prefix_cache: bool,
    /// [`Speculation::row_cost`] of the model.
    pub row_cost: f32,
}

/// A sequence being served.
struct Active {
    req: Request,
    /// Prompt tokens in the KV cache (reused or computed).
    fed: usize,
    /// The token sampled last, fed at the next step.
    next: Option<LlamaToken>,
    generated: u32,
    cached: u32,
    output: TextOutput,
    /// Admission order: prefill is served first come, first served.
    admitted: u64,
    drafter: Option<Drafter>,
    /// Drafted tokens the sampler produced, and the others.
    accepted: u32,
    rejected: u32,
}

struct Slot {
    seq: i32,
    /// The tokens whose KV this sequence holds, positions 0..len.
    tokens: Vec<LlamaToken>,
    /// The attention path each of those positions was computed on.
    paths: Vec<RowPath>,
    active: Option<Active>,
}

/// The path llama.cpp's CPU attention takes for the rows of one sequence in a micro-batch
/// (`ggml_compute_forward_flash_attn_ext_f16`): one row alone (split over the threads by cell
/// index once the stream holds 512 cells), fewer rows than its query tile (row by row), or a tile
/// or more (tiles of 64 cells and 64 rows). Each sums in its own order, so the same row on
/// another path gives other bits; on the same path a row's result depends only on its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RowPath {
    Single,
    Rows,
    Tiled,
}

/// ggml's `GGML_FA_TILE_Q`: from this many rows of one sequence on, the attention is tiled.
const ATTENTION_TILE_ROWS: usize = 64;

impl RowPath {
    /// The path of a chunk of `rows` tokens of one sequence.
    fn of(rows: usize) -> RowPath {
        match rows {
            0 | 1 => RowPath::Single,
            n if n < ATTENTION_TILE_ROWS => RowPath::Rows,
            _ => RowPath::Tiled,
        }
    }

    /// The fewest rows computed on this path.
    fn min_rows(self) -> usize {
        match self {
            RowPath::Single => 1,
            RowPath::Rows => 2,
            RowPath::Tiled => ATTENTION_TILE_ROWS,
        }
    }
}

impl Slot {
    /// How many of `prompt`'s tokens to take from this slot's KV. A prompt found only in part
    /// takes the common prefix; its last token is then computed in the chunk that computes the
    /// rest. A prompt found whole recomputes its last rows on the path its last token took (the
    /// fewest rows of that path), so its first token comes from the logits its earlier run
    /// computed (see "Reproducibility"); when those rows were computed on different paths (the
    /// prompt ends inside a longer chunk of another prompt), its last token alone.
    fn reusable(&self, prompt: &[LlamaToken]) -> usize {
        let len = prompt.len();
        let common = common_prefix(&self.tokens, prompt);
        if common < len {
            return common;
        }
        let Some(&path) = len.checked_sub(1).and_then(|last| self.paths.get(last)) else {
            return len.saturating_sub(1);
        };
        let rows = path.min_rows();
        match self.paths.get(len.saturating_sub(rows)..len) {
            Some(tail) if rows <= len && tail.iter().all(|&p| p == path) => len - rows,
            _ => len - 1,
        }
    }
}

/// Tokens of one slot in the batch being built.
struct Planned {
    slot: usize,
    tokens: Vec<LlamaToken>,
    /// How many of `tokens` (after the first) are drafted, to be verified.
    drafted: usize,
    /// Batch row of the first logits sampled: the last prompt token's, or a generating
    /// sequence's first row (its drafted rows follow).
    logits_row: Option<i32>,
}

pub(crate) struct Scheduler<'m> {
    model: &'m LlamaModel,
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    slots: Vec<Slot>,
    waiting: VecDeque<Request>,
    limits: Limits,
    stats: Arc<Stats>,
    clock: u64,
}

impl<'m> Scheduler<'m> {
    pub(crate) fn new(
        model: &'m LlamaModel,
        ctx: LlamaContext<'m>,
        limits: Limits,
        stats: Arc<Stats>,
    ) -> Scheduler<'m> {
        Scheduler {
            model,
            ctx,
            batch: LlamaBatch::new(limits.n_batch, 1),
            slots: (0..limits.n_seq)
                .map(|i| Slot {
                    seq: i as i32,
                    tokens: Vec::new(),
                    paths: Vec::new(),
                    active: None,
                })
                .collect(),
            waiting: VecDeque::new(),
            limits,
            stats,
            clock: 0,
        }
    }

    /// Runs until every handle to the model is gone and no sequence is left.
    pub(crate) fn run(mut self, requests: Receiver<Request>) {
        loop {
            let idle = self.waiting.is_empty() && self.slots.iter().all(|s| s.active.is_none());
            if idle {
                // The gauges read "nothing running" while the thread waits.
                self.publish_gauges();
                match requests.recv() {
                    Ok(r) => self.enqueue(r),
                    Err(_) => return,
                }
            }
            while let Ok(r) = requests.try_recv() {
                self.enqueue(r);
            }
            self.drop_cancelled();
            self.admit();
            self.publish_gauges();
            self.step();
        }
    }

    fn enqueue(&mut self, r: Request) {
        self.waiting.push_back(r);
    }

    /// Frees the sequences and queued requests whose clients went away. The forks of a
    /// cancelled sequence still in prefill go back to the queue (first) when their own clients
    /// are still there.
    fn drop_cancelled(&mut self) {
        let before = self.waiting.len();
        self.waiting.retain(|r| !r.abandoned());
        let mut cancelled = (before - self.waiting.len()) as u64;
        for i in 0..self.slots.len() {
            let Some(a) = self.slots[i].active.as_mut() else {
                continue;
            };
            if !a.req.choice.events.is_closed() {
                continue;
            }
            let forks: Vec<Request> = std::mem::take(&mut a.req.forks)
                .into_iter()
                .filter(|f| !f.events.is_closed())
                .map(|f| a.req.fork(f))
                .collect();
            for r in forks.into_iter().rev() {
                self.waiting.push_front(r);
            }
            self.release(i);
            cancelled += 1;
        }
        Stats::add(&self.stats.cancelled, cancelled);
    }

    /// Moves queued requests into free slots, highest priority first.
    fn admit(&mut self) {
        while let Some(k) = self.next_waiting() {
            let Some(slot) = self.free_slot(&self.waiting[k].prompt) else {
                return;
            };
            if let Some(req) = self.waiting.remove(k) {
                self.start(slot, req);
            }
        }
    }

    /// The queued request to admit next: the lowest priority value, the first come among
    /// equals.
    fn next_waiting(&self) -> Option<usize> {
        self.waiting
            .iter()
            .enumerate()
            .min_by_key(|(k, r)| (r.priority, *k))
            .map(|(k, _)| k)
    }

    /// The free slot to use for a prompt: the one whose kept KV shares the longest prefix with
    /// it, the lowest among equals (running sequences stay packed at the low ids, so their
    /// one-token rows form one micro-batch: see "Batch order").
    fn free_slot(&self, prompt: &[LlamaToken]) -> Option<usize> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.active.is_none())
            .max_by_key(|&(i, s)| (common_prefix(&s.tokens, prompt), std::cmp::Reverse(i)))
            .map(|(i, _)| i)
    }

    fn start(&mut self, i: usize, req: Request) {
        self.clock += 1;
        let prompt = &req.prompt;
        let (mut source, mut best) = (i, self.slots[i].reusable(prompt));
        if self.limits.prefix_cache {
            for (j, s) in self.slots.iter().enumerate() {
                let n = s.reusable(prompt);
                if n > best {
                    (source, best) = (j, n);
                }
            }
        } else {
            best = 0;
        }
        if source == i {
            self.remove_kv(i, best);
        } else if !self.copy_kv(source, i, best) {
            best = 0;
        }
        Stats::add(&self.stats.prefix_queries, prompt.len() as u64);
        Stats::add(&self.stats.prefix_hits, best as u64);
        Stats::add(&self.stats.prompt_tokens, prompt.len() as u64);
        self.occupy(i, req, best, best as u32);
    }

    /// Puts a sequence into slot `i`, its first `fed` prompt tokens already in the KV cache.
    fn occupy(&mut self, i: usize, req: Request, fed: usize, cached: u32) {
        let drafter = req
            .speculation
            .clone()
            .map(|config| Drafter::new(config, req.prediction.clone()));
        self.slots[i].active = Some(Active {
            output: TextOutput::new(req.stop.clone()),
            req,
            fed,
            next: None,
            generated: 0,
            cached,
            admitted: self.clock,
            drafter,
            accepted: 0,
            rejected: 0,
        });
    }

    /// Gives slot `to` the first `keep` positions of slot `from`'s KV: llama.cpp copies a
    /// sequence between streams only whole, so the copy is then trimmed. False (and slot `to`
    /// empty) when it failed.
    fn copy_kv(&mut self, from: usize, to: usize, keep: usize) -> bool {
        self.remove_kv(to, 0);
        let (src, dst) = (self.slots[from].seq, self.slots[to].seq);
        if self.ctx.kv_cache_seq_cp(src, dst, None, None).is_err() {
            return false;
        }
        self.slots[to].tokens = self.slots[from].tokens.clone();
        self.slots[to].paths = self.slots[from].paths.clone();
        self.remove_kv(to, keep);
        self.slots[to].tokens.len() == keep
    }

    /// Drops slot `i`'s KV from position `keep` on.
    fn remove_kv(&mut self, i: usize, keep: usize) {
        let slot = &mut self.slots[i];
        if keep >= slot.tokens.len() {
            return;
        }
        let p0 = (keep > 0).then_some(keep as u32);
        if self.ctx.kv_cache_seq_rm(slot.seq, p0, None).is_err() {
            // Models whose memory cannot be cut part-way (recurrent ones) lose it all.
            let _ = self.ctx.kv_cache_seq_rm(slot.seq, None, None);
            slot.tokens.clear();
        }
        slot.tokens.truncate(keep);
        slot.paths.truncate(slot.tokens.len());
    }

    /// Ends slot `i`'s sequence; its KV stays for the prefix cache when that is on.
    fn release(&mut self, i: usize) {
        self.slots[i].active = None;
        if !self.limits.prefix_cache {
            self.remove_kv(i, 0);
        }
    }

    fn publish_gauges(&self) {
        let running = self.slots.iter().filter(|s| s.active.is_some()).count();
        Stats::set(&self.stats.running, running as u64);
        Stats::set(&self.stats.waiting, self.waiting.len() as u64);
        let held: usize = self.slots.iter().map(|s| s.tokens.len()).sum();
        let usage = (held as u64 * 1000 / u64::from(self.limits.n_ctx.max(1))).min(1000);
        Stats::set(&self.stats.kv_usage_milli, usage);
    }

    /// The generating sequences' rows: each one's next token, then the tokens drafted for it
    /// (up to the length that pays for the whole step, see [`speculative`]).
    fn plan_generating(&mut self) -> Vec<Planned> {
        let mut plan = Vec::new();
        let mut drafts = Vec::new();
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Some(a) = slot.active.as_mut() else {
                continue;
            };
            let Some(token) = a.next else {
                continue;
            };
            let draft = match a.drafter.as_mut() {
                Some(drafter) => {
                    let mut history = Vec::with_capacity(slot.tokens.len() + 1);
                    history.extend_from_slice(&slot.tokens);
                    history.push(token);
                    // Never past the sequence's budget: a token after its last is wasted.
                    let left = a.req.max_tokens.saturating_sub(a.generated) as usize;
                    let mut d = drafter.draft(&history, a.req.prompt.len());
                    d.truncate(left.saturating_sub(1));
                    d
                }
                None => Vec::new(),
            };
            drafts.push(Candidate {
                seq: slot.seq,
                draft_len: draft.len(),
                alpha: a.drafter.as_ref().map_or(0.0, Drafter::acceptance),
            });
            plan.push(Planned {
                slot: i,
                tokens: [&[token][..], &draft].concat(),
                drafted: draft.len(),
                logits_row: None,
            });
        }
        if drafts.iter().any(|c| c.draft_len > 0) {
            let cap = speculative::choose_draft_len(
                &drafts,
                f64::from(self.limits.row_cost),
                self.limits.n_batch,
                self.limits.n_batch,
            );
            for p in &mut plan {
                p.drafted = p.drafted.min(cap);
                p.tokens.truncate(1 + p.drafted);
            }
        }
        plan
    }

    /// What one step computes: every generating sequence's next token and the tokens drafted
    /// after it, then prompt chunks in the tokens left of `n_batch`.
    fn plan(&mut self) -> Vec<Planned> {
        let mut plan = self.plan_generating();
        let mut budget = self.limits.n_batch - plan.iter().map(|p| p.tokens.len()).sum::<usize>();
        let mut prefilling: Vec<usize> = (0..self.slots.len())
            .filter(|&i| {
                self.slots[i]
                    .active
                    .as_ref()
                    .is_some_and(|a| a.fed < a.req.prompt.len())
            })
            .collect();
        prefilling.sort_by_key(|&i| {
            self.slots[i]
                .active
                .as_ref()
                .map_or((0, 0), |a| (a.req.priority, a.admitted))
        });
        for i in prefilling {
            if budget == 0 {
                break;
            }
            let Some(a) = self.slots[i].active.as_ref() else {
                continue;
            };
            let take = (a.req.prompt.len() - a.fed).min(budget);
            budget -= take;
            plan.push(Planned {
                slot: i,
                tokens: a.req.prompt[a.fed..a.fed + take].to_vec(),
                drafted: 0,
                logits_row: None,
            });
        }
        // By sequence id, so llama.cpp's split keeps every sequence's one-token rows in one
        // micro-batch (see "Batch order").
        plan.sort_unstable_by_key(|p| p.slot);
        plan
    }

    /// One step: the prompt chunks, then the running sequences' next tokens, each a
    /// `llama_decode` of its own (see "Time to first token").
    fn step(&mut self) {
        let (prompts, generating): (Vec<Planned>, Vec<Planned>) =
            self.plan().into_iter().partition(|p| {
                self.slots[p.slot]
                    .active
                    .as_ref()
                    .is_some_and(|a| a.next.is_none())
            });
        for part in [prompts, generating] {
            if !part.is_empty() {
                self.run_batch(part);
            }
        }
    }

    /// Decodes one batch, records what each slot's KV now holds and samples the rows that
    /// want a token.
    fn run_batch(&mut self, mut plan: Vec<Planned>) {
        if let Err(e) = self.decode(&mut plan) {
            let message = match e {
                StepError::NoKvSlot => "the KV cache is full".to_string(),
                StepError::Other(m) => m,
            };
            tracing::error!(error = %message, "llama.cpp decode failed");
            for p in &plan {
                self.fail(p.slot, &message);
            }
            return;
        }
        let mut rows = Vec::new();
        for p in plan {
            let slot = &mut self.slots[p.slot];
            let start = slot.tokens.len();
            slot.tokens.extend_from_slice(&p.tokens);
            let path = RowPath::of(p.tokens.len());
            slot.paths.resize(slot.tokens.len(), path);
            let Some(a) = slot.active.as_mut() else {
                continue;
            };
            if a.next.take().is_none() {
                a.fed += p.tokens.len();
            }
            if let Some(row) = p.logits_row {
                let draft = p.tokens[p.tokens.len() - p.drafted..].to_vec();
                rows.push((p.slot, row, draft, start));
            }
        }
        for (slot, row, draft, start) in rows {
            if draft.is_empty() {
                self.sample(slot, row, None);
            } else {
                self.verify(slot, row, &draft, start);
            }
        }
    }

    /// Samples slot `i`'s rows from batch row `row` on, the first computed from its token at
    /// position `start` and each next one from the token drafted before it: while the sampled
    /// token is the drafted one it is accepted (its KV is already computed), and the first
    /// that differs is the next token, as if nothing had been drafted. The rows after it are
    /// dropped from the KV cache.
    fn verify(&mut self, i: usize, row: i32, draft: &[LlamaToken], start: usize) {
        if let Some(a) = self.slots[i].active.as_mut() {
            // Counted rejected until the sampler produces them.
            a.rejected += draft.len() as u32;
        }
        Stats::add(&self.stats.draft_tokens, draft.len() as u64);
        let mut accepted = 0;
        let mut last = 0;
        for (j, r) in (row..).take(draft.len() + 1).enumerate() {
            last = j;
            let expected = draft.get(j).copied();
            let sampled = self.sample(i, r, expected);
            if expected.is_some() && sampled.produced == expected {
                accepted += 1;
            }
            if !sampled.running || sampled.produced != expected {
                break;
            }
            if let Some(a) = self.slots[i].active.as_mut() {
                // The drafted token is in the KV cache already: nothing to feed.
                a.next = None;
            }
        }
        self.remove_kv(i, start + 1 + last);
        if let Some(d) = self.slots[i]
            .active
            .as_mut()
            .and_then(|a| a.drafter.as_mut())
        {
            d.verified(draft.len(), accepted);
        }
    }

    /// Fills the batch from the plan and decodes it.
    fn decode(&mut self, plan: &mut [Planned]) -> Result<(), StepError> {
        self.batch.clear();
        let mut row = 0;
        for p in plan.iter_mut() {
            let slot = &self.slots[p.slot];
            let Some(a) = slot.active.as_ref() else {
                continue;
            };
            let generating = a.next.is_some();
            let wants_logits = generating || a.fed + p.tokens.len() == a.req.prompt.len();
            let start = slot.tokens.len() as i32;
            for (k, &token) in p.tokens.iter().enumerate() {
                let last = k + 1 == p.tokens.len();
                // A generating sequence's rows are all sampled (its drafted ones verified).
                let logits = if generating {
                    true
                } else {
                    last && wants_logits
                };
                self.batch
                    .add(token, start + k as i32, &[slot.seq], logits)
                    .map_err(|e| StepError::Other(format!("building the batch: {e}")))?;
                if logits && p.logits_row.is_none() {
                    p.logits_row = Some(row);
                }
                row += 1;
            }
        }
        self.ctx.decode(&mut self.batch).map_err(|e| match e {
            DecodeError::NoKvCacheSlot => StepError::NoKvSlot,
            other => StepError::Other(other.to_string()),
        })
    }

    fn fail(&mut self, i: usize, message: &str) {
        if let Some(a) = self.slots[i].active.as_ref() {
            for events in std::iter::once(&a.req.choice)
                .chain(&a.req.forks)
                .map(|c| &c.events)
            {
                let _ = events.send(Event::Error(format!("generation failed: {message}")));
            }
        }
        self.slots[i].active = None;
        self.remove_kv(i, 0);
    }

    /// Starts slot `i`'s forks, its prompt just computed: each takes a free slot, a copy of
    /// the prompt's KV and its first token from the same logits row `row`. A fork finding no
    /// free slot waits in the queue (first), where the prefix cache gives it the KV.
    fn start_forks(&mut self, i: usize, row: i32) {
        let Some(a) = self.slots[i].active.as_mut() else {
            return;
        };
        if a.req.forks.is_empty() {
            return;
        }
        let cached = a.cached;
        let forks: Vec<Request> = std::mem::take(&mut a.req.forks)
            .into_iter()
            .map(|f| a.req.fork(f))
            .collect();
        for req in forks {
            let Some(j) = self.free_slot(&req.prompt) else {
                self.waiting.push_front(req);
                continue;
            };
            let len = req.prompt.len();
            if !self.copy_kv(i, j, len) {
                self.waiting.push_front(req);
                continue;
            }
            self.clock += 1;
            self.occupy(j, req, len, cached);
            self.sample(j, row, None);
        }
    }

    /// Samples slot `i`'s next token from batch row `row` and hands out what it produced;
    /// `expected` is the token drafted there, if any (counted accepted when produced).
    fn sample(&mut self, i: usize, row: i32, expected: Option<LlamaToken>) -> Sampled {
        self.start_forks(i, row);
        let model = self.model;
        let vocab = model.vocab();
        let Some(a) = self.slots[i].active.as_mut() else {
            return Sampled::default();
        };
        let logprobs = a
            .req
            .logprobs
            .map(|top| (top, log_softmax(self.ctx.get_logits_ith(row))));
        let token = a.req.choice.sampler.sample(&self.ctx, row);
        a.generated += 1;
        if expected == Some(token) {
            a.accepted += 1;
            a.rejected -= 1;
            // Counted before the generation's end is sent, so its client sees it counted.
            Stats::add(&self.stats.draft_accepted, 1);
        }
        Stats::add(&self.stats.generation_tokens, 1);
        let ended = Sampled {
            produced: Some(token),
            running: false,
        };
        if vocab.is_eog(token) {
            self.finish(i, Finish::Stop, Last::default());
            return ended;
        }
        let piece = vocab.token_to_piece(token, false, None);
        let logprob = logprobs.map(|(top, lp)| token_logprob(model, &lp, token, &piece, top));
        let (text, stopped) = match a.output.push(&piece) {
            Pushed::Text(t) => (t, false),
            Pushed::Stopped(t) => (t, true),
        };
        let finish = if stopped {
            Some(Finish::Stop)
        } else if a.generated >= a.req.max_tokens {
            Some(Finish::Length)
        } else {
            None
        };
        match finish {
            Some(finish) => {
                self.finish(
                    i,
                    finish,
                    Last {
                        text,
                        logprob,
                        flush: !stopped,
                    },
                );
                ended
            }
            None => {
                a.next = Some(token);
                if !text.is_empty() || logprob.is_some() {
                    let _ = a.req.choice.events.send(Event::Text { text, logprob });
                }
                Sampled {
                    produced: Some(token),
                    running: true,
                }
            }
        }
    }

    fn finish(&mut self, i: usize, finish: Finish, last: Last) {
        let Some(mut a) = self.slots[i].active.take() else {
            return;
        };
        let Last {
            mut text,
            logprob,
            flush,
        } = last;
        if flush {
            text.push_str(&a.output.finish());
        }
        if !text.is_empty() || logprob.is_some() {
            let _ = a.req.choice.events.send(Event::Text { text, logprob });
        }
        let _ = a.req.choice.events.send(Event::Done(Done {
            finish,
            prompt_tokens: a.req.prompt.len() as u32,
            completion_tokens: a.generated,
            cached_tokens: a.cached,
            accepted_prediction_tokens: a.accepted,
            rejected_prediction_tokens: a.rejected,
        }));
        self.release(i);
    }
}

/// What sampling a row gave: the token (None when the slot was empty), and whether the
/// sequence goes on.
#[derive(Debug, Default)]
struct Sampled {
    produced: Option<LlamaToken>,
    running: bool,
}

/// What a finishing sequence still has to hand out.
struct Last {
    text: String,
    logprob: Option<TokenLogprob>,
    /// Whether held-back text is released (not when a stop sequence cut it).
    flush: bool,
}

impl Default for Last {
    fn default() -> Self {
        Last {
            text: String::new(),
            logprob: None,
            flush: true,
        }
    }
}

#[derive(Debug, PartialEq)]
enum StepError {
    NoKvSlot,
    Other(String),
}

/// Length of the common prefix of two token lists.
pub(crate) fn common_prefix(a: &[LlamaToken], b: &[LlamaToken]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Natural-log probabilities of a row of logits.
fn log_softmax(logits: &[f32]) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = logits.iter().map(|&l| (l - max).exp()).sum();
    let log_sum = sum.ln() + max;
    logits.iter().map(|&l| l - log_sum).collect()
}

fn token_logprob(
    model: &LlamaModel,
    logprobs: &[f32],
    token: LlamaToken,
    piece: &[u8],
    top: u32,
) -> TokenLogprob {
    let vocab = model.vocab();
    let mut order: Vec<usize> = (0..logprobs.len()).collect();
    let top = (top as usize).min(order.len());
    if top > 0 {
        order.select_nth_unstable_by(top - 1, |&a, &b| logprobs[b].total_cmp(&logprobs[a]));
        order.truncate(top);
        order.sort_by(|&a, &b| logprobs[b].total_cmp(&logprobs[a]));
    } else {
        order.clear();
    }
    TokenLogprob {
        token: String::from_utf8_lossy(piece).into_owned(),
        bytes: piece.to_vec(),
        logprob: logprobs
            .get(token.0 as usize)
            .copied()
            .unwrap_or(f32::NEG_INFINITY),
        top: order
            .into_iter()
            .map(|id| {
                let bytes = vocab.token_to_piece(LlamaToken(id as i32), false, None);
                TopLogprob {
                    token: String::from_utf8_lossy(&bytes).into_owned(),
                    bytes,
                    logprob: logprobs[id],
                }
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_and_log_probabilities() {
        let t = |v: &[i32]| v.iter().map(|&i| LlamaToken(i)).collect::<Vec<_>>();
        assert_eq!(common_prefix(&t(&[1, 2, 3]), &t(&[1, 2, 4])), 2);
        assert_eq!(common_prefix(&t(&[]), &t(&[1])), 0);
        let lp = log_softmax(&[0.0, 0.0, f32::NEG_INFINITY]);
        assert!((lp[0] - 0.5f32.ln()).abs() < 1e-6);
        assert_eq!(lp[2], f32::NEG_INFINITY);
    }
}
