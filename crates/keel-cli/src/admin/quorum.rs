//! `keel quorum`: describe, add or remove voters and learners, snapshot.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use keel_proto::pb;
use serde_json::json;

use super::Common;
use crate::output::{self, Output};
use keel_proto::client::ControllerClient;

/// How long `quorum snapshot` waits for the snapshot without a `--timeout`.
const SNAPSHOT_WAIT: Duration = Duration::from_secs(60);
#[derive(Args, Debug)]
pub struct QuorumArgs {
    #[command(subcommand)]
    cmd: QuorumCmd,
    #[command(flatten)]
    common: Common,
}

#[derive(Subcommand, Debug)]
enum QuorumCmd {
    /// Leader, term, commit index and every voter's replication state.
    #[command(
        after_help = "Examples:\n  keel quorum describe --status\n  keel quorum describe --replication\n  keel quorum describe -o json"
    )]
    Describe {
        /// Show the per-voter replication table (always included in JSON).
        #[arg(long)]
        replication: bool,
        /// Kafka's `kafka-metadata-quorum describe --status` view: leader,
        /// epoch, high watermark, max follower lag and lag time, voters
        /// and observers (in JSON under "status").
        #[arg(long)]
        status: bool,
    },
    /// Add a voter (started with `keel controller --join`), or re-admit a
    /// voter whose data dir changed (wiped, restored, copied) by naming its
    /// new directory id: it is removed and added back as a learner that
    /// catches up before it is promoted. The active controller first asks
    /// the node at --address who it is: one that does not answer as this
    /// cluster's controller --node-id (with --directory-id's data dir,
    /// when given) is refused and nothing changes. While the learner
    /// catches up, progress lines go to stderr; --timeout bounds the wait
    /// (default 60s), after which it stays a learner (`remove-learner`
    /// removes it, the same add-voter promotes it later).
    #[command(
        after_help = "Example (node 4 started with `keel controller --join`):\n  keel quorum add-voter --node-id 4 --address 127.0.0.14:9093\n  keel quorum add-voter --node-id 4 --address 127.0.0.14:9093 --timeout 5m"
    )]
    AddVoter {
        /// The new voter's node id.
        #[arg(long)]
        node_id: u64,
        /// Its HOST:PORT.
        #[arg(long)]
        address: String,
        /// The directory id of the node's data dir (32 hex digits; the
        /// node's log names it at start and in every refusal); omitted: the
        /// active controller binds it once the node answers.
        #[arg(long)]
        directory_id: Option<String>,
        /// Add it as a learner only: it catches up but is not promoted (a
        /// later add-voter without this flag promotes it).
        #[arg(long)]
        learner_only: bool,
    },
    /// Remove a voter (or a learner, saying so). Refused, changing
    /// nothing, when the voters left would not have a live, caught-up
    /// majority (bring the others back first), and for the last voter.
    #[command(
        after_help = "Examples:\n  keel quorum remove-voter --node-id 4\n  keel quorum remove-voter --node-id 3 --force   # node 2 is down for good"
    )]
    RemoveVoter {
        /// The voter's node id.
        #[arg(long)]
        node_id: u64,
        /// Remove it even if the voters left have no live, caught-up
        /// majority (they cannot commit until enough of them are back).
        #[arg(long)]
        force: bool,
    },
    /// Remove a learner: a node added by an add-voter that did not promote
    /// it (a wrong address, a node that went away while catching up).
    #[command(after_help = "Example:\n  keel quorum remove-learner --node-id 4")]
    RemoveLearner {
        /// The learner's node id.
        #[arg(long)]
        node_id: u64,
    },
    /// Build a snapshot of the image on the controller the first
    /// `--bootstrap` address names (any voter, not only the active one),
    /// optionally purging the log entries it covers; or save a backup of
    /// the image to a file, or restore one into a new node's data dir.
    #[command(
        args_conflicts_with_subcommands = true,
        after_help = "Examples:\n  keel quorum snapshot --purge-log -b 127.0.0.12:9093\n  keel quorum snapshot save meta.keelbak -b 127.0.0.12:9093\n  keel quorum snapshot restore meta.keelbak --data-dir /var/lib/keel/c1 --cluster-id keel-1 --node-id 1 --voters 1@10.0.0.1:9093,2@10.0.0.2:9093,3@10.0.0.3:9093"
    )]
    Snapshot {
        /// `save` or `restore`; none: build a snapshot on the node.
        #[command(subcommand)]
        action: Option<SnapshotCmd>,
        /// Then purge every log entry the snapshot covers.
        #[arg(long)]
        purge_log: bool,
        /// The timeout in milliseconds (older spelling of --timeout, which
        /// bounds the wait for the snapshot: default 60s).
        #[arg(long, hide = true, conflicts_with = "timeout")]
        timeout_ms: Option<u64>,
    },
}

