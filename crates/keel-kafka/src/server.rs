//! The listener on tokio: Kafka's framing (a 4-byte big-endian length, then
//! that many bytes), one task per connection, requests answered one at a
//! time in order (as Kafka mutes a connection while its request is being
//! handled). A frame over the limit, a truncated one or one that does not
//! decode closes that connection with a warning; nothing else notices.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::Decodable;
use keel_metadata::acl::Principal;
use keel_metadata::scram::ScramMechanism;
use keel_tls::{KafkaClientAuth, Role, TlsContext};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::access::Access;
use crate::budget::{Budget, DEFAULT_MAX_IN_FLIGHT_BYTES};
use crate::dispatch::{answer_with, route, served_by, Asker, Outcome};
use crate::forward::{Client, Forwarder, OnBehalf};
use crate::sasl::{Mechanism, SaslState, Step, SASL_SERVED};
use crate::view::ClusterView;

/// The largest frame read: 4 MiB. Kafka's `socket.request.max.bytes` is
/// 100 MiB because its brokers take produce batches; a Keel listener takes
/// none. What clients send here is small: admin requests are capped at 1
/// MiB (`dispatch::MAX_ADMIN_REQUEST_BYTES`), and the largest honest
/// request, Metadata naming 100,000 topics, is ~3 MB at v12. What a frame
/// may take decoded is bounded apart (see [`crate::budget`]).
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 4 << 20;
/// Kafka's `connections.max.idle.ms` default: a connection that sends
/// nothing (or takes nothing of an answer) for this long is closed.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// The most of a frame read at once.
const READ_CHUNK_BYTES: usize = 64 << 10;

/// Where the listener takes the snapshot each request is answered from.
pub trait ViewSource: Send + Sync + 'static {
    /// The cache as it stands now (cheap: a shared snapshot).
    fn view(&self) -> Arc<ClusterView>;

    /// Who sends admin requests on to the active controller; without one
    /// they are answered NOT_CONTROLLER.
    fn forwarder(&self) -> Option<&dyn Forwarder> {
        None
    }

    /// The cluster's ACLs, super users and SCRAM credentials as they stand
    /// (cheap: a shared snapshot). By default a plaintext cluster's: open.
    fn access(&self) -> Arc<Access> {
        Arc::new(Access::open())
    }

    /// A login named a user with no credential here: the source may read
    /// the credentials again (a user created a moment ago), at its own pace.
    fn credentials_missed(&self) {}
}

/// The forwarder of a listener that has none.
struct NoForwarder;

impl Forwarder for NoForwarder {
    fn forward(
        &self,
        _: crate::forward::AdminCall,
        _: Client,
        _: Duration,
    ) -> crate::forward::BoxFuture<
        '_,
        Result<crate::forward::AdminReply, crate::forward::ForwardError>,
    > {
        Box::pin(async { Err(crate::forward::ForwardError::NotForwarding) })
    }
}

/// How clients authenticate on the listener.
#[derive(Clone, Debug, Default)]
pub enum Security {
    /// No TLS, no identities: every client is `User:ANONYMOUS` (only on a
    /// node started with `--allow-plaintext`).
    #[default]
    Plaintext,
    /// TLS with the node's own certificate and the cluster CA (Kafka's
    /// `SSL` and `SASL_SSL`): a client certificate naming a user of the
    /// cluster authenticates as `User:<name>`; `sasl` lists the SASL
    /// mechanisms offered to clients (a login replaces the certificate's
    /// principal, as in Kafka).
    Tls {
        context: Arc<TlsContext>,
        client_auth: KafkaClientAuth,
        sasl: Vec<Mechanism>,
    },
}

impl Security {
    /// TLS with SCRAM-SHA-256 and SCRAM-SHA-512 offered, and PLAIN when
    /// `plain`.
    pub fn tls(context: Arc<TlsContext>, client_auth: KafkaClientAuth, plain: bool) -> Self {
        let mut sasl: Vec<Mechanism> = ScramMechanism::ALL
            .into_iter()
            .map(Mechanism::Scram)
            .collect();
        if plain {
            sasl.push(Mechanism::Plain);
        }
        Security::Tls {
            context,
            client_auth,
            sasl,
        }
    }

    fn sasl(&self) -> &[Mechanism] {
        match self {
            Security::Plaintext => &[],
            Security::Tls { sasl, .. } => sasl,
        }
    }
}

