//! Partition decisions: ISR changes reported by leaders (AlterPartition),
//! preferred and unclean leader elections, offline elections and the
//! automatic preferred-leader rebalance.

use std::collections::BTreeMap;

use crate::decide::{
    broker_list, election_change, eligible, has_duplicates, partition_name, Decision, Working,
};
use crate::error::{ApiError, ErrorCode};
use crate::ids::{BrokerEpoch, BrokerId, LeaderEpoch, PartitionEpoch, TopicPartition};
use crate::image::{MetadataImage, PartitionImage};
use crate::records::PartitionChangeRecord;
use crate::selectors;

/// One partition of an AlterPartition request: the leader proposes a new
/// ISR, naming the epochs it last saw (optimistic concurrency).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlterPartitionItem {
    /// The partition the sender leads.
    pub tp: TopicPartition,
    /// Must be the current leader epoch.
    pub leader_epoch: LeaderEpoch,
    /// Must be the current partition epoch.
    pub partition_epoch: PartitionEpoch,
    /// The full proposed ISR (not a diff); must include the leader.
    pub new_isr: Vec<BrokerId>,
}

/// Which election an ElectLeaders request asks for.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ElectionKind {
    /// Move leadership back to the first assigned replica.
    Preferred,
    /// Give a leaderless partition a leader, from outside the ISR if need be.
    Unclean,
}

fn api(code: ErrorCode, message: impl Into<String>) -> ApiError {
    ApiError::new(code, message)
}

/// Refuses with `code` a request about partition `name` made at the
/// `kind` epoch `got` when the partition is at `current`.
fn check_current_epoch(
    code: ErrorCode,
    name: &str,
    kind: &str,
    (got, current): (u32, u32),
) -> Result<(), ApiError> {
    if got != current {
        return Err(api(
            code,
            format!("{name}: {kind} epoch {got} is not the current {current}"),
        ));
    }
    Ok(())
}

/// The partition, or why it cannot be acted on (unknown, or its topic is
/// being deleted).
fn live_partition<'a>(
    image: &'a MetadataImage,
    tp: &TopicPartition,
) -> Result<&'a PartitionImage, ApiError> {
    let t = image.topic(tp.topic_id).ok_or_else(|| {
        api(
            ErrorCode::UnknownTopic,
            format!("topic {} does not exist", tp.topic_id),
        )
    })?;
    let p = image.partition(tp).ok_or_else(|| {
        api(
            ErrorCode::UnknownPartition,
            format!("partition {}-{} does not exist", t.name, tp.partition.0),
        )
    })?;
    if t.marked_for_deletion() {
        return Err(api(
            ErrorCode::TopicDeletionInProgress,
            format!("topic {} is being deleted", t.name),
        ));
    }
    Ok(p)
}

fn same_set(a: &[BrokerId], b: &[BrokerId]) -> bool {
    let (mut a, mut b) = (a.to_vec(), b.to_vec());
    a.sort_unstable();
    b.sort_unstable();
    a == b
}

impl MetadataImage {
    /// Applies ISR changes proposed by partition leaders. The whole request
    /// is refused for an unknown broker or a stale broker epoch; each item
    /// is checked on its own against the leader and partition epochs. The
    /// reply carries each partition's state after the change, including a
    /// reassignment the new ISR lets complete.
    #[allow(clippy::type_complexity)]
    pub fn decide_alter_partition(
        &self,
        broker: BrokerId,
        broker_epoch: BrokerEpoch,
        items: &[AlterPartitionItem],
    ) -> Decision<Result<Vec<(TopicPartition, Result<PartitionImage, ApiError>)>, ApiError>> {
        match self.broker(broker) {
            None => {
                return Decision::reply_only(Err(api(
                    ErrorCode::UnknownBroker,
                    format!("broker {broker} is not registered"),
                )))
            }
            Some(b) if b.epoch != broker_epoch => {
                return Decision::reply_only(Err(api(
                    ErrorCode::StaleBrokerEpoch,
                    format!(
                        "broker {broker} sent epoch {}, but its registration has epoch {}",
                        broker_epoch.0, b.epoch.0
                    ),
                )))
            }
            Some(_) => {}
        }
        let mut w = Working::new(self);
        let mut replies = Vec::with_capacity(items.len());
        for item in items {
            let outcome = alter_one(&mut w, broker, item);
            replies.push((item.tp, outcome));
        }
        w.finish(Ok(replies))
    }

