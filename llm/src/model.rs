//! A loaded chat model: the llama.cpp model (weights, vocabulary), its chat template, and the
//! scheduler thread that owns its context. Cloning the handle is cheap; the thread stops once
//! every handle is dropped and its last sequence is done.

use crate::backend::backend;
use crate::embedding::{Embedder, EmbeddingConfig};
use crate::error::LlmError;
use crate::event::Event;
use crate::gguf::{self, GgufInfo};
use crate::params::SamplingParams;
use crate::scheduler::{Choice, Limits, Request, Scheduler};
use crate::speculative::{Speculation, SpeculationParams};
use crate::stats::{Stats, StatsSnapshot};
use crate::template::{ChatMessage, ChatTemplate};
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// How a chat model (llama.cpp) runs: each loaded version of a chat model gets these.
// Defaults that depend on the machine are described (`x-default`) rather than printed, so that
// the configuration reference generated from this schema is the same on every machine.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct LlmConfig {
    /// Sequences decoded together per loaded version (continuous batching slots), 1 to 256.
    #[schemars(extend("x-default" = "8 on up to 4 cores, 4 more per 4 further cores, at most 32"))]
    pub max_sequences: usize,
    /// Tokens of one sequence (prompt + completion), capped by the model's own context; at
    /// least 64.
    pub context_per_sequence: u32,
    /// Tokens one step decodes at most (generated tokens first, then prompt chunks), 32 to
    /// 8192 and at least `max_sequences`.
    pub batch_tokens: usize,
    /// CPU threads llama.cpp uses per loaded version. They wait between ops at an OpenMP
    /// barrier, so libgomp's `OMP_WAIT_POLICY` (read once, when libgomp loads) decides how:
    /// spinning, the default, is fastest on quiet cores; `passive` is kinder to cores shared
    /// with other processes.
    #[schemars(extend("x-default" = "the machine's cores"))]
    pub threads: usize,
    /// Requests that may wait for a slot; beyond it new ones are answered 503.
    pub queue_capacity: usize,
    /// Reuse the KV cache of prompt prefixes that requests share (a system prompt, the turns
    /// of a conversation so far).
    pub prefix_cache: bool,
    /// Layers offloaded to the GPU.
    #[schemars(extend("x-default" = "0; 999 in a build with the `cuda` feature"))]
    pub gpu_layers: u32,
    /// Speculative decoding's defaults for the model's requests.
    pub speculation: Speculation,
    /// How a model serves embeddings, from an embedding context of its own (`[llm.embeddings]`).
    pub embeddings: EmbeddingConfig,
    /// Per model name, what differs from the settings above (`[llm.models.NAME]`).
    pub models: BTreeMap<String, ModelOverrides>,
}

/// One model's own settings (`[llm.models.NAME]`): each replaces the server's whole section
/// (fields it leaves out take their built-in defaults, not the server's).
#[derive(
    Debug, Clone, Default, PartialEq, serde::Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields, default)]
pub struct ModelOverrides {
    /// The model's speculative decoding, in place of `[llm.speculation]`.
    pub speculation: Option<Speculation>,
    /// The model's embeddings, in place of `[llm.embeddings]`.
    pub embeddings: Option<EmbeddingConfig>,
}

impl Default for LlmConfig {
    /// Sized to the machine: 8 sequences on up to 4 cores (decoding a small model is bound by
    /// memory bandwidth, so batching 8 costs little more than 1), 4 more per further 4 cores,
    /// at most 32.
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        LlmConfig {
            max_sequences: (8 + cores.saturating_sub(4)).clamp(8, 32),
            context_per_sequence: 4096,
            batch_tokens: 512,
            threads: cores,
            queue_capacity: 256,
            prefix_cache: true,
            gpu_layers: if cfg!(feature = "cuda") { 999 } else { 0 },
            speculation: Speculation::default(),
            embeddings: EmbeddingConfig::default(),
            models: BTreeMap::new(),
        }
    }
}

