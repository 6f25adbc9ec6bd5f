//! The broker's copy of who may do what (ACL bindings, super users, SCRAM
//! credentials), for its Kafka listener: logins are checked against it and
//! Metadata leaves out the topics a client may not describe. Read from the
//! active controller (DescribeAccess) at start, whenever a heartbeat answer
//! names a newer `access_version`, and (at most once a second) when a
//! login names a user this copy does not know.
//!
//! Nothing here authorizes a write: the active controller authorizes every
//! forwarded admin request again, as the client, inside its decision.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_kafka::Access;
use keel_metadata::acl::Principal;
use keel_proto::backoff::Backoff;
use keel_proto::convert::{acl_binding_from_pb, scram_credential_from_pb};
use keel_proto::pb;
use tokio::sync::{watch, Notify};
use tracing::{debug, info, warn};

use crate::shared::{lock, Shared};

/// The least time between two reads asked for by unknown logins.
const MISS_PAUSE: Duration = Duration::from_secs(1);

/// The current copy, and what wakes its refresher.
pub(crate) struct AccessCache {
    current: Mutex<Arc<Access>>,
    wake: Notify,
    /// When an unknown login last asked for a read.
    last_miss: Mutex<Option<Instant>>,
}

impl AccessCache {
    /// A broker that speaks plaintext checks nothing; one over TLS lets
    /// nobody log in and shows no topic until its first read.
    pub(crate) fn new(plaintext: bool) -> Self {
        let first = if plaintext {
            Access::open()
        } else {
            Access::default()
        };
        let cache = Self {
            current: Mutex::new(Arc::new(first)),
            wake: Notify::new(),
            last_miss: Mutex::new(None),
        };
        // The refresher reads once at start.
        cache.wake.notify_one();
        cache
    }

    pub(crate) fn get(&self) -> Arc<Access> {
        lock(&self.current).clone()
    }

    /// A heartbeat answer named `version`: read again if this copy is older.
    pub(crate) fn want(&self, version: u64) {
        if version != self.get().version {
            self.wake.notify_one();
        }
    }

    /// A login failed: perhaps its user was made a moment ago.
    pub(crate) fn missed(&self) {
        let mut last = lock(&self.last_miss);
        if last.is_none_or(|t| t.elapsed() >= MISS_PAUSE) {
            *last = Some(Instant::now());
            self.wake.notify_one();
        }
    }
}

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
                    let changed = *shared.access.get() != access;
                    *lock(&shared.access.current) = Arc::new(access);
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
