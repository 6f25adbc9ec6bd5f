//! Topic decisions: create topics, add partitions, alter topic configs.

use std::collections::{BTreeMap, BTreeSet};

use crate::decide::{
    broker_list, election_change, eligible, has_duplicates, Decision, Working,
    MAX_PARTITIONS_PER_TOPIC, MAX_REPLICATION_FACTOR,
};
use crate::error::{ApiError, ErrorCode};
use crate::ids::{BrokerId, PartitionId, TopicId, TopicPartition};
use crate::image::MetadataImage;
use crate::placement::{place_replicas, PlacementBroker};
use crate::records::{MetadataRecord, PartitionRecord, TopicRecord};
use crate::selectors;
use crate::topic_config::UnknownConfigs;
use crate::validation::{validate_topic_configs, validate_topic_name};

/// One topic of a CreateTopics request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CreateTopic {
    /// Checked against Kafka's naming rules.
    pub name: String,
    /// Ignored (may be 0) when `assignments` is given.
    pub partitions: u32,
    /// Ignored (may be 0) when `assignments` is given.
    pub replication_factor: u32,
    /// Manual placement: one replica list per partition, preferred leader
    /// first. `None` lets the controller place replicas.
    pub assignments: Option<Vec<Vec<BrokerId>>>,
    /// Initial topic configs; interpreted keys are validated.
    pub configs: BTreeMap<String, String>,
}

/// What a successful creation reports back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreatedTopic {
    /// Fresh, nonzero and unused: a re-created name never reuses an id.
    pub topic_id: TopicId,
    /// As created (the manual assignment's row count if one was given).
    pub partitions: u32,
    /// As created (the manual assignment's row width if one was given).
    pub replication_factor: u32,
}

/// One topic of a CreatePartitions request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CreatePartitions {
    /// An existing topic, not being deleted.
    pub name: String,
    /// The partition count wanted; partitions only ever grow.
    pub total: u32,
    /// Manual placement of the new partitions only (`total - current` rows).
    pub assignments: Option<Vec<Vec<BrokerId>>>,
}

/// One change to a topic's configs (or to the cluster defaults).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigOp {
    /// Set `key` to `value`.
    Set(String, String),
    /// Remove `key` (back to the cluster default, else Kafka's default).
    Delete(String),
    /// Add each item of the comma-separated `value` that the list-typed
    /// `key` does not hold yet (Kafka's APPEND), to the value in force.
    Append(String, String),
    /// Remove each item of the comma-separated `value` from the list-typed
    /// `key` (Kafka's SUBTRACT), from the value in force.
    Subtract(String, String),
}

impl ConfigOp {
    pub fn key(&self) -> &str {
        match self {
            Self::Set(k, _) | Self::Delete(k) | Self::Append(k, _) | Self::Subtract(k, _) => k,
        }
    }

    /// The value the op names (`None` for a delete).
    pub fn value(&self) -> Option<&str> {
        match self {
            Self::Set(_, v) | Self::Append(_, v) | Self::Subtract(_, v) => Some(v),
            Self::Delete(_) => None,
        }
    }
}

/// The new value of each key `ops` touches (`None` = removed), applying
/// them in order. APPEND and SUBTRACT only apply to list-typed configs and
/// start from the value in force: `current(key)` before the request, or
/// `fallback(key)` (what is left when the key is removed) after a delete
/// earlier in the same request.
pub(crate) fn resolve_config_ops<'a>(
    ops: &'a [ConfigOp],
    current: impl Fn(&str) -> Option<String>,
    fallback: impl Fn(&str) -> Option<String>,
) -> Result<BTreeMap<&'a str, Option<String>>, ApiError> {
    let mut out: BTreeMap<&'a str, Option<String>> = BTreeMap::new();
    for op in ops {
        let key = op.key();
        let new = match op {
            ConfigOp::Set(_, v) => Some(v.clone()),
            ConfigOp::Delete(_) => None,
            ConfigOp::Append(_, v) | ConfigOp::Subtract(_, v) => {
                let verb = if matches!(op, ConfigOp::Append(..)) {
                    "APPEND to"
                } else {
                    "SUBTRACT from"
                };
                if !crate::topic_config::lookup(key).is_some_and(|d| d.ty.is_list()) {
                    return Err(api(
                        ErrorCode::InvalidConfig,
                        format!("Can't {verb} key {key} because its type is not LIST."),
                    ));
                }
                let before = match out.get(key) {
                    Some(Some(v)) => Some(v.clone()),
                    Some(None) => fallback(key),
                    None => current(key),
                };
                let mut items: Vec<String> = list_items(before.as_deref().unwrap_or(""));
                for item in list_items(v) {
                    if matches!(op, ConfigOp::Append(..)) {
                        if !items.contains(&item) {
                            items.push(item);
                        }
                    } else {
                        items.retain(|i| *i != item);
                    }
                }
                Some(items.join(","))
            }
        };
        out.insert(key, new);
    }
    Ok(out)
}

