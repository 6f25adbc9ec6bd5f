//! Keel's broker agent. A broker registers with the active controller,
//! heartbeats to keep its session, serves the controller's LeaderAndIsr /
//! UpdateMetadata / StopReplica requests with epoch fencing, reports to the
//! leaders of the partitions it follows, and, as a leader, asks the
//! controller to shrink or expand ISRs. Every leadership it accepts is
//! recorded in `history.jsonl` in its data dir, for the safety checkers.

mod access;
mod access_refresh;
mod broker;
mod config;
mod control;
mod controller_link;
mod data_dir;
mod error;
mod history;
mod isr;
mod kafka;
mod lifecycle;
pub mod metrics;
mod net;
mod replica;
mod shared;
mod state;
mod view;

pub use broker::{Broker, CONTROLLED_SHUTDOWN_TIMEOUT};
pub use config::{
    BrokerConfig, DEFAULT_HEARTBEAT_INTERVAL_MS, DEFAULT_KAFKA_MAX_REQUEST_BYTES,
    DEFAULT_REPLICA_FETCH_INTERVAL_MS, DEFAULT_REPLICA_LAG_TIME_MAX_MS, DEFAULT_SESSION_TIMEOUT_MS,
};
pub use data_dir::HISTORY_FILE;
pub use error::BrokerError;
pub use history::{read_history, HistoryEntry, HistoryEvent};
pub use view::{BrokerStateView, LeadershipView};
