//! The one inference path every protocol calls: HTTP KServe, gRPC, WebSocket, and through them
//! the dashboard's playground. A protocol decodes its request into a [`Request`], asks this
//! module to [`resolve`] the name it was given, then [`run`]s it and encodes the [`Inferred`]
//! answer; readiness and metadata come from here too, so every transport answers alike.
//!
//! - [`target`]: what a name (and version) addresses: a model version or a pipeline;
//!   [`resolve`]: the target of a name.
//! - [`readiness`]: whether a target can serve now.
//! - [`describe`]: the metadata endpoints' description of a target.
//! - [`request`]: a request as every protocol hands it over (tensors, outputs, parameters,
//!   priority and queue timeout).
//! - [`run`]: a request on a target: a pipeline's stages or one model version.
//! - [`stages`]: executing one request through a pipeline's stages (plugins, native ops, the
//!   model), with stage timings; [`detect`]: the text-detection stage, which runs the rest once
//!   per text region found.
//! - [`results`]: a decoupled pipeline's answer cut into the results it stands for.
//! - [`backend`]: where a model version runs: the local engine or a worker, behind
//!   every protocol at once; a pipeline stage's native op goes with it.
//!
//! Cancellation is Rust's: dropping the future [`run`] returns takes a request that has not run
//! out of its model's queue (a WebSocket cancel, a client gone).

pub mod backend;
pub mod describe;
pub mod detect;
pub mod readiness;
pub mod request;
pub mod resolve;
pub mod results;
pub mod run;
pub mod stages;
pub mod target;

pub use describe::{describe, Description};
pub use readiness::readiness;
pub use request::Request;
pub use resolve::resolve;
pub use run::{run, Inferred};
pub use target::Target;
