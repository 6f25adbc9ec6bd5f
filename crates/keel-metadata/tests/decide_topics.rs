//! Decisions of `decide/topics.rs`: creating topics and partitions, and
//! altering topic configs (with the elections enabling unclean leader
//! election triggers). Each test builds a context, decides, checks the
//! records and the reply, replays, checks the image.

mod common;

use std::collections::BTreeMap;

use common::*;
use keel_metadata::decide::*;
use keel_metadata::*;

#[test]
fn create_topic_places_replicas_and_elects_the_first_replica() {
    let mut c = Cluster::with_brokers(3);
    let req = CreateTopic {
        name: "orders".into(),
        partitions: 6,
        replication_factor: 2,
        configs: BTreeMap::from([(MIN_INSYNC_REPLICAS.to_string(), "2".to_string())]),
        ..CreateTopic::default()
    };
    let d = c.image.decide_create_topics(&[req], false, &mut c.rng);
    let created = d.reply[0].1.clone().unwrap();
    assert_eq!((created.partitions, created.replication_factor), (6, 2));
    assert_ne!(created.topic_id, TopicId(0));
    assert!(matches!(&d.records[0], MetadataRecord::Topic(t) if t.name == "orders"));
    assert_eq!(d.records.len(), 7);
    c.commit(&d.records);

    let mut leaders = BTreeMap::new();
    for (_, p) in c.image.partitions_of(created.topic_id) {
        assert_eq!(p.leader, Some(p.replicas[0]));
        assert_eq!(p.isr, p.replicas);
        *leaders.entry(p.replicas[0]).or_insert(0) += 1;
    }
    assert_eq!(leaders.values().copied().collect::<Vec<_>>(), vec![2, 2, 2]);
}

#[test]
fn create_topics_refuses_bad_items_and_still_creates_the_good_one() {
    let mut c = Cluster::with_brokers(2);
    c.fence(2);
    c.create("taken", &[&[1]], &[]);
    let doomed = c.create("doomed", &[&[1]], &[]);
    let d = c.image.decide_delete_topics(&["doomed".into()]);
    c.commit(&d.records);
    assert!(c.image.topic(doomed).unwrap().marked_for_deletion());

    let plain = |name: &str, partitions, rf| CreateTopic {
        name: name.into(),
        partitions,
        replication_factor: rf,
        ..CreateTopic::default()
    };
    let manual = |name: &str, rows: Vec<Vec<BrokerId>>| CreateTopic {
        name: name.into(),
        assignments: Some(rows),
        ..CreateTopic::default()
    };
    let with_config = |name: &str, k: &str, v: &str| CreateTopic {
        configs: BTreeMap::from([(k.to_string(), v.to_string())]),
        ..plain(name, 1, 1)
    };
    let reqs = vec![
        plain("good", 2, 1),
        plain("bad name", 1, 1),
        plain("twice", 1, 1),
        plain("twice", 1, 1),
        plain("taken", 1, 1),
        plain("doomed", 1, 1),
        plain("zero", 0, 1),
        plain("huge", MAX_PARTITIONS_PER_TOPIC + 1, 1),
        plain("rf0", 1, 0),
        // Broker 2 is fenced: only one broker can lead.
        plain("rf2", 1, 2),
        with_config("unclean", UNCLEAN_LEADER_ELECTION, "maybe"),
        with_config("isr", MIN_INSYNC_REPLICAS, "2"),
        manual("empty", vec![]),
        manual("ragged", vec![bs(&[1]), bs(&[1, 2])]),
        manual("dup", vec![bs(&[1, 1])]),
        manual("ghost", vec![bs(&[1, 9])]),
        manual("no-leader", vec![bs(&[2])]),
    ];
    let d = c.image.decide_create_topics(&reqs, false, &mut c.rng);
    let codes: Vec<(&str, ErrorCode)> = d
        .reply
        .iter()
        .map(|(n, r)| {
            (
                n.as_str(),
                r.as_ref().err().map_or(ErrorCode::None, |e| e.code),
            )
        })
        .collect();
    assert_eq!(
        codes,
        vec![
            ("good", ErrorCode::None),
            ("bad name", ErrorCode::InvalidTopicName),
            ("twice", ErrorCode::InvalidRequest),
            ("twice", ErrorCode::InvalidRequest),
            ("taken", ErrorCode::TopicAlreadyExists),
            ("doomed", ErrorCode::TopicAlreadyExists),
            ("zero", ErrorCode::InvalidPartitions),
            ("huge", ErrorCode::InvalidPartitions),
            ("rf0", ErrorCode::InvalidReplicationFactor),
            ("rf2", ErrorCode::InvalidReplicationFactor),
            ("unclean", ErrorCode::InvalidConfig),
            ("isr", ErrorCode::InvalidConfig),
            ("empty", ErrorCode::InvalidReplicaAssignment),
            ("ragged", ErrorCode::InvalidReplicaAssignment),
            ("dup", ErrorCode::InvalidReplicaAssignment),
            ("ghost", ErrorCode::UnknownBroker),
            ("no-leader", ErrorCode::InvalidReplicaAssignment),
        ]
    );
    assert!(d.reply[5]
        .1
        .as_ref()
        .unwrap_err()
        .message
        .contains("marked for deletion"));
    // Only "good": its topic record and two partitions.
    assert_eq!(d.records.len(), 3);
    c.commit(&d.records);
    assert!(c.image.topic_by_name("good").is_some());
    assert!(c.image.topic_by_name("zero").is_none());
}

