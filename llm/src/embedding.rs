//! Embeddings from a GGUF model (llama-server's `--embedding --pooling mean|cls|last`): its own
//! llama.cpp context in embeddings mode, on a thread of its own, beside the model's chat
//! context or alone.
//!
//! Each input is a sequence of one batch (several inputs per `llama_decode`, all of each
//! input's tokens in one micro-batch, as pooling needs), pooled by llama.cpp over the
//! sequence's tokens: their mean, the first (CLS) or the last token's hidden state. The vector
//! is L2-normalised, as OpenAI's embeddings are (llama-server's default `--embd-normalize 2`).
//! The context's memory is measured when it is created, for the gateway's memory budget.

use crate::error::LlmError;
use crate::gguf::GgufInfo;
use llama_cpp_2::context::params::{LlamaContextParams, LlamaPoolingType};
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use std::num::NonZeroU32;
use std::sync::Arc;
use tokio::sync::oneshot;

/// Inputs one request may embed (OpenAI's limit).
pub const MAX_INPUTS: usize = 2048;

/// How a sequence's token states become one vector.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// The mean over the tokens.
    Mean,
    /// The first token's (BERT's CLS).
    Cls,
    /// The last token's (decoder models trained for it).
    Last,
}

impl Pooling {
    pub fn as_str(self) -> &'static str {
        match self {
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
        }
    }

    /// The pooling a GGUF file names (`{arch}.pooling_type`, llama.cpp's numbering), when it
    /// names one of these.
    pub fn from_metadata(info: &GgufInfo) -> Option<Pooling> {
        let key = format!("{}.pooling_type", info.architecture);
        match info.metadata.get(&key)?.parse::<u32>().ok()? {
            1 => Some(Pooling::Mean),
            2 => Some(Pooling::Cls),
            3 => Some(Pooling::Last),
            _ => None,
        }
    }

    fn llama(self) -> LlamaPoolingType {
        match self {
            Pooling::Mean => LlamaPoolingType::Mean,
            Pooling::Cls => LlamaPoolingType::Cls,
            Pooling::Last => LlamaPoolingType::Last,
        }
    }
}

/// How a model embeds (the gateway's `[llm.embeddings]`, or a version's config).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct EmbeddingConfig {
    /// How a text's token vectors become one.
    #[schemars(extend("x-default" = "the GGUF file's pooling type, mean when it names none"))]
    pub pooling: Option<Pooling>,
    /// Tokens one input may have; capped by the model's training context.
    pub max_input_tokens: u32,
    /// Tokens one `llama_decode` computes at most (several inputs together); at least
    /// `max_input_tokens`.
    pub batch_tokens: u32,
    /// Inputs one `llama_decode` computes at most.
    pub batch_inputs: u32,
    /// CPU threads llama.cpp uses.
    #[schemars(extend("x-default" = "the machine's cores"))]
    pub threads: usize,
    /// Layers offloaded to the GPU (builds with the `cuda` feature).
    #[schemars(extend("x-default" = "0; 999 in a build with the `cuda` feature"))]
    pub gpu_layers: u32,
}

impl Default for EmbeddingConfig {
    fn default() -> Self {
        EmbeddingConfig {
            pooling: None,
            max_input_tokens: 512,
            batch_tokens: 1024,
            batch_inputs: 16,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            gpu_layers: if cfg!(feature = "cuda") { 999 } else { 0 },
        }
    }
}

impl EmbeddingConfig {
    pub fn validate(&self) -> Result<(), String> {
        if !(8..=32_768).contains(&self.max_input_tokens) {
            return Err("max_input_tokens must be between 8 and 32768".into());
        }
        if self.batch_tokens < self.max_input_tokens || self.batch_tokens > 65_536 {
            return Err("batch_tokens must be at least max_input_tokens and at most 65536".into());
        }
        if !(1..=256).contains(&self.batch_inputs) {
            return Err("batch_inputs must be between 1 and 256".into());
        }
        if self.threads == 0 {
            return Err("threads must be at least 1".into());
        }
        Ok(())
    }
}

/// One input: text (tokenized as the model's prompts are) or token ids.
#[derive(Debug, Clone, PartialEq)]
pub enum EmbedInput {
    Text(String),
    Tokens(Vec<i32>),
}

