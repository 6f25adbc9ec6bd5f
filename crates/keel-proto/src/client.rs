//! A client for the controller quorum that follows NOT_CONTROLLER
//! redirects: it asks the hinted leader first, else rotates through the
//! bootstrap addresses, with a small backoff, until a deadline.

use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use keel_metadata::ErrorCode;
use tonic::transport::Channel;

use crate::convert::HasError;
use crate::pb;
use crate::pb::admin_service_client::AdminServiceClient;
use crate::pb::broker_service_client::BrokerServiceClient;

/// Largest answer accepted: describing a cluster with a million partitions
/// is far beyond gRPC's 4 MiB default.
pub const MAX_RESPONSE_BYTES: usize = 1 << 30;

/// How long [`ControllerClient::with_locate`] waits for each controller to
/// say whether it is the active one.
const LOCATE_TIMEOUT: Duration = Duration::from_secs(2);

fn admin_client(ch: Channel) -> AdminServiceClient<Channel> {
    AdminServiceClient::new(ch).max_decoding_message_size(MAX_RESPONSE_BYTES)
}

/// Why a call did not get an answer from the active controller.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// A write reached a controller but its answer was lost (timeout,
    /// connection reset): it may or may not have been applied.
    #[error("no answer from {address} after sending the request ({reason}); the change may or may not have been applied: check before retrying")]
    OutcomeUnknown { address: String, reason: String },
    /// No controller could be reached (or none knew a leader) before the deadline.
    #[error("no active controller reachable at {addresses} within {waited_ms} ms: {last}")]
    Unreachable {
        addresses: String,
        waited_ms: u64,
        last: String,
    },
    #[error("invalid controller address {0:?}")]
    BadAddress(String),
}

/// Redirect-following client; cheap to share (`&self` methods).
pub struct ControllerClient {
    bootstrap: Vec<String>,
    /// Where the active controller was last seen (hint or success).
    leader: Mutex<Option<String>>,
    /// One HTTP/2 connection per address, reused across calls.
    channels: Mutex<std::collections::HashMap<String, Channel>>,
    /// Per-attempt timeout.
    request_timeout: Duration,
    /// Total budget for one logical call, redirects and retries included.
    deadline: Duration,
    /// Longest pause between retries (they start at 20 ms and double).
    max_backoff: Duration,
    /// Plaintext or mutual TLS (servers must present a controller
    /// certificate).
    transport: keel_tls::Transport,
    /// Give up at once when every address refused the connection in a row
    /// (nothing listens there), instead of retrying until the deadline.
    fail_fast: bool,
    /// Before a call with no active controller known, ask every bootstrap
    /// address at once which one it is.
    locate: bool,
}

impl ControllerClient {
    pub fn new(bootstrap: Vec<String>) -> Self {
        Self {
            bootstrap,
            leader: Mutex::new(None),
            channels: Mutex::new(std::collections::HashMap::new()),
            request_timeout: Duration::from_secs(10),
            deadline: Duration::from_secs(20),
            max_backoff: Duration::from_millis(500),
            transport: keel_tls::Transport::Plaintext,
            fail_fast: false,
            locate: false,
        }
    }

    /// Before a call with no active controller known yet, asks every
    /// bootstrap address at once (DescribeNode, 2 s each) which one is
    /// active, and starts there. A controller that is stopped (SIGSTOP, a
    /// hung host) still has its connections accepted by the kernel, so
    /// trying the list in order would spend a whole request timeout on it,
    /// and a write sent to it would end as of unknown outcome.
    pub fn with_locate(mut self, on: bool) -> Self {
        self.locate = on;
        self
    }

    /// Gives up as soon as every bootstrap address refused a connection
    /// in a row: for a command-line tool, where nothing listening is a
    /// mistake to report now, not a failover to wait out.
    pub fn with_fail_fast(mut self, on: bool) -> Self {
        self.fail_fast = on;
        self
    }

    /// Speaks to the controllers over `transport`.
    pub fn with_transport(mut self, transport: keel_tls::Transport) -> Self {
        self.transport = transport;
        if let Ok(mut m) = self.channels.lock() {
            m.clear();
        }
        self
    }

    /// Caps the pause between retries (default 500 ms). A caller timing a
    /// failover caps it low so its retries do not round the time up.
    pub fn with_max_backoff(mut self, max: Duration) -> Self {
        self.max_backoff = max;
        self
    }

