//! The stack infergate's request path is built on (tokio, hyper 1's HTTP/1.1 server,
//! tokio-rustls with ring) and nothing else: each request's body is read and a canned answer
//! sent back. `bench/http_floor.py` measures its CPU per request next to HAProxy's and
//! infergate's, which splits infergate's cost into the stack's and its own.
//!
//! Usage: floor_server PORT CERT_PEM KEY_PEM INDEX [BUSY_US [BATCH_US [BATCH_MAX [CLOCK]]]]
//! INDEX: one answer a line, `path<TAB>file<TAB>content-type<TAB>header-length or ->`; the
//! answer's file is sent as the body, the header length as `Inference-Header-Content-Length`.
//! BUSY_US: before answering a path that ends in `/infer`, the worker spins that long on the
//! request's own thread, a stand-in for a model run where infergate makes a lone request's run
//! (one core busy, the other idle); `bench/latency_floor.py` measures the latency this stack
//! adds around such a run. `GET /count` answers the requests served so far (itself not
//! counted). Prints `port N` on stdout (PORT 0 picks a free one), then `listening` on stderr once
//! it accepts connections.
//!
//! BATCH_US (> 0): `/infer` requests are held and answered in batches, the way a dynamic
//! batcher with that queue delay and at most BATCH_MAX (default 16) requests a batch answers
//! them: a batch closes BATCH_US after its first request arrived, or at once when full; BUSY_US
//! is then spun once per batch in place of the model before its requests are answered. Tokio's
//! timer ticks in whole milliseconds, too coarse for a sub-millisecond delay, so CLOCK picks
//! what keeps time: `thread` (the default), a thread of its own, as infergate's instance
//! threads do; `timerfd`, a timerfd on the runtime, with no thread beside the workers. `bench/http_floor.py` measures this as the floor under
//! `bench/cpu_per_request.py`'s batched figure: what holding requests for a batch costs in
//! sleeps and wake-ups on this machine, with no model, no decoding and no engine.

