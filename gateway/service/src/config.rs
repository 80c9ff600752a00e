//! Configuration: defaults, overridden by a TOML file, overridden by environment variables,
//! overridden by command-line flags (clap reads flags and `INFERGATE_*` variables together,
//! flags first).
//!
//! The configuration reference (`infergate reference config`, the book's configuration page)
//! is generated from these types' JSON Schema (`schemars`): each field's name as serde reads
//! it, its doc comment and its default. So a field's doc comment is written for the operator
//! who sets it, and a default that depends on the machine is described with
//! `#[schemars(extend("x-default" = "..."))]` rather than printed.

use crate::cors::CorsConfig;
use infergate_engine::kernels::DeviceChoice;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address of the HTTPS listener (HTTP/1.1 and HTTP/2).
    pub listen: SocketAddr,
    /// Data directory: the SQLite database, model and plugin files, TLS material, the admin
    /// key.
    pub data_dir: PathBuf,
    /// Path of `libonnxruntime.so` (setup installs 1.31.1 from PyPI).
    #[schemars(extend("x-default" = "`$ORT_DYLIB_PATH`"))]
    pub ort_lib: Option<PathBuf>,
    /// Serve plain HTTP instead of TLS (development only; logs a warning).
    pub insecure_http: bool,
    pub tls: TlsConfig,
    pub limits: Limits,
    pub engine: EngineSettings,
    pub plugins: PluginSettings,
    /// Log format: `text` or `json`. Text is coloured only when standard error is a terminal
    /// and `NO_COLOR` is unset; the level comes from `INFERGATE_LOG`.
    pub log_format: String,
    /// A directory of the dashboard's built files to serve at `/` instead of the copy
    /// embedded in the binary.
    #[schemars(extend("x-default" = "the copy embedded in the binary"))]
    pub dashboard_dir: Option<PathBuf>,
    pub cors: CorsConfig,
    pub metrics: MetricsConfig,
    pub openai: OpenAiConfig,
    pub websocket: WebSocketConfig,
    pub grpc: GrpcConfig,
    pub llm: infergate_llm::LlmConfig,
    pub cluster: ClusterConfig,
    pub store: infergate_store::StoreConfig,
    /// Callers without a key: anonymous access and the proxies trusted to name a client.
    pub auth: crate::anonymous::AuthConfig,
    /// Triton's system shared-memory extension (tensors in the client's shared memory).
    pub shared_memory: SharedMemoryConfig,
    /// The response cache shared by the models whose config enables it.
    pub cache: CacheConfig,
    /// Where models may log their requests and answers (see the book's "Payload logs").
    pub payload_log: crate::payload_log::config::PayloadLogConfig,
    /// OpenTelemetry traces exported over OTLP (see the book's "Tracing").
    pub tracing: TracingConfig,
    /// Chat guardrails on every chat model (see the book's "Guardrails").
    pub guardrails: GuardrailsConfig,
    /// Threads of the async runtime: connections, TLS, HTTP, request decode and encode; 0 =
    /// the default.
    #[schemars(extend(
        "x-default" = "half the cores, rounded up (2 cores: 1); every core without a local engine"
    ))]
    pub async_threads: Option<usize>,
}

/// KServe v2 over gRPC (Triton's `GRPCInferenceService`) on its own port, with the same TLS,
/// keys and limits as HTTP.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct GrpcConfig {
    /// Serve KServe v2 over gRPC.
    pub enabled: bool,
    /// Address of the gRPC listener (TLS like `listen`).
    pub listen: SocketAddr,
}

impl Default for GrpcConfig {
    fn default() -> Self {
        GrpcConfig {
            enabled: true,
            listen: SocketAddr::from(([127, 0, 0, 1], 8444)),
        }
    }
}

/// `[shared_memory]`: Triton's system shared-memory extension. Shared memory only works on the
/// caller's own host, so it is offered to loopback callers only (a caller elsewhere is told
/// so); regions belong to the caller that registered them.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SharedMemoryConfig {
    /// Serve Triton's system shared-memory extension (to loopback callers).
    pub enabled: bool,
    /// Only POSIX shared-memory objects whose key starts with this prefix may be registered
    /// (never another program's segments, never a path). tritonclient's examples use keys such
    /// as `/input_simple`: a prefix of `/` followed by a word lets a deployment choose.
    pub key_prefix: String,
    /// Regions one caller may hold at once (each keeps a file descriptor open).
    pub max_regions_per_caller: usize,
}

impl Default for SharedMemoryConfig {
    fn default() -> Self {
        SharedMemoryConfig {
            enabled: true,
            key_prefix: "/".into(),
            max_regions_per_caller: 64,
        }
    }
}

