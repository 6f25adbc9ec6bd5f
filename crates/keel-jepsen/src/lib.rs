//! Jepsen-style fault testing of real `keel` processes.
//!
//! A run starts three controllers and N brokers (child processes of this
//! binary, each on its own 127.0.2.x address), lets concurrent clients
//! create, delete, describe, add partitions to, alter configs of,
//! reassign and elect preferred leaders of topics of a small key space
//! while a nemesis partitions the network (iptables), kills and pauses
//! processes, changes the quorum's membership, then heals everything and
//! checks:
//!
//! * (a) linearizability of the topic operations per name, over (exists,
//!   topic id, partitions, replication factor, configs) ([`linear`]);
//! * (b) no acknowledged create lost ([`lost`]);
//! * (c) broker-observed safety from the brokers' leadership histories ([`brokers`]);
//! * (d) convergence of controllers and broker caches, (e) recovery ([`probes`]);
//! * acknowledged reassignments finished where they were sent ([`reassign`]);
//! * zombie probes refused, and no node process exiting by itself;
//! * with the `intruder` nemesis, no request with bad credentials accepted
//!   and none of them leaving a trace in the cluster state ([`intruder`]);
//! * with the `power` nemesis (data dirs on LazyFS), every node back after
//!   each power cut and brokers' epochs never going back across their own
//!   power cuts ([`power`]).
//!
//! Every node and every harness client speaks mutual TLS (the kit's
//! certificates; the harness's clients are the super user `User:admin`,
//! zombie probes present a controller's certificate) unless the run is
//! `--plaintext`. On TLS runs the brokers' Kafka listeners (`--client
//! kafka`, and the intruder nemesis) take SASL_SSL logins
//! (`--kafka-ssl-client-auth requested`): the Kafka workload logs in as
//! `User:jepsen-client`, a SCRAM-SHA-512 user with ACLs for exactly what
//! it does ([`sasl`]).
//!
//! Everything lands in `<results-dir>/<timestamp>-seed<N>/`: `history.jsonl`,
//! `results.json`, `report.html`, `logs/`, broker histories, and
//! `intruder.jsonl` (every intruder attempt and its answer).

pub mod brokers;
pub mod client;
pub mod clock;
pub mod cluster;
pub mod history;
pub mod incarnations;
pub mod intruder;
pub mod kafka_client;
pub mod linear;
pub mod lost;
pub mod nemesis;
pub mod net;
pub mod netem;
pub mod partitions;
pub mod probes;
pub mod reassign;
pub mod report;
pub mod sasl;
pub mod timing;

use std::collections::{BTreeMap, BTreeSet};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use keel_testkit::{ClusterFaults, SpecFaults};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::client::{AdminClient, Transport};
use crate::cluster::{Cluster, CLIENT_IP};
use crate::history::{OpKind, OpRecord, Outcome, Seen};
use crate::nemesis::{Family, Nemesis};

/// Exit codes of `keel jepsen`.
pub const EXIT_VALID: u8 = 0;
pub const EXIT_INVALID: u8 = 1;
pub const EXIT_USAGE: u8 = 2;
pub const EXIT_LOCAL: u8 = 4;
/// Partitions requested but no root / no iptables.
pub const EXIT_NO_PACKET_FILTER: u8 = 5;
/// Power cuts requested but no root / no FUSE / no LazyFS: the same code
/// as [`EXIT_NO_PACKET_FILTER`] (both say "run as root").
pub const EXIT_NEEDS_ROOT: u8 = EXIT_NO_PACKET_FILTER;
pub const EXIT_INTERRUPTED: u8 = 130;

/// One run's settings.
#[derive(Clone, Debug)]
pub struct Config {
    pub exe: PathBuf,
    pub time_limit: Duration,
    pub families: BTreeSet<Family>,
    pub seed: u64,
    pub results_dir: PathBuf,
    pub brokers: usize,
    pub clients: usize,
    /// How long each fault lasts (drawn, by default, up to `--fault-secs`).
    pub fault: timing::FaultLength,
    pub heal: Duration,
    pub recovery_bound: Duration,
    pub names: usize,
    pub replication_factor: u32,
    /// Mutual TLS on every node and every harness client (the default);
    /// `false` runs everything in plaintext.
    pub tls: bool,
    /// What the workload's clients speak: Keel's gRPC admin API on the
    /// controllers, or Kafka on the brokers' Kafka listeners (which the
    /// brokers then have). The harness's own reads (final reads, recovery,
    /// convergence) always use gRPC.
    pub client: kafka_client::ClientKind,
}

/// `YYYYmmddTHHMMSSZ` of now (UTC).
fn timestamp() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0) as i64;
    let days = secs.div_euclid(86400);
    let rem = secs.rem_euclid(86400);
    // Civil from days (Howard Hinnant).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

struct Shared {
    start: Instant,
    ops: Mutex<Vec<OpRecord>>,
    stop: AtomicBool,
    next_process: AtomicU64,
}

impl Shared {
    fn ms(&self) -> f64 {
        self.start.elapsed().as_secs_f64() * 1000.0
    }

    fn push(&self, mut op: OpRecord) {
        let mut ops = self.ops.lock().unwrap();
        op.index = ops.len();
        ops.push(op);
    }
}

fn record(
    client: i64,
    process: u64,
    op: OpKind,
    name: &str,
    invoke_ms: f64,
    complete_ms: f64,
    r: client::OpResult,
) -> OpRecord {
    OpRecord {
        index: 0,
        client,
        process,
        op,
        name: name.to_string(),
        invoke_ms,
        complete_ms,
        outcome: r.outcome.unwrap_or(Outcome::Info),
        error: r.error,
        message: r.message,
        seen: r.seen,
        topic_id: r.topic_id,
        partitions: r.partitions,
        replication_factor: r.replication_factor,
        configs: r.configs,
        config_key: r.config_key,
        config_value: r.config_value,
        partition: r.partition,
        replicas: r.replicas,
        node: r.node,
        attempts: r.attempts,
    }
}

