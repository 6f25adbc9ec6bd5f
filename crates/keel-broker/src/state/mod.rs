//! What the broker holds, split by concern: the session with the
//! controller and the fencing of its requests ([`session`]), the
//! partitions it hosts ([`partitions`]) with the leader's ISR tracking
//! ([`isr_tracker`]), the metadata cache ([`metadata`]), and the leadership
//! history written for every change ([`crate::history`]). [`BrokerState`]
//! composes them and applies each request as a whole. No clock: time comes
//! in as `now_ms`; no protobuf messages: the handlers convert at the edge
//! with `keel_proto::convert`.

mod isr_tracker;
mod metadata;
mod partitions;
mod session;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use keel_metadata::decide::{AlterPartitionItem, HeartbeatReply};
use keel_metadata::{
    ApiError, BrokerEpoch, BrokerId, BrokerInfo, ControllerEpoch, ControllerStamp, ErrorCode,
    LeaderEpoch, PartitionLeadership, TopicPartition,
};
use tracing::{error, info, warn};

use crate::history::{Author, HistoryLog};
use crate::view::BrokerStateView;

use metadata::MetadataCache;
pub(crate) use metadata::MetadataUpdate;
use partitions::{FetchTarget, Partitions, Role, Undo};
pub(crate) use session::Sender;
use session::Session;

/// The whole mutable state of one broker. It sits behind one lock
/// (`Shared::state`) on purpose: a request is checked against the session
/// (its stamp), applied to the partitions and recorded in the history as
/// one step, so no other request or reader sees a change before its
/// history line is written, no request slips in between a stamp check and
/// its apply, and a lost session resigns every leadership before any
/// request can see it unregistered.
#[derive(Debug)]
pub(crate) struct BrokerState {
    /// Registration, fencing, controller epoch seen.
    session: Session,
    /// The partitions this broker hosts.
    partitions: Partitions,
    /// Every partition and broker, as UpdateMetadata describes them.
    metadata: MetadataCache,
    /// `history.jsonl`: one line per change of a held partition.
    history: HistoryLog,
    /// Log dirs the last probe found unusable (heartbeats report them).
    offline_log_dirs: Vec<String>,
    /// Wall clock (Unix ms) for history timestamps only; every `now_ms`
    /// argument is monotonic, so clock jumps never stretch a session.
    wall_ms: fn() -> u64,
}

impl BrokerState {
    pub(crate) fn new(id: BrokerId, history: HistoryLog, wall_ms: fn() -> u64) -> Self {
        Self {
            session: Session::new(id),
            partitions: Partitions::new(id),
            metadata: MetadataCache::default(),
            history,
            offline_log_dirs: Vec::new(),
            wall_ms,
        }
    }

    pub(crate) fn session(&self) -> &Session {
        &self.session
    }

    pub(crate) fn metadata(&self) -> &MetadataCache {
        &self.metadata
    }

    /// The current registration, if any.
    pub(crate) fn broker_epoch(&self) -> Option<BrokerEpoch> {
        self.session.broker_epoch()
    }

    pub(crate) fn set_offline_log_dirs(&mut self, dirs: Vec<String>) {
        self.offline_log_dirs = dirs;
    }

    /// Who writes history lines now.
    fn author(&self) -> Author {
        Author {
            broker_id: self.session.id(),
            broker_epoch: self.session.broker_epoch().map_or(0, |e| e.0),
            at_ms: (self.wall_ms)(),
        }
    }

    // ---- session -----------------------------------------------------------

    /// A registration answer (see [`Session::on_registered`]).
    pub(crate) fn on_registered(
        &mut self,
        epoch: BrokerEpoch,
        controller: Option<(u32, ControllerEpoch)>,
        now_ms: u64,
    ) {
        self.session.on_registered(epoch, controller, now_ms);
    }

    /// A heartbeat answer with no error. Returns false if it answers an
    /// older registration (the session was given up meanwhile).
    pub(crate) fn on_heartbeat(
        &mut self,
        sent_epoch: BrokerEpoch,
        reply: &HeartbeatReply,
        controller_id: u32,
        controller_epoch: ControllerEpoch,
        now_ms: u64,
    ) -> bool {
        self.session
            .on_heartbeat(sent_epoch, reply, controller_id, controller_epoch, now_ms)
    }

