//! Starting the gateway: open the store, make sure an admin key exists, start the engine, set
//! up TLS, bind, and serve until a shutdown signal.

use crate::api;
use crate::auth::Scopes;
use crate::config::Config;
use crate::server::{self, Listener};
use crate::state::AppState;
use crate::store::files::write_atomic;
use crate::store::Store;
use crate::tls;
use anyhow::{anyhow, Context};
use infergate_engine::{Engine, EngineConfig};
use infergate_plugin_host::{HostConfig, Limits, PluginHost};
use std::sync::Arc;
use std::time::Duration;

pub fn engine_config(config: &Config) -> anyhow::Result<EngineConfig> {
    Ok(EngineConfig {
        ort_library: config.ort_library().map_err(|e| anyhow!(e))?,
        intra_threads: config.engine.intra_threads,
        instances: config.engine.instances,
        cores: infergate_engine::sizing::available_cores(),
        max_queue_size: config.engine.max_queue_size.get(),
        host_memory_budget: config.engine.host_memory_budget_bytes,
        memory_factor: EngineConfig::DEFAULT_MEMORY_FACTOR,
        device: config.engine.device.0,
        // Compiled kernels are cached per NVRTC version and GPU architecture in the data dir.
        ptx_cache_dir: Some(config.data_dir.join("ptx-cache")),
        idle_spin: Duration::from_micros(config.engine.idle_spin_us),
        intra_spinning: config.engine.ort_spinning,
    })
}

/// The WebAssembly plugin host, with the configured per-call limits and its compiled-artifact
/// cache in the data directory.
pub fn plugin_host(config: &Config, store: &Store) -> anyhow::Result<PluginHost> {
    let settings = &config.plugins;
    let mut host_config = HostConfig::with_cache_dir(store.dir().plugin_cache());
    host_config.default_limits = Limits {
        deadline: Duration::from_millis(settings.deadline_ms.max(1)),
        memory_bytes: settings.memory_mib.max(1) << 20,
        output_bytes: settings.max_output_mib.max(1) << 20,
        ..Limits::default()
    };
    host_config.max_concurrent_compiles = settings.max_concurrent_compiles.get();
    host_config.compile_wait = Duration::from_secs(settings.compile_wait_s);
    PluginHost::new(host_config).map_err(|e| anyhow!("starting the plugin host: {e}"))
}

/// On the first start (no keys at all) creates an admin key, writes it to DATA/admin.key with
/// mode 0600 and prints it once. Of replicas starting together on an empty database, exactly
/// one creates it (`Store::create_first_key`).
pub fn ensure_admin_key(store: &Store) -> anyhow::Result<()> {
    let path = store.dir().admin_key();
    let created = match store.key_count()? {
        0 => store.create_first_key(
            "admin",
            &Scopes::parse_list("admin").map_err(|e| anyhow!(e))?,
        )?,
        _ => None,
    };
    let Some((record, secret)) = created else {
        if !path.exists() {
            tracing::info!("an admin key already exists (created by another replica, or earlier): none created here; use the one its creator printed");
        }
        return Ok(());
    };
    write_atomic(&path, format!("{secret}\n").as_bytes(), 0o600)
        .with_context(|| format!("writing {}", path.display()))?;
    println!(
        "infergate: admin API key (shown once; also saved to {} with mode 0600):",
        path.display()
    );
    println!("{secret}");
    tracing::info!(key_id = record.id, path = %path.display(), "created the admin API key");
    Ok(())
}

/// Turns workers whose heartbeats stopped into `lost`, twice per heartbeat interval.
fn spawn_worker_sweep(state: &Arc<AppState>) {
    let workers = state.workers().clone();
    let period = (workers.heartbeat().interval / 2).max(Duration::from_millis(50));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        loop {
            tick.tick().await;
            workers.sweep();
        }
    });
}

