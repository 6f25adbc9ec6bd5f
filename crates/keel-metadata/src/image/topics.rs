//! The topics' slice of the image: each topic's own metadata, the name
//! index, and the replay of the record that creates a topic.

use std::collections::BTreeMap;
use std::sync::Arc;

use imbl::OrdMap;
use serde::{Deserialize, Serialize};

use crate::error::{ReplayError, ReplayErrorKind};
use crate::ids::{BrokerId, PartitionId, TopicId};
use crate::records::TopicRecord;
use crate::state::ReplicaState;

use super::{err, MetadataImage};

/// A topic's own metadata (its partitions live in the image's partition map).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicImage {
    pub id: TopicId,
    pub name: String,
    /// Persistent, with shared strings, so a change to one key copies one
    /// path of reference counts, not the map and its strings: the active
    /// controller applies thousands of config records a second, each to a
    /// topic shared with the committed image.
    pub configs: OrdMap<Arc<str>, Arc<str>>,
    /// Partitions `0..partition_count` exist.
    pub partition_count: u32,
    /// Present once marked for deletion: the deletion state of every replica.
    pub deletion: Option<BTreeMap<(PartitionId, BrokerId), ReplicaState>>,
}

impl TopicImage {
    pub fn marked_for_deletion(&self) -> bool {
        self.deletion.is_some()
    }
}

impl MetadataImage {
    pub fn topic(&self, id: TopicId) -> Option<&TopicImage> {
        self.topics.get(&id).map(|t| &**t)
    }

    pub fn topic_by_name(&self, name: &str) -> Option<&TopicImage> {
        self.topic_names
            .get(name)
            .and_then(|id| self.topics.get(id))
            .map(|t| &**t)
    }

    pub fn topics(&self) -> impl Iterator<Item = &TopicImage> {
        self.topics.values().map(|t| &**t)
    }

    pub fn topic_count(&self) -> usize {
        self.topics.len()
    }

    /// Topic `topic_id`, which a record at `offset` names: unknown, it
    /// contradicts the image.
    pub(super) fn known_topic(
        &self,
        topic_id: TopicId,
        offset: u64,
    ) -> Result<&TopicImage, ReplayError> {
        self.topics
            .get(&topic_id)
            .map(|t| &**t)
            .ok_or_else(|| err(offset, ReplayErrorKind::UnknownTopic(topic_id)))
    }

    /// A new topic, with its own configs and no partitions yet; its id and
    /// name must both be new.
    pub(super) fn replay_topic(&mut self, r: &TopicRecord, offset: u64) -> Result<(), ReplayError> {
        if self.topics.contains_key(&r.topic_id) {
            return Err(err(offset, ReplayErrorKind::DuplicateTopicId(r.topic_id)));
        }
        if self.topic_names.contains_key(&r.name) {
            return Err(err(
                offset,
                ReplayErrorKind::DuplicateTopicName(r.name.clone()),
            ));
        }
        self.topic_names.insert(r.name.clone(), r.topic_id);
        self.topics.insert(
            r.topic_id,
            Arc::new(TopicImage {
                id: r.topic_id,
                name: r.name.clone(),
                configs: r
                    .configs
                    .iter()
                    .map(|(k, v)| (Arc::from(k.as_str()), Arc::from(v.as_str())))
                    .collect(),
                partition_count: 0,
                deletion: None,
            }),
        );
        Ok(())
    }
}
