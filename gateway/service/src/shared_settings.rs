//! The run-time settings replicas share through the store besides models' own: payload log
//! sinks defined or removed through the admin API ([`crate::payload_log::stored`]) and trace
//! settings ([`crate::trace_settings`]). Applied at start over the configuration file's, and on
//! PostgreSQL again whenever another replica changes them ([`crate::replica_sync`]).

use crate::state::AppState;
use infergate_store::StoreError;
use std::sync::Arc;

/// Makes this process's sinks the configuration file's with the stored ones over them. A sink
/// that cannot be used here (a file this host cannot open) is logged and left out.
pub async fn apply_sinks(state: &Arc<AppState>) -> Result<(), StoreError> {
    let st = state.clone();
    let applied = tokio::task::spawn_blocking(move || {
        let before = st.payload_logs().definitions();
        let stored = st.store().list_payload_log_sinks()?;
        Ok::<_, StoreError>(st.payload_logs().follow(stored, &before))
    })
    .await;
    let errors = match applied {
        Ok(errors) => errors?,
        Err(e) => return Err(StoreError::Io(format!("applying payload log sinks: {e}"))),
    };
    for error in errors {
        tracing::error!(%error, "a payload log sink an admin defined cannot be used on this replica; entries for it are not written here until it is defined again");
    }
    Ok(())
}

/// Makes this process's trace settings the stored ones.
pub fn apply_traces(state: &AppState) -> Result<(), StoreError> {
    let records = state.store().list_trace_settings()?;
    crate::trace_settings::follow(&records);
    Ok(())
}
