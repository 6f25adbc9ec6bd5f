//! The pure part of the listener: one request (a frame's bytes after its
//! length prefix) and a snapshot of the broker's cache in; the response
//! frame, or the reason to close the connection, out. No I/O, no clock, no
//! lock: property tests feed it any bytes.
//!
//! Which requests get which answer, as Kafka's `SocketServer` and
//! `KafkaApis` do it:
//! - a served API at a served version: its answer;
//! - ApiVersions at a version not served: UNSUPPORTED_VERSION in the v0
//!   format, naming the ApiVersions versions served, so the client retries
//!   at one of them (KIP-511);
//! - anything else (an unknown API key, an API not served, a version not
//!   served, a request that does not decode): the connection is closed. A
//!   client cannot read an answer to a version nobody here speaks, and
//!   clients send only what ApiVersions advertised.

use std::ops::Deref;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterPartitionReassignmentsRequest, AlterUserScramCredentialsRequest,
    ApiKey, ApiVersionsRequest, CreateAclsRequest, CreatePartitionsRequest, CreateTopicsRequest,
    DeleteAclsRequest, DeleteTopicsRequest, DescribeAclsRequest, DescribeClusterRequest,
    DescribeConfigsRequest, DescribeQuorumRequest, DescribeUserScramCredentialsRequest,
    ElectLeadersRequest, IncrementalAlterConfigsRequest, ListPartitionReassignmentsRequest,
    MetadataRequest, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable};

use keel_metadata::acl::{Operation, Principal, Resource};

use crate::access::Access;
use crate::admin;
use crate::apis;
use crate::forward::OnBehalf;
use crate::view::ClusterView;

/// The APIs served and their version ranges (inclusive): exactly what
/// ApiVersions advertises. Flexible versions (compact encodings, tagged
/// fields): ApiVersions 3+, Metadata 9+, every DescribeCluster,
/// CreateTopics 5+, DeleteTopics 4+, CreatePartitions 2+, DescribeConfigs
/// 4+, AlterConfigs 2+, IncrementalAlterConfigs 1+, ElectLeaders 2+, every
/// AlterPartitionReassignments and ListPartitionReassignments, DescribeAcls,
/// CreateAcls and DeleteAcls 2+, every AlterUserScramCredentials and
/// DescribeUserScramCredentials. The admin APIs from CreateTopics on are
/// forwarded to the active controller.
pub const SERVED: [(ApiKey, i16, i16); 17] = [
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::Metadata, 0, 13),
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::AlterPartitionReassignments, 0, 0),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
];

/// What a controller's listener serves (and advertises): enough for
/// `--bootstrap-controller` clients to find the quorum and describe it.
/// Flexible: ApiVersions 3+, every DescribeCluster and DescribeQuorum.
pub const CONTROLLER_SERVED: [(ApiKey, i16, i16); 3] = [
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::DescribeQuorum, 0, 2),
];

/// What the listener answering from `view` serves: a controller's or a
/// broker's set.
pub fn served_by(view: &ClusterView) -> &'static [(ApiKey, i16, i16)] {
    if view.quorum.is_some() {
        &CONTROLLER_SERVED
    } else {
        &SERVED
    }
}

/// The largest forwarded admin request read (admin requests are small).
pub const MAX_ADMIN_REQUEST_BYTES: usize = 1 << 20;

/// A decoded admin request, to be forwarded to the active controller.
#[derive(Clone, Debug, PartialEq)]
pub enum AdminRequest {
    CreateTopics(CreateTopicsRequest),
    DeleteTopics(DeleteTopicsRequest),
    CreatePartitions(CreatePartitionsRequest),
    DescribeConfigs(DescribeConfigsRequest),
    AlterConfigs(AlterConfigsRequest),
    IncrementalAlterConfigs(IncrementalAlterConfigsRequest),
    ElectLeaders(ElectLeadersRequest),
    AlterPartitionReassignments(AlterPartitionReassignmentsRequest),
    ListPartitionReassignments(ListPartitionReassignmentsRequest),
    DescribeAcls(DescribeAclsRequest),
    CreateAcls(CreateAclsRequest),
    DeleteAcls(DeleteAclsRequest),
    DescribeUserScramCredentials(DescribeUserScramCredentialsRequest),
    AlterUserScramCredentials(AlterUserScramCredentialsRequest),
}

/// An admin request waiting for the controller's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Forwarded {
    pub api: ApiKey,
    pub version: i16,
    pub correlation_id: i32,
    pub request: AdminRequest,
}

