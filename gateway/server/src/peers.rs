//! The per-address cap on connections that have not presented a valid key yet
//! (`limits.max_unauthenticated_connections_per_ip`), so that one address holding silent or
//! keyless connections cannot take the whole connection cap from everyone else (nginx's
//! `limit_conn` keyed by address, applied only until a key is shown).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

pub struct PeerLimit {
    max: usize,
    counts: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// The address already has its cap of unauthenticated connections.
#[derive(Debug)]
pub struct AtCap;

/// One unauthenticated connection of an address; dropping it frees the place.
pub struct PeerSlot {
    ip: IpAddr,
    counts: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl PeerLimit {
    /// `max` 0: no cap.
    pub fn new(max: usize) -> PeerLimit {
        PeerLimit {
            max,
            counts: Arc::default(),
        }
    }

    /// A place for one more unauthenticated connection from `ip`: `Ok(None)` when there is no
    /// cap, `Err` when the address is at it.
    pub fn admit(&self, ip: IpAddr) -> Result<Option<PeerSlot>, AtCap> {
        if self.max == 0 {
            return Ok(None);
        }
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let count = counts.entry(ip).or_insert(0);
        if *count >= self.max {
            return Err(AtCap);
        }
        *count += 1;
        Ok(Some(PeerSlot {
            ip,
            counts: self.counts.clone(),
        }))
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = counts.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_each_address_and_frees_on_drop() {
        let limit = PeerLimit::new(2);
        let a: IpAddr = [10, 0, 0, 1].into();
        let b: IpAddr = [10, 0, 0, 2].into();
        let first = limit.admit(a).unwrap();
        let _second = limit.admit(a).unwrap();
        assert!(limit.admit(a).is_err(), "a third from the same address");
        assert!(
            limit.admit(b).unwrap().is_some(),
            "another address is unaffected"
        );
        drop(first);
        assert!(limit.admit(a).is_ok(), "a place was freed");
        assert!(PeerLimit::new(0).admit(a).unwrap().is_none(), "0: no cap");
    }

    #[test]
    fn forgets_addresses_with_no_connection() {
        let limit = PeerLimit::new(1);
        drop(limit.admit([10, 0, 0, 1].into()).unwrap());
        assert!(limit.counts.lock().unwrap().is_empty());
    }
}
