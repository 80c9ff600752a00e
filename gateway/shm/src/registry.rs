//! The registered regions, per owner: each caller (an API key, or the anonymous callers as one
//! group) sees and uses only its own. Regions are shared (`Arc`) with the requests using them,
//! so unregistering one while a request reads or writes it is safe: the request finishes on
//! the open object, which closes when the last user lets go.

use crate::error::{Result, ShmError};
use crate::key;
use crate::region::Region;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Longest region name a client may register.
const MAX_NAME_BYTES: usize = 1024;

/// What one owner may hold and move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Regions one owner may have registered at once (each holds a descriptor open).
    pub max_regions_per_owner: usize,
    /// The most bytes one read or write may move (the gateway's request-size limit): a read
    /// allocates what it asks for.
    pub max_transfer_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_regions_per_owner: 64,
            max_transfer_bytes: 256 << 20,
        }
    }
}

/// One region as `status` reports it (Triton's fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionStatus {
    pub name: String,
    pub key: String,
    pub offset: u64,
    pub byte_size: u64,
}

/// A region held for the duration of a request: reads and writes through it stay valid if
/// the region is unregistered meanwhile.
#[derive(Clone)]
pub struct RegionHandle(Arc<Region>);

impl RegionHandle {
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The region's registered size.
    pub fn byte_size(&self) -> u64 {
        self.0.byte_size
    }

    /// `len` bytes at `offset` of the region (see [`SharedMemory::read`]).
    pub fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        self.0.read(offset, len)
    }

    /// Writes `bytes` at `offset` of the region (see [`SharedMemory::write`]).
    pub fn write(&self, offset: u64, bytes: &[u8]) -> Result<()> {
        self.0.write(offset, bytes)
    }
}

/// The registry of system shared-memory regions.
pub struct SharedMemory {
    prefix: String,
    limits: Limits,
    /// owner -> name -> region.
    owners: Mutex<HashMap<String, BTreeMap<String, Arc<Region>>>>,
}

impl SharedMemory {
    /// A registry that opens only objects whose key starts with `prefix` (itself an object
    /// name start, such as `/infergate-`).
    pub fn new(prefix: &str, limits: Limits) -> Result<SharedMemory> {
        key::check_prefix(prefix)?;
        Ok(SharedMemory {
            prefix: prefix.to_string(),
            limits,
            owners: Mutex::new(HashMap::new()),
        })
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Registers `byte_size` bytes at `offset` of the object `key` as `owner`'s region `name`
    /// (Triton's `register`). The key must be an object name under the prefix; the object must
    /// exist, be readable and writable by the server, and hold `offset + byte_size` bytes.
    pub fn register(
        &self,
        owner: &str,
        name: &str,
        key: &str,
        offset: u64,
        byte_size: u64,
    ) -> Result<()> {
        if name.is_empty() || name.len() > MAX_NAME_BYTES {
            return Err(ShmError::invalid(format!(
                "a shared memory region needs a name of 1 to {MAX_NAME_BYTES} bytes"
            )));
        }
        key::check_key(key, &self.prefix)?;
        self.room_for(owner, name)?;
        // Opened outside the lock: system calls, and other owners need not wait for them.
        let region = Arc::new(Region::open(name, key, offset, byte_size)?);
        let mut owners = self.owners.lock();
        let regions = owners.entry(owner.to_string()).or_default();
        if regions.contains_key(name) {
            return Err(already(name));
        }
        if regions.len() >= self.limits.max_regions_per_owner {
            return Err(too_many(self.limits.max_regions_per_owner));
        }
        regions.insert(name.to_string(), region);
        Ok(())
    }

    fn room_for(&self, owner: &str, name: &str) -> Result<()> {
        let owners = self.owners.lock();
        let Some(regions) = owners.get(owner) else {
            return Ok(());
        };
        if regions.contains_key(name) {
            return Err(already(name));
        }
        if regions.len() >= self.limits.max_regions_per_owner {
            return Err(too_many(self.limits.max_regions_per_owner));
        }
        Ok(())
    }

    /// Unregisters `owner`'s region `name`, or all of its regions when `name` is `None`
    /// (Triton's `unregister`; an unknown name is not an error there either). Requests using a
    /// region finish on it. Returns how many were unregistered.
    pub fn unregister(&self, owner: &str, name: Option<&str>) -> usize {
        let mut owners = self.owners.lock();
        let Some(regions) = owners.get_mut(owner) else {
            return 0;
        };
        let removed = match name {
            Some(name) => usize::from(regions.remove(name).is_some()),
            None => std::mem::take(regions).len(),
        };
        if regions.is_empty() {
            owners.remove(owner);
        }
        removed
    }

    /// `owner`'s regions, by name, or only `name` (NotFound when it has none of that name).
    pub fn status(&self, owner: &str, name: Option<&str>) -> Result<Vec<RegionStatus>> {
        let owners = self.owners.lock();
        let regions = owners.get(owner);
        let status = |r: &Arc<Region>| RegionStatus {
            name: r.name.clone(),
            key: r.key.clone(),
            offset: r.offset,
            byte_size: r.byte_size,
        };
        match name {
            None => Ok(regions
                .map(|r| r.values().map(status).collect())
                .unwrap_or_default()),
            Some(name) => regions
                .and_then(|r| r.get(name))
                .map(|r| vec![status(r)])
                .ok_or_else(|| ShmError::not_found(name)),
        }
    }

    /// `owner`'s region `name`, held for a request (NotFound when it has none of that name,
    /// whatever other owners have).
    pub fn region(&self, owner: &str, name: &str) -> Result<RegionHandle> {
        self.owners
            .lock()
            .get(owner)
            .and_then(|r| r.get(name))
            .map(|r| RegionHandle(r.clone()))
            .ok_or_else(|| ShmError::not_found(name))
    }

    /// An input's bytes: `len` bytes at `offset` of `owner`'s region `name` (request
    /// parameters `shared_memory_region`, `shared_memory_offset`, `shared_memory_byte_size`).
    /// `len` is checked against the transfer limit and the region before anything is
    /// allocated, and against the object's size now before the copy: a shrunk object is an
    /// error, never a crash.
    pub fn read(&self, owner: &str, name: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        let len = self.transfer(len)?;
        self.region(owner, name)?.read(offset, len)
    }

    /// Writes an output's bytes at `offset` of `owner`'s region `name`, checked the same way.
    pub fn write(&self, owner: &str, name: &str, offset: u64, bytes: &[u8]) -> Result<()> {
        self.transfer(bytes.len() as u64)?;
        self.region(owner, name)?.write(offset, bytes)
    }

    fn transfer(&self, len: u64) -> Result<usize> {
        if len > self.limits.max_transfer_bytes {
            return Err(ShmError::invalid(format!(
                "a shared-memory transfer of {len} bytes exceeds this server's limit of {}",
                self.limits.max_transfer_bytes
            )));
        }
        usize::try_from(len).map_err(|_| ShmError::invalid("transfer size out of range"))
    }
}

fn already(name: &str) -> ShmError {
    ShmError::invalid(format!("shared memory region '{name}' already in manager"))
}

fn too_many(max: usize) -> ShmError {
    ShmError::limit(format!(
        "this caller already holds {max} shared memory regions, its limit; unregister some first"
    ))
}
