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
use serde_json::{json, Value};

use crate::client;
use crate::cluster::{indexes, Role};
use crate::nemesis::{FaultEvent, Nemesis, Undo};

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

/// One node's power cut and what became of it: the restart checker's
/// input.
#[derive(Clone, Debug, Serialize)]
pub struct Restart {
    pub node: String,
    pub kind: PowerKind,
    pub cut_ms: f64,
    /// When it was started again (`None`: it could not be, see `problem`).
    pub restarted_ms: Option<f64>,
    /// How long after its start it answered as a member of the cluster
    /// (`None`: not within the bound).
    pub back_after_ms: Option<f64>,
    /// Why it is not back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// The end of its log, when it is not back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_tail: Option<String>,
    /// How "back" was judged, when not by following the leader.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A broker's epoch, as the active controller reported it, around one of
/// the broker's power cuts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EpochSample {
    pub broker: u32,
    pub cut_ms: u64,
    /// Just before the cut (`None`: no active controller answered).
    pub before: Option<u64>,
    /// Once it registered again and was unfenced (`None`: not within the
    /// bound; the restart checker reports that).
    pub after: Option<u64>,
}

/// Every power cut was followed by the node coming back within the bound.
pub fn restart_check(restarts: &[Restart], bound: Duration) -> (bool, Value) {
    let not_back: Vec<&Restart> = restarts
        .iter()
        .filter(|r| r.back_after_ms.is_none())
        .collect();
    let slowest = restarts
        .iter()
        .filter_map(|r| r.back_after_ms)
        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
    (
        not_back.is_empty(),
        json!({
            "power_cuts": restarts.len(),
            "bound_ms": bound.as_millis() as u64,
            "slowest_back_after_ms": slowest.map(f64::round),
            "not_back": not_back,
        }),
    )
}

