//! The channel manager: one tokio task per broker, sending the
//! `LeaderAndIsr` / `UpdateMetadata` / `StopReplica` requests the pure
//! planner decided, with retry, backoff and reconnect.
//!
//! Owned by the active controller's event loop (no locks on its side);
//! dropped on resignation, which stops every task.
//!
//! Nothing is queued per request. Every committed plan becomes one entry of
//! the [`Journal`] shared by all channels; a channel keeps only a cursor into
//! it. Whenever its broker is connected and has answered the previous round,
//! a channel takes every entry past its cursor at once; the planner merges
//! what they change for its broker into one [`BrokerRound`], and the requests
//! are rendered ([`keel_proto::render`]) from the newest committed image: a
//! later state supersedes an earlier one, so many changes cost one round of
//! requests. A channel that was just opened (registration, unfence,
//! failover), or fell behind the journal's retained window, sends the full
//! state instead. A channel whose broker does not answer only retries its
//! connection, with backoff, and holds no memory per change.
//!
//! A request not answered within [`REQUEST_TIMEOUT`] (a stopped or hung
//! broker) fails the connection like any transport error: the channel
//! drops it and reconnects with backoff; HTTP/2 PINGs find a dead
//! connection while idle. Each connection the broker answers on and each
//! drop of one are counted (`keel_controller_channel_connects_total` and
//! `keel_controller_channel_disconnects_total`, per broker); a working
//! channel losing its broker, and getting it back, is logged once each.
//!
//! `StopReplica` cannot be expressed as state, so each broker's are kept
//! apart, each tagged with the journal position it follows: it goes out
//! after the changes that preceded it and before the ones that followed.
//! Their outcomes go back to the event loop as [`DeletionReport`]s.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::stream::{self, StreamExt, TryStreamExt};
use keel_metadata::planner::{self, BrokerRequestPlan, BrokerRound, ChannelAction};
use keel_metadata::{
    BrokerEpoch, BrokerId, ControllerEpoch, ControllerStamp, ErrorCode, MetadataImage, PartitionId,
    TopicId, TopicPartition,
};
use keel_proto::backoff::Backoff;
use keel_proto::pb;
use keel_proto::pb::broker_control_service_client::BrokerControlServiceClient;
use keel_proto::render::{self, MetadataHead};
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinHandle;
use tonic::codegen::http;
use tonic::transport::Channel;

use crate::journal::{Change, Journal};
use crate::shared::Shared;

/// Requests of one kind in flight at once to one broker. Each carries a
/// disjoint set of partitions, so the broker may apply them in any order;
/// meanwhile the controller encodes the next and the broker decodes it.
const IN_FLIGHT: usize = 4;
/// Partitions above which planning or rendering runs on the blocking pool.
const RENDER_INLINE_MAX: usize = 2_000;
/// Retry delays after a failed request: from the first to the cap.
const SEND_BACKOFF: (Duration, Duration) = (Duration::from_millis(20), Duration::from_secs(2));
/// Bound of a connection attempt (TCP, and the TLS handshake).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// A request to a broker not answered within this fails its connection.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Retry delays after a failed connection attempt. A registered broker
/// listens before it registers, so a refused connection means it is down
/// or cut off: back off further (thousands of such channels must cost
/// little), yet serve it within the cap once it is reachable again.
const CONNECT_BACKOFF: (Duration, Duration) = (Duration::from_millis(500), Duration::from_secs(5));

/// What one broker answered to a `StopReplica(delete)`: per topic, each
/// partition with whether its replica was deleted. The event loop records
/// it (DeletionSuccessful / DeletionIneligible).
#[derive(Debug)]
pub struct DeletionReport {
    pub broker: BrokerId,
    pub results: BTreeMap<TopicId, Vec<(PartitionId, BrokerId, bool)>>,
}

