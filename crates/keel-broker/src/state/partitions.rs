//! The partitions this broker hosts, as the controller last set them, and
//! every rule about changing them: LeaderAndIsr and StopReplica with their
//! leader-epoch checks, the role each leaves (leading or following), the
//! fetches a leader accepts, and the undo of changes whose history line
//! could not be written. Each change stages its history line; the caller
//! writes them (see [`BrokerState`](super::BrokerState)).

use std::collections::BTreeMap;

use keel_metadata::decide::AlterPartitionItem;
use keel_metadata::{
    ApiError, BrokerId, ControllerEpoch, ErrorCode, LeaderEpoch, PartitionLeadership,
    TopicPartition,
};
use keel_proto::convert::brokers_to_pb;
use tracing::{debug, error, info};

use super::isr_tracker::IsrTracker;
use crate::history::{HistoryEvent, Stager};
use crate::metrics;
use crate::view::LeadershipView;

/// One partition as this broker holds it (leader or follower).
#[derive(Clone, Debug)]
struct Held {
    /// As the controller last sent it, or as our own committed ISR change
    /// left it.
    state: PartitionLeadership,
    /// Controller epoch of the request this state came from.
    controller_epoch: ControllerEpoch,
    /// Acting as leader: named leader, not resigned, not stopped.
    leading: bool,
    /// StopReplica(delete=false): kept only so older requests stay fenced.
    stopped: bool,
    /// Follower progress and the AlterPartition gate (leader only).
    isr: IsrTracker,
}

impl Held {
    fn stage_line(&self, event: HistoryEvent, lines: &mut Stager<'_>) {
        lines.stage(event, &self.state, self.controller_epoch);
    }
}

/// A change applied in memory whose history line is staged: what to put
/// back if the line cannot be written. Changes are undone newest first.
#[derive(Debug)]
pub(crate) struct Undo {
    /// Index of the change's item in its request (for its result).
    pub index: usize,
    tp: TopicPartition,
    /// What the broker held before (`None`: nothing).
    prev: Option<Held>,
}

/// A partition's role on this broker after a LeaderAndIsr.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Leader,
    Follower,
}

/// Partitions a follower reports to one leader.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FetchTarget {
    /// Where the leader listens, if known.
    pub address: Option<String>,
    pub partitions: Vec<(TopicPartition, LeaderEpoch)>,
}

/// Every partition this broker holds, by partition.
#[derive(Debug)]
pub(crate) struct Partitions {
    /// This broker: the leader named `me` leads.
    me: BrokerId,
    held: BTreeMap<TopicPartition, Held>,
}

impl Partitions {
    pub(crate) fn new(me: BrokerId) -> Self {
        Self {
            me,
            held: BTreeMap::new(),
        }
    }

