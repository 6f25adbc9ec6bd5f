//! Compiles `proto/etcd.proto` (the etcd v3 messages the `compare`
//! scenario sends) and `proto/echo.proto` (its gRPC transport ceiling)
//! with protox: pure Rust, no system protoc.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Read when it runs, not baked in: see keel-proto's build script.
    let root = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("proto");
    for f in ["etcd.proto", "echo.proto"] {
        println!("cargo:rerun-if-changed={}", root.join(f).display());
    }
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        .compile_fds(protox::compile(["etcd.proto"], [&root])?)?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(protox::compile(["echo.proto"], [&root])?)?;
    Ok(())
}