/// The items of a comma-separated list value, trimmed, without empties.
fn list_items(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .map(str::to_string)
        .collect()
}

fn api(code: ErrorCode, message: impl Into<String>) -> ApiError {
    ApiError::new(code, message)
}

/// Names that occur more than once in a request; Kafka refuses every
/// occurrence rather than guess which one was meant.
fn duplicated<'a>(names: impl Iterator<Item = &'a str>) -> BTreeSet<&'a str> {
    let mut seen = BTreeSet::new();
    let mut dup = BTreeSet::new();
    for n in names {
        if !seen.insert(n) {
            dup.insert(n);
        }
    }
    dup
}

/// Checks a manual assignment: rows of equal, non-zero length (`rf` when
/// given), no broker twice in a row, every broker registered, and at least
/// one replica per row able to lead now.
fn check_assignment(
    image: &MetadataImage,
    rows: &[Vec<BrokerId>],
    rf: Option<usize>,
) -> Result<(), ApiError> {
    let bad = |m: String| Err(api(ErrorCode::InvalidReplicaAssignment, m));
    if rows.is_empty() {
        return bad("the manual assignment has no partitions".into());
    }
    let width = rf.unwrap_or(rows[0].len());
    for (i, row) in rows.iter().enumerate() {
        if row.is_empty() {
            return bad(format!("partition {i} has no replicas"));
        }
        if row.len() != width {
            return bad(format!(
                "partition {i} has {} replicas; every partition needs {width}",
                row.len()
            ));
        }
        if has_duplicates(row) {
            return bad(format!(
                "partition {i} lists a broker twice: {}",
                broker_list(row)
            ));
        }
        if let Some(b) = row.iter().find(|b| image.broker(**b).is_none()) {
            return Err(api(
                ErrorCode::UnknownBroker,
                format!("partition {i} is assigned to broker {b}, which is not registered"),
            ));
        }
        if !row.iter().any(|b| image.can_lead(*b)) {
            return bad(format!(
                "no replica of partition {i} ({}) is on a broker that can lead",
                broker_list(row)
            ));
        }
    }
    Ok(())
}

/// Brokers that may receive new replicas: those able to lead now.
fn placement_brokers(image: &MetadataImage) -> Vec<PlacementBroker> {
    image
        .brokers()
        .filter(|b| b.can_lead())
        .map(|b| PlacementBroker {
            id: b.id,
            rack: b.rack.clone(),
        })
        .collect()
}

/// A new partition's record: the ISR is the replicas that can serve now, and
/// the first of them leads.
fn partition_record(
    image: &MetadataImage,
    topic_id: TopicId,
    index: u32,
    replicas: Vec<BrokerId>,
) -> PartitionRecord {
    let tp = TopicPartition::new(topic_id, index);
    let isr: Vec<BrokerId> = replicas
        .iter()
        .copied()
        .filter(|b| eligible(image, &tp, *b))
        .collect();
    // Replay requires a non-empty ISR; an assignment whose only leadable
    // replica has an offline dir still needs one member, so keep the
    // first registered-and-unfenced replica in that case.
    let isr = if isr.is_empty() {
        replicas
            .iter()
            .copied()
            .filter(|b| image.can_lead(*b))
            .take(1)
            .collect()
    } else {
        isr
    };
    PartitionRecord {
        topic_id,
        partition: PartitionId(index),
        leader: isr.first().copied(),
        replicas,
        isr,
    }
}

