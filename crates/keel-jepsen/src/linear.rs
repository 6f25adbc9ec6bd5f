//! Checker (a): linearizability of the topic operations per topic name.
//!
//! # The model
//!
//! Each topic name is a small state machine whose state is the tuple
//! `(status, topic id, partition count, replication factor, configs)`,
//! with status one of:
//!
//! * `Absent`   — no topic of that name;
//! * `Present`  — the topic exists and is not marked for deletion;
//! * `Deleting` — the topic is marked for deletion. Deletion completes
//!   asynchronously (brokers confirm `StopReplica(delete)`), so `Deleting`
//!   may turn into `Absent` at *any* moment with no client operation: an
//!   internal, silent step.
//!
//! Operations and the results they may legally return (from the decide
//! functions in `keel-metadata/src/decide/{topics,deletion}.rs`):
//!
//! | op | state before | result | state after |
//! |---|---|---|---|
//! | create(p, rf) | Absent | ok, id | Present(id, p, rf, no configs) |
//! | create | Present / Deleting | TOPIC_ALREADY_EXISTS | unchanged |
//! | delete | Present / Deleting | ok | Deleting (same tuple) |
//! | delete | Absent | UNKNOWN_TOPIC | Absent |
//! | create_partitions(n) | Present, p < n | ok | p = n |
//! | create_partitions(n) | Present, p >= n | INVALID_PARTITIONS | unchanged |
//! | alter_config(k, v) | Present | ok | configs[k] = v (or k removed) |
//! | create_partitions, alter_config | Deleting | TOPIC_DELETION_IN_PROGRESS | unchanged |
//! | create_partitions, alter_config | Absent | UNKNOWN_TOPIC | Absent |
//! | describe | s | absent, or the tuple | s (read) |
//! | describe (Kafka) | Present / Deleting | listed (either), configs | s (read) |
//!
//! Reassignments and preferred elections move replicas and leaders, not
//! the tuple (a reassignment keeps the replica count): the model ignores
//! them; the brokers checker judges what they did to leadership.
//!
//! Verdicts come from error codes alone, never from message text: a
//! TOPIC_ALREADY_EXISTS says the name is present or being deleted, not
//! which. A definite refusal with any other code (e.g.
//! INVALID_REPLICATION_FACTOR while brokers are fenced) is left out: it
//! changed nothing and says little. An `info` operation (timeout, lost
//! connection, NOT_CONTROLLER after the proposal was made) may take effect
//! at any point after its invocation, or never: it gets no return event
//! (Knossos' treatment of indeterminate operations), and the model lets it
//! return anything.
//!
//! An indeterminate create leaves the id unknown: the first describe that
//! shows one fixes it, provided it is not the id of an acknowledged create
//! (ids are never reused, so that would be a read of another incarnation).
//! A field a record does not carry (histories of older versions) is not
//! checked.
//!
//! The nondeterministic model (silent `Deleting → Absent`, unknown ids and
//! results) is determinised by the subset construction: the checker's
//! state is the *set* of tuples the name may be in, and a step is legal
//! when that set stays non-empty. Ids and config strings are interned per
//! name (small integers), so the sets stay cheap to hash.
//!
//! # The algorithm
//!
//! Wing & Gong's search with Lowe's memoisation (the algorithm of Knossos'
//! `wgl` checker and of Porcupine): events in a linked list in real-time
//! order; linearise a pending call when the model accepts it and the
//! (linearised-set, state) pair is new; hitting a return that was not
//! linearised backtracks. Each name is checked independently (P-composition).
//! Tests cross-check it against stateright's `LinearizabilityTester`.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde::Serialize;
use serde_json::{json, Value};

use crate::history::{OpKind, OpRecord, Outcome, Seen};

/// Whether a name exists.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Status {
    Absent,
    Present,
    Deleting,
}

/// Configs of one topic: (key, value) pairs of interned strings, sorted by key.
pub type Configs = Vec<(u32, u32)>;

/// One possible state of a name. Ids and config strings are interned.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Topic {
    pub status: Status,
    /// Topic id; `None` while unknown (an indeterminate create) and for `Absent`.
    pub id: Option<u32>,
    /// Partition count; `None` while unknown.
    pub partitions: Option<u32>,
    /// Replication factor; `None` while unknown.
    pub rf: Option<u32>,
    /// Configs set explicitly.
    pub configs: Configs,
}

