//! Patched (Keel): tests of `Config::commit_linger_ms`, on a real replication
//! task with a network that records every AppendEntries it is asked to send.
//!
//! The clock is tokio's paused test clock: it moves only when every task
//! waits, straight to the next timer, so "at once" means "before any time
//! passed" and a linger is measured exactly, whatever the machine's load.

use std::future::Future;
use std::ops::RangeBounds;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio::time::Instant;

use crate::core::notify::Notify;
use crate::core::sm::handle::SnapshotReader;
use crate::engine::testing::UTConfig;
use crate::error::Fatal;
use crate::error::InstallSnapshotError;
use crate::error::RPCError;
use crate::error::RaftError;
use crate::error::ReplicationClosed;
use crate::error::StreamingError;
use crate::log_id_range::LogIdRange;
use crate::network::RPCOption;
use crate::raft::AppendEntriesRequest;
use crate::raft::AppendEntriesResponse;
use crate::raft::InstallSnapshotRequest;
use crate::raft::InstallSnapshotResponse;
use crate::raft::SnapshotResponse;
use crate::raft::VoteRequest;
use crate::raft::VoteResponse;
use crate::replication::request::Replicate;
use crate::replication::request_id::RequestId;
use crate::replication::ReplicationCore;
use crate::replication::ReplicationHandle;
use crate::replication::ReplicationSessionId;
use crate::storage::LogFlushed;
use crate::storage::RaftLogStorage;
use crate::testing::blank_ent;
use crate::testing::log_id;
use crate::Config;
use crate::LogId;
use crate::LogState;
use crate::OptionalSend;
use crate::RaftLogReader;
use crate::RaftNetwork;
use crate::RaftNetworkFactory;
use crate::Snapshot;
use crate::StorageError;
use crate::Vote;

/// What the follower was sent: when, the commit index, and the indexes of
/// the entries.
#[derive(Debug)]
struct Sent {
    at: Instant,
    leader_commit: Option<LogId<u64>>,
    entries: Vec<u64>,
}

/// A follower that accepts every AppendEntries and reports it.
struct RecordingNetwork {
    tx: mpsc::UnboundedSender<Sent>,
}

impl RaftNetwork<UTConfig> for RecordingNetwork {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<UTConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, (), RaftError<u64>>> {
        let _ = self.tx.send(Sent {
            at: Instant::now(),
            leader_commit: rpc.leader_commit,
            entries: rpc.entries.iter().map(|e| e.log_id.index).collect(),
        });
        Ok(AppendEntriesResponse::Success)
    }

