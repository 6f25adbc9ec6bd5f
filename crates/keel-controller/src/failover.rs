//! The classic `onControllerFailover`, minus the ZooKeeper reads: the image
//! is already in memory, so activation only resumes unfinished work.

use crate::active::Command;
use crate::shared::Shared;
use crate::tasks::take;

/// Queues the first command of a new activation: elect every partition that
/// can get a leader, and finish reassignments whose replicas caught up.
pub(crate) fn on_activation(shared: &Shared, epoch: u64) {
    let Ok(guard) = shared.active.read() else {
        return;
    };
    let Some(handle) = guard.as_ref().filter(|h| h.epoch == epoch) else {
        return;
    };
    let cmd = Command::internal("failover", |image, _env| {
        let mut work = image.clone();
        let mut records = Vec::new();
        let d = work.decide_elect_offline();
        take(&mut work, &mut records, d);
        let d = work.decide_reassignment_progress();
        take(&mut work, &mut records, d);
        crate::active::Proposal::with_reply(records, Ok(()))
    });
    if handle.tx.try_send(cmd).is_err() {
        tracing::warn!("event queue full at activation; reconciliation waits for the next tick");
    }
}
