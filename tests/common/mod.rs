//! What the end-to-end tests share: the `keel` binary under test, the
//! cluster kit with the tests' settings, and unwrapping admin helpers.
#![allow(dead_code, unused_imports)]

use std::process::ExitStatus;
use std::time::Duration;

use keel_proto::client::ControllerClient;
pub use keel_testkit::admin::broker_info;
pub use keel_testkit::{admin, Cluster, Node, Process, Spec};

/// Sends one Kafka request to `addr`, a Kafka listener of `c`, on a fresh
/// connection secured as `c`'s own clients are (SSL as the kit's admin
/// user on a TLS cluster); the decoded answer. Panics on any failure.
pub async fn kafka_ask<Q, R>(
    c: &Cluster,
    addr: &str,
    api: kafka_protocol::messages::ApiKey,
    version: i16,
    body: &Q,
) -> R
where
    Q: kafka_protocol::protocol::Encodable,
    R: kafka_protocol::protocol::Decodable,
{
    use keel_testkit::kafka::{KafkaConn, KafkaSecurity};
    let security = KafkaSecurity::from_transport(c.transport());
    let mut conn = KafkaConn::open(addr, &security)
        .await
        .unwrap_or_else(|e| panic!("{addr}: {e:#}"));
    let r = conn
        .call(api, version, body)
        .await
        .unwrap_or_else(|e| panic!("{addr}: {api:?} v{version}: {e:#}"));
    conn.close().await;
    r
}

/// The cluster id of every test cluster.
pub const CLUSTER_ID: &str = "keel-test";

/// The binary under test.
pub fn keel_bin() -> &'static str {
    env!("CARGO_BIN_EXE_keel")
}

/// The `keel-lab` binary beside `keel`, which `keel jepsen` and `keel
/// bench` run; built first (once per test binary) in the profile and
/// target dir of `keel`: a test of this package cannot name another
/// package's binary, and `cargo test --test cli` alone would not build it.
pub fn keel_lab() -> std::path::PathBuf {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let keel = std::path::Path::new(keel_bin());
            let profile_dir = keel.parent().expect("keel is in a profile dir");
            let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
                Some("debug") => "dev",
                Some(p) => p,
                None => panic!("no profile dir in {}", keel.display()),
            };
            let target = profile_dir.parent().expect("a target dir");
            let st = std::process::Command::new(env!("CARGO"))
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .args(["build", "--quiet", "-p", "keel-lab", "--profile", profile])
                .env("CARGO_TARGET_DIR", target)
                .status()
                .expect("run cargo build -p keel-lab");
            assert!(
                st.success(),
                "cargo build -p keel-lab --profile {profile}: {st}"
            );
            let lab = keel.with_file_name("keel-lab");
            assert!(
                lab.is_file(),
                "{} is missing after cargo build -p keel-lab",
                lab.display()
            );
            lab
        })
        .clone()
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

/// Waits, each within `within`, for an active controller and then for
/// every broker to be active; the active controller's index.
pub async fn wait_ready(c: &mut Cluster, within: Duration) -> usize {
    let active = c.wait_active(within).await.unwrap();
    c.wait_all_brokers_active(within).await.unwrap();
    active
}

/// [`wait_ready`], then creates topic `name` through a new admin client
/// of `c`; that client.
pub async fn ready_with_topic(
    c: &mut Cluster,
    within: Duration,
    name: &str,
    partitions: u32,
    rf: u32,
) -> ControllerClient {
    wait_ready(c, within).await;
    let admin = client(c);
    create_topic(&admin, name, partitions, rf).await;
    admin
}

