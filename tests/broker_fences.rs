//! A controller key that is not the active controller's, against real
//! brokers over TLS: whatever it stamps its requests with (the highest
//! controller epoch there is, the active controller's id, a wrong broker
//! epoch), every broker refuses, records nothing, and keeps taking the
//! real controller's requests.

mod common;

use std::time::Duration;

use common::*;
use keel_proto::pb;
use keel_proto::pb::broker_control_service_client::BrokerControlServiceClient;
use keel_tls::{Expect, Identity, Transport};

const LONG: Duration = Duration::from_secs(60);

async fn control(
    transport: &Transport,
    addr: &str,
    broker: u32,
) -> BrokerControlServiceClient<tonic::transport::Channel> {
    let ep = keel_tls::transport::endpoint(addr)
        .unwrap()
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(5));
    let ch = transport
        .connect(ep, None, Expect::Broker(broker))
        .await
        .expect("the TLS connection opens");
    BrokerControlServiceClient::new(ch)
}

/// What the broker says of itself, asked as the kit's admin (retried
/// while the broker has not read the cluster's ACLs yet).
async fn seen(c: &Cluster, i: usize) -> pb::DescribeBrokerResponse {
    let id = c.broker(i).id;
    let deadline = std::time::Instant::now() + LONG;
    loop {
        match control(c.transport(), &c.broker(i).address(), id)
            .await
            .describe_broker(pb::DescribeBrokerRequest {})
            .await
        {
            Ok(r) => return r.into_inner(),
            Err(s) => assert!(
                std::time::Instant::now() < deadline,
                "broker {id} does not describe itself to the admin: {s:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The answer's error code, from a whole-request error or the first
/// partition's; the gRPC status code's name when the call itself failed.
fn refusal<T>(
    r: Result<tonic::Response<T>, tonic::Status>,
    error: impl Fn(&T) -> Option<i32>,
) -> String {
    match r {
        Err(s) => format!("{:?}", s.code()),
        Ok(r) => error(r.get_ref()).map_or("ACCEPTED".to_string(), |code| {
            pb::ErrorCode::try_from(code)
                .map(|c| c.as_str_name().to_string())
                .unwrap_or_else(|_| format!("CODE_{code}"))
        }),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_controller_key_cannot_poison_a_broker_or_lock_the_controller_out() {
    let mut c = Cluster::start(fast_spec(3).tls(true)).expect("start a TLS cluster");
    let active = c.wait_active(LONG).await.unwrap();
    c.wait_all_brokers_active(LONG).await.unwrap();
    let d = c
        .describe_node(active, Duration::from_secs(5))
        .await
        .expect("the active controller describes itself");
    let (term, active_id) = (d.term, d.node_id);
    let standby = (1..=3u64).find(|id| *id != active_id).unwrap();
    let key = c
        .transport_as(&Identity::controller(CLUSTER_ID, standby))
        .expect("a standby controller's certificate");

    for i in 0..3 {
        let id = c.broker(i).id;
        let before = seen(&c, i).await;
        assert!(
            before.controller_epoch_seen >= term,
            "broker {id} has confirmed the active controller's epoch: {before:?}"
        );
        let mut ctl = control(&key, &c.broker(i).address(), id).await;
        let mut answers = Vec::new();
        // The highest epoch there is, with a wrong and with the right
        // broker epoch; the current epoch as the standby; the current
        // epoch stamped as the active controller.
        let stamps = [
            (standby as u32, u64::MAX, before.broker_epoch + 1),
            (standby as u32, u64::MAX, before.broker_epoch),
            (
                standby as u32,
                before.controller_epoch_seen + 1,
                before.broker_epoch,
            ),
            (
                standby as u32,
                before.controller_epoch_seen,
                before.broker_epoch,
            ),
            (
                active_id as u32,
                before.controller_epoch_seen,
                before.broker_epoch,
            ),
        ];
        for (controller_id, controller_epoch, broker_epoch) in stamps {
            let stamp = Some(pb::ControllerStamp {
                controller_id,
                controller_epoch,
                broker_epoch,
            });
            // Every partition it holds, led by nobody at a huge epoch.
            let partitions: Vec<pb::PartitionState> = before
                .cache
                .iter()
                .filter(|p| p.replicas.contains(&id))
                .map(|p| pb::PartitionState {
                    leader: None,
                    leader_epoch: u32::MAX - 1,
                    partition_epoch: u32::MAX - 1,
                    ..p.clone()
                })
                .collect();
            let r = ctl
                .leader_and_isr(pb::LeaderAndIsrRequest {
                    stamp,
                    partitions: partitions.clone(),
                    leaders: vec![],
                })
                .await;
            answers.push(refusal(r, |a| {
                a.error
                    .as_ref()
                    .or(a.partitions.iter().find_map(|p| p.error.as_ref()))
                    .map(|e| e.code)
            }));
            let r = ctl
                .update_metadata(pb::UpdateMetadataRequest {
                    stamp,
                    metadata_offset: u64::MAX,
                    full: true,
                    ..Default::default()
                })
                .await;
            answers.push(refusal(r, |a| a.error.as_ref().map(|e| e.code)));
            let r = ctl
                .stop_replica(pb::StopReplicaRequest {
                    stamp,
                    partitions: partitions
                        .iter()
                        .map(|p| pb::StopReplicaItem {
                            topic_id: p.topic_id.clone(),
                            partition: p.partition,
                            delete: true,
                            leader_epoch: u32::MAX - 1,
                        })
                        .collect(),
                })
                .await;
            answers.push(refusal(r, |a| {
                a.error
                    .as_ref()
                    .or(a.partitions.iter().find_map(|p| p.error.as_ref()))
                    .map(|e| e.code)
            }));
        }
        assert!(
            !answers.iter().any(|a| a == "ACCEPTED"),
            "broker {id} accepted a forged request: {answers:?}"
        );
        assert!(
            answers.iter().any(|a| a == "UNCONFIRMED_CONTROLLER_EPOCH"),
            "{answers:?}"
        );
        assert!(
            answers.iter().any(|a| a == "CLUSTER_AUTHORIZATION_FAILED"),
            "the standby's key stamped as the active controller: {answers:?}"
        );
        let after = seen(&c, i).await;
        assert_eq!(
            (
                after.controller_epoch_seen,
                after.broker_epoch,
                after.metadata_offset >= before.metadata_offset
            ),
            (before.controller_epoch_seen, before.broker_epoch, true),
            "broker {id} changed on refused requests"
        );
    }

    // The real controller still reaches every broker: a new topic with
    // three replicas is taken by all three.
    let topic_id = create_topic(&client(&c), "after-the-forgeries", 3, 3).await;
    let topic_id = keel_metadata::TopicId::from_bytes(&topic_id)
        .unwrap()
        .to_string();
    let deadline = std::time::Instant::now() + LONG;
    for i in 0..3 {
        loop {
            let held: std::collections::BTreeSet<u64> = history(&c, i)
                .iter()
                .filter(|l| l["topic_id"] == topic_id.as_str())
                .filter_map(|l| l["partition"].as_u64())
                .collect();
            if held.len() == 3 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "broker {} took partitions {held:?} of 3 of the new topic",
                i + 1
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
