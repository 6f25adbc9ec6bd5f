//! Periodic work of the active controller, run as commands on its loop.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use keel_metadata::decide::Decision;
use keel_metadata::{ApiError, MetadataImage, MetadataRecord};

use crate::channel::DeletionReport;
use crate::command::{Command, CommandKind, Proposal};
use crate::shared::Shared;

/// Period of the housekeeping tick (session expiry, reconciliation).
pub const TICK: Duration = Duration::from_millis(200);

/// Reconciliation (offline elections, reassignment progress, deletions,
/// gauges) runs every this many ticks: it scans every partition, so not on
/// every tick, and not before a new activation served its first requests.
const RECONCILE_EVERY_TICKS: u64 = 10;

/// Decisions chained on one working image, each seeing the effects of the
/// ones before it (housekeeping, deletion steps). The loop adopts the
/// working image instead of replaying the records a second time: fencing a
/// broker that leads 100,000 partitions replays them once, not twice.
pub(crate) struct Chain {
    work: MetadataImage,
    records: Vec<MetadataRecord>,
    /// A decision stopped replaying part-way: the working image holds
    /// records that `records` does not, so the loop must not adopt it.
    broken: bool,
}

impl Chain {
    /// A chain on (an O(1) clone of) the image the decide step was given.
    pub(crate) fn new(image: &MetadataImage) -> Self {
        Self {
            work: image.clone(),
            records: Vec::new(),
            broken: false,
        }
    }

    /// The image with every decision taken so far.
    pub(crate) fn image(&self) -> &MetadataImage {
        &self.work
    }

    /// Makes a decision on the working image, applies it there (taking the
    /// decision's own replayed image when it kept one) and keeps its records.
    pub(crate) fn decide<R>(&mut self, f: impl FnOnce(&MetadataImage) -> Decision<R>) -> R {
        let d = f(&self.work);
        if let Some(image) = d.replayed {
            self.work = image;
            self.records.extend(d.records);
            return d.reply;
        }
        let offset = self.work.offset() + 1;
        for r in &d.records {
            if let Err(e) = self.work.replay(r, offset) {
                // The loop replays the kept records again on its own image
                // (the working image is not handed over); this only stops
                // the bad decision.
                tracing::error!(error = %e, "chained decision does not replay");
                self.broken = true;
                return d.reply;
            }
        }
        self.records.extend(d.records);
        d.reply
    }

    /// The proposal of every decision taken, answered with `reply`.
    pub(crate) fn proposal<T: Send + 'static>(self, reply: Result<T, ApiError>) -> Proposal<T> {
        let image = (!self.broken).then_some(self.work);
        Proposal::with_reply(self.records, reply).with_replayed(image)
    }
}

/// Session expiry, one broker per decision (each sees the previous one's
/// effect), and, every few ticks, reconciliation of leaderless partitions and
/// reassignments whose new replicas caught up.
pub(crate) fn housekeeping(shared: Arc<Shared>) -> Command {
    Command::internal(CommandKind::Housekeeping, move |image, env| {
        let mut chain = Chain::new(image);
        let mut stop = Vec::new();
        let expired = match shared.heartbeats.lock() {
            Ok(t) => t.expired(env.now_ms),
            Err(_) => Vec::new(),
        };
        for b in expired {
            if chain.image().broker(b).is_some_and(|r| !r.fenced) {
                tracing::warn!(
                    node = shared.config.node_id,
                    term = env.epoch,
                    broker = b.0,
                    "broker session expired; fencing it"
                );
                metrics::counter!("keel_controller_timed_out_heartbeats_total").increment(1);
                chain.decide(|image| image.decide_fence_broker(b));
            }
            if let Ok(mut t) = shared.heartbeats.lock() {
                t.remove(b);
            }
        }
        let tick = shared.ticks.fetch_add(1, Ordering::Relaxed) + 1;
        if tick.is_multiple_of(RECONCILE_EVERY_TICKS) {
            chain.decide(|image| image.decide_elect_offline());
            chain.decide(|image| image.decide_reassignment_progress());
            stop.extend(deletion_progress(&mut chain));
            publish_image_gauges(chain.image());
        }
        let rebalance_every = shared.config.auto_rebalance_interval_ms / TICK.as_millis() as u64;
        if rebalance_every > 0 && tick > 0 && tick.is_multiple_of(rebalance_every) {
            let threshold = shared.config.auto_rebalance_threshold_pct;
            let moved = chain.decide(|image| image.decide_auto_rebalance(threshold));
            if !moved.is_empty() {
                tracing::info!(
                    partitions = moved.len(),
                    "auto rebalance: preferred leaders restored"
                );
            }
        }
        chain.proposal(Ok(())).with_stop_replicas(stop)
    })
}