/// The topic the workload never deletes: half of its reassignments and
/// preferred elections go to it (see [`reassign`]).
pub const PLACED_TOPIC: &str = "jepsen-placed";
const PLACED_PARTITIONS: u32 = 2;

/// Topic configs the workload sets and removes, each with valid values.
const WORKLOAD_CONFIGS: [(&str, &[&str]); 3] = [
    ("retention.ms", &["60000", "86400000", "-1"]),
    ("cleanup.policy", &["delete", "compact", "compact,delete"]),
    ("max.message.bytes", &["65536", "1048588", "2097152"]),
];

async fn worker(
    id: usize,
    cfg: Config,
    ctrl: Vec<String>,
    kafka: Vec<String>,
    kafka_security: kafka_client::KafkaSecurity,
    transport: Transport,
    shared: Arc<Shared>,
) {
    let mut rng = StdRng::seed_from_u64(cfg.seed.wrapping_mul(1_000_003).wrapping_add(id as u64));
    let mut admin = match cfg.client {
        kafka_client::ClientKind::Grpc => {
            kafka_client::Client::Grpc(AdminClient::new(ctrl, CLIENT_IP.into(), transport))
        }
        kafka_client::ClientKind::Kafka => kafka_client::Client::Kafka(
            kafka_client::KafkaClient::new(kafka, CLIENT_IP.into(), kafka_security),
        ),
    };
    let mut process = shared.next_process.fetch_add(1, Ordering::SeqCst);
    while !shared.stop.load(Ordering::SeqCst) {
        let mut name = format!("jepsen-{}", rng.random_range(0..cfg.names));
        let roll = rng.random_range(0..100);
        let t0 = shared.ms();
        let (kind, r) = if roll < 30 {
            let parts = rng.random_range(1..=2);
            (
                OpKind::Create,
                admin.create(&name, parts, cfg.replication_factor).await,
            )
        } else if roll < 50 {
            (OpKind::Delete, admin.delete(&name).await)
        } else if roll < 75 {
            (OpKind::Describe, admin.describe(&name).await)
        } else if roll < 82 {
            // Sometimes no larger than the current count: INVALID_PARTITIONS.
            let total = rng.random_range(2..=4);
            (
                OpKind::CreatePartitions,
                admin.create_partitions(&name, total).await,
            )
        } else if roll < 92 {
            let (key, values) = WORKLOAD_CONFIGS[rng.random_range(0..WORKLOAD_CONFIGS.len())];
            let value =
                (rng.random_range(0..4) > 0).then(|| values[rng.random_range(0..values.len())]);
            (
                OpKind::AlterConfig,
                admin.alter_config(&name, key, value).await,
            )
        } else if roll < 97 {
            let partition = rng.random_range(0..2);
            let mut brokers: Vec<u32> = (1..=cfg.brokers as u32).collect();
            brokers.shuffle(&mut rng);
            brokers.truncate(cfg.replication_factor as usize);
            if rng.random_bool(0.5) {
                name = PLACED_TOPIC.to_string();
            }
            (
                OpKind::Reassign,
                admin.reassign(&name, partition, &brokers).await,
            )
        } else {
            if rng.random_bool(0.5) {
                name = PLACED_TOPIC.to_string();
            }
            (OpKind::ElectPreferred, admin.elect_preferred(&name).await)
        };
        let t1 = shared.ms();
        let info = r.outcome != Some(Outcome::Ok) && r.outcome != Some(Outcome::Fail);
        shared.push(record(id as i64, process, kind, &name, t0, t1, r));
        if info {
            // The old operation may still be in flight: continue as a new process.
            process = shared.next_process.fetch_add(1, Ordering::SeqCst);
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(10..60))).await;
    }
}

