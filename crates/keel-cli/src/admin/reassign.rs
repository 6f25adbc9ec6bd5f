//! `keel reassign`: generate, start, verify, cancel and list partition
//! reassignments.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use keel_metadata::ApiError;
use keel_proto::client::ControllerClient;
use keel_proto::pb;
use serde_json::{json, Value};

use super::{id_list, item_error, usage, Common};
use crate::output::{self, Output};

/// How long `reassign start --wait` waits without a `--timeout`.
const START_WAIT: Duration = Duration::from_secs(600);
#[derive(Args, Debug)]
pub struct ReassignArgs {
    #[command(subcommand)]
    cmd: ReassignCmd,
    #[command(flatten)]
    common: Common,
}

#[derive(Subcommand, Debug)]
enum ReassignCmd {
    /// Propose a balanced plan moving topics onto a set of brokers. Prints,
    /// as Kafka's tool does, the current assignment (keep it: started as a
    /// plan, it rolls the move back) and the proposed plan that `start
    /// --plan` takes; with `-o json`, the plan with the current assignment
    /// under "current".
    #[command(
        after_help = "Example:\n  keel reassign generate --topics orders,clicks --brokers 1,2,3 -o json > out.json\n  jq '{partitions}' out.json > plan.json; jq .current out.json > rollback.json\n  keel reassign start --plan plan.json --wait"
    )]
    Generate {
        /// Topics to move, comma separated.
        #[arg(long)]
        topics: String,
        /// Target brokers, comma separated.
        #[arg(long)]
        brokers: String,
        /// Seed of the placement's randomness (same seed, same plan).
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
    /// Start the reassignments in a plan file:
    /// {"partitions": [{"topic", "partition", "replicas": [..]}]}.
    #[command(
        after_help = "Example:\n  keel reassign start --plan plan.json --wait --timeout 10m"
    )]
    Start {
        /// The plan file (what `reassign generate` proposes).
        #[arg(long)]
        plan: PathBuf,
        /// Wait (with a progress bar) until every reassignment completed.
        #[arg(long)]
        wait: bool,
        /// The timeout in seconds (older spelling of --timeout, which
        /// bounds the wait: default 10m).
        #[arg(long, hide = true, conflicts_with = "timeout")]
        timeout_s: Option<u64>,
    },
    /// Check a plan: for each partition, whether its reassignment is
    /// complete (its replicas are the plan's), still in progress, or not
    /// done (its replicas differ and nothing is moving). Exits 0 only when
    /// every partition is complete.
    #[command(after_help = "Example:\n  keel reassign verify --plan plan.json")]
    Verify {
        /// The plan file that was started.
        #[arg(long)]
        plan: PathBuf,
    },
    /// Cancel the reassignments of the partitions in a plan file.
    #[command(after_help = "Example:\n  keel reassign cancel --plan plan.json")]
    Cancel {
        /// The plan file whose reassignments to cancel.
        #[arg(long)]
        plan: PathBuf,
    },
    /// Reassignments in flight.
    #[command(after_help = "Example:\n  keel reassign list -o json")]
    List,
}

#[derive(serde::Deserialize, serde::Serialize)]
struct Plan {
    partitions: Vec<PlanItem>,
}

#[derive(serde::Deserialize, serde::Serialize)]
struct PlanItem {
    topic: String,
    partition: u32,
    #[serde(default)]
    replicas: Vec<u32>,
}

fn read_plan(p: &PathBuf) -> Result<Plan, String> {
    let text =
        std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
    serde_json::from_str(&text)
        .map_err(|e| format!("{}: not a reassignment plan: {e}", p.display()))
}

