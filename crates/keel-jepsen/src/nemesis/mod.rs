//! The nemesis: faults on a schedule (fault window, heal window), chosen
//! with a seeded RNG from the enabled families.

pub mod power;

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_proto::pb;
use keel_proto::pb::broker_control_service_client::BrokerControlServiceClient;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;
use serde::Serialize;

use crate::client;
use crate::cluster::{indexes, ip, Cluster, Role, CLIENT_IP};
use crate::nemesis::power::{EpochSample, PowerKind, PowerUndo, Restart};
use crate::net::Net;

/// Fault families.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Family {
    Partition,
    Kill,
    Pause,
    /// A deposed controller's late request: a LeaderAndIsr stamped with a
    /// controller epoch lower than the broker has seen (must be refused).
    Zombie,
    /// Requests with bad credentials (a foreign CA, another broker's
    /// certificate, a user without ACLs), all through the run; see
    /// [`crate::intruder`]. Needs TLS. Not a scheduled fault: it runs
    /// alongside the others.
    Intruder,
    /// Power cuts and disk faults on LazyFS mounts (see [`crate::nemesis::power`]).
    /// Needs root and /dev/fuse.
    Power,
    /// A controller's file system calls fail (libfiu): `fsync`/`fdatasync`
    /// with EIO, or `pwrite` with EIO or ENOSPC, for the fault window. The
    /// node must stop (exit code 4, naming the error) rather than answer
    /// from memory; it is started again at heal. A broker's `fsync`/
    /// `fdatasync` fail with EIO (its history and epoch files), or its
    /// `open`s with ENOSPC (no new file); it refuses what it cannot make
    /// durable or stops with exit code 4, and its epoch never goes back.
    /// Needs `fiu-utils`.
    Disk,
    /// One direction of some links dropped, the other still flowing (the
    /// active controller's outgoing or incoming packets, or one half's to
    /// the other).
    PartitionOneWay,
    /// Two halves of the nodes (controllers and brokers) that only one
    /// node in the middle still talks to.
    Bridge,
    /// Every node (controllers and brokers) in a shuffled ring keeps only
    /// its nearest neighbours: each sees a majority, no two the same one.
    MajoritiesRing,
    /// The active controller of the moment cut off from the other
    /// controllers, alone or together with some brokers.
    IsolateLeader,
    /// Every controller killed at once, the next window every broker.
    KillAll,
    /// Latency, jitter, loss and reordering (`tc netem`) on every node's
    /// address; see [`crate::netem`].
    NetSlow,
    /// Wall clocks stepped by minutes and run at 0.5x-2x (libfaketime);
    /// see [`crate::clock`].
    Clock,
    /// A controller removed from the voters (`RemoveVoter` on the active
    /// controller) and added back at heal (`AddVoter`); sometimes the
    /// active controller itself.
    Membership,
}

impl Family {
    /// Parses `partition,kill,pause,zombie,intruder,power` or `all`.
    pub fn parse_list(s: &str) -> Result<BTreeSet<Family>, String> {
        let mut out = BTreeSet::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "all" => out.extend([
                    Family::Partition,
                    Family::Kill,
                    Family::Pause,
                    Family::Zombie,
                    Family::Intruder,
                    Family::Power,
                    Family::Disk,
                    Family::PartitionOneWay,
                    Family::Bridge,
                    Family::MajoritiesRing,
                    Family::IsolateLeader,
                    Family::KillAll,
                    Family::NetSlow,
                    Family::Clock,
                    Family::Membership,
                ]),
                "partition" => {
                    out.insert(Family::Partition);
                }
                "kill" => {
                    out.insert(Family::Kill);
                }
                "pause" => {
                    out.insert(Family::Pause);
                }
                "zombie" => {
                    out.insert(Family::Zombie);
                }
                "intruder" => {
                    out.insert(Family::Intruder);
                }
                "power" => {
                    out.insert(Family::Power);
                }
                "disk" => {
                    out.insert(Family::Disk);
                }
                "none" => {}
                other => match Family::NEW.iter().find(|(n, _)| *n == other) {
                    Some((_, f)) => {
                        out.insert(*f);
                    }
                    None => {
                        return Err(format!(
                            "unknown nemesis family {other:?} (partition, partition-one-way, bridge, \
                             majorities-ring, isolate-leader, kill, kill-all, pause, net-slow, clock, membership, zombie, \
                             intruder, power, disk, all, none)"
                        ))
                    }
                },
            }
        }
        Ok(out)
    }

    /// The families named with a hyphen, as `--nemesis` spells them.
    const NEW: [(&'static str, Family); 8] = [
        ("partition-one-way", Family::PartitionOneWay),
        ("bridge", Family::Bridge),
        ("majorities-ring", Family::MajoritiesRing),
        ("isolate-leader", Family::IsolateLeader),
        ("kill-all", Family::KillAll),
        ("net-slow", Family::NetSlow),
        ("clock", Family::Clock),
        ("membership", Family::Membership),
    ];

    /// Whether the family cuts links with iptables (needs root).
    pub fn needs_packet_filter(self) -> bool {
        matches!(
            self,
            Family::Partition
                | Family::PartitionOneWay
                | Family::Bridge
                | Family::MajoritiesRing
                | Family::IsolateLeader
        )
    }

    fn kinds(self) -> &'static [&'static str] {
        match self {
            Family::Partition => &[
                "isolate-active-controller",
                "isolate-node",
                "random-halves",
                "majorities-ring",
                "brokers-from-controllers",
                "brokers-from-brokers",
            ],
            Family::Kill => &[
                "kill-active-controller",
                "kill-controller",
                "kill-broker",
                "kill-active-controller-mid-decision",
            ],
            Family::Pause => &[
                "pause-active-controller",
                "pause-controller",
                "pause-broker",
            ],
            Family::Zombie => &["stale-controller-request"],
            Family::Intruder => &[],
            Family::Power => PowerKind::NAMES,
            Family::Disk => &[
                "disk-eio-sync-active-controller",
                "disk-eio-sync-controller",
                "disk-enospc-write-active-controller",
                "disk-eio-write-controller",
                "disk-eio-sync-broker",
                "disk-enospc-open-broker",
            ],
            Family::PartitionOneWay => &[
                "one-way-from-active-controller",
                "one-way-to-active-controller",
                "one-way-halves",
            ],
            Family::Bridge => &["bridge"],
            Family::MajoritiesRing => &["majorities-ring"],
            Family::IsolateLeader => &["isolate-leader", "isolate-leader-with-brokers"],
            Family::KillAll => &["kill-all-controllers", "kill-all-brokers"],
            Family::NetSlow => &["net-slow"],
            Family::Clock => &["clock-skew-node", "clock-skew-all"],
            Family::Membership => &["remove-voter", "remove-active-voter", "replace-voter"],
        }
    }
}

/// One injected fault.
#[derive(Clone, Debug, Serialize)]
pub struct FaultEvent {
    pub family: Family,
    pub kind: String,
    pub targets: Vec<String>,
    pub start_ms: f64,
    pub end_ms: Option<f64>,
    /// How long the fault was to last (see [`crate::timing`]); `None` for
    /// an instant one (a zombie request).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub planned_ms: Option<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub detail: Vec<String>,
}

/// A zombie probe's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct ZombieProbe {
    pub broker: u32,
    pub at_ms: f64,
    pub stale_epoch: u64,
    pub seen_epoch: u64,
    pub topic_id: String,
    pub partition: u32,
    /// Error code of the broker's answer; `None` = accepted (a violation).
    pub answer: Option<String>,
    pub accepted: bool,
}