fn fresh_topic_id(
    image: &MetadataImage,
    taken: &BTreeSet<TopicId>,
    rng: &mut impl rand::Rng,
) -> TopicId {
    loop {
        let id = TopicId(rng.random::<u128>());
        if id.0 != 0 && image.topic(id).is_none() && !taken.contains(&id) {
            return id;
        }
    }
}

impl MetadataImage {
    /// Creates topics: a `Topic` record, then one `Partition` record per
    /// partition, for each topic that passes validation. With
    /// `validate_only` the replies are computed and no records written.
    pub fn decide_create_topics(
        &self,
        topics: &[CreateTopic],
        validate_only: bool,
        rng: &mut impl rand::Rng,
    ) -> Decision<Vec<(String, Result<CreatedTopic, ApiError>)>> {
        self.decide_create_topics_with(topics, validate_only, UnknownConfigs::Refuse, rng)
    }

    /// [`Self::decide_create_topics`], with config names the schema does
    /// not know handled as `unknown` says.
    pub fn decide_create_topics_with(
        &self,
        topics: &[CreateTopic],
        validate_only: bool,
        unknown: UnknownConfigs,
        rng: &mut impl rand::Rng,
    ) -> Decision<Vec<(String, Result<CreatedTopic, ApiError>)>> {
        let dup = duplicated(topics.iter().map(|t| t.name.as_str()));
        let mut w = Working::new(self);
        let mut taken = BTreeSet::new();
        let mut replies = Vec::with_capacity(topics.len());
        for t in topics {
            let outcome = self.plan_topic(t, &dup, unknown, rng).map(|rows| {
                let topic_id = fresh_topic_id(self, &taken, rng);
                taken.insert(topic_id);
                let created = CreatedTopic {
                    topic_id,
                    partitions: rows.len() as u32,
                    replication_factor: rows[0].len() as u32,
                };
                if !validate_only {
                    w.push(MetadataRecord::Topic(TopicRecord {
                        topic_id,
                        name: t.name.clone(),
                        configs: t.configs.clone(),
                    }));
                    for (i, row) in rows.into_iter().enumerate() {
                        let rec = partition_record(&w.image, topic_id, i as u32, row);
                        w.push(MetadataRecord::Partition(rec));
                    }
                }
                created
            });
            replies.push((t.name.clone(), outcome));
        }
        w.finish(replies)
    }

    /// Validates one topic of a CreateTopics request and returns its
    /// replica assignment.
    fn plan_topic(
        &self,
        t: &CreateTopic,
        dup: &BTreeSet<&str>,
        unknown: UnknownConfigs,
        rng: &mut impl rand::Rng,
    ) -> Result<Vec<Vec<BrokerId>>, ApiError> {
        validate_topic_name(&t.name)?;
        if dup.contains(t.name.as_str()) {
            return Err(api(
                ErrorCode::InvalidRequest,
                format!("topic {:?} appears more than once in the request", t.name),
            ));
        }
        if let Some(existing) = self.topic_by_name(&t.name) {
            let why = if existing.marked_for_deletion() {
                format!(
                    "topic {:?} already exists and is marked for deletion",
                    t.name
                )
            } else {
                format!("topic {:?} already exists", t.name)
            };
            return Err(api(ErrorCode::TopicAlreadyExists, why));
        }
        let rows = match &t.assignments {
            Some(rows) => {
                let width = rows.first().map_or(0, Vec::len) as u32;
                if (t.partitions != 0 && t.partitions as usize != rows.len())
                    || (t.replication_factor != 0 && t.replication_factor != width)
                {
                    return Err(api(
                        ErrorCode::InvalidRequest,
                        "with a manual assignment, partitions and replication factor must be 0 or match it",
                    ));
                }
                if rows.len() > MAX_PARTITIONS_PER_TOPIC as usize {
                    return Err(api(
                        ErrorCode::InvalidPartitions,
                        format!("at most {MAX_PARTITIONS_PER_TOPIC} partitions per topic"),
                    ));
                }
                check_assignment(self, rows, None)?;
                validate_topic_configs(&t.configs, width, unknown)?;
                rows.clone()
            }
            None => {
                if t.partitions == 0 || t.partitions > MAX_PARTITIONS_PER_TOPIC {
                    return Err(api(
                        ErrorCode::InvalidPartitions,
                        format!(
                            "partitions must be between 1 and {MAX_PARTITIONS_PER_TOPIC}, not {}",
                            t.partitions
                        ),
                    ));
                }
                let brokers = placement_brokers(self);
                let max_rf = (brokers.len() as u32).min(MAX_REPLICATION_FACTOR);
                if t.replication_factor == 0 || t.replication_factor > max_rf {
                    return Err(api(
                        ErrorCode::InvalidReplicationFactor,
                        if max_rf == 0 {
                            format!(
                                "replication factor {} needs as many brokers able to lead (registered, unfenced, not shutting down); there are none",
                                t.replication_factor
                            )
                        } else {
                            format!(
                                "replication factor must be between 1 and {max_rf} (brokers able to lead), not {}",
                                t.replication_factor
                            )
                        },
                    ));
                }
                validate_topic_configs(&t.configs, t.replication_factor, unknown)?;
                place_replicas(&brokers, t.partitions, t.replication_factor, rng)?
            }
        };
        Ok(rows)
    }

