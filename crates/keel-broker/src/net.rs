//! Outgoing gRPC channels whose sockets are bound to the broker's own IP,
//! so a packet filter keyed on (source, destination) cuts exactly one link.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use keel_tls::{Expect, Transport};
use tonic::transport::Channel;

/// Builds (and caches) lazily-connecting channels from one source IP.
#[derive(Debug)]
pub(crate) struct Dialer {
    /// Local address for client sockets; unspecified means "let the kernel pick".
    source_ip: IpAddr,
    /// Per-call deadline applied by the channel.
    request_timeout: Duration,
    /// Plaintext or mutual TLS.
    transport: Transport,
    /// One channel per address and expected server identity.
    channels: HashMap<(String, Expect), Channel>,
}

impl Dialer {
    pub(crate) fn new(source_ip: IpAddr, request_timeout: Duration, transport: Transport) -> Self {
        Self {
            source_ip,
            request_timeout,
            transport,
            channels: HashMap::new(),
        }
    }

    /// A channel to `addr` ("host:port" or a URI) whose server must be
    /// what `expect` accepts (over TLS). `None` if the address does not
    /// parse; the caller moves on to another one.
    pub(crate) fn channel(&mut self, addr: &str, expect: Expect) -> Option<Channel> {
        let key = (addr.to_string(), expect);
        if let Some(ch) = self.channels.get(&key) {
            return Some(ch.clone());
        }
        let endpoint = keel_tls::transport::endpoint(addr)
            .ok()?
            .connect_timeout(Duration::from_secs(1))
            .timeout(self.request_timeout);
        let local = (!self.source_ip.is_unspecified()).then_some(self.source_ip);
        let channel = self.transport.channel(endpoint, local, expect);
        self.channels.insert(key, channel.clone());
        Some(channel)
    }
}
