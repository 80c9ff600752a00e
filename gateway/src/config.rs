//! Configuration: defaults, overridden by a TOML file, overridden by environment variables,
//! overridden by command-line flags (clap reads flags and `INFERGATE_*` variables together,
//! flags first).

use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Data directory: SQLite database, model files, TLS material, admin key.
    pub data_dir: PathBuf,
    /// Path of libonnxruntime.so.
    pub ort_lib: Option<PathBuf>,
    /// Serve plain HTTP instead of TLS (development only).
    pub insecure_http: bool,
    pub tls: TlsConfig,
    pub limits: Limits,
    pub engine: EngineSettings,
    pub plugins: PluginSettings,
    /// Log format: "text" or "json".
    pub log_format: String,
    /// The dashboard's built files [default: dashboard/dist].
    pub dashboard_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// PEM certificate chain; with `key`. Absent: a self-signed certificate in DATA/tls.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// PEM CA bundle; when set, clients must present a certificate it signed.
    pub client_ca: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest inference request body, in bytes.
    pub max_request_bytes: usize,
    /// Largest model or plugin upload, in bytes.
    pub max_upload_bytes: usize,
    /// Concurrent connections; more wait in the kernel's accept queue.
    pub max_connections: usize,
    /// Seconds allowed for the TLS handshake and for a request's headers.
    pub header_timeout_s: u64,
    /// Seconds an idle keep-alive connection stays open.
    pub idle_timeout_s: u64,
    /// Seconds in-flight requests get to finish on shutdown.
    pub shutdown_grace_s: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineSettings {
    /// ORT intra-op threads per instance.
    pub intra_threads: usize,
    /// Execution instances per model version.
    pub instances: usize,
    /// Queued requests per model version before 503 (unless its config sets one).
    pub max_queue_size: usize,
    /// Host memory all loaded model instances together may use, in bytes (estimated as the
    /// model file's size × 2 per instance); loading beyond it is refused with 503. None: no cap.
    pub host_memory_budget_bytes: Option<u64>,
}

/// Limits every plugin call runs under (see plugins/README.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PluginSettings {
    /// Largest plugin upload, in bytes.
    pub max_upload_bytes: usize,
    /// Wall-clock deadline of one plugin call, in milliseconds.
    pub deadline_ms: u64,
    /// Linear memory one plugin instance may grow to, in MiB.
    pub memory_mib: usize,
    /// Largest output one call may return, in MiB.
    pub max_output_mib: usize,
}

impl Default for PluginSettings {
    fn default() -> Self {
        PluginSettings {
            max_upload_bytes: 32 << 20,
            deadline_ms: 2000,
            memory_mib: 256,
            max_output_mib: 64,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8443)),
            data_dir: PathBuf::from("./data"),
            ort_lib: None,
            insecure_http: false,
            tls: TlsConfig::default(),
            limits: Limits::default(),
            engine: EngineSettings::default(),
            plugins: PluginSettings::default(),
            log_format: "text".into(),
            dashboard_dir: None,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_bytes: 64 << 20,
            max_upload_bytes: 1 << 30,
            max_connections: 4096,
            header_timeout_s: 10,
            idle_timeout_s: 120,
            shutdown_grace_s: 30,
        }
    }
}

impl Default for EngineSettings {
    fn default() -> Self {
        EngineSettings {
            intra_threads: 1,
            instances: 1,
            max_queue_size: 1024,
            host_memory_budget_bytes: None,
        }
    }
}

impl Config {
    /// Reads a TOML file over the defaults.
    pub fn from_file(path: &Path) -> Result<Config, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading config {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| format!("config {}: {e}", path.display()))
    }

    /// The ONNX Runtime library: configured path, else `ORT_DYLIB_PATH`.
    pub fn ort_library(&self) -> Result<PathBuf, String> {
        self.ort_lib
            .clone()
            .or_else(|| std::env::var_os("ORT_DYLIB_PATH").map(PathBuf::from))
            .ok_or_else(|| "no ONNX Runtime library: pass --ort-lib or set ORT_DYLIB_PATH (scripts/setup.sh installs one)".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_overrides_defaults_and_rejects_unknown_keys() {
        let c: Config =
            toml::from_str("listen = \"0.0.0.0:9000\"\n[limits]\nmax_request_bytes = 10\n")
                .unwrap();
        assert_eq!(c.listen.port(), 9000);
        assert_eq!(c.limits.max_request_bytes, 10);
        assert_eq!(c.limits.max_connections, 4096);
        assert!(toml::from_str::<Config>("lisen = \"x\"").is_err());
    }
}
