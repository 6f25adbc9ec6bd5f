//! The active controller's decide functions.
//!
//! Each one reads the image (`&self`) and a trigger, and returns the records
//! to append plus the reply to send once they commit. Nothing here mutates
//! the image: a decision that needs to see the effect of its own earlier
//! records replays them on an O(1) clone (the [`Working`] copy), so every
//! record it emits is known to replay cleanly.
//!
//! Expected refusals are typed [`ApiError`](crate::ApiError)s in the reply,
//! per item where the request has items; a refused item contributes no
//! records, and a batch with one bad item still decides the good ones.

mod acls;
mod brokers;
mod chain;
mod deletion;
mod partitions;
mod permitted;
mod reassign;
mod scram;
mod topics;

pub use acls::{AclFilter, MAX_ACLS};
pub use brokers::{Heartbeat, HeartbeatReply, RegisterBroker, RegisterReply};
pub use chain::{Chain, ReplayMismatch, Replayed};
pub use deletion::DeletionStep;
pub use partitions::{AlterPartitionItem, ElectionKind};
pub use permitted::decide_permitted;
pub use scram::{duplicate_user, duplicated_users, MAX_SCRAM_CREDENTIALS};
pub use topics::{ConfigOp, CreatePartitions, CreateTopic, CreatedTopic};

use crate::ids::{BrokerId, TopicPartition};
use crate::image::{MetadataImage, PartitionImage};
use crate::records::{LeaderChange, MetadataRecord, PartitionChangeRecord};
use crate::selectors::Election;

/// Most partitions one topic may have (Kafka's practical ceiling).
pub const MAX_PARTITIONS_PER_TOPIC: u32 = 100_000;
/// Most replicas one partition may have; Kafka carries it as an `i16`.
pub const MAX_REPLICATION_FACTOR: u32 = i16::MAX as u32;

/// What a decide function returns: the records to append as one Raft entry
/// (possibly none) and the reply to send once they commit.
#[derive(Clone, PartialEq, Eq)]
pub struct Decision<R> {
    /// In replay order; empty when nothing changes.
    pub records: Vec<MetadataRecord>,
    /// Sent to the caller after the records commit.
    pub reply: R,
    /// The image the decision was made on with exactly `records` replayed
    /// onto it, each at that image's offset + 1, when the decision built it
    /// anyway (its scratch copy), with the proof that replay made it: a
    /// caller that would replay the records itself may take this instead.
    /// `None` when some records skipped the scratch replay, or there are
    /// none.
    pub replayed: Option<Replayed>,
}

impl<R: std::fmt::Debug> std::fmt::Debug for Decision<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the image: it may hold a million partitions.
        f.debug_struct("Decision")
            .field("records", &self.records)
            .field("reply", &self.reply)
            .field("replayed", &self.replayed.is_some())
            .finish()
    }
}

impl<R> Decision<R> {
    /// A decision that changes nothing.
    pub fn reply_only(reply: R) -> Self {
        Self {
            records: Vec::new(),
            reply,
            replayed: None,
        }
    }

    /// The same records with `f` of the reply.
    pub fn map_reply<S>(self, f: impl FnOnce(R) -> S) -> Decision<S> {
        Decision {
            records: self.records,
            reply: f(self.reply),
            replayed: self.replayed,
        }
    }
}

/// A scratch copy of the image that replays every record as it is decided,
/// so later steps of the same decision see the earlier ones. Cloning the
/// image is O(1) (persistent maps); only the touched paths are copied.
pub(crate) struct Working {
    /// The image plus the records decided so far.
    pub(crate) image: MetadataImage,
    /// The log index the records will be replayed at: one past the base.
    offset: u64,
    /// Decided records, in order.
    pub(crate) records: Vec<MetadataRecord>,
    /// Some records skipped the scratch replay: `image` lacks them.
    unreplayed: bool,
}

impl Working {
    pub(crate) fn new(base: &MetadataImage) -> Self {
        Self {
            image: base.clone(),
            offset: base.offset() + 1,
            records: Vec::new(),
            unreplayed: false,
        }
    }

