//! One client connection, as the listener sees it: what is in flight on it, whether it has
//! presented a valid key, and the wrappers that put the connection limits on its socket and on
//! its requests.
//!
//! - [`ConnIo`] wraps the socket (under TLS). It holds the connection's slot in the listener's
//!   cap and, until a key is presented, in the per-address cap, so both stay taken for as long as
//!   the socket lives, an upgraded WebSocket included. A write that makes no progress for
//!   `send_timeout_s` (a client that stopped reading) fails it.
//! - [`ConnService`] wraps what serves the requests ([`Handle`]): it refuses over-long URIs and header sections with a JSON
//!   414/431 (hyper's own limits are set higher, see `server.rs`), counts requests in flight
//!   until their response body ends, puts the body read deadline on request bodies, and adds
//!   `Connection: close` to HTTP/1 responses while the server drains.

use crate::read_deadline::ReadDeadline;
use axum::body::Body;
use axum::response::IntoResponse;
use http::{HeaderValue, Request, Response, Version};
use hyper::body::Incoming;
use infergate_kserve::http_error::HttpError;
use infergate_service::config::Limits;
use infergate_service::drain::Draining;
use infergate_service::error::ApiError;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, OwnedSemaphorePermit};
use tokio::time::{Instant, Sleep};

use crate::client_addr::PeerAddr;
use crate::peers::PeerSlot;

tokio::task_local! {
    /// The connection a request arrived on, for [`authenticated`].
    static CURRENT: Arc<Connection>;
}

/// Records that the request being handled presented a valid key: its connection leaves the
/// per-address cap of unauthenticated connections and gets the longer idle timeout. Called by
/// the key check; outside a request (a WebSocket after its upgrade) it does nothing.
pub fn authenticated() {
    let _ = CURRENT.try_with(|c| c.mark_authenticated());
}

/// The connection of the request being handled, for work that outlives the request (a
/// WebSocket authenticated by its first message).
pub fn current() -> Option<Arc<Connection>> {
    CURRENT.try_with(Arc::clone).ok()
}

/// What the listener's watchdog needs to know about one connection.
pub struct Connection {
    in_flight: AtomicUsize,
    authenticated: AtomicBool,
    http2: AtomicBool,
    /// When the connection last had nothing in flight (its start, then each request's end).
    idle_since: Mutex<Instant>,
    /// The connection's place among its address's unauthenticated connections.
    peer_slot: Mutex<Option<PeerSlot>>,
    /// Told when the last request in flight ends.
    ended: Notify,
    /// Told when the connection authenticates (its idle limit changes).
    authenticated_now: Notify,
}

impl Connection {
    pub fn new(peer_slot: Option<PeerSlot>) -> Arc<Connection> {
        Arc::new(Connection {
            in_flight: AtomicUsize::new(0),
            authenticated: AtomicBool::new(false),
            http2: AtomicBool::new(false),
            idle_since: Mutex::new(Instant::now()),
            peer_slot: Mutex::new(peer_slot),
            ended: Notify::new(),
            authenticated_now: Notify::new(),
        })
    }

    pub fn mark_authenticated(&self) {
        if !self.authenticated.swap(true, Ordering::AcqRel) {
            self.lock_slot().take();
            self.authenticated_now.notify_waiters();
        }
    }

    pub fn is_http2(&self) -> bool {
        self.http2.load(Ordering::Acquire)
    }

    pub fn set_http2(&self) {
        self.http2.store(true, Ordering::Release);
    }

