//! The request bodies of the HTTP API, and the KServe inference answer, as the OpenAPI document
//! describes them. The gateway parses these itself (the KServe codec, the OpenAI request
//! checks, the admin handlers' small option bodies), so these types exist for the document
//! only: the answers and requests the Python client tests send and read are checked against
//! them (tests/python/test_openapi.py).

use serde_json::{Map, Value};
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// A KServe v2 inference request (JSON, or the JSON header of a binary request).
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct InferenceRequest {
    /// Echoed in the answer.
    id: Option<String>,
    /// `priority` and `timeout` (microseconds) are read; `binary_data_output: true` asks
    /// for every output in binary form.
    parameters: Option<Map<String, Value>>,
    inputs: Vec<InferenceInput>,
    /// The outputs wanted (default: all).
    outputs: Option<Vec<RequestedOutput>>,
}

/// One input tensor.
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct InferenceInput {
    name: String,
    /// Dimensions; their product is the element count.
    shape: Vec<i64>,
    /// `BOOL`, `UINT8` to `UINT64`, `INT8` to `INT64`, `FP16`, `FP32`, `FP64` or `BYTES`.
    datatype: String,
    /// `binary_data_size`: the input's bytes are in the binary section, not in `data`.
    parameters: Option<Map<String, Value>>,
    /// The elements, flat (row-major) or nested; absent when the input is binary.
    data: Option<Value>,
}

/// An output a request asks for.
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct RequestedOutput {
    name: String,
    /// `binary_data: true` for this output in binary form.
    parameters: Option<Map<String, Value>>,
}

/// A KServe v2 inference answer (JSON, or the JSON header of a binary answer).
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct InferenceResponse {
    model_name: String,
    model_version: String,
    /// The request's `id`, when it had one.
    id: Option<String>,
    outputs: Vec<InferenceOutput>,
}

/// One output tensor of an answer.
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct InferenceOutput {
    name: String,
    datatype: String,
    shape: Vec<i64>,
    /// `binary_data_size` when the output is in the binary section.
    parameters: Option<Map<String, Value>>,
    /// The elements, flat; absent when the output is binary.
    data: Option<Value>,
}

/// `POST /v2/repository/index`.
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct RepositoryIndexRequest {
    /// Only the versions that are ready.
    ready: Option<bool>,
}

/// `POST /v2[/models/{model}]/trace/setting`: the settings to change, each a string (a list
/// for `trace_level`); `null` clears one (a model's then follows the server-wide value).
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct TraceSettingsRequest {
    /// `["OFF"]`, or `"TIMESTAMPS"` and/or `"TENSORS"`.
    trace_level: Option<Vec<String>>,
    /// Record one trace in this many (`"0"` to `"4294967295"`).
    trace_rate: Option<String>,
    /// Traces to record before recording stops; `"-1"` for no end.
    trace_count: Option<String>,
    /// Checked (`"0"` to `"4294967295"`) and without effect: spans leave in batches.
    log_frequency: Option<String>,
    /// `"opentelemetry"`, the only mode.
    trace_mode: Option<String>,
}

/// `POST /api/keys`.
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct KeyRequest {
    /// A name to recognise the key by.
    name: String,
    /// `infer`, `upload`, `admin` (admin implies the others).
    scopes: Vec<String>,
    /// The key's own rate limit (absent: the server's default).
    rate_limit: Option<RateLimitRequest>,
    /// Requests of this key in flight at once (absent: the server's default).
    max_concurrent: Option<u32>,
}

/// A rate limit to set.
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct RateLimitRequest {
    /// Requests per second (GCRA).
    rps: f64,
    /// Requests allowed at once above the rate (default: the rate rounded up).
    burst: Option<u32>,
}

/// `PATCH /api/keys/{id}`: the fields given change, the others stay; `null` drops the key's
/// own limit (the server's default applies again).
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct KeyLimitsRequest {
    rate_limit: Option<RateLimitRequest>,
    max_concurrent: Option<u32>,
}

