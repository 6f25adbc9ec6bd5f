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
    /// Delivered after `there`; the answer takes `back` (or is lost); a
    /// copy arrives again after `again`.
    Delivered {
        target: KeelRaft,
        there: Duration,
        back: Duration,
        answer_lost: bool,
        again: Option<Duration>,
    },
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
        Fate::Delivered {
            target,
            there,
            back,
            answer_lost,
            again,
        }
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

impl SimPeer {
    /// Sends `req` as the network decides: `call` is the target's handler.
    async fn send<Req, Resp, E, F, Fut>(
        &self,
        what: String,
        req: Req,
        call: F,
    ) -> RpcResult<Resp, E>
    where
        Req: Clone + Send + 'static,
        Resp: Send + 'static,
        E: std::error::Error + Send + 'static,
        F: Fn(KeelRaft, Req) -> Fut + Send + Sync + Clone + 'static,
        Fut: Future<Output = Result<Resp, RaftError<NodeId, E>>> + Send + 'static,
    {
        let (from, to, trace) = (self.from, self.to, &self.net.trace);
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
            Fate::Delivered {
                target,
                there,
                back,
                answer_lost,
                again,
            } => {
                if let Some(again) = again {
                    let (target, req, call, trace) =
                        (target.clone(), req.clone(), call.clone(), trace.clone());
                    let what = what.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(again).await;
                        let ok = call(target, req).await.is_ok();
                        trace.event(format_args!("{from}->{to} {what} duplicate ok={ok}"));
                    });
                }
                tokio::time::sleep(there).await;
                let answer = call(target, req).await;
                trace.event(format_args!(
                    "{from}->{to} {what} handled ok={}{}",
                    answer.is_ok(),
                    if answer_lost { " answer-lost" } else { "" }
                ));
                tokio::time::sleep(back).await;
                if answer_lost {
                    return Err(RPCError::Network(NetworkError::new(&Dropped(
                        "answer lost",
                    ))));
                }
                answer.map_err(|e| RPCError::RemoteError(RemoteError::new(to, e)))
            }
        }
    }
}

impl RaftNetwork<TypeConfig> for SimPeer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>, openraft::error::Infallible> {
        let what = format!(
            "append v={} prev={} n={} commit={}",
            rpc.vote,
            log_id(rpc.prev_log_id),
            rpc.entries.len(),
            log_id(rpc.leader_commit)
        );
        self.send(what, rpc, |raft: KeelRaft, rpc| async move {
            raft.append_entries(rpc).await
        })
        .await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        let what = format!(
            "snapshot v={} last={} offset={} done={}",
            rpc.vote,
            log_id(rpc.meta.last_log_id),
            rpc.offset,
            rpc.done
        );
        self.send(what, rpc, |raft: KeelRaft, rpc| async move {
            raft.install_snapshot(rpc).await
        })
        .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>, openraft::error::Infallible> {
        let what = format!("vote v={} last={}", rpc.vote, log_id(rpc.last_log_id));
        self.send(what, rpc, |raft: KeelRaft, rpc| async move {
            raft.vote(rpc).await
        })
        .await
    }
}

/// A log id as `term.index` (or `-`).
pub fn log_id(id: Option<openraft::LogId<NodeId>>) -> String {
    match id {
        Some(id) => format!("{}.{}", id.leader_id.term, id.index),
        None => "-".to_string(),
    }
}