#[test]
fn create_topics_validate_only_answers_without_writing() {
    let mut c = Cluster::with_brokers(1);
    let req = spread("t", 3, 1);
    let d = c.image.decide_create_topics(&[req], true, &mut c.rng);
    assert!(d.reply[0].1.is_ok());
    assert!(d.records.is_empty());
}

#[test]
fn create_partitions_only_grows_and_keeps_the_replication_factor() {
    let mut c = Cluster::with_brokers(3);
    let t = c.create("t", &[&[1, 2]], &[]);
    let doomed = c.create("doomed", &[&[1]], &[]);
    c.commit(&c.image.decide_delete_topics(&["doomed".into()]).records);

    let item = |name: &str, total, rows: Option<Vec<Vec<BrokerId>>>| CreatePartitions {
        name: name.into(),
        total,
        assignments: rows,
    };
    let d = c.image.decide_create_partitions(
        &[
            item("t", 3, None),
            item("missing", 2, None),
            item("doomed", 2, None),
            item("t", 1, None),
        ],
        false,
        &mut c.rng,
    );
    // "t" appears twice: both refused as ambiguous.
    let codes: Vec<ErrorCode> = d.reply.iter().map(|(_, r)| code(r)).collect();
    assert_eq!(
        codes,
        vec![
            ErrorCode::InvalidRequest,
            ErrorCode::UnknownTopic,
            ErrorCode::TopicDeletionInProgress,
            ErrorCode::InvalidRequest
        ]
    );
    assert!(d.records.is_empty());
    let _ = doomed;

    let shrink = c
        .image
        .decide_create_partitions(&[item("t", 1, None)], false, &mut c.rng);
    assert_eq!(code(&shrink.reply[0].1), ErrorCode::InvalidPartitions);

    let bad_rf =
        c.image
            .decide_create_partitions(&[item("t", 2, Some(vec![bs(&[3])]))], false, &mut c.rng);
    assert_eq!(
        code(&bad_rf.reply[0].1),
        ErrorCode::InvalidReplicaAssignment
    );

    let d = c.image.decide_create_partitions(
        &[item("t", 2, Some(vec![bs(&[3, 1])]))],
        false,
        &mut c.rng,
    );
    assert_eq!(d.reply[0].1, Ok(()));
    c.commit(&d.records);
    let d = c
        .image
        .decide_create_partitions(&[item("t", 4, None)], false, &mut c.rng);
    assert_eq!(d.records.len(), 2);
    c.commit(&d.records);
    assert_eq!(c.image.topic(t).unwrap().partition_count, 4);
    assert_eq!(c.p(t, 1).replicas, bs(&[3, 1]));
    assert!(c.image.partitions_of(t).all(|(_, p)| p.replicas.len() == 2));
}

