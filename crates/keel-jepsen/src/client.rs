//! The harness's own gRPC calls. Unlike `keel_proto::client::ControllerClient`
//! (which retries through NOT_CONTROLLER and transport errors until a
//! deadline, and so can turn "my first attempt may have been applied" into
//! a definite "TOPIC_ALREADY_EXISTS"), writes here are retried only after an
//! attempt that was *definitely not applied*: a connection that never
//! opened, or NOT_CONTROLLER from a node that never submitted the command.
//! Anything else ends the operation, as `info` when ambiguous.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use keel_metadata::TopicId;
use keel_proto::pb;
use keel_proto::pb::admin_service_client::AdminServiceClient;
use keel_proto::pb::broker_control_service_client::BrokerControlServiceClient;
use keel_testkit::admin;
pub use keel_tls::{Expect, Transport};
use tonic::transport::Channel;

use crate::history::{Outcome, Seen};

/// A fresh lazy channel from `bind` to `addr` over `transport` (mutual TLS
/// as the transport's identity, or plaintext), to a server whose
/// certificate `expect` accepts.
pub fn channel(
    transport: &Transport,
    addr: &str,
    bind: IpAddr,
    timeout: Duration,
    expect: Expect,
) -> Option<Channel> {
    let ep = keel_tls::transport::endpoint(addr)
        .ok()?
        .connect_timeout(Duration::from_millis(700).min(timeout))
        .timeout(timeout);
    Some(transport.channel(ep, Some(bind), expect))
}

/// A [`channel`] from the address the harness's own clients connect from
/// ([`crate::cluster::CLIENT_IP`]).
pub fn client_channel(
    transport: &Transport,
    addr: &str,
    timeout: Duration,
    expect: Expect,
) -> Option<Channel> {
    channel(
        transport,
        addr,
        crate::cluster::CLIENT_IP.into(),
        timeout,
        expect,
    )
}

/// Error code name of a wire error.
pub fn code_name(code: i32) -> String {
    pb::ErrorCode::try_from(code)
        .map(|c| c.as_str_name().to_string())
        .unwrap_or_else(|_| format!("CODE_{code}"))
}

/// The request never left: the connection could not be opened.
fn never_sent(s: &tonic::Status) -> bool {
    let text = format!("{s:?}");
    s.code() == tonic::Code::Unavailable
        && (text.contains("error trying to connect")
            || text.contains("tcp connect error")
            || text.contains("Connection refused"))
}

/// What an error code says about a write, by the controller's contract
/// (keel-controller `command.rs`): NOT_CONTROLLER only ever answers a
/// request that was never proposed; REQUEST_TIMED_OUT (leadership lost
/// while committing) and INTERNAL leave the outcome unknown; any other code
/// is a refusal that wrote nothing.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Verdict {
    /// Definitely not applied: try the named leader (or another node).
    NotApplied,
    /// May or may not have been applied.
    Unknown,
    /// Refused: definitely not applied, and final.
    Refused,
}

fn verdict(code: i32) -> Verdict {
    match pb::ErrorCode::try_from(code) {
        Ok(pb::ErrorCode::NotController) => Verdict::NotApplied,
        Ok(pb::ErrorCode::RequestTimedOut | pb::ErrorCode::Internal) | Err(_) => Verdict::Unknown,
        Ok(_) => Verdict::Refused,
    }
}

/// Result of one client operation.
#[derive(Clone, Debug, Default)]
pub struct OpResult {
    pub outcome: Option<Outcome>,
    pub error: Option<String>,
    pub message: Option<String>,
    pub seen: Option<Seen>,
    pub topic_id: Option<String>,
    /// Partitions asked for (create, the new total of create_partitions)
    /// or seen (describe).
    pub partitions: Option<u32>,
    /// Replication factor asked for (create) or seen (describe: the size of
    /// every partition's target replica set; `Some(0)` when partitions
    /// disagree, which no topic of the workload ever legitimately shows).
    pub replication_factor: Option<u32>,
    /// Topic configs set explicitly, as a describe saw them.
    pub configs: Option<BTreeMap<String, String>>,
    /// Config key an alter_config changed.
    pub config_key: Option<String>,
    /// Value an alter_config set; `None` with `config_key` set = removed.
    pub config_value: Option<String>,
    /// Partition a reassign moved.
    pub partition: Option<u32>,
    /// Target replica set of a reassign.
    pub replicas: Option<Vec<u32>>,
    pub node: Option<String>,
    pub attempts: u32,
}

