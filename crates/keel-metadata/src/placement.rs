//! Replica placement for new topics and partitions, after Kafka's
//! rack-aware assignment.
//!
//! Brokers are arranged in rack-alternating order (the first broker of every
//! rack, then the second of every rack, ...). Leaders go round-robin over
//! that order from a random start, so per-broker leader counts differ by at
//! most one. Followers are picked one at a time: first from racks the
//! partition does not use yet (while any remain), then the least-loaded
//! broker, ties broken by distance from a random, per-round shifted position
//! after the leader (Kafka's `nextReplicaShift`), which spreads a broker's
//! followers over many peers. Where that greedy choice leaves replica counts
//! more than one apart, follower swaps that keep every partition's rack
//! spread even them out again. Only `rng` makes choices, so the same seed
//! and brokers give the same assignment.

use std::collections::{BTreeMap, VecDeque};

use crate::error::{ApiError, ErrorCode};
use crate::ids::BrokerId;

/// A broker that may receive new replicas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacementBroker {
    /// The broker that may receive replicas.
    pub id: BrokerId,
    /// `None` when the broker did not declare a rack. If some brokers do,
    /// the undeclared ones count as one more rack of their own.
    pub rack: Option<String>,
}

/// Assigns `replication_factor` distinct brokers to each of `partitions`
/// partitions; the first replica of each is its preferred leader.
///
/// Refuses with `INVALID_REPLICATION_FACTOR` when the factor is zero or
/// exceeds the number of (distinct) brokers.
pub fn place_replicas(
    brokers: &[PlacementBroker],
    partitions: u32,
    replication_factor: u32,
    rng: &mut impl rand::Rng,
) -> Result<Vec<Vec<BrokerId>>, ApiError> {
    let (order, rack_of, rack_count) = arrange(brokers);
    let n = order.len();
    let rf = replication_factor as usize;
    if rf == 0 || rf > n {
        return Err(ApiError::new(
            ErrorCode::InvalidReplicationFactor,
            if n == 0 {
                format!("replication factor {replication_factor} needs as many available brokers; there are none")
            } else {
                format!("replication factor must be between 1 and {n} (the available brokers), not {replication_factor}")
            },
        ));
    }
    let k = partitions as usize;
    if k == 0 {
        return Ok(Vec::new());
    }
    let start = rng.random_range(0..n);
    let mut shift = rng.random_range(0..n);
    // Leaders are known up front; counting them first keeps followers away
    // from brokers that will lead more.
    let mut load: Vec<usize> = (0..n)
        .map(|pos| k / n + usize::from((pos + n - start) % n < k % n))
        .collect();
    // Every partition spans this many racks.
    let rack_spread = rf.min(rack_count);
    let mut out: Vec<Vec<usize>> = Vec::with_capacity(k);
    let mut rack_used = vec![false; rack_count];
    for i in 0..k {
        if i > 0 && i % n == 0 {
            shift += 1;
        }
        let leader = (start + i) % n;
        let mut members = Vec::with_capacity(rf);
        members.push(leader);
        rack_used.iter_mut().for_each(|u| *u = false);
        rack_used[rack_of[leader]] = true;
        let mut racks_in_use = 1;
        for j in 0..rf - 1 {
            let anchor = leader + 1 + shift + j;
            let best = (0..n)
                .filter(|p| !members.contains(p))
                .filter(|p| racks_in_use >= rack_count || !rack_used[rack_of[*p]])
                .min_by_key(|p| (load[*p], (p + n - anchor % n) % n))
                .expect("rf <= brokers leaves a candidate");
            if !rack_used[rack_of[best]] {
                rack_used[rack_of[best]] = true;
                racks_in_use += 1;
            }
            load[best] += 1;
            members.push(best);
        }
        out.push(members);
    }
    let racks_balanced = {
        let mut sizes = vec![0usize; rack_count];
        rack_of.iter().for_each(|r| sizes[*r] += 1);
        sizes.iter().all(|s| *s == sizes[0])
    };
    if racks_balanced {
        rebalance(&mut out, &rack_of, rack_spread, n);
    }
    Ok(out
        .into_iter()
        .map(|ps| ps.into_iter().map(|p| order[p]).collect())
        .collect())
}

/// Sorts and dedups the brokers into rack-alternating order. Returns the
/// order, each position's rack index, and the number of racks.
fn arrange(brokers: &[PlacementBroker]) -> (Vec<BrokerId>, Vec<usize>, usize) {
    let mut by_rack: BTreeMap<Option<&str>, Vec<BrokerId>> = BTreeMap::new();
    let mut seen = std::collections::BTreeSet::new();
    let any_rack = brokers.iter().any(|b| b.rack.is_some());
    let mut sorted: Vec<&PlacementBroker> = brokers.iter().collect();
    sorted.sort_by_key(|b| b.id);
    for b in sorted {
        if seen.insert(b.id) {
            let rack = if any_rack { b.rack.as_deref() } else { None };
            by_rack.entry(rack).or_default().push(b.id);
        }
    }
    let racks: Vec<Vec<BrokerId>> = by_rack.into_values().collect();
    let mut order = Vec::new();
    let mut rack_of = Vec::new();
    let deepest = racks.iter().map(Vec::len).max().unwrap_or(0);
    for depth in 0..deepest {
        for (r, members) in racks.iter().enumerate() {
            if let Some(b) = members.get(depth) {
                order.push(*b);
                rack_of.push(r);
            }
        }
    }
    (order, rack_of, racks.len().max(1))
}

