//! Memory bounds on the Kafka listener: what one request may make of its
//! frame, and what all requests in flight on a listener may hold at once.
//!
//! A frame is small on the wire and large decoded: kafka-protocol decodes a
//! Metadata request's topics into a `Vec` of 72-byte structs, and an empty
//! topic name is one or two bytes. 4,194,304 empty names (an 8 MiB frame)
//! took 303 MB; a varied name also costs its answer (a response entry, two
//! copies of the name). Kafka bounds this per request; so does Keel:
//!
//! - per request, [`allowance`]: what a frame of `n` bytes may take decoded
//!   and answered, `max(MIN_ALLOWANCE_BYTES, DECODE_FACTOR x n)` and never
//!   over `MAX_ALLOWANCE_BYTES`; [`metadata`] walks a Metadata request's
//!   topics before it is decoded and refuses one whose estimate is over;
//! - per listener, [`Budget`]: a semaphore of bytes each connection takes
//!   [`charge`] of (its frame, the copy `dispatch` makes, and the frame's
//!   proportional allowance) before reading a frame's body, and gives back
//!   once the answer is written; a request that cannot get its share waits.

use std::mem::size_of;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::shape::unsigned_varint;

/// How many times its frame a request may take decoded and answered. A
/// Metadata v12 entry naming an 11-byte topic is 29 bytes on the wire and
/// ~265 bytes decoded and answered (9x): 8 would refuse 100,000 real topic
/// names, 16 does not.
pub const DECODE_FACTOR: usize = 16;
/// What any request may take, however small its frame: ~1,000 topics at
/// the worst ratio (Metadata v1-v8, one-byte names).
pub const MIN_ALLOWANCE_BYTES: usize = 256 << 10;
/// What no single request may take, however large its frame: ~120,000
/// topics named in one Metadata request.
pub const MAX_ALLOWANCE_BYTES: usize = 32 << 20;
/// The listener-wide default of [`Budget`]: eight requests at the
/// per-request maximum.
pub const DEFAULT_MAX_IN_FLIGHT_BYTES: usize = 256 << 20;

/// A request topic decoded: its struct in the request's `Vec` (its name is
/// a slice of the frame, no copy).
const REQUEST_TOPIC_BYTES: usize = size_of::<MetadataRequestTopic>();
/// The same topic answered: its response entry, its name in the set of
/// names seen, and its share of the encoded answer (error code, id, flags,
/// empty partitions, tagged fields).
const ANSWER_TOPIC_BYTES: usize = size_of::<MetadataResponseTopic>() + size_of::<String>() + 32;
/// Each name byte is copied twice for the answer and encoded once.
const NAME_COPIES: usize = 3;
/// A B-tree leaf of up to 11 unknown tagged fields, `(i32, Bytes)` each
/// (the values are slices of the frame).
const TAGGED_LEAF_BYTES: usize = 11 * (4 + 32) + 16;

/// What a frame of `frame_len` bytes may take decoded and answered.
pub fn allowance(frame_len: usize) -> usize {
    frame_len
        .saturating_mul(DECODE_FACTOR)
        .clamp(MIN_ALLOWANCE_BYTES, MAX_ALLOWANCE_BYTES)
}

/// What a connection takes from the listener's [`Budget`] for a frame of
/// `frame_len` bytes: the frame, the copy `dispatch` decodes from, and its
/// proportional allowance. The floor of [`allowance`] is left out: every
/// connection may have that much on top, as it may have a frame's answer.
pub fn charge(frame_len: usize) -> usize {
    frame_len.saturating_mul(2).saturating_add(
        frame_len
            .saturating_mul(DECODE_FACTOR)
            .min(MAX_ALLOWANCE_BYTES),
    )
}

/// Why a request is refused before it is decoded.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("truncated Metadata request: {0}")]
    Truncated(String),
    #[error(
        "a Metadata request of {frame_len} bytes naming {topics} topics would take \
         ~{estimate_bytes} bytes decoded and answered, over its allowance of {allowance_bytes} \
         (max({MIN_ALLOWANCE_BYTES}, {DECODE_FACTOR} x frame), at most {MAX_ALLOWANCE_BYTES})"
    )]
    OverAllowance {
        frame_len: usize,
        topics: u64,
        /// The estimate when the walk stopped (a lower bound of the whole).
        estimate_bytes: u64,
        allowance_bytes: usize,
    },
}

