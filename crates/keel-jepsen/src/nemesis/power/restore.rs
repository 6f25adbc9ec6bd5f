//! The power nemesis's heal: every cut node is started again on its own
//! disk, and watched (bounded) until it is back as a member of the
//! cluster; what became of each is kept for the restart and epoch
//! checkers.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use keel_testkit::ClusterFaults;

use super::{strip_ansi, EpochSample, PowerUndo, Restart};
use crate::client;
use crate::cluster::Role;
use crate::nemesis::Nemesis;

/// How long one probe of a restarted node may take.
const PROBE_TIMEOUT: Duration = Duration::from_millis(700);

/// How often the restarted nodes are probed.
const PROBE_EVERY: Duration = Duration::from_millis(200);

/// A cut node (its index in the cluster) and its restart so far.
type Pending = Vec<(usize, Restart)>;

impl Nemesis {
    /// Starts every cut node again on its own disk and waits (bounded)
    /// until each is back; records the restarts and the brokers' epochs.
    pub(crate) async fn restore_power(&mut self, p: PowerUndo) -> Vec<String> {
        let mut notes = Vec::new();
        let mut pending = self.start_cut_nodes(&p, &mut notes);
        let epochs_after = self.wait_until_back(&mut pending).await;
        self.record_restarts(&p, pending, &epochs_after, &mut notes);
        notes
    }

    /// Starts each cut node again (on a fresh mount if its disk crashed);
    /// a node that cannot start is recorded with why and its log's end.
    fn start_cut_nodes(&self, p: &PowerUndo, notes: &mut Vec<String>) -> Pending {
        let mut pending = Vec::new();
        let mut c = self.cluster.lock().unwrap();
        for &(i, cut_ms) in &p.cut {
            let name = c.nodes[i].name().to_string();
            let mut r = Restart {
                node: name.clone(),
                kind: p.kind,
                cut_ms: cut_ms.round(),
                restarted_ms: None,
                back_after_ms: None,
                problem: None,
                log_tail: None,
                note: None,
            };
            if c.disk_crashed(i) {
                c.nodes[i].kill();
                if let Err(e) = c.remount_disk(i) {
                    notes.push(format!("{name}: {e:#}"));
                }
            }
            match c.nodes[i].start() {
                Ok(()) => r.restarted_ms = Some(self.ms().round()),
                Err(e) => {
                    r.problem = Some(format!("cannot start: {e:#}"));
                    r.log_tail = Some(strip_ansi(&c.nodes[i].process.log_tail(20)));
                }
            }
            pending.push((i, r));
        }
        pending
    }

    /// Probes the restarted nodes until every one is back, has a problem,
    /// or the restart bound passes; returns the epochs the brokers came
    /// back with.
    async fn wait_until_back(&self, pending: &mut Pending) -> BTreeMap<u32, u64> {
        let started = Instant::now();
        let mut epochs_after: BTreeMap<u32, u64> = BTreeMap::new();
        loop {
            let waiting: Vec<usize> = pending
                .iter()
                .filter(|(_, r)| {
                    r.restarted_ms.is_some() && r.back_after_ms.is_none() && r.problem.is_none()
                })
                .map(|(i, _)| *i)
                .collect();
            if waiting.is_empty() || started.elapsed() > self.restart_bound {
                break;
            }
            let registrations = if waiting
                .iter()
                .any(|&i| self.cluster.lock().unwrap().nodes[i].role == Role::Broker)
            {
                self.broker_registrations().await
            } else {
                BTreeMap::new()
            };
            for i in waiting {
                let r = &mut pending
                    .iter_mut()
                    .find(|(j, _)| *j == i)
                    .expect("pending")
                    .1;
                self.probe_restarted(i, r, &registrations, &mut epochs_after)
                    .await;
            }
            tokio::time::sleep(PROBE_EVERY).await;
        }
        epochs_after
    }

