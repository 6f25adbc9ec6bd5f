//! The client side of the Raft transport: openraft's RPCs as bincode bytes
//! inside the `RaftService` gRPC envelope.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_proto::pb::raft_service_client::RaftServiceClient;
use keel_proto::pb::{RaftRequest, RaftResponse};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Timeout, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::RPCTypes;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::Streaming;

use crate::codec;
use crate::grant::{LeaseClock, LeaseRequest, LeaseResponse};
use crate::member::DirectoryId;
use crate::prevote::{PreVoteRequest, PreVoteResponse};
use crate::{KeelNode, NodeId, TypeConfig};

/// How long to wait for a TCP connection to a peer before calling it
/// unreachable (openraft then backs off).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Largest gRPC message either side accepts: a snapshot chunk (3 MiB by
/// default) or a batch of entries, with headroom.
pub(crate) const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// When each peer last answered one of this node's Raft RPCs. A cheap
/// handle: clones share the record, which the [`Network`] it came from
/// keeps updating after being moved into Raft.
#[derive(Clone, Debug, Default)]
pub struct PeerContacts {
    /// Peer id to the moment its last response arrived.
    last: Arc<Mutex<HashMap<NodeId, Instant>>>,
    /// Peer id to the directory id its last answer carried.
    directories: Arc<Mutex<HashMap<NodeId, DirectoryId>>>,
}

impl PeerContacts {
    /// Milliseconds since each peer last answered an append, vote or
    /// snapshot RPC (any answer that decoded, including a Raft-level
    /// refusal such as a higher term). Peers never heard from are absent.
    pub fn millis_since(&self) -> BTreeMap<u64, u64> {
        let now = Instant::now();
        self.lock()
            .iter()
            .map(|(id, at)| {
                let ms = now.saturating_duration_since(*at).as_millis();
                (*id, u64::try_from(ms).unwrap_or(u64::MAX))
            })
            .collect()
    }

    /// Notes that `target` just answered.
    fn record(&self, target: NodeId) {
        self.lock().insert(target, Instant::now());
    }

    /// The directory id each peer's last answer carried (peers whose
    /// answers carried none are absent): what the active controller binds
    /// in the membership for a voter that is not bound yet.
    pub fn directories(&self) -> BTreeMap<NodeId, DirectoryId> {
        self.directories
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .map(|(id, d)| (*id, *d))
            .collect()
    }

    /// Notes the directory id in `target`'s answer, if it carried one.
    fn record_directory(&self, target: NodeId, directory: &str) {
        if let Ok(d) = directory.parse::<DirectoryId>() {
            self.directories
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .insert(target, d);
        }
    }