/// Why a request was refused for its size: the `reason` label of
/// `keel_kafka_requests_refused_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RefusedFor {
    /// A Metadata request whose topics run past its frame.
    Truncated,
    /// A Metadata request over its decoded-size allowance.
    DecodedSize,
    /// No share of the listener-wide budget within the wait.
    InFlightBudget,
    /// A frame over `--kafka-max-request-bytes`.
    FrameSize,
}

impl RefusedFor {
    /// Every reason, each exported at 0 from the start.
    pub(crate) const ALL: [RefusedFor; 4] = [
        RefusedFor::Truncated,
        RefusedFor::DecodedSize,
        RefusedFor::InFlightBudget,
        RefusedFor::FrameSize,
    ];

    /// The label value.
    pub(crate) fn label(self) -> &'static str {
        match self {
            RefusedFor::Truncated => "truncated",
            RefusedFor::DecodedSize => "decoded_size",
            RefusedFor::InFlightBudget => "in_flight_budget",
            RefusedFor::FrameSize => "frame_size",
        }
    }
}

impl Refusal {
    /// The `reason` label of `keel_kafka_requests_refused_total`.
    fn reason(&self) -> RefusedFor {
        match self {
            Refusal::Truncated(_) => RefusedFor::Truncated,
            Refusal::OverAllowance { .. } => RefusedFor::DecodedSize,
        }
    }
}

/// Counts a request refused for its size, by `reason`.
pub(crate) fn count_refused(reason: RefusedFor) {
    metrics::counter!("keel_kafka_requests_refused_total", "reason" => reason.label()).increment(1);
}

/// [`estimate_metadata`] for `dispatch`: the refusal counted and worded
/// for the log.
pub(crate) fn metadata(body: &[u8], version: i16, frame_len: usize) -> Result<(), String> {
    estimate_metadata(body, version, frame_len)
        .map(|_| ())
        .map_err(|r| {
            count_refused(r.reason());
            r.to_string()
        })
}

/// Walks the topics of a Metadata request `body` (after its header) of
/// `version`, from a frame of `frame_len` bytes, and estimates what
/// decoding and answering it takes; refuses it when that is over
/// [`allowance`]. Returns the estimate. Never reads past `body`, and stops
/// as soon as the estimate is over (a claim of 2^31 entries costs nothing).
pub fn estimate_metadata(body: &[u8], version: i16, frame_len: usize) -> Result<u64, Refusal> {
    let allowed = allowance(frame_len);
    let flexible = version >= 9;
    let mut c = Cursor { bytes: body, at: 0 };
    let count: u64 = if flexible {
        // Compact: length + 1; 0 is null (all topics).
        u64::from(c.varint()?).saturating_sub(1)
    } else {
        // -1 is null; other negatives the decoder refuses.
        u64::try_from(c.i32()?).unwrap_or(0)
    };
    let over = |topics: u64, estimate: u64| Refusal::OverAllowance {
        frame_len,
        topics,
        estimate_bytes: estimate,
        allowance_bytes: allowed,
    };
    let per_topic = (REQUEST_TOPIC_BYTES + ANSWER_TOPIC_BYTES) as u64;
    // The claim alone, before any entry is read: the decoder reserves room
    // for `count` entries at once.
    if count.saturating_mul(per_topic) > allowed as u64 {
        return Err(over(count, count.saturating_mul(per_topic)));
    }
    let mut estimate = 0u64;
    for _ in 0..count {
        estimate += per_topic;
        if version >= 10 {
            c.skip(16)?; // topic id
        }
        let name_len = if flexible {
            u64::from(c.varint()?).saturating_sub(1)
        } else {
            u64::try_from(c.i16()?).unwrap_or(0)
        };
        c.skip(name_len)?;
        estimate += name_len * NAME_COPIES as u64;
        if flexible {
            let tagged = c.tagged_fields()?;
            estimate += tagged.div_ceil(11) * TAGGED_LEAF_BYTES as u64;
        }
        if estimate > allowed as u64 {
            return Err(over(count, estimate));
        }
    }
    // allow_auto_topic_creation (4+), include_cluster_authorized_operations
    // (8-10), include_topic_authorized_operations (8+).
    let flags = usize::from(version >= 4)
        + usize::from((8..=10).contains(&version))
        + usize::from(version >= 8);
    c.skip(flags as u64)?;
    if flexible {
        let tagged = c.tagged_fields()?;
        estimate += tagged.div_ceil(11) * TAGGED_LEAF_BYTES as u64;
        if estimate > allowed as u64 {
            return Err(over(count, estimate));
        }
    }
    Ok(estimate)
}