/// The vectors of a request's inputs, in order, and the tokens they took.
#[derive(Debug, Clone, PartialEq)]
pub struct Embeddings {
    pub vectors: Vec<Vec<f32>>,
    pub prompt_tokens: u32,
}

/// A request being embedded; dropping it lets the thread skip the rest of its work.
#[derive(Debug)]
pub struct PendingEmbeddings(oneshot::Receiver<Result<Embeddings, LlmError>>);

impl PendingEmbeddings {
    pub async fn wait(self) -> Result<Embeddings, LlmError> {
        self.0.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// From a thread outside an async runtime.
    pub fn wait_blocking(self) -> Result<Embeddings, LlmError> {
        self.0.blocking_recv().unwrap_or_else(|_| Err(stopped()))
    }
}

fn stopped() -> LlmError {
    LlmError::Stopped("its embedding thread has ended".into())
}

struct Job {
    inputs: Vec<Vec<LlamaToken>>,
    reply: oneshot::Sender<Result<Embeddings, LlmError>>,
}

struct Inner {
    model: Arc<LlamaModel>,
    pooling: Pooling,
    dimensions: usize,
    max_input_tokens: u32,
    memory_bytes: u64,
    jobs: crossbeam_channel::Sender<Job>,
}

/// A model's embedding context. Cloning the handle is cheap; the thread ends with the last
/// handle.
#[derive(Clone)]
pub struct Embedder {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("pooling", &self.inner.pooling)
            .field("dimensions", &self.inner.dimensions)
            .finish_non_exhaustive()
    }
}

impl Embedder {
    /// A GGUF file loaded for embeddings alone (an embedding model, no chat). Blocking.
    pub fn load(path: &std::path::Path, config: EmbeddingConfig) -> Result<Embedder, LlmError> {
        config.validate().map_err(LlmError::InvalidParam)?;
        let info = crate::gguf::inspect(path).map_err(|e| LlmError::InvalidModel(e.0))?;
        let params = llama_cpp_2::model::params::LlamaModelParams::default()
            .with_n_gpu_layers(config.gpu_layers);
        let model = LlamaModel::load_from_file(crate::backend::backend()?, path, &params)
            .map_err(|e| LlmError::InvalidModel(format!("llama.cpp cannot load it: {e}")))?;
        Embedder::start(Arc::new(model), &info, config)
    }