#[test]
fn alter_configs_writes_only_real_changes_and_validates_the_result() {
    let mut c = Cluster::with_brokers(2);
    let t = c.create("t", &[&[1, 2]], &[("retention.ms", "1000")]);
    let set = |k: &str, v: &str| ConfigOp::Set(k.into(), v.into());

    let d = c.image.decide_alter_configs(
        &[
            (
                "t".into(),
                vec![
                    set("retention.ms", "1000"),
                    set(MIN_INSYNC_REPLICAS, "2"),
                    ConfigOp::Delete("cleanup.policy".into()),
                ],
            ),
            ("missing".into(), vec![set("retention.ms", "5")]),
        ],
        false,
    );
    assert_eq!(d.reply[0].1, Ok(()));
    assert_eq!(code(&d.reply[1].1), ErrorCode::UnknownTopic);
    assert_eq!(
        d.records,
        vec![MetadataRecord::TopicConfig {
            topic_id: t,
            key: MIN_INSYNC_REPLICAS.into(),
            value: Some("2".into())
        }]
    );
    c.commit(&d.records);

    let too_many = c
        .image
        .decide_alter_configs(&[("t".into(), vec![set(MIN_INSYNC_REPLICAS, "3")])], false);
    assert_eq!(code(&too_many.reply[0].1), ErrorCode::InvalidConfig);
    assert!(too_many.records.is_empty());

    let dry = c.image.decide_alter_configs(
        &[("t".into(), vec![ConfigOp::Delete("retention.ms".into())])],
        true,
    );
    assert_eq!(dry.reply[0].1, Ok(()));
    assert!(dry.records.is_empty());

    // The last op on a key wins, and only its final value is validated;
    // records come in key order.
    let d = c.image.decide_alter_configs(
        &[(
            "t".into(),
            vec![
                set(MIN_INSYNC_REPLICAS, "9"),
                set("segment.ms", "1"),
                ConfigOp::Delete(MIN_INSYNC_REPLICAS.into()),
                set("segment.ms", "2"),
            ],
        )],
        false,
    );
    assert_eq!(d.reply[0].1, Ok(()));
    assert_eq!(
        d.records,
        vec![
            MetadataRecord::TopicConfig {
                topic_id: t,
                key: MIN_INSYNC_REPLICAS.into(),
                value: None
            },
            MetadataRecord::TopicConfig {
                topic_id: t,
                key: "segment.ms".into(),
                value: Some("2".into())
            },
        ]
    );
}

#[test]
fn configs_follow_kafkas_schema_per_topic_and_unknown_names_only_when_allowed() {
    use keel_metadata::topic_config::UnknownConfigs;
    let mut c = Cluster::with_brokers(2);
    c.create("t", &[&[1, 2]], &[]);
    c.create("u", &[&[2, 1]], &[]);
    let set = |k: &str, v: &str| ConfigOp::Set(k.into(), v.into());
    let items = vec![
        ("t".to_string(), vec![set("retention.ms", "abc")]),
        ("u".to_string(), vec![set("retention.ms", "60000")]),
    ];
    let d = c.image.decide_alter_configs(&items, false);
    let e = d.reply[0].1.clone().unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidConfig);
    assert!(e.message.contains("retention.ms"), "{}", e.message);
    assert_eq!(d.reply[1].1, Ok(()), "the other topic is not held back");
    assert_eq!(d.records.len(), 1);

    let unknown = vec![("t".to_string(), vec![set("retention.msec", "1")])];
    let d = c.image.decide_alter_configs(&unknown, false);
    assert_eq!(code(&d.reply[0].1), ErrorCode::InvalidConfig);
    assert!(d.records.is_empty());
    let removal = vec![(
        "t".to_string(),
        vec![ConfigOp::Delete("retention.msec".into())],
    )];
    assert_eq!(
        code(&c.image.decide_alter_configs(&removal, false).reply[0].1),
        ErrorCode::InvalidConfig
    );
    let d = c
        .image
        .decide_alter_configs_with(&unknown, false, UnknownConfigs::Allow);
    assert_eq!(d.reply[0].1, Ok(()));
    assert_eq!(d.records.len(), 1);
    let bad = vec![("t".to_string(), vec![set("cleanup.policy", "forever")])];
    let d = c
        .image
        .decide_alter_configs_with(&bad, false, UnknownConfigs::Allow);
    assert_eq!(
        code(&d.reply[0].1),
        ErrorCode::InvalidConfig,
        "known keys stay checked"
    );

    // CreateTopics: the same schema, per topic.
    let req = |name: &str, k: &str, v: &str| CreateTopic {
        name: name.into(),
        partitions: 1,
        replication_factor: 1,
        assignments: None,
        configs: [(k.to_string(), v.to_string())].into(),
    };
    let d = c.image.decide_create_topics(
        &[
            req("a", "segment.bytes", "13"),
            req("b", "custom.key", "x"),
            req("c", "cleanup.policy", "compact"),
        ],
        false,
        &mut c.rng,
    );
    assert_eq!(code(&d.reply[0].1), ErrorCode::InvalidConfig);
    assert_eq!(code(&d.reply[1].1), ErrorCode::InvalidConfig);
    assert!(d.reply[2].1.is_ok());
}

