//! The SCRAM users of a TLS run with Kafka listeners, and their ACLs.
//!
//! The workload's Kafka clients log in as [`WORKLOAD_USER`] (SASL_SSL,
//! SCRAM-SHA-512, a password drawn for the run) and may do exactly what
//! the workload does: everything on topics named `jepsen-*`, and alter and
//! describe the cluster (reassignments, preferred elections). The
//! harness sets the credential and the bindings as `User:admin` over gRPC,
//! the way `keel users create` and `keel acls create` do: the password
//! never leaves this process, only a fresh salt and the salted password.
//!
//! Brokers learn new credentials and bindings from the controller within a
//! heartbeat (or at once after a failed login), so [`wait_for_login`]
//! holds the workload back until a login on every broker passes.

use std::time::{Duration, Instant};

use keel_metadata::scram::{ScramCredential, ScramMechanism};
use keel_proto::convert::scram_upsertion_to_pb;
use keel_proto::pb;
use keel_proto::pb::admin_service_client::AdminServiceClient;
use rand::Rng;

use crate::client::{self, Expect, Transport};
use crate::cluster::CLIENT_IP;
use crate::kafka_client::{CallError, Conn, KafkaSecurity};

/// The workload's Kafka user (`User:jepsen-client`).
pub const WORKLOAD_USER: &str = "jepsen-client";
/// The topic prefix the workload's names (and the placed topic) share.
pub const WORKLOAD_PREFIX: &str = "jepsen-";
/// PBKDF2 iterations of the run's credentials (the least allowed: logins
/// are many, one per workload request).
const ITERATIONS: u32 = 4096;
/// Each admin request's own bound.
const T: Duration = Duration::from_millis(1500);

/// A fresh random password (alphanumeric, 24 characters).
pub fn random_password() -> String {
    rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(24)
        .map(char::from)
        .collect()
}

/// An allow binding of `operation` on `resource` for `User:<user>`.
pub fn allow(user: &str, resource: pb::acl_resource::Resource, operation: &str) -> pb::AclBinding {
    pb::AclBinding {
        principal: format!("User:{user}"),
        resource: Some(pb::AclResource {
            resource: Some(resource),
        }),
        operation: operation.into(),
        permission: pb::AclPermission::Allow as i32,
    }
}

/// What the workload's operations need: creates, deletes, describes,
/// partition additions and config changes on its topics; reassignments
/// and preferred elections (alter on the cluster); describing the cluster.
pub fn workload_bindings(user: &str) -> Vec<pb::AclBinding> {
    use pb::acl_resource::Resource;
    vec![
        allow(user, Resource::TopicPrefix(WORKLOAD_PREFIX.into()), "all"),
        allow(user, Resource::Cluster(true), "alter"),
        allow(user, Resource::Cluster(true), "describe"),
    ]
}

/// The active controller's admin client (as the transport's identity).
async fn active_admin(
    transport: &Transport,
    ctrl: &[String],
) -> Result<AdminServiceClient<tonic::transport::Channel>, String> {
    let active = client::find_active(transport, ctrl, T)
        .await
        .ok_or("no active controller")?;
    let ch = client::client_channel(transport, &active, T * 2, Expect::Controller)
        .ok_or("bad address")?;
    Ok(AdminServiceClient::new(ch))
}

/// Retries `once` until it passes or `bound` runs out (then its last error).
async fn retried<F, Fut>(bound: Duration, mut once: F) -> Result<(), String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let start = Instant::now();
    loop {
        match once().await {
            Ok(()) => return Ok(()),
            Err(e) if start.elapsed() >= bound => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(300)).await,
        }
    }
}

fn refused(what: &str, e: &Option<pb::Error>) -> Result<(), String> {
    match e {
        None => Ok(()),
        Some(e) => Err(format!(
            "{what}: {}: {}",
            client::code_name(e.code),
            e.message
        )),
    }
}

