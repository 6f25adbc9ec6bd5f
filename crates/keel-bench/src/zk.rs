//! A minimal ZooKeeper client for `keel bench compare`, on tokio.
//!
//! One [`ZkSession`] is one TCP connection and one ZooKeeper session. It
//! speaks just the part of the jute wire protocol the bench needs (connect,
//! create, exists, close), one request in flight at a time, with
//! `TCP_NODELAY` like the Java client. [`SharedZkSession`] pipelines many
//! tasks' requests on one session. [`find_leader`] asks every server
//! the `srvr` four-letter command and picks the one in `Mode: leader`.
//!
//! Nothing read from the network can panic: every length is checked, and
//! a malformed or oversized frame is a [`ZkError`].

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

/// Request type of `create` (jute `ZooDefs.OpCode.create`).
const OP_CREATE: i32 = 1;
/// Request type of `exists`.
const OP_EXISTS: i32 = 3;
/// Request type of `closeSession`.
const OP_CLOSE: i32 = -11;
/// Reply xid of a watch event (the bench sets none, so they are skipped).
const XID_WATCH_EVENT: i32 = -1;
/// Reply xid of a ping.
const XID_PING: i32 = -2;
/// Largest frame accepted (the server's default `jute.maxbuffer` is ~1 MiB).
const MAX_FRAME_BYTES: usize = 4 << 20;
/// Most frames skipped while waiting for one reply (watch events, pings).
const MAX_SKIPPED_FRAMES: usize = 1_000;
/// Largest four-letter-command answer read.
const MAX_FOUR_LETTER_BYTES: u64 = 64 << 10;
/// `Perms.ALL` of the `world:anyone` ACL (`OPEN_ACL_UNSAFE`).
const PERMS_ALL: i32 = 31;
/// Server error code "the node already exists".
pub const ERR_NODE_EXISTS: i32 = -110;
/// Server error code "no such node".
pub const ERR_NO_NODE: i32 = -101;

/// What can go wrong talking to ZooKeeper.
#[derive(Debug, thiserror::Error)]
pub enum ZkError {
    /// The address is not `host:port`.
    #[error("bad ZooKeeper address {0:?}: expected host:port")]
    BadAddress(String),
    /// A socket call failed.
    #[error("ZooKeeper {addr}: {op}: {source}")]
    Io {
        addr: String,
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// No answer in time; the session is unusable afterwards.
    #[error("ZooKeeper {addr}: {op} timed out after {after_ms} ms")]
    Timeout {
        addr: String,
        op: &'static str,
        after_ms: u64,
    },
    /// The server answered the connect request with a zero timeout.
    #[error("ZooKeeper {addr} refused the session")]
    SessionRefused { addr: String },
    /// A frame was longer than [`MAX_FRAME_BYTES`] or negative.
    #[error("ZooKeeper {addr} sent a frame of {len} bytes")]
    BadFrameLength { addr: String, len: i64 },
    /// A frame ended early or had an impossible field.
    #[error("ZooKeeper {addr} sent a malformed {what}")]
    Malformed { addr: String, what: &'static str },
    /// A reply for a request this session never sent.
    #[error("ZooKeeper {addr} answered xid {got} while xid {expected} was outstanding")]
    UnexpectedXid {
        addr: String,
        expected: i32,
        got: i32,
    },
    /// The server refused the operation.
    #[error("ZooKeeper {op} {path}: server error {code} ({})", error_name(*.code))]
    Server {
        op: &'static str,
        path: String,
        code: i32,
    },
    /// An earlier transport error or timeout left the session unusable.
    #[error("ZooKeeper session to {addr} is broken by an earlier error")]
    Broken { addr: String },
    /// The `srvr` answer could not be used.
    #[error("ZooKeeper {addr}: srvr: {source}")]
    Srvr {
        addr: String,
        #[source]
        source: SrvrError,
    },
    /// No server said `Mode: leader` (or `standalone`) before the deadline.
    #[error(
        "no ZooKeeper server among {addrs:?} is the leader after {waited_ms} ms (last: {last})"
    )]
    NoLeader {
        addrs: Vec<String>,
        waited_ms: u64,
        last: String,
    },
}

