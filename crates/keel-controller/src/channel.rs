//! The channel manager: one tokio task per broker, each with a bounded
//! queue, sending the `LeaderAndIsr` / `UpdateMetadata` / `StopReplica`
//! requests the pure planner decided, with retry, backoff and reconnect.
//!
//! Owned by the active controller's event loop (no locks); dropped on
//! resignation, which stops every task. Superseded `UpdateMetadata`
//! requests are coalesced: a queued full view makes older ones moot. A
//! queue that overflows is replaced by a full resync read from the image.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use keel_metadata::planner::{BrokerRequestPlan, ChannelAction};
use keel_metadata::{
    BrokerEpoch, BrokerId, ErrorCode, MetadataImage, PartitionId, TopicId, TopicPartition,
};
use keel_proto::convert::{broker_to_pb, partition_to_pb};
use keel_proto::pb;
use keel_proto::pb::broker_control_service_client::BrokerControlServiceClient;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tonic::transport::{Channel, Endpoint};

use crate::active::{Command, Proposal};
use crate::shared::Shared;

/// Requests queued per broker before the channel falls back to a resync.
const QUEUE: usize = 1024;
/// Partitions per request: keeps every message far below gRPC's size limit.
pub const PARTITIONS_PER_REQUEST: usize = 10_000;
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// One request to one broker (the stamp is added by the channel).
#[derive(Clone, Debug)]
pub enum Outgoing {
    LeaderAndIsr(Vec<pb::PartitionState>, Vec<pb::BrokerInfo>),
    UpdateMetadata {
        offset: u64,
        full: bool,
        brokers: Vec<pb::BrokerInfo>,
        /// Shared by every broker's copy of one delta: the event loop
        /// builds it once; each channel task copies it when it sends.
        partitions: Arc<Vec<pb::PartitionState>>,
        deleted: Vec<Vec<u8>>,
    },
    StopReplica(Vec<pb::StopReplicaItem>),
}

struct BrokerChannel {
    tx: mpsc::Sender<Outgoing>,
    /// Set when the queue overflowed: the task resends the full state.
    resync: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl Drop for BrokerChannel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Every broker channel of one activation.
pub struct ChannelManager {
    shared: Arc<Shared>,
    /// The event loop's own queue: StopReplica(delete) outcomes go back there.
    events: mpsc::Sender<Command>,
    /// Controller epoch stamped on every request.
    epoch: u64,
    channels: BTreeMap<BrokerId, BrokerChannel>,
}

fn partition_states(
    image: &MetadataImage,
    tps: impl IntoIterator<Item = TopicPartition>,
) -> Vec<pb::PartitionState> {
    tps.into_iter()
        .filter_map(|tp| {
            let p = image.partition(&tp)?;
            let name = image
                .topic(tp.topic_id)
                .map(|t| t.name.as_str())
                .unwrap_or("");
            Some(partition_to_pb(name, &tp, p))
        })
        .collect()
}

/// The brokers leading any of `states` (followers connect to them).
fn leaders_of(image: &MetadataImage, states: &[pb::PartitionState]) -> Vec<pb::BrokerInfo> {
    let ids: BTreeSet<u32> = states.iter().filter_map(|s| s.leader).collect();
    ids.into_iter()
        .filter_map(|id| image.broker(BrokerId(id)))
        .map(broker_to_pb)
        .collect()
}

fn all_brokers(image: &MetadataImage) -> Vec<pb::BrokerInfo> {
    image.brokers().map(broker_to_pb).collect()
}

/// The full state of one broker: every broker and partition for its cache,
/// and `LeaderAndIsr` for every partition it hosts.
pub fn full_state(image: &MetadataImage, broker: BrokerId) -> Vec<Outgoing> {
    let brokers = all_brokers(image);
    let all: Vec<pb::PartitionState> = image
        .partitions()
        .map(|(tp, p)| {
            let name = image
                .topic(tp.topic_id)
                .map(|t| t.name.as_str())
                .unwrap_or("");
            partition_to_pb(name, tp, p)
        })
        .collect();
    let hosted: Vec<pb::PartitionState> = all
        .iter()
        .filter(|p| p.replicas.contains(&broker.0))
        .cloned()
        .collect();
    let mut out = vec![Outgoing::UpdateMetadata {
        offset: image.offset(),
        full: true,
        brokers: brokers.clone(),
        partitions: Arc::new(all),
        deleted: vec![],
    }];
    if !hosted.is_empty() {
        let leaders = leaders_of(image, &hosted);
        out.push(Outgoing::LeaderAndIsr(hosted, leaders));
    }
    out
}

impl ChannelManager {
    /// Opens a channel with full state to every registered broker.
    pub fn start(
        shared: Arc<Shared>,
        epoch: u64,
        image: &MetadataImage,
        events: mpsc::Sender<Command>,
    ) -> Self {
        let mut m = Self {
            shared,
            events,
            epoch,
            channels: BTreeMap::new(),
        };
        let ids: Vec<BrokerId> = image.brokers().map(|b| b.id).collect();
        for b in ids {
            m.open(image, b);
        }
        m
    }

