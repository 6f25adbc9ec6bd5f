//! Raft timing and compaction defaults for a controller quorum.

use openraft::{Config, SnapshotPolicy};

/// How often the leader heartbeats its followers, by default.
pub const HEARTBEAT_MS: u64 = 150;

/// With no leader at all, a follower waits a random time in
/// [`ELECTION_TIMEOUT_MIN_MS`, `ELECTION_TIMEOUT_MAX_MS`] before it stands.
pub const ELECTION_TIMEOUT_MIN_MS: u64 = 300;

/// How long a follower that acknowledged a leader honours it (refuses to
/// vote for another): the followers' side of the leader's lease.
pub const ELECTION_TIMEOUT_MAX_MS: u64 = 450;

/// How long one quorum contact lets a leader act as the only one. A
/// follower that acknowledged it at time t refuses to vote for anyone else
/// until t + `election_timeout_max_ms` (openraft's leader lease), so no
/// successor exists before then; the leader stops one heartbeat earlier.
pub fn lease_ms(heartbeat_ms: u64, election_timeout_max_ms: u64) -> u64 {
    election_timeout_max_ms
        .saturating_sub(heartbeat_ms)
        .max(heartbeat_ms)
}

/// Config for a controller quorum named `cluster_name`.
///
/// Heartbeats every 150 ms (also openraft's timeout for an AppendEntries
/// without entries; one with entries has 2 s) and an election timeout of
/// 300–450 ms; lease heartbeats ([`crate::lease`]) go beside replication,
/// three per heartbeat interval, several awaiting an answer at once. openraft's own election timer is off
/// (`enable_elect: false`): [`crate::election_watchdog`] is the only thing
/// that starts elections, each after a pre-vote round a majority granted
/// (openraft 0.9 has none), about 0.5 s after a leader goes silent.
/// Check-quorum is on (`enable_check_quorum`, a setting of Keel's patched
/// openraft, off upstream): a leader that no quorum acknowledged for
/// `election_timeout_max` steps down to follower. A snapshot every
/// 10,000 entries bounds log growth and replay time; 1,000 entries are kept
/// behind it so a briefly lagging follower catches up from the log instead
/// of needing a snapshot. A new commit index with no entries to carry it
/// waits up to 5 ms for some before it goes alone (`commit_linger_ms`, a
/// setting of Keel's patched openraft, whose default sends it at once).
pub fn default_config(cluster_name: &str) -> Config {
    let config = Config {
        cluster_name: cluster_name.to_string(),
        heartbeat_interval: HEARTBEAT_MS,
        election_timeout_min: ELECTION_TIMEOUT_MIN_MS,
        election_timeout_max: ELECTION_TIMEOUT_MAX_MS,
        // Per snapshot chunk: a chunk is up to 3 MiB and the receiver flushes.
        install_snapshot_timeout: 2_000,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(10_000),
        max_in_snapshot_log_to_keep: 1_000,
        // Purge in batches so compaction is not one flush per entry.
        purge_batch_size: 256,
        // An entry carries up to 5,000 records; a few entries per RPC keep
        // each append small enough to send, store and flush quickly.
        max_payload_entries: 2,
        // An append that carries entries may take longer than a heartbeat
        // interval on a busy follower; it is given 2 s (Kafka's default
        // fetch timeout) before it is sent again (PATCHES.md §8). The
        // leader's quorum clock and the followers' leases do not wait for
        // it: lease heartbeats go beside replication (crate::lease).
        append_entries_timeout_ms: 2_000,
        // Under steady writes the next entries carry a new commit index
        // within a commit's time, which saves each follower one request per
        // commit; clients are answered by the leader's state machine, so
        // only a follower's view of a lone write waits (see
        // crates/vendor/openraft/PATCHES.md §3).
        commit_linger_ms: 5,
        // Elections come from the watchdog, after a pre-vote.
        enable_elect: false,
        // A leader cut off from its majority steps down (PATCHES.md §5).
        enable_check_quorum: true,
        // A leader that restarts stands for a new term instead of resuming
        // its old one: its unflushed tail may be gone while its followers
        // kept it (PATCHES.md §9).
        start_as_follower: true,
        ..Config::default()
    };
    // These constants satisfy every rule `validate` checks (pinned by a test).
    config
        .validate()
        .expect("the built-in Raft config is valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_is_valid_and_fails_over_within_a_second() {
        let c = default_config("keel");
        assert_eq!(c.cluster_name, "keel");
        assert!(c.election_timeout_max < 1_000);
        assert!(c.heartbeat_interval < c.election_timeout_min);
    }

    #[test]
    fn only_the_watchdog_elects_and_a_leader_without_a_quorum_steps_down() {
        let c = default_config("keel");
        assert!(
            !c.enable_elect,
            "openraft's timer would elect without a pre-vote"
        );
        assert!(c.enable_check_quorum);
        assert!(c.start_as_follower);
        assert!(!Config::default().start_as_follower, "openraft's default");
        assert!(!Config::default().enable_check_quorum, "openraft's default");
    }

    #[test]
    fn a_new_commit_index_lingers_five_ms_for_entries_to_carry_it() {
        assert_eq!(default_config("keel").commit_linger_ms, 5);
        assert_eq!(Config::default().commit_linger_ms, 0, "openraft's default");
    }
}
