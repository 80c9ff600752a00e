//! `infergate worker`: a host that joins a manager and runs model versions for it.
//!
//! Start-up: bind the listener (so the advertised port is known), join the manager with the join
//! secret, serve KServe v2 inference over mutual TLS with the certificate the manager issued.
//! Then a heartbeat every interval (to the next manager given when one does not answer: gateway
//! replicas on one store); when the manager forgets this worker (restart with a lost
//! registry, removal) it joins again on its own, and stops if the manager refuses (removed by
//! an operator). Model versions are fetched by sha256 from the manager on first use, checked and
//! cached in the data directory. SIGTERM: report draining, finish in-flight requests,
//! deregister, exit.

use super::cache::{evict, Cached};
use super::link::{LinkError, ManagerLink};
use super::window::LatencyWindow;
use anyhow::{anyhow, Context};
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Extension;
use axum::Router;
use http::{HeaderMap, StatusCode};
use infergate_cluster::ca::Issued;
use infergate_cluster::direct::Verifier;
use infergate_cluster::join::JoinSecret;
use infergate_cluster::liveness::Reported;
use infergate_cluster::messages::{JoinRequest, JoinResponse, LoadedModel, Report};
use infergate_engine::{Engine, ModelConfig, ModelState};
use infergate_kserve::codec;
use infergate_kserve::http_error::HttpError;
use infergate_service::catalog::model_key;
use infergate_service::config::Config;
use infergate_service::error::{ApiError, ApiResult, Kind};
use infergate_service::host::{self, CpuSampler};
use infergate_service::infer::{Inferred, Request};
use infergate_service::names::parse_version;
use infergate_store::files::{persist, write_atomic, BlobWriter};
use infergate_store::models::ModelRecord;
use infergate_store::DataDir;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

#[derive(clap::Args)]
pub struct WorkerArgs {
    /// The manager's base URL (its HTTPS listener), e.g. https://manager:8443. Gateway replicas
    /// on one shared store (PostgreSQL) are one manager: give each (comma-separated, or the flag
    /// repeated) or the load balancer in front of them; the worker talks to one and moves to the
    /// next when it does not answer.
    #[arg(long, env = "INFERGATE_JOIN", value_delimiter = ',', required = true)]
    join: Vec<String>,
    /// Join secret from `infergate workers token create` on the manager.
    #[arg(long, env = "INFERGATE_JOIN_TOKEN", hide_env_values = true)]
    join_token: String,
    /// Address to serve KServe v2 on (TLS: the manager with its cluster certificate, direct
    /// clients with a token).
    #[arg(
        long,
        env = "INFERGATE_WORKER_LISTEN",
        default_value = "127.0.0.1:8445"
    )]
    listen: SocketAddr,
    /// Address to serve KServe v2 over gRPC on (TLS with the same certificate; direct clients
    /// send their token as `authorization: Bearer` metadata) [default: the --listen address
    /// with the next port, or any free port when --listen has port 0]. Clients reach it at the
    /// --advertise host with this port; `/assign` answers it as `grpc`.
    #[arg(long, env = "INFERGATE_WORKER_GRPC_LISTEN")]
    grpc_listen: Option<SocketAddr>,
    /// host:port the manager reaches this worker at [default: the --listen address].
    #[arg(long, env = "INFERGATE_ADVERTISE")]
    advertise: Option<String>,
    /// Data directory: worker id and cached model files.
    #[arg(long, env = "INFERGATE_DATA_DIR", default_value = "./worker-data")]
    data_dir: PathBuf,
    /// Path of libonnxruntime.so [default: $ORT_DYLIB_PATH].
    #[arg(long)]
    ort_lib: Option<PathBuf>,
    /// Where native ops run: auto, cpu or cuda:N [default: auto].
    #[arg(long, env = "INFERGATE_DEVICE")]
    device: Option<infergate_service::config::Device>,
    /// ONNX Runtime intra-op threads per instance [default: sized from the cores].
    #[arg(long, env = "INFERGATE_INTRA_THREADS")]
    intra_threads: Option<usize>,
    /// Execution instances per model version [default: sized from the cores].
    #[arg(long, env = "INFERGATE_INSTANCES")]
    instances: Option<usize>,
    /// Threads of the async runtime: connections, TLS, HTTP, request decode and encode [default:
    /// half the available cores, rounded up (2 cores: 1); 0 = that default].
    #[arg(long, env = "INFERGATE_ASYNC_THREADS")]
    async_threads: Option<usize>,
    /// Largest inference request body in bytes.
    #[arg(long, default_value_t = 64 << 20)]
    max_request_bytes: usize,
    /// Disk budget for cached model files in bytes; least recently used files beyond it are
    /// removed (never one a loaded model version runs from); 20 GiB by default.
    #[arg(long, default_value_t = 20 << 30)]
    cache_bytes: u64,
    /// Seconds to let in-flight requests finish after SIGTERM.
    #[arg(long, default_value_t = 30)]
    shutdown_grace_s: u64,
}