    /// An embedding context for a loaded model (shared weights), on a thread of its own.
    pub(crate) fn start(
        model: Arc<LlamaModel>,
        info: &GgufInfo,
        config: EmbeddingConfig,
    ) -> Result<Embedder, LlmError> {
        config.validate().map_err(LlmError::InvalidParam)?;
        let pooling = config
            .pooling
            .or_else(|| Pooling::from_metadata(info))
            .unwrap_or(Pooling::Mean);
        let max_input_tokens = config.max_input_tokens.min(model.n_ctx_train().max(8));
        let batch_tokens = config.batch_tokens.max(max_input_tokens);
        let threads = i32::try_from(config.threads).unwrap_or(i32::MAX);
        // One stream for all inputs (each sees only its own tokens): the batch is one
        // micro-batch, so every input is pooled whole.
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(batch_tokens))
            .with_n_batch(batch_tokens)
            .with_n_ubatch(batch_tokens)
            .with_n_seq_max(config.batch_inputs)
            .with_n_threads(threads)
            .with_n_threads_batch(threads)
            .with_embeddings(true)
            .with_pooling_type(pooling.llama())
            .with_kv_unified(true);
        let (jobs, receiver) = crossbeam_channel::unbounded();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread_model = model.clone();
        let backend = crate::backend::backend()?;
        let limits = (batch_tokens as usize, config.batch_inputs as usize);
        std::thread::Builder::new()
            .name("llm-embeddings".into())
            .spawn(move || {
                let model = thread_model;
                // This thread's allocator arena exists before the context is measured.
                std::hint::black_box(vec![0u8; 64]);
                let before = virtual_data_bytes();
                match model.new_context(backend, params) {
                    Ok(ctx) => {
                        let measured = virtual_data_bytes().saturating_sub(before);
                        let _ = ready_tx.send(Ok(measured));
                        run(ctx, &model, receiver, limits);
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                    }
                };
            })
            .map_err(|e| LlmError::Internal(format!("starting the embedding thread: {e}")))?;
        let measured = ready_rx
            .recv()
            .map_err(|_| LlmError::Internal("the embedding thread died at start".into()))?
            .map_err(|e| {
                LlmError::Internal(format!(
                    "creating an embedding context of {batch_tokens} tokens: {e}"
                ))
            })?;
        // At least the KV cache, should /proc not tell.
        let kv = info.kv_bytes_per_token() * u64::from(batch_tokens);
        Ok(Embedder {
            inner: Arc::new(Inner {
                dimensions: model.n_embd_out().max(0) as usize,
                model,
                pooling,
                max_input_tokens,
                memory_bytes: measured.max(kv),
                jobs,
            }),
        })
    }

    pub fn pooling(&self) -> Pooling {
        self.inner.pooling
    }

    /// Length of every vector.
    pub fn dimensions(&self) -> usize {
        self.inner.dimensions
    }

    /// Tokens one input may have.
    pub fn max_input_tokens(&self) -> u32 {
        self.inner.max_input_tokens
    }

    /// Host memory the context took (KV cache, compute and output buffers), besides the
    /// weights it shares: what the gateway counts in its memory budget.
    pub fn memory_bytes(&self) -> u64 {
        self.inner.memory_bytes
    }

    /// OpenAI's `dimensions`: only the model's own (these models are not trained to be cut).
    pub fn check_dimensions(&self, requested: Option<u32>) -> Result<(), LlmError> {
        match requested {
            Some(n) if n as usize != self.dimensions() => Err(LlmError::InvalidParam(format!(
                "dimensions: this model's embeddings have {} dimensions and cannot be shortened",
                self.dimensions()
            ))),
            _ => Ok(()),
        }
    }

    /// Queues `inputs`, checked first: at least one and at most [`MAX_INPUTS`], none empty or
    /// longer than [`max_input_tokens`](Self::max_input_tokens), token ids in the vocabulary.
    pub fn embed(&self, inputs: &[EmbedInput]) -> Result<PendingEmbeddings, LlmError> {
        if inputs.is_empty() || inputs.len() > MAX_INPUTS {
            return Err(LlmError::InvalidParam(format!(
                "input: between 1 and {MAX_INPUTS} inputs"
            )));
        }
        let vocab = self.inner.model.vocab();
        let n_vocab = self.inner.model.n_vocab();
        let limit = self.inner.max_input_tokens as usize;
        let mut tokens = Vec::with_capacity(inputs.len());
        for (i, input) in inputs.iter().enumerate() {
            let t: Vec<LlamaToken> = match input {
                // Not tokenized when it could not fit (no vocabulary averages 64 bytes a token).
                EmbedInput::Text(s) if s.len() > limit * 64 => {
                    return Err(too_long(i, s.len(), limit))
                }
                EmbedInput::Text(s) => vocab.tokenize(s.as_bytes(), true, true),
                EmbedInput::Tokens(ids) => {
                    if let Some(bad) = ids.iter().find(|&&t| t < 0 || t >= n_vocab) {
                        return Err(LlmError::InvalidParam(format!(
                            "input[{i}]: token id {bad} is not between 0 and {}",
                            n_vocab - 1
                        )));
                    }
                    ids.iter().map(|&t| LlamaToken(t)).collect()
                }
            };
            let empty = match input {
                EmbedInput::Text(s) => s.is_empty(),
                EmbedInput::Tokens(ids) => ids.is_empty(),
            };
            if empty || t.is_empty() {
                return Err(LlmError::InvalidParam(format!(
                    "input[{i}]: must not be empty"
                )));
            }
            if t.len() > limit {
                return Err(too_long(i, t.len(), limit));
            }
            tokens.push(t);
        }
        let (reply, receiver) = oneshot::channel();
        self.inner
            .jobs
            .send(Job {
                inputs: tokens,
                reply,
            })
            .map_err(|_| stopped())?;
        Ok(PendingEmbeddings(receiver))
    }
}

fn too_long(i: usize, tokens: usize, limit: usize) -> LlmError {
    LlmError::InvalidParam(format!(
        "input[{i}]: {tokens} tokens; this model embeds at most {limit} tokens per input"
    ))
}

