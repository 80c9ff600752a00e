//! Replicas on one PostgreSQL store follow each other's models, plugins and pipelines: each
//! replica holds them in memory (`AppState::catalog`, `plugins`, `pipelines`) and updates them
//! at once for its own writes; this task applies the writes of the others. The store says which
//! table changed (`store::CatalogChanges`: a `NOTIFY` per write, and "everything" at every
//! resync and reconnection), and the task re-reads that table and applies the difference:
//! - model versions: new ones are served (their stored config handed to the engine first, as at
//!   start; their file fetched from PostgreSQL into the data directory in the background),
//!   reconfigured ones get the new config the way `PUT .../config` applies it, deleted ones are
//!   refused and unloaded and their file leaves the data directory when nothing references it;
//! - plugins: new versions compiled and served, deleted ones dropped, new limits applied;
//! - pipelines: new or changed specs used by new requests, deleted ones gone;
//! - models' settings (traffic policies): re-read whole and applied to the next request;
//! - payload log sinks defined or removed at run time, and trace settings
//!   (`crate::shared_settings`): re-read whole and applied, unchanged sinks left alone.
//!
//! Only entries held before the table was read are dropped when missing from it, so a write
//! this replica makes while a re-read is under way is never lost; a re-read that raced with
//! this replica's own delete can bring the deleted entry back for a moment, until that
//! delete's own notification arrives (milliseconds). SQLite has no such task: one process
//! makes every change itself.

use crate::catalog::model_key;
use crate::pipelines::spec::{PipelineSpec, PipelineSpecExt};
use crate::state::AppState;
use infergate_engine::ModelConfig;
use infergate_store::models::ModelRecord;
use infergate_store::{BlobKind, CatalogChanges};
use std::collections::HashSet;
use std::sync::Arc;

/// Starts following other replicas' changes when the store is shared (PostgreSQL).
pub fn spawn(state: &Arc<AppState>) {
    let Some(mut changes) = state.store().catalog_changes() else {
        return;
    };
    let state = state.clone();
    tokio::spawn(async move {
        // None: everything is re-read once now, for what changed between the start-up load
        // and this subscription.
        let mut seen: Option<CatalogChanges> = None;
        loop {
            let now = *changes.borrow_and_update();
            let moved = |count: fn(&CatalogChanges) -> u64| {
                seen.is_none_or(|seen| count(&seen) != count(&now))
            };
            if moved(|c| c.models) {
                if let Err(e) = sync_models(&state).await {
                    tracing::warn!(error = %e, "could not re-read model versions changed by another replica; retrying at the next change or resync");
                }
            }
            if moved(|c| c.plugins) {
                let st = state.clone();
                let synced =
                    tokio::task::spawn_blocking(move || st.plugins().sync(st.store())).await;
                match synced {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e.message, "could not re-read plugins changed by another replica; retrying at the next change or resync")
                    }
                    Err(e) => tracing::error!(error = %e, "plugin re-read task failed"),
                }
            }
            if moved(|c| c.settings) {
                match state.store().list_model_settings() {
                    Ok(all) => state.model_settings().replace_all(all),
                    Err(e) => {
                        tracing::warn!(error = %e, "could not re-read models' settings changed by another replica; retrying at the next change or resync")
                    }
                }
            }
            if moved(|c| c.sinks) {
                if let Err(e) = crate::shared_settings::apply_sinks(&state).await {
                    tracing::warn!(error = %e, "could not re-read payload log sinks changed by another replica; retrying at the next change or resync");
                }
            }
            if moved(|c| c.traces) {
                if let Err(e) = crate::shared_settings::apply_traces(&state) {
                    tracing::warn!(error = %e, "could not re-read trace settings changed by another replica; retrying at the next change or resync");
                }
            }
            if moved(|c| c.pipelines) {
                if let Err(e) = sync_pipelines(&state) {
                    tracing::warn!(error = %e, "could not re-read pipelines changed by another replica; retrying at the next change or resync");
                }
            }
            seen = Some(now);
            if changes.changed().await.is_err() {
                return;
            }
        }
    });
}

