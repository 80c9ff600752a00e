//! The response cache, as a policy on the request phases (`crate::phases`): a model whose
//! config says `"response_cache": {"enable": true}` (Triton's field) has its answers kept in
//! one cache shared by every model, `[cache] bytes` large (counted in the host memory budget),
//! least recently used evicted first.
//!
//! - KServe requests (every protocol that runs [`crate::infer::run`]): the key is the version,
//!   its file's sha256 and a digest of its configuration (post-ops, outputs' settings), every
//!   input's name, datatype, shape and bytes, and the outputs asked for. The answer is kept as
//!   the model's output tensors, before any protocol encodes them: a hit is encoded like a
//!   fresh answer, so it is byte-identical to it (binary or JSON, classification, whatever
//!   the request asks of the encoding). A hit answers without queueing or running the model.
//! - Chat generations: only deterministic requests (temperature 0, or a fixed seed), keyed on
//!   the rendered prompt and every parameter that changes the answer; the pieces of text are
//!   kept as they were sent, so a streamed hit replays the same pieces as a stream. A cached
//!   chat answer is charged its tokens like a generated one (the token policy runs first).
//! - Never cached: pipelines (their plugins are not part of a model's key), stateful sequence
//!   steps, mirrored copies (they never pass the phases), failed answers.
//!
//! The cache is shared by every caller of a model: its key never names who asked, and it is a
//! SHA-256 digest so that no caller can craft another request's key.
//!
//! Stale answers: a new version has another number and file, a changed config another
//! digest, so neither can hit an old answer; the model repository also drops the old entries
//! ([`AnswerCache::invalidate_version`], [`AnswerCache::invalidate_model`]) to free their bytes.

use crate::error::ApiResult;
use crate::infer::Target;
use crate::phases::{ChatAnswer, ChatExchange, ChatHook, Exchange, Hook, Policy};
use futures_util::future::BoxFuture;
use infergate_engine::{Tensor, TensorData};
use infergate_store::models::ModelRecord;
use infergate_traffic::cache::{CacheSize, CacheStats, ModelCache, ResponseCache};
use infergate_traffic::cache_key::{CacheKey, KeyBuilder};
use parking_lot::RwLock;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Arc;

/// What the cache keeps: a model's output tensors, or a chat answer's pieces of text.
pub enum Cached {
    Tensors(Vec<Tensor>),
    Chat(Arc<ChatAnswer>),
}

/// One version's view of the cache, built once per stored record (a new config is a new
/// record, so a new view).
struct Version {
    /// The record this was built from: its address is the table's key, so it is kept alive.
    record: Arc<ModelRecord>,
    handle: ModelCache<Cached>,
    config_digest: [u8; 32],
}

/// The server's response cache and the per-version views of it. Cheap to clone.
#[derive(Clone)]
pub struct AnswerCache {
    cache: ResponseCache<Cached>,
    /// By the address of the record the view was built for; `None`: caching is off for it.
    versions: Arc<RwLock<HashMap<usize, Option<Arc<Version>>>>>,
}

/// Whether a version's config enables the response cache.
pub fn enabled_in(config: &serde_json::Value) -> bool {
    config
        .get("response_cache")
        .and_then(|c| c.get("enable"))
        .and_then(serde_json::Value::as_bool)
        == Some(true)
}

fn tensor_bytes(t: &Tensor) -> usize {
    let data = match &t.data {
        TensorData::Raw(bytes) => bytes.len(),
        TensorData::Bytes(items) => items.iter().map(|i| i.len() + 24).sum(),
    };
    data + t.name.len() + t.shape.len() * 8 + std::mem::size_of::<Tensor>()
}

