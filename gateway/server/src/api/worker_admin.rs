//! The handle the operator's worker routes take (`State<WorkerAdmin>`) instead of the whole
//! server state: the store that records workers and join secrets, and the manager that routes
//! to them. Each method is one operator action; the routes decode, call it and answer.

use axum::extract::FromRef;
use infergate_api_types::workers::{JoinTokenCreated, TokenRevoked, WorkerDraining, WorkerRemoved};
use infergate_service::error::{ApiError, ApiResult};
use infergate_service::manager::Manager;
use infergate_service::state::AppState;
use infergate_store::Store;
use std::sync::Arc;

#[derive(Clone)]
pub struct WorkerAdmin {
    store: Arc<Store>,
    manager: Arc<Manager>,
}

impl FromRef<Arc<AppState>> for WorkerAdmin {
    fn from_ref(state: &Arc<AppState>) -> WorkerAdmin {
        WorkerAdmin {
            store: state.store().clone(),
            manager: state.workers().clone(),
        }
    }
}

impl WorkerAdmin {
    /// A new join secret, valid `ttl_s` seconds (until revoked without one).
    pub fn create_token(&self, ttl_s: Option<u64>) -> ApiResult<JoinTokenCreated> {
        let (secret, expires_at) = infergate_service::manager::admission::create_join_secret(
            &self.store,
            &self.manager.material().ca,
            ttl_s,
        )?;
        Ok(JoinTokenCreated {
            token: secret.to_string(),
            id: secret.id,
            expires_at,
        })
    }

    /// The join secret admits nobody from now on.
    pub fn revoke_token(&self, id: String) -> ApiResult<TokenRevoked> {
        if !self.store.revoke_join_secret(&id)? {
            return Err(ApiError::not_found(format!("no join secret '{id}'")));
        }
        tracing::info!(id = %id, "join secret revoked");
        Ok(TokenRevoked { revoked: id })
    }

    /// Out of routing at once; it cannot rejoin under this id.
    pub fn remove(&self, id: String) -> ApiResult<WorkerRemoved> {
        let removed = self.store.remove_worker(&id)?;
        let was_live = self.manager.forget(&id);
        if !removed && !was_live {
            return Err(ApiError::not_found(format!("no worker '{id}'")));
        }
        tracing::info!(worker = %id, "worker removed by an operator");
        Ok(WorkerRemoved { removed: id })
    }

    /// No new requests go to the worker; those running finish.
    pub fn drain(&self, id: String) -> ApiResult<WorkerDraining> {
        if !self.manager.drain(&self.store, &id)? {
            return Err(ApiError::not_found(format!("no live worker '{id}'")));
        }
        tracing::info!(worker = %id, "worker drained by an operator");
        Ok(WorkerDraining { draining: id })
    }
}
