//! Who may do what: principals, ACL bindings, and the authorization
//! decision (Kafka's `StandardAuthorizer` is the model).
//!
//! ACLs are records in the metadata log, replayed into the image like every
//! other record and carried in snapshots. The decision is a pure function
//! of the image's bindings, the configured super users, the caller's
//! principal (taken from its certificate, never from the request), the
//! operation and the resource:
//!
//! - a super user may do anything;
//! - a DENY binding that matches wins over every ALLOW;
//! - otherwise an ALLOW binding that matches permits;
//! - no matching binding: denied.
//!
//! Implied operations count for ALLOW bindings only: denying `delete` does
//! not deny `describe`, which allowing `delete` allows.
//!
//! A binding matches when its principal is the caller or the wildcard
//! `User:*`, its resource pattern covers the resource (a topic name, a
//! topic-name prefix, or the cluster), and its operation is the one asked
//! for, implies it (`alter` implies `describe`, `alter-configs` implies
//! `describe-configs`, ...), or is `all`.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Who is asking, as its certificate names it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Principal {
    /// An operator or application: `User:alice`. `User:*` in a binding
    /// matches every user.
    User(String),
    /// A broker of this cluster: `Broker:3`.
    Broker(u32),
    /// A controller of this cluster: `Controller:1`.
    Controller(u64),
    /// No identity (a plaintext listener): `User:ANONYMOUS`, as Kafka.
    Anonymous,
}

impl Principal {
    /// The wildcard user of a binding.
    pub fn any_user() -> Self {
        Principal::User("*".into())
    }

    fn is_user(&self) -> bool {
        matches!(self, Principal::User(_) | Principal::Anonymous)
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Principal::User(n) => write!(f, "User:{n}"),
            Principal::Broker(id) => write!(f, "Broker:{id}"),
            Principal::Controller(id) => write!(f, "Controller:{id}"),
            Principal::Anonymous => f.write_str("User:ANONYMOUS"),
        }
    }
}

/// Why a principal's text does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("principal {0:?} is not User:NAME, Broker:ID or Controller:ID")]
pub struct BadPrincipal(pub String);

impl FromStr for Principal {
    type Err = BadPrincipal;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadPrincipal(s.to_string());
        let (kind, name) = s.split_once(':').ok_or_else(bad)?;
        match kind {
            "User" if name == "ANONYMOUS" => Ok(Principal::Anonymous),
            "User" if valid_user_name(name) => Ok(Principal::User(name.to_string())),
            "Broker" => name.parse().map(Principal::Broker).map_err(|_| bad()),
            "Controller" => name.parse().map(Principal::Controller).map_err(|_| bad()),
            _ => Err(bad()),
        }
    }
}

/// A user name: 1-128 characters of letters, digits, `.`, `_`, `-`, `@`,
/// or the wildcard `*`.
pub fn valid_user_name(name: &str) -> bool {
    name == "*"
        || (!name.is_empty()
            && name.len() <= 128
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@')))
}

/// What a request does.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Operation {
    /// Everything below.
    All,
    Describe,
    Create,
    Delete,
    Alter,
    DescribeConfigs,
    AlterConfigs,
    /// What controllers and brokers do among themselves (registration,
    /// heartbeats, Raft): never granted to users by a binding on a topic.
    ClusterAction,
}

impl Operation {
    /// Every operation, for listings and tests.
    pub const ALL: [Operation; 8] = [
        Operation::All,
        Operation::Describe,
        Operation::Create,
        Operation::Delete,
        Operation::Alter,
        Operation::DescribeConfigs,
        Operation::AlterConfigs,
        Operation::ClusterAction,
    ];

    /// Whether a binding for `self` permits (or denies) `asked`: the same
    /// operation, `all`, or one that implies it (Kafka's implications:
    /// any of create, delete, alter implies describe; alter-configs implies
    /// describe-configs).
    pub fn covers(self, asked: Operation) -> bool {
        self == asked
            || self == Operation::All
            || (asked == Operation::Describe
                && matches!(
                    self,
                    Operation::Create | Operation::Delete | Operation::Alter
                ))
            || (asked == Operation::DescribeConfigs && self == Operation::AlterConfigs)
    }