impl AnswerCache {
    /// A cache of `bytes` (0: off, every model uncached).
    pub fn new(bytes: u64) -> AnswerCache {
        AnswerCache {
            cache: ResponseCache::new(usize::try_from(bytes).unwrap_or(usize::MAX)),
            versions: Arc::default(),
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.cache.size().capacity > 0
    }

    /// The view of `record`'s version, when its config enables the cache.
    fn version(&self, record: &Arc<ModelRecord>) -> Option<Arc<Version>> {
        let at = Arc::as_ptr(record) as usize;
        if let Some(found) = self.versions.read().get(&at) {
            return found.clone();
        }
        let view = (self.is_enabled() && enabled_in(&record.config)).then(|| {
            Arc::new(Version {
                record: record.clone(),
                handle: self.cache.version(&record.name, record.version),
                config_digest: Sha256::digest(record.config.to_string().as_bytes()).into(),
            })
        });
        self.versions.write().insert(at, view.clone());
        view
    }

    /// Drops every answer of one version and its views (its config changed, it was deleted).
    pub fn invalidate_version(&self, model: &str, version: u64) {
        self.versions.write().retain(|_, v| {
            v.as_ref()
                .is_none_or(|v| v.record.name != model || v.record.version != version)
        });
        // Views of records that do not enable the cache hold no record: drop them all, they
        // are rebuilt at the next request.
        self.versions.write().retain(|_, v| v.is_some());
        self.cache.invalidate_version(model, version);
    }

    /// Drops every answer of every version of `model`, and its counters (it was deleted).
    pub fn invalidate_model(&self, model: &str) {
        self.versions.write().retain(|_, v| v.is_some());
        self.versions
            .write()
            .retain(|_, v| v.as_ref().is_none_or(|v| v.record.name != model));
        self.cache.invalidate_model(model);
        self.cache.forget_model(model);
    }

    /// One version's counters (Triton's statistics).
    pub fn stats(&self, model: &str, version: u64) -> CacheStats {
        self.cache.stats_for_version(model, version)
    }

    pub fn stats_by_model(&self) -> Vec<(String, CacheStats)> {
        self.cache.stats_by_model()
    }

    pub fn size(&self) -> CacheSize {
        self.cache.size()
    }
}

fn version_key(view: &Version) -> KeyBuilder {
    let record = &view.record;
    let mut k = KeyBuilder::new(&record.name, record.version);
    k.file_sha256(record.sha256.as_bytes())
        .config_digest(&view.config_digest);
    k
}

/// The key of a KServe request: the version, its inputs and the outputs asked for.
fn tensors_key(view: &Version, inputs: &[Tensor], outputs: &[String]) -> CacheKey {
    let mut k = version_key(view);
    for input in inputs {
        match &input.data {
            TensorData::Raw(bytes) => {
                k.input(&input.name, input.datatype.name(), &input.shape, bytes);
            }
            TensorData::Bytes(items) => {
                // Each element framed by its length: ["ab", "c"] and ["a", "bc"] differ.
                let lengths: Vec<[u8; 8]> = items
                    .iter()
                    .map(|i| (i.len() as u64).to_le_bytes())
                    .collect();
                let pieces: Vec<&[u8]> = lengths
                    .iter()
                    .zip(items)
                    .flat_map(|(len, item)| [&len[..], &item[..]])
                    .collect();
                k.input_pieces(&input.name, input.datatype.name(), &input.shape, &pieces);
            }
        }
    }
    for output in outputs {
        k.output(output, b"");
    }
    k.finish()
}

/// The cache as a request policy. Attached after the token policy, so that a cached chat
/// answer is charged like a generated one.
pub struct CachePolicy {
    cache: AnswerCache,
}

impl CachePolicy {
    pub fn new(cache: AnswerCache) -> CachePolicy {
        CachePolicy { cache }
    }
}

struct TensorHook {
    view: Arc<Version>,
    key: CacheKey,
    hit: bool,
}

impl Hook for TensorHook {
    fn before_model(&mut self) -> Option<Vec<Tensor>> {
        let hit = self.view.handle.get(&self.key)?;
        match &*hit.meta {
            Cached::Tensors(outputs) => {
                self.hit = true;
                Some(outputs.clone())
            }
            Cached::Chat(_) => None,
        }
    }

    fn after_model(&mut self, outputs: &[Tensor]) {
        if !self.hit {
            let bytes = outputs.iter().map(tensor_bytes).sum();
            self.view.handle.insert_charged(
                self.key,
                self.view.record.version,
                bytes::Bytes::new(),
                Cached::Tensors(outputs.to_vec()),
                bytes,
            );
        }
    }
}

struct ChatCacheHook {
    view: Arc<Version>,
    key: CacheKey,
    hit: bool,
}

impl ChatHook for ChatCacheHook {
    fn before_generation(&mut self) -> Option<Arc<ChatAnswer>> {
        let hit = self.view.handle.get(&self.key)?;
        match &*hit.meta {
            Cached::Chat(answer) => {
                self.hit = true;
                Some(answer.clone())
            }
            Cached::Tensors(_) => None,
        }
    }

    fn after_generation(&mut self, answer: &ChatAnswer) {
        if !self.hit {
            let bytes = answer
                .choices
                .iter()
                .flat_map(|c| &c.pieces)
                .map(|p| p.len() + 24)
                .sum();
            self.view.handle.insert_charged(
                self.key,
                self.view.record.version,
                bytes::Bytes::new(),
                Cached::Chat(Arc::new(answer.clone())),
                bytes,
            );
        }
    }
}

impl Policy for CachePolicy {
    fn name(&self) -> &'static str {
        "response_cache"
    }

    fn admit<'a>(
        &'a self,
        exchange: &'a Exchange<'a>,
    ) -> BoxFuture<'a, ApiResult<Option<Box<dyn Hook>>>> {
        let hook = match exchange.target {
            Target::Model(record) if !exchange.stateful => self.cache.version(record).map(|view| {
                let key = tensors_key(&view, exchange.inputs, exchange.outputs);
                Box::new(TensorHook {
                    view,
                    key,
                    hit: false,
                }) as Box<dyn Hook>
            }),
            _ => None,
        };
        Box::pin(async move { Ok(hook) })
    }

    fn admit_chat<'a>(
        &'a self,
        exchange: &'a ChatExchange<'a>,
    ) -> BoxFuture<'a, ApiResult<Option<Box<dyn ChatHook>>>> {
        let hook = exchange
            .deterministic
            .then(|| self.cache.version(exchange.model))
            .flatten()
            .map(|view| {
                let mut k = version_key(&view);
                k.prompt(exchange.prompt.as_bytes());
                for (name, value) in exchange.parameters {
                    k.parameter(name, value.as_bytes());
                }
                Box::new(ChatCacheHook {
                    key: k.finish(),
                    view,
                    hit: false,
                }) as Box<dyn ChatHook>
            });
        Box::pin(async move { Ok(hook) })
    }
}