/// Workers on other hosts: how the manager watches them and sends them requests (see the
/// book's "Manager and workers").
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// Run requests on this server's own engine too (one more worker); `false`: route every
    /// request to workers.
    pub local_engine: bool,
    /// How often workers report, in milliseconds.
    pub heartbeat_ms: u64,
    /// Reports a worker may miss before it is lost (out of routing).
    pub missed_heartbeats: NonZeroU32,
    /// Seconds the manager waits for a worker's answer to one request.
    pub request_timeout_s: u64,
    /// A TCP connect, then the TLS and HTTP handshakes, to a worker (inference and loads).
    pub connect_timeout_ms: u64,
    /// The hop's own deadline: a connection to a worker whose peer acknowledges nothing (data
    /// sent, or keepalive probes while it waits for an answer) for this long fails, and its
    /// request is tried on another worker. A slow model is not silent: it is waited for.
    pub link_timeout_ms: u64,
    /// A unary request outside a sequence whose worker failed or was lost after the request
    /// reached it is run again on another worker (it may then have run on both). Off: only
    /// requests that never reached a worker are tried again; the others fail with 503.
    pub retry_in_flight: bool,
    /// When a model's least loaded copy would keep a new request waiting longer than this
    /// (milliseconds), one more worker loads it.
    pub scale_out_queue_delay_ms: u64,
    /// Where a pipeline's native ops (resize/normalize) run when its model stage goes to a
    /// worker.
    pub pipeline_ops: PipelineOps,
}

impl ClusterConfig {
    /// The hop's connect timeout and silence deadline.
    pub fn link(&self) -> infergate_hop::link::LinkSettings {
        infergate_hop::link::LinkSettings {
            connect_timeout: std::time::Duration::from_millis(self.connect_timeout_ms),
            silence: std::time::Duration::from_millis(self.link_timeout_ms),
        }
    }

    fn validate(&self) -> Result<(), String> {
        if self.connect_timeout_ms == 0 {
            return Err("[cluster] connect_timeout_ms must be at least 1".into());
        }
        if self.link_timeout_ms < 1000 {
            return Err(format!(
                "[cluster] link_timeout_ms must be at least 1000 (the kernel counts keepalive in seconds), not {}",
                self.link_timeout_ms
            ));
        }
        Ok(())
    }
}

/// Where a pipeline's native ops run when its model runs on a worker.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum PipelineOps {
    /// On the worker, next to the model and its GPU: the manager sends the smaller pre-op
    /// tensors.
    #[default]
    Worker,
    /// On the manager: it sends the model's input tensors.
    Manager,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            local_engine: true,
            heartbeat_ms: 2000,
            missed_heartbeats: const { NonZeroU32::new(3).expect("not zero") },
            request_timeout_s: 60,
            connect_timeout_ms: 3000,
            link_timeout_ms: 10_000,
            retry_in_flight: true,
            scale_out_queue_delay_ms: 50,
            pipeline_ops: PipelineOps::Worker,
        }
    }
}

/// `[tracing]`: the request spans exported as OpenTelemetry traces, continuing the caller's W3C
/// `traceparent`.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TracingConfig {
    /// Where spans are sent: with `http/protobuf` an OTLP/HTTP collector's traces URL (plain
    /// HTTP), such as `http://127.0.0.1:4318/v1/traces`; with `grpc` the collector's gRPC address,
    /// such as `http://127.0.0.1:4317` (`https://` verifies the collector's certificate against
    /// the system's roots, or the PEM file `SSL_CERT_FILE` names). Absent: no traces are
    /// exported, and requests cost what they cost without tracing.
    pub otlp_endpoint: Option<String>,
    /// How spans reach the collector: `http/protobuf` or `grpc`, as the OpenTelemetry variable
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` names them.
    pub otlp_protocol: OtlpProtocol,
    /// The `service.name` of the exported spans.
    pub service_name: String,
    /// The share of traces recorded (0.0 to 1.0), decided from the trace id, so every process
    /// of a trace decides alike. A span inside a recorded trace is recorded; a caller's
    /// sampled flag decides only when `honour_caller_sampling` trusts the caller. A
    /// `trace_rate` set through Triton's trace extension is kept in the store and wins over it
    /// until cleared.
    pub sample_ratio: f64,
    /// Whose `traceparent` sampled flag is followed: `keyed` (requests that present an API
    /// key), `all` or `none`. An anonymous caller's flag is followed only with `all`; the
    /// others keep the caller's trace id and are sampled by `sample_ratio`.
    pub honour_caller_sampling: CallerSampling,
    /// Spans waiting to be sent, at most; past it new spans are dropped rather than making
    /// requests wait for the collector.
    pub max_queued_spans: NonZeroUsize,
}

/// The OTLP protocol spans are exported with.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    Deserialize,
    Serialize,
    clap::ValueEnum,
    schemars::JsonSchema,
)]
pub enum OtlpProtocol {
    /// Protobuf bodies POSTed to the traces URL (OTLP/HTTP, port 4318).
    #[default]
    #[serde(rename = "http/protobuf")]
    #[value(name = "http/protobuf")]
    HttpProtobuf,
    /// The collector's gRPC `TraceService` (port 4317).
    #[serde(rename = "grpc")]
    #[value(name = "grpc")]
    Grpc,
}

impl OtlpProtocol {
    /// Whether `url` is an endpoint this protocol can reach: the OTLP/HTTP client has no
    /// certificate roots (plain HTTP to a collector nearby); the gRPC one verifies `https://`.
    pub fn check_endpoint(self, url: &str) -> Result<(), String> {
        match self {
            OtlpProtocol::HttpProtobuf if url.starts_with("http://") => Ok(()),
            OtlpProtocol::HttpProtobuf => Err(format!(
                "must be an http:// URL with the http/protobuf protocol, not '{url}'"
            )),
            OtlpProtocol::Grpc if url.starts_with("http://") || url.starts_with("https://") => {
                Ok(())
            }
            OtlpProtocol::Grpc => Err(format!(
                "must be an http:// or https:// URL with the grpc protocol, not '{url}'"
            )),
        }
    }
}

