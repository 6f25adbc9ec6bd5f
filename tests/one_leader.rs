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
/// again and again (8 rounds, each isolating whoever is active then; 10
/// would take the test past a minute). The majority elects a leader once
/// per round, during the cut; after each heal that leader stays leader in
/// the same term on every node (no extra election: the returning node's
/// pre-votes are refused). The isolated one says it is inactive within
/// `election_timeout_max` of the cut and appends nothing to its log while
/// cut off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healed_partition_never_deposes_the_leader_the_majority_elected() {
    const ROUNDS: usize = 8;
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
    use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
    use openraft::raft::VoteRequest;
    use openraft::{BasicNode, Vote};

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
    let network = keel_raft::Network::new(q.cluster_id.clone(), 9);
    let r = network
        .pre_vote(
            id,
            &addr,
            &PreVoteRequest {
                candidate: 9,
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
    let mut peer = network.new_client(id, &BasicNode::new(&addr)).await;
    let resp = peer
        .vote(
            VoteRequest::new(Vote::new(term + 10, 9), ahead),
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
