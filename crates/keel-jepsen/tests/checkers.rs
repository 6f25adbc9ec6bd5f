//! Every checker is fed hand-made bad histories and must catch them; good
//! ones must pass (the intruder checker: accepted attempts, no attempts,
//! and every trace of a change it tried). The linearizability checker is
//! cross-checked against stateright's `LinearizabilityTester` on random
//! small histories.

use std::collections::BTreeMap;

use keel_jepsen::brokers::{self, BrokerEvent};
use keel_jepsen::history::{OpKind, OpRecord, Outcome, Seen};
use keel_jepsen::intruder::{self, Answer, Attempt, Credential};
use keel_jepsen::linear::{self, LinOp, Read, Step, Verdict};
use keel_jepsen::lost;
use keel_jepsen::nemesis::{self, ZombieProbe};
use keel_jepsen::partitions;
use keel_jepsen::reassign::{self, Placement};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn op(name: &str, kind: OpKind, t0: f64, t1: f64, outcome: Outcome) -> OpRecord {
    OpRecord::new(kind, name, t0, t1, outcome)
}

fn create_ok(t0: f64, t1: f64) -> OpRecord {
    op("t", OpKind::Create, t0, t1, Outcome::Ok)
}
fn delete_ok(t0: f64, t1: f64) -> OpRecord {
    op("t", OpKind::Delete, t0, t1, Outcome::Ok)
}
fn read(t0: f64, t1: f64, seen: Seen) -> OpRecord {
    let mut o = op("t", OpKind::Describe, t0, t1, Outcome::Ok);
    o.seen = Some(seen);
    o
}
fn create_exists(t0: f64, t1: f64, deleting: bool) -> OpRecord {
    let mut o = op("t", OpKind::Create, t0, t1, Outcome::Fail);
    o.error = Some("TOPIC_ALREADY_EXISTS".into());
    o.message = Some(if deleting {
        "topic \"t\" already exists and is marked for deletion".into()
    } else {
        "topic \"t\" already exists".into()
    });
    o
}
fn index(mut v: Vec<OpRecord>) -> Vec<OpRecord> {
    for (i, o) in v.iter_mut().enumerate() {
        o.index = i;
    }
    v
}

fn lin(v: Vec<OpRecord>) -> Option<bool> {
    linear::check_history(&index(v), 1_000_000).0
}

#[test]
fn sequential_good_history_is_linearizable() {
    let h = vec![
        read(0.0, 1.0, Seen::Absent),
        create_ok(2.0, 3.0),
        read(4.0, 5.0, Seen::Present),
        create_exists(6.0, 7.0, false),
        delete_ok(8.0, 9.0),
        read(10.0, 11.0, Seen::Deleting),
        create_exists(12.0, 13.0, true),
        read(14.0, 15.0, Seen::Absent),
        create_ok(16.0, 17.0),
    ];
    assert_eq!(lin(h), Some(true));
}

#[test]
fn stale_read_is_caught() {
    // Created and acknowledged, then a later read says absent.
    let h = vec![create_ok(0.0, 1.0), read(2.0, 3.0, Seen::Absent)];
    assert_eq!(lin(h), Some(false));
    // Deleted (marked) then a later read sees it present again.
    let h = vec![
        create_ok(0.0, 1.0),
        delete_ok(2.0, 3.0),
        read(4.0, 5.0, Seen::Present),
    ];
    assert_eq!(lin(h), Some(false));
    // Fully deleted, then seen as deleting again without a delete.
    let h = vec![
        create_ok(0.0, 1.0),
        delete_ok(2.0, 3.0),
        read(4.0, 5.0, Seen::Absent),
        read(6.0, 7.0, Seen::Deleting),
    ];
    assert_eq!(lin(h), Some(false));
}

#[test]
fn lost_write_is_caught_by_linearizability_and_lost_checker() {
    let h = index(vec![create_ok(0.0, 1.0), read(5.0, 6.0, Seen::Absent)]);
    assert_eq!(linear::check_history(&h, 1_000_000).0, Some(false));
    let mut fin = BTreeMap::new();
    fin.insert("t".to_string(), Seen::Absent);
    let (ok, detail) = lost::check(&h, &fin);
    assert!(!ok, "{detail}");
    fin.insert("t".to_string(), Seen::Present);
    assert!(lost::check(&h, &fin).0);
    // An acknowledged delete after the create excuses the absence.
    let h2 = index(vec![create_ok(0.0, 1.0), delete_ok(2.0, 3.0)]);
    fin.insert("t".to_string(), Seen::Absent);
    assert!(lost::check(&h2, &fin).0);
    // So does an indeterminate one, whenever it was invoked.
    let h3 = index(vec![
        op("t", OpKind::Delete, 0.0, 0.5, Outcome::Info),
        create_ok(1.0, 2.0),
    ]);
    assert!(lost::check(&h3, &fin).0);
    // A refused delete does not.
    let mut refused = op("t", OpKind::Delete, 3.0, 4.0, Outcome::Fail);
    refused.error = Some("UNKNOWN_TOPIC".into());
    let h4 = index(vec![create_ok(0.0, 1.0), refused]);
    assert!(!lost::check(&h4, &fin).0);
}

#[test]
fn double_create_ok_is_caught() {
    let h = vec![create_ok(0.0, 1.0), create_ok(2.0, 3.0)];
    assert_eq!(lin(h), Some(false));
    // Concurrent with a delete in between it is fine.
    let h = vec![
        create_ok(0.0, 1.0),
        delete_ok(1.5, 1.8),
        read(1.9, 2.0, Seen::Absent),
        create_ok(2.0, 3.0),
    ];
    assert_eq!(lin(h), Some(true));
}

