//! The partitions' slice of the image: each partition's replicas, ISR,
//! leader, epochs and state, the checks a partition record must pass, and
//! the replay of the records that create and change a partition.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{ReplayError, ReplayErrorKind};
use crate::ids::{BrokerId, LeaderEpoch, PartitionEpoch, TopicId, TopicPartition};
use crate::records::{LeaderChange, PartitionChangeRecord, PartitionRecord};
use crate::state::{PartitionState, ReplicaState};

use super::{err, MetadataImage};

/// One partition's replicated state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionImage {
    /// Assigned replicas, preferred leader first.
    pub replicas: Vec<BrokerId>,
    /// In-sync replicas; never empty, always a subset of `replicas`.
    pub isr: Vec<BrokerId>,
    pub leader: Option<BrokerId>,
    pub leader_epoch: LeaderEpoch,
    pub partition_epoch: PartitionEpoch,
    /// Replicas a reassignment is adding (subset of `replicas`).
    pub adding: Vec<BrokerId>,
    /// Replicas a reassignment is removing (subset of `replicas`).
    pub removing: Vec<BrokerId>,
    pub state: PartitionState,
}

impl PartitionImage {
    pub fn reassigning(&self) -> bool {
        !self.adding.is_empty() || !self.removing.is_empty()
    }

    /// The replica set a reassignment aims for (replicas minus removing).
    pub fn target_replicas(&self) -> Vec<BrokerId> {
        self.replicas
            .iter()
            .copied()
            .filter(|b| !self.removing.contains(b))
            .collect()
    }

    /// The replica set before the reassignment (replicas minus adding).
    pub fn original_replicas(&self) -> Vec<BrokerId> {
        self.replicas
            .iter()
            .copied()
            .filter(|b| !self.adding.contains(b))
            .collect()
    }
}

/// What a partition change record leaves besides the lists it carries:
/// derived on replay, so every node computes the same epochs and state.
struct MergedChange {
    /// The leader after the change.
    leader: Option<BrokerId>,
    /// Bumped when the leader changes.
    leader_epoch: LeaderEpoch,
    /// Bumped by every change.
    partition_epoch: PartitionEpoch,
    /// The state the partition moves to (or keeps).
    state: PartitionState,
}

/// Whether a broker list names a broker twice.
fn has_duplicates(v: &[BrokerId]) -> bool {
    // Replica lists are as long as the replication factor: a pairwise scan
    // beats sorting a copy there, and allocates nothing.
    if v.len() <= 16 {
        return v.iter().enumerate().any(|(i, b)| v[i + 1..].contains(b));
    }
    let mut s: Vec<BrokerId> = v.to_vec();
    s.sort_unstable();
    s.windows(2).any(|w| w[0] == w[1])
}

impl MetadataImage {
    pub fn partition(&self, tp: &TopicPartition) -> Option<&PartitionImage> {
        self.partitions.get(tp)
    }

    pub fn partitions(&self) -> impl Iterator<Item = (&TopicPartition, &PartitionImage)> {
        self.partitions.iter()
    }

    pub fn partition_count(&self) -> usize {
        self.partitions.len()
    }

    /// The partitions of one topic, in index order.
    pub fn partitions_of(
        &self,
        topic: TopicId,
    ) -> impl Iterator<Item = (&TopicPartition, &PartitionImage)> {
        self.partitions.topic(topic)
    }

    /// The replica state of `broker`'s copy of `tp`, derived from the image.
    pub fn replica_state(&self, tp: &TopicPartition, broker: BrokerId) -> ReplicaState {
        let Some(p) = self.partitions.get(tp) else {
            return ReplicaState::NonExistent;
        };
        if !p.replicas.contains(&broker) {
            return ReplicaState::NonExistent;
        }
        if let Some(del) = self
            .topics
            .get(&tp.topic_id)
            .and_then(|t| t.deletion.as_ref())
        {
            return del
                .get(&(tp.partition, broker))
                .copied()
                .unwrap_or(ReplicaState::Offline);
        }
        if !self.replica_online(tp, broker) {
            ReplicaState::Offline
        } else if p.adding.contains(&broker) && !p.isr.contains(&broker) {
            ReplicaState::New
        } else {
            ReplicaState::Online
        }
    }
    /// Checks a leader chosen by a record: assigned, in the ISR, and able to lead.
    fn check_new_leader(
        &self,
        tp: TopicPartition,
        leader: BrokerId,
        replicas: &[BrokerId],
        isr: &[BrokerId],
        offset: u64,
    ) -> Result<(), ReplayError> {
        check_assigned_and_in_sync(tp, leader, replicas, isr, offset, || {
            format!("leader {leader} not in replicas and ISR")
        })?;
        if !self.can_lead(leader) {
            return Err(err(
                offset,
                ReplayErrorKind::IneligibleLeader { tp, leader },
            ));
        }
        Ok(())
    }

