//! A lane of its own for a few small, urgent requests: a server that
//! answers them on a thread and runtime of its own, on the same port as
//! everything else.
//!
//! A controller's lease and pre-vote answers must not wait behind the
//! work of its main runtime (decoding a 100,000-record append, replaying
//! it, encoding a large answer): a late lease answer costs the leader its
//! leadership. tonic serves every request of a connection on the runtime
//! that accepted the connection, so the choice of runtime is made per
//! connection, when it is accepted:
//!
//! - a lane client ([`Transport::lane_channel`]) opens each connection
//!   with [`HELLO`], in clear, before TLS or HTTP/2, and waits for the
//!   one-byte [`ACK`];
//! - the server ([`Transport::serve_with_lane`]) accepts on the lane's
//!   thread, peeks at each connection's first bytes (nothing is consumed
//!   unless they are the hello: an HTTP/2 preface starts with `P`, a TLS
//!   client hello with `0x16`), answers a hello with the ack and serves
//!   that connection there, and hands every other connection to the main
//!   runtime, where it is served as before.
//!
//! Both kinds pass the same [`Door`] (limits, handshake and first-byte
//! timeouts) and the same TLS: the lane changes where a connection is
//! served, not who may connect or what they may ask. A server without a
//! lane (an older release) refuses the hello as a bad preface or a bad TLS
//! record and closes; the lane client then dials an ordinary connection,
//! so the two releases still talk.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tonic::transport::server::Router;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::admission::{count_refused, Accepted, Door, Reason, Ticket};
use crate::transport::{tcp_connect, tls_over, Expect, Transport};

/// What a lane client sends first on each connection.
pub const HELLO: &[u8] = b"KEEL-LANE/1\n";
/// The server's one-byte answer: this connection is served on the lane.
pub const ACK: u8 = b'+';

/// Says [`HELLO`] on `tcp` and reads the answer: `true` when the server
/// acknowledged (the connection is on its lane), `false` when it answered
/// anything else or closed (it has no lane).
async fn say_hello(tcp: &mut TcpStream) -> std::io::Result<bool> {
    tcp.write_all(HELLO).await?;
    let mut answer = [0u8; 1];
    let n = tcp.read(&mut answer).await?;
    Ok(n == 1 && answer[0] == ACK)
}

/// A TCP connection to `uri` on its lane, or an ordinary one when the
/// server has none (the first connection is then closed and a second one
/// dialed).
async fn lane_tcp(uri: &Uri, local: Option<IpAddr>) -> std::io::Result<TcpStream> {
    let mut tcp = tcp_connect(uri, local)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("tcp connect error: {e}")))?;
    match say_hello(&mut tcp).await {
        Ok(true) => Ok(tcp),
        answer => {
            tracing::debug!(%uri, ?answer, "the server has no lane; dialing an ordinary connection");
            drop(tcp);
            tcp_connect(uri, local)
                .await
                .map_err(|e| std::io::Error::new(e.kind(), format!("tcp connect error: {e}")))
        }
    }
}

impl Transport {
    /// As [`Transport::channel`], over connections that ask for the
    /// server's lane (module doc). The endpoint's connect timeout covers
    /// the hello and its answer.
    pub fn lane_channel(&self, ep: Endpoint, local: Option<IpAddr>, expect: Expect) -> Channel {
        match self {
            Transport::Plaintext => {
                ep.connect_with_connector_lazy(tower::service_fn(move |uri: Uri| async move {
                    Ok::<_, std::io::Error>(TokioIo::new(lane_tcp(&uri, local).await?))
                }))
            }
            Transport::Tls(ctx) => {
                let ctx = ctx.clone();
                ep.connect_with_connector_lazy(tower::service_fn(move |uri: Uri| {
                    let ctx = ctx.clone();
                    async move {
                        let tcp = lane_tcp(&uri, local).await?;
                        let (tls, _) = tls_over(&ctx, tcp, &uri, expect).await?;
                        Ok::<_, std::io::Error>(TokioIo::new(tls))
                    }
                }))
            }
        }
    }

