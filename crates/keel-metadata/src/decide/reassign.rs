//! Partition reassignment, incremental like Kafka's
//! AlterPartitionReassignments: a reassignment records the target replicas
//! as `replicas = target ++ (original − target)` with `adding` and
//! `removing`, and completes once every added replica is in sync.

use crate::decide::{broker_list, eligible, has_duplicates, partition_name, Decision, Working};
use crate::error::{ApiError, ErrorCode};
use crate::ids::{BrokerId, TopicPartition};
use crate::image::{MetadataImage, PartitionImage};
use crate::records::{LeaderChange, PartitionChangeRecord};
use crate::selectors;

fn api(code: ErrorCode, message: impl Into<String>) -> ApiError {
    ApiError::new(code, message)
}

/// `isr` restricted to `keep`, in ISR order.
fn isr_within(isr: &[BrokerId], keep: &[BrokerId]) -> Vec<BrokerId> {
    isr.iter().copied().filter(|b| keep.contains(b)).collect()
}

/// `a − b`, keeping `a`'s order.
fn minus(a: &[BrokerId], b: &[BrokerId]) -> Vec<BrokerId> {
    a.iter().copied().filter(|x| !b.contains(x)).collect()
}

/// The leader after the replica set becomes `replicas` with ISR `isr`: the
/// current one if it stays in the ISR, else the first eligible ISR member in
/// replica order. `Err` when the partition has a leader and none can take
/// over.
fn leader_within(
    image: &MetadataImage,
    tp: &TopicPartition,
    p: &PartitionImage,
    replicas: &[BrokerId],
    isr: &[BrokerId],
) -> Result<LeaderChange, ApiError> {
    match p.leader {
        Some(l) if !isr.contains(&l) => replicas
            .iter()
            .copied()
            .find(|b| isr.contains(b) && eligible(image, tp, *b))
            .map(LeaderChange::To)
            .ok_or_else(|| {
                api(
                    ErrorCode::EligibleLeadersNotAvailable,
                    format!(
                        "{}: no in-sync replica of {} can take over from leader {l}",
                        partition_name(image, tp),
                        broker_list(replicas)
                    ),
                )
            }),
        _ => Ok(LeaderChange::Unchanged),
    }
}

/// A change that sets the reassignment fields to the given values, writing
/// only the fields that differ from `p`.
fn reshape(
    tp: &TopicPartition,
    p: &PartitionImage,
    replicas: Vec<BrokerId>,
    isr: Vec<BrokerId>,
    leader: LeaderChange,
    adding: Vec<BrokerId>,
    removing: Vec<BrokerId>,
) -> PartitionChangeRecord {
    let mut c = PartitionChangeRecord::new(tp.topic_id, tp.partition);
    c.leader = leader;
    c.replicas = (replicas != p.replicas).then_some(replicas);
    c.isr = (isr != p.isr).then_some(isr);
    c.adding = (adding != p.adding).then_some(adding);
    c.removing = (removing != p.removing).then_some(removing);
    c
}

/// Completes the reassignment of `tp` in `w` if it can: every added replica
/// is in sync, the ISR keeps a member of the target, and a leader being
/// removed has an eligible in-sync successor in the target. A reassignment
/// of a topic being deleted can never catch up (the partition has no
/// leader), so it is abandoned instead. Returns whether a record was added.
pub(crate) fn complete_reassignment(w: &mut Working, tp: &TopicPartition) -> bool {
    let image = w.image.clone();
    let Some(p) = image.partition(tp) else {
        return false;
    };
    if !p.reassigning() {
        return false;
    }
    let deleting = image
        .topic(tp.topic_id)
        .is_none_or(|t| t.marked_for_deletion());
    if deleting {
        return abandon(w, tp, p);
    }
    if !p.adding.iter().all(|b| p.isr.contains(b)) {
        return false;
    }
    let target = p.target_replicas();
    let isr = isr_within(&p.isr, &target);
    if isr.is_empty() {
        return false;
    }
    let leader = match p.leader {
        Some(l) if !target.contains(&l) => {
            match selectors::reassigned_partition(p, |b| eligible(&image, tp, b)) {
                Ok(e) => LeaderChange::To(e.leader),
                // Nobody in the target can lead yet: try again later.
                Err(_) => return false,
            }
        }
        _ => LeaderChange::Unchanged,
    };
    w.change(reshape(tp, p, target, isr, leader, Vec::new(), Vec::new()))
}

/// Ends the reassignment of a leaderless partition of a topic being
/// deleted: back to the original replicas if one of them is in sync, else
/// on to the target (which then holds the whole ISR).
fn abandon(w: &mut Working, tp: &TopicPartition, p: &PartitionImage) -> bool {
    let orig = p.original_replicas();
    let (replicas, isr) = match isr_within(&p.isr, &orig) {
        isr if !isr.is_empty() => (orig, isr),
        _ => {
            let target = p.target_replicas();
            let isr = isr_within(&p.isr, &target);
            (target, isr)
        }
    };
    let leader = match p.leader {
        Some(l) if !isr.contains(&l) => LeaderChange::NoLeader,
        _ => LeaderChange::Unchanged,
    };
    w.change(reshape(
        tp,
        p,
        replicas,
        isr,
        leader,
        Vec::new(),
        Vec::new(),
    ))
}

