//! A sink's queue and its writer. Requests only ever `try_send` an entry, as it was captured
//! (tensors unencoded): the writer thread renders it (JSON, summaries, redaction) and writes
//! it, so neither encoding nor a slow disk or endpoint ever takes a request's worker thread.
//! When the writer cannot keep up the entry is dropped and counted, and no request waits.
//! Each sink has one writer thread of its own (file writes block; the HTTP writer runs a small
//! runtime). The writer ends once every sender of its queue is gone and it has written what
//! was queued, so a sink replaced or removed at run time loses nothing it had taken.

use super::config::{FileSink, HttpSink, SinkConfig};
use super::entry::{Captured, Renderer};
use parking_lot::Mutex;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A sink's counts, read by the metrics at each scrape.
#[derive(Debug, Default)]
pub struct SinkCounts {
    /// Entries the sink took (written to the file, accepted by the endpoint).
    pub written: AtomicU64,
    /// Entries dropped because the queue was full.
    pub dropped: AtomicU64,
    /// Entries lost to the sink's errors (a write that failed, a batch refused after retries).
    pub failed: AtomicU64,
}

/// A sink as requests see it.
pub struct Sink {
    queue: SyncSender<Captured>,
    pub counts: Arc<SinkCounts>,
    pub config: SinkConfig,
    /// Where it was defined: `config` (the server's file) or `api` (at run time).
    pub origin: &'static str,
    writer: Mutex<Option<JoinHandle<()>>>,
}

/// A writer opened and ready to take a sink's queue.
pub enum Writer {
    File(FileWriter),
    Http(Poster),
}

impl Writer {
    /// Opens the file (creating its folder) or builds the HTTP client, so that a sink that
    /// cannot write is refused before it takes entries.
    pub fn open(name: &str, config: &SinkConfig) -> Result<Writer, String> {
        match config {
            SinkConfig::File(file) => FileWriter::open(file.clone())
                .map(Writer::File)
                .map_err(|e| format!("[payload_log.sinks.{name}] {}: {e}", file.path.display())),
            SinkConfig::Http(http) => Poster::new(http.clone())
                .map(Writer::Http)
                .map_err(|e| format!("[payload_log.sinks.{name}] {e}")),
        }
    }
}

impl Sink {
    /// A sink for `config` whose queue nobody reads yet: [`Sink::run`] hands it to a writer.
    /// `counts` carry over from the sink it replaces, so the metric keeps counting up.
    pub fn queued(
        config: SinkConfig,
        origin: &'static str,
        counts: Arc<SinkCounts>,
    ) -> (Sink, Receiver<Captured>) {
        let bound = match &config {
            SinkConfig::File(f) => f.queue,
            SinkConfig::Http(h) => h.queue,
        };
        let (queue, entries) = sync_channel(bound);
        let sink = Sink {
            queue,
            counts,
            config,
            origin,
            writer: Mutex::new(None),
        };
        (sink, entries)
    }

    /// Starts `writer` on the sink's queue, on a thread of its own named for the sink.
    pub fn run(
        &self,
        name: &str,
        writer: Writer,
        entries: Receiver<Captured>,
        renderer: Arc<Renderer>,
    ) -> Result<(), String> {
        let counts = self.counts.clone();
        let sink = name.to_owned();
        let handle = std::thread::Builder::new()
            .name(format!("payload-log-{name}"))
            .spawn(move || match writer {
                Writer::File(mut file) => file.run(&sink, entries, &renderer, &counts),
                Writer::Http(poster) => poster.run(&sink, entries, &renderer, &counts),
            })
            .map_err(|e| format!("payload log writer: {e}"))?;
        *self.writer.lock() = Some(handle);
        Ok(())
    }

    /// Starts the writer of `config`, named `name` in logs.
    pub fn start(
        name: &str,
        config: &SinkConfig,
        origin: &'static str,
        renderer: Arc<Renderer>,
    ) -> Result<Sink, String> {
        let writer = Writer::open(name, config)?;
        let (sink, entries) = Sink::queued(config.clone(), origin, Arc::default());
        sink.run(name, writer, entries, renderer)?;
        Ok(sink)
    }