    /// Adds partitions to existing topics (counts only grow). New partitions
    /// get the replication factor of the topic's partition 0 (its target
    /// replica count if it is being reassigned).
    pub fn decide_create_partitions(
        &self,
        items: &[CreatePartitions],
        validate_only: bool,
        rng: &mut impl rand::Rng,
    ) -> Decision<Vec<(String, Result<(), ApiError>)>> {
        let dup = duplicated(items.iter().map(|t| t.name.as_str()));
        let mut w = Working::new(self);
        let mut replies = Vec::with_capacity(items.len());
        for item in items {
            let outcome = self
                .plan_partitions(item, &dup, rng)
                .map(|(topic_id, first, rows)| {
                    if !validate_only {
                        for (i, row) in rows.into_iter().enumerate() {
                            let rec = partition_record(&w.image, topic_id, first + i as u32, row);
                            w.push(MetadataRecord::Partition(rec));
                        }
                    }
                });
            replies.push((item.name.clone(), outcome));
        }
        w.finish(replies)
    }

    /// Validates one CreatePartitions item; returns the topic, the index of
    /// the first new partition and the new partitions' replicas.
    fn plan_partitions(
        &self,
        item: &CreatePartitions,
        dup: &BTreeSet<&str>,
        rng: &mut impl rand::Rng,
    ) -> Result<(TopicId, u32, Vec<Vec<BrokerId>>), ApiError> {
        if dup.contains(item.name.as_str()) {
            return Err(api(
                ErrorCode::InvalidRequest,
                format!(
                    "topic {:?} appears more than once in the request",
                    item.name
                ),
            ));
        }
        let t = self.topic_by_name(&item.name).ok_or_else(|| {
            api(
                ErrorCode::UnknownTopic,
                format!("topic {:?} does not exist", item.name),
            )
        })?;
        if t.marked_for_deletion() {
            return Err(api(
                ErrorCode::TopicDeletionInProgress,
                format!("topic {:?} is being deleted", item.name),
            ));
        }
        let current = t.partition_count;
        if item.total <= current || item.total > MAX_PARTITIONS_PER_TOPIC {
            return Err(api(
                ErrorCode::InvalidPartitions,
                format!(
                    "topic {:?} has {current} partitions; the new total must be between {} and {MAX_PARTITIONS_PER_TOPIC}, not {}",
                    item.name,
                    current + 1,
                    item.total
                ),
            ));
        }
        let rf = self
            .partition(&TopicPartition::new(t.id, 0))
            .map_or(1, |p| p.target_replicas().len());
        let adding = item.total - current;
        let rows = match &item.assignments {
            Some(rows) => {
                if rows.len() != adding as usize {
                    return Err(api(
                        ErrorCode::InvalidReplicaAssignment,
                        format!(
                            "{adding} new partitions need {adding} assignment rows, got {}",
                            rows.len()
                        ),
                    ));
                }
                check_assignment(self, rows, Some(rf))?;
                rows.clone()
            }
            None => place_replicas(&placement_brokers(self), adding, rf as u32, rng)?,
        };
        Ok((t.id, current, rows))
    }

