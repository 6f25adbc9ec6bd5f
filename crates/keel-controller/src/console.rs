//! The controller's HTTP endpoint (`--http-listen`): Prometheus metrics at
//! `/metrics`, a read-only web console at `/` and `/console`, the JSON it
//! polls at `/api/cluster`, and `/health` (the node is up, in which role).
//!
//! Every controller serves it, standbys too: the page says which role the
//! serving node has and links to the active controller's console. What a
//! standby cannot know (broker heartbeats are soft state of the active
//! controller) is shown as unknown, never guessed.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use openraft::ServerState;
use serde::Serialize;
use tokio::sync::watch;

pub use crate::events::{count, Event, Events};
use crate::shared::{now_ms, Shared};
use crate::tasks::min_isr;

/// Topics listed in one answer; the rest are counted, not listed.
const TOPICS_LISTED: usize = 2_000;
/// Partitions listed in one answer (unhealthy ones first).
const PARTITIONS_LISTED: usize = 1_000;
/// Reassigning partitions listed in one answer.
const REASSIGNMENTS_LISTED: usize = 500;
/// How long an answer waits for the Raft core to say when this node last
/// heard from its leader (past it, the leader's contact is unknown).
const RAFT_STATE_WAIT: Duration = Duration::from_millis(500);

/// The page itself: static, polls `/api/cluster`.
const PAGE: &str = include_str!("console.html");

/// Renders the metrics recorder's text (the caller owns the recorder).
pub type RenderMetrics = Arc<dyn Fn() -> String + Send + Sync>;

/// Each broker's (epoch, fenced, shutting down) as last seen in the
/// applied image: how a standby, which decides nothing, learns what to
/// show among its events. Also the quorum's voters and learners as last
/// seen, on every node: membership changes do not go through the active
/// controller's event loop, so no other place records them.
#[derive(Default)]
pub struct BrokersSeen {
    seen: Option<std::collections::BTreeMap<u32, (u64, bool, bool)>>,
    /// (voters, learners) of the membership as last seen.
    quorum: Option<(BTreeSet<u64>, BTreeSet<u64>)>,
}

