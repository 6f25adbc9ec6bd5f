//! The listener on tokio: Kafka's framing (a 4-byte big-endian length, then
//! that many bytes), one task per connection, requests answered one at a
//! time in order (as Kafka mutes a connection while its request is being
//! handled). A frame over the limit, a truncated one or one that does not
//! decode closes that connection with a warning; nothing else notices.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::dispatch::{answer_with, route, served_by, Outcome};
use crate::forward::Forwarder;
use crate::view::ClusterView;

/// Kafka's `socket.request.max.bytes` default: 100 MiB.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 100 << 20;
/// Kafka's `connections.max.idle.ms` default: a connection that sends
/// nothing (or takes nothing of an answer) for this long is closed.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// The most of a frame read at once: a client that claims 100 MiB and sends
/// little holds little memory.
const READ_CHUNK_BYTES: usize = 64 << 10;

/// Where the listener takes the snapshot each request is answered from.
pub trait ViewSource: Send + Sync + 'static {
    /// The cache as it stands now (cheap: a shared snapshot).
    fn view(&self) -> Arc<ClusterView>;

    /// Who sends admin requests on to the active controller; without one
    /// they are answered NOT_CONTROLLER.
    fn forwarder(&self) -> Option<&dyn Forwarder> {
        None
    }
}

/// The forwarder of a listener that has none.
struct NoForwarder;

impl Forwarder for NoForwarder {
    fn forward(
        &self,
        _: crate::forward::AdminCall,
        _: Duration,
    ) -> crate::forward::BoxFuture<
        '_,
        Result<crate::forward::AdminReply, crate::forward::ForwardError>,
    > {
        Box::pin(async { Err(crate::forward::ForwardError::NotForwarding) })
    }
}

/// The listener's limits.
#[derive(Clone, Copy, Debug)]
pub struct ListenerConfig {
    /// A frame whose length prefix claims more (or is negative) closes its
    /// connection before any of it is read.
    pub max_request_bytes: usize,
    /// See [`DEFAULT_IDLE_TIMEOUT`].
    pub idle_timeout: Duration,
}

