//! Topic deletion, with the classic deletion manager's semantics. Deleting
//! a topic takes its partitions offline and marks it; from then on every
//! replica walks the replica state machine `Offline → DeletionStarted →
//! DeletionSuccessful` (or `→ DeletionIneligible → Offline → ...` when a
//! delete fails or its broker is down) until all are deleted and the topic
//! is removed.

use std::collections::BTreeSet;

use crate::decide::{Decision, Working};
use crate::error::{ApiError, ErrorCode};
use crate::ids::{BrokerId, PartitionId, TopicId, TopicPartition};
use crate::image::MetadataImage;
use crate::records::{LeaderChange, MetadataRecord, PartitionChangeRecord};
use crate::state::ReplicaState;

/// One step of a topic's deletion.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeletionStep {
    /// Why the deletion cannot finish now (a partition is being reassigned,
    /// or a broker hosting replicas is fenced); `None` when it can proceed.
    pub paused: Option<String>,
    /// Replicas to send `StopReplica(delete)` to now; replicas already in
    /// `DeletionStarted` are listed again so the send is retried.
    pub send_stop_replica: Vec<(TopicPartition, BrokerId)>,
    /// The topic is gone (removed by this step, or before it).
    pub removed: bool,
}

fn push_state(
    w: &mut Working,
    topic_id: TopicId,
    replicas: Vec<(PartitionId, BrokerId)>,
    state: ReplicaState,
) {
    if !replicas.is_empty() {
        w.push(MetadataRecord::ReplicaDeletionState {
            topic_id,
            replicas,
            state,
        });
    }
}

/// Appends `RemoveTopic` when every replica of the topic is deleted.
fn remove_if_done(w: &mut Working, topic_id: TopicId) -> bool {
    let done = w
        .image
        .topic(topic_id)
        .and_then(|t| t.deletion.as_ref())
        .is_some_and(|del| del.values().all(|s| *s == ReplicaState::DeletionSuccessful));
    if done {
        w.push(MetadataRecord::RemoveTopic { topic_id });
    }
    done
}

impl MetadataImage {
    /// Marks topics for deletion: their partitions lose their leaders, then
    /// `MarkTopicForDeletion`. A topic already marked answers Ok with no
    /// records (the deletion is under way).
    pub fn decide_delete_topics(
        &self,
        names: &[String],
    ) -> Decision<Vec<(String, Result<TopicId, ApiError>)>> {
        let mut w = Working::new(self);
        let mut replies = Vec::with_capacity(names.len());
        for name in names {
            let Some(t) = w.image.topic_by_name(name) else {
                replies.push((
                    name.clone(),
                    Err(ApiError::new(
                        ErrorCode::UnknownTopic,
                        format!("topic {name:?} does not exist"),
                    )),
                ));
                continue;
            };
            let topic_id = t.id;
            if !t.marked_for_deletion() {
                let offline: Vec<PartitionChangeRecord> = w
                    .image
                    .partitions_of(topic_id)
                    .filter(|(_, p)| p.leader.is_some())
                    .map(|(tp, _)| {
                        let mut c = PartitionChangeRecord::new(tp.topic_id, tp.partition);
                        c.leader = LeaderChange::NoLeader;
                        c
                    })
                    .collect();
                for c in offline {
                    w.change(c);
                }
                w.push(MetadataRecord::MarkTopicForDeletion { topic_id });
            }
            replies.push((name.clone(), Ok(topic_id)));
        }
        w.finish(replies)
    }