/// Whose sampled flag in `traceparent` decides whether a trace is recorded.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum CallerSampling {
    /// Requests that present an API key (never anonymous ones).
    #[default]
    Keyed,
    /// Every caller, anonymous ones included (a caller behind the operator's own proxy).
    All,
    /// Nobody: `sample_ratio` alone decides.
    None,
}

impl CallerSampling {
    /// Whether a caller's sampled flag decides, for a request that presents a key or not.
    /// Whether the key is valid is known only after admission, inside the request's span; a
    /// request with a wrong key is refused at once, so its trace stays short.
    pub fn trusts(self, presents_key: bool) -> bool {
        match self {
            CallerSampling::All => true,
            CallerSampling::None => false,
            CallerSampling::Keyed => presents_key,
        }
    }
}

impl Default for TracingConfig {
    fn default() -> Self {
        TracingConfig {
            otlp_endpoint: None,
            otlp_protocol: OtlpProtocol::HttpProtobuf,
            service_name: "infergate".into(),
            sample_ratio: 0.01,
            honour_caller_sampling: CallerSampling::Keyed,
            max_queued_spans: const { NonZeroUsize::new(2048).expect("not zero") },
        }
    }
}

impl TracingConfig {
    fn validate(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            return Err(format!(
                "[tracing] sample_ratio must be between 0.0 and 1.0, not {}",
                self.sample_ratio
            ));
        }
        if let Some(url) = &self.otlp_endpoint {
            self.otlp_protocol
                .check_endpoint(url)
                .map_err(|e| format!("[tracing] otlp_endpoint {e}"))?;
        }
        Ok(())
    }
}

/// Prometheus metrics. `/metrics` on the main listener needs an admin-scoped key.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// An extra plain-HTTP listener that serves only `/metrics`, without a key (bind it to a
    /// private address).
    pub listen: Option<SocketAddr>,
}

/// The OpenAI-compatible API: the default model and the character model's vocabulary.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct OpenAiConfig {
    /// The model of `/v1/completions` and `/v1/chat/completions` requests that name none,
    /// listed first in `/v1/models`.
    pub completions_model: String,
    /// Registered name of the character-level LSTM (textgenrnn), served when `vocab` is set.
    pub textgen_model: String,
    /// The character model's vocabulary (`textgen-vocab.json`, format
    /// `infergate-textgen-vocab/1`); without it that model answers 503.
    pub vocab: Option<PathBuf>,
    /// Largest `max_tokens` a request may ask for.
    pub max_tokens_limit: u32,
    /// Streamed tokens produced within this many microseconds of the last write are sent
    /// together; 0 writes every token on its own.
    pub stream_coalesce_us: u64,
}

/// WebSocket streaming (`/v2/stream`); `max_in_flight` also bounds each gRPC stream.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct WebSocketConfig {
    /// Requests in flight per connection; further messages wait (backpressure).
    pub max_in_flight: NonZeroUsize,
    /// Seconds with nothing in flight and no message from the client before the server closes
    /// (4408).
    pub idle_timeout_s: u64,
    /// Seconds between server pings.
    pub ping_interval_s: u64,
    /// Largest message or frame in bytes (the connection is closed with 1009 beyond).
    pub max_message_bytes: usize,
    /// Frames produced within this many microseconds of the last write are sent together
    /// (tokens of a generation); 0 writes every frame on its own.
    pub coalesce_us: u64,
}

/// Streamed tokens made within this many µs of the last write go out together. 10 ms is below
/// one frame of a 60 Hz display, so a reader sees no difference, while a fast model's writes,
/// TLS records and client wake-ups drop to one per 10 ms, which keeps SSE close to the
/// in-process generation speed (`cargo bench -p infergate --bench streaming`).
pub const DEFAULT_COALESCE_US: u64 = 10_000;

impl Default for OpenAiConfig {
    fn default() -> Self {
        OpenAiConfig {
            completions_model: "smollm2".into(),
            textgen_model: "textgen".into(),
            vocab: None,
            max_tokens_limit: 4096,
            stream_coalesce_us: DEFAULT_COALESCE_US,
        }
    }
}

impl Default for WebSocketConfig {
    fn default() -> Self {
        WebSocketConfig {
            max_in_flight: const { NonZeroUsize::new(16).expect("not zero") },
            idle_timeout_s: 300,
            ping_interval_s: 30,
            max_message_bytes: 16 << 20,
            coalesce_us: DEFAULT_COALESCE_US,
        }
    }
}

/// TLS of the HTTPS and gRPC listeners.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// PEM certificate chain, with `key`. Without both, a certificate for `localhost`,
    /// `127.0.0.1` and `::1` is generated into `DATA/tls/` on the first start.
    #[schemars(extend("x-default" = "self-signed"))]
    pub cert: Option<PathBuf>,
    /// PEM private key of `cert`.
    pub key: Option<PathBuf>,
    /// PEM CA bundle: clients must present a certificate it signed (mutual TLS; others fail
    /// the handshake).
    pub client_ca: Option<PathBuf>,
}