/// Creates a topic of [`nemesis::BIG_PARTITIONS`] partitions whenever the
/// nemesis asks (it kills the active controller while the create commits),
/// reads it back until a describe answers, then deletes it. Every
/// operation goes into the history (client -2), so the checkers see
/// whether the topic ever showed part of its partitions.
async fn big_creates(
    ctrl: Vec<String>,
    transport: Transport,
    shared: Arc<Shared>,
    mut asks: tokio::sync::mpsc::Receiver<tokio::sync::oneshot::Sender<String>>,
) {
    let mut admin = AdminClient::new(ctrl, CLIENT_IP.into(), transport);
    let mut n = 0u64;
    while let Some(started) = asks.recv().await {
        let name = format!("jepsen-big-{n}");
        n += 1;
        let process = shared.next_process.fetch_add(1, Ordering::SeqCst);
        let t0 = shared.ms();
        let _ = started.send(name.clone());
        let r = admin.create(&name, nemesis::BIG_PARTITIONS, 1).await;
        shared.push(record(
            -2,
            process,
            OpKind::Create,
            &name,
            t0,
            shared.ms(),
            r,
        ));
        // Read it back (through the fault and the failover); bounded.
        for _ in 0..40 {
            let t0 = shared.ms();
            let r = admin.describe(&name).await;
            let ok = r.outcome == Some(Outcome::Ok);
            shared.push(record(
                -2,
                process,
                OpKind::Describe,
                &name,
                t0,
                shared.ms(),
                r,
            ));
            if ok {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let t0 = shared.ms();
        let r = admin.delete(&name).await;
        let process = shared.next_process.fetch_add(1, Ordering::SeqCst);
        shared.push(record(
            -2,
            process,
            OpKind::Delete,
            &name,
            t0,
            shared.ms(),
            r,
        ));
    }
}

/// Waits until a controller is active and every broker is unfenced.
async fn wait_ready(
    transport: &Transport,
    ctrl: &[String],
    brokers: usize,
    bound: Duration,
) -> Result<(), String> {
    let start = Instant::now();
    let mut last = String::from("no answer yet");
    while start.elapsed() < bound {
        if let Some(a) = client::find_active(transport, ctrl, Duration::from_secs(1)).await {
            if let Some(c) = client::describe_cluster(transport, &a, Duration::from_secs(1)).await {
                let up = c
                    .brokers
                    .iter()
                    .filter_map(|b| b.broker.as_ref())
                    .filter(|b| !b.fenced)
                    .count();
                if up >= brokers {
                    return Ok(());
                }
                last = format!("{up}/{brokers} brokers unfenced");
            } else {
                last = format!("active controller {a} does not describe the cluster");
            }
        } else {
            last = "no active controller".into();
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Err(last)
}

/// How long the brokers get to learn a new user's credential and ACLs
/// (they refresh within a heartbeat, or at once after a failed login).
const LOGIN_BOUND: Duration = Duration::from_secs(30);

/// Creates the Kafka workload's SCRAM user with a fresh password and the
/// ACLs the workload needs, and waits until it can log in on every
/// broker; returns its SASL_SSL settings.
async fn workload_user(
    transport: &Transport,
    ctrl: &[String],
    kafka_addrs: &[String],
    ca_pem: &std::path::Path,
    cluster_id: &str,
) -> Result<kafka_client::KafkaSecurity, String> {
    let user = sasl::WORKLOAD_USER;
    let password = sasl::random_password();
    sasl::create_user(transport, ctrl, user, &password, LOGIN_BOUND).await?;
    sasl::grant(transport, ctrl, sasl::workload_bindings(user), LOGIN_BOUND).await?;
    let security = kafka_client::KafkaSecurity::sasl_ssl(ca_pem, cluster_id, user, &password)?;
    sasl::wait_for_login(kafka_addrs, &security, LOGIN_BOUND).await?;
    eprintln!("keel jepsen: Kafka user User:{user} (SCRAM-SHA-512) logs in on every broker");
    Ok(security)
}

/// The intruder's SCRAM users (the victim, allowed everything on the
/// names only the intruder uses, and one without ACLs) and its Kafka
/// attacks, once both users log in on every broker.
async fn intruder_kafka(
    transport: &Transport,
    ctrl: &[String],
    kafka_addrs: &[String],
    ca_pem: &std::path::Path,
    cluster_id: &str,
    creds: &intruder::Credentials,
) -> Result<intruder::kafka::KafkaAttacks, String> {
    use intruder::kafka::{NOACL_USER, VICTIM_USER};
    let victim = sasl::random_password();
    let noacl = sasl::random_password();
    sasl::create_user(transport, ctrl, VICTIM_USER, &victim, LOGIN_BOUND).await?;
    sasl::create_user(transport, ctrl, NOACL_USER, &noacl, LOGIN_BOUND).await?;
    let prefix =
        keel_proto::pb::acl_resource::Resource::TopicPrefix(intruder::CREATE_PREFIX.into());
    sasl::grant(
        transport,
        ctrl,
        vec![sasl::allow(VICTIM_USER, prefix, "all")],
        LOGIN_BOUND,
    )
    .await?;
    for (user, password) in [(VICTIM_USER, &victim), (NOACL_USER, &noacl)] {
        let s = kafka_client::KafkaSecurity::sasl_ssl(ca_pem, cluster_id, user, password)?;
        sasl::wait_for_login(kafka_addrs, &s, LOGIN_BOUND).await?;
    }
    let node = creds
        .brokers
        .values()
        .next()
        .ok_or("no broker certificate")?;
    intruder::kafka::KafkaAttacks::new(
        kafka_addrs.to_vec(),
        ca_pem,
        cluster_id,
        &creds.foreign_admin,
        node,
        victim,
        noacl,
    )
}

/// Runs one test; returns the exit code.
pub async fn run(cfg: Config) -> u8 {
    // One run at a time on a host: runs share the 127.0.2.x addresses,
    // the iptables chain and the netem qdisc, and a second one would tear
    // down the first one's faults before finding its addresses taken.
    let _one_run = match RunLock::take() {
        Ok(l) => l,
        Err(why) => {
            eprintln!("keel jepsen: {why}");
            return EXIT_LOCAL;
        }
    };
    if cfg.families.contains(&Family::Intruder) && !cfg.tls {
        eprintln!("keel jepsen: the intruder nemesis forges certificates and needs TLS; drop --plaintext or choose --nemesis without `intruder`.");
        return EXIT_USAGE;
    }
    let needs_net = cfg.families.iter().any(|f| f.needs_packet_filter());
    if needs_net {
        if let Some(why) = net::unavailable_reason() {
            eprintln!("keel jepsen: {why}.");
            eprintln!("Network partitions are enforced with iptables and need root; run as root (CI does), or choose --nemesis without `partition`, `partition-one-way`, `bridge`, `majorities-ring` and `isolate-leader` (e.g. kill,pause).");
            return EXIT_NO_PACKET_FILTER;
        }
    }
    if cfg.families.contains(&Family::Clock) {
        if let Some(why) = clock::unavailable_reason() {
            eprintln!("keel jepsen: {why}; choose --nemesis without `clock`.");
            return EXIT_LOCAL;
        }
    }
    if cfg.families.contains(&Family::NetSlow) {
        if let Some(why) = netem::unavailable_reason() {
            eprintln!("keel jepsen: {why}.");
            eprintln!("The net-slow nemesis slows the nodes' addresses with tc netem on lo, which needs root and iproute2; run as root (CI does), or choose --nemesis without `net-slow`.");
            return EXIT_NEEDS_ROOT;
        }
    }
    if cfg.families.contains(&Family::Power) {
        if let Some(why) = keel_testkit::lazyfs::unavailable_reason() {
            eprintln!("keel jepsen: {why}.");
            eprintln!("The power nemesis puts every node's data dir on a LazyFS (FUSE) mount, which needs root and /dev/fuse; run as root (CI does), or choose --nemesis without `power`.");
            return EXIT_NEEDS_ROOT;
        }
    }
    // Listening from here on: a Ctrl-C while the disks mount (seconds, on
    // LazyFS) is seen once they are, and then unmounts them.
    let mut interrupt =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("keel jepsen: cannot listen for Ctrl-C: {e}");
                return EXIT_LOCAL;
            }
        };
    let run_dir = cfg
        .results_dir
        .join(format!("{}-seed{}", timestamp(), cfg.seed));
    if let Err(e) = std::fs::create_dir_all(run_dir.join("logs")) {
        eprintln!("keel jepsen: cannot create {}: {e}", run_dir.display());
        return EXIT_LOCAL;
    }
    // Cluster::new, unlike Cluster::start, runs a deliberately unsafe
    // build too: showing that the checkers catch one is part of the job.
    let spec = cluster::spec(
        cfg.exe.clone(),
        &run_dir,
        cfg.brokers,
        cfg.tls,
        cfg.families.contains(&Family::Power),
    )
    .fiu(cfg.families.contains(&Family::Disk));
    // Kafka listeners for the Kafka workload, and for the intruder (the
    // cluster's other front door), SASL_SSL-ready on TLS runs.
    let kafka_listeners =
        cfg.client == kafka_client::ClientKind::Kafka || cfg.families.contains(&Family::Intruder);
    let spec = cluster::with_kafka(spec, kafka_listeners, cfg.tls);
    let cluster = match Cluster::new(spec) {
        Ok(c) => Arc::new(Mutex::new(c)),
        Err(e) => {
            eprintln!("keel jepsen: cannot lay out the cluster: {e:#}");
            return EXIT_LOCAL;
        }
    };
    // Every node under libfaketime, on true time until a clock fault.
    let clock_dir = cfg
        .families
        .contains(&Family::Clock)
        .then(|| run_dir.join("clock"));
    if let Some(dir) = &clock_dir {
        let mut c = cluster.lock().unwrap();
        let laid = std::fs::create_dir_all(dir).and_then(|()| {
            c.nodes.iter_mut().try_for_each(|n| {
                let file = clock::file_of(dir, n.name());
                clock::set(&file, None)?;
                clock::env(&mut n.process.launch.env, &file);
                Ok(())
            })
        });
        if let Err(e) = laid {
            eprintln!(
                "keel jepsen: cannot set up the nodes' clocks in {}: {e}",
                dir.display()
            );
            return EXIT_LOCAL;
        }
    }
    let body = body(cfg.clone(), run_dir.clone(), cluster.clone(), clock_dir);
    tokio::select! {
        code = body => code,
        _ = interrupt.recv() => {
            eprintln!("\nkeel jepsen: interrupted; removing packet filter rules, stopping nodes and unmounting their disks");
            net::teardown();
            netem::teardown_all();
            let mut c = cluster.lock().unwrap();
            c.kill_all();
            // Other tasks may still hold the cluster: unmount now.
            for n in c.nodes.iter_mut() {
                n.disk = None;
            }
            EXIT_INTERRUPTED
        }
    }
}

/// The host-wide lock of a run: an exclusive `flock` on
/// `<tmp>/keel-jepsen.lock` holding the run's pid, released when the run
/// ends, however it ends (the kernel drops it with the process).
struct RunLock(#[allow(dead_code)] std::fs::File);

impl RunLock {
    fn path() -> PathBuf {
        std::env::temp_dir().join("keel-jepsen.lock")
    }

    fn take() -> Result<Self, String> {
        Self::take_at(&Self::path())
    }

    fn take_at(path: &std::path::Path) -> Result<Self, String> {
        use std::io::{Read, Seek, Write};
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        match f.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = f.read_to_string(&mut pid);
                return Err(format!(
                    "another keel jepsen run (pid {}) holds {}: runs share the 127.0.2.x addresses and the packet filter, so only one runs at a time; wait for it to end",
                    pid.trim(),
                    path.display()
                ));
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(format!("cannot lock {}: {e}", path.display()))
            }
        }
        let _ = f.set_len(0);
        let _ = f.rewind();
        let _ = write!(f, "{}", std::process::id());
        Ok(Self(f))
    }
}

async fn body(
    cfg: Config,
    run_dir: PathBuf,
    cluster: Arc<Mutex<Cluster>>,
    clock_dir: Option<PathBuf>,
) -> u8 {
    let net = if cfg.families.iter().any(|f| f.needs_packet_filter()) {
        match net::install() {
            Ok(n) => Some(n),
            Err(e) => {
                eprintln!(
                    "keel jepsen: cannot set up iptables chain {}: {e}",
                    net::CHAIN
                );
                return EXIT_NO_PACKET_FILTER;
            }
        }
    } else {
        // Still remove a chain left over by a crashed run, when we can.
        if net::unavailable_reason().is_none() {
            net::teardown();
        }
        None
    };
    let netem = if cfg.families.contains(&Family::NetSlow) {
        match netem::Netem::install() {
            Ok(n) => {
                eprintln!("keel jepsen: slow network by {:?}", n.mode());
                Some(n)
            }
            Err(e) => {
                eprintln!("keel jepsen: cannot set up the slow network: {e}");
                return EXIT_NEEDS_ROOT;
            }
        }
    } else {
        None
    };
    let mut seed_rng = StdRng::seed_from_u64(cfg.seed ^ 0x5eed_1e45);
    let lengths = timing::Lengths::new(cfg.fault, timing::Timing::of_controllers(), &mut seed_rng);
    eprintln!(
        "keel jepsen: faults {:?}; controllers' lease {} ms, election timeout {}-{} ms",
        cfg.fault,
        lengths.timing().lease_ms,
        lengths.timing().election_timeout_min_ms,
        lengths.timing().election_timeout_max_ms
    );
    eprintln!(
        "keel jepsen: run dir {} (seed {}, nemesis {:?}, {} brokers, {} {} clients, {} s, {})",
        run_dir.display(),
        cfg.seed,
        cfg.families,
        cfg.brokers,
        cfg.clients,
        cfg.client.as_str(),
        cfg.time_limit.as_secs(),
        match (cfg.tls, cfg.client) {
            // Kafka listeners follow the node's transport.
            (true, kafka_client::ClientKind::Kafka) => {
                "mutual TLS (Kafka requests over SASL_SSL as User:jepsen-client)"
            }
            (true, kafka_client::ClientKind::Grpc) => "mutual TLS",
            (false, _) => "plaintext",
        }
    );
    let started = {
        let mut c = cluster.lock().unwrap();
        c.check_addresses_free()
            .map_err(|e| e.context("another run still alive?"))
            .and_then(|()| c.start_all())
    };
    if let Err(e) = started {
        eprintln!("keel jepsen: {e:#}");
        return EXIT_LOCAL;
    }
    let (ctrl, broker_addrs, kafka_addrs, transport, zombie_transport) = {
        let c = cluster.lock().unwrap();
        let zombie = c.transport_as(&keel_tls::Identity::controller(
            &c.cluster_id,
            nemesis::ZOMBIE_CONTROLLER,
        ));
        let zombie = match zombie {
            Ok(t) => t,
            Err(e) => {
                eprintln!("keel jepsen: cannot issue the zombie controller's certificate: {e:#}");
                return EXIT_LOCAL;
            }
        };
        (
            c.controller_addrs(),
            c.brokers()
                .map(|n| (n.id, n.address()))
                .collect::<Vec<(u32, String)>>(),
            c.kafka_addrs(),
            c.transport().clone(),
            zombie,
        )
    };
    if let Err(e) = wait_ready(&transport, &ctrl, cfg.brokers, Duration::from_secs(60)).await {
        eprintln!(
            "keel jepsen: the cluster did not come up within 60 s ({e}); logs in {}",
            run_dir.join("logs").display()
        );
        return EXIT_LOCAL;
    }
    let (ca_pem, cluster_id) = {
        let c = cluster.lock().unwrap();
        (
            c.certs_dir().map(|d| d.join("ca.pem")),
            c.cluster_id.clone(),
        )
    };
    // The Kafka workload's login: SASL_SSL as a SCRAM user with ACLs on TLS
    // runs, plaintext otherwise.
    let kafka_security = match (&ca_pem, cfg.client) {
        (Some(ca), kafka_client::ClientKind::Kafka) => {
            match workload_user(&transport, &ctrl, &kafka_addrs, ca, &cluster_id).await {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("keel jepsen: cannot set up the Kafka workload's user: {e}");
                    return EXIT_LOCAL;
                }
            }
        }
        _ => kafka_client::KafkaSecurity::from_transport(&transport),
    };
    // The intruder's certificates, the topics it aims at and the state it
    // must not change.
    let intruding = cfg.families.contains(&Family::Intruder);
    let mut intruder_setup = None;
    if intruding {
        let creds = intruder::credentials(&cluster.lock().unwrap(), &run_dir);
        let creds = match creds {
            Ok(c) => c,
            Err(e) => {
                eprintln!("keel jepsen: cannot make the intruder's certificates: {e:#}");
                return EXIT_LOCAL;
            }
        };
        let kafka_attacks = match (&ca_pem, kafka_addrs.is_empty()) {
            (Some(ca), false) => {
                match intruder_kafka(&transport, &ctrl, &kafka_addrs, ca, &cluster_id, &creds).await
                {
                    Ok(k) => Some(k),
                    Err(e) => {
                        eprintln!("keel jepsen: cannot set up the intruder's Kafka users: {e}");
                        return EXIT_LOCAL;
                    }
                }
            }
            _ => None,
        };
        let mut admin = AdminClient::new(ctrl.clone(), CLIENT_IP.into(), transport.clone());
        if let Err(e) =
            intruder::create_targets(&mut admin, cfg.replication_factor, Duration::from_secs(30))
                .await
        {
            eprintln!("keel jepsen: {e}");
            return EXIT_LOCAL;
        }
        let before =
            intruder::observe(&transport, &ctrl, &broker_addrs, Duration::from_secs(20)).await;
        if let Err(e) = &before {
            eprintln!("keel jepsen: cannot read the cluster state before the run: {e}");
        }
        intruder_setup = Some((creds, kafka_attacks, before.ok()));
    }
    eprintln!("keel jepsen: cluster up; starting workload and nemesis");

    let shared = Arc::new(Shared {
        start: Instant::now(),
        ops: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
        next_process: AtomicU64::new(0),
    });
    let faults = Arc::new(Mutex::new(Vec::new()));
    let current = Arc::new(Mutex::new(String::from("none yet")));
    let probes = Arc::new(Mutex::new(Vec::new()));
    let (big_tx, big_rx) = tokio::sync::mpsc::channel(1);
    let big_task = tokio::spawn(big_creates(
        ctrl.clone(),
        transport.clone(),
        shared.clone(),
        big_rx,
    ));
    let disk_faulted = Arc::new(Mutex::new(nemesis::DiskFaulted::new()));
    let disk_stops = Arc::new(Mutex::new(Vec::new()));
    let mut nemesis = Nemesis {
        big_create: Some(big_tx),
        killed_mid_decision: false,
        cut_all_controllers: false,
        restarts: Vec::new(),
        epochs: Vec::new(),
        restart_bound: cfg.recovery_bound,
        disk_faulted: disk_faulted.clone(),
        disk_stops: disk_stops.clone(),
        disk_epochs: Vec::new(),
        cluster: cluster.clone(),
        net,
        families: cfg.families.iter().copied().collect(),
        rng: StdRng::seed_from_u64(cfg.seed),
        start: shared.start,
        faults: faults.clone(),
        current: current.clone(),
        probes: probes.clone(),
        transport: transport.clone(),
        zombie_transport,
        netem,
        lengths,
        kill_all_windows: 0,
        clock_dir,
        voters_missing: Vec::new(),
    };
    let intruder_stop = Arc::new(AtomicBool::new(false));
    let intruder_attempts = Arc::new(Mutex::new(Vec::new()));
    let mut intruder_before = None;
    let mut intruder_kafka_on = false;
    let intruder_task = match intruder_setup {
        Some((creds, kafka_attacks, before)) => {
            intruder_before = before;
            intruder_kafka_on = kafka_attacks.is_some();
            let cluster_id = cluster.lock().unwrap().cluster_id.clone();
            let i = intruder::Intruder {
                ctrl: ctrl.clone(),
                brokers: broker_addrs.clone(),
                cluster_id,
                admin: transport.clone(),
                creds,
                names: cfg.names,
                start: shared.start,
                attempts: intruder_attempts.clone(),
                kafka: kafka_attacks,
            };
            Some(tokio::spawn(i.run(intruder_stop.clone(), cfg.time_limit)))
        }
        None => None,
    };
    // The topic reassignments and elections also aim at: never deleted,
    // so where its partitions end up can be judged against the last
    // acknowledged reassignment ([`reassign`]). Created before any fault.
    {
        let mut admin = AdminClient::new(ctrl.clone(), CLIENT_IP.into(), transport.clone());
        for _ in 0..20 {
            let process = shared.next_process.fetch_add(1, Ordering::SeqCst);
            let t0 = shared.ms();
            let r = admin
                .create(PLACED_TOPIC, PLACED_PARTITIONS, cfg.replication_factor)
                .await;
            let done = r.outcome == Some(Outcome::Ok)
                || r.error.as_deref() == Some("TOPIC_ALREADY_EXISTS");
            shared.push(record(
                -3,
                process,
                OpKind::Create,
                PLACED_TOPIC,
                t0,
                shared.ms(),
                r,
            ));
            if done {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    let (time_limit, heal) = (cfg.time_limit, cfg.heal);
    let nemesis_task = tokio::spawn(async move {
        nemesis.run(time_limit, heal).await;
        nemesis
    });
    let mut workers = Vec::new();
    for id in 0..cfg.clients {
        workers.push(tokio::spawn(worker(
            id,
            cfg.clone(),
            ctrl.clone(),
            kafka_addrs.clone(),
            kafka_security.clone(),
            transport.clone(),
            shared.clone(),
        )));
    }
    // Progress line and crash watch until the time limit.
    let mut crashes: Vec<Value> = Vec::new();
    let tty = std::io::stderr().is_terminal();
    let mut last_print = Instant::now() - Duration::from_secs(10);
    while shared.start.elapsed() < cfg.time_limit {
        tokio::time::sleep(Duration::from_millis(500)).await;
        {
            let mut c = cluster.lock().unwrap();
            for i in 0..c.nodes.len() {
                let Some(status) = c.nodes[i].process.exited() else {
                    continue;
                };
                let st = status.to_string();
                // Its disk was failing: stopping is what it must do (the
                // disk checker looks at how).
                let disk_stop =
                    nemesis::disk_stop_of(&disk_faulted.lock().unwrap(), i, Instant::now());
                if let Some(healed) = disk_stop {
                    eprintln!(
                        "\nkeel jepsen: {} stopped ({st}) while its disk was failing",
                        c.nodes[i].name()
                    );
                    disk_stops.lock().unwrap().push(nemesis::DiskStop::new(
                        c.nodes[i].name(),
                        shared.ms(),
                        status,
                    ));
                    // Its fault was healed already: start it again now.
                    if healed {
                        if let Err(e) = c.nodes[i].start() {
                            eprintln!("keel jepsen: cannot restart {}: {e:#}", c.nodes[i].name());
                        }
                    }
                    continue;
                }
                // LazyFS crashed under it (the power nemesis's disk fault,
                // which then restarts it): not an exit of its own. LazyFS
                // died first, so this is already visible.
                if c.disk_crashed(i) {
                    eprintln!(
                        "\nkeel jepsen: {} exited ({st}) after its LazyFS disk crashed",
                        c.nodes[i].name()
                    );
                    continue;
                }
                let n = &c.nodes[i];
                crashes.push(json!({"node": n.name(), "at_ms": shared.ms(), "status": st}));
                eprintln!(
                    "\nkeel jepsen: {} exited by itself ({st}); see {}",
                    n.name(),
                    n.process.log.display()
                );
            }
        }
        let every = if tty {
            Duration::from_millis(500)
        } else {
            Duration::from_secs(5)
        };
        if last_print.elapsed() >= every {
            last_print = Instant::now();
            let (n, ok, fail, info) = {
                let ops = shared.ops.lock().unwrap();
                let c = |o: Outcome| ops.iter().filter(|x| x.outcome == o).count();
                (
                    ops.len(),
                    c(Outcome::Ok),
                    c(Outcome::Fail),
                    c(Outcome::Info),
                )
            };
            let line = format!(
                "[{:>5.1}s/{}s] ops {n} (ok {ok}, fail {fail}, info {info}) fault: {}",
                shared.start.elapsed().as_secs_f64(),
                cfg.time_limit.as_secs(),
                current.lock().unwrap()
            );
            if tty {
                eprint!("\r{line:<120}");
            } else {
                eprintln!("{line}");
            }
        }
    }
    if tty {
        eprintln!();
    }
    shared.stop.store(true, Ordering::SeqCst);
    intruder_stop.store(true, Ordering::SeqCst);
    for w in workers {
        let _ = w.await;
    }
    if let Some(t) = intruder_task {
        let _ = t.await;
    }
    let mut nemesis = match nemesis_task.await {
        Ok(n) => n,
        Err(e) => {
            eprintln!("keel jepsen: nemesis task failed: {e}");
            return EXIT_LOCAL;
        }
    };
    // The nemesis holds the only sender: the big-create worker ends once it
    // finished what it started.
    nemesis.big_create = None;
    let _ = big_task.await;
    let heal_notes = nemesis.heal_all();
    let healed_ms = shared.ms();
    let healed_at = Instant::now();
    eprintln!(
        "keel jepsen: final heal at {:.1}s ({}); checking recovery",
        healed_ms / 1000.0,
        heal_notes.join(", ")
    );

    // (e) recovery.
    let mut admin = AdminClient::new(ctrl.clone(), CLIENT_IP.into(), transport.clone());
    let (rec_ok, rec_detail, rec_ops) = probes::recovery(
        &transport,
        &ctrl,
        &mut admin,
        healed_at,
        cfg.recovery_bound,
        cfg.brokers,
    )
    .await;
    for (name, r, t0, t1) in rec_ops {
        shared.push(record(
            -1,
            u64::MAX,
            OpKind::Create,
            &name,
            healed_ms + t0,
            healed_ms + t1,
            r,
        ));
    }
    // Final reads, for (b) and as the last operations of (a).
    let mut final_read: BTreeMap<String, Seen> = BTreeMap::new();
    let mut final_ids: BTreeMap<String, String> = BTreeMap::new();
    let mut final_unread = Vec::new();
    for i in 0..cfg.names {
        let name = format!("jepsen-{i}");
        let mut got = None;
        for _ in 0..5 {
            let t0 = shared.ms();
            let r = admin.describe(&name).await;
            let t1 = shared.ms();
            let seen = r.seen;
            let id = r.topic_id.clone();
            let ok = r.outcome == Some(Outcome::Ok);
            shared.push(record(-1, u64::MAX - 1, OpKind::Describe, &name, t0, t1, r));
            if ok {
                got = seen;
                if let Some(id) = id {
                    final_ids.insert(name.clone(), id);
                }
                break;
            }
        }
        match got {
            Some(s) => {
                final_read.insert(name, s);
            }
            None => final_unread.push(name),
        }
    }
    // (d) convergence.
    eprintln!("keel jepsen: checking convergence");
    let (conv_ok, conv_detail) =
        probes::convergence(&transport, &ctrl, &broker_addrs, Duration::from_secs(30)).await;
    // What the intruder may have changed, read once everything converged.
    let intruder_after = if intruding {
        match intruder::observe(&transport, &ctrl, &broker_addrs, Duration::from_secs(20)).await {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!("keel jepsen: cannot read the cluster state after the run: {e}");
                None
            }
        }
    } else {
        None
    };
    // Where reassignments landed, once none is in flight.
    eprintln!("keel jepsen: checking reassignments");
    let placement = reassign::read_placement(&transport, &ctrl, Duration::from_secs(30)).await;
    let end_ms = shared.ms();

    // Stop everything, collect broker histories.
    let late_crashes: Vec<Value> = {
        let mut c = cluster.lock().unwrap();
        let v = c
            .nodes
            .iter_mut()
            .filter_map(|n| {
                n.process.exited().map(
                    |st| json!({"node": n.name(), "status": st.to_string(), "when": "after heal"}),
                )
            })
            .collect();
        c.kill_all();
        v
    };
    crashes.extend(late_crashes);
    drop(nemesis.net.take()); // removes the chain
    drop(nemesis.netem.take()); // removes the slow network
    let mut broker_hist = BTreeMap::new();
    let mut unparsable = Vec::new();
    {
        let c = cluster.lock().unwrap();
        for n in c.brokers() {
            let path = n.history_path();
            let _ = std::fs::copy(&path, run_dir.join(format!("{}-history.jsonl", n.name())));
            match brokers::read_events(&path) {
                Ok((ev, bad)) => {
                    broker_hist.insert(n.id, ev);
                    unparsable.extend(bad.into_iter().map(|l| format!("{}: {l}", n.name())));
                }
                Err(e) => unparsable.push(format!("{}: {e}", n.name())),
            }
        }
    }

    // Checkers.
    let ops = shared.ops.lock().unwrap().clone();
    let (lin_valid, lin_detail) = linear::check_history(&ops, 20_000_000);
    let (lost_valid, mut lost_detail) = lost::check_with_ids(&ops, &final_read, &final_ids);
    let (inc_valid, inc_detail) = incarnations::check(&ops);
    let lost_valid = lost_valid && final_unread.is_empty();
    if !final_unread.is_empty() {
        lost_detail["final_read_failed_for"] = json!(final_unread);
    }
    let (parts_valid, parts_detail) = partitions::check(&ops);
    let (reassign_valid, reassign_detail) = match &placement {
        Ok(p) => reassign::check(&ops, p),
        Err(e) => (
            false,
            json!({"error": format!("cannot read the placement: {e}")}),
        ),
    };
    let (brk_valid, mut brk_detail) = brokers::check(&broker_hist);
    if !unparsable.is_empty() {
        brk_detail["unparsable_lines"] = json!(unparsable);
    }
    let attempts = intruder_attempts.lock().unwrap().clone();
    let intruder_result = intruding.then(|| {
        intruder::check_with_kafka(
            &attempts,
            intruder_before.as_ref(),
            intruder_after.as_ref(),
            &broker_hist,
            intruder_kafka_on,
        )
    });
    if intruding {
        let _ = intruder::write_attempts(&run_dir.join("intruder.jsonl"), &attempts);
    }
    let probes_v = probes.lock().unwrap().clone();
    // Refusals needed: none without a zombie window (`all` may draw
    // none in a short run), one after one window, then
    // ZOMBIE_MIN_REFUSED.
    let zombie_windows = faults
        .lock()
        .unwrap()
        .iter()
        .filter(|f| f.family == Family::Zombie)
        .count();
    let min_refused = nemesis::ZOMBIE_MIN_REFUSED.min(zombie_windows);
    let (zombie_valid, zombie_detail) = nemesis::zombie_check(&probes_v, min_refused);
    let powered = cfg.families.contains(&Family::Power);
    let restarts = std::mem::take(&mut nemesis.restarts);
    let epochs = std::mem::take(&mut nemesis.epochs);
    let faults_v = faults.lock().unwrap().clone();
    let fault_lengths = timing::summarize(
        &nemesis.lengths.timing(),
        &faults_v
            .iter()
            .map(|f| (f.kind.clone(), f.planned_ms))
            .collect::<Vec<_>>(),
    );

    let count = |o: Outcome| ops.iter().filter(|x| x.outcome == o).count();
    let mut checkers = serde_json::Map::new();
    let b = |v: bool| json!(v);
    let lin_json = match lin_valid {
        Some(v) => json!(v),
        None => json!("unknown"),
    };
    let mut put = |name: &str, valid: Value, detail: Value| {
        let mut m = serde_json::Map::new();
        m.insert("valid".into(), valid);
        m.insert("detail".into(), detail);
        checkers.insert(name.into(), Value::Object(m));
    };
    put("linearizable", lin_json, lin_detail);
    put("no_lost_creates", b(lost_valid), lost_detail);
    put("topic_incarnations", b(inc_valid), inc_detail);
    put("whole_topics", b(parts_valid), parts_detail);
    put("reassignments_land", b(reassign_valid), reassign_detail);
    put("broker_safety", b(brk_valid), brk_detail);
    put("convergence", b(conv_ok), conv_detail);
    put("recovery", b(rec_ok), rec_detail);
    put("zombie_requests_refused", b(zombie_valid), zombie_detail);
    if let Some((v, detail)) = intruder_result {
        put("intruder", b(v), detail);
    }
    if cfg.families.contains(&Family::Disk) {
        let stops = disk_stops.lock().unwrap().clone();
        let (v, detail) = nemesis::disk_stop_check(&stops);
        put("disk_faults_stop_cleanly", b(v), detail);
        let (v, detail) = crate::nemesis::power::epoch_check(&nemesis.disk_epochs);
        put("broker_epochs_across_disk_faults", b(v), detail);
    }
    if cfg.families.contains(&Family::Membership) {
        let missing = std::mem::take(&mut nemesis.voters_missing);
        put(
            "voters_back_after_membership_changes",
            b(missing.is_empty()),
            json!({"not_added_back": missing}),
        );
    }
    if powered {
        let (v, detail) = crate::nemesis::power::restart_check(&restarts, cfg.recovery_bound);
        put("back_after_power_cuts", b(v), detail);
        let (v, detail) = crate::nemesis::power::epoch_check(&epochs);
        put("broker_epochs_across_power_cuts", b(v), detail);
    }
    put(
        "no_process_crashes",
        b(crashes.is_empty()),
        json!({"unexpected_exits": crashes}),
    );
    let valid = checkers
        .values()
        .all(|c| c.get("valid") == Some(&Value::Bool(true)));
    let summary = json!({
        "ops": ops.len(),
        "ok": count(Outcome::Ok),
        "fail": count(Outcome::Fail),
        "info": count(Outcome::Info),
        "faults": faults_v.len(),
        "ops_by_kind": report::ops_by_kind(&ops),
        "faults_by_kind": fault_lengths["faults_by_kind"].clone(),
        "short_faults_inside_lease": fault_lengths["short_faults_inside_lease"].clone(),
        "intruder_attempts": attempts.len(),
        "power_cuts": restarts.len(),
        "final_heal_ms": healed_ms.round(),
        "end_ms": end_ms.round(),
    });
    let results = json!({
        "valid": valid,
        "seed": cfg.seed,
        "time_limit_s": cfg.time_limit.as_secs(),
        "nemesis": cfg.families,
        "brokers": cfg.brokers,
        "clients": cfg.clients,
        "client": cfg.client.as_str(),
        "tls": cfg.tls,
        "summary": summary,
        "checkers": Value::Object(checkers),
        "fault_lengths": fault_lengths,
        "faults": faults_v,
    });
    let _ = history::write_history(&run_dir.join("history.jsonl"), &ops);
    let _ = std::fs::write(
        run_dir.join("results.json"),
        serde_json::to_string_pretty(&results).unwrap_or_default(),
    );
    let page = report::html(&results, &ops, &faults_v, end_ms);
    let _ = std::fs::write(run_dir.join("report.html"), page);

    eprintln!("keel jepsen: {summary}");
    for (name, c) in results["checkers"].as_object().into_iter().flatten() {
        eprintln!("  {name:<26} {}", c["valid"]);
    }
    eprintln!(
        "keel jepsen: valid = {valid}; report {}",
        run_dir.join("report.html").display()
    );
    if valid {
        EXIT_VALID
    } else {
        EXIT_INVALID
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_run_on_the_host_is_refused_while_the_first_holds_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keel-jepsen.lock");
        let first = RunLock::take_at(&path).expect("the first run takes the lock");
        let second = RunLock::take_at(&path)
            .err()
            .expect("a second run is refused");
        assert!(second.contains(&std::process::id().to_string()), "{second}");
        drop(first);
        assert!(
            RunLock::take_at(&path).is_ok(),
            "free again once the first ends"
        );
    }
}
