//! Triton's system shared-memory extension, the server's side, without HTTP or gRPC types: a
//! registry of regions per owner (the caller the gateway identifies: an API key, or the
//! anonymous callers as one group), status, unregister, and the reads and writes of request
//! inputs and outputs that live in a region.
//!
//! - `key`: which keys may be opened (object names under the operator's prefix; never a path).
//! - `region`: one opened object, read and written with `pread`/`pwrite`, every span checked
//!   against the region and the object's real size (a shrunk object is an error, not a
//!   SIGBUS).
//! - `registry`: [`SharedMemory`], the regions per owner, and [`Limits`].
//! - `error`: [`ShmError`] and whose fault it is.
//!
//! It must not touch: HTTP, gRPC, keys and their scopes (the gateway passes an owner string),
//! the engine.

mod error;
mod key;
mod region;
mod registry;

pub use error::{ErrorKind, Result, ShmError};
pub use registry::{Limits, RegionHandle, RegionStatus, SharedMemory};
