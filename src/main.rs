//! The `keel` binary: every subcommand lives in `keel-cli`.

fn main() -> std::process::ExitCode {
    keel_cli::main()
}
