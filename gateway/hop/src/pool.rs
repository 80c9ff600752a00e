//! The manager's keep-alive connections to workers for inference: HTTP/1.1 over mutual TLS,
//! each connection driven by the request that holds it.
//!
//! Why not the general HTTP client (reqwest, as for the manager's control calls): at
//! concurrency 1 every microsecond the manager spends is added to the client's latency, and a
//! pooled client drives each connection on a task of its own, so a request crosses two task
//! hand-offs each way (handler → connection task → socket and back), plus URL parsing and the
//! pool's bookkeeping. Here the request's own task writes the request and reads the answer: a
//! connection is checked out, polled by that task alone until the answer's last byte, and
//! checked back in. HTTP/1.1 rather than HTTP/2: one request per connection at a time costs
//! no stream multiplexing, and the worker serves each connection's requests on that
//! connection's task (its HTTP/2 server would spawn a task per stream).
//!
//! A connection that was idle may have been closed by the worker (restarted, idle timeout):
//! when the request was not written, it is sent again on a new connection to the same worker
//! (never a second time once written: the caller decides about other workers). A request
//! future dropped midway (deadline, client gone) drops its connection, which closes it, so the
//! worker sees the request cancelled.
//!
//! Each connection carries the link's deadline ([`LinkSettings`]): a worker that stops
//! acknowledging fails its connections within the silence allowed, whatever the request waits
//! for. A worker the manager declares lost has its idle connections closed
//! ([`WorkerPool::evict`]): they were opened to a host that stopped answering, and a request
//! written to one after the link heals could wait on a connection the worker has forgotten.

use crate::link::LinkSettings;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use rustls::pki_types::ServerName;
use std::collections::HashMap;
use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// Idle connections kept per worker: enough for the concurrency one manager sends one worker;
/// more are closed when they come back.
const IDLE_PER_WORKER: usize = 64;

/// An idle connection older than this is closed rather than reused: half the time after which
/// a worker closes a connection that sends no request (its header read timeout runs while a
/// connection is idle), so that a request is never written to a connection the worker is
/// closing at that moment (which fails it: once written, it is not sent again).
const IDLE_FOR: Duration = Duration::from_secs(crate::HANDSHAKE_TIMEOUT.as_secs() / 2);

type Io = TokioIo<TlsStream<TcpStream>>;

/// A worker's answer, read whole.
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

pub struct WorkerPool {
    tls: TlsConnector,
    link: LinkSettings,
    idle: Mutex<Idles>,
}

/// Idle connections by worker address.
struct Idles {
    by_worker: HashMap<String, Vec<Idle>>,
    /// When expired connections of every worker were last closed (a worker that left keeps
    /// none for longer than about twice [`IDLE_FOR`]).
    swept: Instant,
}

struct Idle {
    conn: Conn,
    since: Instant,
}

struct Conn {
    sender: http1::SendRequest<Full<Bytes>>,
    /// None once it finished (the connection closed): never reused then. Dropped at once,
    /// because hyper answers a request it took with the connection's error when its
    /// dispatcher is dropped, not always when the dispatcher ends.
    driver: Option<Pin<Box<Driver>>>,
}

type Driver = http1::Connection<Io, Full<Bytes>>;

/// Why a worker's answer did not come: no connection, or a connection that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendFailed {
    pub message: String,
    /// The request was written to the worker, at least in part: it may have run there.
    pub reached: bool,
}

impl SendFailed {
    fn unsent(message: String) -> SendFailed {
        SendFailed {
            message,
            reached: false,
        }
    }
}

impl std::fmt::Display for SendFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// How one exchange on a connection failed.
enum Failed {
    /// The connection was closed before the request was written: safe to send again.
    NotSent(Box<Request<Full<Bytes>>>, String),
    Lost(String),
}

impl WorkerPool {
    /// `tls`: the manager's client configuration (cluster CA, its certificate); its ALPN is
    /// replaced by HTTP/1.1.
    pub fn new(mut tls: rustls::ClientConfig, link: LinkSettings) -> WorkerPool {
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        WorkerPool {
            tls: TlsConnector::from(Arc::new(tls)),
            link,
            idle: Mutex::new(Idles {
                by_worker: HashMap::new(),
                swept: Instant::now(),
            }),
        }
    }