    /// Checks the lists of a partition: replicas and ISR non-empty and
    /// without repeats, the ISR and the reassignment's lists within the
    /// replicas, no replica both adding and removing.
    pub(super) fn check_shape(
        tp: TopicPartition,
        replicas: &[BrokerId],
        isr: &[BrokerId],
        adding: &[BrokerId],
        removing: &[BrokerId],
        offset: u64,
    ) -> Result<(), ReplayError> {
        let bad = |reason: &str| {
            Err(err(
                offset,
                ReplayErrorKind::InvalidPartition {
                    tp,
                    reason: reason.to_string(),
                },
            ))
        };
        if replicas.is_empty() {
            return bad("empty replica list");
        }
        if has_duplicates(replicas) {
            return bad("duplicate replicas");
        }
        if isr.is_empty() {
            return bad("empty ISR");
        }
        if has_duplicates(isr) || isr.iter().any(|b| !replicas.contains(b)) {
            return bad("ISR is not a subset of the replicas");
        }
        if adding.iter().chain(removing).any(|b| !replicas.contains(b)) {
            return bad("adding/removing replicas not in the replica list");
        }
        if adding.iter().any(|b| removing.contains(b)) {
            return bad("a replica is both adding and removing");
        }
        Ok(())
    }

    /// A new partition, next in its topic's index order, on registered
    /// brokers; online when the record names a leader, else new.
    pub(super) fn replay_partition(
        &mut self,
        r: &PartitionRecord,
        offset: u64,
    ) -> Result<(), ReplayError> {
        let tp = TopicPartition::new(r.topic_id, r.partition.0);
        let count = self.known_topic(r.topic_id, offset)?.partition_count;
        if self.partitions.contains_key(&tp) {
            return Err(err(offset, ReplayErrorKind::DuplicatePartition(tp)));
        }
        if r.partition.0 != count {
            return Err(err(
                offset,
                ReplayErrorKind::PartitionOutOfOrder {
                    tp,
                    expected: count,
                },
            ));
        }
        Self::check_shape(tp, &r.replicas, &r.isr, &[], &[], offset)?;
        if let Some(b) = r.replicas.iter().find(|b| !self.brokers.contains_key(*b)) {
            return Err(err(offset, ReplayErrorKind::UnknownBroker(*b)));
        }
        let mut state = PartitionState::NonExistent
            .transition(PartitionState::New)
            .map_err(|e| err(offset, e.into()))?;
        if let Some(l) = r.leader {
            self.check_new_leader(tp, l, &r.replicas, &r.isr, offset)?;
            state = state
                .transition(PartitionState::Online)
                .map_err(|e| err(offset, e.into()))?;
        }
        let partition = PartitionImage {
            replicas: r.replicas.clone(),
            isr: r.isr.clone(),
            leader: r.leader,
            leader_epoch: LeaderEpoch(0),
            partition_epoch: PartitionEpoch(0),
            adding: Vec::new(),
            removing: Vec::new(),
            state,
        };
        // The index was checked against the topic's count above; the table
        // holds exactly partitions 0..count of every topic.
        self.partitions.push(tp, partition).map_err(|_| {
            err(
                offset,
                ReplayErrorKind::PartitionOutOfOrder {
                    tp,
                    expected: count,
                },
            )
        })?;
        if let Some(t) = self.topics.get_mut(&r.topic_id) {
            Arc::make_mut(t).partition_count += 1;
        }
        Ok(())
    }

    /// A change of partition `tp`: checked in full, then written, so a
    /// refused record changes nothing.
    pub(super) fn replay_partition_change(
        &mut self,
        r: &PartitionChangeRecord,
        offset: u64,
    ) -> Result<(), ReplayError> {
        let tp = TopicPartition::new(r.topic_id, r.partition.0);
        if r.is_noop() {
            return Err(err(
                offset,
                ReplayErrorKind::InvalidPartition {
                    tp,
                    reason: "partition change record changes nothing".into(),
                },
            ));
        }
        let merged = self.merge_partition_change(tp, r, offset)?;
        self.write_partition_change(tp, r, merged, offset)?;
        // Replicas added to a topic under deletion join its deletion map
        // (an unchanged replica list is already in it).
        if let Some(v) = &r.replicas {
            self.enter_deletion(tp, v);
        }
        Ok(())
    }

