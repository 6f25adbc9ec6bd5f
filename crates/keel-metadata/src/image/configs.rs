//! The configs' slice of the image: each topic's own values, the
//! cluster-wide defaults, what a topic resolves a key to, and the replay
//! of the records that set or remove them.

use std::sync::Arc;

use imbl::OrdMap;

use crate::error::{ReplayError, ReplayErrorKind};
use crate::ids::TopicId;
use crate::topic_config::ConfigSource;

use super::{err, MetadataImage, TopicImage};

impl MetadataImage {
    /// The cluster-wide defaults of topic configs, by key.
    pub fn cluster_configs(&self) -> &OrdMap<String, String> {
        &self.cluster_configs
    }

    /// The value `topic` has for config `key` and where it comes from: its
    /// own, else the cluster default, else Kafka's default (`None` for a
    /// key neither set nor in the schema).
    pub fn topic_config<'a>(
        &'a self,
        topic: &'a TopicImage,
        key: &str,
    ) -> Option<(&'a str, ConfigSource)> {
        crate::topic_config::resolve(
            key,
            topic.configs.get(key).map(|v| &**v),
            self.cluster_configs.get(key).map(String::as_str),
        )
    }

    /// What a topic without its own value for `key` takes: the cluster
    /// default, else Kafka's default.
    pub fn default_config(&self, key: &str) -> Option<&str> {
        match self.cluster_configs.get(key) {
            Some(v) => Some(v),
            None => crate::topic_config::lookup(key).map(|d| d.default),
        }
    }

    /// Whether `topic` allows unclean leader election (its own value, else
    /// the cluster default, else false).
    pub fn unclean_leader_election(&self, topic: &TopicImage) -> bool {
        self.topic_config(topic, crate::UNCLEAN_LEADER_ELECTION)
            .is_some_and(|(v, _)| v.eq_ignore_ascii_case("true"))
    }

    /// `topic`'s `min.insync.replicas` (its own value, else the cluster
    /// default, else 1).
    pub fn min_insync_replicas(&self, topic: &TopicImage) -> usize {
        self.topic_config(topic, crate::MIN_INSYNC_REPLICAS)
            .and_then(|(v, _)| v.trim().parse().ok())
            .unwrap_or(1)
    }

    /// Topic `topic_id`'s config `key` set to `value`, or removed.
    pub(super) fn replay_topic_config(
        &mut self,
        topic_id: TopicId,
        key: &str,
        value: Option<&str>,
        offset: u64,
    ) -> Result<(), ReplayError> {
        let t = Arc::make_mut(
            self.topics
                .get_mut(&topic_id)
                .ok_or_else(|| err(offset, ReplayErrorKind::UnknownTopic(topic_id)))?,
        );
        match value {
            Some(v) => t.configs.insert(Arc::from(key), Arc::from(v)),
            None => t.configs.remove(key),
        };
        Ok(())
    }

    /// The cluster default of config `key` set to `value`, or removed.
    pub(super) fn replay_cluster_config(&mut self, key: &str, value: Option<&str>) {
        match value {
            Some(v) => self.cluster_configs.insert(key.to_string(), v.to_string()),
            None => self.cluster_configs.remove(key),
        };
    }
}
