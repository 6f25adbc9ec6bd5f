//! Lease heartbeats: the leader's "do you still follow me?", beside
//! replication.
//!
//! openraft sends heartbeats on the replication stream, one request at a
//! time per follower, so while a large append is in flight (a decision of
//! 100,000 records is many entries, each stored and flushed by the
//! follower) no heartbeat reaches that follower and no acknowledgement
//! comes back. The leader's quorum clock then stalls, check-quorum deposes
//! a healthy leader, and the followers' leases run out and they stand for
//! election: big decisions starved the lease.
//!
//! So the leader also sends each voter a [`LeaseRequest`] three times per
//! heartbeat interval, on a connection of its own
//! ([`crate::network::Network::lease`]), without waiting for the previous
//! answer ([`LeasePace`]).
//! A follower answers it at once from its published Raft state, without
//! waiting for its Raft core, on its listener's lane ([`keel_tls::lane`]:
//! a thread and runtime of its own, so no replay or decoding on its main
//! runtime delays the answer): it acknowledges ([`decide_lease`]) only if
//! it follows exactly the leadership the request names (same committed
//! vote).
//! An acknowledgement
//!
//! - on the leader counts toward its quorum clock as an answered heartbeat
//!   sent at the same moment would (`Raft::lease_acknowledged`, a Keel
//!   patch of openraft): check-quorum, `last_quorum_acked`, the active
//!   controller's lease;
//! - on the follower renews the lease it grants that leader
//!   ([`LeaseClock`]): it refuses pre-votes and does not stand for
//!   election while the leader keeps answering.
//!
//! A cut-off or paused leader sends nothing that arrives, so both clocks
//! stop exactly as before; a follower that voted for another leader stops
//! acknowledging the old one at once.
//!
//! The lease thread runs beside the leader's Raft core, not in it, so it
//! could go on renewing the followers' leases for a core that no longer
//! works (stuck in a storage call, or in a loop): nobody else could be
//! elected. So it renews only while the core answers a liveness probe
//! ([`CoreProbe`]): a request the core itself must handle, sent every
//! interval; once no probe sent within the last `core_silence` has been
//! answered, the requests stop, the followers' leases run out, and they
//! elect another leader.

use std::collections::HashMap;
use std::time::Duration;

use openraft::ServerState;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::network::Network;
use crate::{KeelRaft, NodeId};

pub use crate::grant::{decide_lease, LeaseClock, LeaseRequest, LeaseResponse};

/// Runs [`lease_heartbeats`] on a thread of its own with a runtime of its
/// own (and its own connections): the controller's runtime may have every
/// worker busy for a while (encoding a 100,000-partition answer, decoding
/// a large request), and the lease must not wait for them. Falls back to a
/// task on the current runtime if the thread cannot be started.
pub fn spawn_lease_heartbeats(
    raft: KeelRaft,
    network: Network,
    me: NodeId,
    stop: watch::Receiver<bool>,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let (raft2, network2, stop2) = (raft.clone(), network.clone(), stop.clone());
    let started = rt.map_err(|e| e.to_string()).and_then(|rt| {
        std::thread::Builder::new()
            .name(format!("keel-lease-{me}"))
            .spawn(move || rt.block_on(lease_heartbeats(raft2, network2, me, stop2)))
            .map_err(|e| e.to_string())
    });
    if let Err(e) = started {
        tracing::warn!(node = me, error = %e, "no thread for lease heartbeats; sending them from a task");
        tokio::spawn(lease_heartbeats(raft, network, me, stop));
    }
}

