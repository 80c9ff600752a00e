//! What a process of the gateway does once at start, whatever it serves: the engine's and the
//! plugin host's settings from the configuration, the first admin key, the service's background
//! tasks, and the shutdown signal.

use crate::config::Config;
use crate::state::AppState;
use anyhow::{anyhow, Context};
use infergate_engine::EngineConfig;
use infergate_plugin_host::{HostConfig, Limits, PluginHost};
use infergate_store::auth::Scopes;
use infergate_store::files::write_atomic;
use infergate_store::Store;
use std::sync::Arc;
use std::time::Duration;

pub fn engine_config(config: &Config) -> anyhow::Result<EngineConfig> {
    Ok(EngineConfig {
        ort_library: config.ort_library().map_err(|e| anyhow!(e))?,
        intra_threads: config.engine.intra_threads,
        instances: config.engine.instances,
        cores: infergate_engine::sizing::available_cores(),
        max_queue_size: config.engine.max_queue_size.get(),
        // The response cache takes its bytes out of the budget before any model loads.
        host_memory_budget: config.model_memory_budget(),
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
pub fn spawn_worker_sweep(state: &Arc<AppState>) {
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

/// Samples the history once a second for as long as the process runs.
pub fn spawn_history_sampler(state: Arc<AppState>) {
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
