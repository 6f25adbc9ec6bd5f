//! What the Kafka listener's tests share: request frames as a client
//! writes them.

use bytes::BytesMut;
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::{Encodable, StrBytes};

/// `api` v`version` with `body`, sent as `client_id` under
/// `correlation_id`: header and body, without the length prefix.
pub fn request_frame<B: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    client_id: &'static str,
    body: &B,
) -> Vec<u8> {
    let mut buf = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str(client_id)))
        .encode(&mut buf, api.request_header_version(version))
        .unwrap();
    body.encode(&mut buf, version).unwrap();
    buf.to_vec()
}
