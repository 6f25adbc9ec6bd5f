//! Metric names, in one place so dashboards and code agree.

/// Gauge: highest controller epoch seen.
pub const CONTROLLER_EPOCH_SEEN: &str = "keel_broker_controller_epoch_seen";
/// Gauge: partitions this broker is acting as leader for.
pub const LEADERS: &str = "keel_broker_leaders";
/// Gauge: partitions this broker follows.
pub const FOLLOWERS: &str = "keel_broker_followers";
/// Gauge: 1 while fenced (or unregistered).
pub const FENCED: &str = "keel_broker_fenced";
/// Counter with label `reason` (an error code name): refused controller requests or items.
pub const REJECTED_REQUESTS: &str = "keel_broker_rejected_requests_total";
/// Histogram: heartbeat round trip, seconds.
pub const HEARTBEAT_LATENCY: &str = "keel_broker_heartbeat_latency_seconds";
/// Counter: successful registrations.
pub const REGISTRATIONS: &str = "keel_broker_registrations_total";
/// Counter: sessions given up after the session timeout.
pub const SESSIONS_LOST: &str = "keel_broker_sessions_lost_total";
/// Gauge with label `path` (data dir and each log dir): bytes free on its
/// file system, measured at every heartbeat.
pub const DISK_FREE: &str = "keel_broker_disk_free_bytes";
/// Gauge with label `path`: size of its file system in bytes.
pub const DISK_TOTAL: &str = "keel_broker_disk_total_bytes";
/// Counter: AlterPartition requests sent.
pub const ALTER_PARTITION_SENT: &str = "keel_broker_alter_partition_requests_total";

/// Counts a refusal under its error code name.
pub(crate) fn rejected(code: keel_metadata::ErrorCode) {
    ::metrics::counter!(REJECTED_REQUESTS, "reason" => code.name()).increment(1);
}
