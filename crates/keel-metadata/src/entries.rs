//! How a batch of decisions becomes Raft entries, so that every decision
//! commits whole or not at all.
//!
//! Decisions are packed into entries in order, never split: a decision that
//! does not fit in what is left of the current entry starts the next one.
//! A decision larger than one entry is wrapped in transaction markers
//! (KIP-868) and spread over entries of its own: replay holds its records
//! back until the end marker, and a new active controller aborts a
//! transaction it finds open, so a leader lost between those entries leaves
//! nothing of the decision behind.

use crate::records::MetadataRecord;

/// A batch laid out into entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// The entries to propose, in order; none is empty, none holds more
    /// than the limit.
    pub entries: Vec<Vec<MetadataRecord>>,
    /// For each decision, in order, the position (in `entries`) of the
    /// entry holding its last record: once that entry commits, the
    /// decision has taken effect. `None` for a decision without records.
    pub last_entry: Vec<Option<usize>>,
}

/// Lays out `decisions` (a name for the transaction marker, and the
/// records) into entries of at most `max_records` records (at least 3: a
/// transaction needs room for its markers and a record).
pub fn lay_out(decisions: Vec<(String, Vec<MetadataRecord>)>, max_records: usize) -> Layout {
    let max = max_records.max(3);
    let mut out = Layout::default();
    let mut current: Vec<MetadataRecord> = Vec::new();
    for (name, records) in decisions {
        if records.is_empty() {
            out.last_entry.push(None);
            continue;
        }
        if records.len() <= max {
            if current.len() + records.len() > max {
                out.entries.push(std::mem::take(&mut current));
            }
            current.extend(records);
            out.last_entry.push(Some(out.entries.len()));
            continue;
        }
        // Too large for one entry: a transaction in entries of its own.
        if !current.is_empty() {
            out.entries.push(std::mem::take(&mut current));
        }
        let wrapped = std::iter::once(MetadataRecord::BeginTransaction { name })
            .chain(records)
            .chain(std::iter::once(MetadataRecord::EndTransaction));
        let mut rest = wrapped.peekable();
        while rest.peek().is_some() {
            out.entries.push(rest.by_ref().take(max).collect());
        }
        out.last_entry.push(Some(out.entries.len() - 1));
    }
    if !current.is_empty() {
        out.entries.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{BrokerEpoch, BrokerId};

    fn recs(tag: u32, n: usize) -> Vec<MetadataRecord> {
        (0..n)
            .map(|i| MetadataRecord::FenceBroker {
                broker: BrokerId(tag),
                epoch: BrokerEpoch(i as u64),
            })
            .collect()
    }

    fn named(v: Vec<Vec<MetadataRecord>>) -> Vec<(String, Vec<MetadataRecord>)> {
        v.into_iter()
            .enumerate()
            .map(|(i, r)| (format!("d{i}"), r))
            .collect()
    }

    #[test]
    fn small_decisions_share_entries_and_are_never_split() {
        let l = lay_out(named(vec![recs(1, 3), recs(2, 4), vec![], recs(3, 2)]), 8);
        assert_eq!(l.entries.len(), 2);
        assert_eq!(l.entries[0], [recs(1, 3), recs(2, 4)].concat());
        assert_eq!(l.entries[1], recs(3, 2));
        assert_eq!(l.last_entry, vec![Some(0), Some(0), None, Some(1)]);
        assert!(lay_out(Vec::new(), 8).entries.is_empty());
        assert_eq!(lay_out(named(vec![vec![]]), 8).last_entry, vec![None]);
    }

    #[test]
    fn a_decision_larger_than_an_entry_is_one_transaction_in_entries_of_its_own() {
        let l = lay_out(named(vec![recs(1, 2), recs(2, 20), recs(3, 1)]), 8);
        // [d0] [Begin + 7] [8] [5 + End] [d2]
        let sizes: Vec<usize> = l.entries.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![2, 8, 8, 6, 1]);
        assert_eq!(l.last_entry, vec![Some(0), Some(3), Some(4)]);
        assert_eq!(
            l.entries[1][0],
            MetadataRecord::BeginTransaction { name: "d1".into() }
        );
        assert_eq!(l.entries[3][5], MetadataRecord::EndTransaction);
        let inner: Vec<MetadataRecord> = l.entries[1..4]
            .concat()
            .into_iter()
            .filter(|r| !r.is_transaction_marker())
            .collect();
        assert_eq!(inner, recs(2, 20));
        // Exactly at the limit: no transaction.
        let l = lay_out(named(vec![recs(1, 8)]), 8);
        assert_eq!(l.entries, vec![recs(1, 8)]);
        // The end marker alone may take an entry of its own.
        let l = lay_out(named(vec![recs(1, 15)]), 8);
        let sizes: Vec<usize> = l.entries.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![8, 8, 1]);
        assert_eq!(l.entries[2], vec![MetadataRecord::EndTransaction]);
    }
}
