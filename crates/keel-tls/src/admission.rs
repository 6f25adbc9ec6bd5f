//! Who may hold a connection open, and for how long: the rules every
//! listener of a process shares (gRPC, Kafka, HTTP).
//!
//! - A [`Gate`] per process counts open connections: at most
//!   [`Limits::max_connections`] in all, at most
//!   [`Limits::max_connections_per_ip`] from one address. Past the general
//!   pool, a reserve of [`Limits::member_reserve`] connections is kept for
//!   the cluster's own nodes (the addresses the gate's member check
//!   names), and they are not held to the per-address limit: a flood from
//!   outside never cuts the cluster's own links.
//! - A [`Door`] per listener admits accepted connections through the gate
//!   (a refused one is closed at once), runs TLS handshakes without ever
//!   holding up the accept loop (at most [`Limits::max_handshakes`] at
//!   once, each bounded by [`Limits::handshake_timeout`]; one beyond the cap
//!   is closed at once, not queued), and wraps each admitted connection in
//!   [`Admitted`], which closes it when no byte comes within
//!   [`Limits::first_byte_timeout`].
//!
//! Refusals and timeouts are counted in `keel_connections_refused_total`
//! (labels `listener` and `reason`); `keel_connections_open` (label
//! `listener`) is the number open.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;

/// TCP keepalive on every connection: a peer that vanished is noticed.
pub const KEEPALIVE: Duration = Duration::from_secs(30);

/// Nodelay and keepalive on an accepted or made connection.
pub fn tune(tcp: &TcpStream) {
    let _ = tcp.set_nodelay(true);
    let sock = socket2::SockRef::from(tcp);
    let _ = sock.set_tcp_keepalive(&socket2::TcpKeepalive::new().with_time(KEEPALIVE));
}

/// Counter of connections refused or closed before serving, by listener
/// and reason ([`Reason`]).
pub const REFUSED_METRIC: &str = "keel_connections_refused_total";
/// Gauge of open connections, by listener.
pub const OPEN_METRIC: &str = "keel_connections_open";

/// Default [`Limits::handshake_timeout`].
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Default [`Limits::first_byte_timeout`].
pub const DEFAULT_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default [`Limits::max_connections`] (before [`Limits::fit_fd_limit`]
/// lowers it to what the process's file descriptors allow).
pub const DEFAULT_MAX_CONNECTIONS: usize = 100_000;
/// Default [`Limits::max_connections_per_ip`].
pub const DEFAULT_MAX_CONNECTIONS_PER_IP: usize = 1_000;
/// Default [`Limits::member_reserve`].
pub const DEFAULT_MEMBER_RESERVE: usize = 256;
/// Default [`Limits::max_handshakes`].
pub const DEFAULT_MAX_HANDSHAKES: usize = 512;
/// File descriptors kept free of connections (storage, Raft peers,
/// outgoing channels), at most; a quarter of a small limit.
pub const FD_MARGIN: u64 = 1_024;

/// A process's open-file limits around [`raise_open_files`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFiles {
    /// The soft limit before.
    pub before: u64,
    /// The soft limit now in force.
    pub now: u64,
    /// The hard limit now in force.
    pub hard: u64,
}

/// Raises this process's open-file soft limit to its hard limit (a node
/// holds a connection per client, peer and broker, and a default soft
/// limit of 1,024 is reached long before the machine's); with `want`
/// above the hard limit, first raises the hard limit to it where the
/// process may (with `CAP_SYS_RESOURCE`, up to the kernel's
/// `fs.nr_open`). Processes started afterwards inherit the limits. `Err`
/// when they cannot be read; a refused raise leaves them as they were.
pub fn raise_open_files(want: Option<u64>) -> std::io::Result<OpenFiles> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (before, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if let Some(want) = want.filter(|w| *w > hard) {
        let ceiling = std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(hard);
        let target = want.min(ceiling).max(hard);
        if setrlimit(Resource::RLIMIT_NOFILE, target, target).is_ok() {
            return Ok(OpenFiles {
                before,
                now: target,
                hard: target,
            });
        }
    }
    let now = if before < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        hard
    } else {
        before
    };
    Ok(OpenFiles { before, now, hard })
}

/// Why a connection was refused or closed before it was served: the
/// `reason` label of `keel_connections_refused_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Its address holds [`Limits::max_connections_per_ip`] already.
    PerAddress,
    /// The process holds [`Limits::max_connections`] already.
    Total,
    /// [`Limits::max_handshakes`] handshakes were running already.
    Handshakes,
    /// Its TLS handshake took longer than [`Limits::handshake_timeout`].
    HandshakeTimeout,
    /// It sent nothing for its idle timeout.
    Idle,
}

