//! `infergate serve`: its flags, and how they merge with the configuration file and the
//! defaults into a [`Config`].

use anyhow::{anyhow, bail};
use clap::Args;
use infergate_service::config::Config;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Args)]
pub struct ServeArgs {
    /// TOML configuration file (flags and INFERGATE_* variables override it).
    #[arg(long, env = "INFERGATE_CONFIG")]
    config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:8443].
    #[arg(long, env = "INFERGATE_LISTEN")]
    listen: Option<SocketAddr>,
    /// Data directory for the database, model files, TLS material and admin key [default: ./data].
    #[arg(long, env = "INFERGATE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Path of libonnxruntime.so [default: $ORT_DYLIB_PATH].
    #[arg(long)]
    ort_lib: Option<PathBuf>,
    /// PEM certificate chain (with --tls-key); without both, a self-signed certificate is generated.
    #[arg(long, env = "INFERGATE_TLS_CERT")]
    tls_cert: Option<PathBuf>,
    /// PEM private key for --tls-cert.
    #[arg(long, env = "INFERGATE_TLS_KEY")]
    tls_key: Option<PathBuf>,
    /// Require client certificates signed by this PEM CA bundle (mutual TLS).
    #[arg(long, env = "INFERGATE_TLS_CLIENT_CA")]
    tls_client_ca: Option<PathBuf>,
    /// Serve plain HTTP instead of TLS (development only; logs a warning).
    #[arg(long, env = "INFERGATE_INSECURE_HTTP")]
    insecure_http: bool,
    /// Largest inference request body in bytes [default: 67108864].
    #[arg(long, env = "INFERGATE_MAX_REQUEST_BYTES")]
    max_request_bytes: Option<usize>,
    /// Largest model upload in bytes [default: 1073741824].
    #[arg(long, env = "INFERGATE_MAX_UPLOAD_BYTES")]
    max_upload_bytes: Option<usize>,
    /// Maximum concurrent connections [default: 4096].
    #[arg(long, env = "INFERGATE_MAX_CONNECTIONS")]
    max_connections: Option<std::num::NonZeroUsize>,
    /// ONNX Runtime intra-op threads per instance [default: sized from the available cores:
    /// instances × threads ≈ cores, at most 4 threads per instance; 0 = that default].
    #[arg(long, env = "INFERGATE_INTRA_THREADS")]
    intra_threads: Option<usize>,
    /// Whether ONNX Runtime's intra-op threads spin for work between operators (true, ORT's
    /// own default) or sleep at once (false: no CPU burnt after each run) [default: false].
    #[arg(long, env = "INFERGATE_ORT_SPINNING")]
    ort_spinning: Option<bool>,
    /// Where native ops (resize/normalize, softmax, NMS) run: auto, cpu or cuda:N [default: auto].
    #[arg(long, env = "INFERGATE_DEVICE")]
    device: Option<infergate_service::config::Device>,
    /// Execution instances per model version [default: sized from the available cores:
    /// ceil(cores / 4), at least 2 for a version that does not batch (max_batch_size 0) on 2
    /// cores or more; or cores / --intra-threads when that is given; 0 = that default].
    #[arg(long, env = "INFERGATE_INSTANCES")]
    instances: Option<usize>,
    /// Threads of the async runtime: connections, TLS, HTTP, request decode and encode [default:
    /// half the available cores, rounded up (2 cores: 1); every core with --no-local-engine; 0
    /// = that default].
    #[arg(long, env = "INFERGATE_ASYNC_THREADS")]
    async_threads: Option<usize>,
    /// Log format: text or json [default: text].
    #[arg(long, env = "INFERGATE_LOG_FORMAT")]
    log_format: Option<String>,
    /// Directory of the built dashboard (dashboard/build.sh) to serve instead of the copy
    /// embedded in the binary at build time.
    #[arg(long, env = "INFERGATE_DASHBOARD_DIR")]
    dashboard_dir: Option<PathBuf>,
    /// Rate limit (requests/s) for keys without their own [default: unlimited].
    #[arg(long, env = "INFERGATE_DEFAULT_RPS")]
    default_rps: Option<f64>,
    /// Burst for --default-rps [default: the rate rounded up].
    #[arg(long, env = "INFERGATE_DEFAULT_BURST")]
    default_burst: Option<u32>,
    /// Concurrent requests per key for keys without their own cap [default: unlimited].
    #[arg(long, env = "INFERGATE_DEFAULT_MAX_CONCURRENT")]
    default_max_concurrent: Option<std::num::NonZeroU32>,
    /// Share per-key rate limits with other replicas through this Redis
    /// (redis://host:port/db) [default: limits per process].
    #[arg(
        long = "ratelimit",
        env = "INFERGATE_RATELIMIT",
        value_name = "REDIS_URL"
    )]
    ratelimit_url: Option<String>,
    /// While Redis cannot answer: admit under this replica's own limits (open) or answer 503
    /// (closed) [default: open].
    #[arg(long, env = "INFERGATE_RATELIMIT_FAILURE", value_enum)]
    ratelimit_failure: Option<infergate_service::config::SharedFailure>,
    /// Bytes of the response cache for models whose config enables it, counted in the host
    /// memory budget [default: 0, no cache].
    #[arg(long, env = "INFERGATE_CACHE_BYTES")]
    cache_bytes: Option<u64>,
    /// Allow this browser origin (CORS); repeat for several, or '*' for any (no credentials).
    #[arg(
        long = "cors-origin",
        env = "INFERGATE_CORS_ORIGINS",
        value_delimiter = ','
    )]
    cors_origins: Vec<String>,
    /// Also serve /metrics without a key on this plain-HTTP address (keep it private).
    #[arg(long, env = "INFERGATE_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// Vocabulary of the text-generation model for the OpenAI API (textgen-vocab.json).
    #[arg(long, env = "INFERGATE_OPENAI_VOCAB")]
    openai_vocab: Option<PathBuf>,
    /// Address of the KServe v2 gRPC listener (TLS like --listen) [default: 127.0.0.1:8444].
    #[arg(long, env = "INFERGATE_GRPC_LISTEN")]
    grpc_listen: Option<SocketAddr>,
    /// Do not serve gRPC.
    #[arg(long, env = "INFERGATE_NO_GRPC", conflicts_with = "grpc_listen")]
    no_grpc: bool,
    /// Default model of /v1/completions and /v1/chat/completions [default: smollm2].
    #[arg(long, env = "INFERGATE_OPENAI_MODEL")]
    openai_model: Option<String>,
    /// Chat models: sequences decoded together per model [default: sized to the machine].
    #[arg(long, env = "INFERGATE_LLM_MAX_SEQUENCES")]
    llm_max_sequences: Option<usize>,
    /// Chat models: context of one sequence (prompt + completion) in tokens [default: 4096].
    #[arg(long, env = "INFERGATE_LLM_CONTEXT")]
    llm_context: Option<u32>,
    /// Chat models: CPU threads per model [default: the machine's cores].
    #[arg(long, env = "INFERGATE_LLM_THREADS")]
    llm_threads: Option<usize>,
    /// Chat models: do not reuse the KV of shared prompt prefixes.
    #[arg(long, env = "INFERGATE_LLM_NO_PREFIX_CACHE")]
    llm_no_prefix_cache: bool,
    /// Keep keys, models, plugins, pipelines and workers in this PostgreSQL database, shared by
    /// every replica (postgres://user[:password]@host:port/db; over TLS with
    /// ?sslmode=require&sslrootcert=CA_FILE, the server's certificate always verified) [default:
    /// SQLite in the data directory]. Each replica caches API keys, models, plugins and
    /// pipelines and follows changes through LISTEN/NOTIFY; model and plugin files stay in each
    /// replica's data directory.
    #[arg(long = "store", env = "INFERGATE_STORE", value_name = "POSTGRES_URL")]
    store_url: Option<String>,
    /// With --store: seconds between full reloads of the cached keys, models, plugins and
    /// pipelines, the longest a change can take to reach a replica whose notification was lost
    /// [default: 5].
    #[arg(long, env = "INFERGATE_STORE_RESYNC_S")]
    store_resync_s: Option<u64>,
    /// Run no requests on this server's engine: route every one to workers that joined.
    #[arg(long, env = "INFERGATE_NO_LOCAL_ENGINE")]
    no_local_engine: bool,
}