#[test]
fn concurrency_and_info_ops_are_respected() {
    // Overlapping create and read: the read may come first.
    let h = vec![
        create_ok(0.0, 10.0),
        read(1.0, 2.0, Seen::Absent),
        read(11.0, 12.0, Seen::Present),
    ];
    assert_eq!(lin(h), Some(true));
    // An indeterminate create may explain a later present read...
    let h = vec![
        op("t", OpKind::Create, 0.0, 1.0, Outcome::Info),
        read(5.0, 6.0, Seen::Present),
    ];
    assert_eq!(lin(h), Some(true));
    // ...or never happen.
    let h = vec![
        op("t", OpKind::Create, 0.0, 1.0, Outcome::Info),
        read(5.0, 6.0, Seen::Absent),
    ];
    assert_eq!(lin(h), Some(true));
    // But it cannot take effect before it was invoked.
    let h = vec![
        read(0.0, 1.0, Seen::Present),
        op("t", OpKind::Create, 2.0, 3.0, Outcome::Info),
    ];
    assert_eq!(lin(h), Some(false));
    // Create refused as existing while nothing was ever created.
    let h = vec![create_exists(0.0, 1.0, false)];
    assert_eq!(lin(h), Some(false));
    // Verdicts never read the message: "marked for deletion" while the
    // topic is plainly present is the code's answer all the same...
    let h = vec![create_ok(0.0, 1.0), create_exists(2.0, 3.0, true)];
    assert_eq!(lin(h), Some(true));
    // ...and refused as existing once it is surely gone is a violation
    // whatever the message says.
    let h = vec![
        create_ok(0.0, 1.0),
        delete_ok(2.0, 3.0),
        read(4.0, 5.0, Seen::Absent),
        create_exists(6.0, 7.0, true),
    ];
    assert_eq!(lin(h), Some(false));
}

#[test]
fn counterexample_names_the_stuck_operation() {
    let h = index(vec![create_ok(0.0, 1.0), read(2.0, 3.0, Seen::Absent)]);
    let (_, detail) = linear::check_history(&h, 1_000_000);
    let v = &detail["violations"][0];
    assert_eq!(v["name"], "t");
    assert_eq!(v["counterexample"]["cannot_linearize"]["index"], 1);
}

fn random_step(rng: &mut StdRng) -> Step {
    let small = |rng: &mut StdRng, n: u32| rng.random_range(0..n);
    let maybe = |rng: &mut StdRng, v: u32| rng.random_bool(0.5).then_some(v);
    match small(rng, 13) {
        0 => Step::CreateOk {
            id: Some(small(rng, 2)),
            partitions: Some(1 + small(rng, 2)),
            rf: Some(2),
        },
        1 => Step::CreateInfo {
            partitions: Some(1 + small(rng, 2)),
            rf: Some(2),
        },
        2 => Step::CreateRefusedExists,
        3 => Step::DeleteOk,
        4 => Step::DeleteInfo,
        5 => Step::RefusedUnknownTopic,
        6 => Step::RefusedDeleting,
        7 => Step::AddPartitionsOk {
            total: 2 + small(rng, 2),
        },
        8 => Step::AddPartitionsInfo {
            total: 2 + small(rng, 2),
        },
        9 => Step::AddPartitionsRefused {
            total: 1 + small(rng, 3),
        },
        10 => {
            let v = small(rng, 2);
            Step::AlterConfigOk {
                key: 0,
                value: maybe(rng, v),
            }
        }
        11 => {
            let v = small(rng, 2);
            Step::AlterConfigInfo {
                key: 0,
                value: maybe(rng, v),
            }
        }
        _ => {
            let seen = [Seen::Absent, Seen::Present, Seen::Deleting][small(rng, 3) as usize];
            let listed = seen != Seen::Absent;
            let v = small(rng, 2);
            let configs = match small(rng, 3) {
                0 => None,
                1 => Some(vec![]),
                _ => Some(vec![(0, v)]),
            };
            Step::Read(Read {
                seen,
                id: if listed { maybe(rng, v) } else { None },
                partitions: if listed { maybe(rng, 1 + v) } else { None },
                rf: if listed { maybe(rng, 2) } else { None },
                configs: if listed { configs } else { None },
            })
        }
    }
}

fn random_ops(rng: &mut StdRng, n: usize) -> Vec<LinOp> {
    (0..n)
        .map(|i| {
            let step = random_step(rng);
            let invoke = rng.random_range(0..20) as f64;
            let info = matches!(
                step,
                Step::CreateInfo { .. }
                    | Step::DeleteInfo
                    | Step::AddPartitionsInfo { .. }
                    | Step::AlterConfigInfo { .. }
            );
            LinOp {
                step,
                invoke,
                complete: (!info).then(|| invoke + rng.random_range(1..6) as f64),
                index: i,
            }
        })
        .collect()
}

#[test]
fn agrees_with_stateright_on_random_small_histories() {
    let mut rng = StdRng::seed_from_u64(7);
    let (mut yes, mut no) = (0, 0);
    for _ in 0..3000 {
        let n = rng.random_range(1..7);
        let ops = random_ops(&mut rng, n);
        let ours = match linear::check_ops(&ops, 1_000_000) {
            Verdict::Linearizable => true,
            Verdict::Violation(_) => false,
            Verdict::Unknown => panic!("budget"),
        };
        let theirs = linear::check_with_stateright(&ops);
        assert_eq!(ours, theirs, "disagreement on {ops:#?}");
        if ours {
            yes += 1
        } else {
            no += 1
        }
    }
    assert!(yes > 100 && no > 100, "both verdicts exercised: {yes} {no}");
}

