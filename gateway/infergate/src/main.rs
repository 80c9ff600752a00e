//! `infergate`: the command line ([`cli`]) and the wiring of the gateway's crates into one
//! binary. `serve` runs `infergate_server`, `worker` runs `infergate_worker`; the offline
//! commands work on a data directory through `infergate_store` and `infergate_service`.
//!
//! It owns the command line, the offline commands' output and the admin API client of
//! `--url`. It must not hold what the server, the worker or the service decide (routes,
//! inference, admission, store queries of its own): a command calls those crates' functions, so
//! their tests cover the behaviour without this binary.

// Denied rather than forbidden: one layer (cli::split_layer) must implement tracing's
// `downcast_raw`, an `unsafe fn`, to pass the OpenTelemetry layer's context through.
#![deny(unsafe_code)]

mod cli;

/// mimalloc instead of the system allocator: a request's buffers are allocated on one thread
/// and freed on another (the async worker and the engine's instance thread), a pattern glibc's
/// per-thread caches serve badly (`bench/request_instructions.py` counts the difference).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cli::main()
}
