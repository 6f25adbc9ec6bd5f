//! The kill, pause and kill-all families: one node killed or paused (the
//! active controller, any controller, a broker; the active controller in
//! the middle of a large decision), or every node of a role killed.

use std::time::Duration;

use rand::Rng;

use super::{FaultEvent, Nemesis, Undo, BIG_PARTITIONS};
use crate::cluster::{indexes, Role};

impl Nemesis {
    /// Kills or pauses nodes as `kind` says (one, the active controller in
    /// the middle of a large decision, or every node of a role).
    pub(super) async fn stop_nodes(&mut self, kind: &str, ev: &mut FaultEvent) -> Undo {
        match kind {
            "kill-active-controller"
            | "kill-controller"
            | "kill-broker"
            | "pause-active-controller"
            | "pause-controller"
            | "pause-broker" => {
                let i = if kind.ends_with("active-controller") {
                    self.active_or_noted(ev).await
                } else if kind.ends_with("broker") {
                    self.pick(Role::Broker)
                } else {
                    self.pick(Role::Controller)
                };
                ev.targets.push(self.name(i));
                let mut c = self.cluster.lock().unwrap();
                if kind.starts_with("kill") {
                    c.nodes[i].kill();
                    Undo::Restart(i)
                } else {
                    c.nodes[i].process.pause();
                    Undo::Resume(i)
                }
            }
            "kill-active-controller-mid-decision" => {
                self.killed_mid_decision = true;
                match self.big_create_under_way().await {
                    None => {
                        ev.detail.push("no large create could be started".into());
                        Undo::Nothing
                    }
                    Some((name, delay)) => {
                        let i = match self.active_index().await {
                            Some(i) => i,
                            None => self.pick(Role::Controller),
                        };
                        ev.targets.push(self.name(i));
                        ev.detail.push(format!(
                        "killed {delay} ms into the create of {name} ({BIG_PARTITIONS} partitions)"
                    ));
                        self.cluster.lock().unwrap().nodes[i].kill();
                        Undo::Restart(i)
                    }
                }
            }
            "kill-all-controllers" | "kill-all-brokers" => {
                let role = if kind == "kill-all-brokers" {
                    Role::Broker
                } else {
                    Role::Controller
                };
                let mut c = self.cluster.lock().unwrap();
                let v = indexes(&c, role);
                for &i in &v {
                    ev.targets.push(c.nodes[i].name().to_string());
                    c.nodes[i].kill();
                }
                Undo::RestartAll(v)
            }
            _ => Undo::Nothing,
        }
    }

    /// Asks the big-create worker for a create of [`BIG_PARTITIONS`]
    /// partitions and returns once it is a random 30-1500 ms under way:
    /// somewhere in deciding, storing or replicating its entries, depending
    /// on the machine. `None` if no create could be started.
    pub(crate) async fn big_create_under_way(&mut self) -> Option<(String, u64)> {
        let big = self.big_create.clone()?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let asked = big.send(tx).await.is_ok();
        let name = match tokio::time::timeout(Duration::from_secs(10), rx).await {
            Ok(Ok(name)) if asked => name,
            _ => return None,
        };
        let delay = self.rng.random_range(30..1_500u64);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        Some((name, delay))
    }

    /// Asks the big-create worker for a create of [`BIG_PARTITIONS`]
    /// partitions unless it is busy with one; returns the topic's name
    /// once the request is on its way (`None` if busy or not within
    /// `within`).
    pub(crate) async fn start_big_create(&self, within: Duration) -> Option<String> {
        let big = self.big_create.as_ref()?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        big.try_send(tx).ok()?;
        tokio::time::timeout(within, rx).await.ok()?.ok()
    }
}