    fn open(&mut self, image: &MetadataImage, broker: BrokerId) {
        self.channels.remove(&broker);
        let Some(reg) = image.broker(broker) else {
            return;
        };
        let (tx, rx) = mpsc::channel(QUEUE);
        let resync = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(run_channel(
            ChannelTask {
                shared: self.shared.clone(),
                broker,
                broker_epoch: reg.epoch,
                address: reg.address.clone(),
                controller_epoch: self.epoch,
                resync: resync.clone(),
                events: self.events.clone(),
            },
            rx,
        ));
        let ch = BrokerChannel { tx, resync, task };
        // The task builds the full state itself (off the event loop, from
        // the newest image): activation and registration stay O(1) here
        // whatever the metadata size.
        ch.resync.store(true, Ordering::Release);
        self.channels.insert(broker, ch);
    }

    /// Number of open channels.
    pub fn len(&self) -> usize {
        self.channels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.channels.is_empty()
    }

    /// Sends what `plan` says, reading partition states from `image` (the
    /// image right after the records committed at `offset`).
    pub fn apply(&mut self, plan: &BrokerRequestPlan, image: &MetadataImage, offset: u64) {
        let mut fresh = BTreeSet::new();
        for (b, action) in &plan.channels {
            match action {
                ChannelAction::Close => {
                    self.channels.remove(b);
                }
                ChannelAction::OpenWithFullState => {
                    self.open(image, *b);
                    fresh.insert(*b);
                }
            }
        }
        let brokers: Vec<pb::BrokerInfo> = plan
            .changed_brokers
            .iter()
            .filter_map(|b| image.broker(*b))
            .map(broker_to_pb)
            .collect();
        let changed = Arc::new(partition_states(
            image,
            plan.changed_partitions.iter().copied(),
        ));
        let deleted: Vec<Vec<u8>> = plan
            .deleted_topics
            .iter()
            .map(|t| t.to_bytes().to_vec())
            .collect();
        let any_update = !brokers.is_empty() || !changed.is_empty() || !deleted.is_empty();
        for (b, ch) in &self.channels {
            if fresh.contains(b) {
                continue;
            }
            // Leadership first (as the classic controller did): replicas act
            // on it; the metadata caches follow.
            if let Some(tps) = plan.leader_and_isr.get(b) {
                let states = partition_states(image, tps.iter().copied());
                let leaders = leaders_of(image, &states);
                enqueue(ch, Outgoing::LeaderAndIsr(states, leaders));
            }
            if any_update {
                enqueue(
                    ch,
                    Outgoing::UpdateMetadata {
                        offset,
                        full: false,
                        brokers: brokers.clone(),
                        partitions: changed.clone(),
                        deleted: deleted.clone(),
                    },
                );
            }
            if let Some(tps) = plan.stop_replica.get(b) {
                enqueue(
                    ch,
                    Outgoing::StopReplica(
                        tps.iter()
                            .map(|tp| pb::StopReplicaItem {
                                topic_id: tp.topic_id.to_bytes().to_vec(),
                                partition: tp.partition.0,
                                delete: true,
                                leader_epoch: 0,
                            })
                            .collect(),
                    ),
                );
            }
        }
    }