    /// Appends a record and applies it to the scratch image. A decided record
    /// that does not replay is a bug in the decide function, hence the panic.
    pub(crate) fn push(&mut self, record: MetadataRecord) {
        if let Err(e) = self.image.replay(&record, self.offset) {
            panic!("decided record {record:?} does not replay: {e}");
        }
        self.records.push(record);
    }

    /// Appends a partition change unless it changes nothing.
    pub(crate) fn change(&mut self, change: PartitionChangeRecord) -> bool {
        if change.is_noop() {
            return false;
        }
        self.push(MetadataRecord::PartitionChange(change));
        true
    }

    /// Appends records that no later step of the decision reads, without
    /// replaying them on the scratch image, which keeps the state before
    /// them. For the bulk steps where the scratch replay would double the
    /// cost: fencing a broker that leads 100k partitions (its last step),
    /// or an AlterConfigs item whose new configs nothing later in the
    /// request reads (each topic appears once, and no election of that
    /// topic follows). The active controller still replays every decided
    /// record before proposing it.
    pub(crate) fn append_unreplayed(&mut self, records: impl IntoIterator<Item = MetadataRecord>) {
        let before = self.records.len();
        self.records.extend(records);
        self.unreplayed |= self.records.len() > before;
    }

    /// [`Working::append_unreplayed`] for partition changes, leaving out
    /// the no-ops.
    pub(crate) fn append_final(&mut self, changes: Vec<PartitionChangeRecord>) {
        self.append_unreplayed(
            changes
                .into_iter()
                .filter(|c| !c.is_noop())
                .map(MetadataRecord::PartitionChange),
        );
    }

    pub(crate) fn finish<R>(self, reply: R) -> Decision<R> {
        let replayed = (!self.unreplayed && !self.records.is_empty())
            .then(|| Replayed::from_steps(self.image, self.offset - 1, self.records.len()));
        Decision {
            records: self.records,
            reply,
            replayed,
        }
    }
}

/// A partition as an operator names it in a message: `orders-3` (its
/// topic's name, not its id; the id only for a topic the image lacks).
pub(crate) fn partition_name(image: &MetadataImage, tp: &TopicPartition) -> String {
    match image.topic(tp.topic_id) {
        Some(t) => format!("{}-{}", t.name, tp.partition.0),
        None => tp.to_string(),
    }
}

/// Broker ids as an operator writes them in a message: `[1, 2]`.
pub(crate) fn broker_list(ids: &[BrokerId]) -> String {
    let ids: Vec<String> = ids.iter().map(|b| b.0.to_string()).collect();
    format!("[{}]", ids.join(", "))
}

/// Whether `b` may lead `tp` now: registered, unfenced, not shutting down,
/// and the log dir holding the replica online.
pub(crate) fn eligible(image: &MetadataImage, tp: &TopicPartition, b: BrokerId) -> bool {
    image.can_lead(b) && image.replica_online(tp, b)
}

/// The change that applies a selector's outcome to `p` (a no-op when the
/// outcome is what `p` already holds).
pub(crate) fn election_change(
    tp: &TopicPartition,
    p: &PartitionImage,
    e: &Election,
) -> PartitionChangeRecord {
    let mut c = PartitionChangeRecord::new(tp.topic_id, tp.partition);
    if p.leader != Some(e.leader) {
        c.leader = LeaderChange::To(e.leader);
        c.unclean = e.unclean;
    }
    if p.isr != e.isr {
        c.isr = Some(e.isr.clone());
    }
    c
}

/// `v` without `b`, keeping order.
pub(crate) fn without(v: &[BrokerId], b: BrokerId) -> Vec<BrokerId> {
    v.iter().copied().filter(|x| *x != b).collect()
}

/// True when `v` holds some broker twice.
pub(crate) fn has_duplicates(v: &[BrokerId]) -> bool {
    let mut s = v.to_vec();
    s.sort_unstable();
    s.windows(2).any(|w| w[0] == w[1])
}
