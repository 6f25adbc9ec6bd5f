//! Mutual TLS on real processes: every node presents its own certificate,
//! the kit's clients the `admin` user's. Who may connect, who may speak as
//! whom, and a certificate rotated under load.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use keel_proto::client::ControllerClient;
use keel_proto::pb;
use keel_proto::pb::broker_control_service_client::BrokerControlServiceClient;
use keel_proto::pb::broker_service_client::BrokerServiceClient;
use keel_proto::pb::raft_service_client::RaftServiceClient;
use keel_tls::{Expect, Identity, Transport};
use tonic::transport::Channel;

const LONG: Duration = Duration::from_secs(90);

/// Three controllers and `brokers` brokers over mutual TLS, fast timings.
fn tls_cluster(brokers: usize) -> Cluster {
    Cluster::start(fast_spec(brokers).tls(true)).expect("start a TLS cluster")
}

/// A client of `c`'s controllers speaking over `transport`, giving up fast.
fn client_over(c: &Cluster, transport: Transport) -> ControllerClient {
    ControllerClient::new(c.controller_addrs())
        .with_timeouts(Duration::from_secs(2), Duration::from_secs(4))
        .with_transport(transport)
}

/// A TLS transport presenting the certificate and key written in `dir`
/// for `identity`, trusting `dir/ca.pem`.
fn transport_from(dir: &Path, identity: &Identity) -> Transport {
    keel_testkit::cluster::tls_transport(dir, identity).expect("load the TLS files")
}

/// Writes `issued` for `identity` into `dir`, over whatever is there.
fn overwrite_issued(dir: &Path, identity: &Identity, issued: &keel_tls::certs::Issued) {
    let (cert, key) = keel_tls::certs::paths(dir, identity);
    std::fs::write(&key, &issued.key_pem).unwrap();
    std::fs::write(&cert, &issued.cert_pem).unwrap();
}

/// A channel over `transport` to the server at `addr` that `expect` accepts.
async fn channel(transport: &Transport, addr: &str, expect: Expect) -> Channel {
    let ep = keel_tls::transport::endpoint(addr)
        .unwrap()
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(5));
    transport
        .connect(ep, None, expect)
        .await
        .expect("the TLS connection opens")
}

