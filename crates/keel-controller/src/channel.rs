//! The channel manager: one tokio task per broker, sending the
//! `LeaderAndIsr` / `UpdateMetadata` / `StopReplica` requests the pure
//! planner decided, with retry, backoff and reconnect.
//!
//! Owned by the active controller's event loop (no locks on its side);
//! dropped on resignation, which stops every task.
//!
//! Nothing is queued per request. Every committed plan becomes one entry of
//! a journal shared by all channels; a channel keeps only a cursor into it.
//! Whenever its broker is connected and has answered the previous round, a
//! channel takes every entry past its cursor at once, merges what they
//! change for its broker (partitions whose `LeaderAndIsr` it needs,
//! partitions, brokers and topics its metadata cache must update) and renders
//! the requests from the newest committed image: a later state supersedes an
//! earlier one, so many changes cost one round of requests. A channel that
//! was just opened (registration, unfence, failover), or fell behind the
//! journal's retained window, sends the full state instead. A channel whose
//! broker does not answer only retries its connection, with backoff, and
//! holds no memory per change.
//!
//! `StopReplica` cannot be expressed as state, so each broker's are kept
//! apart, each tagged with the journal position it follows: it goes out
//! after the changes that preceded it and before the ones that followed.

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::stream::{self, StreamExt, TryStreamExt};
use keel_metadata::planner::{BrokerRequestPlan, BrokerUpdates, ChannelAction};
use keel_metadata::{
    BrokerEpoch, BrokerId, ErrorCode, MetadataImage, PartitionId, TopicId, TopicPartition,
};
use keel_proto::backoff::Backoff;
use keel_proto::convert::{broker_to_pb, partition_to_pb};
use keel_proto::pb;
use keel_proto::pb::broker_control_service_client::BrokerControlServiceClient;
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinHandle;
use tonic::transport::{Channel, Endpoint};

use crate::active::Command;
use crate::shared::Shared;

/// Partitions per request: with common topic names an encoded request is
/// 1-2 MiB (brokers accept up to 64 MiB, for names of 249 characters).
pub const PARTITIONS_PER_REQUEST: usize = 20_000;
/// Requests of one kind in flight at once to one broker. Each carries a
/// disjoint set of partitions, so the broker may apply them in any order;
/// meanwhile the controller encodes the next and the broker decodes it.
const IN_FLIGHT: usize = 4;
/// Journal entries kept for channels that are behind; one further behind
/// sends the full state.
const JOURNAL_MAX_ENTRIES: usize = 4_096;
/// Partition and broker mentions kept in the journal, at most (the newest
/// entry is kept whatever its size).
const JOURNAL_MAX_WEIGHT: usize = 2_000_000;
/// Partitions above which a render runs on the blocking pool.
const RENDER_INLINE_MAX: usize = 2_000;
/// Retry delays after a failed request: from the first to the cap.
const SEND_BACKOFF: (Duration, Duration) = (Duration::from_millis(20), Duration::from_secs(2));
/// Retry delays after a failed connection attempt. A registered broker
/// listens before it registers, so a refused connection means it is down
/// or cut off: back off further (thousands of such channels must cost
/// little), yet serve it within the cap once it is reachable again.
const CONNECT_BACKOFF: (Duration, Duration) = (Duration::from_millis(500), Duration::from_secs(5));

/// What one committed plan changes, as every channel needs it.
#[derive(Debug)]
struct Change {
    /// Position in the journal: 1, 2, 3, ...
    seq: u64,
    /// The plan's updates (lists sorted; brokers gone from the image are
    /// dropped from every cache).
    updates: BrokerUpdates,
}

impl Change {
    /// Its share of the journal's retention budget.
    fn weight(&self) -> usize {
        let u = &self.updates;
        1 + u.changed_partitions.len()
            + u.changed_brokers.len()
            + u.deleted_topics.len()
            + u.leader_and_isr.values().map(Vec::len).sum::<usize>()
    }
}

/// The committed changes a channel may still need, oldest first.
#[derive(Debug, Default)]
struct Journal {
    changes: VecDeque<(Arc<Change>, usize)>,
    /// Sum of the kept changes' weights.
    weight: usize,
    /// Seq of the newest change ever appended (0: none).
    last_seq: u64,
}

impl Journal {
    /// Appends a change; drops the oldest ones beyond the retention limits.
    fn push(&mut self, mut c: Change) -> u64 {
        self.last_seq += 1;
        c.seq = self.last_seq;
        let w = c.weight();
        self.weight += w;
        self.changes.push_back((Arc::new(c), w));
        while self.changes.len() > 1
            && (self.changes.len() > JOURNAL_MAX_ENTRIES || self.weight > JOURNAL_MAX_WEIGHT)
        {
            if let Some((_, w)) = self.changes.pop_front() {
                self.weight -= w;
            }
        }
        self.last_seq
    }

