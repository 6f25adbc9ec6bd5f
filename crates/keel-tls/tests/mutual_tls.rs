//! Mutual TLS end to end on loopback: who may connect, who the server says
//! the caller is, what a client accepts as server, and rotation without a
//! restart. A gRPC health service stands in for Keel's services.

use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use keel_tls::certs::{self, Ca, InitSpec};
use keel_tls::transport::endpoint;
use keel_tls::{peer, Expect, Identity, TlsContext, TlsFiles, Transport};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

fn files(dir: &Path, id: &Identity) -> TlsFiles {
    let (cert, key) = certs::paths(dir, id);
    TlsFiles {
        cert,
        key,
        ca: dir.join("ca.pem"),
    }
}

fn init(dir: &Path, cluster: &str) {
    certs::init(
        dir,
        &InitSpec {
            cluster_id: cluster.into(),
            controllers: 1,
            brokers: 1,
            users: vec!["admin".into()],
            ..Default::default()
        },
    )
    .unwrap();
}

/// A health server over `transport`; returns its address and the
/// identities its handler saw.
async fn serve(transport: Transport) -> (String, Arc<Mutex<Vec<Option<Identity>>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (_reporter, health) = tonic_health::server::health_reporter();
    let record = seen.clone();
    let svc = tonic::service::interceptor::InterceptedService::new(
        health,
        move |req: tonic::Request<()>| {
            record.lock().unwrap().push(peer(&req).cloned());
            Ok(req)
        },
    );
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let router = tonic::transport::Server::builder().add_service(svc);
    tokio::spawn(async move {
        transport
            .serve(router, listener, std::future::pending())
            .await
    });
    (addr, seen)
}

async fn check(t: &Transport, addr: &str, expect: Expect) -> Result<(), tonic::Status> {
    let ch = t.channel(
        endpoint(addr)
            .unwrap()
            .connect_timeout(Duration::from_secs(2))
            .timeout(Duration::from_secs(2)),
        None,
        expect,
    );
    HealthClient::new(ch)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .map(|_| ())
}

#[tokio::test]
async fn only_certificates_of_the_cluster_ca_connect_and_the_handler_sees_who_called() {
    let dir = tempfile::tempdir().unwrap();
    init(dir.path(), "prod");
    let ctx = |id: &Identity| {
        Transport::Tls(Arc::new(
            TlsContext::load(files(dir.path(), id), "prod").unwrap(),
        ))
    };
    let controller = ctx(&Identity::controller("prod", 1));
    let (addr, seen) = serve(controller).await;
    let admin = ctx(&Identity::user("prod", "admin"));
    check(&admin, &addr, Expect::Controller)
        .await
        .expect("a user of the cluster connects");
    assert_eq!(
        seen.lock().unwrap().last().cloned().flatten(),
        Some(Identity::user("prod", "admin")),
        "the handler sees the identity of the caller's certificate"
    );
    // A client that expects a broker there refuses the controller.
    assert!(check(&admin, &addr, Expect::Broker(1)).await.is_err());
    // A certificate of another CA is refused in the handshake.
    let other = tempfile::tempdir().unwrap();
    init(other.path(), "prod");
    let stranger = Transport::Tls(Arc::new(
        TlsContext::load(
            files(other.path(), &Identity::user("prod", "admin")),
            "prod",
        )
        .unwrap(),
    ));
    assert!(check(&stranger, &addr, Expect::Controller).await.is_err());
    // No TLS at all: refused.
    assert!(check(&Transport::Plaintext, &addr, Expect::Controller)
        .await
        .is_err());
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "only the one good call got through"
    );
    // A certificate of another cluster id does not even load for this one.
    let err = TlsContext::load(files(dir.path(), &Identity::user("prod", "admin")), "test")
        .expect_err("another cluster");
    assert!(err.to_string().contains("not of \"test\""), "{err}");
}