/// What to do with one request.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Write `frame` (length prefix, response header, body) back.
    Respond {
        api: ApiKey,
        version: i16,
        frame: Bytes,
    },
    /// Close the connection; the reason is for the log.
    Close(String),
    /// An admin request: [`answer`] it with the controller's help.
    Forward(Box<Forwarded>),
}

/// The versions of `api` served, if any.
pub fn served(api: ApiKey) -> Option<(i16, i16)> {
    SERVED
        .iter()
        .find(|(k, ..)| *k == api)
        .map(|&(_, min, max)| (min, max))
}

/// Who asks, as the listener authenticated the connection, and what the
/// cluster lets whom see: Metadata names only the topics `principal` may
/// describe.
#[derive(Clone, Copy)]
pub struct Asker<'a> {
    pub principal: &'a Principal,
    pub access: &'a Access,
}

impl Asker<'_> {
    /// Whether the asker may describe `topic`.
    pub fn may_describe(&self, topic: &str) -> bool {
        self.access
            .may(self.principal, Operation::Describe, Resource::Topic(topic))
    }
}

/// Answers one request from `view` for a client of a plaintext cluster
/// (nothing is checked). Never panics, whatever `request` is.
pub fn handle(request: &[u8], view: &ClusterView) -> Outcome {
    let open = Access::open();
    let asker = Asker {
        principal: &Principal::Anonymous,
        access: &open,
    };
    route(request, served_by(view), || view, &asker)
}

/// [`handle`] on a listener that serves `served` (what [`served_by`] says of
/// its views), taking the snapshot (`view`) only when the answer is made
/// from it: an admin request is forwarded without one. A broker remakes
/// its snapshot on first use after each UpdateMetadata, which at 100,000
/// partitions costs more than the forwarded call itself, and every create
/// is followed by an UpdateMetadata.
pub fn route<V, F>(
    request: &[u8],
    served: &[(ApiKey, i16, i16)],
    view: F,
    asker: &Asker<'_>,
) -> Outcome
where
    V: Deref<Target = ClusterView>,
    F: FnOnce() -> V,
{
    let (api, version) = match served_version(request, served) {
        Ok(found) => found,
        Err(outcome) => return outcome,
    };
    let mut buf = Bytes::copy_from_slice(request);
    let header = match RequestHeader::decode(&mut buf, api.request_header_version(version)) {
        Ok(h) => h,
        Err(e) => {
            return Outcome::Close(format!(
                "{api:?} v{version}: undecodable request header: {e}"
            ))
        }
    };
    let id = header.correlation_id;
    if !matches!(
        api,
        ApiKey::ApiVersions | ApiKey::Metadata | ApiKey::DescribeCluster | ApiKey::DescribeQuorum
    ) {
        return forward_admin(api, version, id, request.len(), buf);
    }
    // Bytes after the body are ignored, as Kafka does.
    let view = view();
    let view = &*view;
    let said = Said { api, version, id };
    match api {
        ApiKey::ApiVersions => match ApiVersionsRequest::decode(&mut buf, version) {
            Ok(req) => respond(api, version, id, &apis::api_versions(&req, version, served)),
            Err(e) => said.undecodable(format!("undecodable request: {e}")),
        },
        ApiKey::Metadata => answer_metadata(said, buf, request.len(), view, asker),
        ApiKey::DescribeQuorum => answer_describe_quorum(said, buf, view, asker),
        ApiKey::DescribeCluster => match DescribeClusterRequest::decode(&mut buf, version) {
            Ok(req) => respond(
                api,
                version,
                id,
                &apis::describe_cluster(&req, version, view),
            ),
            Err(e) => said.undecodable(format!("undecodable request: {e}")),
        },
        // The admin APIs were forwarded above.
        other => Outcome::Close(format!("{other:?} is not served by this listener")),
    }
}

/// What a request asks for, once its header is read: the API, its version
/// and the correlation id its answer carries.
#[derive(Clone, Copy)]
struct Said {
    /// The API asked for.
    api: ApiKey,
    /// The version asked for, one that is served.
    version: i16,
    /// The correlation id from the decoded header.
    id: i32,
}

impl Said {
    /// The outcome for a request of this API and version that cannot be
    /// decoded or is refused before decoding: the connection is closed.
    fn undecodable(self, e: String) -> Outcome {
        let Said { api, version, .. } = self;
        Outcome::Close(format!("{api:?} v{version}: {e}"))
    }
}

