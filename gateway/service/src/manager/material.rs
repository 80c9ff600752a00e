//! The cluster's long-lived secrets: the cluster CA (which issues every worker's certificate and
//! the manager's own) and the Ed25519 key that signs direct-mode tokens. Made on first use (the
//! first `serve`, or `workers token create` offline), kept across restarts so that workers'
//! certificates and join secrets stay valid.
//!
//! Where they live: with SQLite (one gateway), in the data directory: `cluster/ca.pem`,
//! `cluster/ca.key` and `cluster/token.key` (keys mode 0600, written to a temporary file,
//! fsynced and renamed; the certificate last, so a present certificate means a complete set).
//! With a shared store (PostgreSQL, gateway replicas), in the store, so that every replica is the
//! same manager to the workers: the first replica stores its data directory's files if it has
//! them (a gateway that ran alone before keeps its workers and join secrets), else new ones;
//! replicas starting together keep whichever was stored first.

use anyhow::{anyhow, Context};
use infergate_cluster::ca::ClusterCa;
use infergate_cluster::direct::Signer;
use infergate_store::files::write_atomic;
use infergate_store::{DataDir, Store, StoredMaterial};
use std::path::PathBuf;

/// The name in the CA's subject; one manager's data directory is one cluster.
const CLUSTER: &str = "infergate";

pub struct Material {
    pub ca: ClusterCa,
    pub signer: Signer,
}

fn dir(data: &DataDir) -> PathBuf {
    data.root().join("cluster")
}

impl Material {
    /// Loads the cluster's CA and signing key from where `store` keeps them, creating them on
    /// first use.
    pub fn open(store: &Store) -> anyhow::Result<Material> {
        if !store.is_shared() {
            return Material::open_files(store.dir());
        }
        if let Some(stored) = store.cluster_material()? {
            let material = Material::from_stored(&stored)?;
            material.warn_if_files_differ(store.dir());
            return Ok(material);
        }
        let (offered, from_files) = match Material::read_files(store.dir())? {
            Some(material) => (material, true),
            None => (Material::generate()?, false),
        };
        let kept = store.keep_cluster_material(&offered.stored())?;
        let material = Material::from_stored(&kept)?;
        if material.ca.pin() == offered.ca.pin() {
            tracing::info!(pin = %material.ca.pin(), from_files, "stored the cluster CA and token signing key in the shared store");
        } else {
            material.warn_if_files_differ(store.dir());
        }
        Ok(material)
    }

    fn generate() -> anyhow::Result<Material> {
        Ok(Material {
            ca: ClusterCa::generate(CLUSTER).map_err(|e| anyhow!(e))?,
            signer: Signer::generate().map_err(|e| anyhow!(e))?,
        })
    }

    fn stored(&self) -> StoredMaterial {
        StoredMaterial {
            ca_cert_pem: self.ca.cert_pem().to_owned(),
            ca_key_pem: self.ca.key_pem(),
            token_key: self.signer.pkcs8().to_vec(),
        }
    }

    fn from_stored(stored: &StoredMaterial) -> anyhow::Result<Material> {
        Ok(Material {
            ca: ClusterCa::from_pem(CLUSTER, &stored.ca_cert_pem, &stored.ca_key_pem)
                .context("loading the cluster CA from the store")?,
            signer: Signer::from_pkcs8(&stored.token_key)
                .context("loading the token signing key from the store")?,
        })
    }

