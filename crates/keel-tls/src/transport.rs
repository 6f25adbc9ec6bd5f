//! How a process speaks gRPC: mutual TLS, or plaintext when the operator
//! explicitly allowed it. Servers accept through [`Transport::serve_admitted`]
//! (every connection admitted by a [`Door`]; TLS handshakes run
//! concurrently, each bounded in time, so a slow or silent client holds
//! nothing up); clients connect through
//! [`Transport::channel`], from a chosen local address, checking that the
//! server's certificate names the role they expect.
//!
//! A handler reads the caller's identity with [`peer`]: it comes from the
//! certificate the caller presented in the handshake, never from the
//! request.

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::mpsc;
use tonic::transport::server::Connected;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::admission::{accepting, tune, Accepted, Admitted, Door, HandshakeError, KEEPALIVE};
use crate::certs::SERVER_NAME;
use crate::context::TlsContext;
use crate::identity::{Identity, Role};

/// HTTP/2 PING on every client connection, idle or not, this often...
pub const HTTP2_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// ...and the connection is dropped when a PING is not answered within
/// this: a channel to a peer that vanished fails (and is rebuilt by its
/// owner) instead of waiting on a dead connection.
pub const HTTP2_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Plaintext or mutual TLS.
#[derive(Clone, Debug)]
pub enum Transport {
    /// No encryption, no identities (only with `--allow-plaintext`).
    Plaintext,
    Tls(Arc<TlsContext>),
}

/// What the server knows of a TLS caller (a request extension).
#[derive(Clone, Debug)]
pub struct PeerInfo {
    pub remote: Option<SocketAddr>,
    /// The identity its certificate names (`None`: it names none we
    /// accept; handlers refuse such callers).
    pub identity: Option<Identity>,
}

/// The identity of the caller of `req`: `None` on a plaintext listener, or
/// when its certificate names no identity.
pub fn peer<T>(req: &tonic::Request<T>) -> Option<&Identity> {
    req.extensions()
        .get::<PeerInfo>()
        .and_then(|p| p.identity.as_ref())
}

/// Whether `req` came over TLS at all.
pub fn is_tls<T>(req: &tonic::Request<T>) -> bool {
    req.extensions().get::<PeerInfo>().is_some()
}

/// Who called, as far as an authorization check cares: `None` on a
/// plaintext listener (nothing is known), else the identity the caller's
/// certificate names, if any. Taken once per stream for checks of each
/// of its messages ([`check_caller`]).
pub fn caller<T>(req: &tonic::Request<T>) -> Option<Option<Identity>> {
    is_tls(req).then(|| peer(req).cloned())
}

/// Over TLS, refuses a caller of `what` whose certificate `allowed` does not
/// accept, with a PermissionDenied naming who may call (`who_may`) and who
/// called. A plaintext listener knows no identities and lets everyone in.
///
/// `what` and `who_may` are formatted only for a refusal (no work on the
/// request path otherwise: pass `format_args!`).
#[allow(clippy::result_large_err)]
pub fn authorize<T>(
    req: &tonic::Request<T>,
    what: impl std::fmt::Display,
    who_may: impl std::fmt::Display,
    allowed: impl FnOnce(&Role) -> bool,
) -> Result<(), tonic::Status> {
    check_caller(is_tls(req).then(|| peer(req)), what, who_may, allowed)
}

/// [`authorize`] for a caller taken earlier ([`caller`]; `None`: plaintext).
#[allow(clippy::result_large_err)]
pub fn check_caller(
    caller: Option<Option<&Identity>>,
    what: impl std::fmt::Display,
    who_may: impl std::fmt::Display,
    allowed: impl FnOnce(&Role) -> bool,
) -> Result<(), tonic::Status> {
    let Some(identity) = caller else {
        return Ok(());
    };
    match identity {
        Some(id) if allowed(&id.role) => Ok(()),
        Some(id) => {
            tracing::warn!(caller = %id, request = %what, "refused: the caller's certificate does not allow it");
            Err(tonic::Status::permission_denied(format!(
                "{what} is accepted only from {who_may}; the caller's certificate names {id}"
            )))
        }
        None => Err(tonic::Status::permission_denied(format!(
            "{what} is accepted only from {who_may}; the caller's certificate names no identity"
        ))),
    }
}

/// Which servers a client accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Expect {
    /// Any controller of the cluster.
    Controller,
    /// This controller.
    ControllerId(u64),
    /// This broker.
    Broker(u32),
    /// Any member of the cluster (controller or broker).
    Member,
}

