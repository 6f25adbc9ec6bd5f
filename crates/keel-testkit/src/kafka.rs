//! One Kafka connection to a broker's (or controller's) Kafka listener, for
//! the lab: the bench and tests speak Kafka's wire protocol through it with
//! the `kafka-protocol` crate's codecs.
//!
//! A connection is secured as Kafka's `security.protocol` says
//! ([`KafkaSecurity`]): PLAINTEXT, SSL (TLS with a rustls client
//! configuration, e.g. `ctx.kafka_client_config()` of the kit's admin
//! user), or SASL_SSL (TLS, then a SCRAM login: SaslHandshake v1, then
//! SaslAuthenticate v2 carrying the client-first and client-final
//! messages, the server's signature checked). The server's certificate is
//! checked for [`keel_tls::certs::SERVER_NAME`], the name every node's
//! certificate carries, and, when a [`Dial`] names a cluster, for naming a
//! member of it, as Keel's own clients check. Opening (TCP, TLS, login) and
//! every answer are bounded by [`Timeouts`].
//!
//! One connection for every lab user: the tests, the bench and the fault
//! harness's Kafka workload and intruder.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, RequestHeader, ResponseHeader, SaslAuthenticateRequest, SaslAuthenticateResponse,
    SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use keel_metadata::scram::{ScramClient, ScramMechanism};
use rand::Rng;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// SaslHandshake v1: the tokens then travel in SaslAuthenticate requests
/// (v0's raw token frames are not served).
const V_SASL_HANDSHAKE: i16 = 1;
/// SaslAuthenticate v2 (flexible).
const V_SASL_AUTHENTICATE: i16 = 2;
/// Characters of the client's SCRAM nonce (alphanumeric, fresh per login).
const SCRAM_NONCE_LEN: usize = 24;
/// The largest answer read: a Metadata answer over a large image is a few
/// megabytes.
const MAX_ANSWER_BYTES: usize = 256 << 20;
/// Longest a connection's close (TLS close_notify) may take.
const CLOSE_TIMEOUT: Duration = Duration::from_millis(100);
/// The client id every request carries.
const CLIENT_ID: &str = "keel-testkit";

/// A SCRAM login: who, with which mechanism and password.
#[derive(Clone)]
pub struct ScramLogin {
    pub mechanism: ScramMechanism,
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for ScramLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The password stays out of logs.
        f.debug_struct("ScramLogin")
            .field("mechanism", &self.mechanism)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// How a connection is secured, as Kafka's `security.protocol` names it.
#[derive(Clone)]
pub enum KafkaSecurity {
    /// No TLS, no login (a TLS listener refuses it).
    Plaintext,
    /// TLS with this configuration (a client certificate in it, if any,
    /// is the client's identity). No ALPN: a Kafka listener offers none.
    Ssl(Arc<rustls::ClientConfig>),
    /// TLS with this configuration, then a SCRAM login: the client is
    /// then the login's user, whatever certificate it presented.
    SaslSsl {
        tls: Arc<rustls::ClientConfig>,
        login: ScramLogin,
    },
}

impl std::fmt::Debug for KafkaSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::SaslSsl { login, .. } => write!(f, "SASL_SSL({login:?})"),
            other => f.write_str(other.protocol()),
        }
    }
}

impl KafkaSecurity {
    /// SSL as the identity of a TLS transport (the kit's admin user for
    /// `cluster.transport()`), plaintext for a plaintext one.
    pub fn from_transport(transport: &keel_tls::Transport) -> Self {
        match transport {
            keel_tls::Transport::Plaintext => Self::Plaintext,
            keel_tls::Transport::Tls(ctx) => Self::Ssl(ctx.kafka_client_config()),
        }
    }

