//! Callbacks used by Storage API

use std::io;

use tokio::sync::mpsc;
use tokio::sync::oneshot;

use crate::async_runtime::AsyncOneshotSendExt;
use crate::core::notify::Notify;
use crate::raft_state::io_state::log_io_id::LogIOId;
use crate::type_config::alias::OneshotSenderOf;
use crate::LogId;
use crate::RaftTypeConfig;
use crate::StorageIOError;
use crate::Vote;

/// A oneshot callback for completion of log io operation.
pub struct LogFlushed<C>
where C: RaftTypeConfig
{
    log_io_id: LogIOId<C::NodeId>,
    to: FlushedTo<C>,
}

/// Who learns that a log io operation completed.
enum FlushedTo<C>
where C: RaftTypeConfig
{
    /// RaftCore waits for the result before it runs its next command: a
    /// follower's append, which must be on disk before it is acknowledged.
    Waiter(OneshotSenderOf<C, Result<LogIOId<C::NodeId>, io::Error>>),

    /// RaftCore did not wait: the leader's own append, which it replicates
    /// while it is being flushed. The result reaches RaftCore as a
    /// [`Notify::LocalLogFlushed`], and only then does the leader count
    /// itself as holding the entries.
    Core {
        tx: mpsc::UnboundedSender<Notify<C>>,
        vote: Vote<C::NodeId>,
        last_log_id: LogId<C::NodeId>,
    },
}

impl<C> LogFlushed<C>
where C: RaftTypeConfig
{
    pub(crate) fn new(
        log_io_id: LogIOId<C::NodeId>,
        tx: OneshotSenderOf<C, Result<LogIOId<C::NodeId>, io::Error>>,
    ) -> Self {
        Self {
            log_io_id,
            to: FlushedTo::Waiter(tx),
        }
    }

    /// A callback for the leader's own append, reported to RaftCore as a
    /// notification instead of being waited for.
    pub(crate) fn to_core(
        log_io_id: LogIOId<C::NodeId>,
        tx: mpsc::UnboundedSender<Notify<C>>,
        vote: Vote<C::NodeId>,
        last_log_id: LogId<C::NodeId>,
    ) -> Self {
        Self {
            log_io_id,
            to: FlushedTo::Core { tx, vote, last_log_id },
        }
    }

    /// Whether RaftCore is waiting for this flush before it does anything
    /// else (a follower's append), as opposed to going on and hearing of it
    /// later (the leader's own append). A store may flush the former on the
    /// spot and hand the latter to a background flusher; either way it must
    /// call [`Self::log_io_completed`] only once the entries are durable.
    pub fn is_awaited(&self) -> bool {
        matches!(self.to, FlushedTo::Waiter(_))
    }

    /// Report log io completion event.
    ///
    /// It will be called when the log is successfully appended to the storage or an error occurs.
    pub fn log_io_completed(self, result: Result<(), io::Error>) {
        if let Err(e) = &result {
            tracing::error!("LogFlush error: {}, while flushing upto {}", e, self.log_io_id);
        }
        match self.to {
            FlushedTo::Waiter(tx) => {
                let res = tx.send(result.map(|()| self.log_io_id));
                if let Err(e) = res {
                    tracing::error!("failed to send log io completion event: {:?}", e);
                }
            }
            FlushedTo::Core { tx, vote, last_log_id } => {
                // RaftCore has stopped if this fails; nothing is waiting.
                let _ = tx.send(Notify::LocalLogFlushed {
                    vote,
                    last_log_id,
                    result,
                });
            }
        }
    }
}

/// A oneshot callback for completion of applying logs to state machine.
pub struct LogApplied<C>
where C: RaftTypeConfig
{
    last_log_id: LogId<C::NodeId>,
    tx: oneshot::Sender<Result<(LogId<C::NodeId>, Vec<C::R>), StorageIOError<C::NodeId>>>,
}

impl<C> LogApplied<C>
where C: RaftTypeConfig
{
    #[allow(dead_code)]
    pub(crate) fn new(
        last_log_id: LogId<C::NodeId>,
        tx: oneshot::Sender<Result<(LogId<C::NodeId>, Vec<C::R>), StorageIOError<C::NodeId>>>,
    ) -> Self {
        Self { last_log_id, tx }
    }

    /// Report apply io completion event.
    ///
    /// It will be called when the log is successfully applied to the state machine or an error
    /// occurs.
    pub fn completed(self, result: Result<Vec<C::R>, StorageIOError<C::NodeId>>) {
        let res = match result {
            Ok(x) => {
                tracing::debug!("LogApplied upto {}", self.last_log_id);
                let resp = (self.last_log_id.clone(), x);
                self.tx.send(Ok(resp))
            }
            Err(e) => {
                tracing::error!("LogApplied error: {}, while applying upto {}", e, self.last_log_id);
                self.tx.send(Err(e))
            }
        };

        if let Err(_e) = res {
            tracing::error!("failed to send apply complete event, last_log_id: {}", self.last_log_id);
        }
    }
}
