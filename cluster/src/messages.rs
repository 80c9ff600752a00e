//! What workers and the manager say to each other, as JSON over the manager's HTTPS port.
//!
//! JSON rather than protobuf: these are a few messages a second per worker, read by people in
//! logs and by the dashboard, and every field is optional-friendly for rolling upgrades (a
//! manager ignores fields it does not know; a missing field takes its default).

use serde::{Deserialize, Serialize};

// What the dashboard shows of a worker is defined once, with the API's answers.
pub use infergate_api_types::workers::{Devices, Gpu, GpuUsage, LoadedModel, Report};

/// `POST /cluster/v1/join`, with the join secret as the bearer credential.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JoinRequest {
    /// The id the worker had before (kept in its data dir) so a rejoin keeps its history;
    /// `None` on the first join, and the manager assigns one.
    #[serde(default)]
    pub worker_id: Option<String>,
    /// `host:port` where the manager and direct clients reach the worker's KServe v2 endpoints.
    pub advertise: String,
    pub version: String,
    #[serde(default)]
    pub devices: Devices,
}

/// The manager's answer to a join: the worker's identity and what it needs to verify others.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct JoinResponse {
    pub worker_id: String,
    /// The worker's certificate and key from the cluster CA (it serves and connects with them).
    pub cert_pem: String,
    pub key_pem: String,
    /// The cluster CA: the only root the worker trusts for the manager.
    pub ca_pem: String,
    /// The manager's Ed25519 public key (hex): direct-mode tokens are checked with it.
    pub token_public_key: String,
    /// The worker's own bearer credential for heartbeats and model fetches.
    pub credential: String,
    pub heartbeat_interval_ms: u64,
}

impl std::fmt::Debug for JoinResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinResponse")
            .field("worker_id", &self.worker_id)
            .field("heartbeat_interval_ms", &self.heartbeat_interval_ms)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::liveness::Reported;

    #[test]
    fn an_older_or_newer_peer_still_understands_a_heartbeat() {
        // Fields a newer worker adds are ignored; fields an older one omits take defaults.
        let newer =
            r#"{"state":"draining","in_flight":3,"models":[{"name":"m","version":2}],"future":1}"#;
        let report: Report = serde_json::from_str(newer).unwrap();
        assert_eq!(report.state, Reported::Draining);
        assert_eq!(report.in_flight, 3);
        assert_eq!(
            report.models,
            vec![LoadedModel {
                name: "m".into(),
                version: 2
            }]
        );
        assert_eq!(report.rss_bytes, 0);
        let empty: Report = serde_json::from_str("{}").unwrap();
        assert_eq!(empty, Report::default());
    }

    #[test]
    fn a_join_answer_keeps_its_secrets_out_of_logs() {
        let answer = JoinResponse {
            worker_id: "w-1".into(),
            cert_pem: "CERT".into(),
            key_pem: "SECRET KEY".into(),
            ca_pem: "CA".into(),
            token_public_key: "00".into(),
            credential: "SECRET CREDENTIAL".into(),
            heartbeat_interval_ms: 2000,
        };
        let shown = format!("{answer:?}");
        assert!(!shown.contains("SECRET"), "{shown}");
        let back: JoinResponse =
            serde_json::from_str(&serde_json::to_string(&answer).unwrap()).unwrap();
        assert!(back == answer);
    }
}