/// What one client may cost the server: sizes, connections and the deadline of every phase of
/// a connection (the per-phase timeouts Envoy, nginx and Pingora give their operators), and
/// the per-key limits of keys without their own. Every listener (HTTPS and gRPC) applies all
/// of them.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest inference request body, in bytes (413 beyond; a gRPC message:
    /// `RESOURCE_EXHAUSTED`).
    pub max_request_bytes: usize,
    /// Largest model upload, in bytes (413 beyond).
    pub max_upload_bytes: usize,
    /// Concurrent connections, WebSockets included; more wait in the kernel's accept queue.
    pub max_connections: NonZeroUsize,
    /// Connections from one IP address that have not yet presented a valid API key (in the TLS
    /// handshake, before their first request, or having sent only unauthenticated ones); more
    /// are closed at accept, so that one address cannot take the whole `max_connections`.
    /// 0: no per-address cap.
    pub max_unauthenticated_connections_per_ip: usize,
    /// Seconds allowed for the TLS handshake.
    pub handshake_timeout_s: u64,
    /// Seconds from the end of the handshake until the first request's headers are complete
    /// (protocol detection and first byte included), for the headers of each later HTTP/1
    /// request, and the idle limit of a keep-alive connection that has not presented a valid
    /// key (HTTP/1 keep-alive connections always: hyper starts the header timer when it waits
    /// for the next request).
    pub header_timeout_s: u64,
    /// Seconds an HTTP/2 connection that has presented a valid key stays open with no request
    /// in flight (then GOAWAY); also its keep-alive ping interval.
    pub idle_timeout_s: u64,
    /// Seconds a request body may go without a byte arriving, and the grace period before
    /// `body_min_rate_bytes_per_s` applies; beyond either, 408.
    pub body_timeout_s: u64,
    /// Slowest average rate, in bytes per second, a request body may arrive at once its first
    /// `body_timeout_s` have passed (408 below it); 0: no minimum.
    pub body_min_rate_bytes_per_s: u64,
    /// Seconds a write to a client may make no progress (a client that stopped reading) before
    /// the connection is closed.
    pub send_timeout_s: u64,
    /// Largest request line target (URI), in bytes (414 beyond).
    pub max_uri_bytes: usize,
    /// Largest total size of a request's header fields, in bytes (431 beyond).
    pub max_header_bytes: usize,
    /// Most header fields in one request (431 beyond).
    pub max_headers: usize,
    /// On SIGTERM or SIGINT: readiness off, no new connections, and in-flight requests and
    /// streams get this many seconds to finish (WebSockets are closed with 1001); then exit 0.
    pub shutdown_grace_s: u64,
    /// Seconds after a shutdown signal that an idle HTTP/1 keep-alive connection stays open, so
    /// that a request a client is already sending on it is answered (with `Connection: close`)
    /// rather than cut off; HTTP/2 connections get a GOAWAY at once. At most `shutdown_grace_s`.
    pub shutdown_keepalive_s: u64,
    /// Rate limit (requests per second, GCRA) of keys without their own.
    #[schemars(extend("x-default" = "unlimited"))]
    pub default_rps: Option<f64>,
    /// Burst of `default_rps` (needs `default_rps`).
    #[schemars(extend("x-default" = "the rate rounded up"))]
    pub default_burst: Option<u32>,
    /// Requests in flight per key, for keys without their own cap.
    #[schemars(extend("x-default" = "unlimited"))]
    pub default_max_concurrent: Option<NonZeroU32>,
    /// Rate limit of anonymous callers (`[auth] anonymous_scopes`), requests per second per
    /// client address.
    #[schemars(extend("x-default" = "default_rps"))]
    pub anonymous_rps: Option<f64>,
    /// Burst of `anonymous_rps` (needs `anonymous_rps`).
    #[schemars(extend("x-default" = "the rate rounded up"))]
    pub anonymous_burst: Option<u32>,
    /// Requests in flight per anonymous client address.
    #[schemars(extend("x-default" = "default_max_concurrent"))]
    pub anonymous_max_concurrent: Option<NonZeroU32>,
    /// Redis URL (`redis://host:port/db`, `rediss://` with TLS) holding the per-key rate limits
    /// that every gateway replica shares.
    #[schemars(extend("x-default" = "limits per process"))]
    pub shared_url: Option<String>,
    /// What a request meets while the shared limiter (Redis) cannot answer.
    pub shared_failure: SharedFailure,
    /// Tokens per minute for keys without their own (LLM requests; absent = unlimited).
    pub default_tokens_per_minute: Option<u64>,
    /// Token budget for keys without their own: `{ tokens = N, period = "day" | "month" }`
    /// (absent = unlimited).
    pub default_token_budget: Option<infergate_traffic::tokens::TokenBudget>,
}

/// `[cache]`: the response cache (`"response_cache": {"enable": true}` in a model's config).
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    /// Bytes the cached answers of every model may take together, counted in
    /// `[engine] host_memory_budget_bytes`; 0 (the default): no response cache.
    pub bytes: u64,
}

