//! A worker's own bearer credential: issued by the manager at each join, presented on every
//! heartbeat, model fetch and deregistration. `igw_<worker-id>.<secret>`: the id names the
//! stored record, the manager keeps only the SHA-256 of the secret and compares in constant
//! time, as for join secrets.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

const PREFIX: &str = "igw_";
const SECRET_BYTES: usize = 32;

/// A freshly issued credential: the text for the worker, the hash for the store.
pub struct Issued {
    pub text: String,
    pub sha256: String,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued").finish_non_exhaustive()
    }
}

pub fn issue(worker_id: &str) -> Issued {
    let mut secret = [0u8; SECRET_BYTES];
    rand::rng().fill_bytes(&mut secret);
    let secret = URL_SAFE_NO_PAD.encode(secret);
    Issued {
        text: format!("{PREFIX}{worker_id}.{secret}"),
        sha256: hash(&secret),
    }
}

fn hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// A presented credential: the worker id it claims and its secret.
pub struct Presented<'a> {
    pub worker_id: &'a str,
    secret: &'a str,
}

/// Splits a presented credential; `None` when it is not one at all.
pub fn parse(text: &str) -> Option<Presented<'_>> {
    let (worker_id, secret) = text.trim().strip_prefix(PREFIX)?.rsplit_once('.')?;
    (!worker_id.is_empty() && !secret.is_empty()).then_some(Presented { worker_id, secret })
}

impl Presented<'_> {
    /// Whether the secret hashes to what the store holds for this worker.
    pub fn matches(&self, stored_sha256: &str) -> bool {
        hash(self.secret)
            .as_bytes()
            .ct_eq(stored_sha256.as_bytes())
            .into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_issued_credential_verifies_and_others_do_not() {
        let issued = issue("w-0123");
        let presented = parse(&issued.text).unwrap();
        assert_eq!(presented.worker_id, "w-0123");
        assert!(presented.matches(&issued.sha256));
        assert!(!issued.sha256.contains(presented.secret));
        let other = issue("w-0123");
        assert!(!parse(&other.text).unwrap().matches(&issued.sha256));
        assert!(!format!("{issued:?}").contains(presented.secret));
        for bad in ["", "igw_", "igw_.x", "igw_w-1.", "igj_w-1.abc", "w-1.abc"] {
            assert!(parse(bad).is_none(), "{bad:?}");
        }
    }
}