    /// The controller no longer knows this registration (or the session
    /// timed out): stop leading and refuse requests until re-registered.
    pub(crate) fn drop_registration(&mut self, why: &str) {
        // The resignation lines still name the registration given up.
        let by = self.author();
        self.session.lose(why);
        let leaderships = self.partitions.resign_all(&mut self.history.stager(by));
        // Resigning cannot be refused: the lines are written on a
        // best-effort basis, in one write.
        self.commit_history_best_effort();
        if leaderships > 0 {
            warn!(
                broker = self.session.id().0,
                leaderships, "stopped leading: session lost"
            );
        }
        self.session.publish_gauges();
    }

    /// True when registered and no heartbeat answer arrived for a whole
    /// session timeout.
    pub(crate) fn session_expired(&self, now_ms: u64, session_timeout_ms: u64) -> bool {
        self.session.expired(now_ms, session_timeout_ms)
    }

    /// Epoch fencing common to every controller request.
    pub(crate) fn check_stamp(
        &self,
        stamp: Option<ControllerStamp>,
        sender: Sender,
    ) -> Result<(), ApiError> {
        self.session.check_stamp(stamp, sender)
    }

    // ---- history -----------------------------------------------------------

    /// Writes the staged history lines of changes that cannot be refused
    /// (resignations, ISR changes the controller already committed).
    pub(crate) fn commit_history_best_effort(&mut self) {
        if let Err(e) = self.history.commit() {
            error!(error = %e, "cannot write leadership history");
        }
    }

    /// Writes the staged history lines of one request. If the write fails,
    /// every change in `undo` is rolled back (newest first), `undone` hears
    /// of each one's item with the error, and the error is returned; the
    /// caller decides how the request reports it.
    fn commit_history_or_undo(
        &mut self,
        undo: Vec<Undo>,
        mut undone: impl FnMut(usize, &ApiError),
    ) -> Result<(), ApiError> {
        let Err(e) = self.history.commit() else {
            return Ok(());
        };
        error!(error = %e, changes = undo.len(), "cannot write leadership history; refusing the changes");
        let e = ApiError::new(ErrorCode::Internal, e.to_string());
        for u in &undo {
            undone(u.index, &e);
        }
        self.partitions.undo(undo);
        Err(e)
    }

    // ---- controller requests ---------------------------------------------

    /// Applies one partition of a LeaderAndIsr (the stamp already checked).
    #[cfg(test)]
    pub(crate) fn apply_leader_and_isr(
        &mut self,
        upd: PartitionLeadership,
        controller_epoch: ControllerEpoch,
        now_ms: u64,
    ) -> Result<(), ApiError> {
        self.apply_leader_and_isr_all(vec![Ok(upd)], controller_epoch, now_ms)
            .and_then(|mut results| results.pop().unwrap_or(Ok(())))
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
        updates: Vec<Result<PartitionLeadership, ApiError>>,
        controller_epoch: ControllerEpoch,
        now_ms: u64,
    ) -> Result<Vec<Result<(), ApiError>>, ApiError> {
        let by = self.author();
        let mut lines = self.history.stager(by);
        let mut results = Vec::with_capacity(updates.len());
        let mut undo: Vec<Undo> = Vec::new();
        let (mut led, mut followed) = (0usize, 0usize);
        for (i, upd) in updates.into_iter().enumerate() {
            let r = upd.and_then(|u| {
                let staged = self.partitions.stage_leader_and_isr(
                    i,
                    u,
                    controller_epoch,
                    now_ms,
                    &mut lines,
                )?;
                if let Some((change, became)) = staged {
                    match became {
                        Some(Role::Leader) => led += 1,
                        Some(Role::Follower) => followed += 1,
                        None => {}
                    }
                    undo.push(change);
                }
                Ok(())
            });
            results.push(r);
        }
        if undo.is_empty() {
            return Ok(results);
        }
        // The whole request fails: no item's result is final.
        self.commit_history_or_undo(undo, |_, _| {})?;
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
        let by = self.author();
        let mut lines = self.history.stager(by);
        let mut results = Vec::with_capacity(items.len());
        let mut undo: Vec<Undo> = Vec::new();
        for (i, item) in items.into_iter().enumerate() {
            let r = item.and_then(|(tp, delete, leader_epoch)| {
                let change =
                    self.partitions
                        .stage_stop_replica(i, tp, delete, leader_epoch, &mut lines)?;
                undo.extend(change);
                Ok(())
            });
            results.push(r);
        }
        let stopped = undo.len();
        if stopped == 0 {
            return results;
        }
        // Each refused item's result carries the error.
        let refuse = |i: usize, e: &ApiError| results[i] = Err(e.clone());
        if self.commit_history_or_undo(undo, refuse).is_err() {
            return results;
        }
        info!(stopped, "replicas stopped");
        results
    }