    /// The map, even if a panicking holder poisoned the lock.
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<NodeId, Instant>> {
        self.last
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Creates openraft's per-peer clients. Channels are cached per peer and
/// shared by every client for that peer, so a replication stream that
/// restarts reuses the connection.
#[derive(Clone)]
pub struct Network {
    /// Sent with every request; peers of another cluster refuse it.
    cluster_id: Arc<str>,
    /// This node, named as the sender of every request.
    node_id: NodeId,
    /// Local address outgoing connections bind to; `None` lets the kernel
    /// choose.
    bind_ip: Option<IpAddr>,
    /// Lazily connecting channel per peer, with the address it dials.
    channels: Arc<Mutex<HashMap<NodeId, (String, Channel)>>>,
    /// A second connection per peer for lease heartbeats
    /// ([`crate::lease`]), so they never wait behind a large append on the
    /// replication connection; it asks for the peer's lane
    /// ([`keel_tls::lane`]), so the peer answers them on a runtime its
    /// other work cannot starve. Made by the lease thread, on its runtime.
    lease_channels: Arc<Mutex<HashMap<NodeId, (String, Channel)>>>,
    /// A third one for pre-votes, on the peer's lane too, made by the
    /// election watchdog on the node's runtime.
    pre_vote_channels: Arc<Mutex<HashMap<NodeId, (String, Channel)>>>,
    /// When each peer last answered.
    contacts: PeerContacts,
    /// When this node last acknowledged its leader's lease request (the
    /// service records, the election watchdog reads).
    lease_clock: LeaseClock,
    /// Peers that do not serve `AppendStream` (an older version): every
    /// client to them, including openraft's one-off leader checks, sends
    /// appends as unary calls.
    unary_only: Arc<Mutex<HashSet<NodeId>>>,
    /// This node's data dir's directory id, sent with every request ("":
    /// not said).
    directory: Arc<str>,
    /// Plaintext or mutual TLS; over TLS each peer must present the
    /// certificate of the controller id it is dialed as.
    transport: keel_tls::Transport,
}

impl Network {
    /// A network for node `node_id` of cluster `cluster_id`.
    pub fn new(cluster_id: String, node_id: u64) -> Self {
        Self {
            cluster_id: cluster_id.into(),
            node_id,
            bind_ip: None,
            channels: Arc::new(Mutex::new(HashMap::new())),
            lease_channels: Arc::new(Mutex::new(HashMap::new())),
            pre_vote_channels: Arc::new(Mutex::new(HashMap::new())),
            contacts: PeerContacts::default(),
            lease_clock: LeaseClock::default(),
            unary_only: Arc::new(Mutex::new(HashSet::new())),
            directory: "".into(),
            transport: keel_tls::Transport::Plaintext,
        }
    }

    /// Speaks to peers over `transport`.
    pub fn with_transport(mut self, transport: keel_tls::Transport) -> Self {
        self.transport = transport;
        // Channels made so far spoke another way.
        self.forget_channels();
        self
    }

    /// Drops the channels made so far (replication and lease alike): they
    /// were made with another source address or transport.
    fn forget_channels(&mut self) {
        self.channels = Arc::new(Mutex::new(HashMap::new()));
        self.lease_channels = Arc::new(Mutex::new(HashMap::new()));
        self.pre_vote_channels = Arc::new(Mutex::new(HashMap::new()));
    }

    /// Sends `dir` as this node's directory id with every request.
    pub fn with_directory(mut self, dir: DirectoryId) -> Self {
        self.directory = dir.to_string().into();
        self
    }

    /// Makes every outgoing Raft connection use `ip` as its source address
    /// (port chosen by the kernel), so a packet filter can cut one pair of
    /// nodes by address. An unspecified address (`0.0.0.0`, `::`) leaves
    /// the choice to the kernel; a peer whose address family differs from
    /// `ip`'s is dialed from a kernel-chosen address.
    pub fn with_bind_ip(mut self, ip: IpAddr) -> Self {
        self.bind_ip = (!ip.is_unspecified()).then_some(ip);
        // Channels made so far dialed from another address.
        self.forget_channels();
        self
    }

    /// The node's lease clock: give it to the node's
    /// [`crate::RaftGrpcService`] (`with_lease_clock`) so the election
    /// watchdog sees the lease requests it acknowledges.
    pub fn lease_clock(&self) -> LeaseClock {
        self.lease_clock.clone()
    }

    /// A handle on when each peer last answered; keeps updating after the
    /// network is moved into Raft.
    pub fn contacts(&self) -> PeerContacts {
        self.contacts.clone()
    }

    /// The channel to `target` at `addr`, created (unconnected) on first use
    /// and replaced when the peer's address changes.
    fn channel(&self, target: NodeId, addr: &str) -> Result<Channel, String> {
        self.channel_in(&self.channels, target, addr, false)
    }

    /// As [`Network::channel`], from the map `channels`; over connections
    /// on the peer's lane when `lane` ([`keel_tls::lane`]).
    fn channel_in(
        &self,
        channels: &Mutex<HashMap<NodeId, (String, Channel)>>,
        target: NodeId,
        addr: &str,
        lane: bool,
    ) -> Result<Channel, String> {
        let mut channels = channels
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((cached_addr, channel)) = channels.get(&target) {
            if cached_addr == addr {
                return Ok(channel.clone());
            }
        }
        let endpoint = keel_tls::transport::endpoint(addr)
            .map_err(|e| format!("bad address {addr:?} for node {target}: {e}"))?
            .connect_timeout(CONNECT_TIMEOUT);
        // Lazy: the channel dials on first use and redials after failures.
        let expect = keel_tls::Expect::ControllerId(target);
        let channel = if lane {
            self.transport.lane_channel(endpoint, self.bind_ip, expect)
        } else {
            self.transport.channel(endpoint, self.bind_ip, expect)
        };
        channels.insert(target, (addr.to_string(), channel.clone()));
        Ok(channel)
    }
}

impl Network {
    /// Asks `target` at `addr` for a pre-vote, giving up after `timeout`.
    /// `Err` says why no answer came (unreachable, refused envelope, a
    /// peer without `PreVote`): the caller counts it as not granted.
    pub async fn pre_vote(
        &self,
        target: NodeId,
        node: &KeelNode,
        req: &PreVoteRequest,
        timeout: Duration,
    ) -> Result<PreVoteResponse, String> {
        let channel = self.channel_in(&self.pre_vote_channels, target, &node.addr, true)?;
        self.ask(channel, target, node, req, timeout, |mut c, r| async move {
            c.pre_vote(r).await
        })
        .await
    }
}

impl Network {
    /// Sends a lease heartbeat to `target` at `addr` on its own connection,
    /// giving up after `timeout`. `Err` says why no answer came.
    pub async fn lease(
        &self,
        target: NodeId,
        node: &KeelNode,
        req: &LeaseRequest,
        timeout: Duration,
    ) -> Result<LeaseResponse, String> {
        let channel = self.channel_in(&self.lease_channels, target, &node.addr, true)?;
        self.ask(channel, target, node, req, timeout, |mut c, r| async move {
            c.lease(r).await
        })
        .await
    }

    /// One unary call of Keel's own (pre-vote, lease) to `target` on
    /// `channel`: the envelope, the deadline, and the answer decoded; `Err`
    /// says why no answer came. An answer counts as contact with `target`.
    async fn ask<Req, Resp, F, Fut>(
        &self,
        channel: Channel,
        target: NodeId,
        node: &KeelNode,
        req: &Req,
        timeout: Duration,
        call: F,
    ) -> Result<Resp, String>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        F: FnOnce(RaftServiceClient<Channel>, RaftRequest) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<RaftResponse>, tonic::Status>>,
    {
        let addr = node.addr.as_str();
        let request = RaftRequest {
            cluster_id: self.cluster_id.to_string(),
            from_node: self.node_id,
            payload: codec::encode(req).map_err(|e| e.to_string())?,
            seq: 0,
            to_node: target,
            from_directory: self.directory.to_string(),
            to_directory: node.directory_id.map(|d| d.to_string()).unwrap_or_default(),
        };
        let response =
            match tokio::time::timeout(timeout, call(raft_client(channel), request)).await {
                Err(_) => return Err(format!("node {target} did not answer within {timeout:?}")),
                Ok(Err(status)) => return Err(format!("node {target} at {addr}: {status}")),
                Ok(Ok(r)) => r.into_inner(),
            };
        if !response.error.is_empty() {
            return Err(format!(
                "node {target} refused the request: {}",
                response.error
            ));
        }
        let result: Result<Resp, RaftError<NodeId>> =
            codec::decode(&response.payload).map_err(|e| e.to_string())?;
        self.contacts.record(target);
        self.contacts.record_directory(target, &response.directory);
        result.map_err(|e| format!("node {target}: {e}"))
    }
}

/// Why [`Network::identify`] could not confirm a node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentifyError {
    /// No answer: nothing listens there, it is not a controller's Raft
    /// listener, the connection or TLS handshake failed, or it timed out.
    #[error("no controller answered at {address}: {reason}")]
    Unreachable {
        /// The address asked.
        address: String,
        /// What went wrong, as the transport said.
        reason: String,
    },
    /// A controller answered and refused the envelope: another cluster,
    /// another node id, or another data dir than the one named.
    #[error("the controller at {address} refused: {reason}")]
    Refused {
        /// The address asked.
        address: String,
        /// Which refusal.
        kind: keel_proto::pb::Refusal,
        /// The node's explanation.
        reason: String,
    },
    /// It answered without a directory id (a release before directory ids).
    #[error("the controller at {address} did not say its directory id")]
    NoDirectory {
        /// The address asked.
        address: String,
    },
}

impl Network {
    /// Asks the node at `addr` whether it is controller `target` of this
    /// cluster (with the data dir `expected`, when given) and which
    /// directory id its data dir has, before it is added to the
    /// membership. The question is a lease request for `vote` on a
    /// connection of its own: envelope checks (cluster id, node id,
    /// directory id) come before anything else, and a node that does not
    /// follow `vote` answers it without changing anything. Nothing is
    /// recorded as contact.
    pub async fn identify(
        &self,
        target: NodeId,
        addr: &str,
        expected: Option<DirectoryId>,
        vote: openraft::Vote<NodeId>,
        timeout: Duration,
    ) -> Result<DirectoryId, IdentifyError> {
        let unreachable = |reason: String| IdentifyError::Unreachable {
            address: addr.to_string(),
            reason,
        };
        let endpoint = keel_tls::transport::endpoint(addr)
            .map_err(|e| unreachable(format!("bad address: {e}")))?
            .connect_timeout(CONNECT_TIMEOUT.min(timeout));
        let channel = self.transport.channel(
            endpoint,
            self.bind_ip,
            keel_tls::Expect::ControllerId(target),
        );
        let request = RaftRequest {
            cluster_id: self.cluster_id.to_string(),
            from_node: self.node_id,
            payload: codec::encode(&LeaseRequest { vote })
                .map_err(|e| unreachable(e.to_string()))?,
            seq: 0,
            to_node: target,
            from_directory: self.directory.to_string(),
            to_directory: expected.map(|d| d.to_string()).unwrap_or_default(),
        };
        let response =
            match tokio::time::timeout(timeout, raft_client(channel).lease(request)).await {
                Err(_) => return Err(unreachable(format!("no answer within {timeout:?}"))),
                Ok(Err(status)) => {
                    return Err(unreachable(format!(
                        "{:?}: {}",
                        status.code(),
                        status.message()
                    )))
                }
                Ok(Ok(r)) => r.into_inner(),
            };
        if !response.error.is_empty() {
            return Err(IdentifyError::Refused {
                address: addr.to_string(),
                kind: keel_proto::pb::Refusal::try_from(response.refusal)
                    .unwrap_or(keel_proto::pb::Refusal::Unspecified),
                reason: response.error,
            });
        }
        let found: DirectoryId =
            response
                .directory
                .parse()
                .map_err(|_| IdentifyError::NoDirectory {
                    address: addr.to_string(),
                })?;
        match expected {
            Some(d) if d != found => Err(IdentifyError::Refused {
                address: addr.to_string(),
                kind: keel_proto::pb::Refusal::DirectoryMismatch,
                reason: format!("its data dir has directory id {found}, not {d}"),
            }),
            _ => Ok(found),
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &KeelNode) -> PeerClient {
        PeerClient {
            cluster_id: self.cluster_id.clone(),
            from_node: self.node_id,
            from_directory: self.directory.clone(),
            to_directory: node.directory_id.map(|d| d.to_string()).unwrap_or_default(),
            target,
            node: node.clone(),
            channel: self.channel(target, &node.addr),
            contacts: self.contacts.clone(),
            append_stream: None,
            unary_only: self.unary_only.clone(),
            serves_streams: false,
        }
    }
}

/// A `RaftService` client on `channel` with the transport's message limits.
fn raft_client(channel: Channel) -> RaftServiceClient<Channel> {
    RaftServiceClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES)
}

/// An open `AppendStream` to one peer: one request in flight, answered in
/// order.
struct AppendStream {
    /// Requests go out through this; dropping it ends the stream.
    tx: mpsc::Sender<RaftRequest>,
    /// The peer's answers.
    answers: Streaming<RaftResponse>,
    /// `seq` of the next request.
    next_seq: u64,
    /// Calls since the last answer: a call that timed out leaves its
    /// answer to come later (it is skipped by seq), and the stream is
    /// dropped only after several in a row.
    unanswered: u32,
}

/// Calls in a row without an answer after which an append stream is taken
/// for wedged and reopened (at openraft's 150 ms per call, ~0.5 s).
const MAX_UNANSWERED: u32 = 3;

/// An append larger than this (a catch-up) closes its stream once answered:
/// both ends' decode buffers keep the capacity of the largest message they
/// carried, and a fresh stream starts small.
const LARGE_APPEND_BYTES: usize = 4 << 20;

impl AppendStream {
    /// Opens a stream on `channel` with `first` as its first message (sent
    /// with the stream's headers: no extra round trip) and waits for its
    /// answer.
    async fn open(
        channel: Channel,
        mut first: RaftRequest,
    ) -> Result<(Self, RaftResponse), tonic::Status> {
        let (tx, rx) = mpsc::channel(1);
        first.seq = 0;
        tx.send(first)
            .await
            .map_err(|_| tonic::Status::internal("append stream closed before opening"))?;
        let answers = raft_client(channel)
            .append_stream(ReceiverStream::new(rx))
            .await?
            .into_inner();
        let mut stream = Self {
            tx,
            answers,
            next_seq: 1,
            unanswered: 0,
        };
        let answer = stream.answer(0).await?;
        Ok((stream, answer))
    }