/// What the worker's request handlers and heartbeat share.
pub(super) struct Node {
    engine: Arc<Engine>,
    data: DataDir,
    link: ManagerLink,
    credential: RwLock<String>,
    /// Model versions learnt from the manager.
    models: Mutex<HashMap<(String, u64), Arc<ModelRecord>>>,
    /// One fetch at a time: the first requests for a new version wait for the same download.
    fetching: tokio::sync::Mutex<()>,
    in_flight: AtomicU32,
    draining: AtomicBool,
    /// Checks direct-mode tokens offline with the manager's public key.
    verifier: Verifier,
    /// When a request last used each cached file (by sha256), and the cache's budget.
    last_used: Mutex<HashMap<String, Instant>>,
    cache_bytes: u64,
    /// Latencies of answered requests since the last heartbeat.
    latencies: Mutex<LatencyWindow>,
    /// Direct clients' rate limits, as their tokens grant (the key's limit on the manager).
    limiter: infergate_limits::Limiter,
    /// What this host reported when it joined (its GPUs are asked for memory in each report).
    devices: infergate_cluster::messages::Devices,
    /// `host:port` of the gRPC listener as clients reach it (reported in each heartbeat).
    grpc: String,
}

/// Who is on the other end of a connection: the manager (a cluster certificate) or a
/// direct-mode client (none; a token per request).
#[derive(Clone, Copy)]
pub(super) struct Peer {
    pub(super) cluster: bool,
}

impl WorkerArgs {
    /// Threads for the async runtime the worker runs on (built before [`run`]).
    pub fn async_threads(&self) -> usize {
        infergate_engine::sizing::async_threads(
            infergate_engine::sizing::available_cores(),
            self.async_threads,
            true,
        )
    }
}

