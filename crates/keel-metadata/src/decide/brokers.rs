//! Broker lifecycle decisions: registration, heartbeats, fencing,
//! unfencing, log-dir failure, controlled shutdown and unregistration.

use crate::decide::{election_change, eligible, without, Decision, Working};
use crate::error::{ApiError, ErrorCode};
use crate::ids::{BrokerEpoch, BrokerId, IncarnationId, MetadataOffset, TopicId, TopicPartition};
use crate::image::{BrokerRegistration, MetadataImage};
use crate::records::{LeaderChange, MetadataRecord, PartitionChangeRecord, RegisterBrokerRecord};
use crate::selectors;

/// A broker asks to (re)register.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegisterBroker {
    /// The configured id the broker claims.
    pub broker: BrokerId,
    /// Tells a retry or restart of the same process lineage apart from a
    /// second process claiming the same id.
    pub incarnation: IncarnationId,
    /// `host:port` of the broker's gRPC endpoint.
    pub address: String,
    /// Drives rack-aware placement; `None` when undeclared.
    pub rack: Option<String>,
    /// The broker's data dirs; each replica lives in one (see `dir_of`).
    pub log_dirs: Vec<String>,
    /// The epoch the broker held before this attempt (0 if none): a
    /// registration newer than it was made by this very attempt.
    pub previous_epoch: BrokerEpoch,
    /// `host:port` of the broker's Kafka listener; `None` when it has none.
    pub kafka_address: Option<String>,
}

/// How a registration was answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegisterReply {
    /// A retry whose answer was lost: the registration already exists with
    /// this epoch; no records.
    Existing(BrokerEpoch),
    /// A new registration; its epoch is the log index of the entry carrying
    /// the records, known once it commits.
    New,
}

/// One broker heartbeat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Heartbeat {
    /// The sending broker.
    pub broker: BrokerId,
    /// Must match the registration; a stale one is refused.
    pub epoch: BrokerEpoch,
    /// How far the broker has applied metadata (the caller turns it into
    /// `caught_up`).
    pub metadata_offset: MetadataOffset,
    /// The broker asks to be fenced (it is about to stop serving).
    pub want_fence: bool,
    /// The broker asks for a controlled shutdown.
    pub want_shutdown: bool,
    /// Log dirs the broker found broken; reported until it restarts.
    pub offline_log_dirs: Vec<String>,
}

/// The answer to a heartbeat, reflecting the state after its records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeartbeatReply {
    /// The broker has applied enough metadata to be unfenced.
    pub is_caught_up: bool,
    /// The broker may not lead or be in an ISR.
    pub is_fenced: bool,
    /// Controlled shutdown is done: the broker may exit now.
    pub should_shut_down: bool,
    /// Partitions the broker still leads, counted while it shuts down
    /// (0 otherwise, to keep ordinary heartbeats cheap).
    pub remaining_leaderships: u32,
}

fn lookup(
    image: &MetadataImage,
    broker: BrokerId,
    epoch: BrokerEpoch,
) -> Result<&BrokerRegistration, ApiError> {
    let b = image.broker(broker).ok_or_else(|| {
        ApiError::new(
            ErrorCode::UnknownBroker,
            format!("broker {broker} is not registered"),
        )
    })?;
    if b.epoch != epoch {
        return Err(ApiError::new(
            ErrorCode::StaleBrokerEpoch,
            format!(
                "broker {broker} sent epoch {}, but its registration has epoch {}",
                epoch.0, b.epoch.0
            ),
        ));
    }
    Ok(b)
}

/// Per-topic facts needed while walking the partition map, cached across
/// the consecutive partitions of one topic.
struct TopicFacts {
    id: Option<TopicId>,
    deleting: bool,
    unclean: bool,
}

impl TopicFacts {
    fn new() -> Self {
        Self {
            id: None,
            deleting: false,
            unclean: false,
        }
    }

    fn load(&mut self, image: &MetadataImage, id: TopicId) {
        if self.id != Some(id) {
            let t = image.topic(id);
            self.id = Some(id);
            self.deleting = t.is_none_or(|t| t.marked_for_deletion());
            self.unclean = t.is_some_and(|t| image.unclean_leader_election(t));
        }
    }
}

