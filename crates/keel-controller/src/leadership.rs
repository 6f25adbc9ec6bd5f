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
}

/// Least time between two refreshes of the Raft gauges.
const GAUGE_PERIOD: Duration = Duration::from_millis(100);

/// What one look at the Raft metrics decides leadership from.
struct Seen {
    state: ServerState,
    current_leader: Option<u64>,
    current_term: u64,
    /// Term of the entry applied last.
    last_applied_term: Option<u64>,
}

/// Term, log and per-peer lag gauges from one look at the Raft metrics.
fn export_gauges(m: &openraft::RaftMetrics<u64, openraft::BasicNode>) {
    metrics::gauge!("keel_controller_current_term").set(m.current_term as f64);
    if let Some(l) = m.last_applied {
        metrics::gauge!("keel_controller_last_applied_index").set(l.index as f64);
    }
    if let Some(i) = m.last_log_index {
        metrics::gauge!("keel_controller_last_log_index").set(i as f64);
    }
    if let Some(rep) = &m.replication {
        // Per-peer Raft lag (entries behind the leader's log end).
        let end = m.last_log_index.unwrap_or(0);
        for (peer, matched) in rep {
            let lag = end.saturating_sub(matched.map(|l| l.index).unwrap_or(0));
            metrics::gauge!("keel_controller_raft_peer_lag", "peer" => peer.to_string())
                .set(lag as f64);
        }
    }
}

/// Runs until `shutdown` flips to true.
pub(crate) async fn watch_leadership(shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    let mut metrics = shared.raft.metrics();
    let me = shared.config.node_id;
    let mut running: Option<Running> = None;
    // openraft publishes metrics several times per entry: the gauges are
    // refreshed at most this often, and only the fields the leadership
    // decision needs are read on every change.
    let mut gauges_at: Option<std::time::Instant> = None;
    loop {
        let m = {
            let m = metrics.borrow_and_update();
            if gauges_at.is_none_or(|t| t.elapsed() >= GAUGE_PERIOD) {
                gauges_at = Some(std::time::Instant::now());
                export_gauges(&m);
            }
            Seen {
                state: m.state,
                current_leader: m.current_leader,
                current_term: m.current_term,
                last_applied_term: m.last_applied.map(|l| l.leader_id.term),
            }
        };
        let leading = m.state == ServerState::Leader && m.current_leader == Some(me);
        if let Some(r) = running.take() {
            if !leading {
                resign(&shared, r, "lost raft leadership");
            } else if r.epoch != m.current_term {
                resign(&shared, r, "term changed");
            } else if r.task.is_finished() {
                resign(&shared, r, "event loop stopped");
            } else {
                running = Some(r);
            }
        }
        // The first entry of our term (openraft's blank entry) applied means
        // the image holds everything any earlier leader committed.
        let caught_up = m.last_applied_term == Some(m.current_term);
        if running.is_none() && leading && caught_up {
            let epoch = m.current_term;
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
            shared.ticks.store(0, std::sync::atomic::Ordering::Relaxed);
            let (tx, rx) = mpsc::channel(EVENT_QUEUE);
            let (stop_tx, stop_rx) = oneshot::channel();
            let task = tokio::spawn(crate::active::run(
                shared.clone(),
                epoch,
                rx,
                tx.clone(),
                stop_rx,
            ));
            if let Ok(mut g) = shared.active.write() {
                *g = Some(ActiveHandle { epoch, tx });
            }
            metrics::gauge!("keel_controller_active").set(1.0);
            metrics::counter!("keel_controller_new_active_controllers_total").increment(1);
            tracing::info!(
                node = me,
                term = epoch,
                partitions = image.partition_count(),
                "became active controller"
            );
            running = Some(Running {
                epoch,
                stop: stop_tx,
                task,
            });
        }
        tokio::select! {
            r = metrics.changed() => if r.is_err() { break },
            _ = shutdown.changed() => break,
            // Re-check now and then: the loop may stop on its own.
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
    if let Some(r) = running.take() {
        resign(&shared, r, "node shutting down");
    }
}