    /// The writer's thread: it ends once every handle of this sink is dropped and it has
    /// written what was queued.
    pub fn take_writer(&self) -> Option<JoinHandle<()>> {
        self.writer.lock().take()
    }

    /// Hands `entry` to the writer, or drops it when the queue is full.
    pub fn send(&self, entry: Captured) {
        match self.queue.try_send(entry) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.counts.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// A JSON Lines file, rotated by size.
pub struct FileWriter {
    config: FileSink,
    file: std::io::BufWriter<std::fs::File>,
    size: u64,
}

fn open_private(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

impl FileWriter {
    fn open(config: FileSink) -> std::io::Result<FileWriter> {
        if let Some(dir) = config.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = open_private(&config.path)?;
        let size = file.metadata()?.len();
        Ok(FileWriter {
            config,
            file: std::io::BufWriter::new(file),
            size,
        })
    }

    fn rotated(&self, n: u32) -> std::path::PathBuf {
        let mut name = self.config.path.as_os_str().to_owned();
        name.push(format!(".{n}"));
        name.into()
    }

    /// `path` becomes `path.1`, each `path.N` becomes `path.N+1`, the one past `keep` goes.
    fn rotate(&mut self) -> std::io::Result<()> {
        self.file.flush()?;
        let keep = self.config.keep;
        let _ = std::fs::remove_file(self.rotated(keep + 1));
        for n in (1..=keep).rev() {
            let from = self.rotated(n);
            if from.exists() {
                if n == keep {
                    std::fs::remove_file(&from)?;
                } else {
                    std::fs::rename(&from, self.rotated(n + 1))?;
                }
            }
        }
        if keep > 0 {
            std::fs::rename(&self.config.path, self.rotated(1))?;
        } else {
            std::fs::remove_file(&self.config.path)?;
        }
        self.file = std::io::BufWriter::new(open_private(&self.config.path)?);
        self.size = 0;
        Ok(())
    }

    fn write(&mut self, entry: &str) -> std::io::Result<()> {
        let len = entry.len() as u64 + 1;
        if self.size > 0 && self.size + len > self.config.max_bytes {
            self.rotate()?;
        }
        self.file.write_all(entry.as_bytes())?;
        self.file.write_all(b"\n")?;
        self.size += len;
        Ok(())
    }

    fn run(
        &mut self,
        sink: &str,
        entries: Receiver<Captured>,
        renderer: &Renderer,
        counts: &SinkCounts,
    ) {
        // Flushed when the queue runs dry, so an entry reaches the file within moments of its
        // request while a busy stream of entries is written in large blocks.
        loop {
            let entry = match entries.recv_timeout(Duration::from_millis(200)) {
                Ok(entry) => entry,
                Err(RecvTimeoutError::Timeout) => {
                    if let Err(e) = self.file.flush() {
                        tracing::warn!(sink, error = %e, "payload log: flushing failed");
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            };
            match self.write(&renderer.render(entry)) {
                Ok(()) => counts.written.fetch_add(1, Ordering::Relaxed),
                Err(e) => {
                    tracing::warn!(sink, error = %e, "payload log: an entry was not written");
                    counts.failed.fetch_add(1, Ordering::Relaxed)
                }
            };
        }
        let _ = self.file.flush();
    }
}

/// An HTTP endpoint receiving CloudEvents batches.
pub struct Poster {
    config: HttpSink,
    client: reqwest::Client,
    source: String,
}

impl Poster {
    fn new(config: HttpSink) -> Result<Poster, String> {
        let mut builder =
            reqwest::Client::builder().timeout(Duration::from_millis(config.timeout_ms));
        if let Some(ca) = &config.ca {
            let pem = std::fs::read(ca).map_err(|e| format!("http.ca {}: {e}", ca.display()))?;
            for cert in reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| format!("http.ca {}: {e}", ca.display()))?
            {
                builder = builder.add_root_certificate(cert);
            }
        }
        let client = builder.build().map_err(|e| format!("http client: {e}"))?;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_else(|_| "unknown".into());
        Ok(Poster {
            config,
            client,
            source: format!("infergate://{host}"),
        })
    }

    /// One CloudEvent (structured, JSON) per entry.
    fn event(&self, entry: String) -> String {
        let mut id = [0u8; 16];
        rand::Rng::fill(&mut rand::rng(), &mut id);
        format!(
            r#"{{"specversion":"1.0","id":"{}","source":"{}","type":"io.infergate.payload.v1","datacontenttype":"application/json","time":"{}","data":{entry}}}"#,
            hex::encode(id),
            self.source,
            super::entry::now_rfc3339()
        )
    }

    fn run(
        &self,
        sink: &str,
        entries: Receiver<Captured>,
        renderer: &Renderer,
        counts: &SinkCounts,
    ) {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(e) => {
                tracing::error!(sink, error = %e, "payload log: no runtime for the HTTP sink");
                return;
            }
        };
        // A batch: the first entry waits as long as it takes; the rest of the batch comes
        // within 200 ms of it.
        while let Ok(first) = entries.recv() {
            let mut batch = vec![self.event(renderer.render(first))];
            let until = Instant::now() + Duration::from_millis(200);
            while batch.len() < self.config.batch {
                let left = until.saturating_duration_since(Instant::now());
                match entries.recv_timeout(left) {
                    Ok(entry) => batch.push(self.event(renderer.render(entry))),
                    Err(_) => break,
                }
            }
            let n = batch.len() as u64;
            let body = format!("[{}]", batch.join(","));
            match runtime.block_on(self.post(body)) {
                Ok(()) => counts.written.fetch_add(n, Ordering::Relaxed),
                Err(e) => {
                    tracing::warn!(sink, entries = n, error = %e, "payload log: a batch was lost");
                    counts.failed.fetch_add(n, Ordering::Relaxed)
                }
            };
        }
    }

    async fn post(&self, body: String) -> Result<(), String> {
        let mut backoff = Duration::from_millis(200);
        let mut attempt = 0;
        loop {
            let answer = self
                .client
                .post(&self.config.url)
                .header(
                    reqwest::header::CONTENT_TYPE,
                    "application/cloudevents-batch+json",
                )
                .body(body.clone())
                .send()
                .await;
            let error = match answer {
                Ok(r) if r.status().is_success() => return Ok(()),
                // A refusal of the batch itself will not change on a retry.
                Ok(r) if r.status().is_client_error() && r.status().as_u16() != 429 => {
                    return Err(format!("the endpoint answered {}", r.status()))
                }
                Ok(r) => format!("the endpoint answered {}", r.status()),
                Err(e) => e.to_string(),
            };
            if attempt >= self.config.retries {
                return Err(format!("{error} (after {} attempts)", attempt + 1));
            }
            attempt += 1;
            tokio::time::sleep(backoff).await;
            backoff *= 2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_rotates_by_size_and_keeps_its_count() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("log").join("payload.jsonl");
        let config = FileSink {
            path: path.clone(),
            max_bytes: 100,
            keep: 2,
            queue: 10,
        };
        let mut writer = FileWriter::open(config).expect("opened");
        let entry = format!("{{\"n\":\"{}\"}}", "x".repeat(40));
        for _ in 0..9 {
            writer.write(&entry).expect("written");
        }
        writer.file.flush().expect("flushed");
        // 48 bytes a line: two per file; nine lines make five files, of which three remain.
        let read =
            |p: &std::path::Path| std::fs::read_to_string(p).expect("a file").lines().count();
        assert_eq!(read(&path), 1);
        assert_eq!(read(&dir.path().join("log/payload.jsonl.1")), 2);
        assert_eq!(read(&dir.path().join("log/payload.jsonl.2")), 2);
        assert!(!dir.path().join("log/payload.jsonl.3").exists());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
