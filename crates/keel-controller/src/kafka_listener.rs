//! The controller's Kafka listener (`--kafka-listen`): Kafka clients that
//! bootstrap from the controllers (KIP-919, `--bootstrap-controller`) ask
//! it ApiVersions, DescribeCluster (the controllers and the active one)
//! and DescribeQuorum (the metadata log as Raft sees it), answered from
//! this node's own Raft state through `keel_kafka`.
//!
//! A controller learns only its own Kafka listener; the others are taken
//! to listen on the same port at their voter address's host, as `keel dev`
//! and the test kit start them.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use std::sync::Mutex;

use keel_kafka::{Access, ClusterView, QuorumMember, QuorumView, ViewSource};

use crate::shared::Shared;

/// Makes a fresh view of the quorum for each request.
pub(crate) struct QuorumViews {
    pub(crate) shared: Arc<Shared>,
    /// This controller's bound Kafka listener.
    pub(crate) kafka_address: SocketAddr,
    /// The access last made, remade when the image's ACLs or credentials
    /// changed (`access_version`).
    pub(crate) access: Mutex<Option<Arc<Access>>>,
}

impl QuorumViews {
    /// Who may do what, from this controller's own image.
    fn make_access(&self) -> Arc<Access> {
        if matches!(self.shared.config.transport, keel_tls::Transport::Plaintext) {
            return Arc::new(Access::open());
        }
        let applied = self.shared.applied();
        let image = &applied.image;
        let version = image.access_version();
        let mut last = self.access.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(a) = last.as_ref().filter(|a| a.version == version) {
            return a.clone();
        }
        let access = Arc::new(Access {
            open: false,
            version,
            super_users: self.shared.config.super_users.clone(),
            acls: image.acls().cloned().collect(),
            credentials: image
                .scram_users()
                .map(|(user, m, c)| ((user.to_string(), m), c.clone()))
                .collect(),
        });
        *last = Some(access.clone());
        access
    }
}

impl ViewSource for QuorumViews {
    fn access(&self) -> Arc<Access> {
        self.make_access()
    }

    fn view(&self) -> Arc<ClusterView> {
        let now_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let d = crate::quorum::describe(&self.shared);
        let me = self.shared.config.node_id;
        let leader_id = (d.leader_id != 0).then_some(d.leader_id);
        let mut voters = Vec::new();
        let mut observers = Vec::new();
        let mut listeners = BTreeMap::new();
        for v in &d.voters {
            let contact = v
                .last_contact_ms
                .map(|ago| now_unix_ms - i64::try_from(ago).unwrap_or(i64::MAX / 2));
            let member = QuorumMember {
                id: v.id,
                directory_id: u128::from_str_radix(&v.directory_id, 16).unwrap_or(0),
                log_end_offset: v.last_log_index,
                last_contact_unix_ms: contact,
                // Caught up now if it holds the leader's whole log.
                last_caught_up_unix_ms: contact.filter(|_| v.lag == 0),
            };
            if v.status == "learner" {
                observers.push(member);
            } else {
                voters.push(member);
            }
            let host = if v.id == me {
                Some(self.kafka_address.ip())
            } else {
                v.address
                    .rsplit_once(':')
                    .and_then(|(h, _)| h.trim_matches(['[', ']']).parse::<IpAddr>().ok())
            };
            if let Some(ip) = host {
                listeners.insert(v.id, SocketAddr::new(ip, self.kafka_address.port()));
            }
        }
        Arc::new(ClusterView {
            cluster_id: self.shared.config.cluster_id.clone(),
            quorum: Some(QuorumView {
                node_id: me,
                leader_id,
                is_leader: leader_id == Some(me),
                term: d.term,
                commit_index: d.commit_index,
                voters,
                observers,
                listeners,
            }),
            ..ClusterView::default()
        })
    }
}