/// A cursor over a request body.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: u64) -> Result<&[u8], Refusal> {
        let left = self.bytes.len() - self.at;
        if n > left as u64 {
            return Err(Refusal::Truncated(format!(
                "{n} bytes claimed at offset {} with {left} left",
                self.at
            )));
        }
        let start = self.at;
        self.at += n as usize;
        Ok(&self.bytes[start..self.at])
    }

    fn skip(&mut self, n: u64) -> Result<(), Refusal> {
        self.take(n).map(|_| ())
    }

    fn i16(&mut self) -> Result<i16, Refusal> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self) -> Result<i32, Refusal> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Kafka's unsigned varint (at most 5 bytes).
    fn varint(&mut self) -> Result<u32, Refusal> {
        unsigned_varint(|| self.take(1).map(|b| b[0]))?.ok_or_else(|| {
            Refusal::Truncated(format!(
                "a varint longer than 5 bytes at offset {}",
                self.at
            ))
        })
    }

    /// Skips a tagged-field section; returns how many fields it holds.
    fn tagged_fields(&mut self) -> Result<u64, Refusal> {
        let n = self.varint()?;
        for _ in 0..n {
            self.varint()?; // tag
            let size = self.varint()?;
            self.skip(u64::from(size))?;
        }
        Ok(u64::from(n))
    }
}

/// The listener-wide budget: bytes that requests in flight hold at once.
#[derive(Clone, Debug)]
pub struct Budget {
    /// One permit per byte.
    bytes: Arc<Semaphore>,
    /// The budget's size: a single charge is never more (a frame larger
    /// than the whole budget waits for all of it, then proceeds alone).
    total_bytes: usize,
}

/// A request's share of the [`Budget`]; given back when dropped.
#[derive(Debug)]
pub struct Share {
    /// `None` for a share of nothing.
    _permit: Option<OwnedSemaphorePermit>,
    /// What was taken.
    pub bytes: usize,
}

/// The budget was not there in time.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{wanted} bytes of the listener's in-flight budget of {total} (max_in_flight_bytes) \
     not free within {waited:?}"
)]
pub struct Exhausted {
    pub wanted: usize,
    pub total: usize,
    pub waited: Duration,
}

impl Budget {
    /// A budget of `total_bytes` (at least 1, at most what a semaphore
    /// holds).
    pub fn new(total_bytes: usize) -> Self {
        let total_bytes = total_bytes.clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
        Self {
            bytes: Arc::new(Semaphore::new(total_bytes)),
            total_bytes,
        }
    }

    /// The budget's size.
    pub fn total_bytes(&self) -> usize {
        self.total_bytes
    }

    /// What is free now.
    pub fn free_bytes(&self) -> usize {
        self.bytes.available_permits()
    }

