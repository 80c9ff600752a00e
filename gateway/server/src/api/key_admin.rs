//! The handle the key routes take (`State<KeyAdmin>`) instead of the whole server state: the
//! store that holds the keys, the admission state that limits them and their activity. Its
//! methods are what those routes show of a key, in one place for the list and the usage
//! report.

use axum::extract::FromRef;
use infergate_api_types::keys::{ApiKey, EffectiveLimits, KeyUsageReport, LimitSources};
use infergate_limits::{Limiter, Limits, RateLimit};
use infergate_service::caller::effective_limits;
use infergate_service::error::{ApiError, ApiResult};
use infergate_service::key_activity::KeyActivity;
use infergate_service::state::AppState;
use infergate_store::keys::KeyRecord;
use infergate_store::Store;
use std::sync::Arc;

#[derive(Clone)]
pub struct KeyAdmin {
    store: Arc<Store>,
    limiter: Arc<Limiter>,
    activity: Arc<KeyActivity>,
    /// The limits of keys without their own.
    defaults: Limits,
}

impl FromRef<Arc<AppState>> for KeyAdmin {
    fn from_ref(state: &Arc<AppState>) -> KeyAdmin {
        KeyAdmin {
            store: state.store().clone(),
            limiter: state.limiter().clone(),
            activity: state.metrics().keys.clone(),
            defaults: *state.default_limits(),
        }
    }
}

impl KeyAdmin {
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The key `id` (its number or public id): 404 when there is none.
    pub fn find(&self, id: &str) -> ApiResult<KeyRecord> {
        self.store
            .get_key(id)?
            .ok_or_else(|| ApiError::not_found(format!("no API key '{id}'")))
    }

    /// A key as `GET /api/keys` lists it: its own and effective limits, usage and activity.
    pub fn listed(&self, key: &KeyRecord) -> ApiKey {
        let limits = effective_limits(key, &self.defaults);
        ApiKey {
            usage: self.limiter.usage(key.id, &limits),
            activity: self.activity.totals(key.id),
            effective_limits: EffectiveLimits {
                rate_limit: limits.rate.map(RateLimit::shown),
                max_concurrent: limits.max_concurrent,
            },
            key: key.info(),
        }
    }

    /// `GET /api/keys/{id}/usage`: the effective limits and where each comes from (the key,
    /// the server's defaults, or none), usage and activity.
    pub fn usage_report(&self, key: &KeyRecord) -> KeyUsageReport {
        let limits = effective_limits(key, &self.defaults);
        let source = |own: bool, effective: bool| {
            match (own, effective) {
                (true, _) => "key",
                (false, true) => "default",
                (false, false) => "unlimited",
            }
            .to_owned()
        };
        KeyUsageReport {
            key_id: key.id,
            public_id: key.public_id.clone(),
            limits: LimitSources {
                rate_limit: limits.rate.map(RateLimit::shown),
                rate_limit_source: source(key.rate_limit.is_some(), limits.rate.is_some()),
                max_concurrent: limits.max_concurrent,
                max_concurrent_source: source(
                    key.max_concurrent.is_some(),
                    limits.max_concurrent.is_some(),
                ),
            },
            usage: self.limiter.usage(key.id, &limits),
            activity: self.activity.totals(key.id),
        }
    }

    /// Drops a revoked key's admission state and activity: nothing of it stays in memory.
    pub fn forget(&self, id: i64) {
        self.limiter.forget(id);
        self.activity.forget(id);
    }
}