/// The embedding thread: jobs one after the other, each in batches of whole inputs.
fn run(
    mut ctx: llama_cpp_2::context::LlamaContext<'_>,
    model: &LlamaModel,
    jobs: crossbeam_channel::Receiver<Job>,
    (batch_tokens, batch_inputs): (usize, usize),
) {
    let mut batch = LlamaBatch::new(batch_tokens, 1);
    let width = model.n_embd_out().max(0) as usize;
    while let Ok(job) = jobs.recv() {
        let prompt_tokens = job.inputs.iter().map(Vec::len).sum::<usize>() as u32;
        let mut vectors = Vec::with_capacity(job.inputs.len());
        let mut failed = None;
        let mut next = 0;
        while next < job.inputs.len() {
            if job.reply.is_closed() {
                break;
            }
            // As many whole inputs as fit.
            let mut end = next;
            let mut tokens = 0;
            while end < job.inputs.len()
                && end - next < batch_inputs
                && tokens + job.inputs[end].len() <= batch_tokens
            {
                tokens += job.inputs[end].len();
                end += 1;
            }
            match embed_batch(&mut ctx, &mut batch, &job.inputs[next..end], width) {
                Ok(v) => vectors.extend(v),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
            next = end;
        }
        let answer = match failed {
            Some(e) => {
                tracing::error!(error = %e, "llama.cpp embedding failed");
                Err(LlmError::Internal(e))
            }
            None => Ok(Embeddings {
                vectors,
                prompt_tokens,
            }),
        };
        let _ = job.reply.send(answer);
    }
}

/// One `llama_decode` of `inputs` (sequence `k` for the k-th), their pooled, normalised
/// vectors. The KV cache is emptied after, so the next batch starts from nothing.
fn embed_batch(
    ctx: &mut llama_cpp_2::context::LlamaContext<'_>,
    batch: &mut LlamaBatch<'_>,
    inputs: &[Vec<LlamaToken>],
    width: usize,
) -> Result<Vec<Vec<f32>>, String> {
    batch.clear();
    for (seq, tokens) in inputs.iter().enumerate() {
        batch
            .add_sequence(tokens, seq as i32, true)
            .map_err(|e| format!("building the batch: {e}"))?;
    }
    let decoded = ctx.decode(batch).map_err(|e| e.to_string());
    let vectors = decoded.and_then(|()| {
        (0..inputs.len())
            .map(|seq| {
                let v = ctx
                    .embeddings_seq_ith(seq as i32)
                    .map_err(|_| format!("no pooled embedding for sequence {seq}"))?;
                Ok(normalized(&v[..width.min(v.len())]))
            })
            .collect()
    });
    ctx.clear_kv_cache();
    vectors
}

/// `v / |v|` (L2), in f64 sums; a zero vector stays zero.
pub fn normalized(v: &[f32]) -> Vec<f32> {
    let norm = v
        .iter()
        .map(|&x| f64::from(x) * f64::from(x))
        .sum::<f64>()
        .sqrt();
    if norm == 0.0 {
        return v.to_vec();
    }
    v.iter().map(|&x| (f64::from(x) / norm) as f32).collect()
}

/// The process's data segment and anonymous mappings (`VmData`), in bytes: what a llama.cpp
/// context allocates grows it by its size at once (pages are counted before they are
/// touched). 0 where /proc does not tell.
fn virtual_data_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmData:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_are_normalised_and_sizes_checked() {
        let v = normalized(&[3.0, 4.0]);
        assert!((v[0] - 0.6).abs() < 1e-7 && (v[1] - 0.8).abs() < 1e-7);
        assert_eq!(normalized(&[0.0, 0.0]), vec![0.0, 0.0]);
        assert!(EmbeddingConfig::default().validate().is_ok());
        let small = EmbeddingConfig {
            batch_tokens: 100,
            max_input_tokens: 200,
            ..EmbeddingConfig::default()
        };
        assert!(small.validate().unwrap_err().contains("batch_tokens"));
        assert!(virtual_data_bytes() > 0);
    }

    #[test]
    fn pooling_comes_from_the_metadata() {
        let mut info = GgufInfo {
            version: 3,
            tensor_count: 0,
            architecture: "bert".into(),
            name: None,
            context_length: None,
            chat_template: None,
            metadata: Default::default(),
        };
        assert_eq!(Pooling::from_metadata(&info), None);
        info.metadata.insert("bert.pooling_type".into(), "2".into());
        assert_eq!(Pooling::from_metadata(&info), Some(Pooling::Cls));
        info.metadata.insert("bert.pooling_type".into(), "0".into());
        assert_eq!(Pooling::from_metadata(&info), None);
    }
}
