#![forbid(unsafe_code)]

/// mimalloc instead of the system allocator: a request's buffers are allocated on one thread
/// and freed on another (the async worker and the engine's instance thread), a pattern glibc's
/// per-thread caches miss on every time. Counted under callgrind (`bench/request_instructions.py`,
/// MLP, KServe binary over TLS) it cut the instructions outside ONNX Runtime per request by 11 %.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    infergate::cli::main()
}
