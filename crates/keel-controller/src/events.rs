//! The controller's journal of events, as an operator reads them: what
//! it did (elections, fencing, operators' committed changes with who made
//! them), the last [`EVENTS_KEPT`] of them on each node, newest last. The
//! console shows them; the node's state holds the journal; the event loop
//! and the replay of the log write to it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use keel_metadata::{LeaderChange, MetadataImage, MetadataRecord, TopicId};
use serde::Serialize;

use crate::command::CommandKind;

/// Events kept (the oldest is dropped first).
pub(crate) const EVENTS_KEPT: usize = 200;
/// Items an operator's change lists in its event; the rest are counted.
const CHANGES_LISTED: usize = 5;

/// One thing the controller did, as an operator reads it.
#[derive(Clone, Debug, Serialize)]
pub struct Event {
    /// Wall-clock time it was seen, in ms since the Unix epoch (display
    /// only; nothing is decided from it).
    pub at_unix_ms: u64,
    /// Controller epoch (Raft term) it happened under.
    pub term: u64,
    /// Log index of the entry that committed it (0 when not an entry).
    pub index: u64,
    pub text: String,
}

/// The last [`EVENTS_KEPT`] events of this node, newest last.
#[derive(Default)]
pub struct Events(Mutex<VecDeque<Event>>);

impl Events {
    pub fn push(&self, term: u64, index: u64, text: String) {
        let at_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        if let Ok(mut q) = self.0.lock() {
            if q.len() == EVENTS_KEPT {
                q.pop_front();
            }
            q.push_back(Event {
                at_unix_ms,
                term,
                index,
                text,
            });
        }
    }

    /// The kept events, newest first.
    pub fn newest_first(&self) -> Vec<Event> {
        self.0
            .lock()
            .map(|q| q.iter().rev().cloned().collect())
            .unwrap_or_default()
    }
}

/// `n` and the noun, singular for exactly one, else with an `s`: "1
/// partition", "3 partitions" (the console's events and the CLI alike).
pub fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// The console's line for an operator's change once it committed: what
/// its records did (topics named from the records or from `before`, the
/// image it was decided on) and, when known, who asked. `None` for a
/// command no operator makes (a broker's, the periodic tick's) and for one
/// that changed nothing.
pub fn admin_event(
    kind: CommandKind,
    records: &[MetadataRecord],
    before: &MetadataImage,
    who: Option<&str>,
) -> Option<String> {
    if !kind.is_admin_write() || records.is_empty() {
        return None;
    }
    let names = Names::of(records, before);
    let tally = Tally::of(records);
    let mut items: Vec<String> = records
        .iter()
        .filter_map(|r| record_item(r, &names, &tally, before))
        .collect();
    for (topic, n) in &tally.new_partitions {
        if !names.created.contains_key(topic) {
            items.push(format!(
                "topic {}: {} added",
                names.name(topic),
                count(*n, "partition")
            ));
        }
    }
    items.extend(tally.items(kind));
    if items.is_empty() {
        items.push(format!(
            "{kind} committed ({})",
            count(records.len(), "record")
        ));
    }
    Some(joined(items, who))
}

/// Topic names as an event says them: those a decision creates, else the
/// image's before it, else the id.
struct Names<'a> {
    created: BTreeMap<TopicId, &'a str>,
    before: &'a MetadataImage,
}

impl<'a> Names<'a> {
    /// The names `records` create, over those of `before`.
    fn of(records: &'a [MetadataRecord], before: &'a MetadataImage) -> Self {
        let created = records
            .iter()
            .filter_map(|r| match r {
                MetadataRecord::Topic(t) => Some((t.topic_id, t.name.as_str())),
                _ => None,
            })
            .collect();
        Self { created, before }
    }

    /// The name of topic `id`.
    fn name(&self, id: &TopicId) -> String {
        self.created
            .get(id)
            .map(|n| (*n).to_string())
            .or_else(|| self.before.topic(*id).map(|t| t.name.clone()))
            .unwrap_or_else(|| id.to_string())
    }
}

