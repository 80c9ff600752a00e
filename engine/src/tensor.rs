//! The tensor types, defined in `infergate-protocol` (so that decoders and their fuzz targets
//! build without the engine) and re-exported here under the engine's path.

pub use infergate_protocol::tensor::*;
