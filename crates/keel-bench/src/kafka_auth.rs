//! The `kafka-metadata` scenario's authentication figures: what a SASL
//! SCRAM login costs a broker's Kafka listener over TLS, and what a storm
//! of logins does to it.
//!
//! - Handshake cost: `n` connections one after the other, each connect +
//!   TLS presenting the admin user's certificate (SSL), then `n` each
//!   connect + TLS without a certificate + a SCRAM-SHA-512 login
//!   (SASL_SSL), every TLS handshake a full one (no session resumption,
//!   as for a new client process); the time until each is open, and
//!   broker 1's CPU time
//!   (`utime + stime` from `/proc/<pid>/stat`) per connection of each kind.
//!   A SCRAM client salts the password itself (PBKDF2, the credential's
//!   iterations) on every login; that client-side cost is in the login's
//!   time and measured on its own too.
//! - Connection storm: `n` SASL_SSL connections opened at once (all within
//!   one bound), kept open until the last is done: how many logged in,
//!   the time until all were done, broker 1's RSS before, at its peak
//!   (sampled every 100 ms) and after they closed, and whether a Metadata
//!   request on an already open SSL connection was answered meanwhile.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse};
use keel_metadata::acl::{AclBinding, Operation, Permission, Principal, ResourcePattern};
use keel_metadata::scram::{ScramCredential, ScramMechanism};
use keel_proto::client::ControllerClient;
use keel_proto::convert::{acl_binding_to_pb, check, scram_upsertion_to_pb};
use keel_proto::pb;
use keel_testkit::kafka::{Dial, KafkaConn, KafkaSecurity, Timeouts};
use keel_testkit::probe;
use rand::TryRngCore;
use serde_json::{json, Value};

use crate::progress;
use crate::stats::{percentile, r1, r3};

/// PBKDF2 iterations of the bench user's credential (Kafka's default and
/// SCRAM-SHA-512's minimum).
pub const ITERATIONS: u32 = 4096;

/// Sets `user`'s SCRAM credential for `mechanism`, as `keel users create`
/// does: a fresh 32-byte salt, the password salted here.
pub async fn create_scram_user(
    client: &ControllerClient,
    mechanism: ScramMechanism,
    user: &str,
    password: &str,
) -> anyhow::Result<()> {
    let mut salt = [0u8; 32];
    rand::rngs::OsRng.try_fill_bytes(&mut salt)?;
    let salted =
        ScramCredential::salted_password(mechanism, password.as_bytes(), &salt, ITERATIONS)
            .map_err(|e| anyhow::anyhow!("salt the password: {e}"))?;
    let req = pb::AlterUserScramCredentialsRequest {
        upsertions: vec![scram_upsertion_to_pb(
            user, mechanism, ITERATIONS, &salt, &salted,
        )],
        deletions: vec![],
    };
    let r = client
        .admin_write(|mut a| {
            let req = req.clone();
            async move { a.alter_user_scram_credentials(req).await }
        })
        .await?;
    check(&r.error)?;
    for item in &r.results {
        check(&item.error)?;
    }
    Ok(())
}

/// Allows `user` `operation` on every topic named `prefix...`.
pub async fn allow_on_prefix(
    client: &ControllerClient,
    user: &str,
    operation: Operation,
    prefix: &str,
) -> anyhow::Result<()> {
    let binding = AclBinding {
        principal: Principal::User(user.to_string()),
        pattern: ResourcePattern::TopicPrefix(prefix.to_string()),
        operation,
        permission: Permission::Allow,
    };
    let req = pb::CreateAclsRequest {
        bindings: vec![acl_binding_to_pb(&binding)],
    };
    let r = client
        .admin_write(|mut a| {
            let req = req.clone();
            async move { a.create_acls(req).await }
        })
        .await?;
    check(&r.error)?;
    for item in &r.results {
        check(&item.error)?;
    }
    Ok(())
}