/// Reads the fixed start of the request header and finds its API and
/// version among `served`; the outcome to give instead when the request is
/// too short, names an unknown or unserved API, or a version not served.
fn served_version(request: &[u8], served: &[(ApiKey, i16, i16)]) -> Result<(ApiKey, i16), Outcome> {
    let Some(fixed) = request.get(..8) else {
        return Err(Outcome::Close(format!(
            "a request of {} bytes is shorter than any request header",
            request.len()
        )));
    };
    // The first three header fields are the same in every header version.
    let api_key = i16::from_be_bytes([fixed[0], fixed[1]]);
    let version = i16::from_be_bytes([fixed[2], fixed[3]]);
    let correlation_id = i32::from_be_bytes([fixed[4], fixed[5], fixed[6], fixed[7]]);
    let Ok(api) = ApiKey::try_from(api_key) else {
        return Err(Outcome::Close(format!("unknown API key {api_key}")));
    };
    let Some((min, max)) = served
        .iter()
        .find(|(k, ..)| *k == api)
        .map(|&(_, min, max)| (min, max))
    else {
        return Err(Outcome::Close(format!(
            "{api:?} (API key {api_key}) is not served by this listener"
        )));
    };
    if !(min..=max).contains(&version) {
        if api == ApiKey::ApiVersions {
            return Err(unsupported_api_versions(correlation_id, served));
        }
        return Err(Outcome::Close(format!(
            "{api:?} v{version} is not served (versions {min}-{max} are)"
        )));
    }
    Ok((api, version))
}

/// Checks and decodes an admin request (`buf` is its body, `request_len`
/// the whole request's size) and hands it on to be forwarded.
fn forward_admin(
    api: ApiKey,
    version: i16,
    id: i32,
    request_len: usize,
    mut buf: Bytes,
) -> Outcome {
    let said = Said { api, version, id };
    if request_len > MAX_ADMIN_REQUEST_BYTES {
        return said.undecodable(format!(
            "an admin request of {request_len} bytes is over {MAX_ADMIN_REQUEST_BYTES}"
        ));
    }
    // Before decoding: see `shape`.
    if let Err(e) = crate::shape::check(api, version, &buf) {
        return said.undecodable(e);
    }
    match decode_admin(api, &mut buf, version) {
        Ok(request) => Outcome::Forward(Box::new(Forwarded {
            api,
            version,
            correlation_id: id,
            request,
        })),
        Err(e) => said.undecodable(format!("undecodable request: {e}")),
    }
}

/// Answers a Metadata request from `view`, after checking what decoding
/// its body (`buf`, of a request of `request_len` bytes) would take.
fn answer_metadata(
    said: Said,
    mut buf: Bytes,
    request_len: usize,
    view: &ClusterView,
    asker: &Asker<'_>,
) -> Outcome {
    let Said { api, version, id } = said;
    // The topics array comes first; its length is checked before
    // the decoder reserves room for that many entries.
    if let Err(e) = check_array_length(&buf, version >= 9) {
        return said.undecodable(e);
    }
    // And what it would take decoded: see `budget`.
    if let Err(e) = crate::budget::metadata(&buf, version, request_len) {
        return said.undecodable(e);
    }
    match MetadataRequest::decode(&mut buf, version) {
        Ok(req) => respond(
            api,
            version,
            id,
            &apis::metadata(&req, version, view, &|t| asker.may_describe(t)),
        ),
        Err(e) => said.undecodable(format!("undecodable request: {e}")),
    }
}

/// Answers a DescribeQuorum request from the controller's quorum in
/// `view`, refusing an asker without DESCRIBE on the cluster.
fn answer_describe_quorum(
    said: Said,
    mut buf: Bytes,
    view: &ClusterView,
    asker: &Asker<'_>,
) -> Outcome {
    let Said { api, version, id } = said;
    let Some(q) = &view.quorum else {
        return said.undecodable("not served by a broker".into());
    };
    if let Err(e) = crate::shape::check(api, version, &buf) {
        return said.undecodable(e);
    }
    // As Kafka: describing the quorum needs DESCRIBE on the cluster.
    if !asker
        .access
        .may(asker.principal, Operation::Describe, Resource::Cluster)
    {
        tracing::info!(principal = %asker.principal, operation = "describe", resource = "cluster", api = "DescribeQuorum", "refused");
        let refused = kafka_protocol::messages::DescribeQuorumResponse::default()
            .with_error_code(kafka_protocol::ResponseError::ClusterAuthorizationFailed.code());
        return respond(api, version, id, &refused);
    }
    match DescribeQuorumRequest::decode(&mut buf, version) {
        Ok(req) => respond(api, version, id, &apis::describe_quorum(&req, version, q)),
        Err(e) => said.undecodable(format!("undecodable request: {e}")),
    }
}

