//! Traffic policy at the edge, as plain data and functions the gateway calls at each phase of
//! a request. Nothing here knows HTTP, the store or an async runtime:
//!
//! - [`policy`]: a model's traffic policy (weighted split between versions, sticky callers, a
//!   mirrored share) as the API gives it, and its validation against the model's versions.
//! - [`choose`]: the version a request that names none goes to, and whether it is mirrored.
//! - [`cache_key`] and [`cache`]: the response cache's key (a digest of every part that
//!   changes the answer) and the byte-bounded, least-recently-used cache itself.
//! - [`period`] and [`tokens`]: token limits per key (a rate per minute and a budget per UTC
//!   day or month) taken as reservations at admission and settled when the answer is done;
//!   [`key_table`] holds their per-key state.

#![forbid(unsafe_code)]

pub mod cache;
pub mod cache_key;
pub mod choose;
pub mod key_table;
pub mod period;
pub mod policy;
pub mod tokens;