/// Name of a ZooKeeper server error code (`KeeperException.Code`).
pub fn error_name(code: i32) -> &'static str {
    match code {
        0 => "OK",
        -1 => "SYSTEMERROR",
        -4 => "CONNECTIONLOSS",
        -7 => "OPERATIONTIMEOUT",
        -8 => "BADARGUMENTS",
        -101 => "NONODE",
        -102 => "NOAUTH",
        -103 => "BADVERSION",
        -108 => "NOCHILDRENFOREPHEMERALS",
        -110 => "NODEEXISTS",
        -111 => "NOTEMPTY",
        -112 => "SESSIONEXPIRED",
        -114 => "INVALIDACL",
        -118 => "SESSIONMOVED",
        -119 => "NOTREADONLY",
        -125 => "QUOTAEXCEEDED",
        -127 => "THROTTLEDOP",
        _ => "unknown",
    }
}

/// Why a `srvr` answer is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SrvrError {
    /// `4lw.commands.whitelist` does not include `srvr`.
    #[error("the command is not whitelisted (set 4lw.commands.whitelist=srvr,stat,ruok)")]
    NotWhitelisted,
    /// The server has no quorum yet.
    #[error("the server is not currently serving requests")]
    NotServing,
    /// No `Mode:` line.
    #[error("no Mode line in {0:?}")]
    NoMode(String),
}

/// A server's role, from the `Mode:` line of `srvr`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZkMode {
    Leader,
    Follower,
    Observer,
    Standalone,
    ReadOnly,
    Other(String),
}

impl ZkMode {
    /// Whether writes sent to this server are proposed by it directly.
    pub fn leads(&self) -> bool {
        matches!(self, ZkMode::Leader | ZkMode::Standalone)
    }
}

/// What `srvr` says about a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SrvrInfo {
    /// `Zookeeper version:` line (full, with the build stamp).
    pub version: Option<String>,
    pub mode: ZkMode,
    /// `Node count:` (znodes in the server's tree).
    pub node_count: Option<u64>,
}

/// Parses the answer to the `srvr` four-letter command.
pub fn parse_srvr(text: &str) -> Result<SrvrInfo, SrvrError> {
    if text.contains("is not in the whitelist") || text.contains("is not executed because") {
        return Err(SrvrError::NotWhitelisted);
    }
    if text.contains("not currently serving requests") {
        return Err(SrvrError::NotServing);
    }
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(key).map(|v| v.trim().to_string()))
    };
    let mode = match field("Mode:") {
        None => {
            let head: String = text.chars().take(200).collect();
            return Err(SrvrError::NoMode(head));
        }
        Some(m) => match m.as_str() {
            "leader" => ZkMode::Leader,
            "follower" => ZkMode::Follower,
            "observer" => ZkMode::Observer,
            "standalone" => ZkMode::Standalone,
            "read-only" => ZkMode::ReadOnly,
            _ => ZkMode::Other(m),
        },
    };
    Ok(SrvrInfo {
        version: field("Zookeeper version:"),
        mode,
        node_count: field("Node count:").and_then(|n| n.parse().ok()),
    })
}

fn check_addr(addr: &str) -> Result<(), ZkError> {
    match addr.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(()),
        _ => Err(ZkError::BadAddress(addr.to_string())),
    }
}

/// Sends a four-letter command and returns the answer (the server closes
/// the connection after answering).
pub async fn four_letter(addr: &str, cmd: &str, timeout: Duration) -> Result<String, ZkError> {
    check_addr(addr)?;
    let io = |op: &'static str| {
        let addr = addr.to_string();
        move |source| ZkError::Io { addr, op, source }
    };
    let fut = async {
        let mut s = TcpStream::connect(addr).await.map_err(io("connect"))?;
        s.write_all(cmd.as_bytes()).await.map_err(io("send"))?;
        let mut out = Vec::new();
        (&mut s)
            .take(MAX_FOUR_LETTER_BYTES)
            .read_to_end(&mut out)
            .await
            .map_err(io("read"))?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    };
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| ZkError::Timeout {
            addr: addr.to_string(),
            op: "four-letter command",
            after_ms: timeout.as_millis() as u64,
        })?
}

