//! Text generation with the character-level model (`scripts/export_textgen.py`): input `input`
//! int64 [b, 40] (character indices, left-padded with 0), output `probabilities` float32
//! [b, vocab]. One model call per generated character; sampling with temperature, top-p and a
//! seeded RNG (the same seed and parameters give the same text), stop sequences held back while
//! they may still match, so streamed text never contains one.
//!
//! [`Generation::next`] produces one step at a time: HTTP streaming and WebSocket frames drive
//! it, so a client that goes away stops generation at the next character.

use crate::error::{ApiError, ApiResult};
use infergate_engine::Tensor;
#[cfg(test)]
use infergate_llm::output::longest_suffix_prefix;
use infergate_llm::output::release;
pub use infergate_llm::Finish;
use infergate_store::models::ModelRecord;
// The sampling parameters as requests give them (OpenAI bodies, WebSocket `generate`).
pub use crate::openai_request::Sampling;
use futures_util::future::BoxFuture;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

pub const VOCAB_FORMAT: &str = "infergate-textgen-vocab/1";
const INPUT: &str = "input";
const OUTPUT: &str = "probabilities";
/// Added to probabilities before the temperature's logarithm, as textgenrnn does.
const EPSILON: f64 = 1e-7;

/// The vocabulary file written by the exporter.
#[derive(Debug, Deserialize)]
struct VocabFile {
    format: String,
    max_length: usize,
    padding_index: usize,
    unknown_index: usize,
    meta_index: usize,
    tokens: Vec<String>,
}

#[derive(Debug)]
pub struct Vocab {
    tokens: Vec<String>,
    index: HashMap<char, usize>,
    max_length: usize,
    padding_index: usize,
    unknown_index: usize,
    meta_index: usize,
}

impl Vocab {
    pub fn load(path: &Path) -> Result<Vocab, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading vocabulary {}: {e}", path.display()))?;
        Vocab::parse(&text).map_err(|e| format!("vocabulary {}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Vocab, String> {
        let f: VocabFile = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if f.format != VOCAB_FORMAT {
            return Err(format!(
                "format is '{}', expected '{VOCAB_FORMAT}'",
                f.format
            ));
        }
        let n = f.tokens.len();
        if f.max_length == 0
            || [f.padding_index, f.unknown_index, f.meta_index]
                .iter()
                .any(|&i| i >= n)
        {
            return Err("max_length or an index is out of range".into());
        }
        let mut index = HashMap::new();
        for (i, t) in f.tokens.iter().enumerate() {
            let mut chars = t.chars();
            if let (Some(c), None) = (chars.next(), chars.next()) {
                if i != f.padding_index && i != f.meta_index {
                    index.entry(c).or_insert(i);
                }
            }
        }
        Ok(Vocab {
            tokens: f.tokens,
            index,
            max_length: f.max_length,
            padding_index: f.padding_index,
            unknown_index: f.unknown_index,
            meta_index: f.meta_index,
        })
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The context for a prompt: the meta (start) token, then one index per character.
    pub fn encode_prompt(&self, prompt: &str) -> Vec<usize> {
        std::iter::once(self.meta_index)
            .chain(
                prompt
                    .chars()
                    .map(|c| *self.index.get(&c).unwrap_or(&self.unknown_index)),
            )
            .collect()
    }

    /// The model input for a context: its last `max_length` indices, left-padded.
    fn window(&self, context: &[usize]) -> Vec<i64> {
        let tail = &context[context.len().saturating_sub(self.max_length)..];
        let mut out = vec![self.padding_index as i64; self.max_length - tail.len()];
        out.extend(tail.iter().map(|&i| i as i64));
        out
    }
}

/// Picks the next index from a probability row: padding never, temperature reshaping, then
/// nucleus (top-p) truncation, then a draw from `rng`.
pub fn sample(probs: &[f32], padding: usize, params: &Sampling, rng: &mut StdRng) -> usize {
    let candidates = probs.iter().enumerate().filter(|&(i, _)| i != padding);
    if params.temperature == 0.0 {
        return candidates
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i)
            .unwrap_or(padding);
    }
    let mut weighted: Vec<(usize, f64)> = candidates
        .map(|(i, &p)| {
            (
                i,
                ((p.max(0.0) as f64 + EPSILON).ln() / params.temperature).exp(),
            )
        })
        .collect();
    let total: f64 = weighted.iter().map(|w| w.1).sum();
    if params.top_p < 1.0 {
        weighted.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut cumulative = 0.0;
        let mut keep = weighted.len();
        for (n, w) in weighted.iter().enumerate() {
            cumulative += w.1 / total;
            if cumulative >= params.top_p {
                keep = n + 1;
                break;
            }
        }
        weighted.truncate(keep);
    }
    let total: f64 = weighted.iter().map(|w| w.1).sum();
    let mut x = rng.random::<f64>() * total;
    for &(i, w) in &weighted {
        if x < w {
            return i;
        }
        x -= w;
    }
    weighted.last().map(|w| w.0).unwrap_or(padding)
}

/// One step's result: text now safe to show (may be empty while a stop sequence might be
/// forming), and the finish reason on the last step.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub text: String,
    pub finish: Option<Finish>,
}

/// Runs the generator's model on its inputs, answering the named outputs: the inference
/// service, handed in, so that text generation knows the model's contract (a window of
/// characters in, next-character probabilities out) and not the server.
pub type RunModel = Box<
    dyn Fn(Vec<Tensor>, Vec<String>) -> BoxFuture<'static, ApiResult<Vec<Tensor>>> + Send + Sync,
>;