/// The listener's limits and security.
#[derive(Clone, Debug)]
pub struct ListenerConfig {
    /// A frame whose length prefix claims more (or is negative) closes its
    /// connection before any of it is read.
    pub max_request_bytes: usize,
    /// See [`DEFAULT_IDLE_TIMEOUT`].
    pub idle_timeout: Duration,
    /// The listener-wide budget of bytes that requests in flight hold
    /// (each its [`crate::budget::charge`], from before its body is read
    /// until its answer is written): a request that cannot get its share
    /// waits, up to `idle_timeout`, then its connection closes.
    pub max_in_flight_bytes: usize,
    /// TLS and SASL, or plaintext.
    pub security: Security,
    /// Who may connect, and how long a handshake and the first request may
    /// take (shared with the process's other listeners).
    pub admission: keel_tls::admission::Door,
}

impl Default for ListenerConfig {
    fn default() -> Self {
        Self {
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_in_flight_bytes: DEFAULT_MAX_IN_FLIGHT_BYTES,
            security: Security::Plaintext,
            admission: keel_tls::admission::Door::unlimited("kafka"),
        }
    }
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame length {0} is negative")]
    Negative(i32),
    #[error("frame of {claimed} bytes is over the limit of {max} (--kafka-max-request-bytes)")]
    TooLarge { claimed: usize, max: usize },
    #[error("connection closed {got} bytes into a {expected}-byte frame")]
    Truncated { expected: usize, got: usize },
    #[error("connection closed inside a frame's length prefix")]
    TruncatedPrefix,
    #[error("nothing received for {0:?}")]
    Idle(Duration),
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// Reads one frame's bytes (after the length prefix); `None` at a clean end
/// of stream between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    config: &ListenerConfig,
) -> Result<Option<Bytes>, FrameError> {
    match read_length(r, config).await? {
        None => Ok(None),
        Some(len) => read_body(r, len, config).await.map(Some),
    }
}

/// Reads a frame's length prefix and checks it against the limit; `None`
/// at a clean end of stream between frames.
async fn read_length<R: AsyncRead + Unpin>(
    r: &mut R,
    config: &ListenerConfig,
) -> Result<Option<usize>, FrameError> {
    let idle = config.idle_timeout;
    let mut prefix = [0u8; 4];
    let mut got = 0;
    while got < prefix.len() {
        let read = tokio::time::timeout(idle, r.read(&mut prefix[got..])).await;
        let Ok(read) = read else {
            if got == 0 {
                // Idle between requests: Kafka's connections.max.idle.ms.
                keel_tls::admission::count_refused(
                    config.admission.name(),
                    keel_tls::admission::Reason::Idle,
                );
            }
            return Err(FrameError::Idle(idle));
        };
        let n = match read {
            Ok(n) => n,
            // A TLS client that leaves between frames without saying so
            // (no close_notify, as most Kafka clients do) has just left.
            Err(e) if got == 0 && e.kind() == io::ErrorKind::UnexpectedEof => 0,
            Err(e) => return Err(e.into()),
        };
        if n == 0 {
            return if got == 0 {
                Ok(None)
            } else {
                Err(FrameError::TruncatedPrefix)
            };
        }
        got += n;
    }
    let len = i32::from_be_bytes(prefix);
    let len = usize::try_from(len).map_err(|_| FrameError::Negative(len))?;
    if len > config.max_request_bytes {
        crate::budget::count_refused(crate::budget::RefusedFor::FrameSize);
        return Err(FrameError::TooLarge {
            claimed: len,
            max: config.max_request_bytes,
        });
    }
    Ok(Some(len))
}

/// Reads the `len` bytes of a frame after its length prefix.
async fn read_body<R: AsyncRead + Unpin>(
    r: &mut R,
    len: usize,
    config: &ListenerConfig,
) -> Result<Bytes, FrameError> {
    let idle = config.idle_timeout;
    // All of it at once: the connection holds the frame's share of the
    // budget, and pages no byte has reached yet are not resident. Grown by
    // doubling, an 8 MiB frame took a 16 MiB buffer and a copy.
    let mut buf = BytesMut::with_capacity(len);
    while buf.len() < len {
        let want = (len - buf.len()).min(READ_CHUNK_BYTES);
        // `take`: never read into the next frame.
        let n = tokio::time::timeout(idle, (&mut *r).take(want as u64).read_buf(&mut buf))
            .await
            .map_err(|_| FrameError::Idle(idle))??;
        if n == 0 {
            return Err(FrameError::Truncated {
                expected: len,
                got: buf.len(),
            });
        }
    }
    Ok(buf.freeze())
}

