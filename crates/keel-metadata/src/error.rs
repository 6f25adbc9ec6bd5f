//! Errors of the pure core. Expected refusals travel to callers as
//! [`ApiError`] with a stable [`ErrorCode`]; contradictions found while
//! replaying the log are [`ReplayError`]s and stop the node.

use serde::{Deserialize, Serialize};

use crate::ids::{BrokerId, TopicId, TopicPartition};
use crate::state::TransitionError;

/// Stable error codes; the numbers match `proto/common.proto`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(i32)]
pub enum ErrorCode {
    None = 0,
    NotController = 1,
    StaleControllerEpoch = 2,
    StaleBrokerEpoch = 3,
    FencedLeaderEpoch = 4,
    InvalidPartitionEpoch = 5,
    TopicAlreadyExists = 6,
    UnknownTopic = 7,
    InvalidReplicationFactor = 8,
    InvalidTopicName = 9,
    DuplicateBrokerRegistration = 10,
    InconsistentClusterId = 11,
    NoReplicaOnline = 12,
    EligibleLeadersNotAvailable = 13,
    ReassignmentInProgress = 14,
    InvalidPartitions = 15,
    InvalidReplicaAssignment = 16,
    UnknownBroker = 17,
    IneligibleReplica = 18,
    InvalidRequest = 19,
    TopicDeletionInProgress = 20,
    UnknownPartition = 21,
    NoReassignmentInProgress = 22,
    ElectionNotNeeded = 23,
    PreferredLeaderNotAvailable = 24,
    InvalidConfig = 25,
    RequestTimedOut = 26,
    BrokerFenced = 27,
    NotLeaderOrFollower = 28,
    BrokerNotFenced = 29,
    InvalidQuorumChange = 30,
    Internal = 31,
    TopicAuthorizationFailed = 32,
    ClusterAuthorizationFailed = 33,
    PolicyViolation = 34,
    ThrottlingQuotaExceeded = 35,
    /// The active controller's data dir is below its free-space reserve.
    StorageFull = 36,
    /// The item names something that does not exist (a SCRAM credential
    /// to delete or describe); Kafka's RESOURCE_NOT_FOUND (91).
    ResourceNotFound = 37,
    /// The request names the same resource twice (a user in one SCRAM
    /// credential change); Kafka's DUPLICATE_RESOURCE (92).
    DuplicateResource = 38,
    /// A SCRAM credential refused (empty or invalid user name, iterations
    /// out of range, malformed salt or keys); Kafka's
    /// UNACCEPTABLE_CREDENTIAL (93).
    UnacceptableCredential = 39,
    /// A SASL login failed (unknown user, wrong password); Kafka's
    /// SASL_AUTHENTICATION_FAILED (58).
    SaslAuthenticationFailed = 40,
    /// A SASL mechanism this cluster does not offer; Kafka's
    /// UNSUPPORTED_SASL_MECHANISM (33).
    UnsupportedSaslMechanism = 41,
    /// A SASL message out of turn; Kafka's ILLEGAL_SASL_STATE (34).
    IllegalSaslState = 42,
    /// A controller request stamped with a controller epoch the quorum has
    /// not confirmed to the broker yet (retriable: the broker asks the
    /// quorum at once).
    UnconfirmedControllerEpoch = 43,
}

impl ErrorCode {
    /// Every code, in numeric order.
    pub const ALL: [ErrorCode; 44] = [
        ErrorCode::None,
        ErrorCode::NotController,
        ErrorCode::StaleControllerEpoch,
        ErrorCode::StaleBrokerEpoch,
        ErrorCode::FencedLeaderEpoch,
        ErrorCode::InvalidPartitionEpoch,
        ErrorCode::TopicAlreadyExists,
        ErrorCode::UnknownTopic,
        ErrorCode::InvalidReplicationFactor,
        ErrorCode::InvalidTopicName,
        ErrorCode::DuplicateBrokerRegistration,
        ErrorCode::InconsistentClusterId,
        ErrorCode::NoReplicaOnline,
        ErrorCode::EligibleLeadersNotAvailable,
        ErrorCode::ReassignmentInProgress,
        ErrorCode::InvalidPartitions,
        ErrorCode::InvalidReplicaAssignment,
        ErrorCode::UnknownBroker,
        ErrorCode::IneligibleReplica,
        ErrorCode::InvalidRequest,
        ErrorCode::TopicDeletionInProgress,
        ErrorCode::UnknownPartition,
        ErrorCode::NoReassignmentInProgress,
        ErrorCode::ElectionNotNeeded,
        ErrorCode::PreferredLeaderNotAvailable,
        ErrorCode::InvalidConfig,
        ErrorCode::RequestTimedOut,
        ErrorCode::BrokerFenced,
        ErrorCode::NotLeaderOrFollower,
        ErrorCode::BrokerNotFenced,
        ErrorCode::InvalidQuorumChange,
        ErrorCode::Internal,
        ErrorCode::TopicAuthorizationFailed,
        ErrorCode::ClusterAuthorizationFailed,
        ErrorCode::PolicyViolation,
        ErrorCode::ThrottlingQuotaExceeded,
        ErrorCode::StorageFull,
        ErrorCode::ResourceNotFound,
        ErrorCode::DuplicateResource,
        ErrorCode::UnacceptableCredential,
        ErrorCode::SaslAuthenticationFailed,
        ErrorCode::UnsupportedSaslMechanism,
        ErrorCode::IllegalSaslState,
        ErrorCode::UnconfirmedControllerEpoch,
    ];

