//! Kafka tools nobody here wrote, against real `keel` processes: `kcat -L`
//! (librdkafka) reads each broker's Kafka listener, and what it lists must
//! be what Keel's own DescribeTopics and DescribeCluster say: brokers,
//! topics, partitions, leaders, replicas, ISR. Then a broker dies; once it
//! is fenced, kcat shows the moved leaders and the shrunk ISR.
//!
//! Needs `kcat` (Debian package `kcat`; `.ci/run` installs it).

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use keel_proto::pb;
use keel_testkit::KafkaPorts;
use serde_json::Value;

const LONG: Duration = Duration::from_secs(60);

/// Three controllers and three brokers with Kafka listeners, fast timings.
fn kafka_cluster() -> Cluster {
    Cluster::start(fast_spec(3).kafka(KafkaPorts::Free))
        .expect("start a cluster with Kafka listeners")
}

/// One partition as both sides describe it: leader (-1: none), replicas,
/// ISR.
type Partitions = BTreeMap<u32, (i64, Vec<u32>, Vec<u32>)>;

/// The cluster as Kafka's Metadata shows it: live brokers (id, host:port)
/// and every topic's partitions.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    brokers: BTreeMap<u32, String>,
    topics: BTreeMap<String, Partitions>,
}

/// `kcat -L -J` against one listener; the parsed JSON.
fn kcat_metadata(bootstrap: &str, extra: &[&str]) -> Value {
    let out = Command::new("timeout")
        .args(["30", "kcat", "-L", "-J", "-m", "10", "-b", bootstrap])
        .args(extra)
        .output()
        .expect("run timeout(1)");
    assert!(
        out.status.code() != Some(127),
        "kcat is not installed: apt-get install -y kcat (.ci/run does)"
    );
    assert!(
        out.status.success(),
        "kcat -L -b {bootstrap} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "kcat printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|r| r["id"].as_u64())
                .map(|i| i as u32)
                .collect()
        })
        .unwrap_or_default()
}

/// What kcat's JSON says.
fn seen_by_kcat(v: &Value) -> Seen {
    let brokers = v["brokers"]
        .as_array()
        .expect("brokers")
        .iter()
        .map(|b| {
            (
                b["id"].as_u64().expect("broker id") as u32,
                b["name"].as_str().expect("broker name").to_string(),
            )
        })
        .collect();
    let topics = v["topics"]
        .as_array()
        .expect("topics")
        .iter()
        .map(|t| {
            let partitions = t["partitions"]
                .as_array()
                .expect("partitions")
                .iter()
                .map(|p| {
                    (
                        p["partition"].as_u64().expect("partition") as u32,
                        (
                            p["leader"].as_i64().expect("leader"),
                            ids(&p["replicas"]),
                            ids(&p["isrs"]),
                        ),
                    )
                })
                .collect();
            (t["topic"].as_str().expect("topic").to_string(), partitions)
        })
        .collect();
    Seen { brokers, topics }
}

/// What Keel's own API says, through the active controller.
async fn seen_by_keel(c: &Cluster) -> Seen {
    let client = client(c);
    let cluster = admin::describe_cluster(&client)
        .await
        .expect("DescribeCluster");
    let brokers = cluster
        .brokers
        .iter()
        .filter_map(|d| d.broker.as_ref())
        .filter(|b| !b.fenced)
        .map(|b| {
            (
                b.broker_id,
                b.kafka_address
                    .clone()
                    .expect("every broker has a Kafka listener"),
            )
        })
        .collect();
    let r = client
        .admin(|mut c| async move {
            c.describe_topics(pb::DescribeTopicsRequest::default())
                .await
        })
        .await
        .expect("DescribeTopics");
    let topics = r
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .filter_map(|p| p.state.as_ref())
                .map(|s| {
                    (
                        s.partition,
                        (
                            s.leader.map_or(-1, i64::from),
                            s.replicas.clone(),
                            s.isr.clone(),
                        ),
                    )
                })
                .collect();
            (t.name.clone(), partitions)
        })
        .collect();
    Seen { brokers, topics }
}

