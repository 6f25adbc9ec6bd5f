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
//! A request a broker forwards from its Kafka listener acts as the client's
//! principal, judged by the ACLs; it gets a super user's power only when
//! the controllers allow it (`--super-users-via-brokers`), since whoever
//! holds a broker's key may name any principal there.
//!
//! A plaintext listener (`--allow-plaintext`) knows no identities: the
//! operator who started it gave up authentication, and with it
//! authorization. Every caller there may do everything, except see broker
//! incarnation ids (see [`Caller::may_see_incarnations`]).

use std::collections::BTreeSet;

use keel_metadata::acl::{authorize, AclBinding, Operation, Principal, Resource, Verdict};
use keel_metadata::{ApiError, ErrorCode, MetadataImage};
use tonic::Request;

use keel_proto::forwarded::{
    CLIENT as FORWARDED_CLIENT, LISTENER as FORWARDED_LISTENER, PRINCIPAL as FORWARDED_PRINCIPAL,
};

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
    /// certificate names no identity of this cluster), or, for a request a
    /// broker forwarded, the principal the broker's Kafka listener
    /// authenticated (`via` says which broker and from where).
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
    /// The caller of `req`: a `Write` session's request carries its
    /// session's caller; a unary call's comes from its connection, or, when
    /// a broker's certificate carries it with a forwarded principal, from
    /// the broker's Kafka listener.
    pub fn of<T>(req: &Request<T>) -> Caller {
        if let Some(c) = req.extensions().get::<Caller>() {
            return c.clone();
        }
        match keel_tls::transport::caller(req) {
            None => Caller::Unchecked,
            Some(Some(id)) => match (&id.role, forwarded(req)) {
                (keel_tls::Role::Broker(broker), Some(f)) => f.into_caller(*broker),
                // Only brokers forward: anyone else's header is ignored, and
                // it acts as itself.
                _ => Caller::As(id.principal()),
            },
            Some(None) => Caller::As(Principal::Anonymous),
        }
    }

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

    /// A checker of this caller's requests against `image`'s ACLs.
    pub fn checker<'a>(&'a self, image: &'a MetadataImage, supers: &'a SuperUsers) -> Checker<'a> {
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
        }
    }

    /// Broker incarnation ids (which a re-registration must name) go only
    /// to TLS callers allowed to describe the cluster: never over
    /// plaintext, where anyone could ask.
    pub fn may_see_incarnations(&self, image: &MetadataImage, super_users: &SuperUsers) -> bool {
        matches!(self, Caller::As(_) | Caller::Forwarded { .. })
            && self
                .checker(image, super_users)
                .check(Operation::Describe, Resource::Cluster)
                .is_ok()
    }
}

/// What a broker forwarded with a request.
struct ForwardedHeaders {
    /// The principal's text, or why the header is not one (not text, too
    /// long): never cut to fit, which could name another user.
    principal: Result<String, String>,
    client: String,
    listener: String,
}

/// The longest principal text a header may carry: `User:` and a user name
/// of at most 128 characters.
const MAX_PRINCIPAL_TEXT: usize = 5 + 128;

fn forwarded<T>(req: &Request<T>) -> Option<ForwardedHeaders> {
    let m = req.metadata();
    // Audit text only: cut to a bounded length.
    let text = |k: &str| {
        m.get(k)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.chars().take(256).collect::<String>())
    };
    let principal = m.get(FORWARDED_PRINCIPAL)?;
    let principal = match principal.to_str() {
        Err(_) => Err("a forwarded principal that is not text".to_string()),
        Ok(p) if p.len() > MAX_PRINCIPAL_TEXT => Err(format!(
            "a forwarded principal of {} bytes (at most {MAX_PRINCIPAL_TEXT})",
            p.len()
        )),
        Ok(p) => Ok(p.to_string()),
    };
    Some(ForwardedHeaders {
        principal,
        client: text(FORWARDED_CLIENT).unwrap_or_else(|| "?".into()),
        listener: text(FORWARDED_LISTENER).unwrap_or_else(|| "?".into()),
    })
}