    pub fn as_i32(self) -> i32 {
        self as i32
    }

    /// Unknown numbers (from a newer peer) map to `None`, never panic.
    pub fn from_i32(v: i32) -> Option<Self> {
        usize::try_from(v)
            .ok()
            .and_then(|i| Self::ALL.get(i).copied())
    }

    /// The SCREAMING_SNAKE name used on the wire and in CLI output.
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::None => "NONE",
            ErrorCode::NotController => "NOT_CONTROLLER",
            ErrorCode::StaleControllerEpoch => "STALE_CONTROLLER_EPOCH",
            ErrorCode::StaleBrokerEpoch => "STALE_BROKER_EPOCH",
            ErrorCode::FencedLeaderEpoch => "FENCED_LEADER_EPOCH",
            ErrorCode::InvalidPartitionEpoch => "INVALID_PARTITION_EPOCH",
            ErrorCode::TopicAlreadyExists => "TOPIC_ALREADY_EXISTS",
            ErrorCode::UnknownTopic => "UNKNOWN_TOPIC",
            ErrorCode::InvalidReplicationFactor => "INVALID_REPLICATION_FACTOR",
            ErrorCode::InvalidTopicName => "INVALID_TOPIC_NAME",
            ErrorCode::DuplicateBrokerRegistration => "DUPLICATE_BROKER_REGISTRATION",
            ErrorCode::InconsistentClusterId => "INCONSISTENT_CLUSTER_ID",
            ErrorCode::NoReplicaOnline => "NO_REPLICA_ONLINE",
            ErrorCode::EligibleLeadersNotAvailable => "ELIGIBLE_LEADERS_NOT_AVAILABLE",
            ErrorCode::ReassignmentInProgress => "REASSIGNMENT_IN_PROGRESS",
            ErrorCode::InvalidPartitions => "INVALID_PARTITIONS",
            ErrorCode::InvalidReplicaAssignment => "INVALID_REPLICA_ASSIGNMENT",
            ErrorCode::UnknownBroker => "UNKNOWN_BROKER",
            ErrorCode::IneligibleReplica => "INELIGIBLE_REPLICA",
            ErrorCode::InvalidRequest => "INVALID_REQUEST",
            ErrorCode::TopicDeletionInProgress => "TOPIC_DELETION_IN_PROGRESS",
            ErrorCode::UnknownPartition => "UNKNOWN_PARTITION",
            ErrorCode::NoReassignmentInProgress => "NO_REASSIGNMENT_IN_PROGRESS",
            ErrorCode::ElectionNotNeeded => "ELECTION_NOT_NEEDED",
            ErrorCode::PreferredLeaderNotAvailable => "PREFERRED_LEADER_NOT_AVAILABLE",
            ErrorCode::InvalidConfig => "INVALID_CONFIG",
            ErrorCode::RequestTimedOut => "REQUEST_TIMED_OUT",
            ErrorCode::BrokerFenced => "BROKER_FENCED",
            ErrorCode::NotLeaderOrFollower => "NOT_LEADER_OR_FOLLOWER",
            ErrorCode::BrokerNotFenced => "BROKER_NOT_FENCED",
            ErrorCode::InvalidQuorumChange => "INVALID_QUORUM_CHANGE",
            ErrorCode::Internal => "INTERNAL",
            ErrorCode::TopicAuthorizationFailed => "TOPIC_AUTHORIZATION_FAILED",
            ErrorCode::ClusterAuthorizationFailed => "CLUSTER_AUTHORIZATION_FAILED",
            ErrorCode::PolicyViolation => "POLICY_VIOLATION",
            ErrorCode::ThrottlingQuotaExceeded => "THROTTLING_QUOTA_EXCEEDED",
            ErrorCode::StorageFull => "STORAGE_FULL",
            ErrorCode::ResourceNotFound => "RESOURCE_NOT_FOUND",
            ErrorCode::DuplicateResource => "DUPLICATE_RESOURCE",
            ErrorCode::UnacceptableCredential => "UNACCEPTABLE_CREDENTIAL",
            ErrorCode::SaslAuthenticationFailed => "SASL_AUTHENTICATION_FAILED",
            ErrorCode::UnsupportedSaslMechanism => "UNSUPPORTED_SASL_MECHANISM",
            ErrorCode::IllegalSaslState => "ILLEGAL_SASL_STATE",
            ErrorCode::UnconfirmedControllerEpoch => "UNCONFIRMED_CONTROLLER_EPOCH",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// An expected refusal, returned to the caller (per item where the request
/// has items). Carries a human sentence for operators.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("{code}: {message}")]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// A committed record that contradicts the image. Fatal: the node stops with
/// the log index in the message; a record is never skipped.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("replay of record at log index {offset} failed: {kind}")]
pub struct ReplayError {
    pub offset: u64,
    pub kind: ReplayErrorKind,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplayErrorKind {
    #[error("a transaction begins while the one begun at index {0} is still open")]
    NestedTransaction(u64),
    #[error("a transaction ends or aborts, but none is open")]
    NoOpenTransaction,
    #[error("ACL binding {0} already exists")]
    DuplicateAcl(String),
    #[error("ACL binding {0} does not exist")]
    UnknownAcl(String),
    #[error("SCRAM credential of user {user:?} is invalid: {reason}")]
    InvalidScramCredential { user: String, reason: String },
    #[error("user {user:?} has no {mechanism} credential")]
    UnknownScramCredential {
        user: String,
        mechanism: &'static str,
    },
    #[error("broker {0} is not registered")]
    UnknownBroker(BrokerId),
    #[error("broker {broker} epoch {got} does not match registered epoch {expected}")]
    BrokerEpochMismatch {
        broker: BrokerId,
        expected: u64,
        got: u64,
    },
    #[error("broker {0} is still unfenced; only a fenced broker can be unregistered")]
    BrokerNotFenced(BrokerId),
    #[error("topic {0} already exists")]
    DuplicateTopicId(TopicId),
    #[error("topic name {0:?} already in use")]
    DuplicateTopicName(String),
    #[error("topic {0} is unknown")]
    UnknownTopic(TopicId),
    #[error("partition {0} already exists")]
    DuplicatePartition(TopicPartition),
    #[error("partition {0} is unknown")]
    UnknownPartition(TopicPartition),
    #[error("partition {tp} must be created with index {expected}")]
    PartitionOutOfOrder { tp: TopicPartition, expected: u32 },
    #[error("partition {tp}: {reason}")]
    InvalidPartition { tp: TopicPartition, reason: String },
    #[error("partition {tp}: leader {leader} is fenced or shutting down")]
    IneligibleLeader {
        tp: TopicPartition,
        leader: BrokerId,
    },
    #[error("topic {0} is not marked for deletion")]
    NotMarkedForDeletion(TopicId),
    #[error("topic {0} is already marked for deletion")]
    AlreadyMarkedForDeletion(TopicId),
    #[error("topic {topic} cannot be removed: replica {partition}/{broker} not deleted")]
    DeletionIncomplete {
        topic: TopicId,
        partition: u32,
        broker: BrokerId,
    },
    #[error("replica of {tp} on broker {broker} is not assigned")]
    UnknownReplica {
        tp: TopicPartition,
        broker: BrokerId,
    },
    #[error(transparent)]
    Transition(#[from] TransitionError),
    #[error("record batch format version {0} is not supported")]
    UnsupportedVersion(u16),
}

/// Stored bytes that cannot be decoded (truncated, corrupt, unknown version).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("empty input")]
    Empty,
    #[error("format version {0} is not supported (this build reads {1})")]
    UnsupportedVersion(u16, u16),
    #[error("corrupt encoding: {0}")]
    Corrupt(String),
    #[error("{0} trailing bytes after the encoded value")]
    TrailingBytes(usize),
}
