//! Starts the real `infergate` binary on a random loopback port with its own data directory and
//! gives tests an HTTPS client that trusts its self-signed certificate.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_infergate");

/// A model from the setup step's directory; tests need `scripts/setup.sh` to have run.
pub fn model(file: &str) -> PathBuf {
    let dir = std::env::var("INFERGATE_MODELS")
        .expect("INFERGATE_MODELS is unset: run scripts/setup.sh and `source .cache/env.sh`");
    let path = Path::new(&dir).join(file);
    assert!(
        path.exists(),
        "{} missing: run scripts/setup.sh",
        path.display()
    );
    path
}

/// Writes `data/sinks.toml`, a configuration file defining payload log sink `sink` as a JSON
/// Lines file `data/FILE`, and returns its path (for `--config`).
pub fn file_sink_config(data: &Path, sink: &str, file: &str) -> PathBuf {
    let config = data.join("sinks.toml");
    let text = format!(
        "[payload_log.sinks.{sink}]\nfile = {{ path = {:?} }}\n",
        data.join(file)
    );
    std::fs::write(&config, text).unwrap();
    config
}

pub fn register(data: &Path, name: &str, file: &Path) {
    register_with_env(data, name, file, &[]);
}

/// `register` with variables in the CLI's environment (`INFERGATE_STORE`: another store).
pub fn register_with_env(data: &Path, name: &str, file: &Path, env: &[(&str, &str)]) {
    let out = Command::new(BIN)
        .args(["models", "add", "--data-dir"])
        .arg(data)
        .args(["--name", name])
        .arg(file)
        .envs(env.iter().copied())
        .output()
        .expect("run infergate models add");
    assert!(
        out.status.success(),
        "models add failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub struct Server {
    child: Child,
    pub addr: String,
    pub data: PathBuf,
    pub admin_key: String,
    pub client: reqwest::Client,
    /// Kept alive so the reader thread keeps draining the server's stderr.
    _log: mpsc::Receiver<String>,
    /// Lines logged up to and including the `listening on` line.
    pub startup_log: Vec<String>,
    _tmp: Option<tempfile::TempDir>,
}

#[derive(Default)]
pub struct Options {
    pub extra_args: Vec<String>,
    pub insecure_http: bool,
    /// The server's working directory (default: the test's).
    pub cwd: Option<PathBuf>,
    /// Environment variables the server must not inherit from the test.
    pub env_remove: Vec<&'static str>,
    /// Started under this address-space limit (`ulimit -v`, KiB), as some hosts impose.
    pub address_space_kib: Option<u64>,
}

impl Server {
    /// A fresh data directory with the given models registered, then started.
    pub fn with_models(models: &[(&str, &str)]) -> Server {
        let tmp = tempfile::tempdir().expect("tempdir");
        for (name, file) in models {
            register(tmp.path(), name, &model(file));
        }
        let mut s = Server::start_in(tmp.path(), Options::default());
        s._tmp = Some(tmp);
        s
    }

    /// Starts on an existing data directory (kept by the caller).
    pub fn start_in(data: &Path, options: Options) -> Server {
        let mut cmd = match options.address_space_kib {
            // The shell sets the limit and then becomes the server (same pid).
            Some(kib) => {
                let mut sh = Command::new("sh");
                sh.args(["-c", "ulimit -v \"$0\" && exec \"$@\""])
                    .arg(kib.to_string())
                    .arg(BIN);
                sh
            }
            None => Command::new(BIN),
        };
        cmd.args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--grpc-listen",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(data)
        .args(&options.extra_args)
        .env("INFERGATE_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        if options.insecure_http {
            cmd.arg("--insecure-http");
        }
        if let Some(dir) = &options.cwd {
            cmd.current_dir(dir);
        }
        for name in &options.env_remove {
            cmd.env_remove(name);
        }
        let mut child = cmd.spawn().expect("start infergate");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut startup_log = Vec::new();
        let addr = loop {
            let line = rx
                .recv_timeout(Duration::from_secs(60))
                .expect("server did not log 'listening on' within 60 s");
            startup_log.push(line.clone());
            if let Some(rest) = line.split("listening on ").nth(1) {
                // Text logs end the URL with a space, JSON logs with a quote.
                let url = rest
                    .split(|c: char| c.is_whitespace() || c == '"')
                    .next()
                    .unwrap_or_default();
                break strip_ansi(url);
            }
        };
        let admin_key = std::fs::read_to_string(data.join("admin.key"))
            .expect("admin.key written on first start")
            .trim()
            .to_string();
        let client = client_for(data, options.insecure_http);
        Server {
            child,
            addr,
            data: data.to_path_buf(),
            admin_key,
            client,
            _log: rx,
            startup_log,
            _tmp: None,
        }
    }

    /// The next server log line containing `needle`, reading for at most `timeout`.
    pub fn wait_for_log(&self, needle: &str, timeout: Duration) -> Option<String> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.checked_duration_since(std::time::Instant::now())?;
            match self._log.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return Some(line),
                Ok(_) => continue,
                Err(_) => return None,
            }
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.addr, path)
    }

    /// Creates a key with the given scopes through the offline CLI and returns its secret.
    /// `GET path` with `key` as a bearer token, expecting a JSON body (any status).
    pub async fn get_json(&self, path: &str, key: &str) -> serde_json::Value {
        self.client
            .get(self.url(path))
            .bearer_auth(key)
            .send()
            .await
            .expect("GET reaches the server")
            .json()
            .await
            .expect("a JSON body")
    }

    /// `POST path` of a JSON `body` with `key` as a bearer token (any status).
    pub async fn post_json(
        &self,
        path: &str,
        key: &str,
        body: &serde_json::Value,
    ) -> reqwest::Response {
        self.client
            .post(self.url(path))
            .bearer_auth(key)
            .json(body)
            .send()
            .await
            .expect("POST reaches the server")
    }

    pub fn key(&self, scopes: &str) -> String {
        self.key_with(scopes, &[])
    }

    /// Creates a key through the offline CLI with extra `keys create` flags (limits) and
    /// returns its secret.
    pub fn key_with(&self, scopes: &str, flags: &[&str]) -> String {
        let out = Command::new(BIN)
            .args(["keys", "create", "--scope", scopes, "--data-dir"])
            .arg(&self.data)
            .args(flags)
            .output()
            .expect("keys create");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .expect("utf8")
            .trim()
            .to_string()
    }

    pub fn stop(mut self) -> PathBuf {
        self.kill();
        self.data.clone()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The server's process id (to read its /proc entries).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM without waiting.
    pub fn send_sigterm(&self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
    }

    /// Waits for the process to exit.
    pub fn wait(mut self) -> std::process::ExitStatus {
        self.child.wait().expect("wait")
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        self.child.wait().expect("wait")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

pub fn strip_ansi(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

pub fn client_for(data: &Path, insecure_http: bool) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .timeout(Duration::from_secs(120));
    if !insecure_http {
        let pem = std::fs::read(data.join("tls/cert.pem")).expect("self-signed certificate");
        builder = builder.add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("pem"));
    }
    builder.build().expect("client")
}
