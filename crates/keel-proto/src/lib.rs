//! Keel's wire contract: generated gRPC code, the conversions between
//! protobuf messages and the pure core's domain types (all in
//! [`convert`]), and a controller client that follows NOT_CONTROLLER
//! redirects ([`client`]).

#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("keel.v1");
}

pub mod backoff;
pub mod client;
pub mod convert;
pub mod forwarded;
pub mod render;
pub mod session;
