//! Scenario `kafka-metadata`: Kafka's wire protocol against a broker.
//!
//! One cluster (three controllers on 127.0.28.11-13, three real brokers on
//! .21-23, each with a Kafka listener), mutual TLS between them as in
//! production; the Kafka listeners speak TLS too, with
//! `--kafka-ssl-client-auth requested` (a client presents the admin
//! user's certificate, SSL, or none and logs in with SCRAM, SASL_SSL). Set
//! up: a SCRAM-SHA-512 user allowed to create topics named `kk-...` (and
//! nothing else: not a super user), 100,000 partitions (RF 3, topics of
//! 100) created through Keel's admin API, then a wait until broker 1's
//! cache lists them all. Measured:
//! - `Metadata` v12 for every topic, answered by broker 1 over SSL as the
//!   admin user: 50 requests one after the other on one connection,
//!   p50/p99 latency and the answer's size;
//! - `CreateTopics` throughput: the same number of topics (10 partitions,
//!   RF 3 each), the same number per request and `concurrency` requests in
//!   flight, through broker 1's Kafka listener over SASL_SSL as the SCRAM
//!   user (the broker forwards each to the active controller, which
//!   authorizes it as that user) and through Keel's gRPC admin API over
//!   mutual TLS, in the same run, in alternated rounds (Kafka, gRPC, gRPC,
//!   Kafka, ...) so that neither API has the emptier cluster or the quieter
//!   machine;
//! - what a SCRAM login costs, and a storm of them ([`crate::kafka_auth`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use keel_metadata::acl::Operation;
use keel_metadata::scram::ScramMechanism;
use keel_metadata::ErrorCode;
use keel_testkit::kafka::{KafkaConn, KafkaSecurity, ScramLogin};
use keel_testkit::{admin, Cluster, KafkaPorts};
use rand::Rng;
use serde_json::json;

use crate::cluster::{self, ImageSpec};
use crate::stats::{disk_probe, disk_probe_line, machine, percentile, r1, r3, unix_now};
use crate::{kafka_auth, progress, Env, Report};

/// Parameters of the `kafka-metadata` scenario.
#[derive(Clone, Debug)]
pub struct KafkaMetadataParams {
    /// Partitions in the cluster when Metadata is timed.
    pub partitions: u64,
    /// Metadata requests timed.
    pub requests: usize,
    /// Topics created through each API for the throughput comparison.
    pub create_topics: usize,
    /// CreateTopics requests in flight at once through each API (each on
    /// its own connection or client).
    pub concurrency: usize,
    /// Topics per CreateTopics request, the same through both APIs.
    pub topics_per_request: usize,
    /// Rounds of each API, alternated (see `round_order`); each creates
    /// an equal share of `create_topics`.
    pub rounds: usize,
    /// Connections of each kind (SSL; SASL_SSL with a SCRAM login) opened
    /// one after the other for the login's cost.
    pub login_connections: usize,
    /// SASL_SSL connections opened at once in the storm (0: no storm).
    pub storm_connections: usize,
}

impl Default for KafkaMetadataParams {
    fn default() -> Self {
        Self {
            partitions: 100_000,
            requests: 50,
            create_topics: 1200,
            concurrency: 64,
            topics_per_request: 1,
            rounds: 3,
            login_connections: 200,
            storm_connections: 1000,
        }
    }
}

/// The scenario's own subnet.
const SUBNET: u8 = 28;
/// Partitions of each topic the throughput part creates.
const CREATED_PARTITIONS: i32 = 10;
/// The SCRAM user the Kafka rounds create topics as.
const KAFKA_USER: &str = "bench-creator";
/// The prefix of the Kafka rounds' topics: all the user may create.
const KAFKA_PREFIX: &str = "kk-";
/// The SASL mechanism of the bench's logins.
const MECHANISM: ScramMechanism = ScramMechanism::Sha512;
/// What the report calls the Kafka rounds' security.
const KAFKA_SECURITY: &str = "SASL_SSL SCRAM-SHA-512";