impl Topic {
    /// The one `Absent` state (nothing else is remembered of a gone topic).
    pub fn absent() -> Topic {
        Topic {
            status: Status::Absent,
            id: None,
            partitions: None,
            rf: None,
            configs: Vec::new(),
        }
    }
}

/// The set of states a name may be in.
pub type States = BTreeSet<Topic>;

/// The states of a name nobody has touched.
pub fn initial() -> States {
    BTreeSet::from([Topic::absent()])
}

/// What a describe returned; `None` fields were not recorded.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Read {
    pub seen: Seen,
    pub id: Option<u32>,
    pub partitions: Option<u32>,
    pub rf: Option<u32>,
    pub configs: Option<Configs>,
}

impl Read {
    /// A describe that recorded only what it saw, not the tuple.
    pub fn only(seen: Seen) -> Read {
        Read {
            seen,
            id: None,
            partitions: None,
            rf: None,
            configs: None,
        }
    }
}

/// One operation as the model sees it (invocation and result together).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Step {
    /// Acknowledged create; the id it returned, what it asked for.
    CreateOk {
        id: Option<u32>,
        partitions: Option<u32>,
        rf: Option<u32>,
    },
    /// TOPIC_ALREADY_EXISTS: present or being deleted (the code does not
    /// say which).
    CreateRefusedExists,
    CreateInfo {
        partitions: Option<u32>,
        rf: Option<u32>,
    },
    DeleteOk,
    DeleteInfo,
    /// UNKNOWN_TOPIC from a delete, create_partitions or alter_config.
    RefusedUnknownTopic,
    /// TOPIC_DELETION_IN_PROGRESS from a create_partitions or alter_config.
    RefusedDeleting,
    /// Partition count raised to `total`.
    AddPartitionsOk {
        total: u32,
    },
    AddPartitionsInfo {
        total: u32,
    },
    /// INVALID_PARTITIONS: the topic has `total` partitions or more.
    AddPartitionsRefused {
        total: u32,
    },
    /// Config `key` set to `value` (`None`: removed).
    AlterConfigOk {
        key: u32,
        value: Option<u32>,
    },
    AlterConfigInfo {
        key: u32,
        value: Option<u32>,
    },
    Read(Read),
}

/// Status names of a state set, for reports.
pub fn state_names(s: &States) -> Vec<&'static str> {
    let mut v: Vec<&'static str> = s
        .iter()
        .map(|t| match t.status {
            Status::Absent => "absent",
            Status::Present => "present",
            Status::Deleting => "deleting",
        })
        .collect();
    v.dedup();
    v
}

/// The silent step: a name being deleted may finish deleting at any time.
fn closure(s: &States) -> States {
    let mut out = s.clone();
    if s.iter().any(|t| t.status == Status::Deleting) {
        out.insert(Topic::absent());
    }
    out
}

/// A known value must match what was seen; an unknown one takes it.
/// `Err` = mismatch.
fn refine(have: Option<u32>, seen: Option<u32>) -> Result<Option<u32>, ()> {
    match (have, seen) {
        (Some(a), Some(b)) if a != b => Err(()),
        (Some(a), _) => Ok(Some(a)),
        (None, b) => Ok(b),
    }
}

fn with_config(mut configs: Configs, key: u32, value: Option<u32>) -> Configs {
    configs.retain(|(k, _)| *k != key);
    if let Some(v) = value {
        configs.push((key, v));
        configs.sort_unstable();
    }
    configs
}