/// Moves leadership and ISR membership of `broker` away for every partition
/// `affected` selects, after a record that made those replicas unusable
/// (fencing or a log-dir failure) is already in `w`. Walks the partition
/// map once; partitions of topics being deleted are left alone (they have
/// no leader and their ISR no longer matters). With `last_step` the changes
/// skip the scratch replay (see [`Working::append_final`]).
fn evict(
    w: &mut Working,
    broker: BrokerId,
    affected: impl Fn(&TopicPartition) -> bool,
    last_step: bool,
) {
    let image = w.image.clone();
    let mut facts = TopicFacts::new();
    let mut changes = Vec::new();
    for (tp, p) in image.partitions() {
        let leads = p.leader == Some(broker);
        if !(leads || p.isr.contains(&broker)) || !affected(tp) {
            continue;
        }
        facts.load(&image, tp.topic_id);
        if facts.deleting {
            continue;
        }
        let change = if leads {
            let ok = |b: BrokerId| b != broker && eligible(&image, tp, b);
            match selectors::offline_partition(p, ok, facts.unclean) {
                Ok(e) => election_change(tp, p, &e),
                Err(_) => {
                    // Nobody can lead: the partition goes offline; the ISR
                    // keeps its last member so a clean election stays possible.
                    let mut c = PartitionChangeRecord::new(tp.topic_id, tp.partition);
                    c.leader = LeaderChange::NoLeader;
                    if p.isr.len() > 1 {
                        c.isr = Some(without(&p.isr, broker));
                    }
                    c
                }
            }
        } else {
            let mut c = PartitionChangeRecord::new(tp.topic_id, tp.partition);
            if p.isr.len() > 1 {
                c.isr = Some(without(&p.isr, broker));
            }
            c
        };
        changes.push(change);
    }
    if last_step {
        w.append_final(changes);
    } else {
        for c in changes {
            w.change(c);
        }
    }
}

/// Fences `broker` in `w` (if registered and unfenced) and moves its
/// leaderships and ISR memberships away.
fn fence_into(w: &mut Working, broker: BrokerId, last_step: bool) {
    let Some(b) = w.image.broker(broker) else {
        return;
    };
    if b.fenced {
        return;
    }
    let epoch = b.epoch;
    w.push(MetadataRecord::FenceBroker { broker, epoch });
    evict(w, broker, |_| true, last_step);
}

/// Elects leaders for leaderless partitions `broker` hosts, now that it may
/// be able to lead them (unclean only where the topic allows it).
fn elect_hosted_offline(w: &mut Working, broker: BrokerId) {
    let image = w.image.clone();
    let mut facts = TopicFacts::new();
    let mut changes = Vec::new();
    for (tp, p) in image.partitions() {
        if p.leader.is_some() || !p.replicas.contains(&broker) {
            continue;
        }
        facts.load(&image, tp.topic_id);
        if facts.deleting {
            continue;
        }
        let ok = |b: BrokerId| eligible(&image, tp, b);
        if let Ok(e) = selectors::offline_partition(p, ok, facts.unclean) {
            changes.push(election_change(tp, p, &e));
        }
    }
    for c in changes {
        w.change(c);
    }
}

/// Controlled-shutdown moves for `broker` (already marked shutting down in
/// `w`): its leaderships go to another ISR member and it leaves the ISRs it
/// follows in. A partition where it is the only ISR member keeps it as
/// leader (the caller lets the last broker able to lead go anyway).
/// Returns how many partitions it still leads.
fn shutdown_moves(w: &mut Working, broker: BrokerId) -> u32 {
    let image = w.image.clone();
    let mut facts = TopicFacts::new();
    let mut changes = Vec::new();
    let mut remaining = 0u32;
    for (tp, p) in image.partitions() {
        let leads = p.leader == Some(broker);
        if !(leads || p.isr.contains(&broker)) {
            continue;
        }
        facts.load(&image, tp.topic_id);
        if facts.deleting {
            continue;
        }
        if leads {
            let ok = |b: BrokerId| eligible(&image, tp, b);
            match selectors::controlled_shutdown(p, broker, ok) {
                Ok(e) => changes.push(election_change(tp, p, &e)),
                // No other in-sync replica can take over: keep leading.
                Err(_) => remaining += 1,
            }
        } else if p.isr.len() > 1 {
            let mut c = PartitionChangeRecord::new(tp.topic_id, tp.partition);
            c.isr = Some(without(&p.isr, broker));
            changes.push(c);
        }
    }
    for c in changes {
        w.change(c);
    }
    remaining
}

