//! The active controller's event loop: one task owns every decision.
//!
//! Each [`Command`] is a named event carrying a pure decide step. The loop
//! drains the queue into a batch, decides every command in order against a
//! working copy of the image (each sees the effects of those before it),
//! proposes all their records as one Raft entry (split only when huge), and
//! answers every command once the entry commits. On any sign of lost
//! leadership it answers NOT_CONTROLLER to everything pending and stops.
//!
//! The loop waits for each commit before deciding the next batch, on
//! purpose: openraft 0.9's core makes every client write an entry of its
//! own, so deciding ahead of the commit only makes more, smaller entries
//! (each decoded, stored and replayed on every node); waiting lets
//! everything that queued meanwhile share the next entry and its flush.
//! (Deciding one batch ahead against the uncommitted image measured no
//! faster in `keel bench commit`, when the leader still flushed each entry
//! before replicating it, and slower since the leader's flush overlaps
//! replication: two batches in flight gave 12,388 and 7,863 records/s at
//! 64 writers against 15,446 and 10,508, bulk 121,141 and 101,288 against
//! 139,426 and 121,866, with more servers' CPU per record, in two
//! alternating pairs.)

use std::sync::Arc;
use std::time::Instant;

use keel_metadata::decide::Replayed;
use keel_metadata::entries::lay_out;
use keel_metadata::planner;
use keel_metadata::{
    ApiError, BrokerId, ErrorCode, MetadataImage, MetadataRecord, RecordBatch, TopicPartition,
};
use keel_raft::KeelRaft;
use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::sync::{mpsc, oneshot};

use crate::channel::{ChannelManager, DeletionReport};
use crate::command::{mark_proposed, outcome_unknown, Command, CommandKind, DecideEnv, Reply};
use crate::shared::{now_ms, Shared};
use crate::tasks;

/// Commands decided together in one batch, at most.
pub const MAX_COMMANDS_PER_BATCH: usize = 512;
/// Records per Raft entry, at most: a decision larger than this (a broker
/// failure touching 100,000 partitions) spans a few entries. Together with
/// the entries-per-AppendEntries limit in `keel_raft::default_config` it
/// bounds an RPC (openraft gives AppendEntries one heartbeat interval).
pub const MAX_RECORDS_PER_ENTRY: usize = 5_000;
/// A batch of at least this many records is logged with its decide and
/// commit times once committed (a broker failure, a large election).
const LARGE_BATCH_RECORDS: usize = 10_000;

/// Why a proposal did not commit.
#[derive(Debug, thiserror::Error)]
pub enum ProposeError {
    #[error("not the leader any more")]
    NotLeader,
    #[error("raft stopped: {0}")]
    Fatal(String),
}

/// Proposes `entries` in order, all in flight at once. Returns the log
/// index of each entry that committed, in order, up to the first that did
/// not, and why that one did not (entries after it did not either: a
/// leader's writes commit in order).
pub async fn propose(
    raft: &KeelRaft,
    entries: Vec<RecordBatch>,
) -> (Vec<u64>, Option<ProposeError>) {
    let mut pending = Vec::with_capacity(entries.len());
    for entry in entries {
        match raft.client_write_ff(entry).await {
            Ok(rx) => pending.push(rx),
            Err(e) => {
                // Raft stopped; whatever was handed over may still commit.
                let (committed, _) = Box::pin(await_all(pending)).await;
                return (committed, Some(ProposeError::Fatal(e.to_string())));
            }
        }
    }
    await_all(pending).await
}

type Pending = tokio::sync::oneshot::Receiver<
    Result<
        openraft::raft::ClientWriteResponse<keel_raft::TypeConfig>,
        openraft::error::ClientWriteError<u64, keel_raft::KeelNode>,
    >,
>;

async fn await_all(pending: Vec<Pending>) -> (Vec<u64>, Option<ProposeError>) {
    let mut committed = Vec::with_capacity(pending.len());
    for rx in pending {
        match rx.await {
            Ok(Ok(resp)) => committed.push(resp.log_id.index),
            Ok(Err(_)) => return (committed, Some(ProposeError::NotLeader)),
            Err(e) => return (committed, Some(ProposeError::Fatal(e.to_string()))),
        }
    }
    (committed, None)
}