/// `srvr` of one server.
pub async fn srvr(addr: &str, timeout: Duration) -> Result<SrvrInfo, ZkError> {
    let text = four_letter(addr, "srvr", timeout).await?;
    parse_srvr(&text).map_err(|source| ZkError::Srvr {
        addr: addr.to_string(),
        source,
    })
}

/// Polls `srvr` on every server until one leads (at most `timeout`);
/// returns its address and answer.
pub async fn find_leader(
    addrs: &[String],
    timeout: Duration,
) -> Result<(String, SrvrInfo), ZkError> {
    for a in addrs {
        check_addr(a)?;
    }
    let start = Instant::now();
    let mut last = String::from("no answer yet");
    loop {
        for a in addrs {
            match srvr(a, Duration::from_secs(2)).await {
                Ok(info) if info.mode.leads() => return Ok((a.clone(), info)),
                Ok(info) => last = format!("{a}: {:?}", info.mode),
                Err(
                    e @ ZkError::Srvr {
                        source: SrvrError::NotWhitelisted,
                        ..
                    },
                ) => return Err(e),
                Err(e) => last = e.to_string(),
            }
        }
        if start.elapsed() >= timeout {
            return Err(ZkError::NoLeader {
                addrs: addrs.to_vec(),
                waited_ms: start.elapsed().as_millis() as u64,
                last,
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Jute encoding of a request body.
#[derive(Default)]
struct JuteOut(Vec<u8>);

impl JuteOut {
    fn i32(&mut self, v: i32) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn i64(&mut self, v: i64) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn bool(&mut self, v: bool) -> &mut Self {
        self.0.push(u8::from(v));
        self
    }
    fn bytes(&mut self, v: &[u8]) -> &mut Self {
        // Callers keep paths and values far below i32::MAX.
        self.i32(i32::try_from(v.len()).unwrap_or(i32::MAX));
        self.0.extend_from_slice(v);
        self
    }
    /// The body with its 4-byte length prefix.
    fn framed(&self) -> Vec<u8> {
        let mut f = Vec::with_capacity(self.0.len() + 4);
        self.frame_into(&mut f);
        f
    }

    /// Appends the length-prefixed frame to `out`.
    fn frame_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.0.len() as u32).to_be_bytes());
        out.extend_from_slice(&self.0);
    }
}

/// Jute decoding of a reply; every read is bounds-checked.
struct JuteIn<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> JuteIn<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }
    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }
    /// A length-prefixed buffer; `-1` is null (empty here), any other
    /// negative length is malformed.
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = self.i32()?;
        if len == -1 {
            return Some(&[]);
        }
        self.take(usize::try_from(len).ok()?)
    }
}

/// The fields of a znode's `Stat` the bench reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZkStat {
    /// Children of the znode.
    pub num_children: i32,
}

fn parse_stat(r: &mut JuteIn<'_>) -> Option<ZkStat> {
    // czxid, mzxid, ctime, mtime, version, cversion, aversion,
    // ephemeralOwner, dataLength, numChildren, pzxid.
    r.take(8 * 4 + 4 * 3 + 8 + 4)?;
    let num_children = r.i32()?;
    r.i64()?;
    Some(ZkStat { num_children })
}

/// The body of a `create` of the persistent znode `path` holding `data`
/// (open ACL).
fn create_body(path: &str, data: &[u8]) -> Vec<u8> {
    let mut b = JuteOut::default();
    b.bytes(path.as_bytes())
        .bytes(data)
        .i32(1) // one ACL
        .i32(PERMS_ALL)
        .bytes(b"world")
        .bytes(b"anyone")
        .i32(0); // flags: persistent
    b.0
}

/// A `create` reply's error code as a result.
fn create_outcome(err: i32, path: &str) -> Result<(), ZkError> {
    if err != 0 {
        return Err(ZkError::Server {
            op: "create",
            path: path.to_string(),
            code: err,
        });
    }
    Ok(())
}

