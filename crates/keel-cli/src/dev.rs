//! `keel dev`: a local cluster in one command — three controllers on
//! 127.0.0.11-13:9093 and brokers on 127.0.0.21-:9092, as child processes of
//! this one, with data and logs under one directory. Ctrl-C stops the
//! brokers by controlled shutdown, then the controllers.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::Args;
use keel_proto::client::ControllerClient;
use keel_proto::pb;

use crate::EXIT_LOCAL;

#[derive(Args, Debug)]
pub struct DevArgs {
    /// Where data dirs and logs go.
    #[arg(long, default_value = ".keel-dev")]
    dir: PathBuf,
    /// Wipe the directory first (otherwise a restart resumes the old cluster).
    #[arg(long)]
    fresh: bool,
    /// Number of brokers (1-9).
    #[arg(long, default_value_t = 3)]
    brokers: u8,
    #[arg(long, default_value = "keel-dev")]
    cluster_id: String,
    /// Exit after the cluster is up (for scripts); Ctrl-C otherwise.
    #[arg(long)]
    exit_when_ready: bool,
}

struct DevChild {
    name: String,
    child: Child,
    log: PathBuf,
}

const CONTROLLERS: [&str; 3] = ["127.0.0.11", "127.0.0.12", "127.0.0.13"];

fn controller_addr(i: usize) -> String {
    format!("{}:9093", CONTROLLERS[i])
}

fn broker_ip(i: u8) -> String {
    format!("127.0.0.{}", 21 + i)
}

fn spawn(exe: &Path, name: &str, args: Vec<String>, logs: &Path) -> std::io::Result<DevChild> {
    let log = logs.join(format!("{name}.log"));
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)?;
    let err = out.try_clone()?;
    let child = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()?;
    Ok(DevChild {
        name: name.to_string(),
        child,
        log,
    })
}

fn signal(c: &DevChild, sig: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(c.child.id().to_string())
        .status();
}