/// Backups of the image (`keel quorum snapshot save|restore`).
#[derive(Subcommand, Debug)]
enum SnapshotCmd {
    /// Save the image the controller named first by `--bootstrap` has
    /// applied (consistent: everything up to one log entry) to FILE, with
    /// its index, term, hash and cluster id. FILE is replaced atomically.
    #[command(
        after_help = "Example:\n  keel quorum snapshot save meta.keelbak -b 127.0.0.12:9093"
    )]
    Save {
        /// The backup file to write.
        file: PathBuf,
    },
    /// Offline (no cluster needed): check FILE and build a new
    /// controller's data dir from it. Restore every voter of the new
    /// quorum from the same file, then start each with `keel controller
    /// --data-dir D --cluster-id ID --node-id N --voters ...` (the same
    /// voters): the quorum starts at the backup's index with its image.
    #[command(
        after_help = "Example:\n  keel quorum snapshot restore meta.keelbak --data-dir /var/lib/keel/c1 --cluster-id keel-1 --node-id 1 --voters 1@10.0.0.1:9093,2@10.0.0.2:9093,3@10.0.0.3:9093"
    )]
    Restore {
        /// The backup file to read.
        file: PathBuf,
        /// The new node's data dir; must be absent or empty.
        #[arg(long)]
        data_dir: PathBuf,
        /// The new node's cluster id; must be the backup's unless
        /// --allow-cluster-id-change.
        #[arg(long)]
        cluster_id: String,
        /// Restore under a cluster id other than the backup's.
        #[arg(long)]
        allow_cluster_id_change: bool,
        /// The new node's id (one of --voters).
        #[arg(long, default_value_t = 1)]
        node_id: u64,
        /// Every voter of the new quorum as ID@HOST:PORT, comma separated
        /// (the `--voters` the controllers will be started with); default:
        /// the voters the backup was taken with.
        #[arg(long, value_parser = parse_voters)]
        voters: Option<VoterList>,
    },
}

/// `--voters` as parsed: (node id, HOST:PORT) pairs.
#[derive(Clone, Debug)]
struct VoterList(Vec<(u64, String)>);

fn parse_voters(s: &str) -> Result<VoterList, String> {
    keel_controller::config::parse_voters(s).map(VoterList)
}

/// Prints why a backup could not be saved or restored; exit code 1.
fn backup_refused(e: &keel_raft::backup::BackupError) -> ExitCode {
    output::error(e.kind(), &e.to_string(), "");
    ExitCode::from(1)
}

