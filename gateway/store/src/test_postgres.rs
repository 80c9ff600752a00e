//! A real PostgreSQL server for tests (Debian's `postgresql-15`, installed by
//! `scripts/setup.sh`): a fresh cluster in a temporary directory, on a random port on
//! 127.0.0.1, stopped when dropped. PostgreSQL refuses to run as root, so under root the
//! cluster belongs to, and the server runs as, the `postgres` user. Also compiled into the
//! e2e tests (`tests/e2e/replicas.rs`).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct PgServer {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
    /// `-c name=value` settings beyond the defaults (TLS).
    settings: Vec<String>,
    tls_files: Option<tempfile::TempDir>,
}

/// The newest `/usr/lib/postgresql/<version>/bin` holding `initdb` (or `$INFERGATE_PG_BIN`).
fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("INFERGATE_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    found.sort();
    match found.pop() {
        Some((_, bin)) => bin,
        None => panic!(
            "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): run scripts/setup.sh, \
             which installs Debian's postgresql package, or set INFERGATE_PG_BIN"
        ),
    }
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
}

/// `program args...`, as the `postgres` user when this process is root.
fn as_server_user(program: &Path) -> Command {
    if running_as_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl PgServer {
    /// initdb + start; panics (with the server's log) when it does not accept connections
    /// within 30 s.
    pub fn start() -> PgServer {
        PgServer::start_with(Vec::new())
    }

    /// Like `start`, serving TLS (as well as plain connections) with this certificate and key.
    pub fn start_with_tls(cert_pem: &str, key_pem: &str) -> PgServer {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (cert, key) = (dir.path().join("server.crt"), dir.path().join("server.key"));
        std::fs::write(&cert, cert_pem).expect("writing the server certificate");
        std::fs::write(&key, key_pem).expect("writing the server key");
        // PostgreSQL refuses a key that others can read, and must own it.
        let chmod = Command::new("chmod").arg("600").arg(&key).status();
        assert!(
            chmod.is_ok_and(|s| s.success()),
            "chmod 600 {}",
            key.display()
        );
        if running_as_root() {
            let chown = Command::new("chown")
                .arg("-R")
                .arg("postgres:")
                .arg(dir.path())
                .status();
            assert!(
                chown.is_ok_and(|s| s.success()),
                "chown {}",
                dir.path().display()
            );
        }
        let mut server = PgServer::start_with(vec![
            "ssl=on".into(),
            format!("ssl_cert_file={}", cert.display()),
            format!("ssl_key_file={}", key.display()),
        ]);
        // Kept (and removed) with the server.
        server.tls_files = Some(dir);
        server
    }

    fn start_with(settings: Vec<String>) -> PgServer {
        let bin = bin_dir();
        let dir = tempfile::tempdir().expect("a temporary directory");
        if running_as_root() {
            let chown = Command::new("chown")
                .arg("postgres:")
                .arg(dir.path())
                .status()
                .expect("chown");
            assert!(chown.success(), "chown postgres: {}", dir.path().display());
        }
        let out = as_server_user(&bin.join("initdb"))
            .arg("-D")
            .arg(dir.path().join("data"))
            .args([
                "-U",
                "postgres",
                "--auth=trust",
                "--locale=C",
                "-E",
                "UTF8",
                "-N",
            ])
            .output()
            .expect("running initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut server = PgServer {
            bin,
            dir,
            port: free_port(),
            child: None,
            settings,
            tls_files: None,
        };
        server.resume();
        server
    }

    /// Starts the server again on the same port and data (after `stop`).
    pub fn resume(&mut self) {
        assert!(self.child.is_none(), "already running");
        let log = std::fs::File::create(self.dir.path().join("server.log")).expect("log file");
        let child = as_server_user(&self.bin.join("postgres"))
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(self.dir.path())
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .args(["-c", "synchronous_commit=off", "-c", "full_page_writes=off"])
            .args(self.settings.iter().flat_map(|s| ["-c", s.as_str()]))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("starting postgres");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = Command::new(self.bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return;
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() > deadline {
                panic!(
                    "postgres did not accept connections on port {} ({exited:?}):\n{}",
                    self.port,
                    std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the server (fast shutdown: clients are disconnected), waiting up to 20 s.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // The postmaster's pid: the child is `runuser` when this process is root.
        let pid = std::fs::read_to_string(self.dir.path().join("data/postmaster.pid"))
            .ok()
            .and_then(|s| s.lines().next().map(str::to_owned));
        if let Some(pid) = pid {
            let _ = Command::new("kill").args(["-INT", &pid]).status();
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while child.try_wait().ok().flatten().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.wait();
    }

    /// The URL of the server's `postgres` database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.stop();
    }
}
