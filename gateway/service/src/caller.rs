//! Who is calling. Every transport turns the credentials it was given (a key in a header, in
//! gRPC metadata, in a WebSocket's first message) into one [`Caller`] before it asks the service
//! for anything; what the service and its policies know of a caller (scopes, limits, the id
//! that limits and metrics count under) comes from here, never from a transport's headers.
//!
//! A caller's limits are looked up once, when the caller is made: the key's own where it has
//! them, the server's defaults otherwise; an anonymous caller's are the anonymous limits, held
//! per client address (`crate::anonymous`).

use crate::anonymous::AnonymousAccess;
use crate::error::{ApiError, ApiResult};
use infergate_limits::Limits;
use infergate_store::auth::{Scope, Scopes};
use infergate_store::keys::KeyRecord;
use infergate_traffic::tokens::TokenLimits;
use std::net::IpAddr;
use std::sync::Arc;

/// What a caller proved about itself.
#[derive(Clone, Debug)]
pub enum Principal {
    /// An API key from the store.
    Key(Arc<KeyRecord>),
    /// No key, from a network granted anonymous access (`[auth] anonymous_scopes`): the scopes
    /// granted there, never `admin`.
    Anonymous { addr: IpAddr, scopes: Arc<Scopes> },
}

/// The id anonymous callers are counted under together (activity, history, metrics): keys
/// count from 1. Their limiter counts each client address apart ([`Caller::limit_id`]).
pub const ANONYMOUS_ID: i64 = 0;

/// The metrics label of anonymous callers.
pub const ANONYMOUS_LABEL: &str = "anonymous";

/// A caller the service serves: who it is and the limits it is held to.
#[derive(Clone, Debug)]
pub struct Caller {
    principal: Principal,
    limits: Limits,
    tokens: TokenLimits,
}

impl Caller {
    /// The caller holding `key`, with the key's own limits over `defaults` (no token limit
    /// but the key's own).
    pub fn of_key(key: Arc<KeyRecord>, defaults: &Limits) -> Caller {
        Caller::of_key_with(key, defaults, &TokenLimits::default())
    }

    /// The caller holding `key`, with the key's own request and token limits over the
    /// server's defaults.
    pub fn of_key_with(
        key: Arc<KeyRecord>,
        defaults: &Limits,
        token_defaults: &TokenLimits,
    ) -> Caller {
        let limits = effective_limits(&key, defaults);
        let tokens = effective_token_limits(&key, token_defaults);
        Caller {
            principal: Principal::Key(key),
            limits,
            tokens,
        }
    }

    /// An anonymous caller at `addr`, with what `access` grants; its token limits are the
    /// server's defaults, one budget for all anonymous callers together (accounted under
    /// [`ANONYMOUS_ID`], as their usage is).
    pub fn anonymous(
        addr: IpAddr,
        access: &AnonymousAccess,
        token_defaults: &TokenLimits,
    ) -> Caller {
        Caller {
            principal: Principal::Anonymous {
                addr: addr.to_canonical(),
                scopes: access.scopes().clone(),
            },
            limits: *access.limits(),
            tokens: *token_defaults,
        }
    }

    pub fn principal(&self) -> &Principal {
        &self.principal
    }

    /// The caller's key, when it presented one.
    pub fn key(&self) -> Option<&Arc<KeyRecord>> {
        match &self.principal {
            Principal::Key(key) => Some(key),
            Principal::Anonymous { .. } => None,
        }
    }

    pub fn is_anonymous(&self) -> bool {
        matches!(self.principal, Principal::Anonymous { .. })
    }

    /// The id activity, history and metrics count this caller under: the key's, or
    /// [`ANONYMOUS_ID`] for every anonymous caller.
    pub fn id(&self) -> i64 {
        match &self.principal {
            Principal::Key(key) => key.id,
            Principal::Anonymous { .. } => ANONYMOUS_ID,
        }
    }

    /// The id the per-caller limiters count this caller under: the key's, or one per
    /// anonymous client address.
    pub fn limit_id(&self) -> i64 {
        match &self.principal {
            Principal::Key(key) => key.id,
            Principal::Anonymous { addr, .. } => crate::anonymous::limit_id(*addr),
        }
    }

    /// The caller as the metrics label it: the key's id, or `anonymous`.
    pub fn label(&self) -> String {
        match &self.principal {
            Principal::Key(key) => key.id.to_string(),
            Principal::Anonymous { .. } => ANONYMOUS_LABEL.to_string(),
        }
    }

    /// Who owns what the caller registers for itself (shared-memory regions): its key, or the
    /// anonymous callers together, who share the machine they call from.
    pub fn owner(&self) -> String {
        match &self.principal {
            Principal::Key(key) => format!("key:{}", key.id),
            Principal::Anonymous { .. } => ANONYMOUS_LABEL.to_string(),
        }
    }

    /// The caller's effective limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The caller's effective token limits (LLM requests).
    pub fn token_limits(&self) -> &TokenLimits {
        &self.tokens
    }

    /// Whether the caller may use `scope` (`admin` allows everything).
    pub fn allows(&self, scope: Scope) -> bool {
        match &self.principal {
            Principal::Key(key) => key.allows(scope),
            Principal::Anonymous { scopes, .. } => scopes.allows(scope),
        }
    }