    /// Applies an UpdateMetadata (the stamp already checked, the request
    /// already validated as a whole).
    pub(crate) fn update_metadata(&mut self, update: MetadataUpdate) {
        self.metadata.apply(update);
    }

    /// Remembers where the leaders a LeaderAndIsr names listen.
    pub(crate) fn remember_leader_addresses(
        &mut self,
        leaders: impl IntoIterator<Item = BrokerInfo>,
    ) {
        self.metadata.remember_leader_addresses(leaders);
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
        self.partitions
            .record_fetch(follower, tp, leader_epoch, now_ms)
    }

    /// Partitions this broker follows, grouped by leader, with the
    /// leader's address when known.
    pub(crate) fn fetch_targets(&self) -> BTreeMap<BrokerId, FetchTarget> {
        let mut out = self.partitions.fetch_targets();
        for (leader, t) in out.iter_mut() {
            t.address = self.metadata.address_of(*leader);
        }
        out
    }

    /// ISR changes the leader should ask for now; marks them in flight.
    /// Shrink: ISR members silent for longer than `lag_ms`. Expand: assigned
    /// replicas outside the ISR that fetched within `lag_ms`.
    pub(crate) fn plan_isr_changes(&mut self, now_ms: u64, lag_ms: u64) -> Vec<AlterPartitionItem> {
        if self.session.broker_epoch().is_none() {
            return Vec::new();
        }
        let metadata = &self.metadata;
        self.partitions
            .plan_isr_changes(now_ms, lag_ms, |b| metadata.may_join_isr(b))
    }

    /// The controller's answer for one AlterPartition item; a committed
    /// change's history line is staged (the caller writes one answer's
    /// lines at once, with `commit_history_best_effort`).
    pub(crate) fn finish_alter(
        &mut self,
        tp: TopicPartition,
        code: ErrorCode,
        state: Option<PartitionLeadership>,
        now_ms: u64,
        retry_after_ms: u64,
    ) {
        let by = self.author();
        let mut lines = self.history.stager(by);
        self.partitions
            .finish_alter(tp, code, state, now_ms, retry_after_ms, &mut lines);
    }

    /// An AlterPartition got no per-item answer (transport error, wrong
    /// controller): let the next round try again.
    pub(crate) fn release_alter(&mut self, tps: &[TopicPartition], retry_at_ms: u64) {
        self.partitions.release_alter(tps, retry_at_ms);
    }

    // ---- observation -----------------------------------------------------

    /// The O(1) gauges, after every change of registration or fencing.
    pub(crate) fn publish_gauges(&self) {
        self.session.publish_gauges();
    }

    /// Leader and follower counts (a scan of every partition).
    pub(crate) fn publish_partition_gauges(&self) {
        self.partitions.publish_gauges();
    }

    pub(crate) fn view(&self) -> BrokerStateView {
        let s = &self.session;
        BrokerStateView {
            broker_id: s.id(),
            broker_epoch: s.broker_epoch(),
            fenced: s.fenced(),
            caught_up: s.caught_up(),
            should_shut_down: s.should_shut_down(),
            controller_epoch_seen: s.controller_epoch_seen(),
            metadata_offset: self.metadata.offset(),
            offline_log_dirs: self.offline_log_dirs.clone(),
            leaderships: self.partitions.views(),
        }
    }
}