    /// Moves a topic's deletion forward: replicas on live brokers are
    /// (re)sent `StopReplica(delete)`, replicas on unregistered brokers count
    /// as deleted, replicas on fenced brokers wait (a delete in flight to one
    /// becomes `DeletionIneligible`), and once every replica is deleted the
    /// topic is removed. Nothing moves while a partition is being
    /// reassigned.
    pub fn decide_deletion_progress(&self, topic_id: TopicId) -> Decision<DeletionStep> {
        let Some(t) = self.topic(topic_id) else {
            return Decision::reply_only(DeletionStep {
                removed: true,
                ..DeletionStep::default()
            });
        };
        let Some(del) = t.deletion.as_ref() else {
            return Decision::reply_only(DeletionStep {
                paused: Some(format!("topic {} is not marked for deletion", t.name)),
                ..DeletionStep::default()
            });
        };
        if let Some((tp, _)) = self.partitions_of(topic_id).find(|(_, p)| p.reassigning()) {
            return Decision::reply_only(DeletionStep {
                paused: Some(format!("partition {tp} is being reassigned")),
                ..DeletionStep::default()
            });
        }
        let mut to_offline = Vec::new();
        let mut to_started = Vec::new();
        let mut to_successful = Vec::new();
        let mut to_ineligible = Vec::new();
        let mut send = Vec::new();
        let mut fenced_hosts = BTreeSet::new();
        for (&(p, b), &state) in del {
            let tp = TopicPartition {
                topic_id,
                partition: p,
            };
            let host = self.broker(b);
            let gone = host.is_none();
            let live = host.is_some_and(|h| !h.fenced);
            if state == ReplicaState::DeletionSuccessful {
                continue;
            }
            if !gone && !live {
                fenced_hosts.insert(b);
                if state == ReplicaState::DeletionStarted {
                    to_ineligible.push((p, b));
                }
                continue;
            }
            match state {
                ReplicaState::DeletionIneligible => {
                    to_offline.push((p, b));
                    to_started.push((p, b));
                }
                ReplicaState::DeletionStarted => {}
                _ => to_started.push((p, b)),
            }
            if gone {
                to_successful.push((p, b));
            } else {
                send.push((tp, b));
            }
        }
        let mut w = Working::new(self);
        push_state(&mut w, topic_id, to_offline, ReplicaState::Offline);
        push_state(&mut w, topic_id, to_started, ReplicaState::DeletionStarted);
        push_state(
            &mut w,
            topic_id,
            to_successful,
            ReplicaState::DeletionSuccessful,
        );
        push_state(
            &mut w,
            topic_id,
            to_ineligible,
            ReplicaState::DeletionIneligible,
        );
        let removed = remove_if_done(&mut w, topic_id);
        let paused = (!fenced_hosts.is_empty()).then(|| {
            let list: Vec<String> = fenced_hosts.iter().map(|b| b.to_string()).collect();
            format!(
                "replicas on fenced broker(s) {} wait for them to return",
                list.join(", ")
            )
        });
        w.finish(DeletionStep {
            paused,
            send_stop_replica: send,
            removed,
        })
    }

    /// Records the outcome of `StopReplica(delete)` requests: replicas in
    /// `DeletionStarted` become `DeletionSuccessful` or (on failure)
    /// `DeletionIneligible`, to be retried; other reports are stale and
    /// ignored. Removes the topic when every replica is deleted. Replies
    /// whether the topic is gone.
    pub fn decide_replica_deletion_results(
        &self,
        topic_id: TopicId,
        results: &[(PartitionId, BrokerId, bool)],
    ) -> Decision<bool> {
        let Some(t) = self.topic(topic_id) else {
            return Decision::reply_only(true);
        };
        let Some(del) = t.deletion.as_ref() else {
            return Decision::reply_only(false);
        };
        let mut seen = BTreeSet::new();
        let mut ok = Vec::new();
        let mut failed = Vec::new();
        for &(p, b, success) in results {
            if del.get(&(p, b)) != Some(&ReplicaState::DeletionStarted) || !seen.insert((p, b)) {
                continue;
            }
            if success {
                ok.push((p, b));
            } else {
                failed.push((p, b));
            }
        }
        let mut w = Working::new(self);
        push_state(&mut w, topic_id, ok, ReplicaState::DeletionSuccessful);
        push_state(&mut w, topic_id, failed, ReplicaState::DeletionIneligible);
        let removed = remove_if_done(&mut w, topic_id);
        w.finish(removed)
    }
}
