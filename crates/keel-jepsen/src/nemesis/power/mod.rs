//! The `power` nemesis and its two checkers.
//!
//! With `power` in the nemesis set every node's data dir sits on a LazyFS
//! mount of its own (the cluster kit's [`keel_testkit::lazyfs`]): written
//! data stays in LazyFS's cache until it is fsynced, and a power cut is
//! SIGKILL plus dropping that cache. Each fault window picks one
//! [`PowerKind`]; the first power window of a run always cuts every
//! controller at once, so a short run on a build that acknowledges
//! unflushed appends loses acknowledged writes. Four kinds aim at a
//! controller's Raft log (sled's `raft/db`) through LazyFS's own faults
//! instead: a torn write, a torn sequence of writes, a crash right before
//! or right after an fsync. For those the node keeps running until LazyFS
//! crashes itself when the operation happens (bounded by the fault window;
//! if it never happens, the node's power is cut plainly), then the node is
//! killed and its disk remounted. At heal every cut node is started again
//! on its own disk.
//!
//! Checkers (besides the run's own: no acknowledged write lost,
//! linearizability, convergence of the image hash):
//! * [`restart_check`]: every node came back within the bound after each
//!   of its power cuts (a controller answers as a member of a quorum with
//!   a leader, a broker is registered and unfenced);
//! * [`epoch_check`]: a broker's epoch as the active controller reports
//!   it, sampled before each of the broker's power cuts and once it
//!   registered again, never goes back.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use keel_testkit::ClusterFaults;
use rand::seq::SliceRandom;
use rand::Rng;
use serde::Serialize;

use crate::client;
use crate::cluster::{indexes, Role};
use crate::nemesis::{FaultEvent, Nemesis, Undo};

mod checks;
mod restore;

pub use checks::{epoch_check, restart_check, EpochSample, Restart};

/// One power fault schedule.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PowerKind {
    /// One node, controller or broker.
    OneNode,
    /// A minority of the controllers (one of three).
    ControllerMinority,
    /// The active controller while a create too large for one Raft entry
    /// is being decided, stored or replicated.
    ActiveControllerMidDecision,
    /// Every controller at once (every one killed before any cache is
    /// dropped). The first power window of a run is always this one.
    AllControllers,
    /// Every broker at once.
    AllBrokers,
    /// The next write to a controller's Raft log is split in parts, some
    /// of which reach the disk; LazyFS crashes right after it (`torn-op`).
    TornWrite,
    /// Of the first run of writes to a controller's Raft log with no fsync
    /// between them, only later ones reach the disk; LazyFS crashes right
    /// after (`torn-seq`).
    TornSequence,
    /// LazyFS crashes right before an fsync of a controller's Raft log.
    CrashBeforeFsync,
    /// LazyFS crashes right after an fsync of a controller's Raft log.
    CrashAfterFsync,
}

impl PowerKind {
    /// Every schedule, in the order the seeded RNG picks from.
    pub const ALL: [PowerKind; 9] = [
        PowerKind::OneNode,
        PowerKind::ControllerMinority,
        PowerKind::ActiveControllerMidDecision,
        PowerKind::AllControllers,
        PowerKind::AllBrokers,
        PowerKind::TornWrite,
        PowerKind::TornSequence,
        PowerKind::CrashBeforeFsync,
        PowerKind::CrashAfterFsync,
    ];

    /// The names of [`PowerKind::ALL`], as fault events and the report
    /// show them.
    pub const NAMES: &'static [&'static str] = &[
        "power-one-node",
        "power-controller-minority",
        "power-active-controller-mid-decision",
        "power-all-controllers",
        "power-all-brokers",
        "power-torn-write",
        "power-torn-sequence",
        "power-crash-before-fsync",
        "power-crash-after-fsync",
    ];

    pub fn name(self) -> &'static str {
        let i = Self::ALL
            .iter()
            .position(|k| *k == self)
            .expect("every kind is in ALL");
        Self::NAMES[i]
    }

    /// Whether this schedule arms a LazyFS fault that fires on the node's
    /// own file operations.
    fn disk_fault(self) -> bool {
        matches!(
            self,
            PowerKind::TornWrite
                | PowerKind::TornSequence
                | PowerKind::CrashBeforeFsync
                | PowerKind::CrashAfterFsync
        )
    }
}

impl Serialize for PowerKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// The file of a controller's data dir that holds its Raft log: sled keeps
/// everything (log entries, vote, state machine) in one log-structured
/// file, `raft/db`, beside `raft/conf`, `raft/snap.*` (the log's tip at
/// each open) and `raft/blobs/` (values too large for the log). Appends
/// reach the disk through writes to `db` and are made durable by its
/// `fdatasync`.
pub const RAFT_LOG_FILE: &str = "raft/db";

