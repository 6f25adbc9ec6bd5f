//! What the active controller's event loop runs: named [`Command`]s, each
//! carrying a pure decide step ([`Proposal`] = records to propose and how to
//! answer once they commit). The loop is the only consumer; services, the
//! periodic tasks and the channels' reports make commands.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use keel_metadata::decide::Replayed;
use keel_metadata::{ApiError, BrokerId, ErrorCode, MetadataImage, MetadataRecord, TopicPartition};
use rand::rngs::StdRng;
use tokio::sync::oneshot;

/// Declares [`CommandKind`] from one table of the kinds and their metric
/// labels, so that the enum, its labels and [`CommandKind::ALL`] name the
/// same kinds.
macro_rules! command_kinds {
    ($($(#[doc = $doc:literal])* $kind:ident => $label:literal,)+) => {
        /// Every kind of command, for metrics, logs and batching rules.
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
        pub enum CommandKind {
            $($(#[doc = $doc])* $kind,)+
        }

        impl CommandKind {
            /// Every kind, in declaration order.
            pub const ALL: &'static [CommandKind] = &[$(Self::$kind),+];

            /// The `kind` label of the loop's metrics.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$kind => $label,)+
                }
            }
        }
    };
}

command_kinds! {
    CreateTopics => "create_topics",
    DeleteTopics => "delete_topics",
    CreatePartitions => "create_partitions",
    AlterReassignments => "alter_reassignments",
    ElectLeaders => "elect_leaders",
    UnregisterBroker => "unregister_broker",
    AlterConfigs => "alter_configs",
    RegisterBroker => "register_broker",
    BrokerHeartbeat => "broker_heartbeat",
    AlterPartition => "alter_partition",
    ControlledShutdown => "controlled_shutdown",
    /// Session expiry, reconciliation, auto rebalance (the periodic tick).
    Housekeeping => "housekeeping",
    /// Brokers' answers to `StopReplica(delete)`.
    ReplicaDeletionResults => "replica_deletion_results",
    /// ACL bindings added or removed.
    AlterAcls => "alter_acls",
    /// Users' SCRAM credentials set or removed.
    AlterScramCredentials => "alter_scram_credentials",
}

impl CommandKind {
    /// A write an operator asked for (refused while the data dir is below
    /// its free-space reserve; brokers' own commands are not).
    pub fn is_admin_write(self) -> bool {
        matches!(
            self,
            Self::CreateTopics
                | Self::DeleteTopics
                | Self::CreatePartitions
                | Self::AlterReassignments
                | Self::ElectLeaders
                | Self::UnregisterBroker
                | Self::AlterConfigs
                | Self::AlterAcls
                | Self::AlterScramCredentials
        )
    }

    /// A command whose decide step is bounded by its own request (one
    /// partition's ISR, the configs named in a request): a batch of only
    /// these is decided on the runtime's worker, skipping the hand-off to a
    /// thread of its own that every other batch takes (a heartbeat may
    /// unfence a broker and elect leaders all over the image).
    pub fn is_light(self) -> bool {
        matches!(self, Self::AlterConfigs | Self::AlterPartition)
    }
}

impl std::fmt::Display for CommandKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Inputs a decide step may use besides the image: time and randomness.
pub struct DecideEnv {
    pub now_ms: u64,
    pub rng: StdRng,
    /// The controller epoch of this activation.
    pub epoch: u64,
    /// `Some(offset)` while the image handed to the decide step is the
    /// applied image at `offset` itself, with no record of an earlier
    /// command of the batch on it: a decision made off the loop on the
    /// applied image at that offset is then exactly the decision this step
    /// would make, and may be taken as it is (see `broker_heartbeat`).
    pub applied_at: Option<u64>,
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
    /// The image the decide step was given with `records` replayed onto
    /// it, with replay's proof: the loop adopts it instead of replaying.
    pub(crate) replayed: Option<Replayed>,
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
            replayed: None,
        }
    }

    /// Also send `StopReplica(delete)` to these replicas after commit.
    pub fn with_stop_replicas(mut self, v: Vec<(TopicPartition, BrokerId)>) -> Self {
        self.stop_replicas = v;
        self
    }

    /// `proof`, when given, is replay's proof of the image the decide step
    /// was given with exactly `records` replayed onto it: the loop takes
    /// that image as its working image rather than replaying the records
    /// again (it checks that the proof fits, and in debug builds replays
    /// afresh and compares). A decision's
    /// [`replayed`](keel_metadata::decide::Decision::replayed) proof
    /// qualifies when the decision was made on the image the step was given.
    pub(crate) fn with_replayed(mut self, proof: Option<Replayed>) -> Self {
        self.replayed = proof;
        self
    }

    /// Records whose reply is fixed in advance (given once they commit).
    pub fn with_reply(records: Vec<MetadataRecord>, reply: Result<T, ApiError>) -> Self {
        Self::new(records, move |commit| commit.and(reply))
    }
}

