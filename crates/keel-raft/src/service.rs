//! The server side of the Raft transport: decodes openraft's RPCs from the
//! gRPC envelope and hands them to the local Raft node, and answers
//! pre-votes ([`crate::prevote`]) itself.
//!
//! A node that restarts on a data dir that was in use grants no vote and no
//! pre-vote for `election_timeout_max` after it starts: before it went down
//! it may have accepted an AppendEntries from a leader, which promised that
//! leader a lease (no other leader until `election_timeout_max` after it),
//! and openraft keeps the time of that promise only in memory. The refusal
//! is an ordinary Raft answer (`vote_granted: false` with this node's vote
//! and last log id), which the candidate takes as any other.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{BoxStream, StreamExt};
use keel_proto::pb::raft_service_server::{RaftService, RaftServiceServer};
use keel_proto::pb::{RaftRequest, RaftResponse};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::{Request, Response, Status, Streaming};

use crate::codec;
use crate::error::EnvelopeRefusal;
use crate::grant::{decide_lease, LeaseClock, LeaseRequest, LeaseResponse};
use crate::member::DirectoryId;
use crate::network::MAX_MESSAGE_BYTES;
use crate::prevote::{decide_pre_vote, PreVoteRequest, PreVoteResponse, VoterView};
use crate::{KeelRaft, NodeId};
use openraft::error::RaftError;
use openraft::raft::{VoteRequest, VoteResponse};
use openraft::ServerState;

/// Serves `RaftService` for one node: the peers' way into its Raft.
#[derive(Clone)]
pub struct RaftGrpcService {
    /// The local node.
    raft: KeelRaft,
    /// Requests carrying another cluster id are refused undecoded.
    cluster_id: String,
    /// This node's id (the Raft's own): requests meant for another node are
    /// refused.
    node_id: u64,
    /// Until when this node refuses every vote and pre-vote (it restarted
    /// on a data dir that may have promised a leader a lease).
    no_vote_until: Option<Instant>,
    /// This node's data dir's directory id (`None` in tests that do not
    /// say): requests expecting another are refused.
    directory: Option<DirectoryId>,
    /// The same, as sent in every answer ("" when `None`).
    directory_text: String,
    /// This node's address as its peers know it, for the remedy in a
    /// refusal when the membership (a wiped node has none) does not say.
    address: Option<String>,
    /// When this node last acknowledged its leader's lease request.
    lease_clock: LeaseClock,
    /// Milliseconds this node waits before it answers a lease request:
    /// zero, but in tests of a follower that answers late.
    lease_answer_delay_ms: Arc<AtomicU64>,
}

impl RaftGrpcService {
    /// A service for `raft`, accepting only peers of `cluster_id`.
    pub fn new(raft: KeelRaft, cluster_id: String) -> Self {
        let node_id = raft.metrics().borrow().id;
        Self {
            raft,
            cluster_id,
            node_id,
            no_vote_until: None,
            directory: None,
            directory_text: String::new(),
            address: None,
            lease_clock: LeaseClock::default(),
            lease_answer_delay_ms: Arc::default(),
        }
    }

    /// Makes this node wait `delay_ms` (read at each request) before it
    /// answers a lease request, as a busy follower does. For tests of the
    /// leader's lease pace; nothing else calls it.
    #[doc(hidden)]
    pub fn with_lease_answer_delay(mut self, delay_ms: Arc<AtomicU64>) -> Self {
        self.lease_answer_delay_ms = delay_ms;
        self
    }

    /// Records the lease requests this node acknowledges on `clock`: the
    /// node's network's ([`crate::Network::lease_clock`]), which its
    /// election watchdog reads.
    pub fn with_lease_clock(mut self, clock: LeaseClock) -> Self {
        self.lease_clock = clock;
        self
    }

    /// Answers a lease request from the node's published state, without
    /// waiting for its Raft core ([`crate::lease`]).
    /// Only the leader the request names may send it (`from`).
    fn answer_lease(&self, from: NodeId, req: &LeaseRequest) -> LeaseResponse {
        let (state, vote) = {
            let m = self.raft.metrics();
            let m = m.borrow();
            (m.state, m.vote)
        };
        let acked = req.vote.leader_id().voted_for() == Some(from)
            && decide_lease(self.node_id, state, &vote, &req.vote);
        if acked {
            self.lease_clock.record(vote, tokio::time::Instant::now());
        }
        LeaseResponse { acked }
    }

