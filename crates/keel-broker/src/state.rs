//! What the broker holds and every rule about changing it: epoch fencing
//! of controller requests, leader-epoch checks, the metadata cache, follower
//! fetch bookkeeping and ISR decisions. No I/O except the history log, no
//! clock: time comes in as `now_ms`.

use std::collections::{BTreeMap, BTreeSet};

use keel_metadata::{
    ApiError, BrokerEpoch, BrokerId, ControllerEpoch, ErrorCode, LeaderEpoch, PartitionEpoch,
    TopicPartition,
};
use keel_proto::pb;
use tracing::{debug, error, info, warn};

use crate::history::{HistoryEvent, HistoryLog, Line};
use crate::metrics;
use crate::view::{BrokerStateView, LeadershipView};
use crate::wire::{self, PartitionUpdate};

/// A change staged in memory until its history line is written: (index of
/// its result, partition, what the broker held before).
type Undo = (usize, TopicPartition, Option<HeldPartition>);

/// Whether the leader may send an AlterPartition for a partition now.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum AlterGate {
    Open,
    /// One is outstanding; its answer decides.
    InFlight,
    /// The controller refused our epochs; only its next LeaderAndIsr helps.
    WaitForController,
    /// Refused for another reason; try again after this time (ms).
    RetryAt(u64),
}

/// One partition as this broker holds it (leader or follower).
#[derive(Clone, Debug)]
pub(crate) struct HeldPartition {
    pub topic: String,
    pub leader: Option<BrokerId>,
    pub leader_epoch: LeaderEpoch,
    pub partition_epoch: PartitionEpoch,
    pub replicas: Vec<BrokerId>,
    pub isr: Vec<BrokerId>,
    /// Controller epoch of the request this state came from.
    pub controller_epoch: ControllerEpoch,
    /// Acting as leader: named leader, not resigned, not stopped.
    pub leading: bool,
    /// StopReplica(delete=false): kept only so older requests stay fenced.
    pub stopped: bool,
    /// Leader only: last accepted fetch per follower (ms).
    pub last_fetch_ms: BTreeMap<BrokerId, u64>,
    pub alter: AlterGate,
}

/// One ISR change the leader wants committed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AlterItem {
    pub tp: TopicPartition,
    pub leader_epoch: LeaderEpoch,
    pub partition_epoch: PartitionEpoch,
    pub new_isr: Vec<BrokerId>,
}

/// A partition's role on this broker after a LeaderAndIsr.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Role {
    Leader,
    Follower,
}

/// A LeaderAndIsr item applied in memory whose history line is staged.
struct Staged {
    /// What the broker held before: put back if the line cannot be written.
    prev: Option<HeldPartition>,
    /// The role it took, when that changed.
    became: Option<Role>,
}

/// Partitions a follower reports to one leader.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FetchTarget {
    /// Where the leader listens, if known.
    pub address: Option<String>,
    pub partitions: Vec<(TopicPartition, LeaderEpoch)>,
}

/// The whole mutable state of one broker, behind one lock.
#[derive(Debug)]
pub(crate) struct BrokerState {
    pub id: BrokerId,
    /// Current registration; `None` before registering and after the
    /// session is assumed lost, so every stamped request is refused then.
    pub broker_epoch: Option<BrokerEpoch>,
    pub fenced: bool,
    pub caught_up: bool,
    /// The controller allowed the controlled shutdown to finish.
    pub should_shut_down: bool,
    /// Last successful registration or heartbeat answer (ms).
    pub last_contact_ms: u64,
    /// Highest controller epoch seen; lower ones are refused.
    pub controller_epoch_seen: ControllerEpoch,
    /// Metadata log offset of the last UpdateMetadata applied.
    pub metadata_offset: u64,
    pub partitions: BTreeMap<TopicPartition, HeldPartition>,
    /// Metadata cache: brokers by id.
    pub cache_brokers: BTreeMap<u32, pb::BrokerInfo>,
    /// Metadata cache: partitions.
    pub cache_partitions: BTreeMap<TopicPartition, pb::PartitionState>,
    /// Leader addresses from LeaderAndIsr `leaders` (fresher than the cache).
    pub leader_addresses: BTreeMap<BrokerId, String>,
    pub offline_log_dirs: Vec<String>,
    pub history: HistoryLog,
    /// Wall clock (Unix ms) for history timestamps only; every `now_ms`
    /// argument is monotonic, so clock jumps never stretch a session.
    pub wall_ms: fn() -> u64,
}

impl BrokerState {
    pub(crate) fn new(id: BrokerId, history: HistoryLog, wall_ms: fn() -> u64) -> Self {
        Self {
            id,
            broker_epoch: None,
            fenced: true,
            caught_up: false,
            should_shut_down: false,
            last_contact_ms: 0,
            controller_epoch_seen: ControllerEpoch(0),
            metadata_offset: 0,
            partitions: BTreeMap::new(),
            cache_brokers: BTreeMap::new(),
            cache_partitions: BTreeMap::new(),
            leader_addresses: BTreeMap::new(),
            offline_log_dirs: Vec::new(),
            history,
            wall_ms,
        }
    }

    // ---- lifecycle -------------------------------------------------------

    pub(crate) fn on_registered(&mut self, epoch: BrokerEpoch, now_ms: u64) {
        self.broker_epoch = Some(epoch);
        self.fenced = true;
        self.caught_up = false;
        self.should_shut_down = false;
        self.last_contact_ms = now_ms;
        info!(
            broker = self.id.0,
            broker_epoch = epoch.0,
            "registered with the controller"
        );
    }

