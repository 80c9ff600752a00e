//! The response cache: answers by [`CacheKey`], bounded in bytes, least recently used evicted
//! first, shared by every thread of the server.
//!
//! The table is split into shards, each behind its own mutex and holding its own share of the
//! byte budget, chosen by the key's first bytes (the key is a SHA-256 digest, so shards fill
//! evenly). A lookup locks one shard for a hash probe and a move to the front of its recency
//! list; the answer's bytes are shared ([`Bytes`]), never copied.
//!
//! A model's traffic goes through its [`ModelCache`] handle, which keeps that model's counters
//! (Triton's `cache_hit`/`cache_miss` counts and times, inserts, evictions) so the gateway can
//! report them per model; [`ResponseCache::stats`] adds them up.
//!
//! Stale answers: the key carries the version's file digest and config digest, so a new version
//! or configuration can never hit an old answer. Invalidation ([`ResponseCache::invalidate_model`],
//! [`ResponseCache::invalidate_version`]) frees the memory of answers nobody can hit any more;
//! it walks every entry, which is fine at upload and delete time.
//!
//! What is charged against the budget: the body's length, `size_of::<M>()` and
//! [`ENTRY_OVERHEAD`] per entry, plus what the caller declares its metadata owns
//! ([`ModelCache::insert_charged`]); other heap memory of the metadata is not counted.

use std::cell::Cell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use lru::LruCache;
use parking_lot::Mutex;

use crate::cache_key::CacheKey;

/// Bytes charged per entry besides its body: the key, the table slot, the recency links, the
/// entry's own fields.
pub const ENTRY_OVERHEAD: usize = 160;
/// Most shards; a small cache gets fewer, so that each shard can still hold a large answer.
const MAX_SHARDS: usize = 16;
/// Smallest share of the budget a shard gets before the cache uses fewer shards.
const MIN_SHARD_BYTES: usize = 4 << 20;

/// A cached answer: shared bytes and the gateway's metadata about them.
pub struct Hit<M> {
    pub body: Bytes,
    pub meta: Arc<M>,
}

impl<M> Clone for Hit<M> {
    fn clone(&self) -> Self {
        Hit {
            body: self.body.clone(),
            meta: self.meta.clone(),
        }
    }
}

/// What an insert did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    /// Stored, after evicting this many older entries to make room.
    Stored { evicted: u64 },
    /// Larger than a shard's share of the budget: not cached (counted).
    TooLarge,
    /// The cache has no budget (`bytes = 0`).
    Disabled,
}

/// One model's counters, one slot per shard so that threads working on different shards
/// never write the same cache line. Times are nanoseconds spent inside the cache.
#[derive(Debug)]
pub struct CacheCounters {
    slots: Box<[Padded<Slot>]>,
}

#[derive(Debug, Default)]
struct Slot {
    hits: AtomicU64,
    hit_ns: AtomicU64,
    misses: AtomicU64,
    miss_ns: AtomicU64,
    inserts: AtomicU64,
    insert_ns: AtomicU64,
    too_large: AtomicU64,
    evictions: AtomicU64,
    invalidated: AtomicU64,
}

/// A snapshot of counters: one model's, or all models' added up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    /// Time spent finding hits (Triton's `cache_hit.ns`), estimated from one lookup in
    /// [`TIME_EVERY`].
    pub hit_ns: u64,
    pub misses: u64,
    /// Time spent finding nothing (estimated likewise); Triton's `cache_miss.ns` is this plus
    /// `insert_ns`.
    pub miss_ns: u64,
    pub inserts: u64,
    pub insert_ns: u64,
    /// Answers refused for being larger than a shard's budget.
    pub too_large: u64,
    /// Entries pushed out to make room.
    pub evictions: u64,
    /// Entries removed by invalidation.
    pub invalidated: u64,
}

/// One lookup in this many is timed, and counts for this many: a clock read costs about as
/// much as the rest of a hit, so timing every lookup would double its cost.
pub const TIME_EVERY: u32 = 8;

thread_local! {
    static LOOKUPS: Cell<u32> = const { Cell::new(0) };
}

/// The start of a lookup, if this thread's turn to time one has come.
fn sampled_start() -> Option<Instant> {
    LOOKUPS.with(|n| {
        let next = n.get().wrapping_add(1);
        n.set(next);
        (next % TIME_EVERY == 0).then(Instant::now)
    })
}

