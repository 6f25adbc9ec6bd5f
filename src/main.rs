//! The `keel` binary: every subcommand lives in `keel-cli`.

/// mimalloc instead of glibc malloc: the controller's hot paths allocate many
/// small, short-lived strings and record vectors, and glibc spent a fifth of
/// the bulk-commit profile in `malloc_consolidate`/`unlink_chunk` and kept
/// freed snapshot memory mapped.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    keel_cli::main()
}
