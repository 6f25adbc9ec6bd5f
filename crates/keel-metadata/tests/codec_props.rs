//! Property tests of the stored encodings: record batches round-trip,
//! damaged bytes are refused without panicking, and images built by
//! replaying generated valid logs round-trip through snapshots with the
//! same hash, replay deterministically and keep their invariants.
//!
//! Seeds are fixed and case counts bounded, so runs are reproducible.

use std::collections::BTreeMap;

use keel_metadata::records::{RecordBatch, RECORD_FORMAT_VERSION};
use keel_metadata::scram::{ScramCredential, ScramMechanism};
use keel_metadata::{
    BrokerEpoch, BrokerId, BrokerRegistration, DecodeError, IncarnationId, LeaderChange,
    MetadataImage, MetadataRecord, PartitionChangeRecord, PartitionId, PartitionRecord,
    PartitionState, RegisterBrokerRecord, ReplicaState, TopicId, TopicPartition, TopicRecord,
    UNCLEAN_LEADER_ELECTION,
};
use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngSeed};

fn config(cases: u32, seed: u64) -> Config {
    Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        max_shrink_iters: 2_000,
        ..Config::default()
    }
}

// ---- strategies for every record ------------------------------------------

fn broker_id() -> impl Strategy<Value = BrokerId> {
    prop_oneof![0u32..8, any::<u32>()].prop_map(BrokerId)
}

fn broker_ids() -> impl Strategy<Value = Vec<BrokerId>> {
    vec(broker_id(), 0..6)
}

fn broker_epoch() -> impl Strategy<Value = BrokerEpoch> {
    any::<u64>().prop_map(BrokerEpoch)
}

fn topic_id() -> impl Strategy<Value = TopicId> {
    any::<u128>().prop_map(TopicId)
}

fn partition_id() -> impl Strategy<Value = PartitionId> {
    prop_oneof![0u32..16, any::<u32>()].prop_map(PartitionId)
}

/// Any text, including multi-byte characters.
fn text() -> impl Strategy<Value = String> {
    "\\PC{0,16}"
}

fn replica_state() -> impl Strategy<Value = ReplicaState> {
    proptest::sample::select(ReplicaState::ALL.to_vec())
}

fn leader_change() -> impl Strategy<Value = LeaderChange> {
    prop_oneof![
        Just(LeaderChange::Unchanged),
        Just(LeaderChange::NoLeader),
        broker_id().prop_map(LeaderChange::To),
    ]
}

fn register_broker() -> impl Strategy<Value = RegisterBrokerRecord> {
    (
        broker_id(),
        any::<u128>(),
        text(),
        option::of(text()),
        vec(text(), 0..4),
    )
        .prop_map(
            |(broker, incarnation, address, rack, log_dirs)| RegisterBrokerRecord {
                broker,
                incarnation: IncarnationId(incarnation),
                address,
                rack,
                log_dirs,
            },
        )
}

fn topic_record() -> impl Strategy<Value = TopicRecord> {
    (topic_id(), text(), btree_map(text(), text(), 0..4)).prop_map(|(topic_id, name, configs)| {
        TopicRecord {
            topic_id,
            name,
            configs,
        }
    })
}

fn partition_record() -> impl Strategy<Value = PartitionRecord> {
    (
        topic_id(),
        partition_id(),
        broker_ids(),
        broker_ids(),
        option::of(broker_id()),
    )
        .prop_map(
            |(topic_id, partition, replicas, isr, leader)| PartitionRecord {
                topic_id,
                partition,
                replicas,
                isr,
                leader,
            },
        )
}

fn partition_change() -> impl Strategy<Value = PartitionChangeRecord> {
    (
        topic_id(),
        partition_id(),
        leader_change(),
        option::of(broker_ids()),
        option::of(broker_ids()),
        option::of(broker_ids()),
        option::of(broker_ids()),
        any::<bool>(),
    )
        .prop_map(
            |(topic_id, partition, leader, isr, replicas, adding, removing, unclean)| {
                PartitionChangeRecord {
                    topic_id,
                    partition,
                    leader,
                    isr,
                    replicas,
                    adding,
                    removing,
                    unclean,
                }
            },
        )
}

