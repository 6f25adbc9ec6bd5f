//! One run, phase by phase, once the cluster is laid out: the host's
//! faults set up, the cluster started and ready, the logins and the
//! intruder's targets prepared, the workload and the nemesis run while the
//! crash watch looks on, then the final heal, the recovery and final reads,
//! the checkers and the report. A phase that cannot go on returns why and
//! the exit code ([`Stop`]); nothing after it runs.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_testkit::ClusterFaults;
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde_json::{json, Value};

use crate::brokers::BrokerEvent;
use crate::client::{AdminClient, Transport};
use crate::cluster::{Cluster, CLIENT_IP};
use crate::history::{OpKind, Outcome, Seen};
use crate::judge::{judge, put, write_report, Final, Times};
use crate::nemesis::{Family, FaultEvent, Nemesis, ZombieProbe};
use crate::{
    big_creates, brokers, intruder, kafka_client, nemesis, net, netem, probes, reassign, record,
    timing, wait_ready, worker, workload_user, Config, Shared, EXIT_INVALID, EXIT_LOCAL,
    EXIT_NEEDS_ROOT, EXIT_NO_PACKET_FILTER, EXIT_VALID, PLACED_PARTITIONS, PLACED_TOPIC,
};

/// Why a run cannot go on, and its exit code.
pub(crate) struct Stop {
    pub code: u8,
    pub why: String,
}

fn stop(code: u8, why: impl Into<String>) -> Stop {
    Stop {
        code,
        why: why.into(),
    }
}

/// The run after the cluster is laid out; its exit code.
pub(crate) async fn body(
    cfg: Config,
    run_dir: PathBuf,
    cluster: Arc<Mutex<Cluster>>,
    clock_dir: Option<PathBuf>,
) -> u8 {
    match run_phases(&cfg, &run_dir, &cluster, clock_dir).await {
        Ok(valid) if valid => EXIT_VALID,
        Ok(_) => EXIT_INVALID,
        Err(s) => {
            eprintln!("keel jepsen: {}", s.why);
            s.code
        }
    }
}

async fn run_phases(
    cfg: &Config,
    run_dir: &Path,
    cluster: &Arc<Mutex<Cluster>>,
    clock_dir: Option<PathBuf>,
) -> Result<bool, Stop> {
    let (net, netem) = host_faults(cfg)?;
    let mut seed_rng = StdRng::seed_from_u64(cfg.seed ^ 0x5eed_1e45);
    let lengths = timing::Lengths::new(cfg.fault, timing::Timing::of_controllers(), &mut seed_rng);
    announce(cfg, run_dir, &lengths);
    let up = start(cfg, run_dir, cluster).await?;
    let kafka_security = kafka_login(cfg, &up).await?;
    let intruder_setup = if cfg.families.contains(&Family::Intruder) {
        Some(prepare_intruder(cfg, run_dir, cluster, &up).await?)
    } else {
        None
    };
    eprintln!("keel jepsen: cluster up; starting workload and nemesis");

    let shared = Arc::new(Shared {
        start: Instant::now(),
        ops: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
        next_process: AtomicU64::new(0),
    });
    let (big_tx, big_rx) = tokio::sync::mpsc::channel(1);
    let big_task = tokio::spawn(big_creates(
        up.ctrl.clone(),
        up.transport.clone(),
        shared.clone(),
        big_rx,
    ));
    let mut nemesis = new_nemesis(cfg, cluster, &up, &shared, (net, netem), lengths, clock_dir);
    nemesis.big_create = Some(big_tx);
    let watched = Watched::of(&nemesis);
    let mut intruding = start_intruder(cfg, &up, &shared, intruder_setup);
    create_placed_topic(cfg, &up, &shared).await;
    let (mut nemesis, crashes) = load_under_faults(
        cfg,
        cluster,
        &up,
        kafka_security,
        &shared,
        &watched,
        &intruding,
        nemesis,
    )
    .await?;
    if let Some(t) = intruding.task.take() {
        let _ = t.await;
    }
    // The nemesis holds the only sender: the big-create worker ends once it
    // finished what it started.
    nemesis.big_create = None;
    let _ = big_task.await;
    let after = heal_and_read(cfg, &up, &shared, &mut nemesis).await;

    Ok(judge_run(
        cfg, run_dir, cluster, &shared, &watched, intruding, nemesis, crashes, after,
    ))
}