pub async fn run(args: WorkerArgs) -> anyhow::Result<()> {
    let secret = JoinSecret::parse(&args.join_token).map_err(|e| anyhow!("--join-token: {e}"))?;
    let link = ManagerLink::new(&args.join, &args.join_token, &secret.ca_pin).await?;
    let data = DataDir::create(&args.data_dir)
        .with_context(|| format!("creating data directory {}", args.data_dir.display()))?;
    let mut config = Config {
        data_dir: args.data_dir.clone(),
        ort_lib: args.ort_lib.clone(),
        ..Config::default()
    };
    if let Some(device) = args.device {
        config.engine.device = device;
    }
    config.engine.intra_threads = args.intra_threads.or(config.engine.intra_threads);
    config.engine.instances = args.instances.or(config.engine.instances);
    let engine = Arc::new(Engine::new(infergate_service::startup::engine_config(
        &config,
    )?)?);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let addr = listener.local_addr()?;
    let grpc_listen = args
        .grpc_listen
        .unwrap_or_else(|| grpc_default(args.listen));
    let grpc_listener = tokio::net::TcpListener::bind(grpc_listen)
        .await
        .with_context(|| {
            format!("binding {grpc_listen} for gRPC (choose one with --grpc-listen)")
        })?;
    let grpc_addr = grpc_listener.local_addr()?;
    let id_file = data.root().join("worker-id");
    let request = JoinRequest {
        worker_id: std::fs::read_to_string(&id_file)
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty()),
        advertise: args.advertise.clone().unwrap_or_else(|| addr.to_string()),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        devices: host::devices(),
    };
    let joined = join_until_answered(&link, &request).await?;
    write_atomic(&id_file, joined.worker_id.as_bytes(), 0o644)
        .with_context(|| format!("writing {}", id_file.display()))?;
    tracing::info!(worker = %joined.worker_id, manager = %link.shown(), "joined the manager");
    let tls = infergate_hop::tls::worker_server_config(
        &Issued {
            cert_pem: joined.cert_pem.clone(),
            key_pem: joined.key_pem.clone(),
        },
        &joined.ca_pem,
    )?;
    let node = Arc::new(Node {
        engine,
        data,
        link,
        credential: RwLock::new(joined.credential.clone()),
        models: Mutex::new(HashMap::new()),
        fetching: tokio::sync::Mutex::new(()),
        in_flight: AtomicU32::new(0),
        draining: AtomicBool::new(false),
        last_used: Mutex::new(HashMap::new()),
        latencies: Mutex::new(LatencyWindow::new(Instant::now())),
        limiter: infergate_limits::Limiter::new(),
        devices: request.devices.clone(),
        grpc: grpc_advertised(&request.advertise, grpc_addr.port()),
        cache_bytes: args.cache_bytes,
        verifier: Verifier::new(
            &hex::decode(&joined.token_public_key).context("the manager's token key is not hex")?,
            &joined.worker_id,
        ),
    });
    let request = JoinRequest {
        worker_id: Some(joined.worker_id.clone()),
        ..request
    };
    let (stop, stopped) = watch::channel(false);
    let fatal = Arc::new(Mutex::new(None::<String>));
    let interval = Duration::from_millis(joined.heartbeat_interval_ms.max(100));
    let beats = tokio::spawn(heartbeats(
        node.clone(),
        request,
        interval,
        stopped.clone(),
        stop.clone(),
        fatal.clone(),
    ));
    {
        let stop = stop.clone();
        tokio::spawn(async move {
            infergate_service::startup::shutdown_signal().await;
            stop.send_replace(true);
        });
    }
    tracing::info!("worker listening on https://{addr}");
    tracing::info!("worker serving KServe gRPC on {grpc_addr} (TLS)");
    let router = router(node.clone(), args.max_request_bytes);
    let grpc_router = super::grpc::router(node.clone(), args.max_request_bytes);
    let grace = Duration::from_secs(args.shutdown_grace_s);
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    tokio::join!(
        serve(
            listener,
            acceptor.clone(),
            router,
            stopped.clone(),
            node.clone(),
            grace,
        ),
        serve(
            grpc_listener,
            acceptor,
            grpc_router,
            stopped,
            node.clone(),
            grace
        ),
    );
    let _ = beats.await;
    if let Some(why) = fatal.lock().take() {
        return Err(anyhow!(why));
    }
    let credential = node.credential.read().clone();
    match node.link.deregister(&credential).await {
        Ok(()) => tracing::info!("deregistered from the manager"),
        Err(e) => {
            tracing::warn!(error = %e, "could not deregister; the manager will see this worker lost")
        }
    }
    Ok(())
}

/// The gRPC listener when none is given: the HTTP listener's address with the next port (any
/// free port when that one is any free port).
fn grpc_default(http: SocketAddr) -> SocketAddr {
    let port = match http.port() {
        0 => 0,
        p => p.checked_add(1).unwrap_or(0),
    };
    SocketAddr::new(http.ip(), port)
}

/// Where clients reach the gRPC listener: the advertised host (the one the worker's certificate
/// names) with the gRPC port.
fn grpc_advertised(advertise: &str, port: u16) -> String {
    match advertise.rsplit_once(':') {
        Some((host, _)) => format!("{host}:{port}"),
        None => format!("{advertise}:{port}"),
    }
}