    /// Resolves once the connection has had nothing in flight for its idle limit: `header`
    /// until it has presented a valid key, `idle` after.
    ///
    /// Requests that start and end while it sleeps towards a deadline do not wake it: they
    /// only move the idle start later, which it sees when the deadline comes (and then sleeps
    /// on to the new one). Waking it at each request's end, and setting a fresh timer, cost
    /// every request a timer insertion and removal and a poll of this future.
    pub async fn idle_expired(&self, header: Duration, idle: Duration) {
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            // Registered before `in_flight` is read, so an end in between is not missed.
            ended.as_mut().enable();
            if self.in_flight.load(Ordering::Acquire) > 0 {
                ended.await;
                continue;
            }
            let authenticated_now = self.authenticated_now.notified();
            tokio::pin!(authenticated_now);
            authenticated_now.as_mut().enable();
            let authenticated = self.authenticated.load(Ordering::Acquire);
            let limit = if authenticated { idle } else { header };
            let Some(deadline) = self.lock_idle().checked_add(limit) else {
                // A limit too large to be a point in time: only a change of limit ends it.
                match authenticated {
                    true => std::future::pending::<()>().await,
                    false => authenticated_now.await,
                }
                continue;
            };
            if Instant::now() >= deadline {
                if self.in_flight.load(Ordering::Acquire) == 0 {
                    return;
                }
                continue;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => {}
                // The limit changed: the deadline is computed again.
                _ = authenticated_now, if !authenticated => {}
            }
        }
    }

    fn request_started(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(self.clone())
    }

    fn lock_idle(&self) -> std::sync::MutexGuard<'_, Instant> {
        self.idle_since.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_slot(&self) -> std::sync::MutexGuard<'_, Option<PeerSlot>> {
        self.peer_slot.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One request in flight; dropped with its response body.
struct InFlight(Arc<Connection>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            *self.0.lock_idle() = Instant::now();
            self.0.ended.notify_waiters();
        }
    }
}

/// What answers a listener's requests (the HTTP API behind its front door, or a bare router).
pub trait Handle: Clone + Send + Sync + 'static {
    fn handle(self, request: Request<Body>) -> impl Future<Output = Response<Body>> + Send;
}

/// What serves one connection's requests.
#[derive(Clone)]
pub struct ConnService<H> {
    pub handler: H,
    pub connection: Arc<Connection>,
    /// The connection's peer, put in each request's extensions ([`PeerAddr`]).
    pub peer: std::net::SocketAddr,
    pub limits: Arc<Limits>,
    pub draining: Draining,
}

/// gRPC's bidirectional streaming method: its request body stays open between messages by
/// design, so it gets no body read deadline.
const GRPC_STREAM_PATH: &str = "/inference.GRPCInferenceService/ModelStreamInfer";

impl<H: Handle> hyper::service::Service<Request<Incoming>> for ConnService<H> {
    type Response = Response<Body>;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Self::Error>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let in_flight = self.connection.request_started();
        let http1 = request.version() < Version::HTTP_2;
        if !http1 {
            self.connection.set_http2();
        }
        let limits = &self.limits;
        if let Some(error) = head_over_limits(&request, limits) {
            let response = with_body(HttpError(error).into_response(), in_flight);
            return Box::pin(async move { Ok(response) });
        }
        let mut request = request;
        request.extensions_mut().insert(PeerAddr(self.peer));
        let request = if request.uri().path() != GRPC_STREAM_PATH {
            let (gap, min_rate) = (
                Duration::from_secs(limits.body_timeout_s.max(1)),
                limits.body_min_rate_bytes_per_s,
            );
            request.map(|body| Body::new(ReadDeadline::new(body, gap, min_rate)))
        } else {
            request.map(Body::new)
        };
        let handler = self.handler.clone();
        let draining = self.draining.clone();
        let connection = self.connection.clone();
        Box::pin(CURRENT.scope(connection, async move {
            let mut response = handler.handle(request).await;
            if http1 && draining.is_draining() {
                // The client learns before its next request that this connection ends.
                response
                    .headers_mut()
                    .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
            }
            Ok(with_body(response, in_flight))
        }))
    }
}

fn with_body(response: Response<Body>, in_flight: InFlight) -> Response<Body> {
    response.map(|body| crate::hold_body::hold(body, in_flight))
}

/// 414 or 431, with a JSON body, for a request target or header section over the limits.
fn head_over_limits<B>(request: &Request<B>, limits: &Limits) -> Option<ApiError> {
    let target = request
        .uri()
        .path_and_query()
        .map_or(0, |p| p.as_str().len());
    if target > limits.max_uri_bytes {
        return Some(ApiError::new(
            infergate_service::error::Kind::UriTooLong,
            format!(
                "the request target is {target} bytes; the limit is {}",
                limits.max_uri_bytes
            ),
        ));
    }
    let headers = request.headers();
    if headers.len() > limits.max_headers {
        return Some(ApiError::new(
            infergate_service::error::Kind::HeadersTooLarge,
            format!(
                "the request has {} header fields; the limit is {}",
                headers.len(),
                limits.max_headers
            ),
        ));
    }
    // As HTTP/1 sends them: "name: value\r\n".
    let size: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    if size > limits.max_header_bytes {
        return Some(ApiError::new(
            infergate_service::error::Kind::HeadersTooLarge,
            format!(
                "the request's header fields are {size} bytes; the limit is {}",
                limits.max_header_bytes
            ),
        ));
    }
    None
}

