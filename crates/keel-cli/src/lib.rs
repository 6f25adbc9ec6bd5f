//! Every `keel` subcommand.

use std::process::ExitCode;

/// Entry point of the `keel` binary.
pub fn main() -> ExitCode {
    ExitCode::SUCCESS
}