    /// Every change after `cursor`, or `None` if some of them were dropped
    /// already (the channel must send the full state).
    fn since(&self, cursor: u64) -> Option<Vec<Arc<Change>>> {
        let first = self
            .changes
            .front()
            .map_or(self.last_seq + 1, |(c, _)| c.seq);
        if cursor + 1 < first {
            return None;
        }
        let skip = (cursor + 1 - first) as usize;
        Some(
            self.changes
                .iter()
                .skip(skip)
                .map(|(c, _)| c.clone())
                .collect(),
        )
    }
}

/// `StopReplica` items for one broker, sent once the journal changes up to
/// `after_seq` were.
#[derive(Debug)]
struct Stop {
    after_seq: u64,
    items: Vec<pb::StopReplicaItem>,
}

/// What the manager hands one channel besides the journal.
#[derive(Default)]
struct Inbox {
    stops: Mutex<Vec<Stop>>,
    /// Set when the broker must get its full state again (it was unfenced).
    resync: AtomicBool,
    /// Wakes the task when stops or a resync arrive.
    wake: Notify,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section is a plain push or drain: never inconsistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct BrokerChannel {
    /// The registration the task stamps its requests with, and its address.
    broker_epoch: BrokerEpoch,
    address: String,
    inbox: Arc<Inbox>,
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
    journal: Arc<Mutex<Journal>>,
    /// Seq of the newest journal entry: wakes idle channels.
    latest: watch::Sender<u64>,
    gate: Arc<LeadershipFirst>,
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
            journal: Arc::new(Mutex::new(Journal::default())),
            latest: watch::Sender::new(0),
            gate: Arc::default(),
        };
        let ids: Vec<BrokerId> = image.brokers().map(|b| b.id).collect();
        for b in ids {
            m.open(image, b);
        }
        m
    }

    fn open(&mut self, image: &MetadataImage, broker: BrokerId) {
        let Some(reg) = image.broker(broker) else {
            self.channels.remove(&broker);
            return;
        };
        if let Some(ch) = self.channels.get(&broker) {
            if ch.broker_epoch == reg.epoch && ch.address == reg.address && !ch.task.is_finished() {
                // Same registration (an unfence): the running task sends the
                // full state again, keeping its connection (or its backoff).
                ch.inbox.resync.store(true, Ordering::Release);
                ch.inbox.wake.notify_one();
                return;
            }
        }
        self.channels.remove(&broker);
        let inbox = Arc::new(Inbox::default());
        // The task builds the full state itself (off the event loop, from
        // the newest image) once connected: activation and registration
        // stay O(1) here whatever the metadata size.
        let task = tokio::spawn(
            ChannelTask {
                shared: self.shared.clone(),
                broker,
                broker_epoch: reg.epoch,
                address: reg.address.clone(),
                controller_epoch: self.epoch,
                events: self.events.clone(),
                journal: self.journal.clone(),
                latest: self.latest.subscribe(),
                gate: self.gate.clone(),
                inbox: inbox.clone(),
                needs_full: true,
                cursor: 0,
                stops: VecDeque::new(),
            }
            .run(),
        );
        self.channels.insert(
            broker,
            BrokerChannel {
                broker_epoch: reg.epoch,
                address: reg.address.clone(),
                inbox,
                task,
            },
        );
    }

    /// Number of open channels.
    pub fn len(&self) -> usize {
        self.channels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.channels.is_empty()
    }

    /// Hands `plan` to the channels. `image` (the applied image, holding the
    /// plan's records) names the brokers to open channels to;
    /// the requests themselves are rendered by each channel from the newest
    /// applied image when it sends.
    pub fn apply(&mut self, plan: BrokerRequestPlan, image: &MetadataImage) {
        let BrokerRequestPlan {
            channels,
            mut updates,
            stop_replica,
        } = plan;
        for (b, action) in &channels {
            match action {
                ChannelAction::Close => {
                    self.channels.remove(b);
                }
                ChannelAction::OpenWithFullState => self.open(image, *b),
            }
        }
        // Moved, not copied: a broker failure's plan lists 100,000 partitions.
        updates
            .leader_and_isr
            .retain(|b, _| self.channels.contains_key(b));
        if !updates.is_empty() {
            let seq = lock(&self.journal).push(Change { seq: 0, updates });
            tracing::trace!(seq, "broker request plan journaled");
            self.latest.send_replace(seq);
        }
        for (b, tps) in stop_replica {
            self.stop(
                b,
                tps.iter()
                    .map(|tp| stop_item(tp.topic_id, tp.partition))
                    .collect(),
            );
        }
    }

    /// Queues `StopReplica(delete)` for these replicas (deletion manager);
    /// replicas on brokers without a channel wait for the next retry.
    pub fn stop_replicas(&self, replicas: Vec<(TopicPartition, BrokerId)>) {
        let mut per_broker: BTreeMap<BrokerId, Vec<pb::StopReplicaItem>> = BTreeMap::new();
        for (tp, b) in replicas {
            per_broker
                .entry(b)
                .or_default()
                .push(stop_item(tp.topic_id, tp.partition));
        }
        for (b, items) in per_broker {
            self.stop(b, items);
        }
    }

    fn stop(&self, broker: BrokerId, items: Vec<pb::StopReplicaItem>) {
        let Some(ch) = self.channels.get(&broker) else {
            return;
        };
        let after_seq = lock(&self.journal).last_seq;
        lock(&ch.inbox.stops).push(Stop { after_seq, items });
        ch.inbox.wake.notify_one();
    }
}