    /// Sends `request` and waits for its answer.
    async fn call(&mut self, mut request: RaftRequest) -> Result<RaftResponse, tonic::Status> {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.unanswered += 1;
        request.seq = seq;
        self.tx
            .send(request)
            .await
            .map_err(|_| tonic::Status::unavailable("append stream closed"))?;
        self.answer(seq).await
    }

    /// The answer to request `seq`. Answers to earlier requests, whose
    /// calls timed out, are skipped: the peer handles requests in order, so
    /// they come first.
    async fn answer(&mut self, seq: u64) -> Result<RaftResponse, tonic::Status> {
        loop {
            let answer = self
                .answers
                .message()
                .await?
                .ok_or_else(|| tonic::Status::unavailable("append stream ended by the peer"))?;
            if answer.seq < seq {
                continue;
            }
            if answer.seq > seq {
                return Err(tonic::Status::internal(format!(
                    "append stream answered request {} while {seq} was in flight",
                    answer.seq
                )));
            }
            self.unanswered = 0;
            return Ok(answer);
        }
    }
}

/// What an append sent through `AppendStream` came to.
enum Streamed {
    /// The peer's answer, or the gRPC failure.
    Answer(Result<RaftResponse, tonic::Status>),
    /// The peer does not serve `AppendStream`; the request, to send unary.
    Unsupported(RaftRequest),
}

/// openraft's connection to one peer.
pub struct PeerClient {
    /// Envelope cluster id.
    cluster_id: Arc<str>,
    /// This node.
    from_node: NodeId,
    /// This node's directory id ("": not said).
    from_directory: Arc<str>,
    /// The directory id the membership records for the peer ("": unbound).
    to_directory: String,
    /// The peer.
    target: NodeId,
    /// The peer's address, for error reports.
    node: KeelNode,
    /// The channel, or why the peer's address cannot be dialed.
    channel: Result<Channel, String>,
    /// Where answers from `target` are noted.
    contacts: PeerContacts,
    /// Appends go through this stream once opened; an error or
    /// `MAX_UNANSWERED` calls without an answer drop it (answers are
    /// matched by seq, so a late one is never taken for a later request).
    append_stream: Option<AppendStream>,
    /// Peers known not to serve `AppendStream`, shared by all clients.
    unary_only: Arc<Mutex<HashSet<NodeId>>>,
    /// This client has opened an append stream to the peer.
    serves_streams: bool,
}

/// Which RPC of the service to call.
#[derive(Clone, Copy)]
enum Rpc {
    /// `Append`.
    Append,
    /// `Vote`.
    Vote,
    /// `InstallSnapshot`.
    InstallSnapshot,
}

impl Rpc {
    /// openraft's name for the RPC, used in timeout errors.
    fn rpc_type(self) -> RPCTypes {
        match self {
            Rpc::Append => RPCTypes::AppendEntries,
            Rpc::Vote => RPCTypes::Vote,
            Rpc::InstallSnapshot => RPCTypes::InstallSnapshot,
        }
    }
}

/// A transport-level failure, carried inside openraft's network errors.
#[derive(Debug, thiserror::Error)]
enum TransportError {
    /// The peer's address is unusable.
    #[error("{0}")]
    BadAddress(String),
    /// gRPC failed (connection refused, reset, ...).
    #[error("rpc to node {target} at {addr} failed: {status}")]
    Status {
        /// The peer.
        target: NodeId,
        /// Where it was dialed.
        addr: String,
        /// What tonic reported.
        status: tonic::Status,
    },
    /// The peer refused the envelope (another cluster, a data dir that
    /// does not match the membership, ...).
    #[error("node {target} refused the request ({kind:?}): {reason}")]
    Refused {
        /// The peer.
        target: NodeId,
        /// Which refusal.
        kind: keel_proto::pb::Refusal,
        /// The peer's explanation.
        reason: String,
    },
    /// Bytes that do not decode.
    #[error("{0}")]
    Codec(#[from] codec::CodecError),
}

impl PeerClient {
    /// Sends one request and decodes the peer's `Result<Resp, RaftError<E>>`.
    async fn call<Req, Resp, E>(
        &mut self,
        rpc: Rpc,
        req: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, KeelNode, RaftError<NodeId, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
        RaftError<NodeId, E>: DeserializeOwned,
    {
        let channel = match &self.channel {
            Ok(c) => c.clone(),
            Err(e) => {
                return Err(RPCError::Unreachable(Unreachable::new(
                    &TransportError::BadAddress(e.clone()),
                )))
            }
        };
        let payload = codec::encode(req)
            .map_err(|e| RPCError::Network(NetworkError::new(&TransportError::Codec(e))))?;
        let large = payload.len() > LARGE_APPEND_BYTES;
        let request = self.envelope(payload);
        // openraft drops the call at the same moment (hard_ttl); either way
        // a timed-out append's answer is skipped by the next call.
        let ttl = option.hard_ttl();
        let deadline = tokio::time::Instant::now() + ttl;
        let outcome = self.send(channel, rpc, request, deadline, large).await;
        let response: RaftResponse = match outcome {
            Err(_elapsed) => {
                return Err(RPCError::Timeout(Timeout {
                    action: rpc.rpc_type(),
                    id: self.from_node,
                    target: self.target,
                    timeout: ttl,
                }))
            }
            Ok(Err(status)) => return Err(self.status_error(rpc, status, ttl)),
            Ok(Ok(response)) => response,
        };
        self.take_response(response)
    }

    /// The envelope that carries `payload` to this peer.
    fn envelope(&self, payload: Vec<u8>) -> RaftRequest {
        RaftRequest {
            cluster_id: self.cluster_id.to_string(),
            from_node: self.from_node,
            payload,
            seq: 0,
            to_node: self.target,
            from_directory: self.from_directory.to_string(),
            to_directory: self.to_directory.clone(),
        }
    }

    /// Sends `request` by the append stream (an append to a peer that
    /// serves one) or as a unary call, abandoned at `deadline`; drops a
    /// stream that broke or just carried a `large` catch-up.
    async fn send(
        &mut self,
        channel: Channel,
        rpc: Rpc,
        request: RaftRequest,
        deadline: tokio::time::Instant,
        large: bool,
    ) -> Result<Result<RaftResponse, tonic::Status>, tokio::time::error::Elapsed> {
        // An open stream proves the peer serves it: no look-up then.
        let streamed =
            matches!(rpc, Rpc::Append) && (self.append_stream.is_some() || !self.is_unary_only());
        if streamed
            && self
                .append_stream
                .as_ref()
                .is_some_and(|s| s.unanswered >= MAX_UNANSWERED)
        {
            // Nothing came back for several calls: reopen.
            self.append_stream = None;
        }
        let outcome = if streamed {
            match tokio::time::timeout_at(deadline, self.append_streamed(channel.clone(), request))
                .await
            {
                Ok(Streamed::Answer(r)) => Ok(r),
                Ok(Streamed::Unsupported(request)) => {
                    tracing::info!(
                        target_node = self.target,
                        "peer does not serve AppendStream; using unary appends"
                    );
                    self.unary_only
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .insert(self.target);
                    Self::unary(channel, rpc, request, deadline).await
                }
                Err(elapsed) => Err(elapsed),
            }
        } else {
            Self::unary(channel, rpc, request, deadline).await
        };
        if streamed && (large || matches!(outcome, Ok(Err(_)))) {
            // A broken stream (reset, ended, out of order) reopens; so does
            // one that just carried a catch-up, to give back its buffers.
            self.append_stream = None;
        }
        outcome
    }

    /// What the peer's answer says: its refusal of the envelope, or its
    /// Raft answer decoded (recording that the peer is up).
    // openraft's own error type, which `call` hands back as it is.
    #[allow(clippy::result_large_err)]
    fn take_response<Resp, E>(
        &mut self,
        response: RaftResponse,
    ) -> Result<Resp, RPCError<NodeId, KeelNode, RaftError<NodeId, E>>>
    where
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
        RaftError<NodeId, E>: DeserializeOwned,
    {
        self.contacts
            .record_directory(self.target, &response.directory);
        if !response.error.is_empty() {
            // A refused envelope will be refused again: back off.
            let kind = keel_proto::pb::Refusal::try_from(response.refusal)
                .unwrap_or(keel_proto::pb::Refusal::Unspecified);
            return Err(RPCError::Unreachable(Unreachable::new(
                &TransportError::Refused {
                    target: self.target,
                    kind,
                    reason: response.error,
                },
            )));
        }
        let result: Result<Resp, RaftError<NodeId, E>> = match codec::decode(&response.payload) {
            Ok(r) => r,
            Err(e) => {
                self.append_stream = None;
                return Err(RPCError::Network(NetworkError::new(
                    &TransportError::Codec(e),
                )));
            }
        };
        if result.is_err() {
            // A stopped Raft behind this stream: reconnect next time (the
            // node may have restarted behind a new server).
            self.append_stream = None;
        }
        // The peer is up and speaks our protocol, whatever its Raft answer.
        self.contacts.record(self.target);
        result.map_err(|e| {
            RPCError::RemoteError(RemoteError::new_with_node(
                self.target,
                self.node.clone(),
                e,
            ))
        })
    }

    /// Whether appends to this peer must be unary calls.
    fn is_unary_only(&self) -> bool {
        self.unary_only
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .contains(&self.target)
    }

    /// One unary call, abandoned at `deadline`.
    async fn unary(
        channel: Channel,
        rpc: Rpc,
        request: RaftRequest,
        deadline: tokio::time::Instant,
    ) -> Result<Result<RaftResponse, tonic::Status>, tokio::time::error::Elapsed> {
        let mut client = raft_client(channel);
        let call = async {
            match rpc {
                Rpc::Append => client.append(request).await,
                Rpc::Vote => client.vote(request).await,
                Rpc::InstallSnapshot => client.install_snapshot(request).await,
            }
        };
        tokio::time::timeout_at(deadline, call)
            .await
            .map(|r| r.map(tonic::Response::into_inner))
    }

    /// One append through the peer's `AppendStream`, opened with it as the
    /// first message if none is open.
    async fn append_streamed(&mut self, channel: Channel, request: RaftRequest) -> Streamed {
        if let Some(s) = self.append_stream.as_mut() {
            return Streamed::Answer(s.call(request).await);
        }
        // A copy to send unary in case an older peer refuses the stream
        // itself; not needed once this peer has served one (reopening after
        // a catch-up would otherwise copy a multi-MiB append every time).
        let fallback = (!self.serves_streams).then(|| request.clone());
        match AppendStream::open(channel, request).await {
            Ok((s, answer)) => {
                self.serves_streams = true;
                self.append_stream = Some(s);
                Streamed::Answer(Ok(answer))
            }
            Err(status) if status.code() == tonic::Code::Unimplemented => match fallback {
                Some(request) => Streamed::Unsupported(request),
                None => Streamed::Answer(Err(status)),
            },
            Err(status) => Streamed::Answer(Err(status)),
        }
    }

    /// Maps a gRPC failure to the openraft error that gets the right retry
    /// behaviour: unreachable peers are backed off, others retried.
    fn status_error<E: std::error::Error>(
        &self,
        rpc: Rpc,
        status: tonic::Status,
        ttl: Duration,
    ) -> RPCError<NodeId, KeelNode, RaftError<NodeId, E>> {
        match status.code() {
            tonic::Code::DeadlineExceeded => RPCError::Timeout(Timeout {
                action: rpc.rpc_type(),
                id: self.from_node,
                target: self.target,
                timeout: ttl,
            }),
            code => {
                let err = TransportError::Status {
                    target: self.target,
                    addr: self.node.addr.clone(),
                    status,
                };
                if code == tonic::Code::Unavailable {
                    RPCError::Unreachable(Unreachable::new(&err))
                } else {
                    RPCError::Network(NetworkError::new(&err))
                }
            }
        }
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, KeelNode, RaftError<NodeId>>> {
        self.call(Rpc::Append, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, KeelNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.call(Rpc::InstallSnapshot, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, KeelNode, RaftError<NodeId>>> {
        self.call(Rpc::Vote, &rpc, &option).await
    }
}
