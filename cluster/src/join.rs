//! Join secrets: how a worker proves to the manager that an operator let it in, and how it
//! knows it is talking to the right manager before it has any certificate to trust.
//!
//! The operator runs `infergate workers token create` and copies one string to the worker:
//! `igj_<id>.<secret>.<pin>`. The manager keeps only the SHA-256 of the secret (a stolen
//! database does not let anyone join) and compares in constant time. The pin is the SHA-256 of
//! the cluster CA's certificate, as kubeadm's `--discovery-token-ca-cert-hash`: the worker
//! accepts the manager's TLS certificate only if it chains to that CA, so a man in the middle
//! cannot collect the secret.

use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

const PREFIX: &str = "igj_";
const ID_BYTES: usize = 6;
const SECRET_BYTES: usize = 32;

/// A join secret as handed to a worker.
#[derive(Clone, PartialEq, Eq)]
pub struct JoinSecret {
    /// Public part: names the stored record, printed in listings.
    pub id: String,
    secret: String,
    /// SHA-256 (hex) of the cluster CA certificate the manager's TLS must chain to.
    pub ca_pin: String,
}

/// What the manager stores for a join secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredJoin {
    pub id: String,
    pub secret_sha256: String,
    /// Unix seconds after which the secret no longer admits anyone; `None`: until revoked.
    pub expires_at: Option<u64>,
}

/// Why a join is refused. Every variant is the joining worker's fault (401), and none says
/// whether the id exists, so the answer cannot be used to probe for ids.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JoinError {
    #[error("join secret is malformed: expected igj_<id>.<secret>.<ca-sha256> as printed by `infergate workers token create`")]
    Malformed,
    #[error("join secret is not valid (unknown, revoked or wrong)")]
    Invalid,
    #[error("join secret has expired; create a new one with `infergate workers token create`")]
    Expired,
}

impl JoinSecret {
    /// A fresh secret for a cluster whose CA certificate hashes to `ca_pin`, and the record the
    /// manager keeps for it.
    pub fn generate(ca_pin: &str, expires_at: Option<u64>) -> (JoinSecret, StoredJoin) {
        let mut rng = rand::rng();
        let mut id = [0u8; ID_BYTES];
        let mut secret = [0u8; SECRET_BYTES];
        rng.fill_bytes(&mut id);
        rng.fill_bytes(&mut secret);
        let join = JoinSecret {
            id: hex::encode(id),
            secret: URL_SAFE_NO_PAD.encode(secret),
            ca_pin: ca_pin.to_ascii_lowercase(),
        };
        let stored = StoredJoin {
            id: join.id.clone(),
            secret_sha256: join.secret_sha256(),
            expires_at,
        };
        (join, stored)
    }

    pub fn parse(text: &str) -> Result<JoinSecret, JoinError> {
        let rest = text
            .trim()
            .strip_prefix(PREFIX)
            .ok_or(JoinError::Malformed)?;
        let mut parts = rest.split('.');
        let (Some(id), Some(secret), Some(pin), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(JoinError::Malformed);
        };
        let id_ok = id.len() == ID_BYTES * 2 && id.bytes().all(|b| b.is_ascii_hexdigit());
        let secret_ok = URL_SAFE_NO_PAD
            .decode(secret)
            .is_ok_and(|bytes| bytes.len() == SECRET_BYTES);
        let pin_ok = pin.len() == 64 && pin.bytes().all(|b| b.is_ascii_hexdigit());
        if !(id_ok && secret_ok && pin_ok) {
            return Err(JoinError::Malformed);
        }
        Ok(JoinSecret {
            id: id.to_ascii_lowercase(),
            secret: secret.to_owned(),
            ca_pin: pin.to_ascii_lowercase(),
        })
    }

    fn secret_sha256(&self) -> String {
        hex::encode(Sha256::digest(self.secret.as_bytes()))
    }

    /// Checks this secret against the record stored under its id (`None`: no such record).
    pub fn verify(&self, stored: Option<&StoredJoin>, now_unix: u64) -> Result<(), JoinError> {
        let Some(stored) = stored else {
            return Err(JoinError::Invalid);
        };
        let presented = self.secret_sha256();
        let same: bool = presented
            .as_bytes()
            .ct_eq(stored.secret_sha256.as_bytes())
            .into();
        if !same || stored.id != self.id {
            return Err(JoinError::Invalid);
        }
        if stored.expires_at.is_some_and(|at| now_unix >= at) {
            return Err(JoinError::Expired);
        }
        Ok(())
    }
}

impl fmt::Display for JoinSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX}{}.{}.{}", self.id, self.secret, self.ca_pin)
    }
}

/// The secret never reaches logs.
impl fmt::Debug for JoinSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinSecret")
            .field("id", &self.id)
            .field("ca_pin", &self.ca_pin)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIN: &str = "ab0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcd";

    #[test]
    fn a_printed_secret_parses_back_and_verifies() {
        let (join, stored) = JoinSecret::generate(PIN, None);
        let text = join.to_string();
        assert!(text.starts_with("igj_"));
        let parsed = JoinSecret::parse(&format!("  {text}\n")).unwrap();
        assert_eq!(parsed, join);
        assert_eq!(parsed.verify(Some(&stored), 0), Ok(()));
        assert!(!format!("{join:?}").contains(&join.secret));
        assert!(!stored.secret_sha256.contains(&join.secret));
    }

    #[test]
    fn wrong_unknown_and_expired_secrets_are_refused() {
        let (join, stored) = JoinSecret::generate(PIN, Some(1_000));
        let (other, other_stored) = JoinSecret::generate(PIN, None);
        assert_eq!(join.verify(None, 0), Err(JoinError::Invalid));
        assert_eq!(other.verify(Some(&stored), 0), Err(JoinError::Invalid));
        // The right id with another secret.
        let forged = JoinSecret {
            id: join.id.clone(),
            ..other.clone()
        };
        assert_eq!(forged.verify(Some(&stored), 0), Err(JoinError::Invalid));
        assert_eq!(join.verify(Some(&stored), 999), Ok(()));
        assert_eq!(join.verify(Some(&stored), 1_000), Err(JoinError::Expired));
        assert_eq!(other.verify(Some(&other_stored), u64::MAX), Ok(()));
    }

    #[test]
    fn malformed_secrets_are_refused_before_any_lookup() {
        let (join, _) = JoinSecret::generate(PIN, None);
        let good = join.to_string();
        for bad in [
            "",
            "igj_",
            &good.replacen("igj_", "igk_", 1),
            &good[..good.len() - 1],
            &format!("{good}.extra"),
            &good.replace('.', ""),
            &format!("igj_zzzzzzzzzzzz.{}.{PIN}", "A".repeat(43)),
            &format!("igj_{}.short.{PIN}", join.id),
        ] {
            assert_eq!(JoinSecret::parse(bad), Err(JoinError::Malformed), "{bad:?}");
        }
    }
}
