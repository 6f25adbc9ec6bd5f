//! Protobuf <-> domain conversions for the broker, in one place. Nothing
//! here panics on input from the network: malformed items become
//! INVALID_REQUEST for that item.

use keel_metadata::{
    ApiError, BrokerId, ErrorCode, LeaderEpoch, PartitionEpoch, TopicId, TopicPartition,
};
use keel_proto::pb;

/// A partition's state as a controller request carries it, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PartitionUpdate {
    pub tp: TopicPartition,
    pub topic: String,
    pub leader: Option<BrokerId>,
    pub leader_epoch: LeaderEpoch,
    pub partition_epoch: PartitionEpoch,
    pub replicas: Vec<BrokerId>,
    pub isr: Vec<BrokerId>,
}

pub(crate) fn topic_id(bytes: &[u8]) -> Result<TopicId, ApiError> {
    TopicId::from_bytes(bytes).ok_or_else(|| {
        ApiError::new(
            ErrorCode::InvalidRequest,
            format!("topic id must be 16 bytes, got {}", bytes.len()),
        )
    })
}

/// The broker's view of one partition state, taken apart (not copied).
pub(crate) fn partition_update(
    topic: &[u8],
    p: pb::PartitionState,
) -> Result<PartitionUpdate, ApiError> {
    let tid = topic_id(topic)?;
    Ok(PartitionUpdate {
        tp: TopicPartition::new(tid, p.partition),
        topic: p.topic,
        leader: p.leader.map(BrokerId),
        leader_epoch: LeaderEpoch(p.leader_epoch),
        partition_epoch: PartitionEpoch(p.partition_epoch),
        replicas: p.replicas.into_iter().map(BrokerId).collect(),
        isr: p.isr.into_iter().map(BrokerId).collect(),
    })
}

/// The code of an optional wire error: absent means NONE; a code this build
/// does not know is treated as INTERNAL.
pub(crate) fn code(e: &Option<pb::Error>) -> ErrorCode {
    match e {
        None => ErrorCode::None,
        Some(e) => ErrorCode::from_i32(e.code).unwrap_or(ErrorCode::Internal),
    }
}

/// The message of an optional wire error ("" when absent).
pub(crate) fn message(e: &Option<pb::Error>) -> &str {
    e.as_ref().map(|e| e.message.as_str()).unwrap_or("")
}

pub(crate) fn error(e: &ApiError) -> pb::Error {
    pb::Error {
        code: e.code.as_i32(),
        message: e.message.clone(),
        leader: None,
    }
}

pub(crate) fn result_error(r: &Result<(), ApiError>) -> Option<pb::Error> {
    r.as_ref().err().map(error)
}

pub(crate) fn partition_error(
    topic_id: &[u8],
    partition: u32,
    r: &Result<(), ApiError>,
) -> pb::PartitionError {
    pb::PartitionError {
        topic_id: topic_id.to_vec(),
        partition,
        error: result_error(r),
    }
}

pub(crate) fn ids(v: &[BrokerId]) -> Vec<u32> {
    v.iter().map(|b| b.0).collect()
}