/// A decision's records and reply (or its refusal of the whole request),
/// with its replay proof.
impl<T: Send + 'static> From<keel_metadata::Decision<Result<T, ApiError>>> for Proposal<T> {
    fn from(d: keel_metadata::Decision<Result<T, ApiError>>) -> Self {
        Self::with_reply(d.records, d.reply).with_replayed(d.replayed)
    }
}

type Run = Box<dyn FnOnce(&MetadataImage, &mut DecideEnv) -> Decided + Send>;

/// Answers a command once its records commit (with their index) or fail to.
pub(crate) type Reply = Box<dyn FnOnce(Result<u64, ApiError>) + Send>;

/// A command's decide step, run: its type-erased proposal.
pub(crate) struct Decided {
    pub(crate) records: Vec<MetadataRecord>,
    pub(crate) stop_replicas: Vec<(TopicPartition, BrokerId)>,
    pub(crate) replayed: Option<Replayed>,
    pub(crate) on_commit: Reply,
}

/// One named event for the loop.
pub struct Command {
    pub(crate) kind: CommandKind,
    pub(crate) enqueued: Instant,
    /// The principal that asked for it, when an operator's request did and
    /// the caller is known: named in the console's event for the change.
    pub(crate) who: Option<String>,
    run: Run,
    /// Set once the command's records were handed to Raft: from then on a
    /// dropped reply means "outcome unknown", not "not the controller".
    proposed: Arc<AtomicBool>,
}

impl Command {
    pub(crate) fn new<T, D>(
        kind: CommandKind,
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
            Decided {
                records: p.records,
                stop_replicas: p.stop_replicas,
                replayed: p.replayed,
                on_commit: Box::new(move |r| {
                    let _ = reply.send(finish(r));
                }),
            }
        });
        Self {
            kind,
            enqueued: Instant::now(),
            who: None,
            run,
            proposed: Arc::new(AtomicBool::new(false)),
        }
    }

    /// An internal command nobody waits for.
    pub(crate) fn internal<D>(kind: CommandKind, decide: D) -> Self
    where
        D: FnOnce(&MetadataImage, &mut DecideEnv) -> Proposal<()> + Send + 'static,
    {
        let (tx, _rx) = oneshot::channel();
        Self::new(kind, decide, tx)
    }

    /// Names the principal that asked for the command.
    pub(crate) fn by(mut self, who: Option<String>) -> Self {
        self.who = who;
        self
    }

    /// A flag that turns true when the command's records are proposed.
    pub(crate) fn proposed_flag(&self) -> Arc<AtomicBool> {
        self.proposed.clone()
    }

    /// Runs the decide step against `image`.
    pub(crate) fn decide(
        self,
        image: &MetadataImage,
        env: &mut DecideEnv,
    ) -> (Decided, Arc<AtomicBool>) {
        let proposed = self.proposed;
        ((self.run)(image, env), proposed)
    }
}

/// Marks a command's records as handed to Raft.
pub(crate) fn mark_proposed(flag: &AtomicBool) {
    flag.store(true, Ordering::Release);
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

/// A reply channel was dropped before the command was proposed: the event
/// loop stopped (resignation); safe to retry elsewhere.
pub(crate) fn resigned() -> ApiError {
    ApiError::new(
        ErrorCode::NotController,
        "the controller resigned before the request completed; retry",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_have_distinct_metric_labels_and_only_bounded_ones_are_light() {
        use CommandKind::*;
        let all = CommandKind::ALL;
        let labels: std::collections::BTreeSet<&str> = all.iter().map(|k| k.as_str()).collect();
        assert_eq!(labels.len(), all.len());
        let light: Vec<CommandKind> = all.iter().copied().filter(|k| k.is_light()).collect();
        assert_eq!(light, vec![AlterConfigs, AlterPartition]);
    }
}
