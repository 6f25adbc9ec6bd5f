//! The active controller's event loop: one task owns every decision.
//!
//! Each [`Command`] is a named event carrying a pure decide step. The loop
//! drains the queue into a batch, decides every command in order against a
//! working copy of the image (each sees the effects of those before it),
//! proposes all their records as one Raft entry (split only when huge), and
//! answers every command once the entry commits. On any sign of lost
//! leadership it answers NOT_CONTROLLER to everything pending and stops.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_metadata::planner;
use keel_metadata::{
    ApiError, BrokerId, ErrorCode, MetadataImage, MetadataRecord, RecordBatch, TopicPartition,
};
use keel_raft::KeelRaft;
use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::sync::{mpsc, oneshot};

use crate::channel::ChannelManager;
use crate::shared::{now_ms, Shared};

/// Commands decided together in one batch, at most.
pub const MAX_COMMANDS_PER_BATCH: usize = 512;
/// Records per Raft entry, at most: a decision larger than this (a broker
/// failure touching 100,000 partitions) spans a few entries. Together with
/// the entries-per-AppendEntries limit in `keel_raft::default_config` it
/// bounds an RPC (openraft gives AppendEntries one heartbeat interval).
pub const MAX_RECORDS_PER_ENTRY: usize = 5_000;
/// Period of the housekeeping tick (session expiry, reconciliation).
pub const TICK: Duration = Duration::from_millis(200);

/// Inputs a decide step may use besides the image: time and randomness.
pub struct DecideEnv {
    pub now_ms: u64,
    pub rng: StdRng,
    /// The controller epoch of this activation.
    pub epoch: u64,
}

/// What to do when the proposed records commit (with their log index) or
/// fail to.
pub type Finish<T> = Box<dyn FnOnce(Result<u64, ApiError>) -> Result<T, ApiError> + Send>;

/// A decide step's outcome: records to propose and how to answer.
pub struct Proposal<T> {
    pub records: Vec<MetadataRecord>,
    pub finish: Finish<T>,
    /// `StopReplica(delete)` to send once the records commit (deletion
    /// manager); each broker's answer comes back as a command.
    pub stop_replicas: Vec<(TopicPartition, BrokerId)>,
}

impl<T: Send + 'static> Proposal<T> {
    /// Records to propose; `finish` maps the commit outcome to the reply.
    pub fn new(
        records: Vec<MetadataRecord>,
        finish: impl FnOnce(Result<u64, ApiError>) -> Result<T, ApiError> + Send + 'static,
    ) -> Self {
        Self {
            records,
            finish: Box::new(finish),
            stop_replicas: Vec::new(),
        }
    }

    /// Also send `StopReplica(delete)` to these replicas after commit.
    pub fn with_stop_replicas(mut self, v: Vec<(TopicPartition, BrokerId)>) -> Self {
        self.stop_replicas = v;
        self
    }

    /// Records whose reply is fixed in advance (given once they commit).
    pub fn with_reply(records: Vec<MetadataRecord>, reply: Result<T, ApiError>) -> Self {
        Self::new(records, move |commit| commit.and(reply))
    }
}

type Run = Box<dyn FnOnce(&MetadataImage, &mut DecideEnv) -> Erased + Send>;

/// Answers one command with its batch's commit outcome.
type Reply = Box<dyn FnOnce(Result<u64, ApiError>) + Send>;

struct Erased {
    records: Vec<MetadataRecord>,
    stop_replicas: Vec<(TopicPartition, BrokerId)>,
    on_commit: Reply,
}

/// One named event for the loop.
pub struct Command {
    kind: &'static str,
    enqueued: Instant,
    run: Run,
    /// Set once the command's records were handed to Raft: from then on a
    /// dropped reply means "outcome unknown", not "not the controller".
    proposed: Arc<AtomicBool>,
}

impl Command {
    pub(crate) fn new<T, D>(
        kind: &'static str,
        decide: D,
        reply: oneshot::Sender<Result<T, ApiError>>,
    ) -> Self
    where
        T: Send + 'static,
        D: FnOnce(&MetadataImage, &mut DecideEnv) -> Proposal<T> + Send + 'static,
    {
        let run: Run = Box::new(move |image, env| {
            let p = decide(image, env);
            let finish = p.finish;
            Erased {
                records: p.records,
                stop_replicas: p.stop_replicas,
                on_commit: Box::new(move |r| {
                    let _ = reply.send(finish(r));
                }),
            }
        });
        Self {
            kind,
            enqueued: Instant::now(),
            run,
            proposed: Arc::new(AtomicBool::new(false)),
        }
    }