fn ev(
    broker: u32,
    event: &str,
    leader: Option<u32>,
    le: u32,
    ce: u64,
    isr: Vec<u32>,
) -> BrokerEvent {
    BrokerEvent {
        event: event.into(),
        topic_id: "00000000-0000-0000-0000-000000000001".into(),
        partition: 0,
        leader,
        leader_epoch: le,
        partition_epoch: le,
        isr,
        replicas: vec![1, 2, 3],
        controller_epoch: ce,
        broker_id: broker,
        broker_epoch: 10,
        accepted_at_ms: 0,
    }
}

fn hist(v: Vec<BrokerEvent>) -> BTreeMap<u32, Vec<BrokerEvent>> {
    let mut m: BTreeMap<u32, Vec<BrokerEvent>> = BTreeMap::new();
    for e in v {
        m.entry(e.broker_id).or_default().push(e);
    }
    m
}

#[test]
fn good_broker_history_passes() {
    let h = hist(vec![
        ev(1, "leader_and_isr", Some(1), 1, 1, vec![1, 2]),
        ev(2, "leader_and_isr", Some(1), 1, 1, vec![1, 2]),
        ev(1, "alter_partition", Some(1), 1, 1, vec![1]),
        ev(1, "resigned", Some(1), 1, 1, vec![1]),
        ev(2, "leader_and_isr", Some(2), 2, 2, vec![2]),
        ev(1, "leader_and_isr", Some(2), 2, 2, vec![2]),
    ]);
    let (ok, d) = brokers::check(&h);
    assert!(ok, "{d}");
}

#[test]
fn two_leaders_in_one_epoch_are_caught() {
    let h = hist(vec![
        ev(1, "leader_and_isr", Some(1), 3, 1, vec![1, 2]),
        ev(2, "leader_and_isr", Some(2), 3, 2, vec![1, 2]),
    ]);
    let (ok, d) = brokers::check(&h);
    assert!(!ok);
    assert_eq!(d["one_leader_per_epoch"]["valid"], false);
}

#[test]
fn leader_epoch_going_back_is_caught() {
    let h = hist(vec![
        ev(1, "leader_and_isr", Some(1), 5, 2, vec![1]),
        ev(1, "leader_and_isr", Some(2), 4, 2, vec![2]),
    ]);
    let (ok, d) = brokers::check(&h);
    assert!(!ok);
    assert_eq!(d["leader_epoch_monotonic"]["valid"], false);
}

#[test]
fn controller_epoch_going_back_is_caught() {
    let h = hist(vec![
        ev(1, "leader_and_isr", Some(1), 5, 7, vec![1]),
        ev(1, "leader_and_isr", Some(1), 6, 6, vec![1]),
    ]);
    let (ok, d) = brokers::check(&h);
    assert!(!ok);
    assert_eq!(d["controller_epoch_monotonic"]["valid"], false);
    assert_eq!(d["leader_epoch_monotonic"]["valid"], true);
}

#[test]
fn leader_outside_isr_is_caught() {
    let h = hist(vec![ev(1, "leader_and_isr", Some(3), 1, 1, vec![1, 2])]);
    let (ok, d) = brokers::check(&h);
    assert!(!ok);
    assert_eq!(d["leader_in_isr"]["valid"], false);
}

#[test]
fn a_topic_with_part_of_its_partitions_is_caught() {
    let create = |name: &str, n: u32, outcome: Outcome| {
        let mut o = op(name, OpKind::Create, 0.0, 1.0, outcome);
        o.partitions = Some(n);
        o
    };
    let seen = |name: &str, n: u32, how: Seen| {
        let mut o = op(name, OpKind::Describe, 2.0, 3.0, Outcome::Ok);
        o.seen = Some(how);
        o.partitions = Some(n);
        o
    };
    // Whole topics, even of a create whose outcome was unknown: valid.
    let good = index(vec![
        create("big", 20_000, Outcome::Info),
        create("small", 2, Outcome::Ok),
        create("small", 1, Outcome::Fail),
        seen("big", 20_000, Seen::Present),
        seen("small", 2, Seen::Deleting),
        seen("small", 1, Seen::Present),
    ]);
    let (valid, detail) = partitions::check(&good);
    assert!(valid, "{detail}");
    assert_eq!(detail["describes_checked"], 3);
    // 4,999 of 20,000: the half-committed decision this checker is for.
    let bad = index(vec![
        create("big", 20_000, Outcome::Info),
        seen("big", 4_999, Seen::Present),
    ]);
    let (valid, detail) = partitions::check(&bad);
    assert!(!valid);
    assert_eq!(detail["violations"][0]["partitions_seen"], 4_999);
    // A topic no create asked for at all.
    let (valid, _) = partitions::check(&index(vec![seen("ghost", 1, Seen::Present)]));
    assert!(!valid);
}

// --- intruder ---------------------------------------------------------------

fn attempt(credential: Credential, request: &str, answer: Answer) -> Attempt {
    Attempt {
        at_ms: 1.0,
        credential,
        identity: "keel://keel-jepsen/user/intruder".into(),
        request: request.into(),
        target: "intruder-target-0".into(),
        node: "127.0.2.11:9093".into(),
        answer,
        detail: String::new(),
    }
}