/// A `closeSession` reply's error code as a result.
fn close_outcome(err: i32) -> Result<(), ZkError> {
    if err != 0 {
        return Err(ZkError::Server {
            op: "close",
            path: String::new(),
            code: err,
        });
    }
    Ok(())
}

/// One ZooKeeper session on its own TCP connection.
pub struct ZkSession {
    /// The server's `host:port`.
    addr: String,
    stream: TcpStream,
    /// Xid of the next request (replies come back in order with it).
    next_xid: i32,
    /// Session id the server assigned.
    session_id: i64,
    /// Per-request deadline.
    op_timeout: Duration,
    /// Set after a transport error or timeout: a frame may be half read.
    broken: bool,
}

impl ZkSession {
    /// Opens a session on `addr` asking for `session_timeout_ms`.
    pub async fn connect(
        addr: &str,
        session_timeout_ms: i32,
        op_timeout: Duration,
    ) -> Result<Self, ZkError> {
        check_addr(addr)?;
        let fut = async {
            let stream = TcpStream::connect(addr)
                .await
                .map_err(|source| ZkError::Io {
                    addr: addr.to_string(),
                    op: "connect",
                    source,
                })?;
            let _ = stream.set_nodelay(true);
            let mut s = ZkSession {
                addr: addr.to_string(),
                stream,
                next_xid: 1,
                session_id: 0,
                op_timeout,
                broken: false,
            };
            let mut req = JuteOut::default();
            req.i32(0) // protocolVersion
                .i64(0) // lastZxidSeen
                .i32(session_timeout_ms)
                .i64(0) // sessionId: new session
                .bytes(&[0u8; 16]) // passwd
                .bool(false); // readOnly
            s.send(&req.framed()).await?;
            let frame = s.read_frame().await?;
            let mut r = JuteIn::new(&frame);
            let malformed = || ZkError::Malformed {
                addr: addr.to_string(),
                what: "connect response",
            };
            let _protocol = r.i32().ok_or_else(malformed)?;
            let timeout_ms = r.i32().ok_or_else(malformed)?;
            let session_id = r.i64().ok_or_else(malformed)?;
            r.bytes().ok_or_else(malformed)?;
            if timeout_ms <= 0 {
                return Err(ZkError::SessionRefused {
                    addr: addr.to_string(),
                });
            }
            s.session_id = session_id;
            Ok(s)
        };
        tokio::time::timeout(op_timeout, fut)
            .await
            .map_err(|_| ZkError::Timeout {
                addr: addr.to_string(),
                op: "connect",
                after_ms: op_timeout.as_millis() as u64,
            })?
    }

    /// The session id the server assigned.
    pub fn session_id(&self) -> i64 {
        self.session_id
    }

    async fn send(&mut self, frame: &[u8]) -> Result<(), ZkError> {
        self.stream
            .write_all(frame)
            .await
            .map_err(|source| ZkError::Io {
                addr: self.addr.clone(),
                op: "send",
                source,
            })
    }

    async fn read_frame(&mut self) -> Result<Vec<u8>, ZkError> {
        read_frame_from(&mut self.stream, &self.addr).await
    }

