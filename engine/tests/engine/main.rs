//! ONNX Runtime engine tests, one binary (one link instead of one per file).

mod common;

mod batching;
mod bytes;
mod lifecycle;
mod providers;
mod sequences;