impl ZombieProbe {
    /// Refused with a typed error code of Keel's (a gRPC transport error
    /// or status is no refusal: the request may never have been judged).
    pub fn refused(&self) -> bool {
        !self.accepted
            && self
                .answer
                .as_deref()
                .is_some_and(|a| !a.starts_with(GRPC_ANSWER_PREFIX))
    }
}

/// How a zombie probe's answer reads when gRPC (not the broker's
/// judgement) answered it.
pub const GRPC_ANSWER_PREFIX: &str = "GRPC_";

/// A run with two or more zombie windows needs at least this many typed
/// refusals (one window: one): a run whose probes never reached a broker
/// proved nothing.
pub const ZOMBIE_MIN_REFUSED: usize = 2;

/// The zombie checker: no probe accepted, none refused for its
/// certificate rather than its epoch (over TLS such a probe tests
/// nothing), and at least `min_refused` typed refusals.
pub fn zombie_check(probes: &[ZombieProbe], min_refused: usize) -> (bool, serde_json::Value) {
    let accepted = probes.iter().filter(|p| p.accepted).count();
    let wrong_cert = probes
        .iter()
        .filter(|p| p.answer.as_deref() == Some(ZOMBIE_WRONG_CERTIFICATE))
        .count();
    let refused = probes.iter().filter(|p| p.refused()).count();
    let valid = accepted == 0 && wrong_cert == 0 && refused >= min_refused;
    (
        valid,
        serde_json::json!({
            "refused": refused,
            "min_refused": min_refused,
            "accepted": accepted,
            "refused_for_certificate": wrong_cert,
            "not_judged": probes.len() - refused - accepted - wrong_cert,
            "probes": probes,
        }),
    )
}

/// Shared state of the nemesis.
pub struct Nemesis {
    pub cluster: Arc<Mutex<Cluster>>,
    pub net: Option<Net>,
    pub families: Vec<Family>,
    pub rng: StdRng,
    pub start: Instant,
    pub faults: Arc<Mutex<Vec<FaultEvent>>>,
    pub current: Arc<Mutex<String>>,
    pub probes: Arc<Mutex<Vec<ZombieProbe>>>,
    /// Asks the big-create worker for a create too large for one Raft
    /// entry; it answers once the request is on its way.
    pub big_create: Option<tokio::sync::mpsc::Sender<tokio::sync::oneshot::Sender<String>>>,
    /// Whether this run killed the active controller in the middle of a
    /// large decision yet (the first kill of a run always does).
    pub killed_mid_decision: bool,
    /// Whether this run cut the power of every controller at once yet (the
    /// first power window always does: the loss an unsafe store shows).
    pub cut_all_controllers: bool,
    /// Every node's restart after each power cut (the restart checker's
    /// input).
    pub restarts: Vec<Restart>,
    /// Brokers' epochs around their power cuts (the epoch checker's input).
    pub epochs: Vec<EpochSample>,
    /// How long a node may take to come back after its power cut.
    pub restart_bound: Duration,
    /// How the nemesis's own probes speak (the admin user over TLS).
    pub transport: client::Transport,
    /// Nodes whose disk is failing now (the crash watch expects them to
    /// stop, with exit code 4).
    pub disk_faulted: Arc<Mutex<DiskFaulted>>,
    /// How each node under a disk fault stopped.
    pub disk_stops: Arc<Mutex<Vec<DiskStop>>>,
    /// Brokers' epochs before each disk fault of theirs and once they are
    /// back after it (the epoch checker's input).
    pub disk_epochs: Vec<EpochSample>,
    /// How a zombie controller's request speaks: with the certificate of
    /// controller [`ZOMBIE_CONTROLLER`] (over TLS a broker accepts
    /// LeaderAndIsr only from a controller; the stale epoch must be what
    /// refuses it).
    pub zombie_transport: client::Transport,
    /// The slow network (the `net-slow` family; `None` otherwise).
    pub netem: Option<crate::netem::Netem>,
    /// How long each fault lasts.
    pub lengths: crate::timing::Lengths,
    /// `kill-all` windows so far (they alternate: every controller, then
    /// every broker).
    pub kill_all_windows: u32,
    /// Where the nodes' libfaketime files are (the `clock` family; `None`
    /// otherwise).
    pub clock_dir: Option<std::path::PathBuf>,
    /// Controllers removed from the voters and not added back within
    /// [`VOTER_BACK_WAIT`] (the membership checker fails on any).
    pub voters_missing: Vec<u64>,
}

/// How a node whose disk was failing stopped.
#[derive(Clone, Debug, Serialize)]
pub struct DiskStop {
    pub node: String,
    pub at_ms: f64,
    pub status: String,
    pub code: Option<i32>,
}

impl DiskStop {
    pub fn new(node: &str, at_ms: f64, status: std::process::ExitStatus) -> Self {
        Self {
            node: node.to_string(),
            at_ms,
            status: status.to_string(),
            code: status.code(),
        }
    }
}

/// Exit code of a node that stops on a storage error it cannot get past
/// (`keel controller`: "raft stopped").
pub const DISK_STOP_CODE: i32 = 4;

/// The disk checker: every node that stopped under a disk fault stopped
/// with [`DISK_STOP_CODE`] (a panic is 101, a signal has no code).
pub fn disk_stop_check(stops: &[DiskStop]) -> (bool, serde_json::Value) {
    let bad: Vec<&DiskStop> = stops
        .iter()
        .filter(|s| s.code != Some(DISK_STOP_CODE))
        .collect();
    (
        bad.is_empty(),
        serde_json::json!({"stops": stops, "not_clean": bad}),
    )
}

/// Nodes whose disk is failing (`None`) or failed until a moment ago
/// (`Some(until)`: a stop before then is still the fault's).
pub type DiskFaulted = std::collections::BTreeMap<usize, Option<Instant>>;

/// How long after a disk fault's heal a node's stop is still put down to
/// the fault (a short fault can end between the failed call and the exit).
pub const DISK_STOP_GRACE: Duration = Duration::from_secs(5);

/// Whether node `i`'s stop now is put down to a disk fault, and whether
/// that fault is over (the node must then be started again right away:
/// its heal has passed).
pub fn disk_stop_of(faulted: &DiskFaulted, i: usize, now: Instant) -> Option<bool> {
    match faulted.get(&i)? {
        None => Some(false),
        Some(until) if now <= *until => Some(true),
        Some(_) => None,
    }
}

/// How long the heal of a membership fault tries to add the voter back.
pub const VOTER_BACK_WAIT: Duration = Duration::from_secs(20);

/// How often the heal of a replacement asks again to promote a learner.
const READMIT_RETRY: Duration = Duration::from_secs(5);

/// How long a replaced controller may take to start on its empty data dir
/// and report its directory id.
pub const REPLACE_START_WAIT: Duration = Duration::from_secs(15);

