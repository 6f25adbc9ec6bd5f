//! Big decisions never starve the lease: 100,000-partition operations
//! (create, broker fence, reassignment, preferred election, delete) commit
//! one after another on real `keel controller` processes while a CPU hog
//! runs on every core (Debian's `stress-ng`) and every `fdatasync` and
//! `fsync` of the controllers takes 5 ms longer (injected by `strace`).
//! The Raft term, which every election raises, must not move: zero
//! leadership changes over 21 operations.
//!
//! The test checks its faults are in place (the hog runs to the end, and
//! each controller's strace log shows delayed syncs), so it cannot pass
//! without them. CI installs both tools.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use keel_proto::client::ControllerClient;
use keel_proto::pb;

const PARTITIONS: u32 = 100_000;
/// Rounds of a reassignment and a preferred election, after a create and
/// a fence and before a delete: 21 operations of 100,000 partitions.
const ROUNDS: usize = 9;
/// The injected delay of every sync, in microseconds.
const SYNC_DELAY_US: u32 = 5_000;
/// Longest one operation may take on a loaded 2-core machine.
const OP_TIMEOUT: Duration = Duration::from_secs(300);

fn tool(name: &str) -> PathBuf {
    for dir in ["/usr/bin", "/bin", "/usr/local/bin"] {
        let p = Path::new(dir).join(name);
        if p.exists() {
            return p;
        }
    }
    panic!("this test needs `{name}` (Debian package {name}; CI installs it)");
}

/// A CPU hog on every core: stress-ng in a process group of its own, so
/// the kit's kill (also on drop) takes its workers too.
fn hog(dir: &Path) -> Process {
    let mut p = Process::new(
        "stress-ng",
        keel_testkit::process::Launch {
            exe: tool("stress-ng"),
            args: [
                "--cpu",
                "0",
                "--cpu-method",
                "matrixprod",
                "--timeout",
                "3600s",
            ]
            .map(String::from)
            .to_vec(),
            rust_log: None,
            env: Vec::new(),
            own_process_group: true,
        },
        dir.join("stress-ng.log"),
    );
    p.start().expect("start stress-ng");
    p
}

/// Runs every controller under strace, delaying each fdatasync/fsync on
/// exit; strace's record of them goes to `<cluster dir>/c<i>.strace`.
fn slow_syncs(c: &mut Cluster) -> Vec<PathBuf> {
    let strace = tool("strace");
    let dir = c.dir().to_path_buf();
    let mut logs = Vec::new();
    for i in 0..c.controller_count() {
        let log = dir.join(format!("c{}.strace", i + 1));
        let launch = &mut c.controller_mut(i).process.launch;
        let mut args = vec![
            "-f".to_string(),
            "-qq".into(),
            "-o".into(),
            log.display().to_string(),
            "-e".into(),
            "trace=fdatasync,fsync".into(),
            "-e".into(),
            format!("inject=fdatasync,fsync:delay_exit={SYNC_DELAY_US}"),
            "--".into(),
            launch.exe.display().to_string(),
        ];
        args.append(&mut launch.args);
        launch.exe = strace.clone();
        launch.args = args;
        // SIGKILL reaches strace and the node alike.
        launch.own_process_group = true;
        logs.push(log);
    }
    logs
}

/// How many syncs strace delayed, per its log.
fn delayed_syncs(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("DELAYED"))
        .count()
}

