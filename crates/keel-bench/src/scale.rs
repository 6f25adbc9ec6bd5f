//! Scenario `scale`: a 1,000,000-partition image (RF 3).

use crate::{Env, Report};

/// Parameters of the `scale` scenario.
#[derive(Clone, Debug)]
pub struct ScaleParams {
    /// Partitions in the image.
    pub partitions: u64,
}

impl Default for ScaleParams {
    fn default() -> Self {
        Self {
            partitions: 1_000_000,
        }
    }
}

/// Runs the scenario.
pub async fn run(_env: &Env, _p: &ScaleParams) -> anyhow::Result<Report> {
    anyhow::bail!("the scale scenario is being built")
}
