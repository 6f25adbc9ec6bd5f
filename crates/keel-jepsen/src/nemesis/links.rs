//! The partition families: links cut both ways or one way (iptables)
//! around one node or the active controller, between random halves,
//! across a bridge node, in a ring of overlapping majorities, and between
//! brokers and controllers.

use std::net::Ipv4Addr;

use rand::seq::SliceRandom;
use rand::Rng;

use super::{FaultEvent, Nemesis, Undo};
use crate::cluster::{indexes, ip, Cluster, Role};

const LOOPBACK: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);

/// Every pair of a node of `a` and a node of `b`.
pub(super) fn cross(a: &[usize], b: &[usize]) -> Vec<(usize, usize)> {
    a.iter()
        .flat_map(|&x| b.iter().map(move |&y| (x, y)))
        .collect()
}

/// The addresses of each pair of nodes in `cuts`.
fn addresses(c: &Cluster, cuts: &[(usize, usize)]) -> Vec<(Ipv4Addr, Ipv4Addr)> {
    cuts.iter()
        .map(|&(a, b)| (ip(&c.nodes[a]), ip(&c.nodes[b])))
        .collect()
}

impl Nemesis {
    /// Cuts links as the partition `kind` says, among the cluster's `n`
    /// nodes.
    pub(super) async fn cut_links(&mut self, kind: &str, n: usize, ev: &mut FaultEvent) -> Undo {
        match kind {
            "isolate-active-controller" | "isolate-node" => {
                let i = if kind == "isolate-node" {
                    self.rng.random_range(0..n)
                } else {
                    match self.active_index().await {
                        Some(i) => i,
                        None => {
                            ev.detail.push(
                                "no active controller found; isolating a random controller".into(),
                            );
                            self.pick(Role::Controller)
                        }
                    }
                };
                ev.targets.push(self.name(i));
                let cuts = self.isolate(i);
                self.cut(&cuts, ev)
            }
            "random-halves" => {
                let mut idx: Vec<usize> = (0..n).collect();
                idx.shuffle(&mut self.rng);
                let (a, b) = idx.split_at(n / 2);
                let cuts = cross(a, b);
                ev.targets
                    .push(format!("{:?} | {:?}", self.names(a), self.names(b)));
                self.cut(&cuts, ev)
            }
            "majorities-ring" => {
                // Shuffled ring of every node; each keeps the links to its
                // nearest neighbours (a majority of the nodes including
                // itself) and loses the rest, so every node sees a majority
                // but no two see the same one.
                let mut ring: Vec<usize> = (0..n).collect();
                ring.shuffle(&mut self.rng);
                let keep = n / 2; // neighbours on each side within this distance stay linked
                let keep = keep.saturating_sub(usize::from(n.is_multiple_of(2))).max(1);
                let mut cuts = Vec::new();
                for x in 0..n {
                    for y in (x + 1)..n {
                        let d = (y - x).min(n - (y - x));
                        if d > keep {
                            cuts.push((ring[x], ring[y]));
                        }
                    }
                }
                ev.targets.push(format!("ring {:?}", self.names(&ring)));
                self.cut(&cuts, ev)
            }
            "brokers-from-controllers" | "brokers-from-brokers" => {
                let (ctrls, brokers): (Vec<usize>, Vec<usize>) = {
                    let c = self.cluster.lock().unwrap();
                    (indexes(&c, Role::Controller), indexes(&c, Role::Broker))
                };
                let cuts: Vec<(usize, usize)> = if kind == "brokers-from-controllers" {
                    brokers
                        .iter()
                        .flat_map(|&b| ctrls.iter().map(move |&k| (b, k)))
                        .collect()
                } else {
                    let mut v = Vec::new();
                    for (x, &a) in brokers.iter().enumerate() {
                        for &b in &brokers[x + 1..] {
                            v.push((a, b));
                        }
                    }
                    v
                };
                ev.targets.push("all brokers".into());
                self.cut(&cuts, ev)
            }
            "one-way-from-active-controller" | "one-way-to-active-controller" => {
                let a = self.active_or_noted(ev).await;
                ev.targets.push(self.name(a));
                let others: Vec<usize> = (0..n).filter(|&j| j != a).collect();
                let cuts: Vec<(usize, usize)> = if kind == "one-way-from-active-controller" {
                    others.iter().map(|&j| (a, j)).collect()
                } else {
                    others.iter().map(|&j| (j, a)).collect()
                };
                self.cut_one_way(&cuts, ev)
            }
            "one-way-halves" => {
                let (a, b) = self.halves(n);
                ev.targets
                    .push(format!("{:?} -/-> {:?}", self.names(&a), self.names(&b)));
                let cuts = cross(&a, &b);
                self.cut_one_way(&cuts, ev)
            }
            "bridge" => {
                let (mut a, b) = self.halves(n);
                // The bridge: one node of the larger half, linked to both.
                let bridge = a.pop().expect("a cluster has nodes");
                ev.targets.push(format!(
                    "{:?} <- {} -> {:?}",
                    self.names(&a),
                    self.name(bridge),
                    self.names(&b)
                ));
                let cuts = cross(&a, &b);
                self.cut(&cuts, ev)
            }
            "isolate-leader" | "isolate-leader-with-brokers" => {
                let a = self.active_or_noted(ev).await;
                let (ctrls, mut brokers) = {
                    let c = self.cluster.lock().unwrap();
                    (indexes(&c, Role::Controller), indexes(&c, Role::Broker))
                };
                // With brokers: a random non-empty set of them stays on
                // the leader's side (they keep hearing from a controller
                // that lost its quorum).
                let mut side = vec![a];
                if kind == "isolate-leader-with-brokers" && !brokers.is_empty() {
                    brokers.shuffle(&mut self.rng);
                    let k = self.rng.random_range(1..=brokers.len());
                    side.extend(brokers.drain(..k));
                }
                let rest: Vec<usize> = ctrls
                    .into_iter()
                    .filter(|&k| k != a)
                    .chain(brokers)
                    .collect();
                ev.targets
                    .push(format!("{:?} | {:?}", self.names(&side), self.names(&rest)));
                let cuts = cross(&side, &rest);
                self.cut(&cuts, ev)
            }
            _ => Undo::Nothing,
        }
    }