fn stop_item(topic_id: TopicId, partition: PartitionId) -> pb::StopReplicaItem {
    pb::StopReplicaItem {
        topic_id: topic_id.to_bytes().to_vec(),
        partition: partition.0,
        delete: true,
        leader_epoch: 0,
    }
}

// ---- rendering --------------------------------------------------------------

/// The states of `tps` in `image`. A partition that is gone was deleted
/// with its topic, which the cache learns from `deleted_topic_ids` (in this
/// round or a later one).
fn partition_states(image: &MetadataImage, tps: &[TopicPartition]) -> Vec<pb::PartitionState> {
    let mut out = Vec::with_capacity(tps.len());
    // The list is sorted: look each topic's name up once.
    let mut topic: Option<(TopicId, &str)> = None;
    for tp in tps {
        let Some(p) = image.partition(tp) else {
            continue;
        };
        let name = match topic {
            Some((id, name)) if id == tp.topic_id => name,
            _ => {
                let name = image
                    .topic(tp.topic_id)
                    .map(|t| t.name.as_str())
                    .unwrap_or("");
                topic = Some((tp.topic_id, name));
                name
            }
        };
        out.push(partition_to_pb(name, tp, p));
    }
    out
}

/// The brokers leading any of `states` (followers connect to them).
fn leaders_of(image: &MetadataImage, states: &[pb::PartitionState]) -> Vec<pb::BrokerInfo> {
    let ids: BTreeSet<u32> = states.iter().filter_map(|s| s.leader).collect();
    ids.into_iter()
        .filter_map(|id| image.broker(BrokerId(id)))
        .map(broker_to_pb)
        .collect()
}

/// What the first `UpdateMetadata` of a view carries besides partitions.
#[derive(Clone, Debug, Default)]
struct MetadataHead {
    brokers: Vec<pb::BrokerInfo>,
    removed_broker_ids: Vec<u32>,
    deleted_topic_ids: Vec<Vec<u8>>,
}

/// Request `index` of the `count` a view of the cache is split into: only
/// the first replaces the cache (for a full view) and carries `head`, only
/// the last names the offset.
fn update_metadata_request(
    stamp: pb::ControllerStamp,
    offset: u64,
    full: bool,
    (index, count): (usize, usize),
    partitions: Vec<pb::PartitionState>,
    head: MetadataHead,
) -> pb::UpdateMetadataRequest {
    pb::UpdateMetadataRequest {
        stamp: Some(stamp),
        metadata_offset: if index + 1 == count { offset } else { 0 },
        full: full && index == 0,
        brokers: head.brokers,
        partitions,
        deleted_topic_ids: head.deleted_topic_ids,
        removed_broker_ids: head.removed_broker_ids,
    }
}

/// One round of requests to one broker, as partition lists: each request
/// is rendered from `image` just before it is sent, while earlier ones are
/// on the wire.
#[derive(Debug)]
struct Round {
    /// The newest applied image when the round began.
    image: MetadataImage,
    /// A full state: the first `UpdateMetadata` replaces the whole cache,
    /// and the metadata goes first (a registering broker is unfenced once
    /// its cache caught up). A delta sends leadership first (as the classic
    /// controller did): replicas act on it; the caches follow.
    full: bool,
    leader_and_isr: Vec<TopicPartition>,
    /// Whether an `UpdateMetadata` is due at all.
    metadata_due: bool,
    metadata: Vec<TopicPartition>,
    head: MetadataHead,
}

impl Round {
    /// The full state of one broker: every broker and partition for its
    /// cache, and `LeaderAndIsr` for every partition it hosts.
    fn full(image: MetadataImage, broker: BrokerId) -> Self {
        let mut hosted = Vec::new();
        let all: Vec<TopicPartition> = image
            .partitions()
            .map(|(tp, p)| {
                if p.replicas.contains(&broker) {
                    hosted.push(*tp);
                }
                *tp
            })
            .collect();
        let brokers = image.brokers().map(broker_to_pb).collect();
        Self {
            image,
            full: true,
            leader_and_isr: hosted,
            metadata_due: true,
            metadata: all,
            head: MetadataHead {
                brokers,
                ..MetadataHead::default()
            },
        }
    }

