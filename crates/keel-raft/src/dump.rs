//! Offline decoding of a stopped node's Raft data dir: its stamp, vote,
//! markers, stored snapshot and log entries, as readable lines.
//!
//! Nothing is written on purpose (no stamp, no tree is created), but sled
//! runs its crash recovery on open like for any other open, so dump a copy
//! of the dir if it must stay byte-for-byte untouched. Damaged records
//! become lines saying what failed; the dump never panics on bad data.

use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use crate::KeelNode;
use keel_metadata::{MetadataRecord, RecordBatch};
use openraft::{EntryPayload, LogId, Membership, StoredMembership, Vote};

use crate::codec;
use crate::log_store::{decode_entry, key_index, read_value};
use crate::open::{StorageMeta, META_KEY};
use crate::state_machine::{StoredSnapshot, SNAPSHOT_KEY};
use crate::NodeId;

/// Why a data dir cannot be dumped at all. Damage inside an opened
/// database is not an error: it is reported in the dump's lines.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    /// `--from` is after `--to`.
    #[error("empty range: from {from} is after to {to}")]
    EmptyRange {
        /// First index asked for.
        from: u64,
        /// Last index asked for.
        to: u64,
    },
    /// There is no Raft database under the data dir.
    #[error(
        "no Raft data in {}: expected a controller data dir holding a raft/ database",
        dir.display()
    )]
    NoData {
        /// The `raft` dir that was looked for.
        dir: PathBuf,
    },
    /// A running node holds the database lock.
    #[error(
        "the Raft database in {} is locked by a running process: stop the node first, \
         or copy the data dir and dump the copy",
        dir.display()
    )]
    Locked {
        /// The locked `raft` dir.
        dir: PathBuf,
    },
    /// The operating system refused (permissions, ...).
    #[error("cannot open {}: {source}", dir.display())]
    Io {
        /// The `raft` dir.
        dir: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// sled cannot open the database files.
    #[error("the Raft database in {} does not open: {reason}", dir.display())]
    Corrupt {
        /// The `raft` dir.
        dir: PathBuf,
        /// What sled reported.
        reason: String,
    },
}

/// Decodes the Raft database of the stopped node whose data dir is
/// `data_dir` (the database is `data_dir/raft`) into lines: the stamp, the
/// vote, the purged and committed markers, the stored snapshot, then one
/// line per log entry with index in `[from, to]` (both optional and
/// inclusive), each record of a normal entry on its own indented line.
pub fn dump(data_dir: &Path, from: Option<u64>, to: Option<u64>) -> Result<Vec<String>, DumpError> {
    let (dir, db) = open_checked(data_dir, from, to)?;
    let mut out = vec![format!("data dir: {}", dir.display())];
    let dumped = catch_unwind(AssertUnwindSafe(|| dump_db(&db, from, to, &mut out)));
    if dumped.is_err() {
        out.push("error: reading the database panicked; the dump above is incomplete".into());
    }
    Ok(out)
}

/// One log entry as data (`keel log dump --output json` renders it).
#[derive(Clone, Debug)]
pub struct DumpedEntry {
    /// Its log index.
    pub index: u64,
    /// The term it was written in; `None` when it does not decode.
    pub term: Option<u64>,
    /// "blank", "normal", "membership" or "undecodable".
    pub kind: &'static str,
    /// The records of a normal entry (empty otherwise).
    pub records: Vec<MetadataRecord>,
    /// A membership entry's voters, learners and addresses.
    pub membership: Option<String>,
    /// Why the entry (or the log from here on) could not be read.
    pub error: Option<String>,
}

/// The log entries with index in `[from, to]` of the stopped node whose
/// data dir is `data_dir`, as data. Damage becomes an entry whose `error`
/// says what failed (the last one when the log is unreadable from there
/// on); the dump never panics on bad data.
pub fn dump_entries(
    data_dir: &Path,
    from: Option<u64>,
    to: Option<u64>,
) -> Result<Vec<DumpedEntry>, DumpError> {
    let (_, db) = open_checked(data_dir, from, to)?;
    let mut out = Vec::new();
    let read = catch_unwind(AssertUnwindSafe(|| entries(&db, from, to, &mut out)));
    if read.is_err() {
        out.push(DumpedEntry {
            index: out.last().map_or(0, |e| e.index + 1),
            term: None,
            kind: "undecodable",
            records: Vec::new(),
            membership: None,
            error: Some("reading the database panicked; the entries before are complete".into()),
        });
    }
    Ok(out)
}

