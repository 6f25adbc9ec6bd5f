//! A three-node quorum in one process: replication, snapshot catch-up and
//! recovery from disk.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use keel_raft::default_config;

/// Total size of the files under `dir`.
fn dir_size(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            total += if p.is_dir() {
                dir_size(&p)
            } else {
                e.metadata().map_or(0, |m| m.len())
            };
        }
    }
    total
}
use openraft::SnapshotPolicy;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_commit_ten_thousand_batches_to_identical_images() {
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let config = Arc::new(default_config(CLUSTER));
    let nodes = start_cluster(root.path(), config).await;
    let leader = wait_leader(&nodes).await;
    let leader = &nodes[leader as usize - 1].raft;

    let total = 10_000u64;
    let started = Instant::now();
    let last = write_batches(leader, 0..total, 256).await;
    let elapsed = started.elapsed();
    assert_converged(&nodes, last).await;
    println!(
        "durable commit throughput (3 nodes, 256 in flight): {total} batches in {:.2?} = {:.0} batches/s",
        elapsed,
        total as f64 / elapsed.as_secs_f64()
    );

    let started = Instant::now();
    let serial = 200u64;
    let last = write_batches(leader, total..total + serial, 1).await;
    let elapsed = started.elapsed();
    println!(
        "durable commit latency (3 nodes, one at a time): {serial} batches in {:.2?} = {:.2?} per batch",
        elapsed,
        elapsed / serial as u32
    );
    assert_converged(&nodes, last).await;
    for n in &nodes {
        assert_eq!(
            n.applied().image.topic_count(),
            total as usize + serial as usize
        );
    }
    let disk_bytes = dir_size(&nodes[0].dir);
    println!(
        "node 1 data dir after {} entries: {:.1} MiB",
        last,
        disk_bytes as f64 / (1 << 20) as f64
    );
    let rss = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .map(str::to_string)
        });
    println!("test process (3 nodes) {}", rss.unwrap_or_default());
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stopped_follower_catches_up_from_a_snapshot_after_the_log_was_purged() {
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let mut config = default_config(CLUSTER);
    config.snapshot_policy = SnapshotPolicy::LogsSinceLast(200);
    config.max_in_snapshot_log_to_keep = 0;
    config.purge_batch_size = 1;
    let config = Arc::new(config.validate().unwrap());
    let mut nodes = start_cluster(root.path(), config.clone()).await;
    let leader_id = wait_leader(&nodes).await;

    let first = {
        let leader = &nodes[leader_id as usize - 1].raft;
        write_batches(leader, 0..50, 16).await
    };
    assert_converged(&nodes, first).await;

    // Stop a follower.
    let follower_pos = nodes.iter().position(|n| n.id != leader_id).unwrap();
    let follower = nodes.remove(follower_pos);
    let behind = follower.applied().last_applied.unwrap().index;
    let (fid, fdir, faddr) = follower.stop().await;

    // Enough writes for several snapshots and a purge past the follower.
    let leader = &nodes.iter().find(|n| n.id == leader_id).unwrap().raft;
    let last = write_batches(leader, 50..1_050, 64).await;
    let purged = leader
        .wait(Some(PATIENCE))
        .metrics(
            |m| m.purged.is_some_and(|p| p.index > behind + 200),
            "leader purged past the stopped follower",
        )
        .await
        .unwrap()
        .purged
        .unwrap()
        .index;
    println!("follower stopped at {behind}; leader purged up to {purged}; log at {last}");

    // The follower comes back on the same dir and address.
    let follower = TestNode::restart(fid, &fdir, &faddr, config.clone()).await;
    assert_eq!(
        follower.recovered.last_applied.map(|l| l.index),
        Some(behind),
        "the follower recovered what it had applied"
    );
    nodes.push(follower);
    let hash = assert_converged(&nodes, last).await;

    let follower = nodes.iter().find(|n| n.id == fid).unwrap();
    let m = follower.raft.metrics().borrow().clone();
    let snapshot = m.snapshot.expect("the follower holds a snapshot");
    assert!(
        snapshot.index >= purged,
        "the follower's snapshot ({snapshot}) covers the purged log (up to {purged})"
    );
    assert_eq!(follower.applied().image.hash(), hash);
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn whole_cluster_restart_recovers_state_from_disk() {
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let mut config = default_config(CLUSTER);
    // Small enough that recovery goes through a snapshot plus the log after it.
    config.snapshot_policy = SnapshotPolicy::LogsSinceLast(300);
    let config = Arc::new(config.validate().unwrap());
    let nodes = start_cluster(root.path(), config.clone()).await;
    let leader_id = wait_leader(&nodes).await;
    let last = write_batches(&nodes[leader_id as usize - 1].raft, 0..1_000, 64).await;
    let hash = assert_converged(&nodes, last).await;
    let applied = nodes[0].applied().last_applied;
    for n in &nodes {
        // Recovery below starts from this snapshot, then replays the log.
        n.raft
            .wait(Some(PATIENCE))
            .metrics(|m| m.snapshot.is_some(), "a snapshot was built")
            .await
            .unwrap();
    }

    let term = nodes[leader_id as usize - 1]
        .raft
        .metrics()
        .borrow()
        .current_term;
    let nodes = restart_all(nodes, &config).await;
    for node in &nodes {
        // Raft::new re-applies the committed log after the snapshot before
        // the node talks to anyone: the image is back as it was.
        let id = node.id;
        assert_eq!(node.recovered.last_applied, applied, "node {id}");
        assert_eq!(node.recovered.image.hash(), hash, "node {id}");
    }
    let leader_id = wait_leader(&nodes).await;
    // No node resumed the old leadership (its unflushed tail could be gone
    // while followers kept it): the leader now was elected in a new term.
    let now = nodes[leader_id as usize - 1]
        .raft
        .metrics()
        .borrow()
        .current_term;
    assert!(
        now > term,
        "leader {leader_id} leads term {now}, as before the restart"
    );
    let more = write_batches(&nodes[leader_id as usize - 1].raft, 1_000..1_100, 16).await;
    assert_converged(&nodes, more).await;
    for n in &nodes {
        assert_eq!(n.applied().image.topic_count(), 1_100);
    }
    for n in nodes {
        n.stop().await;
    }
}

/// What the leader's log says it holds itself, as the commit rule counts it.
fn leader_holds(leader: &TestNode) -> u64 {
    leader
        .raft
        .metrics()
        .borrow()
        .replication
        .as_ref()
        .and_then(|r| r.get(&leader.id).copied().flatten())
        .map_or(0, |l| l.index)
}

/// The leader replicates its own entries while it flushes them, and counts
/// itself as holding them only once they are on disk: with its writer held
/// back (its entries neither stored nor flushed, replication reading them
/// from the cache), entries still commit on both followers' copies, but with one
/// follower down the other follower's copy alone commits nothing until the
/// leader's flush goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_leader_counts_its_own_entries_only_once_they_are_flushed() {
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let config = Arc::new(default_config(CLUSTER));
    let mut nodes = start_cluster(root.path(), config).await;
    let leader_id = wait_leader(&nodes).await;
    let base = write_batches(&nodes[leader_id as usize - 1].raft, 0..10, 4).await;
    assert_converged(&nodes, base).await;

    // Both followers up: their two copies are a quorum without the leader's.
    let leader = &nodes[leader_id as usize - 1];
    let held = leader.log.hold_background_writes();
    let last = tokio::time::timeout(PATIENCE, write_batches(&leader.raft, 10..20, 4))
        .await
        .expect("entries commit on the followers' copies while the leader's flush is held");
    assert_converged(&nodes, last).await;
    assert!(
        leader_holds(leader) < last,
        "the leader counted entries it has not flushed: holds {}, committed {last}",
        leader_holds(leader)
    );
    drop(held);
    leader
        .raft
        .wait(Some(PATIENCE))
        .metrics(
            |m| {
                m.replication
                    .as_ref()
                    .and_then(|r| r.get(&leader_id).copied().flatten())
                    .is_some_and(|l| l.index >= last)
            },
            "the leader counts its entries once flushed",
        )
        .await
        .unwrap();

    // One follower down: the other follower's copy alone is not a quorum.
    let down = nodes
        .iter()
        .position(|n| n.id != leader_id)
        .expect("a follower");
    nodes.remove(down).stop().await;
    let leader = nodes.iter().find(|n| n.id == leader_id).expect("leader");
    let held = leader.log.hold_background_writes();
    let raft = leader.raft.clone();
    let mut write = tokio::spawn(async move { raft.client_write(topic_batch(20)).await });
    let early = tokio::time::timeout(Duration::from_secs(2), &mut write).await;
    assert!(
        early.is_err(),
        "a write committed on one follower's copy while the leader's flush was held: {early:?}"
    );
    let applied = leader
        .raft
        .metrics()
        .borrow()
        .last_applied
        .map_or(0, |l| l.index);
    assert!(
        applied <= last,
        "applied {applied} beyond {last} without a quorum"
    );
    drop(held);
    let index = tokio::time::timeout(PATIENCE, write)
        .await
        .expect("the write commits once the leader's flush goes through")
        .expect("write task")
        .expect("write through the leader")
        .log_id
        .index;
    assert!(index > last);
    assert_converged(&nodes, index).await;

    // A node stopped while its flushes are held, with a write waiting on
    // them, still stops: its store lets the flusher go when it closes.
    let _held = leader.log.hold_background_writes();
    let raft = leader.raft.clone();
    let pending = tokio::spawn(async move { raft.client_write(topic_batch(21)).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    for n in nodes {
        tokio::time::timeout(PATIENCE, n.stop())
            .await
            .expect("a node stops while its flushes are held");
    }
    pending.abort();
}

/// A leader that loses its leadership while its own flush is held back
/// hears of that flush only as a follower: the node keeps running, follows
/// the new leader, and all three converge.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_that_steps_down_with_its_flush_held_follows_and_converges() {
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let config = Arc::new(default_config(CLUSTER));
    let nodes = start_cluster(root.path(), config).await;
    let old_id = wait_leader(&nodes).await;
    let old = &nodes[old_id as usize - 1];
    let base = write_batches(&old.raft, 0..10, 4).await;
    assert_converged(&nodes, base).await;

    // An entry that commits on the followers' copies while the leader's own
    // flush is held.
    let held = old.log.hold_background_writes();
    let last = write_batches(&old.raft, 10..11, 1).await;
    let old_term = old.raft.metrics().borrow().current_term;

    // The leader goes silent and a follower takes over (whichever wins;
    // one is nudged to campaign), and the old leader steps down on hearing
    // of it, its flush still held.
    old.raft.runtime_config().heartbeat(false);
    let nudged = nodes.iter().find(|n| n.id != old_id).expect("a follower");
    let deadline = Instant::now() + PATIENCE;
    let new_id = loop {
        let m = old.raft.metrics().borrow().clone();
        if let Some(l) = m
            .current_leader
            .filter(|l| *l != old_id && m.current_term > old_term)
        {
            break l;
        }
        assert!(Instant::now() < deadline, "no follower took over");
        let _ = nudged.raft.trigger().elect().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let new = &nodes[new_id as usize - 1];
    old.raft.runtime_config().heartbeat(true);

    // The held flush reports now, under a leadership that is gone.
    drop(held);
    let more = write_batches(&new.raft, 11..20, 4).await;
    assert!(more > last);
    assert_converged(&nodes, more).await;
    for n in &nodes {
        assert!(
            n.raft.metrics().borrow().running_state.is_ok(),
            "node {} stopped",
            n.id
        );
        assert_eq!(n.applied().image.topic_count(), 20, "node {}", n.id);
    }
    for n in nodes {
        n.stop().await;
    }
}

/// A new commit index reaches the followers without waiting for the next
/// periodic heartbeat: with heartbeats a minute apart, a lone write is
/// still applied on every follower within seconds (standbys keep their
/// image current between writes, so a failover has little left to apply).
/// The bound is generous for a busy machine; a commit index left for the
/// heartbeat would miss it unless a heartbeat happened to fall right after
/// the writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn followers_learn_a_lone_commit_without_waiting_for_a_heartbeat() {
    const LONE_COMMIT_BOUND: Duration = Duration::from_secs(5);
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let mut config = default_config(CLUSTER);
    config.heartbeat_interval = 60_000;
    config.election_timeout_min = 120_000;
    config.election_timeout_max = 180_000;
    let config = Arc::new(config.validate().unwrap());
    let nodes = start_cluster(root.path(), config).await;
    let leader = wait_leader(&nodes).await;
    let raft = nodes[leader as usize - 1].raft.clone();
    let followers: Vec<&TestNode> = nodes.iter().filter(|n| n.id != leader).collect();
    // A first write, so the election's own entries are behind us (the
    // followers are checked on the lone writes below).
    let last = write_batches(&raft, 0..1, 1).await;
    nodes[leader as usize - 1].wait_applied(last).await;

    for n in 1..=5u64 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let index = write_batches(&raft, n..n + 1, 1).await;
        let started = Instant::now();
        for f in &followers {
            f.raft
                .wait(Some(LONE_COMMIT_BOUND))
                .applied_index_at_least(Some(index), "applied")
                .await
                .unwrap_or_else(|e| {
                    panic!(
                        "follower {} did not apply lone write {index} within \
                         {LONE_COMMIT_BOUND:?} of its commit (heartbeats are 60 s apart): {e}",
                        f.id
                    )
                });
        }
        println!(
            "lone write {index}: applied on both followers {:.1?} after commit",
            started.elapsed()
        );
    }
    for n in nodes {
        n.stop().await;
    }
}