    /// Sends one request and waits for its reply; returns the server's
    /// error code and the reply body.
    async fn call(
        &mut self,
        op: &'static str,
        opcode: i32,
        body: &[u8],
    ) -> Result<(i32, Vec<u8>), ZkError> {
        if self.broken {
            return Err(ZkError::Broken {
                addr: self.addr.clone(),
            });
        }
        let xid = self.next_xid;
        self.next_xid = self.next_xid.checked_add(1).unwrap_or(1);
        let mut req = JuteOut::default();
        req.i32(xid).i32(opcode);
        req.0.extend_from_slice(body);
        let frame = req.framed();
        let timeout = self.op_timeout;
        let r = tokio::time::timeout(timeout, self.exchange(xid, &frame)).await;
        match r {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                self.broken = true;
                Err(e)
            }
            Err(_) => {
                self.broken = true;
                Err(ZkError::Timeout {
                    addr: self.addr.clone(),
                    op,
                    after_ms: timeout.as_millis() as u64,
                })
            }
        }
    }

    async fn exchange(&mut self, xid: i32, frame: &[u8]) -> Result<(i32, Vec<u8>), ZkError> {
        self.send(frame).await?;
        for _ in 0..MAX_SKIPPED_FRAMES {
            let reply = self.read_frame().await?;
            let mut r = JuteIn::new(&reply);
            let malformed = || ZkError::Malformed {
                addr: self.addr.clone(),
                what: "reply header",
            };
            let got = r.i32().ok_or_else(malformed)?;
            let _zxid = r.i64().ok_or_else(malformed)?;
            let err = r.i32().ok_or_else(malformed)?;
            if got == xid {
                return Ok((err, reply[r.pos..].to_vec()));
            }
            if got == XID_WATCH_EVENT || got == XID_PING {
                continue;
            }
            return Err(ZkError::UnexpectedXid {
                addr: self.addr.clone(),
                expected: xid,
                got,
            });
        }
        Err(ZkError::Malformed {
            addr: self.addr.clone(),
            what: "stream (too many frames without a reply)",
        })
    }

    /// Creates a persistent znode `path` holding `data` (open ACL).
    pub async fn create(&mut self, path: &str, data: &[u8]) -> Result<(), ZkError> {
        let (err, _) = self
            .call("create", OP_CREATE, &create_body(path, data))
            .await?;
        create_outcome(err, path)
    }

    /// Turns this session into one many tasks share, its requests
    /// pipelined on the one connection.
    pub fn into_shared(self) -> SharedZkSession {
        SharedZkSession::start(self)
    }

    /// Stat of `path`, or `None` if it does not exist.
    pub async fn exists(&mut self, path: &str) -> Result<Option<ZkStat>, ZkError> {
        let mut b = JuteOut::default();
        b.bytes(path.as_bytes()).bool(false);
        let (err, body) = self.call("exists", OP_EXISTS, &b.0).await?;
        match err {
            0 => parse_stat(&mut JuteIn::new(&body))
                .map(Some)
                .ok_or_else(|| ZkError::Malformed {
                    addr: self.addr.clone(),
                    what: "exists reply",
                }),
            ERR_NO_NODE => Ok(None),
            code => Err(ZkError::Server {
                op: "exists",
                path: path.to_string(),
                code,
            }),
        }
    }

    /// Closes the session (the server forgets it at once).
    pub async fn close(mut self) -> Result<(), ZkError> {
        let (err, _) = self.call("close", OP_CLOSE, &[]).await?;
        close_outcome(err)
    }
}

/// Where a pipelined request's reply goes.
type ZkReply = oneshot::Sender<Result<(i32, Vec<u8>), ZkError>>;

/// Requests sent and not yet answered, oldest first (ZooKeeper answers a
/// session's requests in order), and whether the session has failed.
#[derive(Default)]
struct Pending {
    queue: VecDeque<(i32, ZkReply)>,
    failed: bool,
}

type Outstanding = Arc<Mutex<Pending>>;

/// A ZooKeeper session many tasks share: requests are pipelined on its one
/// connection (those waiting together go out in one write) and matched to
/// replies by order and xid, as the Java client does. Cloning is cheap;
/// [`SharedZkSession::close`] ends the session for every clone.
#[derive(Clone)]
pub struct SharedZkSession {
    addr: String,
    calls: mpsc::Sender<(i32, Vec<u8>, ZkReply)>,
    op_timeout: Duration,
}

impl SharedZkSession {
    fn start(s: ZkSession) -> Self {
        let ZkSession {
            addr,
            stream,
            next_xid,
            op_timeout,
            ..
        } = s;
        let (read, write) = stream.into_split();
        let (calls, rx) = mpsc::channel(1024);
        let outstanding: Outstanding = Arc::default();
        tokio::spawn(Self::write_loop(
            addr.clone(),
            write,
            rx,
            next_xid,
            outstanding.clone(),
        ));
        tokio::spawn(Self::read_loop(addr.clone(), read, outstanding));
        Self {
            addr,
            calls,
            op_timeout,
        }
    }

