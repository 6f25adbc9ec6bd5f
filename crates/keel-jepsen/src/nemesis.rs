//! The nemesis: faults on a schedule (fault window, heal window), chosen
//! with a seeded RNG from the enabled families.

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
use crate::net::Net;
use crate::power::{EpochSample, PowerKind, PowerUndo, Restart};

/// Fault families.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
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
    /// Power cuts and disk faults on LazyFS mounts (see [`crate::power`]).
    /// Needs root and /dev/fuse.
    Power,
    /// A controller's file system calls fail (libfiu): `fsync`/`fdatasync`
    /// with EIO, or `pwrite` with EIO or ENOSPC, for the fault window. The
    /// node must stop (exit code 4, naming the error) rather than answer
    /// from memory; it is started again at heal. Needs `fiu-utils`.
    Disk,
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
                other => {
                    return Err(format!(
                    "unknown nemesis family {other:?} (partition, kill, pause, zombie, intruder, power, disk, all, none)"
                ))
                }
            }
        }
        Ok(out)
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
            ],
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

/// The zombie checker: no probe accepted, and none refused for its
/// certificate rather than its epoch (over TLS such a probe tests nothing).
pub fn zombie_check(probes: &[ZombieProbe]) -> bool {
    probes
        .iter()
        .all(|p| !p.accepted && p.answer.as_deref() != Some(ZOMBIE_WRONG_CERTIFICATE))
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
    pub disk_faulted: Arc<Mutex<BTreeSet<usize>>>,
    /// How each node under a disk fault stopped.
    pub disk_stops: Arc<Mutex<Vec<DiskStop>>>,
    /// How a zombie controller's request speaks: with the certificate of
    /// controller [`ZOMBIE_CONTROLLER`] (over TLS a broker accepts
    /// LeaderAndIsr only from a controller; the stale epoch must be what
    /// refuses it).
    pub zombie_transport: client::Transport,
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

/// The controller whose identity the zombie requests carry.
pub const ZOMBIE_CONTROLLER: u64 = 1;

/// A zombie probe's answer when the broker refused its certificate (not
/// its epoch): the probe then tested nothing.
pub const ZOMBIE_WRONG_CERTIFICATE: &str = "GRPC_PERMISSIONDENIED";

/// Partitions of the creates the mid-decision kill aims at: several Raft
/// entries' worth, so the decision is one transaction over many entries.
pub const BIG_PARTITIONS: u32 = 20_000;

/// What to undo at heal.
pub(crate) enum Undo {
    Net,
    Restart(usize),
    Resume(usize),
    /// Start the nodes a power fault cut and wait until they are back.
    Power(PowerUndo),
    /// Let a node's failing calls succeed again, or start it again if it
    /// stopped.
    Disk(usize, keel_testkit::fiu::Calls),
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
            k if k.starts_with("disk-") => {
                use keel_testkit::fiu::{Calls, Errno};
                let i = if k.ends_with("active-controller") {
                    match self.active_index().await {
                        Some(i) => i,
                        None => self.pick(Role::Controller),
                    }
                } else {
                    self.pick(Role::Controller)
                };
                let calls = if k.contains("-sync-") {
                    Calls::Sync
                } else {
                    Calls::Pwrite
                };
                let errno = if k.contains("enospc") {
                    Errno::Enospc
                } else {
                    Errno::Eio
                };
                ev.targets.push(self.name(i));
                self.disk_faulted.lock().unwrap().insert(i);
                let r = self.cluster.lock().unwrap().disk_fault(i, calls, errno);
                match r {
                    Ok(()) => Undo::Disk(i, calls),
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
            Undo::Disk(i, calls) => {
                let mut c = self.cluster.lock().unwrap();
                // The crash watch may have seen (and reaped) the stop
                // already; if not, it is recorded here.
                if let Some(st) = c.nodes[i].process.exited() {
                    let at = self.ms();
                    self.disk_stops
                        .lock()
                        .unwrap()
                        .push(DiskStop::new(c.nodes[i].name(), at, st));
                }
                let out = match c.nodes[i].running() {
                    false => match c.nodes[i].start() {
                        Ok(()) => vec![format!("{} had stopped; started again", c.nodes[i].name())],
                        Err(e) => vec![format!("cannot restart {}: {e:#}", c.nodes[i].name())],
                    },
                    true => match c.clear_disk_fault(i, calls) {
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
                drop(c);
                self.disk_faulted.lock().unwrap().remove(&i);
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

    /// Runs the schedule until `until` (relative to start).
    pub async fn run(&mut self, until: Duration, fault: Duration, heal: Duration) {
        let quiet = heal.min(Duration::from_secs(5));
        tokio::time::sleep(quiet).await;
        // Families with scheduled faults (the intruder runs on its own).
        let scheduled: Vec<Family> = self
            .families
            .iter()
            .copied()
            .filter(|f| !f.kinds().is_empty())
            .collect();
        loop {
            if scheduled.is_empty() || self.start.elapsed() + fault + Duration::from_secs(1) > until
            {
                break;
            }
            let family = scheduled[self.rng.random_range(0..scheduled.len())];
            let injected = Instant::now();
            let (mut ev, undo) = if family == Family::Power {
                let kind = self.pick_power();
                let mut ev = FaultEvent {
                    family,
                    kind: kind.name().to_string(),
                    targets: Vec::new(),
                    start_ms: self.ms(),
                    end_ms: None,
                    detail: Vec::new(),
                };
                *self.current.lock().unwrap() = kind.name().to_string();
                let undo = self.inject_power(kind, fault, &mut ev).await;
                (ev, undo)
            } else {
                let kinds = family.kinds();
                let kind = if family == Family::Kill && !self.killed_mid_decision {
                    "kill-active-controller-mid-decision"
                } else {
                    kinds[self.rng.random_range(0..kinds.len())]
                };
                self.inject(family, kind).await
            };
            *self.current.lock().unwrap() = format!("{} {}", ev.kind, ev.targets.join(" "));
            let idx = {
                let mut f = self.faults.lock().unwrap();
                f.push(ev.clone());
                f.len() - 1
            };
            let hold = match family {
                Family::Zombie => Duration::from_secs(1),
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
}