    /// Sends `request` (origin-form URI; the Host header is set here) to the worker at
    /// `advertise` (`host:port`) and reads its whole answer. Errors are the connection's (no
    /// answer, or part of one): the worker's own errors are answers.
    pub async fn send(
        &self,
        advertise: &str,
        mut request: Request<Full<Bytes>>,
    ) -> Result<Answer, SendFailed> {
        let host = http::HeaderValue::from_str(advertise).map_err(|_| {
            SendFailed::unsent(format!(
                "worker address '{advertise}' is not a valid Host header"
            ))
        })?;
        request.headers_mut().insert(http::header::HOST, host);
        loop {
            let (mut conn, reused) = match self.checkout(advertise) {
                Some(conn) => (conn, true),
                None => (
                    self.connect(advertise).await.map_err(SendFailed::unsent)?,
                    false,
                ),
            };
            match exchange(&mut conn, request).await {
                Ok(answer) => {
                    self.checkin(advertise, conn);
                    return Ok(answer);
                }
                Err(Failed::NotSent(unsent, _)) if reused => request = *unsent,
                Err(Failed::NotSent(_, why)) => return Err(SendFailed::unsent(why)),
                Err(Failed::Lost(why)) => {
                    return Err(SendFailed {
                        message: why,
                        reached: true,
                    })
                }
            }
        }
    }

    /// Closes the idle connections to the worker at `advertise` (it was declared lost or
    /// removed): how many there were. Connections in use end with their requests.
    pub fn evict(&self, advertise: &str) -> usize {
        self.idle
            .lock()
            .by_worker
            .remove(advertise)
            .map_or(0, |list| list.len())
    }

    /// Idle connections held for the worker at `advertise`.
    pub fn idle_count(&self, advertise: &str) -> usize {
        self.idle
            .lock()
            .by_worker
            .get(advertise)
            .map_or(0, Vec::len)
    }

    fn checkout(&self, advertise: &str) -> Option<Conn> {
        let mut idle = self.idle.lock();
        let list = idle.by_worker.get_mut(advertise)?;
        while let Some(entry) = list.pop() {
            if entry.since.elapsed() < IDLE_FOR && !entry.conn.sender.is_closed() {
                return Some(entry.conn);
            }
        }
        None
    }

    fn checkin(&self, advertise: &str, conn: Conn) {
        if conn.driver.is_none() || conn.sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock();
        if idle.swept.elapsed() >= IDLE_FOR {
            idle.by_worker.retain(|_, list| {
                list.retain(|entry| entry.since.elapsed() < IDLE_FOR);
                !list.is_empty()
            });
            idle.swept = Instant::now();
        }
        let list = idle.by_worker.entry(advertise.to_owned()).or_default();
        if list.len() < IDLE_PER_WORKER {
            list.push(Idle {
                conn,
                since: Instant::now(),
            });
        }
    }

    async fn connect(&self, advertise: &str) -> Result<Conn, String> {
        let name = server_name(advertise)?;
        let connected = async {
            let tcp = TcpStream::connect(advertise)
                .await
                .map_err(|e| format!("connecting: {e}"))?;
            // Requests and answers are written whole: no reason to wait for more bytes.
            tcp.set_nodelay(true)
                .map_err(|e| format!("setting TCP_NODELAY: {e}"))?;
            self.link
                .apply(&tcp)
                .map_err(|e| format!("setting the link's keepalive and timeout: {e}"))?;
            let tls = self
                .tls
                .connect(name, tcp)
                .await
                .map_err(|e| format!("TLS handshake: {e}"))?;
            let (sender, driver) = http1::Builder::new()
                .handshake(TokioIo::new(tls))
                .await
                .map_err(|e| format!("HTTP handshake: {e}"))?;
            Ok::<_, String>(Conn {
                sender,
                driver: Some(Box::pin(driver)),
            })
        };
        match tokio::time::timeout(self.link.connect_timeout, connected).await {
            Ok(conn) => conn.map_err(|e| format!("worker {advertise}: {e}")),
            Err(_) => Err(format!(
                "worker {advertise}: no connection within {:?}",
                self.link.connect_timeout
            )),
        }
    }
}

