//! `keel dev`: a local cluster in one command — three controllers on
//! 127.0.0.11-13:9093 and brokers on 127.0.0.21-:9092 (Kafka listeners on
//! :9094), as child processes of this one, with data and logs under one
//! directory. Ctrl-C stops the brokers by controlled shutdown, then the
//! controllers.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use keel_cluster::{Addressing, Cluster, KafkaPorts, Naming, Ports, Role, Root, Spec};
use keel_proto::client::ControllerClient;
use keel_proto::pb;

use crate::EXIT_LOCAL;

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct DevArgs {
    /// `stop`: end a `keel dev` running in the background.
    #[command(subcommand)]
    action: Option<DevCmd>,
    /// Where data dirs and logs go.
    #[arg(long, default_value = ".keel-dev")]
    dir: PathBuf,
    /// Wipe the directory first (otherwise a restart resumes the old cluster).
    #[arg(long)]
    fresh: bool,
    /// Number of brokers (1-9).
    #[arg(long, default_value_t = 3)]
    brokers: u8,
    /// The cluster id (fixed when the data dirs are first formatted).
    #[arg(long, default_value = "keel-dev")]
    cluster_id: String,
    /// For scripts: start the cluster in the background and exit 0 once
    /// it is up (non-zero, with its output, if it cannot start); `keel dev
    /// stop` ends it. Its output goes to `<dir>/dev.log`.
    #[arg(long, visible_alias = "detach")]
    exit_when_ready: bool,
}

#[derive(clap::Subcommand, Debug)]
enum DevCmd {
    /// Stop the `keel dev` running on a directory (in the background or
    /// in another terminal) as Ctrl-C would, and wait until it is gone.
    #[command(
        after_help = "Example:\n  keel dev --exit-when-ready && keel topics list && keel dev stop"
    )]
    Stop {
        /// The directory it runs on.
        #[arg(long, default_value = ".keel-dev")]
        dir: PathBuf,
    },
}

/// Set in the environment of the `keel dev` that `--exit-when-ready`
/// starts in the background.
const DETACHED: &str = "KEEL_DEV_DETACHED";

/// The pid of the `keel dev` running on a directory, kept there while it
/// runs.
fn pid_file(dir: &std::path::Path) -> PathBuf {
    dir.join("dev.pid")
}

/// Written (with its pid) by a background `keel dev` once its cluster is
/// up.
fn ready_file(dir: &std::path::Path) -> PathBuf {
    dir.join("dev.ready")
}

/// A background `keel dev`'s output.
fn log_file(dir: &std::path::Path) -> PathBuf {
    dir.join("dev.log")
}

/// How long `--exit-when-ready` waits for the cluster to come up (the
/// cluster's own start bound is 90 s).
const READY_BOUND: Duration = Duration::from_secs(120);
/// How long `keel dev stop` waits for it to be gone (brokers stop by
/// controlled shutdown, then the controllers: at most 25 s, and each
/// node's own watchdog).
const STOP_BOUND: Duration = Duration::from_secs(60);

const CONTROLLER_PORT: u16 = 9093;
const BROKER_PORT: u16 = 9092;
const CONTROLLER_METRICS_PORT: u16 = 9100;
const BROKER_METRICS_PORT: u16 = 9101;
/// Each broker's Kafka listener, on the broker's own address.
const BROKER_KAFKA_PORT: u16 = 9094;

/// Where `keel dev` notes, while it runs, its certificates directory (the
/// first line) and every node's gRPC address (one per line after it), so
/// the admin commands find the admin certificate from any working
/// directory and for any of the cluster's addresses: one file per user in
/// the temp dir (the dev cluster's addresses are fixed, so one runs at a
/// time).
pub fn certs_note() -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata("/proc/self").map_or(0, |m| m.uid());
    std::env::temp_dir().join(format!("keel-dev-{uid}.certs"))
}

