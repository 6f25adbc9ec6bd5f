//! Keeps the broker's copy of who may do what ([`crate::access`]) fresh:
//! reads it from the active controller (DescribeAccess) whenever the copy
//! asks to be read again.

use std::sync::Arc;
use std::time::Duration;

use keel_kafka::Access;
use keel_metadata::acl::Principal;
use keel_proto::backoff::Backoff;
use keel_proto::convert::{acl_binding_from_pb, scram_credential_from_pb};
use keel_proto::pb;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::shared::{lock, Shared};

/// Reads the access data whenever asked, until `stop`.
pub(crate) async fn run_refresher(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    loop {
        tokio::select! {
            _ = shared.access.wake.notified() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        loop {
            match read(&shared).await {
                Ok(access) => {
                    let version = access.version;
                    let changed = shared.access.set(access);
                    if changed {
                        info!(
                            access_version = version,
                            "ACLs and credentials read from the active controller"
                        );
                    }
                    backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
                    break;
                }
                Err(e) => {
                    debug!(error = %e, "reading ACLs and credentials: trying again");
                    tokio::select! {
                        _ = tokio::time::sleep(backoff.step()) => {}
                        _ = stop.wait_for(|s| *s) => return,
                    }
                }
            }
        }
    }
}

/// One DescribeAccess call to the controller believed active.
async fn read(shared: &Shared) -> Result<Access, String> {
    let (addr, client) = shared.controller();
    let Some(mut client) = client else {
        lock(&shared.link).rotate();
        return Err(format!("{addr}: the address does not parse"));
    };
    let resp = tokio::time::timeout(
        Duration::from_secs(5),
        client.describe_access(pb::DescribeAccessRequest {
            broker_id: shared.id.0,
        }),
    )
    .await
    .map_err(|_| format!("{addr}: no answer"))?
    .map_err(|s| {
        lock(&shared.link).rotate();
        format!("{addr}: {}", s.message())
    })?
    .into_inner();
    if let Some(e) = resp.error.as_ref().filter(|e| e.code != 0) {
        lock(&shared.link).follow(e.leader.as_ref());
        return Err(format!("{addr}: {}", e.message));
    }
    access_from_pb(resp)
}

/// The answer as the listener uses it; a malformed part is left out with
/// a warning (never half a binding, never a credential that does not
/// check).
fn access_from_pb(resp: pb::DescribeAccessResponse) -> Result<Access, String> {
    let mut access = Access {
        open: resp.open,
        version: resp.access_version,
        ..Access::default()
    };
    for s in &resp.super_users {
        match s.parse::<Principal>() {
            Ok(p) => {
                access.super_users.insert(p);
            }
            Err(e) => warn!(error = %e, "a super user the controller named does not parse"),
        }
    }
    for b in &resp.acls {
        match acl_binding_from_pb(b) {
            Ok(b) => access.acls.push(b),
            Err(e) => warn!(error = %e, "an ACL binding the controller sent does not parse"),
        }
    }
    for c in &resp.credentials {
        match scram_credential_from_pb(c) {
            Ok((user, c)) => {
                access.credentials.insert((user, c.mechanism), c);
            }
            Err(e) => warn!(error = %e, "a credential the controller sent does not check"),
        }
    }
    Ok(access)
}
