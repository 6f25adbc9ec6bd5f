//! Printing results and errors the same way in every admin command.

use std::process::ExitCode;

use keel_metadata::{ApiError, ErrorCode};
use keel_proto::client::ClientError;

use crate::{EXIT_REFUSED, EXIT_UNREACHABLE};

/// `table` for people, `json` for scripts (stable field names).
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Output {
    #[default]
    Table,
    Json,
}

/// What the user can do about an error code.
fn hint(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::NotController => {
            "the quorum has no active controller right now; retry in a second"
        }
        ErrorCode::TopicAlreadyExists => "pick another name, or pass --if-not-exists",
        ErrorCode::UnknownTopic => "list topics with `keel topics list`",
        ErrorCode::InvalidReplicationFactor => {
            "the replication factor cannot exceed the active brokers; see `keel cluster describe`"
        }
        ErrorCode::InvalidTopicName => "use 1-249 characters from [a-zA-Z0-9._-], not '.' or '..'",
        ErrorCode::InvalidPartitions => "partition counts must be positive and can only grow",
        ErrorCode::UnknownBroker => "see `keel cluster describe` for registered brokers",
        ErrorCode::BrokerNotFenced => {
            "stop the broker first; only a fenced broker can be unregistered"
        }
        ErrorCode::TopicDeletionInProgress => {
            "wait for the deletion to finish (`keel topics delete --wait`)"
        }
        ErrorCode::ReassignmentInProgress => "cancel it with `keel reassign cancel` or wait for it",
        ErrorCode::NoReassignmentInProgress => "nothing to cancel; see `keel reassign list`",
        ErrorCode::PreferredLeaderNotAvailable => "the preferred replica is offline or out of sync",
        ErrorCode::ElectionNotNeeded => "the partition already has the requested leader",
        ErrorCode::InvalidQuorumChange => "change one voter at a time; see `keel quorum describe`",
        ErrorCode::InvalidConfig => {
            "see `keel configs describe --topic T` for the configs and their current values"
        }
        _ => "",
    }
}

/// Prints a refusal and returns exit code 1.
pub fn refused(e: &ApiError) -> ExitCode {
    eprintln!("error: {}: {}", e.code, e.message);
    let h = hint(e.code);
    if !h.is_empty() {
        eprintln!("hint: {h}");
    }
    ExitCode::from(EXIT_REFUSED)
}

/// Prints an unreachable-cluster error and returns exit code 3.
pub fn unreachable(e: &ClientError) -> ExitCode {
    eprintln!("error: {e}");
    match e {
        ClientError::OutcomeUnknown { .. } => {
            eprintln!("hint: describe the resource to see whether the change took effect")
        }
        _ => eprintln!(
            "hint: check --bootstrap (or KEEL_BOOTSTRAP) and that the controllers are running (`keel dev` starts a local cluster)"
        ),
    }
    ExitCode::from(EXIT_UNREACHABLE)
}

/// `println!` for a command's output: when stdout is closed early
/// (`keel topics list | head -1`) the process ends quietly with exit 0,
/// as Unix tools do, instead of panicking.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::write_line(format_args!($($arg)*))
    };
}

/// Writes one line on stdout; see [`outln!`].
pub fn write_line(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let written = out.write_fmt(args).and_then(|()| out.write_all(b"\n"));
    match written {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => {
            eprintln!("error: cannot write the output: {e}");
            std::process::exit(1);
        }
    }
}

/// Prints a JSON value on stdout.
pub fn json(v: &serde_json::Value) {
    crate::outln!(
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
    );
}

/// Prints rows as an aligned table.
pub fn table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(c.len());
            }
        }
    }
    let line = |cells: Vec<String>| {
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{:<w$}", c, w = widths.get(i).copied().unwrap_or(0)))
            .collect();
        crate::outln!("{}", parts.join("  ").trim_end());
    };
    line(header.iter().map(|s| s.to_string()).collect());
    for r in rows {
        line(r.clone());
    }
}