/// One state's successors under `op`, into `out`. `acked`: ids returned by
/// acknowledged creates (an unknown id can never turn out to be one).
fn step_one(t: &Topic, op: &Step, acked: &BTreeSet<u32>, out: &mut States) {
    use Status::*;
    let live = t.status != Absent;
    match op {
        Step::CreateOk { partitions, rf, .. } | Step::CreateInfo { partitions, rf } => {
            let id = match op {
                Step::CreateOk { id, .. } => *id,
                _ => None,
            };
            if t.status == Absent {
                out.insert(Topic {
                    status: Present,
                    id,
                    partitions: *partitions,
                    rf: *rf,
                    configs: Vec::new(),
                });
            } else if matches!(op, Step::CreateInfo { .. }) {
                // Refused: nothing changed.
                out.insert(t.clone());
            }
        }
        Step::CreateRefusedExists => {
            if live {
                out.insert(t.clone());
            }
        }
        Step::DeleteOk | Step::DeleteInfo => {
            if live {
                out.insert(Topic {
                    status: Deleting,
                    ..t.clone()
                });
            } else if *op == Step::DeleteInfo {
                out.insert(t.clone());
            }
        }
        Step::RefusedUnknownTopic => {
            if t.status == Absent {
                out.insert(t.clone());
            }
        }
        Step::RefusedDeleting => {
            if t.status == Deleting {
                out.insert(t.clone());
            }
        }
        Step::AddPartitionsOk { total } | Step::AddPartitionsInfo { total } => {
            let info = matches!(op, Step::AddPartitionsInfo { .. });
            let grows = t.partitions.is_none_or(|p| p < *total);
            if t.status == Present && grows {
                out.insert(Topic {
                    partitions: Some(*total),
                    ..t.clone()
                });
            }
            // Refused (or, unknown count, perhaps refused): unchanged.
            if info && (t.status != Present || t.partitions.is_none_or(|p| p >= *total)) {
                out.insert(t.clone());
            }
        }
        Step::AddPartitionsRefused { total } => {
            if t.status == Present && t.partitions.is_none_or(|p| p >= *total) {
                out.insert(t.clone());
            }
        }
        Step::AlterConfigOk { key, value } | Step::AlterConfigInfo { key, value } => {
            if t.status == Present {
                out.insert(Topic {
                    configs: with_config(t.configs.clone(), *key, *value),
                    ..t.clone()
                });
            } else if matches!(op, Step::AlterConfigInfo { .. }) {
                out.insert(t.clone());
            }
        }
        Step::Read(r) => {
            let status = t.status;
            let seen = match r.seen {
                Seen::Absent => status == Absent,
                Seen::Present => status == Present,
                Seen::Deleting => status == Deleting,
                Seen::Listed => status != Absent,
            };
            if !seen {
                return;
            }
            if status == Absent {
                out.insert(t.clone());
                return;
            }
            let fresh_id = t.id.is_none() && r.id.is_some_and(|i| acked.contains(&i));
            if fresh_id {
                return;
            }
            let (Ok(id), Ok(partitions), Ok(rf)) = (
                refine(t.id, r.id),
                refine(t.partitions, r.partitions),
                refine(t.rf, r.rf),
            ) else {
                return;
            };
            if r.configs.as_ref().is_some_and(|c| *c != t.configs) {
                return;
            }
            out.insert(Topic {
                status,
                id,
                partitions,
                rf,
                configs: t.configs.clone(),
            });
        }
    }
}

/// Applies one step to a set of possible states; empty means impossible.
pub fn step(states: &States, op: &Step, acked: &BTreeSet<u32>) -> States {
    let mut out = BTreeSet::new();
    for t in &closure(states) {
        step_one(t, op, acked, &mut out);
    }
    out
}

/// Ids returned by the acknowledged creates among `ops`.
pub fn acked_ids(ops: &[LinOp]) -> BTreeSet<u32> {
    ops.iter()
        .filter_map(|o| match o.step {
            Step::CreateOk { id, .. } => id,
            _ => None,
        })
        .collect()
}

/// Interns one name's ids and config strings as small integers.
#[derive(Default, Debug)]
pub struct Interner {
    ids: BTreeMap<String, u32>,
    strings: BTreeMap<String, u32>,
}

impl Interner {
    fn of(map: &mut BTreeMap<String, u32>, s: &str) -> u32 {
        let n = map.len() as u32;
        *map.entry(s.to_string()).or_insert(n)
    }
    pub fn id(&mut self, s: &str) -> u32 {
        Self::of(&mut self.ids, s)
    }
    pub fn string(&mut self, s: &str) -> u32 {
        Self::of(&mut self.strings, s)
    }
    /// The tables, for reports: index -> text.
    pub fn to_json(&self) -> Value {
        let rev = |m: &BTreeMap<String, u32>| {
            let mut v: Vec<(&u32, &String)> = m.iter().map(|(s, i)| (i, s)).collect();
            v.sort();
            v.into_iter().map(|(_, s)| s.clone()).collect::<Vec<_>>()
        };
        json!({"ids": rev(&self.ids), "strings": rev(&self.strings)})
    }
}