/// Appends the entries with index in `[from, to]` to `out`.
fn entries(db: &sled::Db, from: Option<u64>, to: Option<u64>, out: &mut Vec<DumpedEntry>) {
    let names: BTreeSet<Vec<u8>> = db.tree_names().iter().map(|n| n.to_vec()).collect();
    let bad = |index: u64, error: String| DumpedEntry {
        index,
        term: None,
        kind: "undecodable",
        records: Vec::new(),
        membership: None,
        error: Some(error),
    };
    let logs = match existing_tree(db, &names, "logs") {
        Err(e) => return out.push(bad(from.unwrap_or(0), e)),
        Ok(None) => return,
        Ok(Some(t)) => t,
    };
    let start = from.unwrap_or(0).to_be_bytes();
    let iter = match to {
        Some(to) => logs.range(start..=to.to_be_bytes()),
        None => logs.range(start..),
    };
    for kv in iter {
        let next = out.last().map_or(from.unwrap_or(0), |e| e.index + 1);
        let (key, value) = match kv {
            Ok(kv) => kv,
            Err(e) => {
                return out.push(bad(
                    next,
                    format!("the log tree is unreadable from here on: {e}"),
                ))
            }
        };
        let Some(index) = key_index(&key) else {
            out.push(bad(next, format!("log key {key:?} is not a log index")));
            continue;
        };
        match decode_entry(&key, &value) {
            Ok(entry) => {
                let term = Some(entry.log_id.leader_id.term);
                let (kind, records, membership) = match entry.payload {
                    EntryPayload::Blank => ("blank", Vec::new(), None),
                    EntryPayload::Normal(RecordBatch { records }) => {
                        ("normal", records.to_vec(), None)
                    }
                    EntryPayload::Membership(m) => ("membership", Vec::new(), Some(membership(&m))),
                };
                out.push(DumpedEntry {
                    index,
                    term,
                    kind,
                    records,
                    membership,
                    error: None,
                });
            }
            Err(e) => out.push(bad(index, format!("entry {index} does not decode ({e})"))),
        }
    }
}

/// Checks the range and the data dir, and opens its Raft database.
fn open_checked(
    data_dir: &Path,
    from: Option<u64>,
    to: Option<u64>,
) -> Result<(PathBuf, sled::Db), DumpError> {
    if let (Some(from), Some(to)) = (from, to) {
        if from > to {
            return Err(DumpError::EmptyRange { from, to });
        }
    }
    let dir = data_dir.join("raft");
    match std::fs::read_dir(&dir) {
        Ok(mut entries) => {
            if entries.next().is_none() {
                return Err(DumpError::NoData { dir });
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(DumpError::NoData { dir });
        }
        Err(source) => return Err(DumpError::Io { dir, source }),
    }
    let db = open_db(&dir)?;
    Ok((dir, db))
}

/// Opens the sled database without a background flusher.
fn open_db(dir: &Path) -> Result<sled::Db, DumpError> {
    let opened = catch_unwind(AssertUnwindSafe(|| {
        sled::Config::new().path(dir).flush_every_ms(None).open()
    }));
    match opened {
        Ok(Ok(db)) => Ok(db),
        // sled reports a held lock as an `Other` I/O error with this text.
        Ok(Err(sled::Error::Io(e))) if e.to_string().contains("could not acquire lock") => {
            Err(DumpError::Locked {
                dir: dir.to_path_buf(),
            })
        }
        Ok(Err(sled::Error::Io(source))) => Err(DumpError::Io {
            dir: dir.to_path_buf(),
            source,
        }),
        Ok(Err(e)) => Err(DumpError::Corrupt {
            dir: dir.to_path_buf(),
            reason: e.to_string(),
        }),
        Err(panic) => Err(DumpError::Corrupt {
            dir: dir.to_path_buf(),
            reason: panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "sled panicked".to_string()),
        }),
    }
}