/// One command of a decided batch.
struct Part {
    kind: CommandKind,
    /// The principal that asked for it, if an operator did (see
    /// `Command::who`).
    who: Option<String>,
    records: Vec<MetadataRecord>,
    reply: Reply,
}

/// What one batch of commands decided.
struct Decided {
    parts: Vec<Part>,
    stop_replicas: Vec<(TopicPartition, BrokerId)>,
    /// The broker requests the records call for and their summary; `None`
    /// when nothing was decided (every command answers at once).
    plan: Option<(planner::BrokerRequestPlan, tasks::ChangeSummary)>,
}

/// Takes a decide step's records into the working image: its proof's
/// image when it handed one over that fits (checked against a fresh replay
/// in debug builds), else the records replayed in place (no copy of the
/// working image per command: a copy would make every replay below copy
/// the paths it touches). On an error the working image may hold part of
/// the records; the caller rebuilds it.
fn take_in(
    working: &mut MetadataImage,
    records: &[MetadataRecord],
    proof: Option<Replayed>,
) -> Result<(), String> {
    if let Some(proof) = proof {
        if !proof.fits(working, records) {
            return Err("its replayed image is not of these records on this image".into());
        }
        if cfg!(debug_assertions) {
            proof.verify(working, records).map_err(|e| e.to_string())?;
        }
        *working = proof.into_image();
        return Ok(());
    }
    let offset = working.offset() + 1;
    records
        .iter()
        .try_for_each(|r| working.replay(r, offset))
        .map_err(|e| e.to_string())
}

/// Decides `batch` in order against `base`, each command seeing the
/// records of those before it. The working image is only ever made by
/// replay: a decide step's proof, or the records replayed onto it.
fn decide(base: &MetadataImage, batch: Vec<Command>, env: &mut DecideEnv) -> Decided {
    let mut working = base.clone();
    let mut parts: Vec<Part> = Vec::new();
    let mut stop_replicas = Vec::new();
    for cmd in batch {
        let started = Instant::now();
        let kind = cmd.kind;
        let who = cmd.who.clone();
        metrics::histogram!("keel_controller_event_queue_time_seconds", "kind" => kind.as_str())
            .record(cmd.enqueued.elapsed().as_secs_f64());
        env.now_ms = now_ms();
        env.applied_at = parts
            .iter()
            .all(|p| p.records.is_empty())
            .then(|| base.offset());
        let (mut p, proposed) = cmd.decide(&working, env);
        if let Err(e) = take_in(&mut working, &p.records, p.replayed.take()) {
            // A decision that does not replay is a bug in the decide step:
            // refuse it, and rebuild the working image by a fresh replay of
            // what was accepted before it.
            tracing::error!(%kind, error = %e, "decision produced an inconsistent record; refused");
            let accepted: Vec<MetadataRecord> = parts
                .iter()
                .flat_map(|p| p.records.iter().cloned())
                .collect();
            match Replayed::replay(base, &accepted) {
                Ok(proof) => working = proof.into_image(),
                Err(e) => {
                    // Every one of them replayed on this very image once.
                    tracing::error!(error = %e, "accepted records no longer replay; dropping the batch");
                    for p in parts.drain(..) {
                        (p.reply)(Err(ApiError::new(ErrorCode::Internal, e.to_string())));
                    }
                    working = base.clone();
                }
            }
            (p.on_commit)(Err(ApiError::new(ErrorCode::Internal, e)));
            continue;
        }
        metrics::histogram!("keel_controller_event_process_time_seconds", "kind" => kind.as_str())
            .record(started.elapsed().as_secs_f64());
        if !p.records.is_empty() {
            mark_proposed(&proposed);
        }
        stop_replicas.extend(p.stop_replicas);
        parts.push(Part {
            kind,
            who,
            records: p.records,
            reply: p.on_commit,
        });
    }
    let any = parts.iter().any(|p| !p.records.is_empty());
    let plan = any.then(|| {
        let records: Vec<&MetadataRecord> = parts.iter().flat_map(|p| &p.records).collect();
        (
            planner::plan(base, &working, records.iter().copied()),
            tasks::ChangeSummary::of(records.iter().copied()),
        )
    });
    Decided {
        parts,
        stop_replicas,
        plan,
    }
}

