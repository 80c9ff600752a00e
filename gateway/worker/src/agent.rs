//! `infergate worker`: a host that joins a manager and runs model versions for it.
//!
//! Start-up: bind the listener (so the advertised port is known), join the manager with the join
//! secret, serve KServe v2 inference over mutual TLS with the certificate the manager issued.
//! Then a heartbeat every interval (to the next manager given when one does not answer: gateway
//! replicas on one store); when the manager forgets this worker (restart with a lost
//! registry, removal) it joins again on its own, and stops if the manager refuses (removed by
//! an operator). Model versions are fetched by sha256 from the manager on first use, checked and
//! cached in the data directory. SIGTERM: report draining, finish in-flight requests,
//! deregister, exit.

use super::link::ManagerLink;
use super::window::LatencyWindow;
use crate::args::WorkerArgs;
use crate::heartbeat::{heartbeats, join_until_answered};
use crate::listener::serve;
use crate::node::Node;
use crate::routes::router;
use anyhow::{anyhow, Context};
use infergate_cluster::ca::Issued;
use infergate_cluster::direct::Verifier;
use infergate_cluster::join::JoinSecret;
use infergate_cluster::messages::JoinRequest;
use infergate_engine::Engine;
use infergate_service::config::Config;
use infergate_service::host::{self};
use infergate_store::files::write_atomic;
use infergate_store::DataDir;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

pub async fn run(args: WorkerArgs) -> anyhow::Result<()> {
    let secret = JoinSecret::parse(&args.join_token).map_err(|e| anyhow!("--join-token: {e}"))?;
    let link = ManagerLink::new(&args.join, &args.join_token, &secret.ca_pin).await?;
    let data = DataDir::create(&args.data_dir)
        .with_context(|| format!("creating data directory {}", args.data_dir.display()))?;
    let mut config = Config {
        data_dir: args.data_dir.clone(),
        ort_lib: args.ort_lib.clone(),
        ..Config::default()
    };
    if let Some(device) = args.device {
        config.engine.device = device;
    }
    config.engine.intra_threads = args.intra_threads.or(config.engine.intra_threads);
    config.engine.instances = args.instances.or(config.engine.instances);
    let engine = Arc::new(Engine::new(infergate_service::startup::engine_config(
        &config,
    )?)?);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let addr = listener.local_addr()?;
    let grpc_listen = args
        .grpc_listen
        .unwrap_or_else(|| grpc_default(args.listen));
    let grpc_listener = tokio::net::TcpListener::bind(grpc_listen)
        .await
        .with_context(|| {
            format!("binding {grpc_listen} for gRPC (choose one with --grpc-listen)")
        })?;
    let grpc_addr = grpc_listener.local_addr()?;
    let id_file = data.root().join("worker-id");
    let request = JoinRequest {
        worker_id: std::fs::read_to_string(&id_file)
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty()),
        advertise: args.advertise.clone().unwrap_or_else(|| addr.to_string()),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        devices: host::devices(),
    };
    let joined = join_until_answered(&link, &request).await?;
    write_atomic(&id_file, joined.worker_id.as_bytes(), 0o644)
        .with_context(|| format!("writing {}", id_file.display()))?;
    tracing::info!(worker = %joined.worker_id, manager = %link.shown(), "joined the manager");
    let tls = infergate_hop::tls::worker_server_config(
        &Issued {
            cert_pem: joined.cert_pem.clone(),
            key_pem: joined.key_pem.clone(),
        },
        &joined.ca_pem,
    )?;
    let node = Arc::new(Node {
        engine,
        data,
        link,
        credential: RwLock::new(joined.credential.clone()),
        models: Mutex::new(HashMap::new()),
        fetching: tokio::sync::Mutex::new(()),
        in_flight: AtomicU32::new(0),
        draining: AtomicBool::new(false),
        last_used: Mutex::new(HashMap::new()),
        latencies: Mutex::new(LatencyWindow::new(Instant::now())),
        limiter: infergate_limits::Limiter::new(),
        devices: request.devices.clone(),
        grpc: grpc_advertised(&request.advertise, grpc_addr.port()),
        cache_bytes: args.cache_bytes,
        verifier: Verifier::new(
            &hex::decode(&joined.token_public_key).context("the manager's token key is not hex")?,
            &joined.worker_id,
        ),
    });
    let request = JoinRequest {
        worker_id: Some(joined.worker_id.clone()),
        ..request
    };
    let (stop, stopped) = watch::channel(false);
    let fatal = Arc::new(Mutex::new(None::<String>));
    let interval = Duration::from_millis(joined.heartbeat_interval_ms.max(100));
    let beats = tokio::spawn(heartbeats(
        node.clone(),
        request,
        interval,
        stopped.clone(),
        stop.clone(),
        fatal.clone(),
    ));
    {
        let stop = stop.clone();
        tokio::spawn(async move {
            infergate_service::startup::shutdown_signal().await;
            stop.send_replace(true);
        });
    }
    tracing::info!("worker listening on https://{addr}");
    tracing::info!("worker serving KServe gRPC on {grpc_addr} (TLS)");
    let router = router(node.clone(), args.max_request_bytes);
    let grpc_router = super::grpc::router(node.clone(), args.max_request_bytes);
    let grace = Duration::from_secs(args.shutdown_grace_s);
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    tokio::join!(
        serve(
            listener,
            acceptor.clone(),
            router,
            stopped.clone(),
            node.clone(),
            grace,
        ),
        serve(
            grpc_listener,
            acceptor,
            grpc_router,
            stopped,
            node.clone(),
            grace
        ),
    );
    let _ = beats.await;
    if let Some(why) = fatal.lock().take() {
        return Err(anyhow!(why));
    }
    let credential = node.credential.read().clone();
    match node.link.deregister(&credential).await {
        Ok(()) => tracing::info!("deregistered from the manager"),
        Err(e) => {
            tracing::warn!(error = %e, "could not deregister; the manager will see this worker lost")
        }
    }
    Ok(())
}

/// The gRPC listener when none is given: the HTTP listener's address with the next port (any
/// free port when that one is any free port).
fn grpc_default(http: SocketAddr) -> SocketAddr {
    let port = match http.port() {
        0 => 0,
        p => p.checked_add(1).unwrap_or(0),
    };
    SocketAddr::new(http.ip(), port)
}

/// Where clients reach the gRPC listener: the advertised host (the one the worker's certificate
/// names) with the gRPC port.
fn grpc_advertised(advertise: &str, port: u16) -> String {
    match advertise.rsplit_once(':') {
        Some((host, _)) => format!("{host}:{port}"),
        None => format!("{advertise}:{port}"),
    }
}