    /// Names `addr` as this node's address in refusals, when the
    /// membership does not know it.
    pub fn with_address(mut self, addr: impl Into<String>) -> Self {
        self.address = Some(addr.into());
        self
    }

    /// Serves for the data dir with directory id `dir`: answers carry it,
    /// and requests that expect another dir are refused.
    pub fn with_directory(mut self, dir: DirectoryId) -> Self {
        self.directory = Some(dir);
        self.directory_text = dir.to_string();
        self
    }

    /// Refuses votes and pre-votes for `window` from now: for a node that
    /// restarted on a data dir that was in use (its log or vote not empty),
    /// with `window` = `election_timeout_max`. A brand-new data dir has
    /// promised nothing; a wiped one is refused by its directory id.
    pub fn refusing_votes_for(mut self, window: Duration) -> Self {
        self.no_vote_until = Some(Instant::now() + window);
        self
    }

    /// Time left of the no-vote window.
    fn restart_window_left(&self) -> Option<Duration> {
        let left = self.no_vote_until?.checked_duration_since(Instant::now())?;
        (!left.is_zero()).then_some(left)
    }

    /// This node's state as a pre-vote is decided on, read now.
    async fn voter_view(&self) -> Result<(VoterView, u64), RaftError<NodeId>> {
        let lease = Duration::from_millis(self.raft.config().election_timeout_max);
        let quorum_acked = self.raft.metrics().borrow().last_quorum_acked;
        let me = self.node_id;
        let (vote, changed, state) = self
            .raft
            .with_raft_state(|s| (*s.vote_ref(), s.vote_last_modified(), s.server_state))
            .await?;
        // openraft keeps its log state reader private; its metrics trail the
        // core by at most one loop of it.
        let last_log_id = self.raft.data_metrics().borrow().last_log;
        // A lease request this node acknowledged is contact with its leader
        // too (crate::lease).
        let since_change = self
            .lease_clock
            .last_contact(&vote, changed)
            .map(|t| t.elapsed());
        let leader = vote.leader_id().voted_for();
        let follows = match (vote.is_committed(), leader, since_change) {
            (true, Some(l), Some(heard)) if l != me && state != ServerState::Leader => {
                Some((l, heard))
            }
            _ => None,
        };
        // A leader counts from the newer of its last quorum acknowledgement
        // and its becoming leader, as check-quorum does.
        let leading_for = (state == ServerState::Leader).then(|| {
            let acked = quorum_acked.map(|t| t.elapsed());
            match (acked, since_change) {
                (Some(a), Some(c)) => a.min(c),
                (a, c) => a.or(c).unwrap_or(Duration::ZERO),
            }
        });
        let view = VoterView {
            last_log_id,
            follows,
            leading_for,
            restart_window_left: self.restart_window_left(),
            lease,
        };
        Ok((view, vote.leader_id().get_term()))
    }

    /// Answers a pre-vote from the node's state at this moment.
    async fn answer_pre_vote(
        &self,
        req: PreVoteRequest,
    ) -> Result<PreVoteResponse, RaftError<NodeId>> {
        let (view, term) = self.voter_view().await?;
        let refusal = decide_pre_vote(&req, &view).err();
        match &refusal {
            None => tracing::info!(
                node = self.node_id,
                candidate = req.candidate,
                term = req.term,
                "pre-vote granted"
            ),
            Some(why) => tracing::info!(
                node = self.node_id,
                candidate = req.candidate,
                term = req.term,
                %why,
                "pre-vote refused"
            ),
        }
        Ok(PreVoteResponse { term, refusal })
    }

    /// A vote, unless this node is inside its no-vote window after a
    /// restart: then a refusal carrying its vote and last log id.
    async fn answer_vote(
        &self,
        req: VoteRequest<NodeId>,
    ) -> Result<VoteResponse<NodeId>, RaftError<NodeId>> {
        let Some(left) = self.restart_window_left() else {
            return self.raft.vote(req).await;
        };
        tracing::info!(
            node = self.node_id,
            candidate = ?req.vote.leader_id().voted_for(),
            term = req.vote.leader_id().get_term(),
            left_ms = left.as_millis() as u64,
            "vote refused: this node restarted less than election_timeout_max ago and may have promised a leader a lease before"
        );
        let vote = self.raft.with_raft_state(|s| *s.vote_ref()).await?;
        let last_log_id = self.raft.data_metrics().borrow().last_log;
        Ok(VoteResponse::new(vote, last_log_id, false))
    }