/// `[guardrails]`: chat guardrails (uploaded plugins of the guardrail world) that every chat
/// model's requests pass, before a key's own (`PUT /api/keys/{id}/guardrails`) and a model's
/// own (`PUT /api/models/{model}/guardrails`).
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct GuardrailsConfig {
    /// The guardrails, in the order they run: `[[guardrails.chat]]` tables with `plugin`
    /// (`name` for its newest upload, or `name@version`) and an optional `config` table the
    /// guardrail reads (blocked-terms: `config = { terms = ["..."] }`). A guardrail named here
    /// that is not uploaded fails chat requests (503) rather than letting them pass unchecked.
    pub chat: Vec<crate::guardrail_attachment::Attachment>,
    /// Bytes of a streamed answer a guardrail may hold back while it waits for more text
    /// (what may still become a match, such as half an e-mail address). At this many, it must
    /// decide on all of them.
    pub look_behind_bytes: usize,
}

impl Default for GuardrailsConfig {
    fn default() -> Self {
        GuardrailsConfig {
            chat: Vec::new(),
            look_behind_bytes: 512,
        }
    }
}

/// What a request meets while the shared limiter (Redis) cannot answer.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Deserialize,
    Serialize,
    clap::ValueEnum,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum SharedFailure {
    /// Admit under this replica's own limiter (each replica then allows the full rate).
    #[default]
    Open,
    /// Refuse with 503 until Redis answers again.
    Closed,
}

/// The engine that runs ONNX models (see the book's "Sizing").
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct EngineSettings {
    /// ONNX Runtime threads inside one operator, per instance; 0 = the default.
    #[schemars(extend(
        "x-default" = "from the cores: instances × threads ≈ cores, at most 4 threads per instance"
    ))]
    pub intra_threads: Option<usize>,
    /// Execution instances per model version whose configuration names no `instance_group`;
    /// 0 = the default.
    #[schemars(extend(
        "x-default" = "from the cores: ceil(cores / 4), at least 2 for a version that does not batch on 2 cores or more"
    ))]
    pub instances: Option<usize>,
    /// Queued requests per model version before 503 (unless its config sets one).
    pub max_queue_size: NonZeroUsize,
    /// Where native ops (resize/normalize, softmax, NMS) run: `auto` (CUDA when a driver, a
    /// GPU and NVRTC are present, else the CPU, with the reason logged), `cpu`, or `cuda:N`;
    /// reported by `GET /v2`.
    pub device: Device,
    /// Host memory all loaded model instances together may use, in bytes (estimated as the
    /// model file's size × 2 per instance); loading beyond it is refused with 503.
    #[schemars(extend("x-default" = "no cap"))]
    pub host_memory_budget_bytes: Option<u64>,
    /// Microseconds an instance that ran out of work spins for the next request before it
    /// sleeps, while requests keep coming that fast (token-by-token generation) and its model
    /// would run a lone request at once (not while it batches with a queue delay); 0: never.
    pub idle_spin_us: u64,
    /// Whether ONNX Runtime's intra-op threads spin for work between operators (ORT's own
    /// default) rather than sleep at once (ours: spinning burnt more CPU than it saved).
    pub ort_spinning: bool,
}

/// Limits every plugin upload and call runs under (see the book's "Writing plugins").
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PluginSettings {
    /// Largest plugin upload, in bytes (413 beyond).
    pub max_upload_bytes: usize,
    /// Wall-clock deadline of one plugin call, in milliseconds.
    pub deadline_ms: u64,
    /// Linear memory one plugin instance may grow to, in MiB. Where a process limit
    /// (`ulimit -v`) refuses the pool's address-space reservation, the server logs a warning
    /// and maps each instance's memory on demand instead.
    pub memory_mib: usize,
    /// Largest output one call may return, in MiB.
    pub max_output_mib: usize,
    /// Uploads compiled (Cranelift) at once; each compile uses every core and, for a large
    /// component, hundreds of MB. More wait for a slot.
    pub max_concurrent_compiles: NonZeroUsize,
    /// Seconds an upload waits for a compile slot before it is answered 503 with Retry-After.
    pub compile_wait_s: u64,
}