impl MetadataImage {
    /// Registers a broker (see [`RegisterBroker`]). A different incarnation
    /// of a broker whose session is still live is a second process with the
    /// same id and is refused. The same incarnation naming an older epoch
    /// than the registration, with the same address, rack and log dirs, is
    /// a retry and gets the existing epoch back (a broker never adopts a
    /// registration it did not make).
    /// A previous epoch above the registration's is refused
    /// (`INVALID_REQUEST`): no broker was ever given it.
    /// Anything else replaces the registration; a replaced registration that
    /// was unfenced is fenced first, in the same entry, so its leaderships
    /// move.
    pub fn decide_register_broker(
        &self,
        req: &RegisterBroker,
        session_live: bool,
    ) -> Decision<Result<RegisterReply, ApiError>> {
        let mut w = Working::new(self);
        if let Some(existing) = self.broker(req.broker) {
            if existing.incarnation != req.incarnation && session_live {
                return Decision::reply_only(Err(ApiError::new(
                    ErrorCode::DuplicateBrokerRegistration,
                    format!(
                        "broker {} is registered by incarnation {} whose session is live; refusing incarnation {}",
                        req.broker, existing.incarnation, req.incarnation
                    ),
                )));
            }
            // No broker can know an epoch the cluster has not given out: a
            // registration naming one is forged or confused, and must not
            // replace the live one (its address, its session).
            if req.previous_epoch > existing.epoch {
                return Decision::reply_only(Err(ApiError::new(
                    ErrorCode::InvalidRequest,
                    format!(
                        "broker {} names previous epoch {} but its registration has epoch {}; a registration cannot name an epoch above the current one",
                        req.broker, req.previous_epoch.0, existing.epoch.0
                    ),
                )));
            }
            // A retry whose first answer was lost: the very registration
            // this broker made (same incarnation, address, rack and log
            // dirs). One that differs was made by someone else, and is
            // replaced rather than handed to this broker.
            let same_registration = existing.address == req.address
                && existing.rack == req.rack
                && existing.log_dirs == req.log_dirs
                && existing.kafka_address == req.kafka_address;
            if existing.incarnation == req.incarnation
                && req.previous_epoch < existing.epoch
                && same_registration
            {
                return Decision::reply_only(Ok(RegisterReply::Existing(existing.epoch)));
            }
            fence_into(&mut w, req.broker, false);
        }
        w.push(MetadataRecord::RegisterBroker(RegisterBrokerRecord {
            broker: req.broker,
            incarnation: req.incarnation,
            address: req.address.clone(),
            rack: req.rack.clone(),
            log_dirs: req.log_dirs.clone(),
        }));
        if let Some(address) = &req.kafka_address {
            // In the same entry as the registration: the command is never
            // split.
            w.push(MetadataRecord::BrokerKafkaListener {
                broker: req.broker,
                address: address.clone(),
            });
        }
        w.finish(Ok(RegisterReply::New))
    }

    /// Fences `broker` (session expired or the broker failed): `FenceBroker`,
    /// then, for every partition it leads, a new leader from the live ISR
    /// (unclean only if the topic allows it, else no leader), and its removal
    /// from every ISR it is in unless it is the last member. Nothing if it is
    /// unknown or already fenced.
    pub fn decide_fence_broker(&self, broker: BrokerId) -> Decision<()> {
        let mut w = Working::new(self);
        // Nothing is decided after the moves: they skip the scratch replay,
        // which keeps fencing a broker with 100k leaderships fast.
        fence_into(&mut w, broker, true);
        w.finish(())
    }

    /// Unfences `broker` and elects leaders for the leaderless partitions it
    /// can now lead.
    pub fn decide_unfence_broker(
        &self,
        broker: BrokerId,
        epoch: BrokerEpoch,
    ) -> Decision<Result<(), ApiError>> {
        let b = match lookup(self, broker, epoch) {
            Ok(b) => b,
            Err(e) => return Decision::reply_only(Err(e)),
        };
        let mut w = Working::new(self);
        if b.fenced {
            w.push(MetadataRecord::UnfenceBroker { broker, epoch });
            elect_hosted_offline(&mut w, broker);
        }
        w.finish(Ok(()))
    }