/// Creates topic `name` with one partition placed on `replicas` through
/// `client`; panics unless the topic was created.
pub async fn create_placed_topic(client: &ControllerClient, name: &str, replicas: &[u32]) {
    let req = admin::create_topics_request(vec![keel_proto::pb::CreatableTopic {
        name: name.into(),
        assignments: vec![keel_proto::pb::ReplicaAssignment {
            partition: 0,
            replicas: replicas.to_vec(),
        }],
        ..Default::default()
    }]);
    let r = admin::create_topics(client, &req).await.unwrap();
    assert!(r.topics[0].error.is_none(), "{r:?}");
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

/// Creates topics `{prefix}-0` to `{prefix}-{n - 1}`, each of which must be
/// accepted; their names, in that order.
pub async fn create_numbered_topics(
    client: &ControllerClient,
    prefix: &str,
    n: usize,
    partitions: u32,
    rf: u32,
) -> Vec<String> {
    let mut names = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("{prefix}-{i}");
        create_topic(client, &name, partitions, rf).await;
        names.push(name);
    }
    names
}

/// Sends `req` as a write through `client`; the answer as it came,
/// refusals included. Panics only when no answer came.
pub async fn create_topics_answer(
    client: &ControllerClient,
    req: &keel_proto::pb::CreateTopicsRequest,
) -> keel_proto::pb::CreateTopicsResponse {
    client
        .admin_write(|mut c| {
            let req = req.clone();
            async move { c.create_topics(req).await }
        })
        .await
        .expect("create topics answered")
}

/// The quorum as the controller `client` reaches describes it, refusals
/// included. Panics only when no answer came.
pub async fn describe_quorum(client: &ControllerClient) -> keel_proto::pb::DescribeQuorumResponse {
    client
        .admin(|mut c| async move {
            c.describe_quorum(keel_proto::pb::DescribeQuorumRequest::default())
                .await
        })
        .await
        .expect("quorum described")
}

/// Deletes topic `name`, which must be accepted.
pub async fn delete_topic(client: &ControllerClient, name: &str) {
    let names = vec![name.to_string()];
    let r = client
        .admin(|mut x| {
            let names = names.clone();
            async move {
                x.delete_topics(keel_proto::pb::DeleteTopicsRequest { names })
                    .await
            }
        })
        .await
        .unwrap();
    assert!(r.error.is_none() && r.topics[0].error.is_none(), "{r:?}");
}

/// Names of all topics, through the active controller.
pub async fn topic_names(client: &ControllerClient) -> Vec<String> {
    admin::topic_names(client).await.expect("topics described")
}

/// Every controller snapshots its applied state and purges the log it
/// covers.
pub async fn snapshot_all(c: &Cluster) {
    for addr in c.controller_addrs() {
        let single = ControllerClient::new(vec![addr])
            .with_timeouts(Duration::from_secs(30), Duration::from_secs(60))
            .with_transport(c.transport().clone());
        let r = single
            .admin(|mut cl| async move {
                cl.trigger_snapshot(keel_proto::pb::TriggerSnapshotRequest {
                    purge_log: true,
                    timeout_ms: 30_000,
                })
                .await
            })
            .await
            .expect("snapshot answered");
        assert_eq!(
            error_code(&r.error),
            keel_metadata::ErrorCode::None,
            "{:?}",
            r.error
        );
    }
}