/// Runs until `stop` turns true: while this node leads, sends every other
/// voter lease requests at the [`LeasePace`] of its config and hands every
/// acknowledgement to Raft.
pub async fn lease_heartbeats(
    raft: KeelRaft,
    network: Network,
    me: NodeId,
    mut stop: watch::Receiver<bool>,
) {
    let config = raft.config().clone();
    let pace = LeasePace::of(&config);
    let mut in_flight: HashMap<NodeId, Vec<JoinHandle<()>>> = HashMap::new();
    let mut probe = CoreProbe::default();
    loop {
        tokio::select! {
            _ = stop.wait_for(|v| *v) => break,
            _ = tokio::time::sleep(pace.interval) => {}
        }
        // Read under the borrow; the voters only while leading.
        let (vote, members) = {
            let m = raft.metrics();
            let m = m.borrow();
            let leads = m.state == ServerState::Leader
                && m.vote.is_committed()
                && m.vote.leader_id().voted_for() == Some(me);
            if !leads {
                continue;
            }
            let membership = m.membership_config.membership();
            let members: Vec<(NodeId, crate::KeelNode)> = membership
                .voter_ids()
                .filter(|id| *id != me)
                .filter_map(|id| membership.get_node(&id).map(|n| (id, n.clone())))
                .collect();
            (m.vote, members)
        };
        probe.send(&raft);
        if !probe.answering(pace.core_silence) {
            probe.warn_once(me, pace.core_silence);
            continue;
        }
        in_flight.retain(|target, hs| {
            hs.retain(|h| !h.is_finished());
            members.iter().any(|(id, _)| id == target)
        });
        for (target, node) in members {
            let sent_to = in_flight.entry(target).or_default();
            if sent_to.len() >= pace.max_in_flight {
                continue;
            }
            let (raft, network) = (raft.clone(), network.clone());
            let req = LeaseRequest { vote };
            let timeout = pace.timeout;
            sent_to.push(tokio::spawn(async move {
                let sent = Instant::now();
                if let Ok(r) = network.lease(target, &node, &req, timeout).await {
                    record_answer(sent.elapsed());
                    if r.acked {
                        let _ = raft.lease_acknowledged(target, vote, sent).await;
                    }
                }
            }));
        }
    }
    for h in in_flight.into_values().flatten() {
        h.abort();
    }
    probe.stop();
}

/// Histogram of every lease answer's delay on the leader (request sent to
/// answer read), in seconds.
pub const LEASE_ANSWER_SECONDS: &str = "keel_raft_lease_answer_seconds";
/// Gauge of the slowest lease answer since the process started, in
/// seconds.
pub const LEASE_ANSWER_MAX_SECONDS: &str = "keel_raft_lease_answer_max_seconds";

fn record_answer(delay: Duration) {
    static SLOWEST_US: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    ::metrics::histogram!(LEASE_ANSWER_SECONDS).record(delay.as_secs_f64());
    let us = delay.as_micros() as u64;
    let before = SLOWEST_US.fetch_max(us, std::sync::atomic::Ordering::Relaxed);
    if us > before {
        ::metrics::gauge!(LEASE_ANSWER_MAX_SECONDS).set(us as f64 / 1e6);
    }
}

/// Whether the leader's Raft core still answers: one probe at a time (a
/// request the core handles itself, `Raft::with_raft_state`), and when the
/// last answered one was sent.
#[derive(Default)]
struct CoreProbe {
    /// When the latest answered probe was sent.
    answered: std::sync::Arc<std::sync::Mutex<Option<Instant>>>,
    in_flight: Option<JoinHandle<()>>,
    /// A silence was logged and the core has not answered since.
    warned: bool,
}

impl CoreProbe {
    /// Sends a probe unless one is still waiting for its answer.
    fn send(&mut self, raft: &KeelRaft) {
        if self.in_flight.as_ref().is_some_and(|h| !h.is_finished()) {
            return;
        }
        let (raft, answered) = (raft.clone(), self.answered.clone());
        self.in_flight = Some(tokio::spawn(async move {
            let sent = Instant::now();
            if raft.with_raft_state(|_| ()).await.is_ok() {
                let mut a = answered.lock().unwrap_or_else(|e| e.into_inner());
                *a = Some(a.map_or(sent, |t| t.max(sent)));
            }
        }));
    }

    /// True when a probe sent within `silence` was answered.
    fn answering(&mut self, silence: Duration) -> bool {
        let answered = *self.answered.lock().unwrap_or_else(|e| e.into_inner());
        let ok = answered.is_some_and(|t| t.elapsed() <= silence);
        if ok && self.warned {
            tracing::info!("the Raft core answers again; renewing leases");
            self.warned = false;
        }
        ok
    }

    fn warn_once(&mut self, me: NodeId, silence: Duration) {
        // A new leadership waits for its first answer: not news.
        let ever = self
            .answered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some();
        if ever && !self.warned {
            tracing::warn!(
                node = me,
                silence_ms = silence.as_millis() as u64,
                "the Raft core has not answered a probe; lease renewals paused so that another node can lead"
            );
            self.warned = true;
        }
    }

    fn stop(&mut self) {
        if let Some(h) = self.in_flight.take() {
            h.abort();
        }
    }
}