/// The model's view of a recorded operation; `None` when it says nothing.
pub fn to_step(op: &OpRecord, names: &mut Interner) -> Option<Step> {
    let code = op.error.as_deref().unwrap_or("");
    let key = op.config_key.as_deref().map(|k| names.string(k));
    let value = op.config_value.as_deref().map(|v| names.string(v));
    match (op.op, op.outcome) {
        (OpKind::Create, Outcome::Ok) => Some(Step::CreateOk {
            id: op.topic_id.as_deref().map(|i| names.id(i)),
            partitions: op.partitions,
            rf: op.replication_factor,
        }),
        (OpKind::Create, Outcome::Fail) if code == "TOPIC_ALREADY_EXISTS" => {
            Some(Step::CreateRefusedExists)
        }
        (OpKind::Create, Outcome::Info) => Some(Step::CreateInfo {
            partitions: op.partitions,
            rf: op.replication_factor,
        }),
        (OpKind::Delete, Outcome::Ok) => Some(Step::DeleteOk),
        (OpKind::Delete | OpKind::CreatePartitions | OpKind::AlterConfig, Outcome::Fail)
            if code == "UNKNOWN_TOPIC" =>
        {
            Some(Step::RefusedUnknownTopic)
        }
        (OpKind::CreatePartitions | OpKind::AlterConfig, Outcome::Fail)
            if code == "TOPIC_DELETION_IN_PROGRESS" =>
        {
            Some(Step::RefusedDeleting)
        }
        (OpKind::Delete, Outcome::Info) => Some(Step::DeleteInfo),
        (OpKind::CreatePartitions, Outcome::Ok) => {
            op.partitions.map(|total| Step::AddPartitionsOk { total })
        }
        (OpKind::CreatePartitions, Outcome::Info) => {
            op.partitions.map(|total| Step::AddPartitionsInfo { total })
        }
        (OpKind::CreatePartitions, Outcome::Fail) if code == "INVALID_PARTITIONS" => op
            .partitions
            .map(|total| Step::AddPartitionsRefused { total }),
        (OpKind::AlterConfig, Outcome::Ok) => key.map(|key| Step::AlterConfigOk { key, value }),
        (OpKind::AlterConfig, Outcome::Info) => key.map(|key| Step::AlterConfigInfo { key, value }),
        (OpKind::Describe, Outcome::Ok) => op.seen.map(|seen| {
            let listed = seen != Seen::Absent;
            Step::Read(Read {
                seen,
                id: op
                    .topic_id
                    .as_deref()
                    .filter(|_| listed)
                    .map(|i| names.id(i)),
                partitions: op.partitions.filter(|_| listed),
                rf: op.replication_factor.filter(|_| listed),
                configs: op.configs.as_ref().filter(|_| listed).map(|c| {
                    let mut v: Configs = c
                        .iter()
                        .map(|(k, v)| (names.string(k), names.string(v)))
                        .collect();
                    v.sort_unstable();
                    v
                }),
            })
        }),
        _ => None,
    }
}

/// One operation of a per-name sub-history.
#[derive(Clone, Debug)]
pub struct LinOp {
    pub step: Step,
    pub invoke: f64,
    /// `None`: indeterminate (no return event).
    pub complete: Option<f64>,
    /// Index in the full history, for reports.
    pub index: usize,
}

/// Outcome of checking one name.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    Linearizable,
    /// Not linearizable; a JSON counterexample.
    Violation(Value),
    /// Gave up after the search budget.
    Unknown,
}

const NIL: usize = usize::MAX;

/// The deepest partial linearisation: its length, its operations, the
/// states after it, and the operation whose return blocked it.
type Best = (usize, Vec<usize>, States, Option<usize>);

struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Self {
        Bits(vec![0; n.div_ceil(64).max(1)])
    }
    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn clear(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }
}

