//! The server side of the Raft transport: decodes openraft's RPCs from the
//! gRPC envelope and hands them to the local Raft node.

use keel_proto::pb::raft_service_server::{RaftService, RaftServiceServer};
use keel_proto::pb::{RaftRequest, RaftResponse};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::{Request, Response, Status};

use crate::codec;
use crate::network::MAX_MESSAGE_BYTES;
use crate::KeelRaft;

/// Serves `RaftService` for one node: the peers' way into its Raft.
#[derive(Clone)]
pub struct RaftGrpcService {
    /// The local node.
    raft: KeelRaft,
    /// Requests carrying another cluster id are refused undecoded.
    cluster_id: String,
}

impl RaftGrpcService {
    /// A service for `raft`, accepting only peers of `cluster_id`.
    pub fn new(raft: KeelRaft, cluster_id: String) -> Self {
        Self { raft, cluster_id }
    }

    /// The tonic service, with message limits large enough for snapshot
    /// chunks.
    pub fn into_server(self) -> RaftServiceServer<Self> {
        RaftServiceServer::new(self)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    /// Checks the envelope and decodes the payload, or explains the refusal.
    fn open_envelope<T: DeserializeOwned>(&self, req: &RaftRequest) -> Result<T, String> {
        if req.cluster_id != self.cluster_id {
            tracing::warn!(
                from_node = req.from_node,
                their_cluster = %req.cluster_id,
                "refusing a Raft request from another cluster"
            );
            return Err(format!(
                "this node belongs to cluster '{}', not '{}'",
                self.cluster_id, req.cluster_id
            ));
        }
        codec::decode(&req.payload).map_err(|e| {
            tracing::warn!(from_node = req.from_node, error = %e, "undecodable Raft request");
            format!("undecodable request from node {}: {e}", req.from_node)
        })
    }
}

/// The refusal sent back for an envelope that was not accepted.
fn refusal(error: String) -> Response<RaftResponse> {
    Response::new(RaftResponse {
        payload: Vec::new(),
        error,
    })
}

/// Encodes the node's answer (success or Raft error) for the caller.
fn answer<T: Serialize>(result: &T) -> Result<Response<RaftResponse>, Status> {
    let payload = codec::encode(result).map_err(|e| Status::internal(e.to_string()))?;
    Ok(Response::new(RaftResponse {
        payload,
        error: String::new(),
    }))
}

#[tonic::async_trait]
impl RaftService for RaftGrpcService {
    async fn append(
        &self,
        request: Request<RaftRequest>,
    ) -> Result<Response<RaftResponse>, Status> {
        let req = match self.open_envelope(request.get_ref()) {
            Ok(req) => req,
            Err(e) => return Ok(refusal(e)),
        };
        answer(&self.raft.append_entries(req).await)
    }

    async fn vote(&self, request: Request<RaftRequest>) -> Result<Response<RaftResponse>, Status> {
        let req = match self.open_envelope(request.get_ref()) {
            Ok(req) => req,
            Err(e) => return Ok(refusal(e)),
        };
        answer(&self.raft.vote(req).await)
    }

    async fn install_snapshot(
        &self,
        request: Request<RaftRequest>,
    ) -> Result<Response<RaftResponse>, Status> {
        let req = match self.open_envelope(request.get_ref()) {
            Ok(req) => req,
            Err(e) => return Ok(refusal(e)),
        };
        answer(&self.raft.install_snapshot(req).await)
    }
}