/// The dev cluster's certificates directory, as the running `keel dev`
/// noted it, else `.keel-dev/certs` under the working directory.
pub fn certs_dir() -> PathBuf {
    std::fs::read_to_string(certs_note())
        .ok()
        .and_then(|s| s.lines().next().map(|l| PathBuf::from(l.trim())))
        .filter(|p| p.is_dir())
        .unwrap_or_else(|| PathBuf::from(".keel-dev/certs"))
}

/// The node addresses the running `keel dev` noted (none when no dev
/// cluster runs).
pub fn noted_addresses() -> Vec<String> {
    std::fs::read_to_string(certs_note())
        .map(|s| {
            s.lines()
                .skip(1)
                .map(|l| l.trim().to_string())
                .filter(|l| !l.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// The dev cluster's layout: controllers on 127.0.0.11-13:9093, brokers on
/// 127.0.0.21-:9092, data dirs `<dir>/controller-N` and `<dir>/broker-N`,
/// logs in `<dir>/logs`. Each child gets a process group of its own, so a
/// terminal's Ctrl-C reaches only `keel dev`, which then stops them in
/// order (brokers by controlled shutdown first).
fn spec(exe: PathBuf, a: &DevArgs) -> Spec {
    let mut spec = Spec::new(exe, a.cluster_id.clone())
        .brokers(usize::from(a.brokers))
        .addressing(Addressing::Subnet {
            net: 0,
            ports: Ports::Fixed {
                controller: CONTROLLER_PORT,
                broker: BROKER_PORT,
                controller_metrics: CONTROLLER_METRICS_PORT,
                broker_metrics: BROKER_METRICS_PORT,
            },
        })
        .root(Root::At(a.dir.clone()))
        .kafka(KafkaPorts::Fixed(BROKER_KAFKA_PORT))
        .metrics(true)
        .tls(true)
        // The admin user keeps its power through the brokers' Kafka
        // listeners (Kafka's tools as User:admin); a production controller
        // leaves this off, so a broker's key lends no super user's power.
        .super_users_via_brokers(true)
        .logs(None, None);
    // Clients without a certificate may log in with SCRAM (`keel users
    // create`); one that does neither is User:ANONYMOUS, allowed nothing.
    spec.broker_flags.extend([
        "--kafka-ssl-client-auth".to_string(),
        "requested".to_string(),
    ]);
    spec.data_subdir = String::new();
    spec.naming = Naming::Long;
    spec.own_process_groups = true;
    spec
}

/// The node data dirs under `dir` that a running process holds: a
/// broker's `broker.lock`, a controller's sled log (`raft/db`), each
/// locked with `flock` by its node for as long as it runs.
fn held_data_dirs(dir: &std::path::Path) -> Vec<PathBuf> {
    use std::os::fd::AsRawFd;
    let mut held = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return held;
    };
    for node in entries.flatten().map(|e| e.path()) {
        for lock in [node.join("broker.lock"), node.join("raft").join("db")] {
            let Ok(f) = std::fs::File::open(&lock) else {
                continue;
            };
            // SAFETY: flock on a descriptor this function owns; a lock it
            // gets is released when `f` is dropped just below.
            let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EWOULDBLOCK) {
                held.push(node.clone());
                break;
            }
        }
    }
    held
}

/// The Kafka client configs `keel dev` writes next to the certificates.
struct KafkaClientConfigs {
    /// librdkafka's (`kcat -F`, confluent-kafka): PEM paths.
    kcat: PathBuf,
    /// Kafka's Java tools' (`--command-config`): PEM key store and trust
    /// store (KIP-651).
    java: PathBuf,
}

/// Writes the admin user's Kafka client configs: SSL with its certificate,
/// trusting the cluster CA. The brokers' certificates name no host (Keel's
/// own clients check the cluster's fixed server name), so host name
/// checking is off; the chain is still checked against the CA.
fn write_kafka_client_configs(
    certs: &std::path::Path,
    cluster_id: &str,
) -> anyhow::Result<KafkaClientConfigs> {
    use anyhow::Context;
    let admin = keel_tls::Identity::user(cluster_id, keel_cluster::cluster::ADMIN_USER);
    let (cert, key) = keel_tls::certs::paths(certs, &admin);
    let ca = certs.join("ca.pem");
    let kcat = certs.join("kcat.conf");
    std::fs::write(
        &kcat,
        format!(
            "# librdkafka (kcat -F, confluent-kafka) as User:admin over SSL\n\
             security.protocol=ssl\n\
             ssl.ca.location={}\n\
             ssl.certificate.location={}\n\
             ssl.key.location={}\n\
             ssl.endpoint.identification.algorithm=none\n",
            ca.display(),
            cert.display(),
            key.display()
        ),
    )
    .with_context(|| format!("write {}", kcat.display()))?;
    // Java's PEM key store takes the key and its certificate in one file.
    let key_and_cert = certs.join("user-admin-keystore.pem");
    let joined = [
        std::fs::read_to_string(&key).with_context(|| format!("read {}", key.display()))?,
        std::fs::read_to_string(&cert).with_context(|| format!("read {}", cert.display()))?,
    ]
    .concat();
    std::fs::write(&key_and_cert, joined)
        .with_context(|| format!("write {}", key_and_cert.display()))?;
    let java = certs.join("client.properties");
    std::fs::write(
        &java,
        format!(
            "# Kafka's Java tools (--command-config) as User:admin over SSL\n\
             security.protocol=SSL\n\
             ssl.keystore.type=PEM\n\
             ssl.keystore.location={}\n\
             ssl.truststore.type=PEM\n\
             ssl.truststore.location={}\n\
             ssl.endpoint.identification.algorithm=\n",
            key_and_cert.display(),
            ca.display()
        ),
    )
    .with_context(|| format!("write {}", java.display()))?;
    Ok(KafkaClientConfigs { kcat, java })
}

/// Waits (bounded) until every node of `role` exited; SIGKILLs the rest.
fn wait_all(c: &mut Cluster, role: Role, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    for n in c.nodes.iter_mut().filter(|n| n.role == role) {
        let left = deadline.saturating_duration_since(Instant::now());
        if n.process.wait_exit(left).is_none() {
            eprintln!(
                "{} did not stop within {} s; killed",
                n.name(),
                timeout.as_secs()
            );
            n.kill();
        }
    }
}

fn stop(c: &mut Cluster, dir: &std::path::Path) {
    eprintln!("\nstopping brokers (controlled shutdown) ...");
    for b in c.brokers() {
        b.process.terminate();
    }
    wait_all(c, Role::Broker, Duration::from_secs(15));
    eprintln!("stopping controllers ...");
    for n in c.controllers() {
        n.process.terminate();
    }
    wait_all(c, Role::Controller, Duration::from_secs(10));
    let _ = std::fs::remove_file(certs_note());
    let _ = std::fs::remove_file(ready_file(dir));
    let _ = std::fs::remove_file(pid_file(dir));
    eprintln!("stopped; nothing left running.");
}

/// Every address the cluster will listen on (gRPC, metrics, Kafka) that
/// cannot be bound now, each named with its use and the OS's reason.
fn taken_addresses(c: &Cluster) -> Vec<String> {
    let mut taken = Vec::new();
    for n in &c.nodes {
        let uses = [
            (Some(n.addr), "gRPC"),
            (n.metrics_addr, "metrics"),
            (n.kafka_addr, "Kafka listener"),
        ];
        for (addr, what) in uses {
            let Some(addr) = addr else { continue };
            if let Err(e) = std::net::TcpListener::bind(addr) {
                taken.push(format!(
                    "{} {} port {addr} is not free: {e}",
                    n.name(),
                    what
                ));
            }
        }
    }
    taken
}

/// (leader id, term, active brokers, registered brokers), if the quorum answers.
async fn status(client: &ControllerClient) -> Option<(u64, u64, usize, usize)> {
    let q = client
        .admin(|mut c| async move {
            c.describe_quorum(pb::DescribeQuorumRequest::default())
                .await
        })
        .await
        .ok()?;
    if q.error.is_some() {
        return None;
    }
    let c = client
        .admin(|mut c| async move {
            c.describe_cluster(pb::DescribeClusterRequest::default())
                .await
        })
        .await
        .ok()?;
    let active = c
        .brokers
        .iter()
        .filter_map(|b| b.broker.as_ref())
        .filter(|b| !b.fenced && !b.shutting_down)
        .count();
    Some((q.leader_id, q.term, active, c.brokers.len()))
}

/// Whether `pid` is a running `keel dev` (its command line says so).
fn is_keel_dev(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| {
            let args: Vec<&[u8]> = c.split(|b| *b == 0).collect();
            args.iter().any(|a| *a == b"dev")
        })
        .unwrap_or(false)
}

/// `keel dev stop`: SIGTERM to the `keel dev` on `dir` (it stops its
/// cluster in order), then waits, bounded, until it is gone.
async fn stop_running(dir: &std::path::Path) -> ExitCode {
    let pid = std::fs::read_to_string(pid_file(dir))
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
        .filter(|p| *p > 0 && is_keel_dev(*p));
    let Some(pid) = pid else {
        let held = held_data_dirs(dir);
        if !held.is_empty() {
            for d in &held {
                eprintln!("error: {} is in use by a running node", d.display());
            }
            eprintln!("hint: no `keel dev` runs on {} to stop them; they stop on their own when the keel dev that started them is gone, or stop them by pid", dir.display());
            return ExitCode::from(EXIT_LOCAL);
        }
        let _ = std::fs::remove_file(pid_file(dir));
        eprintln!(
            "no keel dev is running on {}; nothing to stop",
            dir.display()
        );
        return ExitCode::SUCCESS;
    };
    // SAFETY: plain kill(2) on a pid just checked to be a keel dev.
    if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
        eprintln!(
            "error: cannot signal keel dev (pid {pid}): {}",
            std::io::Error::last_os_error()
        );
        return ExitCode::from(EXIT_LOCAL);
    }
    eprint!("stopping keel dev (pid {pid}) on {} ", dir.display());
    let deadline = Instant::now() + STOP_BOUND;
    while is_keel_dev(pid) {
        if Instant::now() >= deadline {
            eprintln!(
                "\nerror: keel dev (pid {pid}) did not stop within {} s; see {}",
                STOP_BOUND.as_secs(),
                log_file(dir).display()
            );
            return ExitCode::from(EXIT_LOCAL);
        }
        eprint!(".");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!("\nstopped; nothing left running.");
    ExitCode::SUCCESS
}

/// Starts `keel dev` again in the background, in a session of its own,
/// its output going to `log`.
fn spawn_detached(
    a: &DevArgs,
    dir: &std::path::Path,
    log: &std::path::Path,
) -> Result<std::process::Child, ExitCode> {
    let (out, err) = match std::fs::File::create(log).and_then(|f| Ok((f.try_clone()?, f))) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("error: cannot write {}: {e}", log.display());
            return Err(ExitCode::from(EXIT_LOCAL));
        }
    };
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: cannot find the keel binary: {e}");
            return Err(ExitCode::from(EXIT_LOCAL));
        }
    };
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("dev")
        .arg("--dir")
        .arg(dir)
        .args(["--brokers", &a.brokers.to_string()])
        .args(["--cluster-id", &a.cluster_id])
        .arg("--exit-when-ready")
        .env(DETACHED, "1")
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err);
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid is async-signal-safe, as pre_exec requires.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    match cmd.spawn() {
        Ok(c) => Ok(c),
        Err(e) => {
            eprintln!("error: cannot start keel dev in the background: {e}");
            Err(ExitCode::from(EXIT_LOCAL))
        }
    }
}