/// Decodes the body of a forwarded admin request.
fn decode_admin(api: ApiKey, buf: &mut Bytes, version: i16) -> Result<AdminRequest, String> {
    fn e(e: impl std::fmt::Display) -> String {
        e.to_string()
    }
    // Each admin API's body decodes as its request type, into the
    // variant of the same name.
    macro_rules! decode {
        ($($api:ident => $request:ident,)*) => {
            match api {
                $(ApiKey::$api => AdminRequest::$api($request::decode(buf, version).map_err(e)?),)*
                other => return Err(format!("{other:?} is not an admin request forwarded here")),
            }
        };
    }
    Ok(decode! {
        CreateTopics => CreateTopicsRequest,
        DeleteTopics => DeleteTopicsRequest,
        CreatePartitions => CreatePartitionsRequest,
        DescribeConfigs => DescribeConfigsRequest,
        AlterConfigs => AlterConfigsRequest,
        IncrementalAlterConfigs => IncrementalAlterConfigsRequest,
        ElectLeaders => ElectLeadersRequest,
        AlterPartitionReassignments => AlterPartitionReassignmentsRequest,
        ListPartitionReassignments => ListPartitionReassignmentsRequest,
        DescribeAcls => DescribeAclsRequest,
        CreateAcls => CreateAclsRequest,
        DeleteAcls => DeleteAclsRequest,
        DescribeUserScramCredentials => DescribeUserScramCredentialsRequest,
        AlterUserScramCredentials => AlterUserScramCredentialsRequest,
    })
}

/// Answers a forwarded admin request: its calls sent through `fwd`, the
/// answer encoded as [`handle`] encodes the others.
pub async fn answer(f: Forwarded, view: &ClusterView, fwd: &OnBehalf<'_>) -> Outcome {
    answer_with(f, || view, fwd).await
}

/// [`answer`], taking the snapshot (`view`) only for the requests that
/// read the cache (topic ids, current partition counts); see [`route`].
pub async fn answer_with<V, F>(f: Forwarded, view: F, fwd: &OnBehalf<'_>) -> Outcome
where
    V: Deref<Target = ClusterView>,
    F: FnOnce() -> V,
{
    let Forwarded {
        api,
        version,
        correlation_id: id,
        request,
    } = f;
    match request {
        AdminRequest::CreateTopics(r) => respond(
            api,
            version,
            id,
            &admin::create_topics(r, version, fwd).await,
        ),
        AdminRequest::DeleteTopics(r) => respond(
            api,
            version,
            id,
            &admin::delete_topics(r, version, &view(), fwd).await,
        ),
        AdminRequest::CreatePartitions(r) => respond(
            api,
            version,
            id,
            &admin::create_partitions(r, &view(), fwd).await,
        ),
        AdminRequest::DescribeConfigs(r) => respond(
            api,
            version,
            id,
            &admin::describe_configs(r, version, fwd).await,
        ),
        AdminRequest::AlterConfigs(r) => {
            respond(api, version, id, &admin::alter_configs(r, fwd).await)
        }
        AdminRequest::IncrementalAlterConfigs(r) => respond(
            api,
            version,
            id,
            &admin::incremental_alter_configs(r, fwd).await,
        ),
        AdminRequest::ElectLeaders(r) => respond(
            api,
            version,
            id,
            &admin::elect_leaders(r, version, fwd).await,
        ),
        AdminRequest::AlterPartitionReassignments(r) => respond(
            api,
            version,
            id,
            &admin::alter_partition_reassignments(r, fwd).await,
        ),
        AdminRequest::ListPartitionReassignments(r) => respond(
            api,
            version,
            id,
            &admin::list_partition_reassignments(r, fwd).await,
        ),
        AdminRequest::DescribeAcls(r) => {
            respond(api, version, id, &admin::describe_acls(r, fwd).await)
        }
        AdminRequest::CreateAcls(r) => respond(api, version, id, &admin::create_acls(r, fwd).await),
        AdminRequest::DeleteAcls(r) => respond(api, version, id, &admin::delete_acls(r, fwd).await),
        AdminRequest::DescribeUserScramCredentials(r) => respond(
            api,
            version,
            id,
            &admin::describe_user_scram_credentials(r, fwd).await,
        ),
        AdminRequest::AlterUserScramCredentials(r) => respond(
            api,
            version,
            id,
            &admin::alter_user_scram_credentials(r, fwd).await,
        ),
    }
}

/// The answer to an ApiVersions request at a version not served: v0 format
/// (header v0, no tagged fields), UNSUPPORTED_VERSION, and the ApiVersions
/// versions served (Kafka's `ApiVersionsRequest.getErrorResponse`).
fn unsupported_api_versions(correlation_id: i32, served: &[(ApiKey, i16, i16)]) -> Outcome {
    let body = apis::api_versions_unsupported(served);
    respond(ApiKey::ApiVersions, 0, correlation_id, &body)
}

/// Encodes `body` as the answer to `api` v`version`, framed.
pub(crate) fn respond<B: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &B,
) -> Outcome {
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let mut frame = BytesMut::new();
    frame.put_i32(0); // the length, filled in below
    let encoded = header
        .encode(&mut frame, api.response_header_version(version))
        .and_then(|()| body.encode(&mut frame, version));
    if let Err(e) = encoded {
        // A bug in what this crate put in the answer (a field the version
        // cannot carry): the client gets nothing rather than garbage.
        return Outcome::Close(format!("{api:?} v{version}: cannot encode the answer: {e}"));
    }
    let Ok(len) = i32::try_from(frame.len() - 4) else {
        return Outcome::Close(format!(
            "{api:?} v{version}: an answer of {} bytes does not fit a frame",
            frame.len() - 4
        ));
    };
    frame[..4].copy_from_slice(&len.to_be_bytes());
    Outcome::Respond {
        api,
        version,
        frame: frame.freeze(),
    }
}

