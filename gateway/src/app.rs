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
use std::sync::Arc;

pub fn engine_config(config: &Config) -> anyhow::Result<EngineConfig> {
    Ok(EngineConfig {
        ort_library: config.ort_library().map_err(|e| anyhow!(e))?,
        intra_threads: config.engine.intra_threads,
        instances: config.engine.instances.max(1),
        max_queue_size: config.engine.max_queue_size.max(1),
    })
}

/// On the first start (no keys at all) creates an admin key, writes it to DATA/admin.key with
/// mode 0600 and prints it once.
pub fn ensure_admin_key(store: &Store) -> anyhow::Result<()> {
    if store.key_count()? > 0 {
        return Ok(());
    }
    let (record, secret) = store.create_key(
        "admin",
        &Scopes::parse_list("admin").map_err(|e| anyhow!(e))?,
    )?;
    let path = store.dir().admin_key();
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

pub async fn serve(config: Config) -> anyhow::Result<()> {
    config.validate().map_err(|e| anyhow!(e))?;
    let store = Arc::new(
        Store::open(&config.data_dir)
            .with_context(|| format!("opening data directory {}", config.data_dir.display()))?,
    );
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
    let state =
        Arc::new(AppState::new(config.clone(), store, engine).map_err(|e| anyhow!(e.message))?);
    let router = api::router(state.clone());
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let listener = Listener { listener, tls };
    let addr = listener.local_addr()?;
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
    tracing::info!(
        models = state.catalog.all().len(),
        "listening on {scheme}://{addr}"
    );
    server::run(listener, router, state, server::shutdown_signal()).await;
    Ok(())
}
