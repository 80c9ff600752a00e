//! The cluster's long-lived secrets in the manager's data directory: the cluster CA (which
//! issues every worker's certificate and the manager's own) and the Ed25519 key that signs
//! direct-mode tokens. Made on first use (the first `serve`, or `workers token create` offline),
//! kept across restarts so that workers' certificates and join secrets stay valid.
//!
//! Files: `cluster/ca.pem`, `cluster/ca.key` and `cluster/token.key` (keys mode 0600, written to
//! a temporary file, fsynced and renamed; the certificate last, so a present certificate means a
//! complete set).

use crate::store::files::write_atomic;
use crate::store::DataDir;
use anyhow::{anyhow, Context};
use infergate_cluster::ca::ClusterCa;
use infergate_cluster::direct::Signer;
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
    /// Loads the cluster's CA and signing key, creating them on first use.
    pub fn open(data: &DataDir) -> anyhow::Result<Material> {
        let dir = dir(data);
        let (cert, key, token) = (
            dir.join("ca.pem"),
            dir.join("ca.key"),
            dir.join("token.key"),
        );
        if !cert.is_file() {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let ca = ClusterCa::generate(CLUSTER).map_err(|e| anyhow!(e))?;
            let signer = Signer::generate().map_err(|e| anyhow!(e))?;
            write_atomic(&token, signer.pkcs8(), 0o600)
                .with_context(|| format!("writing {}", token.display()))?;
            write_atomic(&key, ca.key_pem().as_bytes(), 0o600)
                .with_context(|| format!("writing {}", key.display()))?;
            write_atomic(&cert, ca.cert_pem().as_bytes(), 0o644)
                .with_context(|| format!("writing {}", cert.display()))?;
            tracing::info!(dir = %dir.display(), pin = %ca.pin(), "created the cluster CA and token signing key");
            return Ok(Material { ca, signer });
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
        Ok(Material { ca, signer })
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
        let first = Material::open(&data).unwrap();
        let again = Material::open(&data).unwrap();
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
}
