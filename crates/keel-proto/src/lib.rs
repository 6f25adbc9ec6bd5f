//! Keel's wire contract: generated gRPC code and the conversions between
//! protobuf messages and the pure core's domain types.

#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("keel.v1");
}
