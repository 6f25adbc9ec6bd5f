//! SCRAM credential changes (Kafka's KIP-554, as its
//! `ScramControlManager.alterCredentials` decides them): users' salted
//! credentials set and removed by an operator, who must be allowed to
//! `alter` the cluster (checked by the caller inside the decision, against
//! the image it is made on).
//!
//! The decision sees credentials, never passwords: the client salts and
//! hashes the password, the controller derives the stored keys.

use std::collections::BTreeSet;

use crate::acl::valid_user_name;
use crate::error::{ApiError, ErrorCode};
use crate::image::MetadataImage;
use crate::records::MetadataRecord;
use crate::scram::{ScramCredential, ScramMechanism};

use super::{Decision, Working};

/// Most credentials the cluster holds (10,000 users with both mechanisms):
/// each is replayed on every node, kept in every snapshot and copied to
/// every broker.
pub const MAX_SCRAM_CREDENTIALS: usize = 20_000;

/// The users named more than once among `users` (Kafka refuses every item
/// of such a user with DUPLICATE_RESOURCE, whatever its mechanisms).
pub fn duplicated_users<'a>(users: impl IntoIterator<Item = &'a str>) -> BTreeSet<&'a str> {
    let mut seen = BTreeSet::new();
    let mut twice = BTreeSet::new();
    for u in users {
        if !seen.insert(u) {
            twice.insert(u);
        }
    }
    twice
}

/// The refusal of an item of a user named twice in one request.
pub fn duplicate_user(user: &str) -> ApiError {
    ApiError::new(
        ErrorCode::DuplicateResource,
        format!("user {user:?} is named more than once in the request; change one user once per request"),
    )
}

/// `Ok` when `user` may hold a credential: a user name of an ACL principal
/// (1-128 of letters, digits, `.`, `_`, `-`, `@`), not the wildcard.
fn check_user(user: &str) -> Result<(), ApiError> {
    if user.is_empty() {
        return Err(ApiError::new(
            ErrorCode::UnacceptableCredential,
            "the user name must not be empty",
        ));
    }
    if user == "*" || !valid_user_name(user) {
        return Err(ApiError::new(
            ErrorCode::UnacceptableCredential,
            format!(
                "user name {user:?} is not valid: use 1-128 characters from [a-zA-Z0-9._@-] (not the wildcard *)"
            ),
        ));
    }
    Ok(())
}

/// `Ok` when `c` may be stored: iterations in Kafka's range, salt and keys
/// well formed.
fn check_credential(user: &str, c: &ScramCredential) -> Result<(), ApiError> {
    let (min, max) = (c.mechanism.min_iterations(), ScramMechanism::MAX_ITERATIONS);
    let refuse = |why: String| {
        Err(ApiError::new(
            ErrorCode::UnacceptableCredential,
            format!(
                "the {} credential of user {user:?}: {why}",
                c.mechanism.name()
            ),
        ))
    };
    if c.iterations < min {
        return refuse(format!(
            "too few iterations ({}; at least {min})",
            c.iterations
        ));
    }
    if c.iterations > max {
        return refuse(format!(
            "too many iterations ({}; at most {max})",
            c.iterations
        ));
    }
    match c.validate() {
        Ok(()) => Ok(()),
        Err(e) => refuse(e.to_string()),
    }
}

