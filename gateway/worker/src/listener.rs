//! The worker's mutual-TLS listener.

use crate::node::{Node, Peer};
use axum::Router;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Connections a worker serves at once (the manager's pooled ones and direct clients).
const MAX_CONNECTIONS: usize = 4096;
/// Accepts mutual-TLS connections until `stopped`, then lets open requests finish (up to
/// `grace`).
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    router: Router,
    mut stopped: watch::Receiver<bool>,
    node: Arc<Node>,
    grace: Duration,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    use hyper_util::server::conn::auto::Builder;
    let mut builder = Builder::new(TokioExecutor::new());
    // A direct client that never finishes its headers does not hold a connection forever.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(infergate_hop::HANDSHAKE_TIMEOUT);
    let builder = Arc::new(builder);
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            break;
        };
        let (stream, peer) = tokio::select! {
            _ = stopped.wait_for(|s| *s) => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        // A manager or client that went silent (a partition) lets go of its connection within
        // the hop's deadline instead of TCP's quarter of an hour of retransmissions.
        if let Err(e) = infergate_hop::link::LinkSettings::default().apply(&stream) {
            tracing::debug!(%peer, error = %e, "could not set the connection's keepalive");
        }
        let acceptor = acceptor.clone();
        let router = router.clone();
        let builder = builder.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let _permit = permit;
            let tls = match tokio::time::timeout(
                infergate_hop::HANDSHAKE_TIMEOUT,
                acceptor.accept(stream),
            )
            .await
            {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake refused");
                    return;
                }
                Err(_) => return,
            };
            let peer = Peer {
                cluster: tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .is_some_and(|c| !c.is_empty()),
            };
            let service =
                hyper_util::service::TowerToHyperService::new(router.layer(axum::Extension(peer)));
            let connection = builder
                .serve_connection_with_upgrades(TokioIo::new(tls), service)
                .into_owned();
            let _ = watcher.watch(connection).await;
        });
    }
    drop(listener);
    node.draining.store(true, Ordering::Relaxed);
    tracing::info!(
        in_flight = node.in_flight.load(Ordering::Relaxed),
        "draining: finishing in-flight requests"
    );
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("in-flight requests did not finish within the grace period");
    }
}