pub async fn serve(config: Config) -> anyhow::Result<()> {
    config.validate().map_err(|e| anyhow!(e))?;
    let store = Arc::new(
        Store::open_with(&config.data_dir, &config.store).with_context(|| {
            format!(
                "opening the store ({}, data directory {})",
                if config.store.url.is_some() {
                    "PostgreSQL"
                } else {
                    "SQLite"
                },
                config.data_dir.display()
            )
        })?,
    );
    // Before anything writes: what a crash left half-done is collected now.
    store
        .collect_orphans()
        .context("collecting files a crash left behind")?;
    ensure_admin_key(&store)?;
    let engine = Arc::new(Engine::new(engine_config(&config)?)?);
    let tls = if config.insecure_http {
        tracing::warn!("--insecure-http: serving plain HTTP; API keys travel in clear text");
        None
    } else {
        let setup = tls::server_config(&config.tls, store.dir()).map_err(|e| anyhow!(e))?;
        tracing::info!(cert = %setup.cert_path.display(), self_signed = setup.self_signed, mtls = config.tls.client_ca.is_some(), "TLS ready");
        Some(tokio_rustls::TlsAcceptor::from(setup.config))
    };
    let plugin_host = Arc::new(plugin_host(&config, &store)?);
    let state = Arc::new(AppState::new(config.clone(), store, engine, plugin_host)?);
    // Workers reach this listener by the cluster's own server name and certificate.
    let tls = match tls {
        Some(acceptor) => Some(tokio_rustls::TlsAcceptor::from(
            crate::workers::tls::manager_server_config(
                acceptor.config(),
                &state.workers().material().ca,
            )?,
        )),
        None => None,
    };
    spawn_worker_sweep(&state);
    crate::workers::manager::spawn_refresh(state.workers().clone(), state.store().clone());
    state.plugins().prune_cache(state.store())?;
    state.apply_model_configs().await;
    crate::replica_sync::spawn(&state);
    crate::llm::LlmModels::spawn_idle_unloader(state.llm());
    let handler = api::front::Handler::Api(Arc::new(api::router(state.clone())));
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let listener = Listener {
        listener,
        tls: tls.clone(),
    };
    let addr = listener.local_addr()?;
    state.workers().set_local_address(addr);
    let scheme = if config.insecure_http {
        "http"
    } else {
        "https"
    };
    if let Some(metrics_addr) = config.metrics.listen {
        let metrics_listener = tokio::net::TcpListener::bind(metrics_addr)
            .await
            .with_context(|| format!("binding the metrics listener {metrics_addr}"))?;
        tracing::info!(
            "metrics (no key) on http://{}/metrics",
            metrics_listener.local_addr()?
        );
        let metrics_router = api::metrics::router(state.clone());
        tokio::spawn(async move {
            if let Err(e) = axum::serve(metrics_listener, metrics_router).await {
                tracing::error!(error = %e, "metrics listener failed");
            }
        });
    }
    spawn_history_sampler(state.clone());
    let grpc_listener = if config.grpc.enabled {
        let listener = tokio::net::TcpListener::bind(config.grpc.listen)
            .await
            .with_context(|| format!("binding the gRPC listener {}", config.grpc.listen))?;
        Some(Listener {
            listener,
            tls: tls.clone(),
        })
    } else {
        None
    };
    // One signal stops both listeners; each drains its own connections.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        server::shutdown_signal().await;
        stop.send_replace(true);
    });
    let shutdown = move || {
        let mut stopped = stopped.clone();
        async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        }
    };
    tracing::info!(
        models = state.catalog().all().len(),
        "listening on {scheme}://{addr}"
    );
    // Logged after the HTTP line, which clients that wait for `listening on` read first.
    let grpc = match grpc_listener {
        Some(listener) => {
            tracing::info!("grpc listening on {scheme}://{}", listener.local_addr()?);
            let router = crate::grpc::server::router(state.clone());
            Some(tokio::spawn(server::run(
                listener,
                api::front::Handler::Routes(router),
                state.clone(),
                shutdown(),
            )))
        }
        None => None,
    };
    server::run(listener, handler, state, shutdown()).await;
    if let Some(grpc) = grpc {
        let _ = grpc.await;
    }
    Ok(())
}

/// Samples the history once a second for as long as the process runs.
fn spawn_history_sampler(state: Arc<AppState>) {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(Duration::from_secs(1));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last = tokio::time::Instant::now();
        loop {
            ticker.tick().await;
            let seconds = last.elapsed().as_secs_f64().max(1e-3);
            last = tokio::time::Instant::now();
            let s = &state;
            let now = crate::history::now_ms();
            s.history().sample(
                s.catalog(),
                s.pipelines(),
                s.engine(),
                s.metrics(),
                seconds,
                now,
            );
        }
    });
}