/// Every topic, as a Kafka client asks for them.
async fn metadata_all(conn: &mut KafkaConn) -> anyhow::Result<(MetadataResponse, usize)> {
    conn.call_sized(
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(None),
    )
    .await
}

/// One throughput round.
#[derive(Clone, Debug)]
struct Round {
    api: Api,
    /// Topics made.
    topics: usize,
    /// From the first request sent to the last answer.
    secs: f64,
    /// Each request's time to its final answer (retries included).
    latencies_ms: Vec<f64>,
    /// Requests sent again after a retriable answer.
    retries: u32,
}

/// Creates `n` topics, `per_request` to a request, `concurrency` requests
/// in flight, through `create` (worker, the request's topic indexes; it
/// answers how many times it sent again); the round's figures.
async fn create_all<F, Fut>(
    api: Api,
    n: usize,
    per_request: usize,
    concurrency: usize,
    create: F,
) -> anyhow::Result<Round>
where
    F: Fn(usize, std::ops::Range<usize>) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<u32>> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..concurrency.max(1) {
        let (next, create) = (next.clone(), create.clone());
        tasks.push(tokio::spawn(async move {
            let (mut latencies_ms, mut retries) = (Vec::new(), 0);
            loop {
                let first = next.fetch_add(per_request, Ordering::Relaxed);
                if first >= n {
                    return Ok::<_, anyhow::Error>((latencies_ms, retries));
                }
                let sent = Instant::now();
                retries += create(worker, first..(first + per_request).min(n)).await?;
                latencies_ms.push(sent.elapsed().as_secs_f64() * 1000.0);
            }
        }));
    }
    let mut round = Round {
        api,
        topics: n,
        secs: 0.0,
        latencies_ms: Vec::new(),
        retries: 0,
    };
    for t in tasks {
        let (l, r) = t.await??;
        round.latencies_ms.extend(l);
        round.retries += r;
    }
    round.secs = start.elapsed().as_secs_f64();
    Ok(round)
}

/// The API a throughput round goes through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Api {
    /// Broker 1's Kafka listener, which forwards to the active controller.
    Kafka = 0,
    /// Keel's gRPC admin API, straight to the active controller.
    Grpc = 1,
}

impl Api {
    fn name(self) -> &'static str {
        match self {
            Api::Kafka => "kafka",
            Api::Grpc => "grpc",
        }
    }
}

/// `rounds` rounds of each API, in the order Kafka, gRPC, gRPC, Kafka,
/// Kafka, gRPC, ...: each API gets as many early as late rounds (two or
/// more), so a cluster that slows as it grows (or a neighbour's build)
/// weighs on both alike.
fn round_order(rounds: usize) -> Vec<Api> {
    (0..rounds.max(1))
        .flat_map(|r| {
            if r % 2 == 0 {
                [Api::Kafka, Api::Grpc]
            } else {
                [Api::Grpc, Api::Kafka]
            }
        })
        .collect()
}

/// The names of topics `first + range`.
fn names(prefix: &str, first: usize, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|t| format!("{prefix}{:06}", first + t)).collect()
}

/// What to do with one topic's answer.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Made,
    Again,
}

/// A topic's answer: made, or to be sent again (a failover, an outcome
/// lost); a retry may find the topic made by the first try.
fn verdict(retriable: bool, exists: bool, retried: bool) -> Option<Verdict> {
    match (retriable, exists) {
        (true, _) => Some(Verdict::Again),
        (false, true) if retried => Some(Verdict::Made),
        _ => None,
    }
}

