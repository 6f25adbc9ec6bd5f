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

/// As [`cluster`], with extra controller flags.
pub fn cluster_with(n: usize, controller_flags: &[&str]) -> Cluster {
    Cluster::start(
        Spec::new(keel_bin(), CLUSTER_ID)
            .brokers(n)
            .controller_flags(&["--session-timeout-ms", "3000"])
            .controller_flags(controller_flags)
            .broker_flags(&[
                "--heartbeat-interval-ms",
                "300",
                "--session-timeout-ms",
                "3000",
                "--replica-lag-time-max-ms",
                "3000",
            ]),
    )
    .expect("start a cluster")
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