/// `ids` as an operator reads them.
fn id_list(ids: &BTreeSet<u64>) -> String {
    if ids.is_empty() {
        return "none".into();
    }
    ids.iter()
        .map(|id| id.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

impl BrokersSeen {
    /// Compares the applied image with the last look and, when `record`,
    /// pushes one event per broker change; pushes one event per change of
    /// the quorum's membership in any case. The first look only remembers.
    pub fn note(&mut self, shared: &Shared, record: bool) {
        self.note_quorum(shared);
        self.note_brokers(shared, record);
    }

    fn note_quorum(&mut self, shared: &Shared) {
        let (voters, learners, term, index) = {
            let m = shared.raft.metrics();
            let m = m.borrow();
            let membership = m.membership_config.membership();
            (
                membership.voter_ids().collect::<BTreeSet<u64>>(),
                membership.learner_ids().collect::<BTreeSet<u64>>(),
                m.current_term,
                m.membership_config.log_id().map_or(0, |l| l.index),
            )
        };
        let now = (voters, learners);
        let Some(before) = self.quorum.replace(now.clone()) else {
            return;
        };
        if before == now {
            return;
        }
        let mut what = Vec::new();
        if before.0 != now.0 {
            what.push(format!(
                "voters {} -> {}",
                id_list(&before.0),
                id_list(&now.0)
            ));
        }
        if before.1 != now.1 {
            what.push(format!(
                "learners {} -> {}",
                id_list(&before.1),
                id_list(&now.1)
            ));
        }
        shared.events.push(
            term,
            index,
            format!("controller quorum changed: {}", what.join(", ")),
        );
    }

    fn note_brokers(&mut self, shared: &Shared, record: bool) {
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
    /// Milliseconds since this node last heard from it. On the leader:
    /// since the voter last answered the leader's Raft RPCs. Elsewhere,
    /// known for the leader only: since this node last accepted an
    /// AppendEntries (heartbeats included) from it. 0 for this node.
    pub last_contact_ms: Option<u64>,
}

#[derive(Debug, Default, Serialize)]
pub struct Health {
    pub brokers: usize,
    pub fenced_brokers: usize,
    pub topics: usize,
    pub partitions: usize,
    /// Partitions without a leader, not counting those of topics being
    /// deleted (their deletion took their leaders).
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
    /// Its topic is being deleted (it has no leader because of that, and
    /// is not counted offline).
    pub deleting: bool,
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

/// This node's role as the console names it (see [`ClusterView::role`]).
fn role(shared: &Shared, state: ServerState) -> &'static str {
    let active = shared.active.read().map(|g| g.is_some()).unwrap_or(false);
    match state {
        ServerState::Leader if active && shared.lease_valid() => "active",
        ServerState::Leader => "leader-without-lease",
        ServerState::Follower => "standby",
        ServerState::Candidate => "candidate",
        ServerState::Learner => "learner",
        ServerState::Shutdown => "shut-down",
    }
}

/// Milliseconds since this node last heard from the committed leader it
/// follows: since it last accepted an AppendEntries (heartbeats included)
/// of that leadership, as its Raft core records it. `None` on the leader
/// itself, on a node that follows no committed leader, and when the core
/// does not answer within [`RAFT_STATE_WAIT`].
pub async fn leader_contact_ms(shared: &Shared) -> Option<u64> {
    let me = shared.config.node_id;
    let ask = shared.raft.with_raft_state(move |s| {
        let vote = s.vote_ref();
        let follows = matches!(s.server_state, ServerState::Follower | ServerState::Learner)
            && vote.is_committed()
            && vote.leader_id().voted_for() != Some(me);
        follows
            .then(|| s.vote_last_modified())
            .flatten()
            .map(|at| u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX))
    });
    tokio::time::timeout(RAFT_STATE_WAIT, ask)
        .await
        .ok()
        .and_then(Result::ok)
        .flatten()
}

impl ClusterView {
    /// This node's view now. `http_port` is this node's own HTTP port, used
    /// to work out the active controller's console address;
    /// `leader_contact_ms` is [`leader_contact_ms`], measured just before.
    pub fn gather(shared: &Shared, http_port: Option<u16>, leader_contact_ms: Option<u64>) -> Self {
        let m = shared.raft.metrics().borrow().clone();
        let role = role(shared, m.state);
        let image = shared.image();
        let mut health = Health::default();
        let brokers = brokers_of(shared, &image, role == "active", &mut health);
        let mut walk = TopicWalk::default();
        for t in image.topics() {
            walk.topic(&image, t, &mut health);
        }
        let listed = walk.unhealthy.len();
        let mut partitions = walk.unhealthy;
        partitions.extend(walk.healthy.into_iter().take(PARTITIONS_LISTED - listed));
        let partitions_not_listed = health.partitions - partitions.len();
        Self {
            cluster_id: shared.config.cluster_id.clone(),
            node_id: shared.config.node_id,
            role,
            active_controller: active_controller_of(shared, http_port),
            quorum: quorum_of(shared, &m, leader_contact_ms),
            health,
            brokers,
            topics: walk.topics,
            topics_not_listed: walk.topics_not_listed,
            partitions,
            partitions_not_listed,
            reassignments: walk.reassignments,
            reassignments_not_listed: walk.reassignments_not_listed,
            deletions: walk.deletions,
            events: shared.events.newest_first(),
            at_unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        }
    }
}

/// The active controller as this node knows it, with its console's
/// address when this node serves HTTP (the active controller's HTTP port
/// is taken to lie as far from its listener's as this node's does).
fn active_controller_of(shared: &Shared, http_port: Option<u16>) -> Option<ActiveController> {
    shared.leader_hint().map(|(id, address)| {
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
    })
}

/// The quorum as Raft metrics `m` show it on this node.
fn quorum_of(
    shared: &Shared,
    m: &openraft::RaftMetrics<u64, keel_raft::KeelNode>,
    leader_contact_ms: Option<u64>,
) -> Quorum {
    let me = shared.config.node_id;
    let contacts = shared.peer_contacts();
    let end = m.last_log_index.unwrap_or(0);
    let membership = m.membership_config.membership();
    let voters = membership
        .nodes()
        .filter(|(id, _)| membership.voter_ids().any(|v| v == **id))
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
                } else if m.state == ServerState::Leader {
                    // Who answers the leader's RPCs: its own table.
                    contacts.get(id).copied()
                } else if Some(*id) == m.current_leader {
                    // A follower's table holds only what it asked
                    // (votes, or as a leader once): stale. What it
                    // knows is when the leader last reached it.
                    leader_contact_ms
                } else {
                    None
                },
            }
        })
        .collect();
    Quorum {
        leader: m.current_leader,
        term: m.current_term,
        last_log_index: end,
        last_applied_index: m.last_applied.map_or(0, |l| l.index),
        committed_index: committed_index(m),
        voters,
    }
}