async fn describe_topics(client: &ControllerClient) -> Result<pb::DescribeTopicsResponse, String> {
    client
        .admin(|mut c| async move {
            c.describe_topics(pb::DescribeTopicsRequest::default())
                .await
        })
        .await
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_clients_with_a_certificate_of_this_cluster_and_ca_are_served() {
    let mut c = tls_cluster(1);
    let admin_client = ready_with_topic(&mut c, LONG, "orders", 3, 1).await;
    let t = c
        .wait_topic("orders", "orders described with 3 partitions", LONG, |t| {
            t.partitions.len() == 3
        })
        .await
        .unwrap();
    assert_eq!(t.name, "orders");

    // No certificate at all: the handshake fails, nothing is served.
    let e = describe_topics(&client_over(&c, Transport::Plaintext))
        .await
        .expect_err("a plaintext client is refused");
    assert!(e.contains("no active controller reachable"), "{e}");

    // A certificate of another CA, even naming this cluster's admin.
    let stranger = tempfile::tempdir().unwrap();
    let other_ca = keel_tls::certs::Ca::new(CLUSTER_ID).unwrap();
    let admin = Identity::user(CLUSTER_ID, "admin");
    std::fs::write(stranger.path().join("ca.pem"), &other_ca.cert_pem).unwrap();
    overwrite_issued(
        stranger.path(),
        &admin,
        &other_ca.issue(&admin, &[], &[]).unwrap(),
    );
    let e = describe_topics(&client_over(&c, transport_from(stranger.path(), &admin)))
        .await
        .expect_err("a certificate of another CA is refused");
    assert!(e.contains("no active controller reachable"), "{e}");

    // Signed by this cluster's CA, but naming another cluster.
    let certs = c.certs_dir().unwrap().to_path_buf();
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::copy(certs.join("ca.pem"), elsewhere.path().join("ca.pem")).unwrap();
    let foreign = Identity::user("another-cluster", "admin");
    let issued = keel_tls::certs::load_ca(&certs)
        .unwrap()
        .issue(&foreign, &[], &[])
        .unwrap();
    overwrite_issued(elsewhere.path(), &foreign, &issued);
    let e = describe_topics(&client_over(&c, transport_from(elsewhere.path(), &foreign)))
        .await
        .expect_err("a certificate of another cluster id is refused");
    assert!(e.contains("no active controller reachable"), "{e}");

    // The admin user still gets through.
    let topics = describe_topics(&admin_client).await.unwrap();
    assert!(topics.topics.iter().any(|t| t.name == "orders"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_controller_may_speak_raft_as_itself() {
    let mut c = tls_cluster(0);
    let active = c.wait_active(LONG).await.unwrap();
    let follower = (active + 1) % 3;
    let addr = c.controller(follower).address();
    let to_node = follower as u64 + 1;
    let request = |from_node: u64| pb::RaftRequest {
        cluster_id: CLUSTER_ID.into(),
        from_node,
        payload: Vec::new(),
        seq: 0,
        to_node,
        from_directory: String::new(),
        to_directory: String::new(),
    };
    let other = (follower + 1) % 3;
    let other_id = other as u64 + 1;

    // The admin user's certificate, calling as a controller.
    let user = channel(c.transport(), &addr, Expect::ControllerId(to_node)).await;
    let mut raft = RaftServiceClient::new(user);
    let s = raft
        .vote(request(other_id))
        .await
        .expect_err("a user cannot vote");
    assert_eq!(s.code(), tonic::Code::PermissionDenied, "{s:?}");
    assert!(s.message().contains("keel://keel-test/user/admin"), "{s:?}");
    let s = raft
        .append(request(other_id))
        .await
        .expect_err("a user cannot append");
    assert_eq!(s.code(), tonic::Code::PermissionDenied, "{s:?}");
    let s = raft
        .lease(request(other_id))
        .await
        .expect_err("a user cannot send lease heartbeats");
    assert_eq!(s.code(), tonic::Code::PermissionDenied, "{s:?}");
    // Nor through the append stream: its first answer is the refusal.
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(request(other_id)).await.unwrap();
    let s = match raft
        .append_stream(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
    {
        Err(s) => s,
        Ok(answers) => answers
            .into_inner()
            .message()
            .await
            .expect_err("a user cannot stream appends"),
    };
    assert_eq!(s.code(), tonic::Code::PermissionDenied, "{s:?}");

    // A controller's certificate, calling as another controller.
    let third = (0..3).find(|i| *i != follower && *i != other).unwrap() as u64 + 1;
    let impostor = c
        .transport_as(&Identity::controller(CLUSTER_ID, other_id))
        .unwrap();
    let ch = channel(&impostor, &addr, Expect::ControllerId(to_node)).await;
    let s = RaftServiceClient::new(ch)
        .vote(request(third))
        .await
        .expect_err("controller {other_id} cannot vote as {third}");
    assert_eq!(s.code(), tonic::Code::PermissionDenied, "{s:?}");

    // A genuine certificate of a controller that is not a voter (one
    // issued ahead of an add-voter) cannot stand for election.
    let future = c
        .transport_as(&Identity::controller(CLUSTER_ID, 4))
        .unwrap();
    let ch = channel(&future, &addr, Expect::ControllerId(to_node)).await;
    let mut raft = RaftServiceClient::new(ch);
    for s in [
        raft.vote(request(4)).await.expect_err("node 4 cannot vote"),
        raft.pre_vote(request(4))
            .await
            .expect_err("node 4 cannot pre-vote"),
    ] {
        assert_eq!(s.code(), tonic::Code::PermissionDenied, "{s:?}");
        assert!(s.message().contains("not a voter"), "{s:?}");
    }

    // The quorum itself is unaffected.
    c.wait_converged(1, LONG).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_controller_certificate_serves_new_connections_and_no_request_fails() {
    // Default session timings: on a loaded host a broker fenced for a
    // late heartbeat would fail creates for reasons other than TLS.
    let mut c = Cluster::start(Spec::new(keel_bin(), CLUSTER_ID).brokers(1).tls(true))
        .expect("start a TLS cluster");
    let active = wait_ready(&mut c, LONG).await;
    let id = active as u64 + 1;
    let me = Identity::controller(CLUSTER_ID, id);
    let addr = c.controller(active).address();
    let certs = c.certs_dir().unwrap().to_path_buf();
    let (cert_path, _) = keel_tls::certs::paths(&certs, &me);
    let old = keel_tls::context::leaf_certificate(&cert_path).unwrap();
    // The certificate a new connection to the controller sees.
    let presented = || async {
        c.transport()
            .server_certificate(&addr, Expect::ControllerId(id))
            .await
            .unwrap()
            .unwrap()
    };
    assert_eq!(
        presented().await,
        old,
        "the controller presents the certificate it started with"
    );

    // Topics are created in a loop through the rotation.
    let client = Arc::new(c.client(Duration::from_secs(15), Duration::from_secs(60)));
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let load = {
        let (client, stop, ok, failed) = (client.clone(), stop.clone(), ok.clone(), failed.clone());
        tokio::spawn(async move {
            let mut n = 0u64;
            let mut errors = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                let r = admin::create_topic(&client, &format!("rotate-{n}"), 1, 1).await;
                match r {
                    Ok(_) => ok.fetch_add(1, Ordering::SeqCst),
                    Err(e) => {
                        errors.push(format!("{e:#}"));
                        failed.fetch_add(1, Ordering::SeqCst)
                    }
                };
            }
            errors
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;

    // A new certificate from the same CA over the files, then SIGHUP.
    let issued = keel_tls::certs::load_ca(&certs)
        .unwrap()
        .issue(&me, &[], &[])
        .unwrap();
    overwrite_issued(&certs, &me, &issued);
    let new = keel_tls::context::leaf_certificate(&cert_path).unwrap();
    assert_ne!(new, old);
    let pid = c.controller(active).pid().expect("the controller runs");
    let status = std::process::Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());

    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !c
        .controller(active)
        .process
        .log_text()
        .contains("TLS certificate reloaded")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no reload logged:\n{}",
            c.controller(active).process.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        presented().await,
        new,
        "a new connection sees the new certificate"
    );
    let serial = keel_tls::context::serial_hex(&new).unwrap();
    assert!(
        c.controller(active).process.log_text().contains(&serial),
        "the reload names the new serial {serial}"
    );

    tokio::time::sleep(Duration::from_secs(2)).await;
    // A fresh client (new connections) works too.
    let fresh = c.client(Duration::from_secs(5), Duration::from_secs(30));
    describe_topics(&fresh).await.unwrap();
    stop.store(true, Ordering::SeqCst);
    let errors = load.await.unwrap();
    assert!(ok.load(Ordering::SeqCst) > 0, "no create went through");
    assert_eq!(
        failed.load(Ordering::SeqCst),
        0,
        "failed creates: {errors:?}"
    );
    c.check_alive().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_and_controllers_accept_requests_only_from_the_certificate_they_name() {
    let mut c = tls_cluster(1);
    let active = wait_ready(&mut c, LONG).await;
    let controller = c.controller(active).address();

    // Broker 2's certificate cannot register or heartbeat as broker 1.
    let broker2 = c.transport_as(&Identity::broker(CLUSTER_ID, 2)).unwrap();
    let ch = channel(&broker2, &controller, Expect::Controller).await;
    let mut brokers = BrokerServiceClient::new(ch);
    let s = brokers
        .register_broker(pb::RegisterBrokerRequest {
            broker_id: 1,
            incarnation_id: vec![7; 16],
            cluster_id: CLUSTER_ID.into(),
            address: "127.0.0.1:1".into(),
            rack: None,
            log_dirs: vec![],
            previous_broker_epoch: 0,
            kafka_address: None,
        })
        .await
        .expect_err("broker 2 cannot register as broker 1");
    assert_eq!(s.code(), tonic::Code::PermissionDenied, "{s:?}");
    assert!(s.message().contains("broker 1"), "{s:?}");
    let s = brokers
        .broker_heartbeat(pb::BrokerHeartbeatRequest {
            broker_id: 1,
            broker_epoch: 1,
            ..Default::default()
        })
        .await
        .expect_err("broker 2 cannot heartbeat as broker 1");
    assert_eq!(s.code(), tonic::Code::PermissionDenied, "{s:?}");

    // A user's certificate cannot send LeaderAndIsr to a broker.
    let ch = channel(c.transport(), &c.broker(0).address(), Expect::Broker(1)).await;
    let s = BrokerControlServiceClient::new(ch)
        .leader_and_isr(pb::LeaderAndIsrRequest::default())
        .await
        .expect_err("a user cannot send LeaderAndIsr");
    assert_eq!(s.code(), tonic::Code::PermissionDenied, "{s:?}");
    assert!(s.message().contains("controller"), "{s:?}");

    // Broker 1 itself is unaffected: still registered and unfenced.
    tokio::time::sleep(Duration::from_secs(1)).await;
    c.wait_all_brokers_active(LONG).await.unwrap();
    c.check_alive().unwrap();
}

/// Runs `keel <args> --output json` with `env`; (exit code, stdout JSON,
/// stderr).
fn keel_cli(args: &[&str], env: &[(&str, String)]) -> (i32, serde_json::Value, String) {
    let mut cmd = std::process::Command::new(keel_bin());
    cmd.args(args).args(["--output", "json"]);
    for k in [
        "KEEL_TLS_CERT",
        "KEEL_TLS_KEY",
        "KEEL_TLS_CA",
        "KEEL_ALLOW_PLAINTEXT",
    ] {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run keel");
    (
        out.status.code().unwrap_or(-1),
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_speaks_tls_from_flags_or_environment_and_survives_a_failover() {
    let mut c = tls_cluster(1);
    let active = wait_ready(&mut c, LONG).await;
    let certs = c.certs_dir().unwrap().to_path_buf();
    let admin = Identity::user(CLUSTER_ID, "admin");
    let (cert, key) = keel_tls::certs::paths(&certs, &admin);
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    let ca = certs.join("ca.pem").display().to_string();
    let bootstrap = c.controller_addrs().join(",");

    // Flags.
    let (code, v, err) = keel_cli(
        &[
            "topics",
            "create",
            "flags",
            "--partitions",
            "2",
            "--replication-factor",
            "1",
            "--bootstrap",
            &bootstrap,
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--tls-ca",
            &ca,
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(!v.is_null(), "{err}");
    // The environment.
    let env = [
        ("KEEL_TLS_CERT", cert.clone()),
        ("KEEL_TLS_KEY", key.clone()),
        ("KEEL_TLS_CA", ca.clone()),
    ];
    let (code, v, err) = keel_cli(
        &[
            "topics",
            "describe",
            "--topic",
            "flags",
            "--bootstrap",
            &bootstrap,
        ],
        &env,
    );
    assert_eq!(code, 0, "{err}");
    assert!(v.to_string().contains("flags"), "{v}");
    // Neither: the CLI finds out before sending anything that the
    // listener wants TLS and says so at once (exit 3), as one JSON error
    // on stdout with how to pass credentials, and nothing on stderr.
    let started = std::time::Instant::now();
    let (code, v, err) = keel_cli(&["topics", "list", "--bootstrap", &bootstrap], &[]);
    assert_eq!(code, 3, "{v} {err}");
    assert_eq!(v["error"]["code"], "TLS_REQUIRED", "{v} {err}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("requires TLS"),
        "{v}"
    );
    assert!(
        v["error"]["hint"]
            .as_str()
            .unwrap_or("")
            .contains("--tls-cert"),
        "{v}"
    );
    assert!(err.is_empty(), "the error is printed once, as JSON: {err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "named only after {:?}",
        started.elapsed()
    );

    // The active controller dies: the others elect a new one over TLS,
    // the broker follows it, and writes go on.
    c.controller_mut(active).kill();
    let next = c.wait_active(LONG).await.unwrap();
    assert_ne!(next, active);
    create_topic(&client(&c), "after-failover", 1, 1).await;
    let (code, _, err) = keel_cli(
        &[
            "topics",
            "describe",
            "--topic",
            "after-failover",
            "--bootstrap",
            &bootstrap,
        ],
        &env,
    );
    assert_eq!(code, 0, "{err}");
    c.controller_mut(active).start().unwrap();
    c.wait_converged(1, LONG).await.unwrap();
    c.wait_all_brokers_active(LONG).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_reloads_its_certificate_on_sighup_and_keeps_it_when_the_new_one_is_wrong() {
    // With a Kafka listener: one certificate for both doors, reloaded for
    // both; and metrics listeners, for the expiry gauge.
    let mut c = Cluster::start(
        fast_spec(1)
            .tls(true)
            .kafka(keel_testkit::KafkaPorts::Free)
            .metrics(true),
    )
    .expect("start a TLS cluster with a Kafka listener");
    wait_ready(&mut c, LONG).await;
    let me = Identity::broker(CLUSTER_ID, 1);
    let addr = c.broker(0).address();
    let certs = c.certs_dir().unwrap().to_path_buf();
    let (cert_path, _) = keel_tls::certs::paths(&certs, &me);
    let hup = |c: &Cluster| {
        let pid = c.broker(0).pid().expect("the broker runs");
        let status = std::process::Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    let wait_log = |c: &Cluster, what: &str, times: usize| {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while c.broker(0).process.log_text().matches(what).count() < times {
            assert!(
                std::time::Instant::now() < deadline,
                "no {what:?} logged:\n{}",
                c.broker(0).process.log_tail(20)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let presented = |c: &Cluster| {
        let t = c.transport().clone();
        let addr = addr.clone();
        async move {
            t.server_certificate(&addr, Expect::Broker(1))
                .await
                .unwrap()
                .unwrap()
        }
    };
    // What the broker's Kafka listener presents to a new TLS client.
    let kafka_presented = |c: &Cluster| {
        let Transport::Tls(ctx) = c.transport() else {
            panic!("a TLS cluster")
        };
        let config = ctx.kafka_client_config();
        let kafka = c.kafka_addrs()[0].clone();
        async move {
            let tcp = tokio::net::TcpStream::connect(&kafka).await.unwrap();
            let name =
                rustls::pki_types::ServerName::try_from(keel_tls::certs::SERVER_NAME).unwrap();
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await
                .expect("the Kafka listener's handshake");
            tls.get_ref().1.peer_certificates().unwrap()[0]
                .as_ref()
                .to_vec()
        }
    };
    let before = keel_tls::context::leaf_certificate(&cert_path).unwrap();
    assert_eq!(kafka_presented(&c).await, before);

    // A new certificate from the same CA: new connections see it.
    let ca = keel_tls::certs::load_ca(&certs).unwrap();
    overwrite_issued(&certs, &me, &ca.issue(&me, &[], &[]).unwrap());
    let new = keel_tls::context::leaf_certificate(&cert_path).unwrap();
    hup(&c);
    wait_log(&c, "TLS certificate reloaded", 1);
    assert_eq!(presented(&c).await, new);
    assert_eq!(kafka_presented(&c).await, new, "the Kafka listener too");

    // A certificate naming broker 2 over broker 1's files: refused, the
    // broker keeps presenting its own.
    let two = Identity::broker(CLUSTER_ID, 2);
    overwrite_issued(&certs, &me, &ca.issue(&two, &[], &[]).unwrap());
    hup(&c);
    wait_log(&c, "names another identity", 1);
    assert_eq!(presented(&c).await, new);
    // Garbage: refused too.
    std::fs::write(&cert_path, "not a certificate").unwrap();
    hup(&c);
    wait_log(&c, "cannot reload the TLS files", 1);
    assert_eq!(presented(&c).await, new);
    assert_eq!(kafka_presented(&c).await, new);

    // The expiry gauge says years: the kit's certificates last three.
    let metrics_addr = c.broker(0).metrics_addr.expect("a metrics listener");
    let left = expiry_seconds(metrics_addr, |s| s > 300.0 * DAY_SECS).await;
    assert!(left < 3.0 * 366.0 * DAY_SECS, "{left}");
    // Controllers export it too.
    let controller_metrics = c.controller(0).metrics_addr.expect("an HTTP listener");
    expiry_seconds(controller_metrics, |s| s > 300.0 * DAY_SECS).await;
    assert!(
        !c.broker(0)
            .process
            .log_text()
            .contains("TLS certificate expires in"),
        "no expiry warning for a certificate of three years"
    );

    // A certificate naming this very broker, but issued by another CA (the
    // CA file unchanged): refused, and the log says why.
    let now = std::time::SystemTime::now();
    let day = Duration::from_secs(24 * 3600);
    let other_ca = keel_tls::certs::Ca::new(CLUSTER_ID).unwrap();
    overwrite_issued(&certs, &me, &other_ca.issue(&me, &[], &[]).unwrap());
    hup(&c);
    wait_log(&c, "does not chain to the CA", 1);
    assert_eq!(presented(&c).await, new);
    assert_eq!(kafka_presented(&c).await, new);
    // An expired certificate of the right CA: refused.
    let expired = ca
        .issue_with_validity(&me, &[], &[], now - 30 * day, now - day)
        .unwrap();
    overwrite_issued(&certs, &me, &expired);
    hup(&c);
    wait_log(&c, "broker-1.pem expired on ", 1);
    assert_eq!(presented(&c).await, new);
    // One not valid before tomorrow: refused.
    let early = ca
        .issue_with_validity(&me, &[], &[], now + day, now + 30 * day)
        .unwrap();
    overwrite_issued(&certs, &me, &early);
    hup(&c);
    wait_log(&c, "is not valid yet", 1);
    assert_eq!(presented(&c).await, new);
    // A good certificate with the key of another: refused.
    let other_key = ca.issue(&me, &[], &[]).unwrap();
    let mismatched = keel_tls::certs::Issued {
        cert_pem: ca.issue(&me, &[], &[]).unwrap().cert_pem,
        key_pem: other_key.key_pem,
    };
    overwrite_issued(&certs, &me, &mismatched);
    hup(&c);
    wait_log(&c, "is not the private key of", 1);
    assert_eq!(presented(&c).await, new);
    assert_eq!(kafka_presented(&c).await, new);
    assert_eq!(
        c.broker(0)
            .process
            .log_text()
            .matches("TLS certificate reloaded")
            .count(),
        1,
        "no refused certificate was loaded"
    );

    // A good certificate that expires in ten days (and half a day, so the
    // whole days left are ten however long the reload takes): loaded, with
    // a warning, and the gauge falls below 30 days.
    let soon = ca
        .issue_with_validity(&me, &[], &[], now - day, now + 10 * day + day / 2)
        .unwrap();
    overwrite_issued(&certs, &me, &soon);
    let soon_der = keel_tls::context::leaf_certificate(&cert_path).unwrap();
    hup(&c);
    wait_log(&c, "TLS certificate reloaded", 2);
    wait_log(&c, "the TLS certificate expires in 10 days", 1);
    assert_eq!(presented(&c).await, soon_der);
    assert_eq!(kafka_presented(&c).await, soon_der);
    let left = expiry_seconds(metrics_addr, |s| s < 30.0 * DAY_SECS).await;
    assert!(left > 10.0 * DAY_SECS, "{left}");

    // The broker still heartbeats and takes partitions.
    create_topic(&client(&c), "after-reload", 2, 1).await;
    c.wait_topic("after-reload", "both partitions led", LONG, |t| {
        t.partitions.len() == 2
            && t.partitions
                .iter()
                .all(|p| p.state.as_ref().is_some_and(|s| s.leader == Some(1)))
    })
    .await
    .unwrap();
    c.check_alive().unwrap();
}

const DAY_SECS: f64 = 24.0 * 3600.0;

/// The node's `keel_tls_certificate_expiry_seconds`, scraped from `addr`
/// until `ok` holds for it (bounded).
async fn expiry_seconds(addr: std::net::SocketAddr, ok: impl Fn(f64) -> bool) -> f64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let text = keel_testkit::probe::scrape_metrics(addr)
            .await
            .unwrap_or_default();
        let value = text
            .lines()
            .find_map(|l| l.strip_prefix("keel_tls_certificate_expiry_seconds "))
            .and_then(|v| v.trim().parse::<f64>().ok());
        if let Some(v) = value.filter(|v| ok(*v)) {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no fitting expiry gauge ({value:?}); last scrape:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What `keel args` printed and how it exited; it fails the test if it
/// has not exited within `bound` (a node that started after all).
fn output_within(args: &[&str], bound: Duration) -> std::process::Output {
    use std::process::Stdio;
    let mut child = std::process::Command::new(keel_bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run keel");
    let deadline = std::time::Instant::now() + bound;
    while child.try_wait().expect("wait for keel").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("keel {args:?} still runs after {bound:?}: it started");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("keel's output")
}

/// A controller or broker whose certificate is expired, not valid yet, or
/// of another CA does not start, and says why in one line.
#[test]
fn a_node_with_a_certificate_its_peers_would_refuse_does_not_start() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let spec = keel_tls::certs::InitSpec {
        cluster_id: CLUSTER_ID.into(),
        controllers: 1,
        brokers: 1,
        ..Default::default()
    };
    keel_tls::certs::init(&certs, &spec).unwrap();
    let ca = keel_tls::certs::load_ca(&certs).unwrap();
    let other_ca = keel_tls::certs::Ca::new(CLUSTER_ID).unwrap();
    let now = std::time::SystemTime::now();
    let day = Duration::from_secs(24 * 3600);
    let controller = Identity::controller(CLUSTER_ID, 1);
    let broker = Identity::broker(CLUSTER_ID, 1);
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let cases = [
        (
            &controller,
            ca.issue_with_validity(&controller, &[], &[], now - 30 * day, now - day),
            "controller-1.pem expired on ",
        ),
        (
            &broker,
            ca.issue_with_validity(&broker, &[], &[], now + day, now + 30 * day),
            "broker-1.pem is not valid yet",
        ),
        (
            &controller,
            other_ca.issue(&controller, &[], &[]),
            "controller-1.pem does not chain to the CA in",
        ),
    ];
    for (who, issued, why) in cases {
        overwrite_issued(&certs, who, &issued.unwrap());
        let (cert, key) = keel_tls::certs::paths(&certs, who);
        let ca_file = certs.join("ca.pem");
        let tls = [
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
            "--tls-ca",
            ca_file.to_str().unwrap(),
        ];
        let mut args = if who == &controller {
            vec!["controller", "--node-id", "1", "--voters", "1@127.0.0.1:1"]
        } else {
            vec!["broker", "--broker-id", "1", "--controllers", "127.0.0.1:1"]
        };
        args.extend([
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            data,
            "--cluster-id",
            CLUSTER_ID,
        ]);
        args.extend(tls);
        let out = output_within(&args, Duration::from_secs(30));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {err}", args[0]);
        assert!(err.contains(why), "{}: {err}", args[0]);
        assert_eq!(err.trim().lines().count(), 1, "{}: {err}", args[0]);
        assert!(
            !std::path::Path::new(data).exists(),
            "{} wrote its data dir before refusing",
            args[0]
        );
        // Put right, the same command line passes its check.
        overwrite_issued(&certs, who, &ca.issue(who, &[], &[]).unwrap());
        output_ok(
            std::process::Command::new(keel_bin())
                .args(&args)
                .arg("--check"),
            "keel --check",
        );
    }
}

/// Secure by default: a controller or a broker given neither TLS files nor
/// `--allow-plaintext` does not start, and says why in one line.
#[test]
fn a_node_without_tls_settings_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    for args in [
        vec![
            "controller",
            "--node-id",
            "1",
            "--listen",
            "127.0.0.1:0",
            "--voters",
            "1@127.0.0.1:1",
            "--data-dir",
            data,
            "--cluster-id",
            CLUSTER_ID,
        ],
        vec![
            "broker",
            "--broker-id",
            "1",
            "--listen",
            "127.0.0.1:0",
            "--controllers",
            "127.0.0.1:1",
            "--data-dir",
            data,
            "--cluster-id",
            CLUSTER_ID,
        ],
    ] {
        let out = std::process::Command::new(keel_bin())
            .args(&args)
            .env_remove("KEEL_TLS_CERT")
            .env_remove("KEEL_TLS_KEY")
            .env_remove("KEEL_TLS_CA")
            .env_remove("KEEL_ALLOW_PLAINTEXT")
            .output()
            .expect("run keel");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{} started without TLS", args[0]);
        assert!(
            err.contains("no TLS settings") && err.contains("--allow-plaintext"),
            "{}: {err}",
            args[0]
        );
        assert_eq!(err.trim().lines().count(), 1, "{}: {err}", args[0]);
        assert!(
            !std::path::Path::new(data).exists(),
            "{} wrote its data dir before refusing",
            args[0]
        );
    }
}