/// Stops every node, gathers the histories (operations, faults, the
/// brokers' own, the intruder's attempts), runs every checker and writes
/// the report; whether the run is valid.
#[allow(clippy::too_many_arguments)]
fn judge_run(
    cfg: &Config,
    run_dir: &Path,
    cluster: &Arc<Mutex<Cluster>>,
    shared: &Shared,
    watched: &Watched,
    intruding: Intruding,
    mut nemesis: Nemesis,
    mut crashes: Vec<Value>,
    after: AfterHeal,
) -> bool {
    crashes.extend(stop_every_node(cluster));
    drop(nemesis.net.take()); // removes the chain
    drop(nemesis.netem.take()); // removes the slow network
    let (broker_hist, unparsable) = broker_histories(cluster, run_dir);

    let ops = shared.ops.lock().unwrap().clone();
    let attempts = intruding.attempts.lock().unwrap().clone();
    if cfg.families.contains(&Family::Intruder) {
        let _ = intruder::write_attempts(&run_dir.join("intruder.jsonl"), &attempts);
    }
    let intruder_result = cfg.families.contains(&Family::Intruder).then(|| {
        intruder::check_with_kafka(
            &attempts,
            intruding.before.as_ref(),
            after.intruder.as_ref(),
            &broker_hist,
            intruding.kafka_on,
        )
    });
    let faults_v = watched.faults.lock().unwrap().clone();
    let zombie_probes = watched.probes.lock().unwrap().clone();
    let disk_stops = watched.disk_stops.lock().unwrap().clone();
    let mut checkers = judge(
        cfg,
        &ops,
        &after.fin,
        &after.placement,
        &broker_hist,
        unparsable,
        &zombie_probes,
        &disk_stops,
        &faults_v,
        &nemesis,
    );
    if let Some((v, detail)) = intruder_result {
        put(&mut checkers, "intruder", json!(v), detail);
    }
    put(
        &mut checkers,
        "no_process_crashes",
        json!(crashes.is_empty()),
        json!({"unexpected_exits": crashes}),
    );
    let times = Times {
        healed_ms: after.healed_ms,
        end_ms: after.end_ms,
        power_cuts: nemesis.restarts.len(),
        intruder_attempts: attempts.len(),
    };
    write_report(cfg, run_dir, &ops, &faults_v, &nemesis, checkers, times)
}

/// The run's nemesis, on the host's fault machinery (the iptables chain
/// and the slow network), seeded by the run's seed.
fn new_nemesis(
    cfg: &Config,
    cluster: &Arc<Mutex<Cluster>>,
    up: &Started,
    shared: &Shared,
    (net, netem): (Option<net::Net>, Option<netem::Netem>),
    lengths: timing::Lengths,
    clock_dir: Option<PathBuf>,
) -> Nemesis {
    Nemesis {
        big_create: None,
        killed_mid_decision: false,
        cut_all_controllers: false,
        restarts: Vec::new(),
        epochs: Vec::new(),
        restart_bound: cfg.recovery_bound,
        disk_faulted: Arc::new(Mutex::new(nemesis::DiskFaulted::new())),
        disk_stops: Arc::new(Mutex::new(Vec::new())),
        disk_epochs: Vec::new(),
        cluster: cluster.clone(),
        net,
        families: cfg.families.iter().copied().collect(),
        rng: StdRng::seed_from_u64(cfg.seed),
        start: shared.start,
        faults: Arc::new(Mutex::new(Vec::new())),
        current: Arc::new(Mutex::new(String::from("none yet"))),
        probes: Arc::new(Mutex::new(Vec::new())),
        transport: up.transport.clone(),
        zombie_transport: up.zombie_transport.clone(),
        netem,
        lengths,
        kill_all_windows: 0,
        clock_dir,
        voters_missing: Vec::new(),
    }
}

