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
mod judge;
pub mod kafka_client;
pub mod linear;
pub mod lost;
pub mod nemesis;
pub mod net;
pub mod netem;
pub mod partitions;
mod phases;
pub mod probes;
pub mod reassign;
pub mod report;
pub mod sasl;
pub mod timing;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use keel_testkit::SpecFaults;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::client::{AdminClient, Transport};
use crate::cluster::{Cluster, CLIENT_IP};
use crate::history::{OpKind, OpRecord, Outcome};
use crate::nemesis::Family;

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
    let body = phases::body(cfg.clone(), run_dir.clone(), cluster.clone(), clock_dir);
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
