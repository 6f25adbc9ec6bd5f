//! Who may do what through the admin service.
//!
//! The caller's principal comes from its TLS certificate
//! ([`keel_tls::transport::peer`]), never from the request. The decision is
//! the pure [`keel_metadata::acl::authorize`] over the image's ACL
//! bindings and the configured super users; controllers of the cluster are
//! always super users. Writes are checked inside their decision, against
//! the image the decision is made on, so an ACL change and a request it
//! governs are ordered by the log.
//!
//! A plaintext listener (`--allow-plaintext`) knows no identities: the
//! operator who started it gave up authentication, and with it
//! authorization. Every caller there may do everything, except see broker
//! incarnation ids (see [`Caller::may_see_incarnations`]).

use std::collections::BTreeSet;

use keel_metadata::acl::{authorize, AclBinding, Operation, Principal, Resource, Verdict};
use keel_metadata::decide::Decision;
use keel_metadata::{ApiError, ErrorCode, MetadataImage};
use tonic::Request;

/// The caller of an admin request, as authorization sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// A plaintext listener: no identity, no checks.
    Unchecked,
    /// A TLS caller: its certificate's principal (`User:ANONYMOUS` when the
    /// certificate names no identity of this cluster).
    As(Principal),
}

impl Caller {
    /// The caller of `req`: a `Write` session's request carries its
    /// session's caller; a unary call's comes from its connection.
    pub fn of<T>(req: &Request<T>) -> Caller {
        if let Some(c) = req.extensions().get::<Caller>() {
            return c.clone();
        }
        match keel_tls::transport::caller(req) {
            None => Caller::Unchecked,
            Some(Some(id)) => Caller::As(id.principal()),
            Some(None) => Caller::As(Principal::Anonymous),
        }
    }

    /// The principal for log lines.
    pub fn name(&self) -> String {
        match self {
            Caller::Unchecked => "a plaintext caller".into(),
            Caller::As(p) => p.to_string(),
        }
    }

    /// A checker of this caller's requests against `image`'s ACLs.
    pub fn checker<'a>(
        &'a self,
        image: &'a MetadataImage,
        super_users: &'a BTreeSet<Principal>,
    ) -> Checker<'a> {
        let bindings = match self {
            Caller::As(p) if !is_super(p, super_users) => Some(
                image
                    .acls()
                    .filter(|b| b.principal == *p || b.principal == Principal::any_user())
                    .collect(),
            ),
            _ => None,
        };
        Checker {
            caller: self,
            super_users,
            bindings,
        }
    }

    /// Broker incarnation ids (which a re-registration must name) go only
    /// to TLS callers allowed to describe the cluster: never over
    /// plaintext, where anyone could ask.
    pub fn may_see_incarnations(
        &self,
        image: &MetadataImage,
        super_users: &BTreeSet<Principal>,
    ) -> bool {
        matches!(self, Caller::As(_))
            && self
                .checker(image, super_users)
                .check(Operation::Describe, Resource::Cluster)
                .is_ok()
    }
}

fn is_super(p: &Principal, super_users: &BTreeSet<Principal>) -> bool {
    matches!(p, Principal::Controller(_)) || super_users.contains(p)
}

/// One caller's checks against one image (the caller's bindings picked
/// out once, for requests that check many topics).
pub struct Checker<'a> {
    caller: &'a Caller,
    super_users: &'a BTreeSet<Principal>,
    /// `None`: everything is allowed (plaintext or a super user).
    bindings: Option<Vec<&'a AclBinding>>,
}

impl Checker<'_> {
    /// `Ok` when the caller may do `op` on `resource`; else the typed
    /// refusal (TOPIC_ or CLUSTER_AUTHORIZATION_FAILED) naming both.
    pub fn check(&self, op: Operation, resource: Resource<'_>) -> Result<(), ApiError> {
        let (Some(bindings), Caller::As(p)) = (&self.bindings, self.caller) else {
            return Ok(());
        };
        match authorize(bindings.iter().copied(), self.super_users, p, op, resource) {
            Verdict::Allowed(_) => Ok(()),
            Verdict::Denied(by) => {
                let why = match &by {
                    Some(b) => format!("an ACL denies it ({b})"),
                    None => "no ACL allows it".to_string(),
                };
                tracing::info!(principal = %p, operation = %op, ?resource, %why, "refused");
                Err(match resource {
                    Resource::Topic(t) => ApiError::new(
                        ErrorCode::TopicAuthorizationFailed,
                        format!("{p} may not {op} topic {t:?}: {why}"),
                    ),
                    Resource::Cluster => ApiError::new(
                        ErrorCode::ClusterAuthorizationFailed,
                        format!("{p} may not {op} the cluster: {why}"),
                    ),
                })
            }
        }
    }

    /// Whether the caller may do `op` on `resource` (no log line).
    pub fn may(&self, op: Operation, resource: Resource<'_>) -> bool {
        let (Some(bindings), Caller::As(p)) = (&self.bindings, self.caller) else {
            return true;
        };
        authorize(bindings.iter().copied(), self.super_users, p, op, resource).allowed()
    }
}