    /// The tonic service, with message limits large enough for snapshot
    /// chunks.
    pub fn into_server(self) -> RaftServiceServer<Self> {
        RaftServiceServer::new(self)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    /// Checks the envelope and decodes the payload, or explains the refusal.
    fn open_envelope<T: DeserializeOwned>(&self, req: &RaftRequest) -> Result<T, EnvelopeRefusal> {
        self.open_envelope_from(req, Sender::Any)
    }

    /// [`Self::open_envelope`] for what only a leader sends (appends,
    /// snapshots): the sender's directory id is not checked against this
    /// node's membership. A node catching up replays old memberships, which
    /// may record a dir its leader had before being re-admitted with a new
    /// one; refusing it there would keep the node from ever reaching the
    /// membership that re-admitted it (it stayed a learner forever). A
    /// leader holds its term by a quorum's votes, and votes are checked
    /// against the voters' memberships; openraft refuses an older term.
    /// That the sender expects this node's own dir is still checked: a
    /// wiped node must not acknowledge as the one the quorum counted.
    fn open_leader_envelope<T: DeserializeOwned>(
        &self,
        req: &RaftRequest,
    ) -> Result<T, EnvelopeRefusal> {
        self.open_envelope_from(req, Sender::Leader)
    }

    fn open_envelope_from<T: DeserializeOwned>(
        &self,
        req: &RaftRequest,
        sender: Sender,
    ) -> Result<T, EnvelopeRefusal> {
        if req.cluster_id != self.cluster_id {
            tracing::warn!(
                from_node = req.from_node,
                their_cluster = %req.cluster_id,
                "refusing a Raft request from another cluster"
            );
            return Err(EnvelopeRefusal::WrongCluster {
                ours: self.cluster_id.clone(),
                theirs: req.cluster_id.clone(),
            });
        }
        // Two voters configured with one address: this node would be handed
        // Raft messages meant for the other, its own among them, which
        // openraft does not expect. Refuse them undecoded.
        if (req.to_node != 0 && req.to_node != self.node_id) || req.from_node == self.node_id {
            tracing::warn!(
                from_node = req.from_node,
                to_node = req.to_node,
                "refusing a Raft request meant for another node; is a voter address wrong?"
            );
            return Err(EnvelopeRefusal::WrongNode {
                me: self.node_id,
                from: req.from_node,
                to: req.to_node,
            });
        }
        self.check_directories(req, sender)?;
        // An append of 100,000-record decisions is megabytes: decoding it
        // must not hold a worker the lease answers need (crate::lease).
        let decode = || codec::decode(&req.payload);
        let decoded = if req.payload.len() > LARGE_PAYLOAD {
            crate::off_the_workers(decode)
        } else {
            decode()
        };
        decoded.map_err(|e| {
            tracing::warn!(from_node = req.from_node, error = %e, "undecodable Raft request");
            EnvelopeRefusal::Undecodable {
                from: req.from_node,
                reason: e.to_string(),
            }
        })
    }

    /// Only a voter of this node's membership may ask for its vote: a
    /// controller that is not (yet) one (a learner being added, before
    /// `add-voter` promoted it; a removed node; a certificate issued for a
    /// future node) cannot move the quorum's term. Refusing a vote is always
    /// safe; a node whose log has no membership yet (not bootstrapped)
    /// checks nothing.
    #[allow(clippy::result_large_err)]
    fn check_candidate(&self, from: NodeId) -> Result<(), Status> {
        let membership = self.raft.metrics().borrow().membership_config.clone();
        let mut voters = membership.membership().voter_ids().peekable();
        if voters.peek().is_none() || voters.any(|v| v == from) {
            return Ok(());
        }
        tracing::warn!(
            from_node = from,
            "refusing a vote request from a node that is not a voter"
        );
        Err(Status::permission_denied(format!(
            "node {from} is not a voter of this node's membership; only voters may stand for election"
        )))
    }

    /// Refuses a request whose directory ids contradict a bound
    /// membership: the sender expects another data dir here, or this
    /// node's membership records another data dir for the sender.
    fn check_directories(&self, req: &RaftRequest, sender: Sender) -> Result<(), EnvelopeRefusal> {
        let membership = self.raft.metrics().borrow().membership_config.clone();
        let addr_of = |id: NodeId| {
            let own = (id == self.node_id).then(|| self.address.clone()).flatten();
            membership
                .membership()
                .get_node(&id)
                .map(|n| n.addr.clone())
                .or(own)
                .unwrap_or_else(|| "HOST:PORT".into())
        };
        if !req.to_directory.is_empty() && req.to_directory != self.directory_text {
            let refusal = EnvelopeRefusal::DirectoryMismatch {
                node: self.node_id,
                address: addr_of(self.node_id),
                actual: self.directory_text.clone(),
                recorded: req.to_directory.clone(),
                by: req.from_node,
            };
            tracing::warn!(
                from_node = req.from_node,
                this_directory = %self.directory_text,
                recorded_directory = %req.to_directory,
                "refusing a Raft request: {refusal}"
            );
            return Err(refusal);
        }
        let recorded = match sender {
            Sender::Leader => None,
            Sender::Any => membership
                .membership()
                .get_node(&req.from_node)
                .and_then(|n| n.directory_id),
        };
        if let Some(recorded) = recorded {
            if req.from_directory != recorded.to_string() {
                let refusal = EnvelopeRefusal::DirectoryMismatch {
                    node: req.from_node,
                    address: addr_of(req.from_node),
                    actual: req.from_directory.clone(),
                    recorded: recorded.to_string(),
                    by: self.node_id,
                };
                tracing::warn!(
                    from_node = req.from_node,
                    sender_directory = %req.from_directory,
                    recorded_directory = %recorded,
                    "refusing a Raft request: {refusal}"
                );
                return Err(refusal);
            }
        }
        Ok(())
    }
}

/// Who may send a request kind, for [`RaftGrpcService::check_directories`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sender {
    /// Votes, pre-votes, leases: the sender's dir is checked against this
    /// node's membership too.
    Any,
    /// Appends and snapshots: only the leader sends them.
    Leader,
}