fn elapsed_ns(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

impl CacheCounters {
    fn new(slots: usize) -> CacheCounters {
        CacheCounters {
            slots: (0..slots).map(|_| Padded(Slot::default())).collect(),
        }
    }

    fn slot(&self, shard: usize) -> &Slot {
        &self.slots[shard % self.slots.len()].0
    }

    pub fn snapshot(&self) -> CacheStats {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut total = CacheStats::default();
        for slot in self.slots.iter() {
            let s = &slot.0;
            total += CacheStats {
                hits: r(&s.hits),
                hit_ns: r(&s.hit_ns),
                misses: r(&s.misses),
                miss_ns: r(&s.miss_ns),
                inserts: r(&s.inserts),
                insert_ns: r(&s.insert_ns),
                too_large: r(&s.too_large),
                evictions: r(&s.evictions),
                invalidated: r(&s.invalidated),
            };
        }
        total
    }
}

impl std::ops::AddAssign for CacheStats {
    fn add_assign(&mut self, o: CacheStats) {
        self.hits += o.hits;
        self.hit_ns += o.hit_ns;
        self.misses += o.misses;
        self.miss_ns += o.miss_ns;
        self.inserts += o.inserts;
        self.insert_ns += o.insert_ns;
        self.too_large += o.too_large;
        self.evictions += o.evictions;
        self.invalidated += o.invalidated;
    }
}

/// The cache's size right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheSize {
    pub entries: u64,
    /// Bytes charged (bodies, metadata and per-entry overhead).
    pub bytes: u64,
    /// The budget (`[cache] bytes`).
    pub capacity: u64,
}

/// Keeps shards and counter slots on their own cache lines, so threads on different shards
/// do not contend.
#[repr(align(128))]
#[derive(Debug)]
struct Padded<T>(T);

struct Entry<M> {
    body: Bytes,
    meta: Arc<M>,
    model: Arc<str>,
    version: u64,
    counters: Arc<CacheCounters>,
    charge: usize,
}

/// The key is already a uniform digest: its bytes are the hash. Bytes 8..16 are used because
/// bytes 0..8 pick the shard.
#[derive(Default)]
struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // `CacheKey`'s derived Hash writes the array's length first, then the 32 bytes.
        if bytes.len() >= 16 {
            self.0 = u64::from_le_bytes(bytes[8..16].try_into().unwrap_or_default());
        }
    }
}

type Table<M> = LruCache<CacheKey, Entry<M>, BuildHasherDefault<DigestHasher>>;

struct Shard<M> {
    table: Table<M>,
    bytes: usize,
}

/// Cache counters by model and version.
type CountersByVersion = HashMap<(Arc<str>, u64), Arc<CacheCounters>>;

struct Inner<M> {
    shards: Box<[Padded<Mutex<Shard<M>>>]>,
    shard_bytes: usize,
    capacity: usize,
    /// Counters by model and version (version 0: a handle for the whole model).
    models: Mutex<CountersByVersion>,
}

/// The server's response cache. Cheap to clone (shared).
pub struct ResponseCache<M> {
    inner: Arc<Inner<M>>,
}

impl<M> Clone for ResponseCache<M> {
    fn clone(&self) -> Self {
        ResponseCache {
            inner: self.inner.clone(),
        }
    }
}

/// One model's view of the cache: every lookup and insert for the model goes through it, and
/// its counters are the model's. Cheap to clone; keep one per model.
pub struct ModelCache<M> {
    inner: Arc<Inner<M>>,
    model: Arc<str>,
    counters: Arc<CacheCounters>,
}

impl<M> Clone for ModelCache<M> {
    fn clone(&self) -> Self {
        ModelCache {
            inner: self.inner.clone(),
            model: self.model.clone(),
            counters: self.counters.clone(),
        }
    }
}

