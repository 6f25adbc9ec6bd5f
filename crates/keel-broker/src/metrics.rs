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

/// (name, help) of every broker metric: gauges, counters, then the one
/// histogram.
const GAUGES: &[(&str, &str)] = &[
    (
        CONTROLLER_EPOCH_SEEN,
        "Highest controller epoch this broker has seen.",
    ),
    (LEADERS, "Partitions this broker leads."),
    (FOLLOWERS, "Partitions this broker follows."),
    (FENCED, "1 while this broker is fenced or not registered."),
    (
        DISK_FREE,
        "Free bytes on the file system of a data or log dir (label path).",
    ),
    (
        DISK_TOTAL,
        "Size in bytes of the file system of a data or log dir (label path).",
    ),
    (
        keel_tls::validity::EXPIRY_METRIC,
        keel_tls::validity::EXPIRY_METRIC_HELP,
    ),
];
const COUNTERS: &[(&str, &str)] = &[
    (
        REJECTED_REQUESTS,
        "Controller requests or items this broker refused (label reason: the error code).",
    ),
    (
        REGISTRATIONS,
        "Successful registrations with the active controller.",
    ),
    (
        SESSIONS_LOST,
        "Sessions given up after the session timeout without a heartbeat answer.",
    ),
    (
        ALTER_PARTITION_SENT,
        "AlterPartition (ISR change) requests sent to the active controller.",
    ),
];

/// Gives every broker metric its help text (on the installed recorder).
pub fn describe() {
    keel_kafka::describe_metrics();
    keel_tls::admission::describe_metrics();
    for (name, help) in GAUGES {
        ::metrics::describe_gauge!(*name, *help);
    }
    for (name, help) in COUNTERS {
        ::metrics::describe_counter!(*name, *help);
    }
    ::metrics::describe_histogram!(
        HEARTBEAT_LATENCY,
        "Round trip of a heartbeat to the active controller."
    );
    ::metrics::describe_gauge!(
        "keel_build_info",
        "Always 1; labels name the version, the git revision and the role of this process."
    );
}
