//! What a Kafka listener needs to know of who may do what: the cluster's
//! ACL bindings and super users (to leave out of Metadata the topics a
//! client may not describe, as Kafka does) and its SCRAM credentials (to
//! check a SASL login). A controller's listener reads them from its own
//! image; a broker's from the active controller, again whenever its
//! heartbeat answer says they changed.
//!
//! Nothing here decides a write: every forwarded admin request is
//! authorized again by the active controller, inside its decision, as the
//! client's principal.

use std::collections::{BTreeMap, BTreeSet};

use keel_metadata::acl::{authorize, AclBinding, Operation, Principal, Resource};
use keel_metadata::scram::{ScramCredential, ScramMechanism};

/// A snapshot of the cluster's ACLs, super users and SCRAM credentials.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Access {
    /// Everyone may do everything: a cluster that speaks plaintext
    /// (`--allow-plaintext`), whose controllers check no identities.
    pub open: bool,
    /// Where these were read: the log index of the last ACL or credential
    /// change the source had applied (0: never read).
    pub version: u64,
    /// Principals every check lets through (`--super-users`).
    pub super_users: BTreeSet<Principal>,
    /// Every binding in force.
    pub acls: Vec<AclBinding>,
    /// Every user's credential, per mechanism.
    pub credentials: BTreeMap<(String, ScramMechanism), ScramCredential>,
}

impl Access {
    /// The access of a plaintext cluster: nothing is checked.
    pub fn open() -> Self {
        Self {
            open: true,
            ..Self::default()
        }
    }

    /// Whether `principal` may do `op` on `resource` (the controller's own
    /// rule: super users, then DENY over ALLOW; controllers always may).
    pub fn may(&self, principal: &Principal, op: Operation, resource: Resource<'_>) -> bool {
        self.open
            || matches!(principal, Principal::Controller(_))
            || authorize(&self.acls, &self.super_users, principal, op, resource).allowed()
    }

    /// `user`'s credential for `mechanism`, if it has one.
    pub fn credential(&self, user: &str, mechanism: ScramMechanism) -> Option<&ScramCredential> {
        self.credentials.get(&(user.to_string(), mechanism))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_metadata::acl::{Permission, ResourcePattern};

    #[test]
    fn describe_follows_the_bindings_and_an_open_cluster_lets_everyone_in() {
        let alice = Principal::User("alice".into());
        let bob = Principal::User("bob".into());
        let access = Access {
            acls: vec![AclBinding {
                principal: alice.clone(),
                pattern: ResourcePattern::TopicPrefix("orders".into()),
                operation: Operation::Describe,
                permission: Permission::Allow,
            }],
            super_users: [Principal::User("admin".into())].into(),
            ..Access::default()
        };
        let orders = Resource::Topic("orders-eu");
        assert!(access.may(&alice, Operation::Describe, orders));
        assert!(!access.may(&alice, Operation::Describe, Resource::Topic("payroll")));
        assert!(!access.may(&bob, Operation::Describe, orders));
        assert!(!access.may(&Principal::Anonymous, Operation::Describe, orders));
        assert!(access.may(&Principal::User("admin".into()), Operation::Delete, orders));
        assert!(Access::open().may(&bob, Operation::Delete, orders));
    }
}