    /// A data directory whose files hold another CA than the shared store: join secrets made
    /// from those files no longer admit anyone, which the operator should hear about.
    fn warn_if_files_differ(&self, data: &DataDir) {
        match Material::read_files(data) {
            Ok(Some(files)) if files.ca.pin() != self.ca.pin() => tracing::warn!(
                dir = %dir(data).display(),
                "this data directory holds another cluster CA than the shared store; the store's is used: workers that joined this gateway alone must join again with a new join secret"
            ),
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "unreadable cluster files in the data directory (the shared store's are used)")
            }
        }
    }

    /// The files in the data directory, made on first use.
    fn open_files(data: &DataDir) -> anyhow::Result<Material> {
        if let Some(material) = Material::read_files(data)? {
            return Ok(material);
        }
        let dir = dir(data);
        let (cert, key, token) = (
            dir.join("ca.pem"),
            dir.join("ca.key"),
            dir.join("token.key"),
        );
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let material = Material::generate()?;
        write_atomic(&token, material.signer.pkcs8(), 0o600)
            .with_context(|| format!("writing {}", token.display()))?;
        write_atomic(&key, material.ca.key_pem().as_bytes(), 0o600)
            .with_context(|| format!("writing {}", key.display()))?;
        write_atomic(&cert, material.ca.cert_pem().as_bytes(), 0o644)
            .with_context(|| format!("writing {}", cert.display()))?;
        tracing::info!(dir = %dir.display(), pin = %material.ca.pin(), "created the cluster CA and token signing key");
        Ok(material)
    }

    /// The files in the data directory, if a complete set is there.
    fn read_files(data: &DataDir) -> anyhow::Result<Option<Material>> {
        let dir = dir(data);
        let (cert, key, token) = (
            dir.join("ca.pem"),
            dir.join("ca.key"),
            dir.join("token.key"),
        );
        if !cert.is_file() {
            return Ok(None);
        }
        let read = |path: &PathBuf| {
            std::fs::read(path).with_context(|| format!("reading {}", path.display()))
        };
        let text = |path: &PathBuf| -> anyhow::Result<String> {
            String::from_utf8(read(path)?)
                .with_context(|| format!("{} is not text", path.display()))
        };
        let ca = ClusterCa::from_pem(CLUSTER, &text(&cert)?, &text(&key)?)
            .with_context(|| format!("loading the cluster CA from {}", dir.display()))?;
        let signer = Signer::from_pkcs8(&read(&token)?)
            .with_context(|| format!("loading {}", token.display()))?;
        Ok(Some(Material { ca, signer }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_material_is_made_once_with_private_keys_0600_and_loads_back() {
        let root = tempfile::tempdir().unwrap();
        let data = DataDir::create(root.path()).unwrap();
        let first = Material::open_files(&data).unwrap();
        let again = Material::open_files(&data).unwrap();
        assert_eq!(first.ca.pin(), again.ca.pin());
        assert_eq!(first.signer.public_key(), again.signer.public_key());
        for key in ["ca.key", "token.key"] {
            let mode = std::fs::metadata(dir(&data).join(key))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{key}");
        }
    }

    fn postgres_store(root: &std::path::Path, url: &str) -> Store {
        let config = infergate_store::StoreConfig {
            url: Some(url.to_owned()),
            ..Default::default()
        };
        Store::open_with(root, &config).unwrap()
    }

    #[test]
    fn replicas_on_one_store_share_one_cluster_made_once_or_moved_from_files() {
        let pg = infergate_store::test_postgres::PgServer::start();
        // A gateway that ran alone on SQLite has its files; moved onto PostgreSQL, its CA is the
        // one stored, so its workers and join secrets stay valid.
        let alone = tempfile::tempdir().unwrap();
        let before = Material::open(&Store::open(alone.path()).unwrap()).unwrap();
        // Replicas starting together, each with a data directory of its own.
        let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
        let url = pg.url();
        let pins: Vec<(String, Vec<u8>)> = std::thread::scope(|scope| {
            let mut started: Vec<_> = dirs
                .iter()
                .map(|d| {
                    let url = url.as_str();
                    scope.spawn(move || Material::open(&postgres_store(d.path(), url)).unwrap())
                })
                .collect();
            started
                .push(scope.spawn(|| Material::open(&postgres_store(alone.path(), &url)).unwrap()));
            started
                .into_iter()
                .map(|h| {
                    let m = h.join().unwrap();
                    (m.ca.pin(), m.signer.public_key().to_vec())
                })
                .collect()
        });
        assert!(
            pins.windows(2).all(|w| w[0] == w[1]),
            "one cluster: {pins:?}"
        );
        // Nothing is written to the replicas' data directories: the store holds it.
        assert!(!dir(&DataDir::create(dirs[0].path()).unwrap()).exists());
        // Whoever stored first, a later replica loads the same.
        let later = tempfile::tempdir().unwrap();
        let again = Material::open(&postgres_store(later.path(), &url)).unwrap();
        assert_eq!(again.ca.pin(), pins[0].0);
        // A directory whose files came first keeps them if it won; else the store's is used
        // and the operator is warned. Either way all agree; with one such directory moved
        // onto an empty store, it is its CA.
        let pg2 = infergate_store::test_postgres::PgServer::start();
        let moved = Material::open(&postgres_store(alone.path(), &pg2.url())).unwrap();
        assert_eq!(moved.ca.pin(), before.ca.pin());
        assert_eq!(moved.signer.public_key(), before.signer.public_key());
    }
}
