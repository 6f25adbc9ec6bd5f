//! Checker (a'): topic ids and shapes. The linearizability model (see
//! [`crate::linear`]) follows whether a name exists; this one follows
//! *which* topic it is. Every acknowledged create names an incarnation
//! (topic id, partition count). A describe that lists a topic must show:
//!
//! * for an incarnation the history knows, the partition count it was
//!   created with, or a total some create_partitions of the name (not
//!   refused, invoked before the describe returned) asked for; the
//!   linearizability model checks the count exactly;
//! * no incarnation older than one whose create was acknowledged before
//!   the describe was invoked: a name's incarnations follow each other
//!   (the next one is created only once the previous one is gone), so
//!   seeing the older one then is a read of the past.
//!
//! A describe showing an id no acknowledged create returned is allowed
//! only while an indeterminate (`info`) create of the name could explain
//! it.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::history::{OpKind, OpRecord, Outcome, Seen};

/// Checks every name's describes against its acknowledged creates.
pub fn check(history: &[OpRecord]) -> (bool, Value) {
    let mut by: BTreeMap<&str, Vec<&OpRecord>> = BTreeMap::new();
    for o in history {
        by.entry(o.name.as_str()).or_default().push(o);
    }
    let mut violations = Vec::new();
    let mut incarnations = 0usize;
    let mut reads = 0usize;
    for (name, ops) in by {
        // id -> its acknowledged create.
        let created: BTreeMap<&str, &OpRecord> = ops
            .iter()
            .filter(|o| o.op == OpKind::Create && o.outcome == Outcome::Ok)
            .filter_map(|o| o.topic_id.as_deref().map(|id| (id, *o)))
            .collect();
        incarnations += created.len();
        for d in ops.iter().filter(|o| {
            o.op == OpKind::Describe
                && o.outcome == Outcome::Ok
                && matches!(o.seen, Some(Seen::Present) | Some(Seen::Deleting))
        }) {
            let Some(id) = d.topic_id.as_deref() else {
                continue;
            };
            reads += 1;
            match created.get(id) {
                Some(c) => {
                    let grown = |n: Option<u32>| {
                        ops.iter().any(|o| {
                            o.op == OpKind::CreatePartitions
                                && o.outcome != Outcome::Fail
                                && o.partitions == n
                                && o.invoke_ms < d.complete_ms
                        })
                    };
                    if d.partitions.is_some()
                        && c.partitions.is_some()
                        && d.partitions != c.partitions
                        && !grown(d.partitions)
                    {
                        violations.push(json!({
                            "name": name, "kind": "wrong_partition_count",
                            "describe": d, "create": c,
                        }));
                    }
                    // A newer incarnation acknowledged before this read.
                    let newer = created.values().find(|n| {
                        n.topic_id.as_deref() != Some(id)
                            && c.complete_ms < n.invoke_ms
                            && n.complete_ms < d.invoke_ms
                    });
                    if let Some(n) = newer {
                        violations.push(json!({
                            "name": name, "kind": "older_incarnation",
                            "describe": d, "seen_create": c, "newer_create": n,
                        }));
                    }
                }
                None => {
                    // An indeterminate create, or an acknowledged one whose
                    // answer carried no id.
                    let explained = ops.iter().any(|o| {
                        o.op == OpKind::Create
                            && (o.outcome == Outcome::Info
                                || (o.outcome == Outcome::Ok && o.topic_id.is_none()))
                            && o.invoke_ms < d.complete_ms
                    });
                    if !explained {
                        violations.push(json!({
                            "name": name, "kind": "unknown_incarnation",
                            "describe": d,
                        }));
                    }
                }
            }
        }
    }
    violations.truncate(20);
    (
        violations.is_empty(),
        json!({
            "incarnations": incarnations,
            "reads_checked": reads,
            "violations": violations,
        }),
    )
}
