//! How an intruder's attempt was answered: refused for its certificate
//! or handshake, refused by an ACL with a typed error, or accepted.

use keel_proto::pb;

use super::{short, Answer};
use crate::client;

/// An admin response: its top-level error and its items' errors.
pub(super) trait Answered {
    fn top(&self) -> Option<&pb::Error>;
    fn items(&self) -> Vec<Option<&pb::Error>>;
}

macro_rules! answered {
    ($t:ty, $items:ident) => {
        impl Answered for $t {
            fn top(&self) -> Option<&pb::Error> {
                self.error.as_ref()
            }
            fn items(&self) -> Vec<Option<&pb::Error>> {
                self.$items.iter().map(|i| i.error.as_ref()).collect()
            }
        }
    };
    ($t:ty) => {
        impl Answered for $t {
            fn top(&self) -> Option<&pb::Error> {
                self.error.as_ref()
            }
            fn items(&self) -> Vec<Option<&pb::Error>> {
                Vec::new()
            }
        }
    };
}

answered!(pb::CreateTopicsResponse, topics);
answered!(pb::DeleteTopicsResponse, topics);
answered!(pb::CreatePartitionsResponse, topics);
answered!(pb::IncrementalAlterConfigsResponse, topics);
answered!(pb::ElectLeadersResponse, partitions);
answered!(pb::AlterPartitionReassignmentsResponse, partitions);
answered!(pb::CreateAclsResponse, results);
answered!(pb::UnregisterBrokerResponse);
answered!(pb::AddVoterResponse);
answered!(pb::RemoveVoterResponse);
answered!(pb::LeaderAndIsrResponse, partitions);
answered!(pb::UpdateMetadataResponse);
answered!(pb::StopReplicaResponse, partitions);

pub(super) fn is_authz(e: &pb::Error) -> bool {
    e.code == pb::ErrorCode::TopicAuthorizationFailed as i32
        || e.code == pb::ErrorCode::ClusterAuthorizationFailed as i32
}

/// A TLS handshake the server aborted (its alert, or the connection it
/// closed in the handshake), as opposed to a server that was not there.
pub fn handshake_refused(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    !t.contains("tcp connect error")
        && !t.contains("connection refused")
        && (t.contains("alert")
            || t.contains("certificate")
            || t.contains("handshake")
            || t.contains("unknownca")
            || t.contains("tls"))
}

/// A request that a certificate check must stop: any answer at all got
/// past it.
pub fn classify_cert<R>(r: &Result<R, tonic::Status>, foreign_ca: bool) -> (Answer, String) {
    match r {
        Ok(_) => (
            Answer::Accepted,
            "answered: the certificate check let it through".into(),
        ),
        Err(s) => {
            let text = format!("{:?}: {} ({:?})", s.code(), s.message(), s);
            if matches!(
                s.code(),
                tonic::Code::PermissionDenied | tonic::Code::Unauthenticated
            ) || (foreign_ca && handshake_refused(&text))
            {
                (Answer::Refused, short(&text))
            } else {
                (Answer::Errored, short(&text))
            }
        }
    }
}

/// A controller request with a valid controller certificate and a forged
/// controller epoch: only the broker's epoch fence may answer it
/// (UNCONFIRMED_CONTROLLER_EPOCH, STALE_CONTROLLER_EPOCH, or
/// CLUSTER_AUTHORIZATION_FAILED for a stamp naming another controller).
/// Any other answer, a broker-epoch or per-partition refusal included,
/// got past the fence.
pub(super) fn classify_fence<R: Answered>(r: &Result<R, tonic::Status>) -> (Answer, String) {
    let fence = [
        pb::ErrorCode::UnconfirmedControllerEpoch as i32,
        pb::ErrorCode::StaleControllerEpoch as i32,
        pb::ErrorCode::ClusterAuthorizationFailed as i32,
    ];
    match r {
        Err(_) => classify_cert(r, false),
        Ok(r) => match r.top() {
            Some(e) if fence.contains(&e.code) => (
                Answer::Refused,
                format!("{}: {}", client::code_name(e.code), short(&e.message)),
            ),
            Some(e) => (
                Answer::Accepted,
                format!(
                    "got past the epoch fence: {}: {}",
                    client::code_name(e.code),
                    short(&e.message)
                ),
            ),
            None => (
                Answer::Accepted,
                format!("got past the epoch fence: {} item answers", r.items().len()),
            ),
        },
    }
}