/// Serves Kafka clients on `listener` until `stop` turns true.
pub async fn serve(
    listener: TcpListener,
    source: Arc<dyn ViewSource>,
    config: ListenerConfig,
    mut stop: watch::Receiver<bool>,
) {
    let local = listener.local_addr().ok();
    // A source's views are all a controller's or all a broker's: what the
    // listener serves is fixed by the first; SASL's APIs come with SASL.
    let mut served: Vec<(ApiKey, i16, i16)> = served_by(&source.view()).to_vec();
    if !config.security.sasl().is_empty() {
        served.extend(SASL_SERVED);
    }
    let budget = Budget::new(config.max_in_flight_bytes);
    let listening = Arc::new(Listening {
        source,
        served,
        budget,
        door: config
            .admission
            .clone()
            .with_first_byte_timeout(config.idle_timeout),
        config,
    });
    let config = &listening.config;
    let security = match &config.security {
        Security::Plaintext => "PLAINTEXT".to_string(),
        Security::Tls {
            client_auth, sasl, ..
        } => format!(
            "TLS (ssl.client.auth={client_auth}; SASL: {})",
            sasl.iter().map(|m| m.name()).collect::<Vec<_>>().join(", ")
        ),
    };
    info!(address = ?local, max_request_bytes = config.max_request_bytes, max_in_flight_bytes = listening.budget.total_bytes(), connections_max_idle_ms = config.idle_timeout.as_millis() as u64, %security, "Kafka listener serving");
    let door = &listening.door;
    loop {
        let (stream, peer, ticket) = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            a = door.accept(&listener) => a,
        };
        // A handshake beyond the cap closes its connection at once: the
        // accept loop never waits on one.
        let slot = match config.security {
            Security::Plaintext => None,
            Security::Tls { .. } => match door.handshake_slot(peer) {
                Some(slot) => Some(slot),
                None => continue,
            },
        };
        let admitted = Admission { peer, ticket, slot };
        tokio::spawn(connection(
            stream,
            admitted,
            listening.clone(),
            stop.clone(),
        ));
    }
}

/// What the accept loop hands a connection: its place in the gate, and
/// its handshake slot (TLS).
struct Admission {
    peer: SocketAddr,
    ticket: keel_tls::admission::Ticket,
    slot: Option<keel_tls::admission::HandshakeSlot>,
}

/// What every connection of one listener shares.
struct Listening {
    source: Arc<dyn ViewSource>,
    /// The APIs and versions served (and advertised).
    served: Vec<(ApiKey, i16, i16)>,
    config: ListenerConfig,
    budget: Budget,
    /// Admission, as on every listener of the process (its first-byte
    /// timeout no longer than `connections.max.idle.ms`).
    door: keel_tls::admission::Door,
}

/// One client's connection: the TLS handshake (when the listener speaks
/// TLS), then frames answered until the client leaves, misbehaves or the
/// node stops.
async fn connection(
    tcp: TcpStream,
    admitted: Admission,
    listening: Arc<Listening>,
    mut stop: watch::Receiver<bool>,
) {
    let Admission { peer, ticket, slot } = admitted;
    debug!(%peer, "Kafka connection opened");
    let Listening {
        source,
        served,
        config,
        budget,
        door,
    } = &*listening;
    let session = async {
        match &config.security {
            Security::Plaintext => {
                let mut tcp = door.wrap(tcp, ticket);
                let client = Client::anonymous(Some(peer));
                exchange(&mut tcp, client, source.as_ref(), served, config, budget).await
            }
            Security::Tls {
                context,
                client_auth,
                ..
            } => {
                let acceptor =
                    tokio_rustls::TlsAcceptor::from(context.kafka_server_config(*client_auth));
                // The same handshake as the gRPC listeners': bounded in
                // time and in how many run at once.
                let handshake =
                    keel_tls::transport::accept(door, &acceptor, tcp, peer, context.cluster_id())
                        .await;
                drop(slot);
                let (stream, identity) = handshake.map_err(|e| e.to_string())?;
                let mut stream = door.wrap(stream, ticket);
                let principal = match identity {
                    None => Principal::Anonymous,
                    Some(id) => match id.role {
                        Role::User(name) => Principal::User(name),
                        // A node's key is for the cluster's own links; it
                        // is never a Kafka client (KIP-590: brokers forward,
                        // they do not administer).
                        _ => {
                            warn!(%peer, certificate = %id, listener = "SSL", "refused: a node's certificate used as a Kafka client");
                            return Err(format!("{id} is a node's certificate, not a user's"));
                        }
                    },
                };
                let client = Client {
                    principal,
                    address: Some(peer),
                    listener: "SSL",
                };
                exchange(&mut stream, client, source.as_ref(), served, config, budget).await
            }
        }
    };
    tokio::select! {
        _ = stop.wait_for(|s| *s) => {}
        why = session => match why {
            Ok(()) => debug!(%peer, "Kafka connection closed by the client"),
            Err(e) => warn!(%peer, reason = %e, "closing a Kafka connection"),
        },
    }
}

