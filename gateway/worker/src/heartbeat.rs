//! The first join, and a heartbeat every interval until stopped.

use super::link::{LinkError, ManagerLink};
use crate::node::Node;
use anyhow::anyhow;
use infergate_cluster::messages::{JoinRequest, JoinResponse};
use infergate_service::host::CpuSampler;
use parking_lot::Mutex;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The first join: retried while the manager is unreachable (it may start after its workers),
/// fatal when it refuses.
pub(crate) async fn join_until_answered(
    link: &ManagerLink,
    request: &JoinRequest,
) -> anyhow::Result<JoinResponse> {
    let mut warned = false;
    loop {
        match link.join(request).await {
            Ok(joined) => return Ok(joined),
            Err(LinkError::Refused(why)) => {
                return Err(anyhow!(
                    "the manager refused to let this worker join: {why}"
                ))
            }
            Err(LinkError::Unreachable(why)) => {
                if !warned {
                    tracing::warn!(error = %why, "manager not reachable yet; retrying every 2 s");
                    warned = true;
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    }
}

/// Reports every interval until stopped; on SIGTERM reports draining once more. A refused
/// heartbeat makes the worker join again; a refused join stops it.
pub(crate) async fn heartbeats(
    node: Arc<Node>,
    request: JoinRequest,
    interval: Duration,
    mut stopped: watch::Receiver<bool>,
    stop: watch::Sender<bool>,
    fatal: Arc<Mutex<Option<String>>>,
) {
    let mut cpu = CpuSampler::new();
    let mut unreachable = false;
    // Within one interval, so that a hung manager leaves time to reach the next before the
    // worker is judged lost; never below a second (a busy manager answers in milliseconds).
    let timeout = interval.max(Duration::from_secs(1));
    // Heartbeats leave on a fixed cadence, not an interval after the last answer: on a slow
    // link the round trip would otherwise stretch every gap the manager sees, and one
    // retransmitted heartbeat would then push the gap past the missed-heartbeat budget.
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let changed = tokio::select! {
            _ = ticks.tick() => false,
            _ = stopped.changed() => true,
        };
        if changed || *stopped.borrow() {
            node.draining.store(true, Ordering::Relaxed);
            let report = node.report(&mut cpu);
            let credential = node.credential.read().clone();
            if let Err(e) = node.link.heartbeat(&credential, &report, timeout).await {
                tracing::warn!(error = %e, "could not report draining");
            }
            return;
        }
        let report = node.report(&mut cpu);
        let credential = node.credential.read().clone();
        match node.link.heartbeat(&credential, &report, timeout).await {
            Ok(()) => {
                if std::mem::take(&mut unreachable) {
                    tracing::info!("manager reachable again");
                }
            }
            Err(LinkError::Unreachable(why)) => {
                if !std::mem::replace(&mut unreachable, true) {
                    tracing::warn!(error = %why, "heartbeat failed; retrying every interval");
                }
            }
            Err(LinkError::Refused(why)) => {
                tracing::warn!(error = %why, "the manager does not know this worker; joining again");
                match node.link.join(&request).await {
                    Ok(joined) => {
                        *node.credential.write() = joined.credential;
                        tracing::info!(worker = %joined.worker_id, "joined the manager again");
                    }
                    Err(LinkError::Unreachable(why)) => {
                        tracing::warn!(error = %why, "rejoin failed; retrying");
                    }
                    Err(LinkError::Refused(why)) => {
                        tracing::error!(error = %why, "the manager refused this worker; stopping");
                        *fatal.lock() = Some(format!("the manager refused this worker: {why}"));
                        stop.send_replace(true);
                        return;
                    }
                }
            }
        }
    }
}