/// What the power nemesis restores at heal.
pub struct PowerUndo {
    kind: PowerKind,
    /// Indexes (in [`crate::cluster::Cluster::nodes`]) of the nodes cut,
    /// with when.
    cut: Vec<(usize, f64)>,
    /// The epochs of the brokers among them before the cut.
    epochs_before: BTreeMap<u32, Option<u64>>,
}

/// `s` with every regex metacharacter escaped (LazyFS matches `from_rgx`
/// as an ECMAScript regex).
fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        if "\\^$.|?*+()[]{}".contains(ch) {
            out.push('\\');
        }
        out.push(ch);
    }
    out
}

/// `s` without terminal colour sequences (`ESC [ ... m`): node logs carry
/// them, the report shows their tails as text.
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(ch) = chars.next() {
        if ch == '\u{1b}' && chars.peek() == Some(&'[') {
            // Parameters and intermediates, up to the final letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(ch);
        }
    }
    out
}

/// The LazyFS command of a disk-fault schedule against `file` (the path
/// LazyFS sees), with its parameters drawn from `rng`.
pub fn lazyfs_command(kind: PowerKind, file: &Path, rng: &mut impl Rng) -> Option<String> {
    let file = file.display().to_string();
    Some(match kind {
        PowerKind::TornWrite => {
            // `parts` equal parts, a non-empty proper subset of them kept.
            let parts = rng.random_range(2..=4u32);
            let mut persist: Vec<u32> = (1..=parts).filter(|_| rng.random_bool(0.5)).collect();
            if persist.is_empty() {
                persist.push(rng.random_range(1..=parts));
            }
            if persist.len() == parts as usize {
                persist.remove(rng.random_range(0..persist.len()));
            }
            let persist: Vec<String> = persist.iter().map(u32::to_string).collect();
            format!(
                "lazyfs::torn-op::file={file}::parts={parts}::persist={}",
                persist.join(",")
            )
        }
        PowerKind::TornSequence => {
            // The second write of the run reaches the disk, the first does
            // not. (A later one would need a longer run of writes with no
            // fsync between them than sled makes but rarely.)
            format!("lazyfs::torn-seq::op=write::file={file}::persist=2")
        }
        PowerKind::CrashBeforeFsync | PowerKind::CrashAfterFsync => {
            let timing = if kind == PowerKind::CrashBeforeFsync {
                "before"
            } else {
                "after"
            };
            format!(
                "lazyfs::crash::timing={timing}::op=fsync::from_rgx={}$",
                regex_escape(&file)
            )
        }
        _ => return None,
    })
}