#[tokio::test]
async fn a_reloaded_certificate_serves_new_connections_and_old_ones_keep_working() {
    let dir = tempfile::tempdir().unwrap();
    init(dir.path(), "prod");
    let me = Identity::controller("prod", 1);
    let server_ctx = Arc::new(TlsContext::load(files(dir.path(), &me), "prod").unwrap());
    let (addr, _) = serve(Transport::Tls(server_ctx.clone())).await;
    let admin = Transport::Tls(Arc::new(
        TlsContext::load(files(dir.path(), &Identity::user("prod", "admin")), "prod").unwrap(),
    ));
    let old = admin.channel(endpoint(&addr).unwrap(), None, Expect::Controller);
    let mut old_client = HealthClient::new(old);
    old_client
        .check(HealthCheckRequest::default())
        .await
        .unwrap();
    let before = server_ctx.server_config();
    // Rotate: a new certificate and key for the same identity, then reload.
    let ca = Ca::load(
        &std::fs::read_to_string(dir.path().join("ca.pem")).unwrap(),
        &std::fs::read_to_string(dir.path().join("ca-key.pem")).unwrap(),
    )
    .unwrap();
    let issued = ca.issue(&me, &[], &[]).unwrap();
    let (cert, key) = certs::paths(dir.path(), &me);
    std::fs::write(&cert, issued.cert_pem).unwrap();
    std::fs::write(&key, issued.key_pem).unwrap();
    assert_eq!(server_ctx.reload().unwrap(), me);
    assert!(!Arc::ptr_eq(&before, &server_ctx.server_config()));
    check(&admin, &addr, Expect::Controller)
        .await
        .expect("a new connection after the reload");
    old_client
        .check(HealthCheckRequest::default())
        .await
        .expect("the open connection keeps working");
    // A broken file leaves the current configuration in place.
    std::fs::write(&cert, "not a certificate").unwrap();
    assert!(server_ctx.reload().is_err());
    check(&admin, &addr, Expect::Controller)
        .await
        .expect("still served with the last good certificate");
}

#[tokio::test]
async fn a_connection_that_never_opened_says_connect_as_plaintext_does() {
    let dir = tempfile::tempdir().unwrap();
    init(dir.path(), "prod");
    let admin = Transport::Tls(Arc::new(
        TlsContext::load(files(dir.path(), &Identity::user("prod", "admin")), "prod").unwrap(),
    ));
    // A port nothing listens on: callers retry a write only when the
    // status says the connection never opened.
    let closed = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    for t in [Transport::Plaintext, admin] {
        let s = check(&t, &closed, Expect::Controller)
            .await
            .expect_err("nothing listens");
        assert_eq!(s.code(), tonic::Code::Unavailable, "{t}: {s:?}");
        assert!(s.message().contains("tcp connect error"), "{t}: {s:?}");
    }
}

/// A certificate of another CA beside this cluster's CA file, or an
/// expired one of this CA, does not load for use (its peers would refuse
/// it); loaded unchecked, as an intruder would, the handshake refuses it.
#[tokio::test]
async fn certificates_peers_refuse_load_only_unchecked_and_are_refused_in_the_handshake() {
    let dir = tempfile::tempdir().unwrap();
    init(dir.path(), "prod");
    let controller = Transport::Tls(Arc::new(
        TlsContext::load(files(dir.path(), &Identity::controller("prod", 1)), "prod").unwrap(),
    ));
    let (addr, seen) = serve(controller).await;
    let admin = Identity::user("prod", "admin");
    let now = std::time::SystemTime::now();
    let day = Duration::from_secs(24 * 3600);
    let ours = certs::load_ca(dir.path()).unwrap();
    let theirs = Ca::new("prod").unwrap();
    for issued in [
        theirs.issue(&admin, &[], &[]).unwrap(),
        ours.issue_with_validity(&admin, &[], &[], now - 10 * day, now - day)
            .unwrap(),
    ] {
        let (cert, key) = certs::paths(dir.path(), &admin);
        std::fs::write(&cert, &issued.cert_pem).unwrap();
        std::fs::write(&key, &issued.key_pem).unwrap();
        let err = TlsContext::load(files(dir.path(), &admin), "prod").expect_err("refused");
        assert!(
            matches!(
                err,
                keel_tls::TlsError::Untrusted { .. } | keel_tls::TlsError::Expired { .. }
            ),
            "{err:?}"
        );
        let intruder = Transport::Tls(Arc::new(
            TlsContext::load_unchecked(files(dir.path(), &admin), "prod").unwrap(),
        ));
        assert!(check(&intruder, &addr, Expect::Controller).await.is_err());
    }
    assert!(seen.lock().unwrap().is_empty(), "no call got through");
}