/// The name a worker's certificate carries: the host of its advertised `host:port` (an IP
/// address, or a DNS name).
fn server_name(advertise: &str) -> Result<ServerName<'static>, String> {
    let host = match advertise.rsplit_once(':') {
        Some((host, port)) if port.parse::<u16>().is_ok() => host,
        _ => return Err(format!("worker address '{advertise}' is not host:port")),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_owned())
        .map_err(|e| format!("worker address '{advertise}': invalid host: {e}"))
}

/// One request and its whole answer on `conn`, polled by this task alone: the connection's
/// driver is polled alongside the request, so no other task is involved.
async fn exchange(conn: &mut Conn, request: Request<Full<Bytes>>) -> Result<Answer, Failed> {
    let Conn { sender, driver } = conn;
    // The driver, polled here, asks for the next request, or finds the connection closed
    // (an idle one the worker closed): then the request was not sent.
    let ready = std::future::poll_fn(|cx| {
        poll_driver(driver, cx);
        match sender.poll_ready(cx) {
            Poll::Ready(result) => Poll::Ready(result.map_err(|e| e.to_string())),
            Poll::Pending if driver.is_none() => {
                Poll::Ready(Err("the connection closed".to_owned()))
            }
            Poll::Pending => Poll::Pending,
        }
    })
    .await;
    if let Err(why) = ready {
        return Err(Failed::NotSent(Box::new(request), why));
    }
    let mut answer = std::pin::pin!(async {
        let response = sender.try_send_request(request).await.map_err(|mut e| {
            let why = e.error().to_string();
            match e.take_message() {
                Some(unsent) => Failed::NotSent(Box::new(unsent), why),
                None => Failed::Lost(why),
            }
        })?;
        let (parts, body) = response.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|e| Failed::Lost(format!("reading the answer: {e}")))?
            .to_bytes();
        Ok(Answer {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    });
    // The answer first (it hands the request to the driver), then the driver (it writes the
    // request, reads what arrived and hands it on), then the answer again to take that
    // without another wake-up. A closed connection fails a pending answer (see `Conn`), so
    // this ends.
    std::future::poll_fn(|cx| {
        if let Poll::Ready(result) = answer.as_mut().poll(cx) {
            return Poll::Ready(result);
        }
        poll_driver(driver, cx);
        answer.as_mut().poll(cx)
    })
    .await
}

/// Polls a connection's driver until it ends, then drops it.
fn poll_driver(driver: &mut Option<Pin<Box<Driver>>>, cx: &mut Context<'_>) {
    let Some(running) = driver else {
        return;
    };
    if let Poll::Ready(result) = running.as_mut().poll(cx) {
        *driver = None;
        if let Err(e) = result {
            tracing::debug!(error = %e, "worker connection ended");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use infergate_cluster::ca::ClusterCa;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::AsyncReadExt;

    /// A worker-like TLS listener on 127.0.0.1 with the cluster's certificates, and the
    /// manager's pool for it. `serve` handles each accepted TLS stream.
    async fn listener<F, Fut>(serve: F) -> (WorkerPool, String, Arc<AtomicUsize>)
    where
        F: Fn(tokio_rustls::server::TlsStream<TcpStream>) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let ca = ClusterCa::generate("test").unwrap();
        let issued = ca.issue("w-1", &["127.0.0.1".to_owned()]).unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(
            crate::tls::worker_server_config(&issued, ca.cert_pem()).unwrap(),
        );
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = tcp.local_addr().unwrap().to_string();
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = connections.clone();
        let serve = Arc::new(serve);
        tokio::spawn(async move {
            while let Ok((stream, _)) = tcp.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let (acceptor, serve) = (acceptor.clone(), serve.clone());
                tokio::spawn(async move {
                    if let Ok(tls) = acceptor.accept(stream).await {
                        serve(tls).await;
                    }
                });
            }
        });
        let client = crate::tls::manager_client_config(&ca).unwrap();
        let pool = WorkerPool::new(client, LinkSettings::default());
        (pool, address, connections)
    }

    fn post(body: &'static str) -> Request<Full<Bytes>> {
        Request::post("/echo")
            .body(Full::new(Bytes::from_static(body.as_bytes())))
            .unwrap()
    }

    /// A hang here is the bug under test: bounded so that it fails instead.
    async fn bounded<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(30), f)
            .await
            .expect("the pool hung")
    }

    #[tokio::test]
    async fn answers_come_back_and_connections_are_reused() {
        let (pool, address, connections) = listener(|tls| async move {
            let service =
                hyper::service::service_fn(|request: Request<hyper::body::Incoming>| async move {
                    let body = request.into_body().collect().await?.to_bytes();
                    Ok::<_, hyper::Error>(http::Response::new(Full::new(body)))
                });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .await;
        })
        .await;
        for body in ["one", "two", "three"] {
            let answer = bounded(pool.send(&address, post(body))).await.unwrap();
            assert_eq!(answer.status, StatusCode::OK);
            assert_eq!(answer.body, body.as_bytes());
        }
        assert_eq!(
            connections.load(Ordering::SeqCst),
            1,
            "one kept-alive connection"
        );
    }

    #[tokio::test]
    async fn an_evicted_worker_gets_a_new_connection() {
        let (pool, address, connections) = listener(|tls| async move {
            let service = hyper::service::service_fn(|_: Request<hyper::body::Incoming>| async {
                Ok::<_, hyper::Error>(http::Response::new(Full::new(Bytes::from_static(b"ok"))))
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .await;
        })
        .await;
        bounded(pool.send(&address, post("x"))).await.unwrap();
        assert_eq!(pool.idle_count(&address), 1);
        assert_eq!(pool.evict(&address), 1);
        assert_eq!(pool.idle_count(&address), 0);
        assert_eq!(pool.evict(&address), 0);
        bounded(pool.send(&address, post("x"))).await.unwrap();
        assert_eq!(connections.load(Ordering::SeqCst), 2, "not the evicted one");
    }

    #[tokio::test]
    async fn a_connection_the_worker_closed_while_idle_is_replaced_without_an_error() {
        // Each connection serves one request and closes (as a worker does when it restarts
        // or its idle timer fires): the pooled one is closed when the next request takes it.
        let (pool, address, connections) = listener(|tls| async move {
            let service = hyper::service::service_fn(|_: Request<hyper::body::Incoming>| async {
                Ok::<_, hyper::Error>(http::Response::new(Full::new(Bytes::from_static(b"ok"))))
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .keep_alive(false)
                .serve_connection(TokioIo::new(tls), service)
                .await;
        })
        .await;
        for _ in 0..3 {
            let answer = bounded(pool.send(&address, post("x"))).await.unwrap();
            assert_eq!(answer.body, &b"ok"[..]);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(connections.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_worker_that_dies_with_the_request_is_an_error_not_a_hang() {
        // The worker reads the request and goes away without answering (kill -9).
        let (pool, address, _) = listener(|mut tls| async move {
            let mut buffer = [0u8; 1024];
            let _ = tls.read(&mut buffer).await;
        })
        .await;
        let error = bounded(pool.send(&address, post("x"))).await.err().unwrap();
        assert!(!error.message.is_empty());
        assert!(error.reached, "written before the worker died: {error}");
    }

    #[tokio::test]
    async fn no_listener_is_an_error_naming_the_worker() {
        let unused = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = unused.local_addr().unwrap().to_string();
        drop(unused);
        let ca = ClusterCa::generate("test").unwrap();
        let pool = WorkerPool::new(
            crate::tls::manager_client_config(&ca).unwrap(),
            LinkSettings::default(),
        );
        let error = bounded(pool.send(&address, post("x"))).await.err().unwrap();
        assert!(error.message.contains(&address), "{error}");
        assert!(!error.reached, "nothing was sent: {error}");
    }

    #[test]
    fn the_server_name_is_the_advertised_host() {
        assert_eq!(
            server_name("127.0.0.1:8444").unwrap(),
            ServerName::try_from("127.0.0.1").unwrap()
        );
        assert_eq!(
            server_name("[::1]:8444").unwrap(),
            ServerName::try_from("::1").unwrap()
        );
        assert_eq!(
            server_name("gpu-1.example:8444").unwrap(),
            ServerName::try_from("gpu-1.example").unwrap()
        );
        assert!(server_name("gpu-1.example").is_err());
        assert!(server_name("gpu-1.example:http").is_err());
    }
}
