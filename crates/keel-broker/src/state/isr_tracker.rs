//! ISR tracking for one partition this broker leads: when each follower
//! last fetched, the ISR change that implies (drop the silent, add the
//! returning), and whether an AlterPartition asking for it may be sent now.
//! The controller checks the leader's epochs, so a stale leader's request
//! can never change an ISR; this only decides when to ask.

use std::collections::BTreeMap;

use keel_metadata::{BrokerId, ErrorCode, PartitionLeadership, TopicPartition};
use tracing::warn;

/// Whether the leader may send an AlterPartition for a partition now.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
enum AlterGate {
    #[default]
    Open,
    /// One is outstanding; its answer decides.
    InFlight,
    /// The controller refused our epochs; only its next LeaderAndIsr helps.
    WaitForController,
    /// Refused for another reason; try again after this time (ms).
    RetryAt(u64),
}

/// Follower progress and the AlterPartition gate of one partition. Empty
/// (and open) while following.
#[derive(Clone, Debug, Default)]
pub(crate) struct IsrTracker {
    /// Leader only: last accepted fetch per follower (monotonic ms).
    last_fetch_ms: BTreeMap<BrokerId, u64>,
    /// Whether an AlterPartition may be sent now.
    alter: AlterGate,
}

impl IsrTracker {
    /// The tracker of a partition this broker now leads with `isr`.
    /// `continuing`: the tracker of the same leadership (same leader
    /// epoch), whose fetch times still count. Every other ISR member gets a
    /// full lag window to show up.
    pub(crate) fn leading(
        me: BrokerId,
        isr: &[BrokerId],
        continuing: Option<&IsrTracker>,
        now_ms: u64,
    ) -> Self {
        let mut t = IsrTracker {
            last_fetch_ms: continuing
                .map(|c| c.last_fetch_ms.clone())
                .unwrap_or_default(),
            alter: AlterGate::Open,
        };
        t.give_lag_window(me, isr, now_ms);
        t
    }

    /// Keeps `prev`'s AlterPartition gate: the state it was opened or
    /// closed for (same leader and partition epochs) still holds.
    pub(crate) fn keep_gate_of(&mut self, prev: &IsrTracker) {
        self.alter = prev.alter;
    }

    /// Forgets everything: the broker stopped leading.
    pub(crate) fn reset(&mut self) {
        self.last_fetch_ms.clear();
        self.alter = AlterGate::Open;
    }

    /// ISR members not heard from yet get a full lag window from now.
    fn give_lag_window(&mut self, me: BrokerId, isr: &[BrokerId], now_ms: u64) {
        for b in isr {
            if *b != me {
                self.last_fetch_ms.entry(*b).or_insert(now_ms);
            }
        }
    }

    /// A fetch the leader accepted.
    pub(crate) fn fetched(&mut self, follower: BrokerId, now_ms: u64) {
        self.last_fetch_ms.insert(follower, now_ms);
    }

    /// The ISR the leader of `state` should ask for now, if any; marks it
    /// in flight. Shrink: ISR members silent for longer than `lag_ms`.
    /// Expand: assigned replicas outside the ISR that fetched within
    /// `lag_ms` and that `eligible` allows (not fenced, not shutting down).
    pub(crate) fn plan(
        &mut self,
        me: BrokerId,
        state: &PartitionLeadership,
        now_ms: u64,
        lag_ms: u64,
        eligible: impl Fn(BrokerId) -> bool,
    ) -> Option<Vec<BrokerId>> {
        match self.alter {
            AlterGate::Open => {}
            AlterGate::RetryAt(t) if t <= now_ms => {}
            _ => return None,
        }
        let fresh = |b: &BrokerId| {
            self.last_fetch_ms
                .get(b)
                .is_some_and(|t| now_ms.saturating_sub(*t) <= lag_ms)
        };
        // Shrink first and alone, so a refused expansion (e.g. a fenced
        // candidate) can never hold back removing a laggard.
        let shrunk: Vec<BrokerId> = state
            .isr
            .iter()
            .copied()
            .filter(|b| *b == me || fresh(b))
            .collect();
        let new_isr = if shrunk.len() != state.isr.len() {
            shrunk
        } else {
            let joining: Vec<BrokerId> = state
                .replicas
                .iter()
                .copied()
                .filter(|b| *b != me && !state.isr.contains(b) && fresh(b) && eligible(*b))
                .collect();
            if joining.is_empty() {
                return None;
            }
            let mut isr = state.isr.clone();
            isr.extend(joining);
            isr
        };
        self.alter = AlterGate::InFlight;
        Some(new_isr)
    }

    /// The controller accepted the AlterPartition.
    pub(crate) fn accepted(&mut self) {
        self.alter = AlterGate::Open;
    }

    /// The controller committed an ISR change of ours: members not heard
    /// from yet get a full lag window.
    pub(crate) fn committed(&mut self, me: BrokerId, isr: &[BrokerId], now_ms: u64) {
        self.give_lag_window(me, isr, now_ms);
    }

    /// The controller refused the AlterPartition with `code`.
    pub(crate) fn refused(
        &mut self,
        tp: TopicPartition,
        code: ErrorCode,
        now_ms: u64,
        retry_after_ms: u64,
    ) {
        match code {
            ErrorCode::InvalidPartitionEpoch | ErrorCode::FencedLeaderEpoch => {
                warn!(%tp, %code, "ISR change refused; waiting for the controller's LeaderAndIsr");
                self.alter = AlterGate::WaitForController;
            }
            other => {
                warn!(%tp, code = %other, "ISR change refused; will retry");
                self.alter = AlterGate::RetryAt(now_ms + retry_after_ms);
            }
        }
    }

    /// An AlterPartition got no answer for this partition: the next round
    /// after `retry_at_ms` may try again.
    pub(crate) fn release(&mut self, retry_at_ms: u64) {
        if self.alter == AlterGate::InFlight {
            self.alter = AlterGate::RetryAt(retry_at_ms);
        }
    }
}
