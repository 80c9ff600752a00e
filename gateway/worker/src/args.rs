//! The `infergate worker` command line.

use infergate_service::config::OtlpProtocol;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct WorkerArgs {
    /// The manager's base URL (its HTTPS listener), e.g. https://manager:8443. Gateway replicas
    /// on one shared store (PostgreSQL) are one manager: give each (comma-separated, or the flag
    /// repeated) or the load balancer in front of them; the worker talks to one and moves to the
    /// next when it does not answer.
    #[arg(long, env = "INFERGATE_JOIN", value_delimiter = ',', required = true)]
    pub(crate) join: Vec<String>,
    /// Join secret from `infergate workers token create` on the manager.
    #[arg(long, env = "INFERGATE_JOIN_TOKEN", hide_env_values = true)]
    pub(crate) join_token: String,
    /// Address to serve KServe v2 on (TLS: the manager with its cluster certificate, direct
    /// clients with a token).
    #[arg(
        long,
        env = "INFERGATE_WORKER_LISTEN",
        default_value = "127.0.0.1:8445"
    )]
    pub(crate) listen: SocketAddr,
    /// Address to serve KServe v2 over gRPC on (TLS with the same certificate; direct clients
    /// send their token as `authorization: Bearer` metadata) [default: the --listen address
    /// with the next port, or any free port when --listen has port 0]. Clients reach it at the
    /// --advertise host with this port; `/assign` answers it as `grpc`.
    #[arg(long, env = "INFERGATE_WORKER_GRPC_LISTEN")]
    pub(crate) grpc_listen: Option<SocketAddr>,
    /// host:port the manager reaches this worker at [default: the --listen address].
    #[arg(long, env = "INFERGATE_ADVERTISE")]
    pub(crate) advertise: Option<String>,
    /// Data directory: worker id and cached model files.
    #[arg(long, env = "INFERGATE_DATA_DIR", default_value = "./worker-data")]
    pub(crate) data_dir: PathBuf,
    /// Path of libonnxruntime.so [default: $ORT_DYLIB_PATH].
    #[arg(long)]
    pub(crate) ort_lib: Option<PathBuf>,
    /// Where native ops run: auto, cpu or cuda:N [default: auto].
    #[arg(long, env = "INFERGATE_DEVICE")]
    pub(crate) device: Option<infergate_service::config::Device>,
    /// ONNX Runtime intra-op threads per instance [default: sized from the cores].
    #[arg(long, env = "INFERGATE_INTRA_THREADS")]
    pub(crate) intra_threads: Option<usize>,
    /// Execution instances per model version [default: sized from the cores].
    #[arg(long, env = "INFERGATE_INSTANCES")]
    pub(crate) instances: Option<usize>,
    /// Threads of the async runtime: connections, TLS, HTTP, request decode and encode [default:
    /// half the available cores, rounded up (2 cores: 1); 0 = that default].
    #[arg(long, env = "INFERGATE_ASYNC_THREADS")]
    pub(crate) async_threads: Option<usize>,
    /// Largest inference request body in bytes.
    #[arg(long, default_value_t = 64 << 20)]
    pub(crate) max_request_bytes: usize,
    /// Disk budget for cached model files in bytes; least recently used files beyond it are
    /// removed (never one a loaded model version runs from); 20 GiB by default.
    #[arg(long, default_value_t = 20 << 30)]
    pub(crate) cache_bytes: u64,
    /// Seconds to let in-flight requests finish after SIGTERM.
    #[arg(long, default_value_t = 30)]
    pub(crate) shutdown_grace_s: u64,
    /// Export request spans as OpenTelemetry traces to this collector: its OTLP/HTTP traces URL
    /// (http://HOST:4318/v1/traces), or with --otlp-protocol grpc its gRPC address
    /// (http://HOST:4317); a request from the manager continues the manager's trace and follows
    /// its sampling decision [default: no export].
    #[arg(long, env = "INFERGATE_OTLP_ENDPOINT", value_name = "URL")]
    pub(crate) otlp_endpoint: Option<String>,
    /// How spans reach the collector.
    #[arg(long, env = "INFERGATE_OTLP_PROTOCOL", default_value = "http/protobuf")]
    pub(crate) otlp_protocol: OtlpProtocol,
    /// The share of direct clients' traces recorded, 0.0 to 1.0.
    #[arg(long, env = "INFERGATE_TRACE_SAMPLE_RATIO", default_value_t = 0.01, value_parser = ratio)]
    pub(crate) trace_sample_ratio: f64,
}

fn ratio(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!("must be a number from 0.0 to 1.0, not '{text}'")),
    }
}

impl WorkerArgs {
    /// The collector's address and protocol, when spans are exported (logging starts before
    /// [`run`]), or why the address does not suit the protocol.
    pub fn otlp_endpoint(&self) -> Result<Option<(&str, OtlpProtocol)>, String> {
        let Some(url) = self.otlp_endpoint.as_deref() else {
            return Ok(None);
        };
        self.otlp_protocol
            .check_endpoint(url)
            .map_err(|e| format!("--otlp-endpoint {e}"))?;
        Ok(Some((url, self.otlp_protocol)))
    }

    /// The share of traces without a trusted parent that are recorded.
    pub fn trace_sample_ratio(&self) -> f64 {
        self.trace_sample_ratio
    }

    /// Threads for the async runtime the worker runs on (built before [`run`]).
    pub fn async_threads(&self) -> usize {
        infergate_engine::sizing::async_threads(
            infergate_engine::sizing::available_cores(),
            self.async_threads,
            true,
        )
    }
}