    /// 403 unless the caller holds one of `scopes`, naming what it holds and what it lacks.
    pub fn check_scopes(&self, scopes: &[Scope]) -> ApiResult<()> {
        if scopes.iter().any(|&s| self.allows(s)) {
            return Ok(());
        }
        let wanted: Vec<&str> = scopes.iter().map(|s| s.as_str()).collect();
        let wanted = match wanted.as_slice() {
            [one] => format!("the '{one}' scope"),
            many => format!("any of the '{}' scopes", many.join("', '")),
        };
        match &self.principal {
            Principal::Key(key) => Err(ApiError::forbidden(format!(
                "this key (scopes: {}) lacks {wanted}",
                key.scopes().to_list()
            ))),
            // Not a 403: with a key the caller may well have it.
            Principal::Anonymous { scopes, .. } => Err(ApiError::unauthorized(format!(
                "anonymous callers (scopes: {}) lack {wanted}: send an API key ('Authorization: Bearer <key>' or 'X-API-Key: <key>')",
                scopes.to_list()
            ))),
        }
    }
}

/// A key's effective token limits: its own where set, the server's defaults otherwise.
pub fn effective_token_limits(key: &KeyRecord, defaults: &TokenLimits) -> TokenLimits {
    TokenLimits {
        tokens_per_minute: key.tokens.tokens_per_minute.or(defaults.tokens_per_minute),
        token_budget: key.tokens.token_budget.or(defaults.token_budget),
    }
}

/// A key's effective limits: its own where set, the server's defaults otherwise.
pub fn effective_limits(key: &KeyRecord, defaults: &Limits) -> Limits {
    Limits {
        rate: key.rate_limit.or(defaults.rate),
        max_concurrent: key.max_concurrent.or(defaults.max_concurrent),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use infergate_limits::RateLimit;

    fn key(scopes: &[Scope], rate: Option<RateLimit>) -> Arc<KeyRecord> {
        Arc::new(KeyRecord {
            id: 7,
            public_id: "0123456789ab".into(),
            name: "app".into(),
            scopes: scopes.to_vec(),
            created_at: 0,
            revoked_at: None,
            rate_limit: rate,
            max_concurrent: None,
            tokens: Default::default(),
            guardrails: None,
            payload_log: None,
        })
    }

    #[test]
    fn a_key_caller_takes_its_own_limits_over_the_defaults() {
        let defaults = Limits {
            rate: Some(RateLimit::new(10.0, None).unwrap()),
            max_concurrent: Some(4),
        };
        let own = RateLimit::new(2.0, Some(5)).unwrap();
        let caller = Caller::of_key(key(&[Scope::Infer], Some(own)), &defaults);
        assert_eq!(caller.limits().rate, Some(own));
        assert_eq!(caller.limits().max_concurrent, Some(4));
        assert_eq!(caller.id(), 7);
        let plain = Caller::of_key(key(&[Scope::Infer], None), &defaults);
        assert_eq!(plain.limits().rate, defaults.rate);
    }

    #[test]
    fn scopes_are_checked_and_a_refusal_names_them() {
        let caller = Caller::of_key(key(&[Scope::Infer], None), &Limits::default());
        assert!(caller.check_scopes(&[Scope::Infer]).is_ok());
        let refused = caller.check_scopes(&[Scope::Upload]).unwrap_err();
        assert_eq!(refused.kind, crate::error::Kind::Forbidden);
        assert!(
            refused.message.contains("scopes: infer") && refused.message.contains("'upload'"),
            "{}",
            refused.message
        );
        let admin = Caller::of_key(key(&[Scope::Admin], None), &Limits::default());
        assert!(admin.check_scopes(&[Scope::Upload]).is_ok());
    }

    #[test]
    fn anonymous_callers_count_together_and_limit_apart() {
        let config = crate::anonymous::AuthConfig {
            anonymous_scopes: vec!["infer".into()],
            ..Default::default()
        };
        let limits = Limits {
            rate: Some(RateLimit::new(5.0, None).unwrap()),
            max_concurrent: None,
        };
        let access = AnonymousAccess::new(&config, limits).unwrap().unwrap();
        let a = Caller::anonymous(
            "127.0.0.1".parse().unwrap(),
            &access,
            &TokenLimits::default(),
        );
        let b = Caller::anonymous(
            "127.0.0.2".parse().unwrap(),
            &access,
            &TokenLimits::default(),
        );
        assert!(a.key().is_none() && a.is_anonymous());
        assert_eq!((a.id(), b.id()), (ANONYMOUS_ID, ANONYMOUS_ID));
        assert_ne!(a.limit_id(), b.limit_id());
        assert_eq!(a.limits().rate, limits.rate);
        assert_eq!(
            (a.label(), a.owner()),
            ("anonymous".into(), "anonymous".into())
        );
        assert!(a.check_scopes(&[Scope::Infer]).is_ok());
        for lacking in [Scope::Upload, Scope::Admin] {
            let refused = a.check_scopes(&[lacking]).unwrap_err();
            assert_eq!(refused.kind, crate::error::Kind::Unauthenticated);
            assert!(
                refused.message.contains("send an API key"),
                "{}",
                refused.message
            );
        }
    }
}