/// `--exit-when-ready`: starts this same command again in the background
/// (a session of its own, so a closed terminal does not end it; output in
/// `<dir>/dev.log`), waits until it says its cluster is up, and exits 0;
/// if it stops first, prints its output and exits with its code.
async fn detach(a: &DevArgs) -> ExitCode {
    if let Err(code) = wipe_if_fresh(a) {
        return code;
    }
    if let Err(e) = std::fs::create_dir_all(&a.dir) {
        eprintln!("error: cannot create {}: {e}", a.dir.display());
        return ExitCode::from(EXIT_LOCAL);
    }
    let dir = std::fs::canonicalize(&a.dir).unwrap_or_else(|_| a.dir.clone());
    let log = log_file(&dir);
    let mut child = match spawn_detached(a, &dir, &log) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let pid = child.id();
    use tokio::signal::unix::{signal, SignalKind};
    let mut int = signal(SignalKind::interrupt()).ok();
    let deadline = Instant::now() + READY_BOUND;
    let show_log = || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        eprint!("{text}");
    };
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            show_log();
            return ExitCode::from(status.code().map_or(EXIT_LOCAL, |c| c as u8));
        }
        let ready =
            std::fs::read_to_string(ready_file(&dir)).is_ok_and(|s| s.trim() == pid.to_string());
        if ready {
            show_log();
            eprintln!(
                "keel dev runs in the background (pid {pid}); its output goes to {}.\nStop it with: keel dev stop --dir {}",
                log.display(),
                dir.display()
            );
            return ExitCode::SUCCESS;
        }
        if Instant::now() >= deadline {
            show_log();
            eprintln!(
                "error: the cluster did not come up within {} s; stopping it",
                READY_BOUND.as_secs()
            );
            return stop_running(&dir).await;
        }
        let interrupted = async {
            match int.as_mut() {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = interrupted => {
                eprintln!("\ninterrupted; stopping the background keel dev");
                return stop_running(&dir).await;
            }
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
}

/// `--fresh`: wipes the directory, after checking that no running node
/// holds a data dir in it (it would die on its next write).
fn wipe_if_fresh(a: &DevArgs) -> Result<(), ExitCode> {
    if !(a.fresh && a.dir.exists()) {
        return Ok(());
    }
    // Check before destroying: a node still running on these data
    // dirs (another `keel dev`) holds its lock, and would die on its
    // next write if they went.
    let held = held_data_dirs(&a.dir);
    if !held.is_empty() {
        for d in &held {
            eprintln!("error: {} is in use by a running node", d.display());
        }
        eprintln!(
            "hint: another `keel dev --dir {}` is running: stop it first (Ctrl-C in its terminal, or `keel dev stop --dir {}`); nothing was removed",
            a.dir.display(),
            a.dir.display()
        );
        return Err(ExitCode::from(EXIT_LOCAL));
    }
    if let Err(e) = std::fs::remove_dir_all(&a.dir) {
        eprintln!("error: cannot wipe {}: {e}", a.dir.display());
        return Err(ExitCode::from(EXIT_LOCAL));
    }
    Ok(())
}

/// Runs `keel dev`: starts the cluster, waits for it to be up, prints how
/// to use it, then shows its status until a signal stops it.
pub async fn run(a: DevArgs) -> ExitCode {
    if let Some(DevCmd::Stop { dir }) = &a.action {
        return stop_running(dir).await;
    }
    if a.brokers == 0 || a.brokers > 9 {
        eprintln!("error: --brokers must be 1-9");
        return ExitCode::from(2);
    }
    let detached = std::env::var_os(DETACHED).is_some();
    if a.exit_when_ready && !detached {
        return detach(&a).await;
    }
    if let Err(code) = wipe_if_fresh(&a) {
        return code;
    }
    let (mut c, certs) = match prepare(&a) {
        Ok(v) => v,
        Err(code) => return code,
    };
    // Every way a terminal or a supervisor ends `keel dev` stops the
    // cluster in order (Ctrl-C, SIGTERM, and SIGHUP when the terminal
    // closes), from before the first node starts: no signal may leave
    // nodes running behind it.
    let mut signals = match Signals::new() {
        Some(s) => s,
        None => {
            eprintln!("error: cannot handle signals");
            return ExitCode::from(EXIT_LOCAL);
        }
    };
    if let Err(e) = c.start_all() {
        eprintln!("error: {e:#}");
        stop(&mut c, &a.dir);
        return ExitCode::from(EXIT_LOCAL);
    }
    let client = c.client(Duration::from_secs(2), Duration::from_secs(3));
    if let Err(code) = wait_until_up(&mut c, &client, &mut signals, &a).await {
        return code;
    }
    let kafka_client = match write_kafka_client_configs(&certs, &a.cluster_id) {
        Ok(k) => Some(k),
        Err(e) => {
            eprintln!("warning: no Kafka client configs written: {e:#}");
            None
        }
    };
    print_banner(&a, &c, &certs, kafka_client.as_ref());
    if detached {
        // The foreground `keel dev --exit-when-ready` waits for this.
        if let Err(e) = std::fs::write(ready_file(&a.dir), std::process::id().to_string()) {
            eprintln!("error: cannot write {}: {e}", ready_file(&a.dir).display());
            stop(&mut c, &a.dir);
            return ExitCode::from(EXIT_LOCAL);
        }
    }
    show_status(&client, &mut signals).await;
    stop(&mut c, &a.dir);
    ExitCode::SUCCESS
}

/// The cluster `keel dev` is about to start, its certificates directory
/// noted for the admin commands and this process's id for `keel dev
/// stop`; refused when another cluster holds the addresses.
fn prepare(a: &DevArgs) -> Result<(Cluster, PathBuf), ExitCode> {
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: cannot find the keel binary: {e}");
            return Err(ExitCode::from(EXIT_LOCAL));
        }
    };
    let c = match Cluster::new(spec(exe, a)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Err(ExitCode::from(EXIT_LOCAL));
        }
    };
    let certs = c
        .certs_dir()
        .map(|d| std::fs::canonicalize(d).unwrap_or_else(|_| d.to_path_buf()))
        .unwrap_or_default();
    // Refuse early when another cluster (an earlier `keel dev`?) holds the
    // addresses: its answers would be mistaken for ours.
    let taken = taken_addresses(&c);
    if !taken.is_empty() {
        for t in &taken {
            eprintln!("error: {t}");
        }
        eprintln!("hint: is another `keel dev` running (stop it first), or another service on these ports (e.g. node_exporter on 9100)?");
        return Err(ExitCode::from(EXIT_LOCAL));
    }
    // Only now: a refused start must not redirect another dev cluster's
    // admin commands.
    let mut note = vec![certs.display().to_string()];
    note.extend(c.nodes.iter().map(|n| n.addr.to_string()));
    if let Err(e) = std::fs::write(certs_note(), note.join("\n") + "\n") {
        eprintln!("warning: cannot note the certificates directory: {e}");
    }
    // `keel dev stop` finds this process here.
    if let Err(e) = std::fs::write(pid_file(&a.dir), std::process::id().to_string()) {
        eprintln!("warning: cannot write {}: {e}", pid_file(&a.dir).display());
    }
    Ok((c, certs))
}