impl MetadataImage {
    /// Sets and removes users' SCRAM credentials. The reply has one result
    /// per item with its user, the upserts first, then the deletions, in
    /// the order given. Per item: a user named twice in the request (in
    /// either list) is `DUPLICATE_RESOURCE`; an empty or invalid user
    /// name, or a credential with iterations out of range or malformed, is
    /// `UNACCEPTABLE_CREDENTIAL`; removing a credential the user does not
    /// have is `RESOURCE_NOT_FOUND`; a new credential past
    /// [`MAX_SCRAM_CREDENTIALS`] is `POLICY_VIOLATION`. A refused item
    /// writes nothing; the others are decided.
    pub fn decide_alter_scram(
        &self,
        upserts: &[(String, ScramCredential)],
        deletions: &[(String, ScramMechanism)],
    ) -> Decision<Vec<(String, Result<(), ApiError>)>> {
        let twice = duplicated_users(
            upserts
                .iter()
                .map(|(u, _)| u.as_str())
                .chain(deletions.iter().map(|(u, _)| u.as_str())),
        );
        let mut w = Working::new(self);
        let mut reply = Vec::with_capacity(upserts.len() + deletions.len());
        for (user, c) in upserts {
            let r = if twice.contains(user.as_str()) {
                Err(duplicate_user(user))
            } else if let Err(e) = check_user(user).and_then(|()| check_credential(user, c)) {
                Err(e)
            } else if w.image.scram_credential(user, c.mechanism).is_none()
                && w.image.scram_count() >= MAX_SCRAM_CREDENTIALS
            {
                Err(ApiError::new(
                    ErrorCode::PolicyViolation,
                    format!(
                        "the cluster holds the most SCRAM credentials allowed ({MAX_SCRAM_CREDENTIALS})"
                    ),
                ))
            } else {
                w.push(MetadataRecord::UserScramCredential {
                    user: user.clone(),
                    credential: c.clone(),
                });
                Ok(())
            };
            reply.push((user.clone(), r));
        }
        for (user, mechanism) in deletions {
            let r = if twice.contains(user.as_str()) {
                Err(duplicate_user(user))
            } else if let Err(e) = check_user(user) {
                Err(e)
            } else if w.image.scram_credential(user, *mechanism).is_none() {
                Err(ApiError::new(
                    ErrorCode::ResourceNotFound,
                    format!("user {user:?} has no {} credential", mechanism.name()),
                ))
            } else {
                w.push(MetadataRecord::UserScramCredentialRemoved {
                    user: user.clone(),
                    mechanism: *mechanism,
                });
                Ok(())
            };
            reply.push((user.clone(), r));
        }
        w.finish(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credential(mechanism: ScramMechanism, password: &str, iterations: u32) -> ScramCredential {
        ScramCredential::from_password(mechanism, password.as_bytes(), b"pinch of salt", iterations)
            .expect("a valid credential")
    }

    fn commit(image: &mut MetadataImage, records: &[MetadataRecord]) {
        let at = image.offset() + 1;
        for r in records {
            image.replay(r, at).unwrap();
        }
        image.advance_offset(at);
        image.validate().unwrap();
    }

    fn codes(reply: &[(String, Result<(), ApiError>)]) -> Vec<(&str, ErrorCode)> {
        reply
            .iter()
            .map(|(u, r)| {
                let code = r.as_ref().err().map_or(ErrorCode::None, |e| e.code);
                (u.as_str(), code)
            })
            .collect()
    }

    #[test]
    fn credentials_are_set_replaced_and_removed_one_record_each() {
        let mut image = MetadataImage::new();
        let a256 = credential(ScramMechanism::Sha256, "alice-secret", 4096);
        let a512 = credential(ScramMechanism::Sha512, "alice-secret", 8192);
        let b256 = credential(ScramMechanism::Sha256, "bob-secret", 4096);
        let d = image.decide_alter_scram(
            &[("alice".into(), a256.clone()), ("bob".into(), b256.clone())],
            &[],
        );
        assert_eq!(
            d.records,
            vec![
                MetadataRecord::UserScramCredential {
                    user: "alice".into(),
                    credential: a256.clone(),
                },
                MetadataRecord::UserScramCredential {
                    user: "bob".into(),
                    credential: b256.clone(),
                },
            ]
        );
        assert_eq!(
            codes(&d.reply),
            [("alice", ErrorCode::None), ("bob", ErrorCode::None)]
        );
        assert!(d.replayed.is_some());
        commit(&mut image, &d.records);
        assert_eq!(image.scram_count(), 2);
        assert_eq!(
            image.scram_credential("alice", ScramMechanism::Sha256),
            Some(&a256)
        );
        assert_eq!(image.access_version(), 1);

        // A second mechanism for alice, and bob's replaced.
        let b256_new = credential(ScramMechanism::Sha256, "bob-new", 4096);
        let d = image.decide_alter_scram(
            &[
                ("alice".into(), a512.clone()),
                ("bob".into(), b256_new.clone()),
            ],
            &[],
        );
        assert_eq!(d.records.len(), 2);
        commit(&mut image, &d.records);
        let listed: Vec<(&str, ScramMechanism, u32)> = image
            .scram_users()
            .map(|(u, m, c)| (u, m, c.iterations))
            .collect();
        assert_eq!(
            listed,
            [
                ("alice", ScramMechanism::Sha256, 4096),
                ("alice", ScramMechanism::Sha512, 8192),
                ("bob", ScramMechanism::Sha256, 4096),
            ]
        );
        assert_eq!(
            image.scram_credential("bob", ScramMechanism::Sha256),
            Some(&b256_new)
        );
        assert_eq!(image.access_version(), 2);

        // Removed: one record, the other mechanism stays.
        let d = image.decide_alter_scram(&[], &[("alice".into(), ScramMechanism::Sha256)]);
        assert_eq!(
            d.records,
            vec![MetadataRecord::UserScramCredentialRemoved {
                user: "alice".into(),
                mechanism: ScramMechanism::Sha256,
            }]
        );
        assert_eq!(codes(&d.reply), [("alice", ErrorCode::None)]);
        commit(&mut image, &d.records);
        assert_eq!(
            image.scram_credential("alice", ScramMechanism::Sha256),
            None
        );
        assert_eq!(
            image.scram_credential("alice", ScramMechanism::Sha512),
            Some(&a512)
        );
        assert_eq!(image.access_version(), 3);

        // Removing it again: RESOURCE_NOT_FOUND, nothing written.
        let d = image.decide_alter_scram(&[], &[("alice".into(), ScramMechanism::Sha256)]);
        assert!(d.records.is_empty());
        assert_eq!(codes(&d.reply), [("alice", ErrorCode::ResourceNotFound)]);

        // The credentials survive a snapshot, which reads as one change.
        let back = MetadataImage::decode(&image.encode()).unwrap();
        assert_eq!(back, image);
        assert_eq!(back.scram_count(), 2);
        assert_eq!(back.access_version(), back.offset());
    }

    #[test]
    fn a_user_named_twice_is_refused_in_every_item_and_the_others_go_through() {
        let image = MetadataImage::new();
        let c = credential(ScramMechanism::Sha256, "pw", 4096);
        let c512 = credential(ScramMechanism::Sha512, "pw", 4096);
        let d = image.decide_alter_scram(
            &[
                ("alice".into(), c.clone()),
                ("carol".into(), c.clone()),
                ("alice".into(), c512.clone()),
                ("bob".into(), c512),
            ],
            &[("bob".into(), ScramMechanism::Sha256)],
        );
        assert_eq!(
            codes(&d.reply),
            [
                ("alice", ErrorCode::DuplicateResource),
                ("carol", ErrorCode::None),
                ("alice", ErrorCode::DuplicateResource),
                ("bob", ErrorCode::DuplicateResource),
                ("bob", ErrorCode::DuplicateResource),
            ]
        );
        assert_eq!(
            d.records,
            vec![MetadataRecord::UserScramCredential {
                user: "carol".into(),
                credential: c,
            }]
        );
    }

    #[test]
    fn bad_names_and_credentials_are_unacceptable() {
        let image = MetadataImage::new();
        let good = credential(ScramMechanism::Sha512, "pw", 4096);
        let few = ScramCredential {
            iterations: 4095,
            ..good.clone()
        };
        let many = ScramCredential {
            iterations: ScramMechanism::MAX_ITERATIONS + 1,
            ..good.clone()
        };
        let short_key = ScramCredential {
            stored_key: vec![1, 2, 3],
            ..good.clone()
        };
        let d = image.decide_alter_scram(
            &[
                (String::new(), good.clone()),
                ("*".into(), good.clone()),
                ("no spaces".into(), good.clone()),
                ("few".into(), few),
                ("many".into(), many),
                ("short".into(), short_key),
            ],
            &[("no/slash".into(), ScramMechanism::Sha256)],
        );
        assert!(d.records.is_empty());
        for (user, r) in &d.reply {
            let e = r.as_ref().expect_err("refused");
            assert_eq!(e.code, ErrorCode::UnacceptableCredential, "{user:?}: {e}");
        }
        assert!(d.reply[3]
            .1
            .as_ref()
            .unwrap_err()
            .message
            .contains("too few iterations"));
        assert!(d.reply[4]
            .1
            .as_ref()
            .unwrap_err()
            .message
            .contains("too many iterations"));
    }

    #[test]
    fn new_credentials_stop_at_the_cap_but_replacing_one_does_not() {
        let mut image = MetadataImage::new();
        let c = credential(ScramMechanism::Sha256, "pw", 4096);
        let all: Vec<(String, ScramCredential)> = (0..MAX_SCRAM_CREDENTIALS)
            .map(|i| (format!("user-{i}"), c.clone()))
            .collect();
        let d = image.decide_alter_scram(&all, &[]);
        commit(&mut image, &d.records);
        assert_eq!(image.scram_count(), MAX_SCRAM_CREDENTIALS);
        let d =
            image.decide_alter_scram(&[("one-more".into(), c.clone()), ("user-7".into(), c)], &[]);
        assert_eq!(
            codes(&d.reply),
            [
                ("one-more", ErrorCode::PolicyViolation),
                ("user-7", ErrorCode::None)
            ]
        );
        assert_eq!(d.records.len(), 1);
    }

    #[test]
    fn replay_refuses_a_missing_removal_and_an_invalid_credential() {
        let mut image = MetadataImage::new();
        let removal = MetadataRecord::UserScramCredentialRemoved {
            user: "ghost".into(),
            mechanism: ScramMechanism::Sha512,
        };
        let e = image.replay(&removal, 7).unwrap_err();
        assert_eq!(e.offset, 7);
        let bad = MetadataRecord::UserScramCredential {
            user: "alice".into(),
            credential: ScramCredential {
                server_key: vec![],
                ..credential(ScramMechanism::Sha256, "pw", 4096)
            },
        };
        assert!(image.replay(&bad, 8).is_err());
        assert_eq!(image.scram_count(), 0);
        assert_eq!(image.access_version(), 0);
    }
}