impl Default for PluginSettings {
    fn default() -> Self {
        PluginSettings {
            max_upload_bytes: 32 << 20,
            deadline_ms: 2000,
            memory_mib: 256,
            max_output_mib: 64,
            max_concurrent_compiles: const { NonZeroUsize::new(2).expect("not zero") },
            compile_wait_s: 30,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8443)),
            data_dir: PathBuf::from("./data"),
            ort_lib: None,
            insecure_http: false,
            tls: TlsConfig::default(),
            limits: Limits::default(),
            engine: EngineSettings::default(),
            plugins: PluginSettings::default(),
            log_format: "text".into(),
            dashboard_dir: None,
            cors: CorsConfig::default(),
            metrics: MetricsConfig::default(),
            openai: OpenAiConfig::default(),
            websocket: WebSocketConfig::default(),
            grpc: GrpcConfig::default(),
            llm: infergate_llm::LlmConfig::default(),
            cluster: ClusterConfig::default(),
            store: infergate_store::StoreConfig::default(),
            auth: crate::anonymous::AuthConfig::default(),
            shared_memory: SharedMemoryConfig::default(),
            cache: CacheConfig::default(),
            payload_log: Default::default(),
            tracing: TracingConfig::default(),
            guardrails: GuardrailsConfig::default(),
            async_threads: None,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_bytes: 64 << 20,
            max_upload_bytes: 1 << 30,
            max_connections: const { NonZeroUsize::new(4096).expect("not zero") },
            max_unauthenticated_connections_per_ip: 256,
            handshake_timeout_s: 10,
            header_timeout_s: 10,
            idle_timeout_s: 120,
            body_timeout_s: 20,
            body_min_rate_bytes_per_s: 1024,
            send_timeout_s: 30,
            max_uri_bytes: 8 << 10,
            max_header_bytes: 64 << 10,
            max_headers: 100,
            shutdown_grace_s: 30,
            shutdown_keepalive_s: 2,
            default_rps: None,
            default_burst: None,
            default_max_concurrent: None,
            anonymous_rps: None,
            anonymous_burst: None,
            anonymous_max_concurrent: None,
            shared_url: None,
            shared_failure: SharedFailure::Open,
            default_tokens_per_minute: None,
            default_token_budget: None,
        }
    }
}

impl Default for EngineSettings {
    fn default() -> Self {
        EngineSettings {
            intra_threads: None,
            instances: None,
            max_queue_size: const { NonZeroUsize::new(1024).expect("not zero") },
            host_memory_budget_bytes: None,
            idle_spin_us: infergate_engine::engine::EngineConfig::DEFAULT_IDLE_SPIN.as_micros()
                as u64,
            ort_spinning: false,
            device: Device(DeviceChoice::Auto),
        }
    }
}

/// Where native ops run, parsed once where it is read (file, flag or environment):
/// `auto`, `cpu` or `cuda:N`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Device(pub DeviceChoice);

impl schemars::JsonSchema for Device {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Device".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "string", "pattern": "^(auto|cpu|cuda:[0-9]+)$"})
    }
}

impl std::str::FromStr for Device {
    type Err = String;

