//! No unauthenticated amplification on a broker's Kafka listener: a
//! Metadata request of 4,194,304 empty topic names (an 8 MiB frame at v9,
//! two bytes a name) once raised a broker's memory by 303 MB, and four at
//! once by 590 MB. Now the listener refuses it before decoding (its
//! estimate is over its allowance, see `keel_kafka::budget`) and the
//! default limit refuses its length prefix outright.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use keel_testkit::probe::Memory;
use keel_testkit::KafkaPorts;

const LONG: Duration = Duration::from_secs(60);
/// How many names the attack's frame holds.
const NAMES: u32 = 4_194_304;
/// What the broker may grow by refusing four such frames at once: the four
/// frames and the copies `dispatch` reads them from (4 x 2 x 8 MiB; the
/// allocator keeps some of it) and 16 MiB of slack. Decoded, they took
/// ~1.2 GB.
const MAX_GROWTH_BYTES: u64 = (4 * 2 * 8 + 16) << 20;

fn varint(mut n: u32, out: &mut Vec<u8>) {
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// A Metadata request frame (length prefix, header v2, body) at v9 naming
/// `names` empty topics, or all topics (`None`).
fn metadata_v9(correlation_id: i32, names: Option<u32>) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&3i16.to_be_bytes()); // Metadata
    m.extend_from_slice(&9i16.to_be_bytes());
    m.extend_from_slice(&correlation_id.to_be_bytes());
    m.extend_from_slice(&[0, 4]);
    m.extend_from_slice(b"test"); // client id
    m.push(0); // header tagged fields
    match names {
        None => m.push(0), // null: all topics
        Some(n) => {
            varint(n + 1, &mut m);
            m.reserve(2 * n as usize);
            for _ in 0..n {
                m.extend_from_slice(&[1, 0]); // "" and no tagged fields
            }
        }
    }
    // allow auto-creation, cluster and topic authorized operations, no
    // tagged fields.
    m.extend_from_slice(&[1, 0, 0, 0]);
    let mut frame = (m.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&m);
    frame
}

fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect to the Kafka listener");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

/// Whether the broker closed `s`: a read gives 0 bytes or a reset, not
/// an answer, within the read timeout.
fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 64];
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

/// A normal Metadata request answered on a fresh connection.
fn metadata_is_answered(addr: &str) {
    let mut s = connect(addr);
    s.write_all(&metadata_v9(7, None)).unwrap();
    let mut len = [0u8; 4];
    s.read_exact(&mut len).expect("an answer's length");
    let len = u32::from_be_bytes(len) as usize;
    assert!((4..1 << 20).contains(&len), "{len}");
    let mut answer = vec![0u8; len];
    s.read_exact(&mut answer).expect("an answer");
    assert_eq!(i32::from_be_bytes(answer[..4].try_into().unwrap()), 7);
}

/// Checks that `broker` (listening at `addr`) answers a normal Metadata
/// request, lets it settle for a second; then its (RSS, peak RSS) in bytes.
async fn answered_then_memory(broker: &Node, addr: &str) -> (u64, u64) {
    let a = addr.to_string();
    tokio::task::spawn_blocking(move || metadata_is_answered(&a))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    (broker.rss_bytes(), broker.memory_bytes(Memory::PeakRss))
}

async fn kafka_broker(flags: &[&str]) -> (Cluster, String) {
    let mut c = Cluster::start(fast_spec(1).kafka(KafkaPorts::Free).broker_flags(flags))
        .expect("start a cluster with a Kafka listener");
    c.wait_active(LONG).await.unwrap();
    c.wait_all_brokers_active(LONG).await.unwrap();
    let addr = c.kafka_addrs().pop().expect("a Kafka listener");
    (c, addr)
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_metadata_frames_of_four_million_empty_names_are_refused_without_amplification() {
    let (c, addr) = kafka_broker(&["--kafka-max-request-bytes", "16777216"]).await;
    let broker = c.broker(0);
    let frame = metadata_v9(1, Some(NAMES));
    assert!(frame.len() > 8 << 20 && frame.len() < 16 << 20);
    let (before, peak_before) = answered_then_memory(broker, &addr).await;
    assert!(before > 0, "no VmRSS for the broker");

    // Four at once, each on its own connection.
    let attacks: Vec<_> = (0..4)
        .map(|_| {
            let addr = addr.clone();
            let frame = frame.clone();
            std::thread::spawn(move || {
                let mut s = connect(&addr);
                // The broker reads the whole frame before refusing it; a
                // write cut short by its close is a refusal too.
                let _ = s.write_all(&frame);
                closed(&mut s)
            })
        })
        .collect();
    let closed: Vec<bool> = attacks.into_iter().map(|a| a.join().unwrap()).collect();
    // Still serving.
    let (after, peak_after) = answered_then_memory(broker, &addr).await;
    eprintln!(
        "broker RSS {:.1} MB -> {:.1} MB (+{:.1} MB); peak {:.1} MB -> {:.1} MB",
        mb(before),
        mb(after),
        mb(after.saturating_sub(before)),
        mb(peak_before),
        mb(peak_after)
    );
    assert_eq!(closed, [true; 4], "a connection was answered, not closed");
    assert!(
        after.saturating_sub(before) < MAX_GROWTH_BYTES,
        "RSS grew from {before} to {after}"
    );
    assert!(
        peak_after.saturating_sub(before) < MAX_GROWTH_BYTES,
        "peak RSS went from {before} to {peak_after}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_default_limit_the_frame_is_refused_at_its_length_prefix() {
    let (_c, addr) = kafka_broker(&[]).await;
    let frame = metadata_v9(1, Some(NAMES));
    let a = addr.clone();
    tokio::task::spawn_blocking(move || {
        let mut s = connect(&a);
        // Only the length prefix: the broker closes without reading more.
        s.write_all(&frame[..4]).unwrap();
        let t = Instant::now();
        assert!(closed(&mut s), "the connection stayed open");
        assert!(t.elapsed() < Duration::from_secs(10));
        metadata_is_answered(&a);
    })
    .await
    .unwrap();
}