impl Reason {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Reason::PerAddress => "per_address",
            Reason::Total => "total",
            Reason::Handshakes => "handshakes",
            Reason::HandshakeTimeout => "handshake_timeout",
            Reason::Idle => "idle",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Reason::PerAddress => "too many connections from its address",
            Reason::Total => "too many connections open",
            Reason::Handshakes => "too many TLS handshakes in progress",
            Reason::HandshakeTimeout => "TLS handshake timed out",
            Reason::Idle => "idle for too long",
        })
    }
}

/// Counts one refusal of `listener` for `reason`.
pub fn count_refused(listener: &'static str, reason: Reason) {
    metrics::counter!(REFUSED_METRIC, "listener" => listener, "reason" => reason.label())
        .increment(1);
}

/// Gives the admission metrics their help texts (on the installed
/// recorder).
pub fn describe_metrics() {
    metrics::describe_counter!(
        REFUSED_METRIC,
        "Connections refused or closed before being served (label listener: grpc, kafka or http; label reason: per_address, total, handshakes, handshake_timeout or idle)."
    );
    metrics::describe_gauge!(
        OPEN_METRIC,
        "Connections open (label listener: grpc, kafka or http)."
    );
}

/// The connection limits of one process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once over all listeners, from anyone (Kafka's
    /// `max.connections`).
    pub max_connections: usize,
    /// Connections open at once from one address (Kafka's
    /// `max.connections.per.ip`); the cluster's own nodes are exempt.
    pub max_connections_per_ip: usize,
    /// Connections kept, past `max_connections`, for the cluster's own
    /// nodes.
    pub member_reserve: usize,
    /// Longest a TLS handshake may take.
    pub handshake_timeout: Duration,
    /// Longest a connection may stay silent after it was accepted (after
    /// its handshake, on TLS).
    pub first_byte_timeout: Duration,
    /// TLS handshakes in progress at once, per listener; one address may
    /// hold an eighth of them (the cluster's own nodes are exempt), so a
    /// flood of silent connections from one address does not take them
    /// all.
    pub max_handshakes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_ip: DEFAULT_MAX_CONNECTIONS_PER_IP,
            member_reserve: DEFAULT_MEMBER_RESERVE,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            first_byte_timeout: DEFAULT_FIRST_BYTE_TIMEOUT,
            max_handshakes: DEFAULT_MAX_HANDSHAKES,
        }
    }
}

impl Limits {
    /// No limits at all (tests and tools that serve nobody else).
    pub fn unlimited() -> Self {
        Self {
            max_connections: usize::MAX / 4,
            max_connections_per_ip: usize::MAX / 4,
            member_reserve: 0,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            first_byte_timeout: Duration::from_secs(24 * 3600),
            max_handshakes: usize::MAX / 4,
        }
    }

    /// File descriptors kept free of connections under a limit of
    /// `fd_limit`: [`FD_MARGIN`], or a quarter of a smaller limit.
    pub fn fd_margin(fd_limit: u64) -> u64 {
        FD_MARGIN.min(fd_limit / 4)
    }

    /// These limits lowered so that connections (general pool and
    /// reserve) leave [`Limits::fd_margin`] of `fd_limit` descriptors free.
    pub fn fit_fd_limit(mut self, fd_limit: u64) -> Self {
        let room = fd_limit.saturating_sub(Self::fd_margin(fd_limit));
        let room = usize::try_from(room).unwrap_or(usize::MAX);
        self.member_reserve = self.member_reserve.min(room / 8);
        self.max_connections = self
            .max_connections
            .min(room.saturating_sub(self.member_reserve));
        self.max_connections_per_ip = self.max_connections_per_ip.min(self.max_connections);
        self
    }
}

/// Whether an address is one of the cluster's own nodes.
pub type MemberCheck = Arc<dyn Fn(IpAddr) -> bool + Send + Sync>;

#[derive(Default)]
struct Counts {
    /// Connections of the general pool.
    general: usize,
    /// Connections of members admitted from the reserve.
    reserve: usize,
    /// Open connections (either pool) by source address.
    by_ip: HashMap<IpAddr, usize>,
}