impl ForwardedHeaders {
    /// The caller a request forwarded by `broker` acts as: only a user (or
    /// `User:ANONYMOUS`) can be forwarded; a node principal never, so no
    /// broker turns itself, another broker or a controller into the
    /// caller of its own request.
    fn into_caller(self, broker: u32) -> Caller {
        let text = match self.principal {
            Ok(t) => t,
            Err(why) => {
                tracing::warn!(broker, %why, client = %self.client, "refused: a malformed forwarded principal");
                return Caller::Refused(format!("broker {broker} forwarded {why}"));
            }
        };
        match text.parse::<Principal>() {
            Ok(p @ (Principal::User(_) | Principal::Anonymous)) if p != Principal::any_user() => {
                Caller::Forwarded {
                    principal: p,
                    broker,
                    client: self.client,
                    listener: self.listener,
                }
            }
            Ok(p) => {
                tracing::warn!(broker, forwarded = %p, client = %self.client, "refused: a broker forwarded a request as a principal no Kafka client can be");
                Caller::Refused(format!("broker {broker} forwarded as {p}"))
            }
            Err(e) => {
                tracing::warn!(broker, error = %e, "refused: a forwarded principal that does not parse");
                Caller::Refused(format!("broker {broker} forwarded {e}"))
            }
        }
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
        let Some(bindings) = &self.bindings else {
            return Ok(());
        };
        let Some(p) = self.caller.principal() else {
            // Refused: no binding speaks for it.
            let who = self.caller.name();
            tracing::warn!(caller = %who, operation = %op, ?resource, "refused");
            return Err(match resource {
                Resource::Topic(t) => ApiError::new(
                    ErrorCode::TopicAuthorizationFailed,
                    format!("{who} may not {op} topic {t:?}"),
                ),
                Resource::Cluster => ApiError::new(
                    ErrorCode::ClusterAuthorizationFailed,
                    format!("{who} may not {op} the cluster"),
                ),
            });
        };
        match authorize(bindings.iter().copied(), self.super_users, p, op, resource) {
            Verdict::Allowed(_) => Ok(()),
            Verdict::Denied(by) => {
                let why = match &by {
                    Some(b) => format!("an ACL denies it ({b})"),
                    None => "no ACL allows it".to_string(),
                };
                match self.caller {
                    Caller::Forwarded {
                        broker,
                        client,
                        listener,
                        ..
                    } => {
                        tracing::info!(principal = %p, operation = %op, ?resource, %why, %client, %listener, broker, "refused")
                    }
                    _ => {
                        tracing::info!(principal = %p, operation = %op, ?resource, %why, listener = "gRPC", "refused")
                    }
                }
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
        let Some(bindings) = &self.bindings else {
            return true;
        };
        let Some(p) = self.caller.principal() else {
            return false;
        };
        authorize(bindings.iter().copied(), self.super_users, p, op, resource).allowed()
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
        let none = SuperUsers::default();
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
        let supers = SuperUsers::from(BTreeSet::from([alice]));
        assert!(a
            .checker(&image, &supers)
            .check(Operation::Alter, Resource::Cluster)
            .is_ok());
        // Incarnations: never over plaintext, over TLS with describe.
        assert!(!Caller::Unchecked.may_see_incarnations(&image, &none));
        assert!(!a.may_see_incarnations(&image, &none));
        assert!(a.may_see_incarnations(&image, &supers));
    }

    /// A request as it reaches a TLS listener from `id`, with `forwarded`
    /// as the forwarded principal header.
    fn over_tls(id: keel_tls::Identity, forwarded: Option<&str>) -> Request<()> {
        let mut req = Request::new(());
        req.extensions_mut().insert(keel_tls::PeerInfo {
            remote: None,
            identity: Some(id),
        });
        if let Some(p) = forwarded {
            req.metadata_mut()
                .insert(FORWARDED_PRINCIPAL, p.parse().unwrap());
            req.metadata_mut()
                .insert(FORWARDED_LISTENER, "SASL_SSL".parse().unwrap());
        }
        req
    }

    #[test]
    fn a_forwarded_request_acts_as_the_client_never_as_the_broker_or_a_node() {
        let alice = Principal::User("alice".into());
        let image = image_with(&[AclBinding {
            principal: alice.clone(),
            pattern: ResourcePattern::Topic("orders".into()),
            operation: Operation::Create,
            permission: Permission::Allow,
        }]);
        // Broker 2 is a super user here: a forwarded request must not be.
        let supers = SuperUsers::from(BTreeSet::from([Principal::Broker(2)]));
        let orders = Resource::Topic("orders");
        let broker = keel_tls::Identity::broker("c", 2);

        let c = Caller::of(&over_tls(broker.clone(), Some("User:alice")));
        assert!(
            matches!(&c, Caller::Forwarded { principal, broker: 2, listener, .. }
            if *principal == alice && listener == "SASL_SSL")
        );
        let checks = c.checker(&image, &supers);
        assert!(checks.check(Operation::Create, orders).is_ok());
        assert_eq!(
            checks.check(Operation::Delete, orders).unwrap_err().code,
            ErrorCode::TopicAuthorizationFailed
        );
        // Anonymous clients are forwarded as such, with no rights here.
        let anon = Caller::of(&over_tls(broker.clone(), Some("User:ANONYMOUS")));
        assert!(anon
            .checker(&image, &supers)
            .check(Operation::Describe, Resource::Cluster)
            .is_err());
        // A node principal, the wildcard or garbage: refused outright.
        for forged in ["Broker:2", "Controller:1", "User:*", "nobody"] {
            let c = Caller::of(&over_tls(broker.clone(), Some(forged)));
            assert!(matches!(c, Caller::Refused(_)), "{forged}: {c:?}");
            let checks = c.checker(&image, &supers);
            assert!(
                checks.check(Operation::Describe, orders).is_err(),
                "{forged}"
            );
            assert!(
                !checks.may(Operation::Describe, Resource::Cluster),
                "{forged}"
            );
        }
        // Only brokers forward: a user's header is ignored.
        let user = keel_tls::Identity::user("c", "mallory");
        assert_eq!(
            Caller::of(&over_tls(user, Some("User:alice"))),
            Caller::As(Principal::User("mallory".into()))
        );
        // Without the header a broker acts as itself.
        assert_eq!(
            Caller::of(&over_tls(broker, None)),
            Caller::As(Principal::Broker(2))
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// Whatever a broker forwards (any text, any length, or bytes that
        /// are no text at all), the caller is the user it names exactly,
        /// or refused: never a node, never the wildcard, never a name cut
        /// to fit, and nothing panics.
        #[test]
        fn a_forwarded_principal_is_the_user_it_names_exactly_or_refused(
            text in proptest::prop_oneof![
                "User:[a-zA-Z0-9._@-]{1,140}",
                "(User|Broker|Controller|Group):.{0,20}",
                ".{0,300}",
            ],
            raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            use_raw in proptest::prelude::any::<bool>(),
        ) {
            let mut req = Request::new(());
            req.extensions_mut().insert(keel_tls::PeerInfo {
                remote: None,
                identity: Some(keel_tls::Identity::broker("c", 2)),
            });
            let value = if use_raw {
                tonic::metadata::MetadataValue::try_from(raw.as_slice()).ok()
            } else {
                text.parse().ok()
            };
            let Some(value) = value else { return Ok(()) };
            req.metadata_mut().insert(FORWARDED_PRINCIPAL, value);
            match Caller::of(&req) {
                Caller::Forwarded { principal, .. } => {
                    let sent = req.metadata().get(FORWARDED_PRINCIPAL).unwrap().to_str().unwrap();
                    proptest::prop_assert_eq!(principal.to_string(), sent);
                    proptest::prop_assert!(matches!(principal, Principal::User(ref n) if n != "*") || principal == Principal::Anonymous);
                }
                Caller::Refused(_) => {}
                other => proptest::prop_assert!(false, "{other:?}"),
            }
        }
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
                .checker(&image, &supers)
                .check(Operation::Alter, Resource::Cluster)
                .unwrap_err()
                .code,
            ErrorCode::ClusterAuthorizationFailed
        );
        // The same principal on its own certificate is a super user.
        assert!(Caller::As(admin)
            .checker(&image, &supers)
            .check(Operation::Alter, Resource::Cluster)
            .is_ok());
        supers.via_brokers = true;
        assert!(forwarded
            .checker(&image, &supers)
            .check(Operation::Alter, Resource::Cluster)
            .is_ok());
    }
}