/// The highest Raft term of the three controllers, once every one of them
/// has answered (a node that raised its term must not go unseen).
async fn term(c: &Cluster) -> u64 {
    for _ in 0..100 {
        let mut terms = Vec::new();
        for i in 0..c.controller_count() {
            if let Some(d) = c.describe_node(i, Duration::from_secs(10)).await {
                terms.push(d.term);
            }
        }
        if terms.len() == c.controller_count() {
            return terms.into_iter().max().unwrap_or(0);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("not every controller reports its term\n{}", c.log_tails(20));
}

fn refs(topic: &str) -> Vec<pb::TopicPartitionRef> {
    (0..PARTITIONS)
        .map(|partition| pb::TopicPartitionRef {
            topic: topic.to_string(),
            partition,
        })
        .collect()
}

async fn heartbeat(client: &ControllerClient, id: u32, epoch: u64, want_fence: bool) -> bool {
    let hb = pb::BrokerHeartbeatRequest {
        broker_id: id,
        broker_epoch: epoch,
        current_metadata_offset: u64::MAX / 2,
        want_fence,
        ..Default::default()
    };
    let r = client
        .broker(|mut b| {
            let hb = hb.clone();
            async move { b.broker_heartbeat(hb).await }
        })
        .await
        .expect("heartbeat answered");
    assert!(r.error.is_none(), "heartbeat refused: {:?}", r.error);
    r.is_fenced
}

/// Runs `op` (one 100,000-partition decision) and checks the term did not
/// move; returns the seconds it took.
async fn op<F, Fut>(c: &Cluster, term0: u64, name: &str, f: F) -> f64
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let t = Instant::now();
    tokio::time::timeout(OP_TIMEOUT, f())
        .await
        .unwrap_or_else(|_| panic!("{name} took over {OP_TIMEOUT:?}\n{}", c.log_tails(20)));
    let secs = t.elapsed().as_secs_f64();
    let now = term(c).await;
    assert_eq!(
        now,
        term0,
        "{name}: the Raft term moved from {term0} to {now}: a leadership change while a big decision committed\n{}",
        c.log_tails(30)
    );
    eprintln!("{name}: {secs:.1} s, term {now}");
    secs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_decisions_under_cpu_and_sync_pressure_change_no_leader() {
    let mut c = Cluster::new(
        Spec::new(keel_bin(), CLUSTER_ID)
            .controller_flags(&["--session-timeout-ms", "600000"])
            .metrics(true),
    )
    .expect("lay out three controllers");
    let strace_logs = slow_syncs(&mut c);
    c.start_controllers().expect("start the controllers");
    let active = c
        .wait_active(Duration::from_secs(120))
        .await
        .expect("an active controller");
    // One attempt may take as long as the whole operation: the admin
    // helpers retry a request that timed out, and a retried create of a
    // topic whose first attempt committed late (a loaded host) would be
    // answered TOPIC_ALREADY_EXISTS.
    let client = c.client(OP_TIMEOUT, OP_TIMEOUT);
    let mut epochs = Vec::new();
    for id in 1..=3 {
        epochs.push(register_fake_broker(&client, CLUSTER_ID, id).await);
    }
    c.wait_converged(0, Duration::from_secs(60))
        .await
        .expect("converged");

    let mut hog = hog(c.dir());
    // Let the hog take the cores before the first term is read.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let term0 = term(&c).await;
    let topic = "big".to_string();
    let mut ops = 0usize;
    let mut secs = Vec::new();

    // Create: every partition on [1, 2, 3], broker 1 leading.
    secs.push(
        op(&c, term0, "create", || async {
            let req = admin::create_topics_request(vec![admin::creatable_on(
                &topic,
                PARTITIONS,
                &[1, 2, 3],
            )]);
            let r = admin::create_topics(&client, &req)
                .await
                .unwrap_or_else(|e| panic!("create: {e:#}\n{}", c.log_tails(40)));
            assert!(
                r.topics.iter().all(|t| t.error.is_none()),
                "create refused: {:?}",
                r.topics.iter().map(|t| &t.error).collect::<Vec<_>>()
            );
        })
        .await,
    );
    ops += 1;

    // Fence broker 1: every partition loses its leader and an ISR member
    // in one decision.
    secs.push(
        op(&c, term0, "fence broker 1", || async {
            assert!(
                heartbeat(&client, 1, epochs[0], true).await,
                "broker 1 not fenced"
            );
        })
        .await,
    );
    ops += 1;

    // Reassignments that reorder the in-sync replicas (complete at once,
    // every partition changes) and preferred elections that follow them:
    // leadership moves between brokers 3 and 2, 100,000 partitions each time.
    for round in 0..ROUNDS {
        let order = if round % 2 == 0 { [3, 2] } else { [2, 3] };
        secs.push(
            op(
                &c,
                term0,
                &format!("round {round}: reassign to {order:?}"),
                || async {
                    let req = pb::AlterPartitionReassignmentsRequest {
                        partitions: (0..PARTITIONS)
                            .map(|partition| pb::ReassignablePartition {
                                topic: topic.clone(),
                                partition,
                                replicas: order.to_vec(),
                                cancel: false,
                            })
                            .collect(),
                    };
                    let r = client
                        .admin(|mut a| {
                            let req = req.clone();
                            async move { a.alter_partition_reassignments(req).await }
                        })
                        .await
                        .expect("reassignment answered");
                    assert!(r.error.is_none(), "reassignment refused: {:?}", r.error);
                    let failed = r.partitions.iter().filter(|p| p.error.is_some()).count();
                    assert_eq!(
                        failed,
                        0,
                        "{failed} partitions refused: {:?}",
                        r.partitions.first()
                    );
                },
            )
            .await,
        );
        ops += 1;
        secs.push(
            op(
                &c,
                term0,
                &format!("round {round}: preferred election"),
                || async {
                    let req = pb::ElectLeadersRequest {
                        election_type: pb::ElectionType::Preferred as i32,
                        partitions: refs(&topic),
                    };
                    let r = client
                        .admin(|mut a| {
                            let req = req.clone();
                            async move { a.elect_leaders(req).await }
                        })
                        .await
                        .expect("election answered");
                    assert!(r.error.is_none(), "election refused: {:?}", r.error);
                    let failed = r.partitions.iter().filter(|p| p.error.is_some()).count();
                    assert_eq!(
                        failed,
                        0,
                        "{failed} elections failed: {:?}",
                        r.partitions.first()
                    );
                    let led = r
                        .partitions
                        .iter()
                        .filter(|p| p.leader == Some(order[0]))
                        .count();
                    assert_eq!(
                        led, PARTITIONS as usize,
                        "broker {} leads only {led}",
                        order[0]
                    );
                },
            )
            .await,
        );
        ops += 1;
    }

    // Delete: one decision takes all 100,000 partitions offline and marks
    // the topic (its replicas are then deleted broker by broker, which
    // stand-in brokers never answer, so the topic stays marked).
    secs.push(
        op(&c, term0, "delete", || async {
            let req = pb::DeleteTopicsRequest {
                names: vec![topic.clone()],
            };
            let r = client
                .admin(|mut a| {
                    let req = req.clone();
                    async move { a.delete_topics(req).await }
                })
                .await
                .expect("delete answered");
            assert!(r.error.is_none(), "delete refused: {:?}", r.error);
            assert!(r.topics.iter().all(|t| t.error.is_none()), "{:?}", r.topics);
        })
        .await,
    );
    ops += 1;

    assert!(ops >= 20, "only {ops} operations ran");
    assert!(
        hog.running(),
        "the CPU hog stopped before the end of the run"
    );
    hog.kill();
    assert_eq!(
        c.wait_active(Duration::from_secs(30))
            .await
            .expect("active"),
        active,
        "the active controller changed"
    );
    assert_eq!(term(&c).await, term0);
    // The slowest lease answer the leader saw (a figure, not a bound: the
    // term above is what this test asserts).
    let slowest = match c.controller(active).metrics_addr {
        Some(addr) => keel_testkit::probe::scrape_metrics(addr)
            .await
            .and_then(|text| {
                text.lines()
                    .find(|l| l.starts_with(keel_raft::lease::LEASE_ANSWER_MAX_SECONDS))
                    .and_then(|l| l.split_whitespace().last())
                    .and_then(|v| v.parse::<f64>().ok())
            }),
        None => None,
    };
    eprintln!(
        "slowest lease answer: {} of a {} ms lease",
        slowest.map_or("not reported".into(), |s| format!("{:.0} ms", s * 1e3)),
        keel_raft::default_config(CLUSTER_ID).election_timeout_max
    );
    for log in &strace_logs {
        let n = delayed_syncs(log);
        assert!(
            n > 0,
            "{} shows no delayed sync: the fault was not in place",
            log.display()
        );
        eprintln!("{}: {n} delayed syncs", log.display());
    }
    eprintln!(
        "{ops} operations of {PARTITIONS} partitions, term {term0} throughout; seconds per op: {:?}",
        secs.iter().map(|s| (s * 10.0).round() / 10.0).collect::<Vec<_>>()
    );
}
