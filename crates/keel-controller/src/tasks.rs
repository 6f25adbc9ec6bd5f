//! Periodic work of the active controller, run as commands on its loop.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use keel_metadata::decide::Decision;
use keel_metadata::{MetadataImage, MetadataRecord};

use crate::active::{Command, Proposal};
use crate::shared::Shared;

/// Reconciliation (offline elections, reassignment progress, deletions,
/// gauges) runs every this many ticks: it scans every partition, so not on
/// every tick, and not before a new activation served its first requests.
const RECONCILE_EVERY_TICKS: u64 = 10;

/// Replays a decision onto the working image and keeps its records.
pub(crate) fn take<R>(
    work: &mut MetadataImage,
    records: &mut Vec<MetadataRecord>,
    d: Decision<R>,
) -> R {
    let offset = work.offset() + 1;
    for r in &d.records {
        if let Err(e) = work.replay(r, offset) {
            // The loop re-checks every record; this only stops the chain.
            tracing::error!(error = %e, "housekeeping decision does not replay");
            return d.reply;
        }
    }
    records.extend(d.records);
    d.reply
}

/// Session expiry, one broker per decision (each sees the previous one's
/// effect), and, every few ticks, reconciliation of leaderless partitions and
/// reassignments whose new replicas caught up.
pub(crate) fn housekeeping(shared: Arc<Shared>) -> Command {
    Command::internal("housekeeping", move |image, env| {
        let mut work = image.clone();
        let mut records = Vec::new();
        let mut stop = Vec::new();
        let expired = match shared.heartbeats.lock() {
            Ok(t) => t.expired(env.now_ms),
            Err(_) => Vec::new(),
        };
        for b in expired {
            if work.broker(b).is_some_and(|r| !r.fenced) {
                tracing::warn!(
                    node = shared.config.node_id,
                    term = env.epoch,
                    broker = b.0,
                    "broker session expired; fencing it"
                );
                metrics::counter!("keel_controller_timed_out_heartbeats_total").increment(1);
                let d = work.decide_fence_broker(b);
                take(&mut work, &mut records, d);
            }
            if let Ok(mut t) = shared.heartbeats.lock() {
                t.remove(b);
            }
        }
        let tick = shared.ticks.fetch_add(1, Ordering::Relaxed) + 1;
        if tick.is_multiple_of(RECONCILE_EVERY_TICKS) {
            let d = work.decide_elect_offline();
            take(&mut work, &mut records, d);
            let d = work.decide_reassignment_progress();
            take(&mut work, &mut records, d);
            stop.extend(deletion_progress(&mut work, &mut records));
            publish_image_gauges(&work);
        }
        let rebalance_every =
            shared.config.auto_rebalance_interval_ms / crate::active::TICK.as_millis() as u64;
        if rebalance_every > 0 && tick > 0 && tick.is_multiple_of(rebalance_every) {
            let d = work.decide_auto_rebalance(shared.config.auto_rebalance_threshold_pct);
            let moved = take(&mut work, &mut records, d);
            if !moved.is_empty() {
                tracing::info!(
                    partitions = moved.len(),
                    "auto rebalance: preferred leaders restored"
                );
            }
        }
        Proposal::with_reply(records, Ok(())).with_stop_replicas(stop)
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
    work: &mut MetadataImage,
    records: &mut Vec<MetadataRecord>,
) -> Vec<(keel_metadata::TopicPartition, keel_metadata::BrokerId)> {
    let marked: Vec<keel_metadata::TopicId> = work
        .topics()
        .filter(|t| t.marked_for_deletion())
        .map(|t| t.id)
        .collect();
    deletion_progress_of(work, records, &marked)
}

/// The deletion manager's step for these topics only.
pub(crate) fn deletion_progress_of(
    work: &mut MetadataImage,
    records: &mut Vec<MetadataRecord>,
    topics: &[keel_metadata::TopicId],
) -> Vec<(keel_metadata::TopicPartition, keel_metadata::BrokerId)> {
    let mut stop = Vec::new();
    for topic in topics {
        if !work.topic(*topic).is_some_and(|t| t.marked_for_deletion()) {
            continue;
        }
        let d = work.decide_deletion_progress(*topic);
        let step = take(work, records, d);
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
