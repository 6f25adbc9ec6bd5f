//! Compiles `proto/etcd.proto` (the etcd v3 messages the `compare`
//! scenario sends) with protox: pure Rust, no system protoc.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("proto");
    let files = ["etcd.proto"];
    for f in &files {
        println!("cargo:rerun-if-changed={}", root.join(f).display());
    }
    let fds = protox::compile(files, [&root])?;
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
