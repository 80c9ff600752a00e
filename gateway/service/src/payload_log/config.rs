//! `[payload_log]`: the sinks an operator defines, by name, and what is redacted before an
//! entry leaves the process. Models, pipelines and keys name a sink in their settings; they
//! cannot point anywhere else.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Names that are redacted whatever the configuration adds: an input, a parameter or any JSON
/// field whose name contains one of these (case-insensitive) is logged as `"[redacted]"`.
pub const ALWAYS_REDACTED: &[&str] = &[
    "secret",
    "password",
    "passwd",
    "api_key",
    "apikey",
    "authorization",
    "credential",
    "private_key",
    "access_token",
    "auth_token",
];

#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PayloadLogConfig {
    /// The sinks models, pipelines and keys may log to, by name: `[payload_log.sinks.audit]
    /// file = { path = "..." }` or `http = { url = "..." }`. An admin may define more, or
    /// replace or remove these, at run time (`/api/payload-log/sinks`): such a change is kept
    /// in the store and wins over this file's sink of that name, at every start and on every
    /// replica.
    pub sinks: BTreeMap<String, SinkConfig>,
    /// More names to redact, beside the built-in ones (`secret`, `password`, `api_key`,
    /// `authorization`, `credential`, `access_token`, ...): an input, parameter or JSON field
    /// whose name contains one (case-insensitive) is logged as `"[redacted]"`.
    pub redact: Vec<String>,
    /// Bytes of tensor data one entry holds in full; tensors past it are summarised by name,
    /// datatype, shape, size and SHA-256.
    pub max_entry_bytes: usize,
    /// How a tensor's elements are written: `json` (KServe's JSON `data` array, readable as is)
    /// or `base64` (`data_base64`: the little-endian bytes, as KServe's binary extension
    /// carries them; a BYTES element with its 4-byte length first), which costs a fraction of
    /// writing every number as decimal text.
    pub tensor_data: TensorDataForm,
}

/// How an entry writes tensor elements.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum TensorDataForm {
    /// KServe's JSON `data` array.
    #[default]
    Json,
    /// `data_base64`: the tensor's bytes as KServe's binary extension carries them.
    Base64,
}

impl Default for PayloadLogConfig {
    fn default() -> Self {
        PayloadLogConfig {
            sinks: BTreeMap::new(),
            redact: Vec::new(),
            max_entry_bytes: 64 * 1024,
            tensor_data: TensorDataForm::Json,
        }
    }
}

/// One sink: a JSON Lines file or an HTTP endpoint receiving CloudEvents.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum SinkConfig {
    File(FileSink),
    Http(HttpSink),
}

/// A JSON Lines file (mode 0600), rotated by size: `path` becomes `path.1`, `path.1` becomes
/// `path.2`, ..., and the oldest past `keep` is deleted.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileSink {
    pub path: PathBuf,
    /// Bytes the current file grows to before it is rotated.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u64,
    /// Rotated files kept beside the current one (at most 1000).
    #[serde(default = "default_keep")]
    pub keep: u32,
    /// Entries waiting to be written; past it entries are dropped and counted (at most
    /// 1,000,000: the queue's slots are allocated when the sink starts).
    #[serde(default = "default_queue")]
    pub queue: usize,
}

/// An HTTP endpoint receiving CloudEvents in batches (`application/cloudevents-batch+json`),
/// retried with backoff; entries that do not fit its queue are dropped and counted.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpSink {
    /// `http://` or `https://` (with `ca`).
    pub url: String,
    /// A PEM file of the certificates that sign the endpoint's (https only).
    pub ca: Option<PathBuf>,
    /// Entries per POST at most (at most 10,000).
    #[serde(default = "default_batch")]
    pub batch: usize,
    /// Entries waiting to be sent; past it entries are dropped and counted (at most
    /// 1,000,000).
    #[serde(default = "default_queue")]
    pub queue: usize,
    /// Milliseconds one POST may take.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Attempts after the first for a batch the endpoint refused or did not answer (backoff
    /// 200 ms, doubling; at most 16); then the batch is counted as failed.
    #[serde(default = "default_retries")]
    pub retries: u32,
}

fn default_max_bytes() -> u64 {
    64 * 1024 * 1024
}
fn default_keep() -> u32 {
    5
}
fn default_queue() -> usize {
    10_000
}
fn default_batch() -> usize {
    100
}
fn default_timeout_ms() -> u64 {
    5_000
}
fn default_retries() -> u32 {
    3
}

