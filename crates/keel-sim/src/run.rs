//! One simulated run: three controllers (real openraft, Keel's state
//! machine, the simulated log store) on one thread, under a paused clock,
//! with clients writing, a nemesis injecting faults, and every source of
//! choice drawn from the run's seed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use keel_metadata::{MetadataImage, MetadataRecord, RecordBatch, TopicId, TopicRecord};
use keel_raft::{AppliedState, KeelNode, KeelRaft, NodeId, StateMachineStore};
use openraft::error::{ClientWriteError, RaftError};
use openraft::{ChangeMembers, ServerState};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout, Instant};

use crate::history::History;
use crate::net::{log_id, LinkFaults, SimNet};
use crate::store::{Crash, FlushPolicy, SimDisk};
use crate::trace::Trace;

/// How the simulated disks treat appends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskMode {
    /// As Keel's store: an append is acknowledged once a flush covers it.
    Honest,
    /// Deliberately broken: appends are acknowledged before any flush.
    #[cfg(feature = "unsafe-ack-before-flush")]
    AckBeforeFlush,
}

/// What one run does.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// Decides everything: timeouts, faults, delays, the workload.
    pub seed: u64,
    /// Simulated time with clients and faults.
    pub time: Duration,
    /// Simulated time allowed, after every fault is healed, for the
    /// cluster to commit a last write and converge.
    pub settle: Duration,
    /// Controllers in the quorum.
    pub nodes: u64,
    /// Clients writing at once.
    pub clients: usize,
    /// The disks' behaviour.
    pub disk: DiskMode,
    /// Keep every trace line (for printing), not only the digest.
    pub keep_trace: bool,
}

impl SimOptions {
    /// Defaults for `seed`: 30 s of faults, 20 s to settle, 3 nodes, 3
    /// clients, honest disks.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            time: Duration::from_secs(30),
            settle: Duration::from_secs(20),
            nodes: 3,
            clients: 3,
            disk: DiskMode::Honest,
            keep_trace: false,
        }
    }
}

/// What one run found.
#[derive(Clone, Debug)]
pub struct SimOutcome {
    /// The run's seed.
    pub seed: u64,
    /// Every invariant broken, in the order found.
    pub violations: Vec<String>,
    /// Simulated milliseconds the run took.
    pub sim_ms: u64,
    /// Digest of the trace: equal for two runs of one seed on one build.
    pub digest: u64,
    /// Lines in the trace.
    pub trace_lines: u64,
    /// The trace, when kept.
    pub trace: Option<Vec<String>>,
    /// Writes acknowledged.
    pub acked: usize,
    /// Faults injected.
    pub faults: usize,
    /// Terms that had a leader.
    pub terms_led: usize,
    /// Terms that had two leaders (openraft's (term, node) leader ids).
    pub shared_terms: usize,
}

/// Runs one seed on a runtime of its own (a current-thread runtime with a
/// paused clock and the seed's scheduling choices). The error is a local
/// failure (no runtime, no temporary store), not a finding.
pub fn run(options: &SimOptions) -> Result<SimOutcome, String> {
    let _panics = crate::panics::Capture::start();
    let mut outcome = run_on_runtime(options)?;
    for panic in crate::panics::take() {
        outcome.violations.push(format!("panic: {panic}"));
    }
    Ok(outcome)
}

fn run_on_runtime(options: &SimOptions) -> Result<SimOutcome, String> {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_time().start_paused(true);
    // `tokio::select!` picks among ready branches at random: from the seed.
    #[cfg(tokio_unstable)]
    builder.rng_seed(tokio::runtime::RngSeed::from_bytes(
        &options.seed.to_le_bytes(),
    ));
    #[cfg(not(tokio_unstable))]
    return Err(
        "keel-sim was built without `--cfg tokio_unstable` (the workspace's .cargo/config.toml \
         sets it; a RUSTFLAGS variable replaces it): its runs would not replay exactly"
            .to_string(),
    );
    #[cfg_attr(not(tokio_unstable), allow(unreachable_code))]
    let runtime = builder
        .build()
        .map_err(|e| format!("cannot start the simulation's runtime: {e}"))?;
    runtime.block_on(async {
        // The timer's resolution is a millisecond, counted from when the
        // runtime started; waiting for the first tick puts the run's start
        // (and so every time in its trace) on that grid, whatever the real
        // clock read when the runtime was built.
        sleep(Duration::from_millis(1)).await;
        World::new(options.clone())?.run().await
    })
}