/// Starts (or replaces) a reassignment of `tp` towards `target`, then
/// completes it at once if it can.
fn start(w: &mut Working, tp: &TopicPartition, target: &[BrokerId]) -> Result<(), ApiError> {
    let image = w.image.clone();
    let p = image.partition(tp).expect("checked by the caller");
    let orig = if p.reassigning() {
        p.original_replicas()
    } else {
        p.replicas.clone()
    };
    let mut replicas = target.to_vec();
    replicas.extend(minus(&orig, target));
    let adding = minus(target, &orig);
    let removing = minus(&orig, target);
    // Replacing an in-flight reassignment may drop replicas it was adding.
    let isr = isr_within(&p.isr, &replicas);
    if isr.is_empty() {
        return Err(api(
            ErrorCode::EligibleLeadersNotAvailable,
            format!(
                "{}: no in-sync replica would remain in {}",
                partition_name(&image, tp),
                broker_list(&replicas)
            ),
        ));
    }
    let leader = leader_within(&image, tp, p, &replicas, &isr)?;
    w.change(reshape(tp, p, replicas, isr, leader, adding, removing));
    complete_reassignment(w, tp);
    Ok(())
}

/// Cancels the in-flight reassignment of `tp`: back to the original
/// replicas, keeping the ISR members among them.
fn cancel(w: &mut Working, tp: &TopicPartition) -> Result<(), ApiError> {
    let image = w.image.clone();
    let p = image.partition(tp).expect("checked by the caller");
    if !p.reassigning() {
        return Err(api(
            ErrorCode::NoReassignmentInProgress,
            format!("{} is not being reassigned", partition_name(&image, tp)),
        ));
    }
    let orig = p.original_replicas();
    let isr = isr_within(&p.isr, &orig);
    if isr.is_empty() {
        return Err(api(
            ErrorCode::EligibleLeadersNotAvailable,
            format!(
                "{}: none of the original replicas {} is in sync; cannot cancel",
                partition_name(&image, tp),
                broker_list(&orig)
            ),
        ));
    }
    let leader = leader_within(&image, tp, p, &orig, &isr)?;
    w.change(reshape(tp, p, orig, isr, leader, Vec::new(), Vec::new()));
    Ok(())
}

impl MetadataImage {
    /// Starts, replaces (`Some(target)`) or cancels (`None`) partition
    /// reassignments. A reassignment that needs no data movement (only
    /// removals, or targets already in sync) completes in the same decision.
    pub fn decide_alter_reassignments(
        &self,
        items: &[(TopicPartition, Option<Vec<BrokerId>>)],
    ) -> Decision<Vec<(TopicPartition, Result<(), ApiError>)>> {
        let mut w = Working::new(self);
        let mut replies = Vec::with_capacity(items.len());
        for (tp, target) in items {
            let outcome = check_item(&w.image, tp, target.as_deref()).and_then(|()| match target {
                Some(target) => start(&mut w, tp, target),
                None => cancel(&mut w, tp),
            });
            replies.push((*tp, outcome));
        }
        w.finish(replies)
    }

    /// Completes every reassignment that can complete now (and abandons
    /// those of topics being deleted). Replies with the partitions changed.
    pub fn decide_reassignment_progress(&self) -> Decision<Vec<TopicPartition>> {
        let mut w = Working::new(self);
        let mut done = Vec::new();
        for (tp, _) in self.partitions().filter(|(_, p)| p.reassigning()) {
            if complete_reassignment(&mut w, tp) {
                done.push(*tp);
            }
        }
        w.finish(done)
    }

    /// The partitions being reassigned, with their state.
    pub fn list_reassignments(&self) -> Vec<(TopicPartition, PartitionImage)> {
        self.partitions()
            .filter(|(_, p)| p.reassigning())
            .map(|(tp, p)| (*tp, p.clone()))
            .collect()
    }
}

/// Request-level checks of one reassignment item.
fn check_item(
    image: &MetadataImage,
    tp: &TopicPartition,
    target: Option<&[BrokerId]>,
) -> Result<(), ApiError> {
    let t = image.topic(tp.topic_id).ok_or_else(|| {
        api(
            ErrorCode::UnknownTopic,
            format!("topic {} does not exist", tp.topic_id),
        )
    })?;
    if image.partition(tp).is_none() {
        return Err(api(
            ErrorCode::UnknownPartition,
            format!("partition {} does not exist", partition_name(image, tp)),
        ));
    }
    if t.marked_for_deletion() {
        return Err(api(
            ErrorCode::TopicDeletionInProgress,
            format!("topic {} is being deleted", t.name),
        ));
    }
    if let Some(target) = target {
        if target.is_empty() || has_duplicates(target) {
            return Err(api(
                ErrorCode::InvalidReplicaAssignment,
                format!(
                    "{}: target {} must be non-empty without repeats",
                    partition_name(image, tp),
                    broker_list(target)
                ),
            ));
        }
        if let Some(b) = target.iter().find(|b| image.broker(**b).is_none()) {
            return Err(api(
                ErrorCode::UnknownBroker,
                format!(
                    "{}: broker {b} is not registered",
                    partition_name(image, tp)
                ),
            ));
        }
    }
    Ok(())
}