    /// Takes `wanted` bytes (at most the whole budget), waiting up to
    /// `wait` for them.
    pub async fn acquire(&self, wanted: usize, wait: Duration) -> Result<Share, Exhausted> {
        let bytes = wanted.min(self.total_bytes);
        if bytes == 0 {
            return Ok(Share {
                _permit: None,
                bytes,
            });
        }
        let exhausted = || Exhausted {
            wanted,
            total: self.total_bytes,
            waited: wait,
        };
        // `bytes` <= `total_bytes` <= u32::MAX.
        match tokio::time::timeout(wait, self.bytes.clone().acquire_many_owned(bytes as u32)).await
        {
            Ok(Ok(permit)) => Ok(Share {
                _permit: Some(permit),
                bytes,
            }),
            // The semaphore is never closed; a closed one is a budget of 0.
            Ok(Err(_)) | Err(_) => {
                count_refused(RefusedFor::InFlightBudget);
                Err(exhausted())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::{MetadataRequest, TopicName};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn body(names: &[&str], version: i16) -> Vec<u8> {
        let topics = names
            .iter()
            .map(|n| {
                MetadataRequestTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_string(n.to_string()))))
            })
            .collect();
        let req = MetadataRequest::default().with_topics(Some(topics));
        let mut buf = BytesMut::new();
        req.encode(&mut buf, version).unwrap();
        buf.to_vec()
    }

    /// The frame these bytes would be: length prefix aside, a header of
    /// about 20 bytes.
    fn frame_of(body: &[u8]) -> usize {
        body.len() + 20
    }