#[test]
fn enabling_unclean_election_elects_leaderless_partitions_at_once() {
    let mut c = Cluster::with_brokers(2);
    let t = c.create("t", &[&[1, 2]], &[]);
    c.alter_isr(TopicPartition::new(t, 0), &[1]);
    c.fence(1);
    assert_eq!(c.p(t, 0).leader, None);

    let d = c.image.decide_alter_configs(
        &[(
            "t".into(),
            vec![ConfigOp::Set(UNCLEAN_LEADER_ELECTION.into(), "true".into())],
        )],
        false,
    );
    assert_eq!(d.records.len(), 2);
    assert!(change(&d.records, 1).unclean);
    c.commit(&d.records);
    assert_eq!(c.p(t, 0).leader, Some(b(2)));
}

#[test]
fn alter_configs_writes_configs_in_request_order_then_the_elections_they_enable() {
    let mut c = Cluster::with_brokers(2);
    let t = c.create("t", &[&[1, 2]], &[]);
    let other = c.create("other", &[&[2, 1]], &[]);
    let tp = TopicPartition::new(t, 0);
    c.alter_isr(tp, &[1]);
    c.fence(1);
    assert_eq!(c.p(t, 0).leader, None, "only the fenced broker is in sync");

    let set = |k: &str, v: &str| ConfigOp::Set(k.into(), v.into());
    let d = c.image.decide_alter_configs(
        &[
            ("other".into(), vec![set("retention.ms", "5")]),
            ("t".into(), vec![set(UNCLEAN_LEADER_ELECTION, "TRUE")]),
        ],
        false,
    );
    assert_eq!(d.reply[0].1, Ok(()));
    assert_eq!(d.reply[1].1, Ok(()));
    assert_eq!(
        d.records[..2],
        [
            MetadataRecord::TopicConfig {
                topic_id: other,
                key: "retention.ms".into(),
                value: Some("5".into())
            },
            MetadataRecord::TopicConfig {
                topic_id: t,
                key: UNCLEAN_LEADER_ELECTION.into(),
                value: Some("TRUE".into())
            },
        ]
    );
    assert_eq!(d.records.len(), 3, "one election: {:?}", d.records);
    c.commit(&d.records);
    assert_eq!(c.p(t, 0).leader, Some(b(2)), "unclean election of broker 2");
    assert_eq!(c.p(t, 0).isr, bs(&[2]));
    assert_eq!(
        c.image
            .topic(other)
            .unwrap()
            .configs
            .get("retention.ms")
            .map(|v| &**v),
        Some("5")
    );

    // Setting it again (no change) or to false elects nothing.
    let d = c.image.decide_alter_configs(
        &[("t".into(), vec![set(UNCLEAN_LEADER_ELECTION, "false")])],
        false,
    );
    assert_eq!(d.records.len(), 1);
}

// ---- cluster defaults and list ops -------------------------------------------

fn cluster_set(k: &str, v: &str) -> ConfigOp {
    ConfigOp::Set(k.into(), v.into())
}