    /// TLS trusting only the CA certificates in PEM file `ca`, presenting
    /// no certificate (for SASL_SSL against `--kafka-ssl-client-auth
    /// requested`).
    pub fn trusting(ca: &std::path::Path) -> anyhow::Result<Arc<rustls::ClientConfig>> {
        use rustls::pki_types::pem::PemObject;
        let pem = std::fs::read(ca).with_context(|| format!("read {}", ca.display()))?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
            roots.add(cert.with_context(|| format!("{}", ca.display()))?)?;
        }
        if roots.is_empty() {
            bail!("{}: no CA certificate", ca.display());
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
        Ok(Arc::new(config))
    }

    /// The same, with TLS session resumption off: every connection then
    /// pays for a full handshake, as a new client process does.
    pub fn without_resumption(&self) -> Self {
        let full = |c: &Arc<rustls::ClientConfig>| {
            let mut c = (**c).clone();
            c.resumption = rustls::client::Resumption::disabled();
            Arc::new(c)
        };
        match self {
            Self::Plaintext => Self::Plaintext,
            Self::Ssl(c) => Self::Ssl(full(c)),
            Self::SaslSsl { tls, login } => Self::SaslSsl {
                tls: full(tls),
                login: login.clone(),
            },
        }
    }

    /// Kafka's name of it (`security.protocol`).
    pub fn protocol(&self) -> &'static str {
        match self {
            Self::Plaintext => "PLAINTEXT",
            Self::Ssl(_) => "SSL",
            Self::SaslSsl { .. } => "SASL_SSL",
        }
    }
}

/// How long a connection waits.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// TCP connect, TLS handshake and login, together.
    pub open: Duration,
    /// Each request's answer, from its first byte written.
    pub answer: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            open: Duration::from_secs(10),
            answer: Duration::from_secs(90),
        }
    }
}

/// Where and how a connection is opened.
#[derive(Clone, Debug, Default)]
pub struct Dial {
    pub timeouts: Timeouts,
    /// The local address to connect from (`None`: the system's choice);
    /// the fault harness's clients have an address of their own.
    pub bind: Option<IpAddr>,
    /// The cluster whose member (controller or broker) the server's
    /// certificate must name (`None`: the CA's signature for the server
    /// name is all that is checked).
    pub cluster_id: Option<String>,
}

/// A SaslAuthenticate answered with an error: the login was refused.
#[derive(Debug, thiserror::Error)]
#[error("SaslAuthenticate: {name} ({code}): {message}")]
pub struct SaslRefusal {
    /// Kafka's error code (58: SASL_AUTHENTICATION_FAILED).
    pub code: i16,
    /// Kafka's name of the code.
    pub name: String,
    /// The server's error message.
    pub message: String,
}

/// A connection's bytes: plain TCP, or TLS over it.
trait KafkaIo: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> KafkaIo for T {}

/// One connection; requests are answered in order, one at a time.
pub struct KafkaConn {
    stream: Box<dyn KafkaIo>,
    /// The correlation id of the next request.
    next_id: i32,
    /// Bound on each answer.
    answer_timeout: Duration,
}

impl KafkaConn {
    /// Connects to `addr`, secured as `security` says, with the default
    /// [`Timeouts`].
    pub async fn open(addr: &str, security: &KafkaSecurity) -> anyhow::Result<Self> {
        Self::open_with(addr, security, &Dial::default()).await
    }

    /// Connects to `addr` as `dial` says: TCP, the TLS handshake and the
    /// login all within `dial.timeouts.open`. An error means no request was
    /// written.
    pub async fn open_with(
        addr: &str,
        security: &KafkaSecurity,
        dial: &Dial,
    ) -> anyhow::Result<Self> {
        let open = async {
            let tcp = connect(addr, dial.bind).await?;
            tcp.set_nodelay(true)?;
            let stream: Box<dyn KafkaIo> = match security {
                KafkaSecurity::Plaintext => Box::new(tcp),
                KafkaSecurity::Ssl(tls) | KafkaSecurity::SaslSsl { tls, .. } => Box::new(
                    handshake(tls, tcp, dial.cluster_id.as_deref())
                        .await
                        .with_context(|| addr.to_string())?,
                ),
            };
            let mut conn = KafkaConn {
                stream,
                next_id: 1,
                answer_timeout: dial.timeouts.answer,
            };
            if let KafkaSecurity::SaslSsl { login, .. } = security {
                conn.login(login)
                    .await
                    .with_context(|| format!("{addr}: SASL login as {}", login.user))?;
            }
            Ok::<_, anyhow::Error>(conn)
        };
        tokio::time::timeout(dial.timeouts.open, open)
            .await
            .map_err(|_| {
                anyhow!(
                    "{addr}: {} connection timed out: not open (TCP, TLS handshake, login) within {:?}",
                    security.protocol(),
                    dial.timeouts.open
                )
            })?
    }

