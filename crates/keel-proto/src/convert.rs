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
}

impl From<ConvertError> for ApiError {
    fn from(e: ConvertError) -> Self {
        ApiError::new(ErrorCode::InvalidRequest, e.to_string())
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
    }
}

/// Lets generic code find the top-level error of any response.
pub trait HasError {
    fn error(&self) -> Option<&pb::Error>;
}

macro_rules! has_error {
    ($($t:ty),* $(,)?) => {
        $(impl HasError for $t {
            fn error(&self) -> Option<&pb::Error> {
                self.error.as_ref()
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
    pb::TriggerSnapshotResponse,
);

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