/// An admin request of the user without ACLs.
pub(super) fn classify_acl<R: Answered>(r: &Result<R, tonic::Status>) -> (Answer, String) {
    match r {
        Err(_) => classify_cert(r, false),
        Ok(r) => {
            if let Some(e) = r.top() {
                let a = if is_authz(e) {
                    Answer::Refused
                } else {
                    Answer::Errored
                };
                return (
                    a,
                    format!("{}: {}", client::code_name(e.code), short(&e.message)),
                );
            }
            let items = r.items();
            if let Some(e) = items.iter().flatten().find(|e| is_authz(e)) {
                return (
                    Answer::Refused,
                    format!("{}: {}", client::code_name(e.code), short(&e.message)),
                );
            }
            let codes: Vec<String> = items
                .iter()
                .map(|e| e.map_or("NONE".into(), |e| client::code_name(e.code)))
                .collect();
            (
                Answer::Accepted,
                format!("got past authorization: item answers {codes:?}"),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_answers_are_classified_by_their_codes() {
        let e = |code: pb::ErrorCode| pb::Error {
            code: code as i32,
            message: "x".into(),
            leader: None,
        };
        let refused: Result<pb::CreateTopicsResponse, tonic::Status> =
            Ok(pb::CreateTopicsResponse {
                error: None,
                topics: vec![pb::CreateTopicResult {
                    error: Some(e(pb::ErrorCode::TopicAuthorizationFailed)),
                    ..Default::default()
                }],
            });
        assert_eq!(classify_acl(&refused).0, Answer::Refused);
        let top: Result<pb::RemoveVoterResponse, tonic::Status> = Ok(pb::RemoveVoterResponse {
            error: Some(e(pb::ErrorCode::ClusterAuthorizationFailed)),
            ..Default::default()
        });
        assert_eq!(classify_acl(&top).0, Answer::Refused);
        let not_ctrl: Result<pb::RemoveVoterResponse, tonic::Status> =
            Ok(pb::RemoveVoterResponse {
                error: Some(e(pb::ErrorCode::NotController)),
                ..Default::default()
            });
        assert_eq!(classify_acl(&not_ctrl).0, Answer::Errored);
        let ok: Result<pb::RemoveVoterResponse, tonic::Status> =
            Ok(pb::RemoveVoterResponse::default());
        assert_eq!(classify_acl(&ok).0, Answer::Accepted);
        // Past authorization, refused for another reason: still a breach.
        let past: Result<pb::CreateTopicsResponse, tonic::Status> = Ok(pb::CreateTopicsResponse {
            error: None,
            topics: vec![pb::CreateTopicResult {
                error: Some(e(pb::ErrorCode::TopicAlreadyExists)),
                ..Default::default()
            }],
        });
        assert_eq!(classify_acl(&past).0, Answer::Accepted);
        let denied: Result<(), tonic::Status> = Err(tonic::Status::permission_denied("no"));
        assert_eq!(classify_cert(&denied, false).0, Answer::Refused);
        let down: Result<(), tonic::Status> = Err(tonic::Status::unavailable(
            "tcp connect error: Connection refused",
        ));
        assert_eq!(classify_cert(&down, true).0, Answer::Errored);
        let answered: Result<(), tonic::Status> = Ok(());
        assert_eq!(classify_cert(&answered, true).0, Answer::Accepted);
    }

    #[test]
    fn a_forged_controller_epoch_must_be_stopped_by_the_fence() {
        let answer =
            |code: Option<pb::ErrorCode>| -> Result<pb::LeaderAndIsrResponse, tonic::Status> {
                Ok(pb::LeaderAndIsrResponse {
                    error: code.map(|c| pb::Error {
                        code: c as i32,
                        message: "x".into(),
                        leader: None,
                    }),
                    partitions: Vec::new(),
                })
            };
        for code in [
            pb::ErrorCode::UnconfirmedControllerEpoch,
            pb::ErrorCode::StaleControllerEpoch,
            pb::ErrorCode::ClusterAuthorizationFailed,
        ] {
            assert_eq!(classify_fence(&answer(Some(code))).0, Answer::Refused);
        }
        // Refused for its broker epoch: the forged controller epoch passed.
        assert_eq!(
            classify_fence(&answer(Some(pb::ErrorCode::StaleBrokerEpoch))).0,
            Answer::Accepted
        );
        assert_eq!(classify_fence(&answer(None)).0, Answer::Accepted);
        let down: Result<pb::LeaderAndIsrResponse, tonic::Status> =
            Err(tonic::Status::unavailable("tcp connect error"));
        assert_eq!(classify_fence(&down).0, Answer::Errored);
    }
}
