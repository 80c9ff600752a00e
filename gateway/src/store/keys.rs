//! API key rows.

use super::{now_secs, Store, StoreError};
use crate::auth::{self, Scope, Scopes};
use crate::ratelimit::RateLimit;
use rusqlite::{params, OptionalExtension, Row};
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
}

pub(super) fn record(row: &Row<'_>) -> rusqlite::Result<KeyRecord> {
    let scopes: String = row.get("scopes")?;
    Ok(KeyRecord {
        id: row.get("id")?,
        public_id: row.get("public_id")?,
        name: row.get("name")?,
        scopes: scopes.split(',').filter_map(Scope::parse).collect(),
        created_at: row.get("created_at")?,
        revoked_at: row.get("revoked_at")?,
        rate_limit: match (
            row.get::<_, Option<f64>>("rate_rps")?,
            row.get::<_, Option<u32>>("rate_burst")?,
        ) {
            (Some(rps), Some(burst)) => Some(RateLimit { rps, burst }),
            _ => None,
        },
        max_concurrent: row.get("max_concurrent")?,
    })
}

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
        self.with(|conn| {
            conn.execute(
                "INSERT INTO api_keys (public_id, name, secret_hash, scopes, created_at, rate_rps, rate_burst, max_concurrent)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    key.public_id,
                    name,
                    key.hash.as_slice(),
                    scopes.to_list(),
                    now_secs(),
                    limits.rate_limit.map(|r| r.rps),
                    limits.rate_limit.map(|r| r.burst),
                    limits.max_concurrent
                ],
            )?;
            let id = conn.last_insert_rowid();
            let rec = conn.query_row("SELECT * FROM api_keys WHERE id = ?1", [id], record)?;
            Ok((rec, key.secret))
        })
    }

    pub fn list_keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        self.with(|conn| {
            let mut stmt = conn.prepare("SELECT * FROM api_keys ORDER BY id")?;
            let rows = stmt.query_map([], record)?.collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
    }

    /// Revokes by numeric id or public id. Returns the record, or None when no such key.
    pub fn revoke_key(&self, id_or_public: &str) -> Result<Option<KeyRecord>, StoreError> {
        self.with(|conn| {
            let n = conn.execute(
                "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?2)
                 WHERE public_id = ?1 OR CAST(id AS TEXT) = ?1",
                params![id_or_public, now_secs()],
            )?;
            if n == 0 {
                return Ok(None);
            }
            Ok(conn
                .query_row(
                    "SELECT * FROM api_keys WHERE public_id = ?1 OR CAST(id AS TEXT) = ?1",
                    [id_or_public],
                    record,
                )
                .optional()?)
        })
    }

    /// A key by numeric id or public id.
    pub fn get_key(&self, id_or_public: &str) -> Result<Option<KeyRecord>, StoreError> {
        self.with(|conn| {
            Ok(conn
                .query_row(
                    "SELECT * FROM api_keys WHERE public_id = ?1 OR CAST(id AS TEXT) = ?1",
                    [id_or_public],
                    record,
                )
                .optional()?)
        })
    }

    /// Replaces a key's own limits (None = server default). Returns the updated record, or
    /// None when no such key.
    pub fn set_key_limits(
        &self,
        id_or_public: &str,
        limits: &KeyLimits,
    ) -> Result<Option<KeyRecord>, StoreError> {
        let n = self.with(|conn| {
            Ok(conn.execute(
                "UPDATE api_keys SET rate_rps = ?2, rate_burst = ?3, max_concurrent = ?4
                 WHERE public_id = ?1 OR CAST(id AS TEXT) = ?1",
                params![
                    id_or_public,
                    limits.rate_limit.map(|r| r.rps),
                    limits.rate_limit.map(|r| r.burst),
                    limits.max_concurrent
                ],
            )?)
        })?;
        if n == 0 {
            return Ok(None);
        }
        self.get_key(id_or_public)
    }

    /// Finds the active key matching a presented secret, from the in-memory snapshot
    /// (`key_cache`), which is reloaded after any commit to the database.
    pub fn authenticate(&self, presented: &str) -> Result<Option<KeyRecord>, StoreError> {
        self.keys.authenticate(presented, |sink| {
            self.with(|conn| super::key_cache::load_active(conn, sink))
        })
    }

    pub fn key_count(&self) -> Result<i64, StoreError> {
        self.with(|conn| Ok(conn.query_row("SELECT count(*) FROM api_keys", [], |r| r.get(0))?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_authenticate_revoke() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let (rec, secret) = store
            .create_key("ci", &Scopes::parse_list("infer").unwrap())
            .unwrap();
        assert_eq!(store.authenticate(&secret).unwrap().unwrap().id, rec.id);
        assert!(store.authenticate(&format!("{secret}x")).unwrap().is_none());
        assert!(store
            .revoke_key(&rec.public_id)
            .unwrap()
            .unwrap()
            .revoked_at
            .is_some());
        assert!(store.authenticate(&secret).unwrap().is_none());
        assert!(store.revoke_key("nope").unwrap().is_none());
        assert_eq!(rec.rate_limit, None);

        let limits = KeyLimits {
            rate_limit: Some(RateLimit::new(2.5, Some(4)).unwrap()),
            max_concurrent: Some(3),
        };
        let (limited, _) = store
            .create_key_with_limits("lim", &Scopes::parse_list("infer").unwrap(), &limits)
            .unwrap();
        assert_eq!(limited.rate_limit, limits.rate_limit);
        assert_eq!(limited.max_concurrent, Some(3));
        let cleared = store
            .set_key_limits(&limited.public_id, &KeyLimits::default())
            .unwrap()
            .unwrap();
        assert_eq!((cleared.rate_limit, cleared.max_concurrent), (None, None));
        assert!(store.set_key_limits("nope", &limits).unwrap().is_none());
        // The secret itself is nowhere in the database file.
        drop(store);
        let db = std::fs::read(dir.path().join("infergate.db")).unwrap();
        assert!(!db.windows(secret.len()).any(|w| w == secret.as_bytes()));
    }
}
