//! Workers joining the cluster: a join secret checked against the store and this cluster's CA
//! pin, the worker's certificate and credential issued; afterwards each call of a worker is
//! admitted by its credential.

use super::{log_transition, Manager};
use crate::error::{ApiError, ApiResult};
use infergate_cluster::credential;
use infergate_cluster::join::JoinSecret;
use infergate_cluster::messages::{JoinRequest, JoinResponse, Report};
use infergate_cluster::registry::Observed;
use infergate_store::workers::WorkerRecord;
use infergate_store::{now_secs, Store, StoreError};
use rand::RngCore;
use std::time::{Duration, Instant};

impl Manager {
    /// A worker presenting a join secret: on success it is registered (durably and live) and
    /// gets its certificate and credential. A refused join records nothing.
    pub fn join(
        &self,
        store: &Store,
        secret: &str,
        request: JoinRequest,
    ) -> ApiResult<JoinResponse> {
        let join = JoinSecret::parse(secret).map_err(|e| ApiError::unauthorized(e.to_string()))?;
        if join.ca_pin != self.material.ca.pin() {
            return Err(ApiError::unauthorized(
                "join secret was made for another cluster (its CA pin is not this manager's)",
            ));
        }
        join.verify(
            store.join_secret(&join.id)?.as_ref(),
            now_secs().max(0) as u64,
        )
        .map_err(|e| ApiError::unauthorized(e.to_string()))?;
        let host = advertised_host(&request.advertise)?;
        let id = match request.worker_id {
            Some(id) if is_worker_id(&id) => id,
            Some(id) => {
                return Err(ApiError::bad_request(format!(
                    "worker id '{id}' is not one this manager issues (w- and 16 hex digits)"
                )))
            }
            None => new_worker_id(),
        };
        let removed = || {
            ApiError::unauthorized(format!(
                "worker '{id}' was removed by an operator: it may join again only as a new worker (delete worker-id in its data directory)"
            ))
        };
        if store.worker(&id)?.is_some_and(|w| w.removed_at.is_some()) {
            return Err(removed());
        }
        let issued =
            self.material.ca.issue(&id, &[host]).map_err(|e| {
                ApiError::internal(format!("issuing the worker's certificate: {e}"))
            })?;
        let credential = credential::issue(&id);
        let record = WorkerRecord {
            id: id.clone(),
            advertise: request.advertise.clone(),
            version: request.version.clone(),
            devices: request.devices.clone(),
            credential_sha256: credential.sha256,
            joined_with: join.id.clone(),
            joined_at: now_secs(),
            removed_at: None,
        };
        if !store.upsert_worker(&record)? {
            return Err(removed());
        }
        if self.shared {
            // Every replica learns of the join from the store; this one at once.
            let observed = Observed {
                info: record.info(),
                report: Report::default(),
                drained: false,
                revision: store.worker_joined(&id)?,
                age: Duration::ZERO,
            };
            let mut registry = self.registry.lock();
            let transition = registry.apply(observed, Instant::now());
            transition.iter().for_each(|t| self.announce(t));
        } else {
            let transition = self.registry.lock().join(record.info(), Instant::now());
            log_transition(&transition);
        }
        tracing::info!(worker = %id, advertise = %request.advertise, version = %request.version, "worker joined");
        Ok(JoinResponse {
            worker_id: id,
            cert_pem: issued.cert_pem,
            key_pem: issued.key_pem,
            ca_pem: self.material.ca.cert_pem().to_owned(),
            token_public_key: hex::encode(self.material.signer.public_key()),
            credential: credential.text,
            heartbeat_interval_ms: self.heartbeat().interval.as_millis() as u64,
        })
    }

    /// The worker a credential belongs to: 401 (join again) when unknown, wrong or removed.
    pub fn authenticate(&self, store: &Store, presented: &str) -> ApiResult<WorkerRecord> {
        let refused = || {
            ApiError::unauthorized(
                "worker credential is unknown, wrong or removed: join again with a join secret",
            )
        };
        let presented = credential::parse(presented).ok_or_else(refused)?;
        let id = presented.worker_id;
        let record = match store.worker(id) {
            Ok(record) => record.filter(|r| r.removed_at.is_none()),
            // The store is down: a credential this replica checked while it was up still
            // admits its worker (heartbeats and model fetches go on; nothing can be removed
            // meanwhile, as removing is a write).
            Err(StoreError::Unavailable(why)) => match self.admitted.lock().get(id) {
                Some(known) => Some(known.clone()),
                None => return Err(StoreError::Unavailable(why).into()),
            },
            Err(e) => return Err(e.into()),
        };
        match record {
            Some(record) if presented.matches(&record.credential_sha256) => {
                self.admitted.lock().insert(id.to_owned(), record.clone());
                Ok(record)
            }
            _ => {
                self.admitted.lock().remove(id);
                Err(refused())
            }
        }
    }
}

fn new_worker_id() -> String {
    let mut bytes = [0u8; 8];
    rand::rng().fill_bytes(&mut bytes);
    format!("w-{}", hex::encode(bytes))
}

fn is_worker_id(id: &str) -> bool {
    id.strip_prefix("w-")
        .is_some_and(|hex| hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The host of `host:port` (IPv6 in brackets), for the worker's certificate.
fn advertised_host(advertise: &str) -> ApiResult<String> {
    let bad = || {
        ApiError::bad_request(format!(
            "advertise address '{advertise}' must be host:port (IPv6 as [addr]:port)"
        ))
    };
    let (host, port) = advertise.rsplit_once(':').ok_or_else(bad)?;
    port.parse::<u16>().map_err(|_| bad())?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let plausible = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-.:".contains(&b));
    if !plausible {
        return Err(bad());
    }
    Ok(host.to_owned())
}

/// Makes and stores a join secret for this cluster (the CLI offline and the API alike).
pub fn create_join_secret(
    store: &infergate_store::Store,
    ca: &infergate_cluster::ca::ClusterCa,
    ttl_s: Option<u64>,
) -> ApiResult<(JoinSecret, Option<u64>)> {
    if ttl_s == Some(0) {
        return Err(ApiError::bad_request("ttl_s must be at least 1 second"));
    }
    let expires_at =
        ttl_s.map(|ttl| (infergate_store::now_secs().max(0) as u64).saturating_add(ttl));
    let (secret, stored) = JoinSecret::generate(&ca.pin(), expires_at);
    store.add_join_secret(&stored)?;
    tracing::info!(id = %secret.id, "join secret created");
    Ok((secret, expires_at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manager::LOCAL;

    #[test]
    fn advertised_addresses_and_worker_ids_are_checked() {
        assert_eq!(advertised_host("10.0.0.2:8445").unwrap(), "10.0.0.2");
        assert_eq!(advertised_host("[::1]:8445").unwrap(), "::1");
        assert_eq!(advertised_host("gpu-1.lan:1").unwrap(), "gpu-1.lan");
        for bad in ["", "host", "host:port", ":80", "a b:80", "host:99999"] {
            assert!(advertised_host(bad).is_err(), "{bad}");
        }
        assert!(is_worker_id(&new_worker_id()));
        assert!(!is_worker_id(LOCAL));
        assert!(!is_worker_id("w-../../etc"));
    }
}
