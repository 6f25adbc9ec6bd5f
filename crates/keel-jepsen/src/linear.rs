//! Checker (a): linearizability of create / delete / describe per topic name.
//!
//! # The model
//!
//! Each topic name is a small state machine with three states:
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
//! | create | Absent | ok | Present |
//! | create | Present | TOPIC_ALREADY_EXISTS | Present |
//! | create | Deleting | TOPIC_ALREADY_EXISTS, message mentions deletion | Deleting |
//! | delete | Present | ok | Deleting |
//! | delete | Deleting | ok (no-op: deletion already under way) | Deleting |
//! | delete | Absent | UNKNOWN_TOPIC | Absent |
//! | describe | s | absent / present / marked | s (read) |
//!
//! A definite refusal with any other code (e.g. INVALID_REPLICATION_FACTOR
//! while brokers are fenced) is left out: it changed nothing and says
//! little. An `info` operation (timeout, lost connection, NOT_CONTROLLER
//! after the proposal was made) may take effect at any point after its
//! invocation, or never: it gets no return event (Knossos' treatment of
//! indeterminate operations), and the model lets it return anything.
//!
//! The nondeterministic model (silent `Deleting → Absent`, unknown results)
//! is determinised by the subset construction: the checker's state is the
//! *set* of states the name may be in, and a step is legal when that set
//! stays non-empty.
//!
//! # The algorithm
//!
//! Wing & Gong's search with Lowe's memoisation (the algorithm of Knossos'
//! `wgl` checker and of Porcupine): events in a linked list in real-time
//! order; linearise a pending call when the model accepts it and the
//! (linearised-set, state) pair is new; hitting a return that was not
//! linearised backtracks. Each name is checked independently (P-composition).
//! Tests cross-check it against stateright's `LinearizabilityTester`.

use std::collections::{BTreeMap, HashSet};

use serde::Serialize;
use serde_json::{json, Value};

use crate::history::{OpKind, OpRecord, Outcome, Seen};

/// State bits of the model.
pub const ABSENT: u8 = 1;
pub const PRESENT: u8 = 2;
pub const DELETING: u8 = 4;

/// One operation as the model sees it (invocation and result together).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Step {
    CreateOk,
    /// TOPIC_ALREADY_EXISTS; `deleting` when the message says it is marked for deletion.
    CreateExists {
        deleting: bool,
    },
    CreateInfo,
    DeleteOk,
    DeleteUnknown,
    DeleteInfo,
    Read(Seen),
}

/// Names of a state set, for reports.
pub fn state_names(s: u8) -> Vec<&'static str> {
    let mut v = Vec::new();
    if s & ABSENT != 0 {
        v.push("absent");
    }
    if s & PRESENT != 0 {
        v.push("present");
    }
    if s & DELETING != 0 {
        v.push("deleting");
    }
    v
}

/// The silent step: a name being deleted may finish deleting at any time.
fn closure(s: u8) -> u8 {
    if s & DELETING != 0 {
        s | ABSENT
    } else {
        s
    }
}

/// Applies one step to a set of possible states; 0 means impossible.
pub fn step(states: u8, op: Step) -> u8 {
    let s = closure(states);
    let mut out = 0;
    let has = |b: u8| s & b != 0;
    match op {
        Step::CreateOk => {
            if has(ABSENT) {
                out |= PRESENT;
            }
        }
        Step::CreateExists { deleting: false } => out |= s & PRESENT,
        Step::CreateExists { deleting: true } => out |= s & DELETING,
        Step::CreateInfo => {
            if has(ABSENT) {
                out |= PRESENT;
            }
            out |= s & (PRESENT | DELETING);
        }
        Step::DeleteOk => {
            if has(PRESENT) || has(DELETING) {
                out |= DELETING;
            }
        }
        Step::DeleteUnknown => out |= s & ABSENT,
        Step::DeleteInfo => {
            if has(PRESENT) || has(DELETING) {
                out |= DELETING;
            }
            out |= s & ABSENT;
        }
        Step::Read(Seen::Absent) => out |= s & ABSENT,
        Step::Read(Seen::Present) => out |= s & PRESENT,
        Step::Read(Seen::Deleting) => out |= s & DELETING,
    }
    out
}

