//! `keel bench`: benchmark scenarios against real local clusters.
//!
//! Every scenario starts real `keel controller` (and `keel broker`)
//! processes with the cluster kit (`keel_testkit`, see [`cluster`]) on their
//! own 127.0.x.y addresses with data in a temp dir, drives them from a load
//! generator in this process, and returns a
//! [`Report`]: a JSON document (the key names are a contract), a compact
//! human table and a one-line summary. Every loop is bounded in count and
//! time; the clusters are killed on drop, also on error.

pub mod broker_failure;
pub mod ceiling;
pub mod cluster;
pub mod commit;
pub mod compare;
pub mod create_topics;
pub mod echo;
pub mod failover;
pub mod heartbeats;
mod history;
pub mod kafka_auth;
pub mod kafka_metadata;
mod load;
pub use load::Connections;
pub mod scale;
pub mod stats;
mod tail;
pub mod tls;

use std::path::{Path, PathBuf};

/// What a scenario hands back.
pub struct Report {
    /// Scenario name (`commit`, `failover`, `heartbeats`, `broker-failure`); the file is `<name>.json`.
    pub scenario: &'static str,
    pub json: serde_json::Value,
    pub table: String,
    pub summary: String,
}

impl Report {
    /// Writes `<dir>/<scenario>.json`; returns its path.
    pub fn write(&self, dir: &Path) -> anyhow::Result<PathBuf> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("{}.json", self.scenario));
        let text = serde_json::to_string_pretty(&self.json)?;
        std::fs::write(&path, text + "\n")?;
        Ok(path)
    }
}

/// Where the `keel` binary is (the bench spawns controllers from it).
#[derive(Clone, Debug)]
pub struct Env {
    pub exe: PathBuf,
}

/// Progress lines go to stderr so stdout stays the table (and JSON).
#[macro_export]
macro_rules! progress {
    ($($t:tt)*) => {{
        eprintln!("[bench] {}", format!($($t)*));
    }};
}
