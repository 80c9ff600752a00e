//! Direct mode: the manager hands a client a short-lived token for one model on one worker, and
//! the worker checks it offline (no round trip to the manager or the store) before serving the
//! client's KServe v2 requests itself.
//!
//! The token is a JWT signed with the manager's Ed25519 key (EdDSA): small, verifiable with the
//! public key alone, readable by any JWT library a client already has. It carries the key id,
//! its scopes, the model, the worker it was issued for, the expiry and the key's rate limit, so
//! the worker enforces the same limit the manager would.

use std::fmt;

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use ring::rand::SystemRandom;
use ring::signature::{Ed25519KeyPair, KeyPair};
use serde::{Deserialize, Serialize};

/// The rate limit a direct client keeps on the worker: the key's GCRA parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RateGrant {
    pub per_second: f64,
    pub burst: u32,
}

/// What a direct token grants.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirectClaims {
    /// The API key's id (never the key itself).
    pub sub: String,
    pub scopes: Vec<String>,
    /// The one model this token runs.
    pub model: String,
    /// The worker it was issued for (JWT audience).
    pub aud: String,
    /// Unix seconds.
    pub iat: u64,
    pub exp: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<RateGrant>,
}

/// Why a worker refuses a direct token. `Invalid` and `Expired` are 401 (the client has no
/// valid credential); `WrongModel` is 403 (a valid credential, not for this).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("direct token is not valid (malformed, forged, or for another worker)")]
    Invalid,
    #[error(
        "direct token expired; ask the manager for a new one (POST /v2/models/{{model}}/assign)"
    )]
    Expired,
    #[error("direct token is for model '{granted}', not '{requested}'")]
    WrongModel { granted: String, requested: String },
}

impl TokenError {
    /// Whether the client is authenticated but not allowed (403) rather than unauthenticated (401).
    pub fn is_forbidden(&self) -> bool {
        matches!(self, TokenError::WrongModel { .. })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SignerError {
    #[error("direct-token signing key: not an Ed25519 PKCS#8 key")]
    BadKey,
    #[error("direct-token signing key: the system random generator failed")]
    Random,
    #[error("direct token: signing failed")]
    Sign(#[source] jsonwebtoken::errors::Error),
}

/// The manager's signing key.
pub struct Signer {
    pkcs8: Vec<u8>,
    encoding: EncodingKey,
    public: Vec<u8>,
}

impl Signer {
    /// A new Ed25519 key; keep [`Signer::pkcs8`] (secret) to sign after a restart.
    pub fn generate() -> Result<Signer, SignerError> {
        let doc = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new())
            .map_err(|_| SignerError::Random)?;
        Signer::from_pkcs8(doc.as_ref())
    }

    pub fn from_pkcs8(pkcs8: &[u8]) -> Result<Signer, SignerError> {
        let pair =
            Ed25519KeyPair::from_pkcs8_maybe_unchecked(pkcs8).map_err(|_| SignerError::BadKey)?;
        Ok(Signer {
            pkcs8: pkcs8.to_vec(),
            encoding: EncodingKey::from_ed_der(pkcs8),
            public: pair.public_key().as_ref().to_vec(),
        })
    }

    pub fn pkcs8(&self) -> &[u8] {
        &self.pkcs8
    }

    /// The raw 32-byte public key workers verify with (they receive it when they join).
    pub fn public_key(&self) -> &[u8] {
        &self.public
    }

    pub fn sign(&self, claims: &DirectClaims) -> Result<String, SignerError> {
        jsonwebtoken::encode(&Header::new(Algorithm::EdDSA), claims, &self.encoding)
            .map_err(SignerError::Sign)
    }
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signer")
            .field("public", &hex::encode(&self.public))
            .finish_non_exhaustive()
    }
}

/// A worker's verifier: the manager's public key and the worker's own id.
pub struct Verifier {
    key: DecodingKey,
    validation: Validation,
}

impl Verifier {
    pub fn new(public_key: &[u8], worker_id: &str) -> Verifier {
        let mut validation = Validation::new(Algorithm::EdDSA);
        validation.set_audience(&[worker_id]);
        validation.set_required_spec_claims(&["exp", "aud", "sub"]);
        // Expiry is checked below against the caller's clock, so tests need no sleeps and
        // the rule is exact (no leeway: tokens are minted for minutes, not seconds).
        validation.validate_exp = false;
        Verifier {
            key: DecodingKey::from_ed_der(public_key),
            validation,
        }
    }