/// The brokers of `image`, counted into `health`; with their last
/// heartbeat only on the active controller (`active`), which alone hears
/// them.
fn brokers_of(
    shared: &Shared,
    image: &keel_metadata::MetadataImage,
    active: bool,
    health: &mut Health,
) -> Vec<Broker> {
    let heartbeats = if active {
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
    image
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
        .collect()
}

/// The topics and partitions of an image as the console lists them, walked
/// one topic at a time: each list bounded, the rest counted.
#[derive(Default)]
struct TopicWalk {
    topics: Vec<Topic>,
    topics_not_listed: usize,
    deletions: Vec<Deletion>,
    /// Partitions offline, under-replicated or under min ISR, listed first.
    unhealthy: Vec<Partition>,
    healthy: Vec<Partition>,
    reassignments: Vec<Partition>,
    reassignments_not_listed: usize,
}

impl TopicWalk {
    /// Adds topic `t` of `image` and its partitions, counted into `health`.
    fn topic(
        &mut self,
        image: &keel_metadata::MetadataImage,
        t: &keel_metadata::image::TopicImage,
        health: &mut Health,
    ) {
        health.topics += 1;
        let min = min_isr(image, t.id);
        let deleting = t.marked_for_deletion();
        let mut row = Topic {
            name: t.name.clone(),
            id: t.id.to_string(),
            partitions: t.partition_count,
            replication_factor: 0,
            offline: 0,
            under_replicated: 0,
            under_min_isr: 0,
            marked_for_deletion: deleting,
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
                offline: p.leader.is_none() && !deleting,
                under_replicated: p.isr.len() < p.replicas.len(),
                under_min_isr: p.isr.len() < min,
                deleting,
            };
            row.offline += usize::from(part.offline);
            row.under_replicated += usize::from(part.under_replicated);
            row.under_min_isr += usize::from(part.under_min_isr);
            if p.reassigning() {
                health.reassigning_partitions += 1;
                if self.reassignments.len() < REASSIGNMENTS_LISTED {
                    self.reassignments.push(part.clone());
                } else {
                    self.reassignments_not_listed += 1;
                }
            }
            let bad = part.offline || part.under_replicated || part.under_min_isr;
            if bad && self.unhealthy.len() < PARTITIONS_LISTED {
                self.unhealthy.push(part);
            } else if !bad && self.healthy.len() < PARTITIONS_LISTED {
                self.healthy.push(part);
            }
        }
        health.offline_partitions += row.offline;
        health.under_replicated_partitions += row.under_replicated;
        health.under_min_isr_partitions += row.under_min_isr;
        if let Some(d) = &t.deletion {
            health.topics_being_deleted += 1;
            self.deletions.push(Deletion {
                topic: t.name.clone(),
                replicas_pending: d
                    .values()
                    .filter(|s| **s != keel_metadata::state::ReplicaState::DeletionSuccessful)
                    .count(),
            });
        }
        if self.topics.len() < TOPICS_LISTED {
            self.topics.push(row);
        } else {
            self.topics_not_listed += 1;
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
    let leader_contact = leader_contact_ms(&shared).await;
    let body = tokio::task::spawn_blocking(move || {
        serde_json::to_string(&ClusterView::gather(&shared, Some(port), leader_contact))
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

/// What `/health` answers.
#[derive(Debug, Serialize)]
struct NodeHealth {
    /// `up` while the node serves (whatever its role), `down` once its Raft
    /// core stopped.
    status: &'static str,
    node_id: u64,
    cluster_id: String,
    /// As in `/api/cluster`: `active`, `standby`, `candidate`, ...
    role: &'static str,
}

/// 200 with [`NodeHealth`] while the node serves; 503 once its Raft core
/// stopped (shut down, or a fatal storage error). Cheap: no image scan.
async fn health(State(h): State<Http>) -> Response {
    let (state, running) = {
        let m = h.shared.raft.metrics();
        let m = m.borrow();
        (m.state, m.running_state.is_ok())
    };
    let up = running && state != ServerState::Shutdown;
    let answer = NodeHealth {
        status: if up { "up" } else { "down" },
        node_id: h.shared.config.node_id,
        cluster_id: h.shared.config.cluster_id.clone(),
        role: role(&h.shared, state),
    };
    let code = if up {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    match serde_json::to_string(&answer) {
        Ok(json) => (
            code,
            [
                (header::CONTENT_TYPE, "application/json"),
                (header::CACHE_CONTROL, "no-store"),
            ],
            json,
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
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

/// Serves `/metrics`, `/`, `/console`, `/api/cluster` and `/health` on `listener`
/// until `shutdown` flips to true; a connection idle for
/// `--connections-max-idle-ms` is closed, as on the Kafka listener.
pub async fn serve(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    render: RenderMetrics,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let port = listener.local_addr()?.port();
    let shared_gate = shared.gate.clone();
    let idle = Duration::from_millis(shared.config.kafka_connections_max_idle_ms);
    let app = axum::Router::new()
        .route("/metrics", get(metrics))
        .route("/api/cluster", get(cluster))
        .route("/health", get(health))
        .route("/", get(page))
        .route("/console", get(page))
        .with_state(Http {
            shared,
            render,
            port,
        });
    let door = keel_tls::admission::Door::new(&shared_gate, "http").with_idle_timeout(idle);
    axum::serve(AdmittedListener { listener, door }, app)
        .with_graceful_shutdown(async move {
            let _ = shutdown.wait_for(|v| *v).await;
        })
        .await
}

/// An HTTP listener's connections, admitted by the node's gate as every
/// listener's are (axum serves it).
pub struct AdmittedListener {
    pub listener: tokio::net::TcpListener,
    pub door: keel_tls::admission::Door,
}

impl axum::serve::Listener for AdmittedListener {
    type Io = keel_tls::admission::Admitted<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (tcp, remote, ticket) = self.door.accept(&self.listener).await;
        (self.door.wrap(tcp, ticket), remote)
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}
