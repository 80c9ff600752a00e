//! Content-addressed model and plugin files, in two places. The data directory
//! (`models/<sha256>.onnx`, `plugins/<sha256>.wasm`) holds the copy that is loaded; with SQLite
//! it is the only one. With PostgreSQL the database holds the shared copy as well (`blobs` and
//! `blob_chunks`, `migrations/postgres/0006_blobs.sql`), so replicas need no shared volume:
//! - a file is written in 1 MiB chunks, read from the local file one chunk at a time, in the
//!   transaction that inserts the row referencing it, so no row ever names a missing blob;
//! - the transaction that deletes the last row referencing a file deletes its chunks;
//! - both take a transaction-scoped advisory lock on the content address, so that a delete on
//!   one replica and an upload of the same bytes on another never leave a row without its
//!   blob (the local blob lock, `DataDir::lock_blobs`, only orders one replica's own writes);
//! - a replica that lacks a file, or whose copy no longer hashes to its address, fetches it
//!   into its data directory (temporary file, fsync, rename) before loading it
//!   ([`Store::local_blob`]); a copy that does not hash to its address is never used.

use super::files::{persist, BlobWriter, DataDir};
use super::sql::{vals, Db};
use crate::clock::now_secs;
use crate::error::StoreError;
use crate::store::{Backend, Store};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// Bytes per `blob_chunks` row: large enough that a model is a few hundred round trips, small
/// enough that a chunk in flight costs little memory.
pub(crate) const CHUNK: usize = 1 << 20;
/// First key of `pg_advisory_xact_lock(class, blob)`: blob locks, apart from other locks.
const BLOB_LOCK_CLASS: i64 = 0x626c_6f62; // "blob"

/// What a content-addressed file is, which decides where the data directory keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlobKind {
    Model,
    Plugin,
}

impl BlobKind {
    pub fn path(self, dir: &DataDir, sha256: &str) -> PathBuf {
        match self {
            BlobKind::Model => dir.model_file(sha256),
            BlobKind::Plugin => dir.plugin_file(sha256),
        }
    }

    fn what(self) -> &'static str {
        match self {
            BlobKind::Model => "model",
            BlobKind::Plugin => "plugin",
        }
    }
}

/// Serialises, across replicas, the transactions that write or delete the blob `sha256`. Held
/// until the transaction ends.
fn lock(db: &Db<'_>, sha256: &str) -> Result<(), StoreError> {
    // The address is uniformly distributed: its first 32 bits are as good a key as any.
    let key = sha256
        .get(..8)
        .and_then(|h| u32::from_str_radix(h, 16).ok())
        .map_or(0, |k| i64::from(k as i32));
    db.execute(
        "SELECT pg_advisory_xact_lock(?1, ?2)",
        vals![BLOB_LOCK_CLASS, key],
    )?;
    Ok(())
}

/// Inside the transaction that inserts a row referencing `sha256`: stores the file at `path`
/// (already checked to hash to `sha256`) in PostgreSQL unless it is there. Nothing to do on
/// SQLite, whose data directory is the store.
pub(super) fn put(db: &Db<'_>, sha256: &str, path: &Path) -> Result<(), StoreError> {
    if matches!(db, Db::Sqlite(_)) {
        return Ok(());
    }
    lock(db, sha256)?;
    let mut file = File::open(path).map_err(StoreError::io("opening the file to share"))?;
    let size = file
        .metadata()
        .map_err(StoreError::io("reading the file to share"))?
        .len();
    let chunks = size.div_ceil(CHUNK as u64);
    let fresh = db.execute(
        "INSERT INTO blobs (sha256, size_bytes, chunks, created_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (sha256) DO NOTHING",
        vals![sha256, size as i64, chunks as i64, now_secs()],
    )? > 0;
    if !fresh {
        return Ok(());
    }
    let mut buf = vec![0u8; CHUNK];
    let mut hasher = Sha256::new();
    for n in 0..chunks {
        let len =
            read_full(&mut file, &mut buf).map_err(StoreError::io("reading the file to share"))?;
        hasher.update(&buf[..len]);
        db.execute(
            "INSERT INTO blob_chunks (sha256, n, data) VALUES (?1, ?2, ?3)",
            vals![sha256, n as i64, &buf[..len]],
        )?;
    }
    // The local copy may predate this upload (the same bytes stored before) and be damaged
    // since: never share what does not hash to its address.
    let actual = hex::encode(hasher.finalize());
    if actual != sha256 {
        return Err(StoreError::Corrupt(format!(
            "the data directory's copy of {sha256} ({}) is damaged (its content hashes to \
             {actual}); not shared",
            path.display()
        )));
    }
    Ok(())
}

