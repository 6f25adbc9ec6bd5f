//! `WriteSession`: the client side of `AdminService.Write`, a pipelined
//! write session on one HTTP/2 stream of one connection.
//!
//! A unary call costs a new HTTP/2 stream (headers both ways, trailers, a
//! server task); a session message costs one DATA frame each way. Several
//! writes may be in flight at once; answers carry the request's id and may
//! come back in any order.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Status, Streaming};

use crate::pb;
use crate::pb::admin_service_client::AdminServiceClient;
use crate::pb::write_request::Op;
use crate::pb::write_response::Result as Answer;

/// Requests buffered on the client side before `send` waits.
const SEND_BUFFER: usize = 1024;

/// Largest write a controller decodes (tonic's default limit). A larger one
/// would end the whole session, so `send` refuses it up front.
pub const MAX_WRITE_BYTES: usize = 4 << 20;

/// Refuses a write the controller would not decode (it would end the
/// session): the op plus at most 11 bytes for the id field.
fn check_size(op: Option<&Op>) -> Result<(), SessionError> {
    let size = op.map_or(0, Op::encoded_len) + 11;
    if size > MAX_WRITE_BYTES {
        return Err(SessionError::TooLarge(size));
    }
    Ok(())
}

/// Why a session call failed. The write's outcome is unknown unless the
/// session ended before it was sent.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("write session closed by the client side")]
    Closed,
    #[error("write session ended by the server")]
    Ended,
    #[error("write session failed: {0}")]
    Status(#[from] Status),
    #[error("answer for write {got} while waiting for write {want}")]
    OutOfOrder { want: u64, got: u64 },
    #[error("answer for write {0} carries no result")]
    Empty(u64),
    #[error("write session failed: {0}")]
    Failed(String),
    #[error("write of {0} bytes exceeds the {MAX_WRITE_BYTES}-byte limit; nothing was sent")]
    TooLarge(usize),
}

/// One open `Write` session to a controller (normally the active one: any
/// other answers each write with NOT_CONTROLLER).
pub struct WriteSession {
    tx: mpsc::Sender<pb::WriteRequest>,
    answers: Streaming<pb::WriteResponse>,
    next_id: u64,
}

impl WriteSession {
    /// Opens a session on `channel`.
    pub async fn open(channel: Channel) -> Result<Self, SessionError> {
        let (tx, rx) = mpsc::channel(SEND_BUFFER);
        let answers = AdminServiceClient::new(channel)
            .max_decoding_message_size(64 << 20)
            .write(ReceiverStream::new(rx))
            .await?
            .into_inner();
        Ok(Self {
            tx,
            answers,
            next_id: 0,
        })
    }

    /// Sends `op` without waiting for its answer; returns its id.
    ///
    /// Read answers while sending: the controller answers up to 1,024
    /// writes of a session at once, and once its answers and this side's
    /// buffer are full, `send` waits for `recv` to make room.
    pub async fn send(&mut self, op: Op) -> Result<u64, SessionError> {
        let req = pb::WriteRequest {
            id: self.next_id,
            op: Some(op),
        };
        check_size(req.op.as_ref())?;
        self.next_id += 1;
        let id = req.id;
        self.tx.send(req).await.map_err(|_| SessionError::Closed)?;
        Ok(id)
    }

    /// The next answer to arrive, whichever write it is for.
    pub async fn recv(&mut self) -> Result<(u64, Answer), SessionError> {
        let a = self.answers.message().await?.ok_or(SessionError::Ended)?;
        let r = a.result.ok_or(SessionError::Empty(a.id))?;
        Ok((a.id, r))
    }

    /// Sends `op` and waits for its answer. Only for a session with no
    /// other write in flight.
    pub async fn call(&mut self, op: Op) -> Result<Answer, SessionError> {
        let want = self.send(op).await?;
        let (got, answer) = self.recv().await?;
        if got != want {
            return Err(SessionError::OutOfOrder { want, got });
        }
        Ok(answer)
    }
}

/// Writes a [`SharedSession`] keeps in flight at most; further callers wait
/// for a slot. It stays below the controller's per-session bound, so the
/// session never stops reading answers while its sends are held back.
pub const SHARED_IN_FLIGHT: usize = 1000;

/// A waiting caller's answer slot.
type Reply = oneshot::Sender<Result<Answer, SessionError>>;

/// A [`WriteSession`] many tasks share: each `call` is one write on the
/// same HTTP/2 stream, so concurrent callers' writes travel together (one
/// read and one write syscall carry many) instead of one connection each.
/// Cloning is cheap; the session ends when the last clone drops.
#[derive(Clone)]
pub struct SharedSession {
    calls: mpsc::Sender<(Op, Reply)>,
    slots: Arc<Semaphore>,
}

impl SharedSession {
    /// Opens a session on `channel` and starts the task that drives it.
    pub async fn open(channel: Channel) -> Result<Self, SessionError> {
        let session = WriteSession::open(channel).await?;
        let (calls, rx) = mpsc::channel(SHARED_IN_FLIGHT);
        tokio::spawn(drive(session, rx));
        Ok(Self {
            calls,
            slots: Arc::new(Semaphore::new(SHARED_IN_FLIGHT)),
        })
    }

    /// Sends `op` and waits for its answer.
    pub async fn call(&self, op: Op) -> Result<Answer, SessionError> {
        check_size(Some(&op))?;
        let _slot = self
            .slots
            .acquire()
            .await
            .map_err(|_| SessionError::Closed)?;
        let (tx, rx) = oneshot::channel();
        self.calls
            .send((op, tx))
            .await
            .map_err(|_| SessionError::Ended)?;
        rx.await.map_err(|_| SessionError::Ended)?
    }
}

/// Moves calls onto the session and answers back to their callers, until
/// every handle is gone and every answer is in, or the session fails (then
/// every waiting caller gets the failure).
async fn drive(session: WriteSession, mut calls: mpsc::Receiver<(Op, Reply)>) {
    let WriteSession {
        tx,
        mut answers,
        mut next_id,
    } = session;
    let mut waiting: HashMap<u64, Reply> = HashMap::new();
    let mut open = true;
    let failure = loop {
        if !open && waiting.is_empty() {
            return;
        }
        tokio::select! {
            c = calls.recv(), if open => match c {
                Some((op, reply)) => {
                    let id = next_id;
                    next_id += 1;
                    // Never blocks: callers hold one of SHARED_IN_FLIGHT
                    // slots, and that many fit in the send buffer.
                    if tx.send(pb::WriteRequest { id, op: Some(op) }).await.is_err() {
                        let _ = reply.send(Err(SessionError::Ended));
                        break SessionError::Ended;
                    }
                    waiting.insert(id, reply);
                }
                None => open = false,
            },
            a = answers.message() => match a {
                Ok(Some(a)) => {
                    if let Some(reply) = waiting.remove(&a.id) {
                        let _ = reply.send(a.result.ok_or(SessionError::Empty(a.id)));
                    }
                }
                Ok(None) => break SessionError::Ended,
                Err(s) => break SessionError::Status(s),
            },
        }
    };
    let text = failure.to_string();
    for (_, reply) in waiting.drain() {
        let _ = reply.send(Err(SessionError::Failed(text.clone())));
    }
}