/// Checks the length of the array at the start of `body` against the bytes
/// left: every entry takes at least one byte, so a longer claim is a lie.
/// (kafka-protocol reserves room for the claimed count before decoding any
/// entry, and a claim of 2^31 entries would abort the process.)
fn check_array_length(body: &[u8], compact: bool) -> Result<(), String> {
    let (count, used) = if compact {
        let (n, used) = read_unsigned_varint(body).ok_or("truncated array length")?;
        // Compact arrays store length + 1; 0 is null.
        (u64::from(n.saturating_sub(1)), used)
    } else {
        let b = body.get(..4).ok_or("truncated array length")?;
        let n = i32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        // -1 is null; other negatives the decoder refuses.
        (u64::try_from(n).unwrap_or(0), 4)
    };
    let left = (body.len() - used) as u64;
    if count > left {
        return Err(format!(
            "an array claims {count} entries with {left} bytes left"
        ));
    }
    Ok(())
}

/// Kafka's unsigned varint (at most 5 bytes for a u32) and its length.
fn read_unsigned_varint(bytes: &[u8]) -> Option<(u32, usize)> {
    let mut rest = bytes.iter();
    let value = crate::shape::unsigned_varint(|| rest.next().copied().ok_or(())).ok()??;
    Some((value, bytes.len() - rest.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn served_versions_are_within_what_kafka_protocol_encodes() {
        for (api, min, max) in SERVED {
            let v = api.valid_versions();
            assert!(v.min <= min && max <= v.max, "{api:?} {min}-{max} vs {v}");
        }
    }

    /// `api` v`version` with `body`, as a client frames it (without the
    /// length prefix).
    fn request<B: Encodable>(api: ApiKey, version: i16, body: &B) -> Vec<u8> {
        let mut buf = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(9)
            .encode(&mut buf, api.request_header_version(version))
            .unwrap();
        body.encode(&mut buf, version).unwrap();
        buf.to_vec()
    }

    #[test]
    fn a_create_is_forwarded_without_taking_the_snapshot_and_metadata_takes_it() {
        use kafka_protocol::messages::create_topics_request::CreatableTopic;
        use kafka_protocol::messages::TopicName;
        use kafka_protocol::protocol::StrBytes;
        use std::cell::Cell;

        let view = ClusterView::default();
        let taken = Cell::new(0);
        let take = || {
            taken.set(taken.get() + 1);
            &view
        };
        let create = request(
            ApiKey::CreateTopics,
            7,
            &CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("t")))
                .with_num_partitions(1)
                .with_replication_factor(1)]),
        );
        let open = Access::open();
        let asker = Asker {
            principal: &Principal::Anonymous,
            access: &open,
        };
        let out = route(&create, &SERVED, take, &asker);
        assert!(
            matches!(&out, Outcome::Forward(f) if f.api == ApiKey::CreateTopics),
            "{out:?}"
        );
        assert_eq!(taken.get(), 0, "a create reads nothing of the cache");

        let metadata = request(ApiKey::Metadata, 12, &MetadataRequest::default());
        let out = route(&metadata, &SERVED, take, &asker);
        assert!(matches!(
            out,
            Outcome::Respond {
                api: ApiKey::Metadata,
                ..
            }
        ));
        assert_eq!(taken.get(), 1, "Metadata is answered from the snapshot");

        // A controller's listener serves no CreateTopics, snapshot or not.
        let out = route(&create, &CONTROLLER_SERVED, take, &asker);
        assert!(matches!(out, Outcome::Close(_)), "{out:?}");
        assert_eq!(taken.get(), 1);
    }

    #[test]
    fn metadata_names_only_the_topics_the_asker_may_describe() {
        use crate::view::TopicView;
        use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
        use kafka_protocol::messages::{MetadataResponse, TopicName};
        use kafka_protocol::protocol::StrBytes;
        use keel_metadata::acl::{AclBinding, Permission, ResourcePattern};

        let mut view = ClusterView::default();
        for (i, name) in ["orders", "secret-payroll"].into_iter().enumerate() {
            view.topics.insert(
                name.to_string(),
                TopicView {
                    id: i as u128 + 1,
                    partitions: vec![],
                },
            );
        }
        let alice = Principal::User("alice".into());
        let access = Access {
            acls: vec![AclBinding {
                principal: alice.clone(),
                pattern: ResourcePattern::Topic("orders".into()),
                operation: Operation::Describe,
                permission: Permission::Allow,
            }],
            ..Access::default()
        };
        let asker = Asker {
            principal: &alice,
            access: &access,
        };
        let ask = |topics: Option<Vec<&'static str>>| {
            let req = MetadataRequest::default().with_topics(topics.map(|t| {
                t.into_iter()
                    .map(|n| {
                        MetadataRequestTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_static_str(n))))
                    })
                    .collect()
            }));
            let Outcome::Respond { frame, .. } = route(
                &request(ApiKey::Metadata, 12, &req),
                &SERVED,
                || &view,
                &asker,
            ) else {
                panic!("no answer")
            };
            let mut b = frame.slice(4..);
            ResponseHeader::decode(&mut b, ApiKey::Metadata.response_header_version(12)).unwrap();
            MetadataResponse::decode(&mut b, 12).unwrap()
        };
        let all = ask(None);
        let names: Vec<String> = all
            .topics
            .iter()
            .map(|t| t.name.as_ref().unwrap().to_string())
            .collect();
        assert_eq!(names, ["orders"], "the forbidden topic is left out");
        // By name: refused whether it exists or not, so nothing leaks.
        let by_name = ask(Some(vec!["secret-payroll", "no-such", "orders"]));
        let codes: Vec<i16> = by_name.topics.iter().map(|t| t.error_code).collect();
        let denied = kafka_protocol::ResponseError::TopicAuthorizationFailed.code();
        assert_eq!(codes, [denied, denied, 0]);
    }

    #[test]
    fn varints_read_as_kafka_writes_them() {
        assert_eq!(read_unsigned_varint(&[0]), Some((0, 1)));
        assert_eq!(read_unsigned_varint(&[0x96, 0x01]), Some((150, 2)));
        assert_eq!(
            read_unsigned_varint(&[0xff, 0xff, 0xff, 0xff, 0x0f]),
            Some((u32::MAX, 5))
        );
        assert_eq!(read_unsigned_varint(&[0x80]), None);
        assert_eq!(
            read_unsigned_varint(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01]),
            None
        );
    }

    #[test]
    fn an_array_longer_than_its_bytes_is_refused_before_decoding() {
        assert!(check_array_length(&[0x7f, 0xff, 0xff, 0xff], false).is_err());
        assert!(check_array_length(&[0, 0, 0, 2, 1], false).is_err());
        assert!(check_array_length(&[0, 0, 0, 1, 1], false).is_ok());
        assert!(check_array_length(&[0xff, 0xff, 0xff, 0xff], false).is_ok()); // null
        assert!(check_array_length(&[0xff, 0xff, 0xff, 0xff, 0x0f], true).is_err());
        assert!(check_array_length(&[0], true).is_ok()); // null
        assert!(check_array_length(&[3, 1, 1], true).is_ok());
        assert!(check_array_length(&[4, 1, 1], true).is_err());
    }
}
