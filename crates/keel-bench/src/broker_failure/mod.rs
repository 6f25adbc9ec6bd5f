//! Scenario `broker-failure`: how fast leadership moves off a broker that
//! dies (SIGKILL, detected by session expiry) or leaves (SIGTERM, controlled
//! shutdown), with real `keel broker` processes.
//!
//! Three controllers (`127.0.6.11-13`, `--session-timeout-ms 3000`, JSON
//! logs, a Prometheus endpoint each) and three brokers (`127.0.6.21-23`,
//! heartbeat 500 ms, session 3 s). `partitions` partitions in topics of 100,
//! every one with replicas `[1, 2, 3]`, so broker 1 leads them all. Then two
//! trial sets, the state recreated between trials (broker 1 restarted, a
//! preferred election until it leads everything again, and brokers 2 and 3
//! have accepted that):
//!
//! * failure: SIGKILL broker 1. Measured from the active controller's
//!   "broker fenced" log line (logged once the fence and the leader moves
//!   are committed) to the last `accepted_at_ms` on brokers 2 and 3 of the
//!   first `leader_and_isr` line per partition with a leader other than 1 at
//!   a newer leader epoch. Also: Raft entries the fence used (active
//!   controller's `last_applied_index` across the fence) and the event-queue
//!   p99 from the controller's Prometheus endpoint.
//! * controlled shutdown: SIGTERM broker 1. Measured from the moment the
//!   bench sends the signal (bench clock, unix ms) to the same last
//!   acceptance on brokers 2 and 3.
//!
//! Every wait is bounded; every process is SIGKILLed when the cluster
//! drops.

mod logs;
mod metrics;
mod report;
mod trials;

use std::time::{Duration, Instant};

use anyhow::bail;
use keel_testkit::Cluster;

use self::logs::ControllerLogs;
use self::report::Outcome;
use self::trials::Watch;
use crate::cluster::{self, create_image, ImageSpec};
use crate::history::Followers;
use crate::stats::{r1, r3, unix_now};
use crate::{progress, Env, Report};

/// Parameters of the `broker-failure` scenario.
#[derive(Clone, Debug)]
pub struct BrokerFailureParams {
    /// Trials per measurement (failure, controlled shutdown).
    pub trials: usize,
    pub partitions: u64,
    pub partitions_per_topic: u32,
    pub topics_per_request: usize,
    pub create_concurrency: usize,
    /// Bound on creating the topics and their acceptance by brokers 2 and 3.
    pub setup_timeout_secs: f64,
    /// Bound on one measured move (kill/term until brokers 2 and 3 accepted).
    pub move_timeout_secs: f64,
    /// Bound on recreating the state between trials.
    pub restore_timeout_secs: f64,
}

impl Default for BrokerFailureParams {
    fn default() -> Self {
        Self {
            trials: 3,
            partitions: 100_000,
            partitions_per_topic: 100,
            topics_per_request: 20,
            create_concurrency: 4,
            setup_timeout_secs: 900.0,
            move_timeout_secs: 180.0,
            restore_timeout_secs: 600.0,
        }
    }
}

/// 127.0.<subnet>.x of the scenario's nodes.
const SUBNET: u8 = 6;
/// Broker session timeout (controllers, brokers) and heartbeat period.
const SESSION_TIMEOUT_MS: &str = "3000";
const HEARTBEAT_INTERVAL_MS: &str = "500";
/// The "broker ..." lines the scenario times are logged at info.
const CONTROLLER_LOG: &str = "info,openraft=warn,sled=warn,h2=warn,tower=warn,hyper=warn";
/// Brokers log one line per partition they take over at info: keep them quiet.
const BROKER_LOG: &str = "warn,openraft=error";

/// Three controllers (JSON logs, a metrics listener each) and three
/// brokers, all running, the brokers unfenced.
async fn set_up(env: &Env) -> anyhow::Result<Cluster> {
    progress!(
        "broker-failure: 3 controllers on 127.0.{SUBNET}.11-13, 3 brokers on 127.0.{SUBNET}.21-23"
    );
    let flags = [
        "--session-timeout-ms",
        SESSION_TIMEOUT_MS,
        "--log-format",
        "json",
    ];
    let spec = cluster::spec(env, SUBNET, &flags)
        .metrics(true)
        .brokers(3)
        .broker_flags(&[
            "--heartbeat-interval-ms",
            HEARTBEAT_INTERVAL_MS,
            "--session-timeout-ms",
            SESSION_TIMEOUT_MS,
        ])
        .logs(Some(CONTROLLER_LOG), Some(BROKER_LOG));
    let mut c = cluster::start(spec)?;
    c.wait_active(Duration::from_secs(60)).await?;
    c.start_brokers()?;
    c.wait_brokers_unfenced(3, Duration::from_secs(60)).await?;
    Ok(c)
}

