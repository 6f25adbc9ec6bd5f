//! A walk over a forwarded admin request's bytes before it is decoded, to
//! refuse an array or string whose claimed length is longer than the bytes
//! left. kafka-protocol reserves room for an array's claimed count before
//! it reads one entry, and a claim of 2^31 entries of a large struct is an
//! allocation of hundreds of GiB that aborts the process; the walk makes
//! such a request an error that closes one connection.
//!
//! The shapes follow the generated decoders of kafka-protocol 0.18 for
//! the versions served; `tests` check the walk accepts every request the
//! encoder writes, at every served version.

use kafka_protocol::messages::ApiKey;

/// What a field is on the wire.
#[derive(Clone, Copy, Debug)]
enum F {
    I8,
    I16,
    I32,
    Bool,
    Uuid,
    /// A (nullable) string.
    Str,
    /// (Nullable) bytes: a 32-bit length, compact when flexible.
    Bytes,
    /// A (nullable) array of scalars or strings.
    Arr(&'static F),
    /// A (nullable) array of structs, each with these fields (and, in a
    /// flexible version, tagged fields).
    Structs(&'static [F]),
}

use F::*;

/// Kafka's unsigned varint (at most 5 bytes for a u32), read a byte at a
/// time from `next`; `Ok(None)` when five bytes do not end it.
pub(crate) fn unsigned_varint<E>(
    mut next: impl FnMut() -> Result<u8, E>,
) -> Result<Option<u32>, E> {
    let mut value: u32 = 0;
    for i in 0..5 {
        let b = next()?;
        value |= u32::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(Some(value));
        }
    }
    Ok(None)
}

/// A cursor over the request body.
struct Walk<'a> {
    bytes: &'a [u8],
    at: usize,
    /// Compact lengths and tagged fields (the flexible versions).
    flexible: bool,
}

type R = Result<(), String>;

