//! Protobuf <-> domain conversions, in one place.

use keel_metadata::{
    ApiError, BrokerId, BrokerRegistration, ErrorCode, PartitionImage, TopicId, TopicPartition,
};

use crate::pb;

/// A wire value that does not map onto the domain.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    #[error("topic id must be 16 bytes, got {0}")]
    BadTopicId(usize),
    #[error("incarnation id must be 16 bytes, got {0}")]
    BadIncarnationId(usize),
    #[error("missing field {0}")]
    Missing(&'static str),
    /// An enum value this build does not know (never a silent default).
    #[error("{field} {value} is not a known value")]
    UnknownEnum { field: &'static str, value: i32 },
    /// A field whose text does not parse (a principal, an operation).
    #[error("{0}")]
    Invalid(String),
}

impl From<ConvertError> for ApiError {
    fn from(e: ConvertError) -> Self {
        ApiError::new(ErrorCode::InvalidRequest, e.to_string())
    }
}

/// The election an ElectLeaders request asks for.
pub fn election_kind_from_pb(v: i32) -> Result<keel_metadata::decide::ElectionKind, ConvertError> {
    use keel_metadata::decide::ElectionKind;
    match pb::ElectionType::try_from(v) {
        Ok(pb::ElectionType::Preferred) => Ok(ElectionKind::Preferred),
        Ok(pb::ElectionType::Unclean) => Ok(ElectionKind::Unclean),
        Err(_) => Err(ConvertError::UnknownEnum {
            field: "election_type",
            value: v,
        }),
    }
}

/// Config entries by key (the last one of a repeated key wins).
pub fn config_map(entries: &[pb::ConfigEntry]) -> std::collections::BTreeMap<&str, &str> {
    entries
        .iter()
        .map(|c| (c.key.as_str(), c.value.as_str()))
        .collect()
}

/// One operation of an IncrementalAlterConfigs request.
pub fn config_op_from_pb(
    o: pb::AlterConfigOp,
) -> Result<keel_metadata::decide::ConfigOp, ConvertError> {
    use keel_metadata::decide::ConfigOp;
    match pb::ConfigOp::try_from(o.op) {
        Ok(pb::ConfigOp::Set) => Ok(ConfigOp::Set(o.key, o.value)),
        Ok(pb::ConfigOp::Delete) => Ok(ConfigOp::Delete(o.key)),
        Ok(pb::ConfigOp::Append) => Ok(ConfigOp::Append(o.key, o.value)),
        Ok(pb::ConfigOp::Subtract) => Ok(ConfigOp::Subtract(o.key, o.value)),
        Err(_) => Err(ConvertError::UnknownEnum {
            field: "config op",
            value: o.op,
        }),
    }
}

/// `None` on success, the wire error otherwise.
pub fn error_to_pb(e: &ApiError) -> pb::Error {
    pb::Error {
        code: e.code.as_i32(),
        message: e.message.clone(),
        leader: None,
    }
}

/// Wraps a result's error for a response field.
pub fn result_error<T>(r: &Result<T, ApiError>) -> Option<pb::Error> {
    r.as_ref().err().map(error_to_pb)
}

/// A per-item response's entries, in the request's order: `make` of each
/// item's name, its error (`None` where it succeeded) and its value (where
/// it did).
pub fn item_results<K, T, R>(
    results: Vec<(K, Result<T, ApiError>)>,
    make: impl Fn(K, Option<pb::Error>, Option<T>) -> R,
) -> Vec<R> {
    results
        .into_iter()
        .map(|(name, r)| make(name, result_error(&r), r.ok()))
        .collect()
}

/// NOT_CONTROLLER with the leader's id and address when known.
pub fn not_controller(leader: Option<(u64, String)>) -> pb::Error {
    let message = match &leader {
        Some((id, addr)) => {
            format!("this node is not the active controller; try node {id} at {addr}")
        }
        None => {
            "this node is not the active controller and knows no leader yet; retry shortly".into()
        }
    };
    pb::Error {
        code: ErrorCode::NotController.as_i32(),
        message,
        leader: leader.map(|(node_id, address)| pb::LeaderHint { node_id, address }),
    }
}

/// Reads a wire error; unknown codes from a newer peer become INTERNAL.
pub fn error_from_pb(e: &pb::Error) -> ApiError {
    let code = ErrorCode::from_i32(e.code).unwrap_or(ErrorCode::Internal);
    ApiError::new(code, e.message.clone())
}

/// `Ok(())` when the optional wire error is absent or NONE.
pub fn check(e: &Option<pb::Error>) -> Result<(), ApiError> {
    match e {
        Some(e) if e.code != 0 => Err(error_from_pb(e)),
        _ => Ok(()),
    }
}

pub fn topic_id_from_pb(b: &[u8]) -> Result<TopicId, ConvertError> {
    TopicId::from_bytes(b).ok_or(ConvertError::BadTopicId(b.len()))
}

pub fn brokers_to_pb(v: &[BrokerId]) -> Vec<u32> {
    v.iter().map(|b| b.0).collect()
}

pub fn brokers_from_pb(v: &[u32]) -> Vec<BrokerId> {
    v.iter().map(|b| BrokerId(*b)).collect()
}

/// A partition's full state for LeaderAndIsr / UpdateMetadata / describe.
pub fn partition_to_pb(topic: &str, tp: &TopicPartition, p: &PartitionImage) -> pb::PartitionState {
    pb::PartitionState {
        topic: topic.to_string(),
        topic_id: tp.topic_id.to_bytes().to_vec(),
        partition: tp.partition.0,
        leader: p.leader.map(|b| b.0),
        leader_epoch: p.leader_epoch.0,
        partition_epoch: p.partition_epoch.0,
        replicas: brokers_to_pb(&p.replicas),
        isr: brokers_to_pb(&p.isr),
        adding: brokers_to_pb(&p.adding),
        removing: brokers_to_pb(&p.removing),
    }
}

pub fn broker_to_pb(b: &BrokerRegistration) -> pb::BrokerInfo {
    pb::BrokerInfo {
        broker_id: b.id.0,
        broker_epoch: b.epoch.0,
        address: b.address.clone(),
        rack: b.rack.clone(),
        fenced: b.fenced,
        shutting_down: b.shutting_down,
        kafka_address: b.kafka_address.clone(),
    }
}

/// Lets generic code find the top-level error of any response.
pub trait HasError {
    fn error(&self) -> Option<&pb::Error>;
}

/// A response that carries only a top-level error: how a request refused
/// before it was looked at is answered.
pub trait Refused: Default {
    /// The response with `e` as its top-level error and nothing else.
    fn refused(e: pb::Error) -> Self;
}

macro_rules! has_error {
    ($($t:ty),* $(,)?) => {
        $(impl HasError for $t {
            fn error(&self) -> Option<&pb::Error> {
                self.error.as_ref()
            }
        }
        impl Refused for $t {
            #[allow(clippy::needless_update)]
            fn refused(e: pb::Error) -> Self {
                Self { error: Some(e), ..Default::default() }
            }
        })*
    };
}

has_error!(
    pb::RegisterBrokerResponse,
    pb::BrokerHeartbeatResponse,
    pb::AlterPartitionResponse,
    pb::ControlledShutdownResponse,
    pb::CreateTopicsResponse,
    pb::DeleteTopicsResponse,
    pb::CreatePartitionsResponse,
    pb::AlterPartitionReassignmentsResponse,
    pb::ListPartitionReassignmentsResponse,
    pb::ElectLeadersResponse,
    pb::DescribeClusterResponse,
    pb::DescribeTopicsResponse,
    pb::DescribeQuorumResponse,
    pb::UnregisterBrokerResponse,
    pb::IncrementalAlterConfigsResponse,
    pb::AddVoterResponse,
    pb::RemoveVoterResponse,
    pb::CreateAclsResponse,
    pb::DeleteAclsResponse,
    pb::DescribeAclsResponse,
    pb::AlterClusterConfigsResponse,
    pb::DescribeClusterConfigsResponse,
    pb::AlterUserScramCredentialsResponse,
    pb::DescribeUserScramCredentialsResponse,
    pb::TriggerSnapshotResponse,
    pb::ReadSnapshotResponse,
);

// ---- broker side ----------------------------------------------------------
//
// What a broker reads from the controller's requests and answers, and what
// it sends back. Nothing here panics on input from the network: a malformed
// item is a `ConvertError` (INVALID_REQUEST for that item), an unknown
// error code is INTERNAL (`error_from_pb`, `check`).

use keel_metadata::decide::{AlterPartitionItem, HeartbeatReply};
use keel_metadata::{
    BrokerEpoch, BrokerInfo, ControllerEpoch, ControllerStamp, LeaderEpoch, PartitionEpoch,
    PartitionLeadership,
};

/// The stamp of a controller request.
pub fn stamp_from_pb(s: &pb::ControllerStamp) -> ControllerStamp {
    ControllerStamp {
        controller_id: s.controller_id,
        controller_epoch: ControllerEpoch(s.controller_epoch),
        broker_epoch: BrokerEpoch(s.broker_epoch),
    }
}

/// Takes a partition state apart: its name and id lists move out of `p`
/// (left empty; the lists keep their allocations, so nothing is copied),
/// while `p.topic_id` and `p.partition` stay, so an answer can be keyed
/// with them without a copy. On error nothing is taken.
pub fn take_leadership_from_pb(
    p: &mut pb::PartitionState,
) -> Result<PartitionLeadership, ConvertError> {
    let topic_id = topic_id_from_pb(&p.topic_id)?;
    let ids = |v: &mut Vec<u32>| -> Vec<BrokerId> {
        std::mem::take(v).into_iter().map(BrokerId).collect()
    };
    Ok(PartitionLeadership {
        tp: TopicPartition::new(topic_id, p.partition),
        topic: std::mem::take(&mut p.topic),
        leader: p.leader.map(BrokerId),
        leader_epoch: LeaderEpoch(p.leader_epoch),
        partition_epoch: PartitionEpoch(p.partition_epoch),
        replicas: ids(&mut p.replicas),
        isr: ids(&mut p.isr),
        adding: ids(&mut p.adding),
        removing: ids(&mut p.removing),
    })
}

/// A partition state as a broker describes its cache.
pub fn leadership_to_pb(p: &PartitionLeadership) -> pb::PartitionState {
    pb::PartitionState {
        topic: p.topic.clone(),
        topic_id: p.tp.topic_id.to_bytes().to_vec(),
        partition: p.tp.partition.0,
        leader: p.leader.map(|b| b.0),
        leader_epoch: p.leader_epoch.0,
        partition_epoch: p.partition_epoch.0,
        replicas: brokers_to_pb(&p.replicas),
        isr: brokers_to_pb(&p.isr),
        adding: brokers_to_pb(&p.adding),
        removing: brokers_to_pb(&p.removing),
    }
}

/// A broker as an UpdateMetadata or LeaderAndIsr lists it (moved, not copied).
pub fn broker_info_from_pb(b: pb::BrokerInfo) -> BrokerInfo {
    BrokerInfo {
        id: BrokerId(b.broker_id),
        epoch: BrokerEpoch(b.broker_epoch),
        address: b.address,
        rack: b.rack,
        fenced: b.fenced,
        shutting_down: b.shutting_down,
        kafka_address: b.kafka_address,
    }
}

pub fn broker_info_to_pb(b: &BrokerInfo) -> pb::BrokerInfo {
    pb::BrokerInfo {
        broker_id: b.id.0,
        broker_epoch: b.epoch.0,
        address: b.address.clone(),
        rack: b.rack.clone(),
        fenced: b.fenced,
        shutting_down: b.shutting_down,
        kafka_address: b.kafka_address.clone(),
    }
}

/// A heartbeat answer (its error read with `check`). The wire does not
/// carry `remaining_leaderships`: 0.
pub fn heartbeat_reply_from_pb(r: &pb::BrokerHeartbeatResponse) -> HeartbeatReply {
    HeartbeatReply {
        is_caught_up: r.is_caught_up,
        is_fenced: r.is_fenced,
        should_shut_down: r.should_shut_down,
        remaining_leaderships: 0,
    }
}

/// A user's SCRAM credential, as brokers read it (DescribeAccess).
pub fn scram_credential_to_pb(
    user: &str,
    c: &keel_metadata::scram::ScramCredential,
) -> pb::ScramCredential {
    pb::ScramCredential {
        user: user.to_string(),
        mechanism: i32::from(c.mechanism.kafka_type()),
        salt: c.salt.clone(),
        iterations: c.iterations,
        stored_key: c.stored_key.clone(),
        server_key: c.server_key.clone(),
    }
}

/// A credential read from a DescribeAccess answer: its user and the
/// credential, or why it is not one (checked as the log checks it).
pub fn scram_credential_from_pb(
    c: &pb::ScramCredential,
) -> Result<(String, keel_metadata::scram::ScramCredential), String> {
    use keel_metadata::scram::{ScramCredential, ScramMechanism};
    let mechanism = i8::try_from(c.mechanism)
        .ok()
        .and_then(ScramMechanism::from_kafka_type)
        .ok_or_else(|| format!("user {:?}: unknown SCRAM mechanism {}", c.user, c.mechanism))?;
    let credential = ScramCredential {
        mechanism,
        salt: c.salt.clone(),
        iterations: c.iterations,
        stored_key: c.stored_key.clone(),
        server_key: c.server_key.clone(),
    };
    credential
        .validate()
        .map_err(|e| format!("user {:?}: {e}", c.user))?;
    Ok((c.user.clone(), credential))
}

/// One item's answer, keyed by the item's own topic id bytes (moved in,
/// so even a malformed id is echoed back as sent).
pub fn partition_error_to_pb(
    topic_id: Vec<u8>,
    partition: u32,
    r: &Result<(), ApiError>,
) -> pb::PartitionError {
    pb::PartitionError {
        topic_id,
        partition,
        error: result_error(r),
    }
}

/// An ISR change a leader asks for.
pub fn alter_partition_item_to_pb(i: &AlterPartitionItem) -> pb::AlterPartitionItem {
    pb::AlterPartitionItem {
        topic_id: i.tp.topic_id.to_bytes().to_vec(),
        partition: i.tp.partition.0,
        leader_epoch: i.leader_epoch.0,
        partition_epoch: i.partition_epoch.0,
        new_isr: brokers_to_pb(&i.new_isr),
    }
}

/// One partition a follower reports to its leader.
pub fn fetch_partition_to_pb(tp: &TopicPartition, leader_epoch: LeaderEpoch) -> pb::FetchPartition {
    pb::FetchPartition {
        topic_id: tp.topic_id.to_bytes().to_vec(),
        partition: tp.partition.0,
        leader_epoch: leader_epoch.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_match_the_proto_enum() {
        for code in ErrorCode::ALL {
            let pb_code = pb::ErrorCode::try_from(code.as_i32()).expect("code exists in proto");
            assert_eq!(pb_code.as_str_name(), code.name());
        }
    }

    #[test]
    fn unknown_wire_code_is_internal_not_a_panic() {
        let e = pb::Error {
            code: 9999,
            message: "x".into(),
            leader: None,
        };
        assert_eq!(error_from_pb(&e).code, ErrorCode::Internal);
        assert!(topic_id_from_pb(&[1, 2]).is_err());
    }
}

#[cfg(test)]
mod broker_side_tests {
    use super::*;
    use keel_metadata::TopicId;

    const TOPIC: TopicId = TopicId(0x0123_4567_89ab_cdef_0011_2233_4455_6677);

    fn wire_partition() -> pb::PartitionState {
        pb::PartitionState {
            topic: "orders".into(),
            topic_id: TOPIC.to_bytes().to_vec(),
            partition: 7,
            leader: Some(2),
            leader_epoch: 5,
            partition_epoch: 9,
            replicas: vec![2, 3, 4],
            isr: vec![2, 3],
            adding: vec![4],
            removing: vec![3],
        }
    }

    #[test]
    fn a_partition_state_is_taken_apart_and_rendered_back() {
        let sent = wire_partition();
        let mut p = sent.clone();
        let l = take_leadership_from_pb(&mut p).unwrap();
        assert_eq!(
            l,
            PartitionLeadership {
                tp: TopicPartition::new(TOPIC, 7),
                topic: "orders".into(),
                leader: Some(BrokerId(2)),
                leader_epoch: LeaderEpoch(5),
                partition_epoch: PartitionEpoch(9),
                replicas: vec![BrokerId(2), BrokerId(3), BrokerId(4)],
                isr: vec![BrokerId(2), BrokerId(3)],
                adding: vec![BrokerId(4)],
                removing: vec![BrokerId(3)],
            }
        );
        // The key stays for the answer; the rest was moved out.
        assert_eq!(
            (p.topic_id.as_slice(), p.partition),
            (&TOPIC.to_bytes()[..], 7)
        );
        assert!(p.topic.is_empty() && p.replicas.is_empty() && p.isr.is_empty());
        assert_eq!(leadership_to_pb(&l), sent);

        let mut leaderless = pb::PartitionState {
            leader: None,
            ..wire_partition()
        };
        let l = take_leadership_from_pb(&mut leaderless).unwrap();
        assert_eq!(l.leader, None);
        assert_eq!(leadership_to_pb(&l).leader, None);
    }

    #[test]
    fn a_malformed_topic_id_is_an_invalid_request_and_takes_nothing() {
        for bad in [vec![1, 2, 3], Vec::new(), vec![0; 17]] {
            let mut p = pb::PartitionState {
                topic_id: bad.clone(),
                ..wire_partition()
            };
            let e = take_leadership_from_pb(&mut p).unwrap_err();
            assert_eq!(e, ConvertError::BadTopicId(bad.len()));
            let api = ApiError::from(e);
            assert_eq!(api.code, ErrorCode::InvalidRequest);
            assert!(api.message.contains(&format!("got {}", bad.len())), "{api}");
            assert_eq!(p.topic, "orders");
            assert_eq!(p.isr, vec![2, 3]);
            assert_eq!(
                topic_id_from_pb(&bad).map_err(|e| ApiError::from(e).code),
                Err(ErrorCode::InvalidRequest)
            );
        }
        assert_eq!(topic_id_from_pb(&TOPIC.to_bytes()), Ok(TOPIC));
    }

    #[test]
    fn brokers_move_in_and_render_back() {
        let sent = pb::BrokerInfo {
            broker_id: 3,
            broker_epoch: 42,
            address: "127.0.0.3:9092".into(),
            rack: Some("r1".into()),
            fenced: true,
            shutting_down: false,
            kafka_address: Some("127.0.0.3:9094".into()),
        };
        let b = broker_info_from_pb(sent.clone());
        assert_eq!(
            b,
            BrokerInfo {
                id: BrokerId(3),
                epoch: BrokerEpoch(42),
                address: "127.0.0.3:9092".into(),
                rack: Some("r1".into()),
                fenced: true,
                shutting_down: false,
                kafka_address: Some("127.0.0.3:9094".into()),
            }
        );
        assert_eq!(broker_info_to_pb(&b), sent);
    }

    #[test]
    fn stamps_and_heartbeat_answers_read_every_field() {
        let s = stamp_from_pb(&pb::ControllerStamp {
            controller_id: 2,
            controller_epoch: 11,
            broker_epoch: 70,
        });
        assert_eq!(
            s,
            ControllerStamp {
                controller_id: 2,
                controller_epoch: ControllerEpoch(11),
                broker_epoch: BrokerEpoch(70),
            }
        );
        let r = heartbeat_reply_from_pb(&pb::BrokerHeartbeatResponse {
            error: None,
            is_caught_up: true,
            is_fenced: false,
            should_shut_down: true,
            controller_epoch: 11,
            controller_id: 2,
            access_version: 0,
        });
        assert_eq!(
            r,
            HeartbeatReply {
                is_caught_up: true,
                is_fenced: false,
                should_shut_down: true,
                remaining_leaderships: 0,
            }
        );
    }

    #[test]
    fn wire_errors_absent_or_none_pass_and_unknown_codes_are_internal() {
        assert_eq!(check(&None), Ok(()));
        let none = pb::Error {
            code: 0,
            message: String::new(),
            leader: None,
        };
        assert_eq!(check(&Some(none)), Ok(()));
        for code in [9999, -1, i32::MAX] {
            let e = check(&Some(pb::Error {
                code,
                message: "from a newer peer".into(),
                leader: None,
            }))
            .unwrap_err();
            assert_eq!(e.code, ErrorCode::Internal);
            assert_eq!(e.message, "from a newer peer");
        }
        let sent = ApiError::new(ErrorCode::FencedLeaderEpoch, "epoch 4 < 5");
        assert_eq!(check(&Some(error_to_pb(&sent))), Err(sent));
    }

    #[test]
    fn partition_errors_echo_the_item_key() {
        let ok = partition_error_to_pb(vec![1, 2, 3], 4, &Ok(()));
        assert_eq!(
            (ok.topic_id, ok.partition, ok.error),
            (vec![1, 2, 3], 4, None)
        );
        let refused = Err(ApiError::new(ErrorCode::InvalidRequest, "bad topic id"));
        let e = partition_error_to_pb(vec![1, 2, 3], 4, &refused);
        assert_eq!(e.topic_id, vec![1, 2, 3]);
        assert_eq!(check(&e.error), refused);
    }

    #[test]
    fn alter_items_and_fetches_carry_ids_and_epochs() {
        let tp = TopicPartition::new(TOPIC, 7);
        let item = alter_partition_item_to_pb(&AlterPartitionItem {
            tp,
            leader_epoch: LeaderEpoch(5),
            partition_epoch: PartitionEpoch(9),
            new_isr: vec![BrokerId(2), BrokerId(4)],
        });
        assert_eq!(
            item,
            pb::AlterPartitionItem {
                topic_id: TOPIC.to_bytes().to_vec(),
                partition: 7,
                leader_epoch: 5,
                partition_epoch: 9,
                new_isr: vec![2, 4],
            }
        );
        assert_eq!(
            fetch_partition_to_pb(&tp, LeaderEpoch(5)),
            pb::FetchPartition {
                topic_id: TOPIC.to_bytes().to_vec(),
                partition: 7,
                leader_epoch: 5,
            }
        );
    }

    #[test]
    fn id_lists_map_both_ways() {
        let ids = [BrokerId(1), BrokerId(u32::MAX)];
        assert_eq!(brokers_to_pb(&ids), vec![1, u32::MAX]);
        assert_eq!(brokers_from_pb(&[1, u32::MAX]), ids);
        assert!(brokers_from_pb(&[]).is_empty());
    }

    #[test]
    fn unknown_enum_values_are_invalid_requests_not_defaults() {
        use keel_metadata::decide::{ConfigOp, ElectionKind};
        assert_eq!(
            election_kind_from_pb(pb::ElectionType::Unclean as i32),
            Ok(ElectionKind::Unclean)
        );
        assert_eq!(election_kind_from_pb(0), Ok(ElectionKind::Preferred));
        let e = election_kind_from_pb(7).expect_err("7 is no election type");
        assert_eq!(ApiError::from(e).code, ErrorCode::InvalidRequest);
        let op = |op: i32| pb::AlterConfigOp {
            key: "k".into(),
            value: "v".into(),
            op,
        };
        assert_eq!(
            config_op_from_pb(op(0)),
            Ok(ConfigOp::Set("k".into(), "v".into()))
        );
        assert_eq!(config_op_from_pb(op(1)), Ok(ConfigOp::Delete("k".into())));
        let e = config_op_from_pb(op(-3)).expect_err("-3 is no op");
        assert_eq!(ApiError::from(e).code, ErrorCode::InvalidRequest);
    }
}

use keel_metadata::acl::{AclBinding, Operation, Permission, Principal, ResourcePattern};
use keel_metadata::decide::AclFilter;

/// The wire form of an ACL resource pattern.
pub fn acl_resource_to_pb(p: &ResourcePattern) -> pb::AclResource {
    use pb::acl_resource::Resource;
    pb::AclResource {
        resource: Some(match p {
            ResourcePattern::Topic(t) => Resource::Topic(t.clone()),
            ResourcePattern::TopicPrefix(t) => Resource::TopicPrefix(t.clone()),
            ResourcePattern::Cluster => Resource::Cluster(true),
        }),
    }
}

/// The resource pattern a wire form names (`None`: it names none).
pub fn acl_resource_from_pb(r: &pb::AclResource) -> Option<ResourcePattern> {
    use pb::acl_resource::Resource;
    Some(match r.resource.as_ref()? {
        Resource::Topic(t) => ResourcePattern::Topic(t.clone()),
        Resource::TopicPrefix(t) => ResourcePattern::TopicPrefix(t.clone()),
        Resource::Cluster(_) => ResourcePattern::Cluster,
    })
}

fn permission_to_pb(p: Permission) -> pb::AclPermission {
    match p {
        Permission::Allow => pb::AclPermission::Allow,
        Permission::Deny => pb::AclPermission::Deny,
    }
}

/// `Ok(None)` for ANY.
fn permission_from_pb(v: i32) -> Result<Option<Permission>, ConvertError> {
    match pb::AclPermission::try_from(v) {
        Ok(pb::AclPermission::Any) => Ok(None),
        Ok(pb::AclPermission::Allow) => Ok(Some(Permission::Allow)),
        Ok(pb::AclPermission::Deny) => Ok(Some(Permission::Deny)),
        Err(_) => Err(ConvertError::UnknownEnum {
            field: "acl permission",
            value: v,
        }),
    }
}

pub fn acl_binding_to_pb(b: &AclBinding) -> pb::AclBinding {
    pb::AclBinding {
        principal: b.principal.to_string(),
        resource: Some(acl_resource_to_pb(&b.pattern)),
        operation: b.operation.name().to_string(),
        permission: permission_to_pb(b.permission) as i32,
    }
}

/// A binding as the wire names it; every field is required.
pub fn acl_binding_from_pb(b: &pb::AclBinding) -> Result<AclBinding, ConvertError> {
    let principal: Principal = b
        .principal
        .parse()
        .map_err(|e: keel_metadata::acl::BadPrincipal| ConvertError::Invalid(e.to_string()))?;
    let pattern = b
        .resource
        .as_ref()
        .and_then(acl_resource_from_pb)
        .ok_or(ConvertError::Missing("resource"))?;
    let operation: Operation = b.operation.parse().map_err(ConvertError::Invalid)?;
    let permission =
        permission_from_pb(b.permission)?.ok_or(ConvertError::Missing("permission"))?;
    Ok(AclBinding {
        principal,
        pattern,
        operation,
        permission,
    })
}

pub fn acl_filter_to_pb(f: &AclFilter) -> pb::AclFilter {
    pb::AclFilter {
        principal: f.principal.as_ref().map(ToString::to_string),
        resource: f.pattern.as_ref().map(acl_resource_to_pb),
        operation: f.operation.map(|o| o.name().to_string()),
        permission: f
            .permission
            .map_or(pb::AclPermission::Any, permission_to_pb) as i32,
    }
}

/// A filter as the wire names it; unset fields match everything.
pub fn acl_filter_from_pb(f: &pb::AclFilter) -> Result<AclFilter, ConvertError> {
    Ok(AclFilter {
        principal: f
            .principal
            .as_deref()
            .map(str::parse::<Principal>)
            .transpose()
            .map_err(|e| ConvertError::Invalid(e.to_string()))?,
        pattern: f.resource.as_ref().and_then(acl_resource_from_pb),
        operation: f
            .operation
            .as_deref()
            .map(str::parse::<Operation>)
            .transpose()
            .map_err(ConvertError::Invalid)?,
        permission: permission_from_pb(f.permission)?,
    })
}

use keel_metadata::scram::{ScramCredential, ScramMechanism};

/// The wire form of a SCRAM mechanism.
pub fn scram_mechanism_to_pb(m: ScramMechanism) -> pb::ScramMechanism {
    match m {
        ScramMechanism::Sha256 => pb::ScramMechanism::ScramSha256,
        ScramMechanism::Sha512 => pb::ScramMechanism::ScramSha512,
    }
}

/// The mechanism a wire value names; anything else is
/// UNSUPPORTED_SASL_MECHANISM, as Kafka answers it.
pub fn scram_mechanism_from_pb(v: i32) -> Result<ScramMechanism, ApiError> {
    match pb::ScramMechanism::try_from(v) {
        Ok(pb::ScramMechanism::ScramSha256) => Ok(ScramMechanism::Sha256),
        Ok(pb::ScramMechanism::ScramSha512) => Ok(ScramMechanism::Sha512),
        Ok(pb::ScramMechanism::Unknown) | Err(_) => Err(ApiError::new(
            ErrorCode::UnsupportedSaslMechanism,
            format!(
                "SCRAM mechanism {v} is not supported (SCRAM-SHA-256 is 1, SCRAM-SHA-512 is 2)"
            ),
        )),
    }
}

/// An upsertion as a client sends it: the salt and the salted password it
/// computed (the password stays with the client).
pub fn scram_upsertion_to_pb(
    user: &str,
    mechanism: ScramMechanism,
    iterations: u32,
    salt: &[u8],
    salted_password: &[u8],
) -> pb::ScramCredentialUpsertion {
    pb::ScramCredentialUpsertion {
        user: user.to_string(),
        mechanism: scram_mechanism_to_pb(mechanism) as i32,
        iterations,
        salt: salt.to_vec(),
        salted_password: salted_password.to_vec(),
    }
}

/// The user and the credential an upsertion sets: the stored and server
/// keys derived from its salted password. A mechanism not supported is
/// UNSUPPORTED_SASL_MECHANISM; a salted password that yields no credential
/// (wrong length, iterations out of range) is UNACCEPTABLE_CREDENTIAL.
pub fn scram_upsertion_from_pb(
    u: &pb::ScramCredentialUpsertion,
) -> Result<(String, ScramCredential), ApiError> {
    let mechanism = scram_mechanism_from_pb(u.mechanism)?;
    let credential =
        ScramCredential::from_salted_password(mechanism, &u.salted_password, &u.salt, u.iterations)
            .map_err(|e| {
                ApiError::new(
                    ErrorCode::UnacceptableCredential,
                    format!(
                        "the {} credential of user {:?}: {e}",
                        mechanism.name(),
                        u.user
                    ),
                )
            })?;
    Ok((u.user.clone(), credential))
}

pub fn scram_deletion_to_pb(user: &str, mechanism: ScramMechanism) -> pb::ScramCredentialDeletion {
    pb::ScramCredentialDeletion {
        user: user.to_string(),
        mechanism: scram_mechanism_to_pb(mechanism) as i32,
    }
}

/// The user and mechanism a deletion names.
pub fn scram_deletion_from_pb(
    d: &pb::ScramCredentialDeletion,
) -> Result<(String, ScramMechanism), ApiError> {
    Ok((d.user.clone(), scram_mechanism_from_pb(d.mechanism)?))
}

/// What a description shows of a credential: its mechanism and
/// iterations, never its salt or keys.
pub fn scram_credential_info_to_pb(c: &ScramCredential) -> pb::ScramCredentialInfo {
    pb::ScramCredentialInfo {
        mechanism: scram_mechanism_to_pb(c.mechanism) as i32,
        iterations: c.iterations,
    }
}

#[cfg(test)]
mod scram_tests {
    use super::*;

    #[test]
    fn an_upsertion_becomes_the_credential_of_its_salted_password() {
        let salt = b"0123456789abcdef0123456789abcdef";
        let salted =
            ScramCredential::salted_password(ScramMechanism::Sha512, b"secret", salt, 4096)
                .unwrap();
        let sent = scram_upsertion_to_pb("alice", ScramMechanism::Sha512, 4096, salt, &salted);
        assert_eq!(sent.mechanism, 2);
        let (user, c) = scram_upsertion_from_pb(&sent).unwrap();
        assert_eq!(user, "alice");
        assert_eq!(
            c,
            ScramCredential::from_password(ScramMechanism::Sha512, b"secret", salt, 4096).unwrap()
        );
        let info = scram_credential_info_to_pb(&c);
        assert_eq!((info.mechanism, info.iterations), (2, 4096));
        let d = scram_deletion_to_pb("alice", ScramMechanism::Sha256);
        assert_eq!(
            scram_deletion_from_pb(&d),
            Ok(("alice".to_string(), ScramMechanism::Sha256))
        );
    }

    #[test]
    fn unknown_mechanisms_and_bad_salted_passwords_are_refused_with_kafkas_codes() {
        for v in [0, 3, -1] {
            assert_eq!(
                scram_mechanism_from_pb(v).unwrap_err().code,
                ErrorCode::UnsupportedSaslMechanism
            );
        }
        let mut bad =
            scram_upsertion_to_pb("alice", ScramMechanism::Sha256, 4096, b"salt", &[1, 2]);
        assert_eq!(
            scram_upsertion_from_pb(&bad).unwrap_err().code,
            ErrorCode::UnacceptableCredential
        );
        bad.mechanism = 9;
        assert_eq!(
            scram_upsertion_from_pb(&bad).unwrap_err().code,
            ErrorCode::UnsupportedSaslMechanism
        );
    }
}
