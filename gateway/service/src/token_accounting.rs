//! Tokens per key per model per hour, on their way to the store (`key_token_usage`, both
//! backends). Settled LLM answers are added up in memory and written in one transaction every
//! [`FLUSH_EVERY`] (and before the usage API reads the store), so a request never waits for a
//! database write; replicas each add their own share to the same rows.
//!
//! What a crash loses: the answers settled since the last write (at most [`FLUSH_EVERY`]).
//! A failed write keeps the figures for the next one.

use infergate_store::token_usage::{hour_of, ModelTokens, TokenUsage};
use infergate_store::{Store, StoreError};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

pub const FLUSH_EVERY: Duration = Duration::from_secs(2);

#[derive(Default, Clone, Copy)]
struct Totals {
    requests: u64,
    prompt: u64,
    completion: u64,
    cached: u64,
}

/// Settled usage not yet in the store.
#[derive(Default)]
pub struct TokenAccounting {
    pending: Mutex<HashMap<(i64, String, i64), Totals>>,
    /// Serialises writes, so that a flush from the usage API and the periodic one never write
    /// the same figures twice.
    writing: Mutex<()>,
}

impl TokenAccounting {
    /// One settled answer of key `key_id` on `model` at `unix_s`.
    pub fn record(
        &self,
        key_id: i64,
        model: &str,
        unix_s: i64,
        prompt: u64,
        completion: u64,
        cached: bool,
    ) {
        let mut pending = self.pending.lock();
        let t = pending
            .entry((key_id, model.to_owned(), hour_of(unix_s)))
            .or_default();
        t.requests += 1;
        t.prompt += prompt;
        t.completion += completion;
        if cached {
            t.cached += prompt + completion;
        }
    }

    /// Writes what is pending to the store; on failure it stays pending for the next try.
    pub fn flush(&self, store: &Store) -> Result<(), StoreError> {
        let _one_writer = self.writing.lock();
        let taken = std::mem::take(&mut *self.pending.lock());
        if taken.is_empty() {
            return Ok(());
        }
        let rows: Vec<TokenUsage> = taken
            .iter()
            .map(|((key_id, model, hour), t)| TokenUsage {
                key_id: *key_id,
                model: model.clone(),
                hour: *hour,
                requests: t.requests,
                prompt_tokens: t.prompt,
                completion_tokens: t.completion,
                cached_tokens: t.cached,
            })
            .collect();
        store.add_token_usage(&rows).inspect_err(|_| {
            let mut pending = self.pending.lock();
            for (k, t) in taken {
                let e = pending.entry(k).or_default();
                e.requests += t.requests;
                e.prompt += t.prompt;
                e.completion += t.completion;
                e.cached += t.cached;
            }
        })
    }

    /// What key `key_id` used per model since `since` (Unix s): the store's figures with what
    /// is pending written first.
    pub fn usage_since(
        &self,
        store: &Store,
        key_id: i64,
        since: i64,
    ) -> Result<Vec<ModelTokens>, StoreError> {
        if let Err(e) = self.flush(store) {
            tracing::warn!(error = %e, "could not write token usage before reading it; the answer leaves out the last seconds");
        }
        store.token_usage_since(key_id, since)
    }

    /// Writes what is pending every [`FLUSH_EVERY`] until the accounting is dropped.
    pub fn spawn_flusher(accounting: &Arc<TokenAccounting>, store: Arc<Store>) {
        let weak = Arc::downgrade(accounting);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(FLUSH_EVERY);
            loop {
                tick.tick().await;
                let Some(accounting) = weak.upgrade() else {
                    return;
                };
                let store = store.clone();
                let written = tokio::task::spawn_blocking(move || accounting.flush(&store)).await;
                if let Ok(Err(e)) = written {
                    tracing::warn!(error = %e, "could not write token usage; it is kept for the next try");
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_is_added_up_per_key_model_and_hour_and_written_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let a = TokenAccounting::default();
        let noon = 1_710_504_000;
        a.record(1, "chat", noon, 10, 5, false);
        a.record(1, "chat", noon + 60, 10, 7, true);
        a.record(1, "other", noon, 3, 1, false);
        a.record(2, "chat", noon, 1, 1, false);
        let used = a.usage_since(&store, 1, noon).unwrap();
        assert_eq!(used.len(), 2);
        assert_eq!(
            (
                used[0].model.as_str(),
                used[0].requests,
                used[0].prompt_tokens
            ),
            ("chat", 2, 20)
        );
        assert_eq!((used[0].completion_tokens, used[0].cached_tokens), (12, 17));
        // Written once: reading again adds nothing.
        assert_eq!(a.usage_since(&store, 1, noon).unwrap(), used);
        // An hour later, the next hour's row; the earlier hour is left out.
        a.record(1, "chat", noon + 3600, 1, 1, false);
        assert_eq!(
            a.usage_since(&store, 1, noon + 3600).unwrap()[0].requests,
            1
        );
        assert_eq!(
            store.tokens_spent_since(noon).unwrap(),
            vec![(1, 20 + 12 + 4 + 2), (2, 2)]
        );
    }
}