/// Evens replica counts to within one by moving follower replicas along
/// swap chains (most-loaded broker → ... → least-loaded broker), each swap
/// keeping its partition's replicas distinct and spread over `rack_spread`
/// racks. Leaders never move.
fn rebalance(parts: &mut [Vec<usize>], rack_of: &[usize], rack_spread: usize, n: usize) {
    let spread_ok = |members: &[usize]| {
        let mut racks: Vec<usize> = members.iter().map(|p| rack_of[*p]).collect();
        racks.sort_unstable();
        racks.dedup();
        racks.len() >= rack_spread
    };
    // Each successful chain moves one replica from the fullest to the
    // emptiest broker; the bound only guards against a livelock bug.
    for _ in 0..parts.len() * 2 + n {
        let mut load = vec![0usize; n];
        let mut follows: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, ps) in parts.iter().enumerate() {
            for (j, p) in ps.iter().enumerate() {
                load[*p] += 1;
                if j > 0 {
                    follows[*p].push(i);
                }
            }
        }
        let hi = *load.iter().max().unwrap_or(&0);
        let lo = *load.iter().min().unwrap_or(&0);
        if hi <= lo + 1 {
            return;
        }
        // Breadth-first search for a chain of swaps from a fullest broker.
        let mut prev: Vec<Option<Option<(usize, usize)>>> = vec![None; n];
        let mut queue = VecDeque::new();
        for p in (0..n).filter(|p| load[*p] == hi) {
            prev[p] = Some(None);
            queue.push_back(p);
        }
        let mut found = None;
        'search: while let Some(from) = queue.pop_front() {
            for &i in &follows[from] {
                for to in 0..n {
                    if prev[to].is_some() || parts[i].contains(&to) {
                        continue;
                    }
                    let swapped: Vec<usize> = parts[i]
                        .iter()
                        .map(|p| if *p == from { to } else { *p })
                        .collect();
                    if !spread_ok(&swapped) {
                        continue;
                    }
                    prev[to] = Some(Some((from, i)));
                    if load[to] == lo {
                        found = Some(to);
                        break 'search;
                    }
                    queue.push_back(to);
                }
            }
        }
        let Some(mut to) = found else { return };
        let mut chain = Vec::new();
        while let Some(Some((from, i))) = prev[to] {
            chain.push((from, to, i));
            to = from;
        }
        for (from, to, i) in chain.into_iter().rev() {
            let fits = parts[i][1..].contains(&from) && !parts[i].contains(&to);
            let swapped: Vec<usize> = parts[i]
                .iter()
                .map(|p| if *p == from { to } else { *p })
                .collect();
            if !fits || !spread_ok(&swapped) {
                return;
            }
            parts[i] = swapped;
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    fn brokers(n: u32, racks: Option<u32>) -> Vec<PlacementBroker> {
        (0..n)
            .map(|i| PlacementBroker {
                id: BrokerId(i + 1),
                rack: racks.map(|r| format!("rack-{}", i % r)),
            })
            .collect()
    }

    fn counts(parts: &[Vec<BrokerId>], leaders_only: bool) -> BTreeMap<BrokerId, usize> {
        let mut m = BTreeMap::new();
        for ps in parts {
            let take = if leaders_only { 1 } else { ps.len() };
            for b in &ps[..take] {
                *m.entry(*b).or_insert(0) += 1;
            }
        }
        m
    }

    #[test]
    fn spreads_leaders_and_replicas_evenly_without_racks() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for n in 1..=9u32 {
            for rf in 1..=n {
                for k in 1..=3 * n + 1 {
                    let parts = place_replicas(&brokers(n, None), k, rf, &mut rng).unwrap();
                    assert_eq!(parts.len(), k as usize);
                    for ps in &parts {
                        let mut s = ps.clone();
                        s.sort();
                        s.dedup();
                        assert_eq!(s.len(), rf as usize);
                    }
                    for leaders_only in [true, false] {
                        let c = counts(&parts, leaders_only);
                        let (min, max) = (0..n)
                            .map(|i| c.get(&BrokerId(i + 1)).copied().unwrap_or(0))
                            .fold((usize::MAX, 0), |(a, b), x| (a.min(x), b.max(x)));
                        assert!(max - min <= 1, "n={n} rf={rf} k={k} {parts:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn each_partition_spans_as_many_racks_as_it_can() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let bs = brokers(6, Some(3));
        let parts = place_replicas(&bs, 12, 3, &mut rng).unwrap();
        for ps in &parts {
            let mut racks: Vec<_> = ps
                .iter()
                .map(|b| bs[b.0 as usize - 1].rack.clone())
                .collect();
            racks.sort();
            racks.dedup();
            assert_eq!(racks.len(), 3, "{ps:?}");
        }
    }

    #[test]
    fn too_few_brokers_is_an_invalid_replication_factor() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let e = place_replicas(&brokers(2, None), 1, 3, &mut rng).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidReplicationFactor);
        let e = place_replicas(&brokers(2, None), 1, 0, &mut rng).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidReplicationFactor);
    }
}
