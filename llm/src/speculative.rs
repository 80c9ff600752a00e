//! Speculative decoding without a draft model: tokens guessed from what the sequence already
//! holds, verified in the scheduler's batch.
//!
//! Drafts come from the client's predicted output (OpenAI's `prediction`), followed along the
//! generated text, and from n-grams: the longest recent n tokens of the sequence (prompt and
//! output) found earlier in it, the tokens that followed there being the guess (llama.cpp's
//! `ngram-simple`, searching the most recent occurrence first).
//!
//! A drafted token is verified by computing its row with the sequence's others in one
//! `llama_decode` and sampling each row in order with the sequence's own sampler: the draft is
//! accepted while the sampled token equals it, and the first token that differs is the next
//! token, as without speculation. Sampling is unchanged (same sampler, one draw per generated
//! token, in order), so a draft changes only how many tokens one step produces; what it costs
//! is the rows computed for drafted tokens that get rejected.
//!
//! How many tokens to draft: one step costs about `1 + row_cost × rows` passes for every
//! micro-batch llama.cpp splits it into ([`Speculation::row_cost`] relative to one pass over the
//! weights), and a draft of `k` tokens accepted token by token with probability `α` yields
//! `1 + α + … + α^k` tokens. The scheduler picks the draft length that yields the most tokens
//! per unit of cost for the whole step, zero when drafting does not pay (typically with many
//! sequences running). `α` is estimated per sequence from its own verifications. Every input
//! of that choice is a count, never a timing, so a request repeated on an idle server drafts
//! and computes the same way.

use crate::error::LlmError;
use llama_cpp_2::token::LlamaToken;

/// Most tokens one step may draft for a sequence: llama.cpp's attention computes fewer than 64
/// rows of one sequence row by row (the path a lone token takes in a short stream), 64 or more
/// in tiles, with other sums (see the scheduler's "Reproducibility").
pub const MAX_DRAFT: u32 = 32;

/// A model's speculative decoding (the gateway's `[llm.speculation]`).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Speculation {
    /// Whether requests draft unless they say otherwise.
    pub enabled: bool,
    /// Most tokens drafted for a sequence in one step (1 to [`MAX_DRAFT`]).
    pub max_draft: u32,
    /// The shortest n-gram a draft is looked up by; longer ones (up to `max_ngram`) are tried
    /// first.
    pub min_ngram: u32,
    pub max_ngram: u32,
    /// What one more row of a step costs, relative to a pass over the weights (the part of a
    /// step that does not grow with its rows). Decides whether drafting pays: the lower, the
    /// more drafted tokens a step verifies. `bench/llm_speculation.py` prints the measured
    /// cost of a drafted token.
    pub row_cost: f32,
}

impl Default for Speculation {
    /// On, drafting up to 16 tokens from n-grams of 3 to 8 tokens, a row costing one pass (on
    /// a CPU a step's rows cost nearly as much as its pass over the weights).
    fn default() -> Self {
        Speculation {
            enabled: true,
            max_draft: 16,
            min_ngram: 3,
            max_ngram: 8,
            row_cost: 1.0,
        }
    }
}

impl Speculation {
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=MAX_DRAFT).contains(&self.max_draft) {
            return Err(format!("max_draft must be between 1 and {MAX_DRAFT}"));
        }
        if self.min_ngram == 0 || self.min_ngram > self.max_ngram || self.max_ngram > 64 {
            return Err("min_ngram must be at least 1 and at most max_ngram (at most 64)".into());
        }
        if !(self.row_cost.is_finite() && self.row_cost > 0.0) {
            return Err("row_cost must be a positive number".into());
        }
        Ok(())
    }
}

/// How one request speculates; what it leaves unset comes from the model's [`Speculation`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpeculationParams {
    /// Drafting on or off; None: the model's default, except that a prediction turns it on.
    pub enabled: Option<bool>,
    /// Most tokens drafted for a sequence in one step; None: the model's.
    pub max_draft: Option<u32>,
    /// The answer the client expects (OpenAI's `prediction.content`), drafted from first.
    pub prediction: Option<String>,
}

impl SpeculationParams {
    /// What the request runs with: None when it does not draft.
    pub(crate) fn resolve(&self, model: &Speculation) -> Result<Option<Speculation>, LlmError> {
        if let Some(n) = self.max_draft {
            if !(1..=MAX_DRAFT).contains(&n) {
                return Err(LlmError::InvalidParam(format!(
                    "speculation.max_draft: must be between 1 and {MAX_DRAFT}"
                )));
            }
        }
        let on = self
            .enabled
            .unwrap_or(model.enabled || self.prediction.is_some());
        Ok(on.then(|| Speculation {
            enabled: true,
            max_draft: self.max_draft.unwrap_or(model.max_draft),
            ..model.clone()
        }))
    }
}

