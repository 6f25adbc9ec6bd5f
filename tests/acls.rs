//! Authorization on real processes over mutual TLS: a user without ACLs
//! can do nothing, `keel acls add` grants exactly what it says, a deny
//! beats an allow, refusals write nothing, and the bindings survive a
//! failover and a restart from a snapshot.

mod common;

use std::time::Duration;

use common::error_code as code;
use common::*;
use keel_metadata::ErrorCode;
use keel_proto::client::ControllerClient;
use keel_proto::pb;
use keel_proto::pb::admin_service_client::AdminServiceClient;
use keel_testkit::admin::{creatable, create_topics_request};
use keel_tls::Identity;

const LONG: Duration = Duration::from_secs(90);

fn tls_cluster(brokers: usize, controller_flags: &[&str]) -> Cluster {
    Cluster::start(
        Spec::new(keel_bin(), CLUSTER_ID)
            .brokers(brokers)
            .tls(true)
            .controller_flags(controller_flags)
            .broker_flags(&[
                "--heartbeat-interval-ms",
                "300",
                "--session-timeout-ms",
                "3000",
            ]),
    )
    .expect("start a TLS cluster")
}

/// Creates `names` as `client`; each name's error code.
async fn create(client: &ControllerClient, names: &[&str]) -> Vec<ErrorCode> {
    let req = create_topics_request(names.iter().map(|n| creatable(n, 1, 1)).collect());
    let r = create_topics_answer(client, &req).await;
    assert_eq!(code(&r.error), ErrorCode::None, "{:?}", r.error);
    r.topics.iter().map(|t| code(&t.error)).collect()
}

async fn delete(client: &ControllerClient, name: &str) -> ErrorCode {
    let req = pb::DeleteTopicsRequest {
        names: vec![name.to_string()],
    };
    let r = client
        .admin_write(|mut c| {
            let req = req.clone();
            async move { c.delete_topics(req).await }
        })
        .await
        .expect("delete topics answered");
    assert_eq!(code(&r.error), ErrorCode::None, "{:?}", r.error);
    code(&r.topics[0].error)
}

/// (names listed when describing everything, the error code per name asked
/// for by name).
async fn describe(client: &ControllerClient, named: &[&str]) -> (Vec<String>, Vec<ErrorCode>) {
    let all = client
        .admin(|mut c| async move {
            c.describe_topics(pb::DescribeTopicsRequest::default())
                .await
        })
        .await
        .expect("describe answered");
    let req = pb::DescribeTopicsRequest {
        names: named.iter().map(|s| s.to_string()).collect(),
    };
    let some = client
        .admin(|mut c| {
            let req = req.clone();
            async move { c.describe_topics(req).await }
        })
        .await
        .expect("describe answered");
    (
        all.topics.into_iter().map(|t| t.name).collect(),
        some.topics.iter().map(|t| code(&t.error)).collect(),
    )
}

/// Runs `keel acls <args> --output json` as the admin user of `c`.
fn acls_cli(c: &Cluster, args: &[&str]) -> (i32, serde_json::Value, String) {
    keel_as_admin(c, &[&["acls"], args].concat())
}

fn acl_ok(c: &Cluster, args: &[&str]) -> serde_json::Value {
    let (code, v, err) = acls_cli(c, args);
    assert_eq!(code, 0, "keel acls {args:?}: {err}");
    v
}

/// The error code `client.$how` (`admin` or `admin_write`) is answered
/// with when it calls admin RPC `$rpc` with `$req`; panics when no answer
/// came.
macro_rules! answered_code {
    ($client:ident.$how:ident, $rpc:ident, $req:expr) => {
        code(
            &$client
                .$how(|mut c| async move { c.$rpc($req).await })
                .await
                .expect("answered")
                .error,
        )
    };
}

