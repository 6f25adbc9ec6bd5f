//! The listener over real sockets: a misbehaving connection is closed and
//! no other connection notices; pipelined requests are answered in order.

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use keel_kafka::{serve, ClusterView, ListenerConfig, ViewSource};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

struct Fixed(Arc<ClusterView>);

impl ViewSource for Fixed {
    fn view(&self) -> Arc<ClusterView> {
        self.0.clone()
    }
}

/// An ApiVersions v3 request frame, length prefix included.
fn api_versions(correlation_id: i32) -> Bytes {
    let mut body = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(ApiKey::ApiVersions as i16)
        .with_request_api_version(3)
        .with_correlation_id(correlation_id)
        .encode(&mut body, 2)
        .unwrap();
    ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("test"))
        .with_client_software_version(StrBytes::from_static_str("1"))
        .encode(&mut body, 3)
        .unwrap();
    let mut frame = BytesMut::new();
    frame.put_i32(body.len() as i32);
    frame.extend_from_slice(&body);
    frame.freeze()
}

/// Reads one answer frame; returns its correlation id and body.
async fn answer(s: &mut TcpStream) -> (i32, ApiVersionsResponse) {
    let len = s.read_i32().await.expect("a length prefix");
    let mut buf = vec![0u8; len as usize];
    s.read_exact(&mut buf).await.expect("the frame");
    let mut buf = Bytes::from(buf);
    let h = ResponseHeader::decode(&mut buf, 0).unwrap();
    (
        h.correlation_id,
        ApiVersionsResponse::decode(&mut buf, 3).unwrap(),
    )
}

/// True once the server closed `s` (reads end of stream).
async fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    matches!(
        tokio::time::timeout(Duration::from_secs(5), s.read(&mut b)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

#[tokio::test]
async fn a_bad_connection_is_closed_and_the_others_keep_being_served() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let config = ListenerConfig {
        max_request_bytes: 1024,
        idle_timeout: Duration::from_secs(30),
        ..ListenerConfig::default()
    };
    let server = tokio::spawn(serve(
        listener,
        Arc::new(Fixed(Arc::new(ClusterView::default()))),
        config,
        stop_rx,
    ));

    let mut good = TcpStream::connect(addr).await.unwrap();
    // Two requests in one write: two answers, in order.
    let both = [api_versions(1), api_versions(2)].concat();
    good.write_all(&both).await.unwrap();
    assert_eq!(answer(&mut good).await.0, 1);
    let (id, r) = answer(&mut good).await;
    assert_eq!(
        (id, r.error_code, r.api_keys.len()),
        (2, 0, keel_kafka::SERVED.len())
    );

    // Over the limit: closed before the body is even sent.
    let mut big = TcpStream::connect(addr).await.unwrap();
    big.write_all(&1025i32.to_be_bytes()).await.unwrap();
    assert!(closed(&mut big).await);
    // Garbage inside a well-sized frame: closed.
    let mut garbage = TcpStream::connect(addr).await.unwrap();
    garbage
        .write_all(&[0, 0, 0, 6, 0x7f, 0x7f, 1, 2, 3, 4])
        .await
        .unwrap();
    assert!(closed(&mut garbage).await);
    // Half a frame, then the client leaves: nothing to answer.
    let mut half = TcpStream::connect(addr).await.unwrap();
    half.write_all(&api_versions(3)[..7]).await.unwrap();
    drop(half);

    // The first connection is still served.
    good.write_all(&api_versions(4)).await.unwrap();
    assert_eq!(answer(&mut good).await.0, 4);

    stop.send_replace(true);
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("the listener stops")
        .unwrap();
    assert!(closed(&mut good).await, "connections end with the listener");
}
