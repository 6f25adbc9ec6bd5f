//! The caller of an admin request and its checks against an image's ACLs.
//!
//! The decision itself is [`authorize`] over the image's bindings and the
//! configured super users; controllers of the cluster are always super
//! users. A [`Checker`] picks one caller's bindings out of one image once,
//! so a request that checks many topics reads the bindings once; decisions
//! take it as an argument and check each item against the image they
//! decide on, so an ACL change and a request it governs are ordered by the
//! log.
//!
//! Who the caller is (a certificate, a broker's forwarded header) is the
//! node's business; so is logging a refusal, which a checker reports to
//! the function it was given (see [`Refusal`]).

use std::collections::BTreeSet;

use crate::acl::{authorize, AclBinding, Operation, Principal, Resource, Verdict};
use crate::{ApiError, ErrorCode, MetadataImage};

/// The configured super users (`--super-users`), and whether a broker may
/// forward a request as one of them (`--super-users-via-brokers`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SuperUsers {
    pub principals: BTreeSet<Principal>,
    /// Off by default: a request forwarded by a broker is then judged by
    /// the ACLs alone, whatever principal it names, so a broker's key never
    /// carries more than the ACLs grant.
    pub via_brokers: bool,
}

impl From<BTreeSet<Principal>> for SuperUsers {
    fn from(principals: BTreeSet<Principal>) -> Self {
        Self {
            principals,
            via_brokers: false,
        }
    }
}

/// No super users: what a forwarded request sees without
/// `--super-users-via-brokers`.
static NO_SUPER_USERS: BTreeSet<Principal> = BTreeSet::new();

/// The caller of an admin request, as authorization sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// A plaintext listener: no identity, no checks.
    Unchecked,
    /// A TLS caller: its certificate's principal (`User:ANONYMOUS` when the
    /// certificate names no identity of this cluster).
    As(Principal),
    /// A Kafka client's request forwarded by a broker: authorized as
    /// `principal`, never as the broker.
    Forwarded {
        principal: Principal,
        /// The broker whose certificate carried the request.
        broker: u32,
        /// The client's address and the listener, for audit lines.
        client: String,
        listener: String,
    },
    /// A request no check may pass: a broker forwarding as a node
    /// principal, or a forwarded principal that does not parse.
    Refused(String),
}

impl Caller {
    /// The principal authorized, if any.
    pub fn principal(&self) -> Option<&Principal> {
        match self {
            Caller::As(p) | Caller::Forwarded { principal: p, .. } => Some(p),
            Caller::Unchecked | Caller::Refused(_) => None,
        }
    }

    /// The principal for log lines.
    pub fn name(&self) -> String {
        match self {
            Caller::Unchecked => "a plaintext caller".into(),
            Caller::As(p) => p.to_string(),
            Caller::Forwarded {
                principal,
                broker,
                client,
                listener,
            } => {
                format!("{principal} (from {client} over {listener}, forwarded by broker {broker})")
            }
            Caller::Refused(why) => format!("a refused caller ({why})"),
        }
    }

    /// A checker of this caller's requests against `image`'s ACLs, which
    /// hands every refusal to `report` as well as returning it.
    pub fn checker<'a>(
        &'a self,
        image: &'a MetadataImage,
        supers: &'a SuperUsers,
        report: Report,
    ) -> Checker<'a> {
        let super_users = match self {
            Caller::Forwarded { .. } if !supers.via_brokers => &NO_SUPER_USERS,
            _ => &supers.principals,
        };
        let bindings = match self {
            Caller::Refused(_) => Some(Vec::new()),
            Caller::As(p) | Caller::Forwarded { principal: p, .. } if !is_super(p, super_users) => {
                Some(
                    image
                        .acls()
                        .filter(|b| b.principal == *p || b.principal == Principal::any_user())
                        .collect(),
                )
            }
            _ => None,
        };
        Checker {
            caller: self,
            super_users,
            bindings,
            report,
        }
    }
}

fn is_super(p: &Principal, super_users: &BTreeSet<Principal>) -> bool {
    matches!(p, Principal::Controller(_)) || super_users.contains(p)
}

/// A check that failed, as a checker reports it for the node's log (the
/// refusal itself is the check's error).
#[derive(Clone, Copy, Debug)]
pub struct Refusal<'a> {
    pub caller: &'a Caller,
    pub operation: Operation,
    pub resource: Resource<'a>,
    /// Why the ACLs deny it; `None` for a caller no check may pass
    /// ([`Caller::Refused`]).
    pub why: Option<&'a str>,
}

/// Where a checker reports its refusals.
pub type Report = fn(&Refusal<'_>);

/// One caller's checks against one image (the caller's bindings picked
/// out once, for requests that check many topics).
pub struct Checker<'a> {
    caller: &'a Caller,
    super_users: &'a BTreeSet<Principal>,
    /// `None`: everything is allowed (plaintext or a super user).
    bindings: Option<Vec<&'a AclBinding>>,
    /// Told of every refusal `check` returns.
    report: Report,
}

impl Refusal<'_> {
    /// The typed refusal (TOPIC_ or CLUSTER_AUTHORIZATION_FAILED) naming
    /// who was refused what, and why when the ACLs say.
    pub fn error(&self) -> ApiError {
        let op = self.operation;
        let (who, because) = match (self.caller.principal(), self.why) {
            (Some(p), Some(why)) => (p.to_string(), format!(": {why}")),
            _ => (self.caller.name(), String::new()),
        };
        match self.resource {
            Resource::Topic(t) => ApiError::new(
                ErrorCode::TopicAuthorizationFailed,
                format!("{who} may not {op} topic {t:?}{because}"),
            ),
            Resource::Cluster => ApiError::new(
                ErrorCode::ClusterAuthorizationFailed,
                format!("{who} may not {op} the cluster{because}"),
            ),
        }
    }
}

