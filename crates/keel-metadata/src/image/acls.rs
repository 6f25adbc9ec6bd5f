//! The ACLs' slice of the image: the bindings in force and the replay of
//! the records that add or remove one.

use crate::acl::AclBinding;
use crate::error::{ReplayError, ReplayErrorKind};

use super::{err, MetadataImage};

impl MetadataImage {
    /// Every ACL binding in force, in order.
    pub fn acls(&self) -> impl Iterator<Item = &AclBinding> {
        self.acls.keys()
    }

    pub fn acl_count(&self) -> usize {
        self.acls.len()
    }

    pub fn has_acl(&self, b: &AclBinding) -> bool {
        self.acls.contains_key(b)
    }

    /// Adds binding `b`, which must not be in force yet.
    pub(super) fn replay_acl_added(
        &mut self,
        b: &AclBinding,
        offset: u64,
    ) -> Result<(), ReplayError> {
        if self.acls.insert(b.clone(), ()).is_some() {
            return Err(err(offset, ReplayErrorKind::DuplicateAcl(b.to_string())));
        }
        self.access_version = offset;
        Ok(())
    }

    /// Removes binding `b`, which must be in force.
    pub(super) fn replay_acl_removed(
        &mut self,
        b: &AclBinding,
        offset: u64,
    ) -> Result<(), ReplayError> {
        if self.acls.remove(b).is_none() {
            return Err(err(offset, ReplayErrorKind::UnknownAcl(b.to_string())));
        }
        self.access_version = offset;
        Ok(())
    }
}