/// A cluster state with both target topics, three voters and two brokers.
fn state() -> intruder::State {
    let mut s = intruder::State::default();
    for name in intruder::targets() {
        s.topics.insert(
            name.clone(),
            intruder::TopicState {
                topic_id: format!("id-{name}"),
                marked_for_deletion: false,
                replicas: vec![
                    (0, vec![1, 2], vec![], vec![]),
                    (1, vec![2, 1], vec![], vec![]),
                ],
                configs: BTreeMap::new(),
            },
        );
    }
    s.voters = vec![1, 2, 3];
    for id in [1, 2] {
        s.brokers.insert(
            id,
            intruder::BrokerState {
                address: format!("127.0.2.2{id}:9092"),
                incarnation: "ab".repeat(16),
            },
        );
    }
    s.terms.insert(1, 4);
    s.controller_epochs_seen.insert(1, 3);
    s
}

fn refused_everything() -> Vec<Attempt> {
    vec![
        attempt(Credential::ForeignCa, "CreateTopics", Answer::Refused),
        attempt(Credential::WrongBroker, "BrokerHeartbeat", Answer::Refused),
        attempt(Credential::NoAcls, "DeleteTopics", Answer::Refused),
        attempt(Credential::NoAcls, "RemoveVoter", Answer::Errored),
    ]
}

fn intruder_check(attempts: &[Attempt], before: &intruder::State, after: &intruder::State) -> bool {
    let (ok, detail) = intruder::check(attempts, Some(before), Some(after), &BTreeMap::new());
    assert_eq!(detail["attempts"], attempts.len(), "{detail}");
    ok
}

#[test]
fn intruder_refused_everywhere_and_nothing_changed_passes() {
    let s = state();
    let (ok, detail) = intruder::check(&refused_everything(), Some(&s), Some(&s), &BTreeMap::new());
    assert!(ok, "{detail}");
    assert_eq!(detail["refused"], 3);
    assert_eq!(detail["errored"], 1);
    assert_eq!(detail["accepted"], 0);
    // Leaders, ISRs, terms and epochs move with other faults; new broker
    // incarnations come with restarts: none of that is the intruder's.
    let mut after = state();
    after.terms.insert(1, 9);
    after.controller_epochs_seen.insert(1, 8);
    after.brokers.get_mut(&1).unwrap().incarnation = "cd".repeat(16);
    assert!(intruder_check(&refused_everything(), &s, &after));
}

#[test]
fn an_accepted_intruder_attempt_fails_the_run() {
    let s = state();
    let mut attempts = refused_everything();
    attempts.push(attempt(Credential::NoAcls, "CreateAcls", Answer::Accepted));
    let (ok, detail) = intruder::check(&attempts, Some(&s), Some(&s), &BTreeMap::new());
    assert!(!ok, "{detail}");
    assert_eq!(detail["accepted"], 1);
    assert_eq!(detail["violations"][0]["accepted"]["request"], "CreateAcls");
}

#[test]
fn an_intruder_that_tried_nothing_fails_the_run() {
    let s = state();
    let (ok, detail) = intruder::check(&[], Some(&s), Some(&s), &BTreeMap::new());
    assert!(!ok, "{detail}");
    assert_eq!(detail["attempts"], 0);
    // Nor can a run pass whose state after the run could not be read.
    let (ok, _) = intruder::check(&refused_everything(), Some(&s), None, &BTreeMap::new());
    assert!(!ok);
}

#[test]
fn whatever_the_intruder_tried_showing_in_the_state_fails_the_run() {
    let before = state();
    let attempts = refused_everything();
    let changed = |f: &dyn Fn(&mut intruder::State)| {
        let mut after = state();
        f(&mut after);
        !intruder_check(&attempts, &before, &after)
    };
    // A topic it tried to create exists.
    assert!(changed(&|s| {
        s.topics
            .insert("intruder-new-c3".into(), Default::default());
    }));
    // A target topic is marked for deletion, gone, recreated, resized,
    // reassigned or reconfigured.
    assert!(changed(&|s| {
        s.topics
            .get_mut("intruder-target-0")
            .unwrap()
            .marked_for_deletion = true;
    }));
    assert!(changed(&|s| {
        s.topics.remove("intruder-target-1");
    }));
    assert!(changed(&|s| {
        s.topics.get_mut("intruder-target-1").unwrap().topic_id = "new".into();
    }));
    assert!(changed(&|s| {
        let t = s.topics.get_mut("intruder-target-0").unwrap();
        t.replicas.push((2, vec![1], vec![], vec![]));
    }));
    assert!(changed(&|s| {
        let t = s.topics.get_mut("intruder-target-0").unwrap();
        t.replicas[0] = (0, vec![2, 1], vec![1], vec![2]);
    }));
    assert!(changed(&|s| {
        let t = s.topics.get_mut("intruder-target-0").unwrap();
        t.configs.insert("retention.ms".into(), "1".into());
    }));
    // An ACL binding appeared; the voters changed.
    assert!(changed(&|s| {
        s.acls
            .insert("User:intruder Some(Cluster(true)) all Ok(Allow)".into());
    }));
    assert!(changed(&|s| s.voters = vec![1, 2]));
    assert!(changed(&|s| s.voters = vec![1, 2, 3, 9]));
    // A broker unregistered, re-registered elsewhere or by the intruder,
    // or one that never existed registered.
    assert!(changed(&|s| {
        s.brokers.remove(&2);
    }));
    assert!(changed(&|s| {
        s.brokers.get_mut(&2).unwrap().address = intruder::FORGED_ADDRESS.into();
    }));
    assert!(changed(&|s| {
        s.brokers.get_mut(&1).unwrap().incarnation = "1d".repeat(16);
    }));
    assert!(changed(&|s| {
        s.brokers.insert(7, Default::default());
    }));
    // A forged term or controller epoch took hold.
    assert!(changed(&|s| {
        s.terms.insert(2, intruder::FORGED_EPOCH + 3);
    }));
    assert!(changed(&|s| {
        s.controller_epochs_seen.insert(2, intruder::FORGED_EPOCH);
    }));
    // A broker accepted a LeaderAndIsr with a forged controller epoch.
    let forged = hist(vec![ev(
        1,
        "leader_and_isr",
        Some(1),
        1001,
        intruder::FORGED_EPOCH + 1,
        vec![1],
    )]);
    let (ok, detail) = intruder::check(&attempts, Some(&before), Some(&before), &forged);
    assert!(!ok, "{detail}");
}

