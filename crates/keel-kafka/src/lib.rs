//! Keel's Kafka listener: Kafka's own wire protocol (through the
//! `kafka-protocol` crate, generated from Kafka's message schemas) served
//! by a broker from its metadata cache, so Kafka tools (`kcat -L`,
//! AdminClients) can inspect a Keel cluster.
//!
//! - [`dispatch`]: the pure core, one request's bytes and a [`ClusterView`]
//!   in, the response frame or "close the connection" out;
//! - [`apis`](crate::apis): the answers (ApiVersions, Metadata,
//!   DescribeCluster), pure functions of the decoded request;
//! - [`admin`]: the admin APIs, forwarded to the active controller as
//!   calls of Keel's admin API ([`forward`]) and answered from its replies;
//! - [`server`]: framing and connections on tokio.

pub mod access;
pub mod acls;
pub mod admin;
mod apis;
pub mod budget;
pub mod dispatch;
mod error;
pub mod forward;
pub mod sasl;
pub mod server;
mod shape;
mod view;

pub use access::Access;
pub use dispatch::{
    answer, handle, served, served_by, Asker, Forwarded, Outcome, CONTROLLER_SERVED, SERVED,
};
pub use forward::{AdminCall, AdminReply, BoxFuture, Client, ForwardError, Forwarder, OnBehalf};
pub use server::{
    serve, ListenerConfig, ViewSource, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_REQUEST_BYTES,
};
pub use view::{
    kafka_id, BrokerView, ClusterView, PartitionView, QuorumMember, QuorumView, TopicView,
};

/// Help texts of the Kafka listener's metrics (on the installed recorder),
/// each exported at 0 from the start so an alert on its increase can fire.
pub fn describe_metrics() {
    for (name, help) in [
        (
            "keel_tls_handshake_failures_total",
            "TLS handshakes that failed, timed out or presented a certificate of no identity of this cluster (gRPC and Kafka listeners).",
        ),
        (
            "keel_kafka_authentication_failures_total",
            "Kafka SASL logins refused (wrong password, unknown user, bad exchange).",
        ),
    ] {
        metrics::describe_counter!(name, help);
        metrics::counter!(name).increment(0);
    }
    metrics::describe_counter!(
        "keel_kafka_requests_refused_total",
        "Kafka requests refused for their size before being decoded (label reason: frame_size, in_flight_budget, truncated or decoded_size)."
    );
    for reason in budget::RefusedFor::ALL {
        metrics::counter!("keel_kafka_requests_refused_total", "reason" => reason.label())
            .increment(0);
    }
}