    /// Preferred or unclean leader election for `partitions`, or for every
    /// partition when `None` (then only partitions acted on or failed on
    /// are reported; ones needing no election are left out).
    pub fn decide_elect_leaders(
        &self,
        kind: ElectionKind,
        partitions: Option<&[TopicPartition]>,
    ) -> Decision<Vec<(TopicPartition, Result<BrokerId, ApiError>)>> {
        let mut w = Working::new(self);
        let mut replies = Vec::new();
        match partitions {
            Some(tps) => {
                for tp in tps {
                    let outcome = elect_one(&mut w, kind, tp);
                    replies.push((*tp, outcome));
                }
            }
            None => {
                let candidates: Vec<TopicPartition> = self
                    .partitions()
                    .filter(|(tp, p)| {
                        let wanted = match kind {
                            ElectionKind::Preferred => p.leader != p.replicas.first().copied(),
                            ElectionKind::Unclean => p.leader.is_none(),
                        };
                        wanted
                            && self
                                .topic(tp.topic_id)
                                .is_some_and(|t| !t.marked_for_deletion())
                    })
                    .map(|(tp, _)| *tp)
                    .collect();
                for tp in candidates {
                    let outcome = elect_one(&mut w, kind, &tp);
                    if outcome
                        .as_ref()
                        .is_err_and(|e| e.code == ErrorCode::ElectionNotNeeded)
                    {
                        continue;
                    }
                    replies.push((tp, outcome));
                }
            }
        }
        w.finish(replies)
    }

    /// Elects a leader for every leaderless partition that can get one now
    /// (unclean only where the topic allows it). Topics being deleted stay
    /// leaderless.
    pub fn decide_elect_offline(&self) -> Decision<()> {
        let mut w = Working::new(self);
        let mut changes = Vec::new();
        let mut unclean_of = BTreeMap::new();
        for (tp, p) in self.partitions() {
            if p.leader.is_some() {
                continue;
            }
            let unclean = *unclean_of.entry(tp.topic_id).or_insert_with(|| {
                self.topic(tp.topic_id).and_then(|t| {
                    (!t.marked_for_deletion()).then(|| self.unclean_leader_election(t))
                })
            });
            let Some(unclean) = unclean else { continue };
            if let Ok(e) = selectors::offline_partition(p, |b| eligible(self, tp, b), unclean) {
                changes.push(election_change(tp, p, &e));
            }
        }
        for c in changes {
            w.change(c);
        }
        w.finish(())
    }

    /// The automatic preferred-leader rebalance. For each broker, the
    /// imbalance is the share of the partitions it is preferred leader for
    /// that someone else leads; above `imbalance_threshold_pct` percent,
    /// those partitions get preferred elections (skipping partitions being
    /// reassigned or deleted, and ones whose preferred replica cannot lead).
    /// Replies with the partitions whose leader moved.
    pub fn decide_auto_rebalance(
        &self,
        imbalance_threshold_pct: u32,
    ) -> Decision<Vec<TopicPartition>> {
        // preferred broker -> (partitions it is preferred for, led by others)
        let mut per_broker: BTreeMap<BrokerId, (u64, Vec<TopicPartition>)> = BTreeMap::new();
        for (tp, p) in self.partitions() {
            let Some(&preferred) = p.replicas.first() else {
                continue;
            };
            let entry = per_broker.entry(preferred).or_default();
            entry.0 += 1;
            if p.leader.is_some_and(|l| l != preferred) {
                entry.1.push(*tp);
            }
        }
        let mut w = Working::new(self);
        let mut moved = Vec::new();
        for (preferred_total, off) in per_broker.into_values() {
            if off.len() as u64 * 100 <= u64::from(imbalance_threshold_pct) * preferred_total {
                continue;
            }
            for tp in off {
                let Some(p) = w.image.partition(&tp) else {
                    continue;
                };
                let deleting = w
                    .image
                    .topic(tp.topic_id)
                    .is_none_or(|t| t.marked_for_deletion());
                if p.reassigning() || deleting {
                    continue;
                }
                let image = &w.image;
                if let Ok(e) = selectors::preferred_replica(p, |b| eligible(image, &tp, b)) {
                    let c = election_change(&tp, p, &e);
                    if w.change(c) {
                        moved.push(tp);
                    }
                }
            }
        }
        w.finish(moved)
    }
}