/// Runs `keel reassign`: one function per subcommand.
pub async fn reassign(a: ReassignArgs) -> ExitCode {
    let client = match a.common.client() {
        Ok(c) => c,
        Err(code) => return code,
    };
    let out = a.common.output;
    match &a.cmd {
        ReassignCmd::List => list(&client, out).await,
        ReassignCmd::Generate {
            topics,
            brokers,
            seed,
        } => generate(&client, topics, brokers, *seed, out).await,
        ReassignCmd::Verify { plan } => verify(&client, plan, out).await,
        ReassignCmd::Start {
            plan,
            wait,
            timeout_s,
        } => {
            let timeout = timeout_s.map_or(a.common.timeout_or(START_WAIT), Duration::from_secs);
            apply(&client, out, plan, false, wait.then_some(timeout)).await
        }
        ReassignCmd::Cancel { plan } => apply(&client, out, plan, true, None).await,
    }
}

/// `reassign list`: the reassignments in flight.
async fn list(client: &ControllerClient, out: Output) -> ExitCode {
    let r = call!(
        client,
        admin,
        list_partition_reassignments,
        pb::ListPartitionReassignmentsRequest::default()
    );
    match out {
        Output::Json => output::json(&json!({
            "reassignments": r.reassignments.iter().map(|x| json!({
                "topic": x.topic, "partition": x.partition, "replicas": x.replicas,
                "adding": x.adding, "removing": x.removing,
            })).collect::<Vec<_>>()
        })),
        Output::Table => {
            let rows: Vec<Vec<String>> = r
                .reassignments
                .iter()
                .map(|x| {
                    vec![
                        x.topic.clone(),
                        x.partition.to_string(),
                        id_list(&x.replicas),
                        id_list(&x.adding),
                        id_list(&x.removing),
                    ]
                })
                .collect();
            output::table(
                &["TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING"],
                &rows,
            );
        }
    }
    ExitCode::SUCCESS
}

/// `reassign start` and `reassign cancel`: sends the plan's partitions
/// (to move, or with `cancel` to stop moving) and, given `wait`, waits
/// that long for them to complete.
async fn apply(
    client: &ControllerClient,
    out: Output,
    plan: &PathBuf,
    cancel: bool,
    wait: Option<Duration>,
) -> ExitCode {
    let plan = match read_plan(plan) {
        Ok(p) => p,
        Err(e) => return usage(e),
    };
    let req = pb::AlterPartitionReassignmentsRequest {
        partitions: plan
            .partitions
            .iter()
            .map(|p| pb::ReassignablePartition {
                topic: p.topic.clone(),
                partition: p.partition,
                replicas: if cancel { vec![] } else { p.replicas.clone() },
                cancel,
            })
            .collect(),
    };
    let r = call!(client, admin, alter_partition_reassignments, req.clone());
    let mut failed = None;
    let rows: Vec<Vec<String>> = r
        .partitions
        .iter()
        .map(|p| {
            let e = item_error(&p.error);
            let status = match &e {
                Some(e) => format!("{}: {}", e.code, e.message),
                None => "ok".into(),
            };
            if e.is_some() {
                failed = e;
            }
            vec![p.topic.clone(), p.partition.to_string(), status]
        })
        .collect();
    let v = json!({
        "partitions": r.partitions.iter().map(|p| json!({
            "topic": p.topic, "partition": p.partition,
            "error": item_error(&p.error).map(|e| e.code.name()),
        })).collect::<Vec<_>>()
    });
    if failed.is_some() {
        return output::answer(
            out,
            v,
            || output::table(&["TOPIC", "PARTITION", "RESULT"], &rows),
            failed.as_ref(),
        );
    }
    match out {
        Output::Json => output::json(&v),
        Output::Table => output::table(&["TOPIC", "PARTITION", "RESULT"], &rows),
    }
    match wait {
        Some(timeout) => wait_for(client, &plan, timeout).await,
        None => ExitCode::SUCCESS,
    }
}

