//! `keel jepsen ...`, `keel bench ...` and `keel sim ...`: the fault tests,
//! benchmarks and simulation live in the `keel-lab` binary (so this one links none of the fault
//! harness); these subcommands run the `keel-lab` beside this binary with
//! the same arguments, in place of this process (its exit code is theirs).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::EXIT_LOCAL;

/// Everything after `keel jepsen`, `keel bench` or `keel sim`, for `keel-lab`.
#[derive(Args, Debug)]
pub struct LabArgs {
    /// Arguments of `keel-lab jepsen`, `keel-lab bench` or `keel-lab sim` (`--help` lists
    /// them).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    args: Vec<OsString>,
}

/// Where `keel-lab` is: beside this binary.
fn lab_exe() -> Result<PathBuf, String> {
    let me = std::env::current_exe()
        .map_err(|e| format!("cannot find the keel binary's own path: {e}"))?;
    Ok(me.with_file_name("keel-lab"))
}

/// Runs `keel-lab <command> <args>` in place of this process; returns only
/// when it cannot.
pub fn forward(command: &str, a: &LabArgs) -> ExitCode {
    use std::os::unix::process::CommandExt as _;
    let lab = match lab_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_LOCAL);
        }
    };
    if !lab.is_file() {
        eprintln!(
            "error: `keel {command}` runs the keel-lab binary, and {} does not exist; \
             build it with `cargo build -p keel-lab` (add --release for a release build)",
            lab.display()
        );
        return ExitCode::from(EXIT_LOCAL);
    }
    let e = std::process::Command::new(&lab)
        .arg(command)
        .args(&a.args)
        .exec();
    eprintln!("error: cannot run {}: {e}", lab.display());
    ExitCode::from(EXIT_LOCAL)
}