    /// The CLI spelling (`alter-configs`).
    pub fn name(self) -> &'static str {
        match self {
            Operation::All => "all",
            Operation::Describe => "describe",
            Operation::Create => "create",
            Operation::Delete => "delete",
            Operation::Alter => "alter",
            Operation::DescribeConfigs => "describe-configs",
            Operation::AlterConfigs => "alter-configs",
            Operation::ClusterAction => "cluster-action",
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Operation {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Operation::ALL
            .into_iter()
            .find(|o| o.name() == s)
            .ok_or_else(|| {
                format!(
                    "operation {s:?} is not one of {}",
                    Operation::ALL.map(Operation::name).join(", ")
                )
            })
    }
}

/// What a binding applies to.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ResourcePattern {
    /// The topic of exactly this name.
    Topic(String),
    /// Every topic whose name starts with this (non-empty) prefix.
    TopicPrefix(String),
    /// The cluster: its brokers, quorum, configs and ACLs.
    Cluster,
}

impl fmt::Display for ResourcePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResourcePattern::Topic(t) => write!(f, "topic:{t}"),
            ResourcePattern::TopicPrefix(p) => write!(f, "topic-prefix:{p}"),
            ResourcePattern::Cluster => f.write_str("cluster"),
        }
    }
}

/// What a request touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource<'a> {
    Topic(&'a str),
    Cluster,
}

impl ResourcePattern {
    /// Whether this pattern covers `r`.
    pub fn covers(&self, r: Resource<'_>) -> bool {
        match (self, r) {
            (ResourcePattern::Topic(t), Resource::Topic(name)) => t == name,
            (ResourcePattern::TopicPrefix(p), Resource::Topic(name)) => {
                name.starts_with(p.as_str())
            }
            (ResourcePattern::Cluster, Resource::Cluster) => true,
            _ => false,
        }
    }
}

/// Allow or deny.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Permission {
    Allow,
    Deny,
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Permission::Allow => "allow",
            Permission::Deny => "deny",
        })
    }
}

/// One ACL: `principal` is `permission`ed to do `operation` on `pattern`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AclBinding {
    pub principal: Principal,
    pub pattern: ResourcePattern,
    pub operation: Operation,
    pub permission: Permission,
}

impl AclBinding {
    /// Whether this binding speaks about `principal` doing `op` on `r`.
    /// Implied operations count for ALLOW only (as in Kafka): denying
    /// `delete` does not deny `describe`.
    pub fn matches(&self, principal: &Principal, op: Operation, r: Resource<'_>) -> bool {
        let who = self.principal == *principal
            || (self.principal == Principal::any_user() && principal.is_user());
        let what = match self.permission {
            Permission::Allow => self.operation.covers(op),
            Permission::Deny => self.operation == op || self.operation == Operation::All,
        };
        who && what && self.pattern.covers(r)
    }

    /// Whether the binding is well formed: a user name of the right shape,
    /// a topic name or prefix that is not empty, no cluster-action granted
    /// on topics, and ids only on the cluster.
    pub fn validate(&self) -> Result<(), String> {
        if let Principal::User(n) = &self.principal {
            if !valid_user_name(n) {
                return Err(format!("user name {n:?} is not valid"));
            }
        }
        match &self.pattern {
            ResourcePattern::Topic(t) | ResourcePattern::TopicPrefix(t) if t.is_empty() => {
                Err("a topic name or prefix must not be empty".into())
            }
            ResourcePattern::Topic(_) | ResourcePattern::TopicPrefix(_)
                if self.operation == Operation::ClusterAction =>
            {
                Err("cluster-action applies to the cluster, not to topics".into())
            }
            _ => Ok(()),
        }
    }
}

impl fmt::Display for AclBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} on {}",
            self.permission, self.principal, self.operation, self.pattern
        )
    }
}

/// The outcome of an authorization check, with the reason for logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Permitted; by which rule.
    Allowed(&'static str),
    /// Refused; the binding that denied it, if a DENY did.
    Denied(Option<AclBinding>),
}

impl Verdict {
    pub fn allowed(&self) -> bool {
        matches!(self, Verdict::Allowed(_))
    }
}