/// What a decision's partition records add up to.
#[derive(Default)]
struct Tally {
    /// New partitions per topic, new topics' and added ones alike.
    new_partitions: BTreeMap<TopicId, usize>,
    /// Partitions whose reassignment starts, and whose reassignment ends
    /// without completing.
    moving: usize,
    cancelled: usize,
    /// Partitions given a new leader, and how many of them uncleanly.
    elected: usize,
    unclean: usize,
}

impl Tally {
    /// Counts the partition records of `records`.
    fn of(records: &[MetadataRecord]) -> Self {
        let mut t = Self::default();
        let some =
            |v: &Option<Vec<keel_metadata::BrokerId>>| v.as_ref().is_some_and(|v| !v.is_empty());
        for r in records {
            match r {
                MetadataRecord::Partition(p) => {
                    *t.new_partitions.entry(p.topic_id).or_default() += 1
                }
                MetadataRecord::PartitionChange(c) => {
                    if some(&c.adding) || some(&c.removing) {
                        t.moving += 1;
                    } else if c.adding.is_some() || c.removing.is_some() {
                        t.cancelled += 1;
                    }
                    if matches!(c.leader, LeaderChange::To(_)) {
                        t.elected += 1;
                        t.unclean += usize::from(c.unclean);
                    }
                }
                _ => {}
            }
        }
        t
    }

    /// The items a reassignment or an election of `kind` adds.
    fn items(&self, kind: CommandKind) -> Vec<String> {
        let mut items = Vec::new();
        match kind {
            CommandKind::AlterReassignments => {
                if self.moving > 0 {
                    items.push(format!(
                        "reassignment of {} started",
                        count(self.moving, "partition")
                    ));
                }
                if self.cancelled > 0 {
                    items.push(format!(
                        "reassignment of {} cancelled",
                        count(self.cancelled, "partition")
                    ));
                }
            }
            CommandKind::ElectLeaders if self.elected > 0 => {
                let how = if self.unclean > 0 {
                    format!(" ({} unclean)", self.unclean)
                } else {
                    String::new()
                };
                items.push(format!(
                    "leader election: {} got a new leader{how}",
                    count(self.elected, "partition")
                ));
            }
            _ => {}
        }
        items
    }
}

/// The item one record of an admin write is shown as, if any.
fn record_item(
    r: &MetadataRecord,
    names: &Names<'_>,
    tally: &Tally,
    before: &MetadataImage,
) -> Option<String> {
    use MetadataRecord as R;
    Some(match r {
        R::Topic(t) => format!(
            "topic {} created ({})",
            t.name,
            count(
                tally.new_partitions.get(&t.topic_id).copied().unwrap_or(0),
                "partition"
            )
        ),
        R::MarkTopicForDeletion { topic_id } => format!(
            "topic {} deleted ({})",
            names.name(topic_id),
            count(
                before
                    .topic(*topic_id)
                    .map_or(0, |t| t.partition_count as usize),
                "partition"
            )
        ),
        R::TopicConfig {
            topic_id,
            key,
            value: Some(v),
        } => format!("topic {} config {key}={v}", names.name(topic_id)),
        R::TopicConfig {
            topic_id,
            key,
            value: None,
        } => format!("topic {} config {key} removed", names.name(topic_id)),
        R::ClusterConfig {
            key,
            value: Some(v),
        } => format!("cluster default {key}={v}"),
        R::ClusterConfig { key, value: None } => format!("cluster default {key} removed"),
        R::AclAdded(b) => format!("ACL added: {b}"),
        R::AclRemoved(b) => format!("ACL removed: {b}"),
        R::UserScramCredential { user, credential } => format!(
            "SCRAM credential set for user {user} ({})",
            credential.mechanism
        ),
        R::UserScramCredentialRemoved { user, mechanism } => {
            format!("SCRAM credential removed for user {user} ({mechanism})")
        }
        R::UnregisterBroker { broker, .. } => format!("broker {broker} unregistered"),
        _ => return None,
    })
}

