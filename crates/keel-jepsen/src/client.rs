//! The harness's own gRPC calls. Unlike `keel_proto::client::ControllerClient`
//! (which retries through NOT_CONTROLLER and transport errors until a
//! deadline, and so can turn "my first attempt may have been applied" into
//! a definite "TOPIC_ALREADY_EXISTS"), writes here are retried only after an
//! attempt that was *definitely not applied*: a connection that never
//! opened, or NOT_CONTROLLER from a node that never submitted the command.
//! Anything else ends the operation, as `info` when ambiguous.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use keel_metadata::TopicId;
use keel_proto::pb;
use keel_proto::pb::admin_service_client::AdminServiceClient;
use keel_proto::pb::broker_control_service_client::BrokerControlServiceClient;
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
    /// Partitions asked for (create) or seen (describe).
    pub partitions: Option<u32>,
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
        r
    }

    async fn create_inner(&mut self, name: &str, partitions: u32, rf: u32) -> OpResult {
        let req = pb::CreateTopicsRequest {
            topics: vec![pb::CreatableTopic {
                name: name.to_string(),
                partitions,
                replication_factor: rf,
                ..Default::default()
            }],
            validate_only: false,
        };
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

    pub async fn delete(&mut self, name: &str) -> OpResult {
        let req = pb::DeleteTopicsRequest {
            names: vec![name.to_string()],
        };
        self.run(|ch| {
            let req = req.clone();
            async move {
                match AdminServiceClient::new(ch).delete_topics(req).await {
                    Err(s) => Self::status_answer(s),
                    Ok(r) => {
                        let r = r.into_inner();
                        Self::write_answer(
                            r.error.as_ref(),
                            r.topics.first().and_then(|t| t.error.as_ref()),
                            None,
                        )
                    }
                }
            }
        })
        .await
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
                        Attempt::Done(OpResult {
                            outcome: Some(Outcome::Ok),
                            seen: Some(seen),
                            topic_id: id,
                            partitions: (seen != Seen::Absent).then_some(t.partitions.len() as u32),
                            ..Default::default()
                        })
                    }
                }
            }
        })
        .await
    }
}

/// DescribeNode on one controller (no redirect).
pub async fn describe_node(
    transport: &Transport,
    addr: &str,
    timeout: Duration,
) -> Option<pb::DescribeNodeResponse> {
    let ch = channel(
        transport,
        addr,
        crate::cluster::CLIENT_IP.into(),
        timeout,
        Expect::Controller,
    )?;
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
    let ch = channel(
        transport,
        addr,
        crate::cluster::CLIENT_IP.into(),
        timeout,
        Expect::Member,
    )?;
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
    let ch = channel(
        transport,
        addr,
        crate::cluster::CLIENT_IP.into(),
        timeout,
        Expect::Controller,
    )?;
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
    let ch = channel(
        transport,
        addr,
        crate::cluster::CLIENT_IP.into(),
        timeout,
        Expect::Controller,
    )?;
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