/// Stops every node, then restarts each on its old address and data dir.
async fn restart_all(nodes: Vec<TestNode>, config: &Arc<openraft::Config>) -> Vec<TestNode> {
    let mut stopped = Vec::new();
    for n in nodes {
        stopped.push(n.stop().await);
    }
    // Give the dropped stores a moment; `restart` waits for the lock anyway.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut nodes = Vec::new();
    for (id, dir, addr) in &stopped {
        nodes.push(TestNode::restart(*id, dir, addr, config.clone()).await);
    }
    nodes
}

/// A batch of `n` topics numbered from `from`.
fn topics(from: u64, n: u64) -> keel_metadata::RecordBatch {
    let records = (from..from + n)
        .flat_map(|i| topic_batch(i).records.as_ref().clone())
        .collect();
    keel_metadata::RecordBatch::new(records)
}

/// Large appends (entries of thousands of records, as a 100,000-partition
/// decision's are, whose payloads followers decode off the runtime's
/// workers) are as durable as small ones: every node holds them after the
/// whole cluster restarts, with the small appends after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_appends_reach_every_disk_and_survive_a_restart() {
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let config = Arc::new(default_config(CLUSTER));
    let nodes = start_cluster(root.path(), config.clone()).await;
    let leader_id = wait_leader(&nodes).await;
    let leader = &nodes[leader_id as usize - 1].raft;
    let mut last = 0;
    for round in 0..3 {
        let r = leader
            .client_write(topics(round * 5_000, 5_000))
            .await
            .expect("a large write commits");
        last = r.log_id.index;
    }
    let small = write_batches(leader, 15_000..15_010, 4).await;
    assert!(small > last);
    let hash = assert_converged(&nodes, small).await;
    let nodes = restart_all(nodes, &config).await;
    for node in &nodes {
        let id = node.id;
        assert_eq!(node.recovered.image.topic_count(), 15_010, "node {id}");
        assert_eq!(node.recovered.image.hash(), hash, "node {id}");
    }
    for n in nodes {
        n.stop().await;
    }
}