/// `keel quorum snapshot restore`: offline, so before any client exists.
fn restore(output: Output, cmd: SnapshotCmd) -> ExitCode {
    output::set_mode(output);
    let SnapshotCmd::Restore {
        file,
        data_dir,
        cluster_id,
        allow_cluster_id_change,
        node_id,
        voters,
    } = cmd
    else {
        return ExitCode::FAILURE;
    };
    use keel_raft::backup::{read_backup_file, restore_backup, RestoreTarget};
    let backup = match read_backup_file(&file) {
        Ok(b) => b,
        Err(e) => return backup_refused(&e),
    };
    let voters = match voters {
        Some(v) => v.0,
        None => match keel_controller::config::parse_voters(&backup.header.voters) {
            Ok(v) => v,
            Err(e) => {
                eprintln!(
                    "error: invalid_voters: the backup's voters {:?} do not parse ({e}); pass --voters",
                    backup.header.voters
                );
                return ExitCode::from(1);
            }
        },
    };
    let target = RestoreTarget {
        data_dir: data_dir.clone(),
        cluster_id,
        allow_cluster_id_change,
        node_id,
        voters: voters.into_iter().collect(),
    };
    let r = match restore_backup(&backup, &target) {
        Ok(r) => r,
        Err(e) => return backup_refused(&e),
    };
    match output {
        Output::Json => output::json(&json!({
            "data_dir": data_dir.display().to_string(),
            "cluster_id": target.cluster_id,
            "node_id": node_id,
            "index": r.index,
            "term": backup.header.term,
            "image_hash": r.image_hash,
            "directory_id": r.directory_id,
        })),
        Output::Table => {
            crate::outln!("Restored node {node_id} into {}.", data_dir.display());
            crate::outln!("Index:       {}", r.index);
            crate::outln!("ImageHash:   {}", r.image_hash);
            crate::outln!("DirectoryId: {}", r.directory_id);
        }
    }
    ExitCode::SUCCESS
}

/// The node's whole image in one answer: the stream's chunks joined onto
/// its first message (which carries the error or the header fields).
async fn read_image(
    client: keel_proto::client::ControllerClient,
) -> Result<pb::ReadSnapshotResponse, ExitCode> {
    // Encoding and hashing a large image (a million partitions) takes the
    // node seconds before the first chunk, and the whole stream is read
    // within one attempt: a budget like a snapshot build's.
    let budget = Duration::from_secs(120);
    let client = client.with_timeouts(budget, budget);
    let answer = client
        .admin(|mut c| async move {
            let mut stream = c
                .read_snapshot(pb::ReadSnapshotRequest {})
                .await?
                .into_inner();
            let mut first: Option<pb::ReadSnapshotResponse> = None;
            while let Some(m) = stream.message().await? {
                match &mut first {
                    None => first = Some(m),
                    Some(f) => f.chunk.extend_from_slice(&m.chunk),
                }
            }
            Ok(tonic::Response::new(first.unwrap_or_default()))
        })
        .await;
    match answer {
        Ok(r) => {
            if let Err(e) = keel_proto::convert::check(&r.error) {
                return Err(output::refused(&e));
            }
            Ok(r)
        }
        Err(e) => Err(output::unreachable(&e)),
    }
}

/// `keel quorum snapshot save`: streams the node's image and writes it.
async fn save(
    client: keel_proto::client::ControllerClient,
    output: Output,
    file: &std::path::Path,
) -> ExitCode {
    let r = match read_image(client).await {
        Ok(r) => r,
        Err(code) => return code,
    };
    let body = r.chunk;
    if body.len() as u64 != r.image_bytes {
        output::error(
            "",
            &format!(
                "the controller sent {} of the image's {} bytes",
                body.len(),
                r.image_bytes
            ),
            "",
        );
        return ExitCode::from(1);
    }
    let header = keel_raft::backup::BackupHeader::for_body(
        r.cluster_id,
        r.index,
        r.term,
        r.leader_node_id,
        r.image_hash,
        r.voters,
        &body,
    );
    // Checked as a restore would check it, before it replaces anything.
    let mut bytes = header.to_bytes();
    bytes.extend_from_slice(&body);
    if let Err(e) = keel_raft::backup::parse_backup(&bytes) {
        return backup_refused(&e);
    }
    if let Err(e) = keel_raft::backup::write_backup_file(file, &header, &body) {
        return backup_refused(&e);
    }
    match output {
        Output::Json => output::json(&json!({
            "file": file.display().to_string(),
            "cluster_id": header.cluster_id,
            "index": header.index,
            "term": header.term,
            "image_hash": header.image_hash,
            "image_bytes": header.body_len,
            "voters": header.voters,
        })),
        Output::Table => {
            crate::outln!("Saved {}.", file.display());
            crate::outln!("ClusterId:  {}", header.cluster_id);
            crate::outln!("Index:      {}", header.index);
            crate::outln!("Term:       {}", header.term);
            crate::outln!("ImageHash:  {}", header.image_hash);
            crate::outln!("ImageBytes: {}", header.body_len);
            crate::outln!("Voters:     {}", header.voters);
        }
    }
    ExitCode::SUCCESS
}