/// Inside the transaction that deleted a row referencing `sha256`: deletes the shared copy when
/// no model version or plugin references it any more. Nothing to do on SQLite.
pub(super) fn release(db: &Db<'_>, sha256: &str) -> Result<(), StoreError> {
    if matches!(db, Db::Sqlite(_)) {
        return Ok(());
    }
    lock(db, sha256)?;
    // A statement after the lock: it sees every upload of these bytes committed before.
    db.execute(
        "DELETE FROM blobs WHERE sha256 = ?1
           AND NOT EXISTS (SELECT 1 FROM model_versions WHERE sha256 = ?1)
           AND NOT EXISTS (SELECT 1 FROM plugins WHERE sha256 = ?1)",
        vals![sha256],
    )?;
    Ok(())
}

/// Fills `buf` unless the file ends first; returns the bytes read.
fn read_full(file: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

/// Whether the data directory holds an intact copy of `sha256` at `path`, before an upload of
/// the same bytes decides whether to store its own: a damaged copy is removed (with a warning),
/// so that the upload takes its place rather than being dropped for it.
pub(super) fn intact_copy(path: &Path, sha256: &str) -> bool {
    match hash_file(path) {
        Ok(actual) if actual == sha256 => true,
        Ok(actual) => {
            tracing::warn!(sha256, %actual, path = %path.display(), "a stored file was damaged; replaced by the new upload of its content");
            crate::files::remove_blob(path);
            false
        }
        Err(_) => false,
    }
}

/// The hex SHA-256 of a file, read in chunks.
fn hash_file(path: &Path) -> io::Result<String> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    loop {
        match file.read(&mut buf)? {
            0 => return Ok(hex::encode(hasher.finalize())),
            n => hasher.update(&buf[..n]),
        }
    }
}

impl Store {
    /// The data directory's copy of a stored file, checked to hash to its address. With
    /// PostgreSQL a missing or damaged copy is fetched from the database first (a damaged one
    /// is replaced); with SQLite, or when the database's copy is damaged too, it is refused.
    /// Blocking (hashes the file, may download it): call it off the async runtime.
    pub fn local_blob(&self, kind: BlobKind, sha256: &str) -> Result<PathBuf, StoreError> {
        let what = kind.what();
        let path = kind.path(&self.dir, sha256);
        let problem = match hash_file(&path) {
            Ok(actual) if actual == sha256 => return Ok(path),
            Ok(actual) => format!("its content hashes to {actual}"),
            Err(e) if e.kind() == io::ErrorKind::NotFound => "it is missing".to_owned(),
            Err(e) => {
                return Err(StoreError::Io(format!(
                    "reading {what} file {}: {e}",
                    path.display()
                )))
            }
        };
        let Backend::Postgres(_) = &self.backend else {
            return Err(StoreError::Corrupt(format!(
                "{what} file {sha256} cannot be used: {problem} in the data directory ({})",
                path.display()
            )));
        };
        if path.exists() {
            tracing::warn!(kind = what, sha256, %problem, path = %path.display(), "the local copy of a stored file is damaged; fetching it again from PostgreSQL");
            crate::files::remove_blob(&path);
        }
        self.fetch_blob(kind, sha256, &path)?;
        Ok(path)
    }

