//! The deletion slice of the image: a topic marked for deletion, its
//! replicas moving through the deletion state machine, and its removal
//! once every replica is deleted.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::{ReplayError, ReplayErrorKind};
use crate::ids::{BrokerId, PartitionId, TopicId, TopicPartition};
use crate::state::{PartitionState, ReplicaState, TransitionError};

use super::{err, MetadataImage};

impl MetadataImage {
    /// Marks topic `topic_id` for deletion: every replica enters the
    /// deletion machine at Offline.
    pub(super) fn replay_mark_for_deletion(
        &mut self,
        topic_id: TopicId,
        offset: u64,
    ) -> Result<(), ReplayError> {
        let t = self.known_topic(topic_id, offset)?;
        if t.deletion.is_some() {
            return Err(err(
                offset,
                ReplayErrorKind::AlreadyMarkedForDeletion(topic_id),
            ));
        }
        let mut del = BTreeMap::new();
        for (tp, p) in self.partitions_of(topic_id) {
            for b in &p.replicas {
                // Every replica enters the deletion machine at Offline.
                del.insert((tp.partition, *b), ReplicaState::Offline);
            }
        }
        if let Some(t) = self.topics.get_mut(&topic_id) {
            Arc::make_mut(t).deletion = Some(del);
        }
        Ok(())
    }

    /// Moves replicas of a topic under deletion to `state`: all of them or,
    /// if any move is refused, none.
    pub(super) fn replay_replica_deletion_state(
        &mut self,
        topic_id: TopicId,
        replicas: &[(PartitionId, BrokerId)],
        state: ReplicaState,
        offset: u64,
    ) -> Result<(), ReplayError> {
        // The states of the deletion machine. A replica of a topic under
        // deletion never goes back to New or Online, and leaves the machine
        // (NonExistent) only with its topic, through RemoveTopic.
        let deletion_target = matches!(
            state,
            ReplicaState::Offline
                | ReplicaState::DeletionStarted
                | ReplicaState::DeletionSuccessful
                | ReplicaState::DeletionIneligible
        );
        let del = self
            .known_topic(topic_id, offset)?
            .deletion
            .as_ref()
            .ok_or_else(|| err(offset, ReplayErrorKind::NotMarkedForDeletion(topic_id)))?;
        // Check every move before writing any. Moves are staged in order, so
        // a replica listed twice is checked from the state its first listing
        // left it in, exactly as applying them one by one would.
        let mut staged: BTreeMap<(PartitionId, BrokerId), ReplicaState> = BTreeMap::new();
        for &(p, b) in replicas {
            let cur = match staged.get(&(p, b)).or_else(|| del.get(&(p, b))) {
                Some(s) => *s,
                None => {
                    let tp = TopicPartition {
                        topic_id,
                        partition: p,
                    };
                    return Err(err(
                        offset,
                        ReplayErrorKind::UnknownReplica { tp, broker: b },
                    ));
                }
            };
            if !deletion_target {
                // Legal for the state machine perhaps, but not for a replica
                // being deleted.
                let refused = TransitionError::Replica {
                    from: cur,
                    to: state,
                };
                return Err(err(offset, refused.into()));
            }
            let next = cur.transition(state).map_err(|e| err(offset, e.into()))?;
            staged.insert((p, b), next);
        }
        if let Some(del) = self
            .topics
            .get_mut(&topic_id)
            .and_then(|t| Arc::make_mut(t).deletion.as_mut())
        {
            del.extend(staged);
        }
        Ok(())
    }

    /// Removes topic `topic_id`, marked for deletion with every replica
    /// deleted, with its partitions and its name.
    pub(super) fn replay_remove_topic(
        &mut self,
        topic_id: TopicId,
        offset: u64,
    ) -> Result<(), ReplayError> {
        let t = self.known_topic(topic_id, offset)?;
        let del = t
            .deletion
            .as_ref()
            .ok_or_else(|| err(offset, ReplayErrorKind::NotMarkedForDeletion(topic_id)))?;
        if let Some(((p, b), _)) = del
            .iter()
            .find(|(_, s)| **s != ReplicaState::DeletionSuccessful)
        {
            return Err(err(
                offset,
                ReplayErrorKind::DeletionIncomplete {
                    topic: topic_id,
                    partition: p.0,
                    broker: *b,
                },
            ));
        }
        let name = t.name.clone();
        let count = t.partition_count;
        for i in 0..count {
            let tp = TopicPartition::new(topic_id, i);
            if let Some(p) = self.partitions.get(&tp) {
                p.state
                    .transition(PartitionState::NonExistent)
                    .map_err(|e| err(offset, e.into()))?;
            }
        }
        self.partitions.remove_topic(topic_id, count);
        self.topics.remove(&topic_id);
        self.topic_names.remove(&name);
        Ok(())
    }

    /// Replicas newly assigned to `tp` join its topic's deletion map at
    /// Offline when the topic is marked for deletion (replicas already in
    /// it keep their state).
    pub(super) fn enter_deletion(&mut self, tp: TopicPartition, replicas: &[BrokerId]) {
        let marked = self
            .topics
            .get(&tp.topic_id)
            .is_some_and(|t| t.marked_for_deletion());
        if marked {
            if let Some(del) = self
                .topics
                .get_mut(&tp.topic_id)
                .and_then(|t| Arc::make_mut(t).deletion.as_mut())
            {
                for b in replicas {
                    del.entry((tp.partition, *b))
                        .or_insert(ReplicaState::Offline);
                }
            }
        }
    }
}
