//! The storage ceiling of the `commit` bulk level: how many records per
//! second this machine's disk lets three controllers store durably when
//! they do nothing else.
//!
//! Each of `nodes` threads plays one controller's log: it appends the bytes
//! of one bulk Raft entry (encoded exactly as the log store encodes it),
//! makes it durable, and appends the next, for a fixed time; all threads
//! run at once, because a real quorum's three nodes share this disk. No
//! Raft, no network, no decision, no replay and no client run meanwhile,
//! so what Keel's bulk level reaches can only be lower. It runs twice:
//!
//! - `sled`: the store the controllers run (`keel_raft::sled_config`, the
//!   `logs` tree, big-endian index keys, `flush` after each insert, which
//!   ends in `fdatasync` in the vendored sled);
//! - `file`: a plain file per node, each entry appended with `write` and
//!   made durable with `fdatasync`: the disk without any store's overhead.
//!
//! The ratio of the two says how much of the disk the store leaves.

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::stats::{cell, percentile, r1, r3};

/// What one ceiling run does.
#[derive(Clone, Debug)]
pub struct CeilingParams {
    /// Stores written at once (the quorum's size).
    pub nodes: usize,
    /// The bytes of one entry, as the log store writes it.
    pub entry: Arc<Vec<u8>>,
    /// Records the entry carries (turns entries/s into records/s).
    pub records_per_entry: usize,
    /// How long each store is written.
    pub secs: f64,
    /// Upper bound on entries per store, whatever the time.
    pub max_entries: u64,
}

/// One node's run: entries made durable, over how long, and each append's
/// latency (write + sync) in ms.
struct NodeRun {
    entries: u64,
    secs: f64,
    lat_ms: Vec<f64>,
}

/// How a node makes its entries durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Store {
    Sled,
    File,
}

impl Store {
    fn name(self) -> &'static str {
        match self {
            Store::Sled => "sled",
            Store::File => "file",
        }
    }
}

/// Runs both ceilings in scratch dirs under `dir` (removed afterwards).
/// Errors are reported in the JSON (`error`), never fatal: the ceiling is
/// context for the bulk figure, not part of it.
pub fn storage_ceiling(dir: &Path, p: &CeilingParams) -> Value {
    let mut out = json!({
        "nodes": p.nodes,
        "entry_bytes": p.entry.len(),
        "records_per_entry": p.records_per_entry,
        "secs": p.secs,
        "what": "each node appends one bulk entry (encoded as the log store does) and makes it durable, then the next; all nodes at once on this disk; no Raft, network, decision, replay or client",
    });
    for store in [Store::Sled, Store::File] {
        out[store.name()] = match run_store(dir, store, p) {
            Ok(v) => v,
            Err(e) => json!({ "error": e.to_string() }),
        };
    }
    let sled = out["sled"]["records_per_s"].as_f64();
    let file = out["file"]["records_per_s"].as_f64();
    if let (Some(s), Some(f)) = (sled, file) {
        if f > 0.0 {
            out["sled_vs_file"] = json!(r3(s / f));
        }
    }
    out
}

/// Runs `p.nodes` writers of kind `store` at once; the quorum's rate is the
/// slowest node's, since every entry must be durable on each of them.
fn run_store(dir: &Path, store: Store, p: &CeilingParams) -> std::io::Result<Value> {
    let scratch = tempfile::Builder::new()
        .prefix(&format!("keel-ceiling-{}-", store.name()))
        .tempdir_in(dir)?;
    let start = Arc::new(Barrier::new(p.nodes));
    let threads: Vec<_> = (0..p.nodes)
        .map(|n| {
            let path = scratch.path().join(format!("n{n}"));
            let (entry, start) = (p.entry.clone(), start.clone());
            let (secs, max) = (p.secs, p.max_entries);
            std::thread::Builder::new()
                .name(format!("keel-ceiling-{n}"))
                .spawn(move || run_node(&path, store, &entry, secs, max, &start))
        })
        .collect::<std::io::Result<_>>()?;
    let mut runs = Vec::with_capacity(p.nodes);
    for t in threads {
        let run = t
            .join()
            .map_err(|_| std::io::Error::other("a ceiling writer panicked"))??;
        runs.push(run);
    }
    let per_node: Vec<f64> = runs
        .iter()
        .map(|r| r.entries as f64 / r.secs.max(1e-9))
        .collect();
    let slowest = per_node.iter().copied().fold(f64::INFINITY, f64::min);
    let lat: Vec<f64> = runs.iter().flat_map(|r| r.lat_ms.iter().copied()).collect();
    let bytes = p.entry.len() as f64;
    Ok(json!({
        "entries_per_s_per_node": per_node.iter().map(|&e| r1(e)).collect::<Vec<_>>(),
        "records_per_s": r1(slowest * p.records_per_entry as f64),
        "mb_per_s_per_node": r1(slowest * bytes / 1e6),
        "mb_per_s_all_nodes": r1(per_node.iter().sum::<f64>() * bytes / 1e6),
        "append_p50_ms": r3(percentile(&lat, 50.0)),
        "append_p99_ms": r3(percentile(&lat, 99.0)),
        "entries": runs.iter().map(|r| r.entries).sum::<u64>(),
    }))
}