/// Records what a broker answered to `StopReplica(delete)`
/// (DeletionSuccessful / DeletionIneligible) and removes topics whose
/// every replica is gone.
pub(crate) fn replica_deletion_results(report: DeletionReport) -> Command {
    Command::internal(CommandKind::ReplicaDeletionResults, move |image, _| {
        let mut chain = Chain::new(image);
        for (topic, results) in &report.results {
            let done = chain.decide(|image| image.decide_replica_deletion_results(*topic, results));
            if done {
                tracing::info!(topic = %topic, "topic deletion complete");
            }
        }
        chain.proposal(Ok(()))
    })
}

/// What an operator wants to hear about a committed batch: one line per
/// broker state change, one summary line for partitions that went offline
/// or were elected uncleanly.
#[derive(Default)]
pub(crate) struct ChangeSummary {
    brokers: Vec<(&'static str, u32, u64)>,
    offline: Vec<String>,
    offline_count: usize,
    unclean: Vec<String>,
    unclean_count: usize,
}

impl ChangeSummary {
    pub(crate) fn of(records: &[MetadataRecord]) -> Self {
        let mut s = Self::default();
        for r in records {
            match r {
                MetadataRecord::RegisterBroker(b) => {
                    s.brokers
                        .push(("broker registered (fenced until caught up)", b.broker.0, 0))
                }
                MetadataRecord::FenceBroker { broker, epoch } => {
                    s.brokers.push(("broker fenced", broker.0, epoch.0))
                }
                MetadataRecord::UnfenceBroker { broker, epoch } => {
                    s.brokers.push(("broker unfenced", broker.0, epoch.0))
                }
                MetadataRecord::BrokerShuttingDown { broker, epoch } => {
                    s.brokers
                        .push(("broker in controlled shutdown", broker.0, epoch.0))
                }
                MetadataRecord::UnregisterBroker { broker, epoch } => {
                    s.brokers.push(("broker unregistered", broker.0, epoch.0))
                }
                MetadataRecord::LogDirsOffline { broker, epoch, .. } => {
                    s.brokers
                        .push(("broker log dir offline", broker.0, epoch.0))
                }
                MetadataRecord::PartitionChange(c) => {
                    let name = || format!("{}-{}", c.topic_id, c.partition.0);
                    if c.leader == keel_metadata::LeaderChange::NoLeader {
                        s.offline_count += 1;
                        if s.offline.len() < 5 {
                            s.offline.push(name());
                        }
                    }
                    if c.unclean {
                        s.unclean_count += 1;
                        if s.unclean.len() < 5 {
                            s.unclean.push(name());
                        }
                    }
                }
                _ => {}
            }
        }
        s
    }