    /// Sets the per-attempt timeout and the whole-call deadline.
    pub fn with_timeouts(mut self, request: Duration, deadline: Duration) -> Self {
        self.request_timeout = request;
        self.deadline = deadline;
        self
    }

    /// The address the active controller was last seen at.
    pub fn leader_address(&self) -> Option<String> {
        self.leader.lock().ok().and_then(|g| g.clone())
    }

    fn channel(&self, addr: &str) -> Result<Channel, ClientError> {
        if let Some(ch) = self.channels.lock().ok().and_then(|m| m.get(addr).cloned()) {
            return Ok(ch);
        }
        let ch = self.connect(addr)?;
        if let Ok(mut m) = self.channels.lock() {
            m.insert(addr.to_string(), ch.clone());
        }
        Ok(ch)
    }

    fn connect(&self, addr: &str) -> Result<Channel, ClientError> {
        let ep = keel_tls::transport::endpoint(addr)
            .map_err(|_| ClientError::BadAddress(addr.to_string()))?
            .connect_timeout(Duration::from_secs(1))
            .timeout(self.request_timeout);
        Ok(self
            .transport
            .channel(ep, None, keel_tls::Expect::Controller))
    }

    /// Asks every bootstrap address at once whether it is the active
    /// controller and remembers the first that says so (nothing when none
    /// does within [`LOCATE_TIMEOUT`], or the caller may not describe the
    /// cluster: the call then tries them in turn).
    async fn locate_active(&self) {
        let wait = LOCATE_TIMEOUT.min(self.request_timeout);
        let mut probes = tokio::task::JoinSet::new();
        for addr in &self.bootstrap {
            let Ok(ch) = self.channel(addr) else { continue };
            let addr = addr.clone();
            probes.spawn(async move {
                let mut client = admin_client(ch);
                // Only the role is wanted: no node hashes its image for it.
                let ask = client.describe_node(pb::DescribeNodeRequest {
                    skip_image_hash: true,
                });
                match tokio::time::timeout(wait, ask).await {
                    Ok(Ok(r)) if r.get_ref().active_controller => Some(addr),
                    _ => None,
                }
            });
        }
        while let Some(answer) = probes.join_next().await {
            if let Ok(Some(addr)) = answer {
                if let Ok(mut g) = self.leader.lock() {
                    *g = Some(addr);
                }
                // Dropping the set cancels the probes still waiting.
                return;
            }
        }
    }