    /// Queues `StopReplica(delete)` for these replicas (deletion manager);
    /// replicas on brokers without a channel wait for the next retry.
    pub fn stop_replicas(&self, replicas: Vec<(TopicPartition, BrokerId)>) {
        let mut per_broker: BTreeMap<BrokerId, Vec<pb::StopReplicaItem>> = BTreeMap::new();
        for (tp, b) in replicas {
            per_broker.entry(b).or_default().push(pb::StopReplicaItem {
                topic_id: tp.topic_id.to_bytes().to_vec(),
                partition: tp.partition.0,
                delete: true,
                leader_epoch: 0,
            });
        }
        for (b, items) in per_broker {
            if let Some(ch) = self.channels.get(&b) {
                enqueue(ch, Outgoing::StopReplica(items));
            }
        }
    }
}

fn enqueue(ch: &BrokerChannel, o: Outgoing) {
    if ch.tx.try_send(o).is_err() {
        // Overflow: everything queued is superseded by a full resync.
        ch.resync.store(true, Ordering::Release);
    }
}

/// Drops `UpdateMetadata` deltas queued before a later full view.
fn coalesce(batch: Vec<Outgoing>) -> Vec<Outgoing> {
    let last_full = batch
        .iter()
        .rposition(|o| matches!(o, Outgoing::UpdateMetadata { full: true, .. }));
    match last_full {
        None => batch,
        Some(k) => batch
            .into_iter()
            .enumerate()
            .filter(|(i, o)| *i >= k || !matches!(o, Outgoing::UpdateMetadata { .. }))
            .map(|(_, o)| o)
            .collect(),
    }
}

/// Splits big requests so each message stays small.
fn split(o: Outgoing) -> Vec<Outgoing> {
    match o {
        Outgoing::LeaderAndIsr(p, l) if p.len() > PARTITIONS_PER_REQUEST => p
            .chunks(PARTITIONS_PER_REQUEST)
            .map(|c| Outgoing::LeaderAndIsr(c.to_vec(), l.clone()))
            .collect(),
        Outgoing::UpdateMetadata {
            offset,
            full,
            brokers,
            partitions,
            deleted,
        } if partitions.len() > PARTITIONS_PER_REQUEST => partitions
            .chunks(PARTITIONS_PER_REQUEST)
            .enumerate()
            .map(|(i, c)| Outgoing::UpdateMetadata {
                offset,
                full: full && i == 0,
                brokers: brokers.clone(),
                partitions: Arc::new(c.to_vec()),
                deleted: if i == 0 { deleted.clone() } else { vec![] },
            })
            .collect(),
        o => vec![o],
    }
}

/// How a send ended.
enum Sent {
    /// Accepted; for StopReplica, the items the broker failed to stop.
    Ok(Vec<(Vec<u8>, u32)>),
    /// A newer controller exists: stop this channel.
    Stop(ErrorCode),
}

async fn send(
    client: &mut BrokerControlServiceClient<Channel>,
    stamp: &pb::ControllerStamp,
    o: &Outgoing,
) -> Result<Sent, tonic::Status> {
    let mut failed = Vec::new();
    let error = match o {
        Outgoing::LeaderAndIsr(partitions, leaders) => {
            client
                .leader_and_isr(pb::LeaderAndIsrRequest {
                    stamp: Some(*stamp),
                    partitions: partitions.clone(),
                    leaders: leaders.clone(),
                })
                .await?
                .into_inner()
                .error
        }
        Outgoing::UpdateMetadata {
            offset,
            full,
            brokers,
            partitions,
            deleted,
        } => {
            client
                .update_metadata(pb::UpdateMetadataRequest {
                    stamp: Some(*stamp),
                    metadata_offset: *offset,
                    full: *full,
                    brokers: brokers.clone(),
                    partitions: partitions.as_ref().clone(),
                    deleted_topic_ids: deleted.clone(),
                })
                .await?
                .into_inner()
                .error
        }
        Outgoing::StopReplica(items) => {
            let r = client
                .stop_replica(pb::StopReplicaRequest {
                    stamp: Some(*stamp),
                    partitions: items.clone(),
                })
                .await?
                .into_inner();
            failed = r
                .partitions
                .iter()
                .filter(|p| p.error.as_ref().is_some_and(|e| e.code != 0))
                .map(|p| (p.topic_id.clone(), p.partition))
                .collect();
            r.error
        }
    };
    match error.map(|e| ErrorCode::from_i32(e.code).unwrap_or(ErrorCode::Internal)) {
        None | Some(ErrorCode::None) => Ok(Sent::Ok(failed)),
        Some(code @ ErrorCode::StaleControllerEpoch) => Ok(Sent::Stop(code)),
        // The broker may not have read its registration answer yet; a newer
        // registration replaces this channel anyway, so retry.
        Some(ErrorCode::StaleBrokerEpoch) => Err(tonic::Status::unavailable(
            "broker does not hold this epoch yet",
        )),
        Some(code) => Err(tonic::Status::internal(format!("broker answered {code}"))),
    }
}

/// Hands StopReplica(delete) outcomes to the event loop, which records
/// them (DeletionSuccessful / DeletionIneligible) and removes finished topics.
async fn report_deletions(
    events: &mpsc::Sender<Command>,
    broker: BrokerId,
    items: &[pb::StopReplicaItem],
    failed: &[(Vec<u8>, u32)],
) {
    let mut per_topic: BTreeMap<TopicId, Vec<(PartitionId, BrokerId, bool)>> = BTreeMap::new();
    for it in items.iter().filter(|i| i.delete) {
        let Some(t) = TopicId::from_bytes(&it.topic_id) else {
            continue;
        };
        let ok = !failed
            .iter()
            .any(|(id, p)| *id == it.topic_id && *p == it.partition);
        per_topic
            .entry(t)
            .or_default()
            .push((PartitionId(it.partition), broker, ok));
    }
    if per_topic.is_empty() {
        return;
    }
    let cmd = Command::internal("replica_deletion_results", move |image, _| {
        let mut work = image.clone();
        let mut records = Vec::new();
        for (topic, results) in &per_topic {
            let d = work.decide_replica_deletion_results(*topic, results);
            if d.reply {
                tracing::info!(topic = %topic, "topic deletion complete");
            }
            crate::tasks::take(&mut work, &mut records, d);
        }
        Proposal::with_reply(records, Ok(()))
    });
    let _ = events.send(cmd).await;
}

/// What one per-broker task needs.
struct ChannelTask {
    shared: Arc<Shared>,
    broker: BrokerId,
    /// Stamped on every request; the broker refuses any other epoch.
    broker_epoch: BrokerEpoch,
    address: String,
    controller_epoch: u64,
    resync: Arc<AtomicBool>,
    events: mpsc::Sender<Command>,
}

async fn run_channel(task: ChannelTask, mut rx: mpsc::Receiver<Outgoing>) {
    let ChannelTask {
        shared,
        broker,
        broker_epoch,
        address,
        controller_epoch,
        resync,
        events,
    } = task;
    let stamp = pb::ControllerStamp {
        controller_id: shared.config.node_id as u32,
        controller_epoch,
        broker_epoch: broker_epoch.0,
    };
    let Ok(endpoint) = Endpoint::from_shared(format!("http://{address}")) else {
        tracing::warn!(broker = broker.0, %address, "broker address is not a valid URI; channel closed");
        return;
    };
    let endpoint = endpoint
        .connect_timeout(Duration::from_secs(1))
        // Leave from our own address, so a packet filter can cut this pair.
        .local_address(Some(shared.config.listen.ip()))
        .timeout(Duration::from_secs(10));
    let mut client = BrokerControlServiceClient::new(endpoint.connect_lazy())
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20);
    loop {
        let mut batch = Vec::new();
        if resync.swap(false, Ordering::AcqRel) {
            // Everything queued is superseded by the full state, except the
            // StopReplica requests it cannot express.
            let mut keep = Vec::new();
            while let Ok(o) = rx.try_recv() {
                if matches!(o, Outgoing::StopReplica(_)) {
                    keep.push(o);
                }
            }
            let image = shared.image();
            match tokio::task::spawn_blocking(move || full_state(&image, broker)).await {
                Ok(full) => batch.extend(full),
                Err(_) => return,
            }
            batch.extend(keep);
        } else {
            match rx.recv().await {
                Some(o) => batch.push(o),
                None => return,
            }
            while let Ok(o) = rx.try_recv() {
                batch.push(o);
            }
        }
        for o in coalesce(batch).into_iter().flat_map(split) {
            let mut backoff = Duration::from_millis(20);
            loop {
                match send(&mut client, &stamp, &o).await {
                    Ok(Sent::Ok(failed)) => {
                        if let Outgoing::StopReplica(items) = &o {
                            report_deletions(&events, broker, items, &failed).await;
                        }
                        break;
                    }
                    Ok(Sent::Stop(code)) => {
                        tracing::info!(broker = broker.0, epoch = broker_epoch.0, %code, "broker refused this channel's requests; closing it");
                        return;
                    }
                    Err(status) => {
                        tracing::debug!(broker = broker.0, error = %status.message(), "send failed; retrying");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                        if resync.load(Ordering::Acquire) {
                            break;
                        }
                    }
                }
            }
        }
    }
}
