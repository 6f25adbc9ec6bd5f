use super::*;
use crate::history::OpKind;
use bytes::Bytes;
use kafka_protocol::messages::{RequestHeader, SaslAuthenticateRequest};
use keel_metadata::scram::ScramClient;
use keel_tls::Identity;

/// SaslAuthenticate v2, as the kit's connection sends it.
const V_SASL_AUTHENTICATE: i16 = 2;

fn code(e: ResponseError) -> i16 {
    e.code()
}

#[test]
fn outcomes_come_from_kafka_error_codes_alone() {
    let ok = write_outcome(WriteKind::Create, 0, None).expect("final");
    assert_eq!(ok.outcome, Some(Outcome::Ok));
    assert_eq!(ok.error, None);
    // NOT_CONTROLLER (sent with timeout_ms > 0): not applied, try again.
    assert!(write_outcome(
        WriteKind::Create,
        code(ResponseError::NotController),
        Some("no active controller answered".into())
    )
    .is_none());
    for (kind, e, outcome, recorded) in [
        (
            WriteKind::Create,
            ResponseError::RequestTimedOut,
            Outcome::Info,
            "REQUEST_TIMED_OUT",
        ),
        (
            WriteKind::Delete,
            ResponseError::UnknownServerError,
            Outcome::Info,
            "UNKNOWN_SERVER_ERROR",
        ),
        (
            WriteKind::Create,
            ResponseError::TopicAlreadyExists,
            Outcome::Fail,
            "TOPIC_ALREADY_EXISTS",
        ),
        (
            WriteKind::Create,
            ResponseError::InvalidReplicationFactor,
            Outcome::Fail,
            "INVALID_REPLICATION_FACTOR",
        ),
        (
            WriteKind::CreatePartitions,
            ResponseError::InvalidPartitions,
            Outcome::Fail,
            "INVALID_PARTITIONS",
        ),
        // A delete's unknown topic is Keel's UNKNOWN_TOPIC ...
        (
            WriteKind::Delete,
            ResponseError::UnknownTopicOrPartition,
            Outcome::Fail,
            "UNKNOWN_TOPIC",
        ),
        // ... an alter_config's may also be a topic being deleted.
        (
            WriteKind::AlterConfig,
            ResponseError::UnknownTopicOrPartition,
            Outcome::Fail,
            "UNKNOWN_TOPIC_OR_PARTITION",
        ),
        (
            WriteKind::Create,
            ResponseError::ClusterAuthorizationFailed,
            Outcome::Fail,
            "CLUSTER_AUTHORIZATION_FAILED",
        ),
    ] {
        let r = write_outcome(kind, code(e), Some("why".into())).expect("final");
        assert_eq!(r.outcome, Some(outcome), "{e:?}");
        assert_eq!(r.error.as_deref(), Some(recorded), "{e:?}");
    }
    // The wire's name stays in the message when Keel's is recorded.
    let r = write_outcome(
        WriteKind::Delete,
        code(ResponseError::UnknownTopicOrPartition),
        Some("gone".into()),
    )
    .expect("final");
    assert_eq!(
        r.message.as_deref(),
        Some("UNKNOWN_TOPIC_OR_PARTITION: gone")
    );
    // A code this client does not know: unknown outcome.
    assert_eq!(verdict(9_999), Verdict::Unknown);
    assert_eq!(code_name(9_999), "KAFKA_CODE_9999");
}

#[test]
fn lost_answers_are_unknown_and_unsent_requests_are_retried() {
    let lost = write_attempt(WriteKind::Delete, Err(CallError::Lost("reset".into())));
    let Attempt::Done(r) = lost else {
        panic!("a lost answer is final");
    };
    assert_eq!(r.outcome, Some(Outcome::Info));
    assert!(matches!(
        write_attempt(WriteKind::Delete, Err(CallError::NotSent("refused".into()))),
        Attempt::Retry(_)
    ));
    assert!(matches!(
        write_attempt(
            WriteKind::Delete,
            Ok((code(ResponseError::NotController), None))
        ),
        Attempt::Retry(_)
    ));
}

