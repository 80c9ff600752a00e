//! Starting the gateway: open the store, make sure an admin key exists, start the engine, set
//! up TLS, bind, and serve until a shutdown signal.

use crate::api;
use crate::server::{self, Listener};
use crate::tls;
use anyhow::{anyhow, Context};
use infergate_engine::Engine;
use infergate_service::config::Config;
use infergate_service::state::AppState;
use infergate_store::Store;
use std::sync::Arc;

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
    infergate_service::startup::ensure_admin_key(&store)?;
    let engine = Arc::new(Engine::new(infergate_service::startup::engine_config(
        &config,
    )?)?);
    let tls = if config.insecure_http {
        tracing::warn!("--insecure-http: serving plain HTTP; API keys travel in clear text");
        None
    } else {
        let setup = tls::server_config(&config.tls, store.dir()).map_err(|e| anyhow!(e))?;
        tracing::info!(cert = %setup.cert_path.display(), self_signed = setup.self_signed, mtls = config.tls.client_ca.is_some(), "TLS ready");
        Some(tokio_rustls::TlsAcceptor::from(setup.config))
    };
    let plugin_host = Arc::new(infergate_service::startup::plugin_host(&config, &store)?);
    let state = Arc::new(AppState::new(config.clone(), store, engine, plugin_host)?);
    if let Some(access) = state.anonymous() {
        tracing::warn!("{}", access.warning());
    }
    if let Some(shm) = state.shared_memory() {
        tracing::info!(
            key_prefix = shm.prefix(),
            "system shared memory: loopback callers may register objects named {}*; set [shared_memory] key_prefix to confine them, or enabled = false",
            shm.prefix()
        );
    }
    // Workers reach this listener by the cluster's own server name and certificate.
    let tls = match tls {
        Some(acceptor) => Some(tokio_rustls::TlsAcceptor::from(
            infergate_hop::tls::manager_server_config(
                acceptor.config(),
                &state.workers().material().ca,
            )?,
        )),
        None => None,
    };
    infergate_service::startup::spawn_worker_sweep(&state);
    infergate_service::manager::spawn_refresh(state.workers().clone(), state.store().clone());
    state.plugins().prune_cache(state.store())?;
    state.apply_model_configs().await;
    infergate_service::shared_settings::apply_sinks(&state).await?;
    infergate_service::shared_settings::apply_traces(&state)?;
    infergate_service::replica_sync::spawn(&state);
    infergate_service::traffic::spawn(&state);
    infergate_service::token_accounting::TokenAccounting::spawn_flusher(
        state.tokens().accounting(),
        state.store().clone(),
    );
    infergate_service::chat_models::LlmModels::spawn_idle_unloader(state.llm());
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
    infergate_service::startup::spawn_history_sampler(state.clone());
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
        infergate_service::startup::shutdown_signal().await;
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