/// A generation in progress.
pub struct Generation {
    run: RunModel,
    vocab: Arc<Vocab>,
    record: Arc<ModelRecord>,
    params: Sampling,
    rng: StdRng,
    context: Vec<usize>,
    /// Generated text not yet handed out (a possible stop-sequence prefix).
    pending: String,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    finished: bool,
}

impl Generation {
    pub fn new(
        run: RunModel,
        vocab: Arc<Vocab>,
        record: Arc<ModelRecord>,
        prompt: &str,
        params: Sampling,
    ) -> ApiResult<Generation> {
        params.validate()?;
        let context = vocab.encode_prompt(prompt);
        let rng = match params.seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_rng(&mut rand::rng()),
        };
        Ok(Generation {
            run,
            vocab,
            record,
            params,
            rng,
            prompt_tokens: (context.len() - 1) as u32,
            context,
            pending: String::new(),
            completion_tokens: 0,
            finished: false,
        })
    }

    pub fn model_name(&self) -> &str {
        &self.record.name
    }

    pub fn model_version(&self) -> u64 {
        self.record.version
    }

    /// Runs the model once and returns what can be shown; None once finished.
    pub async fn next(&mut self) -> ApiResult<Option<Step>> {
        if self.finished {
            return Ok(None);
        }
        if self.completion_tokens >= self.params.max_tokens {
            return Ok(Some(self.finish(Finish::Length)));
        }
        let window = self.vocab.window(&self.context);
        let input = Tensor::from_i64(INPUT, vec![1, window.len() as i64], &window)
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let mut outputs = (self.run)(vec![input], vec![OUTPUT.to_string()]).await?;
        let probs = outputs
            .pop()
            .and_then(|t| t.to_f32())
            .filter(|p| p.len() == self.vocab.len())
            .ok_or_else(|| {
                ApiError::internal(format!(
                    "model '{}' did not return FP32 '{OUTPUT}' over {} classes: is it the text generator?",
                    self.record.name,
                    self.vocab.len()
                ))
            })?;
        let index = sample(
            &probs,
            self.vocab.padding_index,
            &self.params,
            &mut self.rng,
        );
        if index == self.vocab.meta_index {
            return Ok(Some(self.finish(Finish::Stop)));
        }
        self.completion_tokens += 1;
        self.context.push(index);
        self.pending.push_str(&self.vocab.tokens[index]);
        if let Some(at) = self
            .params
            .stop
            .iter()
            .filter_map(|s| self.pending.find(s.as_str()))
            .min()
        {
            self.pending.truncate(at);
            return Ok(Some(self.finish(Finish::Stop)));
        }
        if self.completion_tokens >= self.params.max_tokens {
            return Ok(Some(self.finish(Finish::Length)));
        }
        // Hand out everything except the longest tail that could still begin a stop sequence.
        let text = release(&mut self.pending, &self.params.stop);
        Ok(Some(Step { text, finish: None }))
    }

    fn finish(&mut self, reason: Finish) -> Step {
        self.finished = true;
        Step {
            text: std::mem::take(&mut self.pending),
            finish: Some(reason),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VOCAB: &str = r#"{"format": "infergate-textgen-vocab/1", "max_length": 4,
        "padding_index": 0, "unknown_index": 0, "meta_token": "<s>", "meta_index": 4,
        "tokens": ["", "a", "b", "c", "<s>"]}"#;

    fn params(temperature: f64, top_p: f64) -> Sampling {
        Sampling {
            temperature,
            top_p,
            seed: Some(7),
            max_tokens: 10,
            stop: vec![],
        }
    }

    #[test]
    fn prompts_encode_with_meta_and_left_padding() {
        let v = Vocab::parse(VOCAB).unwrap();
        assert_eq!(v.encode_prompt("ab?"), vec![4, 1, 2, 0]);
        assert_eq!(v.window(&[4, 1]), vec![0, 0, 4, 1]);
        assert_eq!(v.window(&[4, 1, 2, 3, 1, 2]), vec![2, 3, 1, 2]);
        assert!(Vocab::parse(&VOCAB.replace("vocab/1", "vocab/2")).is_err());
    }

    #[test]
    fn sampling_is_seeded_greedy_and_top_p_truncates() {
        let probs = [0.9, 0.05, 0.03, 0.02, 0.0];
        let mut rng = StdRng::seed_from_u64(1);
        // Greedy never picks padding even when it is the most likely.
        assert_eq!(sample(&probs, 0, &params(0.0, 1.0), &mut rng), 1);
        // A top_p so small that only the best candidate remains.
        for _ in 0..50 {
            assert_eq!(sample(&probs, 0, &params(1.0, 0.01), &mut rng), 1);
        }
        let draw = |seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            (0..20)
                .map(|_| sample(&probs, 0, &params(1.5, 1.0), &mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        let seen: std::collections::BTreeSet<_> = draw(3).into_iter().chain(draw(4)).collect();
        assert!(seen.len() > 1 && !seen.contains(&0), "{seen:?}");
    }

    #[test]
    fn stop_prefixes_are_held_back() {
        assert_eq!(longest_suffix_prefix("hello wo", "world"), 2);
        assert_eq!(longest_suffix_prefix("hello", "world"), 0);
        assert_eq!(longest_suffix_prefix("ab", "b"), 0);
        assert_eq!(longest_suffix_prefix("xé", "éa"), 2);
        let mut p = params(1.0, 1.0);
        p.stop = vec!["".into()];
        assert!(p.validate().is_err());
        p.stop = vec!["a".into(); 5];
        assert!(p.validate().is_err());
        assert!(params(2.5, 1.0).validate().is_err());
        assert!(params(1.0, 0.0).validate().is_err());
    }
}