    /// Logs the summary and counts unclean elections, once committed.
    pub(crate) fn log(&self, node: u64, term: u64, index: u64) {
        for (what, broker, epoch) in &self.brokers {
            tracing::info!(node, term, index, broker, broker_epoch = epoch, "{what}");
        }
        if self.offline_count > 0 {
            tracing::warn!(node, term, index, count = self.offline_count, sample = ?self.offline, "partitions went offline (no eligible leader)");
        }
        if self.unclean_count > 0 {
            tracing::warn!(node, term, index, count = self.unclean_count, sample = ?self.unclean, "unclean leader election");
            metrics::counter!("keel_controller_unclean_elections_total")
                .increment(self.unclean_count as u64);
        }
    }
}

/// The classic deletion manager's step for every topic marked for deletion:
/// replicas move through the deletion state machine, and the returned
/// replicas get `StopReplica(delete)` once the records commit.
pub(crate) fn deletion_progress(
    chain: &mut Chain,
) -> Vec<(keel_metadata::TopicPartition, keel_metadata::BrokerId)> {
    let marked: Vec<keel_metadata::TopicId> = chain
        .image()
        .topics()
        .filter(|t| t.marked_for_deletion())
        .map(|t| t.id)
        .collect();
    deletion_progress_of(chain, &marked)
}

/// The deletion manager's step for these topics only.
pub(crate) fn deletion_progress_of(
    chain: &mut Chain,
    topics: &[keel_metadata::TopicId],
) -> Vec<(keel_metadata::TopicPartition, keel_metadata::BrokerId)> {
    let mut stop = Vec::new();
    for topic in topics {
        if !chain
            .image()
            .topic(*topic)
            .is_some_and(|t| t.marked_for_deletion())
        {
            continue;
        }
        let step = chain.decide(|image| image.decide_deletion_progress(*topic));
        if let Some(why) = &step.paused {
            tracing::debug!(topic = %topic, why = %why, "topic deletion paused");
        }
        stop.extend(step.send_stop_replica);
    }
    stop
}

/// Cluster-wide gauges read off the image (a full scan: reconcile cadence).
pub(crate) fn publish_image_gauges(image: &MetadataImage) {
    let mut offline = 0u64;
    let mut preferred_total = 0u64;
    let mut not_preferred = 0u64;
    for (_, p) in image.partitions() {
        if p.leader.is_none() {
            offline += 1;
        }
        if let Some(first) = p.replicas.first() {
            preferred_total += 1;
            if p.leader != Some(*first) {
                not_preferred += 1;
            }
        }
    }
    let (mut active, mut fenced) = (0u64, 0u64);
    for b in image.brokers() {
        if b.fenced {
            fenced += 1;
        } else {
            active += 1;
        }
    }
    metrics::gauge!("keel_controller_topics").set(image.topic_count() as f64);
    metrics::gauge!("keel_controller_partitions").set(image.partition_count() as f64);
    metrics::gauge!("keel_controller_offline_partitions").set(offline as f64);
    metrics::gauge!("keel_controller_preferred_replica_imbalance").set(not_preferred as f64);
    metrics::gauge!("keel_controller_preferred_replica_imbalance_ratio").set(
        if preferred_total == 0 {
            0.0
        } else {
            not_preferred as f64 / preferred_total as f64
        },
    );
    metrics::gauge!("keel_controller_active_brokers").set(active as f64);
    metrics::gauge!("keel_controller_fenced_brokers").set(fenced as f64);
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_metadata::synthetic::SyntheticCluster;
    use keel_metadata::BrokerId;

    fn image() -> MetadataImage {
        SyntheticCluster {
            brokers: 3,
            topics: 2,
            partitions_per_topic: 3,
        }
        .image()
        .expect("synthetic cluster replays")
        .0
    }

    /// `base` with `records` replayed at its next offset.
    fn replayed_on(base: &MetadataImage, records: &[MetadataRecord]) -> MetadataImage {
        let mut image = base.clone();
        for r in records {
            image.replay(r, base.offset() + 1).expect("replays");
        }
        image
    }

    #[test]
    fn a_chain_hands_over_the_image_of_all_its_records() {
        let base = image();
        let mut chain = Chain::new(&base);
        // Fencing keeps no image of its own (the chain replays it); the
        // next decision sees it and keeps one (the chain adopts it).
        chain.decide(|image| image.decide_fence_broker(BrokerId(0)));
        assert!(chain.image().broker(BrokerId(0)).unwrap().fenced);
        let epoch = chain.image().broker(BrokerId(1)).unwrap().epoch;
        let reply = chain.decide(|image| image.decide_controlled_shutdown(BrokerId(1), epoch));
        assert!(reply.is_ok());
        assert!(chain.image().broker(BrokerId(1)).unwrap().shutting_down);
        let p = chain.proposal(Ok(()));
        assert!(!p.records.is_empty());
        let handed = p.replayed().expect("a whole chain is handed over");
        assert!(*handed == replayed_on(&base, &p.records));
    }

    #[test]
    fn a_broken_chain_keeps_its_image_to_itself() {
        let base = image();
        let mut chain = Chain::new(&base);
        let epoch = base.broker(BrokerId(2)).unwrap().epoch;
        // A decision whose second record does not replay (a bug in a
        // decide step): its first record is already in the chain's image.
        let bad = Decision {
            records: vec![
                MetadataRecord::BrokerShuttingDown {
                    broker: BrokerId(2),
                    epoch,
                },
                MetadataRecord::FenceBroker {
                    broker: BrokerId(42),
                    epoch,
                },
            ],
            reply: (),
            replayed: None,
        };
        chain.decide(|_| bad);
        let p = chain.proposal(Ok(()));
        assert!(
            p.records.is_empty(),
            "the bad decision's records are dropped"
        );
        assert!(
            p.replayed().is_none(),
            "its half-replayed image is not handed over"
        );
    }
}
