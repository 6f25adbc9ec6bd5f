//! Periodic work of the active controller, run as commands on its loop.

use crate::events::count;
use std::sync::Arc;
use std::time::Duration;

use keel_metadata::decide::Chain;
use keel_metadata::{ApiError, MetadataImage, MetadataRecord, RecordBatch};

use crate::channel::DeletionReport;
use crate::command::{Command, CommandKind, Proposal};
use crate::shared::Shared;

/// Period of the housekeeping tick (session expiry, reconciliation).
pub const TICK: Duration = Duration::from_millis(200);

/// Reconciliation (offline elections, reassignment progress, deletions,
/// gauges) runs every this many ticks: it scans every partition, so not on
/// every tick, and not before a new activation served its first requests.
const RECONCILE_EVERY_TICKS: u64 = 10;

/// The proposal of every decision `chain` kept, answered with `reply`,
/// with the chain's proof of its image. A decision the chain dropped (its
/// records did not replay: a bug in its decide function) is logged.
pub(crate) fn chain_proposal<T: Send + 'static>(
    chain: Chain,
    reply: Result<T, ApiError>,
) -> Proposal<T> {
    let (records, proof, dropped) = chain.finish();
    for e in dropped {
        tracing::error!(error = %e, "a chained decision does not replay; dropped");
    }
    Proposal::with_reply(records, reply).with_replayed(proof)
}

/// Whether housekeeping tick number `tick` (1, 2, ... in an activation)
/// also reconciles.
pub(crate) fn reconciles(tick: u64) -> bool {
    tick.is_multiple_of(RECONCILE_EVERY_TICKS)
}

/// Session expiry, one broker per decision (each sees the previous one's
/// effect), and, on every few ticks (`tick` counts them), reconciliation of
/// leaderless partitions and reassignments whose new replicas caught up.
///
/// It only decides: the sessions of fenced brokers are dropped once their
/// fence commits ([`after_commit`]).
pub(crate) fn housekeeping(shared: Arc<Shared>, tick: u64) -> Command {
    Command::internal(CommandKind::Housekeeping, move |image, env| {
        let mut chain = Chain::new(image);
        let mut stop = Vec::new();
        // A leader whose lease ran out (cut off from its majority, or just
        // resumed from a pause) decides nothing: its broker sessions may
        // have moved to another controller, and the leadership watch is
        // about to resign the role.
        if !shared.lease_valid() {
            return chain_proposal(chain, Ok(())).with_stop_replicas(stop);
        }
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
        }
        if reconciles(tick) {
            chain.decide(|image| image.decide_elect_offline());
            chain.decide(|image| image.decide_reassignment_progress());
            stop.extend(deletion_progress(&mut chain));
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
        chain_proposal(chain, Ok(())).with_stop_replicas(stop)
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
        chain_proposal(chain, Ok(()))
    })
}

/// What committed entries cause outside the image, on the active
/// controller, from their records: a registration starts the broker's
/// session (its epoch is its entry's index); a fence or unregistration
/// ends it.
pub(crate) fn after_commit<'a>(
    shared: &Shared,
    entries: impl IntoIterator<Item = (&'a RecordBatch, &'a u64)>,
) {
    let Ok(mut t) = shared.heartbeats.lock() else {
        return;
    };
    let now = crate::shared::now_ms();
    for (batch, index) in entries {
        for r in batch.records.iter() {
            match r {
                MetadataRecord::RegisterBroker(reg) => {
                    t.touch(reg.broker, keel_metadata::BrokerEpoch(*index), now)
                }
                MetadataRecord::FenceBroker { broker, .. }
                | MetadataRecord::UnregisterBroker { broker, .. } => t.remove(*broker),
                _ => {}
            }
        }
    }
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
    /// Partitions that got a new leader (clean or unclean elections).
    elected_count: usize,
}