/// Every `MetadataRecord` variant, with arbitrary field values.
fn record() -> impl Strategy<Value = MetadataRecord> {
    prop_oneof![
        register_broker().prop_map(MetadataRecord::RegisterBroker),
        (broker_id(), broker_epoch())
            .prop_map(|(broker, epoch)| MetadataRecord::FenceBroker { broker, epoch }),
        (broker_id(), broker_epoch())
            .prop_map(|(broker, epoch)| MetadataRecord::UnfenceBroker { broker, epoch }),
        (broker_id(), broker_epoch())
            .prop_map(|(broker, epoch)| MetadataRecord::BrokerShuttingDown { broker, epoch }),
        (broker_id(), broker_epoch())
            .prop_map(|(broker, epoch)| MetadataRecord::UnregisterBroker { broker, epoch }),
        (broker_id(), broker_epoch(), vec(text(), 0..4)).prop_map(|(broker, epoch, dirs)| {
            MetadataRecord::LogDirsOffline {
                broker,
                epoch,
                dirs,
            }
        }),
        topic_record().prop_map(MetadataRecord::Topic),
        partition_record().prop_map(MetadataRecord::Partition),
        partition_change().prop_map(MetadataRecord::PartitionChange),
        (topic_id(), text(), option::of(text())).prop_map(|(topic_id, key, value)| {
            MetadataRecord::TopicConfig {
                topic_id,
                key,
                value,
            }
        }),
        topic_id().prop_map(|topic_id| MetadataRecord::MarkTopicForDeletion { topic_id }),
        (
            topic_id(),
            vec((partition_id(), broker_id()), 0..6),
            replica_state()
        )
            .prop_map(
                |(topic_id, replicas, state)| MetadataRecord::ReplicaDeletionState {
                    topic_id,
                    replicas,
                    state,
                }
            ),
        topic_id().prop_map(|topic_id| MetadataRecord::RemoveTopic { topic_id }),
        text().prop_map(|name| MetadataRecord::BeginTransaction { name }),
        Just(MetadataRecord::EndTransaction),
        Just(MetadataRecord::AbortTransaction),
        acl_binding().prop_map(MetadataRecord::AclAdded),
        acl_binding().prop_map(MetadataRecord::AclRemoved),
        (broker_id(), text())
            .prop_map(|(broker, address)| MetadataRecord::BrokerKafkaListener { broker, address }),
        (text(), proptest::option::of(text()))
            .prop_map(|(key, value)| MetadataRecord::ClusterConfig { key, value }),
        (text(), scram_credential()).prop_map(|(user, credential)| {
            MetadataRecord::UserScramCredential { user, credential }
        }),
        (text(), scram_mechanism()).prop_map(|(user, mechanism)| {
            MetadataRecord::UserScramCredentialRemoved { user, mechanism }
        }),
    ]
}

fn scram_mechanism() -> impl Strategy<Value = ScramMechanism> {
    proptest::sample::select(ScramMechanism::ALL.to_vec())
}

/// Any credential, valid or not (the codec does not care).
fn scram_credential() -> impl Strategy<Value = ScramCredential> {
    (
        scram_mechanism(),
        vec(any::<u8>(), 0..40),
        any::<u32>(),
        vec(any::<u8>(), 0..70),
        vec(any::<u8>(), 0..70),
    )
        .prop_map(
            |(mechanism, salt, iterations, stored_key, server_key)| ScramCredential {
                mechanism,
                salt,
                iterations,
                stored_key,
                server_key,
            },
        )
}

fn acl_binding() -> impl Strategy<Value = keel_metadata::acl::AclBinding> {
    use keel_metadata::acl::*;
    (
        prop_oneof![
            text().prop_map(Principal::User),
            any::<u32>().prop_map(Principal::Broker),
            any::<u64>().prop_map(Principal::Controller),
            Just(Principal::Anonymous),
        ],
        prop_oneof![
            text().prop_map(ResourcePattern::Topic),
            text().prop_map(ResourcePattern::TopicPrefix),
            Just(ResourcePattern::Cluster),
        ],
        0..Operation::ALL.len(),
        any::<bool>(),
    )
        .prop_map(|(principal, pattern, op, allow)| AclBinding {
            principal,
            pattern,
            operation: Operation::ALL[op],
            permission: if allow {
                Permission::Allow
            } else {
                Permission::Deny
            },
        })
}

fn batch() -> impl Strategy<Value = RecordBatch> {
    vec(record(), 0..12).prop_map(RecordBatch::new)
}

// ---- record batch codec -----------------------------------------------------

