//! Start-up collection of what a crash (kill -9, power loss) can leave behind: temporary files
//! of unfinished uploads and writes, and content-addressed files no row references (stored, but
//! the row never committed; or the row deleted, but the file not yet removed). Runs under the
//! blob lock, before the server takes requests, so no upload of this process is in flight.

use super::{Store, StoreError};
use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::Path;

/// What a collection removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Collected {
    pub files: u64,
    pub bytes: u64,
}

impl Collected {
    /// Removes every regular file in `dir` that `doomed` picks by name.
    fn remove_in(&mut self, dir: &Path, doomed: impl Fn(&str) -> bool) -> io::Result<()> {
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if !doomed(name) || !entry.file_type()?.is_file() {
                continue;
            }
            let size = entry.metadata().map_or(0, |m| m.len());
            match fs::remove_file(entry.path()) {
                Ok(()) => {
                    self.files += 1;
                    self.bytes += size;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Whether `name` is the content address `<sha256><ext>` of a file in `referenced`.
fn is_referenced(name: &str, ext: &str, referenced: &HashSet<String>) -> bool {
    name.strip_suffix(ext)
        .is_some_and(|sha256| referenced.contains(sha256))
}

impl Store {
    /// Removes temporary files and unreferenced content-addressed files. Call it once at start,
    /// before serving (the offline CLI never does: it may run beside a server whose uploads
    /// are in flight).
    pub fn collect_orphans(&self) -> Result<Collected, StoreError> {
        let _blobs = self
            .dir
            .lock_blobs()
            .map_err(StoreError::io("locking blobs"))?;
        let referenced = |table: &str| -> Result<HashSet<String>, StoreError> {
            self.with(|db| {
                db.query(&format!("SELECT DISTINCT sha256 FROM {table}"), &[])?
                    .iter()
                    .map(|r| r.at::<String>(0))
                    .collect()
            })
        };
        let models = referenced("model_versions")?;
        let plugins = referenced("plugins")?;
        let dir = &self.dir;
        let mut collected = Collected::default();
        let removed = (|| {
            collected.remove_in(&dir.tmp(), |_| true)?;
            collected.remove_in(&dir.models(), |n| !is_referenced(n, ".onnx", &models))?;
            collected.remove_in(&dir.plugins(), |n| !is_referenced(n, ".wasm", &plugins))?;
            // `write_atomic`'s temporary files (admin key, TLS material).
            for other in [dir.root().to_path_buf(), dir.tls()] {
                collected.remove_in(&other, |n| n.starts_with(".tmp-"))?;
            }
            Ok(())
        })();
        removed.map_err(StoreError::io("removing files a crash left behind"))?;
        self.reconcile_shared_blobs()?;
        if collected.files > 0 {
            tracing::warn!(
                files = collected.files,
                bytes = collected.bytes,
                "removed temporary and unreferenced files left by an interrupted run"
            );
        }
        Ok(collected)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{signature, upload};

    /// Deleting a model while the same bytes are uploaded under another name must never
    /// leave a row whose file is gone.
    #[test]
    fn deletes_racing_uploads_of_the_same_bytes_never_orphan_a_row() {
        let root = tempfile::tempdir().unwrap();
        let store = std::sync::Arc::new(Store::open(root.path()).unwrap());
        let content = b"the same model bytes";
        let config = serde_json::json!({});
        for round in 0..200u64 {
            let (sha, tmp) = upload(&store, content);
            let first = store
                .add_model_version(tmp, "a", &sha, 20, &signature(), &config)
                .unwrap();
            let (_, again) = upload(&store, content);
            let uploader = {
                let (store, sha, config) = (store.clone(), sha.clone(), config.clone());
                std::thread::spawn(move || {
                    store
                        .add_model_version(again, "b", &sha, 20, &signature(), &config)
                        .unwrap()
                })
            };
            store.delete_model_version("a", first.version).unwrap();
            let second = uploader.join().unwrap();
            assert!(
                store.dir().model_file(&sha).is_file(),
                "round {round}: 'b' v{} is listed but its file is gone",
                second.version
            );
            store.delete_model_version("b", second.version).unwrap();
            assert!(
                !store.dir().model_file(&sha).exists(),
                "the last delete removes the file"
            );
        }
    }
}
