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
    /// Tokens per minute (prompt + completion, chat and completion routes) for keys without
    /// their own token limits [default: unlimited].
    #[arg(long, env = "INFERGATE_DEFAULT_TOKENS_PER_MINUTE")]
    default_tokens_per_minute: Option<u64>,
    /// Token budget per UTC day or month for keys without their own token limits: `N/day` or
    /// `N/month` [default: none].
    #[arg(long, env = "INFERGATE_DEFAULT_TOKEN_BUDGET", value_name = "N/PERIOD",
          value_parser = super::keys::parse_budget)]
    default_token_budget: Option<(u64, String)>,
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
    /// Serve callers without an API key from --anonymous-networks with these scopes (infer,
    /// upload; never admin), each client address under its own rate limit ([limits]
    /// anonymous_rps) [default: off].
    #[arg(long, env = "INFERGATE_ANONYMOUS_SCOPES", value_delimiter = ',')]
    anonymous_scopes: Vec<String>,
    /// Networks (CIDR or addresses) whose callers may go without a key when --anonymous-scopes
    /// is given [default: loopback, 127.0.0.0/8 and ::1].
    #[arg(long, env = "INFERGATE_ANONYMOUS_NETWORKS", value_delimiter = ',')]
    anonymous_networks: Vec<String>,
    /// Run no requests on this server's engine: route every one to workers that joined.
    #[arg(long, env = "INFERGATE_NO_LOCAL_ENGINE")]
    no_local_engine: bool,
    /// Export request spans as OpenTelemetry traces to this collector: its OTLP/HTTP traces URL
    /// (http://HOST:4318/v1/traces), or with --otlp-protocol grpc its gRPC address
    /// (http://HOST:4317) [default: no export].
    #[arg(long, env = "INFERGATE_OTLP_ENDPOINT", value_name = "URL")]
    otlp_endpoint: Option<String>,
    /// How spans reach the collector [default: http/protobuf].
    #[arg(long, env = "INFERGATE_OTLP_PROTOCOL")]
    otlp_protocol: Option<infergate_service::config::OtlpProtocol>,
    /// The share of traces recorded, 0.0 to 1.0 [default: 0.01].
    #[arg(long, env = "INFERGATE_TRACE_SAMPLE_RATIO")]
    trace_sample_ratio: Option<f64>,
}

