//! Limits against hostile or careless requests, checked before anything is
//! built: a request past one is refused as a whole with POLICY_VIOLATION
//! naming the limit (and the option that sets it), and writes nothing.
//!
//! Two kinds of checks: [`Limits::check_request`]-style ones need only the
//! request (run before the request reaches the controller's loop, so a huge
//! `validate_only` request builds no rows either), and the `*_in` ones
//! need the image (cluster-wide totals, a topic's resulting config count)
//! and run inside the decision, against the image the decision is made on.

use std::collections::BTreeSet;

use crate::decide::{ConfigOp, CreatePartitions, CreateTopic};
use crate::error::{ApiError, ErrorCode};
use crate::image::MetadataImage;

/// The configured limits. Defaults are generous for real clusters and far
/// below what would exhaust a controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Topics named in one CreateTopics, DeleteTopics, CreatePartitions or
    /// IncrementalAlterConfigs request.
    pub max_topics_per_request: usize,
    /// New partitions one CreateTopics or CreatePartitions request may
    /// create (over all its topics).
    pub max_partitions_per_request: u64,
    /// Partitions the cluster may hold.
    pub max_partitions: u64,
    /// Config keys one topic may carry.
    pub max_configs_per_topic: usize,
    /// Bytes of one config value (and of one key).
    pub max_config_value_bytes: usize,
    /// Partitions one AlterPartitionReassignments or ElectLeaders request
    /// may name.
    pub max_partitions_per_plan: usize,
    /// ACL bindings or filters in one request.
    pub max_acls_per_request: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_topics_per_request: 10_000,
            max_partitions_per_request: 1_000_000,
            max_partitions: 10_000_000,
            max_configs_per_topic: 10_000,
            max_config_value_bytes: 1 << 20,
            max_partitions_per_plan: 1_000_000,
            max_acls_per_request: 10_000,
        }
    }
}

fn violation(limit: &str, option: &str, value: impl std::fmt::Display, got: String) -> ApiError {
    ApiError::new(
        ErrorCode::PolicyViolation,
        format!("{got}, past the limit {limit} = {value} (--{option})"),
    )
}

/// New partitions a create asks for (assignments win over the count).
fn new_partitions(t: &CreateTopic) -> u64 {
    t.assignments
        .as_ref()
        .map_or(u64::from(t.partitions), |a| a.len() as u64)
}

impl Limits {
    fn topics(&self, n: usize) -> Result<(), ApiError> {
        if n > self.max_topics_per_request {
            return Err(violation(
                "max_topics_per_request",
                "max-topics-per-request",
                self.max_topics_per_request,
                format!("the request names {n} topics"),
            ));
        }
        Ok(())
    }