/// A fresh SCRAM server nonce: 24 random letters and digits.
fn nonce() -> String {
    use rand::distr::{Alphanumeric, SampleString};
    Alphanumeric.sample_string(&mut rand::rng(), 24)
}

/// Takes one login step against the credentials as they stand now, with a
/// fresh SCRAM server nonce.
fn login_step<R>(
    offered: &[Mechanism],
    source: &dyn ViewSource,
    step: impl FnOnce(crate::sasl::Login<'_>) -> R,
) -> R {
    let access = source.access();
    let nonce = nonce();
    step(crate::sasl::Login {
        offered,
        access: &access,
        nonce: &nonce,
    })
}

/// The request/answer loop of one connection; `Err` says why it closes.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    mut client: Client,
    source: &dyn ViewSource,
    served: &[(ApiKey, i16, i16)],
    config: &ListenerConfig,
    budget: &Budget,
) -> Result<(), String> {
    let offered = config.security.sasl();
    let mut sasl = SaslState::Idle;
    // A login begun with SaslHandshake v0: its tokens come raw.
    let mut legacy = false;
    let side = LoginSide {
        served,
        offered,
        source,
        config,
    };
    loop {
        let Some(len) = read_length(stream, config)
            .await
            .map_err(|e| e.to_string())?
        else {
            return Ok(());
        };
        // Held until this request is answered (the end of this turn).
        let _share = budget
            .acquire(crate::budget::charge(len), config.idle_timeout)
            .await
            .map_err(|e| e.to_string())?;
        let request = read_body(stream, len, config)
            .await
            .map_err(|e| e.to_string())?;
        if legacy && matches!(sasl, SaslState::Chosen(_) | SaslState::Scram(_)) {
            answer_raw_token(stream, &request, &mut sasl, &mut client, side).await?;
            continue;
        }
        let api = request
            .get(..2)
            .and_then(|k| ApiKey::try_from(i16::from_be_bytes([k[0], k[1]])).ok());
        let outcome = if matches!(api, Some(ApiKey::SaslHandshake | ApiKey::SaslAuthenticate))
            && !offered.is_empty()
        {
            sasl_turn(
                stream,
                &request,
                api,
                side,
                &mut sasl,
                &mut legacy,
                &mut client,
            )
            .await?
        } else if matches!(sasl, SaslState::Chosen(_) | SaslState::Scram(_)) {
            return Err(format!("{api:?} in the middle of a SASL exchange"));
        } else {
            answer_request(&request, served, source, &client).await
        };
        send_outcome(stream, outcome, &client, config).await?;
    }
}

/// What a SASL login step is answered from: the listener's side.
#[derive(Clone, Copy)]
struct LoginSide<'a> {
    /// The APIs and versions this listener serves.
    served: &'a [(ApiKey, i16, i16)],
    /// The SASL mechanisms this listener offers.
    offered: &'a [Mechanism],
    /// Where the access data (the credentials) comes from.
    source: &'a dyn ViewSource,
    /// The listener's limits (the write timeout).
    config: &'a ListenerConfig,
}

/// Answers one raw token of a login begun with SaslHandshake v0, as a
/// length-prefixed frame; `Err` (after counting a missed credential) when
/// the login step refuses the client.
async fn answer_raw_token<S: AsyncWrite + Unpin>(
    stream: &mut S,
    request: &[u8],
    sasl: &mut SaslState,
    client: &mut Client,
    side: LoginSide<'_>,
) -> Result<(), String> {
    let LoginSide {
        offered,
        source,
        config,
        ..
    } = side;
    let (reply, step) = login_step(offered, source, |login| {
        crate::sasl::raw_token(request, sasl, login)
    });
    if let Err(why) = took(step, client) {
        source.credentials_missed();
        return Err(why);
    }
    let reply = reply.unwrap_or_default();
    let mut frame = BytesMut::with_capacity(4 + reply.len());
    frame.extend_from_slice(&(reply.len() as u32).to_be_bytes());
    frame.extend_from_slice(&reply);
    write_frame(stream, &frame, config).await
}

