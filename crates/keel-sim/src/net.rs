//! The simulated network between the controllers: openraft's messages go
//! straight to the target node's Raft, after a delay, or never, as the
//! seed decides. Links can be cut one way or both; a crashed node's links
//! refuse at once, as a closed port does.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use keel_raft::{KeelNode, KeelRaft, NodeId, TypeConfig};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use rand::rngs::StdRng;
use rand::Rng;

use crate::trace::Trace;

/// What the network does to each message, changed by the nemesis.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkFaults {
    /// Chance that a request or its answer is lost.
    pub loss: f64,
    /// Each way takes up to this long (uniform), so messages overtake
    /// each other.
    pub max_delay: Duration,
    /// Chance that a request is delivered a second time, later.
    pub duplicate: f64,
}

impl LinkFaults {
    /// A clean network: 0.1–1 ms each way, nothing lost or repeated.
    pub const CLEAN: LinkFaults = LinkFaults {
        loss: 0.0,
        max_delay: Duration::from_millis(1),
        duplicate: 0.0,
    };
}

/// What happens to one request.
enum Fate {
    /// The target is down or the link is cut: refused.
    Refused,
    /// Lost on the way there; the sender learns after `after`.
    Lost { after: Duration },
    /// Delivered, as the [`Delivery`] says.
    Delivered(Delivery),
}

/// How a delivered request goes.
struct Delivery {
    target: KeelRaft,
    /// The request takes this long to arrive.
    there: Duration,
    /// The answer takes this long to come back.
    back: Duration,
    /// The answer never comes back.
    answer_lost: bool,
    /// A copy of the request arrives again after this long.
    again: Option<Duration>,
}

struct NetState {
    /// The running Raft of every node that is up.
    up: BTreeMap<NodeId, KeelRaft>,
    /// Directed links that carry nothing: (from, to).
    cut: BTreeSet<(NodeId, NodeId)>,
    faults: LinkFaults,
    rng: StdRng,
}

/// The network of one simulated run. Cheap to clone.
#[derive(Clone)]
pub struct SimNet {
    state: Arc<Mutex<NetState>>,
    trace: Trace,
}

impl SimNet {
    /// A clean network with no node up, drawing from `rng`.
    pub fn new(rng: StdRng, trace: Trace) -> Self {
        Self {
            state: Arc::new(Mutex::new(NetState {
                up: BTreeMap::new(),
                cut: BTreeSet::new(),
                faults: LinkFaults::CLEAN,
                rng,
            })),
            trace,
        }
    }

    fn lock(&self) -> MutexGuard<'_, NetState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Node `id` is up and answers with `raft`.
    pub fn attach(&self, id: NodeId, raft: KeelRaft) {
        self.lock().up.insert(id, raft);
    }

    /// Node `id` is down: its port refuses from now on.
    pub fn detach(&self, id: NodeId) {
        self.lock().up.remove(&id);
    }

    /// The Raft of node `id`, if it is up.
    pub fn raft(&self, id: NodeId) -> Option<KeelRaft> {
        self.lock().up.get(&id).cloned()
    }

    /// Cuts the link from `from` to `to` (one way).
    pub fn cut(&self, from: NodeId, to: NodeId) {
        self.lock().cut.insert((from, to));
    }

    /// Restores every link.
    pub fn heal(&self) {
        self.lock().cut.clear();
    }

    /// Sets what the network does to every message from now on.
    pub fn set_faults(&self, faults: LinkFaults) {
        self.lock().faults = faults;
    }

    /// The factory node `from` builds its peers' clients with.
    pub fn factory(&self, from: NodeId) -> SimNetworkFactory {
        SimNetworkFactory {
            from,
            net: self.clone(),
        }
    }

    fn fate(&self, from: NodeId, to: NodeId) -> Fate {
        let mut state = self.lock();
        let target = match state.up.get(&to) {
            Some(raft) if !state.cut.contains(&(from, to)) => raft.clone(),
            _ => return Fate::Refused,
        };
        let faults = state.faults;
        let rng = &mut state.rng;
        let delay = |rng: &mut StdRng| {
            let max = faults.max_delay.as_micros().max(100) as u64;
            Duration::from_micros(rng.random_range(100..=max))
        };
        if rng.random_bool(faults.loss) {
            return Fate::Lost { after: delay(rng) };
        }
        let there = delay(rng);
        let back = delay(rng);
        let answer_lost = rng.random_bool(faults.loss);
        let again = rng
            .random_bool(faults.duplicate)
            .then(|| there + delay(rng) * 4);
        Fate::Delivered(Delivery {
            target,
            there,
            back,
            answer_lost,
            again,
        })
    }
}

/// Builds node `from`'s clients of its peers.
pub struct SimNetworkFactory {
    from: NodeId,
    net: SimNet,
}

impl RaftNetworkFactory<TypeConfig> for SimNetworkFactory {
    type Network = SimPeer;

    async fn new_client(&mut self, target: NodeId, _node: &KeelNode) -> SimPeer {
        SimPeer {
            from: self.from,
            to: target,
            net: self.net.clone(),
        }
    }
}

/// Node `from`'s client of node `to`.
pub struct SimPeer {
    from: NodeId,
    to: NodeId,
    net: SimNet,
}

