//! The controllers' JSON logs (`--log-format json`, one object per line),
//! read as they grow: the lines about brokers, with the time each was
//! logged.

use keel_testkit::Cluster;
use serde::Deserialize;
use serde_json::Value;

use crate::tail::Tail;

/// A controller log line about a broker.
#[derive(Clone, Debug)]
pub struct LogEvent {
    pub message: String,
    /// When it was logged, unix ms (fractional).
    pub at_ms: f64,
    /// The line's structured fields (`broker`, `index`, ...).
    pub fields: Value,
}

/// The parts of a JSON log line the bench reads.
#[derive(Deserialize)]
struct Line {
    /// RFC 3339, e.g. `2024-03-01T12:00:00.250123Z`.
    timestamp: String,
    #[serde(default)]
    fields: Value,
    message: Option<String>,
}

/// One log line, if it is a JSON event with a message and a timestamp.
pub fn parse_line(line: &str) -> Option<LogEvent> {
    let l: Line = serde_json::from_str(line).ok()?;
    let message = match l.fields.get("message").and_then(Value::as_str) {
        Some(m) => m.to_string(),
        None => l.message?,
    };
    let at = chrono::DateTime::parse_from_rfc3339(&l.timestamp).ok()?;
    Some(LogEvent {
        message,
        at_ms: at.timestamp_micros() as f64 / 1000.0,
        fields: l.fields,
    })
}

/// Every controller's log, read incrementally.
pub struct ControllerLogs {
    tails: Vec<Tail>,
    /// (controller index, event) of every broker line seen.
    events: Vec<(usize, LogEvent)>,
}

impl ControllerLogs {
    pub fn new(c: &Cluster) -> Self {
        Self {
            tails: c
                .controllers()
                .map(|n| Tail::new(n.process.log.clone()))
                .collect(),
            events: Vec::new(),
        }
    }

    /// Reads what is new; keeps the broker lines.
    pub fn poll(&mut self) {
        for (i, t) in self.tails.iter_mut().enumerate() {
            let new = t.lines().into_iter().filter_map(|l| parse_line(&l));
            self.events.extend(
                new.filter(|e| e.message.starts_with("broker "))
                    .map(|e| (i, e)),
            );
        }
    }

    /// Forgets what was seen (new lines only from now on).
    pub fn mark(&mut self) {
        self.poll();
        self.events.clear();
    }

    /// The first `message` line about `broker` logged by controller `node`.
    pub fn find(&self, node: usize, message: &str, broker: u64) -> Option<LogEvent> {
        self.events
            .iter()
            .find(|(i, e)| {
                *i == node
                    && e.message == message
                    && e.fields.get("broker").and_then(Value::as_u64) == Some(broker)
            })
            .map(|(_, e)| e.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_controller_log_line_gives_its_message_fields_and_time() {
        let e = parse_line(r#"{"timestamp":"2024-03-01T12:00:00.250123Z","level":"INFO","fields":{"message":"broker fenced","node":1,"term":2,"index":9,"broker":1,"broker_epoch":5},"target":"keel_controller::tasks"}"#).unwrap();
        assert_eq!(e.message, "broker fenced");
        assert_eq!(e.fields["index"], 9);
        assert_eq!(e.at_ms, 1_709_294_400_250.123);
        // An offset is honoured; a line that is not JSON is skipped.
        let e =
            parse_line(r#"{"timestamp":"2024-03-01T13:00:00.250+01:00","fields":{"message":"m"}}"#)
                .unwrap();
        assert_eq!(e.at_ms, 1_709_294_400_250.0);
        assert!(parse_line("=== start #1 of c1 ===").is_none());
        assert!(parse_line(r#"{"timestamp":"nonsense","fields":{"message":"m"}}"#).is_none());
    }
}
