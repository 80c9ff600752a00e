//! Generates the KServe v2 gRPC service (server side only) from `proto/inference.proto` with
//! the protoc binary vendored by `protoc-bin-vendored`, so building needs no system protoc.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // prost-build finds protoc through this variable; build scripts run single-threaded.
    std::env::set_var("PROTOC", protoc);
    tonic_prost_build::configure()
        .build_client(false)
        .build_transport(false)
        .compile_protos(&["proto/inference.proto"], &["proto"])?;
    println!("cargo:rerun-if-changed=proto/inference.proto");
    Ok(())
}
