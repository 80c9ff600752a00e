//! Active API keys held in memory, so that authenticating a request reads no table.
//!
//! The database stays the source of truth. Whether the snapshot is current is decided by
//! SQLite's `PRAGMA data_version` on a connection of its own: it changes whenever any other
//! connection (this process's writer, or `infergate keys revoke --data-dir` in another process)
//! commits. So a revocation takes effect on the very next request, and a key that does not
//! exist costs a hash-map miss instead of a query (cheap to refuse floods of made-up keys). The
//! snapshot is reloaded only after a commit, and a write that lands while it reloads is caught
//! by the next request (the version is read before the rows).
//!
//! How a request learns that the snapshot is current, cheapest first:
//! 1. A snapshot confirmed less than [`RECHECK_AFTER`] (1 ms) ago, with no key written by this
//!    process since, is trusted as it is: no system call. A revocation committed by another
//!    process (`infergate keys revoke --data-dir`) takes effect within a millisecond; this
//!    process's own key writes end the trust at once ([`KeyCache::written`]), so a key revoked
//!    through the API is refused by the very next request; and a key missing from the snapshot
//!    is always looked for again, so one created by another process works at once.
//! 2. Otherwise the WAL-index header: the first 48 bytes of `infergate.db-shm`, which SQLite
//!    rewrites in every commit (its `iChange` counter, `mxFrame`, salts and checksums;
//!    <https://www.sqlite.org/walformat.html>), read with one `pread` and no lock. The same
//!    bytes as when the snapshot was last confirmed mean no commit since.
//! 3. Anything else (a commit, a checkpoint, a torn read of a header being written, an
//!    unreadable file) asks `data_version`, which stays the authority: a read transaction (two
//!    `fcntl` locks on the WAL index) under a mutex.
//!
//! The first two exist because each step below them, taken on every request, is a visible
//! share of the server's CPU on a small model (`bench/cpu_per_request.py`'s profile: a few
//! percent for `data_version`, about 1 % for the `pread`).

use super::sql::{Db, Row};
use super::StoreError;
use crate::auth;
use crate::key_record::{record, KeyRecord};
use parking_lot::{Mutex, RwLock};
use rusqlite::Connection;
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The WAL-index header's size (one copy of SQLite's `WalIndexHdr`).
const WAL_INDEX_HEADER: usize = 48;

/// How long a snapshot confirmed current is trusted without reading the WAL-index header.
pub(super) const RECHECK_AFTER: Duration = Duration::from_millis(1);

/// When the snapshot was last confirmed current, and [`KeyCache::epoch`] at the time.
#[derive(Clone, Copy)]
struct Confirmed {
    at: Instant,
    epoch: u64,
}

/// An active key and the SHA-256 of its secret.
pub(super) struct ActiveKey {
    /// Shared with every request it authenticates (an `Arc` clone, not three allocations).
    pub(super) record: Arc<KeyRecord>,
    secret_hash: Vec<u8>,
}

impl ActiveKey {
    pub(super) fn from_row(row: &Row) -> Result<ActiveKey, StoreError> {
        Ok(ActiveKey {
            record: Arc::new(record(row)?),
            secret_hash: row.get("secret_hash")?,
        })
    }

    /// The key's record when `presented` is its secret.
    pub(super) fn verify(&self, presented: &str) -> Option<Arc<KeyRecord>> {
        auth::verify(presented, &self.secret_hash).then(|| self.record.clone())
    }
}

struct Snapshot {
    /// `data_version` as seen by `watch` when the rows were read; None before the first load.
    version: Option<i64>,
    /// The WAL-index header read just before `version` was last confirmed.
    header: Option<[u8; WAL_INDEX_HEADER]>,
    by_public_id: Arc<HashMap<String, ActiveKey>>,
}

pub(super) struct KeyCache {
    /// Used only to ask `data_version`: a connection's version moves with other connections'
    /// commits, never its own, so this one must never write.
    watch: Mutex<Connection>,
    /// `infergate.db-shm`, read-only; None when it could not be opened (then every request
    /// asks `data_version`).
    wal_index: Option<File>,
    snapshot: RwLock<Snapshot>,
    confirmed: Mutex<Option<Confirmed>>,
    /// Moves at each of this process's key writes ([`KeyCache::written`]): a confirmation taken
    /// under an older epoch is not trusted.
    epoch: AtomicU64,
}

