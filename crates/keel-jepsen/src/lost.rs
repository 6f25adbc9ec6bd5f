//! Checker (b): no acknowledged create lost. After the final heal, every
//! name whose last acknowledged create could not have been undone by a
//! delete must be visible (present, not marked for deletion) in the final
//! read, and (when the final read saw its id) be the same topic: the
//! acknowledged create's id, not another incarnation.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::history::{OpKind, OpRecord, Outcome, Seen};

/// `final_read`: what the active controller listed after the heal, per
/// name of the workload's key space (absent names may be missing).
pub fn check(history: &[OpRecord], final_read: &BTreeMap<String, Seen>) -> (bool, Value) {
    check_with_ids(history, final_read, &BTreeMap::new())
}

/// [`check`], and every name the final read saw an id for must show the
/// id its last acknowledged create returned (`final_ids`: name -> id).
pub fn check_with_ids(
    history: &[OpRecord],
    final_read: &BTreeMap<String, Seen>,
    final_ids: &BTreeMap<String, String>,
) -> (bool, Value) {
    let mut lost = Vec::new();
    let mut replaced = Vec::new();
    let mut checked = 0usize;
    let mut by: BTreeMap<&str, Vec<&OpRecord>> = BTreeMap::new();
    for o in history.iter().filter(|o| o.client >= 0) {
        by.entry(o.name.as_str()).or_default().push(o);
    }
    for (name, ops) in by {
        // The acknowledged create with the latest invocation.
        let Some(create) = ops
            .iter()
            .filter(|o| o.op == OpKind::Create && o.outcome == Outcome::Ok)
            .max_by(|a, b| a.invoke_ms.total_cmp(&b.invoke_ms))
        else {
            continue;
        };
        // Any delete that may have taken effect after it: ok or info, not
        // finished before the create was invoked.
        let undone = ops.iter().any(|o| {
            o.op == OpKind::Delete
                && o.outcome != Outcome::Fail
                && (o.outcome == Outcome::Info || o.complete_ms >= create.invoke_ms)
        });
        if undone {
            continue;
        }
        checked += 1;
        let seen = final_read.get(name).copied().unwrap_or(Seen::Absent);
        if seen != Seen::Present {
            lost.push(json!({
                "name": name,
                "acknowledged_create": create,
                "final_read": seen,
            }));
        } else if let (Some(want), Some(got)) = (create.topic_id.as_deref(), final_ids.get(name)) {
            // No delete could follow the create, so no other incarnation
            // can have replaced it.
            if want != got {
                replaced.push(json!({
                    "name": name,
                    "acknowledged_create": create,
                    "final_id": got,
                }));
            }
        }
    }
    (
        lost.is_empty() && replaced.is_empty(),
        json!({
            "names_checked": checked,
            "lost": lost,
            "replaced_by_another_incarnation": replaced,
        }),
    )
}