/// How often a leader asks each voter, how long it waits for an answer,
/// and how many requests may wait at once.
///
/// A request every third of a heartbeat interval, each answer awaited for
/// the whole lease (`election_timeout_max`: an acknowledgement counts from
/// its request's sending, so a later one cannot keep the leader), and a new
/// request sent whether or not the last one was answered. A follower busy
/// for a while (a 100,000-partition append on a loaded host) then answers
/// all of them when it gets to them, and the quorum clock's age stays under
/// one answer's delay plus one interval; with one request at a time, it
/// was two delays plus an interval, and answers of 150 ms deposed the
/// leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeasePace {
    /// Between two requests to one voter.
    pub interval: Duration,
    /// An answer's deadline.
    pub timeout: Duration,
    /// Requests awaiting an answer, per voter.
    pub max_in_flight: usize,
    /// How long the leader's Raft core may leave its liveness probes
    /// unanswered before the leader stops renewing leases: the shortest
    /// election timeout, so that a wedged core is replaced within about
    /// two election timeouts while a busy one keeps its leadership.
    pub core_silence: Duration,
}

impl LeasePace {
    /// The pace for `config`.
    pub fn of(config: &openraft::Config) -> Self {
        let interval = Duration::from_millis((config.heartbeat_interval / 3).max(1));
        let timeout = Duration::from_millis(config.election_timeout_max.max(1));
        let max_in_flight = (timeout.as_millis() / interval.as_millis()).max(1) as usize + 1;
        Self {
            interval,
            timeout,
            max_in_flight,
            core_silence: Duration::from_millis(config.election_timeout_min.max(1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::Vote;

    fn committed(term: u64, leader: NodeId) -> Vote<NodeId> {
        Vote::new_committed(term, leader)
    }

    #[test]
    fn a_follower_acknowledges_only_the_leadership_it_follows() {
        let v = committed(5, 1);
        assert!(decide_lease(2, ServerState::Follower, &v, &v));
        assert!(decide_lease(2, ServerState::Learner, &v, &v));
        // Another term, another leader, or an uncommitted vote: no.
        assert!(!decide_lease(
            2,
            ServerState::Follower,
            &committed(6, 1),
            &v
        ));
        assert!(!decide_lease(
            2,
            ServerState::Follower,
            &committed(5, 3),
            &v
        ));
        let candidate = Vote::new(5, 1);
        assert!(!decide_lease(
            2,
            ServerState::Follower,
            &candidate,
            &candidate
        ));
        // A candidate, a leader, or the leader itself: no.
        assert!(!decide_lease(2, ServerState::Candidate, &v, &v));
        assert!(!decide_lease(2, ServerState::Leader, &v, &v));
        assert!(!decide_lease(1, ServerState::Follower, &v, &v));
    }

    #[test]
    fn a_leader_asks_three_times_a_heartbeat_and_waits_a_lease_for_each_answer() {
        let c = crate::default_config("t");
        let pace = LeasePace::of(&c);
        assert_eq!(pace.interval, Duration::from_millis(50));
        assert_eq!(pace.timeout, Duration::from_millis(c.election_timeout_max));
        // Enough requests waiting to cover a whole lease of silence: a
        // request goes every interval until the first answer comes back.
        assert_eq!(pace.max_in_flight, 10);
        assert!(pace.interval * (pace.max_in_flight as u32 - 1) >= pace.timeout);
        // A follower answering within half a lease keeps the quorum
        // clock younger than the lease (one answer's delay + one interval).
        let delay = Duration::from_millis(c.election_timeout_max / 2);
        assert!(delay + pace.interval < Duration::from_millis(c.election_timeout_max));
        // Degenerate settings still send.
        let tiny = openraft::Config {
            heartbeat_interval: 1,
            election_timeout_max: 0,
            ..c
        };
        let p = LeasePace::of(&tiny);
        assert_eq!(p.interval, Duration::from_millis(1));
        assert!(p.max_in_flight >= 1);
    }

    #[test]
    fn the_clock_keeps_the_latest_acknowledgement_of_one_leadership() {
        let clock = LeaseClock::default();
        let v = committed(3, 1);
        let t0 = Instant::now();
        assert_eq!(clock.heard(&v), None);
        clock.record(v, t0 + Duration::from_millis(10));
        clock.record(v, t0);
        assert_eq!(clock.heard(&v), Some(t0 + Duration::from_millis(10)));
        // Another leadership's contact is not this one's.
        assert_eq!(clock.heard(&committed(4, 2)), None);
        clock.record(committed(4, 2), t0);
        assert_eq!(clock.heard(&v), None);
        // The later of openraft's contact and the clock.
        let w = committed(4, 2);
        assert_eq!(clock.last_contact(&w, None), Some(t0));
        let later = t0 + Duration::from_millis(5);
        assert_eq!(clock.last_contact(&w, Some(later)), Some(later));
        assert_eq!(clock.last_contact(&v, Some(t0)), Some(t0));
    }
}
