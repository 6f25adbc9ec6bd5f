//! What a run observed, and the invariants checked as it goes and at its
//! end.
//!
//! At every step (each time a node's applied state changes):
//! - state-machine safety: two nodes that applied the same log index
//!   applied the same entry, and (at every 64th index) hold the same image
//!   after it;
//! - no panic in any task of the run (a failed assertion of openraft's
//!   own or Keel's is a finding, not noise).
//!
//! Leaders are traced and counted per term: openraft's (term, node)
//! leader ids allow two leaders in one term (see [`History::leader`]).
//!
//! At the end, after every fault is healed and every node is back:
//! - no acknowledged write is lost: every write a leader acknowledged is
//!   in every node's image;
//! - convergence: every node applied the same log and holds one image.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use keel_raft::NodeId;
use openraft::LogId;

use crate::net::log_id;
use crate::trace::Trace;

/// A write a leader acknowledged: its number and where it was committed.
#[derive(Clone, Copy, Debug)]
pub struct Acked {
    /// The write's number (its topic is `w-<n>`).
    pub n: u64,
    /// The log id the leader answered with.
    pub log_id: LogId<NodeId>,
}

#[derive(Default)]
struct Observed {
    /// The leader seen in each term.
    leaders: BTreeMap<u64, NodeId>,
    /// Terms that had a second leader.
    split_terms: BTreeSet<u64>,
    /// What the first node to apply each index applied: the entry's id,
    /// the image's digest after it, and who.
    applied: BTreeMap<u64, (LogId<NodeId>, String, NodeId)>,
    acked: Vec<Acked>,
    violations: Vec<String>,
    /// Violations past the first [`MAX_VIOLATIONS`].
    more_violations: usize,
}

/// Violations a run keeps in full.
pub const MAX_VIOLATIONS: usize = 20;

/// The shared record of a run's observations. Cheap to clone.
#[derive(Clone)]
pub struct History {
    inner: Arc<Mutex<Observed>>,
    trace: Trace,
}

impl History {
    /// An empty history writing what it sees into `trace`.
    pub fn new(trace: Trace) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Observed::default())),
            trace,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Observed> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records a violation (the first [`MAX_VIOLATIONS`] in full, then
    /// only a count: one lost write shows at every later index).
    pub fn violation(&self, what: String) {
        self.trace.event(format_args!("VIOLATION {what}"));
        let mut observed = self.lock();
        observed.more_violations += 1;
        if observed.violations.len() < MAX_VIOLATIONS {
            observed.violations.push(what);
            observed.more_violations -= 1;
        }
    }

    /// Node `node` is leader in `term`. openraft's default leader ids are
    /// (term, node): two nodes may each win an election in one term (the
    /// later one's id is greater, and the earlier one steps down when it
    /// hears of it), so a second leader in a term is counted and traced,
    /// not a violation; what must hold is that their logs never disagree
    /// (checked by [`History::applied`]).
    pub fn leader(&self, term: u64, node: NodeId) {
        let second = {
            let mut observed = self.lock();
            match observed.leaders.get(&term) {
                Some(&other) if other != node => {
                    if !observed.split_terms.insert(term) {
                        return;
                    }
                    Some(other)
                }
                Some(_) => return,
                None => {
                    observed.leaders.insert(term, node);
                    None
                }
            }
        };
        match second {
            Some(other) => self.trace.event(format_args!(
                "leader {node} term {term} (second leader of the term, after node {other})"
            )),
            None => self.trace.event(format_args!("leader {node} term {term}")),
        }
    }

    /// Terms in which two nodes were leader.
    pub fn shared_terms(&self) -> usize {
        self.lock().split_terms.len()
    }

    /// Node `node` applied up to `applied`, leaving an image of digest
    /// `image` (empty where no digest was taken: the same indexes on every
    /// node).
    pub fn applied(&self, node: NodeId, applied: LogId<NodeId>, image: String) {
        let clash = {
            let mut observed = self.lock();
            match observed.applied.get(&applied.index) {
                Some((id, digest, first)) if *id != applied || *digest != image => {
                    Some((*id, digest.clone(), *first))
                }
                Some(_) => None,
                None => {
                    observed
                        .applied
                        .insert(applied.index, (applied, image.clone(), node));
                    None
                }
            }
        };
        if let Some((id, digest, first)) = clash {
            self.violation(format!(
                "index {}: node {first} applied {} (image {digest}), node {node} applied {} (image {image})",
                applied.index,
                log_id(Some(id)),
                log_id(Some(applied)),
            ));
        }
    }

    /// A leader acknowledged write `n` at `log_id`.
    pub fn acked(&self, n: u64, log_id: LogId<NodeId>) {
        self.lock().acked.push(Acked { n, log_id });
    }

    /// Every acknowledged write so far.
    pub fn acked_writes(&self) -> Vec<Acked> {
        self.lock().acked.clone()
    }

    /// Terms that had a leader.
    pub fn terms_led(&self) -> usize {
        self.lock().leaders.len()
    }

    /// Every violation so far (past [`MAX_VIOLATIONS`], a last line
    /// counts the rest).
    pub fn violations(&self) -> Vec<String> {
        let observed = self.lock();
        let mut all = observed.violations.clone();
        if observed.more_violations > 0 {
            all.push(format!("... and {} more", observed.more_violations));
        }
        all
    }
}