    /// Sends requests in arrival order, all that wait in one write.
    async fn write_loop(
        addr: String,
        mut w: OwnedWriteHalf,
        mut rx: mpsc::Receiver<(i32, Vec<u8>, ZkReply)>,
        mut next_xid: i32,
        outstanding: Outstanding,
    ) {
        let mut buf = Vec::new();
        while let Some(first) = rx.recv().await {
            buf.clear();
            let mut next = Some(first);
            while let Some((opcode, body, reply)) = next {
                let xid = next_xid;
                next_xid = next_xid.checked_add(1).unwrap_or(1);
                let mut req = JuteOut::default();
                req.i32(xid).i32(opcode);
                req.0.extend_from_slice(&body);
                req.frame_into(&mut buf);
                // Queued before it is written, so its reply always finds it;
                // after a failure, answered at once.
                let mut p = lock(&outstanding);
                if p.failed {
                    let _ = reply.send(Err(ZkError::Broken { addr: addr.clone() }));
                } else {
                    p.queue.push_back((xid, reply));
                }
                drop(p);
                next = rx.try_recv().ok();
            }
            if let Err(source) = w.write_all(&buf).await {
                let e = ZkError::Io {
                    addr: addr.clone(),
                    op: "send",
                    source,
                };
                fail_all(&outstanding, &addr, e);
                return;
            }
        }
    }

    /// Hands each reply to the oldest outstanding request.
    async fn read_loop(addr: String, mut r: OwnedReadHalf, outstanding: Outstanding) {
        let e = loop {
            let reply = match read_frame_from(&mut r, &addr).await {
                Ok(f) => f,
                Err(e) => break e,
            };
            let mut h = JuteIn::new(&reply);
            let (Some(got), Some(_zxid), Some(err)) = (h.i32(), h.i64(), h.i32()) else {
                break ZkError::Malformed {
                    addr: addr.clone(),
                    what: "reply header",
                };
            };
            if got == XID_WATCH_EVENT || got == XID_PING {
                continue;
            }
            let Some((xid, tx)) = lock(&outstanding).queue.pop_front() else {
                break ZkError::UnexpectedXid {
                    addr: addr.clone(),
                    expected: 0,
                    got,
                };
            };
            if xid != got {
                let _ = tx.send(Err(ZkError::UnexpectedXid {
                    addr: addr.clone(),
                    expected: xid,
                    got,
                }));
                break ZkError::Broken { addr: addr.clone() };
            }
            let _ = tx.send(Ok((err, reply[h.pos..].to_vec())));
        };
        fail_all(&outstanding, &addr, e);
    }

    async fn call(
        &self,
        op: &'static str,
        opcode: i32,
        body: Vec<u8>,
    ) -> Result<(i32, Vec<u8>), ZkError> {
        let broken = || ZkError::Broken {
            addr: self.addr.clone(),
        };
        let (tx, rx) = oneshot::channel();
        self.calls
            .send((opcode, body, tx))
            .await
            .map_err(|_| broken())?;
        match tokio::time::timeout(self.op_timeout, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(broken()),
            Err(_) => Err(ZkError::Timeout {
                addr: self.addr.clone(),
                op,
                after_ms: self.op_timeout.as_millis() as u64,
            }),
        }
    }

    /// Creates a persistent znode `path` holding `data` (open ACL).
    pub async fn create(&self, path: &str, data: &[u8]) -> Result<(), ZkError> {
        let (err, _) = self
            .call("create", OP_CREATE, create_body(path, data))
            .await?;
        create_outcome(err, path)
    }