    /// Handles a heartbeat; `caught_up` says whether the broker's metadata
    /// offset is recent enough to unfence it. Only state changes become
    /// records: newly failed log dirs (and failover of the replicas in them),
    /// the start and progress of a controlled shutdown, a requested fence,
    /// and the unfence of a caught-up broker.
    pub fn decide_heartbeat(
        &self,
        hb: &Heartbeat,
        caught_up: bool,
    ) -> Decision<Result<HeartbeatReply, ApiError>> {
        let b = match lookup(self, hb.broker, hb.epoch) {
            Ok(b) => b,
            Err(e) => return Decision::reply_only(Err(e)),
        };
        let (broker, epoch) = (hb.broker, hb.epoch);
        let mut w = Working::new(self);

        let mut new_dirs: Vec<String> = hb
            .offline_log_dirs
            .iter()
            .filter(|d| b.log_dirs.contains(d) && !b.offline_log_dirs.contains(d))
            .cloned()
            .collect();
        new_dirs.sort();
        new_dirs.dedup();
        if !new_dirs.is_empty() {
            let reg = b.clone();
            w.push(MetadataRecord::LogDirsOffline {
                broker,
                epoch,
                dirs: new_dirs.clone(),
            });
            evict(
                &mut w,
                broker,
                |tp| {
                    reg.dir_of(tp)
                        .is_some_and(|d| new_dirs.iter().any(|n| n == d))
                },
                false,
            );
        }

        let mut remaining = 0;
        if hb.want_shutdown && !b.fenced && !b.shutting_down {
            w.push(MetadataRecord::BrokerShuttingDown { broker, epoch });
        }
        if w.image.broker(broker).is_some_and(|b| b.shutting_down) {
            remaining = shutdown_moves(&mut w, broker);
            // The last broker able to lead: no one can ever take over what
            // it still leads, so waiting only delays the exit. As KRaft
            // does, it is fenced now and may go; those partitions are left
            // offline (no leader, it stays their last ISR member) until a
            // replica comes back.
            if remaining > 0 && !w.image.brokers().any(|o| o.id != broker && o.can_lead()) {
                fence_into(&mut w, broker, false);
                remaining = 0;
            }
        }

        if hb.want_fence {
            fence_into(&mut w, broker, false);
        }

        let now = w
            .image
            .broker(broker)
            .expect("heartbeat broker stays registered");
        if now.fenced && caught_up && !hb.want_fence && !hb.want_shutdown && !now.shutting_down {
            w.push(MetadataRecord::UnfenceBroker { broker, epoch });
            elect_hosted_offline(&mut w, broker);
        }

        let now = w
            .image
            .broker(broker)
            .expect("heartbeat broker stays registered");
        let reply = HeartbeatReply {
            is_caught_up: caught_up,
            is_fenced: now.fenced,
            // A fenced broker leads nothing, so it may go at once.
            should_shut_down: (now.shutting_down && remaining == 0)
                || (hb.want_shutdown && now.fenced),
            remaining_leaderships: if now.shutting_down { remaining } else { 0 },
        };
        w.finish(Ok(reply))
    }

    /// A controlled-shutdown request: a heartbeat asking to shut down.
    pub fn decide_controlled_shutdown(
        &self,
        broker: BrokerId,
        epoch: BrokerEpoch,
    ) -> Decision<Result<HeartbeatReply, ApiError>> {
        let hb = Heartbeat {
            broker,
            epoch,
            metadata_offset: 0,
            want_fence: false,
            want_shutdown: true,
            offline_log_dirs: Vec::new(),
        };
        self.decide_heartbeat(&hb, false)
    }

    /// Removes a fenced broker for good (an operator decommissions it).
    pub fn decide_unregister_broker(&self, broker: BrokerId) -> Decision<Result<(), ApiError>> {
        let Some(b) = self.broker(broker) else {
            return Decision::reply_only(Err(ApiError::new(
                ErrorCode::UnknownBroker,
                format!("broker {broker} is not registered"),
            )));
        };
        if !b.fenced {
            return Decision::reply_only(Err(ApiError::new(
                ErrorCode::BrokerNotFenced,
                format!("broker {broker} is unfenced; stop it (or wait for its session to expire) first"),
            )));
        }
        Decision {
            records: vec![MetadataRecord::UnregisterBroker {
                broker,
                epoch: b.epoch,
            }],
            reply: Ok(()),
            replayed: None,
        }
    }
}
