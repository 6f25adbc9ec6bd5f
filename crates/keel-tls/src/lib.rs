//! Mutual TLS for every Keel listener and client.
//!
//! - [`admission`]: connection limits and timeouts shared by every listener;
//! - [`identity`]: who a certificate names (`keel://<cluster>/<role>/<name>`);
//! - [`certs`]: a cluster CA and certificates per node and user (rcgen);
//! - [`error`]: why TLS material cannot be used;
//! - [`context`]: a process's certificate, key and CA as rustls
//!   configurations, re-read on SIGHUP;
//! - [`validity`]: whether a certificate may be used (chain, dates, key)
//!   and how long it has left;
//! - [`lane`]: a thread and runtime of a server's own for a few urgent
//!   requests (leases, pre-votes), chosen per connection on one port;
//! - [`transport`]: serving and connecting over mutual TLS (or plaintext,
//!   only when allowed), and reading a caller's identity in a handler.

pub mod admission;
pub mod certs;
pub mod context;
pub mod error;
pub mod identity;
pub mod lane;
pub mod transport;
pub mod validity;

pub use context::{KafkaClientAuth, TlsContext, TlsFiles};
pub use error::TlsError;
pub use identity::{Identity, Role};
pub use transport::{peer, Expect, PeerInfo, Transport};
pub use validity::Validity;