/// Scrapes `addr` until `ok` holds for the text, for at most `within`;
/// returns it.
pub async fn scrape_within(
    addr: std::net::SocketAddr,
    within: Duration,
    what: &str,
    ok: impl Fn(&str) -> bool,
) -> String {
    let deadline = std::time::Instant::now() + within;
    loop {
        let text = keel_testkit::probe::scrape_metrics(addr)
            .await
            .unwrap_or_default();
        if ok(&text) {
            return text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}; last scrape:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
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
pub async fn wait_exit(c: &mut Cluster, i: usize, within: Duration, when: &str) -> ExitStatus {
    wait_node_exit(c.controller_mut(i), within, when).await
}

/// Waits (bounded) for broker `b` to exit on its own.
pub async fn wait_broker_exit(
    c: &mut Cluster,
    b: usize,
    within: Duration,
    when: &str,
) -> ExitStatus {
    wait_node_exit(c.broker_mut(b), within, when).await
}

/// Waits (bounded) for node `n` to exit on its own.
async fn wait_node_exit(
    n: &mut keel_testkit::Node,
    within: Duration,
    when: &str,
) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(st) = n.process.exited() {
            return st;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{when}: {} kept running\n{}",
            n.name(),
            n.process.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------
// Kafka clients of a TLS cluster's Kafka listeners: the security settings
// librdkafka (confluent-kafka, kcat) and kafka-python take, kcat itself,
// and the `keel` CLI as the kit's admin user (users, ACLs).

/// How a Kafka client speaks to a Kafka listener, as Kafka names it.
#[derive(Clone, Debug)]
pub enum KafkaSecurity {
    /// No TLS at all (a TLS listener refuses it).
    Plaintext,
    /// Kafka's SSL: TLS trusting `ca`, presenting `cert` (certificate and
    /// key files) when there is one.
    Ssl {
        ca: std::path::PathBuf,
        cert: Option<(std::path::PathBuf, std::path::PathBuf)>,
    },
    /// Kafka's SASL_SSL: TLS trusting `ca` without a certificate, then a
    /// SCRAM login (`mechanism`: SCRAM-SHA-256 or SCRAM-SHA-512).
    SaslSsl {
        ca: std::path::PathBuf,
        mechanism: String,
        user: String,
        password: String,
    },
}

impl KafkaSecurity {
    /// SSL presenting `identity`'s certificate of `c` (issued by the
    /// cluster CA on first use; a node's certificate too).
    pub fn certificate_of(c: &Cluster, identity: &keel_tls::Identity) -> Self {
        let certs = c.certs_dir().expect("a TLS cluster");
        keel_testkit::cluster::issue_missing(certs, identity).expect("issue a certificate");
        Self::Ssl {
            ca: certs.join("ca.pem"),
            cert: Some(keel_tls::certs::paths(certs, identity)),
        }
    }

    /// SSL as user `name` of `c`, with the user's certificate.
    pub fn user(c: &Cluster, name: &str) -> Self {
        Self::certificate_of(c, &keel_tls::Identity::user(&c.cluster_id, name))
    }

    /// SSL as the kit's admin user (a super user).
    pub fn admin(c: &Cluster) -> Self {
        Self::user(c, keel_testkit::cluster::ADMIN_USER)
    }

    /// TLS trusting `c`'s CA, with no certificate and no login.
    pub fn no_certificate(c: &Cluster) -> Self {
        Self::Ssl {
            ca: c.certs_dir().expect("a TLS cluster").join("ca.pem"),
            cert: None,
        }
    }

    /// SASL_SSL: a SCRAM login as `user` over TLS trusting `c`'s CA.
    pub fn scram(c: &Cluster, mechanism: &str, user: &str, password: &str) -> Self {
        Self::SaslSsl {
            ca: c.certs_dir().expect("a TLS cluster").join("ca.pem"),
            mechanism: mechanism.into(),
            user: user.into(),
            password: password.into(),
        }
    }

    /// librdkafka's properties (confluent-kafka's configuration, kcat's
    /// `-X`). The chain is verified against the cluster CA, but not the
    /// host name: node certificates name only `keel.internal`
    /// (`keel_tls::certs::SERVER_NAME`, the fixed name Keel's own clients
    /// ask for), never the 127.0.0.x address a client dials, so
    /// `ssl.endpoint.identification.algorithm` is `none`.
    pub fn librdkafka(&self) -> Vec<(&'static str, String)> {
        let tls = |ca: &std::path::Path| {
            vec![
                ("ssl.ca.location", ca.display().to_string()),
                ("ssl.endpoint.identification.algorithm", "none".to_string()),
            ]
        };
        match self {
            Self::Plaintext => vec![("security.protocol", "plaintext".to_string())],
            Self::Ssl { ca, cert } => {
                let mut v = vec![("security.protocol", "ssl".to_string())];
                v.extend(tls(ca));
                if let Some((cert, key)) = cert {
                    v.push(("ssl.certificate.location", cert.display().to_string()));
                    v.push(("ssl.key.location", key.display().to_string()));
                }
                v
            }
            Self::SaslSsl {
                ca,
                mechanism,
                user,
                password,
            } => {
                let mut v = vec![("security.protocol", "sasl_ssl".to_string())];
                v.extend(tls(ca));
                v.extend([
                    ("sasl.mechanisms", mechanism.clone()),
                    ("sasl.username", user.clone()),
                    ("sasl.password", password.clone()),
                ]);
                v
            }
        }
    }

    /// [`KafkaSecurity::librdkafka`] as one JSON object (what the
    /// confluent-kafka scripts in `tests/python/` read from
    /// `$KEEL_KAFKA_CONFIG`).
    pub fn librdkafka_json(&self) -> serde_json::Value {
        self.librdkafka()
            .into_iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::String(v)))
            .collect::<serde_json::Map<_, _>>()
            .into()
    }

    /// kafka-python's `KafkaAdminClient` keyword arguments (what the
    /// kafka-python scripts read from `$KEEL_KAFKA_CONFIG`). As for
    /// librdkafka, the chain is checked against the cluster CA
    /// (`ssl_cafile` makes kafka-python require a valid one) but not the
    /// host name (`ssl_check_hostname` off: the certificates name no
    /// 127.0.0.x address).
    pub fn kafka_python(&self) -> serde_json::Value {
        use serde_json::json;
        match self {
            Self::Plaintext => json!({"security_protocol": "PLAINTEXT"}),
            Self::Ssl { ca, cert } => {
                let mut v = json!({
                    "security_protocol": "SSL",
                    "ssl_cafile": ca,
                    "ssl_check_hostname": false,
                });
                if let Some((cert, key)) = cert {
                    v["ssl_certfile"] = json!(cert);
                    v["ssl_keyfile"] = json!(key);
                }
                v
            }
            Self::SaslSsl {
                ca,
                mechanism,
                user,
                password,
            } => json!({
                "security_protocol": "SASL_SSL",
                "ssl_cafile": ca,
                "ssl_check_hostname": false,
                "sasl_mechanism": mechanism,
                "sasl_plain_username": user,
                "sasl_plain_password": password,
            }),
        }
    }
}

/// `kcat -L -J` against `bootstrap`, speaking `security` (metadata timeout
/// 10 s, the whole run bounded to 40 s): its JSON, or its exit status and
/// stderr when it lists nothing.
pub fn kcat_list(bootstrap: &str, security: &KafkaSecurity) -> Result<serde_json::Value, String> {
    let mut cmd = std::process::Command::new("timeout");
    cmd.args(["40", "kcat", "-L", "-J", "-m", "10", "-b", bootstrap]);
    for (k, v) in security.librdkafka() {
        cmd.arg("-X").arg(format!("{k}={v}"));
    }
    let out = cmd.output().expect("run timeout(1)");
    assert!(
        out.status.code() != Some(127),
        "kcat is not installed: apt-get install -y kcat (scripts/test-deps.sh does)"
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(format!("kcat -L -b {bootstrap}: {}\n{stderr}", out.status));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| {
        format!(
            "kcat printed no JSON ({e}): {}\n{stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Broker ids and topic names in `kcat -L -J`'s JSON (each sorted).
pub fn kcat_brokers_and_topics(v: &serde_json::Value) -> (Vec<u64>, Vec<String>) {
    let list = |key: &str, field: &str| -> Vec<serde_json::Value> {
        v[key]
            .as_array()
            .map(|a| a.iter().map(|x| x[field].clone()).collect())
            .unwrap_or_default()
    };
    let mut brokers: Vec<u64> = list("brokers", "id")
        .iter()
        .filter_map(|i| i.as_u64())
        .collect();
    let mut topics: Vec<String> = list("topics", "topic")
        .iter()
        .filter_map(|t| t.as_str().map(String::from))
        .collect();
    brokers.sort_unstable();
    topics.sort();
    (brokers, topics)
}

/// Runs `cmd` to its end; panics, naming `what` and showing its stderr,
/// unless it exited 0. Its output.
pub fn output_ok(cmd: &mut std::process::Command, what: &str) -> std::process::Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The Python the tests drive: `$KEEL_TEST_PYTHON`, else the venv
/// `scripts/test-deps.sh` makes.
pub fn python() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("KEEL_TEST_PYTHON") {
        return std::path::PathBuf::from(p);
    }
    let venv = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/venv/bin/python");
    assert!(
        venv.exists(),
        "{} is missing: run scripts/test-deps.sh (it installs confluent-kafka and kafka-python), or set KEEL_TEST_PYTHON",
        venv.display()
    );
    venv
}

/// The command that runs `tests/python/<script>` with `args` and the
/// client settings `config` (in `$KEEL_KAFKA_CONFIG`), killed by
/// timeout(1) after `timeout_s`.
pub fn python_script(
    script: &str,
    timeout_s: u32,
    args: &[&str],
    config: &serde_json::Value,
) -> std::process::Command {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(script);
    let mut cmd = std::process::Command::new("timeout");
    cmd.arg(timeout_s.to_string())
        .arg(python())
        .arg(&path)
        .args(args)
        .env("KEEL_KAFKA_CONFIG", config.to_string());
    cmd
}

/// Panics, with its stderr, unless `script` exited 0.
pub fn assert_script_ok(script: &str, out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{script} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `tests/python/<script>` with `args` and the client settings
/// `config` (in `$KEEL_KAFKA_CONFIG`; bounded: 180 s); its JSON.
pub fn run_python(script: &str, args: &[&str], config: &serde_json::Value) -> serde_json::Value {
    let out = python_script(script, 180, args, config)
        .output()
        .expect("run timeout(1)");
    assert_script_ok(script, &out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("{script} printed no JSON ({e}): {stdout}"))
}

/// Runs `cmd` (a `keel` command) to its end: its exit code (-1 when a
/// signal ended it), stdout and stderr.
pub fn run_text(cmd: &mut std::process::Command) -> (i32, String, String) {
    let out = cmd.output().expect("run keel");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The lines `out` (a child's piped output) prints, as it prints them,
/// read on a thread of their own.
pub fn lines_of(out: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    rx
}

/// Asserts that a `keel` run exited with `want` and that its error text
/// `err` says each of `words`.
pub fn assert_refused(code: i32, err: &str, want: i32, words: &[&str]) {
    assert_eq!(code, want, "{err}");
    for w in words {
        assert!(err.contains(w), "{err}");
    }
}

/// What a `keel` command printed and how it ended.
pub struct Ran {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// Standard output as JSON (`Null` when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or(serde_json::Value::Null)
    }

    /// What it said of an error: see [`said`].
    pub fn said(&self) -> String {
        said(&self.json(), &self.stderr)
    }
}

/// What a `keel` run said of an error, wherever it said it: its stderr,
/// and with `-o json` the `{"error": {...}}` object it printed on stdout
/// instead, in the words the table shows (`error: CODE: message`, `hint:
/// ...`).
pub fn said(stdout: &serde_json::Value, stderr: &str) -> String {
    let mut text = stderr.to_string();
    let e = &stdout["error"];
    if e.is_object() {
        let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
        text.push_str(&format!("error: {}: {}\n", s("code"), s("message")));
        if !s("hint").is_empty() {
            text.push_str(&format!("hint: {}\n", s("hint")));
        }
    }
    text
}

/// Runs `keel <args> --output json` against `c`'s controllers as user
/// `who` of its CA (a certificate issued on first use), with `stdin` on
/// its standard input; bounded to 60 s.
pub fn keel_as(c: &Cluster, who: &str, args: &[&str], stdin: &str) -> Ran {
    run_keel_as(c, who, &[args, &["--output", "json"]].concat(), stdin)
}

/// [`keel_as`] in the output format `args` give (the table unless they
/// say `-o json`).
pub fn run_keel_as(c: &Cluster, who: &str, args: &[&str], stdin: &str) -> Ran {
    use std::io::Write;
    use std::process::Stdio;
    let certs = c.certs_dir().expect("a TLS cluster");
    let id = keel_tls::Identity::user(&c.cluster_id, who);
    c.transport_as(&id).expect("a certificate for the user");
    let (cert, key) = keel_tls::certs::paths(certs, &id);
    let mut child = std::process::Command::new("timeout")
        .arg("60")
        .arg(keel_bin())
        .args(args)
        .arg("--bootstrap")
        .arg(c.controller_addrs().join(","))
        .arg("--tls-cert")
        .arg(cert)
        .arg("--tls-key")
        .arg(key)
        .arg("--tls-ca")
        .arg(certs.join("ca.pem"))
        .env_remove("KEEL_ALLOW_PLAINTEXT")
        .env_remove("KEEL_BOOTSTRAP")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run keel");
    if let Some(mut input) = child.stdin.take() {
        let _ = input.write_all(stdin.as_bytes());
    }
    let out = child.wait_with_output().expect("keel ends");
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// [`keel_as`] the kit's admin user, with no input: (exit code, stdout
/// as JSON, stderr).
pub fn keel_as_admin(c: &Cluster, args: &[&str]) -> (i32, serde_json::Value, String) {
    let r = keel_as(c, keel_testkit::cluster::ADMIN_USER, args, "");
    (r.code, r.json(), r.said())
}

/// A client of `c`'s controllers speaking as user `name` (its certificate
/// issued by the cluster's CA on first use).
pub fn user_client(c: &Cluster, name: &str) -> ControllerClient {
    let transport = c
        .transport_as(&keel_tls::Identity::user(&c.cluster_id, name))
        .expect("a certificate for the user");
    ControllerClient::new(c.controller_addrs())
        .with_timeouts(Duration::from_secs(5), Duration::from_secs(30))
        .with_transport(transport)
}

/// The code of a whole-call or per-item error (`NONE` when absent).
pub fn error_code(e: &Option<keel_proto::pb::Error>) -> keel_metadata::ErrorCode {
    e.as_ref()
        .and_then(|e| keel_metadata::ErrorCode::from_i32(e.code))
        .unwrap_or(keel_metadata::ErrorCode::None)
}

/// `keel users create`: a SCRAM credential (`mechanism`: SCRAM-SHA-256
/// or SCRAM-SHA-512) for `user`; panics on refusal.
pub fn create_scram_user(c: &Cluster, user: &str, mechanism: &str, password: &str) {
    let args = [
        "users",
        "create",
        "--user",
        user,
        "--mechanism",
        mechanism,
        "--password",
        password,
    ];
    let (code, _, err) = keel_as_admin(c, &args);
    assert_eq!(
        code, 0,
        "keel users create --user {user} --mechanism {mechanism}: {err}"
    );
}

/// `keel acls add --principal User:<user> --operation <op> --topic-prefix
/// <prefix> --allow`, for each of `operations`; panics on refusal.
pub fn allow_on_topic_prefix(c: &Cluster, user: &str, operations: &[&str], prefix: &str) {
    let principal = format!("User:{user}");
    for op in operations {
        let args = [
            "acls",
            "add",
            "--principal",
            &principal,
            "--operation",
            op,
            "--topic-prefix",
            prefix,
            "--allow",
        ];
        let (code, _, err) = keel_as_admin(c, &args);
        assert_eq!(
            code, 0,
            "keel acls add {principal} {op} on {prefix}*: {err}"
        );
    }
}