/// The open connections of one process and their limits (one per process,
/// shared by its listeners' [`Door`]s).
pub struct Gate {
    limits: Limits,
    counts: Mutex<Counts>,
    members: OnceLock<MemberCheck>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("limits", &self.limits)
            .finish()
    }
}

impl Gate {
    /// A gate enforcing `limits`.
    pub fn new(limits: Limits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            counts: Mutex::default(),
            members: OnceLock::new(),
        })
    }

    /// Its limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Sets how the gate knows the cluster's own nodes (once; later calls
    /// are ignored). Until then no address is a member.
    pub fn set_members(&self, check: MemberCheck) {
        let _ = self.members.set(check);
    }

    fn is_member(&self, ip: IpAddr) -> bool {
        self.members.get().is_some_and(|check| check(ip))
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits a connection from `ip`, or says why not. The member check
    /// runs only when a limit is reached, and outside the lock.
    fn admit(&self, ip: IpAddr) -> Result<Pool, Reason> {
        match self.take(ip, false) {
            Err(_) if self.is_member(ip) => self.take(ip, true),
            taken => taken,
        }
    }

    /// Takes a place for `ip` (a member's may come from the reserve and is
    /// not held to the per-address limit).
    fn take(&self, ip: IpAddr, member: bool) -> Result<Pool, Reason> {
        let l = &self.limits;
        let mut c = self.counts();
        let from_ip = c.by_ip.get(&ip).copied().unwrap_or(0);
        if !member && from_ip >= l.max_connections_per_ip {
            return Err(Reason::PerAddress);
        }
        let pool = if c.general < l.max_connections {
            c.general += 1;
            Pool::General
        } else if member && c.reserve < l.member_reserve {
            c.reserve += 1;
            Pool::Reserve
        } else {
            return Err(Reason::Total);
        };
        *c.by_ip.entry(ip).or_default() += 1;
        Ok(pool)
    }

    fn release(&self, ip: IpAddr, pool: Pool) {
        let mut c = self.counts();
        match pool {
            Pool::General => c.general = c.general.saturating_sub(1),
            Pool::Reserve => c.reserve = c.reserve.saturating_sub(1),
        }
        if let Some(n) = c.by_ip.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                c.by_ip.remove(&ip);
            }
        }
    }

    /// Connections open now (both pools).
    pub fn open(&self) -> usize {
        let c = self.counts();
        c.general + c.reserve
    }
}

#[derive(Clone, Copy, Debug)]
enum Pool {
    General,
    Reserve,
}

/// One admitted connection's place in its gate; given back when dropped.
pub struct Ticket {
    gate: Arc<Gate>,
    ip: IpAddr,
    pool: Pool,
    listener: &'static str,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.gate.release(self.ip, self.pool);
        metrics::gauge!(OPEN_METRIC, "listener" => self.listener).decrement(1.0);
    }
}

/// The admission of one listener (`name` is its `listener` label:
/// `grpc`, `kafka` or `http`).
#[derive(Clone)]
pub struct Door {
    gate: Arc<Gate>,
    name: &'static str,
    handshakes: Arc<Semaphore>,
    /// Handshakes in progress by source address.
    handshakes_by_ip: Arc<Mutex<HashMap<IpAddr, usize>>>,
    first_byte_timeout: Duration,
    /// After the first byte: a connection that reads nothing for this long
    /// is closed (`None`: the listener times idleness itself, or not).
    idle_timeout: Option<Duration>,
}

/// A TLS handshake's slot in its door; given back when dropped.
pub struct HandshakeSlot {
    _permit: Option<OwnedSemaphorePermit>,
    by_ip: Arc<Mutex<HashMap<IpAddr, usize>>>,
    ip: IpAddr,
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        let mut by_ip = self.by_ip.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = by_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                by_ip.remove(&self.ip);
            }
        }
    }
}

impl std::fmt::Debug for Door {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Door")
            .field("listener", &self.name)
            .finish()
    }
}

/// Why a TLS handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("TLS handshake timed out after {0:?}")]
    TimedOut(Duration),
    #[error("TLS handshake refused: {0}")]
    Refused(String),
}

impl Door {
    /// The door of listener `name` through `gate`.
    pub fn new(gate: &Arc<Gate>, name: &'static str) -> Self {
        Self {
            gate: gate.clone(),
            name,
            handshakes: Arc::new(Semaphore::new(
                gate.limits.max_handshakes.min(Semaphore::MAX_PERMITS),
            )),
            handshakes_by_ip: Arc::default(),
            first_byte_timeout: gate.limits.first_byte_timeout,
            idle_timeout: None,
        }
    }