/// Appends an abort for a transaction an earlier leader left open (its end
/// marker never committed), before this activation decides anything: the
/// held records of that decision are dropped on every node. False when
/// the abort did not commit (leadership lost).
async fn abort_open_transaction(shared: &Shared, epoch: u64) -> bool {
    let Some(begun_at) = shared.image().open_transaction() else {
        return true;
    };
    tracing::warn!(
        node = shared.config.node_id,
        term = epoch,
        begun_at,
        held = shared.image().held_records(),
        "an earlier leader left a transaction open; aborting it"
    );
    let abort = RecordBatch::new(vec![MetadataRecord::AbortTransaction]);
    let (committed, failed) = propose(&shared.raft, vec![abort]).await;
    if let Some(e) = failed {
        tracing::warn!(node = shared.config.node_id, term = epoch, error = %e, "the abort did not commit; leaving the active role");
        return false;
    }
    tracing::info!(
        node = shared.config.node_id,
        term = epoch,
        begun_at,
        index = committed.last().copied().unwrap_or(0),
        "open transaction aborted"
    );
    true
}

/// The batch that starts with `first`: it and the commands queued behind
/// it, up to [`MAX_COMMANDS_PER_BATCH`]; records the queue's length left.
fn fill_batch(first: Command, rx: &mut mpsc::Receiver<Command>) -> Vec<Command> {
    let mut batch = vec![first];
    while batch.len() < MAX_COMMANDS_PER_BATCH {
        match rx.try_recv() {
            Ok(c) => batch.push(c),
            Err(_) => break,
        }
    }
    metrics::gauge!("keel_controller_event_queue_size").set(rx.len() as f64);
    batch
}

/// A command's console line, by the command's position in its batch.
type AdminEvents = Vec<(usize, String)>;

/// Each decided command's records under its kind's name, in order: what
/// is laid out into entries.
type Decisions = Vec<(String, Vec<MetadataRecord>)>;

/// Takes the decided parts apart: each command's reply, its records under
/// its kind's name (to lay out), and the console's line for each
/// operator's change, by its position among the parts (an entry index is
/// known once laid out).
fn split_parts(parts: Vec<Part>, base: &MetadataImage) -> (Vec<Reply>, Decisions, AdminEvents) {
    let mut replies = Vec::with_capacity(parts.len());
    let mut decisions = Vec::with_capacity(parts.len());
    let mut admin_events = Vec::new();
    for (i, p) in parts.into_iter().enumerate() {
        if let Some(text) = crate::events::admin_event(p.kind, &p.records, base, p.who.as_deref()) {
            admin_events.push((i, text));
        }
        replies.push(p.reply);
        decisions.push((p.kind.as_str().to_string(), p.records));
    }
    (replies, decisions, admin_events)
}

/// Answers each command with the index of the entry that holds its last
/// record, once that entry committed; a command without records, once
/// every entry before it did (it was decided on them), or at `offset`
/// (the image decided on) when no entry comes before it.
fn answer_commands(
    replies: Vec<Reply>,
    last_entry: &[Option<usize>],
    committed: &[u64],
    offset: u64,
) {
    let mut needed: Option<usize> = None;
    for (reply, last) in replies.into_iter().zip(last_entry.iter().copied()) {
        needed = needed.max(last);
        let answer = match needed {
            None => Ok(offset),
            Some(e) => committed.get(e).copied().ok_or_else(outcome_unknown),
        };
        reply(answer);
    }
}

/// How long a batch took to decide and how large it is.
struct BatchTiming {
    /// When the proposal began (deciding had ended).
    started: Instant,
    /// How long deciding and planning took.
    decided_in: std::time::Duration,
    /// The records of the batch.
    record_count: usize,
}

/// Records the commit latency of a batch whose last entry committed at
/// `index`, and logs the times of a large one.
fn note_commit(shared: &Shared, epoch: u64, index: u64, timing: BatchTiming, entries: usize) {
    let committed_in = timing.started.elapsed();
    metrics::histogram!("keel_controller_commit_latency_seconds")
        .record(committed_in.as_secs_f64());
    if timing.record_count >= LARGE_BATCH_RECORDS {
        // Where a broker failure's time goes: deciding and
        // planning on this node, then storing, replicating and
        // applying the entries.
        tracing::info!(
            node = shared.config.node_id,
            term = epoch,
            index,
            records = timing.record_count,
            entries,
            decide_ms = timing.decided_in.as_secs_f64() * 1e3,
            commit_ms = committed_in.as_secs_f64() * 1e3,
            "large batch committed"
        );
    }
}

