//! The disk family: one node's writes, syncs or opens fail (libfiu) with
//! EIO or ENOSPC; the node must stop cleanly (exit code 4) or keep going,
//! and a broker's epoch must never go back (the disk checkers).

use std::time::{Duration, Instant};

use keel_testkit::ClusterFaults;
use serde::Serialize;

use super::power::EpochSample;
use super::{FaultEvent, Nemesis, Undo};
use crate::cluster::Role;

/// How a node whose disk was failing stopped.
#[derive(Clone, Debug, Serialize)]
pub struct DiskStop {
    pub node: String,
    pub at_ms: f64,
    pub status: String,
    pub code: Option<i32>,
}

impl DiskStop {
    pub fn new(node: &str, at_ms: f64, status: std::process::ExitStatus) -> Self {
        Self {
            node: node.to_string(),
            at_ms,
            status: status.to_string(),
            code: status.code(),
        }
    }
}

/// Exit code of a node that stops on a storage error it cannot get past
/// (`keel controller`: "raft stopped").
pub const DISK_STOP_CODE: i32 = 4;

/// The disk checker: every node that stopped under a disk fault stopped
/// with [`DISK_STOP_CODE`] (a panic is 101, a signal has no code).
pub fn disk_stop_check(stops: &[DiskStop]) -> (bool, serde_json::Value) {
    let bad: Vec<&DiskStop> = stops
        .iter()
        .filter(|s| s.code != Some(DISK_STOP_CODE))
        .collect();
    (
        bad.is_empty(),
        serde_json::json!({"stops": stops, "not_clean": bad}),
    )
}

/// Nodes whose disk is failing (`None`) or failed until a moment ago
/// (`Some(until)`: a stop before then is still the fault's).
pub type DiskFaulted = std::collections::BTreeMap<usize, Option<Instant>>;

/// How long after a disk fault's heal a node's stop is still put down to
/// the fault (a short fault can end between the failed call and the exit).
pub const DISK_STOP_GRACE: Duration = Duration::from_secs(5);

/// Whether node `i`'s stop now is put down to a disk fault, and whether
/// that fault is over (the node must then be started again right away:
/// its heal has passed).
pub fn disk_stop_of(faulted: &DiskFaulted, i: usize, now: Instant) -> Option<bool> {
    match faulted.get(&i)? {
        None => Some(false),
        Some(until) if now <= *until => Some(true),
        Some(_) => None,
    }
}

/// How long a broker may take, after its disk fault is healed, to be
/// registered and unfenced again (its epoch is sampled then).
pub const DISK_EPOCH_WAIT: Duration = Duration::from_secs(10);