    /// A heartbeat answer with no error. Returns false if it answers an
    /// older registration (the session was given up meanwhile).
    pub(crate) fn on_heartbeat(
        &mut self,
        sent_epoch: BrokerEpoch,
        resp: &pb::BrokerHeartbeatResponse,
        now_ms: u64,
    ) -> bool {
        if self.broker_epoch != Some(sent_epoch) {
            return false;
        }
        self.last_contact_ms = now_ms;
        if resp.is_fenced != self.fenced {
            if resp.is_fenced {
                warn!(
                    broker = self.id.0,
                    broker_epoch = sent_epoch.0,
                    "fenced by the controller"
                );
            } else {
                info!(
                    broker = self.id.0,
                    broker_epoch = sent_epoch.0,
                    "unfenced by the controller"
                );
            }
            self.fenced = resp.is_fenced;
        }
        self.caught_up = resp.is_caught_up;
        if resp.should_shut_down && !self.should_shut_down {
            info!(broker = self.id.0, "controller allows shutdown");
        }
        self.should_shut_down = resp.should_shut_down;
        let ce = ControllerEpoch(resp.controller_epoch);
        if ce > self.controller_epoch_seen {
            self.raise_controller_epoch(ce, resp.controller_id);
        }
        true
    }

    /// The controller no longer knows this registration (or the session
    /// timed out): stop leading and refuse requests until re-registered.
    pub(crate) fn drop_registration(&mut self, why: &str) {
        if let Some(epoch) = self.broker_epoch {
            warn!(
                broker = self.id.0,
                broker_epoch = epoch.0,
                reason = why,
                "registration lost; assuming fenced"
            );
        }
        let leaderships = self.resign_all();
        if leaderships > 0 {
            warn!(
                broker = self.id.0,
                leaderships, "stopped leading: session lost"
            );
        }
        self.broker_epoch = None;
        self.fenced = true;
        self.caught_up = false;
        self.publish_gauges();
    }

    /// True when registered and no heartbeat answer arrived for a whole
    /// session timeout.
    pub(crate) fn session_expired(&self, now_ms: u64, session_timeout_ms: u64) -> bool {
        self.broker_epoch.is_some()
            && now_ms.saturating_sub(self.last_contact_ms) > session_timeout_ms
    }

    fn resign_all(&mut self) -> usize {
        let wall = (self.wall_ms)();
        let epoch = self.broker_epoch.map_or(0, |e| e.0);
        let mut n = 0;
        let leading: Vec<TopicPartition> = self
            .partitions
            .iter()
            .filter(|(_, p)| p.leading)
            .map(|(tp, _)| *tp)
            .collect();
        for tp in leading {
            let Some(p) = self.partitions.get_mut(&tp) else {
                continue;
            };
            p.leading = false;
            p.last_fetch_ms.clear();
            p.alter = AlterGate::Open;
            let entry = entry(self.id, epoch, &tp, p, HistoryEvent::Resigned, wall);
            debug!(%tp, leader_epoch = p.leader_epoch.0, "resigned leadership");
            self.history.stage(&entry);
            n += 1;
        }
        // Resigning cannot be refused: the lines are written on a best-effort
        // basis, in one write.
        self.commit_history_best_effort();
        n
    }

    /// Writes the staged history lines of changes that cannot be refused
    /// (resignations, ISR changes the controller already committed).
    pub(crate) fn commit_history_best_effort(&mut self) {
        if let Err(e) = self.history.commit() {
            error!(error = %e, "cannot write leadership history");
        }
    }

    // ---- controller requests ---------------------------------------------

