//! The controller's HTTP endpoint (`--http-listen`): Prometheus metrics at
//! `/metrics`, a read-only web console at `/` and `/console`, and the JSON
//! it polls at `/api/cluster`.
//!
//! Every controller serves it, standbys too: the page says which role the
//! serving node has and links to the active controller's console. What a
//! standby cannot know (broker heartbeats are soft state of the active
//! controller) is shown as unknown, never guessed.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use keel_metadata::{MetadataImage, TopicId};
use openraft::ServerState;
use serde::Serialize;
use tokio::sync::watch;

use crate::shared::{now_ms, Shared};

/// Events the console keeps (the oldest is dropped first).
const EVENTS_KEPT: usize = 200;
/// Topics listed in one answer; the rest are counted, not listed.
const TOPICS_LISTED: usize = 2_000;
/// Partitions listed in one answer (unhealthy ones first).
const PARTITIONS_LISTED: usize = 1_000;
/// Reassigning partitions listed in one answer.
const REASSIGNMENTS_LISTED: usize = 500;

/// The page itself: static, polls `/api/cluster`.
const PAGE: &str = include_str!("console.html");

/// Renders the metrics recorder's text (the caller owns the recorder).
pub type RenderMetrics = Arc<dyn Fn() -> String + Send + Sync>;

/// One thing the controller did, as an operator reads it.
#[derive(Clone, Debug, Serialize)]
pub struct Event {
    /// Wall-clock time it was seen, in ms since the Unix epoch (display
    /// only; nothing is decided from it).
    pub at_unix_ms: u64,
    /// Controller epoch (Raft term) it happened under.
    pub term: u64,
    /// Log index of the entry that committed it (0 when not an entry).
    pub index: u64,
    pub text: String,
}

/// The last [`EVENTS_KEPT`] events of this node, newest last.
#[derive(Default)]
pub struct Events(Mutex<VecDeque<Event>>);

impl Events {
    pub fn push(&self, term: u64, index: u64, text: String) {
        let at_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        if let Ok(mut q) = self.0.lock() {
            if q.len() == EVENTS_KEPT {
                q.pop_front();
            }
            q.push_back(Event {
                at_unix_ms,
                term,
                index,
                text,
            });
        }
    }

    /// The kept events, newest first.
    pub fn newest_first(&self) -> Vec<Event> {
        self.0
            .lock()
            .map(|q| q.iter().rev().cloned().collect())
            .unwrap_or_default()
    }
}

/// Each broker's (epoch, fenced, shutting down) as last seen in the
/// applied image: how a standby, which decides nothing, learns what to
/// show among its events.
#[derive(Default)]
pub struct BrokersSeen {
    seen: Option<std::collections::BTreeMap<u32, (u64, bool, bool)>>,
}

impl BrokersSeen {
    /// Compares the applied image with the last look and, when `record`,
    /// pushes one event per broker change. The first look only remembers.
    pub fn note(&mut self, shared: &Shared, record: bool) {
        let applied = shared.applied();
        let now: std::collections::BTreeMap<u32, (u64, bool, bool)> = applied
            .image
            .brokers()
            .map(|b| (b.id.0, (b.epoch.0, b.fenced, b.shutting_down)))
            .collect();
        let Some(before) = self.seen.replace(now.clone()) else {
            return;
        };
        if !record || before == now {
            return;
        }
        let term = shared.raft.metrics().borrow().current_term;
        let index = applied.last_applied.map_or(0, |l| l.index);
        for (id, (epoch, fenced, shutting_down)) in &now {
            let what = match before.get(id) {
                None => "broker registered (fenced until caught up)",
                Some((e, _, _)) if e != epoch => "broker registered again (new epoch)",
                Some((_, was_fenced, _)) if *was_fenced && !*fenced => "broker unfenced",
                Some((_, was_fenced, _)) if !*was_fenced && *fenced => "broker fenced",
                Some((_, _, was_stopping)) if !*was_stopping && *shutting_down => {
                    "broker in controlled shutdown"
                }
                _ => continue,
            };
            shared
                .events
                .push(term, index, format!("{what}: broker {id} (epoch {epoch})"));
        }
        for id in before.keys().filter(|id| !now.contains_key(id)) {
            shared
                .events
                .push(term, index, format!("broker unregistered: broker {id}"));
        }
    }
}

/// A topic's `min.insync.replicas`: its own, else the cluster default,
/// else 1.
pub fn min_isr(image: &MetadataImage, topic: TopicId) -> usize {
    image
        .topic(topic)
        .map_or(1, |t| image.min_insync_replicas(t))
}