/// The configuration key each flag of `serve` (and its `INFERGATE_*` variable) sets, by the
/// flag's id: the configuration reference prints them beside the keys, and a test sets each
/// flag and checks that it changes this key and no other. `--config` names the file itself.
pub(crate) const FLAG_KEYS: &[(&str, &str)] = &[
    ("listen", "listen"),
    ("data_dir", "data_dir"),
    ("ort_lib", "ort_lib"),
    ("tls_cert", "tls.cert"),
    ("tls_key", "tls.key"),
    ("tls_client_ca", "tls.client_ca"),
    ("insecure_http", "insecure_http"),
    ("max_request_bytes", "limits.max_request_bytes"),
    ("max_upload_bytes", "limits.max_upload_bytes"),
    ("max_connections", "limits.max_connections"),
    ("intra_threads", "engine.intra_threads"),
    ("ort_spinning", "engine.ort_spinning"),
    ("device", "engine.device"),
    ("instances", "engine.instances"),
    ("async_threads", "async_threads"),
    ("cache_bytes", "cache.bytes"),
    ("log_format", "log_format"),
    ("dashboard_dir", "dashboard_dir"),
    ("default_rps", "limits.default_rps"),
    ("default_burst", "limits.default_burst"),
    ("default_max_concurrent", "limits.default_max_concurrent"),
    (
        "default_tokens_per_minute",
        "limits.default_tokens_per_minute",
    ),
    ("default_token_budget", "limits.default_token_budget"),
    ("ratelimit_url", "limits.shared_url"),
    ("ratelimit_failure", "limits.shared_failure"),
    ("cors_origins", "cors.allowed_origins"),
    ("anonymous_scopes", "auth.anonymous_scopes"),
    ("anonymous_networks", "auth.anonymous_networks"),
    ("metrics_listen", "metrics.listen"),
    ("openai_vocab", "openai.vocab"),
    ("grpc_listen", "grpc.listen"),
    ("no_grpc", "grpc.enabled"),
    ("openai_model", "openai.completions_model"),
    ("llm_max_sequences", "llm.max_sequences"),
    ("llm_context", "llm.context_per_sequence"),
    ("llm_threads", "llm.threads"),
    ("llm_no_prefix_cache", "llm.prefix_cache"),
    ("store_url", "store.url"),
    ("store_resync_s", "store.resync_s"),
    ("no_local_engine", "cluster.local_engine"),
    ("otlp_endpoint", "tracing.otlp_endpoint"),
    ("otlp_protocol", "tracing.otlp_protocol"),
    ("trace_sample_ratio", "tracing.sample_ratio"),
];

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
        if self.default_tokens_per_minute.is_some() {
            c.limits.default_tokens_per_minute = self.default_tokens_per_minute;
        }
        if let Some((tokens, period)) = self.default_token_budget {
            let budget = serde_json::json!({"tokens": tokens, "period": period});
            c.limits.default_token_budget = Some(
                serde_json::from_value(budget)
                    .map_err(|e| anyhow!("--default-token-budget: {e}"))?,
            );
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
        if !self.anonymous_scopes.is_empty() {
            c.auth.anonymous_scopes = self.anonymous_scopes;
        }
        if !self.anonymous_networks.is_empty() {
            c.auth.anonymous_networks = self.anonymous_networks;
        }
        if self.otlp_endpoint.is_some() {
            c.tracing.otlp_endpoint = self.otlp_endpoint;
        }
        set!(c.tracing.otlp_protocol, self.otlp_protocol);
        set!(c.tracing.sample_ratio, self.trace_sample_ratio);
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, FromArgMatches, Parser};
    use serde_json::Value;
    use std::collections::BTreeSet;

    #[derive(Parser)]
    struct Serve {
        #[command(flatten)]
        args: ServeArgs,
    }

    /// The configuration `serve` builds from these arguments, as JSON.
    fn config_of(args: &[&str]) -> Value {
        let matches = Serve::command()
            .try_get_matches_from(std::iter::once("serve").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        let serve = Serve::from_arg_matches(&matches).expect("arguments");
        let config = serve
            .args
            .into_config()
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        serde_json::to_value(config).expect("a configuration serializes")
    }

    /// The dotted keys whose values differ between two configurations.
    fn changed(before: &Value, after: &Value, prefix: &str, out: &mut BTreeSet<String>) {
        match (before, after) {
            (Value::Object(b), Value::Object(a)) => {
                for (k, v) in a {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    changed(b.get(k).unwrap_or(&Value::Null), v, &key, out);
                }
            }
            (b, a) if b != a => {
                out.insert(prefix.to_owned());
            }
            _ => {}
        }
    }

    /// A value for each flag that differs from its default, and the flags it needs beside it.
    fn sample(id: &str) -> (Option<&'static str>, &'static [&'static str]) {
        let value = match id {
            "listen" | "grpc_listen" | "metrics_listen" => "127.0.0.1:7001",
            "data_dir" | "ort_lib" | "tls_cert" | "tls_key" | "tls_client_ca" | "dashboard_dir"
            | "openai_vocab" => "/elsewhere/file",
            "insecure_http" | "no_grpc" | "llm_no_prefix_cache" | "no_local_engine" => {
                return (None, &[])
            }
            "ort_spinning" => "true",
            "device" => "cpu",
            "log_format" => "json",
            "default_rps" => "7.5",
            "default_token_budget" => "5000/month",
            "default_burst" => return (Some("9"), &["--default-rps", "7.5"]),
            "ratelimit_url" => "redis://127.0.0.1:1/0",
            "ratelimit_failure" => "closed",
            "cors_origins" => "https://app.example.com",
            "anonymous_scopes" => "upload",
            "anonymous_networks" => "10.0.0.0/8",
            "openai_model" => "another",
            "store_url" => "postgres://db.example.com/infergate",
            "otlp_endpoint" => "http://127.0.0.1:4318/v1/traces",
            "otlp_protocol" => "grpc",
            "trace_sample_ratio" => "0.5",
            _ => "77",
        };
        (Some(value), &[])
    }

    #[test]
    fn each_flag_sets_the_key_the_reference_names_and_no_other() {
        let command = Serve::command();
        let flags: BTreeSet<&str> = command
            .get_arguments()
            .map(|a| a.get_id().as_str())
            .filter(|id| *id != "config")
            .collect();
        let listed: BTreeSet<&str> = FLAG_KEYS.iter().map(|(flag, _)| *flag).collect();
        assert_eq!(
            flags, listed,
            "every flag of serve but --config is in FLAG_KEYS, once"
        );
        assert_eq!(listed.len(), FLAG_KEYS.len(), "a flag listed twice");
        for (id, key) in FLAG_KEYS {
            let arg = command
                .get_arguments()
                .find(|a| a.get_id() == *id)
                .expect("listed above");
            let long = format!("--{}", arg.get_long().expect("every flag of serve is long"));
            let (value, needs) = sample(id);
            let mut args: Vec<&str> = needs.to_vec();
            let before = config_of(&args);
            args.push(&long);
            args.extend(value);
            let mut keys = BTreeSet::new();
            changed(&before, &config_of(&args), "", &mut keys);
            assert_eq!(keys, BTreeSet::from([key.to_string()]), "{long} sets {key}");
        }
    }
}
