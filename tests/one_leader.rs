//! One leader at a time, on real `keel controller` processes: a healed
//! partition costs the cluster nothing (pre-vote), an isolated leader
//! knows it is deposed (lease, check-quorum), and a restarted voter keeps
//! the lease it may have promised.
//!
//! The partition tests cut links between the controllers' own loopback
//! addresses with iptables (root; CI installs it). Where iptables cannot
//! work they fail, saying why: they never pass without having cut.

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use common::*;
use keel_proto::client::ControllerClient;
use keel_testkit::netfilter::{self, Net};
use keel_testkit::Addressing;

const LONG: Duration = Duration::from_secs(60);

/// Long broker sessions (stand-in brokers heartbeat once) and quiet logs.
const FLAGS: &[&str] = &["--session-timeout-ms", "600000"];

/// The default `election_timeout_max_ms`: the lease a follower grants.
const ELECTION_TIMEOUT_MAX: Duration = Duration::from_millis(450);

/// The kernel's packet filter, or a failure naming why it cannot work here.
fn net() -> Net {
    if let Some(why) = netfilter::unavailable_reason() {
        panic!("this test cuts links with iptables and cannot run here: {why}");
    }
    Net::for_this_process().expect("install this process's iptables chain")
}

fn v4(ip: IpAddr) -> Ipv4Addr {
    match ip {
        IpAddr::V4(v4) => v4,
        IpAddr::V6(_) => panic!("subnet layouts are IPv4"),
    }
}

/// Three controllers on `127.0.<net>.11-13`, started.
fn subnet_quorum(net: u8, flags: &[&str]) -> Cluster {
    Cluster::start(
        Spec::new(keel_bin(), CLUSTER_ID)
            .addressing(Addressing::Subnet {
                net,
                ports: keel_testkit::Ports::Free,
            })
            .controller_flags(flags),
    )
    .expect("start three controllers")
}

/// (active, term, last log index) as controller `i` describes itself.
async fn view(q: &Cluster, i: usize) -> Option<(bool, u64, Option<u64>)> {
    q.describe_node(i, Duration::from_millis(500))
        .await
        .map(|d| (d.active_controller, d.term, d.last_log_index))
}