/// Opens a connection, again every 250 ms for up to `within` (a broker
/// learns a new user within a heartbeat).
pub async fn open_when_known(
    addr: &str,
    security: &KafkaSecurity,
    within: Duration,
) -> anyhow::Result<KafkaConn> {
    let deadline = Instant::now() + within;
    loop {
        match KafkaConn::open(addr, security).await {
            Ok(c) => return Ok(c),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// Broker CPU time of `pid` in ms, if readable.
fn cpu_ms(pid: u32) -> Option<f64> {
    probe::cpu_ticks(pid).map(|t| t as f64 * 1000.0 / probe::ticks_per_second())
}

/// One kind of connection, opened `n` times one after the other.
#[derive(Clone, Debug, Default)]
pub struct Sequential {
    /// Time until each connection was open (TLS done, logged in), ms.
    pub open_ms: Vec<f64>,
    /// Broker 1's CPU time over the `n` connections, ms.
    pub broker_cpu_ms: f64,
}

/// `n` connections to `addr` secured as `security`, one after the other,
/// each closed before the next.
pub async fn sequential(
    addr: &str,
    security: &KafkaSecurity,
    n: usize,
    pid: u32,
) -> anyhow::Result<Sequential> {
    let cpu_before = cpu_ms(pid);
    let mut open_ms = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let conn = KafkaConn::open(addr, security).await?;
        open_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        conn.close().await;
    }
    let broker_cpu_ms = match (cpu_before, cpu_ms(pid)) {
        (Some(a), Some(b)) => b - a,
        _ => f64::NAN,
    };
    Ok(Sequential {
        open_ms,
        broker_cpu_ms,
    })
}

/// This process's time to salt a password (PBKDF2 over `ITERATIONS`), ms,
/// median of 20: what a SCRAM client does on every login.
pub fn client_salting_ms(mechanism: ScramMechanism) -> f64 {
    let ms: Vec<f64> = (0..20)
        .map(|i| {
            let t = Instant::now();
            let _ = ScramCredential::salted_password(
                mechanism,
                b"password",
                &[i as u8; 32],
                ITERATIONS,
            );
            t.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    percentile(&ms, 50.0)
}

/// The handshake cost's figures.
#[derive(Clone, Debug)]
pub struct LoginCost {
    /// Connections of each kind.
    pub n: usize,
    /// connect + TLS with the admin certificate.
    pub ssl: Sequential,
    /// connect + TLS + SCRAM-SHA-512.
    pub sasl: Sequential,
    /// This process's PBKDF2 per login, ms.
    pub client_salting_ms: f64,
}

impl LoginCost {
    pub fn json(&self) -> Value {
        let kind = |s: &Sequential| {
            json!({
                "p50_ms": r3(percentile(&s.open_ms, 50.0)),
                "p99_ms": r3(percentile(&s.open_ms, 99.0)),
                "broker_cpu_ms_per_connection": r3(s.broker_cpu_ms / self.n.max(1) as f64),
            })
        };
        let d = |p: f64| percentile(&self.sasl.open_ms, p) - percentile(&self.ssl.open_ms, p);
        json!({
            "connections_each": self.n,
            "ssl_mtls": kind(&self.ssl),
            "sasl_ssl_scram_sha_512": kind(&self.sasl),
            "scram_extra_p50_ms": r3(d(50.0)),
            "scram_extra_p99_ms": r3(d(99.0)),
            "scram_extra_broker_cpu_ms_per_login": r3(
                (self.sasl.broker_cpu_ms - self.ssl.broker_cpu_ms) / self.n.max(1) as f64
            ),
            "client_pbkdf2_ms_per_login": r3(self.client_salting_ms),
            "pbkdf2_iterations": ITERATIONS,
        })
    }
}

/// The storm's figures.
#[derive(Clone, Debug)]
pub struct Storm {
    /// Connections started at once.
    pub n: usize,
    /// Why the storm was smaller than asked, if it was.
    pub capped: Option<String>,
    /// Logged in.
    pub succeeded: usize,
    /// Refused, broken or timed out.
    pub failed: usize,
    /// Up to 5 distinct reasons of the failures.
    pub reasons: Vec<String>,
    /// From the start until the last connection was open or failed, s.
    pub all_done_secs: f64,
    /// Each successful connection's time until open, ms.
    pub open_ms: Vec<f64>,
    /// Broker 1's RSS before, at peak during, and 2 s after, bytes.
    pub rss_before: u64,
    pub rss_peak: u64,
    pub rss_after: u64,
    /// The Metadata request during the storm: its time, or why not.
    pub metadata: Result<f64, String>,
}

impl Storm {
    pub fn json(&self) -> Value {
        let mb = |b: u64| r1(b as f64 / (1u64 << 20) as f64);
        json!({
            "connections": self.n,
            "capped": self.capped,
            "bound_secs": STORM_BOUND.as_secs(),
            "succeeded": self.succeeded,
            "failed": self.failed,
            "failure_reasons": self.reasons,
            "all_done_secs": r3(self.all_done_secs),
            "open_p50_ms": r3(percentile(&self.open_ms, 50.0)),
            "open_p99_ms": r3(percentile(&self.open_ms, 99.0)),
            "broker_rss_mb_before": mb(self.rss_before),
            "broker_rss_mb_peak": mb(self.rss_peak),
            "broker_rss_mb_after": mb(self.rss_after),
            "broker_rss_kb_per_connection_at_peak": r1(
                self.rss_peak.saturating_sub(self.rss_before) as f64 / 1024.0 / self.succeeded.max(1) as f64
            ),
            "metadata_during_storm": match &self.metadata {
                Ok(ms) => json!({ "answered": true, "ms": r3(*ms) }),
                Err(e) => json!({ "answered": false, "error": e }),
            },
        })
    }
}

/// The bound on the whole storm.
pub const STORM_BOUND: Duration = Duration::from_secs(60);

/// Raises this process's open-file limit to its hard limit; the
/// connections the storm may open (`want`, or fewer to leave 256 files for
/// the rest) and why it was capped, if it was.
pub fn storm_size(want: usize) -> (usize, Option<String>) {
    let Some(soft) = crate::stats::raise_fd_limit(want as u64 + 256) else {
        return (want, None);
    };
    let room = usize::try_from(soft.saturating_sub(256)).unwrap_or(usize::MAX);
    if want > room {
        (
            room,
            Some(format!(
                "capped at {room}: this process's open-file limit is {soft}"
            )),
        )
    } else {
        (want, None)
    }
}

/// The storm: `want` SASL_SSL connections to `addr` at once, while
/// `watcher` (an open SSL connection) asks for Metadata of every topic.
pub async fn storm(
    addr: &str,
    sasl: &KafkaSecurity,
    want: usize,
    pid: u32,
    watcher: &mut KafkaConn,
) -> anyhow::Result<Storm> {
    let (n, capped) = storm_size(want);
    if n == 0 {
        bail!("no room for a connection storm: {capped:?}");
    }
    let rss = move || probe::memory_bytes(pid, probe::Memory::Rss);
    let rss_before = rss();
    // The peak, sampled every 100 ms until `stop`.
    let (peak, stop) = (
        Arc::new(AtomicU64::new(rss_before)),
        Arc::new(AtomicBool::new(false)),
    );
    let sampler = {
        let (peak, stop) = (peak.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(rss(), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let start = Instant::now();
    let dial = Dial {
        timeouts: Timeouts {
            open: STORM_BOUND,
            answer: STORM_BOUND,
        },
        ..Dial::default()
    };
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (addr, sasl, dial) = (addr.to_string(), sasl.clone(), dial.clone());
        tasks.spawn(async move {
            let t = Instant::now();
            KafkaConn::open_with(&addr, &sasl, &dial)
                .await
                .map(|c| (c, t.elapsed().as_secs_f64() * 1000.0))
        });
    }
    // The watcher's request, once the storm is under way.
    let metadata = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let t = Instant::now();
        let r = tokio::time::timeout(
            STORM_BOUND,
            watcher.call::<_, MetadataResponse>(
                ApiKey::Metadata,
                12,
                &MetadataRequest::default().with_topics(None),
            ),
        )
        .await;
        match r {
            Ok(Ok(_)) => Ok(t.elapsed().as_secs_f64() * 1000.0),
            Ok(Err(e)) => Err(format!("{e:#}")),
            Err(_) => Err(format!("no answer within {STORM_BOUND:?}")),
        }
    };
    let collect = async {
        let deadline = tokio::time::Instant::now() + STORM_BOUND;
        let (mut open, mut open_ms, mut reasons, mut failed) =
            (Vec::new(), Vec::new(), Vec::<String>::new(), 0usize);
        loop {
            match tokio::time::timeout_at(deadline, tasks.join_next()).await {
                Ok(None) => break,
                Ok(Some(Ok(Ok((c, ms))))) => {
                    open.push(c);
                    open_ms.push(ms);
                }
                Ok(Some(Ok(Err(e)))) => {
                    failed += 1;
                    let why = format!("{e:#}");
                    if reasons.len() < 5 && !reasons.contains(&why) {
                        reasons.push(why);
                    }
                }
                Ok(Some(Err(e))) => {
                    failed += 1;
                    reasons.push(format!("task: {e}"));
                }
                Err(_) => {
                    failed += tasks.len();
                    reasons.push(format!("{} not done within {STORM_BOUND:?}", tasks.len()));
                    tasks.abort_all();
                    break;
                }
            }
        }
        (
            open,
            open_ms,
            reasons,
            failed,
            start.elapsed().as_secs_f64(),
        )
    };
    let (metadata, (open, open_ms, reasons, failed, all_done_secs)) =
        tokio::join!(metadata, collect);
    progress!(
        "kafka-metadata: storm of {n}: {} logged in, {failed} failed, all done in {all_done_secs:.3} s",
        open.len()
    );
    let succeeded = open.len();
    let mut closing = tokio::task::JoinSet::new();
    for c in open {
        closing.spawn(c.close());
    }
    while closing.join_next().await.is_some() {}
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.await;
    Ok(Storm {
        n,
        capped,
        succeeded,
        failed,
        reasons,
        all_done_secs,
        open_ms,
        rss_before,
        rss_peak: peak.load(Ordering::Relaxed),
        rss_after: rss(),
        metadata,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_login_cost_is_the_difference_of_the_two_kinds() {
        let c = LoginCost {
            n: 4,
            ssl: Sequential {
                open_ms: vec![2.0; 4],
                broker_cpu_ms: 4.0,
            },
            sasl: Sequential {
                open_ms: vec![5.0; 4],
                broker_cpu_ms: 12.0,
            },
            client_salting_ms: 1.5,
        };
        let j = c.json();
        assert_eq!(j["scram_extra_p50_ms"], 3.0);
        assert_eq!(j["scram_extra_broker_cpu_ms_per_login"], 2.0);
        assert_eq!(j["ssl_mtls"]["broker_cpu_ms_per_connection"], 1.0);
        assert_eq!(j["sasl_ssl_scram_sha_512"]["p99_ms"], 5.0);
    }

    #[test]
    fn the_storm_reports_counts_memory_and_the_metadata_answer() {
        let s = Storm {
            n: 10,
            succeeded: 8,
            failed: 2,
            rss_before: 100 << 20,
            rss_peak: 108 << 20,
            rss_after: 101 << 20,
            metadata: Err("no answer".into()),
            capped: None,
            reasons: vec![],
            all_done_secs: 1.0,
            open_ms: vec![1.0],
        };
        let j = s.json();
        assert_eq!(j["succeeded"], 8);
        assert_eq!(j["broker_rss_mb_peak"], 108.0);
        assert_eq!(j["broker_rss_kb_per_connection_at_peak"], 1024.0);
        assert_eq!(j["metadata_during_storm"]["answered"], false);
    }

    #[test]
    fn a_storm_fits_the_open_file_limit() {
        let (n, capped) = storm_size(10);
        assert!(n <= 10);
        assert_eq!(capped.is_some(), n < 10);
    }
}
