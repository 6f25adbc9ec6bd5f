//! `keel log`: offline tools for a controller's Raft data dir.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::EXIT_LOCAL;

/// Options of `keel log`.
#[derive(Args, Debug)]
pub struct LogArgs {
    #[command(subcommand)]
    command: LogCommand,
}

#[derive(Subcommand, Debug)]
enum LogCommand {
    /// Print a stopped controller's stamp, vote, snapshot summary and log entries.
    Dump(DumpArgs),
}

/// Options of `keel log dump`.
#[derive(Args, Debug)]
struct DumpArgs {
    /// The controller's data dir (the one given to `keel controller --data-dir`).
    /// The node must be stopped; to inspect a running node, dump a copy.
    #[arg(long)]
    data_dir: PathBuf,
    /// First log index to print (inclusive).
    #[arg(long)]
    from: Option<u64>,
    /// Last log index to print (inclusive).
    #[arg(long)]
    to: Option<u64>,
}

/// Runs `keel log ...`.
pub fn run(args: LogArgs) -> ExitCode {
    match args.command {
        LogCommand::Dump(a) => dump(a),
    }
}

fn dump(args: DumpArgs) -> ExitCode {
    match keel_raft::dump(&args.data_dir, args.from, args.to) {
        Ok(lines) => {
            let mut out = std::io::stdout().lock();
            for line in lines {
                // A closed pipe (`| head`) just ends the output.
                if writeln!(out, "{line}").is_err() {
                    break;
                }
            }
            let _ = out.flush();
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_LOCAL)
        }
    }
}
