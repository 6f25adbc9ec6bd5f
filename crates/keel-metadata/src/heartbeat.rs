//! Broker sessions as the active controller sees them.
//!
//! Soft state: it lives only in the active controller's memory, is never
//! written to the log, and is rebuilt on failover with a fresh session for
//! every registered broker ([`HeartbeatTracker::reset_all`]). Time comes in
//! as `now_ms`; the tracker never reads a clock.
//!
//! A session started or renewed at `t` is live while `now_ms < t + timeout`
//! and has expired from `t + timeout` on.

use std::collections::BTreeMap;

use crate::ids::{BrokerEpoch, BrokerId};

/// One broker's session.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Session {
    /// The registration epoch that last heartbeated.
    epoch: BrokerEpoch,
    /// When the session was last renewed.
    last_contact_ms: u64,
}

/// Tracks the last heartbeat of each broker and says whose session expired.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatTracker {
    /// How long a session lasts without a heartbeat.
    session_timeout_ms: u64,
    /// Ordered, so every scan (and so every fence order) is deterministic.
    sessions: BTreeMap<BrokerId, Session>,
}

impl HeartbeatTracker {
    pub fn new(session_timeout_ms: u64) -> Self {
        Self {
            session_timeout_ms,
            sessions: BTreeMap::new(),
        }
    }

    pub fn session_timeout_ms(&self) -> u64 {
        self.session_timeout_ms
    }

    /// Renews `broker`'s session at `now_ms`. A newer epoch (a new
    /// registration) replaces the session; an older one is a stale process
    /// and is ignored. Contact time never moves backwards.
    pub fn touch(&mut self, broker: BrokerId, epoch: BrokerEpoch, now_ms: u64) {
        match self.sessions.get_mut(&broker) {
            Some(s) if epoch < s.epoch => {}
            Some(s) if epoch == s.epoch => s.last_contact_ms = s.last_contact_ms.max(now_ms),
            _ => {
                self.sessions.insert(
                    broker,
                    Session {
                        epoch,
                        last_contact_ms: now_ms,
                    },
                );
            }
        }
    }

    /// When `broker` last renewed its session, if it has one.
    pub fn last_contact_ms(&self, broker: BrokerId) -> Option<u64> {
        self.sessions.get(&broker).map(|s| s.last_contact_ms)
    }

    /// The epoch of `broker`'s current session, if it has one.
    pub fn epoch(&self, broker: BrokerId) -> Option<BrokerEpoch> {
        self.sessions.get(&broker).map(|s| s.epoch)
    }

    /// True while `broker` has a session that has not expired at `now_ms`.
    pub fn session_live(&self, broker: BrokerId, now_ms: u64) -> bool {
        self.sessions
            .get(&broker)
            .is_some_and(|s| now_ms < self.expires_at_ms(s))
    }

    /// Failover: forgets every session and gives each listed broker a fresh
    /// one starting at `now_ms`, so nobody is fenced for the gap in which no
    /// controller was answering heartbeats.
    pub fn reset_all(
        &mut self,
        brokers: impl IntoIterator<Item = (BrokerId, BrokerEpoch)>,
        now_ms: u64,
    ) {
        self.sessions = brokers
            .into_iter()
            .map(|(broker, epoch)| {
                (
                    broker,
                    Session {
                        epoch,
                        last_contact_ms: now_ms,
                    },
                )
            })
            .collect();
    }

    /// Drops `broker`'s session (fenced, unregistered or shut down).
    pub fn remove(&mut self, broker: BrokerId) {
        self.sessions.remove(&broker);
    }

    /// The broker whose session expired longest ago (lowest id on ties).
    /// The controller fences one broker per decision, so each fence sees
    /// the effect of the previous one.
    pub fn next_expired(&self, now_ms: u64) -> Option<BrokerId> {
        self.expired_sessions(now_ms)
            .min_by_key(|(id, s)| (s.last_contact_ms, *id))
            .map(|(id, _)| id)
    }

    /// Every broker whose session has expired, the longest-expired first.
    pub fn expired(&self, now_ms: u64) -> Vec<BrokerId> {
        let mut v: Vec<(u64, BrokerId)> = self
            .expired_sessions(now_ms)
            .map(|(id, s)| (s.last_contact_ms, id))
            .collect();
        v.sort_unstable();
        v.into_iter().map(|(_, id)| id).collect()
    }