impl KeyCache {
    pub(super) fn open(database: &Path) -> Result<KeyCache, StoreError> {
        let watch = Connection::open(database)?;
        watch.busy_timeout(std::time::Duration::from_secs(5))?;
        // A first read transaction makes sure the WAL index exists before it is opened.
        watch.query_row("PRAGMA data_version", [], |row| row.get::<_, i64>(0))?;
        let mut shm = database.as_os_str().to_owned();
        shm.push("-shm");
        let wal_index = File::open(&shm)
            .inspect_err(|e| {
                tracing::warn!(error = %e, "the WAL index cannot be read: every request asks SQLite whether keys changed")
            })
            .ok();
        Ok(KeyCache {
            watch: Mutex::new(watch),
            wal_index,
            snapshot: RwLock::new(Snapshot {
                version: None,
                header: None,
                by_public_id: Arc::new(HashMap::new()),
            }),
            confirmed: Mutex::new(None),
            epoch: AtomicU64::new(0),
        })
    }

    fn wal_index_header(&self) -> Option<[u8; WAL_INDEX_HEADER]> {
        let mut header = [0u8; WAL_INDEX_HEADER];
        self.wal_index
            .as_ref()?
            .read_exact_at(&mut header, 0)
            .ok()?;
        Some(header)
    }

    /// This process committed a key write: the next request reads the WAL-index header again.
    pub(super) fn written(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// The snapshot, when it was confirmed current less than [`RECHECK_AFTER`] before `now`
    /// and no key was written here since.
    fn trusted(&self, now: Instant, epoch: u64) -> Option<Arc<HashMap<String, ActiveKey>>> {
        let confirmed = (*self.confirmed.lock())?;
        let fresh =
            confirmed.epoch == epoch && now.saturating_duration_since(confirmed.at) < RECHECK_AFTER;
        fresh.then(|| self.snapshot.read().by_public_id.clone())
    }

    fn data_version(&self) -> Result<i64, StoreError> {
        let watch = self.watch.lock();
        let mut stmt = watch.prepare_cached("PRAGMA data_version")?;
        Ok(stmt.query_row([], |row| row.get(0))?)
    }

    /// The active key matching `presented`, reloading the snapshot first if anything was
    /// committed since it was read. `load` reads the active keys on the store's own connection.
    pub(super) fn authenticate(
        &self,
        presented: &str,
        load: impl FnOnce() -> Result<Vec<ActiveKey>, StoreError>,
    ) -> Result<Option<Arc<KeyRecord>>, StoreError> {
        let Some(public_id) = auth::public_id(presented) else {
            return Ok(None);
        };
        // Both read before the header, so a confirmation never covers a later write.
        let epoch = self.epoch.load(Ordering::Acquire);
        let now = Instant::now();
        // A key the snapshot lacks is looked for again (one created by another process a
        // moment ago is served at once); only revocations wait out the window.
        if let Some(keys) = self.trusted(now, epoch) {
            if let Some(key) = keys.get(public_id) {
                return Ok(key.verify(presented));
            }
        }
        let confirm = || *self.confirmed.lock() = Some(Confirmed { at: now, epoch });
        let header = self.wal_index_header();
        let unchanged = {
            let snapshot = self.snapshot.read();
            (header.is_some() && snapshot.header == header).then(|| snapshot.by_public_id.clone())
        };
        if let Some(keys) = unchanged {
            confirm();
            return Ok(keys.get(public_id).and_then(|key| key.verify(presented)));
        }
        let version = self.data_version()?;
        let keys = {
            let mut snapshot = self.snapshot.write();
            (snapshot.version == Some(version)).then(|| {
                // Still current: remember the header this was confirmed under.
                snapshot.header = header;
                snapshot.by_public_id.clone()
            })
        };
        let keys = match keys {
            Some(keys) => keys,
            None => {
                let fresh: Arc<HashMap<_, _>> = Arc::new(
                    load()?
                        .into_iter()
                        .map(|k| (k.record.public_id.clone(), k))
                        .collect(),
                );
                *self.snapshot.write() = Snapshot {
                    version: Some(version),
                    header,
                    by_public_id: fresh.clone(),
                };
                fresh
            }
        };
        // Only a header that was read can be watched: without one, every request asks SQLite.
        if header.is_some() {
            confirm();
        }
        Ok(keys.get(public_id).and_then(|key| key.verify(presented)))
    }
}

/// Reads every active key with its secret hash (the snapshot's rows).
pub(super) fn load_active(db: &Db<'_>) -> Result<Vec<ActiveKey>, StoreError> {
    db.query("SELECT * FROM api_keys WHERE revoked_at IS NULL", &[])?
        .iter()
        .map(ActiveKey::from_row)
        .collect()
}

#[cfg(test)]
#[path = "key_cache_tests.rs"]
mod tests;
