//! The leader side of ISR maintenance: periodically compare follower fetch
//! times with the lag limit and ask the active controller (AlterPartition)
//! to shrink or expand the ISR. The controller checks our leader epoch and
//! partition epoch, so a stale leader can never change an ISR.

use std::sync::Arc;
use std::time::Duration;

use keel_metadata::{ErrorCode, TopicPartition};
use keel_proto::{convert, pb};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::metrics;
use crate::shared::{lock, now_ms, Shared, Ticker};

/// How long to wait before retrying a partition the controller refused
/// for a reason other than stale epochs.
const RETRY_AFTER_MS: u64 = 2_000;

pub(crate) async fn run_isr_manager(shared: Arc<Shared>, stop: watch::Receiver<bool>) {
    let lag_ms = shared.config.replica_lag_time_max_ms;
    let period = Duration::from_millis((lag_ms / 2).clamp(50, 1_000));
    let mut rounds = Ticker::new(period, stop);
    while rounds.next().await {
        let (items, epoch) = {
            let mut st = shared.state();
            st.publish_partition_gauges();
            (st.plan_isr_changes(now_ms(), lag_ms), st.broker_epoch())
        };
        let Some(epoch) = epoch else { continue };
        if items.is_empty() {
            continue;
        }
        let sent: Vec<TopicPartition> = items.iter().map(|i| i.tp).collect();
        for i in &items {
            info!(tp = %i.tp, leader_epoch = i.leader_epoch.0, partition_epoch = i.partition_epoch.0, new_isr = ?convert::brokers_to_pb(&i.new_isr), "requesting ISR change");
        }
        let req = pb::AlterPartitionRequest {
            broker_id: shared.id.0,
            broker_epoch: epoch.0,
            partitions: items
                .iter()
                .map(convert::alter_partition_item_to_pb)
                .collect(),
        };
        ::metrics::counter!(metrics::ALTER_PARTITION_SENT).increment(1);
        let (addr, client) = shared.controller();
        let Some(mut client) = client else {
            lock(&shared.link).rotate();
            shared.state().release_alter(&sent, now_ms());
            continue;
        };
        match client.alter_partition(req).await {
            Ok(resp) => {
                let resp = resp.into_inner();
                let now = now_ms();
                match convert::check(&resp.error) {
                    Ok(()) => {
                        let mut st = shared.state();
                        for r in resp.partitions {
                            let Ok(tid) = convert::topic_id_from_pb(&r.topic_id) else {
                                continue;
                            };
                            let tp = TopicPartition::new(tid, r.partition);
                            let code = convert::check(&r.error)
                                .err()
                                .map_or(ErrorCode::None, |e| e.code);
                            let state = r
                                .state
                                .and_then(|mut s| convert::take_leadership_from_pb(&mut s).ok());
                            st.finish_alter(tp, code, state, now, RETRY_AFTER_MS);
                        }
                        st.commit_history_best_effort();
                        // Items the answer did not mention: try again next round.
                        st.release_alter(&sent, now);
                    }
                    Err(e) if e.code == ErrorCode::NotController => {
                        lock(&shared.link)
                            .follow(resp.error.as_ref().and_then(|e| e.leader.as_ref()));
                        shared.state().release_alter(&sent, now);
                    }
                    Err(e) => {
                        warn!(code = %e.code, reason = e.message.as_str(), "AlterPartition refused");
                        shared.state().release_alter(&sent, now + RETRY_AFTER_MS);
                    }
                }
            }
            Err(status) => {
                debug!(%addr, error = %status.message(), "AlterPartition failed");
                lock(&shared.link).rotate();
                shared.state().release_alter(&sent, now_ms());
            }
        }
    }
}