impl Default for ListenerConfig {
    fn default() -> Self {
        Self {
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame length {0} is negative")]
    Negative(i32),
    #[error("frame of {claimed} bytes is over the limit of {max} (--kafka-max-request-bytes)")]
    TooLarge { claimed: usize, max: usize },
    #[error("connection closed {got} bytes into a {expected}-byte frame")]
    Truncated { expected: usize, got: usize },
    #[error("connection closed inside a frame's length prefix")]
    TruncatedPrefix,
    #[error("nothing received for {0:?}")]
    Idle(Duration),
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// Reads one frame's bytes (after the length prefix); `None` at a clean end
/// of stream between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    config: &ListenerConfig,
) -> Result<Option<Bytes>, FrameError> {
    let idle = config.idle_timeout;
    let mut prefix = [0u8; 4];
    let mut got = 0;
    while got < prefix.len() {
        let n = tokio::time::timeout(idle, r.read(&mut prefix[got..]))
            .await
            .map_err(|_| FrameError::Idle(idle))??;
        if n == 0 {
            return if got == 0 {
                Ok(None)
            } else {
                Err(FrameError::TruncatedPrefix)
            };
        }
        got += n;
    }
    let len = i32::from_be_bytes(prefix);
    let len = usize::try_from(len).map_err(|_| FrameError::Negative(len))?;
    if len > config.max_request_bytes {
        return Err(FrameError::TooLarge {
            claimed: len,
            max: config.max_request_bytes,
        });
    }
    let mut buf = BytesMut::with_capacity(len.min(READ_CHUNK_BYTES));
    while buf.len() < len {
        let want = (len - buf.len()).min(READ_CHUNK_BYTES);
        buf.reserve(want);
        // `take`: never read into the next frame.
        let n = tokio::time::timeout(idle, (&mut *r).take(want as u64).read_buf(&mut buf))
            .await
            .map_err(|_| FrameError::Idle(idle))??;
        if n == 0 {
            return Err(FrameError::Truncated {
                expected: len,
                got: buf.len(),
            });
        }
    }
    Ok(Some(buf.freeze()))
}

/// Serves Kafka clients on `listener` until `stop` turns true.
pub async fn serve(
    listener: TcpListener,
    source: Arc<dyn ViewSource>,
    config: ListenerConfig,
    mut stop: watch::Receiver<bool>,
) {
    let local = listener.local_addr().ok();
    // A source's views are all a controller's or all a broker's: what the
    // listener serves is fixed by the first.
    let served = served_by(&source.view());
    info!(address = ?local, max_request_bytes = config.max_request_bytes, "Kafka listener serving");
    loop {
        let accepted = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                tokio::spawn(connection(
                    stream,
                    peer,
                    source.clone(),
                    served,
                    config,
                    stop.clone(),
                ));
            }
            Err(e) => {
                // Out of file descriptors, most likely: do not spin.
                warn!(error = %e, "Kafka listener cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// One client's connection: read a frame, answer it, until the client
/// leaves, misbehaves or the broker stops.
async fn connection(
    mut stream: TcpStream,
    peer: SocketAddr,
    source: Arc<dyn ViewSource>,
    served: &'static [(ApiKey, i16, i16)],
    config: ListenerConfig,
    mut stop: watch::Receiver<bool>,
) {
    debug!(%peer, "Kafka connection opened");
    tokio::select! {
        _ = stop.wait_for(|s| *s) => {}
        why = exchange(&mut stream, peer, source.as_ref(), served, &config) => match why {
            Ok(()) => debug!(%peer, "Kafka connection closed by the client"),
            Err(e) => warn!(%peer, reason = %e, "closing a Kafka connection"),
        },
    }
}

/// The request/answer loop of one connection; `Err` says why it closes.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    peer: SocketAddr,
    source: &dyn ViewSource,
    served: &[(ApiKey, i16, i16)],
    config: &ListenerConfig,
) -> Result<(), String> {
    loop {
        let Some(request) = read_frame(stream, config)
            .await
            .map_err(|e| e.to_string())?
        else {
            return Ok(());
        };
        let outcome = match route(&request, served, || source.view()) {
            Outcome::Forward(f) => {
                let fwd = source.forwarder().unwrap_or(&NoForwarder);
                answer_with(*f, || source.view(), fwd).await
            }
            other => other,
        };
        match outcome {
            Outcome::Respond {
                api,
                version,
                frame,
            } => {
                debug!(%peer, ?api, version, bytes = frame.len(), "Kafka request answered");
                tokio::time::timeout(config.idle_timeout, stream.write_all(&frame))
                    .await
                    .map_err(|_| format!("the answer was not taken for {:?}", config.idle_timeout))?
                    .map_err(|e| e.to_string())?;
            }
            Outcome::Close(reason) => return Err(reason),
            Outcome::Forward(f) => {
                return Err(format!("{:?}: answered with another admin request", f.api))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(max: usize) -> ListenerConfig {
        ListenerConfig {
            max_request_bytes: max,
            idle_timeout: Duration::from_secs(5),
        }
    }

    async fn read_all(input: &[u8], max: usize) -> Vec<Result<Option<Bytes>, String>> {
        let mut r = input;
        let mut out = Vec::new();
        loop {
            let f = read_frame(&mut r, &config(max))
                .await
                .map_err(|e| e.to_string());
            let end = !matches!(f, Ok(Some(_)));
            out.push(f);
            if end {
                return out;
            }
        }
    }

    #[tokio::test]
    async fn frames_are_read_one_at_a_time_and_a_clean_end_is_none() {
        let input = [&[0, 0, 0, 2, 7, 8][..], &[0, 0, 0, 0], &[0, 0, 0, 1, 9]].concat();
        let got = read_all(&input, 10).await;
        assert_eq!(
            got,
            vec![
                Ok(Some(Bytes::from_static(&[7, 8]))),
                Ok(Some(Bytes::new())),
                Ok(Some(Bytes::from_static(&[9]))),
                Ok(None)
            ]
        );
    }

    #[tokio::test]
    async fn a_bad_length_or_a_cut_frame_is_an_error() {
        let over = read_all(&[0, 0, 0, 11], 10).await;
        assert_eq!(
            over,
            vec![Err(
                "frame of 11 bytes is over the limit of 10 (--kafka-max-request-bytes)".into()
            )]
        );
        let negative = read_all(&[0xff, 0xff, 0xff, 0xfe], 10).await;
        assert_eq!(negative, vec![Err("frame length -2 is negative".into())]);
        let cut = read_all(&[0, 0, 0, 5, 1, 2], 10).await;
        assert_eq!(
            cut,
            vec![Err("connection closed 2 bytes into a 5-byte frame".into())]
        );
        let cut_prefix = read_all(&[0, 0], 10).await;
        assert_eq!(
            cut_prefix,
            vec![Err(
                "connection closed inside a frame's length prefix".into()
            )]
        );
    }

    #[tokio::test]
    async fn a_silent_client_times_out() {
        let (mut client, mut server) = tokio::io::duplex(64);
        client.write_all(&[0, 0, 0, 4, 1]).await.unwrap();
        let c = ListenerConfig {
            max_request_bytes: 10,
            idle_timeout: Duration::from_millis(50),
        };
        let e = read_frame(&mut server, &c).await.unwrap_err();
        assert!(matches!(e, FrameError::Idle(_)), "{e}");
    }
}