/// The first join: retried while the manager is unreachable (it may start after its workers),
/// fatal when it refuses.
async fn join_until_answered(
    link: &ManagerLink,
    request: &JoinRequest,
) -> anyhow::Result<JoinResponse> {
    let mut warned = false;
    loop {
        match link.join(request).await {
            Ok(joined) => return Ok(joined),
            Err(LinkError::Refused(why)) => {
                return Err(anyhow!(
                    "the manager refused to let this worker join: {why}"
                ))
            }
            Err(LinkError::Unreachable(why)) => {
                if !warned {
                    tracing::warn!(error = %why, "manager not reachable yet; retrying every 2 s");
                    warned = true;
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    }
}

/// Reports every interval until stopped; on SIGTERM reports draining once more. A refused
/// heartbeat makes the worker join again; a refused join stops it.
async fn heartbeats(
    node: Arc<Node>,
    request: JoinRequest,
    interval: Duration,
    mut stopped: watch::Receiver<bool>,
    stop: watch::Sender<bool>,
    fatal: Arc<Mutex<Option<String>>>,
) {
    let mut cpu = CpuSampler::new();
    let mut unreachable = false;
    // Within one interval, so that a hung manager leaves time to reach the next before the
    // worker is judged lost; never below a second (a busy manager answers in milliseconds).
    let timeout = interval.max(Duration::from_secs(1));
    loop {
        let changed = tokio::select! {
            _ = tokio::time::sleep(interval) => false,
            _ = stopped.changed() => true,
        };
        if changed || *stopped.borrow() {
            node.draining.store(true, Ordering::Relaxed);
            let report = node.report(&mut cpu);
            let credential = node.credential.read().clone();
            if let Err(e) = node.link.heartbeat(&credential, &report, timeout).await {
                tracing::warn!(error = %e, "could not report draining");
            }
            return;
        }
        let report = node.report(&mut cpu);
        let credential = node.credential.read().clone();
        match node.link.heartbeat(&credential, &report, timeout).await {
            Ok(()) => {
                if std::mem::take(&mut unreachable) {
                    tracing::info!("manager reachable again");
                }
            }
            Err(LinkError::Unreachable(why)) => {
                if !std::mem::replace(&mut unreachable, true) {
                    tracing::warn!(error = %why, "heartbeat failed; retrying every interval");
                }
            }
            Err(LinkError::Refused(why)) => {
                tracing::warn!(error = %why, "the manager does not know this worker; joining again");
                match node.link.join(&request).await {
                    Ok(joined) => {
                        *node.credential.write() = joined.credential;
                        tracing::info!(worker = %joined.worker_id, "joined the manager again");
                    }
                    Err(LinkError::Unreachable(why)) => {
                        tracing::warn!(error = %why, "rejoin failed; retrying");
                    }
                    Err(LinkError::Refused(why)) => {
                        tracing::error!(error = %why, "the manager refused this worker; stopping");
                        *fatal.lock() = Some(format!("the manager refused this worker: {why}"));
                        stop.send_replace(true);
                        return;
                    }
                }
            }
        }
    }
}

impl Node {
    fn report(&self, cpu: &mut CpuSampler) -> Report {
        let mut models = Vec::new();
        let mut queued = 0;
        for record in self.models.lock().values() {
            let key = model_key(record);
            if self.engine.state(&key) == ModelState::Ready {
                models.push(LoadedModel {
                    name: record.name.clone(),
                    version: u32::try_from(record.version).unwrap_or(u32::MAX),
                });
            }
            queued += self.engine.queued(&key);
        }
        let latencies = self.latencies.lock().take(Instant::now());
        Report {
            state: if self.draining.load(Ordering::Relaxed) {
                Reported::Draining
            } else {
                Reported::Ready
            },
            models,
            in_flight: self.in_flight.load(Ordering::Relaxed),
            queued: u32::try_from(queued).unwrap_or(u32::MAX),
            requests_per_s: latencies.requests_per_s,
            p50_ms: latencies.p50_ms,
            p99_ms: latencies.p99_ms,
            cpu_percent: cpu.sample(),
            rss_bytes: host::rss_bytes(),
            gpus: host::gpu_usage(&self.devices),
            grpc: Some(self.grpc.clone()),
        }
    }

    /// The newest version of `name` this worker knows.
    fn newest_known(&self, name: &str) -> Option<Arc<ModelRecord>> {
        self.models
            .lock()
            .values()
            .filter(|r| r.name == name)
            .max_by_key(|r| r.version)
            .cloned()
    }

    /// A model version's record (`None`: the newest this worker knows, else the manager's
    /// default), learnt from the manager (and its file fetched) on first use.
    async fn record(&self, name: &str, version: Option<u64>) -> ApiResult<Arc<ModelRecord>> {
        let known = |node: &Node| match version {
            Some(v) => node.models.lock().get(&(name.to_owned(), v)).cloned(),
            None => node.newest_known(name),
        };
        if let Some(r) = known(self) {
            return Ok(r);
        }
        let _one = self.fetching.lock().await;
        if let Some(r) = known(self) {
            return Ok(r);
        }
        let credential = self.credential.read().clone();
        let fetched = match version {
            Some(v) => self.link.model(&credential, name, v).await,
            None => self.link.model_latest(&credential, name).await,
        };
        let record = fetched.map_err(fetch_error)?;
        let key = (record.name.clone(), record.version);
        if !self.data.model_file(&record.sha256).is_file() {
            self.make_room(record.size_bytes);
            self.download(&credential, &record).await?;
        }
        let config = ModelConfig::from_json(&record.config)?;
        self.engine.set_config(&model_key(&record), config).await?;
        let record = Arc::new(record);
        self.models.lock().insert(key, record.clone());
        Ok(record)
    }

    /// Learns a version's record (its configuration) from the manager again and hands the
    /// new configuration to the engine.
    async fn refresh(&self, stale: &ModelRecord) -> ApiResult<Arc<ModelRecord>> {
        let _one = self.fetching.lock().await;
        let credential = self.credential.read().clone();
        let record = self
            .link
            .model(&credential, &stale.name, stale.version)
            .await
            .map_err(fetch_error)?;
        let config = ModelConfig::from_json(&record.config)?;
        self.engine.set_config(&model_key(&record), config).await?;
        tracing::info!(model = %record.name, version = record.version, "model configuration updated from the manager");
        let record = Arc::new(record);
        self.models
            .lock()
            .insert((record.name.clone(), record.version), record.clone());
        Ok(record)
    }

    /// Removes least recently used cached files (none a loaded version runs from) so that
    /// `incoming` more bytes fit the budget. Their versions are forgotten: a later request
    /// fetches the file again.
    fn make_room(&self, incoming: u64) {
        let dir = self.data.models();
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return;
        };
        let in_use: Vec<String> = self
            .models
            .lock()
            .values()
            .filter(|r| self.engine.state(&model_key(r)) != ModelState::Unloaded)
            .map(|r| r.sha256.clone())
            .collect();
        let last_used = self.last_used.lock().clone();
        let files: Vec<Cached> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let sha256 = name.strip_suffix(".onnx")?.to_owned();
                Some(Cached {
                    bytes: e.metadata().ok()?.len(),
                    last_used: last_used.get(&sha256).copied(),
                    in_use: in_use.contains(&sha256),
                    sha256,
                })
            })
            .collect();
        for sha256 in evict(&files, incoming, self.cache_bytes) {
            self.models.lock().retain(|_, r| r.sha256 != sha256);
            self.last_used.lock().remove(&sha256);
            match std::fs::remove_file(self.data.model_file(&sha256)) {
                Ok(()) => tracing::info!(%sha256, "evicted a cached model file (disk budget)"),
                Err(e) => {
                    tracing::warn!(%sha256, error = %e, "could not evict a cached model file")
                }
            }
        }
    }

    /// Streams a model file from the manager into the cache, refusing it unless its SHA-256
    /// is the one the manager registered.
    async fn download(&self, credential: &str, record: &ModelRecord) -> ApiResult<()> {
        let unavailable =
            |e: LinkError| ApiError::unavailable(format!("fetching model '{}': {e}", record.name));
        let mut response = self
            .link
            .blob(credential, &record.sha256)
            .await
            .map_err(unavailable)?;
        let io = |e: std::io::Error| ApiError::internal(format!("caching model file: {e}"));
        let mut writer = BlobWriter::new(&self.data).map_err(io)?;
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| ApiError::unavailable(format!("fetching model '{}': {e}", record.name)))?
        {
            writer.write(&chunk).map_err(io)?;
        }
        let (sha256, file) = writer.finish().map_err(io)?;
        if sha256 != record.sha256 {
            tracing::error!(model = %record.name, version = record.version, expected = %record.sha256, got = %sha256, "model file from the manager failed its sha256 check; refused");
            return Err(ApiError::new(
                Kind::Upstream,
                format!(
                    "model '{}' version {}: the file from the manager does not match its sha256 (refused)",
                    record.name, record.version
                ),
            ));
        }
        persist(file, &self.data.model_file(&sha256)).map_err(io)?;
        tracing::info!(model = %record.name, version = record.version, bytes = record.size_bytes, "model file fetched and cached");
        Ok(())
    }
}