/// A sequence's drafting: where its guesses come from and how well they have done.
#[derive(Debug)]
pub(crate) struct Drafter {
    config: Speculation,
    prediction: Vec<LlamaToken>,
    /// The position in `prediction` of the token expected next in the output; None once the
    /// output left it (until an n-gram finds the output in it again).
    cursor: Option<usize>,
    /// Output tokens already followed along `prediction`.
    followed: usize,
    /// Drafted tokens accepted, and verifications that rejected one (for `α`).
    accepted: u32,
    misses: u32,
}

/// Prior of the acceptance estimate, as if this many tokens had been accepted and this many
/// verifications had missed: α = 0.75 before the sequence's own evidence.
const PRIOR_ACCEPTED: f64 = 3.0;
const PRIOR_MISSES: f64 = 1.0;

impl Drafter {
    pub(crate) fn new(config: Speculation, prediction: Vec<LlamaToken>) -> Drafter {
        Drafter {
            config,
            prediction,
            cursor: Some(0),
            followed: 0,
            accepted: 0,
            misses: 0,
        }
    }

    pub(crate) fn max_draft(&self) -> usize {
        self.config.max_draft as usize
    }

    /// Estimated probability that a drafted token is accepted, given the ones before it were.
    pub(crate) fn acceptance(&self) -> f64 {
        (f64::from(self.accepted) + PRIOR_ACCEPTED)
            / (f64::from(self.accepted + self.misses) + PRIOR_ACCEPTED + PRIOR_MISSES)
    }

    /// Records a verification: `accepted` of its `drafted` tokens were.
    pub(crate) fn verified(&mut self, drafted: usize, accepted: usize) {
        self.accepted += accepted as u32;
        if accepted < drafted {
            self.misses += 1;
        }
    }

    /// Up to `max_draft` tokens guessed to follow `history` (the sequence's tokens, prompt then
    /// output, ending with the token to be computed next), whose output starts at `output`.
    pub(crate) fn draft(&mut self, history: &[LlamaToken], output: usize) -> Vec<LlamaToken> {
        let max = self.max_draft();
        if let Some(d) = self.follow_prediction(&history[output.min(history.len())..], max) {
            return d;
        }
        let (min_n, max_n) = (
            self.config.min_ngram as usize,
            self.config.max_ngram as usize,
        );
        ngram_continuation(history, history, min_n, max_n, max)
            .map(|d| d.to_vec())
            .unwrap_or_default()
    }

    /// The prediction's tokens that follow `output`, when it follows the prediction (or an
    /// n-gram of its end is found in it).
    fn follow_prediction(&mut self, output: &[LlamaToken], max: usize) -> Option<Vec<LlamaToken>> {
        if self.prediction.is_empty() {
            return None;
        }
        for &token in &output[self.followed.min(output.len())..] {
            self.cursor = match self.cursor {
                Some(c) if self.prediction.get(c) == Some(&token) => Some(c + 1),
                _ => None,
            };
        }
        self.followed = output.len();
        if self.cursor.is_none_or(|c| c >= self.prediction.len()) {
            // Lost: look for the output's end in the prediction. One token is too common to
            // trust; n-grams from the model's minimum (at least 2).
            let min_n = (self.config.min_ngram as usize).max(2);
            let max_n = (self.config.max_ngram as usize).max(min_n);
            self.cursor = ngram_continuation_at(&self.prediction, output, min_n, max_n);
        }
        let c = self.cursor?;
        let end = (c + max).min(self.prediction.len());
        (c < end).then(|| self.prediction[c..end].to_vec())
    }
}

/// Where in `source` the tokens after the longest suffix of `history` (from `max_n` down to
/// `min_n` tokens) continue, at its most recent occurrence that has a continuation. When
/// `source` is `history` itself, the suffix's own place has none, so it never counts.
fn ngram_continuation_at(
    source: &[LlamaToken],
    history: &[LlamaToken],
    min_n: usize,
    max_n: usize,
) -> Option<usize> {
    for n in (min_n.max(1)..=max_n.min(history.len())).rev() {
        let suffix = &history[history.len() - n..];
        let Some(last_start) = source.len().checked_sub(n + 1) else {
            continue;
        };
        if let Some(start) = (0..=last_start)
            .rev()
            .find(|&j| &source[j..j + n] == suffix)
        {
            return Some(start + n);
        }
    }
    None
}

