//! On-disk cache of compiled plugins, keyed by the SHA-256 of the component
//! and the engine's compatibility hash (wasmtime version + settings).
//!
//! A cache file is `MAGIC | sha256(artifact) | artifact`. Loading checks the
//! checksum before handing the artifact to wasmtime, because deserialising
//! trusts the machine code in it: a truncated or corrupted file is deleted
//! and the plugin recompiled. Files are written to a temporary name, synced
//! and renamed, so readers never see a partial file.

use sha2::{Digest, Sha256};
use std::fs::{self, File};
use std::hash::{Hash, Hasher};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use wasmtime::component::Component;
use wasmtime::Engine;

const MAGIC: &[u8; 8] = b"IGPLUG01";
const HEADER: usize = MAGIC.len() + 32;

pub(crate) struct ArtifactCache {
    dir: PathBuf,
    /// Hex digest of the engine's compatibility hash.
    engine_key: String,
}

/// What a cache lookup found.
pub(crate) enum Lookup {
    Hit(Component),
    Miss,
    /// A file was there but unusable; it has been removed.
    Rejected(String),
}

impl ArtifactCache {
    pub(crate) fn open(dir: &Path, engine: &Engine) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        let mut hasher = Sha256Hasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let engine_key = hex::encode(&hasher.0.finalize()[..12]);
        Ok(ArtifactCache {
            dir: dir.to_path_buf(),
            engine_key,
        })
    }

    pub(crate) fn path(&self, component_sha256: &str) -> PathBuf {
        self.dir
            .join(format!("{component_sha256}-{}.cwasm", self.engine_key))
    }

    pub(crate) fn load(&self, engine: &Engine, component_sha256: &str) -> Lookup {
        let path = self.path(component_sha256);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Lookup::Miss,
            Err(e) => return self.reject(&path, format!("unreadable: {e}")),
        };
        let Some((header, artifact)) = bytes.split_at_checked(HEADER) else {
            return self.reject(&path, "shorter than its header".into());
        };
        if &header[..MAGIC.len()] != MAGIC || header[MAGIC.len()..] != Sha256::digest(artifact)[..]
        {
            return self.reject(&path, "checksum mismatch".into());
        }
        // SAFETY: the artifact was produced by `Component::serialize` of an
        // engine with the same compatibility hash (the file name says so) and
        // its checksum matches what was written, so it is that output intact.
        match unsafe { Component::deserialize(engine, artifact) } {
            Ok(component) => Lookup::Hit(component),
            Err(e) => self.reject(&path, format!("not loadable: {e}")),
        }
    }

    fn reject(&self, path: &Path, why: String) -> Lookup {
        if let Err(e) = fs::remove_file(path) {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove rejected plugin cache file");
        }
        Lookup::Rejected(why)
    }

    /// Writes `artifact` for `component_sha256` atomically.
    pub(crate) fn store(&self, component_sha256: &str, artifact: &[u8]) -> io::Result<()> {
        static UNIQUE: AtomicU64 = AtomicU64::new(0);
        let path = self.path(component_sha256);
        let tmp = self.dir.join(format!(
            ".{component_sha256}.{}.{}.tmp",
            std::process::id(),
            UNIQUE.fetch_add(1, Ordering::Relaxed)
        ));
        let written = (|| {
            let mut file = File::create(&tmp)?;
            file.write_all(MAGIC)?;
            file.write_all(&Sha256::digest(artifact))?;
            file.write_all(artifact)?;
            file.sync_all()?;
            fs::rename(&tmp, &path)?;
            // Make the rename itself durable.
            File::open(&self.dir)?.sync_all()
        })();
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        written
    }

    /// Removes the artifact of one component, if it is cached.
    pub(crate) fn remove(&self, component_sha256: &str) -> io::Result<()> {
        match fs::remove_file(self.path(component_sha256)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Removes every file but the artifacts, for this engine, of the components `keep`
    /// accepts: artifacts of components no longer stored or built by another wasmtime, and
    /// temporary files of writes a crash interrupted. Returns the files and bytes removed.
    pub(crate) fn retain(&self, keep: &dyn Fn(&str) -> bool) -> io::Result<(u64, u64)> {
        let suffix = format!("-{}.cwasm", self.engine_key);
        let (mut files, mut bytes) = (0, 0);
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let kept = name
                .to_str()
                .and_then(|n| n.strip_suffix(&suffix))
                .is_some_and(|sha| sha.len() == 64 && keep(sha));
            if kept || !entry.file_type()?.is_file() {
                continue;
            }
            let size = entry.metadata().map_or(0, |m| m.len());
            fs::remove_file(entry.path())?;
            files += 1;
            bytes += size;
        }
        Ok((files, bytes))
    }
}

/// Feeds `Hash` output into SHA-256, for a key that is stable across processes.
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        // Only the digest is used; `finish` exists to satisfy the trait.
        let digest = self.0.clone().finalize();
        u64::from_le_bytes(digest[..8].try_into().unwrap_or_default())
    }
}