    fn configs<'a>(
        &self,
        topic: &str,
        entries: impl Iterator<Item = (&'a str, Option<&'a str>)>,
    ) -> Result<(), ApiError> {
        let mut n = 0usize;
        for (k, v) in entries {
            n += 1;
            for (what, text) in [("key", Some(k)), ("value", v)] {
                let len = text.map_or(0, str::len);
                if len > self.max_config_value_bytes {
                    return Err(violation(
                        "max_config_value_bytes",
                        "max-config-value-bytes",
                        self.max_config_value_bytes,
                        format!("topic {topic:?}: a config {what} of {len} bytes"),
                    ));
                }
            }
        }
        if n > self.max_configs_per_topic {
            return Err(violation(
                "max_configs_per_topic",
                "max-configs-per-topic",
                self.max_configs_per_topic,
                format!("topic {topic:?}: {n} config entries"),
            ));
        }
        Ok(())
    }

    fn partitions_per_request(&self, n: u64) -> Result<(), ApiError> {
        if n > self.max_partitions_per_request {
            return Err(violation(
                "max_partitions_per_request",
                "max-partitions-per-request",
                self.max_partitions_per_request,
                format!("the request creates {n} partitions"),
            ));
        }
        Ok(())
    }

    fn cluster_partitions(&self, image: &MetadataImage, adding: u64) -> Result<(), ApiError> {
        let now = image.partition_count() as u64;
        if now.saturating_add(adding) > self.max_partitions {
            return Err(violation(
                "max_partitions",
                "max-partitions",
                self.max_partitions,
                format!("the cluster holds {now} partitions and the request adds {adding}"),
            ));
        }
        Ok(())
    }

    /// A CreateTopics request on its own.
    pub fn check_create_topics(&self, topics: &[CreateTopic]) -> Result<(), ApiError> {
        self.topics(topics.len())?;
        let total = topics.iter().map(new_partitions).sum::<u64>();
        self.partitions_per_request(total)?;
        for t in topics {
            self.configs(
                &t.name,
                t.configs
                    .iter()
                    .map(|(k, v)| (k.as_str(), Some(v.as_str()))),
            )?;
        }
        Ok(())
    }

    /// A CreateTopics request against the cluster's partition count.
    pub fn check_create_topics_in(
        &self,
        image: &MetadataImage,
        topics: &[CreateTopic],
    ) -> Result<(), ApiError> {
        self.cluster_partitions(image, topics.iter().map(new_partitions).sum())
    }

    /// A CreatePartitions request on its own: counts and explicit rows.
    pub fn check_create_partitions(&self, items: &[CreatePartitions]) -> Result<(), ApiError> {
        self.topics(items.len())?;
        let rows = items
            .iter()
            .map(|i| i.assignments.as_ref().map_or(0, |a| a.len() as u64))
            .sum::<u64>();
        self.partitions_per_request(rows)
    }

    /// A CreatePartitions request against the image: the partitions it adds
    /// (to the topics that exist) per request and in the cluster.
    pub fn check_create_partitions_in(
        &self,
        image: &MetadataImage,
        items: &[CreatePartitions],
    ) -> Result<(), ApiError> {
        let adding = items
            .iter()
            .filter_map(|i| {
                let t = image.topic_by_name(&i.name)?;
                Some(u64::from(i.total.saturating_sub(t.partition_count)))
            })
            .sum::<u64>();
        self.partitions_per_request(adding)?;
        self.cluster_partitions(image, adding)
    }

    /// An IncrementalAlterConfigs request on its own.
    pub fn check_alter_configs(&self, items: &[(String, Vec<ConfigOp>)]) -> Result<(), ApiError> {
        self.topics(items.len())?;
        for (topic, ops) in items {
            self.configs(topic, ops.iter().map(|o| (o.key(), o.value())))?;
        }
        Ok(())
    }

    /// An IncrementalAlterConfigs request against the image: the config
    /// count each topic would end with.
    pub fn check_alter_configs_in(
        &self,
        image: &MetadataImage,
        items: &[(String, Vec<ConfigOp>)],
    ) -> Result<(), ApiError> {
        for (topic, ops) in items {
            let Some(t) = image.topic_by_name(topic) else {
                continue;
            };
            self.configs_after(
                t.configs.keys().map(|k| &**k),
                ops,
                &format!("topic {topic:?}"),
            )?;
        }
        Ok(())
    }

    /// An AlterClusterConfigs request against the image: the count of
    /// cluster defaults it would leave (bounded like a topic's configs).
    pub fn check_cluster_configs_in(
        &self,
        image: &MetadataImage,
        ops: &[ConfigOp],
    ) -> Result<(), ApiError> {
        self.configs_after(
            image.cluster_configs().keys().map(String::as_str),
            ops,
            "the cluster's defaults",
        )
    }

    /// The keys `current` would end with after `ops`, at most
    /// `max_configs_per_topic`.
    fn configs_after<'a>(
        &self,
        current: impl Iterator<Item = &'a str>,
        ops: &'a [ConfigOp],
        what: &str,
    ) -> Result<(), ApiError> {
        let mut keys: BTreeSet<&str> = current.collect();
        for o in ops {
            match o {
                ConfigOp::Delete(k) => keys.remove(k.as_str()),
                // APPEND and SUBTRACT leave the key its own value.
                ConfigOp::Set(k, _) | ConfigOp::Append(k, _) | ConfigOp::Subtract(k, _) => {
                    keys.insert(k)
                }
            };
        }
        if keys.len() > self.max_configs_per_topic {
            return Err(violation(
                "max_configs_per_topic",
                "max-configs-per-topic",
                self.max_configs_per_topic,
                format!("{what} would carry {} config entries", keys.len()),
            ));
        }
        Ok(())
    }

    /// A request naming topics (DeleteTopics).
    pub fn check_topic_count(&self, n: usize) -> Result<(), ApiError> {
        self.topics(n)
    }

    /// A reassignment plan or an election naming `n` partitions.
    pub fn check_plan(&self, n: usize) -> Result<(), ApiError> {
        if n > self.max_partitions_per_plan {
            return Err(violation(
                "max_partitions_per_plan",
                "max-partitions-per-plan",
                self.max_partitions_per_plan,
                format!("the request names {n} partitions"),
            ));
        }
        Ok(())
    }

    /// A request carrying `n` ACL bindings or filters.
    pub fn check_acls(&self, n: usize) -> Result<(), ApiError> {
        if n > self.max_acls_per_request {
            return Err(violation(
                "max_acls_per_request",
                "max-acls-per-request",
                self.max_acls_per_request,
                format!("the request carries {n} ACL entries"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn topic(name: &str, partitions: u32, configs: &[(&str, &str)]) -> CreateTopic {
        CreateTopic {
            name: name.into(),
            partitions,
            replication_factor: 1,
            assignments: None,
            configs: configs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        }
    }

    fn small() -> Limits {
        Limits {
            max_topics_per_request: 2,
            max_partitions_per_request: 10,
            max_partitions: 15,
            max_configs_per_topic: 2,
            max_config_value_bytes: 4,
            max_partitions_per_plan: 3,
            max_acls_per_request: 1,
        }
    }

    fn code(r: Result<(), ApiError>) -> Option<ErrorCode> {
        r.err().map(|e| e.code)
    }

    #[test]
    fn each_limit_passes_at_its_value_and_refuses_one_past_it() {
        let l = small();
        let pv = Some(ErrorCode::PolicyViolation);
        // Topics per request.
        assert_eq!(code(l.check_topic_count(2)), None);
        assert_eq!(code(l.check_topic_count(3)), pv);
        // Partitions per request, over topics.
        let at = [topic("a", 5, &[]), topic("b", 5, &[])];
        assert_eq!(code(l.check_create_topics(&at)), None);
        let past = [topic("a", 5, &[]), topic("b", 6, &[])];
        let e = l.check_create_topics(&past).unwrap_err();
        assert!(e.message.contains("max_partitions_per_request = 10"), "{e}");
        // Configs per topic and bytes per value.
        let two = [topic("a", 1, &[("k1", "v"), ("k2", "v")])];
        assert_eq!(code(l.check_create_topics(&two)), None);
        let three = [topic("a", 1, &[("k1", "v"), ("k2", "v"), ("k3", "v")])];
        assert_eq!(code(l.check_create_topics(&three)), pv);
        let long = [topic("a", 1, &[("k", "12345")])];
        let e = l.check_create_topics(&long).unwrap_err();
        assert!(e.message.contains("--max-config-value-bytes"), "{e}");
        assert_eq!(
            code(l.check_create_topics(&[topic("a", 1, &[("k", "1234")])])),
            None
        );
        // Plans and ACLs.
        assert_eq!(code(l.check_plan(3)), None);
        assert_eq!(code(l.check_plan(4)), pv);
        assert_eq!(code(l.check_acls(1)), None);
        assert_eq!(code(l.check_acls(2)), pv);
        // Alter configs: values, and the count a topic ends with.
        let ops = vec![(
            "a".to_string(),
            vec![ConfigOp::Set("k".into(), "12345".into())],
        )];
        assert_eq!(code(l.check_alter_configs(&ops)), pv);
    }

    #[test]
    fn the_cluster_total_counts_what_the_image_holds() {
        let l = small();
        let (image, _) = crate::synthetic::SyntheticCluster {
            brokers: 1,
            topics: 1,
            partitions_per_topic: 10,
        }
        .image()
        .unwrap();
        assert_eq!(image.partition_count(), 10);
        let t = image.topics().next().unwrap().name.clone();
        assert_eq!(
            code(l.check_create_topics_in(&image, &[topic("u", 5, &[])])),
            None
        );
        assert_eq!(
            code(l.check_create_topics_in(&image, &[topic("u", 6, &[])])),
            Some(ErrorCode::PolicyViolation)
        );
        let grow = |total| {
            vec![CreatePartitions {
                name: t.clone(),
                total,
                assignments: None,
            }]
        };
        assert_eq!(code(l.check_create_partitions_in(&image, &grow(15))), None);
        assert_eq!(
            code(l.check_create_partitions_in(&image, &grow(16))),
            Some(ErrorCode::PolicyViolation)
        );
    }

    #[test]
    fn cluster_defaults_are_counted_after_the_request() {
        let l = small();
        let set = |k: &str| ConfigOp::Set(k.into(), "1".into());
        let mut image = MetadataImage::new();
        assert_eq!(
            code(l.check_cluster_configs_in(&image, &[set("a"), set("b")])),
            None
        );
        assert_eq!(
            code(l.check_cluster_configs_in(&image, &[set("a"), set("b"), set("c")])),
            Some(ErrorCode::PolicyViolation)
        );
        let records: Vec<_> = ["a", "b"]
            .iter()
            .map(|k| crate::MetadataRecord::ClusterConfig {
                key: k.to_string(),
                value: Some("1".into()),
            })
            .collect();
        image
            .replay_batch(&crate::RecordBatch::new(records), 1)
            .unwrap();
        // Two set: one more is too many, one in place of another is not.
        assert_eq!(
            code(l.check_cluster_configs_in(&image, &[set("c")])),
            Some(ErrorCode::PolicyViolation)
        );
        assert_eq!(
            code(l.check_cluster_configs_in(&image, &[ConfigOp::Delete("a".into()), set("c")])),
            None
        );
    }
}