/// The up to `max` tokens that follow the longest suffix of `history` in `source` (see
/// [`ngram_continuation_at`]); in the history itself, what followed the earlier occurrence up to
/// the history's end, as llama.cpp's `ngram-simple` drafts.
fn ngram_continuation<'s>(
    source: &'s [LlamaToken],
    history: &[LlamaToken],
    min_n: usize,
    max_n: usize,
    max: usize,
) -> Option<&'s [LlamaToken]> {
    let at = ngram_continuation_at(source, history, min_n, max_n)?;
    let end = (at + max).min(source.len());
    (at < end).then(|| &source[at..end])
}

/// Expected tokens a step yields for a sequence drafting `k` tokens accepted with probability
/// `alpha` each (given the ones before): the sampled token, plus each drafted one accepted.
pub(crate) fn expected_tokens(alpha: f64, k: usize) -> f64 {
    (0..=k).map(|i| alpha.powi(i as i32)).sum()
}

/// How many micro-batches llama.cpp makes of a batch whose sequences (in id order, `ids`
/// consecutive where they are) have `rows` tokens each, with separate KV streams
/// (`llama_batch_allocr::split_equal`, sequential): a micro-batch takes the same number of
/// tokens from each sequence of a run of consecutive ids that all have tokens left, starting
/// with the first that has; at most `n_ubatch` tokens.
pub(crate) fn micro_batches(ids: &[i32], rows: &[usize], n_ubatch: usize) -> usize {
    let mut left = rows.to_vec();
    let mut count = 0;
    while let Some(first) = left.iter().position(|&r| r > 0) {
        let mut end = first + 1;
        while end < left.len() && left[end] > 0 && ids[end] == ids[end - 1] + 1 {
            end += 1;
        }
        let members = end - first;
        let each = left[first..end]
            .iter()
            .copied()
            .min()
            .unwrap_or(1)
            .min((n_ubatch / members).max(1));
        for r in &mut left[first..end] {
            *r -= each;
        }
        count += 1;
    }
    count
}

/// One generating sequence in the step being planned: its id, its candidate draft, and its
/// estimated acceptance.
pub(crate) struct Candidate {
    pub seq: i32,
    pub draft_len: usize,
    pub alpha: f64,
}