impl Expect {
    fn accepts(self, id: &Identity) -> bool {
        match (self, &id.role) {
            (Expect::Controller, Role::Controller(_)) => true,
            (Expect::ControllerId(want), Role::Controller(got)) => want == *got,
            (Expect::Broker(want), Role::Broker(got)) => want == *got,
            (Expect::Member, Role::Controller(_) | Role::Broker(_)) => true,
            _ => false,
        }
    }
}

/// A server-side TLS connection.
pub struct TlsConn {
    inner: Admitted<tokio_rustls::server::TlsStream<TcpStream>>,
    info: PeerInfo,
}

impl Connected for TlsConn {
    type ConnectInfo = PeerInfo;

    fn connect_info(&self) -> PeerInfo {
        self.info.clone()
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

crate::admission::write_to_inner!(TlsConn);

/// The identity a verified peer certificate chain names: `None` when the
/// peer presented none; an error (the connection is refused) when its
/// certificate names no identity or one of another cluster. The CA signed
/// it (the handshake checked that), but it must also name a member or user
/// of this very cluster.
pub fn peer_identity(
    chain: Option<&[rustls::pki_types::CertificateDer<'_>]>,
    cluster_id: &str,
) -> Result<Option<Identity>, String> {
    match chain.and_then(|c| c.first()).map(|c| Identity::from_der(c)) {
        None => Ok(None),
        Some(Ok(id)) if id.cluster_id == cluster_id => Ok(Some(id)),
        Some(Ok(id)) => Err(format!(
            "the certificate names {id}, of another cluster than {cluster_id:?}"
        )),
        Some(Err(e)) => Err(format!("the certificate names no identity: {e}")),
    }
}

/// The server side of one TLS handshake, as every listener does it
/// (gRPC and Kafka alike): bounded by the door's handshake timeout, the
/// client's certificate (if any) checked to name an identity of
/// `cluster_id` ([`peer_identity`]). A failure is logged and counted in
/// `keel_tls_handshake_failures_total` (a timeout also in the door's
/// `keel_connections_refused_total`).
pub async fn accept(
    door: &Door,
    acceptor: &tokio_rustls::TlsAcceptor,
    tcp: TcpStream,
    remote: SocketAddr,
    cluster_id: &str,
) -> Result<(tokio_rustls::server::TlsStream<TcpStream>, Option<Identity>), HandshakeError> {
    let failed = |e: HandshakeError| {
        metrics::counter!("keel_tls_handshake_failures_total").increment(1);
        tracing::debug!(%remote, error = %e, "TLS handshake failed");
        Err(e)
    };
    let stream = match door.handshake(acceptor.accept(tcp)).await {
        Ok(stream) => stream,
        Err(e) => return failed(e),
    };
    match peer_identity(stream.get_ref().1.peer_certificates(), cluster_id) {
        Ok(identity) => Ok((stream, identity)),
        Err(why) => {
            tracing::warn!(%remote, %why, "refusing a client certificate");
            failed(HandshakeError::Refused(why))
        }
    }
}

/// Admitted TLS connections of `listener` through `door`. The accept loop
/// never waits on a handshake: each runs in its own task, and one beyond
/// the door's cap is closed at once. Failed handshakes are logged and
/// dropped; the stream ends when its receiver is dropped.
pub fn tls_incoming(
    listener: TcpListener,
    ctx: Arc<TlsContext>,
    door: Door,
) -> impl futures::Stream<Item = Result<TlsConn, std::io::Error>> {
    tls_admitted(accepting(listener, door.clone()), ctx, door)
}

/// As [`tls_incoming`], for the connections of `accepted`.
pub fn tls_admitted(
    mut accepted: mpsc::Receiver<Accepted>,
    ctx: Arc<TlsContext>,
    door: Door,
) -> impl futures::Stream<Item = Result<TlsConn, std::io::Error>> {
    let (tx, rx) = mpsc::channel::<Result<TlsConn, std::io::Error>>(64);
    tokio::spawn(async move {
        loop {
            let next = tokio::select! {
                _ = tx.closed() => return,
                a = accepted.recv() => a,
            };
            let Some(Accepted {
                tcp,
                remote,
                ticket,
            }) = next
            else {
                return;
            };
            let Some(slot) = door.handshake_slot(remote) else {
                continue;
            };
            let acceptor = tokio_rustls::TlsAcceptor::from(ctx.server_config());
            let tx = tx.clone();
            let ctx = ctx.clone();
            let door = door.clone();
            tokio::spawn(async move {
                let handshake = accept(&door, &acceptor, tcp, remote, ctx.cluster_id()).await;
                drop(slot);
                let Ok((inner, identity)) = handshake else {
                    return;
                };
                let info = PeerInfo {
                    remote: Some(remote),
                    identity,
                };
                let inner = door.wrap(inner, ticket);
                let _ = tx.send(Ok(TlsConn { inner, info })).await;
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// An endpoint for `addr` (`host:port`), with HTTP/2 keepalive.
pub fn endpoint(addr: &str) -> Result<Endpoint, tonic::transport::Error> {
    let uri = if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    };
    Ok(Endpoint::from_shared(uri)?
        .http2_keep_alive_interval(HTTP2_KEEPALIVE_INTERVAL)
        .keep_alive_timeout(HTTP2_KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true))
}

pub(crate) async fn tcp_connect(uri: &Uri, local: Option<IpAddr>) -> std::io::Result<TcpStream> {
    let host = uri.host().unwrap_or("127.0.0.1");
    let port = uri.port_u16().unwrap_or(80);
    let addrs = tokio::net::lookup_host((host, port)).await?;
    let mut last = None;
    for addr in addrs {
        let sock = if addr.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        if let Some(ip) = local.filter(|ip| ip.is_ipv4() == addr.is_ipv4()) {
            sock.bind(SocketAddr::new(ip, 0))?;
        }
        match sock.connect(addr).await {
            Ok(tcp) => {
                tune(&tcp);
                return Ok(tcp);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other(format!("{host} resolves to nothing"))))
}

/// `ep` as a plaintext client uses it.
fn plain(ep: Endpoint, local: Option<IpAddr>) -> Endpoint {
    ep.tcp_nodelay(true)
        .tcp_keepalive(Some(KEEPALIVE))
        .local_address(local)
}

/// Connects to `uri` over TCP and TLS and checks that the server's
/// certificate names an identity of our cluster that `expect` accepts;
/// returns the stream and the server's certificate (DER).
async fn handshake(
    ctx: &TlsContext,
    uri: &Uri,
    local: Option<IpAddr>,
    expect: Expect,
) -> std::io::Result<(tokio_rustls::client::TlsStream<TcpStream>, Vec<u8>)> {
    // Every error says "connect": callers (ControllerClient, the Jepsen
    // client) tell a request that never left by it, as with plaintext.
    let tcp = tcp_connect(uri, local)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("tcp connect error: {e}")))?;
    tls_over(ctx, tcp, uri, expect).await
}

/// The client side of a TLS handshake over `tcp` (connected to `uri`),
/// as [`handshake`] does it.
pub(crate) async fn tls_over(
    ctx: &TlsContext,
    tcp: TcpStream,
    uri: &Uri,
    expect: Expect,
) -> std::io::Result<(tokio_rustls::client::TlsStream<TcpStream>, Vec<u8>)> {
    let name =
        ServerName::try_from(SERVER_NAME).map_err(|e| std::io::Error::other(e.to_string()))?;
    let tls = tokio_rustls::TlsConnector::from(ctx.client_config())
        .connect(name, tcp)
        .await
        .map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("TLS connect error (handshake with {uri}): {e}"),
            )
        })?;
    let leaf = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.as_ref().to_vec());
    let server = leaf.as_deref().and_then(|c| Identity::from_der(c).ok());
    match (server, leaf) {
        (Some(id), Some(der)) if id.cluster_id == ctx.cluster_id() && expect.accepts(&id) => {
            Ok((tls, der))
        }
        (Some(id), _) => Err(std::io::Error::other(format!(
            "connect refused: the server at {uri} is {id}, not the {expect:?} of cluster {} this client expects",
            ctx.cluster_id()
        ))),
        _ => Err(std::io::Error::other(format!(
            "connect refused: the server at {uri} presented a certificate naming no keel:// identity"
        ))),
    }
}

/// A tonic connector speaking TLS as `ctx` to servers `expect` accepts.
fn connector(
    ctx: Arc<TlsContext>,
    local: Option<IpAddr>,
    expect: Expect,
) -> impl tower::Service<
    Uri,
    Response = TokioIo<tokio_rustls::client::TlsStream<TcpStream>>,
    Error = std::io::Error,
    Future = impl Send + 'static,
> + Clone
       + Send
       + 'static {
    tower::service_fn(move |uri: Uri| {
        let ctx = ctx.clone();
        async move {
            let (tls, _) = handshake(&ctx, &uri, local, expect).await?;
            Ok::<_, std::io::Error>(TokioIo::new(tls))
        }
    })
}

impl Transport {
    /// This process's own identity, when it speaks TLS.
    pub fn identity(&self) -> Option<Identity> {
        match self {
            Transport::Plaintext => None,
            Transport::Tls(ctx) => Some(ctx.identity()),
        }
    }

    pub fn is_tls(&self) -> bool {
        matches!(self, Transport::Tls(_))
    }

    /// A channel over `ep` (connected lazily), leaving from `local` when
    /// given, to a server whose certificate `expect` accepts.
    pub fn channel(&self, ep: Endpoint, local: Option<IpAddr>, expect: Expect) -> Channel {
        match self {
            Transport::Plaintext => plain(ep, local).connect_lazy(),
            Transport::Tls(ctx) => {
                ep.connect_with_connector_lazy(connector(ctx.clone(), local, expect))
            }
        }
    }

    /// As [`Transport::channel`], connected now: `Err` when the connection
    /// (or the handshake, or the server's identity) fails.
    pub async fn connect(
        &self,
        ep: Endpoint,
        local: Option<IpAddr>,
        expect: Expect,
    ) -> Result<Channel, tonic::transport::Error> {
        match self {
            Transport::Plaintext => plain(ep, local).connect().await,
            Transport::Tls(ctx) => {
                ep.connect_with_connector(connector(ctx.clone(), local, expect))
                    .await
            }
        }
    }

    /// The certificate (DER) the TLS server at `addr` presents to a new
    /// connection now, after checking it as [`Transport::channel`] does.
    /// `None` for a plaintext transport.
    pub async fn server_certificate(
        &self,
        addr: &str,
        expect: Expect,
    ) -> Option<std::io::Result<Vec<u8>>> {
        let Transport::Tls(ctx) = self else {
            return None;
        };
        let uri: Uri = match endpoint(addr) {
            Ok(ep) => ep.uri().clone(),
            Err(e) => return Some(Err(std::io::Error::other(e.to_string()))),
        };
        Some(handshake(ctx, &uri, None, expect).await.map(|(_, der)| der))
    }
    /// Serves `router` on `listener` until `shutdown` completes, with no
    /// connection limits (tools and tests; nodes use
    /// [`Transport::serve_admitted`]).
    pub async fn serve<F>(
        &self,
        router: tonic::transport::server::Router,
        listener: TcpListener,
        shutdown: F,
    ) -> Result<(), tonic::transport::Error>
    where
        F: std::future::Future<Output = ()>,
    {
        self.serve_admitted(router, listener, Door::unlimited("grpc"), shutdown)
            .await
    }

    /// Serves `router` on `listener` until `shutdown` completes, every
    /// connection admitted by `door`.
    pub async fn serve_admitted<F>(
        &self,
        router: tonic::transport::server::Router,
        listener: TcpListener,
        door: Door,
        shutdown: F,
    ) -> Result<(), tonic::transport::Error>
    where
        F: std::future::Future<Output = ()>,
    {
        let accepted = accepting(listener, door.clone());
        self.serve_accepted(router, accepted, door, shutdown).await
    }

    /// Serves `router` on the connections `accepted` yields (admitted by
    /// `door`, which also bounds their handshakes and first bytes) until
    /// `shutdown` completes.
    pub async fn serve_accepted<F>(
        &self,
        router: tonic::transport::server::Router,
        accepted: mpsc::Receiver<Accepted>,
        door: Door,
        shutdown: F,
    ) -> Result<(), tonic::transport::Error>
    where
        F: std::future::Future<Output = ()>,
    {
        match self {
            Transport::Plaintext => {
                router
                    .serve_with_incoming_shutdown(
                        crate::admission::admitted(accepted, door),
                        shutdown,
                    )
                    .await
            }
            Transport::Tls(ctx) => {
                router
                    .serve_with_incoming_shutdown(
                        tls_admitted(accepted, ctx.clone(), door),
                        shutdown,
                    )
                    .await
            }
        }
    }
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Transport::Plaintext => f.write_str("plaintext"),
            Transport::Tls(ctx) => write!(f, "mutual TLS as {}", ctx.identity()),
        }
    }
}