impl Node {
    /// The model version an inference request runs on, once its caller may run it: the
    /// manager, or a direct client whose token names this model (HTTP and gRPC alike).
    pub(super) async fn admit(
        &self,
        peer: Peer,
        headers: &HeaderMap,
        model: &str,
        version: Option<u64>,
    ) -> ApiResult<Arc<ModelRecord>> {
        check_direct(self, peer, headers, model)?;
        let mut record = self.record(model, version).await?;
        // The manager's configuration of this version changed since it was learnt: learn it
        // again before running.
        let wanted = headers
            .get(infergate_hop::remote::CONFIG_HEADER)
            .and_then(|v| v.to_str().ok());
        if peer.cluster
            && wanted.is_some_and(|w| w != infergate_hop::remote::config_digest(&record.config))
        {
            record = self.refresh(&record).await?;
        }
        self.last_used
            .lock()
            .insert(record.sha256.clone(), Instant::now());
        Ok(record)
    }

    /// Runs a decoded request on a model version (loaded from the cache on first use).
    pub(super) async fn execute(
        &self,
        record: &ModelRecord,
        request: Request,
    ) -> ApiResult<Inferred> {
        let outputs = self
            .engine
            .infer_with(
                &model_key(record),
                || self.data.model_file(&record.sha256),
                request.inputs,
                request.outputs,
                request.options,
            )
            .await?;
        Ok(Inferred {
            model: record.name.clone(),
            version: record.version,
            outputs,
            served: None,
            times: None,
            passage: Default::default(),
        })
    }