#[test]
fn a_cluster_default_is_what_a_topic_without_its_own_value_takes() {
    let mut c = Cluster::with_brokers(1);
    let own = c.create("own", &[&[1]], &[("retention.ms", "5")]);
    let plain = c.create("plain", &[&[1]], &[]);
    let d = c.image.decide_alter_cluster_configs(
        &[cluster_set("retention.ms", "60000")],
        false,
        topic_config::UnknownConfigs::Refuse,
    );
    assert_eq!(d.reply, Ok(()));
    assert_eq!(
        d.records,
        [MetadataRecord::ClusterConfig {
            key: "retention.ms".into(),
            value: Some("60000".into())
        }]
    );
    c.commit(&d.records);
    let at = |c: &Cluster, t| {
        let t = c.image.topic(t).unwrap();
        c.image
            .topic_config(t, "retention.ms")
            .map(|(v, s)| (v.to_string(), s))
    };
    assert_eq!(at(&c, own), Some(("5".into(), ConfigSource::Topic)));
    assert_eq!(
        at(&c, plain),
        Some(("60000".into(), ConfigSource::ClusterDefault))
    );
    let t = c.image.topic(plain).unwrap();
    assert_eq!(
        c.image.topic_config(t, "segment.ms"),
        Some(("604800000", ConfigSource::Default))
    );

    // Setting the same value again changes nothing; removing it goes back
    // to Kafka's default.
    let again = c.image.decide_alter_cluster_configs(
        &[cluster_set("retention.ms", "60000")],
        false,
        topic_config::UnknownConfigs::Refuse,
    );
    assert_eq!((again.reply, again.records.len()), (Ok(()), 0));
    let d = c.image.decide_alter_cluster_configs(
        &[ConfigOp::Delete("retention.ms".into())],
        false,
        topic_config::UnknownConfigs::Refuse,
    );
    c.commit(&d.records);
    assert_eq!(
        at(&c, plain),
        Some(("604800000".into(), ConfigSource::Default))
    );
    assert!(c.image.cluster_configs().is_empty());
}

#[test]
fn bad_cluster_defaults_are_refused_and_change_nothing() {
    let c = Cluster::with_brokers(1);
    for (ops, what) in [
        (vec![cluster_set("retention.ms", "abc")], "retention.ms"),
        (vec![cluster_set("no.such.key", "1")], "no.such.key"),
        (
            vec![cluster_set(MIN_INSYNC_REPLICAS, "0")],
            MIN_INSYNC_REPLICAS,
        ),
        (
            vec![
                cluster_set("retention.ms", "1"),
                cluster_set(UNCLEAN_LEADER_ELECTION, "maybe"),
            ],
            UNCLEAN_LEADER_ELECTION,
        ),
        (
            vec![ConfigOp::Append("retention.ms".into(), "1".into())],
            "retention.ms",
        ),
    ] {
        let d =
            c.image
                .decide_alter_cluster_configs(&ops, false, topic_config::UnknownConfigs::Refuse);
        let e = d.reply.clone().unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidConfig, "{ops:?}");
        assert!(e.message.contains(what), "{}", e.message);
        assert!(d.records.is_empty(), "{ops:?}");
    }
    // validate_only checks and writes nothing.
    let d = c.image.decide_alter_cluster_configs(
        &[cluster_set("retention.ms", "1")],
        true,
        topic_config::UnknownConfigs::Refuse,
    );
    assert_eq!((d.reply, d.records.len()), (Ok(()), 0));
}

