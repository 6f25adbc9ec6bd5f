//! A server's lane on loopback: connections that ask for it are served by
//! the lane's own runtime while the server's main runtime is stuck; the
//! others wait for the main runtime; a lane client still reaches a server
//! without a lane. Plaintext and mutual TLS alike. A gRPC health service
//! stands in for Keel's Raft service.

use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use keel_tls::admission::Door;
use keel_tls::certs::{self, InitSpec};
use keel_tls::transport::endpoint;
use keel_tls::{Expect, Identity, TlsContext, TlsFiles, Transport};
use tonic::transport::Channel;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

fn tls(dir: &Path, id: &Identity) -> Transport {
    let (cert, key) = certs::paths(dir, id);
    let files = TlsFiles {
        cert,
        key,
        ca: dir.join("ca.pem"),
    };
    Transport::Tls(Arc::new(TlsContext::load(files, "lane").unwrap()))
}

/// The server's and a client's transports: both plaintext, or both TLS.
fn transports(dir: &Path, with_tls: bool) -> (Transport, Transport) {
    if !with_tls {
        return (Transport::Plaintext, Transport::Plaintext);
    }
    certs::init(
        dir,
        &InitSpec {
            cluster_id: "lane".into(),
            controllers: 1,
            brokers: 0,
            users: vec!["admin".into()],
            ..Default::default()
        },
    )
    .unwrap();
    (
        tls(dir, &Identity::controller("lane", 1)),
        tls(dir, &Identity::user("lane", "admin")),
    )
}

fn router() -> tonic::transport::server::Router {
    let (_reporter, health) = tonic_health::server::health_reporter();
    tonic::transport::Server::builder().add_service(health)
}

/// A health server on a current-thread runtime of its own thread (its
/// "main" runtime), with a lane when `lane`. Returns its address and a
/// sender: each receiver sent blocks the main runtime's only thread
/// until something is sent on it or it is dropped.
fn start(
    transport: Transport,
    lane: bool,
) -> (
    String,
    tokio::sync::mpsc::UnboundedSender<std::sync::mpsc::Receiver<()>>,
) {
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (block_tx, mut block_rx) =
        tokio::sync::mpsc::unbounded_channel::<std::sync::mpsc::Receiver<()>>();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .await
                .unwrap();
            addr_tx
                .send(listener.local_addr().unwrap().to_string())
                .unwrap();
            let (_stop, stop_rx) = tokio::sync::watch::channel(false);
            let _server = if lane {
                transport
                    .serve_with_lane(
                        router(),
                        router(),
                        listener,
                        Door::unlimited("grpc"),
                        "test-lane".into(),
                        stop_rx,
                    )
                    .unwrap()
            } else {
                tokio::spawn(async move {
                    transport
                        .serve(router(), listener, std::future::pending())
                        .await
                })
            };
            // Blocks this runtime's only thread: nothing else of it runs.
            while let Some(until) = block_rx.recv().await {
                let _ = until.recv();
            }
        });
    });
    (addr_rx.recv().unwrap(), block_tx)
}

async fn answers(channel: Channel, within: Duration) -> bool {
    let mut client = HealthClient::new(channel);
    let check = client.check(HealthCheckRequest {
        service: String::new(),
    });
    matches!(tokio::time::timeout(within, check).await, Ok(Ok(_)))
}

fn channels(client: &Transport, addr: &str) -> (Channel, Channel) {
    let ep = || {
        endpoint(addr)
            .unwrap()
            .connect_timeout(Duration::from_secs(5))
    };
    (
        client.lane_channel(ep(), None, Expect::Controller),
        client.channel(ep(), None, Expect::Controller),
    )
}

async fn the_lane_answers_while_the_main_runtime_is_stuck(with_tls: bool) {
    let dir = tempfile::tempdir().unwrap();
    let (server, client) = transports(dir.path(), with_tls);
    let (addr, block) = start(server, true);
    let (lane, main) = channels(&client, &addr);
    assert!(
        answers(lane.clone(), Duration::from_secs(10)).await,
        "lane, idle server"
    );
    assert!(
        answers(main.clone(), Duration::from_secs(10)).await,
        "main, idle server"
    );

    let (unblock, until) = std::sync::mpsc::channel::<()>();
    block.send(until).unwrap();
    // The block takes effect once the main runtime reads it: a call on
    // the main connection that has no answer within 2 s shows it has.
    let mut stuck = false;
    for _ in 0..10 {
        if !answers(main.clone(), Duration::from_secs(2)).await {
            stuck = true;
            break;
        }
    }
    assert!(stuck, "the main runtime never stopped answering");
    for round in 0..5 {
        assert!(
            answers(lane.clone(), Duration::from_secs(10)).await,
            "the lane answers while the main runtime is stuck (call {round})"
        );
    }
    // A connection made now: a lane one is served, an ordinary one waits.
    let (new_lane, new_main) = channels(&client, &addr);
    assert!(
        answers(new_lane, Duration::from_secs(10)).await,
        "a new lane connection is served while the main runtime is stuck"
    );
    let waiting = tokio::spawn(answers(new_main, Duration::from_secs(30)));
    assert!(!answers(main.clone(), Duration::from_secs(1)).await);

    drop(unblock);
    assert!(
        waiting.await.unwrap(),
        "the ordinary connection made while stuck is served once the main runtime runs"
    );
    assert!(answers(main, Duration::from_secs(10)).await);
    assert!(answers(lane, Duration::from_secs(10)).await);
}

#[tokio::test]
async fn the_lane_answers_while_the_main_runtime_is_stuck_plaintext() {
    the_lane_answers_while_the_main_runtime_is_stuck(false).await;
}

#[tokio::test]
async fn the_lane_answers_while_the_main_runtime_is_stuck_tls() {
    the_lane_answers_while_the_main_runtime_is_stuck(true).await;
}

async fn a_lane_client_reaches_a_server_without_a_lane(with_tls: bool) {
    let dir = tempfile::tempdir().unwrap();
    let (server, client) = transports(dir.path(), with_tls);
    let (addr, _block) = start(server, false);
    let (lane, main) = channels(&client, &addr);
    assert!(answers(main, Duration::from_secs(10)).await);
    assert!(
        answers(lane, Duration::from_secs(10)).await,
        "the lane client falls back to an ordinary connection"
    );
}

#[tokio::test]
async fn a_lane_client_reaches_a_server_without_a_lane_plaintext() {
    a_lane_client_reaches_a_server_without_a_lane(false).await;
}

#[tokio::test]
async fn a_lane_client_reaches_a_server_without_a_lane_tls() {
    a_lane_client_reaches_a_server_without_a_lane(true).await;
}

#[tokio::test]
async fn a_client_of_another_cluster_is_refused_on_the_lane_too() {
    let dir = tempfile::tempdir().unwrap();
    let (server, _) = transports(dir.path(), true);
    let other = tempfile::tempdir().unwrap();
    let (_, stranger) = transports(other.path(), true);
    let (addr, _block) = start(server.clone(), true);
    let (lane, main) = channels(&stranger, &addr);
    assert!(!answers(lane, Duration::from_secs(5)).await);
    assert!(!answers(main, Duration::from_secs(5)).await);
    // A plaintext client asking for the lane of a TLS server: refused.
    let (lane, _) = channels(&Transport::Plaintext, &addr);
    assert!(!answers(lane, Duration::from_secs(5)).await);
}