/// The index a majority of voters holds, on the leader (which alone knows
/// its followers' positions); `None` elsewhere.
pub fn committed_index(m: &openraft::RaftMetrics<u64, keel_raft::KeelNode>) -> Option<u64> {
    let rep = m.replication.as_ref()?;
    let mut matched: Vec<u64> = m
        .membership_config
        .membership()
        .voter_ids()
        .map(|id| {
            if id == m.id {
                m.last_log_index.unwrap_or(0)
            } else {
                rep.get(&id).copied().flatten().map_or(0, |l| l.index)
            }
        })
        .collect();
    if matched.is_empty() {
        return None;
    }
    matched.sort_unstable_by(|a, b| b.cmp(a));
    Some(matched[matched.len() / 2])
}

/// What `/api/cluster` answers: this node's view of the cluster.
#[derive(Debug, Serialize)]
pub struct ClusterView {
    pub cluster_id: String,
    /// The node that answered.
    pub node_id: u64,
    /// `active`, `standby` (follows a leader), `candidate`, `learner`, or
    /// `leader-without-lease` (leads in Raft but may not act).
    pub role: &'static str,
    /// The active controller as far as this node can tell.
    pub active_controller: Option<ActiveController>,
    pub quorum: Quorum,
    pub health: Health,
    pub brokers: Vec<Broker>,
    pub topics: Vec<Topic>,
    /// Topics not listed (more than the listing limit).
    pub topics_not_listed: usize,
    /// Partitions, unhealthy ones first, up to the listing limit.
    pub partitions: Vec<Partition>,
    pub partitions_not_listed: usize,
    pub reassignments: Vec<Partition>,
    pub reassignments_not_listed: usize,
    pub deletions: Vec<Deletion>,
    /// Newest first.
    pub events: Vec<Event>,
    /// Wall-clock time of this answer, ms since the Unix epoch.
    pub at_unix_ms: u64,
}