/// Decides the items of a per-topic request that the caller may submit and
/// answers the others with their refusal, in the request's order: a
/// refused item writes nothing and does not stop the others (as Kafka).
pub fn decide_permitted<I, R>(
    items: &[I],
    refusal: impl Fn(&I) -> Option<ApiError>,
    name: impl Fn(&I) -> String,
    decide: impl FnOnce(&[I]) -> Decision<Vec<(String, Result<R, ApiError>)>>,
) -> Decision<Vec<(String, Result<R, ApiError>)>>
where
    I: Clone,
{
    let refusals: Vec<Option<ApiError>> = items.iter().map(&refusal).collect();
    if refusals.iter().all(Option::is_none) {
        return decide(items);
    }
    let permitted: Vec<I> = items
        .iter()
        .zip(&refusals)
        .filter(|(_, r)| r.is_none())
        .map(|(i, _)| i.clone())
        .collect();
    let d = decide(&permitted);
    let mut decided = d.reply.into_iter();
    let mut reply = Vec::with_capacity(items.len());
    for (item, refused) in items.iter().zip(refusals) {
        match refused {
            Some(e) => reply.push((name(item), Err(e))),
            None => match decided.next() {
                Some(r) => reply.push(r),
                None => reply.push((
                    name(item),
                    Err(ApiError::new(ErrorCode::Internal, "no decision for item")),
                )),
            },
        }
    }
    Decision {
        records: d.records,
        reply,
        replayed: d.replayed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_metadata::acl::{Permission, ResourcePattern};
    use keel_metadata::records::MetadataRecord;

    fn image_with(bindings: &[AclBinding]) -> MetadataImage {
        let mut image = MetadataImage::new();
        for b in bindings {
            image
                .replay(&MetadataRecord::AclAdded(b.clone()), 1)
                .unwrap();
        }
        image
    }

    #[test]
    fn plaintext_and_super_users_pass_others_need_a_binding() {
        let alice = Principal::User("alice".into());
        let image = image_with(&[AclBinding {
            principal: alice.clone(),
            pattern: ResourcePattern::Topic("orders".into()),
            operation: Operation::Create,
            permission: Permission::Allow,
        }]);
        let none = BTreeSet::new();
        let orders = Resource::Topic("orders");
        assert!(Caller::Unchecked
            .checker(&image, &none)
            .check(Operation::Delete, orders)
            .is_ok());
        assert!(Caller::As(Principal::Controller(2))
            .checker(&image, &none)
            .check(Operation::Alter, Resource::Cluster)
            .is_ok());
        let a = Caller::As(alice.clone());
        let c = a.checker(&image, &none);
        assert!(c.check(Operation::Create, orders).is_ok());
        assert!(c.may(Operation::Describe, orders));
        let e = c.check(Operation::Delete, orders).unwrap_err();
        assert_eq!(e.code, ErrorCode::TopicAuthorizationFailed);
        let e = c.check(Operation::Alter, Resource::Cluster).unwrap_err();
        assert_eq!(e.code, ErrorCode::ClusterAuthorizationFailed);
        let supers: BTreeSet<Principal> = [alice].into();
        assert!(a
            .checker(&image, &supers)
            .check(Operation::Alter, Resource::Cluster)
            .is_ok());
        // Incarnations: never over plaintext, over TLS with describe.
        assert!(!Caller::Unchecked.may_see_incarnations(&image, &none));
        assert!(!a.may_see_incarnations(&image, &none));
        assert!(a.may_see_incarnations(&image, &supers));
    }

    #[test]
    fn refused_items_keep_their_place_and_write_nothing() {
        let items = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        let d = decide_permitted(
            &items,
            |i| (i == "b").then(|| ApiError::new(ErrorCode::TopicAuthorizationFailed, "no")),
            Clone::clone,
            |permitted| {
                assert_eq!(permitted, ["a".to_string(), "c".to_string()]);
                Decision {
                    records: vec![],
                    reply: permitted.iter().map(|n| (n.clone(), Ok(()))).collect(),
                    replayed: None,
                }
            },
        );
        let names: Vec<&str> = d.reply.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert!(d.reply[0].1.is_ok() && d.reply[2].1.is_ok());
        assert_eq!(
            d.reply[1].1.as_ref().unwrap_err().code,
            ErrorCode::TopicAuthorizationFailed
        );
    }
}