/// Sets `user`'s SCRAM-SHA-512 credential to `password` (as the
/// transport's identity, a super user), retried until `bound`.
pub async fn create_user(
    transport: &Transport,
    ctrl: &[String],
    user: &str,
    password: &str,
    bound: Duration,
) -> Result<(), String> {
    let mechanism = ScramMechanism::Sha512;
    let mut salt = [0u8; 32];
    rand::rng().fill(&mut salt[..]);
    let salted =
        ScramCredential::salted_password(mechanism, password.as_bytes(), &salt, ITERATIONS)
            .map_err(|e| e.to_string())?;
    let req = pb::AlterUserScramCredentialsRequest {
        upsertions: vec![scram_upsertion_to_pb(
            user, mechanism, ITERATIONS, &salt, &salted,
        )],
        deletions: vec![],
    };
    retried(bound, || {
        let req = req.clone();
        async move {
            let mut c = active_admin(transport, ctrl).await?;
            let r = c
                .alter_user_scram_credentials(req)
                .await
                .map_err(|e| format!("AlterUserScramCredentials {user}: {}", e.message()))?
                .into_inner();
            refused(&format!("AlterUserScramCredentials {user}"), &r.error)?;
            match r.results.first() {
                Some(u) => refused(&format!("AlterUserScramCredentials {user}"), &u.error),
                None => Err(format!("AlterUserScramCredentials {user}: no result")),
            }
        }
    })
    .await
}

/// Creates `bindings` (as the transport's identity), retried until `bound`.
pub async fn grant(
    transport: &Transport,
    ctrl: &[String],
    bindings: Vec<pb::AclBinding>,
    bound: Duration,
) -> Result<(), String> {
    let req = pb::CreateAclsRequest { bindings };
    retried(bound, || {
        let req = req.clone();
        async move {
            let mut c = active_admin(transport, ctrl).await?;
            let r = c
                .create_acls(req)
                .await
                .map_err(|e| format!("CreateAcls: {}", e.message()))?
                .into_inner();
            refused("CreateAcls", &r.error)?;
            r.results
                .iter()
                .try_for_each(|b| refused("CreateAcls", &b.error))
        }
    })
    .await
}

/// Waits until a login with `security` passes on every listener of
/// `addrs` (each broker learns credentials on its own), up to `bound`;
/// `Err` names a listener that still refused and why.
pub async fn wait_for_login(
    addrs: &[String],
    security: &KafkaSecurity,
    bound: Duration,
) -> Result<(), String> {
    let start = Instant::now();
    let mut pending: Vec<String> = addrs.to_vec();
    let mut last = String::new();
    while !pending.is_empty() {
        let mut still = Vec::new();
        for a in pending {
            match Conn::open(CLIENT_IP.into(), &a, security, T, T).await {
                Ok(c) => c.close().await,
                Err(e) => {
                    last = match &e {
                        CallError::NotSent(s) | CallError::Lost(s) => s.clone(),
                    };
                    still.push(a);
                }
            }
        }
        pending = still;
        if pending.is_empty() {
            break;
        }
        if start.elapsed() >= bound {
            return Err(format!(
                "no login passed on {pending:?} within {bound:?}: {last}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workload_user_gets_its_topics_and_cluster_alter_but_no_super_powers() {
        let b = workload_bindings(WORKLOAD_USER);
        assert!(b.iter().all(|b| b.principal == "User:jepsen-client"));
        // Never every topic: only the workload's prefix.
        let topics: Vec<_> = b
            .iter()
            .filter_map(
                |b| match b.resource.as_ref().and_then(|r| r.resource.clone()) {
                    Some(pb::acl_resource::Resource::TopicPrefix(p)) => Some(p),
                    Some(pb::acl_resource::Resource::Topic(t)) => Some(t),
                    _ => None,
                },
            )
            .collect();
        assert_eq!(topics, vec![WORKLOAD_PREFIX.to_string()]);
        let cluster_ops: Vec<&str> = b
            .iter()
            .filter(|b| {
                matches!(
                    b.resource.as_ref().and_then(|r| r.resource.clone()),
                    Some(pb::acl_resource::Resource::Cluster(_))
                )
            })
            .map(|b| b.operation.as_str())
            .collect();
        assert_eq!(cluster_ops, vec!["alter", "describe"]);
        assert_ne!(random_password(), random_password());
    }
}