    /// A door of its own gate, without limits.
    pub fn unlimited(name: &'static str) -> Self {
        Self::new(&Gate::new(Limits::unlimited()), name)
    }

    /// This door with a shorter first-byte timeout (a listener whose own
    /// idle timeout is shorter).
    pub fn with_first_byte_timeout(mut self, timeout: Duration) -> Self {
        self.first_byte_timeout = self.first_byte_timeout.min(timeout);
        self
    }

    /// This door closing a connection that, after its first byte, reads
    /// nothing for `timeout` (an HTTP listener's kept-alive connections;
    /// the Kafka listener times its own).
    pub fn with_idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = Some(timeout);
        self
    }

    /// How long an admitted connection may stay silent before its first
    /// byte.
    pub fn first_byte_timeout(&self) -> Duration {
        self.first_byte_timeout
    }

    /// Its listener label.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The limits of its gate.
    pub fn limits(&self) -> &Limits {
        &self.gate.limits
    }

    /// Admits a connection from `remote`, or counts and returns the reason
    /// it is refused (the caller closes it).
    pub fn admit(&self, remote: SocketAddr) -> Result<Ticket, Reason> {
        match self.gate.admit(remote.ip()) {
            Ok(pool) => {
                metrics::gauge!(OPEN_METRIC, "listener" => self.name).increment(1.0);
                Ok(Ticket {
                    gate: self.gate.clone(),
                    ip: remote.ip(),
                    pool,
                    listener: self.name,
                })
            }
            Err(reason) => {
                count_refused(self.name, reason);
                tracing::debug!(listener = self.name, %remote, %reason, "connection refused");
                Err(reason)
            }
        }
    }

    /// The next admitted connection of `listener`: refused ones are closed
    /// at once, accept errors (out of file descriptors) pause it briefly.
    pub async fn accept(&self, listener: &TcpListener) -> (TcpStream, SocketAddr, Ticket) {
        loop {
            let (tcp, remote) = match listener.accept().await {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(listener = self.name, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            match self.admit(remote) {
                Ok(ticket) => {
                    tune(&tcp);
                    return (tcp, remote, ticket);
                }
                Err(_) => drop(tcp),
            }
        }
    }

    /// A slot for one TLS handshake from `remote`, or `None` (counted)
    /// when [`Limits::max_handshakes`] are running, or an eighth of them
    /// from its address: the caller closes the connection rather than
    /// queue it. The cluster's own nodes always get one.
    pub fn handshake_slot(&self, remote: SocketAddr) -> Option<HandshakeSlot> {
        let ip = remote.ip();
        let per_ip = (self.gate.limits.max_handshakes / 8).max(1);
        let from_ip = {
            let by_ip = self
                .handshakes_by_ip
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            by_ip.get(&ip).copied().unwrap_or(0)
        };
        let permit = match self.handshakes.clone().try_acquire_owned() {
            Ok(permit) if from_ip < per_ip => Some(permit),
            _ if self.gate.is_member(ip) => None,
            _ => {
                count_refused(self.name, Reason::Handshakes);
                return None;
            }
        };
        let mut by_ip = self
            .handshakes_by_ip
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        *by_ip.entry(ip).or_default() += 1;
        Some(HandshakeSlot {
            _permit: permit,
            by_ip: self.handshakes_by_ip.clone(),
            ip,
        })
    }

    /// Runs `handshake` bounded by [`Limits::handshake_timeout`]; a timeout
    /// is counted.
    pub async fn handshake<T, E: std::fmt::Display>(
        &self,
        handshake: impl Future<Output = Result<T, E>>,
    ) -> Result<T, HandshakeError> {
        let timeout = self.gate.limits.handshake_timeout;
        match tokio::time::timeout(timeout, handshake).await {
            Ok(Ok(t)) => Ok(t),
            Ok(Err(e)) => Err(HandshakeError::Refused(e.to_string())),
            Err(_) => {
                count_refused(self.name, Reason::HandshakeTimeout);
                Err(HandshakeError::TimedOut(timeout))
            }
        }
    }

    /// `io` held to this door's first-byte timeout, keeping `ticket`.
    pub fn wrap<S>(&self, io: S, ticket: Ticket) -> Admitted<S> {
        Admitted {
            inner: io,
            deadline: Some(Box::pin(tokio::time::sleep(self.first_byte_timeout))),
            idle_timeout: self.idle_timeout,
            ticket,
        }
    }
}

/// An admitted connection: holds its place in the gate until dropped, and
/// fails its reads when no byte came within the first-byte timeout (and,
/// where its door has one, when none came within the idle timeout since
/// the last).
pub struct Admitted<S> {
    inner: S,
    /// Until the first byte arrives, then (with an idle timeout) until the
    /// next one must.
    deadline: Option<Pin<Box<Sleep>>>,
    idle_timeout: Option<Duration>,
    ticket: Ticket,
}

impl<S> Admitted<S> {
    /// The wrapped connection.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Admitted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    match (this.idle_timeout, this.deadline.as_mut()) {
                        (Some(idle), Some(deadline)) => {
                            deadline.as_mut().reset(tokio::time::Instant::now() + idle)
                        }
                        _ => this.deadline = None,
                    }
                }
                Poll::Ready(r)
            }
            Poll::Pending => {
                let expired = this
                    .deadline
                    .as_mut()
                    .is_some_and(|deadline| deadline.as_mut().poll(cx).is_ready());
                if !expired {
                    return Poll::Pending;
                }
                this.deadline = None;
                count_refused(this.ticket.listener, Reason::Idle);
                Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no request came within the idle timeout",
                )))
            }
        }
    }
}