#[test]
fn describe_codes_say_listed_absent_or_ask_again() {
    assert_eq!(read_verdict(0), ReadVerdict::Listed);
    assert_eq!(
        read_verdict(code(ResponseError::UnknownTopicOrPartition)),
        ReadVerdict::Absent
    );
    for e in [
        ResponseError::NotController,
        ResponseError::RequestTimedOut,
        ResponseError::UnknownServerError,
    ] {
        assert_eq!(read_verdict(code(e)), ReadVerdict::Retry, "{e:?}");
    }
    assert_eq!(
        read_verdict(code(ResponseError::TopicAuthorizationFailed)),
        ReadVerdict::Refused
    );
}

fn op(kind: OpKind, t0: f64, t1: f64, r: OpResult) -> crate::history::OpRecord {
    crate::record(0, 0, kind, "t", t0, t1, r)
}

fn listed(configs: &[(&str, &str)]) -> OpResult {
    OpResult {
        outcome: Some(Outcome::Ok),
        seen: Some(Seen::Listed),
        configs: Some(
            configs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    }
}

fn lin(mut h: Vec<crate::history::OpRecord>) -> Option<bool> {
    for (i, o) in h.iter_mut().enumerate() {
        o.index = i;
    }
    crate::linear::check_history(&h, 1_000_000).0
}

#[test]
fn a_listed_read_is_checked_for_existence_and_configs() {
    let ok = || OpResult {
        outcome: Some(Outcome::Ok),
        ..Default::default()
    };
    // Listed while present, and while being deleted: linearizable.
    assert_eq!(
        lin(vec![
            op(OpKind::Create, 0.0, 1.0, ok()),
            op(OpKind::Describe, 2.0, 3.0, listed(&[])),
            op(OpKind::Delete, 4.0, 5.0, ok()),
            op(OpKind::Describe, 6.0, 7.0, listed(&[])),
        ]),
        Some(true)
    );
    // Listed before anything was created: caught.
    assert_eq!(
        lin(vec![
            op(OpKind::Describe, 0.0, 1.0, listed(&[])),
            op(OpKind::Create, 2.0, 3.0, ok()),
        ]),
        Some(false)
    );
    // Listed with a config nobody set: caught.
    assert_eq!(
        lin(vec![
            op(OpKind::Create, 0.0, 1.0, ok()),
            op(OpKind::Describe, 2.0, 3.0, listed(&[("retention.ms", "1")])),
        ]),
        Some(false)
    );
}

#[test]
fn kafka_names_are_kafkas() {
    assert_eq!(
        code_name(code(ResponseError::UnknownTopicOrPartition)),
        "UNKNOWN_TOPIC_OR_PARTITION"
    );
    assert_eq!(
        code_name(code(ResponseError::InvalidTopicException)),
        "INVALID_TOPIC_EXCEPTION"
    );
    assert_eq!(
        code_name(code(ResponseError::NotController)),
        "NOT_CONTROLLER"
    );
}

/// One request frame's header and body, checking its length prefix.
fn decode_frame(mut frame: Bytes) -> (RequestHeader, Bytes) {
    let len = frame.split_to(4);
    assert_eq!(
        i32::from_be_bytes(len[..].try_into().unwrap()) as usize,
        frame.len()
    );
    let api = ApiKey::try_from(i16::from_be_bytes([frame[0], frame[1]])).unwrap();
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let h = RequestHeader::decode(&mut frame, api.request_header_version(version)).unwrap();
    (h, frame)
}

#[test]
fn sasl_frames_encode_as_kafka_protocol_decodes_them() {
    let scram = ScramClient::new(
        SASL_MECHANISM,
        "admin",
        "secret",
        "fyko+d2lbbFgONRv9qkxdawL",
    );
    // SaslHandshake v1 (header v1): the mechanism's name.
    let hs = kafka::frame(
        ApiKey::SaslHandshake,
        V_SASL_HANDSHAKE,
        1,
        &sasl_handshake_request(SASL_MECHANISM),
    )
    .unwrap();
    assert_eq!(ApiKey::SaslHandshake.request_header_version(1), 1);
    let (h, mut body) = decode_frame(hs.freeze());
    assert_eq!(h.request_api_key, 17);
    assert_eq!(h.request_api_version, 1);
    assert_eq!(h.correlation_id, 1);
    assert_eq!(h.client_id.as_deref(), Some("keel-testkit"));
    let req = SaslHandshakeRequest::decode(&mut body, 1).unwrap();
    assert_eq!(req.mechanism.as_str(), "SCRAM-SHA-512");
    assert!(body.is_empty());
    // SaslAuthenticate v2 (flexible, header v2): the SCRAM token as is.
    let auth = kafka::frame(
        ApiKey::SaslAuthenticate,
        V_SASL_AUTHENTICATE,
        2,
        &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(scram.client_first())),
    )
    .unwrap();
    assert_eq!(ApiKey::SaslAuthenticate.request_header_version(2), 2);
    let (h, mut body) = decode_frame(auth.freeze());
    assert_eq!(h.request_api_key, 36);
    assert_eq!(h.request_api_version, 2);
    assert_eq!(h.correlation_id, 2);
    let req = SaslAuthenticateRequest::decode(&mut body, 2).unwrap();
    assert_eq!(
        &req.auth_bytes[..],
        b"n,,n=admin,r=fyko+d2lbbFgONRv9qkxdawL"
    );
    assert!(body.is_empty());
}