    /// What `changes` mean for `broker`, to be rendered from `image` (at
    /// least as new as every one of them).
    fn of_changes(image: MetadataImage, broker: BrokerId, changes: &[Arc<Change>]) -> Self {
        let mut lai: Vec<TopicPartition> = Vec::new();
        let mut parts: Vec<TopicPartition> = Vec::new();
        let mut brokers: BTreeSet<BrokerId> = BTreeSet::new();
        let mut deleted: BTreeSet<TopicId> = BTreeSet::new();
        for c in changes {
            let u = &c.updates;
            if let Some(tps) = u.leader_and_isr.get(&broker) {
                lai.extend_from_slice(tps);
            }
            parts.extend_from_slice(&u.changed_partitions);
            brokers.extend(u.changed_brokers.iter().copied());
            deleted.extend(u.deleted_topics.iter().copied());
        }
        if changes.len() > 1 {
            // Each list is sorted; their concatenation may repeat partitions.
            lai.sort_unstable();
            lai.dedup();
            parts.sort_unstable();
            parts.dedup();
        }
        let metadata_due = !parts.is_empty() || !brokers.is_empty() || !deleted.is_empty();
        let mut head = MetadataHead {
            deleted_topic_ids: deleted.iter().map(|t| t.to_bytes().to_vec()).collect(),
            ..MetadataHead::default()
        };
        for b in brokers {
            match image.broker(b) {
                Some(r) => head.brokers.push(broker_to_pb(r)),
                None => head.removed_broker_ids.push(b.0),
            }
        }
        Self {
            image,
            full: false,
            leader_and_isr: lai,
            metadata_due,
            metadata: parts,
            head,
        }
    }
}

/// Runs `f` inline when it handles few partitions, else on the blocking
/// pool: a 100,000-partition job must not hold up a runtime worker.
async fn off_loop<T, F>(size: usize, f: F) -> Result<T, Failed>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    if size <= RENDER_INLINE_MAX {
        Ok(f())
    } else {
        tokio::task::spawn_blocking(f)
            .await
            .map_err(|e| Failed::Retry(format!("render task failed: {e}")))
    }
}

fn chunks_of(tps: Vec<TopicPartition>) -> Vec<Vec<TopicPartition>> {
    tps.chunks(PARTITIONS_PER_REQUEST)
        .map(<[TopicPartition]>::to_vec)
        .collect()
}

/// A `StopReplica` item is moot when its replica is assigned again in
/// `image` (it was reassigned away and back) and the topic is not being
/// deleted: the `LeaderAndIsr` that re-added it must not be undone.
fn stop_still_wanted(image: &MetadataImage, broker: BrokerId, it: &pb::StopReplicaItem) -> bool {
    let Some(topic) = TopicId::from_bytes(&it.topic_id) else {
        return true;
    };
    let tp = TopicPartition::new(topic, it.partition);
    let reassigned_back = image
        .partition(&tp)
        .is_some_and(|p| p.replicas.contains(&broker));
    let deleting = image.topic(topic).is_some_and(|t| t.marked_for_deletion());
    !reassigned_back || deleting
}

// ---- sending ------------------------------------------------------------------

/// Why a round stopped short.
#[derive(Debug)]
enum Failed {
    /// A newer controller exists, or the broker refuses this channel for
    /// good: close it.
    Closed(ErrorCode),
    /// The broker answered with an error: retry later.
    Retry(String),
    /// The call failed on the way: reconnect, then retry.
    Transport(String),
}

impl From<tonic::Status> for Failed {
    fn from(s: tonic::Status) -> Self {
        Failed::Transport(s.message().to_string())
    }
}

/// Maps a request-level error answer.
fn check(error: Option<pb::Error>) -> Result<(), Failed> {
    match error.map(|e| ErrorCode::from_i32(e.code).unwrap_or(ErrorCode::Internal)) {
        None | Some(ErrorCode::None) => Ok(()),
        Some(code @ ErrorCode::StaleControllerEpoch) => Err(Failed::Closed(code)),
        // The broker may not have read its registration answer yet; a newer
        // registration replaces this channel anyway, so retry.
        Some(ErrorCode::StaleBrokerEpoch) => Err(Failed::Retry(
            "broker does not hold this epoch yet".to_string(),
        )),
        Some(code) => Err(Failed::Retry(format!("broker answered {code}"))),
    }
}

type Client = BrokerControlServiceClient<Channel>;

/// Renders requests one at a time (each on the blocking pool when large)
/// while up to [`IN_FLIGHT`] rendered ones are on the wire; all must succeed.
async fn render_and_send<Req, R, S, Fut>(
    renders: impl IntoIterator<Item = (usize, R)>,
    send: S,
) -> Result<(), Failed>
where
    Req: Send + 'static,
    R: FnOnce() -> Req + Send + 'static,
    S: Fn(Req) -> Fut,
    Fut: Future<Output = Result<(), Failed>>,
{
    stream::iter(renders)
        .then(|(size, render)| off_loop(size, render))
        .map_ok(send)
        .try_buffer_unordered(IN_FLIGHT)
        .try_for_each(|()| async { Ok(()) })
        .await
}

/// `LeaderAndIsr` for `tps`, split into requests of disjoint partitions
/// sent concurrently.
async fn send_leader_and_isr(
    client: &Client,
    image: &MetadataImage,
    stamp: pb::ControllerStamp,
    tps: Vec<TopicPartition>,
) -> Result<(), Failed> {
    let renders = chunks_of(tps).into_iter().map(|chunk| {
        let image = image.clone();
        (chunk.len(), move || {
            let partitions = partition_states(&image, &chunk);
            pb::LeaderAndIsrRequest {
                stamp: Some(stamp),
                leaders: leaders_of(&image, &partitions),
                partitions,
            }
        })
    });
    render_and_send(renders, |req| {
        let mut c = client.clone();
        async move { check(c.leader_and_isr(req).await?.into_inner().error) }
    })
    .await
}

