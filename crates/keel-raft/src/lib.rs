//! keel-raft
