//! What the end-to-end tests share: the `keel` binary under test, the
//! cluster kit with the tests' settings, and unwrapping admin helpers.
#![allow(dead_code, unused_imports)]

use std::time::Duration;

use keel_proto::client::ControllerClient;
pub use keel_testkit::admin::broker_info;
pub use keel_testkit::{admin, Cluster, Node, Process, Spec};

/// The cluster id of every test cluster.
pub const CLUSTER_ID: &str = "keel-test";

/// The binary under test.
pub fn keel_bin() -> &'static str {
    env!("CARGO_BIN_EXE_keel")
}

/// Three controllers on 127.0.0.1 (a free port each), started; `flags` go
/// to each.
pub fn quorum(flags: &[&str]) -> Cluster {
    Cluster::start(Spec::new(keel_bin(), CLUSTER_ID).controller_flags(flags))
        .expect("start three controllers")
}

/// As [`quorum`], with controller `late` laid out but not started.
pub fn quorum_except(flags: &[&str], late: usize) -> Cluster {
    let mut q = Cluster::new(Spec::new(keel_bin(), CLUSTER_ID).controller_flags(flags))
        .expect("lay out three controllers");
    for i in (0..3).filter(|i| *i != late) {
        q.controller_mut(i).start().expect("start a controller");
    }
    q
}

/// Three controllers and `n` real brokers with fast timings: heartbeat
/// 300 ms, session 3 s, replica lag 3 s.
pub fn cluster(n: usize) -> Cluster {
    cluster_with(n, &[])
}

/// Three controllers and `n` brokers with fast timings (heartbeat 300 ms,
/// session 3 s, replica lag 3 s), not started: tests add what they need.
pub fn fast_spec(n: usize) -> Spec {
    Spec::new(keel_bin(), CLUSTER_ID)
        .brokers(n)
        .controller_flags(&["--session-timeout-ms", "3000"])
        .broker_flags(&[
            "--heartbeat-interval-ms",
            "300",
            "--session-timeout-ms",
            "3000",
            "--replica-lag-time-max-ms",
            "3000",
        ])
}

/// As [`cluster`], with extra controller flags.
pub fn cluster_with(n: usize, controller_flags: &[&str]) -> Cluster {
    Cluster::start(fast_spec(n).controller_flags(controller_flags)).expect("start a cluster")
}

/// Acknowledged topic names, shared with a [`Writes`] task.
pub type Acked = std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>;

/// How many names `acked` holds.
pub fn count(acked: &Acked) -> usize {
    acked.lock().unwrap().len()
}

/// Waits (bounded by `within`) until `acked` holds at least `n` names.
pub async fn wait_acked(c: &Cluster, acked: &Acked, n: usize, within: Duration, when: &str) {
    let deadline = std::time::Instant::now() + within;
    while count(acked) < n {
        assert!(
            std::time::Instant::now() < deadline,
            "{when}: the writer got only {} acknowledgements\n{}",
            count(acked),
            c.log_tails(40)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A writer creating topics `<prefix>-0..` (1 partition, replication
/// factor `rf`) one after another until [`Writes::stop`] (at most 10,000),
/// recording each one the cluster acknowledged.
pub struct Writes {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Writes {
    pub fn start(
        client: &std::sync::Arc<ControllerClient>,
        prefix: String,
        rf: u32,
        acked: &Acked,
    ) -> Self {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (client, acked, halt) = (client.clone(), acked.clone(), stop.clone());
        let task = tokio::spawn(async move {
            for i in 0..10_000u32 {
                if halt.load(Ordering::Acquire) {
                    break;
                }
                let name = format!("{prefix}-{i}");
                if admin::create_topic(&client, &name, 1, rf).await.is_ok() {
                    acked.lock().unwrap().insert(name);
                }
            }
        });
        Self { stop, task }
    }

    /// Stops the writer and waits for its last call to end (so the
    /// quorum can settle on one index).
    pub async fn stop(self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        self.task.await.unwrap();
    }
}

/// A redirect-following client of the cluster's controllers.
pub fn client(c: &Cluster) -> ControllerClient {
    c.client(Duration::from_secs(5), Duration::from_secs(60))
}

/// Registers a stand-in broker (nothing listens at its address) and
/// unfences it; returns its epoch.
pub async fn register_fake_broker(client: &ControllerClient, cluster_id: &str, id: u32) -> u64 {
    admin::register_stand_in(client, cluster_id, id, &format!("127.0.0.1:{}", 1 + id))
        .await
        .expect("stand-in broker registered and unfenced")
}

/// Creates a topic; panics on refusal. Returns its id.
pub async fn create_topic(
    client: &ControllerClient,
    name: &str,
    partitions: u32,
    rf: u32,
) -> Vec<u8> {
    admin::create_topic(client, name, partitions, rf)
        .await
        .expect("topic created")
}

/// Names of all topics, through the active controller.
pub async fn topic_names(client: &ControllerClient) -> Vec<String> {
    admin::topic_names(client).await.expect("topics described")
}

/// The leadership history broker `i` wrote (one JSON object per line).
pub fn history(c: &Cluster, i: usize) -> Vec<serde_json::Value> {
    std::fs::read_to_string(c.broker(i).history_path())
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A free port on 127.0.0.1.
pub fn free_port() -> u16 {
    keel_testkit::free_port(std::net::Ipv4Addr::LOCALHOST.into()).expect("a free port")
}

/// A process outside the cluster, started with `node`'s arguments as
/// `edit` changes them (a twin of a broker, a controller on another's data
/// dir); its log is `<cluster dir>/<name>.log`.
pub fn stray(c: &Cluster, node: &Node, name: &str, edit: impl FnOnce(&mut Vec<String>)) -> Process {
    let mut launch = node.process.launch.clone();
    edit(&mut launch.args);
    let mut p = Process::new(name, launch, c.dir().join(format!("{name}.log")));
    p.start().expect("start a stray process");
    p
}

/// Sets the value that follows `flag` in `args`.
pub fn set_flag(args: &mut [String], flag: &str, value: impl Into<String>) {
    let pos = args
        .iter()
        .position(|a| a == flag)
        .unwrap_or_else(|| panic!("{flag} not in {args:?}"));
    args[pos + 1] = value.into();
}

/// Waits (bounded) for controller `i` to exit on its own.
pub async fn wait_exit(
    c: &mut Cluster,
    i: usize,
    within: Duration,
    when: &str,
) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(st) = c.controller_mut(i).process.exited() {
            return st;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{when}: the node kept running\n{}",
            c.controller(i).process.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
