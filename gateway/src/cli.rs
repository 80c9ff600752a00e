//! The `infergate` command. `serve` runs the gateway; `keys` and `models` work offline on a
//! data directory, and `keys` also online through the admin API (`--url`).

use crate::auth::Scopes;
use crate::config::Config;
use crate::store::keys::KeyLimits;
use crate::store::Store;
use anyhow::{anyhow, bail, Context};
use clap::{Args, Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "infergate",
    version,
    about = "TLS edge gateway for machine-learning inference",
    long_about = "infergate serves ONNX models over KServe v2 (HTTP), with API keys, TLS and an embedded SQLite store.\n\nStart with `infergate serve`; the first start prints an admin API key and saves it to DATA_DIR/admin.key."
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway.
    Serve(Box<ServeArgs>),
    /// Create, list and revoke API keys.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Register and list models in a data directory (offline; the server loads them at start).
    #[command(subcommand)]
    Models(ModelsCommand),
    /// Register and list WebAssembly plugins in a data directory (offline).
    #[command(subcommand)]
    Plugins(crate::cli_pipelines::PluginsCommand),
    /// Declare and list pipelines in a data directory (offline).
    #[command(subcommand)]
    Pipelines(crate::cli_pipelines::PipelinesCommand),
}

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
    max_connections: Option<usize>,
    /// ONNX Runtime intra-op threads per instance [default: sized from the available cores:
    /// instances × threads ≈ cores, at most 4 threads per instance; 0 = that default].
    #[arg(long, env = "INFERGATE_INTRA_THREADS")]
    intra_threads: Option<usize>,
    /// Where native ops (resize/normalize, softmax, NMS) run: auto, cpu or cuda:N [default: auto].
    #[arg(long, env = "INFERGATE_DEVICE")]
    device: Option<String>,
    /// Execution instances per model version [default: sized from the available cores:
    /// ceil(cores / 4), or cores / --intra-threads when that is given; 0 = that default].
    #[arg(long, env = "INFERGATE_INSTANCES")]
    instances: Option<usize>,
    /// Log format: text or json [default: text].
    #[arg(long, env = "INFERGATE_LOG_FORMAT")]
    log_format: Option<String>,
    /// Directory of the built dashboard (dashboard/build.sh) [default: dashboard/dist].
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
    default_max_concurrent: Option<u32>,
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
    ratelimit_failure: Option<crate::config::SharedFailure>,
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
}

impl ServeArgs {
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
        set!(c.engine.device, self.device);
        crate::config::parse_device(&c.engine.device).map_err(|e| anyhow!(e))?;
        set!(c.engine.instances, self.instances.map(Some));
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

/// Where a key command acts: a data directory (offline) or a running server (online).
#[derive(Args)]
struct Target {
    /// Data directory to act on offline [default: ./data when --url is absent].
    #[arg(long, env = "INFERGATE_DATA_DIR", conflicts_with = "url")]
    data_dir: Option<PathBuf>,
    /// Base URL of a running gateway (e.g. https://127.0.0.1:8443) to act on through the admin API.
    #[arg(long, env = "INFERGATE_URL")]
    url: Option<String>,
    /// Admin API key for --url.
    #[arg(long, env = "INFERGATE_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// PEM CA certificate to trust for --url (e.g. DATA_DIR/tls/cert.pem for the self-signed one).
    #[arg(long)]
    ca_cert: Option<PathBuf>,
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Create a key; prints the secret alone on stdout (shown once).
    Create {
        #[command(flatten)]
        target: Target,
        /// Comma-separated scopes: infer, upload, admin (admin implies the others).
        #[arg(long, default_value = "infer")]
        scope: String,
        /// A name to recognise the key by.
        #[arg(long, default_value = "cli")]
        name: String,
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Change a key's rate limit and concurrency cap (flags not given stay as they are).
    Limits {
        #[command(flatten)]
        target: Target,
        /// Numeric id or 12-character public id.
        id: String,
        #[command(flatten)]
        limits: LimitArgs,
        /// Drop the key's own rate limit and cap: it gets the server default again.
        #[arg(long, conflicts_with_all = ["rps", "burst", "max_concurrent"])]
        clear: bool,
    },
    /// List keys (never their secrets).
    List {
        #[command(flatten)]
        target: Target,
    },
    /// Revoke a key by id or public id; takes effect on the next request.
    Revoke {
        #[command(flatten)]
        target: Target,
        /// Numeric id or 12-character public id.
        id: String,
    },
}

/// A key's own limits; absent = the server default.
#[derive(Args)]
struct LimitArgs {
    /// Rate limit in requests per second (GCRA).
    #[arg(long)]
    rps: Option<f64>,
    /// Requests allowed at once above the rate [default: the rate rounded up].
    #[arg(long, requires = "rps")]
    burst: Option<u32>,
    /// Requests of this key in flight at once.
    #[arg(long)]
    max_concurrent: Option<u32>,
}

impl LimitArgs {
    /// The admin API's JSON fields for the flags given.
    fn to_json(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        if let Some(rps) = self.rps {
            m.insert(
                "rate_limit".into(),
                serde_json::json!({"rps": rps, "burst": self.burst}),
            );
        }
        if let Some(n) = self.max_concurrent {
            m.insert("max_concurrent".into(), serde_json::json!(n));
        }
        m
    }