/// What node `n`'s LazyFS says it did: which parts or writes it kept,
/// and the operation it crashed at (its paths named as the node sees them).
fn what_lazyfs_did(n: &keel_testkit::Node) -> String {
    let disk = keel_testkit::node_lazyfs(n);
    let inner = disk
        .and_then(|d| d.inner_path(&n.data_dir.join(RAFT_LOG_FILE)))
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    disk.map(|d| d.log_tail(40))
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            l.contains("Triggered fault")
                || l.contains("will persist")
                || l.contains("Going to persist")
        })
        .map(|l| {
            l.split("] ")
                .last()
                .unwrap_or(l)
                .replace(&inner, RAFT_LOG_FILE)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// How often the nemesis looks whether LazyFS crashed.
const DISK_POLL: Duration = Duration::from_millis(10);

impl Nemesis {
    /// The schedule of the next power window: every controller the first
    /// time, then one drawn from [`PowerKind::ALL`].
    pub(crate) fn pick_power(&mut self) -> PowerKind {
        if !self.cut_all_controllers {
            return PowerKind::AllControllers;
        }
        PowerKind::ALL[self.rng.random_range(0..PowerKind::ALL.len())]
    }

    /// Applies one power schedule; a disk fault waits up to `window` for
    /// its operation.
    pub(crate) async fn inject_power(
        &mut self,
        kind: PowerKind,
        window: Duration,
        ev: &mut FaultEvent,
    ) -> Undo {
        let targets: Vec<usize> = {
            let c = self.cluster.lock().unwrap();
            let ctrls = indexes(&c, Role::Controller);
            match kind {
                PowerKind::OneNode => vec![self.rng.random_range(0..c.nodes.len())],
                PowerKind::ControllerMinority => {
                    let mut v = ctrls.clone();
                    v.shuffle(&mut self.rng);
                    v.truncate((ctrls.len() - 1) / 2);
                    v
                }
                PowerKind::AllControllers => ctrls,
                PowerKind::AllBrokers => indexes(&c, Role::Broker),
                PowerKind::ActiveControllerMidDecision => Vec::new(),
                _ => vec![ctrls[self.rng.random_range(0..ctrls.len())]],
            }
        };
        if kind == PowerKind::AllControllers {
            self.cut_all_controllers = true;
        }
        let targets = if kind == PowerKind::ActiveControllerMidDecision {
            ev.detail.push(match self.big_create_under_way().await {
                None => {
                    "no large create could be started; cutting the active controller anyway".into()
                }
                Some((name, delay)) => format!(
                    "cut {delay} ms into the create of {name} ({} partitions)",
                    crate::nemesis::BIG_PARTITIONS
                ),
            });
            vec![self.active_or_random().await]
        } else {
            targets
        };
        for &i in &targets {
            ev.targets.push(self.name(i));
        }
        let epochs_before = self.epochs_of(&targets).await;
        let cut = if kind.disk_fault() {
            let i = targets[0];
            vec![(i, self.disk_fault(kind, i, window, ev).await)]
        } else {
            self.cut_power(&targets, ev)
        };
        Undo::Power(PowerUndo {
            kind,
            cut,
            epochs_before,
        })
    }

    async fn active_or_random(&mut self) -> usize {
        match self.active_index().await {
            Some(i) => i,
            None => self.pick(Role::Controller),
        }
    }

    /// SIGKILLs every target, then drops what each one's disk had not
    /// fsynced; returns when each was cut.
    fn cut_power(&mut self, targets: &[usize], ev: &mut FaultEvent) -> Vec<(usize, f64)> {
        let mut c = self.cluster.lock().unwrap();
        // Every process dies before any cache goes, as when the power of
        // several machines fails at once.
        for &i in targets {
            c.nodes[i].kill();
        }
        let at = self.ms();
        for &i in targets {
            if let Err(e) = c.power_cut(i) {
                ev.detail
                    .push(format!("{}: power cut failed: {e:#}", c.nodes[i].name()));
            }
        }
        targets.iter().map(|&i| (i, at)).collect()
    }

    /// Arms a LazyFS fault on controller `i`'s Raft log and waits (up to
    /// `window`) for LazyFS to crash itself on it; then kills the node and
    /// mounts its disk again. If the operation did not happen within the
    /// window, cuts its power plainly. Returns when the node was cut.
    async fn disk_fault(
        &mut self,
        kind: PowerKind,
        i: usize,
        window: Duration,
        ev: &mut FaultEvent,
    ) -> f64 {
        let armed = self.arm_disk_fault(kind, i, ev);
        let start = Instant::now();
        let crashed = match armed {
            Err(e) => {
                ev.detail.push(format!("fault not armed: {e}"));
                false
            }
            Ok(()) => self.await_disk_crash(kind, i, window, ev).await,
        };
        let mut c = self.cluster.lock().unwrap();
        c.nodes[i].kill();
        let at = self.ms();
        let name = c.nodes[i].name().to_string();
        // The operation may have come right at the end of the window; with
        // the node dead, no other can.
        let crashed = crashed || c.disk_crashed(i);
        if crashed {
            ev.detail.push(format!(
                "{name}: LazyFS crashed itself within {} ms of the fault being armed ({})",
                start.elapsed().as_millis(),
                what_lazyfs_did(&c.nodes[i])
            ));
        } else {
            ev.detail.push(format!(
                "{name}: the operation did not happen within {} ms; power cut instead",
                window.as_millis()
            ));
            if let Err(e) = c.power_cut(i) {
                ev.detail.push(format!("{name}: power cut failed: {e:#}"));
            }
        }
        // A fresh mount: after a crash LazyFS is gone, and a fault armed
        // but not fired must not fire on the restarted node.
        if let Err(e) = c.remount_disk(i) {
            ev.detail.push(format!("{name}: {e:#}"));
        }
        at
    }

    /// Gives node `i`'s LazyFS the command of `kind` against its Raft log
    /// (the command goes into the event).
    fn arm_disk_fault(
        &mut self,
        kind: PowerKind,
        i: usize,
        ev: &mut FaultEvent,
    ) -> Result<(), String> {
        let c = self.cluster.lock().unwrap();
        let n = &c.nodes[i];
        let file = keel_testkit::node_lazyfs(n)
            .and_then(|d| d.inner_path(&n.data_dir.join(RAFT_LOG_FILE)));
        match file.and_then(|f| lazyfs_command(kind, &f, &mut self.rng)) {
            None => Err(format!("{} has no LazyFS disk", n.name())),
            Some(cmd) => {
                ev.detail.push(cmd.clone());
                keel_testkit::node_lazyfs(n)
                    .map_or(Ok(()), |d| d.command(&cmd))
                    .map_err(|e| format!("{e:#}"))
            }
        }
    }

    /// Waits up to `window` for node `i`'s LazyFS to crash itself on the
    /// armed fault (a torn sequence first starts a large decision, whose
    /// run of log writes it needs); whether it did.
    async fn await_disk_crash(
        &mut self,
        kind: PowerKind,
        i: usize,
        window: Duration,
        ev: &mut FaultEvent,
    ) -> bool {
        let start = Instant::now();
        if kind == PowerKind::TornSequence {
            // A large decision writes the log in a run of buffers before
            // its fsync: what a torn sequence needs.
            match self.start_big_create(Duration::from_secs(1)).await {
                Some(name) => ev.detail.push(format!(
                    "started the create of {name} ({} partitions) for a run of log writes",
                    crate::nemesis::BIG_PARTITIONS
                )),
                None => ev.detail.push("no large create could be started".into()),
            }
        }
        while start.elapsed() < window {
            if self.cluster.lock().unwrap().disk_crashed(i) {
                return true;
            }
            tokio::time::sleep(DISK_POLL).await;
        }
        false
    }

    /// The epochs of the brokers among `nodes`, as the active controller
    /// reports them now.
    pub(crate) async fn epochs_of(&self, nodes: &[usize]) -> BTreeMap<u32, Option<u64>> {
        let ids: Vec<u32> = {
            let c = self.cluster.lock().unwrap();
            nodes
                .iter()
                .filter(|&&i| c.nodes[i].role == Role::Broker)
                .map(|&i| c.nodes[i].id)
                .collect()
        };
        if ids.is_empty() {
            return BTreeMap::new();
        }
        let now = self.broker_registrations().await;
        ids.into_iter()
            .map(|id| (id, now.get(&id).map(|&(e, _)| e)))
            .collect()
    }

    /// Every broker's (epoch, fenced) as the active controller reports it
    /// (empty if none answers).
    pub(crate) async fn broker_registrations(&self) -> BTreeMap<u32, (u64, bool)> {
        let ctrl = self.cluster.lock().unwrap().controller_addrs();
        let t = Duration::from_millis(700);
        let Some(active) = client::find_active(&self.transport, &ctrl, t).await else {
            return BTreeMap::new();
        };
        let Some(d) = client::describe_cluster(&self.transport, &active, t).await else {
            return BTreeMap::new();
        };
        d.brokers
            .iter()
            .filter_map(|b| b.broker.as_ref())
            .map(|b| (b.broker_id, (b.broker_epoch, b.fenced)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn disk_faults_name_the_raft_log_as_lazyfs_sees_it() {
        let file = Path::new("/r/disks/c1/backing/data/raft/db");
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..50 {
            let torn = lazyfs_command(PowerKind::TornWrite, file, &mut rng).unwrap();
            let (head, persist) = torn.rsplit_once("::persist=").unwrap();
            let parts: usize = head.rsplit_once("::parts=").unwrap().1.parse().unwrap();
            let kept: Vec<usize> = persist.split(',').map(|p| p.parse().unwrap()).collect();
            assert!(torn.starts_with("lazyfs::torn-op::file=/r/disks/c1/backing/data/raft/db::"));
            assert!(!kept.is_empty() && kept.len() < parts, "{torn}");
            assert!(kept.iter().all(|&k| (1..=parts).contains(&k)), "{torn}");
        }
        let seq = lazyfs_command(PowerKind::TornSequence, file, &mut rng).unwrap();
        assert!(seq.starts_with(
            "lazyfs::torn-seq::op=write::file=/r/disks/c1/backing/data/raft/db::persist="
        ));
        assert_eq!(
            lazyfs_command(PowerKind::CrashBeforeFsync, file, &mut rng).unwrap(),
            r"lazyfs::crash::timing=before::op=fsync::from_rgx=/r/disks/c1/backing/data/raft/db$"
        );
        let dotted = Path::new("/r/x.y/raft/db");
        assert_eq!(
            lazyfs_command(PowerKind::CrashAfterFsync, dotted, &mut rng).unwrap(),
            r"lazyfs::crash::timing=after::op=fsync::from_rgx=/r/x\.y/raft/db$"
        );
        assert_eq!(lazyfs_command(PowerKind::AllBrokers, file, &mut rng), None);
    }

    #[test]
    fn log_tails_lose_their_colours() {
        assert_eq!(
            strip_ansi("\u{1b}[2m2026\u{1b}[0m \u{1b}[31mERROR\u{1b}[0m replay failed"),
            "2026 ERROR replay failed"
        );
    }

    #[test]
    fn every_power_kind_has_a_name() {
        assert_eq!(PowerKind::ALL.len(), PowerKind::NAMES.len());
        for k in PowerKind::ALL {
            assert!(k.name().starts_with("power-"));
        }
        assert_eq!(PowerKind::AllControllers.name(), "power-all-controllers");
    }
}
