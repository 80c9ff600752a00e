//! A table of per-key state, keyed by API key id, sharded so that keys on different shards
//! never contend. A key's state is created on its first use and shared (`Arc`) with whoever
//! holds it, so forgetting a key never invalidates a reservation or slot still in flight.
//!
//! The gateway's request limiter keeps the same kind of table; it can move onto this one.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

const SHARDS: usize = 64;

type Shard<T> = RwLock<HashMap<i64, Arc<T>>>;

pub struct KeyTable<T> {
    shards: Box<[Shard<T>]>,
}

impl<T: Default> Default for KeyTable<T> {
    fn default() -> Self {
        KeyTable::new()
    }
}

impl<T: Default> KeyTable<T> {
    pub fn new() -> KeyTable<T> {
        KeyTable {
            shards: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect(),
        }
    }

    fn shard(&self, key: i64) -> &Shard<T> {
        // Key ids are sequential: the low bits spread them evenly.
        &self.shards[(key as u64 as usize) % SHARDS]
    }

    /// The key's state, created on first use.
    pub fn state(&self, key: i64) -> Arc<T> {
        let shard = self.shard(key);
        if let Some(s) = shard.read().get(&key) {
            return s.clone();
        }
        shard.write().entry(key).or_default().clone()
    }

    /// The key's state if it has any (creates nothing).
    pub fn get(&self, key: i64) -> Option<Arc<T>> {
        self.shard(key).read().get(&key).cloned()
    }

    /// Keys with state.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.read().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets a key (revoked or deleted): its memory goes once nothing holds it.
    pub fn forget(&self, key: i64) {
        self.shard(key).write().remove(&key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn state_is_created_once_and_shared() {
        let t: KeyTable<AtomicU64> = KeyTable::new();
        assert!(t.get(5).is_none());
        t.state(5).fetch_add(2, Ordering::Relaxed);
        let held = t.state(5);
        assert_eq!(held.load(Ordering::Relaxed), 2);
        assert_eq!(t.len(), 1);
        t.forget(5);
        assert!(t.is_empty());
        // A holder keeps its state; the key starts afresh.
        assert_eq!(held.load(Ordering::Relaxed), 2);
        assert_eq!(t.state(5).load(Ordering::Relaxed), 0);
        assert_eq!(
            t.state(-3).load(Ordering::Relaxed),
            0,
            "negative ids have a shard too"
        );
    }
}