/// Creates `names` with `attempt` (one CreateTopics request of the names
/// given, told whether it is a retry, answering the names to send again)
/// until none is left: at most 20 tries, 100 ms apart. Returns the retries
/// it took; `via` names the API in the error.
async fn create_retrying<F, Fut>(
    via: &str,
    mut names: Vec<String>,
    mut attempt: F,
) -> anyhow::Result<u32>
where
    F: FnMut(Vec<String>, bool) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Vec<String>>>,
{
    let mut retried = false;
    for tries in 0..20 {
        names = attempt(names, retried).await?;
        if names.is_empty() {
            return Ok(tries);
        }
        retried = true;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("CreateTopics through {via}: still retriable after 20 tries")
}

/// Creates `names` (CREATED_PARTITIONS partitions, RF 3 each) in one
/// CreateTopics v7 request on `conn`; the retriable ones, to send again.
async fn kafka_create(
    conn: &tokio::sync::Mutex<KafkaConn>,
    names: Vec<String>,
    retried: bool,
) -> anyhow::Result<Vec<String>> {
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(60_000)
        .with_topics(
            names
                .iter()
                .map(|n| {
                    CreatableTopic::default()
                        .with_name(TopicName(StrBytes::from_string(n.clone())))
                        .with_num_partitions(CREATED_PARTITIONS)
                        .with_replication_factor(3)
                })
                .collect(),
        );
    let r: CreateTopicsResponse = conn
        .lock()
        .await
        .call(ApiKey::CreateTopics, 7, &req)
        .await?;
    if r.topics.len() != names.len() {
        bail!(
            "CreateTopics through the broker: {} topics answered of {}",
            r.topics.len(),
            names.len()
        );
    }
    let mut again = Vec::new();
    for t in &r.topics {
        let Some(e) = ResponseError::try_from_code(t.error_code) else {
            continue;
        };
        let exists = e == ResponseError::TopicAlreadyExists;
        match verdict(e.is_retriable(), exists, retried) {
            Some(Verdict::Made) => {}
            Some(Verdict::Again) => again.push(t.name.0.to_string()),
            None => bail!(
                "CreateTopics through the broker: {e:?}: {:?}",
                t.error_message
            ),
        }
    }
    Ok(again)
}

/// Creates `names` as [`kafka_create`] does, through Keel's gRPC API.
async fn grpc_create(
    client: &keel_proto::client::ControllerClient,
    names: Vec<String>,
    retried: bool,
) -> anyhow::Result<Vec<String>> {
    let req = admin::create_topics_request(
        names
            .iter()
            .map(|n| admin::creatable(n, CREATED_PARTITIONS as u32, 3))
            .collect(),
    );
    let r = client
        .admin_write(|mut a| {
            let req = req.clone();
            async move { a.create_topics(req).await }
        })
        .await;
    let retriable = |c: Option<ErrorCode>| {
        matches!(
            c,
            Some(ErrorCode::NotController | ErrorCode::RequestTimedOut)
        )
    };
    match r {
        // An outcome lost: every topic sent again.
        Err(keel_proto::client::ClientError::OutcomeUnknown { .. }) => Ok(names),
        Err(e) => Err(e.into()),
        Ok(r) => {
            let whole = r.error.as_ref().map(|e| ErrorCode::from_i32(e.code));
            match whole {
                Some(c) if c != Some(ErrorCode::None) => {
                    if !retriable(c) {
                        bail!("CreateTopics through gRPC: {c:?}");
                    }
                    Ok(names)
                }
                _ => {
                    let mut again = Vec::new();
                    for t in &r.topics {
                        let Some(e) = &t.error else { continue };
                        let c = ErrorCode::from_i32(e.code);
                        if c == Some(ErrorCode::None) {
                            continue;
                        }
                        let exists = c == Some(ErrorCode::TopicAlreadyExists);
                        match verdict(retriable(c), exists, retried) {
                            Some(Verdict::Made) => {}
                            Some(Verdict::Again) => again.push(t.name.clone()),
                            None => bail!("CreateTopics through gRPC: {c:?}: {}", e.message),
                        }
                    }
                    Ok(again)
                }
            }
        }
    }
}

/// Runs the scenario.
pub async fn run(env: &Env, p: &KafkaMetadataParams) -> anyhow::Result<Report> {
    if p.partitions == 0 || p.requests == 0 || p.create_topics == 0 {
        bail!("kafka-metadata needs positive --partitions, requests and topics");
    }
    if p.create_topics < p.rounds.max(1) {
        bail!("kafka-metadata: fewer topics to create than rounds");
    }
    let started_at = unix_now();
    progress!("kafka-metadata: probing the disk");
    let disk = disk_probe(&std::env::temp_dir());
    let spec = cluster::spec(env, SUBNET, &[])
        .brokers(3)
        .kafka(KafkaPorts::Free)
        .tls(true)
        .broker_flags(&["--kafka-ssl-client-auth", "requested"]);
    let mut c: Cluster = cluster::start(spec)?;
    c.start_brokers()?;
    c.wait_all_brokers_active(Duration::from_secs(60)).await?;
    let broker = c
        .kafka_addrs()
        .first()
        .cloned()
        .ok_or_else(|| anyhow!("broker 1 has no Kafka listener"))?;
    let broker_pid = c
        .broker(0)
        .pid()
        .ok_or_else(|| anyhow!("broker 1 is not running"))?;

    // SSL as the kit's admin user (a super user) for Metadata; SASL_SSL
    // (no certificate) as a user who may only create `kk-...` topics.
    let ssl = KafkaSecurity::from_transport(c.transport());
    let ca = c
        .certs_dir()
        .ok_or_else(|| anyhow!("a TLS cluster has a certificate directory"))?
        .join("ca.pem");
    let password: String = rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(24)
        .map(char::from)
        .collect();
    let sasl = KafkaSecurity::SaslSsl {
        tls: KafkaSecurity::trusting(&ca)?,
        login: ScramLogin {
            mechanism: MECHANISM,
            user: KAFKA_USER.into(),
            password: password.clone(),
        },
    };
    progress!("kafka-metadata: SCRAM user {KAFKA_USER}, allowed to create {KAFKA_PREFIX}*");
    {
        let admin = c.client(Duration::from_secs(10), Duration::from_secs(60));
        kafka_auth::create_scram_user(&admin, MECHANISM, KAFKA_USER, &password).await?;
        kafka_auth::allow_on_prefix(&admin, KAFKA_USER, Operation::Create, KAFKA_PREFIX).await?;
    }
    // The broker learns of the user within a heartbeat (at once after a
    // failed login), and of its ACL within the next.
    kafka_auth::open_when_known(&broker, &sasl, Duration::from_secs(30))
        .await
        .context("the bench's SCRAM user logs in")?
        .close()
        .await;

    progress!("kafka-metadata: creating {} partitions", p.partitions);
    let image = ImageSpec {
        partitions: p.partitions,
        partitions_per_topic: 100,
        replication_factor: 3,
        replicas: None,
        topics_per_request: 10,
        concurrency: 4,
        budget: Duration::from_secs(600),
        prefix: "km".into(),
    };
    let made = cluster::create_image(&c, &image, "kafka-metadata").await?;
    // Broker 1's cache learns of them through UpdateMetadata.
    let mut conn = KafkaConn::open(&broker, &ssl).await?;
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let (m, _) = metadata_all(&mut conn).await?;
        let seen: u64 = m.topics.iter().map(|t| t.partitions.len() as u64).sum();
        if seen >= made.partitions {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "broker 1 lists {seen} of {} partitions after 300 s",
                made.partitions
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    progress!("kafka-metadata: {} Metadata requests", p.requests);
    let mut latencies_ms = Vec::new();
    let mut bytes = 0;
    let mut topics = 0;
    for _ in 0..p.requests {
        let sent = Instant::now();
        let (m, size) = metadata_all(&mut conn).await?;
        latencies_ms.push(sent.elapsed().as_secs_f64() * 1000.0);
        bytes = size;
        topics = m.topics.len();
    }

    progress!(
        "kafka-metadata: {} CreateTopics through the Kafka listener and through gRPC, in rounds {}",
        p.create_topics,
        round_order(p.rounds)
            .iter()
            .map(|a| a.name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let workers = p.concurrency.max(1);
    let mut conns = Vec::new();
    for _ in 0..workers {
        conns.push(Arc::new(tokio::sync::Mutex::new(
            KafkaConn::open(&broker, &sasl).await?,
        )));
    }
    let conns = Arc::new(conns);
    let clients: Arc<Vec<keel_proto::client::ControllerClient>> = Arc::new(
        (0..workers)
            .map(|_| c.client(Duration::from_secs(60), Duration::from_secs(120)))
            .collect(),
    );
    let per_request = p.topics_per_request.max(1);
    let mut rounds = Vec::new();
    let mut made_by = [0usize; 2];
    for (r, api) in round_order(p.rounds).into_iter().enumerate() {
        // Each API's topics are split evenly over its rounds.
        let own_rounds = p.rounds.max(1);
        let nth = made_by[api as usize];
        let first = p.create_topics * nth / own_rounds;
        let topics = p.create_topics * (nth + 1) / own_rounds - first;
        made_by[api as usize] += 1;
        let round = match api {
            Api::Kafka => {
                let conns = conns.clone();
                create_all(api, topics, per_request, workers, move |w, range| {
                    let conn = conns[w].clone();
                    let names = names(KAFKA_PREFIX, first, range);
                    async move {
                        create_retrying("the broker", names, |names, retried| {
                            kafka_create(&conn, names, retried)
                        })
                        .await
                    }
                })
                .await?
            }
            Api::Grpc => {
                let clients = clients.clone();
                create_all(api, topics, per_request, workers, move |w, range| {
                    let clients = clients.clone();
                    let names = names("kg-", first, range);
                    async move {
                        create_retrying("gRPC", names, |names, retried| {
                            grpc_create(&clients[w], names, retried)
                        })
                        .await
                    }
                })
                .await?
            }
        };
        progress!(
            "kafka-metadata: round {} ({}): {topics} topics in {:.3} s, request p50 {:.1} ms p99 {:.1} ms, {} retries",
            r + 1,
            api.name(),
            round.secs,
            percentile(&round.latencies_ms, 50.0),
            percentile(&round.latencies_ms, 99.0),
            round.retries
        );
        rounds.push(round);
    }
    for c in Arc::try_unwrap(conns).unwrap_or_default() {
        if let Ok(c) = Arc::try_unwrap(c) {
            c.into_inner().close().await;
        }
    }

    let n = p.login_connections.max(1);
    progress!("kafka-metadata: {n} SSL connections, then {n} SASL_SSL logins, one at a time");
    let salting_ms = kafka_auth::client_salting_ms(MECHANISM);
    // Full TLS handshakes (no session resumption) for both kinds.
    let ssl_only =
        kafka_auth::sequential(&broker, &ssl.without_resumption(), n, broker_pid).await?;
    let scram = kafka_auth::sequential(&broker, &sasl.without_resumption(), n, broker_pid).await?;
    let login = kafka_auth::LoginCost {
        n,
        ssl: ssl_only,
        sasl: scram,
        client_salting_ms: salting_ms,
    };
    let storm = if p.storm_connections == 0 {
        None
    } else {
        progress!(
            "kafka-metadata: a storm of {} SASL_SSL logins at once",
            p.storm_connections
        );
        Some(
            kafka_auth::storm(
                &broker,
                &sasl.without_resumption(),
                p.storm_connections,
                broker_pid,
                &mut conn,
            )
            .await?,
        )
    };
    Ok(report(
        p,
        &Measured {
            started_at,
            disk,
            partitions: made.partitions,
            topics,
            latencies_ms,
            bytes,
            rounds,
            login,
            storm,
        },
    ))
}

/// What one run measured.
struct Measured {
    started_at: u64,
    /// The host disk probe taken before the cluster started.
    disk: serde_json::Value,
    /// Partitions in the cluster when Metadata was timed.
    partitions: u64,
    /// Topics in the Metadata answer.
    topics: usize,
    /// Each Metadata request's latency.
    latencies_ms: Vec<f64>,
    /// The size of the (last) Metadata answer.
    bytes: usize,
    /// Each throughput round, in order.
    rounds: Vec<Round>,
    /// What a SCRAM login costs.
    login: kafka_auth::LoginCost,
    /// The connection storm, if there was one.
    storm: Option<kafka_auth::Storm>,
}

/// The scenario's report of `m`.
fn report(p: &KafkaMetadataParams, m: &Measured) -> Report {
    let secs_of = |a: Api| -> f64 { m.rounds.iter().filter(|r| r.api == a).map(|r| r.secs).sum() };
    let topics_of = |a: Api| -> usize {
        m.rounds
            .iter()
            .filter(|r| r.api == a)
            .map(|r| r.topics)
            .sum()
    };
    let latencies_of = |a: Api| -> Vec<f64> {
        m.rounds
            .iter()
            .filter(|r| r.api == a)
            .flat_map(|r| r.latencies_ms.iter().copied())
            .collect()
    };
    let retries_of = |a: Api| -> u32 {
        m.rounds
            .iter()
            .filter(|r| r.api == a)
            .map(|r| r.retries)
            .sum()
    };
    let (kafka_ms, grpc_ms) = (latencies_of(Api::Kafka), latencies_of(Api::Grpc));
    let (kafka_secs, grpc_secs) = (secs_of(Api::Kafka), secs_of(Api::Grpc));
    let kafka_rate = topics_of(Api::Kafka) as f64 / kafka_secs.max(1e-9);
    let grpc_rate = topics_of(Api::Grpc) as f64 / grpc_secs.max(1e-9);
    let ratio = kafka_rate / grpc_rate.max(1e-9);
    let (p50, p99) = (
        percentile(&m.latencies_ms, 50.0),
        percentile(&m.latencies_ms, 99.0),
    );
    let per_request = p.topics_per_request.max(1);
    let json = json!({
        "scenario": "kafka-metadata",
        "started_at_unix": m.started_at,
        "parameters": {
            "controllers": 3,
            "brokers": 3,
            "tls": true,
            "partitions": m.partitions,
            "metadata_version": 12,
            "requests": p.requests,
            "create_topics": p.create_topics,
            "created_partitions_per_topic": CREATED_PARTITIONS,
            "concurrency": p.concurrency,
            "topics_per_request": per_request,
            "rounds_per_api": p.rounds.max(1),
            "kafka_ssl_client_auth": "requested",
            "login_connections": p.login_connections.max(1),
            "storm_connections": p.storm_connections,
        },
        "kafka_security": KAFKA_SECURITY,
        "metadata_security": "SSL (the admin user's certificate)",
        "grpc_security": "mutual TLS (the admin user's certificate)",
        "disk_probe": m.disk,
        "metadata": {
            "topics": m.topics,
            "p50_ms": r3(p50),
            "p99_ms": r3(p99),
            "max_ms": r3(m.latencies_ms.iter().copied().fold(0.0, f64::max)),
            "response_bytes": m.bytes,
        },
        "create_topics": {
            "kafka_topics_per_s": r1(kafka_rate),
            "grpc_topics_per_s": r1(grpc_rate),
            "kafka_secs": r3(kafka_secs),
            "grpc_secs": r3(grpc_secs),
            "kafka_vs_grpc": r3(ratio),
            "kafka_request_p50_ms": r3(percentile(&kafka_ms, 50.0)),
            "kafka_request_p99_ms": r3(percentile(&kafka_ms, 99.0)),
            "grpc_request_p50_ms": r3(percentile(&grpc_ms, 50.0)),
            "grpc_request_p99_ms": r3(percentile(&grpc_ms, 99.0)),
            "kafka_retries": retries_of(Api::Kafka),
            "grpc_retries": retries_of(Api::Grpc),
            "rounds": m.rounds.iter().map(|r| json!({
                "api": r.api.name(),
                "topics": r.topics,
                "secs": r3(r.secs),
                "topics_per_s": r1(r.topics as f64 / r.secs.max(1e-9)),
                "request_p50_ms": r3(percentile(&r.latencies_ms, 50.0)),
                "request_p99_ms": r3(percentile(&r.latencies_ms, 99.0)),
                "retries": r.retries,
            })).collect::<Vec<_>>(),
        },
        "kafka_auth": {
            "login_cost": m.login.json(),
            "storm": m.storm.as_ref().map(kafka_auth::Storm::json),
        },
        "machine": machine(),
    });
    let table = format!(
        "{}Metadata (all {} topics, {} partitions) via a broker over SSL: p50 {p50:.1} ms, p99 {p99:.1} ms, {} bytes\n\
         CreateTopics ({} topics each, {per_request} per request, {} in flight, {} alternated rounds each): Kafka listener ({KAFKA_SECURITY}) {kafka_rate:.1}/s, gRPC (mutual TLS) {grpc_rate:.1}/s ({:.0}%)\n{}",
        disk_probe_line(&m.disk),
        m.topics,
        m.partitions,
        m.bytes,
        p.create_topics,
        p.concurrency.max(1),
        p.rounds.max(1),
        100.0 * ratio,
        auth_lines(&m.login, m.storm.as_ref()),
    );
    let summary = format!(
        "kafka-metadata: Metadata p50 {p50:.1} ms p99 {p99:.1} ms ({} bytes); CreateTopics Kafka {kafka_rate:.0}/s vs gRPC {grpc_rate:.0}/s",
        m.bytes,
    );
    Report {
        scenario: "kafka-metadata",
        json,
        table,
        summary,
    }
}

/// The table's lines of the login cost and the storm.
fn auth_lines(l: &kafka_auth::LoginCost, storm: Option<&kafka_auth::Storm>) -> String {
    let q = |s: &kafka_auth::Sequential, pct: f64| percentile(&s.open_ms, pct);
    let cpu = |s: &kafka_auth::Sequential| s.broker_cpu_ms / l.n.max(1) as f64;
    let mut out = format!(
        "Opening a connection ({} of each, one at a time): SSL p50 {:.2} ms p99 {:.2} ms, broker CPU {:.2} ms; \
         SASL_SSL SCRAM-SHA-512 p50 {:.2} ms p99 {:.2} ms, broker CPU {:.2} ms (client PBKDF2 {:.2} ms)\n",
        l.n,
        q(&l.ssl, 50.0),
        q(&l.ssl, 99.0),
        cpu(&l.ssl),
        q(&l.sasl, 50.0),
        q(&l.sasl, 99.0),
        cpu(&l.sasl),
        l.client_salting_ms,
    );
    if let Some(s) = storm {
        let mb = |b: u64| b as f64 / (1u64 << 20) as f64;
        out += &format!(
            "Storm of {} SASL_SSL logins at once: {} in, {} failed, all done in {:.2} s; broker RSS {:.1} -> peak {:.1} -> {:.1} MB; Metadata meanwhile: {}\n",
            s.n,
            s.succeeded,
            s.failed,
            s.all_done_secs,
            mb(s.rss_before),
            mb(s.rss_peak),
            mb(s.rss_after),
            match &s.metadata {
                Ok(ms) => format!("answered in {ms:.1} ms"),
                Err(e) => format!("not answered ({e})"),
            },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_api_gets_as_many_early_as_late_rounds() {
        use Api::{Grpc, Kafka};
        assert_eq!(round_order(1), [Kafka, Grpc]);
        assert_eq!(round_order(2), [Kafka, Grpc, Grpc, Kafka]);
        assert_eq!(round_order(3), [Kafka, Grpc, Grpc, Kafka, Kafka, Grpc]);
    }

    #[test]
    fn a_retried_topic_found_made_counts_and_a_first_refusal_fails() {
        assert_eq!(verdict(true, false, false), Some(Verdict::Again));
        assert_eq!(verdict(false, true, true), Some(Verdict::Made));
        assert_eq!(verdict(false, true, false), None, "made by someone else");
        assert_eq!(verdict(false, false, true), None);
    }

    #[test]
    fn the_report_names_metadata_latency_bytes_and_both_throughputs() {
        let p = KafkaMetadataParams::default();
        let m = Measured {
            started_at: 1,
            disk: json!({"error": "not probed"}),
            partitions: 100_000,
            topics: 1000,
            latencies_ms: vec![10.0, 20.0, 30.0],
            bytes: 4_000_000,
            rounds: [
                (Api::Kafka, 1.0),
                (Api::Grpc, 0.5),
                (Api::Grpc, 0.5),
                (Api::Kafka, 1.0),
            ]
            .into_iter()
            .map(|(api, secs)| Round {
                api,
                topics: 100,
                secs,
                latencies_ms: vec![secs * 40.0; 100],
                retries: 1,
            })
            .collect(),
            login: kafka_auth::LoginCost {
                n: 2,
                ssl: kafka_auth::Sequential {
                    open_ms: vec![2.0, 3.0],
                    broker_cpu_ms: 2.0,
                },
                sasl: kafka_auth::Sequential {
                    open_ms: vec![6.0, 7.0],
                    broker_cpu_ms: 5.0,
                },
                client_salting_ms: 2.5,
            },
            storm: None,
        };
        let r = report(&p, &m);
        let j = &r.json;
        assert_eq!(j["scenario"], "kafka-metadata");
        for key in ["p50_ms", "p99_ms", "max_ms", "response_bytes", "topics"] {
            assert!(j["metadata"][key].is_number(), "metadata.{key}: {j}");
        }
        assert_eq!(j["metadata"]["response_bytes"], 4_000_000);
        let c = &j["create_topics"];
        for key in [
            "kafka_topics_per_s",
            "grpc_topics_per_s",
            "kafka_secs",
            "grpc_secs",
            "kafka_vs_grpc",
            "kafka_request_p50_ms",
            "grpc_request_p99_ms",
            "kafka_retries",
        ] {
            assert!(c[key].is_number(), "create_topics.{key}: {j}");
        }
        // Topics over seconds, summed over each API's rounds.
        assert_eq!(c["kafka_topics_per_s"], 100.0);
        assert_eq!(c["grpc_topics_per_s"], 200.0);
        assert_eq!(c["kafka_vs_grpc"], 0.5);
        assert_eq!(c["kafka_request_p50_ms"], 40.0);
        assert_eq!(c["grpc_retries"], 2);
        assert_eq!(c["rounds"].as_array().map(Vec::len), Some(4));
        assert_eq!(c["rounds"][1]["api"], "grpc");
        assert_eq!(j["parameters"]["topics_per_request"], 1);
        assert!(r.table.contains("(50%)"), "{}", r.table);
        assert_eq!(j["kafka_security"], "SASL_SSL SCRAM-SHA-512");
        assert_eq!(j["parameters"]["concurrency"], 64);
        assert!(
            j["kafka_auth"]["login_cost"]["scram_extra_p50_ms"].is_number(),
            "{j}"
        );
        assert!(j["kafka_auth"]["storm"].is_null());
    }
}
