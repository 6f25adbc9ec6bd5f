//! The intruder's attacks on the brokers' Kafka listeners (TLS runs whose
//! brokers have Kafka listeners: `--client kafka`, and every run with the
//! intruder nemesis, which turns them on).
//!
//! Each round picks one broker's listener and tries, each on a fresh
//! connection:
//!
//! * `kafka_plaintext`: a CreateTopics frame in plaintext bytes to the TLS
//!   listener;
//! * `kafka_foreign_ca`: TLS with another CA's certificate naming
//!   `User:admin`, then CreateTopics and DeleteTopics of a target;
//! * `kafka_node_cert`: TLS with a broker's certificate (the cluster CA's)
//!   as a Kafka client, then CreateTopics;
//! * `kafka_wrong_password`: SCRAM-SHA-512 as [`VICTIM_USER`] (allowed
//!   everything on `intruder-new-*`) with a wrong password, then, on the
//!   same connection, CreateTopics: the login must be refused with
//!   SASL_AUTHENTICATION_FAILED and the request get no answer;
//! * `kafka_no_acls`: a good login as [`NOACL_USER`] (no binding at all),
//!   then CreateTopics, DeleteTopics of a target and
//!   IncrementalAlterConfigs of a target: each must be refused with an
//!   authorization error;
//! * `kafka_replay`: a real login of [`VICTIM_USER`] whose client-first and
//!   client-final are recorded, then both replayed on a new connection (the
//!   server's nonce is new, so the proof must not pass), then CreateTopics.
//!
//! Every topic these try to make is named `intruder-new-k*`, which only the
//! intruder uses: the intruder checker's "nothing written" comparison
//! (before and after the run) covers them with the gRPC attacks' names.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use keel_metadata::scram::ScramClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;

use crate::cluster::CLIENT_IP;
use crate::intruder::{Answer, Credential, CREATE_PREFIX, FORGED_CONFIG};
use crate::kafka_client::{self as kc, CallError, Conn, KafkaSecurity};

/// The SCRAM user whose password the intruder guesses wrong and whose
/// real login it replays: allowed everything on `intruder-new-*`, so a
/// login that passed would show as a topic there.
pub const VICTIM_USER: &str = "intruder-scram";
/// The SCRAM user without any ACL binding.
pub const NOACL_USER: &str = "intruder-noacl";
/// Each connection's bound (connect, handshake, login, answer).
const T: Duration = Duration::from_millis(1500);

/// What the Kafka attacks need.
pub struct KafkaAttacks {
    /// The brokers' Kafka listeners.
    pub addrs: Vec<String>,
    /// SSL as another CA's `User:admin`.
    pub foreign_admin: KafkaSecurity,
    /// SSL as a broker (the cluster CA's certificate).
    pub node: KafkaSecurity,
    /// The node certificate's identity, for the record.
    pub node_identity: String,
    /// TLS trusting the cluster CA, no certificate, no login (the logins
    /// are done by hand).
    pub tls_only: KafkaSecurity,
    /// [`VICTIM_USER`]'s password.
    pub victim_password: String,
    /// [`NOACL_USER`]'s password.
    pub noacl_password: String,
}

/// One attempt's result before it is stamped: kind, identity, request,
/// target, listener, answer and detail.
pub struct KafkaAttempt {
    /// When its first request went out.
    pub sent: Instant,
    pub credential: Credential,
    pub identity: String,
    pub request: String,
    pub target: String,
    pub node: String,
    pub answer: (Answer, String),
}

impl KafkaAttacks {
    /// The attacks' security settings from the cluster CA's certificate
    /// (`ca_pem`), the foreign admin's and a broker's transports.
    pub fn new(
        addrs: Vec<String>,
        ca_pem: &Path,
        cluster_id: &str,
        foreign_admin: &crate::client::Transport,
        node: &crate::client::Transport,
        victim_password: String,
        noacl_password: String,
    ) -> Result<Self, String> {
        let tls_only = KafkaSecurity::tls_only(ca_pem, cluster_id)?;
        Ok(KafkaAttacks {
            addrs,
            foreign_admin: KafkaSecurity::from_transport(foreign_admin),
            node: KafkaSecurity::from_transport(node),
            node_identity: node.identity().map(|i| i.uri()).unwrap_or_default(),
            tls_only,
            victim_password,
            noacl_password,
        })
    }

