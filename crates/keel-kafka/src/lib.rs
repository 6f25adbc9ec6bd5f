//! Keel's Kafka listener: Kafka's own wire protocol (through the
//! `kafka-protocol` crate, generated from Kafka's message schemas) served
//! by a broker from its metadata cache, so Kafka tools (`kcat -L`,
//! AdminClients) can inspect a Keel cluster.
//!
//! - [`dispatch`]: the pure core, one request's bytes and a [`ClusterView`]
//!   in, the response frame or "close the connection" out;
//! - [`apis`](crate::apis): the answers (ApiVersions, Metadata,
//!   DescribeCluster), pure functions of the decoded request;
//! - [`server`]: framing and connections on tokio.

mod apis;
pub mod dispatch;
pub mod server;
mod view;

pub use dispatch::{handle, served, Outcome, SERVED};
pub use server::{
    serve, ListenerConfig, ViewSource, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_REQUEST_BYTES,
};
pub use view::{kafka_id, BrokerView, ClusterView, PartitionView, TopicView};