/// Creates the partitions, all on replicas [1, 2, 3], and waits until
/// brokers 2 and 3 accepted broker 1 as the leader of every one; returns
/// the seconds to create them and to that acceptance.
async fn load(
    c: &mut Cluster,
    w: &mut Watch,
    p: &BrokerFailureParams,
) -> anyhow::Result<(f64, f64)> {
    w.followers.begin(true);
    let t = Instant::now();
    progress!(
        "broker-failure: creating {} partitions (RF 3, replicas [1,2,3])",
        p.partitions
    );
    let spec = ImageSpec {
        partitions: p.partitions,
        partitions_per_topic: p.partitions_per_topic,
        replication_factor: 3,
        replicas: Some(vec![1, 2, 3]),
        topics_per_request: p.topics_per_request,
        concurrency: p.create_concurrency,
        budget: Duration::from_secs_f64(p.setup_timeout_secs),
        prefix: "bf".into(),
    };
    let made = create_image(c, &spec, "broker-failure").await?;
    if made.partitions < p.partitions {
        bail!(
            "only {} of {} partitions created within {} s",
            made.partitions,
            p.partitions,
            p.setup_timeout_secs
        );
    }
    let create_secs = t.elapsed().as_secs_f64();
    let setup = Duration::from_secs_f64(p.setup_timeout_secs);
    w.followers
        .wait(c, p.partitions, setup, &[], "setup")
        .await?;
    let setup_secs = t.elapsed().as_secs_f64();
    progress!(
        "broker-failure: created in {create_secs:.1} s; brokers 2/3 accepted leader 1 for all after {setup_secs:.1} s"
    );
    Ok((create_secs, setup_secs))
}

/// Up to `p.trials` trials of one kind, the state restored after each;
/// stops at the first that fails. Returns the trials and the failure's
/// text; `kind` names them in the progress lines, `figures` says what a
/// trial measured.
async fn run_trials<T>(
    c: &mut Cluster,
    w: &mut Watch,
    p: &BrokerFailureParams,
    kind: &str,
    trial: impl AsyncFn(&mut Cluster, &mut Watch, &BrokerFailureParams) -> anyhow::Result<T>,
    figures: impl Fn(&T) -> String,
) -> anyhow::Result<(Vec<T>, Vec<String>)> {
    let (mut done, mut errors) = (Vec::new(), Vec::new());
    for n in 0..p.trials {
        match trial(c, w, p).await {
            Ok(tr) => {
                progress!("broker-failure: {kind} trial {}: {}", n + 1, figures(&tr));
                done.push(tr);
            }
            Err(e) => {
                progress!("broker-failure: {kind} trial {} failed: {e:#}", n + 1);
                errors.push(format!("{e:#}"));
                break;
            }
        }
        trials::restore(c, w, p).await?;
    }
    Ok((done, errors))
}

/// Runs the scenario.
pub async fn run(env: &Env, p: &BrokerFailureParams) -> anyhow::Result<Report> {
    if p.partitions == 0 || p.trials == 0 {
        bail!("--partitions and --trials must be positive");
    }
    let started_at = unix_now();
    let mut c = set_up(env).await?;
    let leadership = cluster::Leadership::start(&c).await;
    let mut w = Watch {
        logs: ControllerLogs::new(&c),
        followers: Followers::new(&c),
    };
    let (create_secs, setup_secs) = load(&mut c, &mut w, p).await?;

    let (failure, failure_errors) =
        run_trials(&mut c, &mut w, p, "failure", trials::failure, |tr| {
            format!(
                "{:.1} ms from fence log to last acceptance, {:.1} ms from session expiry (expiry -> fence log {:.1} ms, kill -> fence {:.0} ms, first acceptance +{:.1} ms, {} Raft entries, queue p99 {:?} ms)",
                tr.ms,
                tr.expiry_ms,
                tr.expiry_to_fence_ms,
                tr.detect_ms,
                tr.first_accept_ms,
                tr.raft_entries,
                tr.queue_p99_ms.map(r3)
            )
        })
        .await?;
    let (shutdown, shutdown_errors) =
        run_trials(&mut c, &mut w, p, "controlled-shutdown", trials::shutdown, |tr| {
            format!(
                "{:.1} ms from SIGTERM to last acceptance (shutdown record +{:?} ms, first acceptance +{:.1} ms, exit +{:?} ms)",
                tr.ms,
                tr.to_shutdown_record_ms.map(r1),
                tr.first_accept_ms,
                tr.exit_ms
            )
        })
        .await?;
    let leadership_changes = leadership.changes(&c).await;
    drop(c);
    report::report(
        p,
        Outcome {
            started_at,
            create_secs,
            setup_secs,
            failure,
            failure_errors,
            shutdown,
            shutdown_errors,
            leadership_changes,
        },
    )
}