/// An existing tree, without creating missing ones.
fn existing_tree(
    db: &sled::Db,
    names: &BTreeSet<Vec<u8>>,
    name: &str,
) -> Result<Option<sled::Tree>, String> {
    if !names.contains(name.as_bytes()) {
        return Ok(None);
    }
    db.open_tree(name)
        .map(Some)
        .map_err(|e| format!("tree {name}: {e}"))
}

/// Renders a one-key tree's record, or says why it cannot be.
fn one_value<T: serde::de::DeserializeOwned>(
    db: &sled::Db,
    names: &BTreeSet<Vec<u8>>,
    tree: &str,
    show: impl FnOnce(T) -> String,
) -> String {
    match existing_tree(db, names, tree) {
        Err(e) => format!("unreadable ({e})"),
        Ok(None) => "none".to_string(),
        Ok(Some(t)) => match read_value::<T>(&t) {
            Ok(None) => "none".to_string(),
            Ok(Some(v)) => show(v),
            Err(e) => format!("undecodable ({e})"),
        },
    }
}

/// `term T leader N index I`.
fn log_id(id: &LogId<NodeId>) -> String {
    format!(
        "index {} term {} leader {}",
        id.index, id.leader_id.term, id.leader_id.node_id
    )
}

/// Voters (every config of a joint membership), learners and addresses.
fn membership(m: &Membership<NodeId, KeelNode>) -> String {
    let configs: Vec<String> = m
        .get_joint_config()
        .iter()
        .map(|c| format!("{:?}", c.iter().collect::<Vec<_>>()))
        .collect();
    let learners: Vec<NodeId> = m.learner_ids().collect();
    let nodes: Vec<String> = m
        .nodes()
        .map(|(id, n)| format!("{id}={}", n.addr))
        .collect();
    let mut s = format!("voters {}", configs.join(" + "));
    if configs.len() > 1 {
        s.push_str(" (joint)");
    }
    if !learners.is_empty() {
        s.push_str(&format!(" learners {learners:?}"));
    }
    format!("{s} nodes [{}]", nodes.join(", "))
}

/// A stored membership: where it was decided and what it is.
fn stored_membership(m: &StoredMembership<NodeId, KeelNode>) -> String {
    let at = m
        .log_id()
        .as_ref()
        .map_or_else(|| "none".to_string(), log_id);
    format!("{} (from {at})", membership(m.membership()))
}

/// One record on one line. A SCRAM credential shows its user, mechanism
/// and iterations only: its salt and keys would let whoever reads the dump
/// attack the password offline, or pose as the server.
fn record(r: &MetadataRecord) -> String {
    match r {
        MetadataRecord::UserScramCredential { user, credential } => format!(
            "UserScramCredential {{ user: {user:?}, mechanism: {}, iterations: {} }}",
            credential.mechanism.name(),
            credential.iterations
        ),
        _ => format!("{r:?}"),
    }
}

/// Appends the whole dump of `db` to `out`.
fn dump_db(db: &sled::Db, from: Option<u64>, to: Option<u64>, out: &mut Vec<String>) {
    let names: BTreeSet<Vec<u8>> = db.tree_names().iter().map(|n| n.to_vec()).collect();

    let stamp = match existing_tree(db, &names, "meta") {
        Err(e) => format!("unreadable ({e})"),
        Ok(None) => "missing (no meta tree)".to_string(),
        Ok(Some(t)) => match t.get(META_KEY) {
            Err(e) => format!("unreadable ({e})"),
            Ok(None) => "missing".to_string(),
            Ok(Some(bytes)) => match codec::decode::<StorageMeta>(&bytes) {
                Ok(m) => format!("cluster {:?} node {}", m.cluster_id, m.node_id),
                Err(e) => format!("undecodable ({e})"),
            },
        },
    };
    out.push(format!("stamp: {stamp}"));
    out.push(format!(
        "vote: {}",
        one_value::<Vote<NodeId>>(db, &names, "vote", |v| format!(
            "term {} node {} {}",
            v.leader_id.term,
            v.leader_id.node_id,
            if v.committed {
                "committed"
            } else {
                "uncommitted"
            }
        ))
    ));
    out.push(format!(
        "purged: {}",
        one_value::<LogId<NodeId>>(db, &names, "purged", |l| log_id(&l))
    ));
    out.push(format!(
        "committed: {}",
        one_value::<LogId<NodeId>>(db, &names, "committed", |l| log_id(&l))
    ));
    dump_snapshot(db, &names, out);
    dump_log(db, &names, from, to, out);
}

