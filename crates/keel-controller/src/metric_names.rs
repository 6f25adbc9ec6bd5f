//! Every metric a controller exports, with its help text: described once at
//! start, so each family has a `# HELP` line and dashboards and alerts have
//! one place to look names up.

/// What kind of metric a name is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// (name, kind, help) of every controller metric.
pub const CATALOG: &[(&str, Kind, &str)] = &[
    (
        "keel_build_info",
        Kind::Gauge,
        "Always 1; labels name the version, the git revision and the role of this process.",
    ),
    (
        "keel_controller_active",
        Kind::Gauge,
        "1 while this node is the active controller (Raft leader holding its lease), else 0.",
    ),
    (
        "keel_controller_current_term",
        Kind::Gauge,
        "This node's Raft term (the controller epoch).",
    ),
    (
        "keel_controller_last_applied_index",
        Kind::Gauge,
        "Index of the last metadata log entry this node applied.",
    ),
    (
        "keel_controller_last_log_index",
        Kind::Gauge,
        "Index of the last entry in this node's metadata log.",
    ),
    (
        "keel_controller_last_committed_index",
        Kind::Gauge,
        "Highest index this node knows committed: on the leader the index a majority of voters holds, elsewhere its applied index.",
    ),
    (
        "keel_controller_last_applied_lag_entries",
        Kind::Gauge,
        "Committed entries the leader has not applied yet (0 on other nodes).",
    ),
    (
        "keel_controller_raft_peer_lag",
        Kind::Gauge,
        "Entries a peer's log is behind the leader's (label peer; 0 on nodes that are not the leader).",
    ),
    (
        "keel_controller_new_active_controllers_total",
        Kind::Counter,
        "Times this node became the active controller.",
    ),
    (
        "keel_controller_active_brokers",
        Kind::Gauge,
        "Registered brokers that are not fenced.",
    ),
    (
        "keel_controller_fenced_brokers",
        Kind::Gauge,
        "Registered brokers that are fenced.",
    ),
    (
        "keel_controller_topics",
        Kind::Gauge,
        "Topics in the metadata image.",
    ),
    (
        "keel_controller_partitions",
        Kind::Gauge,
        "Partitions in the metadata image.",
    ),
    (
        "keel_controller_offline_partitions",
        Kind::Gauge,
        "Partitions without a leader (those of topics being deleted not counted).",
    ),
    (
        "keel_controller_under_replicated_partitions",
        Kind::Gauge,
        "Partitions whose ISR is smaller than their replica set.",
    ),
    (
        "keel_controller_under_min_isr_partitions",
        Kind::Gauge,
        "Partitions whose ISR is smaller than their topic's min.insync.replicas.",
    ),
    (
        "keel_controller_preferred_replica_imbalance",
        Kind::Gauge,
        "Partitions whose leader is not their preferred replica.",
    ),
    (
        "keel_controller_preferred_replica_imbalance_ratio",
        Kind::Gauge,
        "Share of partitions whose leader is not their preferred replica.",
    ),
    (
        "keel_controller_unclean_elections_total",
        Kind::Counter,
        "Leaders elected from outside the ISR.",
    ),
    (
        "keel_controller_clean_leader_elections_total",
        Kind::Counter,
        "Leaders elected from the ISR (failover, reassignment, preferred or controlled-shutdown moves).",
    ),
    (
        "keel_controller_metadata_errors_total",
        Kind::Counter,
        "Proposals to the metadata log that failed on the active controller (it then leaves the active role); a replay error stops the node instead.",
    ),
    (
        "keel_controller_timed_out_heartbeats_total",
        Kind::Counter,
        "Broker sessions that expired (the broker was fenced).",
    ),
    (
        "keel_controller_throttled_total",
        Kind::Counter,
        "Requests refused with THROTTLING_QUOTA_EXCEEDED (label limit).",
    ),
    (
        "keel_controller_event_queue_size",
        Kind::Gauge,
        "Events waiting in the active controller's queue.",
    ),
    (
        "keel_controller_event_queue_time_seconds",
        Kind::Histogram,
        "Time an event waited in the active controller's queue.",
    ),
    (
        "keel_controller_event_process_time_seconds",
        Kind::Histogram,
        "Time the active controller spent deciding an event.",
    ),
    (
        "keel_controller_commit_latency_seconds",
        Kind::Histogram,
        "Time from proposing a decision's records to their commit.",
    ),
    (
        "keel_controller_channel_connects_total",
        Kind::Counter,
        "Connections to a broker that answered (label broker).",
    ),
    (
        "keel_controller_channel_disconnects_total",
        Kind::Counter,
        "Working connections to a broker dropped after a failure or timeout (label broker).",
    ),
    (
        "keel_controller_channel_resyncs_total",
        Kind::Counter,
        "Times a broker channel fell behind the journal and sent the full state.",
    ),
    (
        "keel_controller_data_dir_free_bytes",
        Kind::Gauge,
        "Free bytes on the data dir's file system.",
    ),
    (
        "keel_controller_data_dir_total_bytes",
        Kind::Gauge,
        "Size of the data dir's file system in bytes.",
    ),
    (
        "keel_controller_data_dir_reserve_bytes",
        Kind::Gauge,
        "Free bytes below which admin writes are refused with STORAGE_FULL.",
    ),
    (
        "keel_controller_data_dir_low",
        Kind::Gauge,
        "1 while free space is below the reserve (admin writes refused).",
    ),
    (
        keel_tls::validity::EXPIRY_METRIC,
        Kind::Gauge,
        keel_tls::validity::EXPIRY_METRIC_HELP,
    ),
    (
        keel_raft::lease::LEASE_ANSWER_MAX_SECONDS,
        Kind::Gauge,
        "The slowest answer to a lease request this node sent as leader, since it started (seconds).",
    ),
    (
        keel_raft::lease::LEASE_ANSWER_SECONDS,
        Kind::Histogram,
        "Delay of each answer to a lease request this node sent as leader (seconds).",
    ),
];

