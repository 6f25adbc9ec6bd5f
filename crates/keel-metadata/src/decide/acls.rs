//! ACL changes: bindings added and removed by an operator (who must be
//! allowed to `alter` the cluster: checked by the caller with
//! [`crate::acl::authorize`] before it asks for a decision).

use crate::acl::{AclBinding, Operation, Permission, Principal, ResourcePattern};
use crate::error::{ApiError, ErrorCode};
use crate::image::MetadataImage;
use crate::records::MetadataRecord;

use super::{Decision, Working};

/// Most ACL bindings the cluster holds (each is replayed on every node and
/// kept in every snapshot).
pub const MAX_ACLS: usize = 100_000;

/// Which bindings a listing or a removal selects: every field that is set
/// must match.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AclFilter {
    pub principal: Option<Principal>,
    pub pattern: Option<ResourcePattern>,
    pub operation: Option<Operation>,
    pub permission: Option<Permission>,
}

impl AclFilter {
    pub fn matches(&self, b: &AclBinding) -> bool {
        self.principal.as_ref().is_none_or(|p| *p == b.principal)
            && self.pattern.as_ref().is_none_or(|p| *p == b.pattern)
            && self.operation.is_none_or(|o| o == b.operation)
            && self.permission.is_none_or(|p| p == b.permission)
    }

    /// The bindings of `image` this filter selects, in order.
    pub fn select<'a>(&self, image: &'a MetadataImage) -> Vec<&'a AclBinding> {
        image.acls().filter(|b| self.matches(b)).collect()
    }
}

impl MetadataImage {
    /// Adds bindings. Per item: a malformed one is `INVALID_REQUEST`; one
    /// already in force is accepted and writes nothing; one past
    /// [`MAX_ACLS`] is `POLICY_VIOLATION`.
    pub fn decide_create_acls(
        &self,
        bindings: &[AclBinding],
    ) -> Decision<Vec<Result<(), ApiError>>> {
        let mut w = Working::new(self);
        let mut reply = Vec::with_capacity(bindings.len());
        for b in bindings {
            let r = if let Err(why) = b.validate() {
                Err(ApiError::new(ErrorCode::InvalidRequest, why))
            } else if w.image.has_acl(b) {
                Ok(())
            } else if w.image.acl_count() >= MAX_ACLS {
                Err(ApiError::new(
                    ErrorCode::PolicyViolation,
                    format!("the cluster holds the most ACL bindings allowed ({MAX_ACLS})"),
                ))
            } else {
                w.push(MetadataRecord::AclAdded(b.clone()));
                Ok(())
            };
            reply.push(r);
        }
        w.finish(reply)
    }

    /// Removes every binding each filter selects; per filter, the bindings
    /// it removed (a binding selected by two filters goes once, with the
    /// first).
    pub fn decide_delete_acls(&self, filters: &[AclFilter]) -> Decision<Vec<Vec<AclBinding>>> {
        let mut w = Working::new(self);
        let mut reply = Vec::with_capacity(filters.len());
        for f in filters {
            let gone: Vec<AclBinding> = f.select(&w.image).into_iter().cloned().collect();
            for b in &gone {
                w.push(MetadataRecord::AclRemoved(b.clone()));
            }
            reply.push(gone);
        }
        w.finish(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(user: &str, topic: &str, op: Operation) -> AclBinding {
        AclBinding {
            principal: Principal::User(user.into()),
            pattern: ResourcePattern::Topic(topic.into()),
            operation: op,
            permission: Permission::Allow,
        }
    }

    fn commit(image: &mut MetadataImage, records: &[MetadataRecord]) {
        let at = image.offset() + 1;
        for r in records {
            image.replay(r, at).unwrap();
        }
        image.advance_offset(at);
    }

    #[test]
    fn bindings_are_added_once_removed_by_filter_and_bad_ones_refused() {
        let mut image = MetadataImage::new();
        let a = b("alice", "orders", Operation::Create);
        let bad = b("alice", "", Operation::Create);
        let d = image.decide_create_acls(&[a.clone(), bad, a.clone()]);
        assert_eq!(d.records, vec![MetadataRecord::AclAdded(a.clone())]);
        assert!(d.reply[0].is_ok() && d.reply[2].is_ok());
        assert_eq!(
            d.reply[1].as_ref().unwrap_err().code,
            ErrorCode::InvalidRequest
        );
        commit(&mut image, &d.records);
        // Again: accepted, nothing written.
        let d = image.decide_create_acls(std::slice::from_ref(&a));
        assert!(d.records.is_empty() && d.reply[0].is_ok());
        let other = b("bob", "orders", Operation::Delete);
        let d = image.decide_create_acls(std::slice::from_ref(&other));
        commit(&mut image, &d.records);
        assert_eq!(image.acl_count(), 2);
        // Remove everything on topic orders for alice.
        let f = AclFilter {
            principal: Some(Principal::User("alice".into())),
            ..Default::default()
        };
        let d = image.decide_delete_acls(&[f.clone(), f]);
        assert_eq!(d.reply, vec![vec![a.clone()], vec![]]);
        commit(&mut image, &d.records);
        assert_eq!(image.acls().cloned().collect::<Vec<_>>(), vec![other]);
        // A removed binding is gone from a snapshot too.
        let back = MetadataImage::decode(&image.encode()).unwrap();
        assert_eq!(back.acl_count(), 1);
        // Replay is strict.
        let mut twice = image.clone();
        assert!(twice.replay(&MetadataRecord::AclRemoved(a), 99).is_err());
    }
}
