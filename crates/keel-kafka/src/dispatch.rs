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

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, DescribeClusterRequest, MetadataRequest, RequestHeader,
    ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable};

use crate::apis;
use crate::view::ClusterView;

/// The APIs served and their version ranges (inclusive): exactly what
/// ApiVersions advertises. Flexible versions (compact encodings, tagged
/// fields) are ApiVersions 3+, Metadata 9+ and every DescribeCluster.
pub const SERVED: [(ApiKey, i16, i16); 3] = [
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::Metadata, 0, 13),
    (ApiKey::DescribeCluster, 0, 2),
];

/// What to do with one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Write `frame` (length prefix, response header, body) back.
    Respond {
        api: ApiKey,
        version: i16,
        frame: Bytes,
    },
    /// Close the connection; the reason is for the log.
    Close(String),
}

/// The versions of `api` served, if any.
pub fn served(api: ApiKey) -> Option<(i16, i16)> {
    SERVED
        .iter()
        .find(|(k, ..)| *k == api)
        .map(|&(_, min, max)| (min, max))
}

/// Answers one request from `view`. Never panics, whatever `request` is.
pub fn handle(request: &[u8], view: &ClusterView) -> Outcome {
    let Some(fixed) = request.get(..8) else {
        return Outcome::Close(format!(
            "a request of {} bytes is shorter than any request header",
            request.len()
        ));
    };
    // The first three header fields are the same in every header version.
    let api_key = i16::from_be_bytes([fixed[0], fixed[1]]);
    let version = i16::from_be_bytes([fixed[2], fixed[3]]);
    let correlation_id = i32::from_be_bytes([fixed[4], fixed[5], fixed[6], fixed[7]]);
    let Ok(api) = ApiKey::try_from(api_key) else {
        return Outcome::Close(format!("unknown API key {api_key}"));
    };
    let Some((min, max)) = served(api) else {
        return Outcome::Close(format!(
            "{api:?} (API key {api_key}) is not served by this listener"
        ));
    };
    if !(min..=max).contains(&version) {
        if api == ApiKey::ApiVersions {
            return unsupported_api_versions(correlation_id);
        }
        return Outcome::Close(format!(
            "{api:?} v{version} is not served (versions {min}-{max} are)"
        ));
    }
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
    let undecodable = |e: String| Outcome::Close(format!("{api:?} v{version}: {e}"));
    // Bytes after the body are ignored, as Kafka does.
    match api {
        ApiKey::ApiVersions => match ApiVersionsRequest::decode(&mut buf, version) {
            Ok(req) => respond(api, version, id, &apis::api_versions(&req, version)),
            Err(e) => undecodable(format!("undecodable request: {e}")),
        },
        ApiKey::Metadata => {
            // The topics array comes first; its length is checked before
            // the decoder reserves room for that many entries.
            if let Err(e) = check_array_length(&buf, version >= 9) {
                return undecodable(e);
            }
            match MetadataRequest::decode(&mut buf, version) {
                Ok(req) => respond(api, version, id, &apis::metadata(&req, version, view)),
                Err(e) => undecodable(format!("undecodable request: {e}")),
            }
        }
        ApiKey::DescribeCluster => match DescribeClusterRequest::decode(&mut buf, version) {
            Ok(req) => respond(
                api,
                version,
                id,
                &apis::describe_cluster(&req, version, view),
            ),
            Err(e) => undecodable(format!("undecodable request: {e}")),
        },
        // `served` lists only the three above.
        other => Outcome::Close(format!("{other:?} is not served by this listener")),
    }
}

/// The answer to an ApiVersions request at a version not served: v0 format
/// (header v0, no tagged fields), UNSUPPORTED_VERSION, and the ApiVersions
/// versions served (Kafka's `ApiVersionsRequest.getErrorResponse`).
fn unsupported_api_versions(correlation_id: i32) -> Outcome {
    let body = apis::api_versions_unsupported();
    respond(ApiKey::ApiVersions, 0, correlation_id, &body)
}

/// Encodes `body` as the answer to `api` v`version`, framed.
fn respond<B: Encodable>(api: ApiKey, version: i16, correlation_id: i32, body: &B) -> Outcome {
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
    let mut value: u32 = 0;
    for (i, b) in bytes.iter().take(5).enumerate() {
        value |= u32::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
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
