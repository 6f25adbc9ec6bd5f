//! The cluster under test, laid out by the cluster kit: three controllers on
//! 127.0.2.11-13:9093 and brokers on 127.0.2.21..:9092 (one address per
//! node, so the nemesis can cut any pair), data dirs under
//! `<run dir>/data/`, logs under `<run dir>/logs/`, timings that make faults
//! bite within seconds.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use keel_testkit::{Addressing, KafkaPorts, Ports, Root, Spec, SpecFaults};
pub use keel_testkit::{Cluster, Node, Role};

/// Address the harness's own clients connect from.
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 2, 1);
pub const CONTROLLER_PORT: u16 = 9093;
pub const BROKER_PORT: u16 = 9092;
/// Brokers' Kafka listeners (`--client kafka`), on each broker's own
/// address; the kit gives controllers theirs on the next port.
pub const KAFKA_PORT: u16 = 9094;
/// Broker session timeout (controllers and brokers).
pub const SESSION_TIMEOUT_MS: u64 = 3000;

/// The cluster id of every run.
pub const CLUSTER_ID: &str = "keel-jepsen";

/// The layout of a run's cluster (nothing started). With `tls`, the kit
/// makes a CA and every node's certificate under `<run dir>/certs`, every
/// node speaks mutual TLS, and the kit's clients present the certificate
/// of `User:admin` (a super user). With `lazyfs`, every node's data dir
/// is on a LazyFS mount of its own under `<run dir>/disks/<node>/` (the
/// power nemesis).
pub fn spec(exe: PathBuf, run_dir: &Path, brokers: usize, tls: bool, lazyfs: bool) -> Spec {
    let session = SESSION_TIMEOUT_MS.to_string();
    Spec::new(exe, CLUSTER_ID)
        .tls(tls)
        .lazyfs(lazyfs)
        .brokers(brokers)
        .addressing(Addressing::Subnet {
            net: 2,
            ports: Ports::Fixed {
                controller: CONTROLLER_PORT,
                broker: BROKER_PORT,
                controller_metrics: 0,
                broker_metrics: 0,
            },
        })
        .root(Root::At(run_dir.to_path_buf()))
        .controller_flags(&["--session-timeout-ms", &session])
        .broker_flags(&[
            "--heartbeat-interval-ms",
            "300",
            "--session-timeout-ms",
            &session,
            "--replica-lag-time-max-ms",
            "3000",
        ])
}

/// `spec` with a Kafka listener on every broker (`--kafka-listen <broker ip>:9094`,
/// TLS on TLS runs) when `on`. On TLS runs (`tls`) the listeners request a
/// client certificate instead of requiring one, so clients may log in with
/// SASL SCRAM over TLS (SASL_SSL) as the Kafka workload does.
pub fn with_kafka(spec: Spec, on: bool, tls: bool) -> Spec {
    match (on, tls) {
        (false, _) => spec,
        (true, false) => spec.kafka(KafkaPorts::Fixed(KAFKA_PORT)),
        (true, true) => spec
            .kafka(KafkaPorts::Fixed(KAFKA_PORT))
            .broker_flags(&["--kafka-ssl-client-auth", "requested"]),
    }
}

/// The node's IPv4 address (every node of the layout has one).
pub fn ip(n: &Node) -> Ipv4Addr {
    match n.ip() {
        std::net::IpAddr::V4(v4) => v4,
        std::net::IpAddr::V6(_) => Ipv4Addr::LOCALHOST,
    }
}

/// Indexes (in [`Cluster::nodes`]) of the nodes of `role`.
pub fn indexes(c: &Cluster, role: Role) -> Vec<usize> {
    c.nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.role == role)
        .map(|(i, _)| i)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_node_has_its_own_address_under_the_run_dir() {
        let dir = tempfile::tempdir().unwrap();
        let c = Cluster::new(spec("/bin/keel".into(), dir.path(), 3, false, false)).unwrap();
        assert_eq!(
            c.controller_addrs(),
            ["127.0.2.11:9093", "127.0.2.12:9093", "127.0.2.13:9093"]
        );
        assert_eq!(
            c.broker_addrs(),
            ["127.0.2.21:9092", "127.0.2.22:9092", "127.0.2.23:9092"]
        );
        assert_eq!(indexes(&c, Role::Broker), vec![3, 4, 5]);
        assert_eq!(ip(&c.nodes[4]), Ipv4Addr::new(127, 0, 2, 22));
        assert_eq!(c.broker(0).data_dir, dir.path().join("data/b1"));
        assert_eq!(c.controller(2).process.log, dir.path().join("logs/c3.log"));
        assert!(c.kafka_addrs().is_empty());
    }

    #[test]
    fn kafka_runs_give_every_broker_a_kafka_listener_on_its_own_address() {
        let dir = tempfile::tempdir().unwrap();
        let spec = with_kafka(
            spec("/bin/keel".into(), dir.path(), 3, false, false),
            true,
            false,
        );
        let c = Cluster::new(spec).unwrap();
        assert_eq!(
            c.kafka_addrs(),
            ["127.0.2.21:9094", "127.0.2.22:9094", "127.0.2.23:9094"]
        );
        // TLS runs request a client certificate (SASL_SSL logins need none).
        let tls = with_kafka(
            super::spec("/bin/keel".into(), dir.path(), 3, true, false),
            true,
            true,
        );
        assert!(tls
            .broker_flags
            .windows(2)
            .any(|w| w == ["--kafka-ssl-client-auth", "requested"]));
    }

    #[test]
    fn a_tls_run_has_certificates_and_an_admin_transport() {
        let dir = tempfile::tempdir().unwrap();
        let c = Cluster::new(spec("/bin/keel".into(), dir.path(), 2, true, false)).unwrap();
        let certs = c.certs_dir().expect("a TLS layout has certificates");
        assert!(certs.join("ca.pem").exists());
        assert!(c.transport().is_tls());
        let admin = c.transport().identity().unwrap();
        assert_eq!(admin.principal().to_string(), "User:admin");
        let plain = Cluster::new(spec(
            "/bin/keel".into(),
            &dir.path().join("p"),
            2,
            false,
            false,
        ))
        .unwrap();
        assert!(!plain.transport().is_tls());
    }
}