    fn from_str(text: &str) -> Result<Device, String> {
        match text {
            "auto" => Ok(Device(DeviceChoice::Auto)),
            "cpu" => Ok(Device(DeviceChoice::Cpu)),
            _ => text
                .strip_prefix("cuda:")
                .and_then(|n| n.parse::<usize>().ok())
                .map(|n| Device(DeviceChoice::Cuda(n)))
                .ok_or_else(|| format!("device must be auto, cpu or cuda:N, not '{text}'")),
        }
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            DeviceChoice::Auto => f.write_str("auto"),
            DeviceChoice::Cpu => f.write_str("cpu"),
            DeviceChoice::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl<'de> Deserialize<'de> for Device {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Device, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl serde::Serialize for Device {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl Config {
    /// Threads of the async runtime: `async_threads`, or sized from the cores
    /// (`infergate_engine::sizing::async_threads`).
    pub fn async_threads(&self) -> usize {
        infergate_engine::sizing::async_threads(
            infergate_engine::sizing::available_cores(),
            self.async_threads,
            self.cluster.local_engine,
        )
    }

    /// Checks what serde cannot: the default rate limit, the CORS rules, anonymous access.
    pub fn validate(&self) -> Result<(), String> {
        self.default_key_limits()?;
        self.anonymous_access()?;
        crate::anonymous::TrustedProxies::new(&self.auth)?;
        if self.shared_memory.enabled {
            infergate_shm::SharedMemory::new(&self.shared_memory.key_prefix, Default::default())
                .map_err(|e| format!("[shared_memory] key_prefix: {e}"))?;
        }
        self.default_token_limits()
            .validate()
            .map_err(|e| format!("[limits] default_{e}"))?;
        if let Some(budget) = self.engine.host_memory_budget_bytes {
            if self.cache.bytes >= budget {
                return Err(format!(
                    "[cache] bytes ({}) must be less than [engine] host_memory_budget_bytes ({budget}): the cache is counted in it",
                    self.cache.bytes
                ));
            }
        }
        self.cors.origins()?;
        self.llm.validate().map_err(|e| format!("[llm] {e}"))?;
        self.cluster.validate()?;
        self.tracing.validate()?;
        self.payload_log.validate()?;
        let attached = serde_json::to_value(&self.guardrails.chat).map_err(|e| e.to_string())?;
        crate::guardrail_attachment::Attachment::list(attached)
            .map_err(|e| format!("[guardrails] chat: {e}"))?;
        if self.guardrails.look_behind_bytes == 0 {
            return Err("[guardrails] look_behind_bytes: must be at least 1".into());
        }
        Ok(())
    }

    /// The limits of keys that have none of their own.
    pub fn default_key_limits(&self) -> Result<infergate_limits::Limits, String> {
        let rate = match self.limits.default_rps {
            Some(rps) => Some(
                infergate_limits::RateLimit::new(rps, self.limits.default_burst)
                    .map_err(|e| format!("[limits] default_rps/default_burst: {e}"))?,
            ),
            None if self.limits.default_burst.is_some() => {
                return Err("[limits] default_burst needs default_rps".into())
            }
            None => None,
        };
        Ok(infergate_limits::Limits {
            rate,
            max_concurrent: self.limits.default_max_concurrent.map(NonZeroU32::get),
        })
    }

    /// What anonymous callers get (`[auth]`), with their limits per client address: the
    /// `anonymous_*` limits, each absent one the keys' default. `None`: anonymous access is off.
    pub fn anonymous_access(&self) -> Result<Option<crate::anonymous::AnonymousAccess>, String> {
        let defaults = self.default_key_limits()?;
        let rate = match self.limits.anonymous_rps {
            Some(rps) => Some(
                infergate_limits::RateLimit::new(rps, self.limits.anonymous_burst)
                    .map_err(|e| format!("[limits] anonymous_rps/anonymous_burst: {e}"))?,
            ),
            None if self.limits.anonymous_burst.is_some() => {
                return Err("[limits] anonymous_burst needs anonymous_rps".into())
            }
            None => defaults.rate,
        };
        let limits = infergate_limits::Limits {
            rate,
            max_concurrent: self
                .limits
                .anonymous_max_concurrent
                .map(NonZeroU32::get)
                .or(defaults.max_concurrent),
        };
        crate::anonymous::AnonymousAccess::new(&self.auth, limits)
    }

    /// The token limits of keys that have none of their own.
    pub fn default_token_limits(&self) -> infergate_traffic::tokens::TokenLimits {
        infergate_traffic::tokens::TokenLimits {
            tokens_per_minute: self.limits.default_tokens_per_minute,
            token_budget: self.limits.default_token_budget,
        }
    }

    /// The host memory budget left to models once the response cache has its share.
    pub fn model_memory_budget(&self) -> Option<u64> {
        self.engine
            .host_memory_budget_bytes
            .map(|b| b.saturating_sub(self.cache.bytes))
    }

    /// Reads a TOML file over the defaults.
    pub fn from_file(path: &Path) -> Result<Config, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading config {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| format!("config {}: {e}", path.display()))
    }

    /// The ONNX Runtime library: configured path, else `ORT_DYLIB_PATH`.
    pub fn ort_library(&self) -> Result<PathBuf, String> {
        self.ort_lib
            .clone()
            .or_else(|| std::env::var_os("ORT_DYLIB_PATH").map(PathBuf::from))
            .ok_or_else(|| "no ONNX Runtime library: pass --ort-lib or set ORT_DYLIB_PATH (scripts/setup.sh installs one)".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_overrides_defaults_and_rejects_unknown_keys() {
        let c: Config =
            toml::from_str("listen = \"0.0.0.0:9000\"\n[limits]\nmax_request_bytes = 10\n")
                .unwrap();
        assert_eq!(c.listen.port(), 9000);
        assert_eq!(c.limits.max_request_bytes, 10);
        assert_eq!(c.limits.max_connections.get(), 4096);
        assert!(toml::from_str::<Config>("lisen = \"x\"").is_err());
    }

    #[test]
    fn the_books_example_parses_and_validates() {
        let readme = include_str!("../../../docs/src/reference/configuration.md");
        let start = readme.find("```toml\n").expect("a TOML example") + 8;
        let len = readme[start..].find("```").expect("its end");
        let c: Config = toml::from_str(&readme[start..start + len]).unwrap();
        c.validate().unwrap();
        assert_eq!(c.limits.default_rps, Some(100.0));
        assert_eq!(c.cors.allowed_origins, ["https://dashboard.example.com"]);
    }

    #[test]
    fn devices_parse_and_print_back() {
        let parse = |t: &str| t.parse::<Device>().map(|d| d.0);
        assert_eq!(parse("auto").unwrap(), DeviceChoice::Auto);
        assert_eq!(parse("cpu").unwrap(), DeviceChoice::Cpu);
        assert_eq!(parse("cuda:1").unwrap(), DeviceChoice::Cuda(1));
        assert!(parse("gpu").unwrap_err().contains("cuda:N"));
        assert!(parse("cuda:x").is_err());
        for text in ["auto", "cpu", "cuda:3"] {
            assert_eq!(text.parse::<Device>().unwrap().to_string(), text);
        }
        let file: EngineSettings = toml::from_str("device = \"cuda:0\"").unwrap();
        assert_eq!(file.device.0, DeviceChoice::Cuda(0));
        let refused = toml::from_str::<EngineSettings>("device = \"tpu\"").unwrap_err();
        assert!(
            refused.to_string().contains("auto, cpu or cuda:N"),
            "{refused}"
        );
    }

    #[test]
    fn the_otlp_protocol_decides_which_endpoints_are_reachable() {
        let tracing = |text: &str| {
            let c: Config = toml::from_str(&format!("[tracing]\n{text}")).unwrap();
            c.validate().map(|()| c.tracing.otlp_protocol)
        };
        let endpoint = "otlp_endpoint = \"http://127.0.0.1:4318/v1/traces\"";
        assert_eq!(tracing(endpoint), Ok(OtlpProtocol::HttpProtobuf));
        let grpc = "otlp_protocol = \"grpc\"\notlp_endpoint = \"https://collector:4317\"";
        assert_eq!(tracing(grpc), Ok(OtlpProtocol::Grpc));
        // The OTLP/HTTP client has no certificate roots: https is refused, not sent in clear.
        let refused = tracing("otlp_endpoint = \"https://collector:4318/v1/traces\"").unwrap_err();
        assert!(refused.contains("http/protobuf"), "{refused}");
        let refused = tracing("otlp_protocol = \"grpc\"\notlp_endpoint = \"collector:4317\"");
        assert!(refused.unwrap_err().contains("grpc"));
        assert!(toml::from_str::<Config>("[tracing]\notlp_protocol = \"http/json\"").is_err());
    }

    #[test]
    fn zero_is_refused_where_it_is_invalid() {
        // Zero would mean "nothing at all" (no connection, no request): a config error, never
        // silently raised to 1.
        for (section, key) in [
            ("limits", "max_connections"),
            ("limits", "default_max_concurrent"),
            ("websocket", "max_in_flight"),
            ("engine", "max_queue_size"),
            ("plugins", "max_concurrent_compiles"),
            ("cluster", "missed_heartbeats"),
        ] {
            let text = format!("[{section}]\n{key} = 0\n");
            let refused = toml::from_str::<Config>(&text).unwrap_err().to_string();
            assert!(refused.contains("nonzero"), "{section}.{key}: {refused}");
            assert!(refused.contains(key), "{section}.{key}: {refused}");
            let one = format!("[{section}]\n{key} = 1\n");
            assert!(
                toml::from_str::<Config>(&one).is_ok(),
                "{section}.{key} = 1"
            );
        }
    }

    #[test]
    fn anonymous_limits_fall_back_to_the_key_defaults() {
        let mut c: Config = toml::from_str(
            "[auth]\nanonymous_scopes = [\"infer\"]\n[limits]\ndefault_rps = 4.0\nanonymous_max_concurrent = 2\n",
        )
        .unwrap();
        let access = c.anonymous_access().unwrap().unwrap();
        assert_eq!(access.limits().rate.unwrap().rps, 4.0);
        assert_eq!(access.limits().max_concurrent, Some(2));
        c.limits.anonymous_rps = Some(1.0);
        let access = c.anonymous_access().unwrap().unwrap();
        assert_eq!(access.limits().rate.unwrap().rps, 1.0);
        c.auth.anonymous_scopes = vec!["admin".into()];
        assert!(c.validate().unwrap_err().contains("admin"));
        c.auth.anonymous_scopes.clear();
        assert!(c.anonymous_access().unwrap().is_none());
        c.shared_memory.key_prefix = "no-slash".into();
        assert!(c.validate().unwrap_err().contains("[shared_memory]"));
    }

    #[test]
    fn the_hops_timeouts_are_checked() {
        let c: Config =
            toml::from_str("[cluster]\nconnect_timeout_ms = 500\nlink_timeout_ms = 4000\n")
                .unwrap();
        c.validate().unwrap();
        let link = c.cluster.link();
        assert_eq!(link.connect_timeout, std::time::Duration::from_millis(500));
        assert_eq!(link.silence, std::time::Duration::from_secs(4));
        for bad in ["connect_timeout_ms = 0", "link_timeout_ms = 999"] {
            let c: Config = toml::from_str(&format!("[cluster]\n{bad}\n")).unwrap();
            let refused = c.validate().unwrap_err();
            assert!(
                refused.contains(bad.split(' ').next().unwrap()),
                "{refused}"
            );
        }
    }

    #[test]
    fn default_limits_are_checked() {
        let mut c = Config::default();
        assert!(c.default_key_limits().unwrap().is_unlimited());
        c.limits.default_burst = Some(3);
        assert!(c.validate().is_err(), "burst without rps");
        c.limits.default_rps = Some(2.0);
        assert_eq!(c.default_key_limits().unwrap().rate.unwrap().burst, 3);
    }

    #[test]
    fn token_defaults_and_the_cache_share_of_the_memory_budget() {
        let c: Config = toml::from_str(
            "[limits]\ndefault_tokens_per_minute = 1000\ndefault_token_budget = { tokens = 50000, period = \"day\" }\n[cache]\nbytes = 1000\n[engine]\nhost_memory_budget_bytes = 5000\n",
        )
        .unwrap();
        c.validate().unwrap();
        let t = c.default_token_limits();
        assert_eq!(t.tokens_per_minute, Some(1000));
        assert_eq!(t.token_budget.unwrap().tokens, 50_000);
        assert_eq!(c.model_memory_budget(), Some(4000));
        let week = toml::from_str::<Config>(
            "[limits]\ndefault_token_budget = { tokens = 5, period = \"week\" }\n",
        );
        assert!(week.is_err());
        let mut zero = Config::default();
        zero.limits.default_tokens_per_minute = Some(0);
        assert!(zero
            .validate()
            .unwrap_err()
            .contains("default_tokens_per_minute"));
        let mut big = Config::default();
        big.cache.bytes = 10;
        big.engine.host_memory_budget_bytes = Some(10);
        assert!(big.validate().unwrap_err().contains("[cache] bytes"));
    }
}
