//! The SCRAM credentials' slice of the image: each user's credential per
//! mechanism and the replay of the records that store or remove one.

use crate::error::{ReplayError, ReplayErrorKind};
use crate::scram::{ScramCredential, ScramMechanism};

use super::{err, MetadataImage};

impl MetadataImage {
    /// `user`'s credential for `mechanism`, if it has one.
    pub fn scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Option<&ScramCredential> {
        // The key owns its name: a lookup by `&str` needs one.
        self.scram.get(&(user.to_string(), mechanism))
    }

    /// Every credential with its user and mechanism, in (user, mechanism)
    /// order.
    pub fn scram_users(&self) -> impl Iterator<Item = (&str, ScramMechanism, &ScramCredential)> {
        self.scram
            .iter()
            .map(|((user, mechanism), c)| (user.as_str(), *mechanism, c))
    }

    /// How many credentials are stored (users times their mechanisms).
    pub fn scram_count(&self) -> usize {
        self.scram.len()
    }

    /// Stores `user`'s credential for its mechanism, checked first: an
    /// image never holds one a login could not use.
    pub(super) fn replay_scram_credential(
        &mut self,
        user: &str,
        credential: &ScramCredential,
        offset: u64,
    ) -> Result<(), ReplayError> {
        if let Err(e) = credential.validate() {
            let kind = ReplayErrorKind::InvalidScramCredential {
                user: user.to_string(),
                reason: e.to_string(),
            };
            return Err(err(offset, kind));
        }
        self.scram
            .insert((user.to_string(), credential.mechanism), credential.clone());
        self.access_version = offset;
        Ok(())
    }

    /// Removes `user`'s credential for `mechanism`, which must be stored.
    pub(super) fn replay_scram_credential_removed(
        &mut self,
        user: &str,
        mechanism: ScramMechanism,
        offset: u64,
    ) -> Result<(), ReplayError> {
        if self.scram.remove(&(user.to_string(), mechanism)).is_none() {
            let kind = ReplayErrorKind::UnknownScramCredential {
                user: user.to_string(),
                mechanism: mechanism.name(),
            };
            return Err(err(offset, kind));
        }
        self.access_version = offset;
        Ok(())
    }
}
