//! A worker's connection to its manager: join, heartbeats, deregistration and model files, over
//! the manager's HTTPS port with the manager's certificate checked against the join secret's
//! pin (see [`infergate_hop::tls`]). Given several managers (gateway replicas on one shared store, any of
//! which serves a worker alike), it talks to one and moves on to the next when that one does not
//! answer.

use anyhow::{anyhow, bail, Context};
use infergate_cluster::messages::{JoinRequest, JoinResponse, Report};
use infergate_hop::tls::{worker_client_config, MANAGER_NAME};
use infergate_store::models::ModelRecord;
use serde::de::DeserializeOwned;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

pub struct ManagerLink {
    /// Every manager the worker was given (gateway replicas on one shared store), in order.
    managers: Vec<Endpoint>,
    /// The manager that answered last: each call starts there.
    current: AtomicUsize,
    /// Heartbeats sent so far: which of an endpoint's connections the next one takes.
    heartbeats: AtomicUsize,
    join_secret: String,
}

/// One manager's address.
struct Endpoint {
    /// Two clients, each with a connection of its own. Calls take the first; heartbeats
    /// alternate between both, so that one stalled TCP stream (a lost segment waiting for its
    /// retransmission, with everything sent after it queued behind) delays one heartbeat and
    /// not the next ones too: on a slow, lossy link a single stream stalls for a backed-off
    /// retransmission or two, longer than the missed-heartbeat budget.
    clients: [reqwest::Client; 2],
    /// `https://manager.infergate-cluster:PORT`, mapped to the manager's address.
    base: String,
    /// Where the operator said the manager is, for messages.
    shown: String,
}

/// Why a call to the manager failed.
#[derive(Debug)]
pub enum LinkError {
    /// The manager answered and said no (bad secret, unknown or removed worker...).
    Refused(String),
    /// No answer, or a server error: try again later.
    Unreachable(String),
}

impl std::fmt::Display for LinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkError::Refused(m) => write!(f, "refused: {m}"),
            LinkError::Unreachable(m) => write!(f, "unreachable: {m}"),
        }
    }
}

impl Endpoint {
    /// `join_url` is a manager's base URL (`https://host:port`); `pin` the cluster CA's SHA-256
    /// from the join secret.
    async fn new(join_url: &str, pin: &str) -> anyhow::Result<Endpoint> {
        let url = reqwest::Url::parse(join_url)
            .with_context(|| format!("--join '{join_url}' is not a URL"))?;
        if url.scheme() != "https" {
            bail!("--join must be an https:// URL (manager and workers talk over TLS only)");
        }
        let host = url
            .host_str()
            .ok_or_else(|| anyhow!("--join '{join_url}' has no host"))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = url.port_or_known_default().unwrap_or(443);
        let addr = tokio::net::lookup_host((host.as_str(), port))
            .await
            .with_context(|| format!("resolving the manager's address {host}:{port}"))?
            .next()
            .ok_or_else(|| anyhow!("the manager's host {host} has no address"))?;
        // A connection to the manager that went silent (a partition) is given up within the
        // hop's deadline: otherwise heartbeats keep queueing on it after the heal, behind TCP's
        // retransmission backoff, and the worker stays lost long after the manager is back.
        let link = infergate_hop::link::LinkSettings::default();
        let client = || -> anyhow::Result<reqwest::Client> {
            Ok(reqwest::Client::builder()
                .use_preconfigured_tls(worker_client_config(pin)?)
                .resolve(MANAGER_NAME, addr)
                .connect_timeout(Duration::from_secs(3))
                .timeout(Duration::from_secs(30))
                .tcp_keepalive(link.probe_every())
                .tcp_user_timeout(link.silence)
                .build()?)
        };
        Ok(Endpoint {
            clients: [client()?, client()?],
            base: format!("https://{MANAGER_NAME}:{port}"),
            shown: format!("{host}:{port}"),
        })
    }

    async fn call(&self, request: reqwest::RequestBuilder) -> Result<reqwest::Response, LinkError> {
        let response = request
            .send()
            .await
            .map_err(|e| LinkError::Unreachable(format!("manager {}: {e:#}", self.shown)))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body: serde_json::Value = response.json().await.unwrap_or_default();
        let message = format!(
            "manager {} answered {status}: {}",
            self.shown,
            body["error"].as_str().unwrap_or("no error message")
        );
        if status.is_server_error() {
            Err(LinkError::Unreachable(message))
        } else {
            Err(LinkError::Refused(message))
        }
    }
}