/// Every cluster-level operation `client` tries; the error code of each.
async fn cluster_operations(client: &ControllerClient) -> Vec<(&'static str, ErrorCode)> {
    vec![
        (
            "unclean election",
            answered_code!(
                client.admin_write,
                elect_leaders,
                pb::ElectLeadersRequest {
                    election_type: pb::ElectionType::Unclean as i32,
                    partitions: vec![],
                }
            ),
        ),
        (
            "add voter",
            answered_code!(
                client.admin_write,
                add_voter,
                pb::AddVoterRequest {
                    node_id: 9,
                    address: "127.0.0.1:1".into(),
                    directory_id: String::new(),
                    ..Default::default()
                }
            ),
        ),
        (
            "remove voter",
            answered_code!(
                client.admin_write,
                remove_voter,
                pb::RemoveVoterRequest {
                    node_id: 3,
                    ..Default::default()
                }
            ),
        ),
        (
            "unregister broker",
            answered_code!(
                client.admin_write,
                unregister_broker,
                pb::UnregisterBrokerRequest {
                    broker_id: 1,
                    ..Default::default()
                }
            ),
        ),
        (
            "reassign",
            answered_code!(
                client.admin_write,
                alter_partition_reassignments,
                pb::AlterPartitionReassignmentsRequest { partitions: vec![] }
            ),
        ),
        (
            "describe quorum",
            code(&describe_quorum(client).await.error),
        ),
        (
            "create acls",
            answered_code!(
                client.admin_write,
                create_acls,
                pb::CreateAclsRequest {
                    bindings: vec![keel_proto::convert::acl_binding_to_pb(
                        &keel_metadata::acl::AclBinding {
                            principal: "User:mallory".parse().unwrap(),
                            pattern: keel_metadata::acl::ResourcePattern::Cluster,
                            operation: keel_metadata::acl::Operation::All,
                            permission: keel_metadata::acl::Permission::Allow,
                        },
                    )],
                }
            ),
        ),
        (
            "describe acls",
            answered_code!(
                client.admin,
                describe_acls,
                pb::DescribeAclsRequest::default()
            ),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_may_do_exactly_what_its_acls_allow_and_a_deny_wins() {
    let mut c = tls_cluster(1, &[]);
    let active = c.wait_active(LONG).await.unwrap();
    c.wait_all_brokers_active(LONG).await.unwrap();
    let admin = client(&c);
    create_topic(&admin, "existing", 1, 1).await;
    let alice = user_client(&c, "alice");

    // No ACL: nothing at all.
    assert_eq!(
        create(&alice, &["orders"]).await,
        [ErrorCode::TopicAuthorizationFailed]
    );
    assert_eq!(
        delete(&alice, "existing").await,
        ErrorCode::TopicAuthorizationFailed
    );
    let (listed, named) = describe(&alice, &["existing", "missing"]).await;
    assert!(listed.is_empty(), "alice sees {listed:?}");
    assert_eq!(
        named,
        [
            ErrorCode::TopicAuthorizationFailed,
            ErrorCode::TopicAuthorizationFailed
        ]
    );
    // Nor through a pipelined Write session: each write is checked as its
    // session's caller.
    let transport = c
        .transport_as(&Identity::user(CLUSTER_ID, "alice"))
        .unwrap();
    let ep = keel_tls::transport::endpoint(&c.controller(active).address()).unwrap();
    let ch = transport
        .connect(ep, None, keel_tls::Expect::Controller)
        .await
        .unwrap();
    let mut answers = AdminServiceClient::new(ch)
        .write(tokio_stream::iter(vec![pb::WriteRequest {
            id: 1,
            op: Some(pb::write_request::Op::CreateTopics(create_topics_request(
                vec![creatable("sneaky", 1, 1)],
            ))),
        }]))
        .await
        .expect("a session opens")
        .into_inner();
    match answers
        .message()
        .await
        .expect("an answer")
        .map(|a| a.result)
    {
        Some(Some(pb::write_response::Result::CreateTopics(r))) => {
            assert_eq!(
                code(&r.topics[0].error),
                ErrorCode::TopicAuthorizationFailed
            )
        }
        other => panic!("a session write answered {other:?}"),
    }
    for (what, code) in cluster_operations(&alice).await {
        assert_eq!(code, ErrorCode::ClusterAuthorizationFailed, "{what}");
    }
    // Broker incarnation ids are for those who may describe the cluster.
    let as_alice = keel_testkit::admin::describe_cluster(&alice).await.unwrap();
    assert!(!as_alice.brokers.is_empty());
    assert!(as_alice.brokers.iter().all(|b| b.incarnation_id.is_empty()));
    let as_admin = keel_testkit::admin::describe_cluster(&admin).await.unwrap();
    assert!(as_admin
        .brokers
        .iter()
        .all(|b| b.incarnation_id.len() == 16));
    // Nothing was written: only the admin's topic, still there; the
    // quorum is unchanged.
    assert_eq!(topic_names(&admin).await, ["existing"]);
    let q = describe_quorum(&admin).await;
    assert_eq!(q.voters.len(), 3);

    // Granted: create (and so describe) on topics starting with "ord".
    acl_ok(
        &c,
        &[
            "add",
            "--principal",
            "User:alice",
            "--operation",
            "create",
            "--topic-prefix",
            "ord",
            "--allow",
        ],
    );
    acl_ok(
        &c,
        &[
            "add",
            "--principal",
            "User:alice",
            "--operation",
            "delete",
            "--topic",
            "orders",
            "--allow",
        ],
    );
    // One request, some items granted: those go through, the others are
    // refused and written nowhere.
    assert_eq!(
        create(&alice, &["orders", "payments", "ord-2"]).await,
        [
            ErrorCode::None,
            ErrorCode::TopicAuthorizationFailed,
            ErrorCode::None
        ]
    );
    let mut names = topic_names(&admin).await;
    names.sort();
    assert_eq!(names, ["existing", "ord-2", "orders"]);
    let (listed, named) = describe(&alice, &["orders", "existing"]).await;
    assert_eq!(listed, ["ord-2", "orders"]);
    assert_eq!(
        named,
        [ErrorCode::None, ErrorCode::TopicAuthorizationFailed]
    );
    assert_eq!(
        delete(&alice, "existing").await,
        ErrorCode::TopicAuthorizationFailed
    );
    assert_eq!(
        delete(&alice, "ord-2").await,
        ErrorCode::TopicAuthorizationFailed
    );

    // A deny beats the allow.
    acl_ok(
        &c,
        &[
            "add",
            "--principal",
            "User:alice",
            "--operation",
            "delete",
            "--topic",
            "orders",
            "--deny",
        ],
    );
    assert_eq!(
        delete(&alice, "orders").await,
        ErrorCode::TopicAuthorizationFailed
    );
    let listed = acl_ok(&c, &["list", "--principal", "User:alice"]);
    assert_eq!(listed["acls"].as_array().map(Vec::len), Some(3), "{listed}");
    // Remove the deny: the allow holds again.
    let removed = acl_ok(&c, &["remove", "--principal", "User:alice", "--deny"]);
    assert_eq!(
        removed["removed"].as_array().map(Vec::len),
        Some(1),
        "{removed}"
    );
    assert_eq!(removed["removed"][0]["permission"], "deny");
    assert_eq!(delete(&alice, "orders").await, ErrorCode::None);

    // Bad input to the CLI: a usage error, nothing sent.
    let (code, _, err) = acls_cli(
        &c,
        &[
            "add",
            "--principal",
            "alice",
            "--operation",
            "create",
            "--cluster",
            "--allow",
        ],
    );
    assert_refused(code, &err, 2, &["User:NAME"]);
    // A user with no right to change ACLs is refused through the CLI's path too.
    let listed = acl_ok(&c, &["list"]);
    assert_eq!(listed["acls"].as_array().map(Vec::len), Some(2), "{listed}");
    // Every committed ACL change was logged once, naming who made it and
    // the binding; refused attempts changed nothing and logged no change.
    let logs = c.log_tails(100_000);
    let changes: Vec<&str> = logs.lines().filter(|l| l.contains("ACL changed")).collect();
    assert!(!changes.is_empty());
    assert!(
        changes
            .iter()
            .all(|l| l.contains("User:admin") && l.contains("binding=")),
        "{changes:#?}"
    );
    c.check_alive().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acls_survive_a_failover_and_a_restart_from_a_snapshot() {
    let mut c = tls_cluster(1, &["--snapshot-interval-entries", "1000000"]);
    let active = c.wait_active(LONG).await.unwrap();
    c.wait_all_brokers_active(LONG).await.unwrap();
    let bob = user_client(&c, "bob");
    acl_ok(
        &c,
        &[
            "add",
            "--principal",
            "User:bob",
            "--operation",
            "all",
            "--topic-prefix",
            "b-",
            "--allow",
        ],
    );
    acl_ok(
        &c,
        &[
            "add",
            "--principal",
            "User:*",
            "--operation",
            "create",
            "--topic",
            "b-denied",
            "--deny",
        ],
    );

    // Failover: the new active controller enforces the same bindings.
    c.controller_mut(active).kill();
    let next = c.wait_active(LONG).await.unwrap();
    assert_ne!(next, active);
    assert_eq!(
        create(&bob, &["b-1", "b-denied", "other"]).await,
        [
            ErrorCode::None,
            ErrorCode::TopicAuthorizationFailed,
            ErrorCode::TopicAuthorizationFailed
        ]
    );
    c.controller_mut(active).start().unwrap();
    c.wait_converged(3, LONG).await.unwrap();

    // Every controller snapshots and purges its log: the bindings now live
    // only in the snapshots. Then all restart.
    snapshot_all(&c).await;
    for i in 0..3 {
        c.controller_mut(i).kill();
    }
    for i in 0..3 {
        c.controller_mut(i).start().unwrap();
    }
    c.wait_active(LONG).await.unwrap();
    c.wait_all_brokers_active(LONG).await.unwrap();
    let listed = acl_ok(&c, &["list"]);
    assert_eq!(listed["acls"].as_array().map(Vec::len), Some(2), "{listed}");
    let bob = user_client(&c, "bob");
    assert_eq!(
        create(&bob, &["b-2", "b-denied"]).await,
        [ErrorCode::None, ErrorCode::TopicAuthorizationFailed]
    );
    let (listed, _) = describe(&bob, &[]).await;
    assert_eq!(listed, ["b-1", "b-2"]);
    c.check_alive().unwrap();
}
