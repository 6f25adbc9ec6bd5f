//! Checkers (d) convergence and (e) recovery: live probes of the cluster
//! after the final heal.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use keel_metadata::TopicId;
use keel_proto::pb;
use serde_json::{json, Value};

use crate::client;

const T: Duration = Duration::from_millis(1500);

fn tid(b: &[u8]) -> String {
    TopicId::from_bytes(b)
        .map(|t| t.to_string())
        .unwrap_or_else(|| format!("{b:?}"))
}

/// Partitions of the image without a leader although a replica is on a
/// live (unfenced) broker.
pub fn leaderless(topics: &pb::DescribeTopicsResponse, live: &[u32]) -> Vec<String> {
    let mut out = Vec::new();
    for t in &topics.topics {
        if t.marked_for_deletion {
            continue;
        }
        for p in &t.partitions {
            let Some(s) = &p.state else { continue };
            if s.leader.is_none() && s.replicas.iter().any(|r| live.contains(r)) {
                out.push(format!(
                    "{}-{} replicas {:?} isr {:?}",
                    t.name, s.partition, s.replicas, s.isr
                ));
            }
        }
    }
    out
}

/// (e) Waits until every partition with a live replica has a leader and a
/// create succeeds, up to `bound` from `healed_at`.
pub async fn recovery(
    transport: &client::Transport,
    ctrl: &[String],
    admin: &mut client::AdminClient,
    healed_at: Instant,
    bound: Duration,
    expected_brokers: usize,
) -> (bool, Value, Vec<(String, client::OpResult, f64, f64)>) {
    let mut ops = Vec::new();
    let mut leaders_ok_at = None;
    let mut create_ok_at = None;
    let mut last_problem = String::new();
    let mut n = 0;
    while healed_at.elapsed() < bound {
        if leaders_ok_at.is_none() {
            if let Some(a) = client::find_active(transport, ctrl, T).await {
                if let (Some(cl), Some(ts)) = (
                    client::describe_cluster(transport, &a, T).await,
                    client::describe_all(transport, &a, T).await,
                ) {
                    let live: Vec<u32> = cl
                        .brokers
                        .iter()
                        .filter_map(|b| b.broker.as_ref())
                        .filter(|b| !b.fenced)
                        .map(|b| b.broker_id)
                        .collect();
                    let bad = leaderless(&ts, &live);
                    if bad.is_empty() && live.len() >= expected_brokers {
                        leaders_ok_at = Some(healed_at.elapsed());
                    } else {
                        last_problem =
                            format!("live brokers {live:?}; leaderless: {}", bad.join(", "));
                    }
                }
            } else {
                last_problem = "no active controller".into();
            }
        }
        if create_ok_at.is_none() {
            n += 1;
            let name = format!("jepsen-recovery-{n}");
            let t0 = healed_at.elapsed().as_secs_f64() * 1000.0;
            let r = admin.create(&name, 1, 1).await;
            let t1 = healed_at.elapsed().as_secs_f64() * 1000.0;
            if r.outcome == Some(crate::history::Outcome::Ok) {
                create_ok_at = Some(healed_at.elapsed());
            }
            ops.push((name, r, t0, t1));
        }
        if leaders_ok_at.is_some() && create_ok_at.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let ok = leaders_ok_at.is_some() && create_ok_at.is_some();
    (
        ok,
        json!({
            "bound_ms": bound.as_millis() as u64,
            "all_partitions_led_after_ms": leaders_ok_at.map(|d| d.as_millis() as u64),
            "create_succeeded_after_ms": create_ok_at.map(|d| d.as_millis() as u64),
            "create_attempts": n,
            "last_problem": if ok { Value::Null } else { json!(last_problem) },
        }),
        ops,
    )
}

/// One comparison of the controllers and brokers; `Ok(summary)` when
/// everything agrees, `Err(differences)` otherwise.
async fn converged_once(
    transport: &client::Transport,
    ctrl: &[String],
    brokers: &[(u32, String)],
) -> Result<Value, Value> {
    let mut nodes = Vec::new();
    for a in ctrl {
        match client::describe_node(transport, a, T).await {
            Some(d) => nodes.push(d),
            None => return Err(json!({"unreachable_controller": a})),
        }
    }
    let first = (&nodes[0].last_applied_index, &nodes[0].image_hash);
    if !nodes
        .iter()
        .all(|d| (&d.last_applied_index, &d.image_hash) == first)
    {
        return Err(json!({"controllers": nodes.iter().map(|d| json!({
            "node": d.node_id, "applied": d.last_applied_index, "hash": d.image_hash, "role": d.role, "term": d.term,
        })).collect::<Vec<_>>()}));
    }
    let Some(active) = client::find_active(transport, ctrl, T).await else {
        return Err(json!({"active": "none"}));
    };
    let Some(ts) = client::describe_all(transport, &active, T).await else {
        return Err(json!({"describe_topics": "failed"}));
    };
    // (topic id, partition) -> (leader, leader epoch, partition epoch, isr)
    type View = BTreeMap<(String, u32), (Option<u32>, u32, u32, Vec<u32>)>;
    let mut image: View = BTreeMap::new();
    for t in &ts.topics {
        for p in &t.partitions {
            if let Some(s) = &p.state {
                let mut isr = s.isr.clone();
                isr.sort();
                image.insert(
                    (tid(&t.topic_id), s.partition),
                    (s.leader, s.leader_epoch, s.partition_epoch, isr),
                );
            }
        }
    }
    let mut diffs = Vec::new();
    for (id, addr) in brokers {
        let Some(d) = client::describe_broker(transport, addr, T).await else {
            return Err(json!({"unreachable_broker": id}));
        };
        let mut cache: View = BTreeMap::new();
        for s in &d.cache {
            let mut isr = s.isr.clone();
            isr.sort();
            cache.insert(
                (tid(&s.topic_id), s.partition),
                (s.leader, s.leader_epoch, s.partition_epoch, isr),
            );
        }
        for (k, v) in &image {
            if cache.get(k) != Some(v) {
                diffs.push(
                    json!({"broker": id, "partition": format!("{}-{}", k.0, k.1),
                    "image": format!("{v:?}"), "broker_cache": format!("{:?}", cache.get(k))}),
                );
            }
        }
        for k in cache.keys() {
            if !image.contains_key(k) {
                diffs.push(
                    json!({"broker": id, "partition": format!("{}-{}", k.0, k.1),
                    "image": "absent", "broker_cache": format!("{:?}", cache.get(k))}),
                );
            }
        }
    }
    if diffs.is_empty() {
        Ok(json!({
            "applied_index": first.0, "image_hash": first.1,
            "partitions": image.len(), "brokers": brokers.len(),
        }))
    } else {
        diffs.truncate(20);
        Err(json!({"broker_cache_differs": diffs}))
    }
}

/// (d) Polls until controllers and broker caches agree, up to `bound`.
pub async fn convergence(
    transport: &client::Transport,
    ctrl: &[String],
    brokers: &[(u32, String)],
    bound: Duration,
) -> (bool, Value) {
    let start = Instant::now();
    let mut last = Value::Null;
    while start.elapsed() < bound {
        match converged_once(transport, ctrl, brokers).await {
            Ok(summary) => {
                return (
                    true,
                    json!({"converged_after_ms": start.elapsed().as_millis() as u64, "summary": summary}),
                )
            }
            Err(d) => last = d,
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    (
        false,
        json!({"bound_ms": bound.as_millis() as u64, "last_difference": last}),
    )
}
