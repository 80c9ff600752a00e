//! Active API keys held in memory, so that authenticating a request reads no table.
//!
//! The database stays the source of truth. Whether the snapshot is current is decided by
//! SQLite's `PRAGMA data_version` on a connection of its own: it changes whenever any other
//! connection (this process's writer, or `infergate keys revoke --data-dir` in another process)
//! commits. Reading it touches only the WAL index in shared memory (no table, no lock shared
//! with writers), so a revocation takes effect on the very next request, and a key that does
//! not exist costs a hash-map miss instead of a query (cheap to refuse floods of made-up keys).
//! The snapshot is reloaded only after a commit, and a write that lands while it reloads is
//! caught by the next request (the version is read before the rows).

use super::keys::{record, KeyRecord};
use super::sql::{Db, Row};
use super::StoreError;
use crate::auth;
use parking_lot::{Mutex, RwLock};
use rusqlite::Connection;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// An active key and the SHA-256 of its secret.
pub(super) struct ActiveKey {
    pub(super) record: KeyRecord,
    secret_hash: Vec<u8>,
}

impl ActiveKey {
    pub(super) fn from_row(row: &Row) -> Result<ActiveKey, StoreError> {
        Ok(ActiveKey {
            record: record(row)?,
            secret_hash: row.get("secret_hash")?,
        })
    }

    /// The key's record when `presented` is its secret.
    pub(super) fn verify(&self, presented: &str) -> Option<KeyRecord> {
        auth::verify(presented, &self.secret_hash).then(|| self.record.clone())
    }
}

struct Snapshot {
    /// `data_version` as seen by `watch` when the rows were read; None before the first load.
    version: Option<i64>,
    by_public_id: Arc<HashMap<String, ActiveKey>>,
}

pub(super) struct KeyCache {
    /// Used only to ask `data_version`: a connection's version moves with other connections'
    /// commits, never its own, so this one must never write.
    watch: Mutex<Connection>,
    snapshot: RwLock<Snapshot>,
}

impl KeyCache {
    pub(super) fn open(database: &Path) -> Result<KeyCache, StoreError> {
        let watch = Connection::open(database)?;
        watch.busy_timeout(std::time::Duration::from_secs(5))?;
        Ok(KeyCache {
            watch: Mutex::new(watch),
            snapshot: RwLock::new(Snapshot {
                version: None,
                by_public_id: Arc::new(HashMap::new()),
            }),
        })
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
    ) -> Result<Option<KeyRecord>, StoreError> {
        let Some(public_id) = auth::public_id(presented) else {
            return Ok(None);
        };
        let version = self.data_version()?;
        let keys = {
            let snapshot = self.snapshot.read();
            (snapshot.version == Some(version)).then(|| snapshot.by_public_id.clone())
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
                    by_public_id: fresh.clone(),
                };
                fresh
            }
        };
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
mod tests {
    use crate::auth::Scopes;
    use crate::store::Store;

    #[test]
    fn another_connections_writes_are_seen_by_the_next_lookup() {
        let dir = tempfile::tempdir().unwrap();
        let server = Store::open(dir.path()).unwrap();
        let scopes = Scopes::parse_list("infer").unwrap();
        let (own, own_secret) = server.create_key("own", &scopes).unwrap();
        assert_eq!(
            server.authenticate(&own_secret).unwrap().unwrap().id,
            own.id
        );

        // A second process (here: a second store on the same file) creates and revokes keys.
        let offline = Store::open(dir.path()).unwrap();
        let (other, other_secret) = offline.create_key("offline", &scopes).unwrap();
        assert_eq!(
            server.authenticate(&other_secret).unwrap().unwrap().id,
            other.id
        );
        offline.revoke_key(&own.public_id).unwrap().unwrap();
        assert!(server.authenticate(&own_secret).unwrap().is_none());

        // The server's own writes too.
        server.revoke_key(&other.public_id).unwrap().unwrap();
        assert!(server.authenticate(&other_secret).unwrap().is_none());
    }
}
