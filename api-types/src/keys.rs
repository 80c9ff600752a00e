//! `/api/keys...`: API keys, their limits and their usage.

use serde::{Deserialize, Serialize};

/// A rate limit: `rps` requests per second on average, up to `burst` at once.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub struct RateLimit {
    pub rps: f64,
    pub burst: u32,
}

/// The limits a key is admitted under: its own, else the server's defaults (`null`: none).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq)]
pub struct EffectiveLimits {
    pub rate_limit: Option<RateLimit>,
    pub max_concurrent: Option<u32>,
}

/// A key's admission counters since the server started (`usage` in `GET /api/keys` and
/// `GET /api/keys/{id}/usage`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
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
pub struct KeyActivity {
    pub admitted: u64,
    pub refused: u64,
    /// Unix milliseconds (server clock); `null` when unused since the server started.
    pub last_used_ms: Option<u64>,
}

/// One key of `GET /api/keys` (never its secret).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ApiKey {
    pub id: i64,
    pub public_id: String,
    pub name: String,
    /// infer, upload, admin.
    pub scopes: Vec<String>,
    /// Unix seconds.
    pub created_at: i64,
    pub revoked_at: Option<i64>,
    /// The key's own limits; `null` means the server's default.
    pub rate_limit: Option<RateLimit>,
    pub max_concurrent: Option<u32>,
    pub effective_limits: EffectiveLimits,
    pub usage: KeyUsage,
    pub activity: KeyActivity,
}

/// `GET /api/keys`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct KeyList {
    pub keys: Vec<ApiKey>,
}

/// The effective limits of `GET /api/keys/{id}/usage` and where each comes from: `key` (its
/// own), `default` (the server's) or `unlimited`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct LimitSources {
    pub rate_limit: Option<RateLimit>,
    pub rate_limit_source: String,
    pub max_concurrent: Option<u32>,
    pub max_concurrent_source: String,
}

/// `GET /api/keys/{id}/usage`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct KeyUsageReport {
    pub key_id: i64,
    pub public_id: String,
    pub limits: LimitSources,
    pub usage: KeyUsage,
    pub activity: KeyActivity,
}