/// Takes one step of a SASL login (`api`: SaslHandshake or
/// SaslAuthenticate): the outcome to send, or (after the
/// refusal is answered) why the connection closes. Notes whether the
/// tokens that follow come raw (a v0 SaslHandshake).
async fn sasl_turn<S: AsyncWrite + Unpin>(
    stream: &mut S,
    request: &[u8],
    api: Option<ApiKey>,
    side: LoginSide<'_>,
    sasl: &mut SaslState,
    legacy: &mut bool,
    client: &mut Client,
) -> Result<Outcome, String> {
    let LoginSide {
        served,
        offered,
        source,
        config,
    } = side;
    let (outcome, step) = sasl_request(request, served, sasl, offered, source);
    let v0_handshake = api == Some(ApiKey::SaslHandshake) && request.get(2..4) == Some(&[0, 0][..]);
    if step == Step::Continue {
        *legacy = v0_handshake && matches!(sasl, SaslState::Chosen(_));
    }
    if let Err(why) = took(step, client) {
        // The refusal is answered (SASL_AUTHENTICATION_FAILED), then
        // the connection closed.
        if let Outcome::Respond { frame, .. } = &outcome {
            let _ = tokio::time::timeout(config.idle_timeout, stream.write_all(frame)).await;
        }
        return Err(why);
    }
    Ok(outcome)
}

/// Answers a request of a logged-in (or not logging-in) client: from the
/// snapshot, or forwarded to the active controller on the client's behalf.
async fn answer_request(
    request: &[u8],
    served: &[(ApiKey, i16, i16)],
    source: &dyn ViewSource,
    client: &Client,
) -> Outcome {
    let access = source.access();
    let asker = Asker {
        principal: &client.principal,
        access: &access,
    };
    match route(request, served, || source.view(), &asker) {
        Outcome::Forward(f) => {
            let fwd = OnBehalf {
                forwarder: source.forwarder().unwrap_or(&NoForwarder),
                client,
            };
            answer_with(*f, || source.view(), &fwd).await
        }
        other => other,
    }
}

/// Sends an answer to the client; `Err` says why the connection closes
/// instead (a close outcome, a stuck write, or a forwarded answer that is
/// itself a request).
async fn send_outcome<S: AsyncWrite + Unpin>(
    stream: &mut S,
    outcome: Outcome,
    client: &Client,
    config: &ListenerConfig,
) -> Result<(), String> {
    match outcome {
        Outcome::Respond {
            api,
            version,
            frame,
        } => {
            debug!(peer = ?client.address, ?api, version, bytes = frame.len(), "Kafka request answered");
            write_frame(stream, &frame, config).await
        }
        Outcome::Close(reason) => Err(reason),
        Outcome::Forward(f) => Err(format!("{:?}: answered with another admin request", f.api)),
    }
}

/// Writes one answer frame, giving up after the listener's idle timeout.
async fn write_frame<S: AsyncWrite + Unpin>(
    stream: &mut S,
    frame: &[u8],
    config: &ListenerConfig,
) -> Result<(), String> {
    tokio::time::timeout(config.idle_timeout, stream.write_all(frame))
        .await
        .map_err(|_| format!("the answer was not taken for {:?}", config.idle_timeout))?
        .map_err(|e| e.to_string())
}

/// What a login step makes of the connection: a new principal (logged), or
/// the reason to close it (logged and counted as a refused login).
fn took(step: Step, client: &mut Client) -> Result<(), String> {
    match step {
        Step::Continue => Ok(()),
        Step::Authenticated(p) => {
            info!(peer = ?client.address, principal = %p, listener = "SASL_SSL", "Kafka client authenticated");
            client.principal = p;
            client.listener = "SASL_SSL";
            Ok(())
        }
        Step::Failed(why) => {
            warn!(peer = ?client.address, reason = %why, listener = "SASL_SSL", operation = "authenticate", "refused");
            metrics::counter!("keel_kafka_authentication_failures_total").increment(1);
            Err(format!("SASL: {why}"))
        }
    }
}

