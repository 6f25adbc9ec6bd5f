//! Checker (c): broker-observed safety, from every broker's
//! `history.jsonl` (one line per leadership state the broker accepted or
//! gave up, in the order it happened at that broker).
//!
//! Invariants:
//! 1. `one_leader_per_epoch`: for one (topic id, partition, leader epoch),
//!    every line written by any broker names the same leader — in
//!    particular no two brokers ever *lead* it.
//! 2. `leader_epoch_monotonic`: at one broker, the leader epochs of
//!    accepted states of a partition never go back (across restarts too:
//!    the history file survives them).
//! 3. `controller_epoch_monotonic`: at one broker, the controller epochs of
//!    accepted `leader_and_isr` states never go back: no request from a
//!    lower controller epoch is accepted after a higher one.
//! 4. `leader_in_isr`: a leader given by `leader_and_isr` is in the ISR it
//!    was given (unclean election is off in these runs).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// One line of a broker's `history.jsonl` (the fields the checker needs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerEvent {
    /// "leader_and_isr" | "alter_partition" | "resigned" | "stopped".
    pub event: String,
    pub topic_id: String,
    pub partition: u32,
    pub leader: Option<u32>,
    pub leader_epoch: u32,
    #[serde(default)]
    pub partition_epoch: u32,
    #[serde(default)]
    pub isr: Vec<u32>,
    #[serde(default)]
    pub replicas: Vec<u32>,
    pub controller_epoch: u64,
    pub broker_id: u32,
    #[serde(default)]
    pub broker_epoch: u64,
    #[serde(default)]
    pub accepted_at_ms: u64,
}

/// Reads a broker history file; unparsable lines are returned apart.
pub fn read_events(path: &Path) -> std::io::Result<(Vec<BrokerEvent>, Vec<String>)> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), Vec::new())),
        Err(e) => return Err(e),
    };
    let mut ok = Vec::new();
    let mut bad = Vec::new();
    for l in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str(l) {
            Ok(e) => ok.push(e),
            Err(_) => bad.push(l.to_string()),
        }
    }
    Ok((ok, bad))
}

fn accepts_state(e: &BrokerEvent) -> bool {
    e.event == "leader_and_isr" || e.event == "alter_partition"
}

/// Result of the broker checks: (valid, details with counterexamples).
pub fn check(histories: &BTreeMap<u32, Vec<BrokerEvent>>) -> (bool, Value) {
    let mut two_leaders = Vec::new();
    let mut epoch_back = Vec::new();
    let mut ctrl_back = Vec::new();
    let mut not_in_isr = Vec::new();
    let mut lines = 0usize;

    // 1. One leader per (partition, leader epoch), across brokers.
    let mut named: BTreeMap<(String, u32, u32), BTreeMap<Option<u32>, &BrokerEvent>> =
        BTreeMap::new();
    for events in histories.values() {
        for e in events {
            lines += 1;
            if e.event == "stopped" {
                continue;
            }
            named
                .entry((e.topic_id.clone(), e.partition, e.leader_epoch))
                .or_default()
                .entry(e.leader)
                .or_insert(e);
        }
    }
    for ((topic, p, epoch), leaders) in &named {
        if leaders.len() > 1 {
            two_leaders.push(json!({
                "topic_id": topic, "partition": p, "leader_epoch": epoch,
                "leaders": leaders.keys().collect::<Vec<_>>(),
                "evidence": leaders.values().collect::<Vec<_>>(),
            }));
        }
    }

    for (broker, events) in histories {
        // 2. Leader epochs per partition never go back at one broker.
        let mut held: BTreeMap<(String, u32), &BrokerEvent> = BTreeMap::new();
        // 3. Controller epochs of accepted requests never go back.
        let mut max_ctrl: Option<&BrokerEvent> = None;
        for e in events {
            if !accepts_state(e) {
                continue;
            }
            let key = (e.topic_id.clone(), e.partition);
            if let Some(prev) = held.get(&key) {
                if e.leader_epoch < prev.leader_epoch {
                    epoch_back.push(json!({"broker": broker, "before": prev, "after": e}));
                }
            }
            held.insert(key, e);
            if e.event == "leader_and_isr" {
                if let Some(m) = max_ctrl {
                    if e.controller_epoch < m.controller_epoch {
                        ctrl_back.push(json!({"broker": broker, "before": m, "after": e}));
                    }
                }
                if max_ctrl.is_none_or(|m| e.controller_epoch >= m.controller_epoch) {
                    max_ctrl = Some(e);
                }
                // 4. The leader is in the ISR it was given.
                if let Some(l) = e.leader {
                    if !e.isr.contains(&l) {
                        not_in_isr.push(json!({"broker": broker, "line": e}));
                    }
                }
            }
        }
    }
    let valid = two_leaders.is_empty()
        && epoch_back.is_empty()
        && ctrl_back.is_empty()
        && not_in_isr.is_empty();
    let cap = |v: Vec<Value>| v.into_iter().take(10).collect::<Vec<_>>();
    let detail = json!({
        "brokers": histories.len(),
        "lines": lines,
        "one_leader_per_epoch": {"valid": two_leaders.is_empty(), "count": two_leaders.len(), "counterexamples": cap(two_leaders)},
        "leader_epoch_monotonic": {"valid": epoch_back.is_empty(), "count": epoch_back.len(), "counterexamples": cap(epoch_back)},
        "controller_epoch_monotonic": {"valid": ctrl_back.is_empty(), "count": ctrl_back.len(), "counterexamples": cap(ctrl_back)},
        "leader_in_isr": {"valid": not_in_isr.is_empty(), "count": not_in_isr.len(), "counterexamples": cap(not_in_isr)},
    });
    (valid, detail)
}