    /// The SASL_SSL settings of `user` with `password`.
    fn login_as(&self, user: &str, password: &str) -> KafkaSecurity {
        self.tls_only.with_login(user, password)
    }

    /// One round's attempts, in order; `target` is one of the harness's
    /// target topics. `record` gets each attempt once answered.
    pub async fn round(&self, round: u32, target: &str, mut record: impl FnMut(KafkaAttempt)) {
        let Some(addr) = self.addrs.get(round as usize % self.addrs.len().max(1)) else {
            return;
        };
        let addr = addr.as_str();
        let att = |credential, identity: &str, request: &str, target: String, (sent, answer)| {
            KafkaAttempt {
                sent,
                credential,
                identity: identity.into(),
                request: request.into(),
                target,
                node: addr.into(),
                answer,
            }
        };
        let name = |tag: &str| format!("{CREATE_PREFIX}k{tag}{round}");

        let n = name("t");
        let a = timed(plaintext(addr, &n)).await;
        record(att(
            Credential::KafkaPlaintext,
            "no TLS",
            "CreateTopics",
            n,
            a,
        ));

        let n = name("f");
        let a = timed(after_tls(addr, &self.foreign_admin, create(&n))).await;
        let who = "User:admin (foreign CA)";
        record(att(Credential::KafkaForeignCa, who, "CreateTopics", n, a));
        let a = timed(after_tls(addr, &self.foreign_admin, delete(target))).await;
        record(att(
            Credential::KafkaForeignCa,
            who,
            "DeleteTopics",
            target.into(),
            a,
        ));

        let n = name("b");
        let a = timed(after_tls(addr, &self.node, create(&n))).await;
        let who = self.node_identity.as_str();
        record(att(Credential::KafkaNodeCert, who, "CreateTopics", n, a));

        let n = name("p");
        let wrong = format!("{}-wrong", self.victim_password);
        let a = timed(self.wrong_password(addr, &wrong, &n)).await;
        let who = format!("User:{VICTIM_USER} (wrong password)");
        record(att(
            Credential::KafkaWrongPassword,
            &who,
            "SaslAuthenticate",
            n,
            a,
        ));

        let who = format!("User:{NOACL_USER}");
        let noacl = self.login_as(NOACL_USER, &self.noacl_password);
        let n = name("n");
        let a = timed(acl_refused(addr, &noacl, create(&n))).await;
        record(att(Credential::KafkaNoAcls, &who, "CreateTopics", n, a));
        let a = timed(acl_refused(addr, &noacl, delete(target))).await;
        record(att(
            Credential::KafkaNoAcls,
            &who,
            "DeleteTopics",
            target.into(),
            a,
        ));
        let a = timed(acl_refused(addr, &noacl, alter_config(target))).await;
        let req = "IncrementalAlterConfigs";
        record(att(Credential::KafkaNoAcls, &who, req, target.into(), a));

        let n = name("r");
        let a = timed(self.replay(addr, &n)).await;
        let who = format!("User:{VICTIM_USER} (replayed client-final)");
        record(att(Credential::KafkaReplay, &who, "SaslAuthenticate", n, a));
    }

    /// A connection over TLS and a SCRAM login of the victim with
    /// `password` on it (the client's first and final messages, or why it
    /// did not pass); no connection: the attempt's verdict.
    async fn victim_login(
        &self,
        addr: &str,
        password: &str,
    ) -> Result<(Conn, Result<(Vec<u8>, Vec<u8>), LoginError>), (Answer, String)> {
        let mut c = open(addr, &self.tls_only)
            .await
            .map_err(|e| no_connection(&e))?;
        let scram = ScramClient::new(
            kc::SASL_MECHANISM,
            VICTIM_USER,
            password,
            &kc::scram_nonce(),
        );
        let r = login(&mut c, scram).await;
        Ok((c, r))
    }

