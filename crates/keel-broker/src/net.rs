//! Outgoing gRPC channels whose sockets are bound to the broker's own IP,
//! so a packet filter keyed on (source, destination) cuts exactly one link.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

/// Builds (and caches) lazily-connecting channels from one source IP.
#[derive(Debug)]
pub(crate) struct Dialer {
    /// Local address for client sockets; unspecified means "let the kernel pick".
    source_ip: IpAddr,
    /// Per-call deadline applied by the channel.
    request_timeout: Duration,
    channels: HashMap<String, Channel>,
}

impl Dialer {
    pub(crate) fn new(source_ip: IpAddr, request_timeout: Duration) -> Self {
        Self {
            source_ip,
            request_timeout,
            channels: HashMap::new(),
        }
    }

    /// A channel to `addr` ("host:port" or a URI). `None` if the address does
    /// not parse; the caller moves on to another one.
    pub(crate) fn channel(&mut self, addr: &str) -> Option<Channel> {
        if let Some(ch) = self.channels.get(addr) {
            return Some(ch.clone());
        }
        let uri = if addr.contains("://") {
            addr.to_string()
        } else {
            format!("http://{addr}")
        };
        let endpoint = Endpoint::from_shared(uri)
            .ok()?
            .connect_timeout(Duration::from_secs(1))
            .timeout(self.request_timeout)
            .tcp_nodelay(true);
        let source_ip = self.source_ip;
        let connector = tower::service_fn(move |uri: Uri| connect(source_ip, uri));
        let channel = endpoint.connect_with_connector_lazy(connector);
        self.channels.insert(addr.to_string(), channel.clone());
        Some(channel)
    }
}

async fn connect(
    source_ip: IpAddr,
    uri: Uri,
) -> Result<TokioIo<tokio::net::TcpStream>, std::io::Error> {
    let host = uri
        .host()
        .ok_or_else(|| std::io::Error::other(format!("no host in {uri}")))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = uri.port_u16().unwrap_or(80);
    let target: SocketAddr = tokio::net::lookup_host((host, port))
        .await?
        .find(|a| source_ip.is_unspecified() || a.is_ipv4() == source_ip.is_ipv4())
        .ok_or_else(|| std::io::Error::other(format!("cannot resolve {host}:{port}")))?;
    let socket = if target.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    if !source_ip.is_unspecified() {
        socket.bind(SocketAddr::new(source_ip, 0))?;
    }
    let stream = socket.connect(target).await?;
    stream.set_nodelay(true)?;
    Ok(TokioIo::new(stream))
}