/// `POST /api/workers/tokens` and `POST /v2/models/{model}/assign`.
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct TtlRequest {
    /// Seconds the secret or token is valid. A join secret without it is valid until revoked;
    /// a direct-mode token for 300 seconds (at most 3600).
    ttl_s: Option<u64>,
}

/// The sampling parameters both OpenAI routes take (vLLM's and TGI's set); unknown fields are
/// ignored, as OpenAI clients send many. The character model (textgenrnn) takes `max_tokens`,
/// `temperature`, `top_p`, `seed`, `stop` and `stream` only.
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct Sampling {
    /// The model; the server's `openai.completions_model` when absent.
    model: Option<String>,
    max_tokens: Option<u32>,
    max_completion_tokens: Option<u32>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    top_k: Option<i32>,
    min_p: Option<f64>,
    seed: Option<u64>,
    /// A string or a list of up to 4 strings.
    stop: Option<Value>,
    /// Choices made from one prompt.
    n: Option<u32>,
    presence_penalty: Option<f64>,
    frequency_penalty: Option<f64>,
    /// Server-sent events, one chunk per `data:` line, then `data: [DONE]`.
    stream: Option<bool>,
    /// `include_usage: true` adds a last chunk with the usage.
    stream_options: Option<Map<String, Value>>,
    /// `{"type": "text"}`, `{"type": "json_object"}` or `{"type": "json_schema",
    /// "json_schema": {"schema": ...}}`: the answer follows it.
    response_format: Option<Value>,
    /// Admission order into the model's batch: lower first (vLLM's; default 0).
    priority: Option<i32>,
}

/// `POST /v1/completions`: the sampling parameters and a prompt.
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct CompletionRequest {
    #[serde(flatten)]
    sampling: Sampling,
    /// The prompt: a string, or a list of token ids.
    prompt: Value,
    /// Log probabilities of this many likeliest tokens per place (at most 5).
    logprobs: Option<u32>,
}

/// `POST /v1/chat/completions`: the sampling parameters and the conversation.
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct ChatRequest {
    #[serde(flatten)]
    sampling: Sampling,
    /// `{"role": "system" | "user" | "assistant", "content": ...}` in order.
    messages: Vec<Map<String, Value>>,
    /// Log probabilities of each generated token.
    logprobs: Option<bool>,
    /// With `logprobs`: this many likeliest tokens per place.
    top_logprobs: Option<u32>,
}

/// `POST /v1/embeddings`.
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct EmbeddingRequest {
    /// An embedding pipeline.
    model: String,
    /// A text or a list of up to 256 texts.
    input: Value,
    /// `float` (default) or `base64`.
    encoding_format: Option<String>,
}

/// Triton's model configuration (`GET /v2/models/{model}/config`), and the configuration a
/// model version is stored with (`PUT /api/models/{model}/config`): a JSON object in Triton's
/// `ModelConfig` form.
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct ModelConfig(BTreeMap<String, Value>);

/// A model's traffic policy between its versions (`PUT /api/models/{model}/traffic`); every
/// field may be absent.
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct TrafficPolicy {
    /// Versions and their weights; absent: the model's version policy picks the version.
    split: Option<Vec<TrafficSplit>>,
    /// What keeps one caller on one version: `key` (the caller's API key) or `header:NAME`
    /// (that request header's value); absent: every request is drawn anew.
    sticky: Option<String>,
    /// A share of requests copied to another version, whose answers are dropped.
    mirror: Option<TrafficMirror>,
}

/// One version's share of a split.
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct TrafficSplit {
    version: u64,
    /// A positive integer weight (1 to 1000000), relative to the other entries'.
    weight: u32,
}

/// A mirror: `percent` of the requests are copied to `version`.
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct TrafficMirror {
    version: u64,
    /// 0 to 100; fractions allowed, down to 0.0001.
    percent: f64,
}

/// The answer of every traffic route: the model and its policy (`null`: none, the version
/// policy chooses).
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct TrafficView {
    model: String,
    policy: Option<TrafficPolicy>,
    /// What each version served this replica since it started, mirrored copies apart.
    figures: crate::traffic::TrafficFigures,
}