impl Checker<'_> {
    /// `Ok` when the caller may do `op` on `resource`; else the typed
    /// refusal (see [`Refusal::error`]), reported first.
    pub fn check(&self, op: Operation, resource: Resource<'_>) -> Result<(), ApiError> {
        let Some(bindings) = &self.bindings else {
            return Ok(());
        };
        let why = match self.caller.principal() {
            // Refused: no binding speaks for it.
            None => None,
            Some(p) => match authorize(bindings.iter().copied(), self.super_users, p, op, resource)
            {
                Verdict::Allowed(_) => return Ok(()),
                Verdict::Denied(Some(b)) => Some(format!("an ACL denies it ({b})")),
                Verdict::Denied(None) => Some("no ACL allows it".to_string()),
            },
        };
        let refusal = Refusal {
            caller: self.caller,
            operation: op,
            resource,
            why: why.as_deref(),
        };
        (self.report)(&refusal);
        Err(refusal.error())
    }

    /// Whether the caller may do `op` on `resource` (nothing reported).
    pub fn may(&self, op: Operation, resource: Resource<'_>) -> bool {
        let Some(bindings) = &self.bindings else {
            return true;
        };
        let Some(p) = self.caller.principal() else {
            return false;
        };
        authorize(bindings.iter().copied(), self.super_users, p, op, resource).allowed()
    }

    /// Broker incarnation ids (which a re-registration must name) go only
    /// to TLS callers allowed to describe the cluster: never over
    /// plaintext, where anyone could ask.
    pub fn may_see_incarnations(&self) -> bool {
        matches!(self.caller, Caller::As(_) | Caller::Forwarded { .. })
            && self.check(Operation::Describe, Resource::Cluster).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::{Permission, ResourcePattern};
    use crate::records::MetadataRecord;

    fn image_with(bindings: &[AclBinding]) -> MetadataImage {
        let mut image = MetadataImage::new();
        for b in bindings {
            image
                .replay(&MetadataRecord::AclAdded(b.clone()), 1)
                .unwrap();
        }
        image
    }

    /// Reports nothing.
    fn quiet(_: &Refusal<'_>) {}

    #[test]
    fn plaintext_and_super_users_pass_others_need_a_binding() {
        let alice = Principal::User("alice".into());
        let image = image_with(&[AclBinding {
            principal: alice.clone(),
            pattern: ResourcePattern::Topic("orders".into()),
            operation: Operation::Create,
            permission: Permission::Allow,
        }]);
        let none = SuperUsers::default();
        let orders = Resource::Topic("orders");
        assert!(Caller::Unchecked
            .checker(&image, &none, quiet)
            .check(Operation::Delete, orders)
            .is_ok());
        assert!(Caller::As(Principal::Controller(2))
            .checker(&image, &none, quiet)
            .check(Operation::Alter, Resource::Cluster)
            .is_ok());
        let a = Caller::As(alice.clone());
        let c = a.checker(&image, &none, quiet);
        assert!(c.check(Operation::Create, orders).is_ok());
        assert!(c.may(Operation::Describe, orders));
        let e = c.check(Operation::Delete, orders).unwrap_err();
        assert_eq!(e.code, ErrorCode::TopicAuthorizationFailed);
        let e = c.check(Operation::Alter, Resource::Cluster).unwrap_err();
        assert_eq!(e.code, ErrorCode::ClusterAuthorizationFailed);
        let supers = SuperUsers::from(BTreeSet::from([alice]));
        assert!(a
            .checker(&image, &supers, quiet)
            .check(Operation::Alter, Resource::Cluster)
            .is_ok());
        // Incarnations: never over plaintext, over TLS with describe.
        assert!(!Caller::Unchecked
            .checker(&image, &none, quiet)
            .may_see_incarnations());
        assert!(!a.checker(&image, &none, quiet).may_see_incarnations());
        assert!(a.checker(&image, &supers, quiet).may_see_incarnations());
    }

    #[test]
    fn a_forwarded_super_user_has_its_power_only_where_the_controllers_allow_it() {
        let image = image_with(&[]);
        let admin = Principal::User("admin".into());
        let forwarded = Caller::Forwarded {
            principal: admin.clone(),
            broker: 2,
            client: "127.0.0.9:5555".into(),
            listener: "SSL".into(),
        };
        let mut supers = SuperUsers::from(BTreeSet::from([admin.clone()]));
        // Off (the default): the ACLs alone, and there are none.
        assert_eq!(
            forwarded
                .checker(&image, &supers, quiet)
                .check(Operation::Alter, Resource::Cluster)
                .unwrap_err()
                .code,
            ErrorCode::ClusterAuthorizationFailed
        );
        // The same principal on its own certificate is a super user.
        assert!(Caller::As(admin)
            .checker(&image, &supers, quiet)
            .check(Operation::Alter, Resource::Cluster)
            .is_ok());
        supers.via_brokers = true;
        assert!(forwarded
            .checker(&image, &supers, quiet)
            .check(Operation::Alter, Resource::Cluster)
            .is_ok());
    }
}