    /// A wrong password, then a request on the same connection.
    async fn wrong_password(&self, addr: &str, password: &str, name: &str) -> (Answer, String) {
        let (mut c, r) = match self.victim_login(addr, password).await {
            Ok(login) => login,
            Err(verdict) => return verdict,
        };
        let verdict = after_login(&mut c, r, name).await;
        c.close().await;
        verdict
    }

    /// A real login of the victim, recorded, then replayed on a new
    /// connection.
    async fn replay(&self, addr: &str, name: &str) -> (Answer, String) {
        let (c, recorded) = match self.victim_login(addr, &self.victim_password).await {
            Ok(login) => login,
            Err(verdict) => return verdict,
        };
        c.close().await;
        let (first, last) = match recorded {
            Ok(messages) => messages,
            Err(e) => {
                return (
                    Answer::Errored,
                    format!("could not record a real login: {}", short(&e.text)),
                )
            }
        };
        let mut c = match open(addr, &self.tls_only).await {
            Ok(c) => c,
            Err(e) => return no_connection(&e),
        };
        let replayed = async {
            handshake(&mut c).await?;
            c.authenticate(first.clone())
                .await
                .map_err(|e| LoginError::of(&e))?;
            c.authenticate(last.clone())
                .await
                .map_err(|e| LoginError::of(&e))?;
            Ok::<_, LoginError>((first, last))
        }
        .await;
        let verdict = after_login(&mut c, replayed, name).await;
        c.close().await;
        verdict
    }
}

/// Why a login did not pass: the server's refusal
/// (SASL_AUTHENTICATION_FAILED) or something else.
struct LoginError {
    refused: bool,
    text: String,
}

impl LoginError {
    fn of(text: &str) -> Self {
        LoginError {
            refused: text.contains("SASL_AUTHENTICATION_FAILED"),
            text: text.to_string(),
        }
    }
}

async fn handshake(c: &mut Conn) -> Result<(), LoginError> {
    let hs: SaslHandshakeResponse = c
        .call(
            ApiKey::SaslHandshake,
            kc::V_SASL_HANDSHAKE,
            &kc::sasl_handshake_request(kc::SASL_MECHANISM),
        )
        .await
        .map_err(|e| LoginError::of(&format!("SaslHandshake: {}", e.text())))?;
    if hs.error_code != 0 {
        return Err(LoginError::of(&format!(
            "SaslHandshake: {}",
            kc::code_name(hs.error_code)
        )));
    }
    Ok(())
}

/// A SCRAM login by hand; on success, the client-first and client-final
/// it sent.
async fn login(c: &mut Conn, mut scram: ScramClient) -> Result<(Vec<u8>, Vec<u8>), LoginError> {
    handshake(c).await?;
    let first = scram.client_first();
    let server_first = c
        .authenticate(first.clone())
        .await
        .map_err(|e| LoginError::of(&e))?;
    let last = scram
        .server_first(&server_first)
        .map_err(|e| LoginError::of(&format!("server-first: {e}")))?;
    let server_final = c
        .authenticate(last.clone())
        .await
        .map_err(|e| LoginError::of(&e))?;
    scram
        .server_final(&server_final)
        .map_err(|e| LoginError::of(&format!("server-final: {e}")))?;
    Ok((first, last))
}