// --- zombie -----------------------------------------------------------------

fn probe(answer: Option<&str>) -> ZombieProbe {
    ZombieProbe {
        broker: 1,
        at_ms: 1.0,
        stale_epoch: 1,
        seen_epoch: 2,
        topic_id: "t".into(),
        partition: 0,
        answer: answer.map(String::from),
        accepted: answer.is_none(),
    }
}

#[test]
fn zombie_checker_catches_an_accepted_or_untested_probe() {
    let refused = || probe(Some("STALE_CONTROLLER_EPOCH"));
    assert!(nemesis::zombie_check(&[refused()], 1).0);
    assert!(nemesis::zombie_check(&[], 0).0);
    assert!(!nemesis::zombie_check(&[], 1).0, "nothing was tested");
    assert!(!nemesis::zombie_check(&[refused(), probe(None)], 1).0);
    // A transport error is not a refusal: it does not count.
    assert!(!nemesis::zombie_check(&[probe(Some("GRPC_UNAVAILABLE"))], 1).0);
    // Refused for its certificate: the epoch check was never reached.
    assert!(
        !nemesis::zombie_check(
            &[refused(), probe(Some(nemesis::ZOMBIE_WRONG_CERTIFICATE))],
            1
        )
        .0
    );
}

// --- what each newer nemesis is there to provoke, and the checker that
// must flag it ------------------------------------------------------------

#[test]
fn isolate_leader_or_one_way_partition_a_deposed_leader_answering_from_its_image_is_caught() {
    // isolate-leader / partition-one-way / bridge / majorities-ring / clock:
    // the old leader, cut off, still answers a describe from its image
    // after its successor deleted the topic (its lease should have ended).
    let h = vec![
        create_ok(0.0, 1.0),
        delete_ok(2.0, 3.0),
        read(4.0, 5.0, Seen::Absent),
        read(6.0, 7.0, Seen::Present),
    ];
    assert_eq!(lin(h), Some(false));
}

#[test]
fn isolate_leader_with_brokers_a_broker_obeying_the_deposed_controller_is_caught() {
    // The brokers left with the old leader take its LeaderAndIsr after the
    // new leader's: a lower controller epoch accepted after a higher one.
    let h = hist(vec![
        ev(1, "leader_and_isr", Some(1), 4, 3, vec![1, 2]),
        ev(1, "leader_and_isr", Some(1), 5, 2, vec![1, 2]),
    ]);
    let (ok, d) = brokers::check(&h);
    assert!(!ok, "{d}");
}

#[test]
fn kill_all_an_acknowledged_create_missing_after_every_controller_restarted_is_caught() {
    let h = index(vec![create_ok(0.0, 1.0)]);
    let mut fin = BTreeMap::new();
    fin.insert("t".to_string(), Seen::Absent);
    let (ok, detail) = lost::check(&h, &fin);
    assert!(!ok, "{detail}");
}

#[test]
fn net_slow_a_retried_create_applied_twice_is_caught() {
    // Loss and reordering make a client retry its create; the first try
    // was applied, so the retry must fail TOPIC_ALREADY_EXISTS, never
    // succeed (no delete in between).
    let first = op("t", OpKind::Create, 0.0, 1.0, Outcome::Info);
    let h = vec![first, create_ok(2.0, 3.0), create_ok(4.0, 5.0)];
    assert_eq!(lin(h), Some(false));
}

// --- topic ids and shapes ---------------------------------------------------

fn create_id(t0: f64, t1: f64, id: &str, parts: u32) -> OpRecord {
    let mut o = create_ok(t0, t1);
    o.topic_id = Some(id.into());
    o.partitions = Some(parts);
    o
}
fn read_id(t0: f64, t1: f64, id: &str, parts: u32) -> OpRecord {
    let mut o = read(t0, t1, Seen::Present);
    o.topic_id = Some(id.into());
    o.partitions = Some(parts);
    o
}