impl OpResult {
    fn done(outcome: Outcome) -> Self {
        OpResult {
            outcome: Some(outcome),
            ..Default::default()
        }
    }
}

/// One write of `AdminClient` (`$method` with `$req`, attempted as
/// [`AdminClient::run`] says), judged by the answer's top-level error and
/// the error `$item` picks from the answer `$r` for the one item asked.
macro_rules! write_call {
    ($self:ident, $req:ident, $method:ident, |$r:ident| $item:expr) => {
        $self
            .run(|ch| {
                let req = $req.clone();
                async move {
                    match AdminServiceClient::new(ch).$method(req).await {
                        Err(s) => Self::status_answer(s),
                        Ok(r) => {
                            let $r = r.into_inner();
                            Self::write_answer($r.error.as_ref(), $item, None)
                        }
                    }
                }
            })
            .await
    };
}

/// One workload client's view of the quorum.
pub struct AdminClient {
    addrs: Vec<String>,
    hint: Option<String>,
    rr: usize,
    bind: IpAddr,
    transport: Transport,
    pub attempt_timeout: Duration,
    pub op_budget: Duration,
}

fn hex_id(b: &[u8]) -> Option<String> {
    TopicId::from_bytes(b).map(|t| t.to_string())
}

enum Attempt<T> {
    /// Definitely not applied; try another node.
    Retry(Option<String>, String),
    /// Final.
    Done(T),
}

impl AdminClient {
    pub fn new(addrs: Vec<String>, bind: IpAddr, transport: Transport) -> Self {
        AdminClient {
            addrs,
            hint: None,
            rr: 0,
            bind,
            transport,
            attempt_timeout: Duration::from_millis(1500),
            op_budget: Duration::from_secs(4),
        }
    }

    fn next_addr(&mut self) -> String {
        if let Some(h) = self.hint.take() {
            return h;
        }
        let a = self.addrs[self.rr % self.addrs.len()].clone();
        self.rr += 1;
        a
    }

    /// Runs attempts until one is final or the budget is spent; attempts
    /// that end in `Retry` were definitely not applied.
    async fn run<F, Fut>(&mut self, mut attempt: F) -> OpResult
    where
        F: FnMut(Channel) -> Fut,
        Fut: std::future::Future<Output = Attempt<OpResult>>,
    {
        let start = Instant::now();
        let mut attempts = 0;
        let mut last;
        loop {
            let addr = self.next_addr();
            attempts += 1;
            let Some(ch) = channel(
                &self.transport,
                &addr,
                self.bind,
                self.attempt_timeout,
                Expect::Controller,
            ) else {
                return OpResult::done(Outcome::Fail);
            };
            match attempt(ch).await {
                Attempt::Done(mut r) => {
                    if r.outcome != Some(Outcome::Info) {
                        self.hint = Some(addr.clone());
                    }
                    r.node = Some(addr);
                    r.attempts = attempts;
                    return r;
                }
                Attempt::Retry(hint, why) => {
                    last = why;
                    self.hint = hint.filter(|h| *h != addr);
                }
            }
            if start.elapsed() >= self.op_budget {
                return OpResult {
                    outcome: Some(Outcome::Fail),
                    error: Some("UNREACHABLE".into()),
                    message: Some(format!("no attempt reached the active controller: {last}")),
                    attempts,
                    ..Default::default()
                };
            }
            if self.hint.is_none() {
                tokio::time::sleep(Duration::from_millis(50 + 25 * attempts.min(8) as u64)).await;
            }
        }
    }

    /// Classifies a write's answer.
    fn write_answer(
        top: Option<&pb::Error>,
        item: Option<&pb::Error>,
        topic_id: Option<String>,
    ) -> Attempt<OpResult> {
        if let Some(e) = top {
            if verdict(e.code) == Verdict::NotApplied {
                return Attempt::Retry(
                    e.leader.as_ref().map(|l| l.address.clone()),
                    e.message.clone(),
                );
            }
        }
        if let Some(e) = top.or(item) {
            return Attempt::Done(OpResult {
                outcome: Some(match verdict(e.code) {
                    Verdict::Refused => Outcome::Fail,
                    // An item's NOT_CONTROLLER is not a redirect: unknown.
                    Verdict::NotApplied | Verdict::Unknown => Outcome::Info,
                }),
                error: Some(code_name(e.code)),
                message: Some(e.message.clone()),
                ..Default::default()
            });
        }
        Attempt::Done(OpResult {
            outcome: Some(Outcome::Ok),
            topic_id,
            ..Default::default()
        })
    }