/// `StopReplica(delete)` of these partitions on one broker, sent once the
/// journal changes up to `after_seq` were.
#[derive(Debug)]
struct Stop {
    after_seq: u64,
    partitions: Vec<TopicPartition>,
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
    /// Where StopReplica(delete) outcomes go (the event loop).
    reports: mpsc::Sender<DeletionReport>,
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
        reports: mpsc::Sender<DeletionReport>,
    ) -> Self {
        let mut m = Self {
            shared,
            reports,
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
                address: reg.address.clone(),
                stamp: ControllerStamp {
                    controller_id: self.shared.config.node_id as u32,
                    controller_epoch: ControllerEpoch(self.epoch),
                    broker_epoch: reg.epoch,
                },
                reports: self.reports.clone(),
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
            let seq = lock(&self.journal).push(updates);
            tracing::trace!(seq, "broker request plan journaled");
            self.latest.send_replace(seq);
        }
        for (b, tps) in stop_replica {
            self.stop(b, tps);
        }
    }

    /// Queues `StopReplica(delete)` for these replicas (deletion manager);
    /// replicas on brokers without a channel wait for the next retry.
    pub fn stop_replicas(&self, replicas: Vec<(TopicPartition, BrokerId)>) {
        let mut per_broker: BTreeMap<BrokerId, Vec<TopicPartition>> = BTreeMap::new();
        for (tp, b) in replicas {
            per_broker.entry(b).or_default().push(tp);
        }
        for (b, tps) in per_broker {
            self.stop(b, tps);
        }
    }

    fn stop(&self, broker: BrokerId, partitions: Vec<TopicPartition>) {
        let Some(ch) = self.channels.get(&broker) else {
            return;
        };
        let after_seq = lock(&self.journal).last_seq();
        lock(&ch.inbox.stops).push(Stop {
            after_seq,
            partitions,
        });
        ch.inbox.wake.notify_one();
    }
}

// ---- sending ------------------------------------------------------------------

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

type Client = BrokerControlServiceClient<Answered>;

/// A connection to a broker that notes when the broker first answers on
/// it. Only then does it count as made: over plaintext, connecting to a
/// stopped (SIGSTOP) broker succeeds, since its kernel accepts the
/// connection, and only the first request tells.
#[derive(Clone)]
struct Answered {
    channel: Channel,
    /// Set by the first response of any kind (a gRPC error too).
    answered: Arc<AtomicBool>,
}

impl Answered {
    fn new(channel: Channel) -> Self {
        Self {
            channel,
            answered: Arc::default(),
        }
    }

    fn answered(&self) -> bool {
        self.answered.load(Ordering::Acquire)
    }
}