/// How long `add-voter` waits for the learner to catch up without a
/// `--timeout`.
const CATCH_UP_WAIT: Duration = Duration::from_secs(60);

/// While `add-voter` waits: every couple of seconds, on stderr, how far
/// learner `node_id` has got ("learner 4: matched 1200/5000"), when that
/// changed or every ten seconds. Ends when aborted.
async fn show_progress(client: keel_proto::client::ControllerClient, node_id: u64) {
    let mut last: Option<(Option<u64>, u64)> = None;
    let mut quiet = 0u32;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let Ok(d) = client
            .admin(|mut c| async move {
                c.describe_quorum(pb::DescribeQuorumRequest::default())
                    .await
            })
            .await
        else {
            continue;
        };
        let Some(v) = d
            .voters
            .iter()
            .find(|v| v.id == node_id && v.status == "learner")
        else {
            continue;
        };
        let now = (v.last_log_index, d.commit_index);
        quiet += 1;
        if last != Some(now) || quiet >= 5 {
            quiet = 0;
            last = Some(now);
            eprintln!(
                "learner {node_id}: matched {}/{}",
                v.last_log_index
                    .map_or_else(|| "nothing".to_string(), |m| m.to_string()),
                d.commit_index
            );
        }
    }
}

/// `v` with `status` added under "status" when asked for.
fn with_status(status: Option<serde_json::Value>, mut v: serde_json::Value) -> serde_json::Value {
    if let Some(s) = status {
        v["status"] = s;
    }
    v
}

/// Node ids as Kafka prints them: `[1,2,3]`.
fn ids(v: &[u64]) -> String {
    let list: Vec<String> = v.iter().map(|i| i.to_string()).collect();
    format!("[{}]", list.join(","))
}

/// The quorum as `kafka-metadata-quorum describe --status` shows it.
struct QuorumStatus<'a> {
    r: &'a pb::DescribeQuorumResponse,
    /// Voters (not learners), by id.
    voters: Vec<u64>,
    /// Learners: Kafka's observers.
    observers: Vec<u64>,
    /// The largest lag (entries) of any follower or learner.
    max_lag: u64,
    /// The longest time since the leader last heard from a follower or
    /// learner; `None` when one was never heard from since this leader
    /// started.
    max_lag_time_ms: Option<u64>,
}

