//! infergate's persistent store: the database and content-addressed files under the data directory.
//! The database is one SQLite file (WAL, foreign keys on, schema from `migrations/`), the
//! default; or PostgreSQL (`--store postgres://...`, schema from `migrations/postgres/`), which
//! several gateway replicas share. Every query is written once for both ([`sql`]).

pub mod auth;
pub mod blobs;
mod catalog_changes;
mod cluster_material;
pub mod collect;
pub mod files;
mod key_cache;
pub mod keys;
pub mod migrate;
pub mod models;
mod pg_tls;
pub mod plugins;
mod postgres;
mod replica_keys;
mod sql;
#[cfg(any(test, feature = "test-support"))]
pub mod test_postgres;
#[cfg(test)]
mod tests;
mod worker_status;
pub mod workers;

use parking_lot::Mutex;
use rusqlite::Connection;
use sql::Db;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use blobs::BlobKind;
pub use catalog_changes::CatalogChanges;
pub use cluster_material::StoredMaterial;
pub use files::DataDir;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Db(#[from] rusqlite::Error),
    #[error("{0}")]
    Io(String),
    #[error("{0}")]
    Migration(String),
    #[error("{0}")]
    Corrupt(String),
    #[error("PostgreSQL error: {0}")]
    Postgres(tokio_postgres::Error),
    /// The database cannot be reached or takes no queries now (PostgreSQL down, restarting,
    /// out of connections): the request may succeed later.
    #[error("the store is unavailable: {0}")]
    Unavailable(String),
    /// A bad `--store` URL or setting.
    #[error("{0}")]
    Config(String),
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> StoreError {
        if postgres::unavailable(&e) {
            // With its causes: "error performing TLS handshake" alone does not say that the
            // server's certificate was refused, and why.
            let mut text = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(cause) = source {
                text.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            StoreError::Unavailable(text)
        } else {
            StoreError::Postgres(e)
        }
    }
}

/// Where the database is (`[store]` in the configuration file, `--store` flags).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `postgres://user[:password]@host:port/db`; absent = SQLite in the data directory.
    pub url: Option<String>,
    /// PostgreSQL: seconds between full reloads of each replica's cached keys, models, plugins
    /// and pipelines, which bound how long a change whose notification was lost (listener
    /// reconnecting) takes to arrive.
    pub resync_s: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            url: None,
            resync_s: 5,
        }
    }
}

enum Backend {
    Sqlite {
        conn: Mutex<Connection>,
        // Boxed: the key cache (its snapshot and the WAL-index handle) would make every
        // store as large as this variant.
        keys: Box<key_cache::KeyCache>,
    },
    Postgres(postgres::Postgres),
}

/// The database and the data directory. SQLite serialises writers anyway; one connection
/// behind a mutex keeps transactions simple and is far from the bottleneck (an indexed read is
/// a few µs). PostgreSQL: a pool of connections (`postgres`).
pub struct Store {
    backend: Backend,
    dir: DataDir,
}

impl Store {
    /// Opens (creating if needed) the data directory and its database, and applies migrations.
    pub fn open(root: &Path) -> Result<Store, StoreError> {
        let dir = DataDir::create(root).map_err(|e| StoreError::Io(e.to_string()))?;
        let mut conn = Connection::open(dir.database())?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        migrate::apply(&mut conn).map_err(StoreError::Migration)?;
        let keys = Box::new(key_cache::KeyCache::open(&dir.database())?);
        Ok(Store {
            backend: Backend::Sqlite {
                conn: Mutex::new(conn),
                keys,
            },
            dir,
        })
    }

    /// Opens the store `config` names: SQLite in `root` (as [`Store::open`]) or PostgreSQL, with
    /// the files still under `root`.
    pub fn open_with(root: &Path, config: &StoreConfig) -> Result<Store, StoreError> {
        let Some(url) = &config.url else {
            return Store::open(root);
        };
        let dir = DataDir::create(root).map_err(|e| StoreError::Io(e.to_string()))?;
        let resync = Duration::from_secs(config.resync_s.max(1));
        Ok(Store {
            backend: Backend::Postgres(postgres::Postgres::connect(url, resync)?),
            dir,
        })
    }

    /// Which database this is, for logs: `sqlite` or `postgres`.
    pub fn backend_name(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite { .. } => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    /// Whether other processes share this store (PostgreSQL: gateway replicas), so that what
    /// one process keeps in files or memory alone would differ between them.
    pub fn is_shared(&self) -> bool {
        matches!(self.backend, Backend::Postgres(_))
    }

    /// Changes of models, plugins and pipelines made by any replica (PostgreSQL); `None` for
    /// SQLite, whose one process makes every change itself.
    pub fn catalog_changes(&self) -> Option<tokio::sync::watch::Receiver<CatalogChanges>> {
        match &self.backend {
            Backend::Sqlite { .. } => None,
            Backend::Postgres(pg) => Some(pg.catalog.subscribe()),
        }
    }

    pub fn dir(&self) -> &DataDir {
        &self.dir
    }

    pub fn root(&self) -> PathBuf {
        self.dir.root().to_path_buf()
    }

    fn with<T>(&self, f: impl FnOnce(&Db<'_>) -> Result<T, StoreError>) -> Result<T, StoreError> {
        match &self.backend {
            Backend::Sqlite { conn, .. } => f(&Db::Sqlite(&conn.lock())),
            Backend::Postgres(pg) => pg.with(f),
        }
    }

    /// Runs `f` in one transaction, committed when it succeeds and rolled back otherwise.
    fn transaction<T>(
        &self,
        f: impl FnOnce(&Db<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        match &self.backend {
            Backend::Sqlite { conn, .. } => {
                let mut conn = conn.lock();
                let tx = conn.transaction()?;
                let out = f(&Db::Sqlite(&tx))?;
                tx.commit()?;
                Ok(out)
            }
            Backend::Postgres(pg) => pg.transaction(f),
        }
    }
}

impl StoreError {
    /// Wraps an I/O error with what was being done, for `map_err`.
    pub(crate) fn io(doing: &'static str) -> impl Fn(std::io::Error) -> StoreError {
        move |e| StoreError::Io(format!("{doing}: {e}"))
    }
}

/// Removes a content-addressed file nothing references any more. A failure leaves an
/// unreferenced file behind, which the next start collects, so it is logged, not returned.
pub(crate) fn remove_blob(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "could not remove an unreferenced file; the next start collects it")
        }
    }
}

pub fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