    /// Checks one partition's new state and applies it in memory. When it
    /// changes what the broker holds, its history line is staged and the
    /// undo of the change is returned, with the role the partition took
    /// when that changed.
    pub(crate) fn stage_leader_and_isr(
        &mut self,
        index: usize,
        upd: PartitionLeadership,
        controller_epoch: ControllerEpoch,
        now_ms: u64,
        lines: &mut Stager<'_>,
    ) -> Result<Option<(Undo, Option<Role>)>, ApiError> {
        let tp = upd.tp;
        let prev = self.held.get(&tp);
        if let Some(h) = prev {
            let held = &h.state;
            if upd.leader_epoch < held.leader_epoch {
                return Err(ApiError::new(
                    ErrorCode::FencedLeaderEpoch,
                    format!(
                        "{tp}: leader epoch {} is older than held {}",
                        upd.leader_epoch.0, held.leader_epoch.0
                    ),
                ));
            }
            if upd.leader_epoch == held.leader_epoch && upd.leader != held.leader {
                error!(
                    %tp,
                    leader_epoch = upd.leader_epoch.0,
                    held_leader = ?held.leader.map(|b| b.0),
                    offered_leader = ?upd.leader.map(|b| b.0),
                    "refusing a second leader for one leader epoch"
                );
                return Err(ApiError::new(
                    ErrorCode::FencedLeaderEpoch,
                    format!(
                        "{tp}: leader epoch {} already names leader {:?}",
                        upd.leader_epoch.0,
                        held.leader.map(|b| b.0)
                    ),
                ));
            }
            if upd.leader_epoch == held.leader_epoch && upd.partition_epoch < held.partition_epoch {
                // A late re-send of a state we already moved past (e.g. an
                // ISR change we committed ourselves): harmless, keep ours.
                return Ok(None);
            }
        }
        let me = self.me;
        let leading = upd.leader == Some(me);
        let mut isr = if leading {
            let continuing = prev
                .filter(|h| h.leading && h.state.leader_epoch == upd.leader_epoch)
                .map(|h| &h.isr);
            IsrTracker::leading(me, &upd.isr, continuing, now_ms)
        } else {
            IsrTracker::default()
        };
        if let Some(h) = prev.filter(|h| {
            h.state.leader_epoch == upd.leader_epoch
                && h.state.partition_epoch == upd.partition_epoch
        }) {
            isr.keep_gate_of(&h.isr);
        }
        let next = Held {
            state: upd,
            controller_epoch,
            leading,
            stopped: false,
            isr,
        };
        let changed = prev.is_none_or(|h| {
            h.state.leader != next.state.leader
                || h.state.leader_epoch != next.state.leader_epoch
                || h.state.partition_epoch != next.state.partition_epoch
                || h.state.isr != next.state.isr
                || h.state.replicas != next.state.replicas
                || h.controller_epoch != next.controller_epoch
                || h.leading != next.leading
                || h.stopped
        });
        if !changed {
            self.held.insert(tp, next);
            return Ok(None);
        }
        let role_changed = prev.is_none_or(|h| {
            h.state.leader_epoch != next.state.leader_epoch
                || h.leading != next.leading
                || h.stopped
        });
        next.stage_line(HistoryEvent::LeaderAndIsr, lines);
        let became = if !role_changed {
            None
        } else if next.leading {
            debug!(%tp, leader_epoch = next.state.leader_epoch.0, isr = ?brokers_to_pb(&next.state.isr), "became leader");
            Some(Role::Leader)
        } else {
            debug!(%tp, leader = ?next.state.leader.map(|b| b.0), leader_epoch = next.state.leader_epoch.0, "became follower");
            Some(Role::Follower)
        };
        let prev = self.held.insert(tp, next);
        Ok(Some((Undo { index, tp, prev }, became)))
    }

    /// Checks and applies one StopReplica item in memory; returns the undo
    /// of the change when a history line was staged.
    pub(crate) fn stage_stop_replica(
        &mut self,
        index: usize,
        tp: TopicPartition,
        delete: bool,
        leader_epoch: LeaderEpoch,
        lines: &mut Stager<'_>,
    ) -> Result<Option<Undo>, ApiError> {
        let Some(h) = self.held.get(&tp) else {
            return Ok(None); // already gone: stopping is idempotent
        };
        // Epoch 0 with delete means "no epoch" (topic deletion): nothing to fence.
        let unchecked = delete && leader_epoch.0 == 0;
        if !unchecked && leader_epoch < h.state.leader_epoch {
            return Err(ApiError::new(
                ErrorCode::FencedLeaderEpoch,
                format!(
                    "{tp}: stop at leader epoch {} is older than held {}",
                    leader_epoch.0, h.state.leader_epoch.0
                ),
            ));
        }
        let mut staged = false;
        if !h.stopped {
            h.stage_line(HistoryEvent::Stopped, lines);
            debug!(%tp, delete, "stopped replica");
            staged = true;
        }
        let prev = if delete {
            self.held.remove(&tp)
        } else {
            self.held.get_mut(&tp).map(|h| {
                let prev = h.clone();
                h.stopped = true;
                h.leading = false;
                h.isr.reset();
                prev
            })
        };
        Ok(prev.filter(|_| staged).map(|prev| Undo {
            index,
            tp,
            prev: Some(prev),
        }))
    }

    /// Puts back what `undo` took (newest change first).
    pub(crate) fn undo(&mut self, undo: Vec<Undo>) {
        for u in undo.into_iter().rev() {
            match u.prev {
                Some(p) => self.held.insert(u.tp, p),
                None => self.held.remove(&u.tp),
            };
        }
    }