    /// A connection over any stream already open (a test's in-memory
    /// listener), each answer bounded by `answer_timeout`.
    pub fn over(
        stream: impl AsyncRead + AsyncWrite + Unpin + Send + 'static,
        answer_timeout: Duration,
    ) -> Self {
        KafkaConn {
            stream: Box::new(stream),
            next_id: 1,
            answer_timeout,
        }
    }

    /// A SCRAM login: SaslHandshake, then two SaslAuthenticate round trips
    /// (client-first, client-final), checking the server's signature. A
    /// refusal (SASL_AUTHENTICATION_FAILED, after which the listener
    /// closes) is an error naming the code.
    pub async fn login(&mut self, login: &ScramLogin) -> anyhow::Result<()> {
        let mut scram = ScramClient::new(
            login.mechanism,
            &login.user,
            &login.password,
            &scram_nonce(),
        );
        let hs: SaslHandshakeResponse = self
            .call(
                ApiKey::SaslHandshake,
                V_SASL_HANDSHAKE,
                &SaslHandshakeRequest::default()
                    .with_mechanism(StrBytes::from_static_str(login.mechanism.name())),
            )
            .await?;
        if hs.error_code != 0 {
            let offered: Vec<String> = hs.mechanisms.iter().map(|m| m.to_string()).collect();
            bail!(
                "SaslHandshake: error {}: {} not offered (the listener offers {offered:?})",
                hs.error_code,
                login.mechanism.name()
            );
        }
        let server_first = self.authenticate(scram.client_first()).await?;
        let client_final = scram
            .server_first(&server_first)
            .map_err(|e| anyhow!("server-first: {e}"))?;
        let server_final = self.authenticate(client_final).await?;
        scram
            .server_final(&server_final)
            .map_err(|e| anyhow!("server-final: {e}"))
    }

    /// One SaslAuthenticate round trip: `token` out, the server's in. A
    /// refusal is a [`SaslRefusal`] (downcast the error to tell it from a
    /// broken connection).
    pub async fn authenticate(&mut self, token: Vec<u8>) -> anyhow::Result<Vec<u8>> {
        let r: SaslAuthenticateResponse = self
            .call(
                ApiKey::SaslAuthenticate,
                V_SASL_AUTHENTICATE,
                &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token)),
            )
            .await?;
        if r.error_code != 0 {
            let name = kafka_protocol::ResponseError::try_from_code(r.error_code)
                .map_or_else(|| format!("error {}", r.error_code), |e| format!("{e:?}"));
            return Err(SaslRefusal {
                code: r.error_code,
                name,
                message: r.error_message.as_deref().unwrap_or_default().to_string(),
            }
            .into());
        }
        Ok(r.auth_bytes.to_vec())
    }

    /// Sends one request and decodes its answer.
    pub async fn call<Q: Encodable, R: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        body: &Q,
    ) -> anyhow::Result<R> {
        Ok(self.call_sized(api, version, body).await?.0)
    }

    /// [`KafkaConn::call`], also answering the answer's size in bytes
    /// (its frame without the length).
    pub async fn call_sized<Q: Encodable, R: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        body: &Q,
    ) -> anyhow::Result<(R, usize)> {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let buf = frame(api, version, id, body)?;
        let exchange = async {
            self.stream.write_all(&buf).await?;
            // TLS holds records back until flushed.
            self.stream.flush().await?;
            let len = self.stream.read_i32().await?;
            let len = usize::try_from(len)
                .ok()
                .filter(|l| *l <= MAX_ANSWER_BYTES)
                .ok_or_else(|| std::io::Error::other(format!("answer length {len}")))?;
            let mut answer = vec![0u8; len];
            self.stream.read_exact(&mut answer).await?;
            Ok::<_, std::io::Error>(answer)
        };
        let answer = tokio::time::timeout(self.answer_timeout, exchange)
            .await
            .map_err(|_| anyhow!("no answer to {api:?} within {:?}", self.answer_timeout))?
            .with_context(|| format!("{api:?}"))?;
        let size = answer.len();
        Ok((decode_answer(Bytes::from(answer), api, version, id)?, size))
    }

    /// Closes the connection the polite way (over TLS a close_notify
    /// first). Bounded; a broken connection is simply dropped.
    pub async fn close(mut self) {
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, self.stream.shutdown()).await;
    }
}