/// The verdict on a login that must fail: passed is a breach; refused
/// with SASL_AUTHENTICATION_FAILED, and then no answer to a request on
/// the same connection, is a refusal.
async fn after_login<T>(
    c: &mut Conn,
    login: Result<T, LoginError>,
    name: &str,
) -> (Answer, String) {
    match login {
        Ok(_) => (Answer::Accepted, "the login passed".into()),
        Err(e) if !e.refused => (Answer::Errored, short(&e.text)),
        Err(e) => {
            let (api, v, req) = create(name);
            match c.call::<_, CreateTopicsResponse>(api, v, &req).await {
                Ok(r) => (
                    Answer::Accepted,
                    format!(
                        "answered CreateTopics after a refused login: {:?}",
                        r.topics.first().map(|t| kc::code_name(t.error_code))
                    ),
                ),
                Err(_) => (
                    Answer::Refused,
                    format!("{}; then no answer on that connection", short(&e.text)),
                ),
            }
        }
    }
}

/// A request to send: its API, version and body.
enum Request {
    Create(CreateTopicsRequest),
    Delete(DeleteTopicsRequest),
    AlterConfig(IncrementalAlterConfigsRequest),
}

fn create(name: &str) -> (ApiKey, i16, CreateTopicsRequest) {
    (
        ApiKey::CreateTopics,
        kc::V_CREATE_TOPICS,
        CreateTopicsRequest::default()
            .with_topics(vec![CreatableTopic::default()
                .with_name(kc::tn(name))
                .with_num_partitions(1)
                .with_replication_factor(1)])
            .with_timeout_ms(1000),
    )
}

fn delete(name: &str) -> Request {
    Request::Delete(
        DeleteTopicsRequest::default()
            .with_topics(vec![
                DeleteTopicState::default().with_name(Some(kc::tn(name)))
            ])
            .with_timeout_ms(1000),
    )
}

fn alter_config(name: &str) -> Request {
    let (key, value) = FORGED_CONFIG;
    Request::AlterConfig(
        IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(kc::RESOURCE_TOPIC)
                .with_resource_name(StrBytes::from_string(name.to_string()))
                .with_configs(vec![AlterableConfig::default()
                    .with_name(StrBytes::from_static_str(key))
                    .with_config_operation(kc::OP_SET)
                    .with_value(Some(StrBytes::from_static_str(value)))]),
        ]),
    )
}

impl From<(ApiKey, i16, CreateTopicsRequest)> for Request {
    fn from((_, _, r): (ApiKey, i16, CreateTopicsRequest)) -> Self {
        Request::Create(r)
    }
}

/// Sends `req` and returns the error code of its one item.
async fn send(c: &mut Conn, req: &Request) -> Result<i16, CallError> {
    let code = match req {
        Request::Create(r) => {
            let a: CreateTopicsResponse =
                c.call(ApiKey::CreateTopics, kc::V_CREATE_TOPICS, r).await?;
            a.topics.first().map(|t| t.error_code)
        }
        Request::Delete(r) => {
            let a: DeleteTopicsResponse =
                c.call(ApiKey::DeleteTopics, kc::V_DELETE_TOPICS, r).await?;
            a.responses.first().map(|t| t.error_code)
        }
        Request::AlterConfig(r) => {
            let a: IncrementalAlterConfigsResponse = c
                .call(
                    ApiKey::IncrementalAlterConfigs,
                    kc::V_INCREMENTAL_ALTER_CONFIGS,
                    r,
                )
                .await?;
            a.responses.first().map(|t| t.error_code)
        }
    };
    Ok(code.unwrap_or(ResponseError::UnknownServerError.code()))
}

/// `attack` with the time it started.
async fn timed(
    attack: impl std::future::Future<Output = (Answer, String)>,
) -> (Instant, (Answer, String)) {
    let sent = Instant::now();
    (sent, attack.await)
}

fn short(s: &str) -> String {
    s.chars().take(200).collect()
}

async fn open(addr: &str, security: &KafkaSecurity) -> Result<Conn, CallError> {
    Conn::open(CLIENT_IP.into(), addr, security, T, T).await
}

/// A connection that did not open: a refusal when the server aborted the
/// handshake, no verdict when it was not there.
fn no_connection(e: &CallError) -> (Answer, String) {
    closed(e.text())
}