/// Waits until kcat, asking `bootstrap`, sees what Keel says; returns it.
async fn kcat_agrees(c: &Cluster, bootstrap: &str) -> Seen {
    let deadline = Instant::now() + LONG;
    loop {
        let keel = seen_by_keel(c).await;
        let kcat = seen_by_kcat(&kcat_metadata(bootstrap, &[]));
        if kcat == keel {
            return kcat;
        }
        assert!(
            Instant::now() < deadline,
            "kcat via {bootstrap} never agreed with Keel:\nkcat: {kcat:#?}\nkeel: {keel:#?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_lists_what_keel_describes_and_sees_a_dead_broker_go() {
    let mut c = kafka_cluster();
    c.wait_active(LONG).await.unwrap();
    c.wait_all_brokers_active(LONG).await.unwrap();
    let client = client(&c);
    create_topic(&client, "orders", 6, 3).await;
    create_topic(&client, "events", 4, 2).await;
    create_topic(&client, "audit", 3, 1).await;

    // Every broker's listener serves the same view.
    let kafka: Vec<String> = c.kafka_addrs();
    assert_eq!(kafka.len(), 3);
    for bootstrap in &kafka {
        let seen = kcat_agrees(&c, bootstrap).await;
        assert_eq!(seen.brokers.len(), 3, "{seen:#?}");
        assert_eq!(
            seen.brokers.values().cloned().collect::<Vec<_>>(),
            kafka,
            "brokers listed at their Kafka listeners"
        );
        assert_eq!(seen.topics["orders"].len(), 6);
        assert!(seen.topics["orders"]
            .values()
            .all(|(leader, replicas, isr)| *leader > 0 && replicas.len() == 3 && isr.len() == 3));
    }
    // The JSON's own fields: the cluster's controller is a live broker
    // (KRaft's answer), the answering broker is named.
    let v = kcat_metadata(&kafka[0], &[]);
    assert_eq!(v["controllerid"].as_u64(), Some(1), "{v}");
    assert_eq!(v["originating_broker"]["id"].as_u64(), Some(1), "{v}");
    // A topic asked for by name, and one that does not exist.
    let v = kcat_metadata(&kafka[1], &["-t", "events"]);
    let topics = v["topics"].as_array().expect("topics");
    assert_eq!(topics.len(), 1, "{v}");
    assert_eq!(topics[0]["partitions"].as_array().map(Vec::len), Some(4));
    let v = kcat_metadata(&kafka[1], &["-t", "no-such-topic"]);
    let err = v["topics"][0]["error"].as_str().unwrap_or_default();
    assert!(err.contains("Unknown topic"), "{v}");

    // Broker 3 dies. Once it is fenced and every leadership it held moved,
    // kcat (asking broker 1) shows the moved leaders and the shrunk ISRs.
    let held: Vec<(String, u32)> = seen_by_keel(&c)
        .await
        .topics
        .iter()
        .flat_map(|(t, ps)| {
            ps.iter()
                .filter(|(_, (leader, replicas, _))| *leader == 3 && replicas.len() > 1)
                .map(move |(p, _)| (t.clone(), *p))
        })
        .collect();
    assert!(!held.is_empty(), "broker 3 leads a replicated partition");
    c.broker_mut(2).kill();
    let deadline = Instant::now() + LONG;
    loop {
        let keel = seen_by_keel(&c).await;
        let fenced = !keel.brokers.contains_key(&3);
        let moved = keel
            .topics
            .values()
            .flat_map(|ps| ps.values())
            .all(|(leader, _, _)| *leader != 3);
        if fenced && moved {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "broker 3 never fenced: {keel:#?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let seen = kcat_agrees(&c, &kafka[0]).await;
    assert_eq!(seen.brokers.keys().copied().collect::<Vec<_>>(), [1, 2]);
    for (topic, partitions) in &seen.topics {
        for (p, (leader, replicas, isr)) in partitions {
            assert_ne!(*leader, 3, "{topic}-{p} still led by the dead broker");
            if replicas.len() > 1 {
                // Fencing took broker 3 out of every ISR it shared.
                assert!(!isr.contains(&3), "{topic}-{p}: ISR {isr:?}");
            }
            assert!(
                replicas.len() == 1 || *leader > 0,
                "{topic}-{p} lost its leader"
            );
        }
    }
    for (t, p) in &held {
        let (leader, _, isr) = &seen.topics[t][p];
        assert!(*leader == 1 || *leader == 2, "{t}-{p}: leader {leader}");
        assert!(!isr.contains(&3), "{t}-{p}: ISR {isr:?}");
    }
    // A partition whose only replica was on broker 3 is offline: no leader.
    for (p, (leader, replicas, _)) in &seen.topics["audit"] {
        if replicas == &[3] {
            assert_eq!(*leader, -1, "audit-{p}");
        }
    }
}