    #[cfg(not(feature = "generic-snapshot-data"))]
    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<UTConfig>,
        _option: RPCOption,
    ) -> Result<InstallSnapshotResponse<u64>, RPCError<u64, (), RaftError<u64, InstallSnapshotError>>> {
        unimplemented!("no snapshot is sent in these tests")
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<u64>,
        _option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, (), RaftError<u64>>> {
        unimplemented!("no vote is sent in these tests")
    }

    async fn full_snapshot(
        &mut self,
        _vote: Vote<u64>,
        _snapshot: Snapshot<UTConfig>,
        _cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<u64>, StreamingError<UTConfig, Fatal<u64>>> {
        unimplemented!("no snapshot is sent in these tests")
    }
}

struct Networks;

impl RaftNetworkFactory<UTConfig> for Networks {
    type Network = RecordingNetwork;

    async fn new_client(&mut self, _target: u64, _node: &()) -> Self::Network {
        unimplemented!("the test hands the replication task its network")
    }
}

/// A log holding blank entries at every index; only read from.
struct Logs;

impl RaftLogReader<UTConfig> for Logs {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + std::fmt::Debug + OptionalSend>(
        &mut self,
        _range: RB,
    ) -> Result<Vec<crate::Entry<UTConfig>>, StorageError<u64>> {
        unimplemented!("replication reads with limited_get_log_entries")
    }

    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<crate::Entry<UTConfig>>, StorageError<u64>> {
        Ok((start..end).map(|i| blank_ent::<UTConfig>(1, 0, i)).collect())
    }
}

impl RaftLogStorage<UTConfig> for Logs {
    type LogReader = Logs;

    async fn get_log_state(&mut self) -> Result<LogState<UTConfig>, StorageError<u64>> {
        unimplemented!()
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        unimplemented!()
    }

    async fn save_vote(&mut self, _vote: &Vote<u64>) -> Result<(), StorageError<u64>> {
        unimplemented!()
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError<u64>> {
        unimplemented!()
    }

    async fn append<I>(&mut self, _entries: I, _callback: LogFlushed<UTConfig>) -> Result<(), StorageError<u64>>
    where
        I: IntoIterator<Item = crate::Entry<UTConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        unimplemented!()
    }

    async fn truncate(&mut self, _log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        unimplemented!()
    }

    async fn purge(&mut self, _log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        unimplemented!()
    }
}

/// A replication task to follower 1 of leader 0, whose follower already
/// holds entries up to 5, and what the follower is sent.
struct Stream {
    handle: ReplicationHandle<UTConfig>,
    sent: mpsc::UnboundedReceiver<Sent>,
    /// Keeps the task's channel to RaftCore open.
    _to_core: mpsc::UnboundedReceiver<Notify<UTConfig>>,
}

impl Stream {
    fn spawn(config: Config) -> Self {
        let (tx, sent) = mpsc::unbounded_channel();
        let (tx_core, to_core) = mpsc::unbounded_channel();
        let handle = ReplicationCore::<UTConfig, Networks, Logs>::spawn(
            1,
            ReplicationSessionId::new(Vote::new_committed(1, 0), None),
            Arc::new(config),
            None,
            Some(log_id(1, 0, 5)),
            RecordingNetwork { tx: tx.clone() },
            RecordingNetwork { tx },
            Logs,
            SnapshotReader::detached(),
            tx_core,
            tracing::Span::none(),
        );
        Self {
            handle,
            sent,
            _to_core: to_core,
        }
    }

    fn send(&self, event: Replicate<UTConfig>) {
        self.handle.tx_repl.send(event).unwrap();
    }

    /// The next request the follower is sent, if one comes within `wait`.
    async fn next_sent(&mut self, wait: Duration) -> Option<Sent> {
        timeout(wait, self.sent.recv()).await.ok().flatten()
    }
}

/// How long a test waits for a request it expects (on the paused clock).
const AT_ONCE: Duration = Duration::from_secs(5);

/// How long a test waits to see that no request comes (on the paused clock).
const QUIET: Duration = Duration::from_millis(200);

#[test]
fn test_commit_linger_is_off_by_default() {
    let config = Config::default();
    assert_eq!(0, config.commit_linger_ms);
    assert_eq!(Duration::ZERO, config.commit_linger());

    let config = Config::build(&["foo", "--commit-linger-ms=5"]).unwrap();
    assert_eq!(Duration::from_millis(5), config.commit_linger());
}

#[tokio::test(start_paused = true)]
async fn test_default_config_sends_a_new_commit_index_at_once() {
    let mut stream = Stream::spawn(Config::default());

    let start = Instant::now();
    stream.send(Replicate::Committed(Some(log_id(1, 0, 3))));

    let sent = stream.next_sent(AT_ONCE).await.expect("the commit index is sent");
    assert_eq!(Some(log_id(1, 0, 3)), sent.leader_commit);
    assert!(sent.entries.is_empty(), "sent alone: {:?}", sent);
    assert_eq!(start, sent.at, "at once, as upstream");
}

#[tokio::test(start_paused = true)]
async fn test_commit_linger_holds_a_new_commit_index_for_entries_to_carry() {
    let mut stream = Stream::spawn(Config {
        commit_linger_ms: 60_000,
        ..Default::default()
    });

    stream.send(Replicate::Committed(Some(log_id(1, 0, 3))));
    assert!(stream.next_sent(QUIET).await.is_none(), "held back for entries");

    stream.send(Replicate::logs(
        RequestId::new_append_entries(1),
        LogIdRange::new(Some(log_id(1, 0, 5)), Some(log_id(1, 0, 6))),
    ));
    let sent = stream.next_sent(AT_ONCE).await.expect("entries are sent at once");
    assert_eq!(vec![6], sent.entries);
    assert_eq!(Some(log_id(1, 0, 3)), sent.leader_commit, "the entries carry it");

    assert!(
        stream.next_sent(QUIET).await.is_none(),
        "nothing left to send alone once the entries carried it"
    );
}

#[tokio::test(start_paused = true)]
async fn test_commit_linger_sends_the_commit_index_alone_when_no_entries_come() {
    let linger = Duration::from_millis(300);
    let mut stream = Stream::spawn(Config {
        commit_linger_ms: linger.as_millis() as u64,
        ..Default::default()
    });

    let start = Instant::now();
    stream.send(Replicate::Committed(Some(log_id(1, 0, 3))));

    let sent = stream.next_sent(linger + AT_ONCE).await.expect("sent alone after the linger");
    assert_eq!(Some(log_id(1, 0, 3)), sent.leader_commit);
    assert!(sent.entries.is_empty(), "sent alone: {:?}", sent);
    let waited = sent.at - start;
    assert!(
        waited >= linger && waited < linger + Duration::from_millis(5),
        "when the linger ends: {:?}",
        waited
    );
}

#[tokio::test(start_paused = true)]
async fn test_commit_linger_does_not_delay_a_heartbeat() {
    let mut stream = Stream::spawn(Config {
        commit_linger_ms: 60_000,
        ..Default::default()
    });

    stream.send(Replicate::Committed(Some(log_id(1, 0, 3))));
    stream.send(Replicate::Heartbeat);

    let sent = stream.next_sent(AT_ONCE).await.expect("a heartbeat is sent at once");
    assert_eq!(
        Some(log_id(1, 0, 3)),
        sent.leader_commit,
        "and carries the commit index"
    );
    assert!(sent.entries.is_empty());
    assert!(stream.next_sent(QUIET).await.is_none(), "the commit index went with it");
}
