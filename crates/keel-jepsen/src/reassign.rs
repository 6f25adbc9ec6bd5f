//! Reassignments finish and land where they were sent: after the final
//! heal (every broker back), no reassignment is left in flight, and a
//! partition whose last reassignment was acknowledged, with nothing after
//! it that could move the partition again, has exactly the replicas that
//! reassignment asked for.
//!
//! "Nothing after it" is judged conservatively: no other reassignment of
//! the same partition that was not refused and did not end before this one
//! was sent, and no create or delete of the topic (that was not refused)
//! that did not end before it was sent. Those cases are left unjudged
//! rather than guessed at. The workload aims half of its reassignments at
//! a topic it never deletes, so the last ones of each of its partitions
//! are judged in every run.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use keel_proto::pb;
use keel_proto::pb::admin_service_client::AdminServiceClient;
use keel_tls::Expect;
use serde_json::{json, Value};

use crate::client::{self, Transport};
use crate::history::{OpKind, OpRecord, Outcome};

/// The cluster's placement after the final heal.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Placement {
    /// Replicas of every partition of every topic not being deleted, by
    /// `(topic, partition)`.
    pub replicas: BTreeMap<(String, u32), Vec<u32>>,
    /// Reassignments still in flight (`topic-partition`).
    pub in_flight: Vec<String>,
}

/// The verdict: valid, and the detail for `results.json`.
pub fn check(ops: &[OpRecord], placement: &Placement) -> (bool, Value) {
    let mut judged = 0usize;
    let mut unjudged = 0usize;
    let mut violations = Vec::new();
    for r in ops
        .iter()
        .filter(|o| o.op == OpKind::Reassign && o.outcome == Outcome::Ok)
    {
        let (Some(p), Some(wanted)) = (r.partition, r.replicas.as_ref()) else {
            continue;
        };
        let later_reassign = ops.iter().any(|o| {
            o.index != r.index
                && o.op == OpKind::Reassign
                && o.outcome != Outcome::Fail
                && o.name == r.name
                && o.partition == Some(p)
                && o.complete_ms > r.invoke_ms
        });
        let incarnation_changed = ops.iter().any(|o| {
            matches!(o.op, OpKind::Create | OpKind::Delete)
                && o.name == r.name
                && o.outcome != Outcome::Fail
                && o.complete_ms > r.invoke_ms
        });
        if later_reassign || incarnation_changed {
            unjudged += 1;
            continue;
        }
        let Some(now) = placement.replicas.get(&(r.name.clone(), p)) else {
            // The topic is gone or being deleted: only a delete does that,
            // and none came after (checked above): the lost-create checker
            // and the model judge that.
            unjudged += 1;
            continue;
        };
        judged += 1;
        if now != wanted {
            violations.push(json!({
                "op_index": r.index,
                "partition": format!("{}-{p}", r.name),
                "acknowledged_replicas": wanted,
                "final_replicas": now,
            }));
        }
    }
    let valid = violations.is_empty() && placement.in_flight.is_empty();
    (
        valid,
        json!({
            "acknowledged_reassignments_judged": judged,
            "left_unjudged": unjudged,
            "in_flight_after_heal": placement.in_flight,
            "violations": violations,
        }),
    )
}

/// Reads the placement from the active controller once no reassignment is
/// in flight, or as it is when `bound` runs out.
pub async fn read_placement(
    transport: &Transport,
    ctrl: &[String],
    bound: Duration,
) -> Result<Placement, String> {
    let start = Instant::now();
    let t = Duration::from_millis(1500);
    let mut last = String::from("no active controller answered");
    loop {
        if let Some(active) = client::find_active(transport, ctrl, t).await {
            match in_flight(transport, &active, t).await {
                Ok(flying) if flying.is_empty() || start.elapsed() >= bound => {
                    if let Some(d) = client::describe_all(transport, &active, t).await {
                        if d.error.is_none() {
                            return Ok(Placement {
                                replicas: replicas_of(&d),
                                in_flight: flying,
                            });
                        }
                    }
                    last = format!("{active}: DescribeTopics failed");
                }
                Ok(flying) => last = format!("still in flight: {flying:?}"),
                Err(e) => last = e,
            }
        }
        if start.elapsed() >= bound + Duration::from_secs(10) {
            return Err(last);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn in_flight(
    transport: &Transport,
    addr: &str,
    timeout: Duration,
) -> Result<Vec<String>, String> {
    let ch = client::client_channel(transport, addr, timeout, Expect::Controller)
        .ok_or_else(|| format!("{addr}: no channel"))?;
    let r = AdminServiceClient::new(ch)
        .list_partition_reassignments(pb::ListPartitionReassignmentsRequest::default())
        .await
        .map_err(|s| format!("{addr}: {}", s.message()))?
        .into_inner();
    if let Some(e) = r.error.filter(|e| e.code != 0) {
        return Err(format!("{addr}: {}", e.message));
    }
    Ok(r.reassignments
        .iter()
        .map(|p| format!("{}-{}", p.topic, p.partition))
        .collect())
}

fn replicas_of(d: &pb::DescribeTopicsResponse) -> BTreeMap<(String, u32), Vec<u32>> {
    let mut out = BTreeMap::new();
    for t in d.topics.iter().filter(|t| !t.marked_for_deletion) {
        for s in t.partitions.iter().filter_map(|p| p.state.as_ref()) {
            out.insert((t.name.clone(), s.partition), s.replicas.clone());
        }
    }
    out
}
