//! Who may do what through the admin service.
//!
//! The caller's principal comes from its TLS certificate
//! ([`keel_tls::transport::peer`]), never from the request. The decision is
//! the pure [`keel_metadata::authz::Checker`] over the image's ACL
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
//! incarnation ids (see [`Checker::may_see_incarnations`]).

use keel_metadata::acl::Principal;
use keel_metadata::MetadataImage;
use tonic::Request;

pub use keel_metadata::authz::{Caller, Checker, Refusal, SuperUsers};

use keel_proto::forwarded::{
    CLIENT as FORWARDED_CLIENT, LISTENER as FORWARDED_LISTENER, PRINCIPAL as FORWARDED_PRINCIPAL,
};

/// The caller of `req`: a `Write` session's request carries its session's
/// caller; a unary call's comes from its connection, or, when a broker's
/// certificate carries it with a forwarded principal, from the broker's
/// Kafka listener.
pub fn caller_of<T>(req: &Request<T>) -> Caller {
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

/// A checker of `caller`'s requests against `image`'s ACLs that logs each
/// refusal.
pub fn checker<'a>(
    caller: &'a Caller,
    image: &'a MetadataImage,
    supers: &'a SuperUsers,
) -> Checker<'a> {
    caller.checker(image, supers, log_refusal)
}

/// One log line per refused check: a warning for a caller no check may
/// pass, else who was refused what, why, and over which listener.
fn log_refusal(r: &Refusal<'_>) {
    let (op, resource) = (r.operation, r.resource);
    let (Some(p), Some(why)) = (r.caller.principal(), r.why) else {
        let who = r.caller.name();
        tracing::warn!(caller = %who, operation = %op, ?resource, "refused");
        return;
    };
    match r.caller {
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use keel_metadata::acl::{AclBinding, Operation, Permission, Resource, ResourcePattern};
    use keel_metadata::records::MetadataRecord;
    use keel_metadata::ErrorCode;

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
        // Alice may create `orders`, and nothing else.
        let alice = Principal::User("alice".into());
        let may_create = MetadataRecord::AclAdded(AclBinding {
            principal: alice.clone(),
            pattern: ResourcePattern::Topic("orders".into()),
            operation: Operation::Create,
            permission: Permission::Allow,
        });
        let mut image = MetadataImage::new();
        image.replay(&may_create, 1).unwrap();
        // Broker 2 is a super user here: a forwarded request must not be.
        let supers = SuperUsers::from(BTreeSet::from([Principal::Broker(2)]));
        let orders = Resource::Topic("orders");
        let broker = keel_tls::Identity::broker("c", 2);

        let c = caller_of(&over_tls(broker.clone(), Some("User:alice")));
        assert!(
            matches!(&c, Caller::Forwarded { principal, broker: 2, listener, .. }
            if *principal == alice && listener == "SASL_SSL")
        );
        let checks = checker(&c, &image, &supers);
        assert!(checks.check(Operation::Create, orders).is_ok());
        assert_eq!(
            checks.check(Operation::Delete, orders).unwrap_err().code,
            ErrorCode::TopicAuthorizationFailed
        );
        // Anonymous clients are forwarded as such, with no rights here.
        let anon = caller_of(&over_tls(broker.clone(), Some("User:ANONYMOUS")));
        assert!(checker(&anon, &image, &supers)
            .check(Operation::Describe, Resource::Cluster)
            .is_err());
        // A node principal, the wildcard or garbage: refused outright.
        for forged in ["Broker:2", "Controller:1", "User:*", "nobody"] {
            let c = caller_of(&over_tls(broker.clone(), Some(forged)));
            assert!(matches!(c, Caller::Refused(_)), "{forged}: {c:?}");
            let checks = checker(&c, &image, &supers);
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
            caller_of(&over_tls(user, Some("User:alice"))),
            Caller::As(Principal::User("mallory".into()))
        );
        // Without the header a broker acts as itself.
        assert_eq!(
            caller_of(&over_tls(broker, None)),
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
            match caller_of(&req) {
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
}
