//! The listener: accepts TCP connections under a connection cap, terminates TLS with a
//! handshake deadline, serves HTTP/1.1 and HTTP/2 (ALPN) with hyper, and drains in-flight
//! requests on SIGTERM/SIGINT after turning readiness off.

use crate::state::AppState;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

pub struct Listener {
    pub listener: TcpListener,
    pub tls: Option<TlsAcceptor>,
}

impl Listener {
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

fn http_builder(state: &AppState) -> Builder<TokioExecutor> {
    let limits = &state.config.limits;
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .keep_alive(true)
        .header_read_timeout(Duration::from_secs(limits.header_timeout_s));
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Duration::from_secs(limits.idle_timeout_s.max(1)))
        .keep_alive_timeout(Duration::from_secs(limits.header_timeout_s.max(1)));
    builder
}

/// Serves until `shutdown` resolves, then stops accepting, waits up to the grace period for
/// in-flight requests, and returns.
pub async fn run(
    listener: Listener,
    router: Router,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(state.config.limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let builder = Arc::new(http_builder(&state));
    let handshake_timeout = Duration::from_secs(state.config.limits.header_timeout_s.max(1));
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
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let builder = builder.clone();
        let watcher = graceful.watcher();
        match listener.tls.clone() {
            Some(acceptor) => {
                tokio::spawn(async move {
                    let _permit = permit;
                    let tls = match tokio::time::timeout(handshake_timeout, acceptor.accept(stream))
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
                    serve_connection(&builder, tls, service, watcher, peer).await;
                });
            }
            None => {
                tokio::spawn(async move {
                    let _permit = permit;
                    serve_connection(&builder, stream, service, watcher, peer).await;
                });
            }
        }
    }
    state.set_ready(false);
    state.drain.start();
    drop(listener);
    let grace = Duration::from_secs(state.config.limits.shutdown_grace_s);
    tracing::info!(
        grace_s = grace.as_secs(),
        streams = state.drain.open_streams(),
        "shutting down: draining in-flight requests and streams"
    );
    let drained = async {
        graceful.shutdown().await;
        state.drain.streams_closed().await;
    };
    tokio::select! {
        _ = drained => tracing::info!("all connections and streams closed"),
        _ = tokio::time::sleep(grace) => tracing::warn!("grace period over; closing remaining connections"),
    }
}

async fn serve_connection<I>(
    builder: &Builder<TokioExecutor>,
    io: I,
    service: TowerToHyperService<Router>,
    watcher: hyper_util::server::graceful::Watcher,
    peer: SocketAddr,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    if let Err(e) = watcher.watch(conn.into_owned()).await {
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutdown signal received");
}
