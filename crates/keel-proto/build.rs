//! Compiles `proto/*.proto` with protox (pure Rust; no system protoc).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The directory cargo runs this from, read when it runs: a build
    // script compiled for one checkout is reused by cargo for another
    // (same sources, same target dir), so a path baked in at compile time
    // (`env!`) can name a checkout that is gone.
    let root = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let files = ["common.proto", "broker.proto", "admin.proto", "raft.proto"];
    for f in &files {
        println!("cargo:rerun-if-changed={}", root.join(f).display());
    }
    let fds = protox::compile(files, [&root])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