    fn apply(&self, current: KeyLimits) -> anyhow::Result<KeyLimits> {
        crate::api::limits::parse_limits(&self.to_json(), current).map_err(|e| anyhow!(e.message))
    }
}

#[derive(Subcommand)]
enum ModelsCommand {
    /// Validate a .onnx file with ONNX Runtime and register it as the next version of NAME.
    Add {
        /// Data directory [default: ./data].
        #[arg(long, env = "INFERGATE_DATA_DIR", default_value = "./data")]
        data_dir: PathBuf,
        /// Path of libonnxruntime.so [default: $ORT_DYLIB_PATH].
        #[arg(long)]
        ort_lib: Option<PathBuf>,
        /// Model name.
        #[arg(long)]
        name: String,
        /// Model configuration as JSON (e.g. '{"dynamic_batching": {}}').
        #[arg(long)]
        config: Option<String>,
        /// Skip when the latest version of NAME already has this exact file.
        #[arg(long)]
        if_changed: bool,
        /// The .onnx file.
        file: PathBuf,
    },
    /// List registered model versions.
    List {
        /// Data directory [default: ./data].
        #[arg(long, env = "INFERGATE_DATA_DIR", default_value = "./data")]
        data_dir: PathBuf,
    },
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let log_format = match &cli.command {
        Command::Serve(a) => a.log_format.clone().unwrap_or_else(|| "text".into()),
        _ => "text".into(),
    };
    init_logging(&log_format);
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("infergate: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(format: &str) {
    use tracing_subscriber::EnvFilter;
    // llama.cpp reports every tensor it loads at info level: only its warnings by default.
    let filter = EnvFilter::try_from_env("INFERGATE_LOG")
        .unwrap_or_else(|_| EnvFilter::new("info,llama-cpp-2=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => {
            let config = args.into_config()?;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            runtime.block_on(crate::app::serve(config))
        }
        Command::Keys(cmd) => keys(cmd),
        Command::Models(cmd) => models(cmd),
        Command::Plugins(cmd) => crate::cli_pipelines::plugins(cmd),
        Command::Pipelines(cmd) => crate::cli_pipelines::pipelines(cmd),
    }
}

fn open_store(dir: &Option<PathBuf>) -> anyhow::Result<Store> {
    let dir = dir.clone().unwrap_or_else(|| PathBuf::from("./data"));
    Store::open(&dir).with_context(|| format!("opening data directory {}", dir.display()))
}

fn keys(cmd: KeysCommand) -> anyhow::Result<()> {
    match cmd {
        KeysCommand::Create {
            target,
            scope,
            name,
            limits,
        } => {
            let scopes = Scopes::parse_list(&scope).map_err(|e| anyhow!(e))?;
            let own = limits.apply(KeyLimits::default())?;
            let secret = match &target.url {
                Some(_) => {
                    let scopes: Vec<&str> = scopes.iter().map(|s| s.as_str()).collect();
                    let mut body = limits.to_json();
                    body.insert("name".into(), serde_json::json!(name));
                    body.insert("scopes".into(), serde_json::json!(scopes));
                    let v = online(
                        &target,
                        reqwest::Method::POST,
                        "/api/keys",
                        Some(body.into()),
                    )?;
                    v["secret"]
                        .as_str()
                        .ok_or_else(|| anyhow!("server answered without a secret"))?
                        .to_string()
                }
                None => {
                    open_store(&target.data_dir)?
                        .create_key_with_limits(&name, &scopes, &own)?
                        .1
                }
            };
            println!("{secret}");
        }
        KeysCommand::Limits {
            target,
            id,
            limits,
            clear,
        } => {
            let record = match &target.url {
                Some(_) => {
                    let body = if clear {
                        serde_json::json!({"rate_limit": null, "max_concurrent": null})
                    } else {
                        limits.to_json().into()
                    };
                    let v = online(
                        &target,
                        reqwest::Method::PATCH,
                        &format!("/api/keys/{id}"),
                        Some(body),
                    )?;
                    v["key"].clone()
                }
                None => {
                    let store = open_store(&target.data_dir)?;
                    let current = store
                        .get_key(&id)?
                        .ok_or_else(|| anyhow!("no API key '{id}'"))?;
                    let new = if clear {
                        KeyLimits::default()
                    } else {
                        limits.apply(KeyLimits {
                            rate_limit: current.rate_limit,
                            max_concurrent: current.max_concurrent,
                        })?
                    };
                    let updated = store
                        .set_key_limits(&id, &new)?
                        .ok_or_else(|| anyhow!("no API key '{id}'"))?;
                    serde_json::to_value(updated)?
                }
            };
            eprintln!(
                "key {}: rate_limit {}, max_concurrent {}",
                record["id"], record["rate_limit"], record["max_concurrent"]
            );
        }
        KeysCommand::List { target } => {
            let keys = match &target.url {
                Some(_) => {
                    online(&target, reqwest::Method::GET, "/api/keys", None)?["keys"].clone()
                }
                None => serde_json::to_value(open_store(&target.data_dir)?.list_keys()?)?,
            };
            println!(
                "{:<6} {:<14} {:<20} {:<20} STATUS",
                "ID", "PUBLIC ID", "NAME", "SCOPES"
            );
            for k in keys.as_array().into_iter().flatten() {
                let scopes: Vec<&str> = k["scopes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s.as_str())
                    .collect();
                println!(
                    "{:<6} {:<14} {:<20} {:<20} {}",
                    k["id"],
                    k["public_id"].as_str().unwrap_or(""),
                    k["name"].as_str().unwrap_or(""),
                    scopes.join(","),
                    if k["revoked_at"].is_null() {
                        "active"
                    } else {
                        "revoked"
                    }
                );
            }
        }
        KeysCommand::Revoke { target, id } => {
            match &target.url {
                Some(_) => {
                    online(
                        &target,
                        reqwest::Method::DELETE,
                        &format!("/api/keys/{id}"),
                        None,
                    )?;
                }
                None => {
                    open_store(&target.data_dir)?
                        .revoke_key(&id)?
                        .ok_or_else(|| anyhow!("no API key '{id}'"))?;
                }
            }
            eprintln!("revoked {id}");
        }
    }
    Ok(())
}

/// Calls the admin API of a running gateway.
fn online(
    target: &Target,
    method: reqwest::Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> anyhow::Result<serde_json::Value> {
    let url = target
        .url
        .as_deref()
        .unwrap_or_default()
        .trim_end_matches('/')
        .to_string()
        + path;
    let key = target
        .api_key
        .clone()
        .ok_or_else(|| anyhow!("--url needs --api-key (or INFERGATE_API_KEY)"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut builder = reqwest::Client::builder().use_rustls_tls();
        if let Some(ca) = &target.ca_cert {
            let pem = std::fs::read(ca).with_context(|| format!("reading {}", ca.display()))?;
            builder = builder.add_root_certificate(reqwest::Certificate::from_pem(&pem)?);
        }
        let client = builder.build()?;
        let mut request = client.request(method, &url).bearer_auth(key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("calling {url}"))?;
        let status = response.status();
        let value: serde_json::Value = response.json().await.unwrap_or(serde_json::Value::Null);
        if !status.is_success() {
            bail!(
                "{url}: {status}: {}",
                value["error"].as_str().unwrap_or("no error message")
            );
        }
        Ok(value)
    })
}

fn models(cmd: ModelsCommand) -> anyhow::Result<()> {
    match cmd {
        ModelsCommand::Add {
            data_dir,
            ort_lib,
            name,
            config,
            if_changed,
            file,
        } => {
            let store = std::sync::Arc::new(open_store(&Some(data_dir))?);
            let config = match config {
                Some(text) => {
                    crate::api::models::parse_config(&text).map_err(|e| anyhow!(e.message))?
                }
                None => serde_json::json!({}),
            };
            if if_changed {
                let bytes =
                    std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
                let sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes));
                let latest = store
                    .list_model_versions()?
                    .into_iter()
                    .rfind(|r| r.name == name);
                if let Some(latest) = latest.filter(|r| r.sha256 == sha && r.config == config) {
                    eprintln!(
                        "{name} version {} already has this file; skipped",
                        latest.version
                    );
                    return Ok(());
                }
            }
            let cfg = Config {
                ort_lib,
                ..Config::default()
            };
            let engine = infergate_engine::Engine::new(crate::app::engine_config(&cfg)?)?;
            let record = crate::registry::register_file(&store, &engine, &name, &file, &config)
                .map_err(|e| anyhow!(e.message))?;
            println!(
                "{} version {} ({}, {} bytes)",
                record.name, record.version, record.sha256, record.size_bytes
            );
        }
        ModelsCommand::List { data_dir } => {
            let store = open_store(&Some(data_dir))?;
            println!("{:<24} {:<8} {:<14} SHA256", "NAME", "VERSION", "SIZE");
            for r in store.list_model_versions()? {
                println!(
                    "{:<24} {:<8} {:<14} {}",
                    r.name, r.version, r.size_bytes, r.sha256
                );
            }
        }
    }
    Ok(())
}
