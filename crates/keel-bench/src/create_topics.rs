//! Scenario `create-topics`: 100,000 partitions (RF 3) created through the
//! admin API, then deleted.

use crate::{Env, Report};

/// Parameters of the `create-topics` scenario.
#[derive(Clone, Debug)]
pub struct CreateTopicsParams {
    /// Trials (a fresh cluster each).
    pub trials: usize,
    /// Partitions created per trial.
    pub partitions: u64,
}

impl Default for CreateTopicsParams {
    fn default() -> Self {
        Self {
            trials: 3,
            partitions: 100_000,
        }
    }
}

/// Runs the scenario.
pub async fn run(_env: &Env, _p: &CreateTopicsParams) -> anyhow::Result<Report> {
    anyhow::bail!("the create-topics scenario is being built")
}