/// The intruder while it runs: how to stop it, what it tried, and what
/// the cluster looked like before it started.
struct Intruding {
    stop: Arc<AtomicBool>,
    attempts: Arc<Mutex<Vec<intruder::Attempt>>>,
    /// `None`: the run has no intruder.
    task: Option<tokio::task::JoinHandle<()>>,
    before: Option<intruder::State>,
    /// Whether it also attacks through the Kafka listener.
    kafka_on: bool,
}

/// Starts the intruder, when the run has one, for the run's time limit.
fn start_intruder(
    cfg: &Config,
    up: &Started,
    shared: &Shared,
    setup: Option<IntruderSetup>,
) -> Intruding {
    let mut intruding = Intruding {
        stop: Arc::new(AtomicBool::new(false)),
        attempts: Arc::new(Mutex::new(Vec::new())),
        task: None,
        before: None,
        kafka_on: false,
    };
    if let Some(s) = setup {
        intruding.kafka_on = s.kafka.is_some();
        intruding.before = s.before;
        let i = intruder::Intruder {
            ctrl: up.ctrl.clone(),
            brokers: up.broker_addrs.clone(),
            cluster_id: up.cluster_id.clone(),
            admin: up.transport.clone(),
            creds: s.creds,
            names: cfg.names,
            start: shared.start,
            attempts: intruding.attempts.clone(),
            kafka: s.kafka,
        };
        intruding.task = Some(tokio::spawn(i.run(intruding.stop.clone(), cfg.time_limit)));
    }
    intruding
}

/// The workload and the nemesis until the time limit, under the crash
/// watch; then the workers and the intruder are told to stop and the
/// workers are awaited. Returns the nemesis (back from its task) and the
/// nodes that exited by themselves.
#[allow(clippy::too_many_arguments)]
async fn load_under_faults(
    cfg: &Config,
    cluster: &Arc<Mutex<Cluster>>,
    up: &Started,
    kafka_security: kafka_client::KafkaSecurity,
    shared: &Arc<Shared>,
    watched: &Watched,
    intruding: &Intruding,
    mut nemesis: Nemesis,
) -> Result<(Nemesis, Vec<Value>), Stop> {
    let (time_limit, heal) = (cfg.time_limit, cfg.heal);
    let nemesis_task = tokio::spawn(async move {
        nemesis.run(time_limit, heal).await;
        nemesis
    });
    let workers: Vec<_> = (0..cfg.clients)
        .map(|id| {
            tokio::spawn(worker(
                id,
                cfg.clone(),
                up.ctrl.clone(),
                up.kafka_addrs.clone(),
                kafka_security.clone(),
                up.transport.clone(),
                shared.clone(),
            ))
        })
        .collect();
    let crashes = watch(cfg, cluster, shared, watched).await;
    shared.stop.store(true, Ordering::SeqCst);
    intruding.stop.store(true, Ordering::SeqCst);
    for w in workers {
        let _ = w.await;
    }
    let nemesis = nemesis_task
        .await
        .map_err(|e| stop(EXIT_LOCAL, format!("nemesis task failed: {e}")))?;
    Ok((nemesis, crashes))
}

/// What the run reads once every fault is healed.
struct AfterHeal {
    /// When the final heal came, in ms since the start.
    healed_ms: f64,
    /// When the reads below were done.
    end_ms: f64,
    /// Recovery, the final reads and convergence.
    fin: Final,
    /// The cluster's state as the intruder's checker compares it (when
    /// the run has an intruder and it could be read).
    intruder: Option<intruder::State>,
    /// Where reassignments landed (or why it could not be read).
    placement: Result<reassign::Placement, String>,
}