    /// Closes the session (the server forgets it at once).
    pub async fn close(&self) -> Result<(), ZkError> {
        let (err, _) = self.call("close", OP_CLOSE, Vec::new()).await?;
        close_outcome(err)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Marks the session failed and answers every outstanding request with
/// the failure.
fn fail_all(outstanding: &Outstanding, addr: &str, e: ZkError) {
    let waiting: Vec<_> = {
        let mut p = lock(outstanding);
        p.failed = true;
        p.queue.drain(..).collect()
    };
    let mut first = Some(e);
    for (_, tx) in waiting {
        let e = first.take().unwrap_or_else(|| ZkError::Broken {
            addr: addr.to_string(),
        });
        let _ = tx.send(Err(e));
    }
}

/// Reads one length-prefixed frame from `r`.
async fn read_frame_from<R: AsyncReadExt + Unpin>(
    r: &mut R,
    addr: &str,
) -> Result<Vec<u8>, ZkError> {
    let io = |source| ZkError::Io {
        addr: addr.to_string(),
        op: "read",
        source,
    };
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await.map_err(io)?;
    let len = i32::from_be_bytes(len);
    let n = usize::try_from(len)
        .ok()
        .filter(|n| *n <= MAX_FRAME_BYTES)
        .ok_or_else(|| ZkError::BadFrameLength {
            addr: addr.to_string(),
            len: i64::from(len),
        })?;
    let mut buf = vec![0u8; n];
    r.read_exact(&mut buf).await.map_err(io)?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEADER: &str = "Zookeeper version: 3.8.0-5a02a05eddb59aee6ac762f7ea82e92a68eb9c0f, built on 2022-02-25 08:49 UTC\n\
        Latency min/avg/max: 0/0.31/12\nReceived: 40\nSent: 39\nConnections: 1\nOutstanding: 0\n\
        Zxid: 0x100000004\nMode: leader\nNode count: 7\nProposal sizes last/min/max: 48/48/150\n";

    /// A fake ZooKeeper server on loopback: accepts one session, then
    /// answers each request in order, `create` of a path containing "dup"
    /// with NODE_EXISTS; after `close_after` requests it drops the
    /// connection without answering.
    async fn fake_server(close_after: usize) -> String {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = l.local_addr().expect("addr").to_string();
        tokio::spawn(async move {
            let (mut c, _) = l.accept().await.expect("accept");
            let a = addr_of(&c);
            read_frame_from(&mut c, &a).await.expect("connect request");
            let mut out = JuteOut::default();
            out.i32(0).i32(30_000).i64(42).bytes(&[0u8; 16]);
            c.write_all(&out.framed()).await.expect("connect reply");
            for _ in 0..close_after {
                let Ok(req) = read_frame_from(&mut c, &a).await else {
                    return;
                };
                let mut r = JuteIn::new(&req);
                let xid = r.i32().expect("xid");
                let opcode = r.i32().expect("opcode");
                let err = match opcode {
                    OP_CREATE => {
                        let path = r.bytes().expect("path");
                        if path.windows(3).any(|w| w == b"dup") {
                            ERR_NODE_EXISTS
                        } else {
                            0
                        }
                    }
                    _ => 0,
                };
                let mut out = JuteOut::default();
                out.i32(xid).i64(1).i32(err);
                if c.write_all(&out.framed()).await.is_err() {
                    return;
                }
            }
            // Hang up: FIN after the answers, then read and drop whatever
            // else comes (an unread receive queue would turn the close
            // into a reset that can discard answers already sent).
            let _ = c.shutdown().await;
            let mut sink = [0u8; 4096];
            while matches!(c.read(&mut sink).await, Ok(n) if n > 0) {}
        });
        addr
    }

    fn addr_of(c: &TcpStream) -> String {
        c.peer_addr().map(|a| a.to_string()).unwrap_or_default()
    }

    #[tokio::test]
    async fn a_shared_session_pipelines_many_tasks_and_answers_each_its_own_reply() {
        let addr = fake_server(usize::MAX).await;
        let s = ZkSession::connect(&addr, 30_000, Duration::from_secs(10))
            .await
            .expect("connect")
            .into_shared();
        let mut tasks = Vec::new();
        for t in 0..16 {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..20 {
                    let path = if (t + i) % 7 == 0 {
                        format!("/dup-{t}-{i}")
                    } else {
                        format!("/n-{t}-{i}")
                    };
                    let r = s.create(&path, b"v").await;
                    match r {
                        Ok(()) => assert!(!path.contains("dup"), "{path} created"),
                        Err(ZkError::Server { code, path: p, .. }) => {
                            assert_eq!(code, ERR_NODE_EXISTS);
                            assert_eq!(p, path, "the error names this task's own path");
                        }
                        Err(e) => panic!("{path}: {e}"),
                    }
                }
            }));
        }
        for t in tasks {
            t.await.expect("task");
        }
        s.close().await.expect("close");
    }

    #[tokio::test]
    async fn a_shared_session_fails_every_waiting_call_when_the_server_hangs_up() {
        let addr = fake_server(3).await;
        let s = ZkSession::connect(&addr, 30_000, Duration::from_secs(30))
            .await
            .expect("connect")
            .into_shared();
        let started = Instant::now();
        let mut tasks = Vec::new();
        for i in 0..10 {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                s.create(&format!("/n-{i}"), b"v").await
            }));
        }
        let mut ok = 0;
        for t in tasks {
            if t.await.expect("task").is_ok() {
                ok += 1;
            }
        }
        assert_eq!(ok, 3, "the server answered exactly three requests");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "waiting calls fail when the connection ends, not at their deadline"
        );
    }

    #[test]
    fn srvr_of_the_leader_gives_mode_version_and_node_count() {
        let i = parse_srvr(LEADER).expect("parses");
        assert_eq!(i.mode, ZkMode::Leader);
        assert!(i.mode.leads());
        assert_eq!(
            i.version.as_deref().map(|v| v.starts_with("3.8.0-")),
            Some(true)
        );
        assert_eq!(i.node_count, Some(7));
    }

    #[test]
    fn followers_and_observers_do_not_lead_but_a_standalone_server_does() {
        let f = parse_srvr(&LEADER.replace("Mode: leader", "Mode: follower")).expect("parses");
        assert_eq!(f.mode, ZkMode::Follower);
        assert!(!f.mode.leads());
        let o = parse_srvr("Mode: observer\n").expect("parses");
        assert!(!o.mode.leads());
        assert!(parse_srvr("Mode: standalone\n")
            .expect("parses")
            .mode
            .leads());
        assert_eq!(
            parse_srvr("Mode: weird\n").expect("parses").mode,
            ZkMode::Other("weird".into())
        );
    }

    #[test]
    fn srvr_refusals_are_typed() {
        assert_eq!(
            parse_srvr("srvr is not executed because it is not in the whitelist.\n"),
            Err(SrvrError::NotWhitelisted)
        );
        assert_eq!(
            parse_srvr("This ZooKeeper instance is not currently serving requests\n"),
            Err(SrvrError::NotServing)
        );
        assert!(matches!(parse_srvr(""), Err(SrvrError::NoMode(_))));
    }

    #[test]
    fn create_request_is_jute_encoded() {
        let mut b = JuteOut::default();
        b.bytes(b"/a").bytes(b"v").i32(1).i32(PERMS_ALL);
        assert_eq!(
            b.0,
            vec![0, 0, 0, 2, b'/', b'a', 0, 0, 0, 1, b'v', 0, 0, 0, 1, 0, 0, 0, 31]
        );
        assert_eq!(&b.framed()[..4], &[0, 0, 0, 19]);
    }

    #[test]
    fn truncated_or_negative_fields_do_not_panic() {
        let mut r = JuteIn::new(&[0, 0, 0, 9, 1, 2]);
        assert_eq!(r.bytes(), None);
        let mut r = JuteIn::new(&[0xff, 0xff, 0xff, 0xff]);
        assert_eq!(r.bytes(), Some(&[][..]));
        let mut r = JuteIn::new(&[0x80, 0, 0, 0]);
        assert_eq!(r.bytes(), None);
        assert_eq!(parse_stat(&mut JuteIn::new(&[0; 20])), None);
        let mut stat = vec![0u8; 8 * 4 + 4 * 3 + 8 + 4];
        stat.extend_from_slice(&5i32.to_be_bytes());
        stat.extend_from_slice(&[0; 8]);
        assert_eq!(
            parse_stat(&mut JuteIn::new(&stat)),
            Some(ZkStat { num_children: 5 })
        );
    }

    #[test]
    fn addresses_need_a_port() {
        assert!(check_addr("127.0.21.1:2181").is_ok());
        assert!(matches!(
            check_addr("127.0.21.1"),
            Err(ZkError::BadAddress(_))
        ));
        assert!(check_addr(":2181").is_err());
    }
}