/// Over TLS only controller `from` itself may send a Raft message as node
/// `from`: a user, a broker or another controller is refused. Plaintext
/// listeners check nothing (no identity is known). `caller` as
/// [`keel_tls::transport::caller`] took it.
#[allow(clippy::result_large_err)]
fn check_sender(caller: Option<Option<&keel_tls::Identity>>, from: NodeId) -> Result<(), Status> {
    keel_tls::transport::check_caller(
        caller,
        format_args!("a Raft request as node {from}"),
        format_args!("the certificate of controller {from}"),
        |r| *r == keel_tls::Role::Controller(from),
    )
}

/// [`check_sender`] for the caller of `req`.
#[allow(clippy::result_large_err)]
fn check_request_sender(req: &Request<RaftRequest>) -> Result<(), Status> {
    let caller = keel_tls::transport::is_tls(req).then(|| keel_tls::peer(req));
    check_sender(caller, req.get_ref().from_node)
}

/// The refusal sent back for an envelope that was not accepted.
fn refusal(why: EnvelopeRefusal, directory: &str) -> RaftResponse {
    RaftResponse {
        payload: Vec::new(),
        error: why.to_string(),
        seq: 0,
        directory: directory.to_string(),
        refusal: why.code() as i32,
    }
}

/// Encodes the node's answer (success or Raft error) for the caller.
fn answer<T: Serialize>(result: &T, directory: &str) -> Result<RaftResponse, Status> {
    let payload = codec::encode(result).map_err(|e| Status::internal(e.to_string()))?;
    Ok(RaftResponse {
        payload,
        error: String::new(),
        seq: 0,
        directory: directory.to_string(),
        refusal: 0,
    })
}

impl RaftGrpcService {
    /// Opens, hands to Raft and answers one append. `true` with the answer
    /// when Raft has stopped: nothing more should be read from that stream.
    async fn append_one(&self, req: &RaftRequest) -> Result<(RaftResponse, bool), Status> {
        match self.open_leader_envelope(req) {
            Ok(r) => {
                let result = self.raft.append_entries(r).await;
                let stopped = matches!(result, Err(RaftError::Fatal(_)));
                Ok((answer(&result, &self.directory_text)?, stopped))
            }
            Err(e) => Ok((refusal(e, &self.directory_text), false)),
        }
    }