    /// Serves `router` on `listener` on the current runtime, except the
    /// connections that ask for the lane, which `lane_router` serves on a
    /// thread named `thread_name` with a runtime of its own (module doc).
    /// Both stop when `shutdown` turns true; the returned task ends once
    /// both have stopped (and the listener is closed). `Err` when the
    /// lane's thread or runtime cannot be started.
    pub fn serve_with_lane(
        &self,
        router: Router,
        lane_router: Router,
        listener: TcpListener,
        door: Door,
        thread_name: String,
        shutdown: watch::Receiver<bool>,
    ) -> std::io::Result<JoinHandle<Result<(), tonic::transport::Error>>> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let listener = listener.into_std()?;
        let (to_main, mut for_main) =
            mpsc::channel::<(std::net::TcpStream, SocketAddr, Ticket)>(64);
        let (lane_done, lane_stopped) = oneshot::channel::<()>();
        let (transport, lane_door, lane_stop) = (self.clone(), door.clone(), shutdown.clone());
        std::thread::Builder::new()
            .name(thread_name)
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::error!(error = %e, "the lane cannot take the listener");
                            return;
                        }
                    };
                    let (to_lane, for_lane) = mpsc::channel(64);
                    let router_task = tokio::spawn(route(
                        listener,
                        lane_door.clone(),
                        transport.is_tls(),
                        to_lane,
                        to_main,
                        lane_stop.clone(),
                    ));
                    let mut stop = lane_stop;
                    let served = transport
                        .serve_accepted(lane_router, for_lane, lane_door, async move {
                            let _ = stop.wait_for(|v| *v).await;
                        })
                        .await;
                    router_task.abort();
                    let _ = router_task.await;
                    if let Err(e) = served {
                        tracing::warn!(error = %e, "the lane's server stopped");
                    }
                });
                let _ = lane_done.send(());
            })?;
        let transport = self.clone();
        Ok(tokio::spawn(async move {
            // Connections come from the lane's runtime; each is registered
            // with this one before it is served.
            let (to_server, accepted) = mpsc::channel(64);
            let adopt = tokio::spawn(async move {
                while let Some((tcp, remote, ticket)) = for_main.recv().await {
                    match TcpStream::from_std(tcp) {
                        Ok(tcp) => {
                            let a = Accepted {
                                tcp,
                                remote,
                                ticket,
                            };
                            if to_server.send(a).await.is_err() {
                                return;
                            }
                        }
                        Err(e) => tracing::warn!(%remote, error = %e, "dropping a connection"),
                    }
                }
            });
            let mut stop = shutdown;
            let served = transport
                .serve_accepted(router, accepted, door, async move {
                    let _ = stop.wait_for(|v| *v).await;
                })
                .await;
            adopt.abort();
            let _ = lane_stopped.await;
            served
        }))
    }
}

/// Accepts on `listener` through `door` until `stop` turns true, and
/// sends each connection to the lane or, as a `std` stream any runtime
/// can adopt, to the main server.
///
/// Waiting for a connection's first bytes is held to what serving it
/// would hold it to, so the lane opens no new way to tie up the
/// listener: with TLS the wait takes a handshake slot (none free: closed
/// at once) and lasts at most the handshake timeout, counted as one when
/// it passes; without, it lasts the first-byte timeout, counted as idle.
async fn route(
    listener: TcpListener,
    door: Door,
    tls: bool,
    to_lane: mpsc::Sender<Accepted>,
    to_main: mpsc::Sender<(std::net::TcpStream, SocketAddr, Ticket)>,
    mut stop: watch::Receiver<bool>,
) {
    let (timeout, silence) = if tls {
        (door.limits().handshake_timeout, Reason::HandshakeTimeout)
    } else {
        (door.first_byte_timeout(), Reason::Idle)
    };
    loop {
        let (tcp, remote, ticket) = tokio::select! {
            _ = stop.wait_for(|v| *v) => return,
            a = door.accept(&listener) => a,
        };
        let slot = if tls {
            match door.handshake_slot(remote) {
                Some(slot) => Some(slot),
                None => continue,
            }
        } else {
            None
        };
        let (to_lane, to_main) = (to_lane.clone(), to_main.clone());
        let name = door.name();
        tokio::spawn(async move {
            let mut tcp = tcp;
            let opened = opening(&tcp, timeout).await;
            drop(slot);
            match opened {
                Opening::Lane => {
                    if tcp.read_exact(&mut [0u8; HELLO.len()]).await.is_ok()
                        && tcp.write_all(&[ACK]).await.is_ok()
                    {
                        let a = Accepted {
                            tcp,
                            remote,
                            ticket,
                        };
                        let _ = to_lane.send(a).await;
                    }
                }
                Opening::Other => {
                    if let Ok(tcp) = tcp.into_std() {
                        let _ = to_main.send((tcp, remote, ticket)).await;
                    }
                }
                Opening::Silent => {
                    count_refused(name, silence);
                    tracing::debug!(%remote, "closing a connection that sent nothing");
                }
            }
        });
    }
}

/// How a connection opens.
#[derive(Debug, PartialEq, Eq)]
enum Opening {
    /// With [`HELLO`].
    Lane,
    /// With anything else (or it closed).
    Other,
    /// With nothing, for the whole first-byte timeout.
    Silent,
}

/// How `tcp` opens, from its first bytes (peeked, not read): decided as
/// soon as one differs from [`HELLO`], or they all match, or it closes;
/// [`Opening::Silent`] after `timeout` without them.
async fn opening(tcp: &TcpStream, timeout: Duration) -> Opening {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut buf = [0u8; HELLO.len()];
    loop {
        let n = match tokio::time::timeout_at(deadline, tcp.peek(&mut buf)).await {
            Ok(Ok(n)) => n,
            Ok(Err(_)) => return Opening::Other,
            Err(_) => return Opening::Silent,
        };
        if n == 0 || buf[..n] != HELLO[..n] {
            return Opening::Other;
        }
        if n == HELLO.len() {
            return Opening::Lane;
        }
        // A hello split across segments: peek returns the same prefix at
        // once until the rest arrives.
        if tokio::time::timeout_at(deadline, tokio::time::sleep(Duration::from_millis(1)))
            .await
            .is_err()
        {
            return Opening::Silent;
        }
    }
}