    /// Counts a request in flight until the guard drops.
    pub(super) fn begin(&self) -> InFlight<'_> {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(&self.in_flight)
    }

    /// An answered request's latency, for the next heartbeat's figures.
    pub(super) fn answered(&self, took: Duration) {
        self.latencies.lock().record(took);
    }

    /// Whether a model version is loaded on this worker's engine.
    pub(super) fn state(&self, record: &ModelRecord) -> ModelState {
        self.engine.state(&model_key(record))
    }

    pub(super) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }
}

/// A failed record fetch as the request's answer: the manager does not have it (404), or could
/// not be asked (503: the manager tries another worker).
fn fetch_error(e: LinkError) -> ApiError {
    match e {
        LinkError::Refused(m) => ApiError::not_found(m),
        LinkError::Unreachable(m) => ApiError::unavailable(m),
    }
}

fn router(node: Arc<Node>, max_request_bytes: usize) -> Router {
    Router::new()
        .route("/v2/health/live", get(|| async { StatusCode::OK }))
        .route("/v2/health/ready", get(ready))
        .route("/v2/models/{model}/infer", post(infer_newest))
        .route("/v2/models/{model}/versions/{version}/infer", post(infer))
        .route(infergate_hop::remote::STAGE_PATH, post(infer))
        .route(
            "/v2/repository/models/{model}/versions/{version}/load",
            post(load),
        )
        .layer(DefaultBodyLimit::max(max_request_bytes))
        .with_state(node)
}

async fn ready(State(node): State<Arc<Node>>) -> StatusCode {
    if node.is_draining() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    }
}

/// Counts a request in flight until dropped.
pub(super) struct InFlight<'a>(&'a AtomicU32);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// `POST /v2/repository/models/{m}/versions/{v}/load`, from the manager only: load a version
/// ahead of its traffic (the manager's scale-out).
async fn load(
    State(node): State<Arc<Node>>,
    Extension(peer): Extension<Peer>,
    Path((model, version)): Path<(String, String)>,
) -> Response {
    let loaded = async {
        if !peer.cluster {
            return Err(ApiError::forbidden(
                "only the manager loads models on a worker",
            ));
        }
        let record = node.record(&model, Some(parse_version(&version)?)).await?;
        node.engine
            .load(&model_key(&record), &node.data.model_file(&record.sha256))
            .await?;
        Ok::<_, ApiError>(StatusCode::OK)
    };
    loaded.await.map_err(HttpError).into_response()
}

/// A direct-mode client's request must carry a token for this model, checked offline, and keeps
/// to the rate its token grants.
fn check_direct(node: &Node, peer: Peer, headers: &HeaderMap, model: &str) -> ApiResult<()> {
    if peer.cluster {
        return Ok(());
    }
    let token = infergate_kserve::credentials::presented_key(headers).ok_or_else(|| {
        ApiError::unauthorized(
            "missing direct token: ask the manager (POST /v2/models/{model}/assign) and send it as 'Authorization: Bearer <token>'",
        )
    })?;
    let now = infergate_store::now_secs().max(0) as u64;
    let claims = node.verifier.verify(token, model, now).map_err(|e| {
        if e.is_forbidden() {
            ApiError::forbidden(e.to_string())
        } else {
            ApiError::unauthorized(e.to_string())
        }
    })?;
    if !claims.scopes.iter().any(|s| s == "infer" || s == "admin") {
        return Err(ApiError::forbidden("direct token lacks the 'infer' scope"));
    }
    if let Some(grant) = claims.rate {
        let limits = infergate_limits::Limits {
            rate: Some(infergate_limits::RateLimit {
                rps: grant.per_second,
                burst: grant.burst,
            }),
            max_concurrent: None,
        };
        node.limiter
            .check(limiter_key(&claims.sub), &limits)
            .map_err(|r| infergate_service::admission::rejection_error(&r))?;
    }
    Ok(())
}