    /// `count` empty names at v9 (two bytes each), built by hand as the
    /// issue's 8 MiB frame was.
    fn empty_names_v9(count: u32) -> Vec<u8> {
        let mut b = Vec::new();
        let mut n = count + 1;
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                b.push(byte);
                break;
            }
            b.push(byte | 0x80);
        }
        for _ in 0..count {
            b.push(1); // compact string of length 0
            b.push(0); // no tagged fields
        }
        // auto-create, cluster ops, topic ops, no tags
        b.extend_from_slice(&[1, 0, 0, 0]);
        b
    }

    #[test]
    fn the_allowance_is_proportional_to_the_frame_between_a_floor_and_a_cap() {
        assert_eq!(allowance(0), MIN_ALLOWANCE_BYTES);
        assert_eq!(allowance(100), MIN_ALLOWANCE_BYTES);
        assert_eq!(allowance(1 << 20), DECODE_FACTOR << 20);
        assert_eq!(allowance(8 << 20), MAX_ALLOWANCE_BYTES);
        assert_eq!(allowance(usize::MAX), MAX_ALLOWANCE_BYTES);
        assert_eq!(charge(0), 0);
        assert_eq!(charge(100), 200 + 100 * DECODE_FACTOR);
        assert_eq!(charge(8 << 20), (16 << 20) + MAX_ALLOWANCE_BYTES);
    }

    #[test]
    fn the_estimate_matches_the_walk_of_what_the_encoder_writes() {
        for version in 0..=13 {
            let b = body(&["orders", "payments"], version);
            let est = estimate_metadata(&b, version, frame_of(&b)).unwrap();
            let per = (REQUEST_TOPIC_BYTES + ANSWER_TOPIC_BYTES) as u64;
            assert_eq!(est, 2 * per + (6 + 8) * NAME_COPIES as u64, "v{version}");
        }
        // All topics (null) and none: nothing per topic.
        let all = MetadataRequest::default().with_topics(None);
        for version in 1..=13 {
            let mut buf = BytesMut::new();
            all.encode(&mut buf, version).unwrap();
            assert_eq!(estimate_metadata(&buf, version, 30), Ok(0), "v{version}");
        }
    }

    #[test]
    fn four_million_empty_names_are_refused_before_any_is_read() {
        let b = empty_names_v9(4_194_304);
        assert_eq!(b.len(), 4 + 2 * 4_194_304 + 4);
        // As with a 16 MiB limit: the frame itself is let in.
        let r = estimate_metadata(&b, 9, frame_of(&b)).unwrap_err();
        match &r {
            Refusal::OverAllowance {
                topics,
                allowance_bytes,
                ..
            } => {
                assert_eq!(*topics, 4_194_304);
                assert_eq!(*allowance_bytes, MAX_ALLOWANCE_BYTES);
            }
            other => panic!("{other:?}"),
        }
        assert!(r.to_string().contains("naming 4194304 topics"), "{r}");
        // A claim with nothing behind it costs nothing either.
        let claim = [0xff, 0xff, 0xff, 0xff, 0x0f];
        assert!(matches!(
            estimate_metadata(&claim, 12, 30),
            Err(Refusal::OverAllowance { .. })
        ));
    }

    /// Asserts that a Metadata request naming `names` passes the estimate
    /// at each of `versions`.
    fn estimate_passes(names: &[String], versions: impl IntoIterator<Item = i16>) {
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        for version in versions {
            let b = body(&names, version);
            assert!(
                estimate_metadata(&b, version, frame_of(&b)).is_ok(),
                "v{version}"
            );
        }
    }

    #[test]
    fn a_hundred_thousand_real_topic_names_are_answered() {
        let names: Vec<String> = (0..100_000).map(|i| format!("topic-{i:05}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        for version in [10, 12, 13] {
            let b = body(&names, version);
            let est = estimate_metadata(&b, version, frame_of(&b)).unwrap();
            assert!(est < MAX_ALLOWANCE_BYTES as u64, "v{version}: {est}");
        }
        // Old versions too, with longer names (entries of 2 + name bytes).
        let names: Vec<String> = (0..100_000)
            .map(|i| format!("service.events.{i:06}"))
            .collect();
        estimate_passes(&names, [1, 4, 9]);
    }

    #[test]
    fn a_thousand_one_letter_names_fit_the_floor_at_any_version() {
        let names: Vec<String> = (0..1000)
            .map(|i| ((b'a' + (i % 26) as u8) as char).to_string())
            .collect();
        estimate_passes(&names, 0..=13);
    }

    #[test]
    fn tagged_fields_on_each_entry_count() {
        // v12: id, name "" and one tagged field (tag 0, size 0): 20 bytes
        // an entry, within the factor without the field, over it with a
        // B-tree leaf each.
        let count = 20_000u32;
        let mut b = vec![0xa1, 0x9c, 0x01]; // varint 20,001
        for _ in 0..count {
            b.extend_from_slice(&[0; 16]);
            b.extend_from_slice(&[1, 1, 0, 0]);
        }
        b.extend_from_slice(&[1, 0, 0]);
        let frame = frame_of(&b);
        let plain = u64::from(count) * (REQUEST_TOPIC_BYTES + ANSWER_TOPIC_BYTES) as u64;
        assert!(plain < allowance(frame) as u64);
        match estimate_metadata(&b, 12, frame) {
            Err(Refusal::OverAllowance { estimate_bytes, .. }) => {
                assert!(estimate_bytes > allowance(frame) as u64)
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_cut_request_is_refused_as_truncated() {
        let b = body(&["orders"], 12);
        assert!(matches!(
            estimate_metadata(&b[..b.len() - 5], 12, 100),
            Err(Refusal::Truncated(_))
        ));
        assert!(matches!(
            estimate_metadata(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01], 12, 100),
            Err(Refusal::Truncated(_))
        ));
        assert!(matches!(
            estimate_metadata(&[], 1, 100),
            Err(Refusal::Truncated(_))
        ));
    }

    #[tokio::test]
    async fn the_budget_gives_back_what_was_taken_and_makes_the_rest_wait() {
        let budget = Budget::new(1000);
        let wait = Duration::from_millis(50);
        let a = budget.acquire(600, wait).await.unwrap();
        assert_eq!((a.bytes, budget.free_bytes()), (600, 400));
        let b = budget.acquire(400, wait).await.unwrap();
        assert_eq!(budget.free_bytes(), 0);
        // No room: waits, then gives up.
        let e = budget.acquire(1, wait).await.unwrap_err();
        assert_eq!(e.wanted, 1);
        drop(a);
        assert_eq!(budget.free_bytes(), 600);
        // More than the whole budget: all of it, once the rest is back.
        let waiter = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.acquire(5000, Duration::from_secs(5)).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        drop(b);
        let all = waiter.await.unwrap().unwrap();
        assert_eq!((all.bytes, budget.free_bytes()), (1000, 0));
        drop(all);
        assert_eq!(budget.free_bytes(), 1000);
        // A share of nothing takes nothing.
        let none = budget.acquire(0, wait).await.unwrap();
        assert_eq!((none.bytes, budget.free_bytes()), (0, 1000));
    }
}