/// One view of the cache: the first request alone when it replaces the
/// cache, the middle ones concurrently, the last (naming the offset) alone
/// once all others were applied.
async fn send_update_metadata(
    client: &Client,
    image: &MetadataImage,
    stamp: pb::ControllerStamp,
    full: bool,
    tps: Vec<TopicPartition>,
    head: MetadataHead,
) -> Result<(), Failed> {
    let mut chunks = chunks_of(tps);
    if chunks.is_empty() {
        chunks.push(Vec::new());
    }
    let count = chunks.len();
    let offset = image.offset();
    let mut head = Some(head);
    let mut renders: VecDeque<_> = chunks
        .into_iter()
        .enumerate()
        .map(|(index, chunk)| {
            let image = image.clone();
            let head = head.take().unwrap_or_default();
            (chunk.len(), move || {
                let partitions = partition_states(&image, &chunk);
                update_metadata_request(stamp, offset, full, (index, count), partitions, head)
            })
        })
        .collect();
    let send = |req: pb::UpdateMetadataRequest| {
        let mut c = client.clone();
        async move { check(c.update_metadata(req).await?.into_inner().error) }
    };
    let last = renders.pop_back();
    if full {
        if let Some(first) = renders.pop_front() {
            render_and_send([first], send).await?;
        }
    }
    render_and_send(renders, send).await?;
    render_and_send(last, send).await
}

/// Lets every channel's `LeaderAndIsr` go out before any channel's
/// `UpdateMetadata` delta: when a broker fails, leadership moves on every
/// survivor first, and the caches follow: rendering and applying 100,000
/// cache entries takes CPU from the controller and the brokers while clients
/// still wait for leaders. The wait is bounded, so a steady stream of
/// leadership changes cannot starve the caches.
#[derive(Debug, Default)]
struct LeadershipFirst {
    /// Channels with `LeaderAndIsr` requests being rendered or in flight.
    sending: AtomicUsize,
    /// Signalled whenever `sending` drops to zero.
    idle: Notify,
}

/// Longest a cache update waits for other channels' leadership requests.
const LEADERSHIP_FIRST_MAX_WAIT: Duration = Duration::from_secs(1);

impl LeadershipFirst {
    fn begin(self: &Arc<Self>) -> LeadershipGuard {
        self.sending.fetch_add(1, Ordering::AcqRel);
        LeadershipGuard(self.clone())
    }

    async fn wait_idle(&self) {
        let deadline = tokio::time::Instant::now() + LEADERSHIP_FIRST_MAX_WAIT;
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            // Registered before the check: a wake-up in between is not lost.
            idle.as_mut().enable();
            if self.sending.load(Ordering::Acquire) == 0 {
                return;
            }
            tokio::select! {
                _ = idle => {}
                _ = tokio::time::sleep_until(deadline) => return,
            }
        }
    }
}

/// One channel's share of [`LeadershipFirst::sending`], given back on drop.
struct LeadershipGuard(Arc<LeadershipFirst>);

