//! Compiles `proto/echo.proto` (the gRPC transport ceiling of the
//! `compare` scenario) with protox: pure Rust, no system protoc.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("proto");
    println!(
        "cargo:rerun-if-changed={}",
        root.join("echo.proto").display()
    );
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(protox::compile(["echo.proto"], [&root])?)?;
    Ok(())
}