/// TCP to `addr` (`host:port`), from `bind` when given.
async fn connect(addr: &str, bind: Option<IpAddr>) -> anyhow::Result<TcpStream> {
    let Some(bind) = bind else {
        return TcpStream::connect(addr)
            .await
            .with_context(|| format!("connect to {addr}"));
    };
    let to: SocketAddr = addr
        .parse()
        .with_context(|| format!("{addr} is not an ip:port"))?;
    let socket = if to.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket
        .bind(SocketAddr::new(bind, 0))
        .with_context(|| format!("bind {bind}"))?;
    socket
        .connect(to)
        .await
        .with_context(|| format!("connect to {addr} from {bind}"))
}

/// The TLS handshake over `tcp`, for [`keel_tls::certs::SERVER_NAME`];
/// with `cluster_id`, the server's certificate must also name a member of
/// that cluster.
async fn handshake(
    config: &Arc<rustls::ClientConfig>,
    tcp: TcpStream,
    cluster_id: Option<&str>,
) -> anyhow::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let name = ServerName::try_from(keel_tls::certs::SERVER_NAME)?;
    let tls = tokio_rustls::TlsConnector::from(config.clone())
        .connect(name, tcp)
        .await
        .context("TLS handshake")?;
    if let Some(cluster) = cluster_id {
        let server = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| keel_tls::Identity::from_der(c.as_ref()));
        match server {
            Some(Ok(id))
                if id.cluster_id == cluster
                    && matches!(
                        id.role,
                        keel_tls::Role::Controller(_) | keel_tls::Role::Broker(_)
                    ) => {}
            Some(Ok(id)) => {
                bail!("TLS handshake: the server is {id}, not a member of cluster {cluster}")
            }
            Some(Err(e)) => bail!("TLS handshake: the server's certificate names no identity: {e}"),
            None => bail!("TLS handshake: the server presented no certificate"),
        }
    }
    Ok(tls)
}

/// A fresh client nonce for SCRAM.
fn scram_nonce() -> String {
    rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(SCRAM_NONCE_LEN)
        .map(char::from)
        .collect()
}

/// One request's frame: length, header (correlation id `id`), body.
pub fn frame<Q: Encodable>(
    api: ApiKey,
    version: i16,
    id: i32,
    body: &Q,
) -> anyhow::Result<BytesMut> {
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(id)
        .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)))
        .encode(&mut buf, api.request_header_version(version))
        .and_then(|()| body.encode(&mut buf, version))
        .with_context(|| format!("encode {api:?} v{version}"))?;
    set_length(&mut buf).ok_or_else(|| anyhow!("{api:?} request too large"))?;
    Ok(buf)
}

/// Writes a frame's length (what follows its first four bytes) into those
/// four bytes; `None` when it does not fit.
fn set_length(buf: &mut BytesMut) -> Option<()> {
    let len = i32::try_from(buf.len() - 4).ok()?;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    Some(())
}