use anyhow::Context as _;
use bytes::Bytes;
use http::{HeaderValue, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[path = "support/spin.rs"]
mod spin;
use spin::spin_for;

/// Dynamic batching with nothing else: requests wait for their batch to close.
mod batches {
    use infergate_engine::timerfd::Timer;
    use parking_lot::{Condvar, Mutex};
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    use tokio::sync::oneshot;

    /// What closes a batch whose delay ran out.
    pub enum Clock {
        /// A thread of its own sleeping on a condition variable until the deadline (how
        /// infergate's instance threads wait for a batch to fill).
        Thread,
        /// A timerfd on the async runtime: the worker its expiry wakes closes the batch, and no
        /// other thread takes part.
        Timerfd,
    }

    #[derive(Default)]
    struct Open {
        waiting: Vec<oneshot::Sender<()>>,
        /// When the open batch closes: its first request's arrival plus the delay.
        closes: Option<Instant>,
    }

    pub struct Batches {
        open: Mutex<Open>,
        delay: Duration,
        max: usize,
        busy: Duration,
        /// The closing thread's wake-up (Clock::Thread).
        changed: Condvar,
        /// Armed for the open batch (Clock::Timerfd).
        timer: Option<Timer>,
    }

    impl Batches {
        /// Starts what closes batches: a thread, or a task on the current runtime.
        pub fn start(
            clock: Clock,
            delay: Duration,
            max: usize,
            busy: Duration,
        ) -> std::io::Result<Arc<Batches>> {
            let timer = match clock {
                Clock::Thread => None,
                Clock::Timerfd => Some(Timer::new()?),
            };
            let batches = Arc::new(Batches {
                open: Mutex::new(Open::default()),
                delay,
                max: max.max(1),
                busy,
                changed: Condvar::new(),
                timer,
            });
            let closer = batches.clone();
            match clock {
                Clock::Thread => {
                    std::thread::Builder::new()
                        .name("batches".into())
                        .spawn(move || closer.run_thread())?;
                }
                Clock::Timerfd => {
                    tokio::spawn(async move { closer.run_timer().await });
                }
            }
            Ok(batches)
        }

        /// Waits until this request's batch has run.
        pub async fn join(&self) {
            let (done, wait) = oneshot::channel();
            if let Some(batch) = self.enter(done) {
                self.release(batch);
            }
            let _ = wait.await;
        }

        /// Adds a request to the open batch; the batch, when the request filled it and this
        /// worker should run it (Clock::Timerfd: a full batch closes on its last request's
        /// worker).
        fn enter(&self, done: oneshot::Sender<()>) -> Option<Vec<oneshot::Sender<()>>> {
            let mut open = self.open.lock();
            open.waiting.push(done);
            let first = open.waiting.len() == 1;
            if first {
                open.closes = Some(Instant::now() + self.delay);
            }
            let full = open.waiting.len() >= self.max;
            match &self.timer {
                Some(_) if full => {
                    open.closes = None;
                    Some(std::mem::take(&mut open.waiting))
                }
                Some(timer) if first => {
                    timer.arm(self.delay);
                    None
                }
                // The closing thread sleeps without a deadline while nothing waits, and until
                // the deadline after: only the first request and a full batch need it awake.
                None if first || full => {
                    drop(open);
                    self.changed.notify_one();
                    None
                }
                _ => None,
            }
        }

        fn release(&self, batch: Vec<oneshot::Sender<()>>) {
            super::spin_for(self.busy);
            for done in batch {
                let _ = done.send(());
            }
        }

        fn run_thread(&self) {
            loop {
                let batch = {
                    let mut open = self.open.lock();
                    loop {
                        match open.closes {
                            None => self.changed.wait(&mut open),
                            Some(t) if open.waiting.len() < self.max && Instant::now() < t => {
                                self.changed.wait_until(&mut open, t);
                            }
                            Some(_) => break,
                        }
                    }
                    open.closes = None;
                    std::mem::take(&mut open.waiting)
                };
                self.release(batch);
            }
        }

        async fn run_timer(&self) {
            let Some(timer) = &self.timer else { return };
            timer
                .run(|| {
                    let batch = {
                        let mut open = self.open.lock();
                        // A batch that filled up closed already; a later one has its own
                        // deadline.
                        match open.closes {
                            Some(t) if Instant::now() >= t => {
                                open.closes = None;
                                std::mem::take(&mut open.waiting)
                            }
                            Some(t) => {
                                timer.arm(t.saturating_duration_since(Instant::now()));
                                Vec::new()
                            }
                            None => Vec::new(),
                        }
                    };
                    self.release(batch);
                    true
                })
                .await;
        }
    }
}

struct Answer {
    body: Bytes,
    content_type: HeaderValue,
    header_len: Option<HeaderValue>,
}

struct Answers {
    by_path: HashMap<String, Answer>,
    served: AtomicU64,
    /// How long an inference keeps its worker busy before the answer.
    busy: Duration,
    /// Set: inferences are answered in batches, and `busy` is spent per batch.
    batches: Option<Arc<batches::Batches>>,
}

fn load(index: &str) -> anyhow::Result<HashMap<String, Answer>> {
    let mut by_path = HashMap::new();
    let text = std::fs::read_to_string(index).with_context(|| format!("reading {index}"))?;
    for line in text.lines().filter(|l| !l.is_empty()) {
        let fields: Vec<&str> = line.split('\t').collect();
        let [path, file, content_type, header_len] = fields[..] else {
            anyhow::bail!("{index}: expected 4 tab-separated fields in {line:?}");
        };
        let body = std::fs::read(file).with_context(|| format!("reading {file}"))?;
        by_path.insert(
            path.to_owned(),
            Answer {
                body: Bytes::from(body),
                content_type: HeaderValue::from_str(content_type)?,
                header_len: (header_len != "-")
                    .then(|| HeaderValue::from_str(header_len))
                    .transpose()?,
            },
        );
    }
    Ok(by_path)
}

async fn answer(
    answers: Arc<Answers>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path().to_owned();
    // Read the body whole, as a server that decodes it must.
    let _ = request.into_body().collect().await;
    if path == "/count" {
        let served = answers.served.load(Ordering::Relaxed).to_string();
        return Ok(Response::new(Full::new(Bytes::from(served))));
    }
    answers.served.fetch_add(1, Ordering::Relaxed);
    if path.ends_with("/infer") {
        match &answers.batches {
            Some(batches) => batches.join().await,
            None if !answers.busy.is_zero() => spin_for(answers.busy),
            None => {}
        }
    }
    let Some(found) = answers.by_path.get(&path) else {
        let mut response = Response::new(Full::new(Bytes::from_static(
            br#"{"error": "no canned answer for this path"}"#,
        )));
        *response.status_mut() = StatusCode::NOT_FOUND;
        return Ok(response);
    };
    let mut response = Response::new(Full::new(found.body.clone()));
    let headers = response.headers_mut();
    headers.insert(http::header::CONTENT_TYPE, found.content_type.clone());
    if let Some(len) = &found.header_len {
        headers.insert("inference-header-content-length", len.clone());
    }
    Ok(response)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let usage =
        "usage: floor_server PORT CERT_PEM KEY_PEM INDEX [BUSY_US [BATCH_US [BATCH_MAX [thread|timerfd]]]]";
    let [_, port, cert, key, index, numbers @ ..] = &args[..] else {
        anyhow::bail!(usage);
    };
    let (numbers, clock) = match numbers {
        [rest @ .., clock] if clock == "thread" => (rest, batches::Clock::Thread),
        [rest @ .., clock] if clock == "timerfd" => (rest, batches::Clock::Timerfd),
        rest => (rest, batches::Clock::Thread),
    };
    let numbers = numbers
        .iter()
        .map(|n| n.parse::<u64>().with_context(|| format!("{n:?}: {usage}")))
        .collect::<anyhow::Result<Vec<u64>>>()?;
    let (busy_us, batch_us, batch_max) = match numbers[..] {
        [] => (0, 0, 16),
        [busy] => (busy, 0, 16),
        [busy, batch] => (busy, batch, 16),
        [busy, batch, max] => (busy, batch, max),
        _ => anyhow::bail!(usage),
    };
    let certs = CertificateDer::pem_file_iter(cert)?.collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_file(key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let answers = Arc::new(Answers {
        by_path: load(index)?,
        served: AtomicU64::new(0),
        busy: Duration::from_micros(busy_us),
        batches: (batch_us > 0)
            .then(|| {
                batches::Batches::start(
                    clock,
                    Duration::from_micros(batch_us),
                    usize::try_from(batch_max).unwrap_or(usize::MAX),
                    Duration::from_micros(busy_us),
                )
            })
            .transpose()?,
    });
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port.parse::<u16>()?)).await?;
    // The port first (on stdout: PORT 0 picks a free one), then the line callers wait for.
    println!("port {}", listener.local_addr()?.port());
    eprintln!("listening");
    loop {
        let (tcp, _) = listener.accept().await?;
        tcp.set_nodelay(true)?;
        let (acceptor, answers) = (acceptor.clone(), answers.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let service =
                hyper::service::service_fn(move |request| answer(answers.clone(), request));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                .await;
        });
    }
}