    /// Sets and removes topic configs (`TopicConfig` records for the keys
    /// whose value actually changes). Turning unclean leader election on
    /// elects leaders for the topic's leaderless partitions right away, as
    /// the classic controller does.
    pub fn decide_alter_configs(
        &self,
        items: &[(String, Vec<ConfigOp>)],
        validate_only: bool,
    ) -> Decision<Vec<(String, Result<(), ApiError>)>> {
        self.decide_alter_configs_with(items, validate_only, UnknownConfigs::Refuse)
    }

    /// [`Self::decide_alter_configs`], with config names the schema does
    /// not know handled as `unknown` says.
    pub fn decide_alter_configs_with(
        &self,
        items: &[(String, Vec<ConfigOp>)],
        validate_only: bool,
        unknown: UnknownConfigs,
    ) -> Decision<Vec<(String, Result<(), ApiError>)>> {
        let dup = duplicated(items.iter().map(|(n, _)| n.as_str()));
        let mut w = Working::new(self);
        let mut replies = Vec::with_capacity(items.len());
        for (name, ops) in items {
            let outcome = self
                .plan_configs(name, ops, &dup, unknown)
                .map(|(topic_id, changes)| {
                    if validate_only {
                        return;
                    }
                    let was = self
                        .topic(topic_id)
                        .is_some_and(|t| self.unclean_leader_election(t));
                    let now = match changes
                        .iter()
                        .find(|(k, _)| *k == crate::UNCLEAN_LEADER_ELECTION)
                    {
                        Some((_, Some(v))) => v.eq_ignore_ascii_case("true"),
                        // Removing the topic's own value falls back to the
                        // cluster default.
                        Some((_, None)) => self
                            .default_config(crate::UNCLEAN_LEADER_ELECTION)
                            .is_some_and(|v| v.eq_ignore_ascii_case("true")),
                        None => was,
                    };
                    let records =
                        changes
                            .into_iter()
                            .map(|(key, value)| MetadataRecord::TopicConfig {
                                topic_id,
                                key: key.to_string(),
                                value,
                            });
                    if now && !was {
                        // The election reads the topic's new configs.
                        for r in records {
                            w.push(r);
                        }
                        elect_leaderless_of_topic(&mut w, topic_id);
                    } else {
                        w.append_unreplayed(records);
                    }
                });
            replies.push((name.clone(), outcome));
        }
        w.finish(replies)
    }

    /// Sets and removes cluster-wide defaults of topic configs
    /// (`ClusterConfig` records for the keys whose value changes), checked
    /// against the same schema as a topic's own values. Turning the default
    /// of unclean leader election on elects leaders right away for the
    /// leaderless partitions of every topic that takes the default.
    pub fn decide_alter_cluster_configs(
        &self,
        ops: &[ConfigOp],
        validate_only: bool,
        unknown: UnknownConfigs,
    ) -> Decision<Result<(), ApiError>> {
        let mut w = Working::new(self);
        let outcome = self.plan_cluster_configs(ops, unknown).map(|changes| {
            if validate_only || changes.is_empty() {
                return;
            }
            let default_unclean = |image: &MetadataImage| {
                image
                    .default_config(crate::UNCLEAN_LEADER_ELECTION)
                    .is_some_and(|v| v.eq_ignore_ascii_case("true"))
            };
            let was = default_unclean(self);
            for (key, value) in changes {
                w.push(MetadataRecord::ClusterConfig {
                    key: key.to_string(),
                    value,
                });
            }
            if default_unclean(&w.image) && !was {
                let takers: Vec<TopicId> = self
                    .topics()
                    .filter(|t| {
                        !t.marked_for_deletion()
                            && !t.configs.contains_key(crate::UNCLEAN_LEADER_ELECTION)
                    })
                    .map(|t| t.id)
                    .collect();
                for id in takers {
                    elect_leaderless_of_topic(&mut w, id);
                }
            }
        });
        w.finish(outcome)
    }