fn wait_all(children: &mut [DevChild], timeout: Duration) {
    let deadline = Instant::now() + timeout;
    for c in children.iter_mut() {
        loop {
            match c.child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() >= deadline => {
                    let _ = c.child.kill();
                    let _ = c.child.wait();
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
}

fn stop(brokers: &mut [DevChild], controllers: &mut [DevChild]) {
    eprintln!("\nstopping brokers (controlled shutdown) ...");
    for b in brokers.iter() {
        signal(b, "TERM");
    }
    wait_all(brokers, Duration::from_secs(15));
    eprintln!("stopping controllers ...");
    for c in controllers.iter() {
        signal(c, "TERM");
    }
    wait_all(controllers, Duration::from_secs(10));
    eprintln!("stopped; nothing left running.");
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

pub async fn run(a: DevArgs) -> ExitCode {
    if a.brokers == 0 || a.brokers > 9 {
        eprintln!("error: --brokers must be 1-9");
        return ExitCode::from(2);
    }
    if a.fresh && a.dir.exists() {
        if let Err(e) = std::fs::remove_dir_all(&a.dir) {
            eprintln!("error: cannot wipe {}: {e}", a.dir.display());
            return ExitCode::from(EXIT_LOCAL);
        }
    }
    // Refuse early when another cluster (an earlier `keel dev`?) holds the
    // addresses: its answers would be mistaken for ours.
    let taken: Vec<String> = (0..3)
        .map(controller_addr)
        .chain((0..a.brokers).map(|i| format!("{}:9092", broker_ip(i))))
        .filter(|addr| std::net::TcpListener::bind(addr.as_str()).is_err())
        .collect();
    if !taken.is_empty() {
        eprintln!("error: address(es) already in use: {}", taken.join(", "));
        eprintln!("hint: is another `keel dev` running? stop it first");
        return ExitCode::from(EXIT_LOCAL);
    }
    let logs = a.dir.join("logs");
    if let Err(e) = std::fs::create_dir_all(&logs) {
        eprintln!("error: cannot create {}: {e}", logs.display());
        return ExitCode::from(EXIT_LOCAL);
    }
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: cannot find the keel binary: {e}");
            return ExitCode::from(EXIT_LOCAL);
        }
    };
    let voters = (0..3)
        .map(|i| format!("{}@{}", i + 1, controller_addr(i)))
        .collect::<Vec<_>>()
        .join(",");
    let controllers_list = (0..3).map(controller_addr).collect::<Vec<_>>().join(",");
    let mut controllers = Vec::new();
    let mut brokers = Vec::new();
    for (i, ip) in CONTROLLERS.iter().enumerate() {
        let args = vec![
            "controller".into(),
            "--node-id".into(),
            (i + 1).to_string(),
            "--listen".into(),
            controller_addr(i),
            "--voters".into(),
            voters.clone(),
            "--data-dir".into(),
            a.dir
                .join(format!("controller-{}", i + 1))
                .display()
                .to_string(),
            "--cluster-id".into(),
            a.cluster_id.clone(),
            "--metrics-listen".into(),
            format!("{ip}:9100"),
        ];
        match spawn(&exe, &format!("controller-{}", i + 1), args, &logs) {
            Ok(c) => controllers.push(c),
            Err(e) => {
                eprintln!("error: cannot start controller {}: {e}", i + 1);
                stop(&mut brokers, &mut controllers);
                return ExitCode::from(EXIT_LOCAL);
            }
        }
    }
    for i in 0..a.brokers {
        let args = vec![
            "broker".into(),
            "--broker-id".into(),
            (i + 1).to_string(),
            "--listen".into(),
            format!("{}:9092", broker_ip(i)),
            "--controllers".into(),
            controllers_list.clone(),
            "--cluster-id".into(),
            a.cluster_id.clone(),
            "--data-dir".into(),
            a.dir
                .join(format!("broker-{}", i + 1))
                .display()
                .to_string(),
            "--metrics-listen".into(),
            format!("{}:9101", broker_ip(i)),
        ];
        match spawn(&exe, &format!("broker-{}", i + 1), args, &logs) {
            Ok(c) => brokers.push(c),
            Err(e) => {
                eprintln!("error: cannot start broker {}: {e}", i + 1);
                stop(&mut brokers, &mut controllers);
                return ExitCode::from(EXIT_LOCAL);
            }
        }
    }
    let client = ControllerClient::new((0..3).map(controller_addr).collect())
        .with_timeouts(Duration::from_secs(2), Duration::from_secs(3));
    eprint!(
        "waiting for the quorum to elect a leader and {} brokers to be unfenced ",
        a.brokers
    );
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some((_, _, active, _)) = status(&client).await {
            if active >= a.brokers as usize {
                break;
            }
        }
        let dead = controllers
            .iter_mut()
            .chain(brokers.iter_mut())
            .find_map(|c| {
                matches!(c.child.try_wait(), Ok(Some(_))).then(|| (c.name.clone(), c.log.clone()))
            });
        if let Some((name, log)) = dead {
            eprintln!(
                "\nerror: {name} exited during startup; see {}",
                log.display()
            );
            stop(&mut brokers, &mut controllers);
            return ExitCode::from(EXIT_LOCAL);
        }
        if Instant::now() >= deadline {
            eprintln!(
                "\nerror: the cluster did not come up within 90 s; logs are in {}",
                logs.display()
            );
            stop(&mut brokers, &mut controllers);
            return ExitCode::from(EXIT_LOCAL);
        }
        eprint!(".");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!();
    println!("Keel dev cluster '{}' is up.", a.cluster_id);
    println!();
    println!("  controllers  {}", controllers_list);
    println!(
        "  brokers      {}",
        (0..a.brokers)
            .map(|i| format!("{}:9092", broker_ip(i)))
            .collect::<Vec<_>>()
            .join(",")
    );
    println!("  metrics      http://127.0.0.1{{1,2,3}}:9100/metrics (controllers), http://127.0.0.2X:9101/metrics (brokers)");
    println!("  data + logs  {}", a.dir.display());
    println!();
    println!("Try, in another terminal:");
    println!("  keel quorum describe --replication");
    println!("  keel cluster describe");
    println!("  keel topics create orders --partitions 6 --replication-factor 3");
    println!("  keel topics describe --topic orders");
    println!("  keel elect-leaders --preferred --all");
    println!("(`cargo run --release --` in place of `keel` from the source tree.)");
    println!();
    if a.exit_when_ready {
        stop(&mut brokers, &mut controllers);
        return ExitCode::SUCCESS;
    }
    // Both streams exist before the loop: a signal that arrives while a
    // status query is in flight is kept, not lost.
    use tokio::signal::unix::{signal, SignalKind};
    let (mut int, mut term) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(i), Ok(t)) => (i, t),
        _ => {
            stop(&mut brokers, &mut controllers);
            return ExitCode::from(EXIT_LOCAL);
        }
    };
    loop {
        let line = tokio::select! {
            _ = int.recv() => break,
            _ = term.recv() => break,
            s = status(&client) => match s {
                Some((leader, term, active, total)) => {
                    format!("leader: controller {leader}  term: {term}  brokers up: {active}/{total}")
                }
                None => "leader: none (election in progress?)".to_string(),
            },
        };
        eprint!("\r\x1b[2K{line}");
        let _ = std::io::stderr().flush();
        tokio::select! {
            _ = int.recv() => break,
            _ = term.recv() => break,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
    stop(&mut brokers, &mut controllers);
    ExitCode::SUCCESS
}
