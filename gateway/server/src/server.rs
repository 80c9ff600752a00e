//! The listener: accepts TCP connections under a connection cap and a per-address cap on
//! unauthenticated connections, terminates TLS (reading the socket ahead of it,
//! `read_ahead`), serves HTTP/1.1 and HTTP/2 (ALPN) with hyper,
//! and drains on SIGTERM/SIGINT after turning readiness off. Both listeners (HTTPS and gRPC)
//! run here, so every limit below holds on both.
//!
//! The deadline of each phase of a connection (`[limits]`, see `config.rs`):
//! - TLS handshake: `handshake_timeout_s`;
//! - protocol detection, first byte and the first request's headers: `header_timeout_s` from
//!   the end of the handshake (the watchdog below; hyper's own header timer covers each later
//!   HTTP/1 request);
//! - request body: `body_timeout_s` without a byte, or below `body_min_rate_bytes_per_s`
//!   (`api::body::ReadDeadline`, 408);
//! - idle with nothing in flight: `header_timeout_s` until the connection presents a valid key,
//!   then `idle_timeout_s` (HTTP/2; hyper closes idle HTTP/1 connections at its header timer);
//! - writes: `send_timeout_s` without progress (`connection::ConnIo`);
//! - an idle close is a graceful one (HTTP/2 GOAWAY) given `header_timeout_s` more, then the
//!   socket is dropped. The idle and drain watchdog of each connection is a task of its own
//!   (see [`watch_connection`]).

use crate::connection::{ConnIo, ConnService, Connection, Handle};
use crate::peers::PeerLimit;
use crate::read_ahead::ReadAhead;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use infergate_service::config::Limits;
use infergate_service::state::AppState;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::task::AbortOnDropHandle;

pub struct Listener {
    pub listener: TcpListener,
    pub tls: Option<TlsAcceptor>,
}

impl Listener {
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

/// hyper's defaults for the largest HTTP/1 head it buffers (8 KiB + 100 × 4 KiB).
const HYPER_DEFAULT_MAX_BUF: usize = 8192 + 4096 * 100;

fn http_builder(state: &AppState) -> Builder<TokioExecutor> {
    let limits = &state.config().limits;
    let mut builder = Builder::new(TokioExecutor::new());
    // hyper answers requests over its own limits with an empty body; ours (checked in
    // `connection::ConnService`, answered with JSON) are lower, so only requests far beyond
    // them meet hyper's.
    builder
        .http1()
        .timer(TokioTimer::new())
        .keep_alive(true)
        .header_read_timeout(Duration::from_secs(limits.header_timeout_s.max(1)))
        .max_headers(limits.max_headers.saturating_mul(2).max(100))
        .max_buf_size(
            (limits.max_header_bytes + limits.max_uri_bytes)
                .saturating_mul(2)
                .max(HYPER_DEFAULT_MAX_BUF),
        );
    // HTTP/2 counts 32 bytes per field on top of name and value.
    let h2_header_list = (limits.max_header_bytes + 32 * limits.max_headers + limits.max_uri_bytes)
        .saturating_mul(2);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(h2_header_list).unwrap_or(u32::MAX))
        .keep_alive_interval(Duration::from_secs(limits.idle_timeout_s.max(1)))
        .keep_alive_timeout(Duration::from_secs(limits.header_timeout_s.max(1)));
    builder
}

/// What a listener serves and how.
struct ListenerSetup<H> {
    builder: Builder<TokioExecutor>,
    handler: H,
    state: Arc<AppState>,
    limits: Arc<Limits>,
}