/// Removes everything inside `dir` (the directory itself stays: it may be
/// a mount point).
fn empty_dir(dir: &std::path::Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

/// With other families, the share of their windows that also get a
/// membership change.
pub const MEMBERSHIP_ALONGSIDE: f64 = 0.3;

/// The shortest clock fault (libfaketime's files are read once a second).
pub const CLOCK_SHORTEST: Duration = Duration::from_secs(3);

/// How long a broker may take, after its disk fault is healed, to be
/// registered and unfenced again (its epoch is sampled then).
pub const DISK_EPOCH_WAIT: Duration = Duration::from_secs(10);

/// The controller whose identity the zombie requests carry.
pub const ZOMBIE_CONTROLLER: u64 = 1;

/// A zombie probe's answer when the broker refused its certificate (not
/// its epoch): the probe then tested nothing.
pub const ZOMBIE_WRONG_CERTIFICATE: &str = "GRPC_PERMISSIONDENIED";

/// Partitions of the creates the mid-decision kill aims at: several Raft
/// entries' worth, so the decision is one transaction over many entries.
pub const BIG_PARTITIONS: u32 = 20_000;

/// Every pair of a node of `a` and a node of `b`.
fn cross(a: &[usize], b: &[usize]) -> Vec<(usize, usize)> {
    a.iter()
        .flat_map(|&x| b.iter().map(move |&y| (x, y)))
        .collect()
}

/// What to undo at heal.
pub(crate) enum Undo {
    Net,
    /// Remove the slow network.
    Netem,
    /// Set these nodes' clocks back to true time.
    Clock(Vec<usize>),
    /// Add this controller (node id, address) back to the voters.
    AddVoter(u64, String),
    /// See that this controller (node id, address), started again on an
    /// empty data dir with this directory id, is a voter again.
    Readmit(u64, String, String),
    Restart(usize),
    /// Start every one of these nodes again.
    RestartAll(Vec<usize>),
    Resume(usize),
    /// Start the nodes a power fault cut and wait until they are back.
    Power(PowerUndo),
    /// Let a node's failing calls succeed again, or start it again if it
    /// stopped; a broker's epoch before the fault and the fault's start.
    Disk(usize, keel_testkit::fiu::Calls, Option<u64>, f64),
    Nothing,
}

const LOOPBACK: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);

impl Nemesis {
    pub(crate) fn ms(&self) -> f64 {
        self.start.elapsed().as_secs_f64() * 1000.0
    }

    pub(crate) async fn active_index(&self) -> Option<usize> {
        let addrs: Vec<(usize, String)> = {
            let c = self.cluster.lock().unwrap();
            indexes(&c, Role::Controller)
                .into_iter()
                .map(|i| (i, c.nodes[i].address()))
                .collect()
        };
        for (i, a) in addrs {
            if let Some(d) =
                client::describe_node(&self.transport, &a, Duration::from_millis(700)).await
            {
                if d.active_controller {
                    return Some(i);
                }
            }
        }
        None
    }

    /// The active controller, or a random controller (noted in the event)
    /// when none answers as active.
    async fn active_or_noted(&mut self, ev: &mut FaultEvent) -> usize {
        match self.active_index().await {
            Some(i) => i,
            None => {
                ev.detail
                    .push("no active controller found; using a random controller".into());
                self.pick(Role::Controller)
            }
        }
    }