#[derive(Debug, Serialize)]
pub struct ActiveController {
    pub id: u64,
    /// Its Raft/admin address.
    pub address: String,
    /// Its console, assuming its HTTP port sits at the same offset from
    /// its Raft port as this node's (same ports on every host, as the
    /// deploy files and `keel dev` set them up).
    pub console_url: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Quorum {
    pub leader: Option<u64>,
    pub term: u64,
    pub last_log_index: u64,
    pub last_applied_index: u64,
    /// Known on the leader only.
    pub committed_index: Option<u64>,
    pub voters: Vec<Voter>,
}

#[derive(Debug, Serialize)]
pub struct Voter {
    pub id: u64,
    pub address: String,
    /// Last index the leader knows this voter holds (leader only).
    pub matched_index: Option<u64>,
    /// Entries behind the leader's log end (leader only).
    pub lag: Option<u64>,
    /// Milliseconds since it last answered this node's Raft RPCs.
    pub last_contact_ms: Option<u64>,
}

#[derive(Debug, Default, Serialize)]
pub struct Health {
    pub brokers: usize,
    pub fenced_brokers: usize,
    pub topics: usize,
    pub partitions: usize,
    pub offline_partitions: usize,
    pub under_replicated_partitions: usize,
    pub under_min_isr_partitions: usize,
    pub reassigning_partitions: usize,
    pub topics_being_deleted: usize,
}

#[derive(Debug, Serialize)]
pub struct Broker {
    pub id: u32,
    pub epoch: u64,
    /// `active`, `fenced`, or `shutting-down`.
    pub state: &'static str,
    pub address: String,
    pub rack: Option<String>,
    pub offline_log_dirs: Vec<String>,
    /// Milliseconds since its last heartbeat: known on the active
    /// controller only.
    pub last_heartbeat_ms: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct Topic {
    pub name: String,
    pub id: String,
    pub partitions: u32,
    pub replication_factor: usize,
    pub offline: usize,
    pub under_replicated: usize,
    pub under_min_isr: usize,
    pub marked_for_deletion: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct Partition {
    pub topic: String,
    pub partition: u32,
    pub leader: Option<u32>,
    pub leader_epoch: u32,
    pub replicas: Vec<u32>,
    pub isr: Vec<u32>,
    pub adding: Vec<u32>,
    pub removing: Vec<u32>,
    pub offline: bool,
    pub under_replicated: bool,
    pub under_min_isr: bool,
}

#[derive(Debug, Serialize)]
pub struct Deletion {
    pub topic: String,
    /// Replicas whose deletion has not finished yet.
    pub replicas_pending: usize,
}

fn ids(v: &[keel_metadata::BrokerId]) -> Vec<u32> {
    v.iter().map(|b| b.0).collect()
}

impl ClusterView {
    /// This node's view now. `http_port` is this node's own HTTP port, used
    /// to work out the active controller's console address.
    pub fn gather(shared: &Shared, http_port: Option<u16>) -> Self {
        let m = shared.raft.metrics().borrow().clone();
        let me = shared.config.node_id;
        let active = shared.active.read().map(|g| g.is_some()).unwrap_or(false);
        let role = match m.state {
            ServerState::Leader if active && shared.lease_valid() => "active",
            ServerState::Leader => "leader-without-lease",
            ServerState::Follower => "standby",
            ServerState::Candidate => "candidate",
            ServerState::Learner => "learner",
            ServerState::Shutdown => "shut-down",
        };
        let active_controller = shared.leader_hint().map(|(id, address)| {
            let console_url = http_port.and_then(|port| {
                let peer = address.parse::<SocketAddr>().ok()?;
                let offset = i32::from(port) - i32::from(shared.config.listen.port());
                let peer_port = u16::try_from(i32::from(peer.port()) + offset).ok()?;
                Some(format!(
                    "http://{}/console",
                    SocketAddr::new(peer.ip(), peer_port)
                ))
            });
            ActiveController {
                id,
                address,
                console_url,
            }
        });
        let contacts = shared.peer_contacts();
        let end = m.last_log_index.unwrap_or(0);
        let voters = m
            .membership_config
            .membership()
            .nodes()
            .filter(|(id, _)| {
                m.membership_config
                    .membership()
                    .voter_ids()
                    .any(|v| v == **id)
            })
            .map(|(id, node)| {
                let matched = if *id == me {
                    m.replication.as_ref().map(|_| end)
                } else {
                    m.replication
                        .as_ref()
                        .map(|r| r.get(id).copied().flatten().map_or(0, |l| l.index))
                };
                Voter {
                    id: *id,
                    address: node.addr.clone(),
                    matched_index: matched,
                    lag: matched.map(|i| end.saturating_sub(i)),
                    last_contact_ms: if *id == me {
                        Some(0)
                    } else {
                        contacts.get(id).copied()
                    },
                }
            })
            .collect();
        let quorum = Quorum {
            leader: m.current_leader,
            term: m.current_term,
            last_log_index: end,
            last_applied_index: m.last_applied.map_or(0, |l| l.index),
            committed_index: committed_index(&m),
            voters,
        };

        let image = shared.image();
        let heartbeats = if role == "active" {
            shared.heartbeats.lock().ok().map(|t| {
                let now = now_ms();
                image
                    .brokers()
                    .filter_map(|b| {
                        t.last_contact_ms(b.id)
                            .map(|at| (b.id, now.saturating_sub(at)))
                    })
                    .collect::<std::collections::BTreeMap<_, _>>()
            })
        } else {
            None
        };
        let mut health = Health::default();
        let brokers = image
            .brokers()
            .map(|b| {
                health.brokers += 1;
                if b.fenced {
                    health.fenced_brokers += 1;
                }
                Broker {
                    id: b.id.0,
                    epoch: b.epoch.0,
                    state: if b.fenced {
                        "fenced"
                    } else if b.shutting_down {
                        "shutting-down"
                    } else {
                        "active"
                    },
                    address: b.address.clone(),
                    rack: b.rack.clone(),
                    offline_log_dirs: b.offline_log_dirs.clone(),
                    last_heartbeat_ms: heartbeats.as_ref().and_then(|h| h.get(&b.id).copied()),
                }
            })
            .collect();

        let mut topics = Vec::new();
        let mut topics_not_listed = 0;
        let mut deletions = Vec::new();
        let mut unhealthy = Vec::new();
        let mut healthy = Vec::new();
        let mut reassignments = Vec::new();
        let mut reassignments_not_listed = 0;
        for t in image.topics() {
            health.topics += 1;
            let min = min_isr(&image, t.id);
            let mut row = Topic {
                name: t.name.clone(),
                id: t.id.to_string(),
                partitions: t.partition_count,
                replication_factor: 0,
                offline: 0,
                under_replicated: 0,
                under_min_isr: 0,
                marked_for_deletion: t.marked_for_deletion(),
            };
            for (tp, p) in image.partitions_of(t.id) {
                health.partitions += 1;
                row.replication_factor = row.replication_factor.max(p.replicas.len());
                let part = Partition {
                    topic: t.name.clone(),
                    partition: tp.partition.0,
                    leader: p.leader.map(|b| b.0),
                    leader_epoch: p.leader_epoch.0,
                    replicas: ids(&p.replicas),
                    isr: ids(&p.isr),
                    adding: ids(&p.adding),
                    removing: ids(&p.removing),
                    offline: p.leader.is_none(),
                    under_replicated: p.isr.len() < p.replicas.len(),
                    under_min_isr: p.isr.len() < min,
                };
                row.offline += usize::from(part.offline);
                row.under_replicated += usize::from(part.under_replicated);
                row.under_min_isr += usize::from(part.under_min_isr);
                if p.reassigning() {
                    health.reassigning_partitions += 1;
                    if reassignments.len() < REASSIGNMENTS_LISTED {
                        reassignments.push(part.clone());
                    } else {
                        reassignments_not_listed += 1;
                    }
                }
                let bad = part.offline || part.under_replicated || part.under_min_isr;
                if bad && unhealthy.len() < PARTITIONS_LISTED {
                    unhealthy.push(part);
                } else if !bad && healthy.len() < PARTITIONS_LISTED {
                    healthy.push(part);
                }
            }
            health.offline_partitions += row.offline;
            health.under_replicated_partitions += row.under_replicated;
            health.under_min_isr_partitions += row.under_min_isr;
            if let Some(d) = &t.deletion {
                health.topics_being_deleted += 1;
                deletions.push(Deletion {
                    topic: t.name.clone(),
                    replicas_pending: d
                        .values()
                        .filter(|s| **s != keel_metadata::state::ReplicaState::DeletionSuccessful)
                        .count(),
                });
            }
            if topics.len() < TOPICS_LISTED {
                topics.push(row);
            } else {
                topics_not_listed += 1;
            }
        }
        let listed = unhealthy.len();
        let mut partitions = unhealthy;
        partitions.extend(healthy.into_iter().take(PARTITIONS_LISTED - listed));
        let partitions_not_listed = health.partitions - partitions.len();
        Self {
            cluster_id: shared.config.cluster_id.clone(),
            node_id: me,
            role,
            active_controller,
            quorum,
            health,
            brokers,
            topics,
            topics_not_listed,
            partitions,
            partitions_not_listed,
            reassignments,
            reassignments_not_listed,
            deletions,
            events: shared.events.newest_first(),
            at_unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        }
    }
}

/// What the handlers share.
#[derive(Clone)]
struct Http {
    shared: Arc<Shared>,
    render: RenderMetrics,
    port: u16,
}

async fn metrics(State(h): State<Http>) -> Response {
    // Cluster gauges from this node's image, so standbys export them too;
    // a full scan, off the runtime's workers.
    let shared = h.shared.clone();
    let render = h.render.clone();
    let text = tokio::task::spawn_blocking(move || {
        crate::tasks::publish_image_gauges(&shared.image());
        let mut text = render();
        text.push_str(&crate::process_metrics::render());
        text
    })
    .await
    .unwrap_or_default();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn cluster(State(h): State<Http>) -> Response {
    let shared = h.shared.clone();
    let port = h.port;
    let body = tokio::task::spawn_blocking(move || {
        serde_json::to_string(&ClusterView::gather(&shared, Some(port)))
    })
    .await;
    match body {
        Ok(Ok(json)) => (
            [
                (header::CONTENT_TYPE, "application/json"),
                (header::CACHE_CONTROL, "no-store"),
            ],
            json,
        )
            .into_response(),
        _ => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        PAGE,
    )
        .into_response()
}

/// Serves `/metrics`, `/`, `/console` and `/api/cluster` on `listener`
/// until `shutdown` flips to true.
pub async fn serve(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    render: RenderMetrics,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let port = listener.local_addr()?.port();
    let app = axum::Router::new()
        .route("/metrics", get(metrics))
        .route("/api/cluster", get(cluster))
        .route("/", get(page))
        .route("/console", get(page))
        .with_state(Http {
            shared,
            render,
            port,
        });
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = shutdown.wait_for(|v| *v).await;
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_keep_the_newest_and_list_them_first() {
        let e = Events::default();
        for i in 0..(EVENTS_KEPT as u64 + 5) {
            e.push(1, i, format!("event {i}"));
        }
        let list = e.newest_first();
        assert_eq!(list.len(), EVENTS_KEPT);
        assert_eq!(list[0].index, EVENTS_KEPT as u64 + 4);
        assert_eq!(list.last().unwrap().index, 5);
    }
}
