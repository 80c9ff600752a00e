//! Anonymous access: callers without a key, from networks the operator names, served with the
//! scopes the operator grants them (`[auth] anonymous_scopes`, never `admin`), as Kong's
//! `anonymous` consumer or Envoy's per-route auth let a private network in. Off by default;
//! the default network is loopback.
//!
//! A caller's address is the connection's peer, or, when that peer is one of the operator's
//! `trusted_proxies`, the address the proxy put in `X-Forwarded-For`: the rightmost entry that
//! is not itself a trusted proxy (what a client writes there itself lies to the left of what its
//! proxies appended). A header from anyone else is ignored.

use infergate_limits::Limits;
use infergate_store::auth::{Scope, Scopes};
use ipnet::IpNet;
use serde::Deserialize;
use std::net::IpAddr;
use std::sync::Arc;

/// `[auth]` in the configuration file.
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Scopes of callers without a key (`infer`, `upload`); empty: anonymous access is off.
    pub anonymous_scopes: Vec<String>,
    /// Networks (CIDR, or single addresses) whose callers may go without a key.
    pub anonymous_networks: Vec<String>,
    /// Proxies (CIDR, or single addresses) whose `X-Forwarded-For` names the client.
    pub trusted_proxies: Vec<String>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            anonymous_scopes: Vec::new(),
            anonymous_networks: vec!["127.0.0.0/8".into(), "::1/128".into()],
            trusted_proxies: Vec::new(),
        }
    }
}

/// A network list parsed: CIDR ranges, a bare address meaning itself alone.
#[derive(Debug, Clone, Default)]
pub struct Networks(Vec<IpNet>);

impl Networks {
    /// Parses `list`; `what` names the setting in errors.
    pub fn parse(list: &[String], what: &str) -> Result<Networks, String> {
        list.iter()
            .map(|text| {
                let text = text.trim();
                text.parse::<IpNet>()
                    .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| {
                        format!("{what}: '{text}' is neither a network (10.0.0.0/8, fd00::/8) nor an address")
                    })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Networks)
    }