impl Walk<'_> {
    fn left(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn skip(&mut self, n: usize) -> R {
        if n > self.left() {
            return Err(format!(
                "{n} bytes claimed at offset {} with {} left",
                self.at,
                self.left()
            ));
        }
        self.at += n;
        Ok(())
    }

    fn fixed(&mut self, n: usize) -> Result<&[u8], String> {
        let start = self.at;
        self.skip(n)?;
        Ok(&self.bytes[start..start + n])
    }

    fn varint(&mut self) -> Result<u32, String> {
        unsigned_varint(|| self.fixed(1).map(|b| b[0]))?
            .ok_or_else(|| format!("a varint longer than 5 bytes at offset {}", self.at))
    }

    /// A length prefix: `None` for null.
    fn length(&mut self, wide: bool) -> Result<Option<usize>, String> {
        if self.flexible {
            let n = self.varint()?;
            return Ok(n.checked_sub(1).map(|n| n as usize));
        }
        let n = if wide {
            let b = self.fixed(4)?;
            i64::from(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        } else {
            let b = self.fixed(2)?;
            i64::from(i16::from_be_bytes([b[0], b[1]]))
        };
        match n {
            -1 => Ok(None),
            n if n < 0 => Err(format!("a negative length {n}")),
            n => Ok(Some(n as usize)),
        }
    }

    fn count(&mut self) -> Result<Option<usize>, String> {
        let n = self.length(true)?;
        if let Some(n) = n {
            // Every entry takes at least a byte.
            if n > self.left() {
                return Err(format!(
                    "an array claims {n} entries with {} bytes left",
                    self.left()
                ));
            }
        }
        Ok(n)
    }

    fn field(&mut self, f: &F) -> R {
        match f {
            I8 | Bool => self.skip(1),
            I16 => self.skip(2),
            I32 => self.skip(4),
            Uuid => self.skip(16),
            Str => match self.length(false)? {
                Some(n) => self.skip(n),
                None => Ok(()),
            },
            Bytes => match self.length(true)? {
                Some(n) => self.skip(n),
                None => Ok(()),
            },
            Arr(e) => {
                for _ in 0..self.count()?.unwrap_or(0) {
                    self.field(e)?;
                }
                Ok(())
            }
            Structs(fields) => {
                for _ in 0..self.count()?.unwrap_or(0) {
                    self.fields(fields)?;
                }
                Ok(())
            }
        }
    }

    /// A struct's fields, then its tagged fields when flexible.
    fn fields(&mut self, fields: &[F]) -> R {
        for f in fields {
            self.field(f)?;
        }
        if self.flexible {
            for _ in 0..self.varint()? {
                self.varint()?;
                let size = self.varint()? as usize;
                self.skip(size)?;
            }
        }
        Ok(())
    }
}

const ASSIGNMENT: &[F] = &[I32, Arr(&I32)];
const TOPIC_CONFIG: &[F] = &[Str, Str];
const CREATABLE_TOPIC: &[F] = &[Str, I32, I16, Structs(ASSIGNMENT), Structs(TOPIC_CONFIG)];
const DELETE_TOPIC_STATE: &[F] = &[Str, Uuid];
const PARTITIONS_ASSIGNMENT: &[F] = &[Arr(&I32)];
const PARTITIONS_TOPIC: &[F] = &[Str, I32, Structs(PARTITIONS_ASSIGNMENT)];
const DESCRIBE_RESOURCE: &[F] = &[I8, Str, Arr(&Str)];
const ALTERABLE: &[F] = &[Str, Str];
const ALTER_RESOURCE: &[F] = &[I8, Str, Structs(ALTERABLE)];
const INCREMENTAL_ALTERABLE: &[F] = &[Str, I8, Str];
const INCREMENTAL_RESOURCE: &[F] = &[I8, Str, Structs(INCREMENTAL_ALTERABLE)];
const TOPIC_PARTITIONS: &[F] = &[Str, Arr(&I32)];
const REASSIGNABLE_PARTITION: &[F] = &[I32, Arr(&I32)];
const REASSIGNABLE_TOPIC: &[F] = &[Str, Structs(REASSIGNABLE_PARTITION)];
const QUORUM_PARTITION: &[F] = &[I32];
const QUORUM_TOPIC: &[F] = &[Str, Structs(QUORUM_PARTITION)];
/// DescribeAcls' body, one DeleteAcls filter and one CreateAcls creation:
/// resource type, name, pattern type, principal, host, operation,
/// permission.
const ACL: &[F] = &[I8, Str, I8, Str, Str, I8, I8];
const SCRAM_DELETION: &[F] = &[Str, I8];
const SCRAM_UPSERTION: &[F] = &[Str, I8, I32, Bytes, Bytes];
const SCRAM_USER: &[F] = &[Str];

/// Walks the body of admin request `api` v`version` (a served one);
/// `Err` names the first length that cannot be true.
pub(crate) fn check(api: ApiKey, version: i16, body: &[u8]) -> R {
    walk(api, version, body).map(|_| ())
}

/// As [`check`]; the bytes the body's fields took.
fn walk(api: ApiKey, version: i16, body: &[u8]) -> Result<usize, String> {
    let (flexible, fields): (bool, Vec<F>) = match api {
        ApiKey::CreateTopics => (version >= 5, vec![Structs(CREATABLE_TOPIC), I32, Bool]),
        ApiKey::DeleteTopics if version >= 6 => (true, vec![Structs(DELETE_TOPIC_STATE), I32]),
        ApiKey::DeleteTopics => (version >= 4, vec![Arr(&Str), I32]),
        ApiKey::CreatePartitions => (version >= 2, vec![Structs(PARTITIONS_TOPIC), I32, Bool]),
        ApiKey::DescribeConfigs if version >= 3 => {
            (version >= 4, vec![Structs(DESCRIBE_RESOURCE), Bool, Bool])
        }
        ApiKey::DescribeConfigs => (false, vec![Structs(DESCRIBE_RESOURCE), Bool]),
        ApiKey::AlterConfigs => (version >= 2, vec![Structs(ALTER_RESOURCE), Bool]),
        ApiKey::IncrementalAlterConfigs => {
            (version >= 1, vec![Structs(INCREMENTAL_RESOURCE), Bool])
        }
        ApiKey::ElectLeaders if version >= 1 => {
            (version >= 2, vec![I8, Structs(TOPIC_PARTITIONS), I32])
        }
        ApiKey::ElectLeaders => (false, vec![Structs(TOPIC_PARTITIONS), I32]),
        ApiKey::AlterPartitionReassignments if version >= 1 => {
            (true, vec![I32, Bool, Structs(REASSIGNABLE_TOPIC)])
        }
        ApiKey::AlterPartitionReassignments => (true, vec![I32, Structs(REASSIGNABLE_TOPIC)]),
        ApiKey::ListPartitionReassignments => (true, vec![I32, Structs(TOPIC_PARTITIONS)]),
        ApiKey::DescribeQuorum => (true, vec![Structs(QUORUM_TOPIC)]),
        ApiKey::DescribeAcls => (version >= 2, ACL.to_vec()),
        ApiKey::CreateAcls | ApiKey::DeleteAcls => (version >= 2, vec![Structs(ACL)]),
        ApiKey::AlterUserScramCredentials => (
            true,
            vec![Structs(SCRAM_DELETION), Structs(SCRAM_UPSERTION)],
        ),
        ApiKey::DescribeUserScramCredentials => (true, vec![Structs(SCRAM_USER)]),
        other => return Err(format!("{other:?} has no shape here")),
    };
    let mut w = Walk {
        bytes: body,
        at: 0,
        flexible,
    };
    w.fields(&fields)?;
    Ok(w.at)
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    use super::*;

    fn st(v: &str) -> StrBytes {
        StrBytes::from_string(v.into())
    }

    /// Writes a request body at a version.
    type Encoder = Box<dyn Fn(&mut BytesMut, i16) -> anyhow::Result<()>>;

    /// Every admin request served, with every array and string filled.
    fn filled(api: ApiKey) -> Encoder {
        fn enc<T: Encodable + 'static>(t: T) -> Encoder {
            Box::new(move |b, v| t.encode(b, v))
        }
        let tn = TopicName(st("orders"));
        match api {
            ApiKey::CreateTopics => enc(CreateTopicsRequest::default().with_topics(vec![
                create_topics_request::CreatableTopic::default()
                    .with_name(tn.clone())
                    .with_assignments(vec![
                        create_topics_request::CreatableReplicaAssignment::default()
                            .with_broker_ids(vec![BrokerId(1), BrokerId(2)]),
                    ])
                    .with_configs(vec![create_topics_request::CreatableTopicConfig::default()
                        .with_name(st("retention.ms"))
                        .with_value(Some(st("1")))]),
                create_topics_request::CreatableTopic::default().with_name(TopicName(st("b"))),
            ])),
            ApiKey::DeleteTopics => {
                let by_id = DeleteTopicsRequest::default()
                    .with_topics(vec![delete_topics_request::DeleteTopicState::default()
                        .with_name(Some(tn.clone()))]);
                let by_name = DeleteTopicsRequest::default()
                    .with_topic_names(vec![tn.clone(), TopicName(st("b"))]);
                Box::new(move |b, v| {
                    if v >= 6 {
                        by_id.encode(b, v)
                    } else {
                        by_name.encode(b, v)
                    }
                })
            }
            ApiKey::CreatePartitions => enc(CreatePartitionsRequest::default().with_topics(vec![
                create_partitions_request::CreatePartitionsTopic::default()
                    .with_name(tn.clone())
                    .with_assignments(Some(vec![
                        create_partitions_request::CreatePartitionsAssignment::default()
                            .with_broker_ids(vec![BrokerId(3)]),
                    ])),
            ])),
            ApiKey::DescribeConfigs => enc(DescribeConfigsRequest::default().with_resources(vec![
                describe_configs_request::DescribeConfigsResource::default()
                    .with_resource_name(st("orders"))
                    .with_configuration_keys(Some(vec![st("a"), st("bc")])),
            ])),
            ApiKey::AlterConfigs => enc(AlterConfigsRequest::default().with_resources(vec![
                alter_configs_request::AlterConfigsResource::default()
                    .with_resource_name(st("orders"))
                    .with_configs(vec![alter_configs_request::AlterableConfig::default()
                        .with_name(st("a"))
                        .with_value(None)]),
            ])),
            ApiKey::IncrementalAlterConfigs => enc(IncrementalAlterConfigsRequest::default()
                .with_resources(vec![
                    incremental_alter_configs_request::AlterConfigsResource::default()
                        .with_resource_name(st("orders"))
                        .with_configs(vec![
                            incremental_alter_configs_request::AlterableConfig::default()
                                .with_name(st("a"))
                                .with_value(Some(st("b"))),
                        ]),
                ])),
            ApiKey::ElectLeaders => enc(ElectLeadersRequest::default().with_topic_partitions(
                Some(vec![elect_leaders_request::TopicPartitions::default()
                    .with_topic(tn.clone())
                    .with_partitions(vec![0, 1])]),
            )),
            ApiKey::AlterPartitionReassignments => enc(
                AlterPartitionReassignmentsRequest::default().with_topics(vec![
                    alter_partition_reassignments_request::ReassignableTopic::default()
                        .with_name(tn.clone())
                        .with_partitions(vec![
                            alter_partition_reassignments_request::ReassignablePartition::default()
                                .with_replicas(Some(vec![BrokerId(1)])),
                            alter_partition_reassignments_request::ReassignablePartition::default(),
                        ]),
                ]),
            ),
            ApiKey::ListPartitionReassignments => enc(ListPartitionReassignmentsRequest::default()
                .with_topics(Some(vec![
                list_partition_reassignments_request::ListPartitionReassignmentsTopics::default()
                    .with_name(tn)
                    .with_partition_indexes(vec![4]),
            ]))),
            ApiKey::DescribeQuorum => enc(DescribeQuorumRequest::default().with_topics(vec![
                describe_quorum_request::TopicData::default()
                    .with_topic_name(TopicName(st("__cluster_metadata")))
                    .with_partitions(vec![describe_quorum_request::PartitionData::default()]),
            ])),
            ApiKey::DescribeAcls => enc(DescribeAclsRequest::default()
                .with_resource_name_filter(Some(st("orders")))
                .with_principal_filter(Some(st("User:alice")))
                .with_host_filter(None)),
            ApiKey::CreateAcls => enc(CreateAclsRequest::default().with_creations(vec![
                create_acls_request::AclCreation::default()
                    .with_resource_name(st("orders"))
                    .with_principal(st("User:alice"))
                    .with_host(st("*")),
                create_acls_request::AclCreation::default(),
            ])),
            ApiKey::DeleteAcls => enc(DeleteAclsRequest::default().with_filters(vec![
                delete_acls_request::DeleteAclsFilter::default()
                    .with_resource_name_filter(Some(st("orders")))
                    .with_principal_filter(None),
                delete_acls_request::DeleteAclsFilter::default(),
            ])),
            ApiKey::AlterUserScramCredentials => enc(AlterUserScramCredentialsRequest::default()
                .with_deletions(vec![
                    alter_user_scram_credentials_request::ScramCredentialDeletion::default()
                        .with_name(st("bob"))
                        .with_mechanism(1),
                ])
                .with_upsertions(vec![
                    alter_user_scram_credentials_request::ScramCredentialUpsertion::default()
                        .with_name(st("alice"))
                        .with_mechanism(2)
                        .with_iterations(4096)
                        .with_salt(bytes::Bytes::from_static(b"salt"))
                        .with_salted_password(bytes::Bytes::from(vec![7u8; 64])),
                ])),
            ApiKey::DescribeUserScramCredentials => enc(
                DescribeUserScramCredentialsRequest::default().with_users(Some(vec![
                    describe_user_scram_credentials_request::UserName::default()
                        .with_name(st("alice")),
                ])),
            ),
            other => panic!("{other:?} is not forwarded"),
        }
    }

    #[test]
    fn the_walk_takes_exactly_what_the_encoder_writes_at_every_served_version() {
        for (api, min, max) in crate::SERVED.into_iter().chain(crate::CONTROLLER_SERVED) {
            if matches!(
                api,
                ApiKey::ApiVersions | ApiKey::Metadata | ApiKey::DescribeCluster
            ) {
                continue;
            }
            let enc = filled(api);
            for v in min..=max {
                let mut b = BytesMut::new();
                enc(&mut b, v).unwrap_or_else(|e| panic!("{api:?} v{v}: {e}"));
                assert_eq!(walk(api, v, &b), Ok(b.len()), "{api:?} v{v}");
            }
        }
    }

    #[test]
    fn a_huge_claim_anywhere_is_refused() {
        // CreateTopics v4: one topic whose assignments claim 2^31-1.
        let mut b = vec![0, 0, 0, 1, 0, 1, b'a', 0, 0, 0, 1, 0, 1];
        b.extend_from_slice(&[0x7f, 0xff, 0xff, 0xff]);
        let e = check(ApiKey::CreateTopics, 4, &b).unwrap_err();
        assert!(e.contains("claims 2147483647 entries"), "{e}");
        // The same in a flexible version.
        let b = [2, 2, b'a', 0, 0, 0, 1, 0, 1, 0xff, 0xff, 0xff, 0xff, 0x07];
        assert!(check(ApiKey::CreateTopics, 5, &b).is_err());
        // A salted password claiming more bytes than are left.
        let b = [1, 2, 2, b'a', 2, 0, 0, 16, 0, 2, b's', 0xff, 0xff, 0x03];
        assert!(check(ApiKey::AlterUserScramCredentials, 0, &b).is_err());
        // DescribeAcls v1: a resource name of 32767 bytes in 3.
        let b = [2, 0x7f, 0xff, 0, 0, 0];
        assert!(check(ApiKey::DescribeAcls, 1, &b).is_err());
    }
}
