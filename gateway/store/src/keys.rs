//! API key rows.

use crate::auth::{self, Scopes};
use crate::clock::now_secs;
use crate::error::StoreError;
use crate::key_record::record;
use crate::sql::{vals, Db};
use crate::store::{Backend, Store};
use std::sync::Arc;

pub use crate::key_record::{shown_budget, KeyLimits, KeyRecord};

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
    let (tpm, budget, period) = token_columns(limits);
    db.execute(
        "INSERT INTO api_keys (public_id, name, secret_hash, scopes, created_at, rate_rps, rate_burst, max_concurrent,
                               tokens_per_minute, token_budget, token_budget_period)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        vals![
            &key.public_id,
            name,
            key.hash.as_slice(),
            scopes.to_list(),
            now_secs(),
            limits.rate_limit.map(|r| r.rps),
            limits.rate_limit.map(|r| r.burst),
            limits.max_concurrent,
            tpm,
            budget,
            period
        ],
    )?;
    record(&db.query_one(
        "SELECT * FROM api_keys WHERE public_id = ?1",
        vals![&key.public_id],
    )?)
}

/// The token limit columns of `limits`: tokens per minute, budget and its period.
fn token_columns(limits: &KeyLimits) -> (Option<i64>, Option<i64>, Option<&'static str>) {
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let t = &limits.tokens;
    (
        t.tokens_per_minute.map(count),
        t.token_budget.map(|b| count(b.tokens)),
        t.token_budget.map(|b| b.period.as_str()),
    )
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
            let (tpm, budget, period) = token_columns(limits);
            db.execute(
                "UPDATE api_keys SET rate_rps = ?2, rate_burst = ?3, max_concurrent = ?4,
                        tokens_per_minute = ?5, token_budget = ?6, token_budget_period = ?7
                 WHERE public_id = ?1 OR CAST(id AS TEXT) = ?1",
                vals![
                    id_or_public,
                    limits.rate_limit.map(|r| r.rps),
                    limits.rate_limit.map(|r| r.burst),
                    limits.max_concurrent,
                    tpm,
                    budget,
                    period
                ],
            )
        })?;
        self.updated_key(id_or_public, n)
    }

    /// Replaces a key's own chat guardrails (`list`: the JSON text of their list, already
    /// checked; None removes them). Returns the updated record, or None when no such key.
    pub fn set_key_guardrails(
        &self,
        id_or_public: &str,
        list: Option<&str>,
    ) -> Result<Option<KeyRecord>, StoreError> {
        let n = self.with(|db| {
            db.execute(
                "UPDATE api_keys SET guardrails = ?2 WHERE public_id = ?1 OR CAST(id AS TEXT) = ?1",
                vals![id_or_public, list],
            )
        })?;
        self.updated_key(id_or_public, n)
    }

    /// Replaces a key's own payload log setting (`setting`: its JSON text, already checked;
    /// None removes it). Returns the updated record, or None when no such key.
    pub fn set_key_payload_log(
        &self,
        id_or_public: &str,
        setting: Option<&str>,
    ) -> Result<Option<KeyRecord>, StoreError> {
        let n = self.with(|db| {
            db.execute(
                "UPDATE api_keys SET payload_log = ?2 WHERE public_id = ?1 OR CAST(id AS TEXT) = ?1",
                vals![id_or_public, setting],
            )
        })?;
        self.updated_key(id_or_public, n)
    }

    /// After an update of `rows` rows of the key `id_or_public`: its record as written (None
    /// when there was no such key), seen by this server's key cache at once.
    fn updated_key(&self, id_or_public: &str, rows: u64) -> Result<Option<KeyRecord>, StoreError> {
        if rows == 0 {
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
                keys.authenticate(presented, || self.with(crate::key_cache::load_active))
            }
            Backend::Postgres(pg) => pg.keys.authenticate(presented),
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