proptest! {
    #![proptest_config(config(512, 0x6b65_656c_0001))]

    #[test]
    fn batch_encode_decode_is_identity(b in batch()) {
        let bytes = b.encode();
        // The oldest version that carries every record of the batch.
        let scram = b.records.iter().any(|r| matches!(
            r,
            MetadataRecord::UserScramCredential { .. } | MetadataRecord::UserScramCredentialRemoved { .. }
        ));
        let defaults = b.records.iter().any(|r| matches!(r, MetadataRecord::ClusterConfig { .. }));
        let version: u16 = if scram { 5 } else if defaults { 4 } else { 3 };
        prop_assert_eq!(&bytes[..2], &version.to_le_bytes()[..]);
        prop_assert_eq!(RecordBatch::decode(&bytes), Ok(b.clone()));
        // The encoding is canonical: the same batch always gives the same bytes.
        prop_assert_eq!(b.clone().encode(), bytes);
    }

    #[test]
    fn truncated_batch_is_refused(b in batch(), cut in any::<prop::sample::Index>()) {
        let bytes = b.encode();
        let len = cut.index(bytes.len());
        let got = RecordBatch::decode(&bytes[..len]);
        match len {
            0 | 1 => prop_assert_eq!(got, Err(DecodeError::Empty)),
            _ => prop_assert!(matches!(got, Err(DecodeError::Corrupt(_))), "{:?}", got),
        }
    }

    #[test]
    fn extended_batch_is_refused(b in batch(), extra in vec(any::<u8>(), 1..8)) {
        let mut bytes = b.encode();
        bytes.extend_from_slice(&extra);
        prop_assert_eq!(RecordBatch::decode(&bytes), Err(DecodeError::TrailingBytes(extra.len())));
    }

    #[test]
    fn wrong_version_is_refused(b in batch(), version in any::<u16>()) {
        prop_assume!(!(keel_metadata::records::OLDEST_RECORD_FORMAT_VERSION..=RECORD_FORMAT_VERSION).contains(&version));
        let mut bytes = b.encode();
        bytes[..2].copy_from_slice(&version.to_le_bytes());
        prop_assert_eq!(
            RecordBatch::decode(&bytes),
            Err(DecodeError::UnsupportedVersion(version, RECORD_FORMAT_VERSION))
        );
    }

    /// Without a checksum a flipped payload bit can decode as another valid
    /// batch; what must hold is: no panic, a flipped version bit is refused
    /// unless it names another version still read (batches of every such
    /// version have one shape, so it reads the same records), and a flipped
    /// payload bit never decodes as the original batch.
    #[test]
    fn bit_flipped_batch_never_panics_nor_decodes_as_the_original(
        b in batch(),
        at in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let mut bytes = b.encode();
        let i = at.index(bytes.len());
        bytes[i] ^= 1 << bit;
        match RecordBatch::decode(&bytes) {
            Ok(other) if i < 2 => {
                let version = u16::from_le_bytes([bytes[0], bytes[1]]);
                prop_assert!(
                    (keel_metadata::records::OLDEST_RECORD_FORMAT_VERSION..=RECORD_FORMAT_VERSION)
                        .contains(&version),
                    "a flipped version bit decoded as version {}", version
                );
                prop_assert_eq!(other, b);
            }
            Ok(other) => prop_assert_ne!(other, b),
            Err(DecodeError::UnsupportedVersion(..)) => prop_assert!(i < 2),
            Err(_) => {}
        }
    }

    #[test]
    fn random_bytes_never_panic_as_a_batch(bytes in vec(any::<u8>(), 0..256)) {
        let _ = RecordBatch::decode(&bytes);
        let versioned = behind_current_version(&bytes);
        let _ = RecordBatch::decode(&versioned);
    }
}

/// `bytes` behind the current format version.
fn behind_current_version(bytes: &[u8]) -> Vec<u8> {
    let mut versioned = RECORD_FORMAT_VERSION.to_le_bytes().to_vec();
    versioned.extend_from_slice(bytes);
    versioned
}

/// A snapshot whose map number `which` (0 = brokers ... 3 = partitions)
/// claims 2^62 entries, the maps before it being empty.
fn snapshot_with_huge_map_length(which: usize) -> Vec<u8> {
    let mut bytes = RECORD_FORMAT_VERSION.to_le_bytes().to_vec();
    bytes.push(0); // offset
    bytes.extend(std::iter::repeat_n(0u8, which)); // empty maps before it
    bytes.push(253); // varint u64 marker for the map length
    bytes.extend_from_slice(&(1u64 << 62).to_le_bytes());
    bytes
}

#[test]
fn corrupt_snapshot_map_length_is_refused_not_fatal() {
    for which in 0..4 {
        assert!(
            matches!(
                MetadataImage::decode(&snapshot_with_huge_map_length(which)),
                Err(DecodeError::Corrupt(_))
            ),
            "map {which}"
        );
    }
}

proptest! {
    #![proptest_config(config(512, 0x6b65_656c_0004))]

    #[test]
    fn random_bytes_never_panic_as_a_snapshot(bytes in vec(any::<u8>(), 0..256)) {
        let _ = MetadataImage::decode(&bytes);
        let versioned = behind_current_version(&bytes);
        let _ = MetadataImage::decode(&versioned);
    }
}

/// Two brokers registered at offsets 1 and 2 (fenced; no topics).
fn two_broker_image() -> MetadataImage {
    let mut image = MetadataImage::new();
    for id in 1..=2u32 {
        let register = MetadataRecord::RegisterBroker(RegisterBrokerRecord {
            broker: BrokerId(id),
            incarnation: IncarnationId(u128::from(id)),
            address: format!("127.0.0.{id}:9092"),
            rack: None,
            log_dirs: vec!["/data".into()],
        });
        image
            .replay_batch(&RecordBatch::new(vec![register]), u64::from(id))
            .expect("registers");
    }
    image
}

/// [`two_broker_image`] with `record` replayed as the entry at index 3.
fn two_broker_image_and(record: MetadataRecord) -> MetadataImage {
    let mut image = two_broker_image();
    image
        .replay_batch(&RecordBatch::new(vec![record]), 3)
        .expect("replays");
    image
}

/// The cluster default of `retention.ms` set to 1.
fn retention_default() -> MetadataRecord {
    MetadataRecord::ClusterConfig {
        key: "retention.ms".into(),
        value: Some("1".into()),
    }
}

/// The snapshot layout written out by hand: the offset, then each map as a
/// length and its entries in the order given (brokers, topics, topic
/// names, partitions, ACLs), behind version 3: an image without cluster
/// config defaults keeps version 3's shape. (bincode writes a map and a
/// sequence of pairs alike.)
fn snapshot_of(offset: u64, brokers: &[(BrokerId, &BrokerRegistration)]) -> Vec<u8> {
    let empty: Vec<(u8, u8)> = Vec::new();
    encoded_as(3, &(offset, brokers, &empty, &empty, &empty, &empty))
}

