//! What a Kafka error code says about a workload operation: applied, not
//! applied, unknown, refused; and for a read, listed, absent or retried.

use super::*;

/// What a Kafka error code says about a write.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// NONE: applied.
    Applied,
    /// NOT_CONTROLLER (sent with `timeout_ms > 0`): no controller took it,
    /// so it was not applied; another attempt may be made.
    NotApplied,
    /// REQUEST_TIMED_OUT (the forwarded write's answer was lost),
    /// UNKNOWN_SERVER_ERROR, or a code this client does not know: it may
    /// or may not have been applied.
    Unknown,
    /// Any other code: refused, not applied, final.
    Refused,
}

/// The verdict of a write's error code (Kafka's codes, as the listener maps
/// Keel's in `keel-kafka/src/admin.rs`).
pub fn verdict(code: i16) -> Verdict {
    match ResponseError::try_from_code(code) {
        None => Verdict::Applied,
        Some(ResponseError::NotController) => Verdict::NotApplied,
        Some(
            ResponseError::RequestTimedOut
            | ResponseError::UnknownServerError
            | ResponseError::Unknown(_),
        ) => Verdict::Unknown,
        Some(_) => Verdict::Refused,
    }
}

/// Kafka's name of an error code (`UNKNOWN_TOPIC_OR_PARTITION`).
pub fn code_name(code: i16) -> String {
    match ResponseError::try_from_code(code) {
        None => "NONE".into(),
        Some(ResponseError::Unknown(c)) => format!("KAFKA_CODE_{c}"),
        Some(e) => {
            let camel = format!("{e:?}");
            let mut out = String::new();
            for (i, ch) in camel.chars().enumerate() {
                if ch.is_ascii_uppercase() && i > 0 {
                    out.push('_');
                }
                out.push(ch.to_ascii_uppercase());
            }
            out
        }
    }
}

/// The operations whose Kafka error codes [`checker_code`] translates.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum WriteKind {
    Create,
    Delete,
    CreatePartitions,
    AlterConfig,
    Reassign,
    ElectPreferred,
}

/// The name the history records for a refusal: Keel's code when the Kafka
/// code stands for exactly one of Keel's for this operation (the checkers
/// read Keel's names), else Kafka's own. A delete gets
/// UNKNOWN_TOPIC_OR_PARTITION only for an unknown topic (deleting a topic
/// being deleted succeeds), so it is UNKNOWN_TOPIC; a create_partitions or
/// alter_config gets it for an unknown topic and for one being deleted
/// alike, so it stays Kafka's (the linearizability checker then leaves it
/// out, as it does any refusal it cannot place).
pub fn checker_code(kind: WriteKind, code: i16) -> String {
    let unknown_topic = ResponseError::UnknownTopicOrPartition.code();
    match kind {
        WriteKind::Delete if code == unknown_topic => "UNKNOWN_TOPIC".into(),
        _ => code_name(code),
    }
}

/// The outcome a write's answer gives: `None` means "not applied, try
/// again" (NOT_CONTROLLER), else the final result.
pub fn write_outcome(kind: WriteKind, code: i16, message: Option<String>) -> Option<OpResult> {
    let outcome = match verdict(code) {
        Verdict::Applied => Outcome::Ok,
        Verdict::NotApplied => return None,
        Verdict::Unknown => Outcome::Info,
        Verdict::Refused => Outcome::Fail,
    };
    let wire = code_name(code);
    let error = (code != 0).then(|| checker_code(kind, code));
    // The wire name stays in the message when the record names Keel's.
    let message = match (&error, message) {
        (Some(e), Some(m)) if *e != wire => Some(format!("{wire}: {m}")),
        (Some(e), None) if *e != wire => Some(wire),
        (_, m) => m,
    };
    Some(OpResult {
        outcome: Some(outcome),
        error,
        message,
        ..Default::default()
    })
}

/// What a DescribeConfigs result code says about a topic.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ReadVerdict {
    /// NONE: the topic exists (present or being deleted).
    Listed,
    /// UNKNOWN_TOPIC_OR_PARTITION: no such topic.
    Absent,
    /// No answer from the active controller (NOT_CONTROLLER,
    /// REQUEST_TIMED_OUT, UNKNOWN_SERVER_ERROR, an unknown code): a read
    /// may be sent again.
    Retry,
    /// Any other code (e.g. an authorization failure): the read failed.
    Refused,
}

pub fn read_verdict(code: i16) -> ReadVerdict {
    match ResponseError::try_from_code(code) {
        None => ReadVerdict::Listed,
        Some(ResponseError::UnknownTopicOrPartition) => ReadVerdict::Absent,
        Some(_) if verdict(code) == Verdict::Refused => ReadVerdict::Refused,
        Some(_) => ReadVerdict::Retry,
    }
}