/// Implements `AsyncWrite` for the wrapper `$wrapper` by passing every
/// call on to its `inner` stream; `$stream` names the wrapper's stream
/// type parameter when it has one.
macro_rules! write_to_inner {
    ($wrapper:ty $(, $stream:ident)?) => {
        impl$(<$stream: tokio::io::AsyncWrite + Unpin>)? tokio::io::AsyncWrite for $wrapper {
            fn poll_write(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
            }

            fn poll_flush(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.inner).poll_flush(cx)
            }

            fn poll_shutdown(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
            }

            fn poll_write_vectored(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                self.inner.is_write_vectored()
            }
        }
    };
}
pub(crate) use write_to_inner;

write_to_inner!(Admitted<S>, S);

impl tonic::transport::server::Connected for Admitted<TcpStream> {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// A connection a door admitted, not yet served: the stream, its peer's
/// address and its place in the gate.
pub struct Accepted {
    pub tcp: TcpStream,
    pub remote: SocketAddr,
    pub ticket: Ticket,
}

/// Accepts on `listener` through `door` in a task of the current runtime,
/// into the returned channel; the task ends when the receiver is dropped.
pub fn accepting(listener: TcpListener, door: Door) -> tokio::sync::mpsc::Receiver<Accepted> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let (tcp, remote, ticket) = tokio::select! {
                _ = tx.closed() => return,
                a = door.accept(&listener) => a,
            };
            let accepted = Accepted {
                tcp,
                remote,
                ticket,
            };
            if tx.send(accepted).await.is_err() {
                return;
            }
        }
    });
    rx
}

/// Admitted plaintext connections of `listener` through `door`, as a
/// stream for tonic; it ends when its receiver is dropped.
pub fn incoming(
    listener: TcpListener,
    door: Door,
) -> impl futures::Stream<Item = Result<Admitted<TcpStream>, std::io::Error>> {
    admitted(accepting(listener, door.clone()), door)
}