#[tokio::test]
async fn a_tls_connection_presents_the_admin_certificate_within_the_connect_timeout() {
    let dir = tempfile::tempdir().unwrap();
    keel_tls::certs::init(
        dir.path(),
        &keel_tls::certs::InitSpec {
            cluster_id: "c".into(),
            controllers: 1,
            brokers: 1,
            users: vec!["admin".into()],
            ips: Vec::new(),
            dns: Vec::new(),
        },
    )
    .unwrap();
    let load = |id: &Identity| {
        let (cert, key) = keel_tls::certs::paths(dir.path(), id);
        let ca = dir.path().join("ca.pem");
        TlsContext::load(keel_tls::TlsFiles { cert, key, ca }, "c").unwrap()
    };
    let broker = load(&Identity::broker("c", 1));
    let security = KafkaSecurity::ssl(&load(&Identity::user("c", "admin")));
    assert_eq!(security.protocol(), "SSL");
    let kafka::KafkaSecurity::Ssl(tls) = &security.security else {
        panic!("{security:?}")
    };
    assert!(tls.alpn_protocols.is_empty());
    assert_eq!(security.cluster_id.as_deref(), Some("c"));
    let localhost: IpAddr = "127.0.0.1".parse().unwrap();

    // A broker's Kafka listener (client certificates required) sees
    // User:admin.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let acceptor = tokio_rustls::TlsAcceptor::from(
        broker.kafka_server_config(keel_tls::KafkaClientAuth::Required),
    );
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let tls = acceptor.accept(tcp).await.unwrap();
        let chain = tls.get_ref().1.peer_certificates().unwrap();
        Identity::from_der(chain[0].as_ref()).unwrap()
    });
    let second = Duration::from_secs(1);
    let conn = Conn::open(localhost, &addr, &security, 5 * second, second).await;
    assert!(conn.is_ok(), "{:?}", conn.err());
    assert_eq!(server.await.unwrap(), Identity::user("c", "admin"));

    // A listener that accepts and never answers the handshake: not
    // sent, within the connect timeout.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    // (Bounded from outside too: without its own bound it would wait
    // for ever; the margin is no timing target.)
    let conn = tokio::time::timeout(
        30 * second,
        Conn::open(localhost, &addr, &security, second / 4, second),
    )
    .await
    .expect("opening gives up by itself");
    assert!(
        matches!(&conn, Err(CallError::NotSent(why)) if why.contains("timed out")),
        "{:?}",
        conn.err()
    );
    drop(silent);

    // SASL_SSL trusts the CA and presents no certificate.
    let sasl = KafkaSecurity::sasl_ssl(&dir.path().join("ca.pem"), "c", "alice", "pw").unwrap();
    assert_eq!(sasl.protocol(), "SASL_SSL");
    let kafka::KafkaSecurity::SaslSsl { tls, .. } = &sasl.security else {
        panic!("{sasl:?}")
    };
    assert!(!tls.client_auth_cert_resolver.has_certs());
    assert!(tls.alpn_protocols.is_empty());
    assert!(!format!("{sasl:?}").contains("pw"));
}
