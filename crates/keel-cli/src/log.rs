//! `keel log`: offline tools for a controller's Raft data dir.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::output::Output;
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
#[command(
    after_help = "Examples:\n  keel log dump --data-dir .keel-dev/controller-1\n  keel log dump --data-dir .keel-dev/controller-1 -o json --record-type Topic,RemoveTopic\n\nA UserScramCredential record shows its user, mechanism and iterations only."
)]
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
    /// `table`: readable lines (stamp, vote, snapshot, entries); `json`:
    /// the log entries as data, one object each.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    output: Output,
    /// Only these record types (comma separated or repeated, e.g.
    /// `Topic,RemoveTopic`; any case), and only the entries holding one.
    /// An unknown type is a usage error naming the valid ones.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        value_name = "TYPE",
        ignore_case = true
    )]
    record_type: Vec<RecordType>,
}

/// Every type of metadata record, named as in the dump (the record's
/// variant name).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[value(rename_all = "PascalCase")]
enum RecordType {
    RegisterBroker,
    FenceBroker,
    UnfenceBroker,
    BrokerShuttingDown,
    UnregisterBroker,
    LogDirsOffline,
    Topic,
    Partition,
    PartitionChange,
    TopicConfig,
    MarkTopicForDeletion,
    ReplicaDeletionState,
    RemoveTopic,
    BeginTransaction,
    EndTransaction,
    AbortTransaction,
    AclAdded,
    AclRemoved,
    BrokerKafkaListener,
    ClusterConfig,
    UserScramCredential,
    UserScramCredentialRemoved,
}

impl RecordType {
    /// The type of `r` (one arm per record: a new record type does not
    /// compile until it is named here).
    fn of(r: &keel_metadata::MetadataRecord) -> Self {
        use keel_metadata::MetadataRecord as M;
        match r {
            M::RegisterBroker(_) => Self::RegisterBroker,
            M::FenceBroker { .. } => Self::FenceBroker,
            M::UnfenceBroker { .. } => Self::UnfenceBroker,
            M::BrokerShuttingDown { .. } => Self::BrokerShuttingDown,
            M::UnregisterBroker { .. } => Self::UnregisterBroker,
            M::LogDirsOffline { .. } => Self::LogDirsOffline,
            M::Topic(_) => Self::Topic,
            M::Partition(_) => Self::Partition,
            M::PartitionChange(_) => Self::PartitionChange,
            M::TopicConfig { .. } => Self::TopicConfig,
            M::MarkTopicForDeletion { .. } => Self::MarkTopicForDeletion,
            M::ReplicaDeletionState { .. } => Self::ReplicaDeletionState,
            M::RemoveTopic { .. } => Self::RemoveTopic,
            M::BeginTransaction { .. } => Self::BeginTransaction,
            M::EndTransaction => Self::EndTransaction,
            M::AbortTransaction => Self::AbortTransaction,
            M::AclAdded(_) => Self::AclAdded,
            M::AclRemoved(_) => Self::AclRemoved,
            M::BrokerKafkaListener { .. } => Self::BrokerKafkaListener,
            M::ClusterConfig { .. } => Self::ClusterConfig,
            M::UserScramCredential { .. } => Self::UserScramCredential,
            M::UserScramCredentialRemoved { .. } => Self::UserScramCredentialRemoved,
        }
    }
}

/// Runs `keel log ...`.
pub fn run(args: LogArgs) -> ExitCode {
    match args.command {
        LogCommand::Dump(a) => dump(a),
    }
}

/// A record's type: its variant name, as in its JSON.
fn record_type(record: &serde_json::Value) -> &str {
    match record {
        serde_json::Value::Object(m) => m.keys().next().map_or("", String::as_str),
        serde_json::Value::String(s) => s,
        _ => "",
    }
}

/// JSON with every 128-bit number (the topic and incarnation ids) as its
/// UUID text, as `topics describe` shows topic ids: serde_json's values
/// cannot hold such numbers, its writer can.
struct UuidText;

impl serde_json::ser::Formatter for UuidText {
    fn write_u128<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        value: u128,
    ) -> std::io::Result<()> {
        let h = format!("{value:032x}");
        write!(
            writer,
            "\"{}-{}-{}-{}-{}\"",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }
}

/// One record as JSON: `{"Type": {fields}}` (a bare `"Type"` for a record
/// without fields). A SCRAM credential shows its user, mechanism and
/// iterations only, never its salt or keys.
fn record_json(r: &keel_metadata::MetadataRecord) -> serde_json::Value {
    use serde::Serialize;
    if let keel_metadata::MetadataRecord::UserScramCredential { user, credential } = r {
        return serde_json::json!({ "UserScramCredential": {
            "user": user,
            "mechanism": credential.mechanism.name(),
            "iterations": credential.iterations,
        }});
    }
    let mut buf = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, UuidText);
    match r.serialize(&mut ser) {
        Ok(()) => serde_json::from_slice(&buf)
            .unwrap_or_else(|e| serde_json::json!({ "undecodable": format!("{e}") })),
        Err(e) => serde_json::json!({ "undecodable": format!("{e}") }),
    }
}