    fn status_answer(s: tonic::Status) -> Attempt<OpResult> {
        if never_sent(&s) {
            return Attempt::Retry(None, s.message().to_string());
        }
        Attempt::Done(OpResult {
            outcome: Some(Outcome::Info),
            error: Some(format!("GRPC_{:?}", s.code()).to_uppercase()),
            message: Some(s.message().chars().take(200).collect()),
            ..Default::default()
        })
    }

    pub async fn create(&mut self, name: &str, partitions: u32, rf: u32) -> OpResult {
        let mut r = self.create_inner(name, partitions, rf).await;
        r.partitions = Some(partitions);
        r.replication_factor = Some(rf);
        r
    }

    async fn create_inner(&mut self, name: &str, partitions: u32, rf: u32) -> OpResult {
        let req = admin::create_topics_request(vec![admin::creatable(name, partitions, rf)]);
        self.run(|ch| {
            let req = req.clone();
            async move {
                match AdminServiceClient::new(ch).create_topics(req).await {
                    Err(s) => Self::status_answer(s),
                    Ok(r) => {
                        let r = r.into_inner();
                        let t = r.topics.first();
                        Self::write_answer(
                            r.error.as_ref(),
                            t.and_then(|t| t.error.as_ref()),
                            t.and_then(|t| hex_id(&t.topic_id)),
                        )
                    }
                }
            }
        })
        .await
    }

    /// Raises `name`'s partition count to `total` (CreatePartitions).
    pub async fn create_partitions(&mut self, name: &str, total: u32) -> OpResult {
        let req = pb::CreatePartitionsRequest {
            topics: vec![pb::CreatePartitionsTopic {
                name: name.to_string(),
                total,
                assignments: vec![],
            }],
            validate_only: false,
        };
        let mut r = write_call!(self, req, create_partitions, |r| r
            .topics
            .first()
            .and_then(|t| t.error.as_ref()));
        r.partitions = Some(total);
        r
    }

    /// Sets (`Some`) or removes (`None`) one config of topic `name`
    /// (IncrementalAlterConfigs).
    pub async fn alter_config(&mut self, name: &str, key: &str, value: Option<&str>) -> OpResult {
        let op = match value {
            Some(v) => pb::AlterConfigOp {
                key: key.to_string(),
                value: v.to_string(),
                op: pb::ConfigOp::Set as i32,
            },
            None => pb::AlterConfigOp {
                key: key.to_string(),
                value: String::new(),
                op: pb::ConfigOp::Delete as i32,
            },
        };
        let req = pb::IncrementalAlterConfigsRequest {
            topics: vec![pb::AlterTopicConfig {
                topic: name.to_string(),
                ops: vec![op],
            }],
            validate_only: false,
        };
        let mut r = write_call!(self, req, incremental_alter_configs, |r| r
            .topics
            .first()
            .and_then(|t| t.error.as_ref()));
        r.config_key = Some(key.to_string());
        r.config_value = value.map(str::to_string);
        r
    }

    /// Starts moving one partition of `name` to `replicas`
    /// (AlterPartitionReassignments); `ok` = accepted, not finished.
    pub async fn reassign(&mut self, name: &str, partition: u32, replicas: &[u32]) -> OpResult {
        let req = pb::AlterPartitionReassignmentsRequest {
            partitions: vec![pb::ReassignablePartition {
                topic: name.to_string(),
                partition,
                replicas: replicas.to_vec(),
                cancel: false,
            }],
        };
        let mut r = write_call!(self, req, alter_partition_reassignments, |r| r
            .partitions
            .first()
            .and_then(|p| p.error.as_ref()));
        r.partition = Some(partition);
        r.replicas = Some(replicas.to_vec());
        r
    }