/// Whether a transport error is the server's refusal (an alert, a
/// connection it closed or reset) rather than a server that was not there
/// or did not answer in time.
fn closed(text: &str) -> (Answer, String) {
    let t = text.to_ascii_lowercase();
    let absent = t.contains("connection refused")
        || t.contains("timed out")
        || t.contains("no answer to")
        || t.contains("unreachable")
        || t.contains("bind ");
    if absent {
        (Answer::Errored, short(text))
    } else {
        (Answer::Refused, short(text))
    }
}

/// A request after a TLS handshake that presents a bad certificate: any
/// answer is a breach.
async fn after_tls(
    addr: &str,
    security: &KafkaSecurity,
    req: impl Into<Request>,
) -> (Answer, String) {
    let req = req.into();
    let mut c = match open(addr, security).await {
        Ok(c) => c,
        Err(e) => return no_connection(&e),
    };
    let r = send(&mut c, &req).await;
    c.close().await;
    match r {
        Ok(code) => (
            Answer::Accepted,
            format!(
                "answered ({}): the certificate check let it through",
                kc::code_name(code)
            ),
        ),
        Err(e) => closed(e.text()),
    }
}

/// The verdict of an authorization error code: refused by authorization,
/// no verdict (the request did not reach it), or past it.
pub fn acl_verdict(code: i16) -> Answer {
    match ResponseError::try_from_code(code) {
        Some(
            ResponseError::TopicAuthorizationFailed | ResponseError::ClusterAuthorizationFailed,
        ) => Answer::Refused,
        Some(
            ResponseError::NotController
            | ResponseError::RequestTimedOut
            | ResponseError::UnknownServerError,
        ) => Answer::Errored,
        _ => Answer::Accepted,
    }
}

/// A request of the user without ACLs (after its good login).
async fn acl_refused(
    addr: &str,
    security: &KafkaSecurity,
    req: impl Into<Request>,
) -> (Answer, String) {
    let req = req.into();
    let mut c = match open(addr, security).await {
        // A good login that does not pass proves nothing.
        Err(e) => return (Answer::Errored, short(e.text())),
        Ok(c) => c,
    };
    let r = send(&mut c, &req).await;
    c.close().await;
    match r {
        Ok(code) => {
            let a = acl_verdict(code);
            let detail = match a {
                Answer::Accepted => format!("got past authorization: {}", kc::code_name(code)),
                _ => kc::code_name(code),
            };
            (a, detail)
        }
        Err(e) => (Answer::Errored, short(e.text())),
    }
}

/// A CreateTopics frame in plaintext to a TLS listener: a Kafka answer is
/// a breach; an alert or a closed connection is a refusal.
async fn plaintext(addr: &str, name: &str) -> (Answer, String) {
    let Ok(to) = addr.parse::<SocketAddr>() else {
        return (Answer::Errored, format!("bad address {addr}"));
    };
    let (api, v, req) = create(name);
    let id = 7;
    let frame = match keel_testkit::kafka::frame(api, v, id, &req) {
        Ok(f) => f,
        Err(e) => return (Answer::Errored, format!("{e:#}")),
    };
    let exchange = async {
        let socket = TcpSocket::new_v4()?;
        socket.bind(SocketAddr::new(CLIENT_IP.into(), 0))?;
        let mut tcp = socket.connect(to).await?;
        tcp.write_all(&frame).await?;
        let mut got = Vec::new();
        // Until the server closes (or enough for a Kafka answer's header).
        let mut buf = [0u8; 512];
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) => break,
                Ok(n) => {
                    got.extend_from_slice(&buf[..n]);
                    if got.len() >= 8 {
                        break;
                    }
                }
                Err(e) if got.is_empty() => return Err(e),
                Err(_) => break,
            }
        }
        Ok::<_, std::io::Error>(got)
    };
    match tokio::time::timeout(T, exchange).await {
        Err(_) => (
            Answer::Errored,
            "no answer and no close within the bound".into(),
        ),
        Ok(Err(e)) => closed(&e.to_string()),
        Ok(Ok(got)) => plaintext_verdict(&got, id),
    }
}