#[test]
fn a_cluster_default_of_unclean_election_elects_for_topics_that_take_it() {
    let mut c = Cluster::with_brokers(2);
    let takes = c.create("takes", &[&[1, 2]], &[]);
    let refuses = c.create("refuses", &[&[1, 2]], &[(UNCLEAN_LEADER_ELECTION, "false")]);
    for t in [takes, refuses] {
        c.alter_isr(TopicPartition::new(t, 0), &[1]);
    }
    c.fence(1);
    assert_eq!(c.p(takes, 0).leader, None);

    let d = c.image.decide_alter_cluster_configs(
        &[cluster_set(UNCLEAN_LEADER_ELECTION, "true")],
        false,
        topic_config::UnknownConfigs::Refuse,
    );
    assert_eq!(d.reply, Ok(()));
    c.commit(&d.records);
    assert_eq!(c.p(takes, 0).leader, Some(b(2)), "unclean, by default");
    assert_eq!(c.p(refuses, 0).leader, None, "its own false wins");

    // Removing the topic's own value now means the default: it elects too.
    let d = c.image.decide_alter_configs(
        &[(
            "refuses".into(),
            vec![ConfigOp::Delete(UNCLEAN_LEADER_ELECTION.into())],
        )],
        false,
    );
    c.commit(&d.records);
    assert_eq!(c.p(refuses, 0).leader, Some(b(2)));
}

#[test]
fn append_and_subtract_work_on_lists_from_the_value_in_force() {
    let mut c = Cluster::with_brokers(1);
    let t = c.create("t", &[&[1]], &[]);
    let alter = |c: &mut Cluster, ops: Vec<ConfigOp>| {
        let d = c.image.decide_alter_configs(&[("t".into(), ops)], false);
        let r = d.reply[0].1.clone();
        c.commit(&d.records);
        r
    };
    let policy = |c: &Cluster| {
        c.image
            .topic(t)
            .unwrap()
            .configs
            .get("cleanup.policy")
            .map(|v| v.to_string())
    };
    // From Kafka's default, "delete".
    let append = |v: &str| ConfigOp::Append("cleanup.policy".into(), v.into());
    let subtract = |v: &str| ConfigOp::Subtract("cleanup.policy".into(), v.into());
    assert_eq!(alter(&mut c, vec![append("compact")]), Ok(()));
    assert_eq!(policy(&c).as_deref(), Some("delete,compact"));
    assert_eq!(alter(&mut c, vec![append("compact,delete")]), Ok(()));
    assert_eq!(policy(&c).as_deref(), Some("delete,compact"), "no repeats");
    assert_eq!(alter(&mut c, vec![subtract("delete")]), Ok(()));
    assert_eq!(policy(&c).as_deref(), Some("compact"));
    // Subtracting the last item leaves an empty list, which the schema
    // refuses; nothing changes.
    let e = alter(&mut c, vec![subtract("compact")]).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidConfig);
    assert_eq!(policy(&c).as_deref(), Some("compact"));
    // Only list-typed configs.
    let e = alter(
        &mut c,
        vec![ConfigOp::Append("retention.ms".into(), "1".into())],
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidConfig);
    assert!(e.message.contains("not LIST"), "{}", e.message);
    // Ops apply in order within one request.
    assert_eq!(
        alter(
            &mut c,
            vec![ConfigOp::Delete("cleanup.policy".into()), append("compact")]
        ),
        Ok(())
    );
    assert_eq!(policy(&c).as_deref(), Some("delete,compact"));
}

#[test]
fn an_image_without_cluster_defaults_is_written_as_format_3_and_with_them_as_4() {
    let mut c = Cluster::with_brokers(1);
    c.create("t", &[&[1]], &[]);
    let bytes = c.image.encode();
    assert_eq!(&bytes[..2], &3u16.to_le_bytes());
    assert_eq!(MetadataImage::decode(&bytes).unwrap(), c.image);

    let d = c.image.decide_alter_cluster_configs(
        &[cluster_set("retention.ms", "1")],
        false,
        topic_config::UnknownConfigs::Refuse,
    );
    assert_eq!(
        RecordBatch::new(d.records.clone()).encode()[..2],
        4u16.to_le_bytes()
    );
    c.commit(&d.records);
    let bytes = c.image.encode();
    assert_eq!(&bytes[..2], &4u16.to_le_bytes());
    let back = MetadataImage::decode(&bytes).unwrap();
    assert_eq!(back, c.image);
    assert_eq!(back.hash(), c.image.hash());
    // A batch without the new record keeps version 3.
    let plain = RecordBatch::new(vec![MetadataRecord::EndTransaction]);
    assert_eq!(plain.encode()[..2], 3u16.to_le_bytes());
}