async fn sync_models(state: &AppState) -> Result<(), infergate_store::StoreError> {
    let before = state.catalog().all();
    let stored = state.store().list_model_versions()?;
    let kept: HashSet<(String, u64)> = stored.iter().map(|r| (r.name.clone(), r.version)).collect();
    for record in stored {
        let current = state
            .catalog()
            .versions(&record.name)
            .into_iter()
            .find(|r| r.version == record.version);
        let key = model_key(&record);
        match &current {
            Some(c) if c.sha256 == record.sha256 && c.config == record.config => continue,
            // Deleted and uploaded again under the same version elsewhere: other bytes.
            Some(c) if c.sha256 != record.sha256 => {
                state.engine().unload(&key);
                state.llm().unload(&key);
            }
            _ => {}
        }
        let applied = match ModelConfig::from_json(&record.config) {
            Ok(config) => state.engine().set_config(&key, config).await,
            Err(e) => Err(e),
        };
        if let Err(e) = applied {
            tracing::error!(model = %key, error = %e, "model config stored by another replica refused; serving with defaults");
        }
        tracing::info!(model = %key, new = current.is_none(), "model version changed by another replica");
        if current.is_none() {
            prefetch(state, &record);
        }
        let (name, version) = (record.name.clone(), record.version);
        state.catalog().insert(record);
        state.version_reconfigured(&name, version);
    }
    for record in before {
        if !kept.contains(&(record.name.clone(), record.version)) {
            let key = model_key(&record);
            state.catalog().remove(&record.name, record.version);
            state.version_deleted(&record.name, record.version);
            state.engine().unload(&key);
            state.llm().unload(&key);
            tracing::info!(model = %key, "model version deleted by another replica");
            let (store, sha256) = (state.store().clone(), record.sha256.clone());
            let dropped = tokio::task::spawn_blocking(move || {
                store.drop_unreferenced_local_blob(BlobKind::Model, &sha256)
            })
            .await;
            if let Ok(Err(e)) = dropped {
                tracing::warn!(model = %key, error = %e, "could not drop this replica's copy of a deleted model file; the next start collects it");
            }
        }
    }
    Ok(())
}

/// Fetches a version's file from PostgreSQL into this replica's data directory in the
/// background, so that its first request does not wait for the download (a request that comes
/// first fetches it itself: `AppState::model_file`).
fn prefetch(state: &AppState, record: &ModelRecord) {
    let store = state.store().clone();
    let (key, sha256) = (model_key(record), record.sha256.clone());
    tokio::task::spawn_blocking(move || {
        if let Err(e) = store.local_blob(BlobKind::Model, &sha256) {
            tracing::warn!(model = %key, error = %e, "could not fetch a model file uploaded on another replica; its first request tries again");
        }
    });
}

fn sync_pipelines(state: &AppState) -> Result<(), infergate_store::StoreError> {
    let before: Vec<String> = state
        .pipelines()
        .all()
        .iter()
        .map(|p| p.record.name.clone())
        .collect();
    let stored = state.store().list_pipelines()?;
    let kept: HashSet<String> = stored.iter().map(|r| r.name.clone()).collect();
    for record in stored {
        if state.pipelines().get(&record.name).is_some_and(|p| {
            p.record.updated_at == record.updated_at && p.record.spec == record.spec
        }) {
            continue;
        }
        match PipelineSpec::from_json(&record.spec) {
            Ok(spec) => {
                tracing::info!(pipeline = %record.name, "pipeline changed by another replica");
                state.pipelines().insert(record, spec);
            }
            Err(e) => {
                tracing::error!(pipeline = %record.name, error = %e, "pipeline saved by another replica is invalid here");
                state.pipelines().remove(&record.name);
            }
        }
    }
    for name in before {
        if !kept.contains(&name) {
            state.pipelines().remove(&name);
            tracing::info!(pipeline = %name, "pipeline deleted by another replica");
        }
    }
    Ok(())
}