    /// Whether `addr` lies in one of the networks (an IPv4 address mapped into IPv6, as a
    /// dual-stack socket reports it, counts as the IPv4 address).
    pub fn contains(&self, addr: IpAddr) -> bool {
        let addr = addr.to_canonical();
        self.0.iter().any(|net| net.contains(&addr))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The networks as the operator wrote them, for logs.
    pub fn shown(&self) -> String {
        self.0
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// What anonymous callers get, checked at start.
#[derive(Debug, Clone)]
pub struct AnonymousAccess {
    scopes: Arc<Scopes>,
    networks: Networks,
    limits: Limits,
}

impl AnonymousAccess {
    /// The access `[auth]` grants, with `limits` per client address; `None` when no scope is
    /// granted. `admin` is refused: an operator's powers always need a key.
    pub fn new(config: &AuthConfig, limits: Limits) -> Result<Option<AnonymousAccess>, String> {
        if config.anonymous_scopes.is_empty() {
            return Ok(None);
        }
        let scopes = Scopes::parse_list(&config.anonymous_scopes.join(","))
            .map_err(|e| format!("[auth] anonymous_scopes: {e}"))?;
        if scopes.iter().any(|s| s == Scope::Admin) {
            return Err(
                "[auth] anonymous_scopes: 'admin' can never be granted without a key (use infer, upload)"
                    .into(),
            );
        }
        let networks = Networks::parse(&config.anonymous_networks, "[auth] anonymous_networks")?;
        if networks.is_empty() {
            return Err(
                "[auth] anonymous_networks is empty: name the networks anonymous callers may come from"
                    .into(),
            );
        }
        Ok(Some(AnonymousAccess {
            scopes: Arc::new(scopes),
            networks,
            limits,
        }))
    }

    pub fn scopes(&self) -> &Arc<Scopes> {
        &self.scopes
    }

    pub fn networks(&self) -> &Networks {
        &self.networks
    }

    /// The limits each anonymous client address is held to.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Whether a caller at `addr` may go without a key.
    pub fn admits(&self, addr: IpAddr) -> bool {
        self.networks.contains(addr)
    }

    /// The start-up warning: anyone on these networks gets these scopes.
    pub fn warning(&self) -> String {
        format!(
            "anonymous access is on: callers without an API key from {} get the scopes '{}' (limits per client address: {})",
            self.networks.shown(),
            self.scopes.to_list(),
            if self.limits.is_unlimited() {
                "none".to_string()
            } else {
                format!("{:?}", self.limits)
            }
        )
    }
}

/// The operator's trusted proxies, and the client address behind them.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies(Networks);

impl TrustedProxies {
    pub fn new(config: &AuthConfig) -> Result<TrustedProxies, String> {
        Networks::parse(&config.trusted_proxies, "[auth] trusted_proxies").map(TrustedProxies)
    }

    /// The client's address: `peer`, or when `peer` is a trusted proxy, the rightmost address
    /// of `forwarded_for` (the `X-Forwarded-For` values, in order) that is not a trusted proxy
    /// itself (every entry trusted: the leftmost). An entry that is not an address ends the
    /// walk: what lies left of it cannot be trusted either.
    pub fn client(&self, peer: IpAddr, forwarded_for: &[&str]) -> IpAddr {
        let peer = peer.to_canonical();
        if !self.0.contains(peer) {
            return peer;
        }
        let mut client = peer;
        let entries = forwarded_for
            .iter()
            .flat_map(|value| value.split(','))
            .map(str::trim)
            .collect::<Vec<_>>();
        for entry in entries.iter().rev() {
            let Some(addr) = parse_forwarded(entry) else {
                break;
            };
            client = addr.to_canonical();
            if !self.0.contains(client) {
                break;
            }
        }
        client
    }
}

/// One `X-Forwarded-For` entry: an address, an IPv6 address in brackets, either with a port.
fn parse_forwarded(entry: &str) -> Option<IpAddr> {
    if let Ok(addr) = entry.parse::<IpAddr>() {
        return Some(addr);
    }
    if let Ok(socket) = entry.parse::<std::net::SocketAddr>() {
        return Some(socket.ip());
    }
    entry
        .strip_prefix('[')
        .and_then(|rest| rest.split_once(']'))
        .and_then(|(addr, _)| addr.parse().ok())
}

/// The id that [`crate::caller::Caller::limit_id`] gives an anonymous client address: negative,
/// so that it never meets a key's id (keys count from 1; 0 is the anonymous callers together).
pub fn limit_id(addr: IpAddr) -> i64 {
    match addr.to_canonical() {
        IpAddr::V4(v4) => -1 - i64::from(u32::from(v4)),
        IpAddr::V6(v6) => {
            // Below every IPv4 id; 61 bits of a fixed hash of the address (std's hasher is
            // not stable across builds, and replicas sharing a limiter must agree).
            use sha2::Digest;
            let digest = sha2::Sha256::digest(v6.octets());
            let mut first = [0u8; 8];
            first.copy_from_slice(&digest[..8]);
            -(1i64 << 33) - (u64::from_be_bytes(first) >> 3) as i64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(scopes: &[&str], networks: &[&str]) -> AuthConfig {
        AuthConfig {
            anonymous_scopes: scopes.iter().map(|s| s.to_string()).collect(),
            anonymous_networks: networks.iter().map(|s| s.to_string()).collect(),
            trusted_proxies: Vec::new(),
        }
    }

    #[test]
    fn off_without_scopes_and_admin_is_never_granted() {
        assert!(
            AnonymousAccess::new(&AuthConfig::default(), Limits::default())
                .unwrap()
                .is_none()
        );
        let e = AnonymousAccess::new(
            &config(&["infer", "admin"], &["127.0.0.1"]),
            Limits::default(),
        )
        .unwrap_err();
        assert!(e.contains("'admin' can never"), "{e}");
        let e = AnonymousAccess::new(&config(&["inference"], &["127.0.0.1"]), Limits::default())
            .unwrap_err();
        assert!(e.contains("unknown scope"), "{e}");
        let e = AnonymousAccess::new(&config(&["infer"], &[]), Limits::default()).unwrap_err();
        assert!(e.contains("is empty"), "{e}");
        let e = AnonymousAccess::new(&config(&["infer"], &["10.0.0.0/33"]), Limits::default())
            .unwrap_err();
        assert!(e.contains("10.0.0.0/33"), "{e}");
    }

    #[test]
    fn networks_admit_their_addresses_and_mapped_ipv4() {
        let mut c = config(&["infer", "upload"], &[]);
        c.anonymous_networks = AuthConfig::default().anonymous_networks;
        c.anonymous_networks.push("10.1.0.0/16".into());
        c.anonymous_networks.push("192.168.5.7".into());
        let access = AnonymousAccess::new(&c, Limits::default())
            .unwrap()
            .unwrap();
        for yes in [
            "127.0.0.1",
            "127.9.9.9",
            "::1",
            "::ffff:127.0.0.1",
            "10.1.200.3",
            "192.168.5.7",
        ] {
            assert!(access.admits(yes.parse().unwrap()), "{yes}");
        }
        for no in ["10.2.0.1", "192.168.5.8", "8.8.8.8", "fe80::1"] {
            assert!(!access.admits(no.parse().unwrap()), "{no}");
        }
        assert!(access.scopes().allows(Scope::Upload));
        assert!(!access.scopes().allows(Scope::Admin));
        assert!(
            access.warning().contains("infer,upload"),
            "{}",
            access.warning()
        );
    }

    #[test]
    fn only_a_trusted_proxy_names_the_client() {
        let proxies = TrustedProxies::new(&AuthConfig {
            trusted_proxies: vec!["10.0.0.0/8".into()],
            ..AuthConfig::default()
        })
        .unwrap();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        // Not a proxy: its header is the client's own claim, ignored.
        assert_eq!(
            proxies.client(ip("203.0.113.9"), &["127.0.0.1"]),
            ip("203.0.113.9")
        );
        // A proxy: the rightmost untrusted entry; what the client wrote further left is not
        // believed.
        assert_eq!(
            proxies.client(ip("10.0.0.2"), &["127.0.0.1, 198.51.100.4", "10.0.0.7"]),
            ip("198.51.100.4")
        );
        assert_eq!(proxies.client(ip("10.0.0.2"), &["[::1]:5000"]), ip("::1"));
        assert_eq!(
            proxies.client(ip("10.0.0.2"), &["10.9.9.9"]),
            ip("10.9.9.9")
        );
        // No header, or garbage: the proxy itself.
        assert_eq!(proxies.client(ip("10.0.0.2"), &[]), ip("10.0.0.2"));
        assert_eq!(proxies.client(ip("10.0.0.2"), &["unknown"]), ip("10.0.0.2"));
        // No trusted proxies at all: always the peer.
        let none = TrustedProxies::default();
        assert_eq!(none.client(ip("10.0.0.2"), &["127.0.0.1"]), ip("10.0.0.2"));
    }

    #[test]
    fn limit_ids_are_negative_and_distinct_per_address() {
        let ids: Vec<i64> = [
            "127.0.0.1",
            "127.0.0.2",
            "0.0.0.0",
            "255.255.255.255",
            "::1",
            "::2",
        ]
        .iter()
        .map(|a| limit_id(a.parse().unwrap()))
        .collect();
        assert!(ids.iter().all(|&id| id < 0), "{ids:?}");
        let mut unique = ids.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), ids.len(), "{ids:?}");
        assert_eq!(
            limit_id("::ffff:127.0.0.1".parse().unwrap()),
            limit_id("127.0.0.1".parse().unwrap())
        );
    }
}