/// `body` behind format version `version` (in place of the one it is
/// encoded with).
fn encoded_as(version: u16, body: &impl serde::Serialize) -> Vec<u8> {
    let mut bytes = keel_metadata::records::encode_versioned(body).expect("plain data encodes");
    bytes[..2].copy_from_slice(&version.to_le_bytes());
    bytes
}

#[test]
fn snapshot_layout_with_cluster_defaults_is_version_4_with_a_sixth_map() {
    let image = two_broker_image_and(retention_default());
    let brokers: Vec<_> = image.brokers().map(|b| (b.id, b)).collect();
    let empty: Vec<(u8, u8)> = Vec::new();
    let defaults = vec![("retention.ms".to_string(), "1".to_string())];
    let body = (3u64, &brokers, &empty, &empty, &empty, &empty, &defaults);
    // Behind version 4: an image without credentials keeps version 4's shape.
    let bytes = encoded_as(4, &body);
    assert_eq!(image.encode(), bytes);
    assert_eq!(MetadataImage::decode(&bytes).expect("decodes"), image);
}

#[test]
fn snapshot_layout_with_credentials_is_version_5_with_a_seventh_map() {
    let c = valid_credential(ScramMechanism::Sha512, 7);
    let image = two_broker_image_and(MetadataRecord::UserScramCredential {
        user: "alice".into(),
        credential: c.clone(),
    });
    let brokers: Vec<_> = image.brokers().map(|b| (b.id, b)).collect();
    let empty: Vec<(u8, u8)> = Vec::new();
    let credentials = vec![(("alice".to_string(), ScramMechanism::Sha512), &c)];
    let body = (
        3u64,
        &brokers,
        &empty,
        &empty,
        &empty,
        &empty,
        &empty,
        &credentials,
    );
    let bytes = keel_metadata::records::encode_versioned(&body).expect("plain data encodes");
    assert_eq!(&bytes[..2], &5u16.to_le_bytes());
    assert_eq!(image.encode(), bytes);
    let back = MetadataImage::decode(&bytes).expect("decodes");
    assert_eq!(back, image);
    assert_eq!(back.hash(), image.hash());
    assert_eq!(
        back.scram_credential("alice", ScramMechanism::Sha512),
        Some(&c)
    );
    assert_eq!(back.access_version(), 3);
}

#[test]
fn an_image_whose_credentials_are_all_removed_encodes_as_before_them() {
    // Byte for byte (and so hash for hash) the image of the same state
    // that never had a credential: version 3's shape, or 4's with a
    // cluster default.
    let mut with = two_broker_image();
    let without = two_broker_image();
    let set = MetadataRecord::UserScramCredential {
        user: "alice".into(),
        credential: valid_credential(ScramMechanism::Sha256, 1),
    };
    let removed = MetadataRecord::UserScramCredentialRemoved {
        user: "alice".into(),
        mechanism: ScramMechanism::Sha256,
    };
    with.replay(&set, 3).expect("replays");
    with.replay(&removed, 3).expect("replays");
    assert_eq!(with.access_version(), 3);
    let mut at_3 = without.clone();
    at_3.advance_offset(3);
    with.advance_offset(3);
    assert_eq!(with.encode(), at_3.encode());
    assert_eq!(&with.encode()[..2], &3u16.to_le_bytes());
    assert_eq!(with.hash(), at_3.hash());

    let default = retention_default();
    with.replay(&default, 4).expect("replays");
    with.replay(&set, 4).expect("replays");
    assert_eq!(&with.encode()[..2], &5u16.to_le_bytes());
    with.replay(&removed, 4).expect("replays");
    let mut plain = at_3;
    plain.replay(&default, 4).expect("replays");
    plain.advance_offset(4);
    with.advance_offset(4);
    assert_eq!(&with.encode()[..2], &4u16.to_le_bytes());
    assert_eq!(with.encode(), plain.encode());
    assert_eq!(
        MetadataImage::decode(&with.encode()).expect("decodes"),
        plain
    );
}

#[test]
fn a_version_4_snapshot_without_credentials_still_decodes_and_is_read_once() {
    let image = two_broker_image_and(retention_default());
    let bytes = image.encode();
    assert_eq!(&bytes[..2], &4u16.to_le_bytes());
    let back = MetadataImage::decode(&bytes).expect("decodes");
    assert_eq!(back, image);
    assert_eq!(back.scram_count(), 0);
    // No ACL or credential change was replayed here, yet a reader of the
    // snapshot reads the access state once.
    assert_eq!(image.access_version(), 0);
    assert_eq!(back.access_version(), 3);
}

#[test]
fn snapshot_layout_is_the_offset_then_five_sorted_maps() {
    // Pins the bytes so existing snapshots (and hashes) stay readable.
    let image = two_broker_image();
    let brokers: Vec<_> = image.brokers().map(|b| (b.id, b)).collect();
    assert_eq!(image.encode(), snapshot_of(2, &brokers));
    assert_eq!(
        MetadataImage::decode(&snapshot_of(2, &brokers)).expect("canonical bytes decode"),
        image
    );
}