#[test]
fn a_describe_of_an_older_incarnation_or_a_wrong_shape_is_caught() {
    use keel_jepsen::incarnations;
    let good = index(vec![
        create_id(0.0, 1.0, "a", 2),
        read_id(2.0, 3.0, "a", 2),
        delete_ok(4.0, 5.0),
        create_id(6.0, 7.0, "b", 1),
        read_id(8.0, 9.0, "b", 1),
        // Concurrent with b's create: a may still be the one listed.
        read_id(5.5, 6.5, "a", 2),
    ]);
    let (ok, d) = incarnations::check(&good);
    assert!(ok, "{d}");
    assert_eq!(d["incarnations"], 2);

    // Both checkers see the id shows the read came from the past.
    let stale = vec![
        create_id(0.0, 1.0, "a", 2),
        delete_ok(2.0, 3.0),
        create_id(4.0, 5.0, "b", 2),
        read_id(6.0, 7.0, "a", 2),
    ];
    assert_eq!(lin(stale.clone()), Some(false));
    let (ok, d) = incarnations::check(&index(stale));
    assert!(!ok);
    assert_eq!(d["violations"][0]["kind"], "older_incarnation");

    let (ok, d) = incarnations::check(&index(vec![
        create_id(0.0, 1.0, "a", 2),
        read_id(2.0, 3.0, "a", 1),
    ]));
    assert!(!ok);
    assert_eq!(d["violations"][0]["kind"], "wrong_partition_count");

    // An id nobody created, unless an indeterminate create explains it.
    let phantom = vec![read_id(0.0, 1.0, "z", 1)];
    assert!(!incarnations::check(&index(phantom)).0);
    let explained = vec![
        op("t", OpKind::Create, 0.0, 0.5, Outcome::Info),
        read_id(1.0, 2.0, "z", 1),
    ];
    assert!(incarnations::check(&index(explained)).0);
}

#[test]
fn an_acknowledged_create_replaced_by_another_incarnation_is_caught() {
    let h = index(vec![create_id(0.0, 1.0, "a", 1)]);
    let mut fin = BTreeMap::new();
    fin.insert("t".to_string(), Seen::Present);
    let mut ids = BTreeMap::new();
    ids.insert("t".to_string(), "a".to_string());
    assert!(lost::check_with_ids(&h, &fin, &ids).0);
    ids.insert("t".to_string(), "b".to_string());
    let (ok, d) = lost::check_with_ids(&h, &fin, &ids);
    assert!(!ok, "{d}");
    assert_eq!(d["replaced_by_another_incarnation"][0]["final_id"], "b");
}

// --- the (exists, id, partitions, replication factor, configs) model -------