impl<'a> QuorumStatus<'a> {
    fn of(r: &'a pb::DescribeQuorumResponse) -> Self {
        let followers = r.voters.iter().filter(|v| v.id != r.leader_id);
        let max_lag = followers.clone().map(|v| v.lag).max().unwrap_or(0);
        let max_lag_time_ms = followers
            .map(|v| v.last_contact_ms)
            .try_fold(0u64, |acc, m| m.map(|m| acc.max(m)));
        Self {
            r,
            voters: r
                .voters
                .iter()
                .filter(|v| v.status != "learner")
                .map(|v| v.id)
                .collect(),
            observers: r
                .voters
                .iter()
                .filter(|v| v.status == "learner")
                .map(|v| v.id)
                .collect(),
            max_lag,
            max_lag_time_ms,
        }
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "cluster_id": self.r.cluster_id,
            "leader_id": self.r.leader_id,
            "leader_epoch": self.r.term,
            "high_watermark": self.r.commit_index,
            "max_follower_lag": self.max_lag,
            "max_follower_lag_time_ms": self.max_lag_time_ms,
            "current_voters": self.voters,
            "current_observers": self.observers,
        })
    }

    fn print(&self) {
        let r = self.r;
        crate::outln!("ClusterId:              {}", r.cluster_id);
        crate::outln!("LeaderId:               {}", r.leader_id);
        crate::outln!("LeaderEpoch:            {}", r.term);
        crate::outln!("HighWatermark:          {}", r.commit_index);
        crate::outln!("MaxFollowerLag:         {}", self.max_lag);
        crate::outln!(
            "MaxFollowerLagTimeMs:   {}",
            self.max_lag_time_ms
                .map_or_else(|| "never heard from".to_string(), |m| m.to_string())
        );
        crate::outln!("CurrentVoters:          {}", ids(&self.voters));
        crate::outln!("CurrentObservers:       {}", ids(&self.observers));
    }
}

/// Runs `keel quorum`: one function per subcommand.
pub async fn quorum(a: QuorumArgs) -> ExitCode {
    if let QuorumCmd::Snapshot {
        action: Some(cmd @ SnapshotCmd::Restore { .. }),
        ..
    } = a.cmd
    {
        return restore(a.common.output, cmd);
    }
    let client = match a.common.client() {
        Ok(c) => c,
        Err(code) => return code,
    };
    let out = a.common.output;
    match a.cmd {
        QuorumCmd::Describe {
            replication,
            status,
        } => describe(&client, out, replication, status).await,
        QuorumCmd::AddVoter {
            node_id,
            address,
            directory_id,
            learner_only,
        } => {
            let voter = NewVoter {
                node_id,
                address,
                directory_id,
                learner_only,
            };
            add_voter(client, &a.common, voter).await
        }
        QuorumCmd::Snapshot {
            action: Some(SnapshotCmd::Save { file }),
            ..
        } => save(client, out, &file).await,
        QuorumCmd::Snapshot {
            action: Some(SnapshotCmd::Restore { .. }),
            ..
        } => ExitCode::FAILURE,
        QuorumCmd::Snapshot {
            action: None,
            purge_log,
            timeout_ms,
        } => snapshot(client, &a.common, purge_log, timeout_ms).await,
        QuorumCmd::RemoveVoter { node_id, force } => {
            remove_voter(&client, out, node_id, force).await
        }
        QuorumCmd::RemoveLearner { node_id } => remove_learner(&client, out, node_id).await,
    }
}

/// `quorum describe`: leader, term, commit index and the voters.
async fn describe(
    client: &ControllerClient,
    out: Output,
    replication: bool,
    status: bool,
) -> ExitCode {
    let r = call!(
        client,
        admin,
        describe_quorum,
        pb::DescribeQuorumRequest::default()
    );
    let st = QuorumStatus::of(&r);
    match out {
        Output::Json => output::json(&with_status(
            status.then(|| st.json()),
            json!({
                "cluster_id": r.cluster_id,
                "leader_id": r.leader_id,
                "term": r.term,
                "commit_index": r.commit_index,
                "leader_disk": r.leader_disk.as_ref().map(|d| json!({
                    "free_bytes": d.free_bytes,
                    "total_bytes": d.total_bytes,
                    "reserve_bytes": d.reserve_bytes,
                    "path": d.path,
                })),
                "voters": r.voters.iter().map(|v| json!({
                    "id": v.id,
                    "address": v.address,
                    "last_log_index": v.last_log_index,
                    "lag": v.lag,
                    "last_contact_ms": v.last_contact_ms,
                    "status": v.status,
                    "directory_id": (!v.directory_id.is_empty()).then_some(&v.directory_id),
                })).collect::<Vec<_>>(),
            }),
        )),
        Output::Table if status => st.print(),
        Output::Table => print_describe(&r, &st, replication),
    }
    ExitCode::SUCCESS
}