impl LlmConfig {
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=256).contains(&self.max_sequences) {
            return Err("max_sequences must be between 1 and 256".into());
        }
        if self.context_per_sequence < 64 {
            return Err("context_per_sequence must be at least 64".into());
        }
        if !(32..=8192).contains(&self.batch_tokens) || self.batch_tokens < self.max_sequences {
            return Err(
                "batch_tokens must be between 32 and 8192 and at least max_sequences".into(),
            );
        }
        if self.threads == 0 {
            return Err("threads must be at least 1".into());
        }
        self.speculation
            .validate()
            .map_err(|e| format!("speculation: {e}"))?;
        self.embeddings
            .validate()
            .map_err(|e| format!("embeddings: {e}"))?;
        for (name, o) in &self.models {
            if let Some(s) = &o.speculation {
                s.validate()
                    .map_err(|e| format!("models.{name}.speculation: {e}"))?;
            }
            if let Some(e) = &o.embeddings {
                e.validate()
                    .map_err(|m| format!("models.{name}.embeddings: {m}"))?;
            }
        }
        Ok(())
    }

    /// The settings of the model named `name`: these with its own (`models`) applied.
    pub fn for_model(&self, name: &str) -> LlmConfig {
        let mut config = self.clone();
        if let Some(o) = self.models.get(name) {
            if let Some(s) = &o.speculation {
                config.speculation = s.clone();
            }
            if let Some(e) = &o.embeddings {
                config.embeddings = e.clone();
            }
        }
        config.models.clear();
        config
    }
}

impl LlmConfig {
    /// The llama.cpp context a model runs with: `max_sequences` KV streams of
    /// `context_per_sequence` tokens (the model's limit applied), computed on `threads`.
    pub fn context_params(&self, context_per_sequence: u32) -> LlamaContextParams {
        let threads = i32::try_from(self.threads).unwrap_or(i32::MAX);
        // One KV stream per sequence (not unified): a sequence's cells then always lie in
        // position order from the stream's start, whatever earlier sequences left behind, so a
        // repeated request computes exactly as its first run did (see the scheduler).
        LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(
                context_per_sequence * self.max_sequences as u32,
            ))
            .with_n_batch(self.batch_tokens as u32)
            .with_n_ubatch(self.batch_tokens as u32)
            .with_n_seq_max(self.max_sequences as u32)
            .with_n_threads(threads)
            .with_n_threads_batch(threads)
            .with_kv_unified(false)
    }
}

/// A model file checked and its description, without loading weights: the header and metadata
/// (ours), then llama.cpp's own loader on the vocabulary only (architecture and tokenizer
/// known to it), then the chat template compiled.
pub fn validate(path: &Path) -> Result<GgufInfo, LlmError> {
    let info = gguf::inspect(path).map_err(|e| LlmError::InvalidModel(e.0))?;
    let params = LlamaModelParams::default().with_vocab_only(true);
    let model = LlamaModel::load_from_file(backend()?, path, &params).map_err(|e| {
        LlmError::InvalidModel(format!(
            "llama.cpp cannot load it (architecture '{}'): {e}",
            info.architecture
        ))
    })?;
    chat_template(&model, &info).map_err(LlmError::InvalidModel)?;
    Ok(info)
}

fn chat_template(model: &LlamaModel, info: &GgufInfo) -> Result<ChatTemplate, String> {
    let vocab = model.vocab();
    let text =
        |t: LlamaToken| String::from_utf8_lossy(&vocab.token_to_piece(t, true, None)).into_owned();
    ChatTemplate::new(
        info.chat_template.as_deref(),
        &text(vocab.bos()),
        &text(vocab.eos()),
    )
}

struct Inner {
    model: Arc<LlamaModel>,
    info: GgufInfo,
    template: ChatTemplate,
    config: LlmConfig,
    context_per_sequence: u32,
    requests: crossbeam_channel::Sender<Request>,
    stats: Arc<Stats>,
}

/// A running chat model.
#[derive(Clone)]
pub struct LlmModel {
    inner: Arc<Inner>,
}

/// A generation in progress: its prompt size and its events, ending with [`Event::Done`] or
/// [`Event::Error`]. Dropping it frees the sequence at the scheduler's next step.
#[derive(Debug)]
pub struct Generation {
    pub prompt_tokens: u32,
    pub events: UnboundedReceiver<Event>,
}