    /// Preferred leader election on every partition of `name`
    /// (ElectLeaders). Partitions whose preferred replica already leads
    /// answer ELECTION_NOT_NEEDED, which is not a failure of the operation;
    /// the first other per-partition error is the answer.
    pub async fn elect_preferred(&mut self, name: &str) -> OpResult {
        self.run(|ch| {
            let name = name.to_string();
            async move {
                // Every partition of the topic: list them first (a read).
                let mut admin = AdminServiceClient::new(ch);
                let d = match admin
                    .describe_topics(pb::DescribeTopicsRequest {
                        names: vec![name.clone()],
                    })
                    .await
                {
                    Err(s) => return Self::status_answer(s),
                    Ok(d) => d.into_inner(),
                };
                if let Some(e) = d.error.as_ref() {
                    return Self::write_answer(Some(e), None, None);
                }
                let Some(t) = d.topics.first() else {
                    return Attempt::Retry(None, "empty describe".into());
                };
                if let Some(e) = t.error.as_ref() {
                    return Self::write_answer(None, Some(e), None);
                }
                let partitions = t
                    .partitions
                    .iter()
                    .filter_map(|p| p.state.as_ref())
                    .map(|s| pb::TopicPartitionRef {
                        topic: name.clone(),
                        partition: s.partition,
                    })
                    .collect();
                let req = pb::ElectLeadersRequest {
                    election_type: pb::ElectionType::Preferred as i32,
                    partitions,
                };
                match admin.elect_leaders(req).await {
                    Err(s) => Self::status_answer(s),
                    Ok(r) => {
                        let r = r.into_inner();
                        let item = r.partitions.iter().find_map(|p| {
                            p.error
                                .as_ref()
                                .filter(|e| e.code != pb::ErrorCode::ElectionNotNeeded as i32)
                        });
                        Self::write_answer(r.error.as_ref(), item, None)
                    }
                }
            }
        })
        .await
    }

    pub async fn delete(&mut self, name: &str) -> OpResult {
        let req = pb::DeleteTopicsRequest {
            names: vec![name.to_string()],
        };
        write_call!(self, req, delete_topics, |r| r
            .topics
            .first()
            .and_then(|t| t.error.as_ref()))
    }

    /// Describe of one name; reads are always safe to retry.
    pub async fn describe(&mut self, name: &str) -> OpResult {
        let req = pb::DescribeTopicsRequest {
            names: vec![name.to_string()],
        };
        self.run(|ch| {
            let req = req.clone();
            async move {
                match AdminServiceClient::new(ch).describe_topics(req).await {
                    Err(s) => Attempt::Retry(None, s.message().to_string()),
                    Ok(r) => {
                        let r = r.into_inner();
                        if let Some(e) = r.error {
                            return Attempt::Retry(
                                e.leader.map(|l| l.address),
                                format!("{}: {}", code_name(e.code), e.message),
                            );
                        }
                        let Some(t) = r.topics.first() else {
                            return Attempt::Retry(None, "empty describe".into());
                        };
                        let (seen, id) = match &t.error {
                            Some(e) if e.code == pb::ErrorCode::UnknownTopic as i32 => {
                                (Seen::Absent, None)
                            }
                            Some(e) => {
                                return Attempt::Done(OpResult {
                                    outcome: Some(Outcome::Fail),
                                    error: Some(code_name(e.code)),
                                    message: Some(e.message.clone()),
                                    ..Default::default()
                                })
                            }
                            None if t.marked_for_deletion => (Seen::Deleting, hex_id(&t.topic_id)),
                            None => (Seen::Present, hex_id(&t.topic_id)),
                        };
                        let listed = seen != Seen::Absent;
                        Attempt::Done(OpResult {
                            outcome: Some(Outcome::Ok),
                            seen: Some(seen),
                            topic_id: id,
                            partitions: listed.then_some(t.partitions.len() as u32),
                            replication_factor: listed.then(|| described_rf(t)),
                            configs: listed.then(|| {
                                t.configs
                                    .iter()
                                    .map(|c| (c.key.clone(), c.value.clone()))
                                    .collect()
                            }),
                            ..Default::default()
                        })
                    }
                }
            }
        })
        .await
    }
}

/// A described topic's replication factor: the size of each partition's
/// target replica set (replicas minus those a reassignment is removing),
/// if every partition agrees; `0` if they do not (or there are none).
fn described_rf(t: &pb::TopicDescription) -> u32 {
    let mut sizes = t
        .partitions
        .iter()
        .filter_map(|p| p.state.as_ref())
        .map(|s| {
            s.replicas
                .iter()
                .filter(|r| !s.removing.contains(r))
                .count() as u32
        });
    match sizes.next() {
        Some(first) if sizes.all(|n| n == first) => first,
        _ => 0,
    }
}

/// DescribeNode on one controller (no redirect).
pub async fn describe_node(
    transport: &Transport,
    addr: &str,
    timeout: Duration,
) -> Option<pb::DescribeNodeResponse> {
    let ch = client_channel(transport, addr, timeout, Expect::Controller)?;
    AdminServiceClient::new(ch)
        .describe_node(pb::DescribeNodeRequest::default())
        .await
        .ok()
        .map(|r| r.into_inner())
}