/// The `quorum describe` table view (without `--status`).
fn print_describe(r: &pb::DescribeQuorumResponse, st: &QuorumStatus, replication: bool) {
    crate::outln!("ClusterId:    {}", r.cluster_id);
    crate::outln!("LeaderId:     {}", r.leader_id);
    crate::outln!("Term:         {}", r.term);
    crate::outln!("CommitIndex:  {}", r.commit_index);
    if let Some(d) = &r.leader_disk {
        crate::outln!(
            "LeaderDisk:   {} MiB free of {} MiB (reserve {} MiB)",
            d.free_bytes >> 20,
            d.total_bytes >> 20,
            d.reserve_bytes >> 20
        );
    }
    crate::outln!("Voters:       {}", ids(&st.voters));
    crate::outln!(
        "DirectoryIds: {}",
        r.voters
            .iter()
            .map(|v| format!(
                "{}={}",
                v.id,
                if v.directory_id.is_empty() {
                    "unbound"
                } else {
                    v.directory_id.as_str()
                }
            ))
            .collect::<Vec<_>>()
            .join(" ")
    );
    if replication {
        print_replication(r);
    }
}

/// The per-voter replication table of `quorum describe --replication`.
fn print_replication(r: &pb::DescribeQuorumResponse) {
    let rows: Vec<Vec<String>> = r
        .voters
        .iter()
        .map(|v| {
            vec![
                v.id.to_string(),
                v.address.clone(),
                v.last_log_index
                    .map(|i| i.to_string())
                    .unwrap_or_else(|| "-".into()),
                v.lag.to_string(),
                v.last_contact_ms
                    .map(|m| format!("{m} ms"))
                    .unwrap_or_else(|| "-".into()),
                v.status.clone(),
                if v.directory_id.is_empty() {
                    "unbound".into()
                } else {
                    v.directory_id.clone()
                },
            ]
        })
        .collect();
    output::table(
        &[
            "NODE",
            "ADDRESS",
            "LOG END",
            "LAG",
            "LAST CONTACT",
            "STATUS",
            "DIRECTORY",
        ],
        &rows,
    );
}

/// The voter `quorum add-voter` adds, as given on the command line.
struct NewVoter {
    /// Its node id.
    node_id: u64,
    /// Its HOST:PORT.
    address: String,
    /// Its data dir's directory id, when given.
    directory_id: Option<String>,
    /// Add it as a learner only.
    learner_only: bool,
}

/// `quorum add-voter`: adds the node as a learner and waits for it to be
/// promoted, showing its progress to people.
async fn add_voter(client: ControllerClient, common: &Common, voter: NewVoter) -> ExitCode {
    let NewVoter {
        node_id,
        address,
        directory_id,
        learner_only,
    } = voter;
    let wait = common.timeout_or(CATCH_UP_WAIT);
    let req = pb::AddVoterRequest {
        node_id,
        address,
        directory_id: directory_id.clone().unwrap_or_default(),
        timeout_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1),
        learner_only,
    };
    // The active controller waits up to --timeout for the new
    // node to catch up before it promotes it (or says it has not).
    let budget = wait + Duration::from_secs(15);
    let client = client.with_timeouts(budget, budget + Duration::from_secs(15));
    // Progress for people while it catches up; JSON gets only the
    // final object.
    let progress = match (common.output, common.client()) {
        (Output::Table, Ok(watcher)) if !learner_only => {
            Some(tokio::spawn(show_progress(watcher, node_id)))
        }
        _ => None,
    };
    let r = {
        let answer = client
            .admin_write(|mut c| {
                let req = req.clone();
                async move { c.add_voter(req).await }
            })
            .await;
        if let Some(p) = &progress {
            p.abort();
        }
        match answer {
            Ok(r) => {
                if let Err(e) = keel_proto::convert::check(&r.error) {
                    return output::refused(&e);
                }
                r
            }
            Err(e) => return output::unreachable(&e),
        }
    };
    let bound = (!r.directory_id.is_empty()).then_some(r.directory_id.clone());
    match common.output {
        Output::Json => output::json(&json!({
            "node_id": node_id,
            "added": true,
            "learner": r.learner,
            "directory_id": bound.or(directory_id),
        })),
        Output::Table if r.learner => crate::outln!(
            "Node {node_id} is a learner (directory id {}).",
            r.directory_id
        ),
        Output::Table => crate::outln!(
            "Node {node_id} is now a voter (directory id {}).",
            r.directory_id
        ),
    }
    ExitCode::SUCCESS
}