    /// Epoch fencing common to every controller request.
    pub(crate) fn check_stamp(
        &mut self,
        stamp: Option<&pb::ControllerStamp>,
    ) -> Result<(), ApiError> {
        let Some(s) = stamp else {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                "missing controller stamp",
            ));
        };
        let ce = ControllerEpoch(s.controller_epoch);
        // The feature exists only to show that the Jepsen checkers catch a
        // broker that accepts a deposed controller; never build it otherwise.
        if ce < self.controller_epoch_seen && !cfg!(feature = "unsafe-skip-controller-epoch-check")
        {
            return Err(ApiError::new(
                ErrorCode::StaleControllerEpoch,
                format!(
                    "controller {} epoch {} is older than epoch {} already seen",
                    s.controller_id, ce.0, self.controller_epoch_seen.0
                ),
            ));
        }
        if ce > self.controller_epoch_seen {
            // A higher term is a real newer controller even if it has not
            // learned our registration yet: fence the old one from now on.
            self.raise_controller_epoch(ce, s.controller_id);
        }
        match self.broker_epoch {
            Some(e) if e.0 == s.broker_epoch => Ok(()),
            Some(e) => Err(ApiError::new(
                ErrorCode::StaleBrokerEpoch,
                format!(
                    "request names broker epoch {}, current is {}",
                    s.broker_epoch, e.0
                ),
            )),
            None => Err(ApiError::new(
                ErrorCode::StaleBrokerEpoch,
                format!(
                    "request names broker epoch {}, broker is not registered",
                    s.broker_epoch
                ),
            )),
        }
    }

    fn raise_controller_epoch(&mut self, ce: ControllerEpoch, controller_id: u32) {
        info!(
            controller = controller_id,
            controller_epoch = ce.0,
            previous = self.controller_epoch_seen.0,
            "new controller epoch seen"
        );
        self.controller_epoch_seen = ce;
        ::metrics::gauge!(metrics::CONTROLLER_EPOCH_SEEN).set(ce.0 as f64);
    }

    /// Applies one partition of a LeaderAndIsr (the stamp already checked).
    #[cfg(test)]
    pub(crate) fn apply_leader_and_isr(
        &mut self,
        upd: PartitionUpdate,
        controller_epoch: ControllerEpoch,
        now_ms: u64,
    ) -> Result<(), ApiError> {
        self.apply_leader_and_isr_all(vec![Ok(upd)], controller_epoch, now_ms)
            .and_then(|mut results| results.pop().unwrap_or(Ok(())))
    }

    /// Writes the staged history lines of one request. If the write fails,
    /// every change in `undo` is rolled back (newest first) and the error
    /// is returned; the caller decides how the request reports it.
    fn commit_history_or_undo(&mut self, undo: &[Undo]) -> Result<(), ApiError> {
        let Err(e) = self.history.commit() else {
            return Ok(());
        };
        error!(error = %e, changes = undo.len(), "cannot write leadership history; refusing the changes");
        for (_, tp, prev) in undo.iter().rev() {
            match prev {
                Some(p) => self.partitions.insert(*tp, p.clone()),
                None => self.partitions.remove(tp),
            };
        }
        Err(ApiError::new(ErrorCode::Internal, e.to_string()))
    }

    /// Applies the partitions of one LeaderAndIsr in order (the stamp
    /// already checked), one result per item; an item that did not parse
    /// keeps its error. The history lines of every change go out in one
    /// write before the request is answered and before anyone else can see
    /// the changes (the state lock is held throughout): if that write fails,
    /// every change is undone and the whole request fails (`Err`), so the
    /// controller's channel sends it again instead of taking per-partition
    /// refusals as final.
    pub(crate) fn apply_leader_and_isr_all(
        &mut self,
        updates: Vec<Result<PartitionUpdate, ApiError>>,
        controller_epoch: ControllerEpoch,
        now_ms: u64,
    ) -> Result<Vec<Result<(), ApiError>>, ApiError> {
        let wall = (self.wall_ms)();
        let mut results = Vec::with_capacity(updates.len());
        let mut undo: Vec<Undo> = Vec::new();
        let (mut led, mut followed) = (0usize, 0usize);
        for (i, upd) in updates.into_iter().enumerate() {
            let r = upd.and_then(|u| {
                let tp = u.tp;
                let staged = self.stage_leader_and_isr(u, controller_epoch, now_ms, wall)?;
                if let Some(Staged { prev, became }) = staged {
                    match became {
                        Some(Role::Leader) => led += 1,
                        Some(Role::Follower) => followed += 1,
                        None => {}
                    }
                    undo.push((i, tp, prev));
                }
                Ok(())
            });
            results.push(r);
        }
        if undo.is_empty() {
            return Ok(results);
        }
        self.commit_history_or_undo(&undo)?;
        if led + followed > 0 {
            info!(
                became_leader = led,
                became_follower = followed,
                controller_epoch = controller_epoch.0,
                "LeaderAndIsr applied"
            );
        }
        Ok(results)
    }

    /// Checks one partition's new state and applies it in memory. When it
    /// changes what the broker holds, its history line is staged and what
    /// it held before is returned (for undo).
    fn stage_leader_and_isr(
        &mut self,
        upd: PartitionUpdate,
        controller_epoch: ControllerEpoch,
        now_ms: u64,
        wall_ms: u64,
    ) -> Result<Option<Staged>, ApiError> {
        let prev = self.partitions.get(&upd.tp);
        if let Some(h) = prev {
            if upd.leader_epoch < h.leader_epoch {
                return Err(ApiError::new(
                    ErrorCode::FencedLeaderEpoch,
                    format!(
                        "{}: leader epoch {} is older than held {}",
                        upd.tp, upd.leader_epoch.0, h.leader_epoch.0
                    ),
                ));
            }
            if upd.leader_epoch == h.leader_epoch && upd.leader != h.leader {
                error!(
                    tp = %upd.tp,
                    leader_epoch = upd.leader_epoch.0,
                    held_leader = ?h.leader.map(|b| b.0),
                    offered_leader = ?upd.leader.map(|b| b.0),
                    "refusing a second leader for one leader epoch"
                );
                return Err(ApiError::new(
                    ErrorCode::FencedLeaderEpoch,
                    format!(
                        "{}: leader epoch {} already names leader {:?}",
                        upd.tp,
                        upd.leader_epoch.0,
                        h.leader.map(|b| b.0)
                    ),
                ));
            }
            if upd.leader_epoch == h.leader_epoch && upd.partition_epoch < h.partition_epoch {
                // A late re-send of a state we already moved past (e.g. an
                // ISR change we committed ourselves): harmless, keep ours.
                return Ok(None);
            }
        }
        let me = self.id;
        let leading = upd.leader == Some(me);
        let continuing = prev.is_some_and(|h| h.leading && h.leader_epoch == upd.leader_epoch);
        let mut last_fetch_ms = BTreeMap::new();
        if leading {
            if continuing {
                if let Some(h) = prev {
                    last_fetch_ms = h.last_fetch_ms.clone();
                }
            }
            // A new leader gives every ISR member a full lag window to show up.
            for b in &upd.isr {
                if *b != me {
                    last_fetch_ms.entry(*b).or_insert(now_ms);
                }
            }
        }
        let same_epochs = prev.is_some_and(|h| {
            h.leader_epoch == upd.leader_epoch && h.partition_epoch == upd.partition_epoch
        });
        let alter = match prev {
            Some(h) if same_epochs => h.alter,
            _ => AlterGate::Open,
        };
        let next = HeldPartition {
            topic: upd.topic,
            leader: upd.leader,
            leader_epoch: upd.leader_epoch,
            partition_epoch: upd.partition_epoch,
            replicas: upd.replicas,
            isr: upd.isr,
            controller_epoch,
            leading,
            stopped: false,
            last_fetch_ms,
            alter,
        };
        let changed = prev.is_none_or(|h| {
            h.leader != next.leader
                || h.leader_epoch != next.leader_epoch
                || h.partition_epoch != next.partition_epoch
                || h.isr != next.isr
                || h.replicas != next.replicas
                || h.controller_epoch != next.controller_epoch
                || h.leading != next.leading
                || h.stopped
        });
        if !changed {
            self.partitions.insert(upd.tp, next);
            return Ok(None);
        }
        let role_changed = prev.is_none_or(|h| {
            h.leader_epoch != next.leader_epoch || h.leading != next.leading || h.stopped
        });
        let epoch = self.broker_epoch.map_or(0, |e| e.0);
        let line = entry(
            me,
            epoch,
            &upd.tp,
            &next,
            HistoryEvent::LeaderAndIsr,
            wall_ms,
        );
        self.history.stage(&line);
        let became = if !role_changed {
            None
        } else if next.leading {
            debug!(tp = %upd.tp, leader_epoch = next.leader_epoch.0, isr = ?wire::ids(&next.isr), "became leader");
            Some(Role::Leader)
        } else {
            debug!(tp = %upd.tp, leader = ?next.leader.map(|b| b.0), leader_epoch = next.leader_epoch.0, "became follower");
            Some(Role::Follower)
        };
        let prev = self.partitions.insert(upd.tp, next);
        Ok(Some(Staged { prev, became }))
    }

    /// Applies one StopReplica item (the stamp already checked).
    #[cfg(test)]
    pub(crate) fn stop_replica(
        &mut self,
        tp: TopicPartition,
        delete: bool,
        leader_epoch: LeaderEpoch,
    ) -> Result<(), ApiError> {
        self.stop_replica_all(vec![Ok((tp, delete, leader_epoch))])
            .pop()
            .unwrap_or(Ok(()))
    }

    /// Applies the items of one StopReplica in order (the stamp already
    /// checked), one result per item; as with LeaderAndIsr, their history
    /// lines go out in one write, and a failed write undoes and refuses
    /// every item that needed a line (per item: the deletion manager
    /// retries refused deletions).
    pub(crate) fn stop_replica_all(
        &mut self,
        items: Vec<Result<(TopicPartition, bool, LeaderEpoch), ApiError>>,
    ) -> Vec<Result<(), ApiError>> {
        let wall = (self.wall_ms)();
        let mut results = Vec::with_capacity(items.len());
        let mut undo: Vec<Undo> = Vec::new();
        for (i, item) in items.into_iter().enumerate() {
            let r = item.and_then(|(tp, delete, leader_epoch)| {
                if let Some(prev) = self.stage_stop_replica(tp, delete, leader_epoch, wall)? {
                    undo.push((i, tp, Some(prev)));
                }
                Ok(())
            });
            results.push(r);
        }
        let stopped = undo.len();
        if stopped == 0 {
            return results;
        }
        if let Err(e) = self.commit_history_or_undo(&undo) {
            for (i, _, _) in undo {
                results[i] = Err(e.clone());
            }
            return results;
        }
        info!(stopped, "replicas stopped");
        results
    }

    /// Checks and applies one stop in memory; returns what the broker held
    /// before when a history line was staged (for undo).
    fn stage_stop_replica(
        &mut self,
        tp: TopicPartition,
        delete: bool,
        leader_epoch: LeaderEpoch,
        wall_ms: u64,
    ) -> Result<Option<HeldPartition>, ApiError> {
        let Some(h) = self.partitions.get(&tp) else {
            return Ok(None); // already gone: stopping is idempotent
        };
        // Epoch 0 with delete means "no epoch" (topic deletion): nothing to fence.
        let unchecked = delete && leader_epoch.0 == 0;
        if !unchecked && leader_epoch < h.leader_epoch {
            return Err(ApiError::new(
                ErrorCode::FencedLeaderEpoch,
                format!(
                    "{tp}: stop at leader epoch {} is older than held {}",
                    leader_epoch.0, h.leader_epoch.0
                ),
            ));
        }
        let mut staged = false;
        if !h.stopped {
            let epoch = self.broker_epoch.map_or(0, |e| e.0);
            let line = entry(self.id, epoch, &tp, h, HistoryEvent::Stopped, wall_ms);
            self.history.stage(&line);
            debug!(%tp, delete, "stopped replica");
            staged = true;
        }
        let prev = if delete {
            self.partitions.remove(&tp)
        } else {
            self.partitions.get_mut(&tp).map(|h| {
                let prev = h.clone();
                h.stopped = true;
                h.leading = false;
                h.last_fetch_ms.clear();
                h.alter = AlterGate::Open;
                prev
            })
        };
        Ok(prev.filter(|_| staged))
    }

    /// Applies an UpdateMetadata (the stamp already checked). All-or-nothing:
    /// one malformed item refuses the whole request.
    pub(crate) fn update_metadata(
        &mut self,
        req: pb::UpdateMetadataRequest,
    ) -> Result<(), ApiError> {
        let mut parts = Vec::with_capacity(req.partitions.len());
        for p in req.partitions {
            let tid = wire::topic_id(&p.topic_id)?;
            parts.push((TopicPartition::new(tid, p.partition), p));
        }
        let mut deleted = BTreeSet::new();
        for t in &req.deleted_topic_ids {
            deleted.insert(wire::topic_id(t)?);
        }
        if req.full {
            self.cache_brokers.clear();
            self.cache_partitions.clear();
        }
        for b in req.brokers {
            self.cache_brokers.insert(b.broker_id, b);
        }
        for id in &req.removed_broker_ids {
            self.cache_brokers.remove(id);
        }
        for (tp, p) in parts {
            self.cache_partitions.insert(tp, p);
        }
        if !deleted.is_empty() {
            self.cache_partitions
                .retain(|tp, _| !deleted.contains(&tp.topic_id));
        }
        self.metadata_offset = self.metadata_offset.max(req.metadata_offset);
        Ok(())
    }

    pub(crate) fn remember_leader_addresses(&mut self, leaders: &[pb::BrokerInfo]) {
        for b in leaders {
            if !b.address.is_empty() {
                self.leader_addresses
                    .insert(BrokerId(b.broker_id), b.address.clone());
            }
        }
    }

    pub(crate) fn address_of(&self, b: BrokerId) -> Option<String> {
        self.leader_addresses
            .get(&b)
            .cloned()
            .or_else(|| self.cache_brokers.get(&b.0).map(|i| i.address.clone()))
            .filter(|a| !a.is_empty())
    }

    // ---- replication -----------------------------------------------------

    /// A follower's fetch for one partition, as seen by the leader.
    pub(crate) fn record_fetch(
        &mut self,
        follower: BrokerId,
        tp: TopicPartition,
        leader_epoch: LeaderEpoch,
        now_ms: u64,
    ) -> Result<(), ApiError> {
        let not_leader = || {
            ApiError::new(
                ErrorCode::NotLeaderOrFollower,
                format!(
                    "broker is not the leader of {tp} at epoch {}",
                    leader_epoch.0
                ),
            )
        };
        let Some(h) = self.partitions.get_mut(&tp) else {
            return Err(not_leader());
        };
        if !h.leading {
            return Err(not_leader());
        }
        if leader_epoch < h.leader_epoch {
            return Err(ApiError::new(
                ErrorCode::FencedLeaderEpoch,
                format!(
                    "{tp}: fetch at leader epoch {} < {}",
                    leader_epoch.0, h.leader_epoch.0
                ),
            ));
        }
        if leader_epoch > h.leader_epoch || !h.replicas.contains(&follower) {
            return Err(not_leader());
        }
        h.last_fetch_ms.insert(follower, now_ms);
        Ok(())
    }

    /// Partitions this broker follows, grouped by leader.
    pub(crate) fn fetch_targets(&self) -> BTreeMap<BrokerId, FetchTarget> {
        let mut out: BTreeMap<BrokerId, FetchTarget> = BTreeMap::new();
        for (tp, p) in &self.partitions {
            let Some(leader) = p.leader else { continue };
            if p.stopped || leader == self.id || !p.replicas.contains(&self.id) {
                continue;
            }
            out.entry(leader)
                .or_default()
                .partitions
                .push((*tp, p.leader_epoch));
        }
        for (leader, t) in out.iter_mut() {
            t.address = self.address_of(*leader);
        }
        out
    }

    /// ISR changes the leader should ask for now; marks them in flight.
    /// Shrink: ISR members silent for longer than `lag_ms`. Expand: assigned
    /// replicas outside the ISR that fetched within `lag_ms`.
    pub(crate) fn plan_isr_changes(&mut self, now_ms: u64, lag_ms: u64) -> Vec<AlterItem> {
        if self.broker_epoch.is_none() {
            return Vec::new();
        }
        let me = self.id;
        let mut out = Vec::new();
        for (tp, p) in self.partitions.iter_mut() {
            if !p.leading || p.stopped {
                continue;
            }
            match p.alter {
                AlterGate::Open => {}
                AlterGate::RetryAt(t) if t <= now_ms => {}
                _ => continue,
            }
            let fresh = |b: &BrokerId| {
                p.last_fetch_ms
                    .get(b)
                    .is_some_and(|t| now_ms.saturating_sub(*t) <= lag_ms)
            };
            // Shrink first and alone, so a refused expansion (e.g. a fenced
            // candidate) can never hold back removing a laggard.
            let shrunk: Vec<BrokerId> = p
                .isr
                .iter()
                .copied()
                .filter(|b| *b == me || fresh(b))
                .collect();
            let new_isr = if shrunk.len() != p.isr.len() {
                shrunk
            } else {
                let eligible = |b: &BrokerId| {
                    self.cache_brokers
                        .get(&b.0)
                        .is_none_or(|i| !i.fenced && !i.shutting_down)
                };
                let joining: Vec<BrokerId> = p
                    .replicas
                    .iter()
                    .copied()
                    .filter(|b| *b != me && !p.isr.contains(b) && fresh(b) && eligible(b))
                    .collect();
                if joining.is_empty() {
                    continue;
                }
                let mut isr = p.isr.clone();
                isr.extend(joining);
                isr
            };
            p.alter = AlterGate::InFlight;
            out.push(AlterItem {
                tp: *tp,
                leader_epoch: p.leader_epoch,
                partition_epoch: p.partition_epoch,
                new_isr,
            });
        }
        out
    }

    /// The controller's answer for one AlterPartition item.
    pub(crate) fn finish_alter(
        &mut self,
        tp: TopicPartition,
        code: ErrorCode,
        state: Option<PartitionUpdate>,
        now_ms: u64,
        retry_after_ms: u64,
    ) {
        let me = self.id;
        let epoch = self.broker_epoch.map_or(0, |e| e.0);
        let wall = (self.wall_ms)();
        let Some(h) = self.partitions.get_mut(&tp) else {
            return;
        };
        match code {
            ErrorCode::None => {
                h.alter = AlterGate::Open;
                let Some(s) = state else { return };
                // Only a newer state of our own leadership applies; anything
                // else arrives with the controller's next LeaderAndIsr.
                if s.leader_epoch != h.leader_epoch
                    || s.leader != Some(me)
                    || s.partition_epoch <= h.partition_epoch
                {
                    return;
                }
                info!(%tp, partition_epoch = s.partition_epoch.0, isr = ?wire::ids(&s.isr), "ISR change committed");
                h.partition_epoch = s.partition_epoch;
                h.isr = s.isr;
                h.replicas = s.replicas;
                for b in &h.isr {
                    if *b != me {
                        h.last_fetch_ms.entry(*b).or_insert(now_ms);
                    }
                }
                // Staged: the caller writes one answer's lines at once
                // (`commit_history_best_effort`).
                let line = entry(me, epoch, &tp, h, HistoryEvent::AlterPartition, wall);
                self.history.stage(&line);
            }
            ErrorCode::InvalidPartitionEpoch | ErrorCode::FencedLeaderEpoch => {
                warn!(%tp, %code, "ISR change refused; waiting for the controller's LeaderAndIsr");
                h.alter = AlterGate::WaitForController;
            }
            other => {
                warn!(%tp, code = %other, "ISR change refused; will retry");
                h.alter = AlterGate::RetryAt(now_ms + retry_after_ms);
            }
        }
    }

    /// An AlterPartition got no per-item answer (transport error, wrong
    /// controller): let the next round try again.
    pub(crate) fn release_alter(&mut self, tps: &[TopicPartition], retry_at_ms: u64) {
        for tp in tps {
            if let Some(h) = self.partitions.get_mut(tp) {
                if h.alter == AlterGate::InFlight {
                    h.alter = AlterGate::RetryAt(retry_at_ms);
                }
            }
        }
    }

    // ---- observation -----------------------------------------------------

    /// The O(1) gauges, after every change of registration or fencing.
    pub(crate) fn publish_gauges(&self) {
        ::metrics::gauge!(metrics::FENCED).set(if self.fenced { 1.0 } else { 0.0 });
    }

    /// Leader and follower counts: a scan of every partition, so published
    /// periodically (by the ISR manager) rather than after every request.
    pub(crate) fn publish_partition_gauges(&self) {
        let (mut leaders, mut followers) = (0u64, 0u64);
        for p in self.partitions.values() {
            if p.leading {
                leaders += 1;
            } else if !p.stopped && p.replicas.contains(&self.id) {
                followers += 1;
            }
        }
        ::metrics::gauge!(metrics::LEADERS).set(leaders as f64);
        ::metrics::gauge!(metrics::FOLLOWERS).set(followers as f64);
    }

    pub(crate) fn view(&self) -> BrokerStateView {
        BrokerStateView {
            broker_id: self.id,
            broker_epoch: self.broker_epoch,
            fenced: self.fenced,
            caught_up: self.caught_up,
            should_shut_down: self.should_shut_down,
            controller_epoch_seen: self.controller_epoch_seen,
            metadata_offset: self.metadata_offset,
            offline_log_dirs: self.offline_log_dirs.clone(),
            leaderships: self
                .partitions
                .iter()
                .map(|(tp, p)| LeadershipView {
                    partition: *tp,
                    topic: p.topic.clone(),
                    leader: p.leader,
                    leader_epoch: p.leader_epoch,
                    partition_epoch: p.partition_epoch,
                    replicas: p.replicas.clone(),
                    isr: p.isr.clone(),
                    controller_epoch: p.controller_epoch,
                    leading: p.leading,
                    stopped: p.stopped,
                })
                .collect(),
        }
    }

    pub(crate) fn describe(&self) -> pb::DescribeBrokerResponse {
        pb::DescribeBrokerResponse {
            broker_id: self.id.0,
            broker_epoch: self.broker_epoch.map_or(0, |e| e.0),
            controller_epoch_seen: self.controller_epoch_seen.0,
            metadata_offset: self.metadata_offset,
            fenced: self.fenced,
            cache: self.cache_partitions.values().cloned().collect(),
            brokers: self.cache_brokers.values().cloned().collect(),
        }
    }
}