/// The stored snapshot's metadata and what its image holds.
fn dump_snapshot(db: &sled::Db, names: &BTreeSet<Vec<u8>>, out: &mut Vec<String>) {
    let bytes = match existing_tree(db, names, "snapshot").map(|t| t.map(|t| t.get(SNAPSHOT_KEY))) {
        Err(e) => return out.push(format!("snapshot: unreadable ({e})")),
        Ok(None) | Ok(Some(Ok(None))) => return out.push("snapshot: none".to_string()),
        Ok(Some(Err(e))) => return out.push(format!("snapshot: unreadable ({e})")),
        Ok(Some(Ok(Some(bytes)))) => bytes,
    };
    let stored: StoredSnapshot = match codec::decode(&bytes) {
        Ok(s) => s,
        Err(e) => return out.push(format!("snapshot: undecodable ({e})")),
    };
    let meta = &stored.meta;
    out.push(format!(
        "snapshot: id {} last log id {}",
        meta.snapshot_id,
        meta.last_log_id
            .as_ref()
            .map_or_else(|| "none".to_string(), log_id)
    ));
    out.push(format!(
        "snapshot membership: {}",
        stored_membership(&meta.last_membership)
    ));
    match stored.decode_state() {
        Ok(state) => out.push(format!(
            "snapshot image: offset {} topics {} partitions {} brokers {} hash {}",
            state.image.offset(),
            state.image.topic_count(),
            state.image.partition_count(),
            state.image.brokers().count(),
            state.image.hash()
        )),
        Err(e) => out.push(format!("snapshot image: undecodable ({e})")),
    }
}

/// The entries with index in `[from, to]`.
fn dump_log(
    db: &sled::Db,
    names: &BTreeSet<Vec<u8>>,
    from: Option<u64>,
    to: Option<u64>,
    out: &mut Vec<String>,
) {
    let logs = match existing_tree(db, names, "logs") {
        Err(e) => return out.push(format!("log: unreadable ({e})")),
        Ok(None) => return out.push("log: empty".to_string()),
        Ok(Some(t)) => t,
    };
    let first = logs.first().ok().flatten().and_then(|(k, _)| key_index(&k));
    let last = logs.last().ok().flatten().and_then(|(k, _)| key_index(&k));
    let show = |i: Option<u64>| i.map_or_else(|| "none".to_string(), |i| i.to_string());
    out.push(format!(
        "log: {} entries, first {} last {}",
        logs.len(),
        show(first),
        show(last)
    ));
    out.push("index term kind".to_string());
    let start = from.unwrap_or(0).to_be_bytes();
    let iter = match to {
        Some(to) => logs.range(start..=to.to_be_bytes()),
        None => logs.range(start..),
    };
    for kv in iter {
        let (key, value) = match kv {
            Ok(kv) => kv,
            Err(e) => {
                out.push(format!(
                    "error: the log tree is unreadable from here on: {e}"
                ));
                return;
            }
        };
        let Some(index) = key_index(&key) else {
            out.push(format!("? undecodable: log key {key:?} is not a log index"));
            continue;
        };
        match decode_entry(&key, &value) {
            Ok(entry) => {
                let term = entry.log_id.leader_id.term;
                match &entry.payload {
                    EntryPayload::Blank => out.push(format!("{index} {term} blank")),
                    EntryPayload::Normal(RecordBatch { records }) => {
                        let n = records.len();
                        let plural = if n == 1 { "" } else { "s" };
                        out.push(format!("{index} {term} normal ({n} record{plural})"));
                        out.extend(records.iter().map(|r| format!("    {}", record(r))));
                    }
                    EntryPayload::Membership(m) => {
                        out.push(format!("{index} {term} membership {}", membership(m)));
                    }
                }
            }
            Err(e) => out.push(format!(
                "{index} ? undecodable: entry {index} does not decode ({e})"
            )),
        }
    }
}