/// Waits, with a progress bar, until no partition of `plan` is being
/// reassigned; after `timeout`, says how many still are.
async fn wait_for(client: &ControllerClient, plan: &Plan, timeout: Duration) -> ExitCode {
    let wanted: std::collections::BTreeSet<(String, u32)> = plan
        .partitions
        .iter()
        .map(|p| (p.topic.clone(), p.partition))
        .collect();
    let bar = indicatif::ProgressBar::new(wanted.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} reassigning [{bar:40}] {pos}/{len} partitions ({elapsed})",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let deadline = Instant::now() + timeout;
    loop {
        let r = call!(
            client,
            admin,
            list_partition_reassignments,
            pb::ListPartitionReassignmentsRequest::default()
        );
        let pending = r
            .reassignments
            .iter()
            .filter(|x| wanted.contains(&(x.topic.clone(), x.partition)))
            .count();
        bar.set_position((wanted.len() - pending) as u64);
        if pending == 0 {
            bar.finish();
            break;
        }
        if Instant::now() >= deadline {
            bar.abandon();
            output::error(
                "",
                &format!(
                    "{} still in flight after {} s",
                    keel_controller::console::count(pending, "reassignment"),
                    timeout.as_secs()
                ),
                "new replicas must catch up and join the ISR; check `keel reassign list` and broker health",
            );
            return ExitCode::from(crate::EXIT_REFUSED);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    ExitCode::SUCCESS
}

/// Proposes a balanced assignment of `topics` onto `brokers`, keeping each
/// topic's replication factor; racks come from the cluster description.
async fn generate(
    client: &ControllerClient,
    topics: &str,
    brokers: &str,
    seed: u64,
    out: Output,
) -> ExitCode {
    use rand::SeedableRng;
    let names: Vec<String> = topics
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let ids: Result<Vec<u32>, _> = brokers
        .split(',')
        .map(|s| s.trim().parse::<u32>())
        .collect();
    let Ok(ids) = ids else {
        return usage(format!("--brokers {brokers:?} is not a list of broker ids"));
    };
    let cluster = call!(
        client,
        admin,
        describe_cluster,
        pb::DescribeClusterRequest::default()
    );
    let racks: BTreeMap<u32, Option<String>> = cluster
        .brokers
        .iter()
        .filter_map(|b| b.broker.as_ref())
        .map(|b| (b.broker_id, b.rack.clone()))
        .collect();
    if let Some(unknown) = ids.iter().find(|b| !racks.contains_key(b)) {
        return output::refused(&ApiError::new(
            keel_metadata::ErrorCode::UnknownBroker,
            format!("broker {unknown} is not registered"),
        ));
    }
    let placement = placement_brokers(&ids, &racks);
    let req = pb::DescribeTopicsRequest {
        names: names.clone(),
    };
    let r = call!(client, admin, describe_topics, req);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut items = Vec::new();
    let mut current = Vec::new();
    for t in &r.topics {
        if let Some(e) = item_error(&t.error) {
            return output::refused(&e);
        }
        let rf = t
            .partitions
            .first()
            .and_then(|p| p.state.as_ref())
            .map(|s| s.replicas.len() as u32)
            .unwrap_or(1);
        let assignment = match keel_metadata::placement::place_replicas(
            &placement,
            t.partitions.len() as u32,
            rf,
            &mut rng,
        ) {
            Ok(a) => a,
            Err(e) => return output::refused(&e),
        };
        current.extend(current_items(t));
        for (i, replicas) in assignment.into_iter().enumerate() {
            items.push(PlanItem {
                topic: t.name.clone(),
                partition: i as u32,
                replicas: replicas.into_iter().map(|b| b.0).collect(),
            });
        }
    }
    print_plans(out, items, current);
    ExitCode::SUCCESS
}

/// Brokers `ids` with their racks, as replica placement takes them.
fn placement_brokers(
    ids: &[u32],
    racks: &BTreeMap<u32, Option<String>>,
) -> Vec<keel_metadata::placement::PlacementBroker> {
    ids.iter()
        .map(|b| keel_metadata::placement::PlacementBroker {
            id: keel_metadata::BrokerId(*b),
            rack: racks.get(b).cloned().flatten(),
        })
        .collect()
}

/// Topic `t`'s partitions as they are placed now, as plan items.
fn current_items(t: &pb::TopicDescription) -> impl Iterator<Item = PlanItem> + '_ {
    t.partitions.iter().filter_map(|p| {
        let s = p.state.as_ref()?;
        Some(PlanItem {
            topic: t.name.clone(),
            partition: s.partition,
            replicas: s.replicas.clone(),
        })
    })
}

/// What `reassign generate` prints: the current assignment (as a plan, it
/// rolls the move back) and the proposed one.
fn print_plans(out: Output, proposed: Vec<PlanItem>, current: Vec<PlanItem>) {
    let proposed = serde_json::to_value(Plan {
        partitions: proposed,
    })
    .unwrap_or(Value::Null);
    let current = serde_json::to_value(Plan {
        partitions: current,
    })
    .unwrap_or(Value::Null);
    match out {
        Output::Json => {
            let mut v = proposed;
            v["current"] = current;
            output::json(&v);
        }
        Output::Table => {
            crate::outln!(
                "Current partition replica assignment (save it: as a plan it rolls the move back)"
            );
            crate::outln!("{current}");
            crate::outln!("");
            crate::outln!("Proposed partition reassignment configuration");
            crate::outln!("{proposed}");
        }
    }
}

/// Where one partition of a plan stands.
fn verdict(in_flight: bool, replicas: Option<&Vec<u32>>, target: &[u32]) -> &'static str {
    match replicas {
        None => "unknown_partition",
        Some(_) if in_flight => "in_progress",
        Some(r) if r.as_slice() == target => "complete",
        Some(_) => "not_done",
    }
}