/// One entry as JSON (stable field names).
fn entry_json(e: &keel_raft::DumpedEntry) -> serde_json::Value {
    serde_json::json!({
        "index": e.index,
        "term": e.term,
        "kind": e.kind,
        "records": e.records.iter().map(record_json).collect::<Vec<_>>(),
        "membership": e.membership,
        "error": e.error,
    })
}

/// `log dump -o json` or `--record-type`: the entries as data, filtered.
fn dump_entries(args: &DumpArgs) -> ExitCode {
    let entries = match keel_raft::dump_entries(&args.data_dir, args.from, args.to) {
        Ok(e) => e,
        Err(e) => {
            crate::output::error("LOCAL", &e.to_string(), "");
            return ExitCode::from(EXIT_LOCAL);
        }
    };
    let wanted = &args.record_type;
    let mut shown = Vec::new();
    for e in &entries {
        let mut v = entry_json(e);
        if !wanted.is_empty() {
            let kept: Vec<serde_json::Value> = e
                .records
                .iter()
                .filter(|r| wanted.contains(&RecordType::of(r)))
                .map(record_json)
                .collect();
            if kept.is_empty() {
                continue;
            }
            v["records"] = serde_json::Value::Array(kept);
        }
        shown.push(v);
    }
    match args.output {
        Output::Json => crate::output::json(&serde_json::json!({ "entries": shown })),
        Output::Table => {
            for e in &shown {
                for r in e["records"].as_array().into_iter().flatten() {
                    crate::outln!("{} {} {} {}", e["index"], e["term"], record_type(r), r);
                }
            }
        }
    }
    ExitCode::SUCCESS
}

fn dump(args: DumpArgs) -> ExitCode {
    crate::output::set_mode(args.output);
    if args.output == Output::Json || !args.record_type.is_empty() {
        return dump_entries(&args);
    }
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
            crate::output::error("LOCAL", &e.to_string(), "");
            ExitCode::from(EXIT_LOCAL)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_metadata::{MetadataRecord, TopicId};

    #[test]
    fn records_show_their_type_and_ids_as_uuid_text() {
        let id = TopicId(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
        let v = record_json(&MetadataRecord::RemoveTopic { topic_id: id });
        assert_eq!(record_type(&v), "RemoveTopic");
        assert_eq!(v["RemoveTopic"]["topic_id"], id.to_string());
        let v = record_json(&MetadataRecord::EndTransaction);
        assert_eq!(record_type(&v), "EndTransaction");
    }

    #[test]
    fn a_record_type_is_named_as_its_record_shows() {
        use clap::ValueEnum;
        let id = TopicId(7);
        for r in [
            MetadataRecord::RemoveTopic { topic_id: id },
            MetadataRecord::MarkTopicForDeletion { topic_id: id },
            MetadataRecord::EndTransaction,
            MetadataRecord::ClusterConfig {
                key: "retention.ms".into(),
                value: None,
            },
        ] {
            let name = RecordType::of(&r).to_possible_value().unwrap();
            assert_eq!(name.get_name(), record_type(&record_json(&r)));
        }
    }

    #[test]
    fn an_unknown_record_type_is_a_usage_error_naming_the_valid_ones() {
        use clap::Parser;
        #[derive(Parser, Debug)]
        struct Cli {
            #[command(flatten)]
            dump: DumpArgs,
        }
        let parse =
            |types: &str| Cli::try_parse_from(["log", "--data-dir", "d", "--record-type", types]);
        let e = parse("Topic,Nope").unwrap_err();
        assert_eq!(e.exit_code(), 2);
        let text = e.to_string();
        assert!(text.contains("Nope"), "{text}");
        assert!(text.contains("RemoveTopic"), "{text}");
        assert!(text.contains("UserScramCredentialRemoved"), "{text}");
        // Any case, as before.
        let cli = parse("topic,removetopic").unwrap();
        assert_eq!(
            cli.dump.record_type,
            [RecordType::Topic, RecordType::RemoveTopic]
        );
    }

    #[test]
    fn a_credential_shows_no_salt_nor_keys() {
        use keel_metadata::scram::{ScramCredential, ScramMechanism};
        let credential =
            ScramCredential::from_password(ScramMechanism::Sha256, b"pw", b"salt", 4096).unwrap();
        let v = record_json(&MetadataRecord::UserScramCredential {
            user: "alice".into(),
            credential,
        });
        assert_eq!(record_type(&v), "UserScramCredential");
        assert_eq!(
            v,
            serde_json::json!({ "UserScramCredential": {
                "user": "alice",
                "mechanism": "SCRAM-SHA-256",
                "iterations": 4096,
            }})
        );
    }
}
