//! The data directory's layout and crash-safe file writes: content goes to a temporary file in
//! the same directory, is fsynced, then renamed into place, so a reader never sees half a file.

use sha2::{Digest, Sha256};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct DataDir {
    root: PathBuf,
}

impl DataDir {
    pub fn create(root: &Path) -> io::Result<DataDir> {
        let dir = DataDir {
            root: root.to_path_buf(),
        };
        for sub in [
            dir.root.clone(),
            dir.models(),
            dir.plugins(),
            dir.plugin_cache(),
            dir.tmp(),
            dir.tls(),
        ] {
            fs::create_dir_all(&sub)?;
        }
        Ok(dir)
    }

    /// Takes the lock that makes "store a content-addressed file and insert the row that
    /// references it" and "delete a row and remove its file when nothing else references it"
    /// exclusive of each other. Without it a delete can remove the file that an upload of the
    /// same bytes has just persisted and is about to reference. It is an advisory `flock` on
    /// `DATA/blobs.lock`, so it also orders the offline CLI against a running server. Always
    /// taken before a database transaction, never inside one.
    pub fn lock_blobs(&self) -> io::Result<BlobLock> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(self.root.join("blobs.lock"))?;
        file.lock()?;
        Ok(BlobLock { _file: file })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn database(&self) -> PathBuf {
        self.root.join("infergate.db")
    }
    pub fn admin_key(&self) -> PathBuf {
        self.root.join("admin.key")
    }
    pub fn tls(&self) -> PathBuf {
        self.root.join("tls")
    }
    pub fn models(&self) -> PathBuf {
        self.root.join("models")
    }
    pub fn tmp(&self) -> PathBuf {
        self.root.join("tmp")
    }
    pub fn plugins(&self) -> PathBuf {
        self.root.join("plugins")
    }
    /// Compiled plugin artifacts (native code), rebuilt from `plugins/` whenever missing.
    pub fn plugin_cache(&self) -> PathBuf {
        self.root.join("plugin-cache")
    }
    /// Where a plugin component with this SHA-256 lives.
    pub fn plugin_file(&self, sha256: &str) -> PathBuf {
        self.plugins().join(format!("{sha256}.wasm"))
    }
    /// Where a model file with this SHA-256 lives.
    pub fn model_file(&self, sha256: &str) -> PathBuf {
        self.models().join(format!("{sha256}.onnx"))
    }
}

/// Held while content-addressed files and their rows change together; closing the file (on
/// drop) releases the lock.
pub struct BlobLock {
    _file: File,
}

/// Writes `bytes` to `path` atomically with the given Unix mode.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".tmp-")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    sync_dir(dir)
}

/// Creates a file that must not exist yet, with `mode`, and writes it durably.
pub fn write_new(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Streams content into a temporary file while hashing it; `finish` makes it durable and
/// `persist` moves it to its content address. Dropped unfinished, the temporary file goes.
pub struct BlobWriter {
    file: tempfile::NamedTempFile,
    hasher: Sha256,
    len: u64,
}

impl BlobWriter {
    pub fn new(dir: &DataDir) -> io::Result<BlobWriter> {
        Ok(BlobWriter {
            file: tempfile::Builder::new()
                .prefix("upload-")
                .tempfile_in(dir.tmp())?,
            hasher: Sha256::new(),
            len: 0,
        })
    }

    pub fn write(&mut self, chunk: &[u8]) -> io::Result<()> {
        self.hasher.update(chunk);
        self.len += chunk.len() as u64;
        self.file.write_all(chunk)
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Flushes and fsyncs; returns the hex SHA-256 and the finished temporary file.
    pub fn finish(mut self) -> io::Result<(String, tempfile::NamedTempFile)> {
        self.file.flush()?;
        self.file.as_file().sync_all()?;
        Ok((hex::encode(self.hasher.finalize()), self.file))
    }
}

/// Moves a finished temporary file to `dest` (same filesystem) and syncs the directory. If
/// `dest` exists already (same content uploaded before) the temporary file is dropped.
pub fn persist(file: tempfile::NamedTempFile, dest: &Path) -> io::Result<()> {
    if dest.exists() {
        return Ok(());
    }
    file.persist(dest).map_err(|e| e.error)?;
    sync_dir(dest.parent().unwrap_or(Path::new(".")))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_writer_hashes_and_persists() {
        let root = tempfile::tempdir().unwrap();
        let dir = DataDir::create(root.path()).unwrap();
        let mut w = BlobWriter::new(&dir).unwrap();
        w.write(b"hello ").unwrap();
        w.write(b"world").unwrap();
        let (sha, tmp) = w.finish().unwrap();
        assert_eq!(
            sha,
            "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"
        );
        let dest = dir.model_file(&sha);
        persist(tmp, &dest).unwrap();
        assert_eq!(fs::read(&dest).unwrap(), b"hello world");
        assert_eq!(fs::read_dir(dir.tmp()).unwrap().count(), 0);
    }

    #[test]
    fn dropped_writer_leaves_nothing() {
        let root = tempfile::tempdir().unwrap();
        let dir = DataDir::create(root.path()).unwrap();
        let mut w = BlobWriter::new(&dir).unwrap();
        w.write(b"partial").unwrap();
        drop(w);
        assert_eq!(fs::read_dir(dir.tmp()).unwrap().count(), 0);
    }

    #[test]
    fn write_new_sets_mode_and_refuses_overwrite() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let p = root.path().join("secret");
        write_new(&p, b"x", 0o600).unwrap();
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert!(write_new(&p, b"y", 0o600).is_err());
    }
}
