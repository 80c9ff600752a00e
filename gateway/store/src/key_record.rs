//! An API key as the store keeps it: its record, its own limits, and how a row becomes one.

use crate::auth::{self, Scope, Scopes};
use crate::error::StoreError;
use crate::sql::Row;
use infergate_limits::RateLimit;
use infergate_traffic::period::Period;
use infergate_traffic::tokens::{TokenBudget, TokenLimits};
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct KeyRecord {
    pub id: i64,
    pub public_id: String,
    pub name: String,
    pub scopes: Vec<Scope>,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
    /// The key's own limits; None = the server default (`[limits] default_*`).
    pub rate_limit: Option<RateLimit>,
    pub max_concurrent: Option<u32>,
    /// The key's own token limits (each `None` = the server default).
    pub tokens: TokenLimits,
    /// The key's own chat guardrails as stored: the JSON text of a list of attachments, which
    /// the service checks when it runs them (a list that does not parse fails the key's chat
    /// requests, never its other ones); None: none of its own.
    pub guardrails: Option<String>,
    /// The key's own payload log setting as stored: the JSON text of `{"mode", "sample",
    /// "sink"}`, checked by the service when it was set; None: its requests are logged only as
    /// their model's or pipeline's setting says.
    pub payload_log: Option<String>,
}

/// A key's own admission limits, as set at creation or by an admin.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct KeyLimits {
    pub rate_limit: Option<RateLimit>,
    pub max_concurrent: Option<u32>,
    pub tokens: TokenLimits,
}

impl KeyRecord {
    pub fn scopes(&self) -> Scopes {
        Scopes::new(self.scopes.clone())
    }

    /// Whether the key may use `wanted` (`admin` allows everything), without copying its
    /// scopes into a [`Scopes`].
    pub fn allows(&self, wanted: Scope) -> bool {
        auth::allows(&self.scopes, wanted)
    }

    /// The key's own limits (`None` where it takes the server's default).
    pub fn limits(&self) -> KeyLimits {
        KeyLimits {
            rate_limit: self.rate_limit,
            max_concurrent: self.max_concurrent,
            tokens: self.tokens,
        }
    }

    /// The key as the key routes and the CLI show it (without its usage).
    pub fn info(&self) -> infergate_api_types::keys::KeyInfo {
        infergate_api_types::keys::KeyInfo {
            id: self.id,
            public_id: self.public_id.clone(),
            name: self.name.clone(),
            scopes: self.scopes.iter().map(|s| s.as_str().to_owned()).collect(),
            created_at: self.created_at,
            revoked_at: self.revoked_at,
            rate_limit: self.rate_limit.map(RateLimit::shown),
            max_concurrent: self.max_concurrent,
            tokens_per_minute: self.tokens.tokens_per_minute,
            token_budget: self.tokens.token_budget.map(shown_budget),
            guardrails: self.guardrail_list(),
            payload_log: self
                .payload_log
                .as_deref()
                .and_then(|text| serde_json::from_str(text).ok()),
        }
    }

    /// The key's own guardrails as JSON values, for showing; empty when it has none, or when
    /// the stored text is not a JSON list (its chat requests then fail and say so).
    pub fn guardrail_list(&self) -> Vec<serde_json::Value> {
        self.guardrails
            .as_deref()
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or_default()
    }
}

pub(crate) fn record(row: &Row) -> Result<KeyRecord, StoreError> {
    let scopes: String = row.get("scopes")?;
    Ok(KeyRecord {
        id: row.get("id")?,
        public_id: row.get("public_id")?,
        name: row.get("name")?,
        scopes: scopes.split(',').filter_map(Scope::parse).collect(),
        created_at: row.get("created_at")?,
        revoked_at: row.get("revoked_at")?,
        rate_limit: match (
            row.get::<Option<f64>>("rate_rps")?,
            row.get::<Option<u32>>("rate_burst")?,
        ) {
            (Some(rps), Some(burst)) => Some(RateLimit { rps, burst }),
            _ => None,
        },
        max_concurrent: row.get("max_concurrent")?,
        tokens: TokenLimits {
            tokens_per_minute: row
                .get::<Option<i64>>("tokens_per_minute")?
                .and_then(|n| u64::try_from(n).ok()),
            token_budget: match (
                row.get::<Option<i64>>("token_budget")?,
                row.get::<Option<String>>("token_budget_period")?,
            ) {
                (Some(tokens), Some(period)) => Some(TokenBudget {
                    tokens: u64::try_from(tokens).unwrap_or(0),
                    period: parse_period(&period)?,
                }),
                _ => None,
            },
        },
        guardrails: row.get("guardrails")?,
        payload_log: row.get("payload_log")?,
    })
}

/// A budget as the API shows it.
pub fn shown_budget(b: TokenBudget) -> infergate_api_types::keys::TokenBudget {
    infergate_api_types::keys::TokenBudget {
        tokens: b.tokens,
        period: b.period.as_str().to_owned(),
    }
}

/// A stored budget period (`day` or `month`).
pub(crate) fn parse_period(text: &str) -> Result<Period, StoreError> {
    match text {
        "day" => Ok(Period::Day),
        "month" => Ok(Period::Month),
        other => Err(StoreError::Corrupt(format!(
            "api_keys.token_budget_period is '{other}', not day or month"
        ))),
    }
}