impl Nemesis {
    /// Broker `id`'s epoch once the active controller reports it
    /// registered and unfenced (`None`: not within [`DISK_EPOCH_WAIT`]).
    async fn settled_epoch(&self, id: u32) -> Option<u64> {
        let start = Instant::now();
        while start.elapsed() < DISK_EPOCH_WAIT {
            if let Some(&(epoch, false)) = self.broker_registrations().await.get(&id) {
                return Some(epoch);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        None
    }

    /// Makes one node's calls of one kind fail (libfiu), as `kind` says
    /// (`disk-<errno>-<call>-<target>`).
    pub(super) async fn fail_disk(&mut self, k: &str, ev: &mut FaultEvent) -> Undo {
        use keel_testkit::fiu::{Calls, Errno};
        let i = if k.ends_with("active-controller") {
            match self.active_index().await {
                Some(i) => i,
                None => self.pick(Role::Controller),
            }
        } else if k.ends_with("-broker") {
            self.pick(Role::Broker)
        } else {
            self.pick(Role::Controller)
        };
        let calls = if k.contains("-sync-") {
            Calls::Sync
        } else if k.contains("-open-") {
            Calls::Open
        } else {
            Calls::Pwrite
        };
        // A broker's epoch before the fault: it must never be
        // lower after it.
        let epoch_before = self.epochs_of(&[i]).await.into_values().next().flatten();
        let errno = if k.contains("enospc") {
            Errno::Enospc
        } else {
            Errno::Eio
        };
        ev.targets.push(self.name(i));
        self.disk_faulted.lock().unwrap().insert(i, None);
        let r = self.cluster.lock().unwrap().disk_fault(i, calls, errno);
        match r {
            Ok(()) => Undo::Disk(i, calls, epoch_before, ev.start_ms),
            Err(e) => {
                self.disk_faulted.lock().unwrap().remove(&i);
                ev.detail.push(format!("fiu-ctrl failed: {e:#}"));
                Undo::Nothing
            }
        }
    }

    /// Heals a disk fault: the node's calls succeed again (a broker restarts,
    /// as Kafka's do after a log dir failure) or the node starts again if it
    /// stopped; a broker's epoch is sampled once it is back.
    pub(super) async fn heal_disk(
        &mut self,
        i: usize,
        calls: keel_testkit::fiu::Calls,
        epoch_before: Option<u64>,
        start_ms: f64,
    ) -> Vec<String> {
        let (out, broker) = {
            let mut c = self.cluster.lock().unwrap();
            // The crash watch may have seen (and reaped) the stop
            // already; if not, it is recorded here.
            if let Some(st) = c.nodes[i].process.exited() {
                let at = self.ms();
                self.disk_stops
                    .lock()
                    .unwrap()
                    .push(DiskStop::new(c.nodes[i].name(), at, st));
            }
            let out = match c.nodes[i].running() {
                false => match c.nodes[i].start() {
                    Ok(()) => {
                        vec![format!("{} had stopped; started again", c.nodes[i].name())]
                    }
                    Err(e) => vec![format!("cannot restart {}: {e:#}", c.nodes[i].name())],
                },
                true => match c.clear_disk_fault(i, calls) {
                    // A broker takes a log dir it could not use
                    // offline until it restarts (as Kafka's do):
                    // the heal restarts it, as an operator would.
                    Ok(()) if c.nodes[i].role == Role::Broker => {
                        c.nodes[i].kill();
                        match c.nodes[i].start() {
                            Ok(()) => vec![format!(
                                "{} kept running; restarted with its disk working again",
                                c.nodes[i].name()
                            )],
                            Err(e) => {
                                vec![format!("cannot restart {}: {e:#}", c.nodes[i].name())]
                            }
                        }
                    }
                    Ok(()) => vec![format!(
                        "{} kept running; its disk works again",
                        c.nodes[i].name()
                    )],
                    Err(e) => vec![format!(
                        "cannot clear the fault of {}: {e:#}",
                        c.nodes[i].name()
                    )],
                },
            };
            let broker = (c.nodes[i].role == Role::Broker).then_some(c.nodes[i].id);
            (out, broker)
        };
        // A call that failed late in the window may stop the node
        // just after it: such a stop still belongs to the fault.
        self.disk_faulted
            .lock()
            .unwrap()
            .insert(i, Some(Instant::now() + DISK_STOP_GRACE));
        let mut out = out;
        if let Some(id) = broker {
            let after = self.settled_epoch(id).await;
            if after.is_none() {
                out.push(format!(
                    "b{id} not registered and unfenced within {} ms of the heal",
                    DISK_EPOCH_WAIT.as_millis()
                ));
            }
            self.disk_epochs.push(EpochSample {
                broker: id,
                cut_ms: start_ms as u64,
                before: epoch_before,
                after,
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disk_fault_stop_other_than_the_clean_exit_is_a_violation() {
        let stop = |code: Option<i32>| DiskStop {
            node: "c1".into(),
            at_ms: 1.0,
            status: format!("{code:?}"),
            code,
        };
        assert!(disk_stop_check(&[]).0);
        assert!(disk_stop_check(&[stop(Some(4)), stop(Some(4))]).0);
        assert!(
            !disk_stop_check(&[stop(Some(4)), stop(Some(101))]).0,
            "a panic"
        );
        assert!(!disk_stop_check(&[stop(None)]).0, "killed by a signal");
    }

    #[test]
    fn a_stop_just_after_a_short_disk_fault_is_still_the_faults() {
        let now = Instant::now();
        let mut f = DiskFaulted::new();
        f.insert(0, None);
        f.insert(1, Some(now + Duration::from_secs(1)));
        f.insert(2, Some(now - Duration::from_secs(1)));
        assert_eq!(disk_stop_of(&f, 0, now), Some(false), "failing now");
        assert_eq!(disk_stop_of(&f, 1, now), Some(true), "healed a moment ago");
        assert_eq!(disk_stop_of(&f, 2, now), None, "healed long ago: a crash");
        assert_eq!(disk_stop_of(&f, 3, now), None, "never faulted: a crash");
    }
}
