//! Where an offline-or-online command acts ([`Target`]), and the admin API client for `--url`.

use anyhow::{anyhow, bail, Context};
use clap::parser::ValueSource;
use clap::{ArgMatches, Args};
use infergate_api_types::ErrorBody;
use serde::de::DeserializeOwned;
use std::path::PathBuf;

/// Where a key or worker command acts: a data directory (offline) or a running server
/// (online). Given both, a flag wins over an environment variable ([`Target::settle`]).
#[derive(Args)]
pub(crate) struct Target {
    /// Data directory to act on offline [default: ./data when --url is absent].
    #[arg(long, env = "INFERGATE_DATA_DIR")]
    pub(crate) data_dir: Option<PathBuf>,
    /// Base URL of a running gateway (e.g. https://127.0.0.1:8443) to act on through the admin API.
    #[arg(long, env = "INFERGATE_URL")]
    pub(crate) url: Option<String>,
    /// Admin API key for --url.
    #[arg(long, env = "INFERGATE_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// PEM CA certificate to trust for --url (e.g. DATA_DIR/tls/cert.pem for the self-signed one).
    #[arg(long)]
    ca_cert: Option<PathBuf>,
}

impl Target {
    /// Settles a data directory and a URL given together, from `matches` (the command's own):
    /// the one given as a flag wins over one from the environment (`--data-dir` with
    /// `INFERGATE_URL` exported acts on the directory); two flags, or two variables, are an
    /// error, since either could be meant.
    pub(crate) fn settle(&mut self, matches: &ArgMatches) -> anyhow::Result<()> {
        if self.data_dir.is_none() || self.url.is_none() {
            return Ok(());
        }
        let flag = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
        match (flag("data_dir"), flag("url")) {
            (true, false) => self.url = None,
            (false, true) => self.data_dir = None,
            (true, true) => bail!("--data-dir and --url exclude each other: give one"),
            (false, false) => bail!(
                "INFERGATE_DATA_DIR and INFERGATE_URL are both set: pass --data-dir or --url to choose"
            ),
        }
        Ok(())
    }
}

/// Calls the admin API of a running gateway and reads its answer as the route's answer type
/// (`infergate-api-types`).
pub(crate) fn online<T: DeserializeOwned>(
    target: &Target,
    method: reqwest::Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> anyhow::Result<T> {
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
        let text = response
            .text()
            .await
            .with_context(|| format!("reading the answer of {url}"))?;
        if !status.is_success() {
            let message = serde_json::from_str::<ErrorBody>(&text)
                .map_or_else(|_| "no error message".to_owned(), |b| b.error);
            bail!("{url}: {status}: {message}");
        }
        serde_json::from_str(&text)
            .with_context(|| format!("{url} answered what this CLI cannot read (another version?)"))
    })
}
