//! The persistent store: one SQLite database (WAL, foreign keys on, schema from `migrations/`)
//! and content-addressed files under the data directory.

pub mod collect;
pub mod files;
mod key_cache;
pub mod keys;
pub mod migrate;
pub mod models;
pub mod plugins;
pub mod workers;

use parking_lot::Mutex;
use rusqlite::Connection;
use std::path::{Path, PathBuf};

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
}

/// The database. SQLite serialises writers anyway; one connection behind a mutex keeps
/// transactions simple and is far from the bottleneck (an indexed read is a few µs).
pub struct Store {
    conn: Mutex<Connection>,
    keys: key_cache::KeyCache,
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
        let keys = key_cache::KeyCache::open(&dir.database())?;
        Ok(Store {
            conn: Mutex::new(conn),
            keys,
            dir,
        })
    }

    pub fn dir(&self) -> &DataDir {
        &self.dir
    }

    pub fn root(&self) -> PathBuf {
        self.dir.root().to_path_buf()
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        f(&mut self.conn.lock())
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

pub(crate) fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
