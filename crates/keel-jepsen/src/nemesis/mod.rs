//! The nemesis: faults on a schedule (fault window, heal window), chosen
//! with a seeded RNG from the enabled families.

mod disk;
mod links;
mod membership;
pub mod power;
mod slow;
mod stops;
mod zombie;

pub use disk::{
    disk_stop_check, disk_stop_of, DiskFaulted, DiskStop, DISK_EPOCH_WAIT, DISK_STOP_CODE,
    DISK_STOP_GRACE,
};
pub use membership::{REPLACE_START_WAIT, VOTER_BACK_WAIT};
pub use zombie::{
    zombie_check, ZombieProbe, GRPC_ANSWER_PREFIX, ZOMBIE_CONTROLLER, ZOMBIE_MIN_REFUSED,
    ZOMBIE_WRONG_CERTIFICATE,
};

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_testkit::ClusterFaults;
use rand::rngs::StdRng;
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::client;
use crate::cluster::{indexes, Cluster, Role};
use crate::nemesis::power::{EpochSample, PowerKind, PowerUndo, Restart};
use crate::net::Net;

/// Fault families.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
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
                "none" => {}
                // Any other family by its name in the results.
                other => match serde_json::from_value(Value::from(other)) {
                    Ok(f) => {
                        out.insert(f);
                    }
                    Err(_) => {
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
    #[cfg(test)]
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

/// With other families, the share of their windows that also get a
/// membership change.
pub const MEMBERSHIP_ALONGSIDE: f64 = 0.3;

/// The shortest clock fault (libfaketime's files are read once a second).
pub const CLOCK_SHORTEST: Duration = Duration::from_secs(3);

/// Partitions of the creates the mid-decision kill aims at: several Raft
/// entries' worth, so the decision is one transaction over many entries.
pub const BIG_PARTITIONS: u32 = 20_000;

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

    pub(crate) fn pick(&mut self, role: Role) -> usize {
        let c = self.cluster.lock().unwrap();
        let v = indexes(&c, role);
        v[self.rng.random_range(0..v.len())]
    }

    pub(crate) fn name(&self, i: usize) -> String {
        self.cluster.lock().unwrap().nodes[i].name().to_string()
    }

    /// The names of nodes `idx`, in that order (a fault's targets).
    pub(crate) fn names(&self, idx: &[usize]) -> Vec<String> {
        idx.iter().map(|&i| self.name(i)).collect()
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
        let undo = match family {
            Family::Partition
            | Family::PartitionOneWay
            | Family::Bridge
            | Family::MajoritiesRing
            | Family::IsolateLeader => self.cut_links(kind, n, &mut ev).await,
            Family::Kill | Family::Pause | Family::KillAll => self.stop_nodes(kind, &mut ev).await,
            Family::Zombie => {
                self.zombie(&mut ev).await;
                Undo::Nothing
            }
            Family::Membership => self.change_voters(kind, &mut ev).await,
            Family::Clock => self.skew_clocks(kind, n, &mut ev),
            Family::NetSlow => self.slow_network(&mut ev),
            Family::Disk => self.fail_disk(kind, &mut ev).await,
            // Power faults are injected by `inject_power`; the intruder runs on its own.
            Family::Power | Family::Intruder => Undo::Nothing,
        };
        (ev, undo)
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
            Undo::AddVoter(id, addr) => self.add_back(id, addr).await,
            Undo::Readmit(id, addr, directory) => self.see_readmitted(id, addr, directory).await,
            Undo::Netem => match self.netem.as_mut().map(|n| n.heal()) {
                Some(Err(e)) => vec![format!("removing the slow network failed: {e}")],
                _ => vec![],
            },
            Undo::Disk(i, calls, epoch_before, start_ms) => {
                self.heal_disk(i, calls, epoch_before, start_ms).await
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
