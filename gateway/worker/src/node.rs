//! What the worker's request handlers and heartbeats share: its engine, model files, link to
//! the manager and counters; fetching a version's record and file; admitting a request (the
//! manager, or a direct-mode client with a token) and running it.

use super::cache::{evict, Cached};
use super::link::{LinkError, ManagerLink};
use super::window::LatencyWindow;
use http::HeaderMap;
use infergate_cluster::direct::Verifier;
use infergate_cluster::liveness::Reported;
use infergate_cluster::messages::{LoadedModel, Report};
use infergate_engine::{Engine, ModelConfig, ModelState};
use infergate_service::catalog::model_key;
use infergate_service::error::{ApiError, ApiResult, Kind};
use infergate_service::host::{self, CpuSampler};
use infergate_service::infer::{Inferred, Request};
use infergate_store::files::{persist, BlobWriter};
use infergate_store::models::ModelRecord;
use infergate_store::DataDir;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the worker's request handlers and heartbeat share.
pub(crate) struct Node {
    pub(crate) engine: Arc<Engine>,
    pub(crate) data: DataDir,
    pub(crate) link: ManagerLink,
    pub(crate) credential: RwLock<String>,
    /// Model versions learnt from the manager.
    pub(crate) models: Mutex<HashMap<(String, u64), Arc<ModelRecord>>>,
    /// One fetch at a time: the first requests for a new version wait for the same download.
    pub(crate) fetching: tokio::sync::Mutex<()>,
    pub(crate) in_flight: AtomicU32,
    pub(crate) draining: AtomicBool,
    /// Checks direct-mode tokens offline with the manager's public key.
    pub(crate) verifier: Verifier,
    /// When a request last used each cached file (by sha256), and the cache's budget.
    pub(crate) last_used: Mutex<HashMap<String, Instant>>,
    pub(crate) cache_bytes: u64,
    /// Latencies of answered requests since the last heartbeat.
    pub(crate) latencies: Mutex<LatencyWindow>,
    /// Direct clients' rate limits, as their tokens grant (the key's limit on the manager).
    pub(crate) limiter: infergate_limits::Limiter,
    /// What this host reported when it joined (its GPUs are asked for memory in each report).
    pub(crate) devices: infergate_cluster::messages::Devices,
    /// `host:port` of the gRPC listener as clients reach it (reported in each heartbeat).
    pub(crate) grpc: String,
}

/// Who is on the other end of a connection: the manager (a cluster certificate) or a
/// direct-mode client (none; a token per request).
#[derive(Clone, Copy)]
pub(crate) struct Peer {
    pub(crate) cluster: bool,
}

impl Node {
    pub(crate) fn report(&self, cpu: &mut CpuSampler) -> Report {
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
            answered_total: latencies.answered_total,
            cpu_percent: cpu.sample(),
            rss_bytes: host::rss_bytes(),
            gpus: host::gpu_usage(&self.devices),
            grpc: Some(self.grpc.clone()),
        }
    }

    /// The newest version of `name` this worker knows.
    pub(crate) fn newest_known(&self, name: &str) -> Option<Arc<ModelRecord>> {
        self.models
            .lock()
            .values()
            .filter(|r| r.name == name)
            .max_by_key(|r| r.version)
            .cloned()
    }

    /// A model version's record (`None`: the newest this worker knows, else the manager's
    /// default), learnt from the manager (and its file fetched) on first use.
    pub(crate) async fn record(
        &self,
        name: &str,
        version: Option<u64>,
    ) -> ApiResult<Arc<ModelRecord>> {
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
    pub(crate) async fn refresh(&self, stale: &ModelRecord) -> ApiResult<Arc<ModelRecord>> {
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
    pub(crate) fn make_room(&self, incoming: u64) {
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
    pub(crate) async fn download(&self, credential: &str, record: &ModelRecord) -> ApiResult<()> {
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
    pub(crate) async fn admit(
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
    pub(crate) async fn execute(
        &self,
        record: &ModelRecord,
        request: Request,
    ) -> ApiResult<Inferred> {
        let key = model_key(record);
        let path = || self.data.model_file(&record.sha256);
        // A request of a sequence: the engine carries its state (a version without sequence
        // batching ignores the flags).
        let outputs = match request.sequence {
            Some(sequence) => {
                self.engine
                    .infer_in_sequence(
                        &key,
                        path,
                        request.inputs,
                        request.outputs,
                        request.options,
                        sequence,
                    )
                    .await?
            }
            None => {
                self.engine
                    .infer_with(&key, path, request.inputs, request.outputs, request.options)
                    .await?
            }
        };
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
    pub(crate) fn begin(&self) -> InFlight<'_> {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(&self.in_flight)
    }

    /// An answered request's latency, for the next heartbeat's figures.
    pub(crate) fn answered(&self, took: Duration) {
        self.latencies.lock().record(took);
    }

    /// Whether a model version is loaded on this worker's engine.
    pub(crate) fn state(&self, record: &ModelRecord) -> ModelState {
        self.engine.state(&model_key(record))
    }

    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }
}

/// A failed record fetch as the request's answer: the manager does not have it (404), or could
/// not be asked (503: the manager tries another worker).
pub(crate) fn fetch_error(e: LinkError) -> ApiError {
    match e {
        LinkError::Refused(m) => ApiError::not_found(m),
        LinkError::Unreachable(m) => ApiError::unavailable(m),
    }
}

/// Counts a request in flight until dropped.
pub(crate) struct InFlight<'a>(&'a AtomicU32);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A direct-mode client's request must carry a token for this model, checked offline, and keeps
/// to the rate its token grants.
pub(crate) fn check_direct(
    node: &Node,
    peer: Peer,
    headers: &HeaderMap,
    model: &str,
) -> ApiResult<()> {
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
pub(crate) fn limiter_key(sub: &str) -> i64 {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(sub.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_le_bytes(first)
}
