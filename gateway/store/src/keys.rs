//! API key rows.

use super::sql::{vals, Db, Row};
use super::{now_secs, Backend, Store, StoreError};
use crate::auth::{self, Scope, Scopes};
use infergate_limits::RateLimit;
use serde::Serialize;
use std::sync::Arc;

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
}

/// A key's own admission limits, as set at creation or by an admin.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct KeyLimits {
    pub rate_limit: Option<RateLimit>,
    pub max_concurrent: Option<u32>,
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
        }
    }
}

pub(super) fn record(row: &Row) -> Result<KeyRecord, StoreError> {
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
    })
}

/// `pg_advisory_xact_lock` key that orders replicas creating the first key ("firstkey").
const FIRST_KEY_LOCK: i64 = 0x6669_7273_746b_6579;

/// Inserts a key's row (the secret only as its hash) and reads it back.
fn insert_key(
    db: &Db<'_>,
    key: &auth::NewKey,
    name: &str,
    scopes: &Scopes,
    limits: &KeyLimits,
) -> Result<KeyRecord, StoreError> {
    db.execute(
        "INSERT INTO api_keys (public_id, name, secret_hash, scopes, created_at, rate_rps, rate_burst, max_concurrent)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        vals![
            &key.public_id,
            name,
            key.hash.as_slice(),
            scopes.to_list(),
            now_secs(),
            limits.rate_limit.map(|r| r.rps),
            limits.rate_limit.map(|r| r.burst),
            limits.max_concurrent
        ],
    )?;
    record(&db.query_one(
        "SELECT * FROM api_keys WHERE public_id = ?1",
        vals![&key.public_id],
    )?)
}

const BY_ID_OR_PUBLIC: &str =
    "SELECT * FROM api_keys WHERE public_id = ?1 OR CAST(id AS TEXT) = ?1";

impl Store {
    /// Creates a key and returns its record and the secret (shown once, never stored).
    pub fn create_key(
        &self,
        name: &str,
        scopes: &Scopes,
    ) -> Result<(KeyRecord, String), StoreError> {
        self.create_key_with_limits(name, scopes, &KeyLimits::default())
    }

    /// Creates a key with its own admission limits.
    pub fn create_key_with_limits(
        &self,
        name: &str,
        scopes: &Scopes,
        limits: &KeyLimits,
    ) -> Result<(KeyRecord, String), StoreError> {
        let key = auth::generate();
        let rec = self.with(|db| insert_key(db, &key, name, scopes, limits))?;
        self.key_written(&rec.public_id);
        Ok((rec, key.secret))
    }

    /// Creates a key unless any key exists, as one step even across replicas that start together
    /// on an empty PostgreSQL database (a transaction-scoped advisory lock orders them; SQLite
    /// has one writer): exactly one of them creates the first admin key. None: a key exists.
    pub fn create_first_key(
        &self,
        name: &str,
        scopes: &Scopes,
    ) -> Result<Option<(KeyRecord, String)>, StoreError> {
        let key = auth::generate();
        let rec = self.transaction(|db| {
            if let Db::Postgres(..) = db {
                db.execute("SELECT pg_advisory_xact_lock(?1)", vals![FIRST_KEY_LOCK])?;
            }
            // A statement after the lock: it sees a key another replica committed under it.
            let count: i64 = db.query_one("SELECT count(*) FROM api_keys", &[])?.at(0)?;
            if count > 0 {
                return Ok(None);
            }
            insert_key(db, &key, name, scopes, &KeyLimits::default()).map(Some)
        })?;
        Ok(rec.map(|rec| {
            self.key_written(&rec.public_id);
            (rec, key.secret)
        }))
    }

    pub fn list_keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        self.with(|db| {
            db.query("SELECT * FROM api_keys ORDER BY id", &[])?
                .iter()
                .map(record)
                .collect()
        })
    }

    /// Revokes by numeric id or public id. Returns the record, or None when no such key.
    pub fn revoke_key(&self, id_or_public: &str) -> Result<Option<KeyRecord>, StoreError> {
        let rec = self.with(|db| {
            let n = db.execute(
                "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?2)
                 WHERE public_id = ?1 OR CAST(id AS TEXT) = ?1",
                vals![id_or_public, now_secs()],
            )?;
            if n == 0 {
                return Ok(None);
            }
            db.query_opt(BY_ID_OR_PUBLIC, vals![id_or_public])?
                .as_ref()
                .map(record)
                .transpose()
        })?;
        if let Some(rec) = &rec {
            self.key_written(&rec.public_id);
        }
        Ok(rec)
    }

    /// A key by numeric id or public id.
    pub fn get_key(&self, id_or_public: &str) -> Result<Option<KeyRecord>, StoreError> {
        self.with(|db| {
            db.query_opt(BY_ID_OR_PUBLIC, vals![id_or_public])?
                .as_ref()
                .map(record)
                .transpose()
        })
    }

    /// Replaces a key's own limits (None = server default). Returns the updated record, or
    /// None when no such key.
    pub fn set_key_limits(
        &self,
        id_or_public: &str,
        limits: &KeyLimits,
    ) -> Result<Option<KeyRecord>, StoreError> {
        let n = self.with(|db| {
            db.execute(
                "UPDATE api_keys SET rate_rps = ?2, rate_burst = ?3, max_concurrent = ?4
                 WHERE public_id = ?1 OR CAST(id AS TEXT) = ?1",
                vals![
                    id_or_public,
                    limits.rate_limit.map(|r| r.rps),
                    limits.rate_limit.map(|r| r.burst),
                    limits.max_concurrent
                ],
            )
        })?;
        if n == 0 {
            return Ok(None);
        }
        let rec = self.get_key(id_or_public)?;
        if let Some(rec) = &rec {
            self.key_written(&rec.public_id);
        }
        Ok(rec)
    }

    /// Finds the active key matching a presented secret, from memory: SQLite's snapshot
    /// (`key_cache`) is reloaded after any commit to the database; PostgreSQL's
    /// (`replica_keys`) follows the database's notifications and never waits for it.
    pub fn authenticate(&self, presented: &str) -> Result<Option<Arc<KeyRecord>>, StoreError> {
        match &self.backend {
            Backend::Sqlite { keys, .. } => {
                keys.authenticate(presented, || self.with(super::key_cache::load_active))
            }
            Backend::Postgres(pg) => Ok(pg.keys.authenticate(presented)),
        }
    }

    /// The server sees its own key writes at once: on SQLite the key cache looks at the
    /// database again; a replica re-reads the key without waiting for the notification. If the
    /// re-read fails (the database went away just after the write), the notification or the
    /// next full reload brings the change.
    fn key_written(&self, public_id: &str) {
        match &self.backend {
            Backend::Sqlite { keys, .. } => keys.written(),
            Backend::Postgres(pg) => {
                if let Err(e) = pg.with(|db| pg.keys.reload(db, Some(public_id))) {
                    tracing::warn!(public_id, error = %e, "could not re-read a key just written; the key listener will");
                }
            }
        }
    }

    pub fn key_count(&self) -> Result<i64, StoreError> {
        self.with(|db| db.query_one("SELECT count(*) FROM api_keys", &[])?.at(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SQLite's file on disk (the behaviour itself is tested on both backends in `tests`).
    #[test]
    fn the_secret_is_nowhere_in_the_database_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let (_, secret) = store
            .create_key("ci", &Scopes::parse_list("infer").unwrap())
            .unwrap();
        drop(store);
        let db = std::fs::read(dir.path().join("infergate.db")).unwrap();
        assert!(!db.windows(secret.len()).any(|w| w == secret.as_bytes()));
    }
}