    /// The claims of `token` if it lets its bearer run `model` at `now_unix`.
    pub fn verify(
        &self,
        token: &str,
        model: &str,
        now_unix: u64,
    ) -> Result<DirectClaims, TokenError> {
        let data = jsonwebtoken::decode::<DirectClaims>(token, &self.key, &self.validation)
            .map_err(|_| TokenError::Invalid)?;
        let claims = data.claims;
        if now_unix >= claims.exp {
            return Err(TokenError::Expired);
        }
        if claims.model != model {
            return Err(TokenError::WrongModel {
                granted: claims.model,
                requested: model.to_owned(),
            });
        }
        Ok(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;

    fn claims(model: &str, exp: u64) -> DirectClaims {
        DirectClaims {
            sub: "key-7".into(),
            scopes: vec!["infer".into()],
            model: model.into(),
            aud: "w-1".into(),
            iat: 1_000,
            exp,
            rate: Some(RateGrant {
                per_second: 50.0,
                burst: 10,
            }),
        }
    }

    #[test]
    fn a_signed_token_grants_its_model_on_its_worker_until_it_expires() {
        let signer = Signer::generate().unwrap();
        let token = signer.sign(&claims("resnet", 2_000)).unwrap();
        let verifier = Verifier::new(signer.public_key(), "w-1");
        assert_eq!(
            verifier.verify(&token, "resnet", 1_999),
            Ok(claims("resnet", 2_000))
        );
        assert_eq!(
            verifier.verify(&token, "resnet", 2_000),
            Err(TokenError::Expired)
        );
        let wrong = verifier.verify(&token, "minilm", 1_500).unwrap_err();
        assert!(wrong.is_forbidden());
        assert_eq!(
            wrong.to_string(),
            "direct token is for model 'resnet', not 'minilm'"
        );
        // Another worker does not accept it.
        let elsewhere = Verifier::new(signer.public_key(), "w-2");
        assert_eq!(
            elsewhere.verify(&token, "resnet", 1_500),
            Err(TokenError::Invalid)
        );
    }

    #[test]
    fn forged_and_tampered_tokens_are_refused() {
        let signer = Signer::generate().unwrap();
        let verifier = Verifier::new(signer.public_key(), "w-1");
        // Signed by someone else.
        let other = Signer::generate().unwrap();
        let forged = other.sign(&claims("resnet", 2_000)).unwrap();
        assert_eq!(
            verifier.verify(&forged, "resnet", 1_500),
            Err(TokenError::Invalid)
        );
        // The right signature over edited claims (a longer expiry).
        let token = signer.sign(&claims("resnet", 2_000)).unwrap();
        let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
        let edited = serde_json::to_vec(&claims("resnet", 9_999)).unwrap();
        parts[1] = URL_SAFE_NO_PAD.encode(edited);
        assert_eq!(
            verifier.verify(&parts.join("."), "resnet", 5_000),
            Err(TokenError::Invalid)
        );
        // "alg": "none" and garbage.
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#);
        let unsigned = format!("{header}.{}.", parts[1]);
        assert_eq!(
            verifier.verify(&unsigned, "resnet", 1_500),
            Err(TokenError::Invalid)
        );
        assert_eq!(
            verifier.verify("not a token", "resnet", 1_500),
            Err(TokenError::Invalid)
        );
    }

    #[test]
    fn a_saved_signing_key_signs_the_same_way_after_a_restart() {
        let signer = Signer::generate().unwrap();
        let again = Signer::from_pkcs8(signer.pkcs8()).unwrap();
        assert_eq!(again.public_key(), signer.public_key());
        let token = again.sign(&claims("resnet", 2_000)).unwrap();
        assert!(Verifier::new(signer.public_key(), "w-1")
            .verify(&token, "resnet", 1_500)
            .is_ok());
        assert!(matches!(
            Signer::from_pkcs8(b"nope"),
            Err(SignerError::BadKey)
        ));
    }
}
