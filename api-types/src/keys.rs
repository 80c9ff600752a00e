//! `/api/keys...`: API keys, their limits and their usage.

use serde::{Deserialize, Serialize};

/// A rate limit: `rps` requests per second on average, up to `burst` at once.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RateLimit {
    pub rps: f64,
    pub burst: u32,
}

/// A token budget: `tokens` per UTC `period` (`day` or `month`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TokenBudget {
    pub tokens: u64,
    pub period: String,
}

/// The limits a key is admitted under: its own, else the server's defaults (`null`: none).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EffectiveLimits {
    pub rate_limit: Option<RateLimit>,
    pub max_concurrent: Option<u32>,
    #[serde(default)]
    pub tokens_per_minute: Option<u64>,
    #[serde(default)]
    pub token_budget: Option<TokenBudget>,
}

/// A key's admission counters since the server started (`usage` in `GET /api/keys` and
/// `GET /api/keys/{id}/usage`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyUsage {
    pub in_flight: u32,
    /// Requests the rate limit would allow right now (`null` without a rate limit).
    pub remaining: Option<u64>,
    /// Seconds until the rate quota is full again (`null` without a rate limit).
    pub reset_s: Option<u64>,
    pub allowed_total: u64,
    pub rejected_rate_total: u64,
    pub rejected_concurrency_total: u64,
}

/// A key's requests since the server started, whatever its limits, and its last use
/// (`activity` in `GET /api/keys` and `GET /api/keys/{id}/usage`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyActivity {
    pub admitted: u64,
    pub refused: u64,
    /// Unix milliseconds (server clock); `null` when unused since the server started.
    pub last_used_ms: Option<u64>,
    /// Tokens (prompt plus completion) charged to the key since the server started, for LLM
    /// requests.
    #[serde(default)]
    pub tokens: u64,
}

/// One key of `GET /api/keys` (never its secret).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApiKey {
    #[serde(flatten)]
    pub key: KeyInfo,
    pub effective_limits: EffectiveLimits,
    pub usage: KeyUsage,
    pub activity: KeyActivity,
}

/// `GET /api/keys`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyList {
    pub keys: Vec<ApiKey>,
}

/// The effective limits of `GET /api/keys/{id}/usage` and where each comes from: `key` (its
/// own), `default` (the server's) or `unlimited`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LimitSources {
    pub rate_limit: Option<RateLimit>,
    pub rate_limit_source: String,
    pub max_concurrent: Option<u32>,
    pub max_concurrent_source: String,
    #[serde(default)]
    pub tokens_per_minute: Option<u64>,
    #[serde(default)]
    pub tokens_per_minute_source: String,
    #[serde(default)]
    pub token_budget: Option<TokenBudget>,
    #[serde(default)]
    pub token_budget_source: String,
}

/// Tokens one key used on one model (`tokens.today` and `tokens.period` of the usage report).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModelTokens {
    pub model: String,
    pub requests: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// The part of prompt + completion tokens served from the response cache.
    pub cached_tokens: u64,
}

/// The per-minute token limit now.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MinuteTokens {
    pub limit: u64,
    pub remaining: u64,
    pub reset_s: u64,
}

/// The token budget now.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BudgetTokens {
    pub limit: u64,
    pub remaining: u64,
    pub period: String,
    /// The current period, Unix seconds.
    pub period_start: i64,
    pub period_end: i64,
    pub reset_s: u64,
}

/// `tokens` of `GET /api/keys/{id}/usage`: the token limits' state and what the key used, per
/// model, today (UTC) and in the budget's current period (the month when it has no budget).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyTokens {
    pub per_minute: Option<MinuteTokens>,
    pub budget: Option<BudgetTokens>,
    pub today: Vec<ModelTokens>,
    /// Unix seconds where `period` starts.
    pub period_start: i64,
    pub period: Vec<ModelTokens>,
}

/// `GET /api/keys/{id}/usage`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyUsageReport {
    pub key_id: i64,
    pub public_id: String,
    pub limits: LimitSources,
    pub usage: KeyUsage,
    pub activity: KeyActivity,
    #[serde(default)]
    pub tokens: KeyTokens,
}

/// A key as stored, without its usage: what `POST /api/keys` (with its secret),
/// `DELETE /api/keys/{id}` and `PATCH /api/keys/{id}` answer about it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyInfo {
    pub id: i64,
    pub public_id: String,
    pub name: String,
    /// infer, upload, admin.
    pub scopes: Vec<String>,
    /// Unix seconds.
    pub created_at: i64,
    pub revoked_at: Option<i64>,
    /// The key's own limits; `null`: the server's defaults.
    pub rate_limit: Option<RateLimit>,
    pub max_concurrent: Option<u32>,
    #[serde(default)]
    pub tokens_per_minute: Option<u64>,
    #[serde(default)]
    pub token_budget: Option<TokenBudget>,
    /// The key's own chat guardrails, run after the server's and before the model's
    /// (`{"plugin": "name[@version]", "config": {...}}` each); absent: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<crate::openapi::bodies::GuardrailAttachment>))]
    pub guardrails: Vec<serde_json::Value>,
    /// The key's own payload log setting (`{"mode", "sample", "sink"}`): its requests are
    /// logged beside any model's or pipeline's setting; absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::bodies::PayloadLogSetting>))]
    pub payload_log: Option<serde_json::Value>,
}

/// `/api/keys/{id}/guardrails`: a key's own chat guardrails, the answer of each of its routes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyGuardrails {
    pub key_id: i64,
    pub public_id: String,
    /// In the order they run (after the server's, before the model's); empty: none.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<crate::openapi::bodies::GuardrailAttachment>))]
    pub guardrails: Vec<serde_json::Value>,
}

/// `/api/keys/{id}/payload-log`: a key's own payload log setting, the answer of each of its
/// routes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyPayloadLog {
    pub key_id: i64,
    pub public_id: String,
    /// `{"mode", "sample", "sink"}`; `null`: none of its own.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::bodies::PayloadLogSetting>))]
    pub payload_log: Option<serde_json::Value>,
    /// The sinks the server defines.
    pub sinks: Vec<String>,
}

/// `POST /api/keys`: the new key and its secret, shown this once.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyCreated {
    #[serde(flatten)]
    pub key: KeyInfo,
    pub secret: String,
}

/// `DELETE /api/keys/{id}`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyRevoked {
    pub revoked: KeyInfo,
}

/// `PATCH /api/keys/{id}`: the key with its new limits.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyUpdated {
    pub key: KeyInfo,
}

/// `GET /api/whoami`: the calling key's identity and scopes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Identity {
    pub id: i64,
    pub public_id: String,
    pub name: String,
    pub scopes: Vec<String>,
}

impl Identity {
    /// Whether the key holds `scope`; `admin` implies every scope, as on the server.
    pub fn can(&self, scope: &str) -> bool {
        self.scopes.iter().any(|s| s == scope || s == "admin")
    }
}