/// The connections of `accepted`, held to `door`'s timeouts, as a stream
/// for tonic.
pub fn admitted(
    accepted: tokio::sync::mpsc::Receiver<Accepted>,
    door: Door,
) -> impl futures::Stream<Item = Result<Admitted<TcpStream>, std::io::Error>> {
    use futures::StreamExt;
    tokio_stream::wrappers::ReceiverStream::new(accepted)
        .map(move |a| Ok(door.wrap(a.tcp, a.ticket)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    #[test]
    fn the_open_file_limit_is_raised_to_the_hard_limit_and_never_lowered() {
        let first = raise_open_files(None).expect("limits readable");
        assert!(first.before <= first.now, "{first:?}");
        assert_eq!(first.now, first.hard, "soft raised to hard: {first:?}");
        // Asking for fewer than are allowed changes nothing.
        let again = raise_open_files(Some(16)).expect("limits readable");
        assert_eq!((again.before, again.now), (first.now, first.now));
    }

    fn limits(total: usize, per_ip: usize, reserve: usize) -> Limits {
        Limits {
            max_connections: total,
            max_connections_per_ip: per_ip,
            member_reserve: reserve,
            ..Limits::default()
        }
    }

    #[test]
    fn per_address_and_total_limits_refuse() {
        let gate = Gate::new(limits(3, 2, 0));
        assert!(gate.admit(ip(1)).is_ok());
        assert!(gate.admit(ip(1)).is_ok());
        assert_eq!(gate.admit(ip(1)).unwrap_err(), Reason::PerAddress);
        assert!(gate.admit(ip(2)).is_ok());
        assert_eq!(gate.admit(ip(3)).unwrap_err(), Reason::Total);
        gate.release(ip(1), Pool::General);
        assert!(gate.admit(ip(3)).is_ok());
        assert_eq!(gate.open(), 3);
    }

    #[test]
    fn members_use_the_reserve_and_skip_the_per_address_limit() {
        let gate = Gate::new(limits(2, 1, 2));
        gate.set_members(Arc::new(|a| a == IpAddr::from([127, 0, 0, 9])));
        assert!(gate.admit(ip(1)).is_ok());
        assert!(gate.admit(ip(2)).is_ok());
        assert_eq!(gate.admit(ip(3)).unwrap_err(), Reason::Total);
        assert!(matches!(gate.admit(ip(9)), Ok(Pool::Reserve)));
        assert!(matches!(gate.admit(ip(9)), Ok(Pool::Reserve)));
        assert_eq!(gate.admit(ip(9)).unwrap_err(), Reason::Total);
    }

    #[test]
    fn limits_fit_the_fd_limit() {
        let l = Limits::default().fit_fd_limit(20_000);
        assert_eq!(
            l.max_connections + l.member_reserve,
            20_000 - FD_MARGIN as usize
        );
        let small = Limits::default().fit_fd_limit(1_024);
        assert_eq!(small.max_connections + small.member_reserve, 768);
        assert!(small.max_connections_per_ip <= small.max_connections);
    }

    #[test]
    fn one_address_takes_an_eighth_of_the_handshakes_and_members_always_get_one() {
        let gate = Gate::new(Limits {
            max_handshakes: 16,
            ..Limits::default()
        });
        gate.set_members(Arc::new(|a| a == IpAddr::from([127, 0, 0, 9])));
        let door = Door::new(&gate, "test");
        let from = |last: u8| SocketAddr::new(ip(last), 1);
        let mine: Vec<_> = (0..3).map(|_| door.handshake_slot(from(1))).collect();
        assert!(mine[0].is_some() && mine[1].is_some() && mine[2].is_none());
        let others: Vec<_> = (2..9).map(|h| door.handshake_slot(from(h))).collect();
        assert!(others.iter().all(Option::is_some));
        let more: Vec<_> = (2..9).map(|h| door.handshake_slot(from(h))).collect();
        assert!(more.iter().all(Option::is_some), "16 in all");
        assert!(
            door.handshake_slot(from(10)).is_none(),
            "the cap is reached"
        );
        assert!(door.handshake_slot(from(9)).is_some(), "a member gets one");
        drop(mine);
        assert!(door.handshake_slot(from(1)).is_some());
    }

    #[tokio::test]
    async fn a_silent_connection_fails_its_read() {
        use tokio::io::AsyncReadExt;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let _client = TcpStream::connect(addr).await.unwrap();
        let door = Door::new(
            &Gate::new(Limits {
                first_byte_timeout: Duration::from_millis(100),
                ..Limits::default()
            }),
            "test",
        );
        let (tcp, _, ticket) = door.accept(&listener).await;
        let mut conn = door.wrap(tcp, ticket);
        let mut buf = [0u8; 4];
        let e = conn.read(&mut buf).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        drop(conn);
        assert_eq!(door.gate.open(), 0);
    }

    #[tokio::test]
    async fn with_an_idle_timeout_a_connection_lives_while_it_reads_and_fails_once_silent() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut client = TcpStream::connect(addr).await.unwrap();
        let idle = Duration::from_millis(300);
        let door = Door::new(&Gate::new(Limits::default()), "test").with_idle_timeout(idle);
        let (tcp, _, ticket) = door.accept(&listener).await;
        let mut conn = door.wrap(tcp, ticket);
        let mut buf = [0u8; 1];
        // Ten bytes, one every 100 ms: a second in all, past the idle
        // timeout, each read answered.
        for _ in 0..10 {
            client.write_all(b"x").await.unwrap();
            conn.read_exact(&mut buf).await.unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let e = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf))
            .await
            .expect("a silent connection fails its read")
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    }
}