/// The verdict on the bytes a TLS listener sent back to a plaintext
/// Kafka frame with correlation id `id`.
pub fn plaintext_verdict(got: &[u8], id: i32) -> (Answer, String) {
    if got.len() >= 8 {
        let mut b = Bytes::copy_from_slice(got);
        let _len = b.get_i32();
        if b.get_i32() == id {
            return (
                Answer::Accepted,
                "a Kafka answer to a plaintext request".into(),
            );
        }
    }
    match got.first() {
        None => (Answer::Refused, "closed without a byte".into()),
        // A TLS alert record.
        Some(0x15) => (Answer::Refused, "TLS alert".into()),
        Some(b) => (
            Answer::Refused,
            format!("{} bytes, not a Kafka answer (first {b:#04x})", got.len()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_authorization_error_refuses_a_user_without_acls() {
        let code = |e: ResponseError| e.code();
        assert_eq!(
            acl_verdict(code(ResponseError::TopicAuthorizationFailed)),
            Answer::Refused
        );
        assert_eq!(
            acl_verdict(code(ResponseError::ClusterAuthorizationFailed)),
            Answer::Refused
        );
        assert_eq!(
            acl_verdict(code(ResponseError::NotController)),
            Answer::Errored
        );
        assert_eq!(acl_verdict(0), Answer::Accepted);
        assert_eq!(
            acl_verdict(code(ResponseError::TopicAlreadyExists)),
            Answer::Accepted
        );
    }

    #[test]
    fn a_kafka_answer_to_plaintext_bytes_is_a_breach_and_an_alert_a_refusal() {
        let mut answer = Vec::new();
        answer.extend(20i32.to_be_bytes());
        answer.extend(7i32.to_be_bytes());
        answer.extend([0u8; 20]);
        assert_eq!(plaintext_verdict(&answer, 7).0, Answer::Accepted);
        assert_eq!(
            plaintext_verdict(&[0x15, 3, 3, 0, 2, 2, 50], 7).0,
            Answer::Refused
        );
        assert_eq!(plaintext_verdict(&[], 7).0, Answer::Refused);
    }

    use kafka_protocol::messages::{
        RequestHeader, SaslAuthenticateRequest, SaslAuthenticateResponse,
    };
    use kafka_protocol::protocol::{Decodable, Encodable};
    use keel_metadata::scram::{ScramCredential, ScramMechanism, ScramServer};
    use tokio::io::DuplexStream;

    async fn read_request(io: &mut DuplexStream) -> Option<(RequestHeader, Bytes)> {
        let len = io.read_i32().await.ok()?;
        let mut b = vec![0u8; len as usize];
        io.read_exact(&mut b).await.ok()?;
        Some(keel_testkit::kafka::decode_request(Bytes::from(b)).unwrap())
    }

    async fn answer<R: Encodable>(io: &mut DuplexStream, h: &RequestHeader, r: &R) {
        let frame = keel_testkit::kafka::answer_frame(h, r).unwrap();
        io.write_all(&frame).await.unwrap();
    }

    /// A listener's side of one SCRAM-SHA-512 login of [`VICTIM_USER`]
    /// with server nonce `nonce`: keel-kafka's (a bad proof gets
    /// SASL_AUTHENTICATION_FAILED and the connection closes) or, `broken`,
    /// one that takes any client-final and then serves requests.
    async fn listener(
        mut io: DuplexStream,
        credential: ScramCredential,
        nonce: &str,
        broken: bool,
    ) {
        let (h, _) = read_request(&mut io).await.unwrap();
        let offered = vec![StrBytes::from_static_str("SCRAM-SHA-512")];
        let r = SaslHandshakeResponse::default().with_mechanisms(offered);
        answer(&mut io, &h, &r).await;
        let (h, mut body) = read_request(&mut io).await.unwrap();
        let first = SaslAuthenticateRequest::decode(&mut body, h.request_api_version).unwrap();
        let (server, server_first) =
            ScramServer::start(ScramMechanism::Sha512, &first.auth_bytes, nonce, |u| {
                (u == VICTIM_USER).then(|| credential.clone())
            })
            .unwrap();
        let r = SaslAuthenticateResponse::default().with_auth_bytes(server_first.into());
        answer(&mut io, &h, &r).await;
        let (h, mut body) = read_request(&mut io).await.unwrap();
        let last = SaslAuthenticateRequest::decode(&mut body, h.request_api_version).unwrap();
        let r = match (server.finish(&last.auth_bytes), broken) {
            (Ok(server_final), _) => {
                SaslAuthenticateResponse::default().with_auth_bytes(server_final.into())
            }
            (Err(_), true) => SaslAuthenticateResponse::default(),
            (Err(e), false) => {
                let r = SaslAuthenticateResponse::default()
                    .with_error_code(ResponseError::SaslAuthenticationFailed.code())
                    .with_error_message(Some(StrBytes::from_string(e.to_string())));
                answer(&mut io, &h, &r).await;
                return; // and closes
            }
        };
        answer(&mut io, &h, &r).await;
        if let Some((h, _)) = read_request(&mut io).await {
            answer(&mut io, &h, &CreateTopicsResponse::default()).await;
        }
    }

    /// A real login recorded, then replayed to a listener with a new
    /// server nonce (keel-kafka's, or a broken one).
    async fn replay_against(broken: bool) -> (Answer, String) {
        let credential =
            ScramCredential::from_password(ScramMechanism::Sha512, b"pw", b"salt", 4096).unwrap();
        let (client, server) = tokio::io::duplex(64 << 10);
        let l = tokio::spawn(listener(
            server,
            credential.clone(),
            "firstServerNonce0123",
            false,
        ));
        let mut c = Conn::over(client);
        let scram = ScramClient::new(
            kc::SASL_MECHANISM,
            VICTIM_USER,
            "pw",
            "clientNonce42abcdefgh",
        );
        let (first, last) = login(&mut c, scram).await.ok().unwrap();
        drop(c); // the listener then sees no further request
        l.await.unwrap();
        let (client, server) = tokio::io::duplex(64 << 10);
        let l = tokio::spawn(listener(server, credential, "secondServerNonce987", broken));
        let mut c = Conn::over(client);
        let replayed = async {
            handshake(&mut c).await?;
            c.authenticate(first)
                .await
                .map_err(|e| LoginError::of(&e))?;
            c.authenticate(last).await.map_err(|e| LoginError::of(&e))
        }
        .await;
        let verdict = after_login(&mut c, replayed, "intruder-new-kr0").await;
        drop(c);
        l.await.unwrap();
        verdict
    }

    #[tokio::test]
    async fn a_replayed_client_final_is_refused_by_a_fresh_nonce_and_a_breach_if_it_passes() {
        let bound = Duration::from_secs(20);
        let (a, detail) = tokio::time::timeout(bound, replay_against(false))
            .await
            .unwrap();
        assert_eq!(a, Answer::Refused, "{detail}");
        assert!(detail.contains("SASL_AUTHENTICATION_FAILED"), "{detail}");
        let (a, detail) = tokio::time::timeout(bound, replay_against(true))
            .await
            .unwrap();
        assert_eq!(a, Answer::Accepted, "{detail}");
    }

    #[test]
    fn a_server_that_was_not_there_is_no_verdict() {
        assert_eq!(
            closed("127.0.2.21:9094: Connection refused (os error 111)").0,
            Answer::Errored
        );
        assert_eq!(
            closed("connect and TLS handshake timed out").0,
            Answer::Errored
        );
        assert_eq!(closed("CreateTopics: early eof").0, Answer::Refused);
        assert_eq!(
            closed("TLS handshake: received fatal alert: UnknownCA").0,
            Answer::Refused
        );
    }
}