    /// A flag that turns true when the command's records are proposed.
    pub(crate) fn proposed_flag(&self) -> Arc<AtomicBool> {
        self.proposed.clone()
    }

    /// An internal command nobody waits for.
    pub(crate) fn internal<D>(kind: &'static str, decide: D) -> Self
    where
        D: FnOnce(&MetadataImage, &mut DecideEnv) -> Proposal<()> + Send + 'static,
    {
        let (tx, _rx) = oneshot::channel();
        Self::new(kind, decide, tx)
    }
}

/// Why a proposal did not commit.
#[derive(Debug, thiserror::Error)]
pub enum ProposeError {
    #[error("not the leader any more")]
    NotLeader,
    #[error("raft stopped: {0}")]
    Fatal(String),
}

/// Hands records to Raft, split into entries of at most
/// `MAX_RECORDS_PER_ENTRY`, in order; returns one receiver per entry. The
/// entries take consecutive log positions after everything handed over
/// before, so decisions made against an image holding those earlier
/// records stay valid.
async fn hand_over(
    raft: &KeelRaft,
    records: Vec<MetadataRecord>,
) -> Result<Vec<Committing>, ProposeError> {
    let mut pending = Vec::new();
    let mut rest = records;
    while !rest.is_empty() {
        let tail = if rest.len() > MAX_RECORDS_PER_ENTRY {
            rest.split_off(MAX_RECORDS_PER_ENTRY)
        } else {
            Vec::new()
        };
        let rx = raft
            .client_write_ff(RecordBatch::new(std::mem::replace(&mut rest, tail)))
            .await
            .map_err(|e| ProposeError::Fatal(e.to_string()))?;
        pending.push(rx);
    }
    Ok(pending)
}

/// The answer to one entry handed to Raft.
type Committing = <<keel_raft::TypeConfig as openraft::RaftTypeConfig>::Responder as openraft::raft::responder::Responder<keel_raft::TypeConfig>>::Receiver;

/// Waits for entries handed over by [`hand_over`]; returns the index of the last.
async fn committed(pending: Vec<Committing>) -> Result<u64, ProposeError> {
    let mut last = 0;
    for rx in pending {
        match rx.await {
            Ok(Ok(resp)) => last = last.max(resp.log_id.index),
            Ok(Err(_)) => return Err(ProposeError::NotLeader),
            Err(e) => return Err(ProposeError::Fatal(e.to_string())),
        }
    }
    Ok(last)
}

/// Proposes records and waits until all of them commit; returns the index
/// of the last entry.
pub async fn propose(raft: &KeelRaft, records: Vec<MetadataRecord>) -> Result<u64, ProposeError> {
    committed(hand_over(raft, records).await?).await
}

/// Leadership was lost while the records were being committed: they may or
/// may not have been committed by the next leader, so the caller must not
/// blindly retry (it is not NOT_CONTROLLER, which means "never proposed").
pub fn outcome_unknown() -> ApiError {
    ApiError::new(
        ErrorCode::RequestTimedOut,
        "leadership was lost while the change was being committed; its outcome is unknown: check before retrying",
    )
}

/// Batches decided and handed to Raft but not yet committed, at most.
///
/// Above 1, the loop decides the next batch against the image *with* the
/// records in flight (the speculative image) instead of waiting for their
/// commit. With openraft 0.9 that buys nothing measurable: its core writes
/// and flushes every client write separately and waits for each flush, so
/// two small entries cost two flushes, while waiting lets the next batch
/// grow and share one flush (depth 1 vs 2 measured equal within noise at
/// 1/16/64 writers). Kept at 1: every decision sees only committed state.
pub const MAX_IN_FLIGHT: usize = 1;

/// What to do once a batch in flight settles (in the order batches were decided).
struct Settle {
    /// The batch had records (else it only waits for those before it).
    proposed: bool,
    replies: Vec<Reply>,
    plan: Option<planner::BrokerRequestPlan>,
    summary: Option<crate::tasks::ChangeSummary>,
    stop_replicas: Vec<(TopicPartition, BrokerId)>,
    started: Instant,
}

type Waiting =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<u64, ProposeError>> + Send>>;

/// The decided batches in flight, oldest first.
#[derive(Default)]
struct Pipeline {
    commits: futures::stream::FuturesOrdered<Waiting>,
    settles: std::collections::VecDeque<Settle>,
    /// A batch in flight registers a broker: its epoch is the log index, which
    /// only the commit tells, so nothing more is decided until it commits.
    barrier: bool,
}

impl Pipeline {
    fn len(&self) -> usize {
        self.settles.len()
    }