/// A controller's disk and, while it runs, its process.
struct Node {
    id: NodeId,
    disk: SimDisk,
    /// Holds the state machine's snapshots (kept across crashes; sled
    /// flushes a snapshot before it is reported).
    db: sled::Db,
    starts: u64,
    running: Option<Running>,
}

struct Running {
    raft: KeelRaft,
    applied: watch::Receiver<Arc<AppliedState>>,
    tasks: Vec<JoinHandle<()>>,
}

struct World {
    options: SimOptions,
    trace: Trace,
    history: History,
    net: SimNet,
    nodes: Vec<Node>,
    /// The nemesis' choices.
    rng: StdRng,
    faults: usize,
    /// Voters the nemesis asked the leader to remove, to be put back.
    removed: BTreeSet<NodeId>,
}

/// A seeded generator for one part of the run, so that a change in how
/// one part draws does not shift another's choices.
fn part_rng(seed: u64, part: u64) -> StdRng {
    StdRng::seed_from_u64(seed ^ part.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// The batch that writes number `n`: one topic named `w-<n>`.
fn write_batch(n: u64) -> RecordBatch {
    RecordBatch::new(vec![MetadataRecord::Topic(TopicRecord {
        topic_id: TopicId(u128::from(n) + 1),
        name: format!("w-{n}"),
        configs: Default::default(),
    })])
}

impl World {
    fn new(options: SimOptions) -> Result<Self, String> {
        let trace = Trace::new(options.keep_trace);
        crate::panics::trace_to(trace.clone());
        let history = History::new(trace.clone());
        let net = SimNet::new(part_rng(options.seed, 1), trace.clone());
        let policy = match options.disk {
            DiskMode::Honest => FlushPolicy::Deferred,
            #[cfg(feature = "unsafe-ack-before-flush")]
            DiskMode::AckBeforeFlush => FlushPolicy::AckBeforeFlush,
        };
        let mut nodes = Vec::new();
        for id in 1..=options.nodes {
            let db = sled::Config::new()
                .temporary(true)
                .flush_every_ms(None)
                .open()
                .map_err(|e| format!("cannot open a temporary store: {e}"))?;
            nodes.push(Node {
                id,
                disk: SimDisk::new(policy),
                db,
                starts: 0,
                running: None,
            });
        }
        Ok(Self {
            rng: part_rng(options.seed, 2),
            options,
            trace,
            history,
            net,
            nodes,
            faults: 0,
            removed: BTreeSet::new(),
        })
    }

    /// The Raft config of node `id`: Keel's, with openraft's own election
    /// timer on (the controller's pre-vote watchdog is not simulated yet)
    /// and a timeout drawn from the seed.
    fn config(&self, id: NodeId) -> Result<openraft::Config, String> {
        let mut config = keel_raft::default_config("keel-sim");
        let mut rng = part_rng(self.options.seed, 100 + id);
        let min = rng.random_range(config.election_timeout_min..config.election_timeout_max);
        config.enable_elect = true;
        // One value per node: openraft draws in [min, max) from an
        // unseeded generator, so the range holds one value only.
        config.election_timeout_min = min;
        config.election_timeout_max = min + 1;
        config
            .validate()
            .map_err(|e| format!("simulated Raft config: {e}"))
    }

    async fn start(&mut self, index: usize) -> Result<(), String> {
        let config = Arc::new(self.config(self.nodes[index].id)?);
        let node = &mut self.nodes[index];
        node.starts += 1;
        let id = node.id;
        let log = node.disk.open();
        let sm = StateMachineStore::open(&node.db, (id << 32) + node.starts)
            .map_err(|e| format!("node {id}: state machine: {e}"))?;
        let applied = sm.subscribe();
        let raft = KeelRaft::new(id, config, self.net.factory(id), log, sm)
            .await
            .map_err(|e| format!("node {id}: raft: {e}"))?;
        self.trace
            .event(format_args!("start {id} (#{})", node.starts));
        let mut tasks = Vec::new();
        tasks.push(tokio::spawn(watch_leadership(
            raft.clone(),
            id,
            self.history.clone(),
        )));
        tasks.push(tokio::spawn(watch_applied(
            applied.clone(),
            id,
            self.history.clone(),
        )));
        let flush_rng = part_rng(self.options.seed, 200 + (id << 16) + node.starts);
        let flush_after = match self.options.disk {
            DiskMode::Honest => (50, 2_000),
            // Like sled's flush every 500 ms behind a store that does not
            // wait for it.
            #[cfg(feature = "unsafe-ack-before-flush")]
            DiskMode::AckBeforeFlush => (100_000, 500_000),
        };
        tasks.push(tokio::spawn(flusher(
            node.disk.clone(),
            flush_rng,
            flush_after,
        )));
        self.net.attach(id, raft.clone());
        node.running = Some(Running {
            raft,
            applied,
            tasks,
        });
        Ok(())
    }

    async fn crash(&mut self, index: usize, how: Crash) {
        let node = &mut self.nodes[index];
        let Some(running) = node.running.take() else {
            return;
        };
        self.net.detach(node.id);
        node.disk.crash(how);
        for task in &running.tasks {
            task.abort();
        }
        self.trace.event(format_args!("crash {} {how:?}", node.id));
        let _ = timeout(Duration::from_secs(10), running.raft.shutdown()).await;
    }

    fn leader(&self) -> Option<NodeId> {
        self.nodes.iter().find_map(|n| {
            let running = n.running.as_ref()?;
            let leading = running.raft.metrics().borrow().state == ServerState::Leader;
            leading.then_some(n.id)
        })
    }

    async fn run(mut self) -> Result<SimOutcome, String> {
        for index in 0..self.nodes.len() {
            self.start(index).await?;
        }
        let members: BTreeMap<NodeId, KeelNode> = self
            .nodes
            .iter()
            .map(|n| (n.id, KeelNode::new(format!("sim-{}", n.id))))
            .collect();
        if let Some(first) = self.nodes[0].running.as_ref() {
            first
                .raft
                .initialize(members)
                .await
                .map_err(|e| format!("initialize: {e}"))?;
        }
        let started = Instant::now();
        let stop_at = started + self.options.time;
        let next = Arc::new(AtomicU64::new(0));
        let clients: Vec<JoinHandle<()>> = (0..self.options.clients)
            .map(|c| {
                let client = Client {
                    c,
                    net: self.net.clone(),
                    history: self.history.clone(),
                    trace: self.trace.clone(),
                    rng: part_rng(self.options.seed, 300 + c as u64),
                    next: next.clone(),
                    nodes: self.options.nodes,
                };
                tokio::spawn(client.run(stop_at))
            })
            .collect();
        self.nemesis(stop_at).await?;
        for c in clients {
            let _ = c.await;
        }
        self.heal_all().await?;
        self.settle().await;
        let sim_ms = started.elapsed().as_millis() as u64;
        for index in 0..self.nodes.len() {
            if let Some(running) = self.nodes[index].running.take() {
                for task in &running.tasks {
                    task.abort();
                }
                let _ = timeout(Duration::from_secs(10), running.raft.shutdown()).await;
            }
        }
        Ok(SimOutcome {
            seed: self.options.seed,
            violations: self.history.violations(),
            sim_ms,
            digest: self.trace.digest(),
            trace_lines: self.trace.len(),
            trace: self.trace.lines(),
            acked: self.history.acked_writes().len(),
            faults: self.faults,
            terms_led: self.history.terms_led(),
            shared_terms: self.history.shared_terms(),
        })
    }

    /// Faults, one every 0.1–1.5 s until `stop_at`; crashed nodes come back
    /// 0.2–3 s later.
    async fn nemesis(&mut self, stop_at: Instant) -> Result<(), String> {
        let mut restarts: Vec<(Instant, usize)> = Vec::new();
        let n = self.nodes.len();
        loop {
            let next_fault =
                Instant::now() + Duration::from_millis(self.rng.random_range(100..1_500));
            let next_restart = restarts.iter().map(|r| r.0).min();
            let wake = next_restart.map_or(next_fault, |r| r.min(next_fault));
            if wake >= stop_at {
                break;
            }
            tokio::time::sleep_until(wake).await;
            if next_restart.is_some_and(|r| r <= wake) {
                let now = Instant::now();
                let due: Vec<usize> = restarts
                    .iter()
                    .filter(|r| r.0 <= now)
                    .map(|r| r.1)
                    .collect();
                restarts.retain(|r| r.0 > now);
                for index in due {
                    self.start(index).await?;
                }
                continue;
            }
            self.faults += 1;
            let back_after = Duration::from_millis(self.rng.random_range(200..3_000));
            match self.rng.random_range(0..11u32) {
                0 => {
                    let victim = self.rng.random_range(1..=n as u64);
                    self.trace.event(format_args!("nemesis isolate {victim}"));
                    self.isolate(victim);
                }
                1 => {
                    if let Some(leader) = self.leader() {
                        self.trace
                            .event(format_args!("nemesis isolate leader {leader}"));
                        self.isolate(leader);
                    }
                }
                2 => {
                    let from = self.rng.random_range(1..=n as u64);
                    let to = self.rng.random_range(1..=n as u64);
                    if from != to {
                        self.trace.event(format_args!("nemesis cut {from}->{to}"));
                        self.net.cut(from, to);
                    }
                }
                3 | 4 => {
                    self.trace.event("nemesis heal");
                    self.net.heal();
                }
                5 | 6 => {
                    let index = self.rng.random_range(0..n);
                    let how = self.crash_kind();
                    if self.nodes[index].running.is_some() {
                        self.crash(index, how).await;
                        restarts.push((Instant::now() + back_after, index));
                    }
                }
                7 => {
                    self.trace.event("nemesis power cut");
                    for index in 0..n {
                        let how = self.crash_kind();
                        if self.nodes[index].running.is_some() {
                            self.crash(index, how).await;
                            restarts.push((Instant::now() + back_after, index));
                        }
                    }
                }
                8 => {
                    let faults = LinkFaults {
                        loss: self.rng.random_range(0.0..0.2),
                        max_delay: Duration::from_millis(self.rng.random_range(1..40)),
                        duplicate: self.rng.random_range(0.0..0.1),
                    };
                    self.trace.event(format_args!("nemesis links {faults:?}"));
                    self.net.set_faults(faults);
                }
                9 => self.change_voters().await,
                _ => {
                    self.trace.event("nemesis clean links");
                    self.net.set_faults(LinkFaults::CLEAN);
                }
            }
        }
        Ok(())
    }

    /// Through the leader, puts back a voter removed earlier (as a learner
    /// first, then promoted), or removes one, as `keel quorum
    /// remove-voter` / `add-voter` do. An unanswered change may still
    /// commit: a voter asked to go is put back either way.
    async fn change_voters(&mut self) {
        let Some((via, leader)) = self.leader().and_then(|l| Some((l, self.net.raft(l)?))) else {
            return;
        };
        // As the controller asks: a change an earlier leader left in its
        // joint phase finished first; not mid-change, not of a removed
        // leader.
        match timeout(
            Duration::from_secs(3),
            keel_raft::finish_joint_membership(&leader),
        )
        .await
        {
            Ok(Ok(true)) => self
                .trace
                .event(format_args!("nemesis finished a joint change via {via}")),
            Ok(Ok(false)) => {}
            _ => {
                self.trace.event(format_args!(
                    "nemesis could not finish a joint change via {via}"
                ));
                return;
            }
        }
        let membership = leader.metrics().borrow().membership_config.clone();
        if let Some(why) = keel_raft::membership_change_refusal(via, membership.membership()) {
            self.trace
                .event(format_args!("nemesis voters via {via}: refused: {why}"));
            return;
        }
        let wait = Duration::from_secs(3);
        if let Some(&back) = self.removed.iter().next() {
            self.trace
                .event(format_args!("nemesis re-add {back} via {via}"));
            let node = KeelNode::new(format!("sim-{back}"));
            let learner = timeout(wait, leader.add_learner(back, node, true)).await;
            let voter = match learner {
                Ok(Ok(_)) => {
                    let change = ChangeMembers::AddVoterIds(BTreeSet::from([back]));
                    timeout(wait, leader.change_membership(change, false)).await
                }
                _ => {
                    self.trace
                        .event(format_args!("nemesis re-add {back}: learner not added"));
                    return;
                }
            };
            let done = matches!(voter, Ok(Ok(_)));
            self.trace
                .event(format_args!("nemesis re-add voter {back} done={done}"));
            if done {
                self.removed.remove(&back);
            }
        } else {
            let victim = self.rng.random_range(1..=self.nodes.len() as u64);
            self.trace
                .event(format_args!("nemesis remove {victim} via {via}"));
            let change = ChangeMembers::RemoveVoters(BTreeSet::from([victim]));
            let removed = timeout(wait, leader.change_membership(change, false)).await;
            self.trace.event(format_args!(
                "nemesis remove voter {victim} done={}",
                matches!(removed, Ok(Ok(_)))
            ));
            self.removed.insert(victim);
        }
    }

    fn crash_kind(&mut self) -> Crash {
        if self.rng.random_bool(0.5) {
            Crash::LoseUnflushed
        } else {
            Crash::Torn {
                keep: self.rng.random_range(0..4),
            }
        }
    }

    fn isolate(&self, victim: NodeId) {
        for other in self.nodes.iter().map(|n| n.id).filter(|&o| o != victim) {
            self.net.cut(victim, other);
            self.net.cut(other, victim);
        }
    }

    /// Heals every link and starts every node that is down.
    async fn heal_all(&mut self) -> Result<(), String> {
        self.trace.event("heal all");
        self.net.heal();
        self.net.set_faults(LinkFaults::CLEAN);
        for index in 0..self.nodes.len() {
            if self.nodes[index].running.is_none() {
                self.start(index).await?;
            }
        }
        Ok(())
    }

    /// Commits one last write through the leader, waits for every node to
    /// apply it, and checks the end state: every acknowledged write on
    /// every node, one image everywhere.
    async fn settle(&mut self) {
        let deadline = Instant::now() + self.options.settle;
        while !self.removed.is_empty() && Instant::now() < deadline {
            self.change_voters().await;
            sleep(Duration::from_millis(100)).await;
        }
        if !self.removed.is_empty() {
            self.history.violation(format!(
                "voters {:?} were not put back within {} ms of healing",
                self.removed,
                self.options.settle.as_millis()
            ));
            return;
        }
        let mut last = None;
        while last.is_none() && Instant::now() < deadline {
            if let Some(leader) = self.leader().and_then(|l| self.net.raft(l)) {
                if let Ok(Ok(r)) = timeout(
                    Duration::from_secs(2),
                    leader.client_write(write_batch(u64::MAX - 1)),
                )
                .await
                {
                    last = Some(r.log_id);
                    self.trace
                        .event(format_args!("final write at {}", log_id(Some(r.log_id))));
                    break;
                }
            }
            sleep(Duration::from_millis(100)).await;
        }
        let Some(last) = last else {
            self.history.violation(format!(
                "no leader committed a write within {} ms of healing",
                self.options.settle.as_millis()
            ));
            return;
        };
        // Every node applied the final write, and the same log (an entry
        // may follow it: a new leader's blank entry).
        let everyone_applied = |nodes: &[Node]| {
            let applied: Vec<Option<u64>> = nodes
                .iter()
                .map(|n| {
                    let running = n.running.as_ref()?;
                    running.applied.borrow().last_applied.map(|a| a.index)
                })
                .collect();
            applied.iter().all(|a| a.is_some_and(|a| a >= last.index))
                && applied.windows(2).all(|w| w[0] == w[1])
        };
        while !everyone_applied(&self.nodes) && Instant::now() < deadline {
            sleep(Duration::from_millis(50)).await;
        }
        let converged = everyone_applied(&self.nodes);
        if !converged {
            self.history.violation(format!(
                "the nodes did not all apply index {} and end on one log within {} ms of healing",
                last.index,
                self.options.settle.as_millis()
            ));
        }
        self.check_end(converged);
    }

    /// Every acknowledged write is on every node that applied its index;
    /// once `converged`, every node holds the same image.
    fn check_end(&self, converged: bool) {
        let images: Vec<(NodeId, Arc<AppliedState>)> = self
            .nodes
            .iter()
            .filter_map(|n| Some((n.id, n.running.as_ref()?.applied.borrow().clone())))
            .collect();
        for acked in self.history.acked_writes() {
            for (id, state) in &images {
                let reached = state
                    .last_applied
                    .is_some_and(|a| a.index >= acked.log_id.index);
                if reached && !has_write(&state.image, acked.n) {
                    self.history.violation(format!(
                        "acknowledged write w-{} (at {}) is missing on node {id}",
                        acked.n,
                        log_id(Some(acked.log_id))
                    ));
                }
            }
        }
        if !converged {
            return;
        }
        let digests: Vec<(NodeId, Option<u64>, String)> = images
            .iter()
            .map(|(id, s)| (*id, s.last_applied.map(|l| l.index), s.image.hash()))
            .collect();
        if digests
            .windows(2)
            .any(|w| w[0].1 != w[1].1 || w[0].2 != w[1].2)
        {
            self.history
                .violation(format!("nodes ended apart: {digests:?}"));
        }
    }
}

fn has_write(image: &MetadataImage, n: u64) -> bool {
    image.topic_by_name(&format!("w-{n}")).is_some()
}

async fn watch_leadership(raft: KeelRaft, id: NodeId, history: History) {
    let mut metrics = raft.metrics();
    loop {
        let (state, term) = {
            let m = metrics.borrow_and_update();
            (m.state, m.current_term)
        };
        if state == ServerState::Leader {
            history.leader(term, id);
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

async fn watch_applied(
    mut applied: watch::Receiver<Arc<AppliedState>>,
    id: NodeId,
    history: History,
) {
    loop {
        let state = applied.borrow_and_update().clone();
        if let Some(last) = state.last_applied {
            // The image's digest costs an encoding of the whole image:
            // taken at every 64th index, the entry's id at every one.
            let digest = if last.index % 64 == 0 {
                state.image.hash()
            } else {
                String::new()
            };
            history.applied(id, last, digest);
        }
        if applied.changed().await.is_err() {
            return;
        }
    }
}

/// Flushes the disk `after` (µs, drawn in the range) each write arrives.
async fn flusher(disk: SimDisk, mut rng: StdRng, after: (u64, u64)) {
    let written = disk.written();
    loop {
        written.notified().await;
        sleep(Duration::from_micros(rng.random_range(after.0..after.1))).await;
        disk.flush();
    }
}

/// A client writing numbered topics through whichever node it believes
/// leads, one write at a time.
struct Client {
    c: usize,
    net: SimNet,
    history: History,
    trace: Trace,
    rng: StdRng,
    /// The next write's number, shared by every client.
    next: Arc<AtomicU64>,
    nodes: u64,
}

impl Client {
    async fn run(self, stop_at: Instant) {
        let Client {
            c,
            net,
            history,
            trace,
            mut rng,
            next,
            nodes,
        } = self;
        let mut hint: Option<NodeId> = None;
        while Instant::now() < stop_at {
            let target = hint.unwrap_or_else(|| rng.random_range(1..=nodes));
            let Some(raft) = net.raft(target) else {
                hint = None;
                sleep(Duration::from_millis(rng.random_range(10..100))).await;
                continue;
            };
            let n = next.fetch_add(1, Ordering::Relaxed);
            let outcome = timeout(Duration::from_secs(3), raft.client_write(write_batch(n))).await;
            match outcome {
                Ok(Ok(r)) => {
                    trace.event(format_args!(
                        "client {c} w-{n} via {target} acked at {}",
                        log_id(Some(r.log_id))
                    ));
                    history.acked(n, r.log_id);
                }
                Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => {
                    trace.event(format_args!(
                        "client {c} w-{n} via {target} not leader (-> {:?})",
                        f.leader_id
                    ));
                    hint = f.leader_id.filter(|&l| l != target);
                }
                Ok(Err(e)) => {
                    trace.event(format_args!("client {c} w-{n} via {target} failed: {e}"));
                    hint = None;
                }
                Err(_) => {
                    trace.event(format_args!("client {c} w-{n} via {target} timed out"));
                    hint = None;
                }
            }
            sleep(Duration::from_millis(rng.random_range(5..60))).await;
        }
    }
}