/// Serves until `shutdown` resolves, then stops accepting, drains (see [`watch_connection`]),
/// waits up to the grace period for in-flight requests, and returns.
pub async fn run<H: Handle>(
    listener: Listener,
    handler: H,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()>,
) {
    let limits = state.config().limits.clone();
    let cap = limits.max_connections.get().min(Semaphore::MAX_PERMITS);
    let permits = Arc::new(Semaphore::new(cap));
    let peers = PeerLimit::new(limits.max_unauthenticated_connections_per_ip);
    let setup = Arc::new(ListenerSetup {
        builder: http_builder(&state),
        handler,
        state: state.clone(),
        limits: Arc::new(limits.clone()),
    });
    let handshake_timeout = Duration::from_secs(limits.handshake_timeout_s.max(1));
    let send_timeout = Duration::from_secs(limits.send_timeout_s.max(1));
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            _ = &mut shutdown => break,
            p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
        };
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Running out of file descriptors must not spin the loop.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(peer_slot) = peers.admit(peer.ip()) else {
            tracing::debug!(%peer, "closed: too many unauthenticated connections from this address");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let connection = Connection::new(peer_slot);
        let io = ConnIo::new(stream, permit, connection.clone(), send_timeout);
        let setup = setup.clone();
        match listener.tls.clone() {
            Some(acceptor) => {
                tokio::spawn(async move {
                    let tls = match tokio::time::timeout(
                        handshake_timeout,
                        acceptor.accept(ReadAhead::new(io)),
                    )
                    .await
                    {
                        Ok(Ok(tls)) => tls,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "TLS handshake timed out");
                            return;
                        }
                    };
                    if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
                        connection.set_http2();
                    }
                    watch_connection(&setup, tls, connection, peer).await;
                });
            }
            None => {
                tokio::spawn(async move {
                    watch_connection(&setup, io, connection, peer).await;
                });
            }
        }
    }
    state.set_ready(false);
    state.drain().start();
    drop(listener);
    let grace = Duration::from_secs(limits.shutdown_grace_s);
    tracing::info!(
        grace_s = grace.as_secs(),
        streams = state.drain().open_streams(),
        "shutting down: draining in-flight requests and streams"
    );
    // Every connection holds a permit until its socket closes, so all of them back means all
    // connections (upgraded WebSockets included) are closed.
    let all_closed = permits.acquire_many(u32::try_from(cap).unwrap_or(u32::MAX));
    tokio::select! {
        _ = all_closed => tracing::info!("all connections and streams closed"),
        _ = tokio::time::sleep(grace) => tracing::warn!("grace period over; closing remaining connections"),
    }
}

/// Why a connection is being closed by the server.
enum Closing {
    /// Nothing in flight for its idle limit: closed gracefully, then dropped if the client
    /// does not let go.
    Idle,
    /// The server is shutting down: closed gracefully, within the grace period.
    Drain,
}

/// Serves one connection and closes it when it has been idle too long or the server drains.
/// On drain an HTTP/2 connection gets its GOAWAY at once; an HTTP/1 one is closed when idle
/// after `shutdown_keepalive_s` (meanwhile its responses carry `Connection: close`), so that
/// a request a client sends on an idle keep-alive connection right after the signal is
/// answered instead of cut off.
async fn watch_connection<I, H: Handle>(
    setup: &ListenerSetup<H>,
    io: I,
    connection: Arc<Connection>,
    peer: SocketAddr,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limits = &setup.limits;
    let header = Duration::from_secs(limits.header_timeout_s.max(1));
    let idle = Duration::from_secs(limits.idle_timeout_s.max(1));
    let keepalive_on_drain =
        Duration::from_secs(limits.shutdown_keepalive_s.min(limits.shutdown_grace_s));
    let service = ConnService {
        handler: setup.handler.clone(),
        connection: connection.clone(),
        peer,
        limits: setup.limits.clone(),
        draining: setup.state.drain().draining(),
    };
    let conn = setup
        .builder
        .serve_connection_with_upgrades(TokioIo::new(io), service)
        .into_owned();
    tokio::pin!(conn);
    // The watchdog runs as a task of its own: polled here, beside the connection, it would be
    // polled at every wake-up of the connection (several per request), each time polling its
    // timer, its notifications and the drain signal. A oneshot receiver is cheap to poll.
    let (closing_tx, closing_rx) = tokio::sync::oneshot::channel();
    let watchdog = {
        let connection = connection.clone();
        let drain = setup.state.drain().signal();
        AbortOnDropHandle::new(tokio::spawn(async move {
            let reason = tokio::select! {
                _ = connection.idle_expired(header, idle) => Closing::Idle,
                _ = drain => {
                    if !connection.is_http2() {
                        tokio::time::sleep(keepalive_on_drain).await;
                    }
                    Closing::Drain
                }
            };
            let _ = closing_tx.send(reason);
        }))
    };
    let result = tokio::select! {
        result = conn.as_mut() => result,
        // An error means the watchdog is gone (the runtime is shutting down): serve on.
        Ok(reason) = closing_rx => {
            conn.as_mut().graceful_shutdown();
            match reason {
                Closing::Drain => conn.await,
                Closing::Idle => match tokio::time::timeout(header, conn).await {
                    Ok(result) => result,
                    Err(_) => {
                        tracing::debug!(%peer, "closed: idle, and did not close after GOAWAY");
                        return;
                    }
                },
            }
        }
    };
    // Aborts the watchdog: the connection is done with it.
    drop(watchdog);
    if let Err(e) = result {
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
}