    /// Answers a candidate's request (a vote or a pre-vote) with `decide`,
    /// once its sender is known to be a voter and its envelope is accepted;
    /// a refused envelope is answered with the refusal.
    async fn answer_candidate<T: DeserializeOwned, R: Serialize, F: Future<Output = R>>(
        &self,
        request: Request<RaftRequest>,
        decide: impl FnOnce(T) -> F,
    ) -> Result<Response<RaftResponse>, Status> {
        check_request_sender(&request)?;
        self.check_candidate(request.get_ref().from_node)?;
        let req = match self.open_envelope(request.get_ref()) {
            Ok(req) => req,
            Err(e) => return Ok(Response::new(refusal(e, &self.directory_text))),
        };
        answer(&decide(req).await, &self.directory_text).map(Response::new)
    }
}

/// A payload above this many bytes is decoded off the runtime's workers.
const LARGE_PAYLOAD: usize = 64 * 1024;

#[tonic::async_trait]
impl RaftService for RaftGrpcService {
    type AppendStreamStream = BoxStream<'static, Result<RaftResponse, Status>>;

    async fn append(
        &self,
        request: Request<RaftRequest>,
    ) -> Result<Response<RaftResponse>, Status> {
        check_request_sender(&request)?;
        let (answer, _) = self.append_one(request.get_ref()).await?;
        Ok(Response::new(answer))
    }

    async fn append_stream(
        &self,
        request: Request<Streaming<RaftRequest>>,
    ) -> Result<Response<Self::AppendStreamStream>, Status> {
        // One append at a time, in the order sent; the next message is not
        // read before this one is answered. Once Raft has stopped (node
        // shutting down) the stream ends right after that answer, so the
        // peer reconnects instead of holding the server's graceful
        // shutdown open with a stream that only ever gets "stopped".
        // The caller is the same for the whole stream; each message still
        // names its sender, which must match it.
        let who = Arc::new(keel_tls::transport::caller(&request));
        let state = (request.into_inner(), self.clone(), false);
        let answers = futures::stream::unfold(state, move |(mut inbound, svc, stopped)| {
            let who = who.clone();
            async move {
                if stopped {
                    return None;
                }
                let answer = match inbound.next().await? {
                    Err(status) => return Some((Err(status), (inbound, svc, true))),
                    Ok(req) => {
                        let caller = who.as_ref().as_ref().map(Option::as_ref);
                        if let Err(status) = check_sender(caller, req.from_node) {
                            return Some((Err(status), (inbound, svc, true)));
                        }
                        svc.append_one(&req).await.map(|(resp, stopped)| {
                            (
                                RaftResponse {
                                    seq: req.seq,
                                    ..resp
                                },
                                stopped,
                            )
                        })
                    }
                };
                match answer {
                    Ok((resp, stopped)) => Some((Ok(resp), (inbound, svc, stopped))),
                    Err(status) => Some((Err(status), (inbound, svc, true))),
                }
            }
        });
        Ok(Response::new(answers.boxed()))
    }

    async fn vote(&self, request: Request<RaftRequest>) -> Result<Response<RaftResponse>, Status> {
        self.answer_candidate(request, |req| self.answer_vote(req))
            .await
    }

    async fn pre_vote(
        &self,
        request: Request<RaftRequest>,
    ) -> Result<Response<RaftResponse>, Status> {
        self.answer_candidate(request, |req| self.answer_pre_vote(req))
            .await
    }

    async fn lease(&self, request: Request<RaftRequest>) -> Result<Response<RaftResponse>, Status> {
        check_request_sender(&request)?;
        let from = request.get_ref().from_node;
        let req: LeaseRequest = match self.open_envelope(request.get_ref()) {
            Ok(req) => req,
            Err(e) => return Ok(Response::new(refusal(e, &self.directory_text))),
        };
        let delay = self.lease_answer_delay_ms.load(Ordering::Relaxed);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        let result: Result<LeaseResponse, RaftError<NodeId>> = Ok(self.answer_lease(from, &req));
        answer(&result, &self.directory_text).map(Response::new)
    }

    async fn install_snapshot(
        &self,
        request: Request<RaftRequest>,
    ) -> Result<Response<RaftResponse>, Status> {
        check_request_sender(&request)?;
        let req = match self.open_leader_envelope(request.get_ref()) {
            Ok(req) => req,
            Err(e) => return Ok(Response::new(refusal(e, &self.directory_text))),
        };
        answer(&self.raft.install_snapshot(req).await, &self.directory_text).map(Response::new)
    }
}