/// Process metrics a controller's HTTP endpoint exports under the standard
/// Prometheus names (written by `process_metrics::render`, not through the
/// recorder: the CPU counter is in fractional seconds).
pub const PROCESS_CATALOG: &[(&str, Kind, &str)] = &[
    (
        "process_cpu_seconds_total",
        Kind::Counter,
        "User and system CPU time spent in seconds.",
    ),
    (
        "process_resident_memory_bytes",
        Kind::Gauge,
        "Resident memory size in bytes.",
    ),
    (
        "process_virtual_memory_bytes",
        Kind::Gauge,
        "Virtual memory size in bytes.",
    ),
    (
        "process_open_fds",
        Kind::Gauge,
        "Number of open file descriptors.",
    ),
    (
        "process_max_fds",
        Kind::Gauge,
        "Maximum number of open file descriptors.",
    ),
    (
        "process_start_time_seconds",
        Kind::Gauge,
        "Start time of the process since unix epoch in seconds.",
    ),
    (
        "process_threads",
        Kind::Gauge,
        "Number of OS threads in the process.",
    ),
];

/// Counters of [`CATALOG`] that carry labels: they appear with their
/// first labelled event, not at 0 from the start.
const LABELLED_COUNTERS: &[&str] = &[
    "keel_controller_throttled_total",
    "keel_controller_channel_connects_total",
    "keel_controller_channel_disconnects_total",
];

/// Gives every metric of [`CATALOG`] its help text (on the installed
/// recorder; a no-op without one), and exports every unlabelled counter at
/// 0 from the start: an alert on `increase(...)` of a counter that does
/// not exist yet would never fire.
pub fn describe() {
    keel_kafka::describe_metrics();
    keel_tls::admission::describe_metrics();
    for (name, kind, help) in CATALOG {
        match kind {
            Kind::Counter => metrics::describe_counter!(*name, *help),
            Kind::Gauge => metrics::describe_gauge!(*name, *help),
            Kind::Histogram => metrics::describe_histogram!(*name, *help),
        }
        if *kind == Kind::Counter && !LABELLED_COUNTERS.contains(name) {
            metrics::counter!(*name).increment(0);
        }
    }
    for limit in ["requests", "reads"] {
        metrics::counter!("keel_controller_throttled_total", "limit" => limit).increment(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `"keel_..."` name this crate's sources export is described.
    #[test]
    fn every_exported_name_is_in_the_catalog() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut missing = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "rs") || path.ends_with("metric_names.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for part in text.split("\"keel_").skip(1) {
                let name: String = part
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                let name = format!("keel_{name}");
                if part[name.len() - 5..].starts_with('"')
                    && !CATALOG.iter().any(|(n, _, _)| *n == name)
                {
                    missing.push(format!("{name} ({})", path.display()));
                }
            }
        }
        assert!(missing.is_empty(), "not in CATALOG: {missing:?}");
    }
}