impl ChangeSummary {
    pub(crate) fn of<'a, I>(records: I) -> Self
    where
        I: IntoIterator<Item = &'a MetadataRecord>,
        I::IntoIter: Clone,
    {
        let records = records.into_iter();
        // A deletion takes its topic's partitions offline on purpose: that
        // is the deletion (the console says so), not partitions going
        // offline. Its mark follows the leader changes, so a first scan
        // finds it (no copy of the batch; an empty set allocates nothing).
        let deleted: std::collections::BTreeSet<keel_metadata::TopicId> = records
            .clone()
            .filter_map(|r| match r {
                MetadataRecord::MarkTopicForDeletion { topic_id } => Some(*topic_id),
                _ => None,
            })
            .collect();
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
                    if c.leader == keel_metadata::LeaderChange::NoLeader
                        && !deleted.contains(&c.topic_id)
                    {
                        s.offline_count += 1;
                        if s.offline.len() < 5 {
                            s.offline.push(name());
                        }
                    }
                    if matches!(c.leader, keel_metadata::LeaderChange::To(_)) {
                        s.elected_count += 1;
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

    /// Partitions that lost their leader and are not being deleted.
    #[cfg(test)]
    pub(crate) fn offline_count(&self) -> usize {
        self.offline_count
    }

    /// Logs the summary, counts leader elections (clean and unclean) and
    /// keeps the lines for the console, once committed.
    pub(crate) fn log(&self, node: u64, term: u64, index: u64, events: &crate::events::Events) {
        for (what, broker, epoch) in &self.brokers {
            tracing::info!(node, term, index, broker, broker_epoch = epoch, "{what}");
            // A registration's epoch is its entry's index, not known when
            // the summary was made.
            let text = if *epoch == 0 {
                format!("{what}: broker {broker}")
            } else {
                format!("{what}: broker {broker} (epoch {epoch})")
            };
            events.push(term, index, text);
        }
        if self.offline_count > 0 {
            tracing::warn!(node, term, index, count = self.offline_count, sample = ?self.offline, "partitions went offline (no eligible leader)");
            events.push(
                term,
                index,
                format!(
                    "{} went offline (no eligible leader)",
                    count(self.offline_count, "partition")
                ),
            );
        }
        let clean = self.elected_count.saturating_sub(self.unclean_count);
        if clean > 0 {
            metrics::counter!("keel_controller_clean_leader_elections_total")
                .increment(clean as u64);
            events.push(
                term,
                index,
                format!(
                    "{} got a new leader from the ISR",
                    count(clean, "partition")
                ),
            );
        }
        if self.unclean_count > 0 {
            tracing::warn!(node, term, index, count = self.unclean_count, sample = ?self.unclean, "unclean leader election");
            metrics::counter!("keel_controller_unclean_elections_total")
                .increment(self.unclean_count as u64);
            events.push(
                term,
                index,
                format!(
                    "{} elected a leader uncleanly (outside the ISR)",
                    count(self.unclean_count, "partition")
                ),
            );
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

/// Cluster-wide gauges read off the image: a full scan, made when the
/// metrics are scraped (every node, standbys too), never on the event loop.
pub(crate) fn publish_image_gauges(image: &MetadataImage) {
    let mut offline = 0u64;
    let mut preferred_total = 0u64;
    let mut not_preferred = 0u64;
    let mut under_replicated = 0u64;
    let mut under_min_isr = 0u64;
    // Partitions come topic by topic: the topic's min ISR is read once.
    let mut cached: Option<(keel_metadata::TopicId, usize)> = None;
    // Likewise whether it is being deleted: its partitions are leaderless
    // because of the deletion, and are not counted offline.
    let mut deleting: Option<(keel_metadata::TopicId, bool)> = None;
    for (tp, p) in image.partitions() {
        let topic_deleting = match deleting {
            Some((t, d)) if t == tp.topic_id => d,
            _ => {
                let d = image
                    .topic(tp.topic_id)
                    .is_some_and(|t| t.marked_for_deletion());
                deleting = Some((tp.topic_id, d));
                d
            }
        };
        if p.leader.is_none() && !topic_deleting {
            offline += 1;
        }
        if p.isr.len() < p.replicas.len() {
            under_replicated += 1;
        }
        let topic_min_isr = match cached {
            Some((t, m)) if t == tp.topic_id => m,
            _ => {
                let m = min_isr(image, tp.topic_id);
                cached = Some((tp.topic_id, m));
                m
            }
        };
        if p.isr.len() < topic_min_isr {
            under_min_isr += 1;
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
    metrics::gauge!("keel_controller_under_replicated_partitions").set(under_replicated as f64);
    metrics::gauge!("keel_controller_under_min_isr_partitions").set(under_min_isr as f64);
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
/// A topic's `min.insync.replicas`: its own, else the cluster default,
/// else 1.
pub(crate) fn min_isr(
    image: &keel_metadata::MetadataImage,
    topic: keel_metadata::TopicId,
) -> usize {
    image
        .topic(topic)
        .map_or(1, |t| image.min_insync_replicas(t))
}