/// `quorum snapshot` without an action: builds a snapshot on the node,
/// optionally purging the log it covers.
async fn snapshot(
    client: ControllerClient,
    common: &Common,
    purge_log: bool,
    timeout_ms: Option<u64>,
) -> ExitCode {
    let timeout_ms = timeout_ms.unwrap_or(common.timeout_or(SNAPSHOT_WAIT).as_millis() as u64);
    let req = pb::TriggerSnapshotRequest {
        purge_log,
        timeout_ms,
    };
    // Not retried on another node after a timeout (that would build
    // a second snapshot elsewhere); the attempt may take the whole
    // snapshot timeout.
    let budget = Duration::from_millis(timeout_ms.saturating_add(5_000));
    let client = client.with_timeouts(budget, budget);
    let r = call!(client, admin_write, trigger_snapshot, req);
    let snap = r.snapshot.unwrap_or_default();
    match common.output {
        Output::Json => output::json(&json!({
            "last_index": snap.last_index,
            "size_bytes": snap.size_bytes,
            "image_bytes": snap.image_bytes,
            "build_ms": snap.build_ms,
            "purged_index": r.purged_index,
            "wait_ms": r.wait_ms,
        })),
        Output::Table => {
            crate::outln!("SnapshotIndex: {}", snap.last_index);
            crate::outln!("SizeBytes:     {}", snap.size_bytes);
            crate::outln!("ImageBytes:    {}", snap.image_bytes);
            if let Some(ms) = snap.build_ms {
                crate::outln!("BuildMs:       {ms:.1}");
            }
            crate::outln!("PurgedIndex:   {}", r.purged_index);
            crate::outln!("WaitMs:        {:.1}", r.wait_ms);
        }
    }
    ExitCode::SUCCESS
}

/// `quorum remove-voter`: removes the voter (or a learner, saying so).
async fn remove_voter(
    client: &ControllerClient,
    out: Output,
    node_id: u64,
    force: bool,
) -> ExitCode {
    let r = call!(
        client,
        admin,
        remove_voter,
        pb::RemoveVoterRequest {
            node_id,
            force,
            learner_only: false,
        }
    );
    match out {
        Output::Json => output::json(
            &json!({"node_id": node_id, "removed": true, "was_learner": r.was_learner}),
        ),
        Output::Table if r.was_learner => {
            crate::outln!("Node {node_id} was a learner, not a voter; it is removed.")
        }
        Output::Table => crate::outln!("Node {node_id} is no longer a voter."),
    }
    ExitCode::SUCCESS
}

/// `quorum remove-learner`: removes the learner.
async fn remove_learner(client: &ControllerClient, out: Output, node_id: u64) -> ExitCode {
    let _ = call!(
        client,
        admin,
        remove_voter,
        pb::RemoveVoterRequest {
            node_id,
            force: false,
            learner_only: true,
        }
    );
    match out {
        Output::Json => output::json(&json!({"node_id": node_id, "removed": true})),
        Output::Table => crate::outln!("Learner {node_id} is removed."),
    }
    ExitCode::SUCCESS
}
