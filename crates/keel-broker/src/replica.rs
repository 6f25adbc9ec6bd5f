//! ReplicaService: followers report to leaders (no message data moves;
//! a fetch is the follower saying "I am here, at this leader epoch"). The
//! leader's record of these fetches drives ISR changes.

use std::sync::Arc;
use std::time::Duration;

use keel_metadata::{ApiError, BrokerId, LeaderEpoch, TopicPartition};
use keel_proto::pb::replica_service_server::ReplicaService;
use keel_proto::{convert, pb};
use tokio::sync::watch;
use tonic::{Request, Response, Status};
use tracing::debug;

use crate::shared::{now_ms, Shared, Ticker};

/// The leader side.
#[derive(Clone)]
pub(crate) struct ReplicaHandler {
    pub shared: Arc<Shared>,
}

#[tonic::async_trait]
impl ReplicaService for ReplicaHandler {
    async fn fetch(
        &self,
        request: Request<pb::FetchRequest>,
    ) -> Result<Response<pb::FetchResponse>, Status> {
        let follower = request.get_ref().follower_id;
        keel_tls::transport::authorize(
            &request,
            format_args!("Fetch as follower {follower}"),
            format_args!("the certificate of broker {follower}"),
            |r| *r == keel_tls::Role::Broker(follower),
        )?;
        let req = request.into_inner();
        let now = now_ms();
        let follower = BrokerId(req.follower_id);
        let mut st = self.shared.state();
        // Only refusals are answered: a follower reporting 100,000
        // partitions needs to hear about the few it must stop following.
        let partitions = req
            .partitions
            .into_iter()
            .filter_map(|p| {
                let r = convert::topic_id_from_pb(&p.topic_id)
                    .map_err(ApiError::from)
                    .and_then(|t| {
                        st.record_fetch(
                            follower,
                            TopicPartition::new(t, p.partition),
                            LeaderEpoch(p.leader_epoch),
                            now,
                        )
                    });
                r.is_err()
                    .then(|| convert::partition_error_to_pb(p.topic_id, p.partition, &r))
            })
            .collect();
        Ok(Response::new(pb::FetchResponse { partitions }))
    }
}

/// The follower side: every fetch interval, one Fetch per leader broker
/// covering all partitions followed from it.
pub(crate) async fn run_fetcher(shared: Arc<Shared>, stop: watch::Receiver<bool>) {
    let period = Duration::from_millis(shared.config.replica_fetch_interval_ms);
    let mut rounds = Ticker::new(period, stop);
    while rounds.next().await {
        let (targets, epoch) = {
            let st = shared.state();
            (st.fetch_targets(), st.broker_epoch().map_or(0, |e| e.0))
        };
        let calls = targets.into_iter().filter_map(|(leader, t)| {
            let Some(addr) = t.address else {
                debug!(leader = leader.0, "no address known for leader; not fetching");
                return None;
            };
            let mut client = shared.replica_client(leader, &addr)?;
            let req = pb::FetchRequest {
                follower_id: shared.id.0,
                follower_epoch: epoch,
                partitions: t
                    .partitions
                    .iter()
                    .map(|(tp, le)| convert::fetch_partition_to_pb(tp, *le))
                    .collect(),
            };
            Some(async move {
                match client.fetch(req).await {
                    Ok(resp) => {
                        for p in resp.into_inner().partitions {
                            if let Err(e) = convert::check(&p.error) {
                                debug!(leader = leader.0, partition = p.partition, code = %e.code, "fetch refused by leader");
                            }
                        }
                    }
                    Err(status) => {
                        debug!(leader = leader.0, %addr, error = %status.message(), "fetch failed");
                    }
                }
            })
        });
        futures::future::join_all(calls).await;
    }
}
