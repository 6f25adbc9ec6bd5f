//! Decisions of `decide/partitions.rs`: AlterPartition (ISR changes),
//! preferred and unclean elections, the offline sweep and the automatic
//! leader rebalance. Each test builds a context, decides, checks the
//! records and the reply, replays, checks the image.

mod common;

use common::*;
use keel_metadata::decide::*;
use keel_metadata::*;

#[test]
fn alter_partition_checks_broker_epochs_and_each_item() {
    let mut c = Cluster::with_brokers(4);
    let t = c.create("t", &[&[1, 2, 3]], &[]);
    let tp = TopicPartition::new(t, 0);
    let e1 = c.epoch(1);
    let item = |isr: &[u32], le: u32, pe: u32| AlterPartitionItem {
        tp,
        leader_epoch: LeaderEpoch(le),
        partition_epoch: PartitionEpoch(pe),
        new_isr: bs(isr),
    };

    let d = c
        .image
        .decide_alter_partition(b(9), e1, &[item(&[1], 0, 0)]);
    assert_eq!(code(&d.reply), ErrorCode::UnknownBroker);
    let d = c
        .image
        .decide_alter_partition(b(1), BrokerEpoch(e1.0 + 1), &[item(&[1], 0, 0)]);
    assert_eq!(code(&d.reply), ErrorCode::StaleBrokerEpoch);
    assert!(d.records.is_empty());

    let mut unknown_topic = item(&[1], 0, 0);
    unknown_topic.tp = TopicPartition::new(TopicId(77), 0);
    let mut unknown_partition = item(&[1], 0, 0);
    unknown_partition.tp = TopicPartition::new(t, 5);
    let d = c.image.decide_alter_partition(
        b(1),
        e1,
        &[
            unknown_topic,
            unknown_partition,
            item(&[1, 2], 1, 0),
            item(&[], 0, 0),
            item(&[1, 1], 0, 0),
            item(&[1, 4], 0, 0),
            item(&[2, 3], 0, 0),
            item(&[3, 2, 1], 0, 0),
            item(&[1, 2], 0, 0),
            item(&[1], 0, 0),
        ],
    );
    let replies = d.reply.as_ref().unwrap();
    assert_eq!(
        codes(replies),
        vec![
            ErrorCode::UnknownTopic,
            ErrorCode::UnknownPartition,
            ErrorCode::FencedLeaderEpoch,
            ErrorCode::InvalidRequest,
            ErrorCode::InvalidRequest,
            ErrorCode::InvalidRequest,
            ErrorCode::InvalidRequest,
            // Same members in another order: nothing to change.
            ErrorCode::None,
            ErrorCode::None,
            // The previous item moved the partition epoch on.
            ErrorCode::InvalidPartitionEpoch,
        ]
    );
    assert_eq!(
        replies[7].1.as_ref().unwrap().partition_epoch,
        PartitionEpoch(0)
    );
    let after = replies[8].1.as_ref().unwrap();
    assert_eq!(
        (&after.isr, after.partition_epoch),
        (&bs(&[1, 2]), PartitionEpoch(1))
    );
    assert_eq!(d.records.len(), 1);
    c.commit(&d.records);

    // Only the leader may change the ISR.
    let d = c
        .image
        .decide_alter_partition(b(2), c.epoch(2), &[item(&[2], 0, 1)]);
    assert_eq!(code(&d.reply.unwrap()[0].1), ErrorCode::NotLeaderOrFollower);

    // A fenced broker cannot join the ISR; a live one can.
    c.fence(3);
    let d = c
        .image
        .decide_alter_partition(b(1), e1, &[item(&[1, 2, 3], 0, 1)]);
    assert_eq!(code(&d.reply.unwrap()[0].1), ErrorCode::IneligibleReplica);
    c.unfence(3);
    let d = c
        .image
        .decide_alter_partition(b(1), e1, &[item(&[1, 2, 3], 0, 1)]);
    assert!(d.reply.unwrap()[0].1.is_ok());
    c.commit(&d.records);
    assert_eq!(c.p(t, 0).isr, bs(&[1, 2, 3]));
}