/// At most [`CHANGES_LISTED`] items, joined, with how many more and by
/// whom.
fn joined(mut items: Vec<String>, who: Option<&str>) -> String {
    let more = items.len().saturating_sub(CHANGES_LISTED);
    items.truncate(CHANGES_LISTED);
    let mut text = items.join("; ");
    if more > 0 {
        text.push_str(&format!("; and {more} more"));
    }
    if let Some(who) = who {
        text.push_str(&format!(", by {who}"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(count(1, "partition"), "1 partition");
        assert_eq!(count(0, "partition"), "0 partitions");
        assert_eq!(count(12, "partition"), "12 partitions");
    }

    #[test]
    fn events_keep_the_newest_and_list_them_first() {
        let e = Events::default();
        for i in 0..(EVENTS_KEPT as u64 + 5) {
            e.push(1, i, format!("event {i}"));
        }
        let list = e.newest_first();
        assert_eq!(list.len(), EVENTS_KEPT);
        assert_eq!(list[0].index, EVENTS_KEPT as u64 + 4);
        assert_eq!(list.last().unwrap().index, 5);
    }

    /// Records creating topic `t` (id 7) with two partitions on broker 1.
    fn create_t() -> Vec<MetadataRecord> {
        use keel_metadata::{BrokerId, PartitionId, PartitionRecord, TopicRecord};
        let topic_id = TopicId(7);
        let mut records = vec![MetadataRecord::Topic(TopicRecord {
            topic_id,
            name: "t".into(),
            configs: Default::default(),
        })];
        for p in 0..2 {
            records.push(MetadataRecord::Partition(PartitionRecord {
                topic_id,
                partition: PartitionId(p),
                replicas: vec![BrokerId(1)],
                isr: vec![BrokerId(1)],
                leader: Some(BrokerId(1)),
            }));
        }
        records
    }

    /// An image holding broker 1, unfenced, and topic `t`.
    fn image_with_t() -> MetadataImage {
        use keel_metadata::{BrokerEpoch, BrokerId, IncarnationId, RegisterBrokerRecord};
        let mut image = MetadataImage::new();
        let mut records = vec![
            MetadataRecord::RegisterBroker(RegisterBrokerRecord {
                broker: BrokerId(1),
                incarnation: IncarnationId(9),
                address: "127.0.0.1:9092".into(),
                rack: None,
                log_dirs: vec![],
            }),
            MetadataRecord::UnfenceBroker {
                broker: BrokerId(1),
                epoch: BrokerEpoch(1),
            },
        ];
        records.extend(create_t());
        for r in &records {
            image.replay(r, 1).unwrap();
        }
        image.advance_offset(1);
        image
    }

    #[test]
    fn an_operators_changes_are_described_with_who_asked_and_a_brokers_are_not() {
        let before = MetadataImage::new();
        assert_eq!(
            admin_event(
                CommandKind::CreateTopics,
                &create_t(),
                &before,
                Some("User:alice")
            )
            .as_deref(),
            Some("topic t created (2 partitions), by User:alice")
        );
        // A plaintext caller is nobody in particular.
        assert_eq!(
            admin_event(CommandKind::CreateTopics, &create_t(), &before, None).as_deref(),
            Some("topic t created (2 partitions)")
        );
        assert_eq!(
            admin_event(CommandKind::RegisterBroker, &create_t(), &before, None),
            None
        );
        assert_eq!(
            admin_event(CommandKind::CreateTopics, &[], &before, None),
            None
        );
    }

    #[test]
    fn a_deletion_is_described_as_one_and_counts_no_partition_offline() {
        let image = image_with_t();
        let d = image.decide_delete_topics(&["t".to_string()]);
        assert_eq!(
            admin_event(
                CommandKind::DeleteTopics,
                &d.records,
                &image,
                Some("User:bob")
            )
            .as_deref(),
            Some("topic t deleted (2 partitions), by User:bob")
        );
        // The deletion took both leaders, yet nothing "went offline".
        let summary = crate::tasks::ChangeSummary::of(d.records.iter());
        assert_eq!(summary.offline_count(), 0);
        let events = Events::default();
        summary.log(1, 1, 2, &events);
        assert!(events.newest_first().is_empty());
    }
}
