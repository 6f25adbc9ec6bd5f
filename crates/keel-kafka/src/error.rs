//! The error a Kafka answer carries for one item: Kafka's code and the
//! message clients print. Every handler (admin calls, ACLs) answers with
//! it.

use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

/// A Kafka error with the message clients print.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KafkaError {
    pub code: i16,
    pub message: Option<String>,
}

impl KafkaError {
    pub(crate) fn new(e: ResponseError, message: impl Into<String>) -> Self {
        Self {
            code: e.code(),
            message: Some(message.into()),
        }
    }

    pub(crate) fn none() -> Self {
        Self {
            code: 0,
            message: None,
        }
    }

    pub(crate) fn msg(&self) -> Option<StrBytes> {
        self.message.clone().map(StrBytes::from_string)
    }
}
