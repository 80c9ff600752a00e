//! Tokens per key per model per hour (`key_token_usage`): what each API key's LLM requests
//! used, added to by every replica as answers are settled, read back for the usage API and to
//! restore a budget's spending after a restart.

use crate::sql::vals;
use crate::{Store, StoreError};

/// One key's use of one model in one hour, to add to the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenUsage {
    pub key_id: i64,
    pub model: String,
    /// Unix seconds of the hour's start (UTC).
    pub hour: i64,
    pub requests: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// The part of the tokens above that was served from the response cache.
    pub cached_tokens: u64,
}

/// A key's use of one model over a span of hours.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelTokens {
    pub model: String,
    pub requests: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_tokens: u64,
}

impl ModelTokens {
    pub fn total(&self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }
}

/// The hour `unix_s` falls in, as the table keys it.
pub fn hour_of(unix_s: i64) -> i64 {
    unix_s - unix_s.rem_euclid(3600)
}

fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Store {
    /// Adds `rows` to the accounting in one transaction (each row to its key, model and hour).
    pub fn add_token_usage(&self, rows: &[TokenUsage]) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        self.transaction(|db| {
            for r in rows {
                db.execute(
                    "INSERT INTO key_token_usage
                        (key_id, model, hour, requests, prompt_tokens, completion_tokens, cached_tokens)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                     ON CONFLICT (key_id, hour, model) DO UPDATE SET
                        requests = key_token_usage.requests + excluded.requests,
                        prompt_tokens = key_token_usage.prompt_tokens + excluded.prompt_tokens,
                        completion_tokens = key_token_usage.completion_tokens + excluded.completion_tokens,
                        cached_tokens = key_token_usage.cached_tokens + excluded.cached_tokens",
                    vals![
                        r.key_id,
                        &r.model,
                        hour_of(r.hour),
                        count(r.requests),
                        count(r.prompt_tokens),
                        count(r.completion_tokens),
                        count(r.cached_tokens)
                    ],
                )?;
            }
            Ok(())
        })
    }

    /// What key `key_id` used per model in the hours from `since` (Unix s, rounded down to its
    /// hour) on, by model name.
    pub fn token_usage_since(
        &self,
        key_id: i64,
        since: i64,
    ) -> Result<Vec<ModelTokens>, StoreError> {
        self.with(|db| {
            db.query(
                // PostgreSQL sums BIGINTs as NUMERIC: cast back for both dialects.
                "SELECT model, CAST(SUM(requests) AS BIGINT) AS requests,
                        CAST(SUM(prompt_tokens) AS BIGINT) AS prompt,
                        CAST(SUM(completion_tokens) AS BIGINT) AS completion,
                        CAST(SUM(cached_tokens) AS BIGINT) AS cached
                 FROM key_token_usage WHERE key_id = ?1 AND hour >= ?2
                 GROUP BY model ORDER BY model",
                vals![key_id, hour_of(since)],
            )?
            .iter()
            .map(|row| {
                let n = |name: &str| -> Result<u64, StoreError> {
                    Ok(u64::try_from(row.get::<i64>(name)?).unwrap_or(0))
                };
                Ok(ModelTokens {
                    model: row.get("model")?,
                    requests: n("requests")?,
                    prompt_tokens: n("prompt")?,
                    completion_tokens: n("completion")?,
                    cached_tokens: n("cached")?,
                })
            })
            .collect()
        })
    }

    /// Keys that used tokens in the hours from `since` on, with their totals (prompt plus
    /// completion): what a restarted gateway seeds its budgets with.
    pub fn tokens_spent_since(&self, since: i64) -> Result<Vec<(i64, u64)>, StoreError> {
        self.with(|db| {
            db.query(
                "SELECT key_id, CAST(SUM(prompt_tokens + completion_tokens) AS BIGINT) AS spent
                 FROM key_token_usage WHERE hour >= ?1 GROUP BY key_id ORDER BY key_id",
                vals![hour_of(since)],
            )?
            .iter()
            .map(|row| {
                Ok((
                    row.get::<i64>("key_id")?,
                    u64::try_from(row.get::<i64>("spent")?).unwrap_or(0),
                ))
            })
            .collect()
        })
    }
}