fn entry<'a>(
    me: BrokerId,
    broker_epoch: u64,
    tp: &TopicPartition,
    p: &'a HeldPartition,
    event: HistoryEvent,
    now_ms: u64,
) -> Line<'a> {
    Line {
        event,
        topic_id: tp.topic_id,
        partition: tp.partition.0,
        leader: p.leader,
        leader_epoch: p.leader_epoch.0,
        partition_epoch: p.partition_epoch.0,
        isr: &p.isr,
        replicas: &p.replicas,
        controller_epoch: p.controller_epoch.0,
        broker_id: me.0,
        broker_epoch,
        accepted_at_ms: now_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_metadata::TopicId;

    const ME: BrokerId = BrokerId(1);

    fn tp() -> TopicPartition {
        TopicPartition::new(TopicId(0xabc), 0)
    }

    fn registered() -> BrokerState {
        let mut st = BrokerState::new(ME, HistoryLog::in_memory(), || 0);
        st.on_registered(BrokerEpoch(7), 1_000);
        st
    }

    fn stamp(controller_epoch: u64, broker_epoch: u64) -> pb::ControllerStamp {
        pb::ControllerStamp {
            controller_id: 1,
            controller_epoch,
            broker_epoch,
        }
    }

    fn upd(leader: u32, leader_epoch: u32, partition_epoch: u32, isr: &[u32]) -> PartitionUpdate {
        PartitionUpdate {
            tp: tp(),
            topic: "t".into(),
            leader: Some(BrokerId(leader)),
            leader_epoch: LeaderEpoch(leader_epoch),
            partition_epoch: PartitionEpoch(partition_epoch),
            replicas: vec![BrokerId(1), BrokerId(2), BrokerId(3)],
            isr: isr.iter().copied().map(BrokerId).collect(),
        }
    }

    fn code(r: Result<(), ApiError>) -> ErrorCode {
        r.err().map_or(ErrorCode::None, |e| e.code)
    }

    #[test]
    fn stamps_are_fenced_by_controller_epoch_then_broker_epoch() {
        let mut st = BrokerState::new(ME, HistoryLog::in_memory(), || 0);
        assert_eq!(
            code(st.check_stamp(Some(&stamp(3, 7)))),
            ErrorCode::StaleBrokerEpoch
        );
        st.on_registered(BrokerEpoch(7), 0);
        assert_eq!(code(st.check_stamp(None)), ErrorCode::InvalidRequest);
        assert_eq!(code(st.check_stamp(Some(&stamp(3, 7)))), ErrorCode::None);
        assert_eq!(
            code(st.check_stamp(Some(&stamp(2, 7)))),
            ErrorCode::StaleControllerEpoch
        );
        assert_eq!(
            code(st.check_stamp(Some(&stamp(4, 8)))),
            ErrorCode::StaleBrokerEpoch
        );
        // The higher epoch was still learned: epoch 3 is now stale.
        assert_eq!(st.controller_epoch_seen, ControllerEpoch(4));
        assert_eq!(
            code(st.check_stamp(Some(&stamp(3, 7)))),
            ErrorCode::StaleControllerEpoch
        );
    }

    #[test]
    fn leader_epochs_never_go_back_and_one_epoch_names_one_leader() {
        let mut st = registered();
        let ce = ControllerEpoch(3);
        assert_eq!(
            code(st.apply_leader_and_isr(upd(1, 5, 10, &[1, 2]), ce, 1)),
            ErrorCode::None
        );
        assert!(st.partitions[&tp()].leading);
        // Re-send: idempotent, no new history line.
        assert_eq!(
            code(st.apply_leader_and_isr(upd(1, 5, 10, &[1, 2]), ce, 2)),
            ErrorCode::None
        );
        assert_eq!(st.history.lines().len(), 1);
        // Older leader epoch: fenced.
        assert_eq!(
            code(st.apply_leader_and_isr(upd(2, 4, 11, &[2]), ce, 3)),
            ErrorCode::FencedLeaderEpoch
        );
        // Same epoch, other leader: refused.
        assert_eq!(
            code(st.apply_leader_and_isr(upd(2, 5, 11, &[2]), ce, 4)),
            ErrorCode::FencedLeaderEpoch
        );
        // Same epoch, older partition epoch: ignored, state kept.
        assert_eq!(
            code(st.apply_leader_and_isr(upd(1, 5, 9, &[1]), ce, 5)),
            ErrorCode::None
        );
        assert_eq!(st.partitions[&tp()].isr, vec![BrokerId(1), BrokerId(2)]);
        // Newer epoch moves leadership away.
        assert_eq!(
            code(st.apply_leader_and_isr(upd(2, 6, 12, &[2]), ce, 6)),
            ErrorCode::None
        );
        assert!(!st.partitions[&tp()].leading);
        let lines = st.history.lines();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1].leader, Some(2));
        assert_eq!(lines[1].leader_epoch, 6);
        assert_eq!(lines[1].broker_epoch, 7);
        assert_eq!(lines[1].topic_id, TopicId(0xabc).to_string());
    }

    #[test]
    fn session_loss_resigns_and_refuses_requests_until_reregistered() {
        let mut st = registered();
        st.apply_leader_and_isr(upd(1, 5, 10, &[1, 2]), ControllerEpoch(3), 1)
            .unwrap();
        assert!(!st.session_expired(1_000 + 500, 1_000));
        assert!(st.session_expired(1_000 + 1_001, 1_000));
        st.drop_registration("test");
        assert!(!st.partitions[&tp()].leading);
        assert_eq!(
            st.history.lines().last().map(|l| l.event),
            Some(HistoryEvent::Resigned)
        );
        assert_eq!(
            code(st.check_stamp(Some(&stamp(3, 7)))),
            ErrorCode::StaleBrokerEpoch
        );
        // Re-registered, the controller re-sends the same leadership: resume.
        st.on_registered(BrokerEpoch(9), 3_000);
        st.check_stamp(Some(&stamp(3, 9))).unwrap();
        st.apply_leader_and_isr(upd(1, 5, 10, &[1, 2]), ControllerEpoch(3), 3_001)
            .unwrap();
        assert!(st.partitions[&tp()].leading);
    }

    #[test]
    fn leader_shrinks_silent_followers_then_expands_returning_ones() {
        let mut st = registered();
        st.apply_leader_and_isr(upd(1, 5, 10, &[1, 2, 3]), ControllerEpoch(3), 0)
            .unwrap();
        // Within the lag window nobody is judged.
        assert!(st.plan_isr_changes(500, 1_000).is_empty());
        st.record_fetch(BrokerId(2), tp(), LeaderEpoch(5), 900)
            .unwrap();
        let items = st.plan_isr_changes(1_500, 1_000);
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].new_isr, vec![BrokerId(1), BrokerId(2)]);
        assert_eq!(items[0].partition_epoch, PartitionEpoch(10));
        // In flight: not asked twice.
        assert!(st.plan_isr_changes(1_600, 1_000).is_empty());
        let committed = PartitionUpdate {
            partition_epoch: PartitionEpoch(11),
            ..upd(1, 5, 11, &[1, 2])
        };
        st.finish_alter(tp(), ErrorCode::None, Some(committed), 1_700, 2_000);
        st.commit_history_best_effort();
        assert_eq!(st.partitions[&tp()].isr, vec![BrokerId(1), BrokerId(2)]);
        assert_eq!(
            st.history.lines().last().map(|l| l.event),
            Some(HistoryEvent::AlterPartition)
        );
        // Broker 3 comes back.
        st.record_fetch(BrokerId(3), tp(), LeaderEpoch(5), 1_800)
            .unwrap();
        st.record_fetch(BrokerId(2), tp(), LeaderEpoch(5), 1_800)
            .unwrap();
        let items = st.plan_isr_changes(1_900, 1_000);
        assert_eq!(
            items[0].new_isr,
            vec![BrokerId(1), BrokerId(2), BrokerId(3)]
        );
        // Refused on epochs: wait for the controller.
        st.finish_alter(tp(), ErrorCode::InvalidPartitionEpoch, None, 2_000, 2_000);
        assert!(st.plan_isr_changes(2_100, 1_000).is_empty());
        st.apply_leader_and_isr(upd(1, 5, 12, &[1, 2]), ControllerEpoch(3), 2_200)
            .unwrap();
        assert_eq!(st.plan_isr_changes(2_300, 1_000).len(), 1);
    }

    #[test]
    fn fetches_are_checked_against_the_held_leadership() {
        let mut st = registered();
        let fetch = |st: &mut BrokerState, le: u32| {
            code(st.record_fetch(BrokerId(2), tp(), LeaderEpoch(le), 1))
        };
        assert_eq!(fetch(&mut st, 5), ErrorCode::NotLeaderOrFollower);
        st.apply_leader_and_isr(upd(1, 5, 10, &[1, 2]), ControllerEpoch(3), 0)
            .unwrap();
        assert_eq!(fetch(&mut st, 4), ErrorCode::FencedLeaderEpoch);
        assert_eq!(fetch(&mut st, 6), ErrorCode::NotLeaderOrFollower);
        assert_eq!(fetch(&mut st, 5), ErrorCode::None);
        assert_eq!(
            code(st.record_fetch(BrokerId(9), tp(), LeaderEpoch(5), 1)),
            ErrorCode::NotLeaderOrFollower
        );
    }

    #[test]
    fn stop_replica_fences_by_leader_epoch_and_delete_forgets() {
        let mut st = registered();
        st.apply_leader_and_isr(upd(2, 5, 10, &[1, 2]), ControllerEpoch(3), 0)
            .unwrap();
        assert_eq!(
            code(st.stop_replica(tp(), false, LeaderEpoch(4))),
            ErrorCode::FencedLeaderEpoch
        );
        st.stop_replica(tp(), false, LeaderEpoch(5)).unwrap();
        assert!(st.partitions[&tp()].stopped);
        assert!(st.fetch_targets().is_empty());
        // The stopped partition still fences older LeaderAndIsr.
        assert_eq!(
            code(st.apply_leader_and_isr(upd(2, 4, 9, &[2]), ControllerEpoch(3), 3)),
            ErrorCode::FencedLeaderEpoch
        );
        st.stop_replica(tp(), true, LeaderEpoch(0)).unwrap();
        assert!(st.partitions.is_empty());
        assert_eq!(
            code(st.stop_replica(tp(), true, LeaderEpoch(0))),
            ErrorCode::None
        );
    }

    #[test]
    fn metadata_full_replaces_delta_merges_deletes_remove() {
        let mut st = registered();
        let part = |t: u128, p: u32| pb::PartitionState {
            topic_id: TopicId(t).to_bytes().to_vec(),
            partition: p,
            ..Default::default()
        };
        let req = |full, offset, parts: Vec<pb::PartitionState>, deleted: Vec<u128>| {
            pb::UpdateMetadataRequest {
                stamp: None,
                metadata_offset: offset,
                full,
                brokers: vec![pb::BrokerInfo {
                    broker_id: 2,
                    address: "127.0.0.2:1".into(),
                    ..Default::default()
                }],
                partitions: parts,
                deleted_topic_ids: deleted
                    .into_iter()
                    .map(|t| TopicId(t).to_bytes().to_vec())
                    .collect(),
                removed_broker_ids: vec![],
            }
        };
        st.update_metadata(req(true, 10, vec![part(1, 0), part(2, 0)], vec![]))
            .unwrap();
        st.update_metadata(req(false, 11, vec![part(3, 0)], vec![1]))
            .unwrap();
        assert_eq!(st.cache_partitions.len(), 2);
        assert_eq!(st.metadata_offset, 11);
        st.update_metadata(req(true, 12, vec![part(4, 0)], vec![]))
            .unwrap();
        assert_eq!(st.cache_partitions.len(), 1);
        assert_eq!(st.address_of(BrokerId(2)).as_deref(), Some("127.0.0.2:1"));
        let mut bad = req(false, 13, vec![part(5, 0)], vec![]);
        bad.partitions[0].topic_id = vec![1, 2, 3];
        assert_eq!(code(st.update_metadata(bad)), ErrorCode::InvalidRequest);
        assert_eq!(st.metadata_offset, 12);
        // A delta naming a removed broker drops it from the cache.
        let mut gone = req(false, 14, vec![], vec![]);
        gone.brokers.clear();
        gone.removed_broker_ids = vec![2];
        st.update_metadata(gone).unwrap();
        assert!(st.cache_brokers.is_empty());
        assert_eq!(st.address_of(BrokerId(2)), None);
        // A split view: parts without an offset leave the offset alone.
        st.update_metadata(req(false, 0, vec![part(6, 0)], vec![]))
            .unwrap();
        assert_eq!(st.metadata_offset, 14);
    }

    fn upd_of(partition: u32, leader: u32, leader_epoch: u32) -> PartitionUpdate {
        PartitionUpdate {
            tp: TopicPartition::new(TopicId(0xabc), partition),
            ..upd(leader, leader_epoch, leader_epoch, &[1, 2])
        }
    }

    #[test]
    fn one_request_is_applied_item_by_item_with_its_lines_in_one_write() {
        let mut st = registered();
        let ce = ControllerEpoch(3);
        st.apply_leader_and_isr(upd_of(0, 1, 5), ce, 0).unwrap();
        let results = st.apply_leader_and_isr_all(
            vec![
                Ok(upd_of(0, 2, 4)), // older epoch: refused
                Ok(upd_of(1, 1, 1)),
                Err(ApiError::new(ErrorCode::InvalidRequest, "bad topic id")),
                Ok(upd_of(2, 2, 1)),
                Ok(upd_of(2, 2, 1)), // repeated: no second line
                Ok(upd_of(0, 2, 6)),
            ],
            ce,
            1,
        );
        let codes: Vec<ErrorCode> = results
            .expect("history written")
            .into_iter()
            .map(code)
            .collect();
        assert_eq!(
            codes,
            vec![
                ErrorCode::FencedLeaderEpoch,
                ErrorCode::None,
                ErrorCode::InvalidRequest,
                ErrorCode::None,
                ErrorCode::None,
                ErrorCode::None,
            ]
        );
        let lines = st.history.lines();
        assert_eq!(lines.len(), 4);
        assert_eq!(
            lines
                .iter()
                .map(|l| (l.partition, l.leader, l.leader_epoch))
                .collect::<Vec<_>>(),
            vec![
                (0, Some(1), 5),
                (1, Some(1), 1),
                (2, Some(2), 1),
                (0, Some(2), 6)
            ]
        );
        assert!(st.partitions[&upd_of(1, 1, 1).tp].leading);
        assert!(!st.partitions[&upd_of(0, 2, 6).tp].leading);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_failed_history_write_undoes_and_refuses_the_whole_request() {
        // Every write to /dev/full fails (ENOSPC).
        let history = HistoryLog::open(std::path::Path::new("/dev/full")).expect("open /dev/full");
        let mut st = BrokerState::new(ME, history, || 0);
        st.on_registered(BrokerEpoch(7), 0);
        let ce = ControllerEpoch(3);
        let results = st.apply_leader_and_isr_all(
            vec![
                Ok(upd_of(0, 1, 5)),
                Ok(upd_of(1, 2, 5)),
                Ok(upd_of(0, 2, 6)),
            ],
            ce,
            1,
        );
        // The request as a whole fails (so the controller resends it),
        // and nothing of it stays applied.
        let e = results.expect_err("a failed history write fails the request");
        assert_eq!(e.code, ErrorCode::Internal);
        assert!(st.partitions.is_empty());
    }
}
