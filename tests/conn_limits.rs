//! Connection limits on real processes (`keel_tls::admission`): silent
//! connections do not hold up the active controller and are closed by the
//! handshake timeout; one address past its limit is refused while others
//! connect; a broker full of idle Kafka connections still answers the
//! cluster's own nodes and closes the idle ones; a node raises its
//! open-file limit. Every attacker speaks from an address of its own on
//! 127.0.0.0/8 (the nodes all listen on 127.0.0.1, a member address).

mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use common::*;
use keel_proto::pb;
use keel_tls::{Expect, Transport};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpSocket, TcpStream};

const LONG: Duration = Duration::from_secs(60);
/// How long a refused connection may take to be closed on a loaded host
/// (a close comes at once; only a busy scheduler delays it). Well under
/// the 10 s silence timeout, which would free room for the connections a
/// limit refused.
const REFUSED_WITHIN: Duration = Duration::from_secs(2);

/// An address of 127.0.0.0/8 that no node uses.
fn outsider(net: u8, host: u8) -> IpAddr {
    IpAddr::from([127, 0, net, host])
}

/// The address every node of a kit cluster listens on (a member's).
const MEMBER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

/// Opens up to `n` TCP connections to `to` from `from`, sending nothing;
/// gives up on one that does not connect within 2 s.
async fn open_from(from: IpAddr, to: SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut open = Vec::with_capacity(n);
    for _ in 0..n {
        let socket = TcpSocket::new_v4().expect("a socket");
        socket.bind(SocketAddr::new(from, 0)).expect("bind");
        match tokio::time::timeout(Duration::from_secs(2), socket.connect(to)).await {
            Ok(Ok(s)) => open.push(s),
            _ => break,
        }
    }
    open
}

/// Whether the server closed `s` (end of stream or reset) by `deadline`.
async fn closed_by(s: &mut TcpStream, deadline: Instant) -> bool {
    let mut buf = [0u8; 64];
    loop {
        match tokio::time::timeout_at(deadline.into(), s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            // A TLS alert or the like: read on to the end.
            Ok(Ok(_)) => continue,
        }
    }
}

/// How many of `conns` the server closed by `deadline`.
async fn count_closed(conns: &mut [TcpStream], deadline: Instant) -> usize {
    let mut closed = 0;
    for s in conns.iter_mut() {
        if closed_by(s, deadline).await {
            closed += 1;
        }
    }
    closed
}

/// `(closed, open)` after `wait`: a connection refused at once is closed
/// within it, an admitted silent one is not.
async fn split_closed(conns: &mut [TcpStream], wait: Duration) -> (usize, usize) {
    let closed = count_closed(conns, Instant::now() + wait).await;
    (closed, conns.len() - closed)
}

/// Splits `conns` after `wait`: how many the server closed, and the ones
/// still open.
async fn keep_open(conns: Vec<TcpStream>, wait: Duration) -> (usize, Vec<TcpStream>) {
    let deadline = Instant::now() + wait;
    let mut open = Vec::with_capacity(conns.len());
    let mut closed = 0;
    for mut s in conns {
        if closed_by(&mut s, deadline).await {
            closed += 1;
        } else {
            open.push(s);
        }
    }
    (closed, open)
}

/// DescribeCluster over a connection made now from `local`.
async fn describe_cluster_from(
    transport: &Transport,
    addr: SocketAddr,
    local: IpAddr,
) -> Result<pb::DescribeClusterResponse, String> {
    let ep = keel_tls::transport::endpoint(&addr.to_string())
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(10));
    let channel = transport
        .connect(ep, Some(local), Expect::Controller)
        .await
        .map_err(|e| format!("connect: {e:?}"))?;
    pb::admin_service_client::AdminServiceClient::new(channel)
        .describe_cluster(pb::DescribeClusterRequest::default())
        .await
        .map(|r| r.into_inner())
        .map_err(|e| e.to_string())
}

/// DescribeBroker over a connection made now from `local`.
async fn describe_broker_from(
    transport: &Transport,
    addr: SocketAddr,
    id: u32,
    local: IpAddr,
) -> Result<pb::DescribeBrokerResponse, String> {
    let ep = keel_tls::transport::endpoint(&addr.to_string())
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(10));
    let channel = transport
        .connect(ep, Some(local), Expect::Broker(id))
        .await
        .map_err(|e| format!("connect: {e:?}"))?;
    pb::broker_control_service_client::BrokerControlServiceClient::new(channel)
        .describe_broker(pb::DescribeBrokerRequest::default())
        .await
        .map(|r| r.into_inner())
        .map_err(|e| e.to_string())
}