    fn push(&mut self, wait: Waiting, settle: Settle) {
        self.commits.push_back(wait);
        self.settles.push_back(settle);
    }

    /// Answers everything still in flight after leadership was lost.
    fn fail_all(&mut self, shared: &Shared) {
        self.commits = futures::stream::FuturesOrdered::new();
        for s in self.settles.drain(..) {
            fail(s, shared);
        }
    }
}

/// A batch whose commit failed or was never learned: records may or may
/// not be committed (outcome unknown); a batch without records was decided
/// on state that may never commit, so it is told to ask the new controller.
fn fail(s: Settle, shared: &Shared) {
    let e = if s.proposed {
        outcome_unknown()
    } else {
        ApiError::new(ErrorCode::NotController, shared.not_controller().message)
    };
    for r in s.replies {
        r(Err(e.clone()));
    }
}

/// Runs the loop until `stop` fires, the queue closes, or leadership is lost.
pub(crate) async fn run(
    shared: Arc<Shared>,
    epoch: u64,
    mut rx: mpsc::Receiver<Command>,
    events: mpsc::Sender<Command>,
    mut stop: oneshot::Receiver<()>,
) {
    use futures::StreamExt;

    let mut env = DecideEnv {
        now_ms: now_ms(),
        rng: StdRng::from_os_rng(),
        epoch,
    };
    // The first tick comes one period in: a new active controller serves
    // its first requests before any full-image housekeeping scan.
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + TICK, TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut channels = ChannelManager::start(shared.clone(), epoch, &shared.image(), events);
    // The committed image plus every record in flight.
    let mut spec = shared.image();
    let mut pipeline = Pipeline::default();
    tracing::info!(
        node = shared.config.node_id,
        term = epoch,
        "active controller event loop started"
    );
    loop {
        let can_decide = !pipeline.barrier && pipeline.len() < MAX_IN_FLIGHT;
        let first = tokio::select! {
            biased;
            _ = &mut stop => break,
            Some(result) = pipeline.commits.next(), if pipeline.len() > 0 => {
                let Some(s) = pipeline.settles.pop_front() else { break };
                if !settle(&shared, &mut channels, epoch, s, result) {
                    pipeline.fail_all(&shared);
                    break;
                }
                if pipeline.len() == 0 {
                    // Nothing in flight: the committed image is the whole
                    // truth again (with real log indexes).
                    spec = shared.image();
                    pipeline.barrier = false;
                }
                continue;
            }
            c = rx.recv(), if can_decide => match c { Some(c) => c, None => break },
            _ = tick.tick(), if can_decide => crate::tasks::housekeeping(shared.clone()),
        };
        let mut batch = vec![first];
        while batch.len() < MAX_COMMANDS_PER_BATCH {
            match rx.try_recv() {
                Ok(c) => batch.push(c),
                Err(_) => break,
            }
        }
        metrics::gauge!("keel_controller_event_queue_size").set(rx.len() as f64);

        let base = spec.clone();
        let mut working = spec.clone();
        let mut records = Vec::new();
        let mut replies = Vec::new();
        let mut stop_replicas = Vec::new();
        for cmd in batch {
            let started = Instant::now();
            metrics::histogram!("keel_controller_event_queue_time_seconds", "kind" => cmd.kind)
                .record(cmd.enqueued.elapsed().as_secs_f64());
            env.now_ms = now_ms();
            let before = working.clone();
            let proposed = cmd.proposed.clone();
            let p = (cmd.run)(&working, &mut env);
            let speculative_offset = working.offset() + 1;
            if let Some(e) = p
                .records
                .iter()
                .find_map(|r| working.replay(r, speculative_offset).err())
            {
                // A decision that does not replay is a bug in the decide step:
                // refuse it, keep the node running, and say so loudly.
                tracing::error!(kind = cmd.kind, error = %e, "decision produced an inconsistent record; refused");
                working = before;
                (p.on_commit)(Err(ApiError::new(ErrorCode::Internal, e.to_string())));
                continue;
            }
            metrics::histogram!("keel_controller_event_process_time_seconds", "kind" => cmd.kind)
                .record(started.elapsed().as_secs_f64());
            if !p.records.is_empty() {
                proposed.store(true, Ordering::Release);
            }
            records.extend(p.records);
            stop_replicas.extend(p.stop_replicas);
            replies.push(p.on_commit);
        }
        if records.is_empty() {
            if pipeline.len() == 0 {
                // Decided on committed state: answer now.
                let offset = working.offset();
                for r in replies {
                    r(Ok(offset));
                }
                channels.stop_replicas(stop_replicas);
            } else {
                // Decided on state still in flight: answer once it commits.
                let settle = Settle {
                    proposed: false,
                    replies,
                    plan: None,
                    summary: None,
                    stop_replicas,
                    started: Instant::now(),
                };
                pipeline.push(Box::pin(async { Ok(0) }), settle);
            }
            continue;
        }
        let registers = records
            .iter()
            .any(|r| matches!(r, MetadataRecord::RegisterBroker(_)));
        let settle = Settle {
            proposed: true,
            replies,
            plan: Some(planner::plan(&base, &working, &records)),
            summary: Some(crate::tasks::ChangeSummary::of(&records)),
            stop_replicas,
            started: Instant::now(),
        };
        match hand_over(&shared.raft, records).await {
            Ok(entries) => {
                spec = working;
                pipeline.barrier |= registers;
                pipeline.push(Box::pin(committed(entries)), settle);
            }
            Err(e) => {
                tracing::warn!(node = shared.config.node_id, term = epoch, error = %e, "proposal failed; leaving the active role");
                fail(settle, &shared);
                pipeline.fail_all(&shared);
                break;
            }
        }
    }
    // Batches still in flight are answered once Raft settles them (leadership
    // lost: quickly, with an error), within a bound.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while pipeline.len() > 0 {
        match tokio::time::timeout_at(deadline, pipeline.commits.next()).await {
            Ok(Some(result)) => {
                let Some(s) = pipeline.settles.pop_front() else {
                    break;
                };
                if !settle(&shared, &mut channels, epoch, s, result) {
                    break;
                }
            }
            Ok(None) | Err(_) => break,
        }
    }
    pipeline.fail_all(&shared);
    // Dropping the queue drops every pending reply channel: each waiting
    // caller learns that this node is no longer active (NOT_CONTROLLER).
    drop(rx);
    tracing::info!(
        node = shared.config.node_id,
        term = epoch,
        "active controller event loop stopped"
    );
}

