//! The clock and slow-network families: one node's clock or every node's
//! skewed (libfaketime), every node's network slowed down (tc netem).

use std::net::Ipv4Addr;

use rand::Rng;

use super::{FaultEvent, Nemesis, Undo};
use crate::cluster::ip;

impl Nemesis {
    /// Skews the clock of one node or of every node (libfaketime).
    pub(super) fn skew_clocks(&mut self, kind: &str, n: usize, ev: &mut FaultEvent) -> Undo {
        match self.clock_dir.clone() {
            None => {
                ev.detail
                    .push("nodes not under libfaketime: skew skipped".into());
                Undo::Nothing
            }
            Some(dir) => {
                let v: Vec<usize> = if kind == "clock-skew-all" {
                    (0..n).collect()
                } else {
                    vec![self.rng.random_range(0..n)]
                };
                for &i in &v {
                    let skew = crate::clock::Skew::draw(&mut self.rng);
                    let name = self.name(i);
                    match crate::clock::set(&crate::clock::file_of(&dir, &name), Some(&skew)) {
                        Ok(()) => ev.detail.push(format!("{name}: {}", skew.line())),
                        Err(e) => ev.detail.push(format!("{name}: cannot skew: {e}")),
                    }
                    ev.targets.push(name);
                }
                Undo::Clock(v)
            }
        }
    }

    /// Sets the clocks of nodes `v` back to true time (notes on failure).
    pub(super) fn true_time(&self, v: &[usize]) -> Vec<String> {
        let Some(dir) = &self.clock_dir else {
            return vec![];
        };
        v.iter()
            .filter_map(|&i| {
                let name = self.name(i);
                crate::clock::set(&crate::clock::file_of(dir, &name), None)
                    .err()
                    .map(|e| format!("cannot set the clock of {name} back: {e}"))
            })
            .collect()
    }

    /// Slows every node's network down (tc netem).
    pub(super) fn slow_network(&mut self, ev: &mut FaultEvent) -> Undo {
        let slow = crate::netem::Slow::draw(&mut self.rng);
        let ips: Vec<Ipv4Addr> = {
            let c = self.cluster.lock().unwrap();
            c.nodes.iter().map(ip).collect()
        };
        ev.targets.push("every node".into());
        match self.netem.as_mut() {
            Some(netem) => match netem.slow(&ips, &slow) {
                Ok(()) => {
                    ev.detail.push(netem.describe(&slow));
                    Undo::Netem
                }
                Err(e) => {
                    ev.detail.push(format!("tc failed: {e}"));
                    let _ = netem.heal();
                    Undo::Nothing
                }
            },
            None => {
                ev.detail.push("no tc: slow network skipped".into());
                Undo::Nothing
            }
        }
    }
}