    /// One probe of restarted node `i`: a node that exited gets its
    /// problem; one that answers as a member of the cluster gets how long
    /// it took.
    async fn probe_restarted(
        &self,
        i: usize,
        r: &mut Restart,
        registrations: &BTreeMap<u32, (u64, bool)>,
        epochs_after: &mut BTreeMap<u32, u64>,
    ) {
        let (role, id, addr, exited) = {
            let mut c = self.cluster.lock().unwrap();
            let n = &mut c.nodes[i];
            let exited = n
                .process
                .exited()
                .map(|st| st.to_string())
                .or_else(|| (!n.running()).then(|| "not running (exited)".to_string()));
            (n.role, n.id, n.address(), exited)
        };
        if let Some(st) = exited {
            r.problem = Some(format!("exited after its restart: {st}"));
            return;
        }
        let back = match role {
            Role::Controller => self.controller_back(id, &addr, r).await,
            Role::Broker => {
                let epoch = self.broker_back(id, &addr, registrations).await;
                if let Some(epoch) = epoch {
                    epochs_after.insert(id, epoch);
                }
                epoch.is_some()
            }
        };
        if back {
            let restarted = r.restarted_ms.unwrap_or_default();
            r.back_after_ms = Some((self.ms() - restarted).max(0.0).round());
        }
    }

    /// Whether controller `id` at `addr` is back: it follows a leader, or
    /// it serves and an overlapping membership fault removed it from the
    /// quorum (then `r` says so).
    async fn controller_back(&self, id: u32, addr: &str, r: &mut Restart) -> bool {
        match client::describe_node(&self.transport, addr, PROBE_TIMEOUT).await {
            None => false,
            // A learner (a replaced node not yet promoted when the power
            // went) is back once it follows the leader again; its
            // promotion is the membership checker's to judge.
            Some(d)
                if matches!(d.role.as_str(), "leader" | "follower" | "learner")
                    && d.leader_id.is_some() =>
            {
                true
            }
            // Serving, but following no leader: fine for a node an
            // overlapping membership fault removed from the quorum (nobody
            // replicates to it until that fault's heal adds it back, which
            // the membership checker judges). Any other node must catch up.
            Some(_) => {
                let removed = self
                    .quorum_members()
                    .await
                    .is_some_and(|m| !m.iter().any(|v| v.id == u64::from(id)));
                if removed {
                    r.note = Some("serving, and not a member of the quorum (an overlapping membership fault removed it; its heal adds it back)".into());
                }
                removed
            }
        }
    }

    /// The epoch broker `id` at `addr` is back with: registered, unfenced,
    /// and the same epoch by its own account and the active controller's.
    async fn broker_back(
        &self,
        id: u32,
        addr: &str,
        registrations: &BTreeMap<u32, (u64, bool)>,
    ) -> Option<u64> {
        let own = client::describe_broker(&self.transport, addr, PROBE_TIMEOUT).await;
        match (own, registrations.get(&id)) {
            (Some(own), Some(&(epoch, fenced))) => {
                let ok =
                    own.broker_epoch > 0 && !own.fenced && own.broker_epoch == epoch && !fenced;
                ok.then_some(epoch)
            }
            _ => None,
        }
    }

    /// Notes what became of every restart, samples the brokers' epochs
    /// around their cuts, gives any node left on a crashed disk a fresh
    /// one, and keeps the restarts for the checker.
    fn record_restarts(
        &mut self,
        p: &PowerUndo,
        mut pending: Pending,
        epochs_after: &BTreeMap<u32, u64>,
        notes: &mut Vec<String>,
    ) {
        let mut c = self.cluster.lock().unwrap();
        for (i, r) in &mut pending {
            match r.back_after_ms {
                Some(ms) => notes.push(format!("{} back after {ms} ms", r.node)),
                None => {
                    if r.problem.is_none() {
                        r.problem = Some(format!(
                            "not back within {} ms of its restart",
                            self.restart_bound.as_millis()
                        ));
                    }
                    if r.log_tail.is_none() {
                        r.log_tail = Some(strip_ansi(&c.nodes[*i].process.log_tail(20)));
                    }
                    notes.push(format!(
                        "{} NOT back: {}",
                        r.node,
                        r.problem.as_deref().unwrap_or_default()
                    ));
                }
            }
            if c.nodes[*i].role == Role::Broker {
                let id = c.nodes[*i].id;
                self.epochs.push(EpochSample {
                    broker: id,
                    cut_ms: r.cut_ms as u64,
                    before: p.epochs_before.get(&id).copied().flatten(),
                    after: epochs_after.get(&id).copied(),
                });
            }
        }
        // Any node left on a crashed disk (none should be) gets a fresh one.
        for i in 0..c.nodes.len() {
            if c.disk_crashed(i) {
                c.nodes[i].kill();
                let _ = c.remount_disk(i);
            }
        }
        drop(c);
        self.restarts.extend(pending.into_iter().map(|(_, r)| r));
    }
}
