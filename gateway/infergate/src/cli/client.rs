//! Where an offline-or-online command acts ([`Target`]), and the admin API client for `--url`.

use anyhow::{anyhow, bail, Context};
use clap::Args;
use infergate_api_types::ErrorBody;
use serde::de::DeserializeOwned;
use std::path::PathBuf;

/// Where a key command acts: a data directory (offline) or a running server (online).
#[derive(Args)]
pub(crate) struct Target {
    /// Data directory to act on offline [default: ./data when --url is absent].
    #[arg(long, env = "INFERGATE_DATA_DIR", conflicts_with = "url")]
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