type RpcResult<R, E> = Result<R, RPCError<NodeId, KeelNode, RaftError<NodeId, E>>>;

/// Why a message did not arrive, as the sender's transport reports it.
#[derive(Debug)]
struct Dropped(&'static str);

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Dropped {}

/// One of openraft's requests, as the simulated network carries it.
trait Message: Clone + Send + 'static {
    type Answer: Send + 'static;
    type Error: std::error::Error + Send + 'static;
    /// How the trace names it.
    fn describe(&self) -> String;
    /// The target's handler.
    fn handle(
        self,
        raft: KeelRaft,
    ) -> impl Future<Output = Result<Self::Answer, RaftError<NodeId, Self::Error>>> + Send;
}

impl Message for AppendEntriesRequest<TypeConfig> {
    type Answer = AppendEntriesResponse<NodeId>;
    type Error = openraft::error::Infallible;
    fn describe(&self) -> String {
        format!(
            "append v={} prev={} n={} commit={}",
            self.vote,
            log_id(self.prev_log_id),
            self.entries.len(),
            log_id(self.leader_commit)
        )
    }
    async fn handle(self, raft: KeelRaft) -> Result<Self::Answer, RaftError<NodeId>> {
        raft.append_entries(self).await
    }
}

impl Message for InstallSnapshotRequest<TypeConfig> {
    type Answer = InstallSnapshotResponse<NodeId>;
    type Error = InstallSnapshotError;
    fn describe(&self) -> String {
        format!(
            "snapshot v={} last={} offset={} done={}",
            self.vote,
            log_id(self.meta.last_log_id),
            self.offset,
            self.done
        )
    }
    async fn handle(
        self,
        raft: KeelRaft,
    ) -> Result<Self::Answer, RaftError<NodeId, InstallSnapshotError>> {
        raft.install_snapshot(self).await
    }
}

impl Message for VoteRequest<NodeId> {
    type Answer = VoteResponse<NodeId>;
    type Error = openraft::error::Infallible;
    fn describe(&self) -> String {
        format!("vote v={} last={}", self.vote, log_id(self.last_log_id))
    }
    async fn handle(self, raft: KeelRaft) -> Result<Self::Answer, RaftError<NodeId>> {
        raft.vote(self).await
    }
}

impl SimPeer {
    /// Sends `req` as the network decides.
    async fn send<M: Message>(&self, req: M) -> RpcResult<M::Answer, M::Error> {
        let (from, to, trace) = (self.from, self.to, &self.net.trace);
        let what = req.describe();
        match self.net.fate(from, to) {
            Fate::Refused => {
                trace.event(format_args!("{from}->{to} {what} refused"));
                Err(RPCError::Unreachable(Unreachable::new(&Dropped(
                    "connection refused",
                ))))
            }
            Fate::Lost { after } => {
                trace.event(format_args!("{from}->{to} {what} lost"));
                tokio::time::sleep(after).await;
                Err(RPCError::Network(NetworkError::new(&Dropped(
                    "request lost",
                ))))
            }
            Fate::Delivered(d) => {
                if let Some(again) = d.again {
                    let (target, req, trace) = (d.target.clone(), req.clone(), trace.clone());
                    let what = what.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(again).await;
                        let ok = req.handle(target).await.is_ok();
                        trace.event(format_args!("{from}->{to} {what} duplicate ok={ok}"));
                    });
                }
                tokio::time::sleep(d.there).await;
                let answer = req.handle(d.target).await;
                trace.event(format_args!(
                    "{from}->{to} {what} handled ok={}{}",
                    answer.is_ok(),
                    if d.answer_lost { " answer-lost" } else { "" }
                ));
                tokio::time::sleep(d.back).await;
                if d.answer_lost {
                    return Err(RPCError::Network(NetworkError::new(&Dropped(
                        "answer lost",
                    ))));
                }
                answer.map_err(|e| RPCError::RemoteError(RemoteError::new(to, e)))
            }
        }
    }
}

/// openraft's network trait for [`SimPeer`]: every request goes through
/// [`SimPeer::send`].
macro_rules! send_each {
    ($($method:ident($req:ty) -> $answer:ty, $error:ty;)*) => {
        impl RaftNetwork<TypeConfig> for SimPeer {
            $(
                async fn $method(
                    &mut self,
                    rpc: $req,
                    _option: RPCOption,
                ) -> RpcResult<$answer, $error> {
                    self.send(rpc).await
                }
            )*
        }
    };
}

send_each! {
    append_entries(AppendEntriesRequest<TypeConfig>) -> AppendEntriesResponse<NodeId>, openraft::error::Infallible;
    install_snapshot(InstallSnapshotRequest<TypeConfig>) -> InstallSnapshotResponse<NodeId>, InstallSnapshotError;
    vote(VoteRequest<NodeId>) -> VoteResponse<NodeId>, openraft::error::Infallible;
}

/// A log id as `term.index` (or `-`).
pub fn log_id(id: Option<openraft::LogId<NodeId>>) -> String {
    match id {
        Some(id) => format!("{}.{}", id.leader_id.term, id.index),
        None => "-".to_string(),
    }
}
