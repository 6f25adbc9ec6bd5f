//! Printing results and errors the same way in every admin command.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

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

/// Whether errors are printed as JSON (`-o json`): set once by the
/// command's options before anything can fail.
static JSON_ERRORS: AtomicBool = AtomicBool::new(false);

/// Errors from now on print as `output` says.
pub fn set_mode(output: Output) {
    JSON_ERRORS.store(output == Output::Json, Ordering::Relaxed);
}

/// Whether errors print as JSON.
pub fn json_errors() -> bool {
    JSON_ERRORS.load(Ordering::Relaxed)
}

/// Prints an error once: for people, `error: ...` and a `hint: ...` line
/// on stderr; with `-o json`, one object on stdout, `{"error": {"code",
/// "message", "hint"}}`, which a script reads where it reads the answers
/// (stderr stays empty).
pub fn error(code: &str, message: &str, hint: &str) {
    if json_errors() {
        let mut e = serde_json::json!({ "code": code, "message": message });
        if !hint.is_empty() {
            e["hint"] = serde_json::Value::from(hint);
        }
        json(&serde_json::json!({ "error": e }));
    } else {
        if code.is_empty() {
            eprintln!("error: {message}");
        } else {
            eprintln!("error: {code}: {message}");
        }
        if !hint.is_empty() {
            eprintln!("hint: {hint}");
        }
    }
}

/// Prints a refusal and returns exit code 1.
pub fn refused(e: &ApiError) -> ExitCode {
    error(e.code.name(), &e.message, hint(e.code));
    ExitCode::from(EXIT_REFUSED)
}

/// A command's answer of many items, some of which may have been refused
/// (`failed`: one of them): the table then the refusal on stderr, or one
/// JSON document, the answer with the refusal as its `"error"` (a second
/// document would break a script's parse). Exit code 1 when one failed.
pub fn answer(
    output: Output,
    v: serde_json::Value,
    table: impl FnOnce(),
    failed: Option<&ApiError>,
) -> ExitCode {
    match output {
        Output::Json => {
            let mut v = v;
            if let Some(e) = failed {
                let mut o = serde_json::json!({ "code": e.code.name(), "message": e.message });
                if !hint(e.code).is_empty() {
                    o["hint"] = serde_json::Value::from(hint(e.code));
                }
                v["error"] = o;
            }
            json(&v);
            failed.map_or(ExitCode::SUCCESS, |_| ExitCode::from(EXIT_REFUSED))
        }
        Output::Table => {
            table();
            failed.map_or(ExitCode::SUCCESS, refused)
        }
    }
}

/// Prints a usage error (exit code 2).
pub fn usage(msg: impl std::fmt::Display) -> ExitCode {
    error("USAGE", &msg.to_string(), "");
    ExitCode::from(2)
}

/// Prints an unreachable-cluster error and returns exit code 3.
pub fn unreachable(e: &ClientError) -> ExitCode {
    let (code, hint) = match e {
        ClientError::OutcomeUnknown { .. } => (
            "OUTCOME_UNKNOWN",
            "describe the resource to see whether the change took effect",
        ),
        _ => (
            "UNREACHABLE",
            "check --bootstrap (or KEEL_BOOTSTRAP) and that the controllers are running (`keel dev` starts a local cluster); --timeout waits longer",
        ),
    };
    error(code, &e.to_string(), hint);
    ExitCode::from(EXIT_UNREACHABLE)
}

/// Prints that `address` wants TLS and no credentials were given (exit
/// code 3: nothing was sent).
pub fn tls_required(address: &str) -> ExitCode {
    error(
        "TLS_REQUIRED",
        &format!("{address} requires TLS, and no TLS credentials were given; nothing was sent"),
        TLS_HINT,
    );
    ExitCode::from(EXIT_UNREACHABLE)
}

/// What to do when a listener wants TLS and no credentials were given.
pub const TLS_HINT: &str = "pass --tls-cert, --tls-key and --tls-ca (or KEEL_TLS_CERT, KEEL_TLS_KEY, KEEL_TLS_CA), e.g. certs/user-admin.pem, certs/user-admin-key.pem and certs/ca.pem from `keel certs init`; against `keel dev`, its certificates are used on their own while it runs";

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