/// A registration as format versions 1 and 2 wrote it (no Kafka listener):
/// bincode writes a struct as the tuple of its fields.
type LegacyRegistration<'a> = (
    BrokerId,
    BrokerEpoch,
    IncarnationId,
    &'a str,
    &'a Option<String>,
    &'a Vec<String>,
    &'a Vec<String>,
    bool,
    bool,
);

/// `b` in the shape format versions 1 and 2 wrote.
fn legacy_registration(b: &BrokerRegistration) -> LegacyRegistration<'_> {
    (
        b.id,
        b.epoch,
        b.incarnation,
        &b.address,
        &b.rack,
        &b.log_dirs,
        &b.offline_log_dirs,
        b.fenced,
        b.shutting_down,
    )
}

/// `image`'s registrations by id, in the shape of versions 1 and 2.
fn legacy_brokers(image: &MetadataImage) -> Vec<(BrokerId, LegacyRegistration<'_>)> {
    image
        .brokers()
        .map(|b| (b.id, legacy_registration(b)))
        .collect()
}

#[test]
fn a_version_1_snapshot_without_acls_still_decodes() {
    let image = two_broker_image();
    let brokers = legacy_brokers(&image);
    let empty: Vec<(u8, u8)> = Vec::new();
    let v1 = encoded_as(1, &(2u64, &brokers, &empty, &empty, &empty));
    assert_eq!(
        MetadataImage::decode(&v1).expect("a v1 snapshot decodes"),
        image
    );
    // And a version 1 batch of records, whose enum only grew at its end.
    let batch = RecordBatch::new(vec![MetadataRecord::MarkTopicForDeletion {
        topic_id: TopicId(3),
    }]);
    let mut bytes = batch.encode();
    bytes[..2].copy_from_slice(&1u16.to_le_bytes());
    assert_eq!(RecordBatch::decode(&bytes), Ok(batch));
}

#[test]
fn a_version_2_snapshot_without_kafka_listeners_still_decodes() {
    let image = two_broker_image();
    let brokers = legacy_brokers(&image);
    let empty: Vec<(u8, u8)> = Vec::new();
    let v2 = encoded_as(2, &(2u64, &brokers, &empty, &empty, &empty, &empty));
    assert_eq!(
        MetadataImage::decode(&v2).expect("a v2 snapshot decodes"),
        image
    );
}

#[test]
fn a_kafka_listener_is_part_of_the_registration_of_its_own_entry() {
    let mut image = two_broker_image();
    let listener = |broker| MetadataRecord::BrokerKafkaListener {
        broker: BrokerId(broker),
        address: "127.0.0.3:9094".into(),
    };
    // Broker 1 registered at entry 1: a listener record in a later entry
    // contradicts the image.
    assert!(image.clone().replay(&listener(1), 3).is_err());
    let register = MetadataRecord::RegisterBroker(RegisterBrokerRecord {
        broker: BrokerId(3),
        incarnation: IncarnationId(3),
        address: "127.0.0.3:9092".into(),
        rack: None,
        log_dirs: vec!["/data".into()],
    });
    image
        .replay_batch(&RecordBatch::new(vec![register.clone(), listener(3)]), 3)
        .expect("a registration and its listener replay");
    let b = image.broker(BrokerId(3)).expect("registered");
    assert_eq!(b.kafka_address.as_deref(), Some("127.0.0.3:9094"));
    // It survives a snapshot, and a re-registration without one clears it.
    let back = MetadataImage::decode(&image.encode()).expect("decodes");
    assert_eq!(back, image);
    image
        .replay_batch(&RecordBatch::new(vec![register]), 4)
        .expect("re-registers");
    assert_eq!(image.broker(BrokerId(3)).unwrap().kafka_address, None);
}

#[test]
fn snapshot_with_map_keys_out_of_order_is_refused() {
    let image = two_broker_image();
    let mut brokers: Vec<_> = image.brokers().map(|b| (b.id, b)).collect();
    brokers.reverse();
    assert!(matches!(
        MetadataImage::decode(&snapshot_of(2, &brokers)),
        Err(DecodeError::Corrupt(_))
    ));
}

#[test]
fn snapshot_with_a_repeated_map_key_is_refused() {
    let image = two_broker_image();
    let one = image.broker(BrokerId(1)).expect("registered");
    assert!(matches!(
        MetadataImage::decode(&snapshot_of(2, &[(BrokerId(1), one), (BrokerId(1), one)])),
        Err(DecodeError::Corrupt(_))
    ));
}

/// A sequence whose length serde cannot know up front.
struct UnknownLength;

impl serde::Serialize for UnknownLength {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq((0u8..4).filter(|i| i % 2 == 0))
    }
}

#[test]
fn encoding_a_value_bincode_cannot_encode_is_an_error_not_a_panic() {
    assert!(keel_metadata::records::encode_versioned(&UnknownLength).is_err());
}

#[test]
fn huge_length_prefix_is_refused_without_allocating() {
    // Version, then a varint u64 marker (253) claiming 2^62 records.
    let mut bytes = RECORD_FORMAT_VERSION.to_le_bytes().to_vec();
    bytes.push(253);
    bytes.extend_from_slice(&(1u64 << 62).to_le_bytes());
    assert!(matches!(
        RecordBatch::decode(&bytes),
        Err(DecodeError::Corrupt(_))
    ));
    assert_eq!(RecordBatch::decode(&[]), Err(DecodeError::Empty));
}