impl<M: Send + Sync + 'static> ResponseCache<M> {
    /// A cache of at most `capacity` bytes (0: disabled, every lookup misses).
    pub fn new(capacity: usize) -> ResponseCache<M> {
        let shards = (capacity / MIN_SHARD_BYTES).clamp(1, MAX_SHARDS);
        let shard_bytes = capacity / shards;
        ResponseCache {
            inner: Arc::new(Inner {
                shards: (0..shards)
                    .map(|_| {
                        Padded(Mutex::new(Shard {
                            table: LruCache::unbounded_with_hasher(BuildHasherDefault::default()),
                            bytes: 0,
                        }))
                    })
                    .collect(),
                shard_bytes,
                capacity,
                models: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The handle for `model`, its counters kept for the whole model. The same model always
    /// gets the same counters, so they survive a reload of the model's handle.
    pub fn model(&self, model: &str) -> ModelCache<M> {
        self.version(model, 0)
    }

    /// The handle for one version of `model`, with counters of its own (Triton reports cache
    /// hits and misses per version). Entries are still the model's: invalidating the model
    /// drops them whatever handle stored them.
    pub fn version(&self, model: &str, version: u64) -> ModelCache<M> {
        let mut models = self.inner.models.lock();
        let existing = models
            .iter()
            .find(|((name, v), _)| &**name == model && *v == version)
            .map(|((name, _), counters)| (name.clone(), counters.clone()));
        let (name, counters) = match existing {
            Some(found) => found,
            None => {
                let name = models
                    .keys()
                    .find(|(name, _)| &**name == model)
                    .map(|(name, _)| name.clone())
                    .unwrap_or_else(|| Arc::from(model));
                let counters = Arc::new(CacheCounters::new(self.inner.shards.len()));
                models.insert((name.clone(), version), counters.clone());
                (name, counters)
            }
        };
        ModelCache {
            inner: self.inner.clone(),
            model: name,
            counters,
        }
    }

    /// Largest answer (body plus metadata and overhead) the cache will keep.
    pub fn max_entry(&self) -> usize {
        self.inner.shard_bytes
    }

    pub fn size(&self) -> CacheSize {
        let (mut entries, mut bytes) = (0u64, 0u64);
        for shard in self.inner.shards.iter() {
            let s = shard.0.lock();
            entries += s.table.len() as u64;
            bytes += s.bytes as u64;
        }
        CacheSize {
            entries,
            bytes,
            capacity: self.inner.capacity as u64,
        }
    }

    /// Every model's counters added up.
    pub fn stats(&self) -> CacheStats {
        let mut total = CacheStats::default();
        for counters in self.inner.models.lock().values() {
            total += counters.snapshot();
        }
        total
    }

    /// One model's counters, every handle of it added up (zeros for a model never seen).
    pub fn stats_for(&self, model: &str) -> CacheStats {
        let mut total = CacheStats::default();
        for ((name, _), counters) in self.inner.models.lock().iter() {
            if &**name == model {
                total += counters.snapshot();
            }
        }
        total
    }

    /// Every model's counters (its handles added up), by model name.
    pub fn stats_by_model(&self) -> Vec<(String, CacheStats)> {
        let mut by_model: std::collections::BTreeMap<String, CacheStats> = Default::default();
        for ((name, _), counters) in self.inner.models.lock().iter() {
            *by_model.entry(name.to_string()).or_default() += counters.snapshot();
        }
        by_model.into_iter().collect()
    }

    /// The counters of one version's handle ([`ResponseCache::version`]; zeros when none).
    pub fn stats_for_version(&self, model: &str, version: u64) -> CacheStats {
        self.inner
            .models
            .lock()
            .iter()
            .find(|((name, v), _)| &**name == model && *v == version)
            .map(|(_, c)| c.snapshot())
            .unwrap_or_default()
    }

    /// Forgets the counters of `model` (deleted), so a model of the same name starts at zero.
    pub fn forget_model(&self, model: &str) {
        self.inner
            .models
            .lock()
            .retain(|(name, _), _| &**name != model);
    }

    /// Drops every answer of `model`, all versions (model deleted or replaced). Returns how
    /// many were dropped.
    pub fn invalidate_model(&self, model: &str) -> u64 {
        self.remove_where(|e| &*e.model == model)
    }

    /// Drops every answer of one version (version re-uploaded, its config changed, unloaded).
    pub fn invalidate_version(&self, model: &str, version: u64) -> u64 {
        self.remove_where(|e| &*e.model == model && e.version == version)
    }

    fn remove_where(&self, doomed: impl Fn(&Entry<M>) -> bool) -> u64 {
        let mut removed = 0u64;
        for (i, shard) in self.inner.shards.iter().enumerate() {
            let mut s = shard.0.lock();
            let keys: Vec<CacheKey> = s
                .table
                .iter()
                .filter(|(_, e)| doomed(e))
                .map(|(k, _)| *k)
                .collect();
            for key in keys {
                if let Some(e) = s.table.pop(&key) {
                    s.bytes -= e.charge;
                    e.counters
                        .slot(i)
                        .invalidated
                        .fetch_add(1, Ordering::Relaxed);
                    removed += 1;
                }
            }
        }
        removed
    }
}

impl<M> Inner<M> {
    /// The shard of `key`, by its first bytes (the hash table inside uses others).
    fn shard_of(&self, key: &CacheKey) -> usize {
        let b = key.as_bytes();
        let head = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
        (head % self.shards.len() as u64) as usize
    }
}

impl<M: Send + Sync + 'static> ModelCache<M> {
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The cached answer for `key`, now the most recently used; counted as a hit or a miss.
    pub fn get(&self, key: &CacheKey) -> Option<Hit<M>> {
        let started = sampled_start();
        let shard = self.inner.shard_of(key);
        let hit = self.inner.shards[shard]
            .0
            .lock()
            .table
            .get(key)
            .map(|e| Hit {
                body: e.body.clone(),
                meta: e.meta.clone(),
            });
        let c = self.counters.slot(shard);
        let (count, ns) = match &hit {
            Some(_) => (&c.hits, &c.hit_ns),
            None => (&c.misses, &c.miss_ns),
        };
        count.fetch_add(1, Ordering::Relaxed);
        if let Some(started) = started {
            ns.fetch_add(
                elapsed_ns(started).saturating_mul(u64::from(TIME_EVERY)),
                Ordering::Relaxed,
            );
        }
        hit
    }

    /// Stores the answer of `version` under `key` (replacing one already there), evicting
    /// the least recently used answers of its shard until it fits.
    pub fn insert(&self, key: CacheKey, version: u64, body: Bytes, meta: M) -> Inserted {
        self.insert_charged(key, version, body, meta, 0)
    }

    /// [`insert`](Self::insert) for metadata that owns heap memory worth counting (an answer
    /// kept as decoded tensors rather than bytes): `meta_bytes` is charged on top.
    pub fn insert_charged(
        &self,
        key: CacheKey,
        version: u64,
        body: Bytes,
        meta: M,
        meta_bytes: usize,
    ) -> Inserted {
        let started = Instant::now();
        let inner = &self.inner;
        if inner.capacity == 0 {
            return Inserted::Disabled;
        }
        let shard = inner.shard_of(&key);
        let c = self.counters.slot(shard);
        let charge = body.len() + meta_bytes + std::mem::size_of::<M>() + ENTRY_OVERHEAD;
        if charge > inner.shard_bytes {
            c.too_large.fetch_add(1, Ordering::Relaxed);
            return Inserted::TooLarge;
        }
        let entry = Entry {
            body,
            meta: Arc::new(meta),
            model: self.model.clone(),
            version,
            counters: self.counters.clone(),
            charge,
        };
        let mut evicted = 0u64;
        // Evicted entries are dropped after the lock is released: freeing a large body is
        // not work the other threads of this shard should wait for.
        let mut dropped = Vec::new();
        {
            let mut s = inner.shards[shard].0.lock();
            if let Some(old) = s.table.pop(&key) {
                s.bytes -= old.charge;
                dropped.push(old);
            }
            while s.bytes + charge > inner.shard_bytes {
                match s.table.pop_lru() {
                    Some((_, old)) => {
                        s.bytes -= old.charge;
                        old.counters
                            .slot(shard)
                            .evictions
                            .fetch_add(1, Ordering::Relaxed);
                        evicted += 1;
                        dropped.push(old);
                    }
                    None => break,
                }
            }
            s.bytes += charge;
            s.table.put(key, entry);
        }
        drop(dropped);
        c.inserts.fetch_add(1, Ordering::Relaxed);
        c.insert_ns
            .fetch_add(elapsed_ns(started), Ordering::Relaxed);
        Inserted::Stored { evicted }
    }

    pub fn stats(&self) -> CacheStats {
        self.counters.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache_key::KeyBuilder;
    use proptest::prelude::*;

    fn key(i: u64) -> CacheKey {
        let mut k = KeyBuilder::new("m", 1);
        k.parameter("i", &i.to_le_bytes());
        k.finish()
    }

    #[test]
    fn hit_miss_and_counters() {
        let cache: ResponseCache<&'static str> = ResponseCache::new(1 << 20);
        let mlp = cache.model("mlp");
        assert!(mlp.get(&key(1)).is_none());
        assert_eq!(
            mlp.insert(key(1), 1, Bytes::from_static(b"answer"), "application/json"),
            Inserted::Stored { evicted: 0 }
        );
        let hit = mlp.get(&key(1)).expect("hit");
        assert_eq!(&hit.body[..], b"answer");
        assert_eq!(*hit.meta, "application/json");
        let s = mlp.stats();
        assert_eq!((s.hits, s.misses, s.inserts), (1, 1, 1));
        // The same model name gets the same counters; another model its own.
        assert_eq!(cache.model("mlp").stats().hits, 1);
        assert!(
            cache.model("other").get(&key(1)).is_some(),
            "keys, not models, decide hits"
        );
        assert_eq!(cache.stats_for("other").hits, 1);
        assert_eq!(cache.stats().hits, 2);
        // Lookups are timed one in TIME_EVERY: enough of them and the time shows.
        for _ in 0..2 * TIME_EVERY {
            mlp.get(&key(1));
        }
        assert!(mlp.stats().hit_ns > 0);
        let size = cache.size();
        assert_eq!(size.entries, 1);
        assert_eq!(
            size.bytes as usize,
            6 + std::mem::size_of::<&str>() + ENTRY_OVERHEAD
        );
    }

    #[test]
    fn least_recently_used_goes_first_and_bytes_stay_bounded() {
        // One shard of 10 entries of 100 bytes each.
        let per = 100 + std::mem::size_of::<()>() + ENTRY_OVERHEAD;
        let cache: ResponseCache<()> = ResponseCache::new(per * 10);
        let m = cache.model("m");
        for i in 0..10 {
            m.insert(key(i), 1, Bytes::from(vec![0u8; 100]), ());
        }
        assert!(m.get(&key(0)).is_some(), "0 becomes the most recent");
        assert_eq!(
            m.insert(key(10), 1, Bytes::from(vec![0u8; 100]), ()),
            Inserted::Stored { evicted: 1 }
        );
        assert!(m.get(&key(1)).is_none(), "1 was the least recent");
        assert!(m.get(&key(0)).is_some());
        assert_eq!(cache.size().bytes as usize, per * 10);
        // A larger answer evicts as many as it needs.
        assert_eq!(
            m.insert(key(11), 1, Bytes::from(vec![0u8; 350]), ()),
            Inserted::Stored { evicted: 2 }
        );
        assert!(cache.size().bytes as usize <= per * 10);
        assert_eq!(m.stats().evictions, 3);
        // Larger than the whole budget: refused, nothing evicted.
        let before = cache.size();
        assert_eq!(
            m.insert(key(12), 1, Bytes::from(vec![0u8; per * 10]), ()),
            Inserted::TooLarge
        );
        assert_eq!(cache.size(), before);
        assert_eq!(m.stats().too_large, 1);
        // Replacing a key does not count its old bytes twice.
        m.insert(key(0), 1, Bytes::from(vec![1u8; 100]), ());
        assert_eq!(&m.get(&key(0)).unwrap().body[..1], &[1]);
        assert!(cache.size().bytes as usize <= per * 10);
    }

    #[test]
    fn invalidation_by_model_and_version() {
        let cache: ResponseCache<()> = ResponseCache::new(64 << 20);
        let (a, b) = (cache.model("a"), cache.model("b"));
        for i in 0..50 {
            a.insert(key(i), 1 + i % 2, Bytes::from_static(b"x"), ());
            b.insert(key(100 + i), 1, Bytes::from_static(b"y"), ());
        }
        assert_eq!(cache.invalidate_version("a", 2), 25);
        assert!(a.get(&key(1)).is_none());
        assert!(a.get(&key(0)).is_some());
        assert_eq!(cache.invalidate_model("a"), 25);
        assert!(a.get(&key(0)).is_none());
        assert!(b.get(&key(100)).is_some());
        assert_eq!(cache.size().entries, 50);
        assert_eq!(a.stats().invalidated, 50);
        assert_eq!(cache.invalidate_model("nothing"), 0);
    }

    #[test]
    fn version_handles_count_apart_and_add_up_per_model() {
        let cache: ResponseCache<()> = ResponseCache::new(1 << 20);
        let (v1, v2) = (cache.version("m", 1), cache.version("m", 2));
        v1.insert(key(1), 1, Bytes::from_static(b"a"), ());
        v2.insert(key(2), 2, Bytes::from_static(b"b"), ());
        assert!(v1.get(&key(1)).is_some());
        assert!(v2.get(&key(2)).is_some());
        assert!(v2.get(&key(3)).is_none());
        assert_eq!(cache.stats_for_version("m", 1).hits, 1);
        assert_eq!(cache.stats_for_version("m", 2).misses, 1);
        assert_eq!(
            cache.version("m", 2).stats().hits,
            1,
            "the same counters again"
        );
        let whole = cache.stats_for("m");
        assert_eq!((whole.hits, whole.misses, whole.inserts), (2, 1, 2));
        assert_eq!(cache.stats_by_model(), vec![("m".to_owned(), whole)]);
        // Entries belong to the model: invalidating it drops what every handle stored.
        assert_eq!(cache.invalidate_model("m"), 2);
        cache.forget_model("m");
        assert_eq!(cache.stats_for("m"), CacheStats::default());
    }

    #[test]
    fn disabled_cache_stores_nothing() {
        let cache: ResponseCache<()> = ResponseCache::new(0);
        let m = cache.model("m");
        assert_eq!(
            m.insert(key(1), 1, Bytes::from_static(b"x"), ()),
            Inserted::Disabled
        );
        assert!(m.get(&key(1)).is_none());
        assert_eq!(cache.size().bytes, 0);
    }

    #[test]
    fn many_threads_share_it_and_the_bound_holds() {
        let cache: ResponseCache<u64> = ResponseCache::new(MIN_SHARD_BYTES * 4);
        assert_eq!(cache.inner.shards.len(), 4);
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let m = cache.model(if t % 2 == 0 { "even" } else { "odd" });
                std::thread::spawn(move || {
                    for i in 0..2000u64 {
                        let k = key(i % 500);
                        match m.get(&k) {
                            Some(hit) => {
                                assert_eq!(*hit.meta, i % 500, "an answer for another key")
                            }
                            None => {
                                m.insert(
                                    k,
                                    1,
                                    Bytes::from(vec![t as u8; 4096 + (i % 7) as usize * 1000]),
                                    i % 500,
                                );
                            }
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let s = cache.stats();
        assert_eq!(s.hits + s.misses, 16_000);
        assert!(s.hits > 0 && s.inserts > 0);
        assert!(cache.size().bytes <= cache.size().capacity);
    }

    proptest! {
        // Against a model of an LRU (a list, most recent last), per shard.
        #[test]
        fn behaves_like_a_plain_lru(ops in prop::collection::vec((0u64..12, 0usize..300, any::<bool>()), 1..80)) {
            let per_entry = ENTRY_OVERHEAD + std::mem::size_of::<()>();
            let capacity = 6 * per_entry + 500;
            let cache: ResponseCache<()> = ResponseCache::new(capacity);
            let m = cache.model("m");
            let mut model: Vec<(u64, usize)> = Vec::new();
            for (k, len, is_get) in ops {
                if is_get {
                    let hit = m.get(&key(k));
                    let pos = model.iter().position(|e| e.0 == k);
                    prop_assert_eq!(hit.as_ref().map(|h| h.body.len()), pos.map(|p| model[p].1));
                    if let Some(p) = pos {
                        let e = model.remove(p);
                        model.push(e);
                    }
                } else {
                    model.retain(|e| e.0 != k);
                    let charge = |len: usize| len + per_entry;
                    while model.iter().map(|e| charge(e.1)).sum::<usize>() + charge(len) > capacity {
                        model.remove(0);
                    }
                    model.push((k, len));
                    m.insert(key(k), 1, Bytes::from(vec![0u8; len]), ());
                }
                let bytes: usize = model.iter().map(|e| e.1 + per_entry).sum();
                prop_assert_eq!(cache.size().bytes as usize, bytes);
            }
        }
    }
}