    /// Calls the admin service of the active controller, retrying any
    /// failure: for reads and idempotent requests.
    pub async fn admin<R, F, Fut>(&self, f: F) -> Result<R, ClientError>
    where
        R: HasError,
        F: Fn(AdminServiceClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<R>, tonic::Status>>,
    {
        self.call(true, |ch| f(admin_client(ch))).await
    }

    /// Calls the admin service with a write that must not be applied twice:
    /// retried only when it surely was not applied (NOT_CONTROLLER, or no
    /// connection); a lost answer is [`ClientError::OutcomeUnknown`].
    pub async fn admin_write<R, F, Fut>(&self, f: F) -> Result<R, ClientError>
    where
        R: HasError,
        F: Fn(AdminServiceClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<R>, tonic::Status>>,
    {
        self.call(false, |ch| f(admin_client(ch))).await
    }

    /// Calls the broker service of the active controller.
    pub async fn broker<R, F, Fut>(&self, f: F) -> Result<R, ClientError>
    where
        R: HasError,
        F: Fn(BrokerServiceClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<R>, tonic::Status>>,
    {
        self.call(true, |ch| f(BrokerServiceClient::new(ch))).await
    }

    async fn call<R, F, Fut>(&self, retry_ambiguous: bool, f: F) -> Result<R, ClientError>
    where
        R: HasError,
        F: Fn(Channel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<R>, tonic::Status>>,
    {
        let start = Instant::now();
        if self.locate && self.bootstrap.len() > 1 && self.leader_address().is_none() {
            self.locate_active().await;
        }
        let mut next_bootstrap = 0usize;
        let mut last;
        let mut hinted: Option<String> = self.leader_address();
        let mut backoff = Duration::from_millis(20).min(self.max_backoff);
        let mut refused_in_a_row = 0usize;
        loop {
            let addr = match hinted.take() {
                Some(a) => a,
                None => {
                    if self.bootstrap.is_empty() {
                        return Err(ClientError::BadAddress(String::new()));
                    }
                    let a = self.bootstrap[next_bootstrap % self.bootstrap.len()].clone();
                    next_bootstrap += 1;
                    a
                }
            };
            match f(self.channel(&addr)?).await {
                Ok(resp) => {
                    refused_in_a_row = 0;
                    let resp = resp.into_inner();
                    match resp.error() {
                        Some(e) if e.code == ErrorCode::NotController.as_i32() => {
                            last = format!("{addr}: {}", e.message);
                            if let Some(h) = e.leader.as_ref().filter(|h| h.address != addr) {
                                hinted = Some(h.address.clone());
                            }
                        }
                        _ => {
                            if let Ok(mut g) = self.leader.lock() {
                                *g = Some(addr);
                            }
                            return Ok(resp);
                        }
                    }
                }
                Err(status) => {
                    let never_sent = never_sent(&status);
                    if !retry_ambiguous && !never_sent {
                        return Err(ClientError::OutcomeUnknown {
                            address: addr,
                            reason: status.message().to_string(),
                        });
                    }
                    let (reason, refused) = transport_reason(&status);
                    last = format!("{addr}: {reason}");
                    refused_in_a_row = if refused { refused_in_a_row + 1 } else { 0 };
                    if self.fail_fast && refused_in_a_row >= self.bootstrap.len().max(1) {
                        return Err(ClientError::Unreachable {
                            addresses: self.bootstrap.join(","),
                            waited_ms: start.elapsed().as_millis() as u64,
                            last,
                        });
                    }
                    if let Ok(mut g) = self.leader.lock() {
                        if g.as_deref() == Some(addr.as_str()) {
                            *g = None;
                        }
                    }
                }
            }
            if start.elapsed() >= self.deadline {
                return Err(ClientError::Unreachable {
                    addresses: self.bootstrap.join(","),
                    waited_ms: start.elapsed().as_millis() as u64,
                    last,
                });
            }
            if hinted.is_none() {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(self.max_backoff);
            }
        }
    }
}

/// Whether a failed call surely never left this process: only a
/// connection that could not be made (TCP connect or TLS handshake: the
/// transport's `ConnectError` is in the error's chain) proves it. A
/// connection that broke after the request was written ("connection
/// closed before message completed", a reset) proves nothing, whatever its
/// message says: the request may have arrived and been applied.
pub fn never_sent(status: &tonic::Status) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(e) = source {
        if e.downcast_ref::<tonic::ConnectError>().is_some() {
            return true;
        }
        source = e.source();
    }
    false
}

/// A failed call's reason with the OS's own words (the innermost error,
/// e.g. "Connection refused (os error 111)"), and whether nothing can be
/// there: the connection was refused, the host or network is unreachable,
/// or the name does not resolve (waiting will not change any of these
/// soon; a fail-fast caller reports them at once).
fn transport_reason(status: &tonic::Status) -> (String, bool) {
    let mut reason = status.message().to_string();
    let mut refused = false;
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    let mut innermost = None;
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            refused |= matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::HostUnreachable
                    | std::io::ErrorKind::NetworkUnreachable
            );
        }
        // The resolver's failure (hyper's connector says "dns error").
        refused |= e.to_string().starts_with("dns error");
        innermost = Some(e.to_string());
        source = e.source();
    }
    if let Some(inner) = innermost.filter(|i| !reason.contains(i.as_str())) {
        reason = format!("{reason}: {inner}");
    }
    (reason, refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_connection_never_made_proves_a_call_never_left() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let connect = tonic::Status::from_error(Box::new(tonic::ConnectError(Box::new(refused))));
        assert_eq!(connect.code(), tonic::Code::Unavailable);
        assert!(never_sent(&connect));
        // Broken after the request went out: unknown, whatever the words.
        for message in [
            "connection closed before message completed",
            "error trying to connect: connection reset",
            "transport error",
        ] {
            assert!(
                !never_sent(&tonic::Status::unavailable(message)),
                "{message}"
            );
        }
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(!never_sent(&tonic::Status::from_error(Box::new(reset))));
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_call_that_never_left() {
        // A port nothing listens on (bound, then closed).
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap();
        let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect_lazy();
        let status = crate::pb::admin_service_client::AdminServiceClient::new(ch)
            .describe_cluster(crate::pb::DescribeClusterRequest::default())
            .await
            .unwrap_err();
        assert!(never_sent(&status), "{status:?}");
    }
}
