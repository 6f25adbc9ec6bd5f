//! Jepsen-style fault testing of real `keel` processes.
//!
//! A run starts three controllers and N brokers (child processes of this
//! binary, each on its own 127.0.2.x address), lets concurrent clients
//! create, delete and describe topics of a small key space while a nemesis
//! partitions the network (iptables), kills and pauses processes, then
//! heals everything and checks:
//!
//! * (a) linearizability of the topic operations per name ([`linear`]);
//! * (b) no acknowledged create lost ([`lost`]);
//! * (c) broker-observed safety from the brokers' leadership histories ([`brokers`]);
//! * (d) convergence of controllers and broker caches, (e) recovery ([`probes`]);
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
//! `--plaintext`.
//!
//! Everything lands in `<results-dir>/<timestamp>-seed<N>/`: `history.jsonl`,
//! `results.json`, `report.html`, `logs/`, broker histories, and
//! `intruder.jsonl` (every intruder attempt and its answer).

pub mod brokers;
pub mod client;
pub mod cluster;
pub mod history;
pub mod intruder;
pub mod linear;
pub mod lost;
pub mod nemesis;
pub mod net;
pub mod partitions;
pub mod power;
pub mod probes;
pub mod report;

use std::collections::{BTreeMap, BTreeSet};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::rngs::StdRng;
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
    pub fault: Duration,
    pub heal: Duration,
    pub recovery_bound: Duration,
    pub names: usize,
    pub replication_factor: u32,
    /// Mutual TLS on every node and every harness client (the default);
    /// `false` runs everything in plaintext.
    pub tls: bool,
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
        node: r.node,
        attempts: r.attempts,
    }
}

