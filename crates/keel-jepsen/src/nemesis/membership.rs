//! The membership family: a voter removed (the active one or another)
//! and added back, or replaced by a fresh node on an empty data dir that
//! must become a voter again (the membership checker).

use std::time::{Duration, Instant};

use keel_proto::pb;
use rand::Rng;

use super::{Family, FaultEvent, Nemesis, Undo};
use crate::client;
use crate::cluster::{indexes, Role};

/// How long the heal of a membership fault tries to add the voter back.
pub const VOTER_BACK_WAIT: Duration = Duration::from_secs(20);

/// How often the heal of a replacement asks again to promote a learner.
const READMIT_RETRY: Duration = Duration::from_secs(5);

/// How long a replaced controller may take to start on its empty data dir
/// and report its directory id.
pub const REPLACE_START_WAIT: Duration = Duration::from_secs(15);

/// Removes everything inside `dir` (the directory itself stays: it may be
/// a mount point).
pub(super) fn empty_dir(dir: &std::path::Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

impl Nemesis {
    /// Removes controller `id` from the voters (`add: None`) or adds it
    /// back at `add` = (address, directory id; empty: the one it had),
    /// through the active controller; `Err` with the error code (or why no
    /// answer came).
    pub(super) async fn voter_change(
        &self,
        id: u64,
        add: Option<(&str, &str)>,
    ) -> Result<(), String> {
        use keel_proto::pb::admin_service_client::AdminServiceClient;
        let ctrl = self.cluster.lock().unwrap().controller_addrs();
        let t = Duration::from_secs(3);
        let active = client::find_active(&self.transport, &ctrl, t)
            .await
            .ok_or("no active controller")?;
        let ch = client::client_channel(&self.transport, &active, t, client::Expect::Controller)
            .ok_or("no channel")?;
        let mut admin = AdminServiceClient::new(ch);
        let error = match add {
            None => admin
                .remove_voter(pb::RemoveVoterRequest {
                    node_id: id,
                    ..Default::default()
                })
                .await
                .map(|r| r.into_inner().error),
            Some((address, directory)) => admin
                .add_voter(pb::AddVoterRequest {
                    node_id: id,
                    address: address.to_string(),
                    directory_id: directory.to_string(),
                    ..Default::default()
                })
                .await
                .map(|r| r.into_inner().error),
        };
        match error {
            Ok(None) => Ok(()),
            Ok(Some(e)) => Err(client::code_name(e.code)),
            Err(s) => Err(format!("GRPC_{:?}", s.code()).to_uppercase()),
        }
    }

    /// Controller `id` as the active controller's DescribeQuorum lists it:
    /// (status, directory id); `None` if not listed or no answer.
    pub(crate) async fn quorum_member(&self, id: u64) -> Option<(String, String)> {
        self.quorum_members()
            .await?
            .into_iter()
            .find(|v| v.id == id)
            .map(|v| (v.status, v.directory_id))
    }

    /// The members (voters and learners) the active controller's
    /// DescribeQuorum lists; `None` without an answer.
    pub(crate) async fn quorum_members(&self) -> Option<Vec<pb::VoterDescription>> {
        use keel_proto::pb::admin_service_client::AdminServiceClient;
        let ctrl = self.cluster.lock().unwrap().controller_addrs();
        let t = Duration::from_secs(2);
        let active = client::find_active(&self.transport, &ctrl, t).await?;
        let ch = client::client_channel(&self.transport, &active, t, client::Expect::Controller)?;
        let r = AdminServiceClient::new(ch)
            .describe_quorum(pb::DescribeQuorumRequest::default())
            .await
            .ok()?
            .into_inner();
        Some(r.voters)
    }

    /// Replaces a controller that is not the active one by a fresh node:
    /// stops it, empties its data dir, starts it again to join (same id and
    /// address, a new directory id), and asks the active controller to
    /// re-admit it with that directory id (its old membership entry is
    /// removed, the new node added as a learner that catches up, then
    /// promoted). The heal checks it became a voter.
    async fn replace_voter(&mut self, ev: &mut FaultEvent) -> Undo {
        // Only a whole quorum: wiping a voter while another is still being
        // re-admitted (a learner) or missing would wipe one of a two-voter
        // quorum, which no system survives and no operator does.
        let whole = self.quorum_members().await.is_some_and(|m| {
            m.len() == 3
                && m.iter()
                    .all(|v| v.status == "leader" || v.status == "follower")
        });
        if !whole {
            ev.detail.push(
                "the quorum is not three voters (a change still in progress, or no answer); replacement skipped"
                    .into(),
            );
            return Undo::Nothing;
        }
        let Some(active) = self.active_index().await else {
            ev.detail
                .push("no active controller found; replacement skipped".into());
            return Undo::Nothing;
        };
        let others: Vec<usize> = {
            let c = self.cluster.lock().unwrap();
            indexes(&c, Role::Controller)
                .into_iter()
                .filter(|&i| i != active && c.nodes[i].running())
                .collect()
        };
        if others.is_empty() {
            ev.detail
                .push("no running standby controller; replacement skipped".into());
            return Undo::Nothing;
        }
        let i = others[self.rng.random_range(0..others.len())];
        ev.targets.push(self.name(i));
        let (id, addr) = {
            let mut c = self.cluster.lock().unwrap();
            let n = &mut c.nodes[i];
            n.kill();
            if let Err(e) = empty_dir(&n.data_dir) {
                ev.detail
                    .push(format!("cannot empty {}: {e}", n.data_dir.display()));
            }
            // Joins instead of bootstrapping (and, once it has a log, just
            // restarts with it).
            if !n.process.launch.args.iter().any(|a| a == "--join") {
                n.process.launch.args.push("--join".into());
            }
            if let Err(e) = n.start() {
                ev.detail.push(format!("cannot start the new node: {e:#}"));
            }
            (u64::from(n.id), n.address())
        };
        // The new node's directory id, drawn when it formats its dir.
        let start = Instant::now();
        let mut directory = String::new();
        while start.elapsed() < REPLACE_START_WAIT {
            if let Some(d) =
                client::describe_node(&self.transport, &addr, Duration::from_millis(700)).await
            {
                if !d.directory_id.is_empty() {
                    directory = d.directory_id;
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        if directory.is_empty() {
            ev.detail
                .push("the new node never reported its directory id".into());
            self.voters_missing.push(id);
            return Undo::Nothing;
        }
        ev.detail.push(format!("new directory id {directory}"));
        match self.voter_change(id, Some((&addr, &directory))).await {
            Ok(()) => ev.detail.push(format!(
                "re-admitted after {} ms",
                start.elapsed().as_millis()
            )),
            Err(e) => ev.detail.push(format!("AddVoter: {e} (retried at heal)")),
        }
        Undo::Readmit(id, addr, directory)
    }

    /// The next membership change: a replacement first (so every run with
    /// membership changes has one), then any.
    pub(super) fn membership_kind(&mut self) -> &'static str {
        let replaced = self
            .faults
            .lock()
            .unwrap()
            .iter()
            .any(|f| f.kind == "replace-voter");
        let kinds = Family::Membership.kinds();
        if replaced {
            kinds[self.rng.random_range(0..kinds.len())]
        } else {
            "replace-voter"
        }
    }

    /// Removes a voter (the active one or another) or replaces one by a
    /// fresh node, as `kind` says.
    pub(super) async fn change_voters(&mut self, kind: &str, ev: &mut FaultEvent) -> Undo {
        match kind {
            "remove-voter" | "remove-active-voter" => {
                let i = if kind == "remove-active-voter" {
                    self.active_or_noted(ev).await
                } else {
                    self.pick(Role::Controller)
                };
                let (id, addr) = {
                    let c = self.cluster.lock().unwrap();
                    (u64::from(c.nodes[i].id), c.nodes[i].address())
                };
                ev.targets.push(self.name(i));
                match self.voter_change(id, None).await {
                    Ok(()) => Undo::AddVoter(id, addr),
                    Err(e) => {
                        ev.detail.push(format!("RemoveVoter refused: {e}"));
                        Undo::Nothing
                    }
                }
            }
            "replace-voter" => self.replace_voter(ev).await,
            _ => Undo::Nothing,
        }
    }

    /// Adds controller `id` back to the voters at `addr` (bounded by
    /// [`VOTER_BACK_WAIT`]; a controller not back is noted as missing).
    pub(super) async fn add_back(&mut self, id: u64, addr: String) -> Vec<String> {
        // Bounded: the removal may still be committing, or the
        // active controller moving.
        let start = Instant::now();
        let mut last = String::new();
        while start.elapsed() < VOTER_BACK_WAIT {
            match self.voter_change(id, Some((&addr, ""))).await {
                Ok(()) => {
                    return vec![format!(
                        "node {id} a voter again after {} ms",
                        start.elapsed().as_millis()
                    )]
                }
                Err(e) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        self.voters_missing.push(id);
        vec![format!("node {id} NOT added back: {last}")]
    }

    /// Sees that the replaced controller `id` becomes a voter with its new
    /// data dir (`directory`), asking again now and then (bounded by
    /// [`VOTER_BACK_WAIT`]).
    pub(super) async fn see_readmitted(
        &mut self,
        id: u64,
        addr: String,
        directory: String,
    ) -> Vec<String> {
        // Bounded: the re-admission may still be catching up, or
        // have been cut short by another fault.
        let start = Instant::now();
        let mut last = String::new();
        let mut asked = Instant::now();
        while start.elapsed() < VOTER_BACK_WAIT {
            match self.quorum_member(id).await {
                Some((status, d)) if d == directory && status != "learner" => {
                    return vec![format!(
                        "node {id} a voter with its new data dir {} ms into the heal",
                        start.elapsed().as_millis()
                    )]
                }
                // A learner with the new dir: catching up, or left
                // a learner by an AddVoter that gave up on it (the
                // node was down): asked again now and then, as an
                // operator would.
                Some((_, d)) if d == directory => {
                    last = "still a learner".into();
                    if asked.elapsed() >= READMIT_RETRY {
                        asked = Instant::now();
                        if let Err(e) = self.voter_change(id, Some((&addr, &directory))).await {
                            last = format!("still a learner; AddVoter: {e}");
                        }
                    }
                }
                _ => {
                    if let Err(e) = self.voter_change(id, Some((&addr, &directory))).await {
                        last = e;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        self.voters_missing.push(id);
        vec![format!(
            "node {id} NOT a voter with its new data dir: {last}"
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emptying_a_replaced_nodes_data_dir_keeps_the_dir_itself() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("raft/log")).unwrap();
        std::fs::write(d.path().join("raft/log/0001"), b"entry").unwrap();
        std::fs::write(d.path().join("meta"), b"dir id").unwrap();
        empty_dir(d.path()).unwrap();
        assert!(d.path().is_dir());
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    }
}