/// The value of the sample of `name` whose labels include every one of
/// `labels` (`key="value"`); 0 when there is none.
fn sample(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Scrapes `addr` until `ok` holds for the text (bounded by [`LONG`]).
async fn scrape_until(addr: SocketAddr, what: &str, ok: impl Fn(&str) -> bool) -> String {
    scrape_within(addr, LONG, what, ok).await
}

/// More than a listener's TLS handshakes in progress at once
/// (`keel_tls::admission::DEFAULT_MAX_HANDSHAKES`): with a handshake slot
/// awaited per connection, these would stop the accept loop.
const SILENT: usize = 700;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_do_not_hold_up_the_active_controller_and_are_closed() {
    let started = Instant::now();
    let mut c = Cluster::start(
        Spec::new(keel_bin(), CLUSTER_ID)
            .tls(true)
            .metrics(true)
            .controller_flags(&["--tls-handshake-timeout-ms", "4000"]),
    )
    .expect("start a TLS cluster");
    let active = c.wait_active(LONG).await.expect("an active controller");
    let addr = c.controller(active).addr;
    let metrics = c.controller(active).metrics_addr.expect("an HTTP endpoint");

    let flood_began = Instant::now();
    let mut silent = open_from(outsider(70, 1), addr, SILENT).await;
    assert_eq!(silent.len(), SILENT, "every silent connection was accepted");

    let asked = Instant::now();
    let answer = describe_cluster_from(c.transport(), addr, outsider(70, 2)).await;
    // Answered at all, within the client's own bounds: a listener whose
    // accept loop waits for handshake slots keeps it waiting for the
    // silent ones' handshake timeout, and it fails. (How long it took is
    // a figure, not a bound.)
    assert!(
        answer.is_ok(),
        "DescribeCluster behind {SILENT} silent connections failed after {:?}: {answer:?}",
        asked.elapsed()
    );

    // Past the handshake slots: closed at once; the rest are held until
    // the handshake timeout (4 s), not before.
    let (closed_early, _) = split_closed(&mut silent, Duration::from_millis(300)).await;
    // (On a host so loaded that the timeout already passed, this part
    // cannot tell; the closes below still must happen.)
    if flood_began.elapsed() < Duration::from_secs(4) {
        assert!(
            closed_early < SILENT,
            "{closed_early} of {SILENT} closed before the handshake timeout"
        );
    }
    let all_by = flood_began + Duration::from_secs(4 + 10);
    let closed = count_closed(&mut silent, all_by).await;
    assert_eq!(closed, SILENT, "every silent connection closed");

    let text = scrape_until(metrics, "refusals counted", |t| {
        let timed_out = sample(
            t,
            "keel_connections_refused_total",
            &[r#"listener="grpc""#, r#"reason="handshake_timeout""#],
        );
        let no_slot = sample(
            t,
            "keel_connections_refused_total",
            &[r#"listener="grpc""#, r#"reason="handshakes""#],
        );
        timed_out >= 1.0 && timed_out + no_slot >= SILENT as f64
    })
    .await;
    assert!(
        text.contains("# HELP keel_connections_refused_total"),
        "{text}"
    );
    assert!(text.contains("keel_connections_open{"), "{text}");
    eprintln!("silent connections: {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_past_its_limit_is_refused_while_others_and_members_connect() {
    let started = Instant::now();
    const PER_IP: usize = 20;
    const TOTAL: usize = 40;
    let mut c = Cluster::start(
        Spec::new(keel_bin(), CLUSTER_ID)
            .controllers(1)
            .tls(true)
            .metrics(true)
            .controller_flags(&[
                "--max-connections-per-ip",
                &PER_IP.to_string(),
                "--max-connections",
                &TOTAL.to_string(),
                // Silent connections stay for the whole test.
                "--tls-handshake-timeout-ms",
                "60000",
            ]),
    )
    .expect("start a TLS controller");
    c.wait_active(LONG).await.expect("an active controller");
    let addr = c.controller(0).addr;
    let metrics = c.controller(0).metrics_addr.expect("an HTTP endpoint");
    let hold = Duration::from_millis(500);

    let mut first = open_from(outsider(71, 1), addr, PER_IP).await;
    let mut past = open_from(outsider(71, 1), addr, 5).await;
    let (closed, open) = split_closed(&mut first, hold).await;
    assert_eq!((closed, open), (0, PER_IP), "the first {PER_IP} are held");
    let (closed, _) = split_closed(&mut past, REFUSED_WITHIN).await;
    assert_eq!(closed, past.len(), "past the per-address limit: refused");

    // Another address still connects, and is served.
    let mut second = open_from(outsider(71, 2), addr, 5).await;
    let (closed, _) = split_closed(&mut second, hold).await;
    assert_eq!(closed, 0, "another address is admitted");
    describe_cluster_from(c.transport(), addr, outsider(71, 2))
        .await
        .expect("another address is served");

    // Fill the general pool from a third address: then outsiders are
    // refused, and a member's address still gets in from the reserve.
    let mut third = open_from(outsider(71, 3), addr, PER_IP).await;
    let (_, held) = split_closed(&mut third, hold).await;
    assert!(held < PER_IP, "the total limit refused some of the third");
    let mut late = open_from(outsider(71, 4), addr, 3).await;
    let (closed, _) = split_closed(&mut late, REFUSED_WITHIN).await;
    assert_eq!(closed, late.len(), "past the total limit: refused");
    describe_cluster_from(c.transport(), addr, MEMBER)
        .await
        .expect("a member's address is served from the reserve");

    let text = scrape_until(metrics, "refusals counted", |t| {
        sample(
            t,
            "keel_connections_refused_total",
            &[r#"listener="grpc""#, r#"reason="per_address""#],
        ) >= 5.0
            && sample(
                t,
                "keel_connections_refused_total",
                &[r#"listener="grpc""#, r#"reason="total""#],
            ) >= 3.0
    })
    .await;
    let open = sample(&text, "keel_connections_open", &[r#"listener="grpc""#]);
    assert!(open >= TOTAL as f64, "open gRPC connections: {open}");
    drop((first, second, third));
    eprintln!("per-address limit: {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_kafka_connections_leave_the_broker_to_the_cluster_and_are_closed() {
    let started = Instant::now();
    const TOTAL: usize = 150;
    const IDLE_MS: u64 = 8_000;
    let mut c = Cluster::start(
        Spec::new(keel_bin(), CLUSTER_ID)
            .controllers(1)
            .brokers(1)
            .kafka(keel_testkit::KafkaPorts::Free)
            .metrics(true)
            .broker_flags(&[
                "--max-connections",
                &TOTAL.to_string(),
                "--connections-max-idle-ms",
                &IDLE_MS.to_string(),
            ]),
    )
    .expect("start a cluster");
    c.wait_active(LONG).await.expect("an active controller");
    let broker = c.broker(0);
    let (grpc, kafka) = (broker.addr, broker.kafka_addr.expect("a Kafka listener"));
    let metrics = broker.metrics_addr.expect("a metrics endpoint");
    let transport = c.transport().clone();
    let id = broker.id;
    // Registered: the broker's gRPC listener serves the cluster.
    let deadline = Instant::now() + LONG;
    while describe_broker_from(&transport, grpc, id, MEMBER)
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "the broker never answered");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Idle Kafka connections from three addresses, past the total.
    let flood_began = Instant::now();
    let mut idle = Vec::new();
    for host in 1..=3 {
        idle.extend(open_from(outsider(72, host), kafka, TOTAL / 2).await);
    }
    let attempted = idle.len();
    let (refused, mut idle) = keep_open(idle, Duration::from_millis(500)).await;
    assert!(
        refused > 0 && refused < attempted,
        "{refused} of {attempted} refused"
    );
    assert!(flood_began.elapsed() < Duration::from_millis(IDLE_MS));

    // An outsider's new gRPC connection is refused; the cluster's own
    // addresses are still served.
    let mut outside = open_from(outsider(72, 9), grpc, 1).await;
    let (closed, _) = split_closed(&mut outside, REFUSED_WITHIN).await;
    assert_eq!(closed, 1, "an outsider is refused while the broker is full");
    describe_broker_from(&transport, grpc, id, MEMBER)
        .await
        .expect("the broker answers a member's address while full");

    // Idle ones are closed after connections.max.idle.ms.
    let after = flood_began + Duration::from_millis(IDLE_MS) + Duration::from_secs(8);
    let closed = count_closed(&mut idle, after).await;
    assert_eq!(closed, idle.len(), "every idle connection closed");

    // Room again: an outsider connects.
    let mut again = open_from(outsider(72, 10), grpc, 1).await;
    let (closed, _) = split_closed(&mut again, Duration::from_millis(500)).await;
    assert_eq!(closed, 0, "admitted once the idle ones are gone");

    scrape_until(metrics, "refusals and idle closes counted", |t| {
        sample(
            t,
            "keel_connections_refused_total",
            &[r#"listener="kafka""#, r#"reason="total""#],
        ) >= refused as f64
            && sample(
                t,
                "keel_connections_refused_total",
                &[r#"listener="kafka""#, r#"reason="idle""#],
            ) >= 1.0
    })
    .await;
    eprintln!("idle Kafka connections: {:?}", started.elapsed());
}

/// Sends `GET path` on `s` (HTTP/1.1, kept alive) and reads the answer's
/// head and its whole body; false when the server closed or failed first.
async fn http_get(s: &mut TcpStream, path: &str) -> bool {
    use tokio::io::AsyncWriteExt;
    let request = format!("GET {path} HTTP/1.1\r\nHost: keel\r\n\r\n");
    if s.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    let deadline = Instant::now() + LONG;
    loop {
        let text = String::from_utf8_lossy(&got).to_string();
        if let Some(head_end) = text.find("\r\n\r\n") {
            let length = text[..head_end]
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if got.len() >= head_end + 4 + length {
                return text.starts_with("HTTP/1.1 200");
            }
        }
        match tokio::time::timeout_at(deadline.into(), s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => return false,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_alive_http_connections_live_while_they_ask_and_are_closed_once_idle() {
    let started = Instant::now();
    const IDLE_MS: u64 = 4_000;
    let idle_flag = ["--connections-max-idle-ms", "4000"];
    let mut c = Cluster::start(
        Spec::new(keel_bin(), CLUSTER_ID)
            .controllers(1)
            .brokers(1)
            .metrics(true)
            .controller_flags(&idle_flag)
            .broker_flags(&idle_flag),
    )
    .expect("start a cluster");
    c.wait_active(LONG).await.expect("an active controller");
    let endpoints = [
        (
            "controller",
            c.controller(0).metrics_addr.expect("an HTTP endpoint"),
            "/health",
        ),
        (
            "broker",
            c.broker(0).metrics_addr.expect("a metrics endpoint"),
            "/metrics",
        ),
    ];
    for (node, addr, path) in endpoints {
        let mut asking = open_from(outsider(73, 1), addr, 1).await;
        let mut silent = open_from(outsider(73, 2), addr, 1).await;
        assert!(asking.len() == 1 && silent.len() == 1, "{node}: connect");
        let (asking, silent) = (&mut asking[0], &mut silent[0]);
        assert!(http_get(silent, path).await, "{node}: first answer");
        let silent_since = Instant::now();
        // Twice the idle timeout of requests, one every 500 ms: each one
        // answered on the same connection.
        let mut asked = 0;
        while silent_since.elapsed() < Duration::from_millis(2 * IDLE_MS) {
            assert!(
                http_get(asking, path).await,
                "{node}: request {asked} on a kept-alive connection"
            );
            asked += 1;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        assert!(
            closed_by(silent, silent_since + Duration::from_millis(IDLE_MS) + LONG).await,
            "{node}: the silent connection was never closed"
        );
        eprintln!(
            "{node}: silent connection closed after {:?}; {asked} requests on the other",
            silent_since.elapsed()
        );
        scrape_until(addr, "idle HTTP closes counted", |t| {
            sample(
                t,
                "keel_connections_refused_total",
                &[r#"listener="http""#, r#"reason="idle""#],
            ) >= 1.0
        })
        .await;
    }
    eprintln!("idle HTTP connections: {:?}", started.elapsed());
}

/// The soft and hard open-file limits of process `pid`.
fn open_file_limits(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("read limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("an open-file limit");
    let mut words = line["Max open files".len()..].split_whitespace();
    (
        words.next().unwrap_or_default().to_string(),
        words.next().unwrap_or_default().to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_raise_their_open_file_limit() {
    let started = Instant::now();
    // Nodes inherit a soft limit below the hard one...
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write only the struct passed.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    // (A soft limit already below the hard one is left as it is.)
    let lowered = libc::rlimit {
        rlim_cur: if lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur
        } else {
            lim.rlim_max / 2
        },
        rlim_max: lim.rlim_max,
    };
    // SAFETY: as above.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lowered) }, 0);
    let c = Cluster::start(Spec::new(keel_bin(), CLUSTER_ID).controllers(1).brokers(1));
    // SAFETY: as above.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
    let c = c.expect("start a cluster");
    // ...and raise it to the hard one at start.
    for node in [c.controller(0), c.broker(0)] {
        let pid = node.pid().expect("a running node");
        let hard = lim.rlim_max.to_string();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (soft, got_hard) = open_file_limits(pid);
            if soft == hard || soft == "unlimited" && got_hard == "unlimited" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{}: open-file limit {soft} (hard {got_hard})",
                node.name()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    eprintln!("open-file limit: {:?}", started.elapsed());
}