/// The body of answer `b` (a frame without its length) to request `id`.
pub fn decode_answer<R: Decodable>(
    mut b: Bytes,
    api: ApiKey,
    version: i16,
    id: i32,
) -> anyhow::Result<R> {
    let h = ResponseHeader::decode(&mut b, api.response_header_version(version))
        .with_context(|| format!("{api:?} answer header"))?;
    if h.correlation_id != id {
        bail!("answer {} to request {id}", h.correlation_id);
    }
    let r = R::decode(&mut b, version).with_context(|| format!("{api:?} v{version} answer"))?;
    if !b.is_empty() {
        bail!(
            "{api:?} v{version}: {} bytes after the answer's body",
            b.len()
        );
    }
    Ok(r)
}

/// A listener's reading of request `b` (a frame without its length): its
/// header and the body's bytes.
pub fn decode_request(mut b: Bytes) -> anyhow::Result<(RequestHeader, Bytes)> {
    if b.len() < 4 {
        bail!("a request of {} bytes", b.len());
    }
    let key = i16::from_be_bytes([b[0], b[1]]);
    let api = ApiKey::try_from(key).map_err(|_| anyhow!("unknown api key {key}"))?;
    let version = i16::from_be_bytes([b[2], b[3]]);
    let h = RequestHeader::decode(&mut b, api.request_header_version(version))
        .with_context(|| format!("{api:?} request header"))?;
    Ok((h, b))
}

