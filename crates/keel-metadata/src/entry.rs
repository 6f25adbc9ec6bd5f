//! One pure entry per admin write, in Kafka's controller-write order: the
//! request held to the limits against the image, then the caller's ACL on
//! each item, then the decision. The active controller's event loop only
//! runs an entry and proposes what it returns.
//!
//! A refusal of the whole request (a limit) is the reply's `Err`, with no
//! records; a refused item is answered in its place and writes nothing.

use crate::acl::{Operation, Resource};
use crate::authz::Checker;
use crate::decide::{decide_permitted, ConfigOp, CreatePartitions, CreateTopic, CreatedTopic};
use crate::limits::Limits;
use crate::topic_config::UnknownConfigs;
use crate::{ApiError, Decision, MetadataImage, TopicId};

/// Each item of a request by its name, with its outcome, in the request's
/// order.
pub type PerItem<T> = Vec<(String, Result<T, ApiError>)>;

/// What an entry returns: the records and the reply, or the refusal of
/// the whole request.
pub type Entry<T> = Decision<Result<T, ApiError>>;

/// `decide`'s decision when the limits hold; else their refusal, which
/// writes nothing.
fn within_limits<T>(
    limits: Result<(), ApiError>,
    decide: impl FnOnce() -> Decision<T>,
) -> Entry<T> {
    match limits {
        Ok(()) => decide().map_reply(Ok),
        Err(e) => Decision::reply_only(Err(e)),
    }
}

/// CreateTopics: the cluster's partition count, then `create` on the
/// cluster or, failing that, on each topic (Kafka's rule), then the
/// topics the caller may create.
pub fn create_topics(
    image: &MetadataImage,
    topics: &[CreateTopic],
    validate_only: bool,
    unknown: UnknownConfigs,
    checker: &Checker<'_>,
    limits: &Limits,
    rng: &mut impl rand::Rng,
) -> Entry<PerItem<CreatedTopic>> {
    within_limits(limits.check_create_topics_in(image, topics), || {
        let any = checker.may(Operation::Create, Resource::Cluster);
        decide_permitted(
            topics,
            |t| {
                (!any)
                    .then(|| {
                        checker
                            .check(Operation::Create, Resource::Topic(&t.name))
                            .err()
                    })
                    .flatten()
            },
            |t| t.name.clone(),
            |ts| image.decide_create_topics_with(ts, validate_only, unknown, rng),
        )
    })
}

/// DeleteTopics: `delete` on each topic, then the deletion of the topics
/// the caller may delete.
pub fn delete_topics(
    image: &MetadataImage,
    names: &[String],
    checker: &Checker<'_>,
) -> Decision<PerItem<TopicId>> {
    decide_permitted(
        names,
        |n| checker.check(Operation::Delete, Resource::Topic(n)).err(),
        Clone::clone,
        |names| image.decide_delete_topics(names),
    )
}

/// CreatePartitions: the partitions added per request and in the cluster,
/// then `alter` on each topic, then the topics the caller may alter.
pub fn create_partitions(
    image: &MetadataImage,
    items: &[CreatePartitions],
    validate_only: bool,
    checker: &Checker<'_>,
    limits: &Limits,
    rng: &mut impl rand::Rng,
) -> Entry<PerItem<()>> {
    within_limits(limits.check_create_partitions_in(image, items), || {
        decide_permitted(
            items,
            |i| {
                checker
                    .check(Operation::Alter, Resource::Topic(&i.name))
                    .err()
            },
            |i| i.name.clone(),
            |items| image.decide_create_partitions(items, validate_only, rng),
        )
    })
}

/// IncrementalAlterConfigs: the config count each topic would end with,
/// then `alter-configs` on each topic, then the topics the caller may
/// alter.
pub fn alter_configs(
    image: &MetadataImage,
    items: &[(String, Vec<ConfigOp>)],
    validate_only: bool,
    unknown: UnknownConfigs,
    checker: &Checker<'_>,
    limits: &Limits,
) -> Entry<PerItem<()>> {
    within_limits(limits.check_alter_configs_in(image, items), || {
        decide_permitted(
            items,
            |(t, _)| {
                checker
                    .check(Operation::AlterConfigs, Resource::Topic(t))
                    .err()
            },
            |(t, _)| t.clone(),
            |items| image.decide_alter_configs_with(items, validate_only, unknown),
        )
    })
}

/// AlterClusterConfigs (the caller's `alter-configs` on the cluster is
/// checked before): the count of cluster defaults it would leave, then the
/// decision, whose own refusal is its reply.
pub fn alter_cluster_configs(
    image: &MetadataImage,
    ops: &[ConfigOp],
    validate_only: bool,
    unknown: UnknownConfigs,
    limits: &Limits,
) -> Entry<Result<(), ApiError>> {
    within_limits(limits.check_cluster_configs_in(image, ops), || {
        image.decide_alter_cluster_configs(ops, validate_only, unknown)
    })
}