/// Puts each operator's change on the console at the index of the entry
/// that holds its last record (`index`, the batch's last, if unknown).
fn push_admin_events(
    shared: &Shared,
    epoch: u64,
    admin_events: AdminEvents,
    last_entry: &[Option<usize>],
    committed: &[u64],
    index: u64,
) {
    for (i, text) in admin_events {
        // The index of the entry that holds the change's last
        // record.
        let at = last_entry
            .get(i)
            .copied()
            .flatten()
            .and_then(|e| committed.get(e).copied())
            .unwrap_or(index);
        shared.events.push(epoch, at, text);
    }
}

/// Logs, counts and puts on the console a proposal that did not commit
/// (`committed` of its `entries` did).
fn report_failed_proposal(
    shared: &Shared,
    epoch: u64,
    e: &ProposeError,
    committed: &[u64],
    entries: usize,
) {
    tracing::warn!(
        node = shared.config.node_id,
        term = epoch,
        error = %e,
        committed = committed.len(),
        entries,
        "proposal failed; leaving the active role"
    );
    metrics::counter!("keel_controller_metadata_errors_total").increment(1);
    shared.events.push(
        epoch,
        committed.last().copied().unwrap_or(0),
        format!("a proposal to the metadata log failed ({e}); leaving the active role"),
    );
}

/// Decides one batch of commands on the applied image, proposes their
/// records and answers each command; hands the broker requests the
/// records call for to `channels`. False when the proposal failed
/// (leadership lost): the loop stops.
async fn decide_and_commit(
    shared: &Arc<Shared>,
    epoch: u64,
    batch: Vec<Command>,
    env: &mut DecideEnv,
    channels: &mut ChannelManager,
) -> bool {
    let base = shared.image();
    let decide_started = Instant::now();
    let light = batch.iter().all(|c| c.kind.is_light());
    let Decided {
        parts,
        stop_replicas,
        plan,
    } = if light {
        decide(&base, batch, env)
    } else {
        keel_raft::off_the_workers(|| decide(&base, batch, env))
    };
    let Some((plan, summary)) = plan else {
        let offset = base.offset();
        for p in parts {
            (p.reply)(Ok(offset));
        }
        channels.stop_replicas(stop_replicas);
        return true;
    };
    let started = Instant::now();
    let decided_in = started - decide_started;
    let record_count: usize = parts.iter().map(|p| p.records.len()).sum();
    let (replies, decisions, admin_events) = split_parts(parts, &base);
    let layout = lay_out(decisions, MAX_RECORDS_PER_ENTRY);
    let batches: Vec<RecordBatch> = layout.entries.into_iter().map(RecordBatch::new).collect();
    let (committed, failed) = propose(&shared.raft, batches.clone()).await;
    tasks::after_commit(shared, batches.iter().zip(&committed));
    answer_commands(replies, &layout.last_entry, &committed, base.offset());
    match failed {
        None => {
            let index = committed.last().copied().unwrap_or(base.offset());
            let timing = BatchTiming {
                started,
                decided_in,
                record_count,
            };
            note_commit(shared, epoch, index, timing, committed.len());
            // The applied image now holds these entries (with their real
            // indexes, e.g. broker epochs): plan requests from it.
            summary.log(shared.config.node_id, epoch, index, &shared.events);
            push_admin_events(
                shared,
                epoch,
                admin_events,
                &layout.last_entry,
                &committed,
                index,
            );
            channels.apply(plan, &shared.image());
            channels.stop_replicas(stop_replicas);
            true
        }
        Some(e) => {
            report_failed_proposal(shared, epoch, &e, &committed, batches.len());
            false
        }
    }
}