    /// Downloads the shared copy of `sha256` to `dest`, one chunk at a time, checking its
    /// size and hash before it takes the file's place.
    fn fetch_blob(&self, kind: BlobKind, sha256: &str, dest: &Path) -> Result<(), StoreError> {
        let what = kind.what();
        let started = std::time::Instant::now();
        let mut writer =
            BlobWriter::new(&self.dir).map_err(StoreError::io("creating a temporary file"))?;
        self.with(|db| {
            let Some(row) = db.query_opt(
                "SELECT size_bytes, chunks FROM blobs WHERE sha256 = ?1",
                vals![sha256],
            )?
            else {
                return Err(StoreError::Corrupt(format!(
                    "{what} file {sha256} is neither in this replica's data directory nor in \
                     PostgreSQL (uploaded before the database kept files? upload it again)"
                )));
            };
            let (size, chunks): (i64, i64) = (row.get("size_bytes")?, row.get("chunks")?);
            for n in 0..chunks {
                let data: Vec<u8> = db
                    .query_opt(
                        "SELECT data FROM blob_chunks WHERE sha256 = ?1 AND n = ?2",
                        vals![sha256, n],
                    )?
                    .ok_or_else(|| {
                        StoreError::Corrupt(format!(
                            "{what} file {sha256}: chunk {n} of {chunks} is missing in PostgreSQL"
                        ))
                    })?
                    .at(0)?;
                writer
                    .write(&data)
                    .map_err(StoreError::io("writing a fetched file"))?;
            }
            if writer.len() != size as u64 {
                return Err(StoreError::Corrupt(format!(
                    "{what} file {sha256}: PostgreSQL holds {} bytes, its row says {size}",
                    writer.len()
                )));
            }
            Ok(())
        })?;
        let (actual, tmp) = writer
            .finish()
            .map_err(StoreError::io("writing a fetched file"))?;
        if actual != sha256 {
            return Err(StoreError::Corrupt(format!(
                "{what} file {sha256}: the copy in PostgreSQL is damaged (its content hashes to \
                 {actual}); refused"
            )));
        }
        persist(tmp, dest).map_err(StoreError::io("storing a fetched file"))?;
        tracing::info!(
            kind = what,
            sha256,
            secs = started.elapsed().as_secs_f64(),
            "fetched a stored file from PostgreSQL"
        );
        Ok(())
    }

    /// At start, under the blob lock (`collect_orphans`): shares the files of rows written
    /// before the database kept files (when this replica holds an intact copy), and deletes
    /// shared copies no row references. Nothing to do on SQLite.
    pub(super) fn reconcile_shared_blobs(&self) -> Result<(), StoreError> {
        let Backend::Postgres(_) = &self.backend else {
            return Ok(());
        };
        let unshared = |table: &str| -> Result<HashSet<String>, StoreError> {
            self.with(|db| {
                db.query(
                    &format!(
                        "SELECT DISTINCT sha256 FROM {table} t
                         WHERE NOT EXISTS (SELECT 1 FROM blobs b WHERE b.sha256 = t.sha256)"
                    ),
                    &[],
                )?
                .iter()
                .map(|r| r.at::<String>(0))
                .collect()
            })
        };
        for (kind, table) in [
            (BlobKind::Model, "model_versions"),
            (BlobKind::Plugin, "plugins"),
        ] {
            for sha256 in unshared(table)? {
                let path = kind.path(&self.dir, &sha256);
                if !hash_file(&path).is_ok_and(|actual| actual == sha256) {
                    continue;
                }
                self.transaction(|db| put(db, &sha256, &path))?;
                tracing::info!(
                    kind = kind.what(),
                    sha256,
                    "shared a file stored before the database kept files"
                );
            }
        }
        let orphans: Vec<String> = self.with(|db| {
            db.query(
                "SELECT sha256 FROM blobs b
                 WHERE NOT EXISTS (SELECT 1 FROM model_versions m WHERE m.sha256 = b.sha256)
                   AND NOT EXISTS (SELECT 1 FROM plugins p WHERE p.sha256 = b.sha256)",
                &[],
            )?
            .iter()
            .map(|r| r.at::<String>(0))
            .collect()
        })?;
        for sha256 in orphans {
            self.transaction(|db| release(db, &sha256))?;
        }
        Ok(())
    }

    /// Drops this replica's copy of a file once no stored row references it (another replica
    /// deleted the last one). Under the blob lock, as a delete on this replica.
    pub fn drop_unreferenced_local_blob(
        &self,
        kind: BlobKind,
        sha256: &str,
    ) -> Result<(), StoreError> {
        let _blobs = self
            .dir
            .lock_blobs()
            .map_err(StoreError::io("locking blobs"))?;
        let table = match kind {
            BlobKind::Model => "model_versions",
            BlobKind::Plugin => "plugins",
        };
        let referenced: bool = self.with(|db| {
            db.query_one(
                &format!("SELECT EXISTS(SELECT 1 FROM {table} WHERE sha256 = ?1)"),
                vals![sha256],
            )?
            .at(0)
        })?;
        if !referenced {
            crate::files::remove_blob(&kind.path(&self.dir, sha256));
        }
        Ok(())
    }
}