    /// Stops acting as leader of every partition (the session is lost),
    /// staging a line for each; returns how many.
    pub(crate) fn resign_all(&mut self, lines: &mut Stager<'_>) -> usize {
        let mut n = 0;
        for (tp, h) in self.held.iter_mut() {
            if !h.leading {
                continue;
            }
            h.leading = false;
            h.isr.reset();
            h.stage_line(HistoryEvent::Resigned, lines);
            debug!(%tp, leader_epoch = h.state.leader_epoch.0, "resigned leadership");
            n += 1;
        }
        n
    }

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
        let Some(h) = self.held.get_mut(&tp) else {
            return Err(not_leader());
        };
        if !h.leading {
            return Err(not_leader());
        }
        if leader_epoch < h.state.leader_epoch {
            return Err(ApiError::new(
                ErrorCode::FencedLeaderEpoch,
                format!(
                    "{tp}: fetch at leader epoch {} < {}",
                    leader_epoch.0, h.state.leader_epoch.0
                ),
            ));
        }
        if leader_epoch > h.state.leader_epoch || !h.state.replicas.contains(&follower) {
            return Err(not_leader());
        }
        h.isr.fetched(follower, now_ms);
        Ok(())
    }

    /// Partitions this broker follows, grouped by leader (addresses not
    /// filled in).
    pub(crate) fn fetch_targets(&self) -> BTreeMap<BrokerId, FetchTarget> {
        let mut out: BTreeMap<BrokerId, FetchTarget> = BTreeMap::new();
        for (tp, h) in &self.held {
            let p = &h.state;
            let Some(leader) = p.leader else { continue };
            if h.stopped || leader == self.me || !p.replicas.contains(&self.me) {
                continue;
            }
            out.entry(leader)
                .or_default()
                .partitions
                .push((*tp, p.leader_epoch));
        }
        out
    }

    /// ISR changes the leader should ask for now; marks them in flight.
    /// `eligible`: may this broker join an ISR.
    pub(crate) fn plan_isr_changes(
        &mut self,
        now_ms: u64,
        lag_ms: u64,
        eligible: impl Fn(BrokerId) -> bool,
    ) -> Vec<AlterPartitionItem> {
        let me = self.me;
        let mut out = Vec::new();
        for (tp, h) in self.held.iter_mut() {
            if !h.leading || h.stopped {
                continue;
            }
            let Some(new_isr) = h.isr.plan(me, &h.state, now_ms, lag_ms, &eligible) else {
                continue;
            };
            out.push(AlterPartitionItem {
                tp: *tp,
                leader_epoch: h.state.leader_epoch,
                partition_epoch: h.state.partition_epoch,
                new_isr,
            });
        }
        out
    }

    /// The controller's answer for one AlterPartition item: `state` is the
    /// partition's committed state when accepted. A newer state of our own
    /// leadership is taken over and its history line staged.
    pub(crate) fn finish_alter(
        &mut self,
        tp: TopicPartition,
        code: ErrorCode,
        state: Option<PartitionLeadership>,
        now_ms: u64,
        retry_after_ms: u64,
        lines: &mut Stager<'_>,
    ) {
        let me = self.me;
        let Some(h) = self.held.get_mut(&tp) else {
            return;
        };
        if code != ErrorCode::None {
            h.isr.refused(tp, code, now_ms, retry_after_ms);
            return;
        }
        h.isr.accepted();
        let Some(s) = state else { return };
        // Only a newer state of our own leadership applies; anything else
        // arrives with the controller's next LeaderAndIsr.
        if s.leader_epoch != h.state.leader_epoch
            || s.leader != Some(me)
            || s.partition_epoch <= h.state.partition_epoch
        {
            return;
        }
        info!(%tp, partition_epoch = s.partition_epoch.0, isr = ?brokers_to_pb(&s.isr), "ISR change committed");
        h.state.partition_epoch = s.partition_epoch;
        h.state.isr = s.isr;
        h.state.replicas = s.replicas;
        h.state.adding = s.adding;
        h.state.removing = s.removing;
        h.isr.committed(me, &h.state.isr, now_ms);
        h.stage_line(HistoryEvent::AlterPartition, lines);
    }

    /// An AlterPartition got no per-item answer (transport error, wrong
    /// controller): let a round after `retry_at_ms` try again.
    pub(crate) fn release_alter(&mut self, tps: &[TopicPartition], retry_at_ms: u64) {
        for tp in tps {
            if let Some(h) = self.held.get_mut(tp) {
                h.isr.release(retry_at_ms);
            }
        }
    }

    /// Leader and follower counts: a scan of every partition, so published
    /// periodically (by the ISR manager) rather than after every request.
    pub(crate) fn publish_gauges(&self) {
        let (mut leaders, mut followers) = (0u64, 0u64);
        for h in self.held.values() {
            if h.leading {
                leaders += 1;
            } else if !h.stopped && h.state.replicas.contains(&self.me) {
                followers += 1;
            }
        }
        ::metrics::gauge!(metrics::LEADERS).set(leaders as f64);
        ::metrics::gauge!(metrics::FOLLOWERS).set(followers as f64);
    }

    /// Every held partition, in partition order.
    pub(crate) fn views(&self) -> Vec<LeadershipView> {
        self.held
            .values()
            .map(|h| LeadershipView {
                state: h.state.clone(),
                controller_epoch: h.controller_epoch,
                leading: h.leading,
                stopped: h.stopped,
            })
            .collect()
    }
}