/// A client socket with the connection's slots and a write-progress deadline.
pub struct ConnIo<I> {
    io: I,
    /// Keeps the connection's place in the listener's cap for the socket's whole life.
    _permit: OwnedSemaphorePermit,
    /// Keeps the per-address slot (released when a key is presented) for the socket's life.
    _connection: Arc<Connection>,
    send_timeout: Duration,
    /// Armed while a write is blocked; fires after `send_timeout` without progress.
    write_stall: Option<Pin<Box<Sleep>>>,
}

impl<I> ConnIo<I> {
    pub fn new(
        io: I,
        permit: OwnedSemaphorePermit,
        connection: Arc<Connection>,
        send_timeout: Duration,
    ) -> ConnIo<I> {
        ConnIo {
            io,
            _permit: permit,
            _connection: connection,
            send_timeout,
            write_stall: None,
        }
    }

    /// Passes a write's result on, failing it once writes have been blocked for the send
    /// timeout.
    fn watch_write<T>(
        &mut self,
        cx: &mut Context<'_>,
        result: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if result.is_ready() {
            self.write_stall = None;
            return result;
        }
        let timeout = self.send_timeout;
        let stall = self
            .write_stall
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        if stall.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the client read nothing for {timeout:?}"),
            )));
        }
        Poll::Pending
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for ConnIo<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for ConnIo<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.io).poll_write(cx, buf);
        this.watch_write(cx, result)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.watch_write(cx, result)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.io).poll_flush(cx);
        this.watch_write(cx, result)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.io).poll_shutdown(cx);
        this.watch_write(cx, result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(
        connection: &Arc<Connection>,
        header: Duration,
        idle: Duration,
    ) -> tokio::task::JoinHandle<()> {
        let connection = connection.clone();
        tokio::spawn(async move { connection.idle_expired(header, idle).await })
    }

    /// Waits (at most 10 s) for the watchdog to find the connection idle.
    async fn closes(watcher: tokio::task::JoinHandle<()>, why: &str) {
        tokio::time::timeout(Duration::from_secs(10), watcher)
            .await
            .expect(why)
            .unwrap();
    }

    /// A request in flight past the limit keeps the connection; its end starts the idle time.
    #[tokio::test]
    async fn a_request_in_flight_holds_off_the_idle_close() {
        let connection = Connection::new(None);
        let request = connection.request_started();
        let watcher = watch(&connection, Duration::from_millis(50), Duration::MAX);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!watcher.is_finished(), "closed with a request in flight");
        drop(request);
        closes(watcher, "closed once idle").await;
    }

    /// A request that starts and ends while the watchdog sleeps moves the deadline, although
    /// it does not wake the watchdog: the close comes a full limit after that request's end.
    #[tokio::test]
    async fn a_request_while_asleep_moves_the_deadline() {
        let connection = Connection::new(None);
        let watcher = watch(&connection, Duration::from_secs(1), Duration::MAX);
        tokio::time::sleep(Duration::from_millis(600)).await;
        drop(connection.request_started());
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(
            !watcher.is_finished(),
            "closed 0.7 s after a request ended, with a 1 s limit"
        );
        closes(watcher, "closed once idle").await;
    }

    /// Presenting a key switches the limit from the header timeout to the idle timeout, at
    /// once: the watchdog asleep towards the short deadline is told.
    #[tokio::test]
    async fn authenticating_switches_to_the_idle_limit() {
        let connection = Connection::new(None);
        let watcher = watch(
            &connection,
            Duration::from_secs(1),
            Duration::from_secs(3600),
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        connection.mark_authenticated();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(
            !watcher.is_finished(),
            "closed at the header timeout after authenticating"
        );
        watcher.abort();
        // And the other way round: an idle limit shorter than the header timeout applies at
        // once too.
        let connection = Connection::new(None);
        let watcher = watch(
            &connection,
            Duration::from_secs(3600),
            Duration::from_millis(50),
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        connection.mark_authenticated();
        closes(watcher, "closed at the idle limit").await;
    }
}