/// Heals every fault, then checks recovery and reads the final state:
/// the names, the cluster as the intruder sees it, the placement.
async fn heal_and_read(
    cfg: &Config,
    up: &Started,
    shared: &Shared,
    nemesis: &mut Nemesis,
) -> AfterHeal {
    let heal_notes = nemesis.heal_all();
    let healed_ms = shared.ms();
    let healed_at = Instant::now();
    eprintln!(
        "keel jepsen: final heal at {:.1}s ({}); checking recovery",
        healed_ms / 1000.0,
        heal_notes.join(", ")
    );
    let fin = after_heal(cfg, up, shared, healed_at, healed_ms).await;
    let intruder = if cfg.families.contains(&Family::Intruder) {
        match intruder::observe(
            &up.transport,
            &up.ctrl,
            &up.broker_addrs,
            Duration::from_secs(20),
        )
        .await
        {
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
    let placement =
        reassign::read_placement(&up.transport, &up.ctrl, Duration::from_secs(30)).await;
    AfterHeal {
        healed_ms,
        end_ms: shared.ms(),
        fin,
        intruder,
        placement,
    }
}

/// The host's fault machinery the run's families need: the iptables chain
/// and the slow network.
fn host_faults(cfg: &Config) -> Result<(Option<net::Net>, Option<netem::Netem>), Stop> {
    let net = if cfg.families.iter().any(|f| f.needs_packet_filter()) {
        Some(net::install().map_err(|e| {
            stop(
                EXIT_NO_PACKET_FILTER,
                format!("cannot set up iptables chain {}: {e}", net::CHAIN),
            )
        })?)
    } else {
        // Still remove a chain left over by a crashed run, when we can.
        if net::unavailable_reason().is_none() {
            net::teardown();
        }
        None
    };
    let netem = if cfg.families.contains(&Family::NetSlow) {
        let n = netem::Netem::install().map_err(|e| {
            stop(
                EXIT_NEEDS_ROOT,
                format!("cannot set up the slow network: {e}"),
            )
        })?;
        eprintln!("keel jepsen: slow network by {:?}", n.mode());
        Some(n)
    } else {
        None
    };
    Ok((net, netem))
}

/// The run's settings, on stderr.
fn announce(cfg: &Config, run_dir: &Path, lengths: &timing::Lengths) {
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
}

/// A started cluster: where its nodes are and how to reach them.
struct Started {
    ctrl: Vec<String>,
    broker_addrs: Vec<(u32, String)>,
    kafka_addrs: Vec<String>,
    transport: Transport,
    /// As controller [`nemesis::ZOMBIE_CONTROLLER`].
    zombie_transport: Transport,
    ca_pem: Option<PathBuf>,
    cluster_id: String,
}

/// Starts every node and waits until the quorum and every broker are up.
async fn start(
    cfg: &Config,
    run_dir: &Path,
    cluster: &Arc<Mutex<Cluster>>,
) -> Result<Started, Stop> {
    let up = {
        let mut c = cluster.lock().unwrap();
        c.check_addresses_free()
            .map_err(|e| e.context("another run still alive?"))
            .and_then(|()| c.start_all())
            .map_err(|e| stop(EXIT_LOCAL, format!("{e:#}")))?;
        let zombie = c
            .transport_as(&keel_tls::Identity::controller(
                &c.cluster_id,
                nemesis::ZOMBIE_CONTROLLER,
            ))
            .map_err(|e| {
                stop(
                    EXIT_LOCAL,
                    format!("cannot issue the zombie controller's certificate: {e:#}"),
                )
            })?;
        Started {
            ctrl: c.controller_addrs(),
            broker_addrs: c.brokers().map(|n| (n.id, n.address())).collect(),
            kafka_addrs: c.kafka_addrs(),
            transport: c.transport().clone(),
            zombie_transport: zombie,
            ca_pem: c.certs_dir().map(|d| d.join("ca.pem")),
            cluster_id: c.cluster_id.clone(),
        }
    };
    wait_ready(
        &up.transport,
        &up.ctrl,
        cfg.brokers,
        Duration::from_secs(60),
    )
    .await
    .map_err(|e| {
        stop(
            EXIT_LOCAL,
            format!(
                "the cluster did not come up within 60 s ({e}); logs in {}",
                run_dir.join("logs").display()
            ),
        )
    })?;
    Ok(up)
}

/// The Kafka workload's login: SASL_SSL as a SCRAM user with ACLs on TLS
/// runs, plaintext otherwise.
async fn kafka_login(cfg: &Config, up: &Started) -> Result<kafka_client::KafkaSecurity, Stop> {
    match (&up.ca_pem, cfg.client) {
        (Some(ca), kafka_client::ClientKind::Kafka) => {
            workload_user(&up.transport, &up.ctrl, &up.kafka_addrs, ca, &up.cluster_id)
                .await
                .map_err(|e| {
                    stop(
                        EXIT_LOCAL,
                        format!("cannot set up the Kafka workload's user: {e}"),
                    )
                })
        }
        _ => Ok(kafka_client::KafkaSecurity::from_transport(&up.transport)),
    }
}

/// What the intruder needs: its certificates, its Kafka attacks (when the
/// brokers have Kafka listeners) and the state it must not change.
struct IntruderSetup {
    creds: intruder::Credentials,
    kafka: Option<intruder::kafka::KafkaAttacks>,
    before: Option<intruder::State>,
}

/// The intruder's certificates, its Kafka users, the topics it aims at
/// and the cluster's state before it starts.
async fn prepare_intruder(
    cfg: &Config,
    run_dir: &Path,
    cluster: &Arc<Mutex<Cluster>>,
    up: &Started,
) -> Result<IntruderSetup, Stop> {
    let creds = intruder::credentials(&cluster.lock().unwrap(), run_dir).map_err(|e| {
        stop(
            EXIT_LOCAL,
            format!("cannot make the intruder's certificates: {e:#}"),
        )
    })?;
    let kafka = match (&up.ca_pem, up.kafka_addrs.is_empty()) {
        (Some(ca), false) => Some(
            crate::intruder_kafka(
                &up.transport,
                &up.ctrl,
                &up.kafka_addrs,
                ca,
                &up.cluster_id,
                &creds,
            )
            .await
            .map_err(|e| {
                stop(
                    EXIT_LOCAL,
                    format!("cannot set up the intruder's Kafka users: {e}"),
                )
            })?,
        ),
        _ => None,
    };
    let mut admin = AdminClient::new(up.ctrl.clone(), CLIENT_IP.into(), up.transport.clone());
    intruder::create_targets(&mut admin, cfg.replication_factor, Duration::from_secs(30))
        .await
        .map_err(|e| stop(EXIT_LOCAL, e))?;
    let before = intruder::observe(
        &up.transport,
        &up.ctrl,
        &up.broker_addrs,
        Duration::from_secs(20),
    )
    .await;
    if let Err(e) = &before {
        eprintln!("keel jepsen: cannot read the cluster state before the run: {e}");
    }
    Ok(IntruderSetup {
        creds,
        kafka,
        before: before.ok(),
    })
}

/// The topic reassignments and elections also aim at: never deleted, so
/// where its partitions end up can be judged against the last acknowledged
/// reassignment ([`reassign`]). Created before any fault.
async fn create_placed_topic(cfg: &Config, up: &Started, shared: &Shared) {
    let mut admin = AdminClient::new(up.ctrl.clone(), CLIENT_IP.into(), up.transport.clone());
    for _ in 0..20 {
        let process = shared.next_process.fetch_add(1, Ordering::SeqCst);
        let t0 = shared.ms();
        let r = admin
            .create(PLACED_TOPIC, PLACED_PARTITIONS, cfg.replication_factor)
            .await;
        let done =
            r.outcome == Some(Outcome::Ok) || r.error.as_deref() == Some("TOPIC_ALREADY_EXISTS");
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

/// What the nemesis shares with the crash watch and the checkers while it
/// runs in its own task.
struct Watched {
    faults: Arc<Mutex<Vec<FaultEvent>>>,
    current: Arc<Mutex<String>>,
    probes: Arc<Mutex<Vec<ZombieProbe>>>,
    disk_faulted: Arc<Mutex<nemesis::DiskFaulted>>,
    disk_stops: Arc<Mutex<Vec<nemesis::DiskStop>>>,
}

impl Watched {
    /// The nemesis's shared parts, before it moves into its task.
    fn of(n: &Nemesis) -> Self {
        Watched {
            faults: n.faults.clone(),
            current: n.current.clone(),
            probes: n.probes.clone(),
            disk_faulted: n.disk_faulted.clone(),
            disk_stops: n.disk_stops.clone(),
        }
    }
}

/// The progress line and the crash watch until the time limit; the nodes
/// that exited by themselves.
async fn watch(
    cfg: &Config,
    cluster: &Arc<Mutex<Cluster>>,
    shared: &Shared,
    w: &Watched,
) -> Vec<Value> {
    let mut crashes: Vec<Value> = Vec::new();
    let tty = std::io::stderr().is_terminal();
    let mut last_print = Instant::now() - Duration::from_secs(10);
    while shared.start.elapsed() < cfg.time_limit {
        tokio::time::sleep(Duration::from_millis(500)).await;
        crashes.extend(exits(cluster, shared, w));
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
                w.current.lock().unwrap()
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
    crashes
}

/// The nodes that exited since the last look and whose exit no fault
/// explains: a node under a disk fault may stop (the disk checker looks at
/// how), a node whose LazyFS crashed exits with it.
fn exits(cluster: &Arc<Mutex<Cluster>>, shared: &Shared, w: &Watched) -> Vec<Value> {
    let mut crashes = Vec::new();
    let mut c = cluster.lock().unwrap();
    for i in 0..c.nodes.len() {
        let Some(status) = c.nodes[i].process.exited() else {
            continue;
        };
        let st = status.to_string();
        let disk_stop = nemesis::disk_stop_of(&w.disk_faulted.lock().unwrap(), i, Instant::now());
        if let Some(healed) = disk_stop {
            eprintln!(
                "\nkeel jepsen: {} stopped ({st}) while its disk was failing",
                c.nodes[i].name()
            );
            w.disk_stops.lock().unwrap().push(nemesis::DiskStop::new(
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
        // LazyFS crashed under it (the power nemesis's disk fault, which
        // then restarts it): not an exit of its own. LazyFS died first, so
        // this is already visible.
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
    crashes
}

/// Recovery (a create and every partition led within the bound), the final
/// reads of every name (the last operations of the history), and
/// convergence.
async fn after_heal(
    cfg: &Config,
    up: &Started,
    shared: &Shared,
    healed_at: Instant,
    healed_ms: f64,
) -> Final {
    let mut admin = AdminClient::new(up.ctrl.clone(), CLIENT_IP.into(), up.transport.clone());
    let (rec_ok, rec_detail, rec_ops) = probes::recovery(
        &up.transport,
        &up.ctrl,
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
    let mut read: BTreeMap<String, Seen> = BTreeMap::new();
    let mut ids: BTreeMap<String, String> = BTreeMap::new();
    let mut unread = Vec::new();
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
                    ids.insert(name.clone(), id);
                }
                break;
            }
        }
        match got {
            Some(s) => {
                read.insert(name, s);
            }
            None => unread.push(name),
        }
    }
    eprintln!("keel jepsen: checking convergence");
    let convergence = probes::convergence(
        &up.transport,
        &up.ctrl,
        &up.broker_addrs,
        Duration::from_secs(30),
    )
    .await;
    Final {
        recovery: (rec_ok, rec_detail),
        convergence,
        read,
        ids,
        unread,
    }
}

/// Stops every node; the ones that had exited by themselves since the
/// heal.
fn stop_every_node(cluster: &Arc<Mutex<Cluster>>) -> Vec<Value> {
    let mut c = cluster.lock().unwrap();
    let exited = c
        .nodes
        .iter_mut()
        .filter_map(|n| {
            n.process
                .exited()
                .map(|st| json!({"node": n.name(), "status": st.to_string(), "when": "after heal"}))
        })
        .collect();
    c.kill_all();
    exited
}

/// Every broker's history (copied into the run dir) and the lines that
/// could not be read.
fn broker_histories(
    cluster: &Arc<Mutex<Cluster>>,
    run_dir: &Path,
) -> (BTreeMap<u32, Vec<BrokerEvent>>, Vec<String>) {
    let mut hist = BTreeMap::new();
    let mut unparsable = Vec::new();
    let c = cluster.lock().unwrap();
    for n in c.brokers() {
        let path = n.history_path();
        let _ = std::fs::copy(&path, run_dir.join(format!("{}-history.jsonl", n.name())));
        match brokers::read_events(&path) {
            Ok((ev, bad)) => {
                hist.insert(n.id, ev);
                unparsable.extend(bad.into_iter().map(|l| format!("{}: {l}", n.name())));
            }
            Err(e) => unparsable.push(format!("{}: {e}", n.name())),
        }
    }
    (hist, unparsable)
}
