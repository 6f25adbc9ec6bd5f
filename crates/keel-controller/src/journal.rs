//! The journal of committed broker-request plans that every channel of one
//! activation reads from: a channel keeps only a cursor into it, and takes
//! everything past its cursor at once when its broker is ready. A channel
//! that falls behind the retained window sends the full state instead.

use std::collections::VecDeque;
use std::sync::Arc;

use keel_metadata::planner::BrokerUpdates;

/// Journal entries kept for channels that are behind; one further behind
/// sends the full state.
pub(crate) const JOURNAL_MAX_ENTRIES: usize = 4_096;
/// Partition and broker mentions kept in the journal, at most (the newest
/// entry is kept whatever its size).
pub(crate) const JOURNAL_MAX_WEIGHT: usize = 2_000_000;

/// What one committed plan changes, as every channel needs it.
#[derive(Debug)]
pub(crate) struct Change {
    /// Position in the journal: 1, 2, 3, ...
    pub(crate) seq: u64,
    /// The plan's updates (lists sorted).
    pub(crate) updates: BrokerUpdates,
}

impl Change {
    /// Its share of the journal's retention budget.
    fn weight(&self) -> usize {
        let u = &self.updates;
        1 + u.changed_partitions.len()
            + u.changed_brokers.len()
            + u.deleted_topics.len()
            + u.leader_and_isr.values().map(Vec::len).sum::<usize>()
    }
}

/// The committed changes a channel may still need, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Journal {
    changes: VecDeque<(Arc<Change>, usize)>,
    /// Sum of the kept changes' weights.
    weight: usize,
    /// Seq of the newest change ever appended (0: none).
    last_seq: u64,
}

impl Journal {
    /// Appends `updates` as the next change; drops the oldest ones beyond
    /// the retention limits. Returns its seq.
    pub(crate) fn push(&mut self, updates: BrokerUpdates) -> u64 {
        self.last_seq += 1;
        let c = Change {
            seq: self.last_seq,
            updates,
        };
        let w = c.weight();
        self.weight += w;
        self.changes.push_back((Arc::new(c), w));
        while self.changes.len() > 1
            && (self.changes.len() > JOURNAL_MAX_ENTRIES || self.weight > JOURNAL_MAX_WEIGHT)
        {
            if let Some((_, w)) = self.changes.pop_front() {
                self.weight -= w;
            }
        }
        self.last_seq
    }

    /// Seq of the newest change (0: none yet).
    pub(crate) fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Every change after `cursor`, or `None` if some of them were dropped
    /// already (the channel must send the full state).
    pub(crate) fn since(&self, cursor: u64) -> Option<Vec<Arc<Change>>> {
        let first = self
            .changes
            .front()
            .map_or(self.last_seq + 1, |(c, _)| c.seq);
        if cursor + 1 < first {
            return None;
        }
        let skip = (cursor + 1 - first) as usize;
        Some(
            self.changes
                .iter()
                .skip(skip)
                .map(|(c, _)| c.clone())
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_metadata::{TopicId, TopicPartition};

    fn change(partitions: usize) -> BrokerUpdates {
        BrokerUpdates {
            changed_partitions: (0..partitions as u32)
                .map(|p| TopicPartition::new(TopicId(1), p))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_channel_gets_every_change_after_its_cursor_in_order() {
        let mut j = Journal::default();
        assert_eq!(j.since(0).map(|v| v.len()), Some(0));
        for _ in 0..3 {
            j.push(change(1));
        }
        let seqs =
            |v: Option<Vec<Arc<Change>>>| v.map(|v| v.iter().map(|c| c.seq).collect::<Vec<_>>());
        assert_eq!(seqs(j.since(0)), Some(vec![1, 2, 3]));
        assert_eq!(seqs(j.since(2)), Some(vec![3]));
        assert_eq!(seqs(j.since(3)), Some(vec![]));
        assert_eq!(j.last_seq(), 3);
    }

    #[test]
    fn a_channel_behind_the_retained_window_must_resync() {
        let mut j = Journal::default();
        for _ in 0..JOURNAL_MAX_ENTRIES + 10 {
            j.push(change(0));
        }
        assert_eq!(j.changes.len(), JOURNAL_MAX_ENTRIES);
        assert!(j.since(0).is_none());
        assert!(j.since(9).is_none());
        assert_eq!(j.since(10).map(|v| v.len()), Some(JOURNAL_MAX_ENTRIES));
        // One huge change is kept alone, whatever its size.
        j.push(change(JOURNAL_MAX_WEIGHT + 1));
        assert_eq!(j.changes.len(), 1);
        assert!(j.since(j.last_seq - 2).is_none());
        assert_eq!(j.since(j.last_seq - 1).map(|v| v.len()), Some(1));
    }
}
