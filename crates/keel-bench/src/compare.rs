//! Scenario `compare`: the `commit` workload against ZooKeeper, etcd and Keel.

use crate::{Env, Report};

/// Parameters of the `compare` scenario.
#[derive(Clone, Debug)]
pub struct CompareParams {
    /// Concurrent writers per level.
    pub writers: Vec<usize>,
    /// Wall time per level and system.
    pub level_secs: f64,
    /// Trials per level and system.
    pub trials: usize,
    /// Bytes per value.
    pub value_bytes: usize,
    /// ZooKeeper ensemble `host:port`s (empty = skip ZooKeeper).
    pub zookeeper: Vec<String>,
    /// etcd endpoints (empty = skip etcd).
    pub etcd: Vec<String>,
}

impl Default for CompareParams {
    fn default() -> Self {
        Self {
            writers: vec![1, 16, 64],
            level_secs: 10.0,
            trials: 3,
            value_bytes: 100,
            zookeeper: Vec::new(),
            etcd: Vec::new(),
        }
    }
}

/// Runs the scenario.
pub async fn run(_env: &Env, _p: &CompareParams) -> anyhow::Result<Report> {
    anyhow::bail!("the compare scenario is being built")
}