    /// Broker `id`'s epoch once the active controller reports it
    /// registered and unfenced (`None`: not within [`DISK_EPOCH_WAIT`]).
    async fn settled_epoch(&self, id: u32) -> Option<u64> {
        let start = Instant::now();
        while start.elapsed() < DISK_EPOCH_WAIT {
            if let Some(&(epoch, false)) = self.broker_registrations().await.get(&id) {
                return Some(epoch);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        None
    }

    /// Removes controller `id` from the voters (`add: None`) or adds it
    /// back at `add` = (address, directory id; empty: the one it had),
    /// through the active controller; `Err` with the error code (or why no
    /// answer came).
    async fn voter_change(&self, id: u64, add: Option<(&str, &str)>) -> Result<(), String> {
        use keel_proto::pb::admin_service_client::AdminServiceClient;
        let ctrl = self.cluster.lock().unwrap().controller_addrs();
        let t = Duration::from_secs(3);
        let active = client::find_active(&self.transport, &ctrl, t)
            .await
            .ok_or("no active controller")?;
        let ch = client::channel(
            &self.transport,
            &active,
            CLIENT_IP.into(),
            t,
            client::Expect::Controller,
        )
        .ok_or("no channel")?;
        let mut admin = AdminServiceClient::new(ch);
        let error = match add {
            None => admin
                .remove_voter(pb::RemoveVoterRequest {
                    node_id: id,
                    ..Default::default()
                })
                .await
                .map(|r| r.into_inner().error),
            Some((address, directory)) => admin
                .add_voter(pb::AddVoterRequest {
                    node_id: id,
                    address: address.to_string(),
                    directory_id: directory.to_string(),
                    ..Default::default()
                })
                .await
                .map(|r| r.into_inner().error),
        };
        match error {
            Ok(None) => Ok(()),
            Ok(Some(e)) => Err(client::code_name(e.code)),
            Err(s) => Err(format!("GRPC_{:?}", s.code()).to_uppercase()),
        }
    }

    /// Controller `id` as the active controller's DescribeQuorum lists it:
    /// (status, directory id); `None` if not listed or no answer.
    pub(crate) async fn quorum_member(&self, id: u64) -> Option<(String, String)> {
        self.quorum_members()
            .await?
            .into_iter()
            .find(|v| v.id == id)
            .map(|v| (v.status, v.directory_id))
    }

    /// The members (voters and learners) the active controller's
    /// DescribeQuorum lists; `None` without an answer.
    pub(crate) async fn quorum_members(&self) -> Option<Vec<pb::VoterDescription>> {
        use keel_proto::pb::admin_service_client::AdminServiceClient;
        let ctrl = self.cluster.lock().unwrap().controller_addrs();
        let t = Duration::from_secs(2);
        let active = client::find_active(&self.transport, &ctrl, t).await?;
        let ch = client::channel(
            &self.transport,
            &active,
            CLIENT_IP.into(),
            t,
            client::Expect::Controller,
        )?;
        let r = AdminServiceClient::new(ch)
            .describe_quorum(pb::DescribeQuorumRequest::default())
            .await
            .ok()?
            .into_inner();
        Some(r.voters)
    }

    /// Replaces a controller that is not the active one by a fresh node:
    /// stops it, empties its data dir, starts it again to join (same id and
    /// address, a new directory id), and asks the active controller to
    /// re-admit it with that directory id (its old membership entry is
    /// removed, the new node added as a learner that catches up, then
    /// promoted). The heal checks it became a voter.
    async fn replace_voter(&mut self, ev: &mut FaultEvent) -> Undo {
        // Only a whole quorum: wiping a voter while another is still being
        // re-admitted (a learner) or missing would wipe one of a two-voter
        // quorum, which no system survives and no operator does.
        let whole = self.quorum_members().await.is_some_and(|m| {
            m.len() == 3
                && m.iter()
                    .all(|v| v.status == "leader" || v.status == "follower")
        });
        if !whole {
            ev.detail.push(
                "the quorum is not three voters (a change still in progress, or no answer); replacement skipped"
                    .into(),
            );
            return Undo::Nothing;
        }
        let Some(active) = self.active_index().await else {
            ev.detail
                .push("no active controller found; replacement skipped".into());
            return Undo::Nothing;
        };
        let others: Vec<usize> = {
            let c = self.cluster.lock().unwrap();
            indexes(&c, Role::Controller)
                .into_iter()
                .filter(|&i| i != active && c.nodes[i].running())
                .collect()
        };
        if others.is_empty() {
            ev.detail
                .push("no running standby controller; replacement skipped".into());
            return Undo::Nothing;
        }
        let i = others[self.rng.random_range(0..others.len())];
        ev.targets.push(self.name(i));
        let (id, addr) = {
            let mut c = self.cluster.lock().unwrap();
            let n = &mut c.nodes[i];
            n.kill();
            if let Err(e) = empty_dir(&n.data_dir) {
                ev.detail
                    .push(format!("cannot empty {}: {e}", n.data_dir.display()));
            }
            // Joins instead of bootstrapping (and, once it has a log, just
            // restarts with it).
            if !n.process.launch.args.iter().any(|a| a == "--join") {
                n.process.launch.args.push("--join".into());
            }
            if let Err(e) = n.start() {
                ev.detail.push(format!("cannot start the new node: {e:#}"));
            }
            (u64::from(n.id), n.address())
        };
        // The new node's directory id, drawn when it formats its dir.
        let start = Instant::now();
        let mut directory = String::new();
        while start.elapsed() < REPLACE_START_WAIT {
            if let Some(d) =
                client::describe_node(&self.transport, &addr, Duration::from_millis(700)).await
            {
                if !d.directory_id.is_empty() {
                    directory = d.directory_id;
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        if directory.is_empty() {
            ev.detail
                .push("the new node never reported its directory id".into());
            self.voters_missing.push(id);
            return Undo::Nothing;
        }
        ev.detail.push(format!("new directory id {directory}"));
        match self.voter_change(id, Some((&addr, &directory))).await {
            Ok(()) => ev.detail.push(format!(
                "re-admitted after {} ms",
                start.elapsed().as_millis()
            )),
            Err(e) => ev.detail.push(format!("AddVoter: {e} (retried at heal)")),
        }
        Undo::Readmit(id, addr, directory)
    }

    /// Sets the clocks of nodes `v` back to true time (notes on failure).
    fn true_time(&self, v: &[usize]) -> Vec<String> {
        let Some(dir) = &self.clock_dir else {
            return vec![];
        };
        v.iter()
            .filter_map(|&i| {
                let name = self.name(i);
                crate::clock::set(&crate::clock::file_of(dir, &name), None)
                    .err()
                    .map(|e| format!("cannot set the clock of {name} back: {e}"))
            })
            .collect()
    }

    /// Every node, shuffled and split in two (the first half is the larger).
    fn halves(&mut self, n: usize) -> (Vec<usize>, Vec<usize>) {
        let mut idx: Vec<usize> = (0..n).collect();
        idx.shuffle(&mut self.rng);
        let b = idx.split_off(n.div_ceil(2));
        (idx, b)
    }

    pub(crate) fn pick(&mut self, role: Role) -> usize {
        let c = self.cluster.lock().unwrap();
        let v = indexes(&c, role);
        v[self.rng.random_range(0..v.len())]
    }

    /// Every pair between the two groups, plus 127.0.0.1 <-> broker when a
    /// broker is cut from every controller: controllers' connections to
    /// brokers do not bind the listen address yet (keel-controller
    /// channel.rs), so they leave from 127.0.0.1.
    fn pairs(&self, cuts: &[(usize, usize)]) -> Vec<(Ipv4Addr, Ipv4Addr)> {
        let c = self.cluster.lock().unwrap();
        let mut v: Vec<(Ipv4Addr, Ipv4Addr)> = cuts
            .iter()
            .map(|&(a, b)| (ip(&c.nodes[a]), ip(&c.nodes[b])))
            .collect();
        let ctrls = indexes(&c, Role::Controller);
        for b in indexes(&c, Role::Broker) {
            let all = ctrls.iter().all(|&k| {
                cuts.iter()
                    .any(|&(x, y)| (x == k && y == b) || (x == b && y == k))
            });
            if all {
                v.push((LOOPBACK, ip(&c.nodes[b])));
            }
        }
        v
    }

    fn isolate(&self, i: usize) -> Vec<(usize, usize)> {
        let n = self.cluster.lock().unwrap().nodes.len();
        (0..n).filter(|&j| j != i).map(|j| (i, j)).collect()
    }

    pub(crate) fn name(&self, i: usize) -> String {
        self.cluster.lock().unwrap().nodes[i].name().to_string()
    }

    /// Applies one fault; returns the event and how to undo it.
    async fn inject(&mut self, family: Family, kind: &str) -> (FaultEvent, Undo) {
        let mut ev = FaultEvent {
            family,
            kind: kind.to_string(),
            targets: Vec::new(),
            start_ms: self.ms(),
            end_ms: None,
            planned_ms: None,
            detail: Vec::new(),
        };
        let n = self.cluster.lock().unwrap().nodes.len();
        let undo = match kind {
            "isolate-active-controller" | "isolate-node" => {
                let i = if kind == "isolate-node" {
                    self.rng.random_range(0..n)
                } else {
                    match self.active_index().await {
                        Some(i) => i,
                        None => {
                            ev.detail.push(
                                "no active controller found; isolating a random controller".into(),
                            );
                            self.pick(Role::Controller)
                        }
                    }
                };
                ev.targets.push(self.name(i));
                let cuts = self.isolate(i);
                self.cut(&cuts, &mut ev)
            }
            "random-halves" => {
                let mut idx: Vec<usize> = (0..n).collect();
                idx.shuffle(&mut self.rng);
                let (a, b) = idx.split_at(n / 2);
                let cuts: Vec<(usize, usize)> = a
                    .iter()
                    .flat_map(|&x| b.iter().map(move |&y| (x, y)))
                    .collect();
                ev.targets.push(format!(
                    "{:?} | {:?}",
                    a.iter().map(|&i| self.name(i)).collect::<Vec<_>>(),
                    b.iter().map(|&i| self.name(i)).collect::<Vec<_>>()
                ));
                self.cut(&cuts, &mut ev)
            }
            "majorities-ring" => {
                // Shuffled ring of every node; each keeps the links to its
                // nearest neighbours (a majority of the nodes including
                // itself) and loses the rest, so every node sees a majority
                // but no two see the same one.
                let mut ring: Vec<usize> = (0..n).collect();
                ring.shuffle(&mut self.rng);
                let keep = n / 2; // neighbours on each side within this distance stay linked
                let keep = keep.saturating_sub(usize::from(n.is_multiple_of(2))).max(1);
                let mut cuts = Vec::new();
                for x in 0..n {
                    for y in (x + 1)..n {
                        let d = (y - x).min(n - (y - x));
                        if d > keep {
                            cuts.push((ring[x], ring[y]));
                        }
                    }
                }
                ev.targets.push(format!(
                    "ring {:?}",
                    ring.iter().map(|&i| self.name(i)).collect::<Vec<_>>()
                ));
                self.cut(&cuts, &mut ev)
            }
            "brokers-from-controllers" | "brokers-from-brokers" => {
                let (ctrls, brokers): (Vec<usize>, Vec<usize>) = {
                    let c = self.cluster.lock().unwrap();
                    (indexes(&c, Role::Controller), indexes(&c, Role::Broker))
                };
                let cuts: Vec<(usize, usize)> = if kind == "brokers-from-controllers" {
                    brokers
                        .iter()
                        .flat_map(|&b| ctrls.iter().map(move |&k| (b, k)))
                        .collect()
                } else {
                    let mut v = Vec::new();
                    for (x, &a) in brokers.iter().enumerate() {
                        for &b in &brokers[x + 1..] {
                            v.push((a, b));
                        }
                    }
                    v
                };
                ev.targets.push("all brokers".into());
                self.cut(&cuts, &mut ev)
            }
            "kill-active-controller"
            | "kill-controller"
            | "kill-broker"
            | "pause-active-controller"
            | "pause-controller"
            | "pause-broker" => {
                let i = if kind.ends_with("active-controller") {
                    match self.active_index().await {
                        Some(i) => i,
                        None => {
                            ev.detail.push(
                                "no active controller found; using a random controller".into(),
                            );
                            self.pick(Role::Controller)
                        }
                    }
                } else if kind.ends_with("broker") {
                    self.pick(Role::Broker)
                } else {
                    self.pick(Role::Controller)
                };
                ev.targets.push(self.name(i));
                let mut c = self.cluster.lock().unwrap();
                if kind.starts_with("kill") {
                    c.nodes[i].kill();
                    Undo::Restart(i)
                } else {
                    c.nodes[i].process.pause();
                    Undo::Resume(i)
                }
            }
            "kill-active-controller-mid-decision" => {
                self.killed_mid_decision = true;
                match self.big_create_under_way().await {
                    None => {
                        ev.detail.push("no large create could be started".into());
                        Undo::Nothing
                    }
                    Some((name, delay)) => {
                        let i = match self.active_index().await {
                            Some(i) => i,
                            None => self.pick(Role::Controller),
                        };
                        ev.targets.push(self.name(i));
                        ev.detail.push(format!(
                            "killed {delay} ms into the create of {name} ({BIG_PARTITIONS} partitions)"
                        ));
                        self.cluster.lock().unwrap().nodes[i].kill();
                        Undo::Restart(i)
                    }
                }
            }
            "stale-controller-request" => {
                self.zombie(&mut ev).await;
                Undo::Nothing
            }
            "one-way-from-active-controller" | "one-way-to-active-controller" => {
                let a = self.active_or_noted(&mut ev).await;
                ev.targets.push(self.name(a));
                let others: Vec<usize> = (0..n).filter(|&j| j != a).collect();
                let cuts: Vec<(usize, usize)> = if kind == "one-way-from-active-controller" {
                    others.iter().map(|&j| (a, j)).collect()
                } else {
                    others.iter().map(|&j| (j, a)).collect()
                };
                self.cut_one_way(&cuts, &mut ev)
            }
            "one-way-halves" => {
                let (a, b) = self.halves(n);
                ev.targets.push(format!(
                    "{:?} -/-> {:?}",
                    a.iter().map(|&i| self.name(i)).collect::<Vec<_>>(),
                    b.iter().map(|&i| self.name(i)).collect::<Vec<_>>()
                ));
                let cuts = cross(&a, &b);
                self.cut_one_way(&cuts, &mut ev)
            }
            "bridge" => {
                let (mut a, b) = self.halves(n);
                // The bridge: one node of the larger half, linked to both.
                let bridge = a.pop().expect("a cluster has nodes");
                ev.targets.push(format!(
                    "{:?} <- {} -> {:?}",
                    a.iter().map(|&i| self.name(i)).collect::<Vec<_>>(),
                    self.name(bridge),
                    b.iter().map(|&i| self.name(i)).collect::<Vec<_>>()
                ));
                let cuts = cross(&a, &b);
                self.cut(&cuts, &mut ev)
            }
            "isolate-leader" | "isolate-leader-with-brokers" => {
                let a = self.active_or_noted(&mut ev).await;
                let (ctrls, mut brokers) = {
                    let c = self.cluster.lock().unwrap();
                    (indexes(&c, Role::Controller), indexes(&c, Role::Broker))
                };
                // With brokers: a random non-empty set of them stays on
                // the leader's side (they keep hearing from a controller
                // that lost its quorum).
                let mut side = vec![a];
                if kind == "isolate-leader-with-brokers" && !brokers.is_empty() {
                    brokers.shuffle(&mut self.rng);
                    let k = self.rng.random_range(1..=brokers.len());
                    side.extend(brokers.drain(..k));
                }
                let rest: Vec<usize> = ctrls
                    .into_iter()
                    .filter(|&k| k != a)
                    .chain(brokers)
                    .collect();
                ev.targets.push(format!(
                    "{:?} | {:?}",
                    side.iter().map(|&i| self.name(i)).collect::<Vec<_>>(),
                    rest.iter().map(|&i| self.name(i)).collect::<Vec<_>>()
                ));
                let cuts = cross(&side, &rest);
                self.cut(&cuts, &mut ev)
            }
            "kill-all-controllers" | "kill-all-brokers" => {
                let role = if kind == "kill-all-brokers" {
                    Role::Broker
                } else {
                    Role::Controller
                };
                let mut c = self.cluster.lock().unwrap();
                let v = indexes(&c, role);
                for &i in &v {
                    ev.targets.push(c.nodes[i].name().to_string());
                    c.nodes[i].kill();
                }
                Undo::RestartAll(v)
            }
            "remove-voter" | "remove-active-voter" => {
                let i = if kind == "remove-active-voter" {
                    self.active_or_noted(&mut ev).await
                } else {
                    self.pick(Role::Controller)
                };
                let (id, addr) = {
                    let c = self.cluster.lock().unwrap();
                    (u64::from(c.nodes[i].id), c.nodes[i].address())
                };
                ev.targets.push(self.name(i));
                match self.voter_change(id, None).await {
                    Ok(()) => Undo::AddVoter(id, addr),
                    Err(e) => {
                        ev.detail.push(format!("RemoveVoter refused: {e}"));
                        Undo::Nothing
                    }
                }
            }
            "replace-voter" => self.replace_voter(&mut ev).await,
            "clock-skew-node" | "clock-skew-all" => match self.clock_dir.clone() {
                None => {
                    ev.detail
                        .push("nodes not under libfaketime: skew skipped".into());
                    Undo::Nothing
                }
                Some(dir) => {
                    let v: Vec<usize> = if kind == "clock-skew-all" {
                        (0..n).collect()
                    } else {
                        vec![self.rng.random_range(0..n)]
                    };
                    for &i in &v {
                        let skew = crate::clock::Skew::draw(&mut self.rng);
                        let name = self.name(i);
                        match crate::clock::set(&crate::clock::file_of(&dir, &name), Some(&skew)) {
                            Ok(()) => ev.detail.push(format!("{name}: {}", skew.line())),
                            Err(e) => ev.detail.push(format!("{name}: cannot skew: {e}")),
                        }
                        ev.targets.push(name);
                    }
                    Undo::Clock(v)
                }
            },
            "net-slow" => {
                let slow = crate::netem::Slow::draw(&mut self.rng);
                let ips: Vec<Ipv4Addr> = {
                    let c = self.cluster.lock().unwrap();
                    c.nodes.iter().map(ip).collect()
                };
                ev.targets.push("every node".into());
                match self.netem.as_mut() {
                    Some(netem) => match netem.slow(&ips, &slow) {
                        Ok(()) => {
                            ev.detail.push(netem.describe(&slow));
                            Undo::Netem
                        }
                        Err(e) => {
                            ev.detail.push(format!("tc failed: {e}"));
                            let _ = netem.heal();
                            Undo::Nothing
                        }
                    },
                    None => {
                        ev.detail.push("no tc: slow network skipped".into());
                        Undo::Nothing
                    }
                }
            }
            k if k.starts_with("disk-") => {
                use keel_testkit::fiu::{Calls, Errno};
                let i = if k.ends_with("active-controller") {
                    match self.active_index().await {
                        Some(i) => i,
                        None => self.pick(Role::Controller),
                    }
                } else if k.ends_with("-broker") {
                    self.pick(Role::Broker)
                } else {
                    self.pick(Role::Controller)
                };
                let calls = if k.contains("-sync-") {
                    Calls::Sync
                } else if k.contains("-open-") {
                    Calls::Open
                } else {
                    Calls::Pwrite
                };
                // A broker's epoch before the fault: it must never be
                // lower after it.
                let epoch_before = self.epochs_of(&[i]).await.into_values().next().flatten();
                let errno = if k.contains("enospc") {
                    Errno::Enospc
                } else {
                    Errno::Eio
                };
                ev.targets.push(self.name(i));
                self.disk_faulted.lock().unwrap().insert(i, None);
                let r = self.cluster.lock().unwrap().disk_fault(i, calls, errno);
                match r {
                    Ok(()) => Undo::Disk(i, calls, epoch_before, ev.start_ms),
                    Err(e) => {
                        self.disk_faulted.lock().unwrap().remove(&i);
                        ev.detail.push(format!("fiu-ctrl failed: {e:#}"));
                        Undo::Nothing
                    }
                }
            }
            _ => Undo::Nothing,
        };
        (ev, undo)
    }

    /// Asks the big-create worker for a create of [`BIG_PARTITIONS`]
    /// partitions and returns once it is a random 30-1500 ms under way:
    /// somewhere in deciding, storing or replicating its entries, depending
    /// on the machine. `None` if no create could be started.
    pub(crate) async fn big_create_under_way(&mut self) -> Option<(String, u64)> {
        let big = self.big_create.clone()?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let asked = big.send(tx).await.is_ok();
        let name = match tokio::time::timeout(Duration::from_secs(10), rx).await {
            Ok(Ok(name)) if asked => name,
            _ => return None,
        };
        let delay = self.rng.random_range(30..1_500u64);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        Some((name, delay))
    }

    /// Asks the big-create worker for a create of [`BIG_PARTITIONS`]
    /// partitions unless it is busy with one; returns the topic's name
    /// once the request is on its way (`None` if busy or not within
    /// `within`).
    pub(crate) async fn start_big_create(&self, within: Duration) -> Option<String> {
        let big = self.big_create.as_ref()?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        big.try_send(tx).ok()?;
        tokio::time::timeout(within, rx).await.ok()?.ok()
    }

    /// Drops packets from the first node of each pair to the second only.
    /// When a broker no longer hears from any controller, packets from
    /// 127.0.0.1 to it are dropped too (controllers' connections to brokers
    /// leave from there), and the other way round.
    fn cut_one_way(&mut self, cuts: &[(usize, usize)], ev: &mut FaultEvent) -> Undo {
        let pairs = {
            let c = self.cluster.lock().unwrap();
            let mut v: Vec<(Ipv4Addr, Ipv4Addr)> = cuts
                .iter()
                .map(|&(a, b)| (ip(&c.nodes[a]), ip(&c.nodes[b])))
                .collect();
            let ctrls = indexes(&c, Role::Controller);
            for b in indexes(&c, Role::Broker) {
                if ctrls.iter().all(|&k| cuts.contains(&(k, b))) {
                    v.push((LOOPBACK, ip(&c.nodes[b])));
                }
                if ctrls.iter().all(|&k| cuts.contains(&(b, k))) {
                    v.push((ip(&c.nodes[b]), LOOPBACK));
                }
            }
            v
        };
        match self.net.as_mut() {
            Some(net) => {
                if let Err(e) = net.cut_one_way(&pairs) {
                    ev.detail.push(format!("iptables failed: {e}"));
                }
                ev.detail
                    .push(format!("{} one-way DROP rules", net.rules()));
                Undo::Net
            }
            None => {
                ev.detail.push("no packet filter: partition skipped".into());
                Undo::Nothing
            }
        }
    }

    fn cut(&mut self, cuts: &[(usize, usize)], ev: &mut FaultEvent) -> Undo {
        let pairs = self.pairs(cuts);
        match self.net.as_mut() {
            Some(net) => {
                if let Err(e) = net.cut(&pairs) {
                    ev.detail.push(format!("iptables failed: {e}"));
                }
                ev.detail.push(format!("{} DROP rules", net.rules()));
                Undo::Net
            }
            None => {
                ev.detail.push("no packet filter: partition skipped".into());
                Undo::Nothing
            }
        }
    }

    /// Sends every live broker a LeaderAndIsr stamped with an older
    /// controller epoch than it has seen.
    async fn zombie(&mut self, ev: &mut FaultEvent) {
        let brokers: Vec<(u32, String)> = {
            let c = self.cluster.lock().unwrap();
            c.brokers()
                .filter(|n| n.running() && !n.process.paused())
                .map(|n| (n.id, n.address()))
                .collect()
        };
        for (id, addr) in brokers {
            let Some(d) =
                client::describe_broker(&self.transport, &addr, Duration::from_millis(700)).await
            else {
                continue;
            };
            if d.controller_epoch_seen < 1 {
                continue;
            }
            let mine: Vec<&pb::PartitionState> = d
                .cache
                .iter()
                .filter(|p| p.replicas.contains(&id) && p.leader.is_some())
                .collect();
            if mine.is_empty() {
                continue;
            }
            let mut p = mine[self.rng.random_range(0..mine.len())].clone();
            p.leader_epoch += 1;
            p.partition_epoch += 1;
            let leaders = d
                .brokers
                .iter()
                .filter(|b| Some(b.broker_id) == p.leader)
                .cloned()
                .collect();
            let stale = d.controller_epoch_seen - 1;
            let req = pb::LeaderAndIsrRequest {
                stamp: Some(pb::ControllerStamp {
                    controller_id: ZOMBIE_CONTROLLER as u32,
                    controller_epoch: stale,
                    broker_epoch: d.broker_epoch,
                }),
                partitions: vec![p.clone()],
                leaders,
            };
            let Some(ch) = client::channel(
                &self.zombie_transport,
                &addr,
                CLIENT_IP.into(),
                Duration::from_millis(1500),
                client::Expect::Broker(id),
            ) else {
                continue;
            };
            let answer = match BrokerControlServiceClient::new(ch)
                .leader_and_isr(req)
                .await
            {
                Err(s) => Some(format!("GRPC_{:?}", s.code()).to_uppercase()),
                Ok(r) => {
                    let r = r.into_inner();
                    r.error.map(|e| client::code_name(e.code)).or_else(|| {
                        r.partitions
                            .first()
                            .and_then(|pe| pe.error.as_ref())
                            .map(|e| client::code_name(e.code))
                    })
                }
            };
            let accepted = answer.is_none();
            ev.targets.push(format!("b{id}"));
            ev.detail.push(format!(
                "b{id}: epoch {stale} < seen {} -> {}",
                d.controller_epoch_seen,
                answer.as_deref().unwrap_or("ACCEPTED")
            ));
            self.probes.lock().unwrap().push(ZombieProbe {
                broker: id,
                at_ms: self.ms(),
                stale_epoch: stale,
                seen_epoch: d.controller_epoch_seen,
                topic_id: keel_metadata::TopicId::from_bytes(&p.topic_id)
                    .map(|t| t.to_string())
                    .unwrap_or_default(),
                partition: p.partition,
                answer,
                accepted,
            });
        }
    }

    async fn heal(&mut self, undo: Undo) -> Vec<String> {
        match undo {
            Undo::Power(p) => self.restore_power(p).await,
            Undo::Net => match self.net.as_mut().map(|n| n.heal()) {
                Some(Err(e)) => vec![format!("heal failed: {e}")],
                _ => vec![],
            },
            Undo::Restart(i) => {
                let mut c = self.cluster.lock().unwrap();
                match c.nodes[i].start() {
                    Ok(()) => vec![],
                    Err(e) => vec![format!("cannot restart {}: {e:#}", c.nodes[i].name())],
                }
            }
            Undo::Resume(i) => {
                self.cluster.lock().unwrap().nodes[i].process.resume();
                vec![]
            }
            Undo::RestartAll(v) => {
                let mut c = self.cluster.lock().unwrap();
                v.into_iter()
                    .filter_map(|i| {
                        c.nodes[i]
                            .start()
                            .err()
                            .map(|e| format!("cannot restart {}: {e:#}", c.nodes[i].name()))
                    })
                    .collect()
            }
            Undo::Clock(v) => self.true_time(&v),
            Undo::AddVoter(id, addr) => {
                // Bounded: the removal may still be committing, or the
                // active controller moving.
                let start = Instant::now();
                let mut last = String::new();
                while start.elapsed() < VOTER_BACK_WAIT {
                    match self.voter_change(id, Some((&addr, ""))).await {
                        Ok(()) => {
                            return vec![format!(
                                "node {id} a voter again after {} ms",
                                start.elapsed().as_millis()
                            )]
                        }
                        Err(e) => last = e,
                    }
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                self.voters_missing.push(id);
                vec![format!("node {id} NOT added back: {last}")]
            }
            Undo::Readmit(id, addr, directory) => {
                // Bounded: the re-admission may still be catching up, or
                // have been cut short by another fault.
                let start = Instant::now();
                let mut last = String::new();
                let mut asked = Instant::now();
                while start.elapsed() < VOTER_BACK_WAIT {
                    match self.quorum_member(id).await {
                        Some((status, d)) if d == directory && status != "learner" => {
                            return vec![format!(
                                "node {id} a voter with its new data dir {} ms into the heal",
                                start.elapsed().as_millis()
                            )]
                        }
                        // A learner with the new dir: catching up, or left
                        // a learner by an AddVoter that gave up on it (the
                        // node was down): asked again now and then, as an
                        // operator would.
                        Some((_, d)) if d == directory => {
                            last = "still a learner".into();
                            if asked.elapsed() >= READMIT_RETRY {
                                asked = Instant::now();
                                if let Err(e) =
                                    self.voter_change(id, Some((&addr, &directory))).await
                                {
                                    last = format!("still a learner; AddVoter: {e}");
                                }
                            }
                        }
                        _ => {
                            if let Err(e) = self.voter_change(id, Some((&addr, &directory))).await {
                                last = e;
                            }
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                self.voters_missing.push(id);
                vec![format!(
                    "node {id} NOT a voter with its new data dir: {last}"
                )]
            }
            Undo::Netem => match self.netem.as_mut().map(|n| n.heal()) {
                Some(Err(e)) => vec![format!("removing the slow network failed: {e}")],
                _ => vec![],
            },
            Undo::Disk(i, calls, epoch_before, start_ms) => {
                let (out, broker) = {
                    let mut c = self.cluster.lock().unwrap();
                    // The crash watch may have seen (and reaped) the stop
                    // already; if not, it is recorded here.
                    if let Some(st) = c.nodes[i].process.exited() {
                        let at = self.ms();
                        self.disk_stops.lock().unwrap().push(DiskStop::new(
                            c.nodes[i].name(),
                            at,
                            st,
                        ));
                    }
                    let out = match c.nodes[i].running() {
                        false => match c.nodes[i].start() {
                            Ok(()) => {
                                vec![format!("{} had stopped; started again", c.nodes[i].name())]
                            }
                            Err(e) => vec![format!("cannot restart {}: {e:#}", c.nodes[i].name())],
                        },
                        true => match c.clear_disk_fault(i, calls) {
                            // A broker takes a log dir it could not use
                            // offline until it restarts (as Kafka's do):
                            // the heal restarts it, as an operator would.
                            Ok(()) if c.nodes[i].role == Role::Broker => {
                                c.nodes[i].kill();
                                match c.nodes[i].start() {
                                    Ok(()) => vec![format!(
                                        "{} kept running; restarted with its disk working again",
                                        c.nodes[i].name()
                                    )],
                                    Err(e) => {
                                        vec![format!("cannot restart {}: {e:#}", c.nodes[i].name())]
                                    }
                                }
                            }
                            Ok(()) => vec![format!(
                                "{} kept running; its disk works again",
                                c.nodes[i].name()
                            )],
                            Err(e) => vec![format!(
                                "cannot clear the fault of {}: {e:#}",
                                c.nodes[i].name()
                            )],
                        },
                    };
                    let broker = (c.nodes[i].role == Role::Broker).then_some(c.nodes[i].id);
                    (out, broker)
                };
                // A call that failed late in the window may stop the node
                // just after it: such a stop still belongs to the fault.
                self.disk_faulted
                    .lock()
                    .unwrap()
                    .insert(i, Some(Instant::now() + DISK_STOP_GRACE));
                let mut out = out;
                if let Some(id) = broker {
                    let after = self.settled_epoch(id).await;
                    if after.is_none() {
                        out.push(format!(
                            "b{id} not registered and unfenced within {} ms of the heal",
                            DISK_EPOCH_WAIT.as_millis()
                        ));
                    }
                    self.disk_epochs.push(EpochSample {
                        broker: id,
                        cut_ms: start_ms as u64,
                        before: epoch_before,
                        after,
                    });
                }
                out
            }
            Undo::Nothing => vec![],
        }
    }

    /// Heals everything: rules, crashed disks, paused and dead processes.
    pub fn heal_all(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(net) = self.net.as_mut() {
            if let Err(e) = net.heal() {
                out.push(format!("heal failed: {e}"));
            }
        }
        if let Some(netem) = self.netem.as_mut() {
            if let Err(e) = netem.heal() {
                out.push(format!("removing the slow network failed: {e}"));
            }
        }
        let n = self.cluster.lock().unwrap().nodes.len();
        out.extend(self.true_time(&(0..n).collect::<Vec<_>>()));
        let mut c = self.cluster.lock().unwrap();
        for i in 0..c.nodes.len() {
            if c.disk_crashed(i) {
                c.nodes[i].kill();
                match c.remount_disk(i) {
                    Ok(()) => out.push(format!("remounted the disk of {}", c.nodes[i].name())),
                    Err(e) => out.push(format!("{e:#}")),
                }
            }
        }
        out.extend(c.heal_processes());
        out
    }

    /// The next membership change: a replacement first (so every run with
    /// membership changes has one), then any.
    fn membership_kind(&mut self) -> &'static str {
        let replaced = self
            .faults
            .lock()
            .unwrap()
            .iter()
            .any(|f| f.kind == "replace-voter");
        let kinds = Family::Membership.kinds();
        if replaced {
            kinds[self.rng.random_range(0..kinds.len())]
        } else {
            "replace-voter"
        }
    }

    /// Runs the schedule until `until` (relative to start); each fault
    /// lasts what [`Nemesis::lengths`] draws.
    pub async fn run(&mut self, until: Duration, heal: Duration) {
        let quiet = heal.min(Duration::from_secs(5));
        tokio::time::sleep(quiet).await;
        // Families with scheduled faults (the intruder runs on its own).
        let scheduled: Vec<Family> = self
            .families
            .iter()
            .copied()
            .filter(|f| !f.kinds().is_empty())
            .collect();
        // With other families, membership changes do not get windows of
        // their own: they run alongside the other faults.
        let overlap = scheduled.contains(&Family::Membership) && scheduled.len() > 1;
        let rotation: Vec<Family> = if overlap {
            scheduled
                .iter()
                .copied()
                .filter(|f| *f != Family::Membership)
                .collect()
        } else {
            scheduled
        };
        loop {
            if rotation.is_empty() {
                break;
            }
            let family = rotation[self.rng.random_range(0..rotation.len())];
            // A zombie request is instant (held a second); the edge
            // lengths go to faults that last.
            let fault = match family {
                Family::Zombie => Duration::from_secs(1),
                // libfaketime reads a node's clock file once a second: a
                // skew must last a few reads to be seen at all.
                Family::Clock => self.lengths.next(&mut self.rng).max(CLOCK_SHORTEST),
                _ => self.lengths.next(&mut self.rng),
            };
            if self.start.elapsed() + fault + Duration::from_secs(1) > until {
                break;
            }
            // A membership change under the fault that follows.
            let side = if overlap && self.rng.random_bool(MEMBERSHIP_ALONGSIDE) {
                let kind = self.membership_kind();
                let (mut ev, undo) = self.inject(Family::Membership, kind).await;
                ev.planned_ms = Some(fault.as_millis() as u64);
                ev.detail.push(format!("alongside a {family:?} fault"));
                let idx = {
                    let mut f = self.faults.lock().unwrap();
                    f.push(ev.clone());
                    f.len() - 1
                };
                Some((ev, undo, idx))
            } else {
                None
            };
            let injected = Instant::now();
            let (mut ev, undo) = if family == Family::Power {
                let kind = self.pick_power();
                let mut ev = FaultEvent {
                    family,
                    kind: kind.name().to_string(),
                    targets: Vec::new(),
                    start_ms: self.ms(),
                    end_ms: None,
                    planned_ms: None,
                    detail: Vec::new(),
                };
                *self.current.lock().unwrap() = kind.name().to_string();
                let undo = self.inject_power(kind, fault, &mut ev).await;
                (ev, undo)
            } else {
                let kinds = family.kinds();
                let kind = if family == Family::Kill && !self.killed_mid_decision {
                    "kill-active-controller-mid-decision"
                } else if family == Family::Membership {
                    self.membership_kind()
                } else if family == Family::KillAll {
                    // Every controller, then every broker, in turn.
                    self.kill_all_windows += 1;
                    kinds[((self.kill_all_windows - 1) % 2) as usize]
                } else {
                    kinds[self.rng.random_range(0..kinds.len())]
                };
                self.inject(family, kind).await
            };
            if family != Family::Zombie {
                ev.planned_ms = Some(fault.as_millis() as u64);
            }
            *self.current.lock().unwrap() = format!("{} {}", ev.kind, ev.targets.join(" "));
            let idx = {
                let mut f = self.faults.lock().unwrap();
                f.push(ev.clone());
                f.len() - 1
            };
            let hold = match family {
                // A disk fault may have waited in the window for its
                // operation already.
                Family::Power => fault.saturating_sub(injected.elapsed()),
                _ => fault,
            };
            tokio::time::sleep(hold).await;
            *self.current.lock().unwrap() = "healing".into();
            let healing = Instant::now();
            let notes = self.heal(undo).await;
            ev.end_ms = Some(self.ms());
            ev.detail.extend(notes);
            self.faults.lock().unwrap()[idx] = ev;
            // The membership change last: its heal needs a quorum.
            if let Some((mut ev, undo, idx)) = side {
                let notes = self.heal(undo).await;
                ev.end_ms = Some(self.ms());
                ev.detail.extend(notes);
                self.faults.lock().unwrap()[idx] = ev;
            }
            *self.current.lock().unwrap() = "healed".into();
            // Waiting for power-cut nodes to come back is part of the heal
            // window.
            let heal = heal.saturating_sub(healing.elapsed());
            if self.start.elapsed() + heal > until {
                break;
            }
            tokio::time::sleep(heal).await;
        }
        *self.current.lock().unwrap() = "healed".into();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(answer: Option<&str>) -> ZombieProbe {
        ZombieProbe {
            broker: 1,
            at_ms: 1.0,
            stale_epoch: 1,
            seen_epoch: 2,
            topic_id: "t".into(),
            partition: 0,
            answer: answer.map(str::to_string),
            accepted: answer.is_none(),
        }
    }

    #[test]
    fn the_zombie_check_needs_enough_typed_refusals_and_no_acceptance() {
        let refused = || probe(Some("STALE_CONTROLLER_EPOCH"));
        assert!(zombie_check(&[refused(), refused()], 2).0);
        assert!(zombie_check(&[], 0).0, "no zombie nemesis, nothing needed");
        assert!(!zombie_check(&[], 2).0, "no probe proves nothing");
        assert!(
            !zombie_check(&[refused(), probe(Some("GRPC_UNAVAILABLE"))], 2).0,
            "a transport error is no refusal"
        );
        let (valid, detail) = zombie_check(&[refused(), refused(), probe(None)], 2);
        assert!(!valid, "an accepted stale request");
        assert_eq!(detail["accepted"], 1);
        assert!(
            !zombie_check(
                &[refused(), refused(), probe(Some(ZOMBIE_WRONG_CERTIFICATE))],
                2
            )
            .0,
            "refused for its certificate: the epoch was never tested"
        );
    }

    #[test]
    fn emptying_a_replaced_nodes_data_dir_keeps_the_dir_itself() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("raft/log")).unwrap();
        std::fs::write(d.path().join("raft/log/0001"), b"entry").unwrap();
        std::fs::write(d.path().join("meta"), b"dir id").unwrap();
        empty_dir(d.path()).unwrap();
        assert!(d.path().is_dir());
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    }

    #[test]
    fn results_name_families_as_the_command_line_does() {
        for (name, f) in Family::NEW {
            assert_eq!(serde_json::to_value(f).unwrap(), name);
        }
        assert_eq!(
            serde_json::to_value(Family::Partition).unwrap(),
            "partition"
        );
    }

    #[test]
    fn every_new_family_parses_on_its_own_and_is_in_all() {
        let all = Family::parse_list("all").unwrap();
        for (name, f) in Family::NEW {
            assert_eq!(Family::parse_list(name).unwrap(), BTreeSet::from([f]));
            assert!(all.contains(&f), "{name} in all");
            assert!(!f.kinds().is_empty());
        }
        assert!(Family::parse_list("partition-both-ways").is_err());
        assert!(Family::IsolateLeader.needs_packet_filter());
        assert!(!Family::NetSlow.needs_packet_filter());
    }

    #[test]
    fn halves_and_cross_cover_every_pair_between_the_sides() {
        let a = [0, 1, 2];
        let b = [3, 4];
        let c = cross(&a, &b);
        assert_eq!(c.len(), 6);
        assert!(c.contains(&(2, 4)) && !c.contains(&(4, 2)));
    }

    #[test]
    fn a_disk_fault_stop_other_than_the_clean_exit_is_a_violation() {
        let stop = |code: Option<i32>| DiskStop {
            node: "c1".into(),
            at_ms: 1.0,
            status: format!("{code:?}"),
            code,
        };
        assert!(disk_stop_check(&[]).0);
        assert!(disk_stop_check(&[stop(Some(4)), stop(Some(4))]).0);
        assert!(
            !disk_stop_check(&[stop(Some(4)), stop(Some(101))]).0,
            "a panic"
        );
        assert!(!disk_stop_check(&[stop(None)]).0, "killed by a signal");
    }

    #[test]
    fn a_stop_just_after_a_short_disk_fault_is_still_the_faults() {
        let now = Instant::now();
        let mut f = DiskFaulted::new();
        f.insert(0, None);
        f.insert(1, Some(now + Duration::from_secs(1)));
        f.insert(2, Some(now - Duration::from_secs(1)));
        assert_eq!(disk_stop_of(&f, 0, now), Some(false), "failing now");
        assert_eq!(disk_stop_of(&f, 1, now), Some(true), "healed a moment ago");
        assert_eq!(disk_stop_of(&f, 2, now), None, "healed long ago: a crash");
        assert_eq!(disk_stop_of(&f, 3, now), None, "never faulted: a crash");
    }

    #[test]
    fn a_broker_under_a_disk_fault_may_only_stop_cleanly_and_never_lose_its_epoch() {
        let stop = |node: &str, code: Option<i32>| DiskStop {
            node: node.into(),
            at_ms: 1.0,
            status: format!("{code:?}"),
            code,
        };
        assert!(disk_stop_check(&[stop("b2", Some(DISK_STOP_CODE))]).0);
        let (ok, detail) = disk_stop_check(&[stop("c1", Some(4)), stop("b2", Some(101))]);
        assert!(!ok, "a broker that panicked on EIO");
        assert_eq!(detail["not_clean"][0]["node"], "b2");
        let sample = |before, after| EpochSample {
            broker: 2,
            cut_ms: 1_000,
            before,
            after,
        };
        assert!(crate::nemesis::power::epoch_check(&[sample(Some(7), Some(7))]).0);
        assert!(crate::nemesis::power::epoch_check(&[sample(Some(7), Some(9))]).0);
        assert!(
            !crate::nemesis::power::epoch_check(&[sample(Some(9), Some(7))]).0,
            "back after its disk fault"
        );
    }
}