// ---- images built from generated valid logs -----------------------------------

/// One abstract step of a cluster's history; turned into valid records
/// against the image as it stands.
#[derive(Clone, Debug)]
struct Op {
    kind: u8,
    a: u32,
    b: u32,
    c: u32,
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    vec(
        (any::<u8>(), any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(kind, a, b, c)| Op {
            kind,
            a,
            b,
            c,
        }),
        1..80,
    )
}

/// How many broker ids the generated cluster uses.
const BROKERS: u32 = 6;

fn pick<T: Copy>(v: &[T], i: u32) -> Option<T> {
    if v.is_empty() {
        None
    } else {
        Some(v[i as usize % v.len()])
    }
}

fn epoch_of(image: &MetadataImage, b: BrokerId) -> BrokerEpoch {
    image.broker(b).expect("registered").epoch
}

/// The records of one log entry for `op`, valid against `image` by
/// construction (the test fails if replay disagrees).
fn records_for(image: &MetadataImage, op: &Op, next_topic: &mut u128) -> Vec<MetadataRecord> {
    let registered: Vec<BrokerId> = image.brokers().map(|b| b.id).collect();
    let fenced: Vec<BrokerId> = image.brokers().filter(|b| b.fenced).map(|b| b.id).collect();
    let unfenced: Vec<BrokerId> = image
        .brokers()
        .filter(|b| !b.fenced)
        .map(|b| b.id)
        .collect();
    let live_topics: Vec<TopicId> = image
        .topics()
        .filter(|t| !t.marked_for_deletion())
        .map(|t| t.id)
        .collect();
    let partitions: Vec<TopicPartition> = image.partitions().map(|(tp, _)| *tp).collect();
    let fence_like = |make: fn(BrokerId, BrokerEpoch) -> MetadataRecord, from: &[BrokerId]| {
        pick(from, op.a)
            .map(|b| vec![make(b, epoch_of(image, b))])
            .unwrap_or_default()
    };
    match op.kind % 13 {
        // (Re)register: a new incarnation gets a new epoch and starts fenced.
        0 | 1 => {
            // Rack 0 stands for "no rack".
            let rack = op.b % 3;
            vec![MetadataRecord::RegisterBroker(RegisterBrokerRecord {
                broker: BrokerId(op.a % BROKERS),
                incarnation: IncarnationId(u128::from(op.b)),
                address: format!("127.0.0.{}:{}", op.a % BROKERS, 9000 + op.c % 100),
                rack: (rack > 0).then(|| format!("rack-{rack}")),
                log_dirs: (0..op.c % 3).map(|d| format!("/data/{d}")).collect(),
            })]
        }
        2 => fence_like(
            |broker, epoch| MetadataRecord::UnfenceBroker { broker, epoch },
            &fenced,
        ),
        3 => fence_like(
            |broker, epoch| MetadataRecord::FenceBroker { broker, epoch },
            &unfenced,
        ),
        4 => fence_like(
            |broker, epoch| MetadataRecord::BrokerShuttingDown { broker, epoch },
            &unfenced,
        ),
        5 => pick(&registered, op.a)
            .map(|b| {
                vec![MetadataRecord::LogDirsOffline {
                    broker: b,
                    epoch: epoch_of(image, b),
                    dirs: vec![format!("/data/{}", op.b % 3)],
                }]
            })
            .unwrap_or_default(),
        6 | 7 => create_topic(image, op, next_topic, &registered),
        12 => scram_change(image, op),
        8..=10 => pick(&partitions, op.a)
            .and_then(|tp| change_partition(image, tp, op))
            .map(|c| vec![MetadataRecord::PartitionChange(c)])
            .unwrap_or_default(),
        _ => match op.b % 3 {
            0 => pick(&live_topics, op.a)
                .map(|t| {
                    vec![MetadataRecord::TopicConfig {
                        topic_id: t,
                        key: UNCLEAN_LEADER_ELECTION.into(),
                        value: (op.c & 1 == 0).then(|| "true".into()),
                    }]
                })
                .unwrap_or_default(),
            1 => pick(&live_topics, op.a)
                .map(|t| delete_topic(image, t, op.c & 1 == 0))
                .unwrap_or_default(),
            _ => fence_like(
                |broker, epoch| MetadataRecord::UnregisterBroker { broker, epoch },
                &fenced,
            ),
        },
    }
}

fn create_topic(
    image: &MetadataImage,
    op: &Op,
    next_topic: &mut u128,
    registered: &[BrokerId],
) -> Vec<MetadataRecord> {
    if registered.is_empty() {
        return vec![];
    }
    *next_topic += 1;
    let topic_id = TopicId(*next_topic);
    let mut records = vec![MetadataRecord::Topic(TopicRecord {
        topic_id,
        name: format!("topic-{}", *next_topic),
        configs: BTreeMap::new(),
    })];
    let rf = 1 + op.b as usize % registered.len().min(3);
    for p in 0..op.c % 4 {
        let replicas: Vec<BrokerId> = (0..rf)
            .map(|r| registered[(op.a as usize + p as usize + r) % registered.len()])
            .collect();
        // The first replica able to lead leads; the ISR is every replica.
        let leader = replicas.iter().copied().find(|b| image.can_lead(*b));
        records.push(MetadataRecord::Partition(PartitionRecord {
            topic_id,
            partition: PartitionId(p),
            isr: replicas.clone(),
            replicas,
            leader,
        }));
    }
    records
}