impl LlmModel {
    /// Loads `path` and starts its scheduler. Blocking (seconds for large files).
    pub fn load(path: &Path, config: LlmConfig) -> Result<LlmModel, LlmError> {
        config.validate().map_err(LlmError::InvalidParam)?;
        let info = gguf::inspect(path).map_err(|e| LlmError::InvalidModel(e.0))?;
        let backend = backend()?;
        let params = LlamaModelParams::default().with_n_gpu_layers(config.gpu_layers);
        let model = Arc::new(
            LlamaModel::load_from_file(backend, path, &params)
                .map_err(|e| LlmError::InvalidModel(format!("llama.cpp cannot load it: {e}")))?,
        );
        let template = chat_template(&model, &info).map_err(LlmError::InvalidModel)?;
        let context_per_sequence = config.context_per_sequence.min(model.n_ctx_train().max(64));
        let n_ctx = context_per_sequence * config.max_sequences as u32;
        let limits = Limits {
            n_seq: config.max_sequences,
            n_batch: config.batch_tokens,
            n_ctx,
            prefix_cache: config.prefix_cache,
            row_cost: config.speculation.row_cost,
        };
        let ctx_params = config.context_params(context_per_sequence);
        let stats = Arc::new(Stats::default());
        let (requests, receiver) = crossbeam_channel::unbounded();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread_model = model.clone();
        let thread_stats = stats.clone();
        std::thread::Builder::new()
            .name(format!("llm-{}", info.name.as_deref().unwrap_or("model")))
            .spawn(move || {
                let model = thread_model;
                let ctx = match model.new_context(backend, ctx_params) {
                    Ok(ctx) => {
                        let _ = ready_tx.send(Ok(()));
                        ctx
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                Scheduler::new(&model, ctx, limits, thread_stats).run(receiver);
            })
            .map_err(|e| LlmError::Internal(format!("starting the scheduler thread: {e}")))?;
        ready_rx
            .recv()
            .map_err(|_| LlmError::Internal("the scheduler thread died at start".into()))?
            .map_err(|e| {
                LlmError::Internal(format!(
                    "creating a context of {n_ctx} tokens for {} sequences: {e}",
                    config.max_sequences
                ))
            })?;
        Ok(LlmModel {
            inner: Arc::new(Inner {
                model,
                info,
                template,
                config,
                context_per_sequence,
                requests,
                stats,
            }),
        })
    }

    pub fn info(&self) -> &GgufInfo {
        &self.inner.info
    }

    pub fn config(&self) -> &LlmConfig {
        &self.inner.config
    }

    /// Token ids run from 0 to this (exclusive).
    pub fn vocab_size(&self) -> u32 {
        self.inner.model.n_vocab().max(0) as u32
    }

    /// Tokens one sequence may hold: prompt + completion.
    pub fn context_length(&self) -> u32 {
        self.inner.context_per_sequence
    }

    pub fn stats(&self) -> StatsSnapshot {
        self.inner.stats.snapshot()
    }

    /// An embedding context for this model, beside its chat context (the weights are
    /// shared; its memory is [`Embedder::memory_bytes`]). Blocking.
    pub fn embedder(&self, config: EmbeddingConfig) -> Result<Embedder, LlmError> {
        Embedder::start(self.inner.model.clone(), &self.inner.info, config)
    }

    /// The prompt for a chat, from the model's template.
    pub fn render_chat(&self, messages: &[ChatMessage]) -> Result<String, LlmError> {
        self.inner
            .template
            .render(messages, true)
            .map_err(LlmError::InvalidMessages)
    }

    /// The prompt for a chat whose messages may carry tool calls and tool results, with the
    /// tools offered when `tools` offers them (see [`crate::tools::prompt`]).
    pub fn render_chat_with_tools(
        &self,
        messages: &[crate::tools::Message],
        tools: Option<&crate::tools::Tools>,
    ) -> Result<String, LlmError> {
        crate::tools::prompt::render(&self.inner.template, messages, tools)
    }

    /// Tokenizes a prompt as llama.cpp's server does: special tokens written in the text
    /// (`<|im_start|>`) are parsed, BOS added when the model asks for it.
    pub fn tokenize(&self, text: &str) -> Vec<i32> {
        self.inner
            .model
            .vocab()
            .tokenize(text.as_bytes(), true, true)
            .into_iter()
            .map(|t| t.0)
            .collect()
    }

    /// The `max_tokens` a request gets: its own (refused when prompt + it exceed the context,
    /// as OpenAI does), or what is left of the context up to `default`.
    pub fn completion_budget(
        &self,
        prompt_tokens: u32,
        requested: Option<u32>,
        default: u32,
    ) -> Result<u32, LlmError> {
        let limit = self.context_length();
        let over = |completion| LlmError::ContextLength {
            limit,
            prompt: prompt_tokens,
            completion,
        };
        match requested {
            Some(n) if prompt_tokens + n > limit => Err(over(n)),
            Some(n) => Ok(n),
            None if prompt_tokens >= limit => Err(over(1)),
            None => Ok(default.min(limit - prompt_tokens)),
        }
    }

    /// Queues a generation. Errors: bad parameters or a prompt over the context (client), a
    /// full queue (retry later), a stopped scheduler.
    pub fn generate(
        &self,
        prompt: &[i32],
        params: &SamplingParams,
        grammar: Option<&str>,
    ) -> Result<Generation, LlmError> {
        let mut one = self.generate_n(prompt, params, grammar, 1)?;
        one.pop()
            .ok_or_else(|| LlmError::Internal("no generation was queued".into()))
    }

    /// Queues `n` generations of one prompt (OpenAI's `n`): the prompt is computed once and its
    /// KV copied to the other `n - 1` sequences, each sampling on its own. Choice `i` is
    /// seeded with `seed + i`, so choices differ and a seeded request repeats. Speculative
    /// decoding as the model's configuration says.
    pub fn generate_n(
        &self,
        prompt: &[i32],
        params: &SamplingParams,
        grammar: Option<&str>,
        n: usize,
    ) -> Result<Vec<Generation>, LlmError> {
        self.generate_n_with(prompt, params, grammar, n, &SpeculationParams::default())
    }

    /// [`generate_n`](Self::generate_n) with the request's own speculative decoding: on or
    /// off, its draft length, and the output it predicts (drafted from first). Every choice
    /// drafts on its own.
    pub fn generate_n_with(
        &self,
        prompt: &[i32],
        params: &SamplingParams,
        grammar: Option<&str>,
        n: usize,
        speculation: &SpeculationParams,
    ) -> Result<Vec<Generation>, LlmError> {
        params.validate()?;
        if n == 0 {
            return Err(LlmError::InvalidParam("n: must be at least 1".into()));
        }
        if prompt.is_empty() {
            return Err(LlmError::InvalidParam("prompt: must not be empty".into()));
        }
        if prompt
            .iter()
            .any(|&t| t < 0 || t as u32 >= self.vocab_size())
        {
            return Err(LlmError::InvalidParam(format!(
                "prompt: token ids must be between 0 and {}",
                self.vocab_size() - 1
            )));
        }
        let prompt_tokens = prompt.len() as u32;
        self.completion_budget(prompt_tokens, Some(params.max_tokens), params.max_tokens)?;
        let spec = speculation.resolve(&self.inner.config.speculation)?;
        let prediction = match (&spec, &speculation.prediction) {
            (Some(_), Some(text)) => self.prediction_tokens(text)?,
            _ => Vec::new(),
        };
        let waiting =
            self.inner.stats.waiting.load(Ordering::Relaxed) as usize + self.inner.requests.len();
        if waiting >= self.inner.config.queue_capacity {
            return Err(LlmError::Overloaded {
                waiting,
                retry_after_s: 1,
            });
        }
        let seed = params.seed.unwrap_or_else(rand::random);
        let mut choices = Vec::with_capacity(n);
        let mut generations = Vec::with_capacity(n);
        for i in 0..n as u64 {
            let s = seed.wrapping_add(i);
            let sampler = params.sampler(&self.inner.model, grammar, (s ^ (s >> 32)) as u32)?;
            let (events, receiver) = unbounded_channel();
            choices.push(Choice { sampler, events });
            generations.push(Generation {
                prompt_tokens,
                events: receiver,
            });
        }
        let first = choices.remove(0);
        self.inner
            .requests
            .send(Request {
                prompt: prompt.iter().map(|&t| LlamaToken(t)).collect(),
                max_tokens: params.max_tokens,
                stop: params.stop.clone(),
                logprobs: params.logprobs,
                priority: params.priority,
                choice: first,
                forks: choices,
                speculation: spec,
                prediction,
            })
            .map_err(|_| LlmError::Stopped("its scheduler thread has ended".into()))?;
        Ok(generations)
    }

    /// A predicted output's tokens, as the model would write that text (no BOS, special tokens
    /// as plain text). Longer than the context is refused: it could never be followed whole.
    fn prediction_tokens(&self, text: &str) -> Result<Vec<LlamaToken>, LlmError> {
        let limit = self.context_length() as usize;
        // Not even tokenized when it could not fit (no vocabulary averages 64 bytes a token).
        if text.len() > limit * 64 {
            return Err(LlmError::InvalidParam(format!(
                "prediction: longer than the model's context of {limit} tokens"
            )));
        }
        let tokens = self
            .inner
            .model
            .vocab()
            .tokenize(text.as_bytes(), false, false);
        if tokens.len() > limit {
            return Err(LlmError::InvalidParam(format!(
                "prediction: {} tokens, more than the model's context of {limit}",
                tokens.len()
            )));
        }
        Ok(tokens)
    }
}