/// The model's view of a recorded operation; `None` when it says nothing.
pub fn to_step(op: &OpRecord) -> Option<Step> {
    let code = op.error.as_deref().unwrap_or("");
    match (op.op, op.outcome) {
        (OpKind::Create, Outcome::Ok) => Some(Step::CreateOk),
        (OpKind::Create, Outcome::Fail) if code == "TOPIC_ALREADY_EXISTS" => {
            Some(Step::CreateExists {
                deleting: op
                    .message
                    .as_deref()
                    .is_some_and(|m| m.contains("deletion")),
            })
        }
        (OpKind::Create, Outcome::Info) => Some(Step::CreateInfo),
        (OpKind::Delete, Outcome::Ok) => Some(Step::DeleteOk),
        (OpKind::Delete, Outcome::Fail) if code == "UNKNOWN_TOPIC" => Some(Step::DeleteUnknown),
        (OpKind::Delete, Outcome::Info) => Some(Step::DeleteInfo),
        (OpKind::Describe, Outcome::Ok) => op.seen.map(Step::Read),
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

/// Checks one name's operations; `budget` bounds the search steps.
pub fn check_ops(ops: &[LinOp], budget: u64) -> Verdict {
    // Events: (time, is_return, op). Calls sort before returns at equal
    // times (such operations count as concurrent).
    let mut events: Vec<(f64, bool, usize)> = Vec::new();
    for (i, o) in ops.iter().enumerate() {
        events.push((o.invoke, false, i));
        if let Some(c) = o.complete {
            events.push((c.max(o.invoke), true, i));
        }
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
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
    let mut state = ABSENT;
    let mut lin = Bits::new(ops.len());
    let mut cache: HashSet<(Vec<u64>, u8)> = HashSet::new();
    let mut stack: Vec<(usize, u8)> = Vec::new();
    let mut steps = 0u64;
    // Deepest partial linearisation, for the counterexample.
    let mut best: (usize, Vec<usize>, u8, Option<usize>) = (0, Vec::new(), ABSENT, None);
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
        if entry == NIL {
            // Only pending indeterminate calls after this point: backtrack.
            let Some((call, st)) = stack.pop() else {
                break;
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
            continue;
        }
        let (_, is_ret, op) = events[entry];
        if !is_ret {
            let ns = step(state, ops[op].step);
            if ns != 0 {
                lin.set(op);
                if cache.insert((lin.0.clone(), ns)) {
                    stack.push((entry, state));
                    state = ns;
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
        } else {
            if stack.len() >= best.0 {
                best = (
                    stack.len(),
                    stack.iter().map(|(c, _)| events[*c].2).collect(),
                    state,
                    Some(op),
                );
            }
            let Some((call, st)) = stack.pop() else {
                return Verdict::Violation(counterexample(ops, &best));
            };
            let pop = events[call].2;
            state = st;
            lin.clear(pop);
            if ret_of[pop] != NIL {
                unlift(&mut next, &mut prev, ret_of[pop]);
                remaining_returns += 1;
            }
            unlift(&mut next, &mut prev, call);
            entry = next[call];
        }
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

fn counterexample(ops: &[LinOp], best: &(usize, Vec<usize>, u8, Option<usize>)) -> Value {
    let (_, order, state, blocked) = best;
    let mut states = Vec::new();
    let mut s = ABSENT;
    for &i in order {
        s = step(s, ops[i].step);
        states.push(json!({"op": op_json(&ops[i]), "states_after": state_names(s)}));
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
        "states_at_prefix_end": state_names(*state),
        "cannot_linearize": blocked_json,
        "concurrent_window": window,
    })
}

/// The per-name sub-histories of a full history.
pub fn split_by_name(history: &[OpRecord]) -> BTreeMap<String, Vec<LinOp>> {
    let mut by: BTreeMap<String, Vec<LinOp>> = BTreeMap::new();
    for o in history {
        let Some(step) = to_step(o) else { continue };
        by.entry(o.name.clone()).or_default().push(LinOp {
            step,
            invoke: o.invoke_ms,
            complete: (o.outcome != Outcome::Info).then_some(o.complete_ms),
            index: o.index,
        });
    }
    by
}

/// Checker (a) over a whole history: `(valid, details)`.
pub fn check_history(history: &[OpRecord], budget: u64) -> (Option<bool>, Value) {
    let mut per = serde_json::Map::new();
    let mut valid = Some(true);
    let mut violations = Vec::new();
    for (name, ops) in split_by_name(history) {
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
                violations.push(json!({"name": name, "counterexample": cx}));
                json!({"valid": false, "ops": ops.len()})
            }
        };
        per.insert(name, verdict);
    }
    (
        valid,
        json!({
            "model": "per name: absent | present | deleting (silent deleting->absent); info ops may apply any time after invocation or never",
            "algorithm": "Wing & Gong with Lowe's memoization (Knossos wgl / Porcupine), subset-determinised model",
            "names": Value::Object(per),
            "violations": violations,
        }),
    )
}

/// The same model as a stateright [`SequentialSpec`], to cross-check
/// [`check_ops`] against stateright's `LinearizabilityTester`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SpecState(pub u8);

impl stateright::semantics::SequentialSpec for SpecState {
    type Op = Step;
    type Ret = bool;
    fn invoke(&mut self, op: &Step) -> bool {
        let ns = step(self.0, *op);
        if ns != 0 {
            self.0 = ns;
        }
        ns != 0
    }
    fn is_valid_step(&mut self, op: &Step, _ret: &bool) -> bool {
        self.invoke(op)
    }
}

/// Runs stateright's `LinearizabilityTester` over the same operations
/// (exponential: for small histories only).
pub fn check_with_stateright(ops: &[LinOp]) -> bool {
    use stateright::semantics::{ConsistencyTester, LinearizabilityTester};
    let mut events: Vec<(f64, bool, usize)> = Vec::new();
    for (i, o) in ops.iter().enumerate() {
        events.push((o.invoke, false, i));
        if let Some(c) = o.complete {
            events.push((c.max(o.invoke), true, i));
        }
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let mut t: LinearizabilityTester<usize, SpecState> =
        LinearizabilityTester::new(SpecState(ABSENT));
    for (_, is_ret, i) in events {
        // One thread per operation: real-time order comes from the event order.
        let r = if is_ret {
            t.on_return(i, true).map(|_| ())
        } else {
            t.on_invoke(i, ops[i].step).map(|_| ())
        };
        if r.is_err() {
            return false;
        }
    }
    t.is_consistent()
}
