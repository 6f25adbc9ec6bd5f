//! What a listener forwards admin requests with: the calls of the active
//! controller's admin API (Keel's own gRPC messages) that the Kafka admin
//! APIs are made of. The listener's owner sends them (a broker over its
//! controller link, following NOT_CONTROLLER hints); this crate only says
//! what to send and turns the answers into Kafka's.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;

use keel_metadata::acl::Principal;
use keel_proto::pb;

/// A boxed future, as trait objects return them.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One call of the active controller's admin API.
#[derive(Clone, Debug, PartialEq)]
pub enum AdminCall {
    CreateTopics(pb::CreateTopicsRequest),
    DeleteTopics(pb::DeleteTopicsRequest),
    CreatePartitions(pb::CreatePartitionsRequest),
    DescribeTopics(pb::DescribeTopicsRequest),
    IncrementalAlterConfigs(pb::IncrementalAlterConfigsRequest),
    ElectLeaders(pb::ElectLeadersRequest),
    AlterPartitionReassignments(pb::AlterPartitionReassignmentsRequest),
    ListPartitionReassignments(pb::ListPartitionReassignmentsRequest),
    AlterClusterConfigs(pb::AlterClusterConfigsRequest),
    DescribeClusterConfigs(pb::DescribeClusterConfigsRequest),
    CreateAcls(pb::CreateAclsRequest),
    DeleteAcls(pb::DeleteAclsRequest),
    DescribeAcls(pb::DescribeAclsRequest),
    AlterUserScramCredentials(pb::AlterUserScramCredentialsRequest),
    DescribeUserScramCredentials(pb::DescribeUserScramCredentialsRequest),
}

impl AdminCall {
    /// A write must not be sent again once it may have arrived: its answer
    /// lost is [`ForwardError::OutcomeUnknown`], not a retry.
    pub fn is_write(&self) -> bool {
        match self {
            AdminCall::DescribeTopics(_)
            | AdminCall::ListPartitionReassignments(_)
            | AdminCall::DescribeClusterConfigs(_)
            | AdminCall::DescribeAcls(_)
            | AdminCall::DescribeUserScramCredentials(_) => false,
            AdminCall::CreateTopics(_)
            | AdminCall::DeleteTopics(_)
            | AdminCall::CreatePartitions(_)
            | AdminCall::IncrementalAlterConfigs(_)
            | AdminCall::ElectLeaders(_)
            | AdminCall::AlterPartitionReassignments(_)
            | AdminCall::AlterClusterConfigs(_)
            | AdminCall::CreateAcls(_)
            | AdminCall::DeleteAcls(_)
            | AdminCall::AlterUserScramCredentials(_) => true,
        }
    }
}

/// The active controller's answer to an [`AdminCall`] (the same variant).
#[derive(Clone, Debug, PartialEq)]
pub enum AdminReply {
    CreateTopics(pb::CreateTopicsResponse),
    DeleteTopics(pb::DeleteTopicsResponse),
    CreatePartitions(pb::CreatePartitionsResponse),
    DescribeTopics(pb::DescribeTopicsResponse),
    IncrementalAlterConfigs(pb::IncrementalAlterConfigsResponse),
    ElectLeaders(pb::ElectLeadersResponse),
    AlterPartitionReassignments(pb::AlterPartitionReassignmentsResponse),
    ListPartitionReassignments(pb::ListPartitionReassignmentsResponse),
    AlterClusterConfigs(pb::AlterClusterConfigsResponse),
    DescribeClusterConfigs(pb::DescribeClusterConfigsResponse),
    CreateAcls(pb::CreateAclsResponse),
    DeleteAcls(pb::DeleteAclsResponse),
    DescribeAcls(pb::DescribeAclsResponse),
    AlterUserScramCredentials(pb::AlterUserScramCredentialsResponse),
    DescribeUserScramCredentials(pb::DescribeUserScramCredentialsResponse),
}

