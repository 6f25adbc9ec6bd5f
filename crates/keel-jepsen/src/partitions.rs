//! (f) Whole topics: no describe ever shows a topic with a partition count
//! that no create (or partition increase) of that name asked for. A decision too large for one Raft
//! entry commits whole or not at all, so a create of 20,000 partitions
//! whose leader dies part-way leaves either the whole topic or none; a
//! topic with 4,999 of its partitions is the violation this looks for.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use crate::history::{OpKind, OpRecord, Outcome, Seen};

/// Valid when every successful describe of an existing topic saw a
/// partition count some create or create_partitions of that name asked
/// for.
pub fn check(history: &[OpRecord]) -> (bool, Value) {
    let mut asked: BTreeMap<&str, BTreeSet<u32>> = BTreeMap::new();
    for op in history
        .iter()
        .filter(|o| matches!(o.op, OpKind::Create | OpKind::CreatePartitions))
    {
        if let Some(n) = op.partitions {
            asked.entry(op.name.as_str()).or_default().insert(n);
        }
    }
    let mut violations = Vec::new();
    let mut checked = 0u64;
    for op in history {
        let seen_topic = matches!(op.seen, Some(Seen::Present | Seen::Deleting));
        if op.op != OpKind::Describe || op.outcome != Outcome::Ok || !seen_topic {
            continue;
        }
        let Some(n) = op.partitions else { continue };
        checked += 1;
        let allowed = asked.get(op.name.as_str());
        if !allowed.is_some_and(|a| a.contains(&n)) {
            violations.push(json!({
                "index": op.index,
                "name": op.name,
                "topic_id": op.topic_id,
                "partitions_seen": n,
                "partitions_asked": allowed.map(|a| a.iter().copied().collect::<Vec<_>>()),
            }));
        }
    }
    let valid = violations.is_empty();
    (
        valid,
        json!({"describes_checked": checked, "violations": violations}),
    )
}