/// The frame of answer `r` to request `h`, as a listener writes it:
/// length, header, body.
pub fn answer_frame<R: Encodable>(h: &RequestHeader, r: &R) -> anyhow::Result<BytesMut> {
    let key = h.request_api_key;
    let api = ApiKey::try_from(key).map_err(|_| anyhow!("unknown api key {key}"))?;
    let version = h.request_api_version;
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    ResponseHeader::default()
        .with_correlation_id(h.correlation_id)
        .encode(&mut buf, api.response_header_version(version))
        .and_then(|()| r.encode(&mut buf, version))
        .with_context(|| format!("encode {api:?} v{version} answer"))?;
    set_length(&mut buf).ok_or_else(|| anyhow!("{api:?} answer too large"))?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{MetadataRequest, MetadataResponse};
    use kafka_protocol::ResponseError;
    use keel_metadata::scram::{ScramCredential, ScramServer};

    /// A request frame as a listener reads it: header and body bytes.
    fn split(mut frame: Bytes) -> (RequestHeader, Bytes) {
        let len = i32::from_be_bytes(frame[..4].try_into().unwrap());
        assert_eq!(len as usize, frame.len() - 4, "the length prefix");
        decode_request(frame.split_off(4)).unwrap()
    }

    #[test]
    fn a_request_frame_decodes_as_a_listener_reads_it() {
        let req = MetadataRequest::default()
            .with_topics(None)
            .with_allow_auto_topic_creation(false);
        let f = frame(ApiKey::Metadata, 12, 7, &req).unwrap();
        let (h, mut body) = split(f.freeze());
        assert_eq!(h.request_api_key, ApiKey::Metadata as i16);
        assert_eq!(h.request_api_version, 12);
        assert_eq!(h.correlation_id, 7);
        assert_eq!(h.client_id.as_deref(), Some(CLIENT_ID));
        assert_eq!(MetadataRequest::decode(&mut body, 12).unwrap(), req);
        assert!(body.is_empty(), "nothing after the body");
    }

    #[test]
    fn an_answer_to_another_request_is_refused() {
        let h = RequestHeader::default()
            .with_request_api_key(ApiKey::Metadata as i16)
            .with_request_api_version(12)
            .with_correlation_id(3);
        let r = MetadataResponse::default().with_throttle_time_ms(5);
        let b = answer_frame(&h, &r).unwrap().freeze().split_off(4);
        let back: MetadataResponse = decode_answer(b.clone(), ApiKey::Metadata, 12, 3).unwrap();
        assert_eq!(back, r);
        let e = decode_answer::<MetadataResponse>(b, ApiKey::Metadata, 12, 4).unwrap_err();
        assert!(e.to_string().contains("answer 3 to request 4"), "{e}");
    }

    /// Reads one request frame from `io`.
    async fn read_request(io: &mut tokio::io::DuplexStream) -> (RequestHeader, Bytes) {
        let len = io.read_i32().await.unwrap();
        let mut b = vec![0u8; len as usize + 4];
        b[..4].copy_from_slice(&len.to_be_bytes());
        io.read_exact(&mut b[4..]).await.unwrap();
        split(Bytes::from(b))
    }

    /// A listener's side of one SCRAM-SHA-512 login of user `alice`.
    async fn serve_login(mut io: tokio::io::DuplexStream, credential: ScramCredential) {
        let (h, mut body) = read_request(&mut io).await;
        assert_eq!(h.request_api_key, ApiKey::SaslHandshake as i16);
        let req = SaslHandshakeRequest::decode(&mut body, h.request_api_version).unwrap();
        assert_eq!(req.mechanism.as_str(), "SCRAM-SHA-512");
        let offered = vec![StrBytes::from_static_str("SCRAM-SHA-512")];
        let r = SaslHandshakeResponse::default().with_mechanisms(offered);
        io.write_all(&answer_frame(&h, &r).unwrap()).await.unwrap();
        let (h, mut body) = read_request(&mut io).await;
        assert_eq!(h.request_api_version, V_SASL_AUTHENTICATE);
        let first = SaslAuthenticateRequest::decode(&mut body, h.request_api_version).unwrap();
        let (server, server_first) = ScramServer::start(
            ScramMechanism::Sha512,
            &first.auth_bytes,
            "3rfcNHYJY1ZVvWVs7j3rfcNH",
            |user| (user == "alice").then(|| credential.clone()),
        )
        .unwrap();
        let r = SaslAuthenticateResponse::default().with_auth_bytes(server_first.into());
        io.write_all(&answer_frame(&h, &r).unwrap()).await.unwrap();
        let (h, mut body) = read_request(&mut io).await;
        let last = SaslAuthenticateRequest::decode(&mut body, h.request_api_version).unwrap();
        let r = match server.finish(&last.auth_bytes) {
            Ok(server_final) => {
                SaslAuthenticateResponse::default().with_auth_bytes(server_final.into())
            }
            Err(e) => SaslAuthenticateResponse::default()
                .with_error_code(ResponseError::SaslAuthenticationFailed.code())
                .with_error_message(Some(StrBytes::from_string(e.to_string()))),
        };
        io.write_all(&answer_frame(&h, &r).unwrap()).await.unwrap();
    }

    #[tokio::test]
    async fn a_scram_login_passes_with_the_password_and_fails_without() {
        let credential =
            ScramCredential::from_password(ScramMechanism::Sha512, b"secret", b"salt", 4096)
                .unwrap();
        for (password, logs_in) in [("secret", true), ("wrong", false)] {
            let (client, server) = tokio::io::duplex(64 << 10);
            let listener = tokio::spawn(serve_login(server, credential.clone()));
            let mut conn = KafkaConn::over(client, Duration::from_secs(10));
            let login = ScramLogin {
                mechanism: ScramMechanism::Sha512,
                user: "alice".into(),
                password: password.into(),
            };
            let r = conn.login(&login).await;
            listener.await.unwrap();
            if logs_in {
                r.unwrap();
            } else {
                let e = r.unwrap_err();
                let why = e.to_string();
                assert!(why.contains("SaslAuthenticationFailed (58)"), "{why}");
                // Typed, for callers that sort failures (the fault harness).
                let refusal = e.downcast_ref::<SaslRefusal>().expect("a SaslRefusal");
                assert_eq!(refusal.code, 58);
            }
        }
        assert!(!format!(
            "{:?}",
            ScramLogin {
                mechanism: ScramMechanism::Sha512,
                user: "alice".into(),
                password: "secret".into(),
            }
        )
        .contains("secret"));
    }
}