async fn worker(
    id: usize,
    cfg: Config,
    ctrl: Vec<String>,
    transport: Transport,
    shared: Arc<Shared>,
) {
    let mut rng = StdRng::seed_from_u64(cfg.seed.wrapping_mul(1_000_003).wrapping_add(id as u64));
    let mut admin = AdminClient::new(ctrl, CLIENT_IP.into(), transport);
    let mut process = shared.next_process.fetch_add(1, Ordering::SeqCst);
    while !shared.stop.load(Ordering::SeqCst) {
        let name = format!("jepsen-{}", rng.random_range(0..cfg.names));
        let roll = rng.random_range(0..100);
        let t0 = shared.ms();
        let (kind, r) = if roll < 40 {
            let parts = rng.random_range(1..=2);
            (
                OpKind::Create,
                admin.create(&name, parts, cfg.replication_factor).await,
            )
        } else if roll < 70 {
            (OpKind::Delete, admin.delete(&name).await)
        } else {
            (OpKind::Describe, admin.describe(&name).await)
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

/// Runs one test; returns the exit code.
pub async fn run(cfg: Config) -> u8 {
    if cfg.families.contains(&Family::Intruder) && !cfg.tls {
        eprintln!("keel jepsen: the intruder nemesis forges certificates and needs TLS; drop --plaintext or choose --nemesis without `intruder`.");
        return EXIT_USAGE;
    }
    let needs_net = cfg.families.contains(&Family::Partition);
    if needs_net {
        if let Some(why) = net::unavailable_reason() {
            eprintln!("keel jepsen: {why}.");
            eprintln!("Network partitions are enforced with iptables and need root; run as root (CI does), or choose --nemesis without `partition` (e.g. kill,pause).");
            return EXIT_NO_PACKET_FILTER;
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
    let cluster = match Cluster::new(
        cluster::spec(
            cfg.exe.clone(),
            &run_dir,
            cfg.brokers,
            cfg.tls,
            cfg.families.contains(&Family::Power),
        )
        .fiu(cfg.families.contains(&Family::Disk)),
    ) {
        Ok(c) => Arc::new(Mutex::new(c)),
        Err(e) => {
            eprintln!("keel jepsen: cannot lay out the cluster: {e:#}");
            return EXIT_LOCAL;
        }
    };
    let body = body(cfg.clone(), run_dir.clone(), cluster.clone());
    tokio::select! {
        code = body => code,
        _ = interrupt.recv() => {
            eprintln!("\nkeel jepsen: interrupted; removing packet filter rules, stopping nodes and unmounting their disks");
            net::teardown();
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

async fn body(cfg: Config, run_dir: PathBuf, cluster: Arc<Mutex<Cluster>>) -> u8 {
    let net = if cfg.families.contains(&Family::Partition) {
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
    eprintln!(
        "keel jepsen: run dir {} (seed {}, nemesis {:?}, {} brokers, {} clients, {} s, {})",
        run_dir.display(),
        cfg.seed,
        cfg.families,
        cfg.brokers,
        cfg.clients,
        cfg.time_limit.as_secs(),
        if cfg.tls { "mutual TLS" } else { "plaintext" }
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
    let (ctrl, broker_addrs, transport, zombie_transport) = {
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
        intruder_setup = Some((creds, before.ok()));
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
    let disk_faulted = Arc::new(Mutex::new(std::collections::BTreeSet::new()));
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
    };
    let intruder_stop = Arc::new(AtomicBool::new(false));
    let intruder_attempts = Arc::new(Mutex::new(Vec::new()));
    let mut intruder_before = None;
    let intruder_task = match intruder_setup {
        Some((creds, before)) => {
            intruder_before = before;
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
            };
            Some(tokio::spawn(i.run(intruder_stop.clone(), cfg.time_limit)))
        }
        None => None,
    };
    let (time_limit, fault, heal) = (cfg.time_limit, cfg.fault, cfg.heal);
    let nemesis_task = tokio::spawn(async move {
        nemesis.run(time_limit, fault, heal).await;
        nemesis
    });
    let mut workers = Vec::new();
    for id in 0..cfg.clients {
        workers.push(tokio::spawn(worker(
            id,
            cfg.clone(),
            ctrl.clone(),
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
                if disk_faulted.lock().unwrap().contains(&i) {
                    eprintln!(
                        "\nkeel jepsen: {} stopped ({st}) while its disk was failing",
                        c.nodes[i].name()
                    );
                    disk_stops.lock().unwrap().push(nemesis::DiskStop::new(
                        c.nodes[i].name(),
                        shared.ms(),
                        status,
                    ));
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
    let mut final_unread = Vec::new();
    for i in 0..cfg.names {
        let name = format!("jepsen-{i}");
        let mut got = None;
        for _ in 0..5 {
            let t0 = shared.ms();
            let r = admin.describe(&name).await;
            let t1 = shared.ms();
            let seen = r.seen;
            let ok = r.outcome == Some(Outcome::Ok);
            shared.push(record(-1, u64::MAX - 1, OpKind::Describe, &name, t0, t1, r));
            if ok {
                got = seen;
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
    let (lost_valid, mut lost_detail) = lost::check(&ops, &final_read);
    let lost_valid = lost_valid && final_unread.is_empty();
    if !final_unread.is_empty() {
        lost_detail["final_read_failed_for"] = json!(final_unread);
    }
    let (parts_valid, parts_detail) = partitions::check(&ops);
    let (brk_valid, mut brk_detail) = brokers::check(&broker_hist);
    if !unparsable.is_empty() {
        brk_detail["unparsable_lines"] = json!(unparsable);
    }
    let attempts = intruder_attempts.lock().unwrap().clone();
    let intruder_result = intruding.then(|| {
        intruder::check(
            &attempts,
            intruder_before.as_ref(),
            intruder_after.as_ref(),
            &broker_hist,
        )
    });
    if intruding {
        let _ = intruder::write_attempts(&run_dir.join("intruder.jsonl"), &attempts);
    }
    let probes_v = probes.lock().unwrap().clone();
    let zombie_valid = nemesis::zombie_check(&probes_v);
    let powered = cfg.families.contains(&Family::Power);
    let restarts = std::mem::take(&mut nemesis.restarts);
    let epochs = std::mem::take(&mut nemesis.epochs);
    let faults_v = faults.lock().unwrap().clone();

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
    put("whole_topics", b(parts_valid), parts_detail);
    put("broker_safety", b(brk_valid), brk_detail);
    put("convergence", b(conv_ok), conv_detail);
    put("recovery", b(rec_ok), rec_detail);
    put(
        "zombie_requests_refused",
        b(zombie_valid),
        json!({"probes": probes_v}),
    );
    if let Some((v, detail)) = intruder_result {
        put("intruder", b(v), detail);
    }
    if cfg.families.contains(&Family::Disk) {
        let stops = disk_stops.lock().unwrap().clone();
        let (v, detail) = nemesis::disk_stop_check(&stops);
        put("disk_faults_stop_cleanly", b(v), detail);
    }
    if powered {
        let (v, detail) = power::restart_check(&restarts, cfg.recovery_bound);
        put("back_after_power_cuts", b(v), detail);
        let (v, detail) = power::epoch_check(&epochs);
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
        "tls": cfg.tls,
        "summary": summary,
        "checkers": Value::Object(checkers),
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