/// A SaslHandshake or SaslAuthenticate request: its version checked
/// against what is served, its header read, then [`crate::sasl::handle`].
fn sasl_request(
    request: &[u8],
    served: &[(ApiKey, i16, i16)],
    state: &mut SaslState,
    offered: &[Mechanism],
    source: &dyn ViewSource,
) -> (Outcome, Step) {
    let fail = |why: String| (Outcome::Close(why.clone()), Step::Failed(why));
    let Some(fixed) = request.get(..4) else {
        return fail("a request shorter than its header".into());
    };
    let Ok(api) = ApiKey::try_from(i16::from_be_bytes([fixed[0], fixed[1]])) else {
        return fail("an unknown API key".into());
    };
    let version = i16::from_be_bytes([fixed[2], fixed[3]]);
    let ok = served
        .iter()
        .any(|&(k, min, max)| k == api && (min..=max).contains(&version));
    if !ok {
        return fail(format!("{api:?} v{version} is not served"));
    }
    let mut buf = Bytes::copy_from_slice(request);
    let header = match RequestHeader::decode(&mut buf, api.request_header_version(version)) {
        Ok(h) => h,
        Err(e) => {
            return fail(format!(
                "{api:?} v{version}: undecodable request header: {e}"
            ))
        }
    };
    let step = login_step(offered, source, |login| {
        crate::sasl::handle(api, version, header.correlation_id, buf, state, login)
    });
    if let (_, Step::Failed(_)) = &step {
        // Perhaps a user made a moment ago: the next login may find it.
        source.credentials_missed();
    }
    step
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(max: usize) -> ListenerConfig {
        ListenerConfig {
            max_request_bytes: max,
            idle_timeout: Duration::from_secs(5),
            max_in_flight_bytes: DEFAULT_MAX_IN_FLIGHT_BYTES,
            security: Security::Plaintext,
            admission: keel_tls::admission::Door::unlimited("kafka"),
        }
    }

    async fn read_all(input: &[u8], max: usize) -> Vec<Result<Option<Bytes>, String>> {
        let mut r = input;
        let mut out = Vec::new();
        loop {
            let f = read_frame(&mut r, &config(max))
                .await
                .map_err(|e| e.to_string());
            let end = !matches!(f, Ok(Some(_)));
            out.push(f);
            if end {
                return out;
            }
        }
    }

    #[tokio::test]
    async fn frames_are_read_one_at_a_time_and_a_clean_end_is_none() {
        let input = [&[0, 0, 0, 2, 7, 8][..], &[0, 0, 0, 0], &[0, 0, 0, 1, 9]].concat();
        let got = read_all(&input, 10).await;
        assert_eq!(
            got,
            vec![
                Ok(Some(Bytes::from_static(&[7, 8]))),
                Ok(Some(Bytes::new())),
                Ok(Some(Bytes::from_static(&[9]))),
                Ok(None)
            ]
        );
    }

    #[tokio::test]
    async fn a_bad_length_or_a_cut_frame_is_an_error() {
        let over = read_all(&[0, 0, 0, 11], 10).await;
        assert_eq!(
            over,
            vec![Err(
                "frame of 11 bytes is over the limit of 10 (--kafka-max-request-bytes)".into()
            )]
        );
        let negative = read_all(&[0xff, 0xff, 0xff, 0xfe], 10).await;
        assert_eq!(negative, vec![Err("frame length -2 is negative".into())]);
        let cut = read_all(&[0, 0, 0, 5, 1, 2], 10).await;
        assert_eq!(
            cut,
            vec![Err("connection closed 2 bytes into a 5-byte frame".into())]
        );
        let cut_prefix = read_all(&[0, 0], 10).await;
        assert_eq!(
            cut_prefix,
            vec![Err(
                "connection closed inside a frame's length prefix".into()
            )]
        );
    }

    #[tokio::test]
    async fn a_silent_client_times_out() {
        let (mut client, mut server) = tokio::io::duplex(64);
        client.write_all(&[0, 0, 0, 4, 1]).await.unwrap();
        let c = ListenerConfig {
            max_request_bytes: 10,
            idle_timeout: Duration::from_millis(50),
            max_in_flight_bytes: DEFAULT_MAX_IN_FLIGHT_BYTES,
            security: Security::Plaintext,
            admission: keel_tls::admission::Door::unlimited("kafka"),
        };
        let e = read_frame(&mut server, &c).await.unwrap_err();
        assert!(matches!(e, FrameError::Idle(_)), "{e}");
    }
}