impl ServeArgs {
    /// The log format given as a flag or in the environment: logging starts before the
    /// configuration file is read.
    pub fn log_format(&self) -> Option<String> {
        self.log_format.clone()
    }

    /// Defaults < file < environment/flags.
    pub fn into_config(self) -> anyhow::Result<Config> {
        let mut c = match &self.config {
            Some(path) => Config::from_file(path).map_err(|e| anyhow!(e))?,
            None => Config::default(),
        };
        macro_rules! set {
            ($field:expr, $value:expr) => {
                if let Some(v) = $value {
                    $field = v;
                }
            };
        }
        set!(c.listen, self.listen);
        set!(c.data_dir, self.data_dir);
        if self.ort_lib.is_some() {
            c.ort_lib = self.ort_lib;
        }
        if self.tls_cert.is_some() || self.tls_key.is_some() {
            c.tls.cert = self.tls_cert;
            c.tls.key = self.tls_key;
        }
        if self.tls_client_ca.is_some() {
            c.tls.client_ca = self.tls_client_ca;
        }
        c.insecure_http |= self.insecure_http;
        set!(c.limits.max_request_bytes, self.max_request_bytes);
        set!(c.limits.max_upload_bytes, self.max_upload_bytes);
        set!(c.limits.max_connections, self.max_connections);
        set!(c.engine.intra_threads, self.intra_threads.map(Some));
        set!(c.engine.ort_spinning, self.ort_spinning);
        set!(c.engine.device, self.device);
        set!(c.engine.instances, self.instances.map(Some));
        set!(c.async_threads, self.async_threads.map(Some));
        set!(c.log_format, self.log_format);
        c.dashboard_dir = self.dashboard_dir.or(c.dashboard_dir);
        if self.default_rps.is_some() {
            c.limits.default_rps = self.default_rps;
        }
        if self.default_burst.is_some() {
            c.limits.default_burst = self.default_burst;
        }
        if self.default_max_concurrent.is_some() {
            c.limits.default_max_concurrent = self.default_max_concurrent;
        }
        if self.ratelimit_url.is_some() {
            c.limits.shared_url = self.ratelimit_url;
        }
        set!(c.limits.shared_failure, self.ratelimit_failure);
        set!(c.cache.bytes, self.cache_bytes);
        if self.store_url.is_some() {
            c.store.url = self.store_url;
        }
        set!(c.store.resync_s, self.store_resync_s);
        if !self.cors_origins.is_empty() {
            c.cors.allowed_origins = self.cors_origins;
        }
        if self.metrics_listen.is_some() {
            c.metrics.listen = self.metrics_listen;
        }
        if self.openai_vocab.is_some() {
            c.openai.vocab = self.openai_vocab;
        }
        set!(c.openai.completions_model, self.openai_model);
        set!(c.llm.max_sequences, self.llm_max_sequences);
        set!(c.llm.context_per_sequence, self.llm_context);
        set!(c.llm.threads, self.llm_threads);
        c.llm.prefix_cache &= !self.llm_no_prefix_cache;
        set!(c.grpc.listen, self.grpc_listen);
        c.grpc.enabled &= !self.no_grpc;
        c.cluster.local_engine &= !self.no_local_engine;
        c.validate().map_err(|e| anyhow!(e))?;
        if !matches!(c.log_format.as_str(), "text" | "json") {
            bail!(
                "--log-format must be 'text' or 'json', not '{}'",
                c.log_format
            );
        }
        Ok(c)
    }
}
