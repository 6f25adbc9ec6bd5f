//! The zombie family: a LeaderAndIsr stamped with an older controller
//! epoch than the broker has seen, sent with a controller's certificate;
//! the broker must refuse it for its epoch (the zombie checker).

use std::time::Duration;

use keel_proto::pb;
use keel_proto::pb::broker_control_service_client::BrokerControlServiceClient;
use rand::Rng;
use serde::Serialize;

use super::{FaultEvent, Nemesis};
use crate::client;

/// A zombie probe's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct ZombieProbe {
    pub broker: u32,
    pub at_ms: f64,
    pub stale_epoch: u64,
    pub seen_epoch: u64,
    pub topic_id: String,
    pub partition: u32,
    /// Error code of the broker's answer; `None` = accepted (a violation).
    pub answer: Option<String>,
    pub accepted: bool,
}

impl ZombieProbe {
    /// Refused with a typed error code of Keel's (a gRPC transport error
    /// or status is no refusal: the request may never have been judged).
    pub fn refused(&self) -> bool {
        !self.accepted
            && self
                .answer
                .as_deref()
                .is_some_and(|a| !a.starts_with(GRPC_ANSWER_PREFIX))
    }
}

/// How a zombie probe's answer reads when gRPC (not the broker's
/// judgement) answered it.
pub const GRPC_ANSWER_PREFIX: &str = "GRPC_";

/// A run with two or more zombie windows needs at least this many typed
/// refusals (one window: one): a run whose probes never reached a broker
/// proved nothing.
pub const ZOMBIE_MIN_REFUSED: usize = 2;

/// The controller whose identity the zombie requests carry.
pub const ZOMBIE_CONTROLLER: u64 = 1;

/// A zombie probe's answer when the broker refused its certificate (not
/// its epoch): the probe then tested nothing.
pub const ZOMBIE_WRONG_CERTIFICATE: &str = "GRPC_PERMISSIONDENIED";

/// The zombie checker: no probe accepted, none refused for its
/// certificate rather than its epoch (over TLS such a probe tests
/// nothing), and at least `min_refused` typed refusals.
pub fn zombie_check(probes: &[ZombieProbe], min_refused: usize) -> (bool, serde_json::Value) {
    let accepted = probes.iter().filter(|p| p.accepted).count();
    let wrong_cert = probes
        .iter()
        .filter(|p| p.answer.as_deref() == Some(ZOMBIE_WRONG_CERTIFICATE))
        .count();
    let refused = probes.iter().filter(|p| p.refused()).count();
    let valid = accepted == 0 && wrong_cert == 0 && refused >= min_refused;
    (
        valid,
        serde_json::json!({
            "refused": refused,
            "min_refused": min_refused,
            "accepted": accepted,
            "refused_for_certificate": wrong_cert,
            "not_judged": probes.len() - refused - accepted - wrong_cert,
            "probes": probes,
        }),
    )
}

impl Nemesis {
    /// Sends every live broker a LeaderAndIsr stamped with an older
    /// controller epoch than it has seen.
    pub(super) async fn zombie(&mut self, ev: &mut FaultEvent) {
        let brokers: Vec<(u32, String)> = {
            let c = self.cluster.lock().unwrap();
            c.brokers()
                .filter(|n| n.running() && !n.process.paused())
                .map(|n| (n.id, n.address()))
                .collect()
        };
        for (id, addr) in brokers {
            let Some(d) =
                client::describe_broker(&self.transport, &addr, Duration::from_millis(700)).await
            else {
                continue;
            };
            if d.controller_epoch_seen < 1 {
                continue;
            }
            let mine: Vec<&pb::PartitionState> = d
                .cache
                .iter()
                .filter(|p| p.replicas.contains(&id) && p.leader.is_some())
                .collect();
            if mine.is_empty() {
                continue;
            }
            let mut p = mine[self.rng.random_range(0..mine.len())].clone();
            p.leader_epoch += 1;
            p.partition_epoch += 1;
            let leaders = d
                .brokers
                .iter()
                .filter(|b| Some(b.broker_id) == p.leader)
                .cloned()
                .collect();
            let stale = d.controller_epoch_seen - 1;
            let req = pb::LeaderAndIsrRequest {
                stamp: Some(pb::ControllerStamp {
                    controller_id: ZOMBIE_CONTROLLER as u32,
                    controller_epoch: stale,
                    broker_epoch: d.broker_epoch,
                }),
                partitions: vec![p.clone()],
                leaders,
            };
            let Some(ch) = client::client_channel(
                &self.zombie_transport,
                &addr,
                Duration::from_millis(1500),
                client::Expect::Broker(id),
            ) else {
                continue;
            };
            let answer = match BrokerControlServiceClient::new(ch)
                .leader_and_isr(req)
                .await
            {
                Err(s) => Some(format!("GRPC_{:?}", s.code()).to_uppercase()),
                Ok(r) => {
                    let r = r.into_inner();
                    r.error.map(|e| client::code_name(e.code)).or_else(|| {
                        r.partitions
                            .first()
                            .and_then(|pe| pe.error.as_ref())
                            .map(|e| client::code_name(e.code))
                    })
                }
            };
            let accepted = answer.is_none();
            ev.targets.push(format!("b{id}"));
            ev.detail.push(format!(
                "b{id}: epoch {stale} < seen {} -> {}",
                d.controller_epoch_seen,
                answer.as_deref().unwrap_or("ACCEPTED")
            ));
            self.probes.lock().unwrap().push(ZombieProbe {
                broker: id,
                at_ms: self.ms(),
                stale_epoch: stale,
                seen_epoch: d.controller_epoch_seen,
                topic_id: keel_metadata::TopicId::from_bytes(&p.topic_id)
                    .map(|t| t.to_string())
                    .unwrap_or_default(),
                partition: p.partition,
                answer,
                accepted,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(answer: Option<&str>) -> ZombieProbe {
        ZombieProbe {
            broker: 1,
            at_ms: 1.0,
            stale_epoch: 1,
            seen_epoch: 2,
            topic_id: "t".into(),
            partition: 0,
            answer: answer.map(str::to_string),
            accepted: answer.is_none(),
        }
    }

    #[test]
    fn the_zombie_check_needs_enough_typed_refusals_and_no_acceptance() {
        let refused = || probe(Some("STALE_CONTROLLER_EPOCH"));
        assert!(zombie_check(&[refused(), refused()], 2).0);
        assert!(zombie_check(&[], 0).0, "no zombie nemesis, nothing needed");
        assert!(!zombie_check(&[], 2).0, "no probe proves nothing");
        assert!(
            !zombie_check(&[refused(), probe(Some("GRPC_UNAVAILABLE"))], 2).0,
            "a transport error is no refusal"
        );
        let (valid, detail) = zombie_check(&[refused(), refused(), probe(None)], 2);
        assert!(!valid, "an accepted stale request");
        assert_eq!(detail["accepted"], 1);
        assert!(
            !zombie_check(
                &[refused(), refused(), probe(Some(ZOMBIE_WRONG_CERTIFICATE))],
                2
            )
            .0,
            "refused for its certificate: the epoch was never tested"
        );
    }
}