impl tonic::codegen::Service<http::Request<tonic::body::Body>> for Answered {
    type Response = http::Response<tonic::body::Body>;
    type Error = tonic::transport::Error;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.channel.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let answered = self.answered.clone();
        let response = self.channel.call(req);
        Box::pin(async move {
            let r = response.await?;
            answered.store(true, Ordering::Release);
            Ok(r)
        })
    }
}

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
    stamp: ControllerStamp,
    tps: Vec<TopicPartition>,
) -> Result<(), Failed> {
    let renders = render::chunks(tps, false).into_iter().map(|chunk| {
        let image = image.clone();
        (chunk.len(), move || {
            render::leader_and_isr_request(&image, &stamp, &chunk)
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
    stamp: ControllerStamp,
    full: bool,
    tps: Vec<TopicPartition>,
    head: MetadataHead,
) -> Result<(), Failed> {
    let chunks = render::chunks(tps, true);
    let count = chunks.len();
    let mut head = Some(head);
    let mut renders: VecDeque<_> = chunks
        .into_iter()
        .enumerate()
        .map(|(index, chunk)| {
            let image = image.clone();
            let head = head.take().unwrap_or_default();
            (chunk.len(), move || {
                render::update_metadata_request(&image, &stamp, full, (index, count), &chunk, head)
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

/// Sends a round in its order, rendered from `image`.
async fn send_round(
    client: &Client,
    image: MetadataImage,
    stamp: ControllerStamp,
    round: BrokerRound,
    gate: &Arc<LeadershipFirst>,
) -> Result<(), Failed> {
    let head = MetadataHead::of(&image, &round);
    let BrokerRound {
        full,
        leader_and_isr,
        metadata_due,
        metadata,
        ..
    } = round;
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

/// One per-broker task and everything it owns.
struct ChannelTask {
    shared: Arc<Shared>,
    broker: BrokerId,
    address: String,
    /// Stamped on every request; the broker refuses any other epochs.
    stamp: ControllerStamp,
    reports: mpsc::Sender<DeletionReport>,
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
    async fn run(mut self) {
        let Ok(endpoint) = keel_tls::transport::endpoint(&self.address) else {
            tracing::warn!(broker = self.broker.0, address = %self.address, "broker address is not a valid URI; channel closed");
            return;
        };
        let endpoint = endpoint
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT);
        // Leave from our own address, so a packet filter can cut this pair;
        // over TLS, only broker `self.broker`'s certificate is accepted.
        let local = Some(self.shared.config.listen.ip());
        let transport = self.shared.config.transport.clone();
        let mut backoff = Backoff::new(SEND_BACKOFF.0, SEND_BACKOFF.1);
        let mut reconnect = Backoff::new(CONNECT_BACKOFF.0, CONNECT_BACKOFF.1);
        // The connection in use, and whether the broker answered on it yet.
        let mut client: Option<(Client, Answered)> = None;
        let mut answered = false;
        // The last round went through on a connection the broker answered
        // on. Only a drop from here is logged at info, so a broker that
        // answers each new connection and then fails it is not logged on
        // every retry.
        let mut up = false;
        // A connection dropped or an attempt failed since the channel was
        // last up: the next time it is, that is logged as the broker's
        // return.
        let mut lost = false;
        loop {
            let (c, conn) = match &client {
                Some(c) => c.clone(),
                None => match self
                    .connect(&transport, &endpoint, local, &mut reconnect)
                    .await
                {
                    Some((c, conn)) => {
                        client = Some((c.clone(), conn.clone()));
                        answered = false;
                        (c, conn)
                    }
                    None => {
                        lost = true;
                        continue;
                    }
                },
            };
            let outcome = self.round(&c).await;
            if !answered && conn.answered() {
                answered = true;
                self.count("keel_controller_channel_connects_total");
            }
            if answered && !up && !matches!(outcome, Err(Failed::Transport(_))) {
                up = true;
                self.connected(std::mem::take(&mut lost));
            }
            match outcome {
                Ok(true) => backoff.reset(),
                Ok(false) => {
                    backoff.reset();
                    self.wait().await;
                }
                Err(Failed::Closed(code)) => {
                    tracing::info!(broker = self.broker.0, epoch = self.stamp.broker_epoch.0, %code, "broker refused this channel's requests; closing it");
                    return;
                }
                Err(Failed::Retry(why)) => {
                    tracing::debug!(broker = self.broker.0, error = %why, "broker refused a request; retrying");
                    tokio::time::sleep(backoff.step()).await;
                }
                Err(Failed::Transport(why)) => {
                    self.dropped(answered, up, &why);
                    up = false;
                    lost = true;
                    // Reconnect from scratch: a dead connection costs one
                    // attempt per backoff step, and no rendering.
                    client = None;
                    answered = false;
                    tokio::time::sleep(backoff.step()).await;
                }
            }
        }
    }

    /// A new connection to the broker at `endpoint` (from `local`), with
    /// a fresh client on it; `None` (logged, after one reconnect backoff
    /// step or a wake-up) when it cannot be made.
    async fn connect(
        &self,
        transport: &keel_tls::Transport,
        endpoint: &tonic::transport::Endpoint,
        local: Option<std::net::IpAddr>,
        reconnect: &mut Backoff,
    ) -> Option<(Client, Answered)> {
        match transport
            .connect(
                endpoint.clone(),
                local,
                keel_tls::Expect::Broker(self.broker.0),
            )
            .await
        {
            Ok(ch) => {
                reconnect.reset();
                let conn = Answered::new(ch);
                let c = BrokerControlServiceClient::new(conn.clone())
                    .max_decoding_message_size(64 << 20)
                    .max_encoding_message_size(64 << 20);
                Some((c, conn))
            }
            Err(e) => {
                tracing::debug!(broker = self.broker.0, error = %e, "cannot connect; retrying");
                // A resync (unfence) or a stop retries at once.
                tokio::select! {
                    _ = tokio::time::sleep(reconnect.step()) => {}
                    _ = self.inbox.wake.notified() => {}
                }
                None
            }
        }
    }

    /// A connection failed on the way (`why`): counted if the broker had
    /// `answered` on it, logged at info if the channel was `up`.
    fn dropped(&self, answered: bool, up: bool, why: &str) {
        if answered {
            self.count("keel_controller_channel_disconnects_total");
        }
        if up {
            tracing::info!(broker = self.broker.0, address = %self.address, error = %why, "connection to broker dropped; reconnecting");
        } else {
            tracing::debug!(broker = self.broker.0, error = %why, "send failed; reconnecting");
        }
    }

    /// Adds one to this broker's counter `name`.
    fn count(&self, name: &'static str) {
        metrics::counter!(name, "broker" => self.broker.0.to_string()).increment(1);
    }

    /// The channel is up (again): logged at info when the broker is back
    /// after being `lost`, at debug otherwise (every channel connects once
    /// per activation).
    fn connected(&self, lost: bool) {
        if lost {
            tracing::info!(broker = self.broker.0, address = %self.address, "broker reachable again; channel reconnected");
        } else {
            tracing::debug!(broker = self.broker.0, address = %self.address, "channel connected");
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
                let round = off_loop(size, move || {
                    BrokerRound::of_updates(
                        &img,
                        broker,
                        part.iter().map(|c: &Arc<Change>| &c.updates),
                    )
                })
                .await?;
                send_round(client, image.clone(), self.stamp, round, &self.gate).await?;
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
        let upto = lock(&self.journal).last_seq();
        let image = self.shared.image();
        let (img, broker) = (image.clone(), self.broker);
        let round = off_loop(image.partition_count(), move || {
            BrokerRound::full(&img, broker)
        })
        .await?;
        send_round(client, image, self.stamp, round, &self.gate).await?;
        self.needs_full = false;
        self.cursor = upto;
        Ok(())
    }

    /// Sends the stops whose preceding changes were sent (all of them after
    /// a full state); moot ones are left out
    /// ([`planner::stop_still_wanted`]).
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
            let wanted: Vec<TopicPartition> = s
                .partitions
                .iter()
                .filter(|tp| planner::stop_still_wanted(&image, self.broker, tp))
                .copied()
                .collect();
            if !wanted.is_empty() {
                let mut c = client.clone();
                let r = c
                    .stop_replica(pb::StopReplicaRequest {
                        stamp: Some(render::stamp_to_pb(&self.stamp)),
                        partitions: wanted
                            .iter()
                            .map(|tp| render::stop_replica_item(tp.topic_id, tp.partition))
                            .collect(),
                    })
                    .await?
                    .into_inner();
                check(r.error)?;
                let failed: HashSet<(Vec<u8>, u32)> = r
                    .partitions
                    .iter()
                    .filter(|p| p.error.as_ref().is_some_and(|e| e.code != 0))
                    .map(|p| (p.topic_id.clone(), p.partition))
                    .collect();
                let report = deletion_report(self.broker, &wanted, &failed);
                if !report.results.is_empty() {
                    let _ = self.reports.send(report).await;
                }
            }
            self.stops.pop_front();
        }
        Ok(())
    }
}

/// The outcome of a `StopReplica(delete)` of `sent` on `broker`, of which
/// the broker refused `failed` (topic id bytes, partition).
fn deletion_report(
    broker: BrokerId,
    sent: &[TopicPartition],
    failed: &HashSet<(Vec<u8>, u32)>,
) -> DeletionReport {
    let mut results: BTreeMap<TopicId, Vec<(PartitionId, BrokerId, bool)>> = BTreeMap::new();
    for tp in sent {
        let ok = !failed.contains(&(tp.topic_id.to_bytes().to_vec(), tp.partition.0));
        results
            .entry(tp.topic_id)
            .or_default()
            .push((tp.partition, broker, ok));
    }
    DeletionReport { broker, results }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deletion_report_groups_by_topic_and_marks_refused_replicas() {
        let (t1, t2) = (TopicId(1), TopicId(2));
        let sent = [
            TopicPartition::new(t1, 0),
            TopicPartition::new(t1, 1),
            TopicPartition::new(t2, 0),
        ];
        let failed: HashSet<(Vec<u8>, u32)> = [(t1.to_bytes().to_vec(), 1)].into();
        let r = deletion_report(BrokerId(4), &sent, &failed);
        assert_eq!(r.broker, BrokerId(4));
        assert_eq!(
            r.results[&t1],
            vec![
                (PartitionId(0), BrokerId(4), true),
                (PartitionId(1), BrokerId(4), false)
            ]
        );
        assert_eq!(r.results[&t2], vec![(PartitionId(0), BrokerId(4), true)]);
    }

    #[test]
    fn only_a_stale_controller_epoch_closes_a_channel() {
        let err = |code: ErrorCode| {
            Some(pb::Error {
                code: code.as_i32(),
                message: String::new(),
                leader: None,
            })
        };
        assert!(check(None).is_ok());
        assert!(check(err(ErrorCode::None)).is_ok());
        assert!(matches!(
            check(err(ErrorCode::StaleControllerEpoch)),
            Err(Failed::Closed(ErrorCode::StaleControllerEpoch))
        ));
        assert!(matches!(
            check(err(ErrorCode::StaleBrokerEpoch)),
            Err(Failed::Retry(_))
        ));
        assert!(matches!(
            check(err(ErrorCode::InvalidRequest)),
            Err(Failed::Retry(_))
        ));
        // A code this build does not know is retried, not trusted.
        let unknown = Some(pb::Error {
            code: 9_999,
            message: String::new(),
            leader: None,
        });
        assert!(matches!(check(unknown), Err(Failed::Retry(_))));
    }
}