/// Answers a batch that settled and sends what its records change to the
/// brokers; false if it failed (leadership lost).
fn settle(
    shared: &Shared,
    channels: &mut ChannelManager,
    epoch: u64,
    s: Settle,
    result: Result<u64, ProposeError>,
) -> bool {
    if !s.proposed {
        // Everything before it committed (batches settle in order).
        let offset = shared.image().offset();
        for r in s.replies {
            r(Ok(offset));
        }
        channels.stop_replicas(s.stop_replicas);
        return true;
    }
    match result {
        Ok(index) => {
            metrics::histogram!("keel_controller_commit_latency_seconds")
                .record(s.started.elapsed().as_secs_f64());
            for r in s.replies {
                r(Ok(index));
            }
            // The applied image now holds these entries (with their real
            // indexes, e.g. broker epochs): plan requests from it.
            if let Some(summary) = s.summary {
                summary.log(shared.config.node_id, epoch, index);
            }
            if let Some(plan) = s.plan {
                channels.apply(&plan, &shared.image(), index);
            }
            channels.stop_replicas(s.stop_replicas);
            true
        }
        Err(e) => {
            tracing::warn!(node = shared.config.node_id, term = epoch, error = %e, "proposal failed; leaving the active role");
            fail(s, shared);
            false
        }
    }
}