/// A broker's epochs, in the order they were sampled across its power
/// cuts, never go back.
pub fn epoch_check(samples: &[EpochSample]) -> (bool, Value) {
    let mut by: BTreeMap<u32, Vec<&EpochSample>> = BTreeMap::new();
    for s in samples {
        by.entry(s.broker).or_default().push(s);
    }
    let mut went_back = Vec::new();
    let mut compared = 0usize;
    for (broker, mut cuts) in by {
        cuts.sort_by_key(|s| s.cut_ms);
        // (epoch, when and what it was) in the order observed.
        let seen: Vec<(u64, String)> = cuts
            .iter()
            .flat_map(|s| {
                [
                    s.before
                        .map(|e| (e, format!("before the cut at {} ms", s.cut_ms))),
                    s.after
                        .map(|e| (e, format!("after the cut at {} ms", s.cut_ms))),
                ]
            })
            .flatten()
            .collect();
        for w in seen.windows(2) {
            compared += 1;
            if w[1].0 < w[0].0 {
                went_back.push(json!({
                    "broker": broker,
                    "epoch": w[0].0, "when": w[0].1,
                    "then": w[1].0, "then_when": w[1].1,
                }));
            }
        }
    }
    (
        went_back.is_empty(),
        json!({"samples": samples, "comparisons": compared, "went_back": went_back}),
    )
}

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
        let armed = {
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
        };
        let start = Instant::now();
        let mut crashed = false;
        match armed {
            Err(e) => ev.detail.push(format!("fault not armed: {e}")),
            Ok(()) => {
                if kind == PowerKind::TornSequence {
                    // A large decision writes the log in a run of buffers
                    // before its fsync: what a torn sequence needs.
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
                        crashed = true;
                        break;
                    }
                    tokio::time::sleep(DISK_POLL).await;
                }
            }
        }
        let mut c = self.cluster.lock().unwrap();
        c.nodes[i].kill();
        let at = self.ms();
        let name = c.nodes[i].name().to_string();
        // The operation may have come right at the end of the window; with
        // the node dead, no other can.
        let crashed = crashed || c.disk_crashed(i);
        if crashed {
            // What LazyFS says it did: which parts or writes it kept, and
            // the operation it crashed at.
            let disk = keel_testkit::node_lazyfs(&c.nodes[i]);
            let inner = disk
                .and_then(|d| d.inner_path(&c.nodes[i].data_dir.join(RAFT_LOG_FILE)))
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            let why = disk
                .map(|d| d.log_tail(40))
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
                .join("; ");
            ev.detail.push(format!(
                "{name}: LazyFS crashed itself within {} ms of the fault being armed ({why})",
                start.elapsed().as_millis()
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

    /// Starts every cut node again on its own disk and waits (bounded)
    /// until each is back; records the restarts and the brokers' epochs.
    pub(crate) async fn restore_power(&mut self, p: PowerUndo) -> Vec<String> {
        let mut notes = Vec::new();
        let mut pending: Vec<(usize, Restart)> = Vec::new();
        {
            let mut c = self.cluster.lock().unwrap();
            for &(i, cut_ms) in &p.cut {
                let name = c.nodes[i].name().to_string();
                let mut r = Restart {
                    node: name.clone(),
                    kind: p.kind,
                    cut_ms: cut_ms.round(),
                    restarted_ms: None,
                    back_after_ms: None,
                    problem: None,
                    log_tail: None,
                    note: None,
                };
                if c.disk_crashed(i) {
                    c.nodes[i].kill();
                    if let Err(e) = c.remount_disk(i) {
                        notes.push(format!("{name}: {e:#}"));
                    }
                }
                match c.nodes[i].start() {
                    Ok(()) => r.restarted_ms = Some(self.ms().round()),
                    Err(e) => {
                        r.problem = Some(format!("cannot start: {e:#}"));
                        r.log_tail = Some(strip_ansi(&c.nodes[i].process.log_tail(20)));
                    }
                }
                pending.push((i, r));
            }
        }
        let started = Instant::now();
        let mut epochs_after: BTreeMap<u32, u64> = BTreeMap::new();
        loop {
            let waiting: Vec<usize> = pending
                .iter()
                .filter(|(_, r)| {
                    r.restarted_ms.is_some() && r.back_after_ms.is_none() && r.problem.is_none()
                })
                .map(|(i, _)| *i)
                .collect();
            if waiting.is_empty() || started.elapsed() > self.restart_bound {
                break;
            }
            let registrations = if waiting
                .iter()
                .any(|&i| self.cluster.lock().unwrap().nodes[i].role == Role::Broker)
            {
                self.broker_registrations().await
            } else {
                BTreeMap::new()
            };
            for i in waiting {
                let (role, id, addr, exited) = {
                    let mut c = self.cluster.lock().unwrap();
                    let n = &mut c.nodes[i];
                    let exited = n
                        .process
                        .exited()
                        .map(|st| st.to_string())
                        .or_else(|| (!n.running()).then(|| "not running (exited)".to_string()));
                    (n.role, n.id, n.address(), exited)
                };
                let r = &mut pending
                    .iter_mut()
                    .find(|(j, _)| *j == i)
                    .expect("pending")
                    .1;
                if let Some(st) = exited {
                    r.problem = Some(format!("exited after its restart: {st}"));
                    continue;
                }
                let t = Duration::from_millis(700);
                let back = match role {
                    Role::Controller => {
                        match client::describe_node(&self.transport, &addr, t).await {
                            None => false,
                            // A learner (a replaced node not yet promoted
                            // when the power went) is back once it follows
                            // the leader again; its promotion is the
                            // membership checker's to judge.
                            Some(d)
                                if matches!(d.role.as_str(), "leader" | "follower" | "learner")
                                    && d.leader_id.is_some() =>
                            {
                                true
                            }
                            // Serving, but following no leader: fine for a node
                            // an overlapping membership fault removed from the
                            // quorum (nobody replicates to it until that
                            // fault's heal adds it back, which the membership
                            // checker judges). Any other node must catch up.
                            Some(_) => {
                                let removed = self
                                    .quorum_members()
                                    .await
                                    .is_some_and(|m| !m.iter().any(|v| v.id == u64::from(id)));
                                if removed {
                                    r.note = Some("serving, and not a member of the quorum (an overlapping membership fault removed it; its heal adds it back)".into());
                                }
                                removed
                            }
                        }
                    }
                    Role::Broker => {
                        let own = client::describe_broker(&self.transport, &addr, t).await;
                        match (own, registrations.get(&id)) {
                            (Some(own), Some(&(epoch, fenced))) => {
                                let ok = own.broker_epoch > 0
                                    && !own.fenced
                                    && own.broker_epoch == epoch
                                    && !fenced;
                                if ok {
                                    epochs_after.insert(id, epoch);
                                }
                                ok
                            }
                            _ => false,
                        }
                    }
                };
                if back {
                    let restarted = r.restarted_ms.unwrap_or_default();
                    r.back_after_ms = Some((self.ms() - restarted).max(0.0).round());
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let mut c = self.cluster.lock().unwrap();
        for (i, r) in &mut pending {
            match r.back_after_ms {
                Some(ms) => notes.push(format!("{} back after {ms} ms", r.node)),
                None => {
                    if r.problem.is_none() {
                        r.problem = Some(format!(
                            "not back within {} ms of its restart",
                            self.restart_bound.as_millis()
                        ));
                    }
                    if r.log_tail.is_none() {
                        r.log_tail = Some(strip_ansi(&c.nodes[*i].process.log_tail(20)));
                    }
                    notes.push(format!(
                        "{} NOT back: {}",
                        r.node,
                        r.problem.as_deref().unwrap_or_default()
                    ));
                }
            }
            if c.nodes[*i].role == Role::Broker {
                let id = c.nodes[*i].id;
                self.epochs.push(EpochSample {
                    broker: id,
                    cut_ms: r.cut_ms as u64,
                    before: p.epochs_before.get(&id).copied().flatten(),
                    after: epochs_after.get(&id).copied(),
                });
            }
        }
        // Any node left on a crashed disk (none should be) gets a fresh one.
        for i in 0..c.nodes.len() {
            if c.disk_crashed(i) {
                c.nodes[i].kill();
                let _ = c.remount_disk(i);
            }
        }
        drop(c);
        self.restarts.extend(pending.into_iter().map(|(_, r)| r));
        notes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn restart(node: &str, back: Option<f64>) -> Restart {
        Restart {
            node: node.into(),
            kind: PowerKind::AllControllers,
            cut_ms: 5_000.0,
            restarted_ms: Some(13_000.0),
            back_after_ms: back,
            problem: back.is_none().then(|| "exited after its restart: exit status: 4".into()),
            log_tail: back
                .is_none()
                .then(|| "ERROR data dir .../raft is corrupt: the log entry at index 812 does not read back".into()),
            note: None,
        }
    }

    #[test]
    fn a_node_that_does_not_come_back_after_a_power_cut_fails_the_restart_check() {
        let bound = Duration::from_secs(30);
        let (ok, detail) = restart_check(
            &[restart("c1", Some(900.0)), restart("c2", Some(1_400.0))],
            bound,
        );
        assert!(ok, "{detail}");
        assert_eq!(detail["slowest_back_after_ms"], 1400.0);

        let (ok, detail) = restart_check(&[restart("c1", Some(900.0)), restart("c3", None)], bound);
        assert!(!ok);
        let not_back = detail["not_back"].as_array().unwrap();
        assert_eq!(not_back.len(), 1);
        assert_eq!(not_back[0]["node"], "c3");
        assert!(not_back[0]["log_tail"]
            .as_str()
            .unwrap()
            .contains("does not read back"));
    }

    fn sample(broker: u32, cut_ms: u64, before: Option<u64>, after: Option<u64>) -> EpochSample {
        EpochSample {
            broker,
            cut_ms,
            before,
            after,
        }
    }

    #[test]
    fn a_broker_epoch_that_goes_back_across_a_power_cut_fails_the_epoch_check() {
        // Higher after each cut, or the same (a registration retried by
        // the same incarnation gets its epoch back); unknowns skipped.
        let fine = [
            sample(1, 5_000, Some(12), Some(40)),
            sample(1, 20_000, Some(40), Some(40)),
            sample(2, 5_000, None, Some(41)),
            sample(2, 20_000, Some(41), None),
        ];
        let (ok, detail) = epoch_check(&fine);
        assert!(ok, "{detail}");
        assert_eq!(detail["comparisons"], 4);

        // Broker 1 comes back with an epoch below the one it had.
        let (ok, detail) = epoch_check(&[sample(1, 5_000, Some(40), Some(12))]);
        assert!(!ok);
        assert_eq!(detail["went_back"][0]["epoch"], 40);
        assert_eq!(detail["went_back"][0]["then"], 12);

        // Or below what it had after an earlier cut (sampled out of order).
        let (ok, detail) = epoch_check(&[
            sample(3, 20_000, Some(30), Some(50)),
            sample(3, 5_000, Some(10), Some(35)),
        ]);
        assert!(!ok);
        assert_eq!(detail["went_back"][0]["when"], "after the cut at 5000 ms");
        assert_eq!(
            detail["went_back"][0]["then_when"],
            "before the cut at 20000 ms"
        );
    }

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