impl ManagerLink {
    /// `join_urls` are the managers' base URLs (`https://host:port`: one manager, or gateway
    /// replicas sharing one store); `pin` the cluster CA's SHA-256 from the join secret.
    pub async fn new(
        join_urls: &[String],
        join_secret: &str,
        pin: &str,
    ) -> anyhow::Result<ManagerLink> {
        if join_urls.is_empty() {
            bail!("--join needs the manager's URL");
        }
        let mut managers = Vec::with_capacity(join_urls.len());
        for url in join_urls {
            managers.push(Endpoint::new(url.trim(), pin).await?);
        }
        Ok(ManagerLink {
            managers,
            current: AtomicUsize::new(0),
            heartbeats: AtomicUsize::new(0),
            join_secret: join_secret.to_owned(),
        })
    }

    /// The manager this worker talks to now.
    pub fn shown(&self) -> &str {
        &self.managers[self.current.load(Ordering::Relaxed) % self.managers.len()].shown
    }

    /// Sends the request `build` makes for a manager (its client, its base URL) to the current
    /// manager, and to the next ones in turn while they do not answer (unreachable, or a server
    /// error); the first that answers becomes the current one. A refusal is an answer: every
    /// replica reads the same store.
    async fn call(
        &self,
        build: impl Fn(&reqwest::Client, &str) -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, LinkError> {
        self.call_on(0, build).await
    }

    /// [`ManagerLink::call`] over each endpoint's connection `lane` (0 or 1).
    async fn call_on(
        &self,
        lane: usize,
        build: impl Fn(&reqwest::Client, &str) -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, LinkError> {
        let first = self.current.load(Ordering::Relaxed) % self.managers.len();
        let mut failures = Vec::new();
        for step in 0..self.managers.len() {
            let at = (first + step) % self.managers.len();
            let manager = &self.managers[at];
            match manager
                .call(build(&manager.clients[lane % 2], &manager.base))
                .await
            {
                Err(LinkError::Unreachable(why)) => failures.push(why),
                answered => {
                    if at != first {
                        self.current.store(at, Ordering::Relaxed);
                        tracing::warn!(from = %self.managers[first].shown, to = %manager.shown, "manager not answering; talking to the next one");
                    }
                    return answered;
                }
            }
        }
        Err(LinkError::Unreachable(failures.join("; ")))
    }

    async fn json<T: DeserializeOwned>(&self, response: reqwest::Response) -> Result<T, LinkError> {
        response.json().await.map_err(|e| {
            LinkError::Unreachable(format!("manager {}: bad answer: {e}", self.shown()))
        })
    }

    pub async fn join(&self, request: &JoinRequest) -> Result<JoinResponse, LinkError> {
        let response = self
            .call(|client, base| {
                client
                    .post(format!("{base}/cluster/v1/join"))
                    .bearer_auth(&self.join_secret)
                    .json(request)
            })
            .await?;
        self.json(response).await
    }

    /// One heartbeat; a manager that has not answered within `timeout` counts as not answering,
    /// so that the next one hears from this worker before it is judged lost.
    pub async fn heartbeat(
        &self,
        credential: &str,
        report: &Report,
        timeout: Duration,
    ) -> Result<(), LinkError> {
        let lane = self.heartbeats.fetch_add(1, Ordering::Relaxed);
        self.call_on(lane, |client, base| {
            client
                .post(format!("{base}/cluster/v1/heartbeat"))
                .bearer_auth(credential)
                .json(report)
                .timeout(timeout)
        })
        .await
        .map(drop)
    }

    pub async fn deregister(&self, credential: &str) -> Result<(), LinkError> {
        self.call(|client, base| {
            client
                .post(format!("{base}/cluster/v1/deregister"))
                .bearer_auth(credential)
        })
        .await
        .map(drop)
    }

    pub async fn model(
        &self,
        credential: &str,
        name: &str,
        version: u64,
    ) -> Result<ModelRecord, LinkError> {
        let response = self
            .call(|client, base| {
                client
                    .get(format!(
                        "{base}/cluster/v1/models/{name}/versions/{version}"
                    ))
                    .bearer_auth(credential)
            })
            .await?;
        self.json(response).await
    }

    /// The version the manager serves by default for `name`.
    pub async fn model_latest(
        &self,
        credential: &str,
        name: &str,
    ) -> Result<ModelRecord, LinkError> {
        let response = self
            .call(|client, base| {
                client
                    .get(format!("{base}/cluster/v1/models/{name}"))
                    .bearer_auth(credential)
            })
            .await?;
        self.json(response).await
    }

    /// A model file's bytes as they stream in; no overall timeout (files are large).
    pub async fn blob(
        &self,
        credential: &str,
        sha256: &str,
    ) -> Result<reqwest::Response, LinkError> {
        self.call(|client, base| {
            client
                .get(format!("{base}/cluster/v1/blobs/{sha256}"))
                .bearer_auth(credential)
                .timeout(Duration::from_secs(24 * 3600))
        })
        .await
    }
}