/// `reassign verify`: each plan partition's state; exit 0 only when
/// every one is complete.
async fn verify(client: &ControllerClient, plan: &PathBuf, out: Output) -> ExitCode {
    let plan = match read_plan(plan) {
        Ok(p) => p,
        Err(e) => return usage(e),
    };
    let flights = call!(
        client,
        admin,
        list_partition_reassignments,
        pb::ListPartitionReassignmentsRequest::default()
    );
    let in_flight: std::collections::BTreeSet<(&str, u32)> = flights
        .reassignments
        .iter()
        .map(|x| (x.topic.as_str(), x.partition))
        .collect();
    let mut names: Vec<String> = plan.partitions.iter().map(|p| p.topic.clone()).collect();
    names.sort();
    names.dedup();
    let req = pb::DescribeTopicsRequest { names };
    let r = call!(client, admin, describe_topics, req.clone());
    let mut replicas: BTreeMap<(&str, u32), &Vec<u32>> = BTreeMap::new();
    for t in &r.topics {
        for s in t.partitions.iter().filter_map(|p| p.state.as_ref()) {
            replicas.insert((t.name.as_str(), s.partition), &s.replicas);
        }
    }
    let rows: Vec<(&PlanItem, &'static str, Option<&Vec<u32>>)> = plan
        .partitions
        .iter()
        .map(|p| {
            let key = (p.topic.as_str(), p.partition);
            let now = replicas.get(&key).copied();
            (p, verdict(in_flight.contains(&key), now, &p.replicas), now)
        })
        .collect();
    let complete = rows.iter().all(|(_, v, _)| *v == "complete");
    match out {
        Output::Json => output::json(&json!({
            "complete": complete,
            "partitions": rows.iter().map(|(p, v, now)| json!({
                "topic": p.topic,
                "partition": p.partition,
                "status": v,
                "replicas": now,
                "target": p.replicas,
            })).collect::<Vec<_>>(),
        })),
        Output::Table => {
            let table: Vec<Vec<String>> = rows
                .iter()
                .map(|(p, v, now)| {
                    vec![
                        p.topic.clone(),
                        p.partition.to_string(),
                        v.replace('_', " "),
                        now.map_or_else(|| "-".into(), |r| id_list(r)),
                        id_list(&p.replicas),
                    ]
                })
                .collect();
            output::table(
                &["TOPIC", "PARTITION", "STATUS", "REPLICAS", "TARGET"],
                &table,
            );
        }
    }
    if complete {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::EXIT_REFUSED)
    }
}