/// The signals that stop `keel dev`: Ctrl-C, SIGTERM and SIGHUP.
struct Signals {
    /// SIGINT (Ctrl-C).
    int: tokio::signal::unix::Signal,
    /// SIGTERM (a supervisor).
    term: tokio::signal::unix::Signal,
    /// SIGHUP (the terminal closed).
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    /// Listens for all three; `None` when one cannot be handled.
    fn new() -> Option<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        ) {
            (Ok(int), Ok(term), Ok(hup)) => Some(Signals { int, term, hup }),
            _ => None,
        }
    }

    /// Completes when any of them arrives.
    async fn any(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
            _ = self.hup.recv() => {}
        }
    }
}

/// Waits (up to 90 s) for a leader and every broker unfenced, a dot a
/// try; on a signal, a dead node or the deadline, stops the cluster.
async fn wait_until_up(
    c: &mut Cluster,
    client: &ControllerClient,
    signals: &mut Signals,
    a: &DevArgs,
) -> Result<(), ExitCode> {
    let logs = a.dir.join("logs");
    eprint!(
        "waiting for the quorum to elect a leader and {} to be unfenced ",
        keel_controller::console::count(usize::from(a.brokers), "broker")
    );
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let up = tokio::select! {
            _ = signals.any() => None,
            s = status(client) => Some(s),
        };
        let Some(up) = up else {
            eprintln!("\nstopped while starting");
            stop(c, &a.dir);
            return Err(ExitCode::from(EXIT_LOCAL));
        };
        if let Some((_, _, active, _)) = up {
            if active >= a.brokers as usize {
                return Ok(());
            }
        }
        if let Err(e) = c.check_alive() {
            eprintln!("\nerror: {e:#}\nlogs are in {}", logs.display());
            stop(c, &a.dir);
            return Err(ExitCode::from(EXIT_LOCAL));
        }
        if Instant::now() >= deadline {
            eprintln!(
                "\nerror: the cluster did not come up within 90 s; logs are in {}",
                logs.display()
            );
            stop(c, &a.dir);
            return Err(ExitCode::from(EXIT_LOCAL));
        }
        eprint!(".");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What `keel dev` prints once the cluster is up: its addresses and
/// commands to try.
fn print_banner(
    a: &DevArgs,
    c: &Cluster,
    certs: &std::path::Path,
    kafka_client: Option<&KafkaClientConfigs>,
) {
    println!();
    println!("Keel dev cluster '{}' is up.", a.cluster_id);
    println!();
    println!("  controllers  {}", c.controller_addrs().join(","));
    println!("  brokers      {}", c.broker_addrs().join(","));
    println!(
        "  Kafka        {} (brokers, TLS; metadata and admin APIs, as the client's user)",
        c.kafka_addrs().join(",")
    );
    println!(
        "  Kafka        {} (controllers, TLS; DescribeCluster, DescribeQuorum)",
        c.controller_kafka_addrs().join(",")
    );
    println!("  console      http://127.0.0.11:9100/ (any controller; a standby links to the active one)");
    println!("  metrics      http://127.0.0.1{{1,2,3}}:9100/metrics (controllers), http://127.0.0.2X:9101/metrics (brokers)");
    println!("  data + logs  {}", a.dir.display());
    println!(
        "  mutual TLS   certificates in {} (the admin commands use user-admin.pem)",
        certs.display()
    );
    println!();
    println!("Try, in another terminal:");
    println!("  keel health");
    println!("  keel quorum describe --replication");
    println!("  keel cluster describe");
    println!("  keel topics create orders --partitions 6 --replication-factor 3");
    println!("  keel topics describe orders");
    println!("  keel elect-leaders --preferred --all");
    let first_kafka = c.kafka_addrs().first().cloned().unwrap_or_default();
    match kafka_client {
        Some(k) => {
            // kcat sets its own host name check after reading -F: off here.
            println!(
                "  kcat -F {} -X ssl.endpoint.identification.algorithm=none -L -b {first_kafka}",
                k.kcat.display()
            );
            println!(
                "  (Kafka's Java tools: --command-config {}; both act as User:admin)",
                k.java.display()
            );
        }
        None => println!("  kcat -L -b {first_kafka}"),
    }
    println!("(`cargo run --release --` in place of `keel` from the source tree.)");
    println!();
}

/// The cluster's status line until a signal arrives: rewritten in place
/// on a terminal, a line per change elsewhere.
async fn show_status(client: &ControllerClient, signals: &mut Signals) {
    // The streams existed before the loop: a signal that arrives while a
    // status query is in flight is kept, not lost.
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut last_line: Option<String> = None;
    loop {
        let line = tokio::select! {
            _ = signals.any() => break,
            s = status(client) => match s {
                Some((leader, term, active, total)) => {
                    format!("leader: controller {leader}  term: {term}  brokers up: {active}/{total}")
                }
                None => "leader: none (election in progress?)".to_string(),
            },
        };
        if terminal {
            // One status line, rewritten in place.
            eprint!("\r\x1b[2K{line}");
        } else if last_line.as_deref() != Some(line.as_str()) {
            // A file or a pipe: each change on a line of its own, without
            // terminal codes.
            eprintln!("{line}");
        }
        last_line = Some(line);
        let _ = std::io::stderr().flush();
        tokio::select! {
            _ = signals.any() => break,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}
