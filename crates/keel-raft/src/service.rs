//! The server side of the Raft transport: decodes openraft's RPCs from the
//! gRPC envelope and hands them to the local Raft node.

use futures::stream::{BoxStream, StreamExt};
use keel_proto::pb::raft_service_server::{RaftService, RaftServiceServer};
use keel_proto::pb::{RaftRequest, RaftResponse};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::{Request, Response, Status, Streaming};

use crate::codec;
use crate::network::MAX_MESSAGE_BYTES;
use crate::KeelRaft;
use openraft::error::RaftError;

/// Serves `RaftService` for one node: the peers' way into its Raft.
#[derive(Clone)]
pub struct RaftGrpcService {
    /// The local node.
    raft: KeelRaft,
    /// Requests carrying another cluster id are refused undecoded.
    cluster_id: String,
    /// This node's id (the Raft's own): requests meant for another node are
    /// refused.
    node_id: u64,
}

impl RaftGrpcService {
    /// A service for `raft`, accepting only peers of `cluster_id`.
    pub fn new(raft: KeelRaft, cluster_id: String) -> Self {
        let node_id = raft.metrics().borrow().id;
        Self {
            raft,
            cluster_id,
            node_id,
        }
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
        // Two voters configured with one address: this node would be handed
        // Raft messages meant for the other, its own among them, which
        // openraft does not expect. Refuse them undecoded.
        if (req.to_node != 0 && req.to_node != self.node_id) || req.from_node == self.node_id {
            tracing::warn!(
                from_node = req.from_node,
                to_node = req.to_node,
                "refusing a Raft request meant for another node; is a voter address wrong?"
            );
            return Err(format!(
                "this is node {}; the request from node {} was meant for node {}",
                self.node_id, req.from_node, req.to_node
            ));
        }
        codec::decode(&req.payload).map_err(|e| {
            tracing::warn!(from_node = req.from_node, error = %e, "undecodable Raft request");
            format!("undecodable request from node {}: {e}", req.from_node)
        })
    }
}

/// The refusal sent back for an envelope that was not accepted.
fn refusal(error: String) -> RaftResponse {
    RaftResponse {
        payload: Vec::new(),
        error,
        seq: 0,
    }
}

/// Encodes the node's answer (success or Raft error) for the caller.
fn answer<T: Serialize>(result: &T) -> Result<RaftResponse, Status> {
    let payload = codec::encode(result).map_err(|e| Status::internal(e.to_string()))?;
    Ok(RaftResponse {
        payload,
        error: String::new(),
        seq: 0,
    })
}

impl RaftGrpcService {
    /// Opens, hands to Raft and answers one append. `true` with the answer
    /// when Raft has stopped: nothing more should be read from that stream.
    async fn append_one(&self, req: &RaftRequest) -> Result<(RaftResponse, bool), Status> {
        match self.open_envelope(req) {
            Ok(r) => {
                let result = self.raft.append_entries(r).await;
                let stopped = matches!(result, Err(RaftError::Fatal(_)));
                Ok((answer(&result)?, stopped))
            }
            Err(e) => Ok((refusal(e), false)),
        }
    }
}

#[tonic::async_trait]
impl RaftService for RaftGrpcService {
    type AppendStreamStream = BoxStream<'static, Result<RaftResponse, Status>>;

    async fn append(
        &self,
        request: Request<RaftRequest>,
    ) -> Result<Response<RaftResponse>, Status> {
        let (answer, _) = self.append_one(request.get_ref()).await?;
        Ok(Response::new(answer))
    }

    async fn append_stream(
        &self,
        request: Request<Streaming<RaftRequest>>,
    ) -> Result<Response<Self::AppendStreamStream>, Status> {
        // One append at a time, in the order sent; the next message is not
        // read before this one is answered. Once Raft has stopped (node
        // shutting down) the stream ends right after that answer, so the
        // peer reconnects instead of holding the server's graceful
        // shutdown open with a stream that only ever gets "stopped".
        let state = (request.into_inner(), self.clone(), false);
        let answers = futures::stream::unfold(state, |(mut inbound, svc, stopped)| async move {
            if stopped {
                return None;
            }
            let answer = match inbound.next().await? {
                Err(status) => return Some((Err(status), (inbound, svc, true))),
                Ok(req) => svc.append_one(&req).await.map(|(resp, stopped)| {
                    (
                        RaftResponse {
                            seq: req.seq,
                            ..resp
                        },
                        stopped,
                    )
                }),
            };
            match answer {
                Ok((resp, stopped)) => Some((Ok(resp), (inbound, svc, stopped))),
                Err(status) => Some((Err(status), (inbound, svc, true))),
            }
        });
        Ok(Response::new(answers.boxed()))
    }

    async fn vote(&self, request: Request<RaftRequest>) -> Result<Response<RaftResponse>, Status> {
        let req = match self.open_envelope(request.get_ref()) {
            Ok(req) => req,
            Err(e) => return Ok(Response::new(refusal(e))),
        };
        answer(&self.raft.vote(req).await).map(Response::new)
    }

    async fn install_snapshot(
        &self,
        request: Request<RaftRequest>,
    ) -> Result<Response<RaftResponse>, Status> {
        let req = match self.open_envelope(request.get_ref()) {
            Ok(req) => req,
            Err(e) => return Ok(Response::new(refusal(e))),
        };
        answer(&self.raft.install_snapshot(req).await).map(Response::new)
    }
}