    /// Number of tracked sessions, live or expired.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    fn expires_at_ms(&self, s: &Session) -> u64 {
        s.last_contact_ms.saturating_add(self.session_timeout_ms)
    }

    fn expired_sessions(&self, now_ms: u64) -> impl Iterator<Item = (BrokerId, &Session)> + '_ {
        self.sessions
            .iter()
            .filter(move |(_, s)| now_ms >= self.expires_at_ms(s))
            .map(|(id, s)| (*id, s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT_MS: u64 = 9_000;

    fn b(id: u32) -> BrokerId {
        BrokerId(id)
    }

    #[test]
    fn session_is_live_until_exactly_the_timeout() {
        let mut t = HeartbeatTracker::new(TIMEOUT_MS);
        t.touch(b(1), BrokerEpoch(5), 1_000);
        assert_eq!(t.last_contact_ms(b(1)), Some(1_000));
        assert!(t.session_live(b(1), 1_000));
        assert!(t.session_live(b(1), 9_999));
        assert!(!t.session_live(b(1), 10_000));
        assert_eq!(t.next_expired(9_999), None);
        assert_eq!(t.next_expired(10_000), Some(b(1)));
    }

    #[test]
    fn unknown_broker_has_no_session() {
        let t = HeartbeatTracker::new(TIMEOUT_MS);
        assert_eq!(t.last_contact_ms(b(7)), None);
        assert!(!t.session_live(b(7), 0));
        assert!(t.expired(u64::MAX).is_empty());
        assert!(t.is_empty());
    }

    #[test]
    fn heartbeat_renews_the_session() {
        let mut t = HeartbeatTracker::new(TIMEOUT_MS);
        t.touch(b(1), BrokerEpoch(5), 0);
        t.touch(b(1), BrokerEpoch(5), 8_000);
        assert!(t.session_live(b(1), 16_999));
        assert!(!t.session_live(b(1), 17_000));
    }

    #[test]
    fn contact_time_never_moves_backwards() {
        let mut t = HeartbeatTracker::new(TIMEOUT_MS);
        t.touch(b(1), BrokerEpoch(5), 5_000);
        t.touch(b(1), BrokerEpoch(5), 4_000);
        assert_eq!(t.last_contact_ms(b(1)), Some(5_000));
    }

    #[test]
    fn stale_epoch_heartbeat_does_not_renew() {
        let mut t = HeartbeatTracker::new(TIMEOUT_MS);
        t.touch(b(1), BrokerEpoch(10), 0);
        t.touch(b(1), BrokerEpoch(3), 8_000);
        assert_eq!(t.last_contact_ms(b(1)), Some(0));
        assert_eq!(t.epoch(b(1)), Some(BrokerEpoch(10)));
    }

    #[test]
    fn new_registration_replaces_the_session() {
        let mut t = HeartbeatTracker::new(TIMEOUT_MS);
        t.touch(b(1), BrokerEpoch(3), 9_000);
        // A re-registered broker may report an earlier clock reading than
        // the old incarnation's last contact: the new session starts anew.
        t.touch(b(1), BrokerEpoch(10), 8_000);
        assert_eq!(t.epoch(b(1)), Some(BrokerEpoch(10)));
        assert_eq!(t.last_contact_ms(b(1)), Some(8_000));
    }

    #[test]
    fn next_expired_is_the_longest_expired_broker() {
        let mut t = HeartbeatTracker::new(TIMEOUT_MS);
        t.touch(b(1), BrokerEpoch(1), 3_000);
        t.touch(b(2), BrokerEpoch(2), 1_000);
        t.touch(b(3), BrokerEpoch(3), 2_000);
        t.touch(b(4), BrokerEpoch(4), 50_000);
        assert_eq!(t.next_expired(20_000), Some(b(2)));
        assert_eq!(t.expired(20_000), vec![b(2), b(3), b(1)]);
        // Fencing one at a time: after removing it, the next one comes up.
        t.remove(b(2));
        assert_eq!(t.next_expired(20_000), Some(b(3)));
        t.remove(b(3));
        t.remove(b(1));
        assert_eq!(t.next_expired(20_000), None);
        assert!(t.session_live(b(4), 20_000));
    }

    #[test]
    fn ties_break_on_lowest_broker_id() {
        let mut t = HeartbeatTracker::new(TIMEOUT_MS);
        t.touch(b(9), BrokerEpoch(1), 0);
        t.touch(b(4), BrokerEpoch(2), 0);
        t.touch(b(6), BrokerEpoch(3), 0);
        assert_eq!(t.next_expired(TIMEOUT_MS), Some(b(4)));
        assert_eq!(t.expired(TIMEOUT_MS), vec![b(4), b(6), b(9)]);
    }

    #[test]
    fn next_expired_matches_head_of_expired() {
        let mut t = HeartbeatTracker::new(100);
        for i in 0..50u32 {
            // A scrambled but deterministic contact time per broker.
            t.touch(b(i), BrokerEpoch(u64::from(i)), u64::from((i * 37) % 61));
        }
        for now in [0, 100, 120, 140, 160, 200] {
            assert_eq!(t.next_expired(now), t.expired(now).first().copied());
        }
    }

    #[test]
    fn failover_gives_every_known_broker_a_fresh_session() {
        let mut t = HeartbeatTracker::new(TIMEOUT_MS);
        t.touch(b(1), BrokerEpoch(1), 0);
        t.touch(b(99), BrokerEpoch(7), 0);
        let now = 1_000_000;
        assert_eq!(t.expired(now), vec![b(1), b(99)]);
        t.reset_all([(b(1), BrokerEpoch(1)), (b(2), BrokerEpoch(4))], now);
        assert!(t.expired(now).is_empty());
        assert!(t.session_live(b(1), now + TIMEOUT_MS - 1));
        assert!(t.session_live(b(2), now + TIMEOUT_MS - 1));
        // A broker the image no longer knows is forgotten.
        assert_eq!(t.last_contact_ms(b(99)), None);
        assert_eq!(t.len(), 2);
        assert_eq!(t.expired(now + TIMEOUT_MS), vec![b(1), b(2)]);
    }

    #[test]
    fn removed_broker_is_never_reported() {
        let mut t = HeartbeatTracker::new(TIMEOUT_MS);
        t.touch(b(1), BrokerEpoch(1), 0);
        t.remove(b(1));
        assert_eq!(t.next_expired(u64::MAX), None);
        assert!(!t.session_live(b(1), 0));
    }

    #[test]
    fn huge_contact_time_does_not_overflow() {
        let mut t = HeartbeatTracker::new(TIMEOUT_MS);
        t.touch(b(1), BrokerEpoch(1), u64::MAX - 1);
        assert!(t.session_live(b(1), u64::MAX - 1));
        assert_eq!(t.next_expired(u64::MAX - 1), None);
    }
}