    /// Validates the ops of a cluster-defaults change; returns the keys
    /// whose default changes, each with its new value (`None` = removed).
    fn plan_cluster_configs<'a>(
        &self,
        ops: &'a [ConfigOp],
        unknown: UnknownConfigs,
    ) -> Result<ConfigChanges<'a>, ApiError> {
        let schema = |k: &str| crate::topic_config::lookup(k).map(|d| d.default.to_string());
        let last = resolve_config_ops(ops, |k| self.default_config(k).map(str::to_string), schema)?;
        for (k, v) in &last {
            if k.is_empty() {
                return Err(api(ErrorCode::InvalidConfig, "config key is empty"));
            }
            match v {
                Some(v) => crate::topic_config::check(k, v, unknown)?,
                None => crate::topic_config::check_name(k, unknown)?,
            }
        }
        Ok(last
            .into_iter()
            .filter(|(k, v)| self.cluster_configs().get(*k) != v.as_ref())
            .collect())
    }

    /// Validates one AlterConfigs item; returns the topic and the keys whose
    /// value changes (in key order), each with its new value (`None` =
    /// removed). Costs O(ops · log configs): the topic's map is not copied.
    fn plan_configs<'a>(
        &self,
        name: &str,
        ops: &'a [ConfigOp],
        dup: &BTreeSet<&str>,
        unknown: UnknownConfigs,
    ) -> Result<(TopicId, ConfigChanges<'a>), ApiError> {
        if dup.contains(name) {
            return Err(api(
                ErrorCode::InvalidRequest,
                format!("topic {name:?} appears more than once in the request"),
            ));
        }
        let t = self.topic_by_name(name).ok_or_else(|| {
            api(
                ErrorCode::UnknownTopic,
                format!("topic {name:?} does not exist"),
            )
        })?;
        if t.marked_for_deletion() {
            return Err(api(
                ErrorCode::TopicDeletionInProgress,
                format!("topic {name:?} is being deleted"),
            ));
        }
        // The last op on a key decides its new value.
        let last = resolve_config_ops(
            ops,
            |k| self.topic_config(t, k).map(|(v, _)| v.to_string()),
            |k| self.default_config(k).map(str::to_string),
        )?;
        let set = || {
            last.iter()
                .filter_map(|(k, v)| v.as_deref().map(|v| (*k, v)))
        };
        // The smallest replica count bounds min.insync.replicas; only
        // counted when that key is set (it walks the topic's partitions).
        let rf = if set().any(|(k, _)| k == crate::MIN_INSYNC_REPLICAS) {
            self.partitions_of(t.id)
                .map(|(_, p)| p.target_replicas().len() as u32)
                .min()
                .unwrap_or(1)
        } else {
            u32::MAX
        };
        for k in last.iter().filter_map(|(k, v)| v.is_none().then_some(*k)) {
            crate::topic_config::check_name(k, unknown)?;
        }
        validate_topic_configs(set(), rf, unknown)?;
        let changes = last
            .into_iter()
            .filter(|(k, v)| t.configs.get(*k).map(|c| &**c) != v.as_deref())
            .collect();
        Ok((t.id, changes))
    }
}

/// Config keys whose value changes, in key order, each with its new value
/// (`None` = removed).
type ConfigChanges<'a> = Vec<(&'a str, Option<String>)>;

/// Elects leaders for every leaderless partition of `topic` that can get
/// one now (unclean only if the topic allows it).
pub(crate) fn elect_leaderless_of_topic(w: &mut Working, topic: TopicId) {
    let image = w.image.clone();
    let unclean = image
        .topic(topic)
        .is_some_and(|t| image.unclean_leader_election(t));
    let mut changes = Vec::new();
    for (tp, p) in image.partitions_of(topic) {
        if p.leader.is_some() {
            continue;
        }
        if let Ok(e) = selectors::offline_partition(p, |b| eligible(&image, tp, b), unclean) {
            changes.push(election_change(tp, p, &e));
        }
    }
    for c in changes {
        w.change(c);
    }
}
