//! The gRPC metadata a broker forwards a Kafka client's admin request with
//! (KIP-590's `Envelope`, in Keel's own call): the principal its Kafka
//! listener authenticated, and for the audit, the client's address and the
//! listener's security (`SSL`, `SASL_SSL`, `PLAINTEXT`). The broker writes
//! them, the active controller reads them (only from a broker's
//! certificate): one definition, so the two cannot drift apart.

/// `User:<name>` or `User:ANONYMOUS`.
pub const PRINCIPAL: &str = "keel-forwarded-principal";
/// The client's `address:port` as the listener saw it.
pub const CLIENT: &str = "keel-forwarded-client";
/// Kafka's name of how the client came in.
pub const LISTENER: &str = "keel-forwarded-listener";