/// A change that keeps the invariants: move the leader within the ISR,
/// shrink or expand the ISR, lose the leader, or start/finish adding a
/// replica.
fn change_partition(
    image: &MetadataImage,
    tp: TopicPartition,
    op: &Op,
) -> Option<PartitionChangeRecord> {
    let p = image.partition(&tp)?;
    let mut c = PartitionChangeRecord::new(tp.topic_id, tp.partition);
    match op.b % 5 {
        0 => {
            let candidates: Vec<BrokerId> = p
                .isr
                .iter()
                .copied()
                .filter(|b| Some(*b) != p.leader && image.can_lead(*b))
                .collect();
            c.leader = LeaderChange::To(pick(&candidates, op.c)?);
        }
        1 => {
            let removable: Vec<BrokerId> = p
                .isr
                .iter()
                .copied()
                .filter(|b| Some(*b) != p.leader)
                .collect();
            let gone = pick(&removable, op.c)?;
            if p.isr.len() < 2 {
                return None;
            }
            c.isr = Some(p.isr.iter().copied().filter(|b| *b != gone).collect());
        }
        2 => {
            let outside: Vec<BrokerId> = p
                .replicas
                .iter()
                .copied()
                .filter(|b| !p.isr.contains(b))
                .collect();
            let mut isr = p.isr.clone();
            isr.push(pick(&outside, op.c)?);
            c.isr = Some(isr);
        }
        3 => {
            p.leader?;
            c.leader = LeaderChange::NoLeader;
        }
        _ if p.adding.is_empty() => {
            let extra: Vec<BrokerId> = image
                .brokers()
                .map(|b| b.id)
                .filter(|b| !p.replicas.contains(b))
                .collect();
            let add = pick(&extra, op.c)?;
            let mut replicas = p.replicas.clone();
            replicas.push(add);
            c.replicas = Some(replicas);
            c.adding = Some(vec![add]);
        }
        _ => {
            // The added replica caught up: it joins the ISR, adding clears.
            let mut isr = p.isr.clone();
            for b in &p.adding {
                if !isr.contains(b) {
                    isr.push(*b);
                }
            }
            c.isr = Some(isr);
            c.adding = Some(vec![]);
        }
    }
    Some(c)
}

/// Sets or removes a credential of one of a few users (removes only one
/// that exists).
fn scram_change(image: &MetadataImage, op: &Op) -> Vec<MetadataRecord> {
    let user = format!("user-{}", op.a % 4);
    let mechanism = ScramMechanism::ALL[op.b as usize % ScramMechanism::ALL.len()];
    if op.c.is_multiple_of(3) && image.scram_credential(&user, mechanism).is_some() {
        return vec![MetadataRecord::UserScramCredentialRemoved { user, mechanism }];
    }
    vec![MetadataRecord::UserScramCredential {
        user,
        credential: valid_credential(mechanism, op.c),
    }]
}

/// A credential that passes `validate` (its keys derive from no password:
/// replay only checks their shape), different for each `seed`.
fn valid_credential(mechanism: ScramMechanism, seed: u32) -> ScramCredential {
    ScramCredential {
        mechanism,
        salt: seed.to_le_bytes().to_vec(),
        iterations: mechanism.min_iterations() + seed % 1000,
        stored_key: vec![seed as u8; mechanism.hash_len()],
        server_key: vec![(seed >> 8) as u8; mechanism.hash_len()],
    }
}

/// Marks `t` for deletion; with `finish`, takes its partitions offline, runs
/// every replica through the deletion machine and removes the topic.
fn delete_topic(image: &MetadataImage, t: TopicId, finish: bool) -> Vec<MetadataRecord> {
    let mut records = vec![MetadataRecord::MarkTopicForDeletion { topic_id: t }];
    if !finish {
        return records;
    }
    let mut replicas = Vec::new();
    for (tp, p) in image.partitions_of(t) {
        if p.state == PartitionState::Online {
            let mut c = PartitionChangeRecord::new(t, tp.partition);
            c.leader = LeaderChange::NoLeader;
            records.push(MetadataRecord::PartitionChange(c));
        }
        replicas.extend(p.replicas.iter().map(|b| (tp.partition, *b)));
    }
    for state in [
        ReplicaState::DeletionStarted,
        ReplicaState::DeletionSuccessful,
    ] {
        records.push(MetadataRecord::ReplicaDeletionState {
            topic_id: t,
            replicas: replicas.clone(),
            state,
        });
    }
    records.push(MetadataRecord::RemoveTopic { topic_id: t });
    records
}

