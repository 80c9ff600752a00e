//! The store itself: the database (one SQLite connection, or a PostgreSQL pool) and the data
//! directory. Each kind of row adds its queries to [`Store`] in a file of its own.

use crate::catalog_changes::CatalogChanges;
use crate::error::StoreError;
use crate::files::DataDir;
use crate::sql::Db;
use crate::{key_cache, migrate, postgres};
use parking_lot::Mutex;
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the database is: SQLite in the data directory, or PostgreSQL shared by replicas.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// PostgreSQL shared by every replica: `postgres://user[:password]@host:port/db`, over TLS
    /// with `?sslmode=require&sslrootcert=CA_FILE` (the server's certificate always verified).
    /// Absent: SQLite in the data directory.
    pub url: Option<String>,
    /// With PostgreSQL: seconds between full reloads of each replica's cached keys, models,
    /// plugins and pipelines, which bound how long a change whose notification was lost (its
    /// listener reconnecting) takes to arrive.
    pub resync_s: u64,
    /// PostgreSQL: while a replica cannot reload its keys (the database unreachable from it),
    /// it honours its cached keys for this many seconds beyond `resync_s`, then refuses every
    /// request with 503 until a reload succeeds: how long a key revoked through another replica
    /// may still work on a partitioned one. 0: honoured for as long as the database is away.
    pub keys_stale_s: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            url: None,
            resync_s: 5,
            keys_stale_s: 300,
        }
    }
}

pub(crate) enum Backend {
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
    pub(crate) backend: Backend,
    pub(crate) dir: DataDir,
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
        let keys_stale =
            (config.keys_stale_s > 0).then(|| Duration::from_secs(config.keys_stale_s));
        Ok(Store {
            backend: Backend::Postgres(postgres::Postgres::connect(url, resync, keys_stale)?),
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

    pub(crate) fn with<T>(
        &self,
        f: impl FnOnce(&Db<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        match &self.backend {
            Backend::Sqlite { conn, .. } => f(&Db::Sqlite(&conn.lock())),
            Backend::Postgres(pg) => pg.with(f),
        }
    }

    /// Runs `f` in one transaction, committed when it succeeds and rolled back otherwise.
    pub(crate) fn transaction<T>(
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
