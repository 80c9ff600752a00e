//! The handle the key routes take (`State<KeyAdmin>`) instead of the whole server state: the
//! store that holds the keys, the admission state that limits them and their activity. Its
//! methods are what those routes show of a key, in one place for the list and the usage
//! report.

use axum::extract::FromRef;
use infergate_api_types::keys::{
    ApiKey, BudgetTokens, EffectiveLimits, KeyTokens, KeyUsageReport, LimitSources, MinuteTokens,
    ModelTokens,
};
use infergate_limits::{Limiter, Limits, RateLimit};
use infergate_service::caller::{effective_limits, effective_token_limits};
use infergate_service::error::{ApiError, ApiResult};
use infergate_service::key_activity::KeyActivity;
use infergate_service::state::AppState;
use infergate_service::token_limits::TokenGate;
use infergate_store::keys::{shown_budget, KeyRecord};
use infergate_store::Store;
use infergate_traffic::period::Period;
use infergate_traffic::tokens::TokenLimits;
use std::sync::Arc;

#[derive(Clone)]
pub struct KeyAdmin {
    store: Arc<Store>,
    limiter: Arc<Limiter>,
    activity: Arc<KeyActivity>,
    /// The limits of keys without their own.
    defaults: Limits,
    token_defaults: TokenLimits,
    tokens: Arc<TokenGate>,
}

impl FromRef<Arc<AppState>> for KeyAdmin {
    fn from_ref(state: &Arc<AppState>) -> KeyAdmin {
        KeyAdmin {
            store: state.store().clone(),
            limiter: state.limiter().clone(),
            activity: state.metrics().keys.clone(),
            defaults: *state.default_limits(),
            token_defaults: *state.default_token_limits(),
            tokens: state.tokens().clone(),
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
        let tokens = effective_token_limits(key, &self.token_defaults);
        ApiKey {
            usage: self.limiter.usage(key.id, &limits),
            activity: self.activity.totals(key.id),
            effective_limits: EffectiveLimits {
                rate_limit: limits.rate.map(RateLimit::shown),
                max_concurrent: limits.max_concurrent,
                tokens_per_minute: tokens.tokens_per_minute,
                token_budget: tokens.token_budget.map(shown_budget),
            },
            key: key.info(),
        }
    }

    /// `GET /api/keys/{id}/usage`: the effective limits and where each comes from (the key,
    /// the server's defaults, or none), usage, activity and tokens. Reads the store (the token
    /// accounting): call it off the runtime's workers.
    pub fn usage_report(&self, key: &KeyRecord) -> ApiResult<KeyUsageReport> {
        let limits = effective_limits(key, &self.defaults);
        let tokens = effective_token_limits(key, &self.token_defaults);
        let source = |own: bool, effective: bool| {
            match (own, effective) {
                (true, _) => "key",
                (false, true) => "default",
                (false, false) => "unlimited",
            }
            .to_owned()
        };
        Ok(KeyUsageReport {
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
                tokens_per_minute: tokens.tokens_per_minute,
                tokens_per_minute_source: source(
                    key.tokens.tokens_per_minute.is_some(),
                    tokens.tokens_per_minute.is_some(),
                ),
                token_budget: tokens.token_budget.map(shown_budget),
                token_budget_source: source(
                    key.tokens.token_budget.is_some(),
                    tokens.token_budget.is_some(),
                ),
            },
            usage: self.limiter.usage(key.id, &limits),
            activity: self.activity.totals(key.id),
            tokens: self.token_report(key.id, &tokens)?,
        })
    }

    /// The key's token limits now and what it used per model, today and in the budget's
    /// period (the month without a budget). With Redis, the budget's `remaining` is computed
    /// from the accounting (every replica's answers), not this replica's limiter.
    fn token_report(&self, key_id: i64, limits: &TokenLimits) -> ApiResult<KeyTokens> {
        let now = infergate_store::now_secs();
        let period = limits.token_budget.map_or(Period::Month, |b| b.period);
        let period_start = period.bounds(now).0;
        let accounting = self.tokens.accounting();
        let shown = |rows: Vec<infergate_store::token_usage::ModelTokens>| -> Vec<ModelTokens> {
            rows.into_iter()
                .map(|r| ModelTokens {
                    model: r.model,
                    requests: r.requests,
                    prompt_tokens: r.prompt_tokens,
                    completion_tokens: r.completion_tokens,
                    cached_tokens: r.cached_tokens,
                })
                .collect()
        };
        let today =
            shown(accounting.usage_since(&self.store, key_id, Period::Day.bounds(now).0)?);
        let in_period = shown(accounting.usage_since(&self.store, key_id, period_start)?);
        let quota = self.tokens.quota(key_id, limits);
        let spent: u64 = in_period
            .iter()
            .map(|m| m.prompt_tokens + m.completion_tokens)
            .sum();
        Ok(KeyTokens {
            per_minute: quota.per_minute.map(|m| MinuteTokens {
                limit: m.limit,
                remaining: m.remaining,
                reset_s: m.reset_s,
            }),
            budget: quota.budget.map(|b| BudgetTokens {
                limit: b.limit,
                // The larger of what this replica holds reserved and what the store counted.
                remaining: b.remaining.min(b.limit.saturating_sub(spent)),
                period: b.period.as_str().to_owned(),
                period_start: b.period_start,
                period_end: b.period_end,
                reset_s: b.reset_s,
            }),
            today,
            period_start,
            period: in_period,
        })
    }

    /// Drops a revoked key's admission state and activity: nothing of it stays in memory.
    pub fn forget(&self, id: i64) {
        self.limiter.forget(id);
        self.activity.forget(id);
        self.tokens.forget(id);
    }
}
