//! End-to-end tests: the real binary, real TLS, real SQLite, real ONNX Runtime and models.
//! They need `scripts/setup.sh` to have run (`source .cache/env.sh` sets ORT_DYLIB_PATH and
//! INFERGATE_MODELS).

mod harness;
use infergate_store::test_postgres;
mod webdriver;

mod api_types;
mod auth;
mod blobs;
mod constrained;
mod crash;
mod dashboard;
mod dashboard_traffic;
mod exhaustion;
mod grpc;
mod headers;
mod hostile_input;
mod limits;
mod replica_settings;
mod replica_traffic;
mod replica_workers;
mod replicas;
mod restart;
mod runtime_threads;
mod shared_limits;
mod shared_tokens;
mod shutdown;
mod store_tls;
mod transport;
mod websocket;
mod worker_pipelines;
mod workers;