/// Decides one AlterPartition item against the working image.
fn alter_one(
    w: &mut Working,
    broker: BrokerId,
    item: &AlterPartitionItem,
) -> Result<PartitionImage, ApiError> {
    let tp = item.tp;
    if w.image.topic(tp.topic_id).is_none() {
        return Err(api(
            ErrorCode::UnknownTopic,
            format!("topic {} does not exist", tp.topic_id),
        ));
    }
    let name = partition_name(&w.image, &tp);
    let p = w.image.partition(&tp).ok_or_else(|| {
        api(
            ErrorCode::UnknownPartition,
            format!("partition {name} does not exist"),
        )
    })?;
    if p.leader != Some(broker) {
        return Err(api(
            ErrorCode::NotLeaderOrFollower,
            match p.leader {
                Some(l) => format!("broker {broker} does not lead {name} (broker {l} does)"),
                None => format!("broker {broker} does not lead {name} (it has no leader)"),
            },
        ));
    }
    let leader_epoch = (item.leader_epoch.0, p.leader_epoch.0);
    check_current_epoch(ErrorCode::FencedLeaderEpoch, &name, "leader", leader_epoch)?;
    let partition_epoch = (item.partition_epoch.0, p.partition_epoch.0);
    check_current_epoch(
        ErrorCode::InvalidPartitionEpoch,
        &name,
        "partition",
        partition_epoch,
    )?;
    let isr = &item.new_isr;
    if isr.is_empty()
        || has_duplicates(isr)
        || isr.iter().any(|b| !p.replicas.contains(b))
        || !isr.contains(&broker)
    {
        return Err(api(
            ErrorCode::InvalidRequest,
            format!(
                "{name}: ISR {} must be non-empty, without repeats, within the replicas {} and include the leader",
                broker_list(isr),
                broker_list(&p.replicas)
            ),
        ));
    }
    if let Some(b) = isr
        .iter()
        .find(|b| !p.isr.contains(b) && !eligible(&w.image, &tp, **b))
    {
        return Err(api(
            ErrorCode::IneligibleReplica,
            format!("{name}: broker {b} cannot join the ISR (fenced, shutting down or its log dir offline)"),
        ));
    }
    if !same_set(isr, &p.isr) {
        let mut c = PartitionChangeRecord::new(tp.topic_id, tp.partition);
        c.isr = Some(isr.clone());
        w.change(c);
        if w.image.partition(&tp).is_some_and(|p| p.reassigning()) {
            crate::decide::reassign::complete_reassignment(w, &tp);
        }
    }
    Ok(w.image
        .partition(&tp)
        .expect("partition still exists")
        .clone())
}

/// Decides one election against the working image.
fn elect_one(
    w: &mut Working,
    kind: ElectionKind,
    tp: &TopicPartition,
) -> Result<BrokerId, ApiError> {
    let p = live_partition(&w.image, tp)?;
    let image = &w.image;
    let name = partition_name(image, tp);
    let ok = |b: BrokerId| eligible(image, tp, b);
    let e = match kind {
        ElectionKind::Preferred => {
            if p.leader.is_some() && p.leader == p.replicas.first().copied() {
                return Err(api(
                    ErrorCode::ElectionNotNeeded,
                    format!("{name} is already led by its preferred replica"),
                ));
            }
            selectors::preferred_replica(p, ok)?
        }
        ElectionKind::Unclean => {
            if let Some(l) = p.leader {
                return Err(api(
                    ErrorCode::ElectionNotNeeded,
                    format!("{name} already has leader {l}"),
                ));
            }
            selectors::offline_partition(p, ok, true).map_err(|e| {
                api(
                    ErrorCode::EligibleLeadersNotAvailable,
                    format!("{name}: {e}"),
                )
            })?
        }
    };
    let c = election_change(tp, p, &e);
    w.change(c);
    Ok(e.leader)
}