/// Replays the generated history, checking `validate()` after every entry.
/// Returns the log and the final image.
fn build(ops: &[Op]) -> Result<(Vec<(u64, RecordBatch)>, MetadataImage), TestCaseError> {
    let mut image = MetadataImage::new();
    let mut log = Vec::new();
    let mut next_topic = 0u128;
    for (i, op) in ops.iter().enumerate() {
        let offset = i as u64 + 1;
        let records = records_for(&image, op, &mut next_topic);
        let batch = RecordBatch::new(records);
        if let Err(e) = image.replay_batch(&batch, offset) {
            return Err(TestCaseError::fail(format!(
                "generated record refused: {e}\nbatch: {batch:?}"
            )));
        }
        if let Err(e) = image.validate() {
            return Err(TestCaseError::fail(format!("{e} after {batch:?}")));
        }
        log.push((offset, batch));
    }
    Ok((log, image))
}

fn replay_log(log: &[(u64, RecordBatch)]) -> MetadataImage {
    let mut image = MetadataImage::new();
    for (offset, batch) in log {
        // Through the stored form, as a restarted node reads it.
        let decoded = RecordBatch::decode(&batch.encode()).expect("own encoding decodes");
        image.replay_batch(&decoded, *offset).expect("replays");
    }
    image
}

proptest! {
    #![proptest_config(config(128, 0x6b65_656c_0002))]

    #[test]
    fn snapshot_round_trip_keeps_image_and_hash(ops in ops()) {
        let (_, image) = build(&ops)?;
        let bytes = image.encode();
        // The oldest shape that holds the image.
        let version: u16 = if image.scram_count() > 0 {
            5
        } else if !image.cluster_configs().is_empty() {
            4
        } else {
            3
        };
        prop_assert_eq!(&bytes[..2], &version.to_le_bytes()[..]);
        let decoded = MetadataImage::decode(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(decoded.hash(), image.hash());
        prop_assert_eq!(decoded.offset(), image.offset());
        // A snapshot's changes are not known one by one.
        prop_assert_eq!(decoded.access_version(), image.offset());
        prop_assert_eq!(decoded.encode(), bytes);
        prop_assert_eq!(decoded, image);
    }

    #[test]
    fn replaying_the_same_log_gives_the_same_hash(ops in ops()) {
        let (log, image) = build(&ops)?;
        let first = replay_log(&log);
        let second = replay_log(&log);
        prop_assert_eq!(first.hash(), second.hash());
        prop_assert_eq!(first.hash(), image.hash());
        prop_assert_eq!(first.access_version(), image.access_version());
        prop_assert_eq!(&first, &image);
        first.validate().map_err(|e| TestCaseError::fail(e.to_string()))?;
    }

    #[test]
    fn a_snapshot_plus_the_rest_of_the_log_equals_the_whole_log(
        ops in ops(),
        cut in any::<prop::sample::Index>(),
    ) {
        let (log, image) = build(&ops)?;
        let at = cut.index(log.len() + 1);
        let prefix = replay_log(&log[..at]);
        let mut restored = MetadataImage::decode(&prefix.encode())
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        for (offset, batch) in &log[at..] {
            restored.replay_batch(batch, *offset).map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        prop_assert_eq!(restored.hash(), image.hash());
        prop_assert_eq!(&restored, &image);
        // A reader of the restored image refreshes no later than one of
        // the whole log's (at the snapshot or at a later change).
        prop_assert!(restored.access_version() >= image.access_version());
    }

    #[test]
    fn damaged_snapshot_is_refused_without_panicking(
        ops in ops(),
        cut in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let (_, image) = build(&ops)?;
        let bytes = image.encode();
        let len = cut.index(bytes.len());
        prop_assert!(MetadataImage::decode(&bytes[..len]).is_err());
        let mut flipped = bytes.clone();
        let i = at.index(flipped.len());
        flipped[i] ^= 1 << bit;
        if let Ok(other) = MetadataImage::decode(&flipped) {
            // A flip that still decodes must still be a valid image, and
            // never silently the original.
            prop_assert!(other.validate().is_ok());
            prop_assert_ne!(other, image);
        }
        let mut wrong = bytes;
        wrong[0] ^= 0x80;
        prop_assert!(matches!(
            MetadataImage::decode(&wrong),
            Err(DecodeError::UnsupportedVersion(..))
        ));
    }
}

/// Generated histories really exercise the image (not just empty logs).
#[test]
fn generated_histories_reach_interesting_states() {
    let mut runner = proptest::test_runner::TestRunner::new(config(64, 0x6b65_656c_0003));
    let (mut topics, mut partitions, mut offline, mut reassigning, mut deleting) = (0, 0, 0, 0, 0);
    let mut credentials = 0;
    for _ in 0..64 {
        let ops = ops().new_tree(&mut runner).unwrap().current();
        let (_, image) = build(&ops).unwrap_or_else(|e| panic!("{e}"));
        topics += image.topic_count();
        partitions += image.partition_count();
        offline += image
            .partitions()
            .filter(|(_, p)| p.state == PartitionState::Offline)
            .count();
        reassigning += image.partitions().filter(|(_, p)| p.reassigning()).count();
        deleting += image.topics().filter(|t| t.marked_for_deletion()).count();
        credentials += image.scram_count();
    }
    assert!(topics > 20, "topics {topics}");
    assert!(partitions > 40, "partitions {partitions}");
    assert!(offline > 0, "offline {offline}");
    assert!(reassigning > 0, "reassigning {reassigning}");
    assert!(deleting > 0, "deleting {deleting}");
    assert!(credentials > 0, "credentials {credentials}");
}
