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

use keel_metadata::planner;
use keel_metadata::{
    ApiError, BrokerId, ErrorCode, MetadataImage, MetadataRecord, RecordBatch, TopicPartition,
};
use keel_raft::KeelRaft;
use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::sync::{mpsc, oneshot};

use crate::channel::{ChannelManager, DeletionReport};
use crate::command::{mark_proposed, outcome_unknown, Command, DecideEnv, Reply};
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

/// Proposes records, split into entries of at most `MAX_RECORDS_PER_ENTRY`,
/// all in flight at once; returns the index of the last entry.
pub async fn propose(raft: &KeelRaft, records: Vec<MetadataRecord>) -> Result<u64, ProposeError> {
    let mut pending = Vec::new();
    for entry in into_entries(records) {
        let rx = raft
            .client_write_ff(RecordBatch::new(entry))
            .await
            .map_err(|e| ProposeError::Fatal(e.to_string()))?;
        pending.push(rx);
    }
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

/// `records` cut into entries of at most [`MAX_RECORDS_PER_ENTRY`], in
/// order. A batch that fits is one entry as it is; a larger one is cut from
/// the front, each record moved once (splitting the tail off instead moved
/// the rest of a 100,000-record batch again for every entry).
fn into_entries(records: Vec<MetadataRecord>) -> Vec<Vec<MetadataRecord>> {
    if records.len() <= MAX_RECORDS_PER_ENTRY {
        return if records.is_empty() {
            Vec::new()
        } else {
            vec![records]
        };
    }
    let mut entries = Vec::with_capacity(records.len().div_ceil(MAX_RECORDS_PER_ENTRY));
    let mut rest = records.into_iter();
    loop {
        let entry: Vec<MetadataRecord> = rest.by_ref().take(MAX_RECORDS_PER_ENTRY).collect();
        if entry.is_empty() {
            return entries;
        }
        entries.push(entry);
    }
}

/// The working image of a batch: `base` plus `records`, each replayed at
/// the index the batch's entry will get (as in the loop).
fn rebuild(base: &MetadataImage, records: &[MetadataRecord]) -> MetadataImage {
    let mut working = base.clone();
    let offset = base.offset() + 1;
    for r in records {
        if let Err(e) = working.replay(r, offset) {
            // Every record here replayed once already on this very image.
            tracing::error!(error = %e, "accepted record no longer replays");
        }
    }
    working
}

/// What one batch of commands decided.
struct Decided {
    records: Vec<MetadataRecord>,
    replies: Vec<Reply>,
    stop_replicas: Vec<(TopicPartition, BrokerId)>,
    /// The broker requests the records call for and their summary; `None`
    /// when nothing was decided (every command answers at once).
    plan: Option<(planner::BrokerRequestPlan, tasks::ChangeSummary)>,
}

/// Decides `batch` in order against `base`, each command seeing the
/// records of those before it.
fn decide(base: &MetadataImage, batch: Vec<Command>, env: &mut DecideEnv) -> Decided {
    let mut working = base.clone();
    let mut records = Vec::new();
    let mut replies = Vec::new();
    let mut stop_replicas = Vec::new();
    for cmd in batch {
        let started = Instant::now();
        let kind = cmd.kind;
        metrics::histogram!("keel_controller_event_queue_time_seconds", "kind" => kind.as_str())
            .record(cmd.enqueued.elapsed().as_secs_f64());
        env.now_ms = now_ms();
        let (mut p, proposed) = cmd.decide(&working, env);
        let speculative_offset = working.offset() + 1;
        // Replayed in place (no copy of the working image per command:
        // a copy would make every replay below copy the paths it
        // touches); the rare failure rebuilds the working image from
        // the base and the records accepted so far. A decide step that
        // replayed its records itself hands over its image instead.
        let failed = match p.replayed.take() {
            Some(replayed) => {
                working = replayed;
                None
            }
            None => p
                .records
                .iter()
                .find_map(|r| working.replay(r, speculative_offset).err()),
        };
        if let Some(e) = failed {
            // A decision that does not replay is a bug in the decide step:
            // refuse it, keep the node running, and say so loudly.
            tracing::error!(%kind, error = %e, "decision produced an inconsistent record; refused");
            working = rebuild(base, &records);
            (p.on_commit)(Err(ApiError::new(ErrorCode::Internal, e.to_string())));
            continue;
        }
        metrics::histogram!("keel_controller_event_process_time_seconds", "kind" => kind.as_str())
            .record(started.elapsed().as_secs_f64());
        if !p.records.is_empty() {
            mark_proposed(&proposed);
        }
        records.extend(p.records);
        stop_replicas.extend(p.stop_replicas);
        replies.push(p.on_commit);
    }
    let plan = (!records.is_empty()).then(|| {
        (
            planner::plan(base, &working, &records),
            tasks::ChangeSummary::of(&records),
        )
    });
    Decided {
        records,
        replies,
        stop_replicas,
        plan,
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
    loop {
        let first = tokio::select! {
            _ = &mut stop => break,
            c = rx.recv() => match c { Some(c) => c, None => break },
            _ = tick.tick() => tasks::housekeeping(shared.clone()),
            Some(r) = reports.recv() => tasks::replica_deletion_results(r),
        };
        let mut batch = vec![first];
        while batch.len() < MAX_COMMANDS_PER_BATCH {
            match rx.try_recv() {
                Ok(c) => batch.push(c),
                Err(_) => break,
            }
        }
        metrics::gauge!("keel_controller_event_queue_size").set(rx.len() as f64);

        let base = shared.image();
        let decide_started = Instant::now();
        let light = batch.iter().all(|c| c.kind.is_light());
        let Decided {
            records,
            replies,
            stop_replicas,
            plan,
        } = if light {
            decide(&base, batch, &mut env)
        } else {
            keel_raft::off_the_workers(|| decide(&base, batch, &mut env))
        };
        let Some((plan, summary)) = plan else {
            let offset = base.offset();
            for r in replies {
                r(Ok(offset));
            }
            channels.stop_replicas(stop_replicas);
            continue;
        };
        let started = Instant::now();
        let decided_in = started - decide_started;
        let record_count = records.len();
        match propose(&shared.raft, records).await {
            Ok(index) => {
                let committed_in = started.elapsed();
                metrics::histogram!("keel_controller_commit_latency_seconds")
                    .record(committed_in.as_secs_f64());
                if record_count >= LARGE_BATCH_RECORDS {
                    // Where a broker failure's time goes: deciding and
                    // planning on this node, then storing, replicating and
                    // applying the entries.
                    tracing::info!(
                        node = shared.config.node_id,
                        term = epoch,
                        index,
                        records = record_count,
                        decide_ms = decided_in.as_secs_f64() * 1e3,
                        commit_ms = committed_in.as_secs_f64() * 1e3,
                        "large batch committed"
                    );
                }
                for r in replies {
                    r(Ok(index));
                }
                // The applied image now holds these entries (with their real
                // indexes, e.g. broker epochs): plan requests from it.
                summary.log(shared.config.node_id, epoch, index);
                channels.apply(plan, &shared.image());
                channels.stop_replicas(stop_replicas);
            }
            Err(e) => {
                tracing::warn!(node = shared.config.node_id, term = epoch, error = %e, "proposal failed; leaving the active role");
                for r in replies {
                    r(Err(outcome_unknown()));
                }
                break;
            }
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

    #[test]
    fn a_batch_is_cut_into_entries_in_order_and_none_is_empty() {
        let records = |n: usize| -> Vec<MetadataRecord> {
            (0..n)
                .map(|i| MetadataRecord::FenceBroker {
                    broker: BrokerId(i as u32),
                    epoch: keel_metadata::BrokerEpoch(0),
                })
                .collect()
        };
        assert!(into_entries(Vec::new()).is_empty());
        assert_eq!(into_entries(records(3)), vec![records(3)]);
        let max = MAX_RECORDS_PER_ENTRY;
        for n in [max, max + 1, 2 * max, 20 * max + 1] {
            let entries = into_entries(records(n));
            assert_eq!(entries.len(), n.div_ceil(max), "{n} records");
            assert!(entries.iter().all(|e| !e.is_empty() && e.len() <= max));
            assert_eq!(entries.concat(), records(n), "order kept for {n}");
        }
    }

    /// The loop takes a handed-over image as it is rather than replaying
    /// the records: an image carrying one more change than its records (a
    /// broken promise no decide step makes) shows that change to the next
    /// command, and the same proposal without the image does not.
    #[test]
    fn the_loop_takes_the_handed_over_image_instead_of_replaying() {
        let base = base(1);
        let (b0, b1) = (BrokerId(0), BrokerId(1));
        let shutting = MetadataRecord::BrokerShuttingDown {
            broker: b0,
            epoch: base.broker(b0).expect("registered").epoch,
        };
        let mut marked = base.clone();
        for r in [
            shutting.clone(),
            MetadataRecord::FenceBroker {
                broker: b1,
                epoch: base.broker(b1).expect("registered").epoch,
            },
        ] {
            marked.replay(&r, base.offset() + 1).expect("replays");
        }
        let seen = |image: Option<MetadataImage>| {
            let records = vec![shutting.clone()];
            let (tx1, _rx1) = oneshot::channel::<Result<(), ApiError>>();
            let first = Command::new(
                CommandKind::Housekeeping,
                move |_: &MetadataImage, _: &mut DecideEnv| {
                    Proposal::with_reply(records, Ok(())).with_replayed(image)
                },
                tx1,
            );
            let (observer, seen_rx) = observer(move |image| {
                let b = |id| image.broker(id).expect("registered").clone();
                (b(b0).shutting_down, b(b1).fenced)
            });
            let decided = decide(&base, vec![first, observer], &mut env());
            assert_eq!(decided.records, vec![shutting.clone()]);
            seen_rx.recv().expect("observer ran")
        };
        assert_eq!(
            seen(Some(marked)),
            (true, true),
            "the image was taken as it is"
        );
        assert_eq!(
            seen(None),
            (true, false),
            "without one, the records are replayed"
        );
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
                Proposal::with_reply(d.records, d.reply).with_replayed(d.replayed)
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
        assert_eq!(decided.records, expected);
        let (plan, _) = decided.plan.expect("records were decided");
        assert!(!plan.updates.leader_and_isr.is_empty());
    }
}