/// Whether the requests of a model, a pipeline or a key are logged (`PUT
/// /api/models/{model}/payload-log`, `/api/pipelines/{pipeline}/payload-log`,
/// `/api/keys/{id}/payload-log`).
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct PayloadLogSetting {
    /// `request`, `response` or `all`: what an entry holds.
    mode: String,
    /// The share of requests logged, 0 to 1 (default 1).
    sample: Option<f64>,
    /// A sink the server defines (`[payload_log.sinks]`, or one an admin defined since).
    sink: String,
}

/// The answer of a model's or pipeline's payload-log route: the model or the pipeline, its
/// setting (`null`: not logged) and the sinks the server defines.
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct PayloadLogView {
    /// The model (model routes).
    model: Option<String>,
    /// The pipeline (pipeline routes).
    pipeline: Option<String>,
    payload_log: Option<PayloadLogSetting>,
    sinks: Vec<String>,
}

/// A JSON Lines file (mode 0600), rotated by size (`[payload_log.sinks.NAME] file`).
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct PayloadLogFileSink {
    path: String,
    /// Bytes the current file grows to before it is rotated (default 64 MiB, at least 4096).
    max_bytes: Option<u64>,
    /// Rotated files kept beside the current one (default 5).
    keep: Option<u32>,
    /// Entries waiting to be written; past it entries are dropped and counted (default 10000).
    queue: Option<usize>,
}

/// An HTTP endpoint receiving CloudEvents batches (`[payload_log.sinks.NAME] http`).
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct PayloadLogHttpSink {
    /// `http://` or `https://` (with `ca`).
    url: String,
    /// A PEM file of the certificates that sign the endpoint's (https only).
    ca: Option<String>,
    /// Entries per POST at most (default 100).
    batch: Option<usize>,
    /// Entries waiting to be sent (default 10000).
    queue: Option<usize>,
    /// Milliseconds one POST may take (default 5000).
    timeout_ms: Option<u64>,
    /// Attempts after the first (default 3).
    retries: Option<u32>,
}

/// A payload log sink: exactly one of `file` and `http`.
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct PayloadLogSinkBody {
    file: Option<PayloadLogFileSink>,
    http: Option<PayloadLogHttpSink>,
}

/// A payload log sink as the sink routes show it.
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct PayloadLogSink {
    name: String,
    /// `file` or `http`.
    kind: String,
    /// The file's path or the endpoint's URL.
    target: String,
    /// `config` (the configuration file) or `api` (defined at run time, in this process).
    origin: String,
    /// The sink as `PUT` takes it.
    config: PayloadLogSinkBody,
    /// Entries the sink took.
    written: u64,
    /// Entries dropped because its queue was full.
    dropped: u64,
    /// Entries lost to its errors.
    failed: u64,
}

/// `GET /api/payload-log/sinks`.
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct PayloadLogSinks {
    sinks: Vec<PayloadLogSink>,
}

/// `DELETE /api/payload-log/sinks/{name}`.
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct PayloadLogSinkDeleted {
    deleted: String,
}

/// One chat guardrail attached to a model or a key (`PUT /api/models/{model}/guardrails`,
/// `PUT /api/keys/{id}/guardrails`).
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct GuardrailAttachment {
    /// An uploaded guardrail: a plugin name (its newest upload) or `name@version`.
    plugin: String,
    /// Handed to the guardrail as JSON text in its `config` metadata (blocked-terms:
    /// `{"terms": [...], "action": "refuse" | "mask"}`); absent: `{}`.
    config: Option<BTreeMap<String, Value>>,
}

/// A model's or a key's own chat guardrails, in the order they run (a key's after the server's
/// `[guardrails]`, a model's after the key's).
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct GuardrailsBody {
    guardrails: Vec<GuardrailAttachment>,
}

/// The answer of every guardrails route: the model and its own guardrails (empty: none).
#[derive(serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct GuardrailsView {
    model: String,
    guardrails: Vec<GuardrailAttachment>,
}
