//! API keys: format, scopes and verification. A key is `ig_<public id>_<secret>`: the public
//! id (12 hex characters) finds the row, the whole key is hashed with SHA-256 and compared in
//! constant time. Secrets are 256 random bits and never stored.

use base64::Engine as _;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    Infer,
    Upload,
    Admin,
}

impl Scope {
    pub fn parse(s: &str) -> Option<Scope> {
        match s {
            "infer" => Some(Scope::Infer),
            "upload" => Some(Scope::Upload),
            "admin" => Some(Scope::Admin),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Infer => "infer",
            Scope::Upload => "upload",
            Scope::Admin => "admin",
        }
    }
}

/// Whether a key holding `held` may use `wanted`: `admin` allows everything.
pub fn allows(held: &[Scope], wanted: Scope) -> bool {
    held.contains(&Scope::Admin) || held.contains(&wanted)
}

/// A set of scopes; `admin` implies every other.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Scopes(Vec<Scope>);

impl Scopes {
    pub fn new(mut scopes: Vec<Scope>) -> Scopes {
        scopes.sort();
        scopes.dedup();
        Scopes(scopes)
    }

    /// Parses a comma-separated list such as `infer,upload`.
    pub fn parse_list(list: &str) -> Result<Scopes, String> {
        let scopes = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                Scope::parse(s)
                    .ok_or_else(|| format!("unknown scope '{s}' (use infer, upload, admin)"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if scopes.is_empty() {
            return Err("at least one scope is required (infer, upload, admin)".into());
        }
        Ok(Scopes::new(scopes))
    }

    pub fn allows(&self, wanted: Scope) -> bool {
        allows(&self.0, wanted)
    }

    pub fn to_list(&self) -> String {
        self.0
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn iter(&self) -> impl Iterator<Item = Scope> + '_ {
        self.0.iter().copied()
    }
}

/// A freshly generated key: the secret to show once, and what is stored.
pub struct NewKey {
    pub public_id: String,
    pub secret: String,
    pub hash: [u8; 32],
}

pub fn generate() -> NewKey {
    let mut rng = rand::rng();
    let mut id = [0u8; 6];
    let mut secret = [0u8; 32];
    rng.fill_bytes(&mut id);
    rng.fill_bytes(&mut secret);
    let public_id = hex::encode(id);
    let secret = format!(
        "ig_{public_id}_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret)
    );
    let hash = hash(&secret);
    NewKey {
        public_id,
        secret,
        hash,
    }
}

pub fn hash(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// The public id of a presented key, if it has our shape.
pub fn public_id(presented: &str) -> Option<&str> {
    let rest = presented.strip_prefix("ig_")?;
    let (id, secret) = rest.split_once('_')?;
    (id.len() == 12 && id.bytes().all(|b| b.is_ascii_hexdigit()) && !secret.is_empty())
        .then_some(id)
}

/// Constant-time comparison of a presented key's hash with the stored one.
pub fn verify(presented: &str, stored: &[u8]) -> bool {
    let h = hash(presented);
    stored.len() == h.len() && h.iter().zip(stored).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_verify_and_parse() {
        let k = generate();
        assert_eq!(public_id(&k.secret), Some(k.public_id.as_str()));
        assert!(verify(&k.secret, &k.hash));
        assert!(!verify(&format!("{}x", k.secret), &k.hash));
        assert_ne!(generate().secret, k.secret);
        assert!(k.secret.len() > 50);
    }

    #[test]
    fn admin_implies_all_and_parsing_rejects_unknown() {
        let admin = Scopes::parse_list("admin").unwrap();
        assert!(admin.allows(Scope::Infer) && admin.allows(Scope::Upload));
        let infer = Scopes::parse_list("infer").unwrap();
        assert!(infer.allows(Scope::Infer) && !infer.allows(Scope::Upload));
        assert!(Scopes::parse_list("infer,root").is_err());
        assert!(Scopes::parse_list("").is_err());
        assert_eq!(
            Scopes::parse_list("upload, infer,infer").unwrap().to_list(),
            "infer,upload"
        );
    }

    #[test]
    fn malformed_keys_have_no_public_id() {
        for bad in [
            "",
            "ig_",
            "ig_123_x",
            "xx_0123456789ab_secret",
            "ig_0123456789zz_s",
            "ig_0123456789ab_",
        ] {
            assert_eq!(public_id(bad), None, "{bad}");
        }
    }
}