/// Runs the loop until `stop` fires, the queue closes, or leadership is lost.
pub(crate) async fn run(
    shared: Arc<Shared>,
    epoch: u64,
    mut rx: mpsc::Receiver<Command>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut env = DecideEnv {
        now_ms: now_ms(),
        rng: StdRng::from_os_rng(),
        epoch,
        applied_at: None,
    };
    // The first tick comes one period in: a new active controller serves
    // its first requests before any full-image housekeeping scan.
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + tasks::TICK, tasks::TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // StopReplica(delete) outcomes come back from the channels as reports,
    // which become commands of this loop.
    let (reports_tx, mut reports) = mpsc::channel::<DeletionReport>(1_024);
    let mut channels = ChannelManager::start(shared.clone(), epoch, &shared.image(), reports_tx);
    tracing::info!(
        node = shared.config.node_id,
        term = epoch,
        "active controller event loop started"
    );
    // Housekeeping ticks of this activation.
    let mut ticks = 0u64;
    while abort_open_transaction(&shared, epoch).await {
        let first = tokio::select! {
            _ = &mut stop => break,
            c = rx.recv() => match c { Some(c) => c, None => break },
            _ = tick.tick() => {
                ticks += 1;
                tasks::housekeeping(shared.clone(), ticks)
            }
            Some(r) = reports.recv() => tasks::replica_deletion_results(r),
        };
        let batch = fill_batch(first, &mut rx);

        let base = shared.image();
        if base.open_transaction().is_some() {
            // Only an earlier leader's transaction can be open here (this
            // loop waits for its own to end): abort it first, then decide.
            if !abort_open_transaction(&shared, epoch).await {
                break;
            }
        }
        if !decide_and_commit(&shared, epoch, batch, &mut env, &mut channels).await {
            break;
        }
    }
    // Dropping the queue drops every pending reply channel: each waiting
    // caller learns that this node is no longer active (NOT_CONTROLLER).
    drop(rx);
    tracing::info!(
        node = shared.config.node_id,
        term = epoch,
        "active controller event loop stopped"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{CommandKind, Proposal};
    use keel_metadata::synthetic::SyntheticCluster;

    fn env() -> DecideEnv {
        DecideEnv {
            now_ms: 0,
            rng: StdRng::seed_from_u64(7),
            epoch: 1,
            applied_at: None,
        }
    }

    /// Three registered, unfenced brokers and `topics` topics of 3
    /// partitions.
    fn base(topics: u32) -> MetadataImage {
        SyntheticCluster {
            brokers: 3,
            topics,
            partitions_per_topic: 3,
        }
        .image()
        .expect("synthetic cluster replays")
        .0
    }

    /// A command that proposes nothing and reports what `look` saw of the
    /// working image it was decided against.
    fn observer<T: Send + 'static>(
        look: impl FnOnce(&MetadataImage) -> T + Send + 'static,
    ) -> (Command, std::sync::mpsc::Receiver<T>) {
        let (seen_tx, seen_rx) = std::sync::mpsc::channel();
        let (tx, _rx) = oneshot::channel::<Result<(), ApiError>>();
        let cmd = Command::new(
            CommandKind::Housekeeping,
            move |image: &MetadataImage, _: &mut DecideEnv| {
                seen_tx.send(look(image)).expect("test alive");
                Proposal::with_reply(Vec::new(), Ok(()))
            },
            tx,
        );
        (cmd, seen_rx)
    }

    /// The records of every command of a batch, in order.
    fn records_of(d: &Decided) -> Vec<MetadataRecord> {
        d.parts.iter().flat_map(|p| p.records.clone()).collect()
    }

    /// A handed-over image that is not what replay makes (one more change
    /// than its records) is caught: the command is refused with INTERNAL,
    /// and the next command sees neither that change nor the refused
    /// command's records.
    #[test]
    fn a_handed_over_image_that_differs_from_replay_is_caught() {
        let base = base(1);
        let (b0, b1) = (BrokerId(0), BrokerId(1));
        let shutting = MetadataRecord::BrokerShuttingDown {
            broker: b0,
            epoch: base.broker(b0).expect("registered").epoch,
        };
        let honest = Replayed::replay(&base, std::slice::from_ref(&shutting)).expect("replays");
        let mut marked = honest.image().clone();
        marked
            .replay(
                &MetadataRecord::FenceBroker {
                    broker: b1,
                    epoch: base.broker(b1).expect("registered").epoch,
                },
                base.offset() + 1,
            )
            .expect("replays");
        let run = |proof: Option<Replayed>| {
            let records = vec![shutting.clone()];
            let (tx1, rx1) = oneshot::channel::<Result<(), ApiError>>();
            let first = Command::new(
                CommandKind::ControlledShutdown,
                move |_: &MetadataImage, _: &mut DecideEnv| {
                    Proposal::with_reply(records, Ok(())).with_replayed(proof)
                },
                tx1,
            );
            let (observer, seen_rx) = observer(move |image| {
                let b = |id| image.broker(id).expect("registered").clone();
                (b(b0).shutting_down, b(b1).fenced)
            });
            let decided = decide(&base, vec![first, observer], &mut env());
            let mut rx1 = rx1;
            let refused = matches!(rx1.try_recv(), Ok(Err(e)) if e.code == ErrorCode::Internal);
            (
                records_of(&decided),
                seen_rx.recv().expect("observer ran"),
                refused,
            )
        };
        let (records, seen, refused) = run(Some(honest.forged_for_tests(marked)));
        assert!(refused, "the forged image is refused");
        assert!(records.is_empty(), "nothing of it is proposed");
        assert_eq!(seen, (false, false), "the next command sees none of it");
        let (records, seen, refused) = run(Some(honest.clone()));
        assert!(!refused);
        assert_eq!(records, vec![shutting.clone()]);
        assert_eq!(seen, (true, false), "an honest image is taken");
        let (records, seen, _) = run(None);
        assert_eq!(records, vec![shutting.clone()]);
        assert_eq!(seen, (true, false), "without one, the records are replayed");
    }

    /// A decide step learns that its image is the applied image itself
    /// (`applied_at`) only while no earlier command of the batch put
    /// records on it: a heartbeat decided off the loop is taken as it is
    /// exactly then.
    #[test]
    fn applied_at_names_the_base_only_until_a_command_proposes() {
        let base = base(1);
        let b0 = BrokerId(0);
        let epoch = base.broker(b0).expect("registered").epoch;
        let (seen_tx, seen_rx) = std::sync::mpsc::channel();
        let step = |propose: bool| {
            let seen_tx = seen_tx.clone();
            let (tx, _rx) = oneshot::channel::<Result<(), ApiError>>();
            Command::new(
                CommandKind::BrokerHeartbeat,
                move |image: &MetadataImage, env: &mut DecideEnv| {
                    seen_tx.send(env.applied_at).expect("test alive");
                    let records = if propose && !image.broker(b0).expect("registered").fenced {
                        vec![MetadataRecord::FenceBroker { broker: b0, epoch }]
                    } else {
                        Vec::new()
                    };
                    Proposal::with_reply(records, Ok(()))
                },
                tx,
            )
        };
        decide(
            &base,
            vec![step(false), step(true), step(false)],
            &mut env(),
        );
        let seen: Vec<Option<u64>> = seen_rx.try_iter().collect();
        let at = Some(base.offset());
        assert_eq!(seen, vec![at, at, None]);
    }

    /// A command that hands over its decision's image is followed, in the
    /// same batch, by commands that see exactly that image: the records of
    /// both reach the proposal, and the broker request plan covers them.
    #[test]
    fn a_handed_over_image_becomes_the_working_image_of_the_batch() {
        let base = base(2);
        let b0 = BrokerId(0);
        let epoch = base.broker(b0).expect("registered").epoch;
        let (tx1, _rx1) = oneshot::channel();
        let shutdown = Command::new(
            CommandKind::ControlledShutdown,
            move |image: &MetadataImage, _: &mut DecideEnv| {
                let d = image.decide_controlled_shutdown(b0, epoch);
                assert!(d.replayed.is_some(), "controlled shutdown keeps its image");
                Proposal::from(d)
            },
            tx1,
        );
        let (observer, seen_rx) = observer(move |image| {
            let shutting = image.broker(b0).is_some_and(|b| b.shutting_down);
            let led = image
                .partitions()
                .filter(|(_, p)| p.leader == Some(b0))
                .count();
            (shutting, led)
        });
        let decided = decide(&base, vec![shutdown, observer], &mut env());
        let (shutting, led) = seen_rx.recv().expect("observer ran");
        assert!(shutting, "the second command saw the first one's records");
        assert_eq!(led, 0, "every leadership moved off the broker");
        let expected = base.decide_controlled_shutdown(b0, epoch).records;
        assert_eq!(records_of(&decided), expected);
        let (plan, _) = decided.plan.expect("records were decided");
        assert!(!plan.updates.leader_and_isr.is_empty());
    }
}