impl AdminReply {
    /// The whole-call error of the answer, if any (NOT_CONTROLLER among
    /// them: the forwarder follows its hint).
    pub fn error(&self) -> Option<&pb::Error> {
        match self {
            AdminReply::CreateTopics(r) => r.error.as_ref(),
            AdminReply::DeleteTopics(r) => r.error.as_ref(),
            AdminReply::CreatePartitions(r) => r.error.as_ref(),
            AdminReply::DescribeTopics(r) => r.error.as_ref(),
            AdminReply::IncrementalAlterConfigs(r) => r.error.as_ref(),
            AdminReply::ElectLeaders(r) => r.error.as_ref(),
            AdminReply::AlterPartitionReassignments(r) => r.error.as_ref(),
            AdminReply::ListPartitionReassignments(r) => r.error.as_ref(),
            AdminReply::AlterClusterConfigs(r) => r.error.as_ref(),
            AdminReply::DescribeClusterConfigs(r) => r.error.as_ref(),
            AdminReply::CreateAcls(r) => r.error.as_ref(),
            AdminReply::DeleteAcls(r) => r.error.as_ref(),
            AdminReply::DescribeAcls(r) => r.error.as_ref(),
            AdminReply::AlterUserScramCredentials(r) => r.error.as_ref(),
            AdminReply::DescribeUserScramCredentials(r) => r.error.as_ref(),
        }
    }
}

/// Why a forwarded call got no answer from the active controller.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ForwardError {
    /// No controller answered as the active one before the deadline (none
    /// elected, or none reachable). Nothing was applied; Kafka clients
    /// retry NOT_CONTROLLER.
    #[error("no active controller answered: {0}")]
    NoController(String),
    /// A write was sent and its answer lost: it may or may not have been
    /// applied. Kafka clients retry REQUEST_TIMED_OUT, and a retried
    /// create or delete then finds it done (TOPIC_ALREADY_EXISTS,
    /// UNKNOWN_TOPIC_OR_PARTITION) rather than doing it twice.
    #[error("the controller's answer was lost: {0}")]
    OutcomeUnknown(String),
    /// This listener does not forward admin requests.
    #[error("this listener forwards no admin requests")]
    NotForwarding,
}

/// Who sent a Kafka request, as the listener authenticated it: what a
/// forwarded call carries to the active controller, which authorizes
/// `principal` (never the forwarding broker) and names all three in its
/// audit lines (KIP-590's `Envelope`, in Keel's own call).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Client {
    /// `User:<name>` from the client's certificate or its SASL login;
    /// `User:ANONYMOUS` when it authenticated neither way.
    pub principal: Principal,
    /// The client's address as the listener saw it.
    pub address: Option<SocketAddr>,
    /// How it came in: `PLAINTEXT`, `SSL` or `SASL_SSL` (Kafka's names).
    pub listener: &'static str,
}

impl Client {
    /// An unauthenticated client of a plaintext listener.
    pub fn anonymous(address: Option<SocketAddr>) -> Self {
        Self {
            principal: Principal::Anonymous,
            address,
            listener: "PLAINTEXT",
        }
    }
}

/// Sends admin calls to the active controller.
pub trait Forwarder: Send + Sync + 'static {
    /// Sends `call` on behalf of `client`, following NOT_CONTROLLER hints
    /// and retrying what surely was not applied, for at most `deadline`.
    fn forward(
        &self,
        call: AdminCall,
        client: Client,
        deadline: Duration,
    ) -> BoxFuture<'_, Result<AdminReply, ForwardError>>;
}

/// A forwarder bound to the client whose request is being answered: what
/// the admin answers send their calls through.
#[derive(Clone, Copy)]
pub struct OnBehalf<'a> {
    pub forwarder: &'a dyn Forwarder,
    pub client: &'a Client,
}

impl OnBehalf<'_> {
    /// [`Forwarder::forward`] as this client.
    pub async fn forward(
        &self,
        call: AdminCall,
        deadline: Duration,
    ) -> Result<AdminReply, ForwardError> {
        self.forwarder
            .forward(call, self.client.clone(), deadline)
            .await
    }
}