/// The operations' calls and returns in time order: (time, is_return, op).
/// Calls sort before returns at equal times (such operations count as
/// concurrent).
fn events(ops: &[LinOp]) -> Vec<(f64, bool, usize)> {
    let mut events: Vec<(f64, bool, usize)> = Vec::new();
    for (i, o) in ops.iter().enumerate() {
        events.push((o.invoke, false, i));
        if let Some(c) = o.complete {
            events.push((c.max(o.invoke), true, i));
        }
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    events
}

/// Checks one name's operations; `budget` bounds the search steps.
pub fn check_ops(ops: &[LinOp], budget: u64) -> Verdict {
    let events = events(ops);
    let n = events.len();
    let head = n;
    let mut next = vec![NIL; n + 1];
    let mut prev = vec![NIL; n + 1];
    let mut ret_of = vec![NIL; ops.len()];
    let mut call_of = vec![NIL; ops.len()];
    let mut last = head;
    for (pos, e) in events.iter().enumerate() {
        next[last] = pos;
        prev[pos] = last;
        last = pos;
        if e.1 {
            ret_of[e.2] = pos;
        } else {
            call_of[e.2] = pos;
        }
    }
    let mut remaining_returns = ops.iter().filter(|o| o.complete.is_some()).count();
    let acked = acked_ids(ops);
    let mut state = initial();
    let mut lin = Bits::new(ops.len());
    let mut cache: HashSet<(Vec<u64>, States)> = HashSet::new();
    let mut stack: Vec<(usize, States)> = Vec::new();
    let mut steps = 0u64;
    // Deepest partial linearisation, for the counterexample.
    let mut best: Best = (0, Vec::new(), initial(), None);
    let mut entry = next[head];

    let lift = |next: &mut Vec<usize>, prev: &mut Vec<usize>, node: usize| {
        let (p, nx) = (prev[node], next[node]);
        next[p] = nx;
        if nx != NIL {
            prev[nx] = p;
        }
    };
    let unlift = |next: &mut Vec<usize>, prev: &mut Vec<usize>, node: usize| {
        let (p, nx) = (prev[node], next[node]);
        next[p] = node;
        if nx != NIL {
            prev[nx] = node;
        }
    };

    while remaining_returns > 0 {
        steps += 1;
        if steps > budget {
            return Verdict::Unknown;
        }
        if entry != NIL && !events[entry].1 {
            let op = events[entry].2;
            let ns = step(&state, &ops[op].step, &acked);
            if !ns.is_empty() {
                lin.set(op);
                if cache.insert((lin.0.clone(), ns.clone())) {
                    stack.push((entry, std::mem::replace(&mut state, ns)));
                    lift(&mut next, &mut prev, entry);
                    if ret_of[op] != NIL {
                        lift(&mut next, &mut prev, ret_of[op]);
                        remaining_returns -= 1;
                    }
                    entry = next[head];
                    continue;
                }
                lin.clear(op);
            }
            entry = next[entry];
            continue;
        }
        if entry != NIL && stack.len() >= best.0 {
            // The return of a call not linearised yet blocks this path.
            best = (
                stack.len(),
                stack.iter().map(|(c, _)| events[*c].2).collect(),
                state.clone(),
                Some(events[entry].2),
            );
        }
        // Backtrack: undo the last linearised call and try the next one.
        // With no entry left (only pending indeterminate calls after this
        // point) an empty stack ends the search; at a blocking return it
        // is a violation.
        let Some((call, st)) = stack.pop() else {
            if entry == NIL {
                break;
            }
            return Verdict::Violation(counterexample(ops, &best));
        };
        let op = events[call].2;
        state = st;
        lin.clear(op);
        if ret_of[op] != NIL {
            unlift(&mut next, &mut prev, ret_of[op]);
            remaining_returns += 1;
        }
        unlift(&mut next, &mut prev, call);
        entry = next[call];
    }
    if remaining_returns == 0 {
        Verdict::Linearizable
    } else {
        Verdict::Violation(counterexample(ops, &best))
    }
}

fn op_json(o: &LinOp) -> Value {
    json!({
        "index": o.index,
        "op": format!("{:?}", o.step),
        "invoke_ms": (o.invoke * 10.0).round() / 10.0,
        "complete_ms": o.complete.map(|c| (c * 10.0).round() / 10.0),
    })
}

fn counterexample(ops: &[LinOp], best: &Best) -> Value {
    let (_, order, state, blocked) = best;
    let acked = acked_ids(ops);
    let mut states = Vec::new();
    let mut s = initial();
    for &i in order {
        s = step(&s, &ops[i].step, &acked);
        states.push(json!({"op": op_json(&ops[i]), "states_after": state_names(&s)}));
    }
    let tail: Vec<Value> = states.iter().rev().take(12).rev().cloned().collect();
    let blocked_json = blocked.map(|b| op_json(&ops[b]));
    // Every operation overlapping the stuck one, and those shortly before it.
    let window: Vec<Value> = blocked
        .map(|b| {
            let lo = ops[b].invoke - 2000.0;
            let hi = ops[b].complete.unwrap_or(f64::INFINITY);
            ops.iter()
                .filter(|o| o.invoke <= hi && o.complete.unwrap_or(f64::INFINITY) >= lo)
                .map(op_json)
                .collect()
        })
        .unwrap_or_default();
    json!({
        "explanation": "no linearization: after the longest valid prefix, the operation `cannot_linearize` returned before it could take effect",
        "longest_prefix_len": order.len(),
        "prefix_tail": tail,
        "states_at_prefix_end": state.iter().take(8).collect::<Vec<_>>(),
        "cannot_linearize": blocked_json,
        "concurrent_window": window,
    })
}

/// The per-name sub-histories of a full history.
pub fn split_by_name(history: &[OpRecord]) -> BTreeMap<String, (Vec<LinOp>, Interner)> {
    let mut by: BTreeMap<String, (Vec<LinOp>, Interner)> = BTreeMap::new();
    for o in history {
        let (ops, names) = by.entry(o.name.clone()).or_default();
        let Some(step) = to_step(o, names) else {
            continue;
        };
        ops.push(LinOp {
            step,
            invoke: o.invoke_ms,
            complete: (o.outcome != Outcome::Info).then_some(o.complete_ms),
            index: o.index,
        });
    }
    by.retain(|_, (ops, _)| !ops.is_empty());
    by
}

/// Checker (a) over a whole history: `(valid, details)`.
pub fn check_history(history: &[OpRecord], budget: u64) -> (Option<bool>, Value) {
    let mut per = serde_json::Map::new();
    let mut valid = Some(true);
    let mut violations = Vec::new();
    for (name, (ops, names)) in split_by_name(history) {
        let v = check_ops(&ops, budget);
        let verdict = match &v {
            Verdict::Linearizable => json!({"valid": true, "ops": ops.len()}),
            Verdict::Unknown => {
                if valid == Some(true) {
                    valid = None;
                }
                json!({"valid": "unknown", "ops": ops.len(), "why": "search budget exhausted"})
            }
            Verdict::Violation(cx) => {
                valid = Some(false);
                violations.push(json!({
                    "name": name,
                    "counterexample": cx,
                    "interned": names.to_json(),
                }));
                json!({"valid": false, "ops": ops.len()})
            }
        };
        per.insert(name, verdict);
    }
    (
        valid,
        json!({
            "model": "per name: (absent | present | deleting, topic id, partitions, replication factor, configs) (silent deleting->absent); info ops may apply any time after invocation or never",
            "algorithm": "Wing & Gong with Lowe's memoization (Knossos wgl / Porcupine), subset-determinised model",
            "names": Value::Object(per),
            "violations": violations,
        }),
    )
}

/// The same model as a stateright [`SequentialSpec`], to cross-check
/// [`check_ops`] against stateright's `LinearizabilityTester`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SpecState {
    pub states: States,
    /// Ids of the history's acknowledged creates.
    pub acked: BTreeSet<u32>,
}

impl stateright::semantics::SequentialSpec for SpecState {
    type Op = Step;
    type Ret = bool;
    fn invoke(&mut self, op: &Step) -> bool {
        let ns = step(&self.states, op, &self.acked);
        let ok = !ns.is_empty();
        if ok {
            self.states = ns;
        }
        ok
    }
    fn is_valid_step(&mut self, op: &Step, _ret: &bool) -> bool {
        self.invoke(op)
    }
}

/// Runs stateright's `LinearizabilityTester` over the same operations
/// (exponential: for small histories only).
pub fn check_with_stateright(ops: &[LinOp]) -> bool {
    use stateright::semantics::{ConsistencyTester, LinearizabilityTester};
    let events = events(ops);
    let mut t: LinearizabilityTester<usize, SpecState> = LinearizabilityTester::new(SpecState {
        states: initial(),
        acked: acked_ids(ops),
    });
    for (_, is_ret, i) in events {
        // One thread per operation: real-time order comes from the event order.
        let r = if is_ret {
            t.on_return(i, true).map(|_| ())
        } else {
            t.on_invoke(i, ops[i].step.clone()).map(|_| ())
        };
        if r.is_err() {
            return false;
        }
    }
    t.is_consistent()
}