impl Drop for LeadershipGuard {
    fn drop(&mut self) {
        if self.0.sending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// Sends a round in its order.
async fn send_round(
    client: &Client,
    stamp: pb::ControllerStamp,
    r: Round,
    gate: &Arc<LeadershipFirst>,
) -> Result<(), Failed> {
    let Round {
        image,
        full,
        leader_and_isr,
        metadata_due,
        metadata,
        head,
    } = r;
    if full {
        send_update_metadata(client, &image, stamp, true, metadata, head).await?;
        return send_leader_and_isr(client, &image, stamp, leader_and_isr).await;
    }
    if !leader_and_isr.is_empty() {
        let _sending = gate.begin();
        send_leader_and_isr(client, &image, stamp, leader_and_isr).await?;
    }
    if metadata_due {
        gate.wait_idle().await;
        send_update_metadata(client, &image, stamp, false, metadata, head).await?;
    }
    Ok(())
}

/// Hands StopReplica(delete) outcomes to the event loop, which records
/// them (DeletionSuccessful / DeletionIneligible) and removes finished topics.
async fn report_deletions(
    events: &mpsc::Sender<Command>,
    broker: BrokerId,
    items: &[pb::StopReplicaItem],
    failed: &[(Vec<u8>, u32)],
) {
    let failed: HashSet<(&[u8], u32)> = failed.iter().map(|(id, p)| (id.as_slice(), *p)).collect();
    let mut per_topic: BTreeMap<TopicId, Vec<(PartitionId, BrokerId, bool)>> = BTreeMap::new();
    for it in items.iter().filter(|i| i.delete) {
        let Some(t) = TopicId::from_bytes(&it.topic_id) else {
            continue;
        };
        let ok = !failed.contains(&(it.topic_id.as_slice(), it.partition));
        per_topic
            .entry(t)
            .or_default()
            .push((PartitionId(it.partition), broker, ok));
    }
    if per_topic.is_empty() {
        return;
    }
    let cmd = Command::internal("replica_deletion_results", move |image, _| {
        let mut chain = crate::tasks::Chain::new(image);
        for (topic, results) in &per_topic {
            let done = chain.decide(|image| image.decide_replica_deletion_results(*topic, results));
            if done {
                tracing::info!(topic = %topic, "topic deletion complete");
            }
        }
        chain.proposal(Ok(()))
    });
    let _ = events.send(cmd).await;
}

/// One per-broker task and everything it owns.
struct ChannelTask {
    shared: Arc<Shared>,
    broker: BrokerId,
    /// Stamped on every request; the broker refuses any other epoch.
    broker_epoch: BrokerEpoch,
    address: String,
    controller_epoch: u64,
    events: mpsc::Sender<Command>,
    journal: Arc<Mutex<Journal>>,
    latest: watch::Receiver<u64>,
    gate: Arc<LeadershipFirst>,
    inbox: Arc<Inbox>,
    /// The next round sends the full state (new channel, or fell behind).
    needs_full: bool,
    /// Seq of the newest journal change this broker has been sent.
    cursor: u64,
    /// Stops taken from the inbox, oldest first, not yet sent.
    stops: VecDeque<Stop>,
}

impl ChannelTask {
    fn stamp(&self) -> pb::ControllerStamp {
        pb::ControllerStamp {
            controller_id: self.shared.config.node_id as u32,
            controller_epoch: self.controller_epoch,
            broker_epoch: self.broker_epoch.0,
        }
    }

    async fn run(mut self) {
        let Ok(endpoint) = Endpoint::from_shared(format!("http://{}", self.address)) else {
            tracing::warn!(broker = self.broker.0, address = %self.address, "broker address is not a valid URI; channel closed");
            return;
        };
        let endpoint = endpoint
            .connect_timeout(Duration::from_secs(1))
            // Leave from our own address, so a packet filter can cut this pair.
            .local_address(Some(self.shared.config.listen.ip()))
            .tcp_nodelay(true)
            .timeout(Duration::from_secs(10));
        let mut backoff = Backoff::new(SEND_BACKOFF.0, SEND_BACKOFF.1);
        let mut reconnect = Backoff::new(CONNECT_BACKOFF.0, CONNECT_BACKOFF.1);
        let mut client: Option<Client> = None;
        loop {
            let c = match &client {
                Some(c) => c.clone(),
                None => match endpoint.connect().await {
                    Ok(ch) => {
                        reconnect.reset();
                        let c = BrokerControlServiceClient::new(ch)
                            .max_decoding_message_size(64 << 20)
                            .max_encoding_message_size(64 << 20);
                        client = Some(c.clone());
                        c
                    }
                    Err(e) => {
                        tracing::debug!(broker = self.broker.0, error = %e, "cannot connect; retrying");
                        // A resync (unfence) or a stop retries at once.
                        tokio::select! {
                            _ = tokio::time::sleep(reconnect.step()) => {}
                            _ = self.inbox.wake.notified() => {}
                        }
                        continue;
                    }
                },
            };
            match self.round(&c).await {
                Ok(true) => backoff.reset(),
                Ok(false) => {
                    backoff.reset();
                    self.wait().await;
                }
                Err(Failed::Closed(code)) => {
                    tracing::info!(broker = self.broker.0, epoch = self.broker_epoch.0, %code, "broker refused this channel's requests; closing it");
                    return;
                }
                Err(Failed::Retry(why)) => {
                    tracing::debug!(broker = self.broker.0, error = %why, "broker refused a request; retrying");
                    tokio::time::sleep(backoff.step()).await;
                }
                Err(Failed::Transport(why)) => {
                    tracing::debug!(broker = self.broker.0, error = %why, "send failed; reconnecting");
                    // Reconnect from scratch: a dead connection costs one
                    // attempt per backoff step, and no rendering.
                    client = None;
                    tokio::time::sleep(backoff.step()).await;
                }
            }
        }
    }

    /// Waits for a journal change or a stop.
    async fn wait(&mut self) {
        tokio::select! {
            r = self.latest.changed() => {
                if r.is_err() {
                    // The manager is gone; the task is about to be aborted.
                    std::future::pending::<()>().await;
                }
            }
            _ = self.inbox.wake.notified() => {}
        }
    }

    /// Sends what is pending; Ok(false) if there was nothing.
    async fn round(&mut self, client: &Client) -> Result<bool, Failed> {
        self.stops.extend(lock(&self.inbox.stops).drain(..));
        if self.inbox.resync.swap(false, Ordering::AcqRel) {
            self.needs_full = true;
        }
        // Mark the current journal seq as seen before reading the journal:
        // a change appended after this is noticed by `wait`.
        self.latest.borrow_and_update();
        if self.needs_full {
            self.send_full(client).await?;
            self.send_due_stops(client, None).await?;
            return Ok(true);
        }
        let Some(changes) = lock(&self.journal).since(self.cursor) else {
            metrics::counter!("keel_controller_channel_resyncs_total").increment(1);
            tracing::debug!(
                broker = self.broker.0,
                "channel fell behind the journal; sending the full state"
            );
            self.needs_full = true;
            return Ok(true);
        };
        if changes.is_empty() && self.stops.is_empty() {
            return Ok(false);
        }
        let image = self.shared.image();
        let mut rest = changes.as_slice();
        loop {
            // Changes up to the next stop go first, then that stop.
            let bound = self.stops.front().map_or(u64::MAX, |s| s.after_seq);
            let n = rest.iter().take_while(|c| c.seq <= bound).count();
            let (now, later) = rest.split_at(n);
            if let Some(last) = now.last() {
                let seq = last.seq;
                let size: usize = now
                    .iter()
                    .map(|c| {
                        let u = &c.updates;
                        u.changed_partitions.len()
                            + u.leader_and_isr.get(&self.broker).map_or(0, Vec::len)
                    })
                    .sum();
                let (img, broker, part) = (image.clone(), self.broker, now.to_vec());
                let round = off_loop(size, move || Round::of_changes(img, broker, &part)).await?;
                send_round(client, self.stamp(), round, &self.gate).await?;
                self.cursor = seq;
            }
            rest = later;
            if self
                .stops
                .front()
                .is_some_and(|s| s.after_seq <= self.cursor)
            {
                self.send_due_stops(client, Some(&image)).await?;
            } else {
                break;
            }
        }
        Ok(true)
    }

    /// Sends the full state from the newest image; the cursor moves to the
    /// journal's end as it was before that image was read.
    async fn send_full(&mut self, client: &Client) -> Result<(), Failed> {
        let upto = lock(&self.journal).last_seq;
        let image = self.shared.image();
        let broker = self.broker;
        let round = off_loop(image.partition_count(), move || Round::full(image, broker)).await?;
        send_round(client, self.stamp(), round, &self.gate).await?;
        self.needs_full = false;
        self.cursor = upto;
        Ok(())
    }

    /// Sends the stops whose preceding changes were sent (all of them after
    /// a full state); moot items are left out (see [`stop_still_wanted`]).
    async fn send_due_stops(
        &mut self,
        client: &Client,
        image: Option<&MetadataImage>,
    ) -> Result<(), Failed> {
        let image = match image {
            Some(i) => i.clone(),
            None => self.shared.image(),
        };
        while let Some(s) = self.stops.front() {
            if s.after_seq > self.cursor {
                break;
            }
            let items: Vec<pb::StopReplicaItem> = s
                .items
                .iter()
                .filter(|it| stop_still_wanted(&image, self.broker, it))
                .cloned()
                .collect();
            if !items.is_empty() {
                let mut c = client.clone();
                let r = c
                    .stop_replica(pb::StopReplicaRequest {
                        stamp: Some(self.stamp()),
                        partitions: items.clone(),
                    })
                    .await?
                    .into_inner();
                check(r.error)?;
                let failed: Vec<(Vec<u8>, u32)> = r
                    .partitions
                    .iter()
                    .filter(|p| p.error.as_ref().is_some_and(|e| e.code != 0))
                    .map(|p| (p.topic_id.clone(), p.partition))
                    .collect();
                report_deletions(&self.events, self.broker, &items, &failed).await;
            }
            self.stops.pop_front();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(partitions: usize) -> Change {
        Change {
            seq: 0,
            updates: BrokerUpdates {
                changed_partitions: (0..partitions as u32)
                    .map(|p| TopicPartition::new(TopicId(1), p))
                    .collect(),
                ..Default::default()
            },
        }
    }

    #[test]
    fn a_channel_gets_every_change_after_its_cursor_in_order() {
        let mut j = Journal::default();
        assert_eq!(j.since(0).map(|v| v.len()), Some(0));
        for _ in 0..3 {
            j.push(change(1));
        }
        let seqs =
            |v: Option<Vec<Arc<Change>>>| v.map(|v| v.iter().map(|c| c.seq).collect::<Vec<_>>());
        assert_eq!(seqs(j.since(0)), Some(vec![1, 2, 3]));
        assert_eq!(seqs(j.since(2)), Some(vec![3]));
        assert_eq!(seqs(j.since(3)), Some(vec![]));
    }

    #[test]
    fn a_channel_behind_the_retained_window_must_resync() {
        let mut j = Journal::default();
        for _ in 0..JOURNAL_MAX_ENTRIES + 10 {
            j.push(change(0));
        }
        assert_eq!(j.changes.len(), JOURNAL_MAX_ENTRIES);
        assert!(j.since(0).is_none());
        assert!(j.since(9).is_none());
        assert_eq!(j.since(10).map(|v| v.len()), Some(JOURNAL_MAX_ENTRIES));
        // One huge change is kept alone, whatever its size.
        j.push(change(JOURNAL_MAX_WEIGHT + 1));
        assert_eq!(j.changes.len(), 1);
        assert!(j.since(j.last_seq - 2).is_none());
        assert_eq!(j.since(j.last_seq - 1).map(|v| v.len()), Some(1));
    }

    #[test]
    fn a_split_view_replaces_the_cache_first_and_names_its_offset_last() {
        let stamp = pb::ControllerStamp::default();
        let head = MetadataHead {
            brokers: vec![pb::BrokerInfo::default()],
            removed_broker_ids: vec![7],
            deleted_topic_ids: vec![vec![1; 16]],
        };
        let reqs: Vec<pb::UpdateMetadataRequest> = (0..3)
            .map(|i| {
                let head = if i == 0 {
                    head.clone()
                } else {
                    MetadataHead::default()
                };
                update_metadata_request(stamp, 42, true, (i, 3), vec![], head)
            })
            .collect();
        assert!(reqs[0].full && !reqs[1].full && !reqs[2].full);
        assert_eq!(
            reqs.iter().map(|r| r.metadata_offset).collect::<Vec<_>>(),
            vec![0, 0, 42]
        );
        assert_eq!(reqs[0].removed_broker_ids, vec![7]);
        // A view in one request has everything.
        let one = update_metadata_request(stamp, 9, false, (0, 1), vec![], head);
        assert_eq!(one.metadata_offset, 9);
        assert!(!one.full);
        assert_eq!(one.brokers.len(), 1);
    }

    #[test]
    fn a_stop_is_moot_once_its_replica_is_assigned_again_unless_the_topic_goes() {
        use keel_metadata::records::{PartitionRecord, RegisterBrokerRecord, TopicRecord};
        use keel_metadata::MetadataRecord as R;
        let mut image = MetadataImage::new();
        let t = TopicId(3);
        let mut recs: Vec<R> = (1..=2)
            .map(|b| {
                R::RegisterBroker(RegisterBrokerRecord {
                    broker: BrokerId(b),
                    incarnation: keel_metadata::IncarnationId(u128::from(b)),
                    address: format!("127.0.0.1:{b}"),
                    rack: None,
                    log_dirs: vec![],
                })
            })
            .collect();
        recs.push(R::UnfenceBroker {
            broker: BrokerId(1),
            epoch: keel_metadata::BrokerEpoch(1),
        });
        recs.push(R::Topic(TopicRecord {
            topic_id: t,
            name: "t".into(),
            configs: Default::default(),
        }));
        recs.push(R::Partition(PartitionRecord {
            topic_id: t,
            partition: PartitionId(0),
            replicas: vec![BrokerId(1)],
            isr: vec![BrokerId(1)],
            leader: Some(BrokerId(1)),
        }));
        for (i, r) in recs.iter().enumerate() {
            image.replay(r, i as u64 + 1).unwrap();
        }
        let item = stop_item(t, PartitionId(0));
        // Broker 2 holds no replica: the stop stands.
        assert!(stop_still_wanted(&image, BrokerId(2), &item));
        // Broker 1 was assigned (again): the stop is moot...
        assert!(!stop_still_wanted(&image, BrokerId(1), &item));
        // ...unless the topic is being deleted.
        image
            .replay(&R::MarkTopicForDeletion { topic_id: t }, 9)
            .unwrap();
        assert!(stop_still_wanted(&image, BrokerId(1), &item));
        // A malformed item is sent as it is (the broker refuses it).
        let bad = pb::StopReplicaItem {
            topic_id: vec![1],
            ..item
        };
        assert!(stop_still_wanted(&image, BrokerId(1), &bad));
    }

    #[test]
    fn a_round_merges_the_changes_for_its_broker() {
        let mut image = MetadataImage::new();
        image
            .replay(
                &keel_metadata::MetadataRecord::RegisterBroker(
                    keel_metadata::records::RegisterBrokerRecord {
                        broker: BrokerId(1),
                        incarnation: keel_metadata::IncarnationId(1),
                        address: "127.0.0.1:1".into(),
                        rack: None,
                        log_dirs: vec![],
                    },
                ),
                1,
            )
            .unwrap();
        let tp = |p: u32| TopicPartition::new(TopicId(1), p);
        let mut a = change(2);
        a.updates.leader_and_isr.insert(BrokerId(1), vec![tp(0)]);
        a.updates.leader_and_isr.insert(BrokerId(2), vec![tp(1)]);
        let mut b = change(1);
        b.updates.leader_and_isr.insert(BrokerId(1), vec![tp(0)]);
        b.updates.changed_brokers = [BrokerId(1), BrokerId(9)].into();
        b.updates.deleted_topics = [TopicId(5)].into();
        let r = Round::of_changes(image, BrokerId(1), &[Arc::new(a), Arc::new(b)]);
        assert!(!r.full && r.metadata_due);
        assert_eq!(r.leader_and_isr, vec![tp(0)]);
        assert_eq!(r.metadata, vec![tp(0), tp(1)]);
        // Broker 9 is not in the image: caches drop it.
        assert_eq!(r.head.brokers.len(), 1);
        assert_eq!(r.head.removed_broker_ids, vec![9]);
        assert_eq!(
            r.head.deleted_topic_ids,
            vec![TopicId(5).to_bytes().to_vec()]
        );
    }
}
