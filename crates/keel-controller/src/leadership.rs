//! Raft leadership = active controller. Watches openraft's metrics; once
//! this node leads and has applied its own term's first entry, it starts the
//! event loop stamped with controller epoch = term; when leadership (or the
//! term) changes it stops the loop at once.

use std::sync::Arc;
use std::time::Duration;

use openraft::ServerState;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::shared::{now_ms, ActiveHandle, Shared};

/// Capacity of the event queue; producers wait when it is full.
const EVENT_QUEUE: usize = 65_536;

struct Running {
    epoch: u64,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

fn resign(shared: &Shared, running: Running, why: &str) {
    if let Ok(mut g) = shared.active.write() {
        *g = None;
    }
    let _ = running.stop.send(());
    running.task.abort();
    metrics::gauge!("keel_controller_active").set(0.0);
    tracing::info!(
        node = shared.config.node_id,
        term = running.epoch,
        why,
        "resigned as active controller"
    );
    shared.events.push(
        running.epoch,
        0,
        format!("resigned as active controller: {why}"),
    );
}

/// Period of the Raft gauges' refresh.
const GAUGE_PERIOD: Duration = Duration::from_millis(100);

/// What one look at the Raft metrics decides leadership from.
struct Seen {
    /// This node leads: openraft says so and its stored vote is its own
    /// committed vote.
    leading: bool,
    /// Term of the stored vote.
    term: u64,
    /// Term of the entry applied last.
    last_applied_term: Option<u64>,
    /// Index of the entry applied last.
    last_applied_index: Option<u64>,
    /// Index of the last entry in this node's log.
    last_log_index: Option<u64>,
}

impl Seen {
    fn look(
        me: u64,
        server: &openraft::metrics::RaftServerMetrics<u64, keel_raft::KeelNode>,
        data: &openraft::metrics::RaftDataMetrics<u64>,
    ) -> Self {
        let vote = &server.vote;
        Self {
            leading: server.state == ServerState::Leader
                && server.current_leader == Some(me)
                && vote.is_committed()
                && vote.leader_id().voted_for() == Some(me),
            term: vote.leader_id().get_term(),
            last_applied_term: data.last_applied.map(|l| l.leader_id.term),
            last_applied_index: data.last_applied.map(|l| l.index),
            last_log_index: data.last_log.map(|l| l.index),
        }
    }
}

/// Whether some member of the membership is unbound and could be bound
/// now (it, or this node, has a known directory id).
fn needs_binding(shared: &Shared) -> bool {
    let answered = shared.peer_directories();
    let membership = shared.raft.metrics().borrow().membership_config.clone();
    let any = membership.membership().nodes().any(|(id, n)| {
        n.directory_id.is_none() && (*id == shared.config.node_id || answered.contains_key(id))
    });
    any
}

/// Term, log and per-peer lag gauges from one look at the Raft metrics.
fn export_gauges(m: &openraft::RaftMetrics<u64, keel_raft::KeelNode>) {
    metrics::gauge!("keel_controller_current_term").set(m.current_term as f64);
    if let Some(l) = m.last_applied {
        metrics::gauge!("keel_controller_last_applied_index").set(l.index as f64);
    }
    if let Some(i) = m.last_log_index {
        metrics::gauge!("keel_controller_last_log_index").set(i as f64);
    }
    let applied = m.last_applied.map_or(0, |l| l.index);
    match crate::console::committed_index(m) {
        Some(committed) => {
            // On the leader: the index a majority of voters holds.
            metrics::gauge!("keel_controller_last_committed_index").set(committed as f64);
            metrics::gauge!("keel_controller_last_applied_lag_entries")
                .set(committed.saturating_sub(applied) as f64);
        }
        None => {
            // Elsewhere the highest index known committed is the applied
            // one, and the leader-only lags read 0: a deposed leader must
            // not keep exporting (and alerting on) the last values it saw.
            metrics::gauge!("keel_controller_last_committed_index").set(applied as f64);
            metrics::gauge!("keel_controller_last_applied_lag_entries").set(0.0);
        }
    }
    match &m.replication {
        Some(rep) => {
            // Per-peer Raft lag (entries behind the leader's log end).
            let end = m.last_log_index.unwrap_or(0);
            for (peer, matched) in rep {
                let lag = end.saturating_sub(matched.map(|l| l.index).unwrap_or(0));
                metrics::gauge!("keel_controller_raft_peer_lag", "peer" => peer.to_string())
                    .set(lag as f64);
            }
        }
        None => {
            for (peer, _) in m.membership_config.membership().nodes() {
                if *peer != m.id {
                    metrics::gauge!("keel_controller_raft_peer_lag", "peer" => peer.to_string())
                        .set(0.0);
                }
            }
        }
    }
}

/// The active controller loop `r` if it still holds: resigns it (with
/// why) when this node no longer leads, has lost quorum contact, is in
/// another term, or the loop stopped on its own.
fn still_running(shared: &Arc<Shared>, r: Running, m: &Seen) -> Option<Running> {
    let quorum_lost = shared
        .quorum_ack_age_ms()
        .is_none_or(|ms| ms > shared.config.election_timeout_max_ms);
    if !m.leading {
        resign(shared, r, "lost raft leadership");
    } else if quorum_lost {
        // Check-quorum: a majority has not acknowledged this leader
        // for a whole election timeout; it may have a successor.
        resign(shared, r, "no quorum contact for an election timeout");
    } else if r.epoch != m.term {
        resign(shared, r, "term changed");
    } else if r.task.is_finished() {
        resign(shared, r, "event loop stopped");
    } else {
        return Some(r);
    }
    None
}

/// Makes this node the active controller of term `m.term`: fresh broker
/// sessions, the event loop started and published, counted and logged.
fn become_active(shared: &Arc<Shared>, m: &Seen) -> Running {
    let me = shared.config.node_id;
    let epoch = m.term;
    let image = shared.image();
    if let Ok(mut t) = shared.heartbeats.lock() {
        // Every known broker starts a fresh session before anyone
        // is fenced by this controller.
        t.reset_all(image.brokers().map(|b| (b.id, b.epoch)), now_ms());
    }
    // onControllerFailover, minus the ZooKeeper reads: the image is
    // already here. The loop opens a channel (full state) to every
    // broker; its first reconcile tick (2 s in) elects offline
    // partitions and resumes reassignments and deletions.
    let (tx, rx) = mpsc::channel(EVENT_QUEUE);
    let (stop_tx, stop_rx) = oneshot::channel();
    let task = tokio::spawn(crate::active::run(shared.clone(), epoch, rx, stop_rx));
    if let Ok(mut g) = shared.active.write() {
        *g = Some(ActiveHandle { epoch, tx });
    }
    metrics::gauge!("keel_controller_active").set(1.0);
    metrics::counter!("keel_controller_new_active_controllers_total").increment(1);
    shared.events.push(
        epoch,
        m.last_applied_index.unwrap_or(0),
        format!("node {me} became the active controller"),
    );
    tracing::info!(
        node = me,
        term = epoch,
        partitions = image.partition_count(),
        "became active controller"
    );
    Running {
        epoch,
        stop: stop_tx,
        task,
    }
}

/// On the `active` controller, finishes a membership change an earlier
/// leader left in its joint phase, and binds the directory id of each
/// voter that is not bound yet and has answered it (keel_raft::KeelNode),
/// one membership change (`binding`) at a time.
fn rebind_directories(shared: &Arc<Shared>, binding: &mut Option<JoinHandle<()>>, active: bool) {
    if binding.as_ref().is_none_or(|b| b.is_finished()) {
        *binding = None;
        let joint = keel_raft::in_joint_phase(
            shared
                .raft
                .metrics()
                .borrow()
                .membership_config
                .membership(),
        );
        if active && shared.lease_valid() && (joint || needs_binding(shared)) {
            let s = shared.clone();
            *binding = Some(tokio::spawn(async move {
                if let Err(e) = crate::quorum::bind_directories(&s).await {
                    tracing::info!(node = s.config.node_id, error = %e.message, "directory ids not bound yet");
                }
            }));
        }
    }
}

/// Runs until `shutdown` flips to true.
///
/// Wakes when the server-level metrics change (state, leader, vote), and
/// on applied entries only while it waits for its term's first one:
/// openraft publishes the full metrics several times per entry, and waking
/// on each would cost every node a task switch per change for nothing.
pub(crate) async fn watch_leadership(shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    let mut server = shared.raft.server_metrics();
    let mut data = shared.raft.data_metrics();
    let me = shared.config.node_id;
    let mut running: Option<Running> = None;
    // Every node says whether it is active, standbys from their start.
    metrics::gauge!("keel_controller_active").set(0.0);
    // A membership change binding voters' directory ids, while one runs.
    let mut binding: Option<JoinHandle<()>> = None;
    // Broker states as of the last tick, for the console's events.
    let mut brokers_seen = crate::console::BrokersSeen::default();
    // Also the period of the gauges, and of the re-check of a loop that may
    // have stopped on its own.
    let mut tick = tokio::time::interval(GAUGE_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let m = Seen::look(me, &server.borrow_and_update(), &data.borrow_and_update());
        if let Some(r) = running.take() {
            running = still_running(&shared, r, &m);
        }
        // The first entry of our term (openraft's blank entry) applied means
        // the image holds everything any earlier leader committed. Not
        // everything in the log, though, when this node restarted as the
        // leader of its stored term: the entries its previous run proposed
        // in this term follow that blank entry, and a loop deciding on an
        // image without them would propose what they already did (a
        // topic created twice: a record no node can replay). So the whole
        // log must be applied before the loop starts; until then this
        // node proposes nothing, so its log does not grow under it.
        let caught_up = m.last_applied_term == Some(m.term)
            && m.last_applied_index.unwrap_or(0) >= m.last_log_index.unwrap_or(0);
        // A leader acts only once a quorum acknowledged it in this term (a
        // node that restarts believes itself leader of its stored term).
        if running.is_none() && m.leading && caught_up && shared.lease_valid() {
            running = Some(become_active(&shared, &m));
        }
        rebind_directories(&shared, &mut binding, running.is_some());
        let awaiting_first_entry = running.is_none() && m.leading && !caught_up;
        // Caught up, waiting for a quorum's acknowledgement: look again soon.
        let awaiting_quorum = running.is_none() && m.leading && caught_up;
        tokio::select! {
            r = server.changed() => if r.is_err() { break },
            r = data.changed(), if awaiting_first_entry => if r.is_err() { break },
            _ = tokio::time::sleep(Duration::from_millis(10)), if awaiting_quorum => {}
            _ = shutdown.changed() => break,
            _ = tick.tick() => {
                export_gauges(&shared.raft.metrics().borrow());
                // The active controller records broker changes as it
                // commits them; a standby from its replayed image.
                brokers_seen.note(&shared, running.is_none());
            }
        }
    }
    if let Some(r) = running.take() {
        resign(&shared, r, "node shutting down");
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use openraft::{CommittedLeaderId, LogId, Membership, RaftMetrics, StoredMembership};

    use super::*;

    fn log_id(index: u64) -> Option<LogId<u64>> {
        Some(LogId::new(CommittedLeaderId::new(1, 1), index))
    }

    fn exported(m: &RaftMetrics<u64, keel_raft::KeelNode>) -> String {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || export_gauges(m));
        handle.render()
    }

    fn line<'a>(text: &'a str, prefix: &str) -> &'a str {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
    }

    /// Asserts the committed index, the applied lag and peer 3's lag that
    /// `text` exports.
    fn assert_figures(text: &str, [committed, applied_lag, peer_3_lag]: [u64; 3]) {
        for (name, value) in [
            ("keel_controller_last_committed_index", committed),
            ("keel_controller_last_applied_lag_entries", applied_lag),
            ("keel_controller_raft_peer_lag{peer=\"3\"}", peer_3_lag),
        ] {
            assert_eq!(line(text, name), format!("{name} {value}"));
        }
    }

    #[test]
    fn a_node_that_is_not_the_leader_exports_no_stale_leader_figures() {
        let members: BTreeMap<u64, keel_raft::KeelNode> = (1..=3)
            .map(|i| (i, keel_raft::KeelNode::new(format!("127.0.0.{i}:9093"))))
            .collect();
        let mut m = RaftMetrics::new_initial(1);
        m.membership_config = Arc::new(StoredMembership::new(
            log_id(1),
            Membership::new(vec![BTreeSet::from([1, 2, 3])], members),
        ));
        m.last_log_index = Some(20);
        m.last_applied = log_id(12);
        m.current_leader = Some(1);
        m.state = ServerState::Leader;
        m.replication = Some(BTreeMap::from([
            (1, log_id(20)),
            (2, log_id(15)),
            (3, log_id(4)),
        ]));
        let leader = exported(&m);
        assert_figures(&leader, [15, 3, 16]);

        // Deposed: no replication view; the same names read what this node
        // knows, not the last leader-time values.
        m.state = ServerState::Follower;
        m.current_leader = Some(2);
        m.replication = None;
        let follower = exported(&m);
        assert_figures(&follower, [12, 0, 0]);
        assert!(
            !follower.contains("peer=\"1\""),
            "no lag of itself:\n{follower}"
        );
    }
}