    /// Checks change `r` against partition `tp` as it is and derives the
    /// leader, epochs and state it leaves; writes nothing.
    fn merge_partition_change(
        &self,
        tp: TopicPartition,
        r: &PartitionChangeRecord,
        offset: u64,
    ) -> Result<MergedChange, ReplayError> {
        let cur = self
            .partitions
            .get(&tp)
            .ok_or_else(|| err(offset, ReplayErrorKind::UnknownPartition(tp)))?;
        // The partition as the record leaves it, borrowed: checked in full
        // before anything is written, so a refused record changes nothing.
        let replicas = r.replicas.as_deref().unwrap_or(&cur.replicas);
        let isr = r.isr.as_deref().unwrap_or(&cur.isr);
        let adding = r.adding.as_deref().unwrap_or(&cur.adding);
        let removing = r.removing.as_deref().unwrap_or(&cur.removing);
        let new_leader = match r.leader {
            LeaderChange::Unchanged => cur.leader,
            LeaderChange::NoLeader => None,
            LeaderChange::To(b) => Some(b),
        };
        Self::check_shape(tp, replicas, isr, adding, removing, offset)?;
        self.check_new_replicas_registered(cur, replicas, offset)?;
        let leader_changed = new_leader != cur.leader;
        if leader_changed {
            if let Some(l) = new_leader {
                self.check_new_leader(tp, l, replicas, isr, offset)?;
            }
        } else if let Some(l) = new_leader {
            // Leader kept: it must still be assigned and in the ISR.
            check_assigned_and_in_sync(tp, l, replicas, isr, offset, || {
                format!("kept leader {l} left the replicas or ISR")
            })?;
        }
        let state = next_state(cur, new_leader, leader_changed, offset)?;
        let leader_epoch = if leader_changed {
            LeaderEpoch(cur.leader_epoch.0 + 1)
        } else {
            cur.leader_epoch
        };
        Ok(MergedChange {
            leader: new_leader,
            leader_epoch,
            partition_epoch: PartitionEpoch(cur.partition_epoch.0 + 1),
            state,
        })
    }

    /// Refuses a replica list that newly assigns an unregistered broker.
    fn check_new_replicas_registered(
        &self,
        cur: &PartitionImage,
        replicas: &[BrokerId],
        offset: u64,
    ) -> Result<(), ReplayError> {
        if let Some(b) = replicas
            .iter()
            // Newly assigned replicas must be registered; existing ones may
            // belong to a broker that was unregistered since.
            .find(|b| !cur.replicas.contains(b) && !self.brokers.contains_key(*b))
        {
            return Err(err(offset, ReplayErrorKind::UnknownBroker(*b)));
        }
        Ok(())
    }

    /// Writes a checked change of partition `tp` in place (imbl copies only
    /// the path it shares with other clones of the image).
    fn write_partition_change(
        &mut self,
        tp: TopicPartition,
        r: &PartitionChangeRecord,
        merged: MergedChange,
        offset: u64,
    ) -> Result<(), ReplayError> {
        let p = self
            .partitions
            .get_mut(&tp)
            .ok_or_else(|| err(offset, ReplayErrorKind::UnknownPartition(tp)))?;
        if let Some(v) = &r.replicas {
            p.replicas.clone_from(v);
        }
        if let Some(v) = &r.isr {
            p.isr.clone_from(v);
        }
        if let Some(v) = &r.adding {
            p.adding.clone_from(v);
        }
        if let Some(v) = &r.removing {
            p.removing.clone_from(v);
        }
        p.leader = merged.leader;
        p.leader_epoch = merged.leader_epoch;
        p.partition_epoch = merged.partition_epoch;
        p.state = merged.state;
        Ok(())
    }
}

/// Refuses `leader` of `tp` unless it is among `replicas` and in `isr`;
/// `reason` says why (built only for a refusal).
fn check_assigned_and_in_sync(
    tp: TopicPartition,
    leader: BrokerId,
    replicas: &[BrokerId],
    isr: &[BrokerId],
    offset: u64,
    reason: impl FnOnce() -> String,
) -> Result<(), ReplayError> {
    if !replicas.contains(&leader) || !isr.contains(&leader) {
        let reason = reason();
        return Err(err(
            offset,
            ReplayErrorKind::InvalidPartition { tp, reason },
        ));
    }
    Ok(())
}

/// The state partition `cur` moves to under `new_leader`: online with a
/// leader, else new if it never had one, else offline; a transition the
/// state machine refuses is an error.
fn next_state(
    cur: &PartitionImage,
    new_leader: Option<BrokerId>,
    leader_changed: bool,
    offset: u64,
) -> Result<PartitionState, ReplayError> {
    let target = if new_leader.is_some() {
        PartitionState::Online
    } else if cur.state == PartitionState::New {
        PartitionState::New
    } else {
        PartitionState::Offline
    };
    if target != cur.state || target == PartitionState::Online && leader_changed {
        cur.state
            .transition(target)
            .map_err(|e| err(offset, e.into()))
    } else {
        Ok(cur.state)
    }
}