#[test]
fn preferred_election_returns_leadership_to_the_first_replica() {
    let mut c = Cluster::with_brokers(2);
    let t = c.create("t", &[&[1, 2]], &[]);
    let tp = TopicPartition::new(t, 0);

    let d = c
        .image
        .decide_elect_leaders(ElectionKind::Preferred, Some(&[tp]));
    assert_eq!(code(&d.reply[0].1), ErrorCode::ElectionNotNeeded);
    // An operator reads the topic's name, not its id.
    let msg = d.reply[0].1.as_ref().expect_err("refused").message.clone();
    assert!(
        msg.starts_with("t-0 ") && !msg.contains(&t.to_string()),
        "{msg}"
    );

    c.fence(1);
    c.unfence(1);
    assert_eq!(c.p(t, 0).leader, Some(b(2)));
    // Broker 1 is back but not in sync yet.
    let d = c
        .image
        .decide_elect_leaders(ElectionKind::Preferred, Some(&[tp]));
    assert_eq!(code(&d.reply[0].1), ErrorCode::PreferredLeaderNotAvailable);
    assert!(d.records.is_empty());
    let all = c.image.decide_elect_leaders(ElectionKind::Preferred, None);
    assert_eq!(
        code(&all.reply[0].1),
        ErrorCode::PreferredLeaderNotAvailable
    );

    c.alter_isr(tp, &[2, 1]);
    let d = c.image.decide_elect_leaders(ElectionKind::Preferred, None);
    assert_eq!(d.reply, vec![(tp, Ok(b(1)))]);
    c.commit(&d.records);
    assert_eq!(
        (c.p(t, 0).leader, c.p(t, 0).leader_epoch),
        (Some(b(1)), LeaderEpoch(2))
    );
    // Nothing left to do: an all-partitions election reports nothing.
    assert!(c
        .image
        .decide_elect_leaders(ElectionKind::Preferred, None)
        .reply
        .is_empty());
}

#[test]
fn unclean_election_is_for_leaderless_partitions_only() {
    let mut c = Cluster::with_brokers(3);
    let t = c.create("t", &[&[1, 2]], &[]);
    let u = c.create("u", &[&[3]], &[]);
    let (tp, up) = (TopicPartition::new(t, 0), TopicPartition::new(u, 0));
    c.alter_isr(tp, &[1]);
    c.fence(1);
    c.fence(3);
    // Unclean election is off for the topic: the offline sweep leaves it.
    assert!(c.image.decide_elect_offline().records.is_empty());

    let d = c.image.decide_elect_leaders(
        ElectionKind::Unclean,
        Some(&[tp, up, TopicPartition::new(t, 9)]),
    );
    assert_eq!(d.reply[0].1, Ok(b(2)));
    assert_eq!(code(&d.reply[1].1), ErrorCode::EligibleLeadersNotAvailable);
    assert_eq!(code(&d.reply[2].1), ErrorCode::UnknownPartition);
    assert!(change(&d.records, 0).unclean);
    c.commit(&d.records);
    assert_eq!((c.p(t, 0).leader, &c.p(t, 0).isr), (Some(b(2)), &bs(&[2])));

    let d = c
        .image
        .decide_elect_leaders(ElectionKind::Unclean, Some(&[tp]));
    assert_eq!(code(&d.reply[0].1), ErrorCode::ElectionNotNeeded);
}

#[test]
fn offline_sweep_elects_where_someone_can_lead() {
    let mut c = Cluster::with_brokers(2);
    let t = c.create("t", &[&[1, 2]], &[(UNCLEAN_LEADER_ELECTION, "true")]);
    c.alter_isr(TopicPartition::new(t, 0), &[1]);
    c.fence(2);
    c.fence(1);
    assert_eq!(c.p(t, 0).leader, None);
    // Broker 2 is back: it is unfenced without the normal election pass
    // (as after a controller failover), so the sweep has to find it.
    let d = c.image.decide_heartbeat(
        &Heartbeat {
            broker: b(2),
            epoch: c.epoch(2),
            metadata_offset: 0,
            want_fence: false,
            want_shutdown: false,
            offline_log_dirs: vec![],
        },
        true,
    );
    c.commit(&d.records);
    assert_eq!(c.p(t, 0).leader, Some(b(2)), "unfencing elects right away");
    assert!(c.image.decide_elect_offline().records.is_empty());
}

#[test]
fn auto_rebalance_moves_leaders_home_above_the_threshold() {
    let mut c = Cluster::with_brokers(2);
    let t = c.create("t", &[&[1, 2], &[1, 2], &[2, 1]], &[]);
    c.fence(1);
    c.unfence(1);
    for i in 0..3 {
        c.alter_isr(TopicPartition::new(t, i), &[2, 1]);
    }
    // Broker 1 is preferred for two partitions and leads neither: 100%.
    assert!(c.image.decide_auto_rebalance(100).records.is_empty());
    let d = c.image.decide_auto_rebalance(10);
    assert_eq!(
        d.reply,
        vec![TopicPartition::new(t, 0), TopicPartition::new(t, 1)]
    );
    c.commit(&d.records);
    assert_eq!(c.p(t, 0).leader, Some(b(1)));
    assert_eq!(c.p(t, 2).leader, Some(b(2)));
    assert!(c.image.decide_auto_rebalance(0).records.is_empty());
}
