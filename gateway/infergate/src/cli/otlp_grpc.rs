//! The OTLP/gRPC span exporter: opentelemetry-otlp's tonic client on a Tokio runtime of its own.
//! The batch processor exports from a plain thread, and tonic's channel needs a runtime for its
//! connection, its buffer task and its timers: each batch is sent by a task on this runtime's
//! one worker thread while the processor's thread waits for the task's answer, at most `timeout`.

use opentelemetry_otlp::tonic_types::transport::{Certificate, ClientTlsConfig};
use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use opentelemetry_sdk::Resource;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug)]
pub struct GrpcExporter {
    inner: Arc<opentelemetry_otlp::SpanExporter>,
    /// Taken at drop, to stop it without waiting on a task stuck on a dead collector.
    runtime: Option<tokio::runtime::Runtime>,
    timeout: Duration,
}

/// The exporter to the collector's gRPC address (`http://` or `https://HOST:4317`).
pub fn exporter(endpoint: &str, timeout: Duration) -> anyhow::Result<GrpcExporter> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("otlp-grpc")
        .enable_all()
        .build()?;
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .with_timeout(timeout);
    if endpoint.starts_with("https://") {
        builder = builder.with_tls_config(ClientTlsConfig::new().ca_certificate(roots()?));
    }
    // The channel spawns its buffer task where it is built.
    let inner = {
        let _entered = runtime.enter();
        builder.build()?
    };
    Ok(GrpcExporter {
        inner: Arc::new(inner),
        runtime: Some(runtime),
        timeout,
    })
}

/// The roots an `https://` collector's certificate is verified against: the PEM file
/// `SSL_CERT_FILE` names (as OpenSSL reads it), else the system's bundle.
fn roots() -> anyhow::Result<Certificate> {
    const SYSTEM: &[&str] = &[
        "/etc/ssl/certs/ca-certificates.crt",
        "/etc/pki/tls/certs/ca-bundle.crt",
        "/etc/ssl/cert.pem",
    ];
    let path = match std::env::var_os("SSL_CERT_FILE") {
        Some(path) => std::path::PathBuf::from(path),
        None => SYSTEM
            .iter()
            .map(std::path::PathBuf::from)
            .find(|p| p.is_file())
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "no certificate bundle to verify the OTLP collector with: set SSL_CERT_FILE \
                     to a PEM file (none of {SYSTEM:?} exists)"
                )
            })?,
    };
    let pem = std::fs::read(&path).map_err(|e| {
        anyhow::anyhow!(
            "the certificates for the OTLP collector, {}: {e}",
            path.display()
        )
    })?;
    Ok(Certificate::from_pem(pem))
}

impl SpanExporter for GrpcExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let Some(runtime) = &self.runtime else {
            return Err(OTelSdkError::AlreadyShutdown);
        };
        let inner = Arc::clone(&self.inner);
        let timeout = self.timeout;
        let sent =
            runtime.spawn(async move { tokio::time::timeout(timeout, inner.export(batch)).await });
        match sent.await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(OTelSdkError::Timeout(timeout)),
            Err(e) => Err(OTelSdkError::InternalFailure(format!(
                "the OTLP/gRPC export task failed: {e}"
            ))),
        }
    }

    fn shutdown_with_timeout(&mut self, timeout: Duration) -> OTelSdkResult {
        // A batch still in flight past its timeout holds the other handle: nothing to close.
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => inner.shutdown_with_timeout(timeout),
            None => Ok(()),
        }
    }

    fn set_resource(&mut self, resource: &Resource) {
        // Called once, when the provider is built, before any export holds a handle.
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.set_resource(resource);
        }
    }
}

impl Drop for GrpcExporter {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