/// The draft length (the same cap for every sequence: a sequence with a shorter draft drafts
/// what it has) that yields the most tokens per unit of cost for the step, within `budget`
/// rows in all; 0 when no draft pays. `candidates` in id order.
pub(crate) fn choose_draft_len(
    candidates: &[Candidate],
    row_cost: f64,
    n_ubatch: usize,
    budget: usize,
) -> usize {
    let longest = candidates.iter().map(|c| c.draft_len).max().unwrap_or(0);
    let ids: Vec<i32> = candidates.iter().map(|c| c.seq).collect();
    let value = |cap: usize| -> Option<f64> {
        let rows: Vec<usize> = candidates
            .iter()
            .map(|c| 1 + c.draft_len.min(cap))
            .collect();
        let total: usize = rows.iter().sum();
        if total > budget {
            return None;
        }
        let passes = micro_batches(&ids, &rows, n_ubatch) as f64;
        let cost = passes + row_cost * total as f64;
        let tokens: f64 = candidates
            .iter()
            .map(|c| expected_tokens(c.alpha, c.draft_len.min(cap)))
            .sum();
        Some(tokens / cost)
    };
    let mut best = (0, value(0).unwrap_or(0.0));
    for cap in 1..=longest {
        match value(cap) {
            // Strictly better: among equals the shorter draft wastes less on a miss.
            Some(v) if v > best.1 * (1.0 + 1e-9) => best = (cap, v),
            Some(_) => {}
            None => break,
        }
    }
    best.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: &[i32]) -> Vec<LlamaToken> {
        v.iter().map(|&i| LlamaToken(i)).collect()
    }

    #[test]
    fn ngrams_continue_their_latest_earlier_occurrence() {
        // "1 2 3 9 … 1 2 3 7 8 … 1 2 3": the latest earlier "1 2 3" was followed by 7 8.
        let h = t(&[1, 2, 3, 9, 5, 1, 2, 3, 7, 8, 6, 1, 2, 3]);
        assert_eq!(
            ngram_continuation(&h, &h, 2, 4, 3),
            Some(&t(&[7, 8, 6])[..])
        );
        // Only what followed before the suffix itself is a guess.
        let h = t(&[4, 5, 6, 4, 5]);
        assert_eq!(
            ngram_continuation(&h, &h, 2, 4, 8),
            Some(&t(&[6, 4, 5])[..])
        );
        // A suffix found nowhere else, or shorter than min_n: no draft.
        assert_eq!(ngram_continuation(&h, &h, 3, 4, 8), None);
        assert_eq!(ngram_continuation(&t(&[1]), &t(&[1]), 1, 4, 8), None);
        // Longer matches first: "5 1 2" beats the more recent "1 2".
        let h = t(&[5, 1, 2, 8, 1, 2, 9, 5, 1, 2]);
        assert_eq!(ngram_continuation(&h, &h, 2, 3, 1), Some(&t(&[8])[..]));
    }

    #[test]
    fn predictions_are_followed_and_found_again() {
        let config = Speculation {
            max_draft: 3,
            min_ngram: 2,
            ..Speculation::default()
        };
        let mut d = Drafter::new(config, t(&[10, 11, 12, 13, 14, 15, 16]));
        // Prompt [1, 2], output so far [10]: the prediction continues at 11.
        assert_eq!(d.draft(&t(&[1, 2, 10]), 2), t(&[11, 12, 13]));
        assert_eq!(d.draft(&t(&[1, 2, 10, 11, 12]), 2), t(&[13, 14, 15]));
        // The output leaves the prediction (99), then rejoins it ("13 14"): found again.
        assert_eq!(
            d.draft(&t(&[1, 2, 10, 11, 12, 99]), 2),
            Vec::<LlamaToken>::new()
        );
        assert_eq!(
            d.draft(&t(&[1, 2, 10, 11, 12, 99, 13, 14]), 2),
            t(&[15, 16])
        );
        // Past the prediction's end the n-grams of the sequence take over.
        let mut d = Drafter::new(config_ngram(), t(&[7]));
        assert_eq!(
            d.draft(&t(&[1, 2, 3, 4, 1, 2, 7]), 6),
            Vec::<LlamaToken>::new()
        );
        assert_eq!(d.draft(&t(&[1, 2, 3, 4, 7, 1, 2]), 4), t(&[3, 4, 7, 1, 2]));
    }

    fn config_ngram() -> Speculation {
        Speculation {
            min_ngram: 2,
            ..Speculation::default()
        }
    }

    #[test]
    fn micro_batches_follow_llama_cpps_equal_split() {
        // One row each: one micro-batch; a hole in the ids splits it.
        assert_eq!(micro_batches(&[0, 1, 2], &[1, 1, 1], 512), 1);
        assert_eq!(micro_batches(&[0, 2], &[1, 1], 512), 2);
        // Equal drafts keep one; a longer one adds a micro-batch for its rest.
        assert_eq!(micro_batches(&[0, 1], &[4, 4], 512), 1);
        assert_eq!(micro_batches(&[0, 1, 2], &[1, 5, 1], 512), 2);
        // Once a sequence runs out, its neighbours are no longer consecutive.
        assert_eq!(micro_batches(&[0, 1, 2], &[3, 1, 3], 512), 3);
        assert_eq!(micro_batches(&[0], &[10], 4), 3);
    }

    #[test]
    fn drafting_pays_alone_and_not_in_a_full_batch() {
        let alone = [Candidate {
            seq: 0,
            draft_len: 16,
            alpha: 0.9,
        }];
        let k = choose_draft_len(&alone, 1.0, 512, 512);
        assert!((2..=6).contains(&k), "{k}");
        // A poor guesser does not draft.
        let poor = [Candidate {
            seq: 0,
            draft_len: 16,
            alpha: 0.2,
        }];
        assert_eq!(choose_draft_len(&poor, 1.0, 512, 512), 0);
        // Eight sequences: each drafted row costs as much as a whole sequence's token.
        let eight: Vec<Candidate> = (0..8)
            .map(|seq| Candidate {
                seq,
                draft_len: 16,
                alpha: 0.8,
            })
            .collect();
        assert_eq!(choose_draft_len(&eight, 1.0, 512, 512), 0);
        // Cheap rows (a memory-bound machine) draft longer.
        assert!(choose_draft_len(&alone, 0.1, 512, 512) > k);
        // The budget bounds the rows.
        assert_eq!(choose_draft_len(&alone, 0.1, 512, 3), 2);
        assert!((expected_tokens(0.5, 2) - 1.75).abs() < 1e-12);
    }
}