/// The limiter's key for a token's subject (the API key's public id).
fn limiter_key(sub: &str) -> i64 {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(sub.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_le_bytes(first)
}

async fn infer_newest(
    State(node): State<Arc<Node>>,
    Extension(peer): Extension<Peer>,
    Path(model): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    run_infer(node, peer, model, None, headers, body, false).await
}

/// `POST /v2/models/{m}/versions/{v}/infer`, and on [`infergate_hop::remote::STAGE_PATH`] a pipeline's
/// model stage from the manager: its native op, then the model.
async fn infer(
    State(node): State<Arc<Node>>,
    Extension(peer): Extension<Peer>,
    Path((model, version)): Path<(String, String)>,
    uri: http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let stage = uri.path().starts_with("/cluster/");
    if stage && !peer.cluster {
        return HttpError(ApiError::forbidden(
            "only the manager sends pipeline stages to a worker",
        ))
        .into_response();
    }
    match parse_version(&version) {
        Ok(v) => run_infer(node, peer, model, Some(v), headers, body, stage).await,
        Err(e) => HttpError(e).into_response(),
    }
}

async fn run_infer(
    node: Arc<Node>,
    peer: Peer,
    model: String,
    version: Option<u64>,
    headers: HeaderMap,
    body: Bytes,
    stage: bool,
) -> Response {
    let _counted = node.begin();
    let started = Instant::now();
    let answer = async {
        let record = node.admit(peer, &headers, &model, version).await?;
        let (document, inputs) = codec::decode(&headers, &body)?;
        let mut request = Request::kserve(&document, inputs)?;
        if stage {
            let op = infergate_hop::remote::stage_ops(&document).map_err(ApiError::bad_request)?;
            request.inputs = infergate_service::infer::backend::preprocess(
                node.engine.ops().clone(),
                op,
                request.inputs,
            )
            .await?;
        }
        let inferred = node.execute(&record, request).await?;
        codec::respond(&document, inferred)
    };
    match answer.await {
        Ok(response) => {
            node.answered(started.elapsed());
            response
        }
        Err(e) => HttpError(e).into_response(),
    }
}

/// Connections a worker serves at once (the manager's pooled ones and direct clients).
const MAX_CONNECTIONS: usize = 4096;
/// Accepts mutual-TLS connections until `stopped`, then lets open requests finish (up to
/// `grace`).
async fn serve(
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    router: Router,
    mut stopped: watch::Receiver<bool>,
    node: Arc<Node>,
    grace: Duration,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    use hyper_util::server::conn::auto::Builder;
    let mut builder = Builder::new(TokioExecutor::new());
    // A direct client that never finishes its headers does not hold a connection forever.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(infergate_hop::HANDSHAKE_TIMEOUT);
    let builder = Arc::new(builder);
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            break;
        };
        let (stream, peer) = tokio::select! {
            _ = stopped.wait_for(|s| *s) => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let acceptor = acceptor.clone();
        let router = router.clone();
        let builder = builder.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let _permit = permit;
            let tls = match tokio::time::timeout(
                infergate_hop::HANDSHAKE_TIMEOUT,
                acceptor.accept(stream),
            )
            .await
            {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake refused");
                    return;
                }
                Err(_) => return,
            };
            let peer = Peer {
                cluster: tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .is_some_and(|c| !c.is_empty()),
            };
            let service =
                hyper_util::service::TowerToHyperService::new(router.layer(axum::Extension(peer)));
            let connection = builder
                .serve_connection_with_upgrades(TokioIo::new(tls), service)
                .into_owned();
            let _ = watcher.watch(connection).await;
        });
    }
    drop(listener);
    node.draining.store(true, Ordering::Relaxed);
    tracing::info!(
        in_flight = node.in_flight.load(Ordering::Relaxed),
        "draining: finishing in-flight requests"
    );
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("in-flight requests did not finish within the grace period");
    }
}