/// A node's open store.
enum Log {
    Sled { db: sled::Db, logs: sled::Tree },
    File(std::fs::File),
}

impl Log {
    fn open(path: &Path, store: Store) -> std::io::Result<Log> {
        Ok(match store {
            Store::Sled => {
                let db = keel_raft::sled_config(path)
                    .open()
                    .map_err(std::io::Error::other)?;
                let logs = db.open_tree("logs").map_err(std::io::Error::other)?;
                Log::Sled { db, logs }
            }
            Store::File => Log::File(std::fs::File::create(path)?),
        })
    }

    /// Appends entry `index` and returns once it is durable.
    fn append(&mut self, index: u64, entry: &[u8]) -> std::io::Result<()> {
        match self {
            Log::Sled { db, logs } => {
                logs.insert(keel_raft::index_key(index), entry)
                    .map_err(std::io::Error::other)?;
                db.flush().map_err(std::io::Error::other)?;
            }
            Log::File(file) => {
                file.write_all(entry)?;
                file.sync_data()?;
            }
        }
        Ok(())
    }
}

/// One node: appends `entry` until `secs` pass or `max` entries are durable.
fn run_node(
    path: &Path,
    store: Store,
    entry: &[u8],
    secs: f64,
    max: u64,
    start: &Barrier,
) -> std::io::Result<NodeRun> {
    let opened = Log::open(path, store);
    // Every node waits, even one whose store did not open, so the others
    // are not left at the barrier.
    start.wait();
    let mut log = opened?;
    let limit = Duration::from_secs_f64(secs);
    let mut lat_ms = Vec::new();
    let mut entries = 0u64;
    let began = Instant::now();
    while entries < max && began.elapsed() < limit {
        let t = Instant::now();
        log.append(entries + 1, entry)?;
        lat_ms.push(t.elapsed().as_secs_f64() * 1e3);
        entries += 1;
    }
    Ok(NodeRun {
        entries,
        secs: began.elapsed().as_secs_f64(),
        lat_ms,
    })
}

/// One table line for a [`storage_ceiling`] result.
pub fn ceiling_line(v: &Value) -> String {
    let part = |store: &str| {
        let s = &v[store];
        match s["error"].as_str() {
            Some(e) => format!("{store} failed: {e}"),
            None => format!(
                "{store} {} records/s ({} MB/s per node, append p50 {} ms)",
                cell(&s["records_per_s"]),
                cell(&s["mb_per_s_per_node"]),
                cell(&s["append_p50_ms"])
            ),
        }
    };
    format!(
        "storage ceiling ({} nodes at once, {} B entries of {} records, no Raft): {}; {}\n",
        cell(&v["nodes"]),
        cell(&v["entry_bytes"]),
        cell(&v["records_per_entry"]),
        part("sled"),
        part("file")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_stores_make_entries_durable_and_the_quorum_goes_at_its_slowest_node() {
        let dir = tempfile::tempdir().expect("dir");
        let p = CeilingParams {
            nodes: 3,
            entry: Arc::new(vec![0x42; 4096]),
            records_per_entry: 10,
            secs: 30.0,
            max_entries: 20,
        };
        let v = storage_ceiling(dir.path(), &p);
        for store in ["sled", "file"] {
            let s = &v[store];
            assert!(s.get("error").is_none(), "{store}: {v}");
            // Bounded by count, not time: every node wrote exactly 20.
            assert_eq!(s["entries"], 60, "{store}: {v}");
            let per_node = s["entries_per_s_per_node"].as_array().expect("per node");
            assert_eq!(per_node.len(), 3);
            let slowest = per_node
                .iter()
                .map(|e| e.as_f64().expect("rate"))
                .fold(f64::INFINITY, f64::min);
            let records = s["records_per_s"].as_f64().expect("records/s");
            assert!((records - r1(slowest * 10.0)).abs() <= 1.0, "{store}: {v}");
            let p50 = s["append_p50_ms"].as_f64().expect("p50");
            let p99 = s["append_p99_ms"].as_f64().expect("p99");
            assert!(p50 > 0.0 && p99 >= p50, "{store}: {v}");
        }
        assert!(v["sled_vs_file"].as_f64().expect("ratio") > 0.0);
        assert!(ceiling_line(&v).contains("sled "), "{}", ceiling_line(&v));
        // The scratch stores are gone.
        assert_eq!(std::fs::read_dir(dir.path()).expect("ls").count(), 0);
    }

    #[test]
    fn a_dir_that_cannot_hold_stores_is_an_error_in_the_json() {
        let dir = tempfile::tempdir().expect("dir");
        let p = CeilingParams {
            nodes: 2,
            entry: Arc::new(vec![1; 16]),
            records_per_entry: 1,
            secs: 1.0,
            max_entries: 1,
        };
        let v = storage_ceiling(&dir.path().join("missing"), &p);
        assert!(v["sled"]["error"].is_string(), "{v}");
        assert!(v["file"]["error"].is_string(), "{v}");
        assert!(v.get("sled_vs_file").is_none());
        assert!(ceiling_line(&v).contains("sled failed"));
    }
}