    /// Every node, shuffled and split in two (the first half is the larger).
    fn halves(&mut self, n: usize) -> (Vec<usize>, Vec<usize>) {
        let mut idx: Vec<usize> = (0..n).collect();
        idx.shuffle(&mut self.rng);
        let b = idx.split_off(n.div_ceil(2));
        (idx, b)
    }

    /// Every pair between the two groups, plus 127.0.0.1 <-> broker when a
    /// broker is cut from every controller: controllers' connections to
    /// brokers do not bind the listen address yet (keel-controller
    /// channel.rs), so they leave from 127.0.0.1.
    fn pairs(&self, cuts: &[(usize, usize)]) -> Vec<(Ipv4Addr, Ipv4Addr)> {
        let c = self.cluster.lock().unwrap();
        let mut v = addresses(&c, cuts);
        let ctrls = indexes(&c, Role::Controller);
        for b in indexes(&c, Role::Broker) {
            let all = ctrls.iter().all(|&k| {
                cuts.iter()
                    .any(|&(x, y)| (x == k && y == b) || (x == b && y == k))
            });
            if all {
                v.push((LOOPBACK, ip(&c.nodes[b])));
            }
        }
        v
    }

    fn isolate(&self, i: usize) -> Vec<(usize, usize)> {
        let n = self.cluster.lock().unwrap().nodes.len();
        (0..n).filter(|&j| j != i).map(|j| (i, j)).collect()
    }

    /// Drops packets from the first node of each pair to the second only.
    /// When a broker no longer hears from any controller, packets from
    /// 127.0.0.1 to it are dropped too (controllers' connections to brokers
    /// leave from there), and the other way round.
    fn cut_one_way(&mut self, cuts: &[(usize, usize)], ev: &mut FaultEvent) -> Undo {
        let pairs = {
            let c = self.cluster.lock().unwrap();
            let mut v = addresses(&c, cuts);
            let ctrls = indexes(&c, Role::Controller);
            for b in indexes(&c, Role::Broker) {
                if ctrls.iter().all(|&k| cuts.contains(&(k, b))) {
                    v.push((LOOPBACK, ip(&c.nodes[b])));
                }
                if ctrls.iter().all(|&k| cuts.contains(&(b, k))) {
                    v.push((ip(&c.nodes[b]), LOOPBACK));
                }
            }
            v
        };
        match self.net.as_mut() {
            Some(net) => {
                if let Err(e) = net.cut_one_way(&pairs) {
                    ev.detail.push(format!("iptables failed: {e}"));
                }
                ev.detail
                    .push(format!("{} one-way DROP rules", net.rules()));
                Undo::Net
            }
            None => {
                ev.detail.push("no packet filter: partition skipped".into());
                Undo::Nothing
            }
        }
    }

    fn cut(&mut self, cuts: &[(usize, usize)], ev: &mut FaultEvent) -> Undo {
        let pairs = self.pairs(cuts);
        match self.net.as_mut() {
            Some(net) => {
                if let Err(e) = net.cut(&pairs) {
                    ev.detail.push(format!("iptables failed: {e}"));
                }
                ev.detail.push(format!("{} DROP rules", net.rules()));
                Undo::Net
            }
            None => {
                ev.detail.push("no packet filter: partition skipped".into());
                Undo::Nothing
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_and_cross_cover_every_pair_between_the_sides() {
        let a = [0, 1, 2];
        let b = [3, 4];
        let c = cross(&a, &b);
        assert_eq!(c.len(), 6);
        assert!(c.contains(&(2, 4)) && !c.contains(&(4, 2)));
    }
}