impl PayloadLogConfig {
    /// Checks what serde cannot: names, sizes, URLs, and that no two sinks write one file.
    pub fn validate(&self) -> Result<(), String> {
        for (name, sink) in &self.sinks {
            check_sink_name(name).map_err(|e| format!("[payload_log.sinks] {e}"))?;
            sink.validate()
                .map_err(|e| format!("[payload_log.sinks.{name}] {e}"))?;
            if let Some(other) = sink.same_file(self.sinks.iter().filter(|(n, _)| *n != name)) {
                return Err(format!(
                    "[payload_log.sinks.{name}] file.path: sink '{other}' writes to that file"
                ));
            }
        }
        Ok(())
    }
}

/// `json` as a `T`; the error names the field where it went wrong (`file.max_bytes: ...`).
pub fn from_json<T: serde::de::DeserializeOwned>(json: &[u8]) -> Result<T, String> {
    let mut de = serde_json::Deserializer::from_slice(json);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            e.inner().to_string()
        } else {
            format!("{path}: {}", e.inner())
        }
    })
}

/// A queue's slots are allocated when the sink starts.
const MAX_QUEUE: usize = 1_000_000;
const MAX_BATCH: usize = 10_000;
const MAX_KEEP: u32 = 1_000;
/// Past it the doubling backoff would wait for hours.
const MAX_RETRIES: u32 = 16;

/// A sink's name: letters, digits, '-', '_' and '.'.
pub fn check_sink_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(format!(
            "'{name}': a sink's name is 1 to 64 letters, digits, '-', '_' and '.'"
        ));
    }
    Ok(())
}

impl SinkConfig {
    /// A sink as JSON, in the shape of the configuration file's (`{"file": {"path": ...}}` or
    /// `{"http": {"url": ...}}`), checked; the error names the field.
    pub fn parse(json: &[u8]) -> Result<SinkConfig, String> {
        let sink: SinkConfig = from_json(json)?;
        sink.validate()?;
        Ok(sink)
    }

    /// `file` or `http`.
    pub fn kind(&self) -> &'static str {
        match self {
            SinkConfig::File(_) => "file",
            SinkConfig::Http(_) => "http",
        }
    }

    /// Where entries go: the file's path or the endpoint's URL.
    pub fn target(&self) -> String {
        match self {
            SinkConfig::File(f) => f.path.display().to_string(),
            SinkConfig::Http(h) => h.url.clone(),
        }
    }

    /// The name of one of `others` that writes to this sink's file, if any.
    pub fn same_file<'a>(
        &self,
        mut others: impl Iterator<Item = (&'a String, &'a SinkConfig)>,
    ) -> Option<&'a String> {
        let SinkConfig::File(mine) = self else {
            return None;
        };
        others
            .find(|(_, other)| matches!(other, SinkConfig::File(f) if f.path == mine.path))
            .map(|(name, _)| name)
    }

    /// Checks what serde cannot; the error names the field (`file.max_bytes: ...`).
    pub fn validate(&self) -> Result<(), String> {
        match self {
            SinkConfig::File(f) => {
                if f.path.as_os_str().is_empty() {
                    return Err("file.path: a file's path".into());
                }
                if f.max_bytes < 4096 {
                    return Err("file.max_bytes: at least 4096".into());
                }
                if f.queue == 0 || f.queue > MAX_QUEUE {
                    return Err(format!("file.queue: 1 to {MAX_QUEUE}"));
                }
                if f.keep > MAX_KEEP {
                    return Err(format!("file.keep: at most {MAX_KEEP}"));
                }
            }
            SinkConfig::Http(h) => {
                if !(h.url.starts_with("http://") || h.url.starts_with("https://")) {
                    return Err(format!("http.url: http:// or https://, got '{}'", h.url));
                }
                if h.url.starts_with("https://") && h.ca.is_none() {
                    return Err("http.ca: an https endpoint needs `ca`".into());
                }
                if h.batch == 0 || h.queue == 0 || h.timeout_ms == 0 {
                    return Err("http: batch, queue and timeout_ms are at least 1".into());
                }
                if h.queue > MAX_QUEUE {
                    return Err(format!("http.queue: at most {MAX_QUEUE}"));
                }
                if h.batch > MAX_BATCH {
                    return Err(format!("http.batch: at most {MAX_BATCH}"));
                }
                if h.retries > MAX_RETRIES {
                    return Err(format!("http.retries: at most {MAX_RETRIES}"));
                }
            }
        }
        Ok(())
    }
}