/// DescribeBroker on one broker.
pub async fn describe_broker(
    transport: &Transport,
    addr: &str,
    timeout: Duration,
) -> Option<pb::DescribeBrokerResponse> {
    let ch = client_channel(transport, addr, timeout, Expect::Member)?;
    BrokerControlServiceClient::new(ch)
        .describe_broker(pb::DescribeBrokerRequest {})
        .await
        .ok()
        .map(|r| r.into_inner())
}

/// The active controller's address, asking every controller.
pub async fn find_active(
    transport: &Transport,
    addrs: &[String],
    timeout: Duration,
) -> Option<String> {
    for a in addrs {
        if let Some(d) = describe_node(transport, a, timeout).await {
            if d.active_controller {
                return Some(a.clone());
            }
        }
    }
    None
}

/// DescribeTopics (all) on a given controller.
pub async fn describe_all(
    transport: &Transport,
    addr: &str,
    timeout: Duration,
) -> Option<pb::DescribeTopicsResponse> {
    let ch = client_channel(transport, addr, timeout, Expect::Controller)?;
    let r = AdminServiceClient::new(ch)
        .describe_topics(pb::DescribeTopicsRequest::default())
        .await
        .ok()?
        .into_inner();
    r.error.is_none().then_some(r)
}

/// DescribeCluster on a given controller.
pub async fn describe_cluster(
    transport: &Transport,
    addr: &str,
    timeout: Duration,
) -> Option<pb::DescribeClusterResponse> {
    let ch = client_channel(transport, addr, timeout, Expect::Controller)?;
    let r = AdminServiceClient::new(ch)
        .describe_cluster(pb::DescribeClusterRequest::default())
        .await
        .ok()?
        .into_inner();
    r.error.is_none().then_some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_described_replication_factor_counts_target_replicas_and_flags_disagreement() {
        let part = |replicas: &[u32], removing: &[u32]| pb::PartitionDescription {
            state: Some(pb::PartitionState {
                replicas: replicas.to_vec(),
                removing: removing.to_vec(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let topic = |partitions| pb::TopicDescription {
            partitions,
            ..Default::default()
        };
        // Partition 1 is moving from [1, 2] to [2, 3]: replicas [2, 3, 1].
        let moving = topic(vec![part(&[1, 2], &[]), part(&[2, 3, 1], &[1])]);
        assert_eq!(described_rf(&moving), 2);
        let mixed = topic(vec![part(&[1, 2], &[]), part(&[3], &[])]);
        assert_eq!(described_rf(&mixed), 0);
        assert_eq!(described_rf(&topic(vec![])), 0);
    }

    #[test]
    fn verdicts_come_from_error_codes_alone() {
        let e = |code: pb::ErrorCode, message: &str| pb::Error {
            code: code as i32,
            message: message.into(),
            leader: None,
        };
        // A NOT_CONTROLLER at the top is a redirect, whatever it says.
        let nc = e(pb::ErrorCode::NotController, "leadership was lost");
        assert!(matches!(
            AdminClient::write_answer(Some(&nc), None, None),
            Attempt::Retry(..)
        ));
        for (code, outcome) in [
            (pb::ErrorCode::RequestTimedOut, Outcome::Info),
            (pb::ErrorCode::Internal, Outcome::Info),
            (pb::ErrorCode::TopicAlreadyExists, Outcome::Fail),
            (pb::ErrorCode::InvalidRequest, Outcome::Fail),
        ] {
            for (top, item) in [(Some(e(code, "x")), None), (None, Some(e(code, "x")))] {
                let Attempt::Done(r) = AdminClient::write_answer(top.as_ref(), item.as_ref(), None)
                else {
                    panic!("{code:?} is final");
                };
                assert_eq!(r.outcome, Some(outcome), "{code:?}");
                assert_eq!(r.error.as_deref(), Some(code.as_str_name()));
            }
        }
        // An item-level NOT_CONTROLLER and an unknown code: unknown outcome.
        let Attempt::Done(r) = AdminClient::write_answer(None, Some(&nc), None) else {
            panic!("an item's error is final");
        };
        assert_eq!(r.outcome, Some(Outcome::Info));
        assert_eq!(verdict(9_999), Verdict::Unknown);
        let Attempt::Done(ok) = AdminClient::write_answer(None, None, Some("ab".into())) else {
            panic!("success is final");
        };
        assert_eq!(ok.outcome, Some(Outcome::Ok));
    }
}