/// The decision: may `principal` do `op` on `resource`?
pub fn authorize<'a>(
    acls: impl IntoIterator<Item = &'a AclBinding>,
    super_users: &BTreeSet<Principal>,
    principal: &Principal,
    op: Operation,
    resource: Resource<'_>,
) -> Verdict {
    if super_users.contains(principal) {
        return Verdict::Allowed("super user");
    }
    let mut allowed = false;
    for b in acls {
        if !b.matches(principal, op, resource) {
            continue;
        }
        match b.permission {
            Permission::Deny => return Verdict::Denied(Some(b.clone())),
            Permission::Allow => allowed = true,
        }
    }
    if allowed {
        Verdict::Allowed("an ACL allows it")
    } else {
        Verdict::Denied(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(n: &str) -> Principal {
        Principal::User(n.into())
    }

    fn bind(p: Principal, pat: ResourcePattern, op: Operation, perm: Permission) -> AclBinding {
        AclBinding {
            principal: p,
            pattern: pat,
            operation: op,
            permission: perm,
        }
    }

    #[test]
    fn principals_read_and_print_as_kafka_spells_them() {
        for s in [
            "User:alice",
            "User:*",
            "Broker:3",
            "Controller:1",
            "User:ANONYMOUS",
        ] {
            assert_eq!(s.parse::<Principal>().unwrap().to_string(), s);
        }
        for bad in ["alice", "User:", "Broker:x", "Group:g", "User:a b"] {
            assert!(bad.parse::<Principal>().is_err(), "{bad}");
        }
        assert_eq!(
            "alter-configs".parse::<Operation>(),
            Ok(Operation::AlterConfigs)
        );
        assert!("write".parse::<Operation>().is_err());
    }

    #[test]
    fn deny_wins_no_match_denies_and_super_users_may_do_anything() {
        let alice = user("alice");
        let orders = Resource::Topic("orders");
        let none = BTreeSet::new();
        let acls = [
            bind(
                user("*"),
                ResourcePattern::TopicPrefix("ord".into()),
                Operation::Alter,
                Permission::Allow,
            ),
            bind(
                alice.clone(),
                ResourcePattern::Topic("orders".into()),
                Operation::Delete,
                Permission::Deny,
            ),
        ];
        // Alter implies describe; the wildcard user covers alice.
        assert!(authorize(&acls, &none, &alice, Operation::Describe, orders).allowed());
        assert!(authorize(&acls, &none, &alice, Operation::Alter, orders).allowed());
        // Deny wins.
        assert_eq!(
            authorize(&acls, &none, &alice, Operation::Delete, orders),
            Verdict::Denied(Some(acls[1].clone()))
        );
        // No match: denied (another topic, another operation, a broker).
        assert!(!authorize(&acls, &none, &alice, Operation::Create, orders).allowed());
        assert!(!authorize(
            &acls,
            &none,
            &alice,
            Operation::Alter,
            Resource::Topic("payments")
        )
        .allowed());
        assert!(!authorize(
            &acls,
            &none,
            &Principal::Broker(1),
            Operation::Alter,
            orders
        )
        .allowed());
        assert!(!authorize(&acls, &none, &alice, Operation::Alter, Resource::Cluster).allowed());
        // A super user, even against a deny.
        let supers: BTreeSet<Principal> = [alice.clone()].into();
        assert!(authorize(&acls, &supers, &alice, Operation::Delete, orders).allowed());
    }

    #[test]
    fn malformed_bindings_are_refused() {
        let ok = bind(
            user("bob"),
            ResourcePattern::Cluster,
            Operation::Alter,
            Permission::Allow,
        );
        assert!(ok.validate().is_ok());
        let empty = bind(
            user("bob"),
            ResourcePattern::TopicPrefix(String::new()),
            Operation::Alter,
            Permission::Allow,
        );
        assert!(empty.validate().is_err());
        let topic_action = bind(
            user("bob"),
            ResourcePattern::Topic("t".into()),
            Operation::ClusterAction,
            Permission::Allow,
        );
        assert!(topic_action.validate().is_err());
        let bad_name = bind(
            user("b b"),
            ResourcePattern::Cluster,
            Operation::Alter,
            Permission::Allow,
        );
        assert!(bad_name.validate().is_err());
    }
}