fn create_full(t0: f64, t1: f64, id: &str, parts: u32, rf: u32) -> OpRecord {
    let mut o = create_id(t0, t1, id, parts);
    o.replication_factor = Some(rf);
    o
}
/// A describe that saw the whole tuple.
fn read_full(
    t0: f64,
    t1: f64,
    id: &str,
    parts: u32,
    rf: u32,
    configs: &[(&str, &str)],
) -> OpRecord {
    let mut o = read_id(t0, t1, id, parts);
    o.replication_factor = Some(rf);
    o.configs = Some(
        configs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    o
}
fn add_partitions(t0: f64, t1: f64, total: u32, outcome: Outcome) -> OpRecord {
    let mut o = op("t", OpKind::CreatePartitions, t0, t1, outcome);
    o.partitions = Some(total);
    o
}
fn alter(t0: f64, t1: f64, key: &str, value: Option<&str>, outcome: Outcome) -> OpRecord {
    let mut o = op("t", OpKind::AlterConfig, t0, t1, outcome);
    o.config_key = Some(key.into());
    o.config_value = value.map(str::to_string);
    o
}
fn refused(mut o: OpRecord, code: &str) -> OpRecord {
    o.outcome = Outcome::Fail;
    o.error = Some(code.into());
    o
}

#[test]
fn a_whole_tuple_history_with_partition_and_config_changes_is_linearizable() {
    let h = vec![
        create_full(0.0, 1.0, "a", 1, 2),
        read_full(2.0, 3.0, "a", 1, 2, &[]),
        add_partitions(4.0, 5.0, 3, Outcome::Ok),
        refused(
            add_partitions(6.0, 7.0, 2, Outcome::Ok),
            "INVALID_PARTITIONS",
        ),
        alter(8.0, 9.0, "retention.ms", Some("60000"), Outcome::Ok),
        alter(10.0, 11.0, "cleanup.policy", Some("compact"), Outcome::Ok),
        alter(12.0, 13.0, "cleanup.policy", None, Outcome::Ok),
        read_full(14.0, 15.0, "a", 3, 2, &[("retention.ms", "60000")]),
        // Reassignments and elections do not change the tuple.
        op("t", OpKind::Reassign, 16.0, 17.0, Outcome::Ok),
        op("t", OpKind::ElectPreferred, 16.0, 17.0, Outcome::Ok),
        delete_ok(18.0, 19.0),
        refused(
            alter(20.0, 20.5, "retention.ms", None, Outcome::Ok),
            "TOPIC_DELETION_IN_PROGRESS",
        ),
        refused(add_partitions(20.0, 20.5, 4, Outcome::Ok), "UNKNOWN_TOPIC"),
        read(21.0, 22.0, Seen::Absent),
        // A new incarnation starts with no configs and its own shape.
        create_full(23.0, 24.0, "b", 2, 2),
        read_full(25.0, 26.0, "b", 2, 2, &[]),
    ];
    assert_eq!(lin(h), Some(true));
}

#[test]
fn a_stale_partition_count_is_caught() {
    let base = || {
        vec![
            create_full(0.0, 1.0, "a", 1, 2),
            add_partitions(2.0, 3.0, 3, Outcome::Ok),
        ]
    };
    let mut h = base();
    h.push(read_full(4.0, 5.0, "a", 1, 2, &[]));
    let (ok, d) = linear::check_history(&index(h), 1_000_000);
    assert_eq!(ok, Some(false), "{d}");
    assert_eq!(
        d["violations"][0]["counterexample"]["cannot_linearize"]["index"],
        2
    );
    // Concurrent with the increase, either count may show.
    let mut h = base();
    h[1].complete_ms = 6.0;
    h.push(read_full(4.0, 5.0, "a", 1, 2, &[]));
    assert_eq!(lin(h), Some(true));
    // An indeterminate increase may or may not have happened...
    let mut h = base();
    h[1].outcome = Outcome::Info;
    h.push(read_full(4.0, 5.0, "a", 1, 2, &[]));
    assert_eq!(lin(h.clone()), Some(true));
    // ...but not both.
    h.push(read_full(6.0, 7.0, "a", 3, 2, &[]));
    h.push(read_full(8.0, 9.0, "a", 1, 2, &[]));
    assert_eq!(lin(h), Some(false));
    // INVALID_PARTITIONS says the count was already at least the total.
    let h = vec![
        create_full(0.0, 1.0, "a", 1, 2),
        refused(
            add_partitions(2.0, 3.0, 2, Outcome::Ok),
            "INVALID_PARTITIONS",
        ),
    ];
    assert_eq!(lin(h), Some(false));
}

#[test]
fn a_lost_config_change_is_caught() {
    let set = vec![
        create_full(0.0, 1.0, "a", 1, 2),
        alter(2.0, 3.0, "retention.ms", Some("60000"), Outcome::Ok),
    ];
    let mut h = set.clone();
    h.push(read_full(4.0, 5.0, "a", 1, 2, &[]));
    assert_eq!(lin(h), Some(false));
    // A lost removal.
    let mut h = set.clone();
    h.push(alter(4.0, 5.0, "retention.ms", None, Outcome::Ok));
    h.push(read_full(6.0, 7.0, "a", 1, 2, &[("retention.ms", "60000")]));
    assert_eq!(lin(h), Some(false));
    // A lost overwrite.
    let mut h = set.clone();
    h.push(alter(4.0, 5.0, "retention.ms", Some("-1"), Outcome::Ok));
    h.push(read_full(6.0, 7.0, "a", 1, 2, &[("retention.ms", "60000")]));
    assert_eq!(lin(h), Some(false));
    let mut h = set;
    h.push(read_full(4.0, 5.0, "a", 1, 2, &[("retention.ms", "60000")]));
    assert_eq!(lin(h), Some(true));
}

#[test]
fn a_phantom_config_is_caught() {
    let phantom = vec![
        create_full(0.0, 1.0, "a", 1, 2),
        read_full(2.0, 3.0, "a", 1, 2, &[("cleanup.policy", "compact")]),
    ];
    assert_eq!(lin(phantom), Some(false));
    // A refused change wrote nothing.
    let refused_change = vec![
        create_full(0.0, 1.0, "a", 1, 2),
        refused(
            alter(2.0, 3.0, "cleanup.policy", Some("compact"), Outcome::Ok),
            "INVALID_CONFIG",
        ),
        read_full(4.0, 5.0, "a", 1, 2, &[("cleanup.policy", "compact")]),
    ];
    assert_eq!(lin(refused_change), Some(false));
    // A change to a previous incarnation does not carry over.
    let carried = vec![
        create_full(0.0, 1.0, "a", 1, 2),
        alter(2.0, 3.0, "cleanup.policy", Some("compact"), Outcome::Ok),
        delete_ok(4.0, 5.0),
        read(6.0, 7.0, Seen::Absent),
        create_full(8.0, 9.0, "b", 1, 2),
        read_full(10.0, 11.0, "b", 1, 2, &[("cleanup.policy", "compact")]),
    ];
    assert_eq!(lin(carried), Some(false));
    // An indeterminate change may show.
    let maybe = vec![
        create_full(0.0, 1.0, "a", 1, 2),
        alter(2.0, 3.0, "cleanup.policy", Some("compact"), Outcome::Info),
        read_full(4.0, 5.0, "a", 1, 2, &[("cleanup.policy", "compact")]),
    ];
    assert_eq!(lin(maybe), Some(true));
}

#[test]
fn a_wrong_replication_factor_is_caught() {
    let h = vec![
        create_full(0.0, 1.0, "a", 1, 2),
        read_full(2.0, 3.0, "a", 1, 1, &[]),
    ];
    assert_eq!(lin(h), Some(false));
    // Partitions that disagree are recorded as 0.
    let h = vec![
        create_full(0.0, 1.0, "a", 2, 2),
        read_full(2.0, 3.0, "a", 2, 0, &[]),
    ];
    assert_eq!(lin(h), Some(false));
    let h = vec![
        create_full(0.0, 1.0, "a", 2, 2),
        op("t", OpKind::Reassign, 1.5, 2.5, Outcome::Ok),
        read_full(3.0, 4.0, "a", 2, 2, &[]),
    ];
    assert_eq!(lin(h), Some(true));
}

#[test]
fn an_indeterminate_create_cannot_explain_an_acknowledged_incarnations_id() {
    let base = || {
        vec![
            create_full(0.0, 1.0, "a", 1, 2),
            delete_ok(2.0, 3.0),
            read(4.0, 5.0, Seen::Absent),
            op("t", OpKind::Create, 6.0, 7.0, Outcome::Info),
        ]
    };
    let mut h = base();
    h.push(read_full(8.0, 9.0, "z", 1, 2, &[]));
    assert_eq!(lin(h), Some(true));
    let mut h = base();
    h.push(read_full(8.0, 9.0, "a", 1, 2, &[]));
    assert_eq!(lin(h), Some(false));
    // Once seen, the unknown id is fixed.
    let mut h = base();
    h.push(read_full(8.0, 9.0, "z", 1, 2, &[]));
    h.push(read_full(10.0, 11.0, "y", 1, 2, &[]));
    assert_eq!(lin(h), Some(false));
}

#[test]
fn write_verdicts_come_from_codes_not_messages() {
    let mut a = refused(add_partitions(2.0, 3.0, 3, Outcome::Ok), "INVALID_REQUEST");
    a.message = Some("topic is being deleted".into());
    let h = vec![
        create_full(0.0, 1.0, "a", 1, 2),
        a,
        read_full(4.0, 5.0, "a", 1, 2, &[]),
    ];
    assert_eq!(lin(h), Some(true));
    // TOPIC_DELETION_IN_PROGRESS on a topic nobody deleted.
    let h = vec![
        create_full(0.0, 1.0, "a", 1, 2),
        refused(
            alter(2.0, 3.0, "retention.ms", None, Outcome::Ok),
            "TOPIC_DELETION_IN_PROGRESS",
        ),
    ];
    assert_eq!(lin(h), Some(false));
}

#[test]
fn old_histories_without_the_new_fields_still_read() {
    let line = r#"{"index":0,"client":0,"process":0,"op":"create","name":"t","invoke_ms":0.0,"complete_ms":1.0,"outcome":"ok","topic_id":"a","partitions":1,"attempts":1}"#;
    let o: OpRecord = serde_json::from_str(line).unwrap();
    assert_eq!(o.replication_factor, None);
    assert_eq!(o.configs, None);
    let r = read_id(2.0, 3.0, "a", 1);
    assert_eq!(lin(vec![o, r]), Some(true));
    let _ = Read::only(Seen::Absent);
}

// ---- reassignments land --------------------------------------------------------

fn reassign_op(index: usize, t0: f64, t1: f64, outcome: Outcome, replicas: &[u32]) -> OpRecord {
    let mut o = op("t", OpKind::Reassign, t0, t1, outcome);
    o.index = index;
    o.partition = Some(0);
    o.replicas = Some(replicas.to_vec());
    o
}

fn placed(replicas: &[u32]) -> Placement {
    Placement {
        replicas: BTreeMap::from([(("t".to_string(), 0), replicas.to_vec())]),
        in_flight: vec![],
    }
}

#[test]
fn an_acknowledged_reassignment_that_did_not_land_is_caught() {
    let ops = vec![
        create_ok(0.0, 1.0),
        reassign_op(1, 2.0, 3.0, Outcome::Ok, &[2, 3]),
    ];
    let (valid, detail) = reassign::check(&ops, &placed(&[2, 3]));
    assert!(valid, "{detail}");
    assert_eq!(detail["acknowledged_reassignments_judged"], 1);

    // The final replicas are not the acknowledged ones.
    let (valid, detail) = reassign::check(&ops, &placed(&[1, 2]));
    assert!(!valid, "{detail}");
    assert_eq!(
        detail["violations"][0]["final_replicas"],
        serde_json::json!([1, 2])
    );

    // Still in flight after the heal.
    let mut p = placed(&[2, 3]);
    p.in_flight.push("t-0".into());
    assert!(!reassign::check(&ops, &p).0);
}

#[test]
fn a_reassignment_followed_by_another_or_by_a_new_incarnation_is_not_judged() {
    // A later reassignment with an unknown outcome may have moved it on.
    let ops = vec![
        create_ok(0.0, 1.0),
        reassign_op(1, 2.0, 3.0, Outcome::Ok, &[2, 3]),
        reassign_op(2, 4.0, 5.0, Outcome::Info, &[1, 3]),
    ];
    let (valid, detail) = reassign::check(&ops, &placed(&[1, 3]));
    assert!(valid, "{detail}");
    assert_eq!(detail["left_unjudged"], 1);
    // A refused later one changes nothing: it is still judged.
    let ops = vec![
        create_ok(0.0, 1.0),
        reassign_op(1, 2.0, 3.0, Outcome::Ok, &[2, 3]),
        reassign_op(2, 4.0, 5.0, Outcome::Fail, &[1, 3]),
    ];
    let (valid, detail) = reassign::check(&ops, &placed(&[1, 3]));
    assert!(!valid, "{detail}");
    // An earlier one that ended before it was sent is no reason either.
    let ops = vec![
        create_ok(0.0, 1.0),
        reassign_op(1, 2.0, 3.0, Outcome::Ok, &[1, 2]),
        reassign_op(2, 4.0, 5.0, Outcome::Ok, &[2, 3]),
    ];
    let (valid, detail) = reassign::check(&ops, &placed(&[1, 2]));
    assert!(!valid, "the last one (2,3) must have landed: {detail}");
    // The topic deleted and created again after it: a new incarnation.
    let ops = vec![
        create_ok(0.0, 1.0),
        reassign_op(1, 2.0, 3.0, Outcome::Ok, &[2, 3]),
        delete_ok(4.0, 5.0),
        create_ok(6.0, 7.0),
    ];
    let (valid, detail) = reassign::check(&ops, &placed(&[1, 2]));
    assert!(valid, "{detail}");
    assert_eq!(detail["acknowledged_reassignments_judged"], 0);
}
