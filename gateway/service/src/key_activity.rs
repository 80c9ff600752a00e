//! What each API key did since the server started: requests admitted and refused by its limits,
//! tokens charged to it (LLM requests), and when it was last used (server time). Recorded where every request with a valid key is
//! admitted ([`crate::admission::admit`]: HTTP, gRPC and WebSocket messages alike), whether or
//! not the key has limits, so the keys table can say "last used" and the history can chart
//! traffic per key. Memory is one entry per key that made a request; a revoked key's entry goes.

use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Default)]
struct Entry {
    admitted: AtomicU64,
    refused: AtomicU64,
    last_used_ms: AtomicU64,
    tokens: AtomicU64,
}

/// One key's activity, in the API's own type.
pub use infergate_api_types::keys::KeyActivity as KeyTotals;

#[derive(Default)]
pub struct KeyActivity {
    keys: RwLock<HashMap<i64, Arc<Entry>>>,
}

impl KeyActivity {
    /// `key`'s entry, made at its first use (the read lock is all a known key takes).
    fn entry(&self, key: i64) -> Arc<Entry> {
        let existing = self.keys.read().get(&key).cloned();
        match existing {
            Some(e) => e,
            None => self.keys.write().entry(key).or_default().clone(),
        }
    }

    /// Counts one request of `key` at `now_ms`.
    pub fn record(&self, key: i64, admitted: bool, now_ms: u64) {
        let entry = self.entry(key);
        let counter = if admitted {
            &entry.admitted
        } else {
            &entry.refused
        };
        counter.fetch_add(1, Ordering::Relaxed);
        entry.last_used_ms.fetch_max(now_ms, Ordering::Relaxed);
    }

    /// Counts `tokens` charged to `key` (a chat generation's prompt and completion).
    pub fn add_tokens(&self, key: i64, tokens: u64) {
        self.entry(key).tokens.fetch_add(tokens, Ordering::Relaxed);
    }

    pub fn totals(&self, key: i64) -> KeyTotals {
        self.keys
            .read()
            .get(&key)
            .map(|e| read(e))
            .unwrap_or_default()
    }

    /// Every key that made a request, by id.
    pub fn all(&self) -> Vec<(i64, KeyTotals)> {
        let mut all: Vec<_> = self
            .keys
            .read()
            .iter()
            .map(|(k, e)| (*k, read(e)))
            .collect();
        all.sort_by_key(|(k, _)| *k);
        all
    }

    /// Forgets a revoked key.
    pub fn forget(&self, key: i64) {
        self.keys.write().remove(&key);
    }
}

fn read(e: &Entry) -> KeyTotals {
    let last = e.last_used_ms.load(Ordering::Relaxed);
    KeyTotals {
        admitted: e.admitted.load(Ordering::Relaxed),
        refused: e.refused.load(Ordering::Relaxed),
        last_used_ms: (last > 0).then_some(last),
        tokens: e.tokens.load(Ordering::Relaxed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_the_latest_use_per_key() {
        let a = KeyActivity::default();
        assert_eq!(a.totals(7), KeyTotals::default());
        a.record(7, true, 1_000);
        a.record(7, false, 3_000);
        // A request admitted earlier but counted later does not move "last used" back.
        a.record(7, true, 2_000);
        a.record(9, true, 5_000);
        assert_eq!(
            a.totals(7),
            KeyTotals {
                admitted: 2,
                refused: 1,
                last_used_ms: Some(3_000),
                tokens: 0,
            }
        );
        assert_eq!(a.all().iter().map(|(k, _)| *k).collect::<Vec<_>>(), [7, 9]);
        a.forget(7);
        assert_eq!(a.totals(7), KeyTotals::default());
    }
}