/// Isolates the active controller from both peers for 5 s and heals,
/// again and again (10 rounds, each isolating whoever is active then). The majority elects a leader once
/// per round, during the cut; after each heal that leader stays leader in
/// the same term on every node (no extra election: the returning node's
/// pre-votes are refused). The isolated one says it is inactive within
/// `election_timeout_max` of the cut and appends nothing to its log while
/// cut off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healed_partition_never_deposes_the_leader_the_majority_elected() {
    const ROUNDS: usize = 10;
    let mut filter = net();
    let mut q = subnet_quorum(71, FLAGS);
    let client = client(&q);
    q.wait_active(LONG).await.unwrap();
    register_fake_broker(&client, &q.cluster_id, 1).await;
    let ips: Vec<Ipv4Addr> = q.controllers().map(|n| v4(n.ip())).collect();
    let mut failovers = Vec::new();
    let mut inactive_after = Vec::new();
    for round in 0..ROUNDS {
        let old = q.wait_active(LONG).await.unwrap();
        let (_, old_term, _) = view(&q, old).await.expect("the active controller answers");
        let peers: Vec<usize> = (0..3).filter(|i| *i != old).collect();
        let cut = Instant::now();
        filter
            .cut(
                &peers
                    .iter()
                    .map(|p| (ips[old], ips[*p]))
                    .collect::<Vec<_>>(),
            )
            .unwrap();

        // The isolated leader says it is inactive within the lease and
        // appends nothing from then on.
        let mut quiet_log = None;
        while quiet_log.is_none() {
            if let Some((false, _, last)) = view(&q, old).await {
                inactive_after.push(cut.elapsed());
                quiet_log = Some(last);
            }
            assert!(
                cut.elapsed() < Duration::from_secs(5),
                "round {round}: the isolated leader still says it is active\n{}",
                q.log_tails(30)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The majority elects one of its own.
        let new = loop {
            let mut found = None;
            for p in &peers {
                if let Some((true, term, _)) = view(&q, *p).await {
                    found = Some((*p, term));
                }
            }
            if let Some(f) = found {
                break f;
            }
            assert!(
                cut.elapsed() < Duration::from_secs(5),
                "round {round}: the majority elected no active controller within 5 s\n{}",
                q.log_tails(30)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        failovers.push(cut.elapsed());
        let (new, new_term) = new;
        assert!(new_term > old_term);
        tokio::time::sleep(Duration::from_secs(5).saturating_sub(cut.elapsed())).await;
        let (active, _, last) = view(&q, old).await.expect("the isolated node answers");
        assert!(
            !active,
            "round {round}: the isolated node says it is active"
        );
        assert_eq!(
            last,
            quiet_log.unwrap(),
            "round {round}: the isolated leader appended to its log while cut off"
        );

        filter.heal().unwrap();
        // Long enough for the returning node to time out several times.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        // The returning node learns the new term from the leader's next
        // AppendEntries, which may wait for one sent into the cut to time
        // out (2 s): wait (bounded) until every node is at least in the
        // majority's term, then check that nobody went past it.
        let caught_up = Instant::now();
        loop {
            let mut behind = Vec::new();
            for i in 0..3 {
                match view(&q, i).await {
                    Some((_, term, _)) if term >= new_term => {}
                    other => behind.push((i + 1, other.map(|(_, t, _)| t))),
                }
            }
            if behind.is_empty() {
                break;
            }
            assert!(
                caught_up.elapsed() < Duration::from_secs(5),
                "round {round}: nodes still behind the majority's term {new_term}: {behind:?}\n{}",
                q.log_tails(30)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for i in 0..3 {
            let (active, term, _) = view(&q, i)
                .await
                .unwrap_or_else(|| panic!("round {round}: node {} does not answer", i + 1));
            assert_eq!(
                term,
                new_term,
                "round {round}: node {} is in term {term}, not the majority's {new_term}: an election after the heal\n{}",
                i + 1,
                q.log_tails(30)
            );
            assert_eq!(
                active,
                i == new,
                "round {round}: node {} active: {active}",
                i + 1
            );
        }
    }
    eprintln!(
        "isolated leader inactive after {:?}; majority's new active controller after {:?}",
        inactive_after, failovers
    );
    for d in &inactive_after {
        // Within the lease, give or take one poll and a loaded machine.
        assert!(
            *d < ELECTION_TIMEOUT_MAX + Duration::from_millis(150),
            "the isolated leader said it was inactive only after {d:?}"
        );
    }
    create_topic(&client, "after-the-partitions", 1, 1).await;
}

/// A follower restarted on its data dir answers no vote and no pre-vote
/// for `election_timeout_max` after it starts (here 3 s, so the test has
/// time to ask): it may have promised the leader a lease before it went
/// down. The refusal is a Raft answer naming its own vote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_follower_refuses_to_vote_inside_the_lease_window() {
    use keel_raft::prevote::{PreVoteRefusal, PreVoteRequest};
    use keel_raft::KeelNode;
    use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
    use openraft::raft::VoteRequest;
    use openraft::Vote;

    let flags = [
        FLAGS,
        &[
            "--election-timeout-min-ms",
            "1500",
            "--election-timeout-max-ms",
            "3000",
        ],
    ]
    .concat();
    let mut q = subnet_quorum(72, &flags);
    let client = client(&q);
    let leader = q.wait_active(LONG).await.unwrap();
    register_fake_broker(&client, &q.cluster_id, 1).await;
    let f = (0..3).find(|i| *i != leader).unwrap();
    let (_, term, _) = view(&q, leader).await.unwrap();

    q.controller_mut(f).kill();
    q.controller_mut(f).start().unwrap();
    let addr = q.controller(f).address();
    let id = f as u64 + 1;
    // Its window starts when it serves; ask as soon as it does.
    let deadline = Instant::now() + LONG;
    while view(&q, f).await.is_none() {
        assert!(
            Instant::now() < deadline,
            "the restarted node never answered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let asked = Instant::now();
    let ahead = Some(openraft::LogId::new(
        openraft::CommittedLeaderId::new(term + 10, 0),
        1_000_000,
    ));
    // Asked as the third voter (a non-voter is refused before its request
    // is weighed), with that voter's own data dir.
    let third = (0..3).find(|i| *i != leader && *i != f).unwrap();
    let candidate = third as u64 + 1;
    let third_dir: keel_raft::DirectoryId = q
        .describe_node(third, Duration::from_secs(5))
        .await
        .expect("the third voter answers")
        .directory_id
        .parse()
        .expect("a directory id");
    let network =
        keel_raft::Network::new(q.cluster_id.clone(), candidate).with_directory(third_dir);
    let r = network
        .pre_vote(
            id,
            &KeelNode::new(addr.as_str()),
            &PreVoteRequest {
                candidate,
                term: term + 11,
                last_log_id: ahead,
            },
            Duration::from_secs(2),
        )
        .await
        .expect("the restarted node answers a pre-vote");
    assert!(
        matches!(r.refusal, Some(PreVoteRefusal::JustRestarted { .. })),
        "{r:?}"
    );
    let mut network = network;
    let mut peer = network.new_client(id, &KeelNode::new(&addr)).await;
    let resp = peer
        .vote(
            VoteRequest::new(Vote::new(term + 10, candidate), ahead),
            RPCOption::new(Duration::from_secs(2)),
        )
        .await
        .expect("the restarted node answers a vote");
    assert!(
        asked.elapsed() < Duration::from_millis(2500),
        "too slow to be inside the 3 s window"
    );
    assert!(!resp.vote_granted, "{resp:?}");
    assert!(resp.vote.leader_id().get_term() < term + 10, "{resp:?}");
    let log = q.controller(f).process.log_text();
    assert!(
        log.contains("vote refused: this node restarted less than election_timeout_max ago"),
        "{log}"
    );
    // Its term did not move, and the quorum kept its leader.
    let (_, after, _) = view(&q, f).await.unwrap();
    assert!(after < term + 10);
    assert!(view(&q, leader).await.unwrap().0, "the leader was deposed");
    create_topic(&client, "after-the-restart", 1, 1).await;
}

/// `keel quorum describe --output json` against every controller.
fn quorum_json(q: &Cluster) -> Option<serde_json::Value> {
    let out = std::process::Command::new(keel_bin())
        .args([
            "quorum",
            "describe",
            "--output",
            "json",
            "--bootstrap",
            &q.controller_addrs().join(","),
        ])
        .output()
        .expect("run keel");
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).expect("quorum describe prints JSON"))
}

/// Each voter's directory id as `keel quorum describe` shows it, once
/// `pred` holds for that map.
async fn wait_directories(
    q: &Cluster,
    what: &str,
    pred: impl Fn(&std::collections::BTreeMap<u64, Option<String>>) -> bool,
) -> std::collections::BTreeMap<u64, Option<String>> {
    let deadline = Instant::now() + LONG;
    loop {
        if let Some(v) = quorum_json(q) {
            let dirs: std::collections::BTreeMap<u64, Option<String>> = v["voters"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|x| x["status"] != "learner")
                .map(|x| {
                    (
                        x["id"].as_u64().unwrap(),
                        x["directory_id"].as_str().map(str::to_string),
                    )
                })
                .collect();
            if pred(&dirs) {
                return dirs;
            }
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for: {what}\n{}",
            q.log_tails(30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Three controllers on `127.0.<net>.11-13` with a stand-in broker, once
/// the active controller has bound every voter's directory id: the
/// cluster, a client, the active controller and the bound ids.
async fn bound_quorum(
    net: u8,
) -> (
    Cluster,
    ControllerClient,
    usize,
    std::collections::BTreeMap<u64, Option<String>>,
) {
    let mut q = subnet_quorum(net, FLAGS);
    let client = client(&q);
    let a = q.wait_active(LONG).await.unwrap();
    register_fake_broker(&client, &q.cluster_id, 1).await;
    let bound = wait_directories(&q, "every voter's directory id bound", |d| {
        d.len() == 3 && d.values().all(Option::is_some)
    })
    .await;
    (q, client, a, bound)
}

/// `keel quorum add-voter` of controller `i` with dir `dir`, asking the
/// controllers at `bootstrap`.
fn add_voter_command(q: &Cluster, i: usize, dir: &str, bootstrap: &str) -> std::process::Output {
    std::process::Command::new(keel_bin())
        .args([
            "quorum",
            "add-voter",
            "--node-id",
            &(i + 1).to_string(),
            "--address",
            &q.controller(i).address(),
            "--directory-id",
            dir,
            "--bootstrap",
            bootstrap,
        ])
        .output()
        .expect("run keel")
}

/// Controller `i`'s data dir wiped under it and the node started again on
/// the empty dir (it finds the formed quorum and waits to be replicated
/// to): returns the new dir's directory id.
async fn wipe(q: &mut Cluster, i: usize) -> String {
    q.controller_mut(i).kill();
    std::fs::remove_dir_all(&q.controller(i).data_dir).unwrap();
    let starts = q
        .controller(i)
        .process
        .log_text()
        .matches("=== start #")
        .count();
    q.controller_mut(i).start().unwrap();
    let deadline = Instant::now() + LONG;
    loop {
        let log = q.controller(i).process.log_text();
        let this_start = log.rsplit("=== start #").next().unwrap_or_default();
        if log.matches("=== start #").count() > starts
            && this_start.contains("waiting for its leader instead of initializing")
        {
            break;
        }
        assert!(Instant::now() < deadline, "{}", q.log_tails(30));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    loop {
        // A loaded machine may keep the restarted node from answering at
        // once; it must answer within the deadline.
        if let Some(d) = q.describe_node(i, Duration::from_secs(2)).await {
            break d.directory_id;
        }
        assert!(
            Instant::now() < deadline,
            "the restarted node does not answer DescribeNode\n{}",
            q.log_tails(30)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `keel quorum add-voter --directory-id` re-admits controller `i` with
/// its new dir `dir`; waits until it is a voter with it. Returns every
/// voter's directory id.
async fn readmit(
    q: &Cluster,
    i: usize,
    dir: &str,
) -> std::collections::BTreeMap<u64, Option<String>> {
    let out = add_voter_command(q, i, dir, &q.controller_addrs().join(","));
    assert!(
        out.status.success(),
        "add-voter: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        q.log_tails(30)
    );
    wait_directories(
        q,
        &format!("node {} re-admitted with its new dir", i + 1),
        |d| d.get(&(i as u64 + 1)) == Some(&Some(dir.to_string())) && d.len() == 3,
    )
    .await
}

/// A follower's data dir wiped under it: the quorum had bound its
/// directory id, so the empty dir that restarts in its place is refused as
/// a voter by every peer and refuses their requests, saying why. With the
/// other follower lagging behind entries that only the leader and the
/// wiped follower held, and the leader killed, no leader is elected (the
/// lagging one would need the wiped one's vote, and would lose the
/// entries); once the old leader is back, every acknowledged write is
/// there. `keel quorum add-voter --directory-id` re-admits the new dir, as
/// a learner first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_follower_neither_votes_nor_loses_a_committed_entry_and_rejoins_after_add_voter() {
    let (mut q, client, a, bound) = bound_quorum(73).await;
    // Each bound id is the one the node says is its own.
    for i in 0..3 {
        let own = q
            .describe_node(i, Duration::from_secs(2))
            .await
            .unwrap()
            .directory_id;
        assert_eq!(Some(own), bound[&(i as u64 + 1)].clone());
    }
    let (b, c) = {
        let f: Vec<usize> = (0..3).filter(|i| *i != a).collect();
        (f[0], f[1])
    };

    // Follower b lags: these writes commit on a and c only.
    q.controller_mut(b).process.pause();
    let acked = create_numbered_topics(&client, "held-by-a-and-c", 5, 1, 1).await;

    // c's dir is wiped and c restarts on the empty dir (it finds the formed
    // quorum and waits to be replicated to); then a dies and b resumes.
    let new_dir = wipe(&mut q, c).await;
    let old_dir = bound[&(c as u64 + 1)].clone().unwrap();
    assert_ne!(new_dir, old_dir);
    q.controller_mut(a).kill();
    q.controller_mut(b).process.resume();

    // Nobody leads: b cannot get c's vote.
    let quiet = Instant::now();
    while quiet.elapsed() < Duration::from_secs(4) {
        for i in [b, c] {
            if let Some(d) = q.describe_node(i, Duration::from_millis(500)).await {
                assert!(
                    !d.active_controller,
                    "node {} became active without the lost entries\n{}",
                    i + 1,
                    q.log_tails(30)
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = q.controller(c).process.log_text();
    let remedy = format!(
        "keel quorum add-voter --node-id {} --address {} --directory-id {new_dir}",
        c + 1,
        q.controller(c).address()
    );
    assert!(
        log.contains("refusing a Raft request")
            && log.contains(&old_dir)
            && log.contains(&new_dir)
            && log.contains(&remedy),
        "the wiped node's log does not say why it refuses, with both ids and the remedy:\n{log}"
    );

    // The old leader returns: every acknowledged write is there.
    q.controller_mut(a).start().unwrap();
    q.wait_active(LONG).await.unwrap();
    let names = topic_names(&client).await;
    for n in &acked {
        assert!(names.contains(n), "acknowledged topic {n} lost");
    }

    // Re-admitted with its new dir, c catches up and votes again.
    let dirs = readmit(&q, c, &new_dir).await;
    assert_eq!(dirs[&(a as u64 + 1)], bound[&(a as u64 + 1)]);
    q.wait_converged(1, LONG).await.unwrap();
    create_topic(&client, "after-the-rejoin", 1, 1).await;
    let names = topic_names(&client).await;
    for n in acked
        .iter()
        .chain(std::iter::once(&"after-the-rejoin".to_string()))
    {
        assert!(names.contains(n), "topic {n} missing");
    }
}

/// Two re-admissions in a row: node x is re-admitted with a new dir and
/// then leads; node y is wiped next and must catch up from x. y replays
/// the log from its start, whose early memberships record x's old dir:
/// its own, not yet caught-up membership must not make it refuse the
/// leader it is catching up from (it did, and stayed a learner forever).
/// Its votes and acknowledgements stay refused until it is re-admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_node_catches_up_from_a_leader_that_was_re_admitted_before_it() {
    let (mut q, client, a, _) = bound_quorum(74).await;
    let (x, y) = {
        let f: Vec<usize> = (0..3).filter(|i| *i != a).collect();
        (f[0], f[1])
    };

    // x is wiped and re-admitted: the log now holds memberships with its
    // old dir, then with its new one.
    let x_dir = wipe(&mut q, x).await;
    readmit(&q, x, &x_dir).await;
    q.wait_converged(1, LONG).await.unwrap();

    // x becomes the leader: y lags behind writes only a and x hold, then a
    // dies, so only x can win.
    q.controller_mut(y).process.pause();
    let mut acked = create_numbered_topics(&client, "before", 3, 1, 1).await;
    q.controller_mut(a).kill();
    q.controller_mut(y).process.resume();
    let leader = q.wait_active(LONG).await.unwrap();
    assert_eq!(
        leader,
        x,
        "the lagging node cannot win\n{}",
        q.log_tails(30)
    );
    q.controller_mut(a).start().unwrap();
    q.wait_converged(1, LONG).await.unwrap();

    // y is wiped: it catches up from x through the whole log, and is
    // re-admitted.
    let y_dir = wipe(&mut q, y).await;
    readmit(&q, y, &y_dir).await;
    q.wait_converged(1, LONG).await.unwrap();
    let log = q.controller(y).process.log_text();
    let this_start = log.rsplit("=== start #").next().unwrap_or_default();
    assert!(
        !this_start.contains(&format!("node {}'s data dir has directory id", x + 1)),
        "the wiped node refused its leader:\n{this_start}"
    );
    create_topic(&client, "after", 1, 1).await;
    acked.push("after".into());
    let names = topic_names(&client).await;
    for n in &acked {
        assert!(names.contains(n), "acknowledged topic {n} lost");
    }
}

/// A node that cannot follow (here: stopped with SIGSTOP, so the kernel
/// accepts connections it never answers) is not made a voter: `add-voter`
/// asks it who it is first, gets no answer within its bound, and refuses
/// with INVALID_QUORUM_CHANGE before changing anything (a voter that
/// cannot follow would leave the quorum no room for another failure).
/// Once it runs again, the same command re-admits it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_voter_of_a_node_that_does_not_answer_is_refused_until_it_runs() {
    let (mut q, _client, a, _) = bound_quorum(75).await;
    let x = (a + 1) % 3;
    let dir = wipe(&mut q, x).await;
    q.controller_mut(x).process.pause();
    // Not the stopped node: a connection to it is accepted by the kernel
    // and never answered.
    let before = quorum_json(&q).expect("quorum described");
    let started = std::time::Instant::now();
    let out = add_voter_command(&q, x, &dir, &q.controller(a).address());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr.contains("INVALID_QUORUM_CHANGE")
            && stderr.contains("nothing changed"),
        "add-voter of a stopped node: {}\n{stderr}\n{}",
        out.status,
        q.log_tails(30)
    );
    // Refused after the identification bound, not after the catch-up wait.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "refused only after {:?}",
        started.elapsed()
    );
    let after = quorum_json(&q).expect("quorum described");
    let members = |v: &serde_json::Value| {
        let mut m: Vec<(u64, String, bool)> = v["voters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| {
                (
                    n["id"].as_u64().unwrap_or_default(),
                    n["directory_id"].as_str().unwrap_or_default().to_string(),
                    n["status"] == "learner",
                )
            })
            .collect();
        m.sort();
        m
    };
    assert_eq!(members(&before), members(&after), "{before}\n{after}");
    q.controller_mut(x).process.resume();
    readmit(&q, x, &dir).await;
    q.wait_converged(1, LONG).await.unwrap();
}
