//! Users' SCRAM credentials on real processes over mutual TLS: `keel
//! users` sets them (the password never leaves the CLI), lists mechanisms
//! and iterations and never salts or keys, deletes them; a user without
//! ACLs can neither change nor see them and changes nothing; bad items get
//! Kafka's errors; `keel log dump` shows no keys; and the credentials
//! survive a restart of the whole cluster from snapshots plus log.

mod common;

use std::time::Duration;

use common::error_code as code;
use common::*;
use keel_metadata::scram::{ScramCredential, ScramMechanism};
use keel_metadata::ErrorCode;
use keel_proto::client::ControllerClient;
use keel_proto::convert::{scram_deletion_to_pb, scram_upsertion_to_pb};
use keel_proto::pb;
use serde_json::Value;

const LONG: Duration = Duration::from_secs(90);

fn tls_cluster() -> Cluster {
    Cluster::start(
        Spec::new(keel_bin(), CLUSTER_ID)
            .tls(true)
            .controller_flags(&["--snapshot-interval-entries", "1000000"]),
    )
    .expect("start a TLS cluster")
}

/// Runs `keel users <args> --output json` as user `who` of `c`, with
/// `stdin` on its standard input.
fn users_cli_as(c: &Cluster, who: &str, args: &[&str], stdin: &str) -> Ran {
    keel_as(c, who, &[&["users"], args].concat(), stdin)
}

/// Asserts that a `keel users` run failed (exit 1) and printed `error`
/// exactly once.
fn assert_refused_once(r: &Ran, error: &str) {
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(r.said().matches(error).count(), 1, "{}", r.stderr);
}

fn users_ok(c: &Cluster, args: &[&str], stdin: &str) -> Value {
    let r = users_cli_as(c, "admin", args, stdin);
    assert_eq!(r.code, 0, "keel users {args:?}: {}", r.stderr);
    r.json()
}

/// `keel users list` as the admin: (user, mechanism, iterations), in order;
/// checks that nothing but mechanisms and iterations is shown.
fn listed(c: &Cluster) -> Vec<(String, String, u64)> {
    let v = users_ok(c, &["list"], "");
    let mut out = Vec::new();
    for u in v["users"].as_array().expect("users") {
        for cred in u["credentials"].as_array().expect("credentials") {
            let mut keys: Vec<&String> = cred.as_object().unwrap().keys().collect();
            keys.sort();
            assert_eq!(keys, ["iterations", "mechanism"], "{v}");
            out.push((
                u["user"].as_str().unwrap().to_string(),
                cred["mechanism"].as_str().unwrap().to_string(),
                cred["iterations"].as_u64().unwrap(),
            ));
        }
    }
    out
}

fn row(user: &str, mechanism: &str, iterations: u64) -> (String, String, u64) {
    (user.into(), mechanism.into(), iterations)
}

/// The request setting `user`'s SHA-256 credential to `password`.
fn upsertion(user: &str, password: &str, iterations: u32) -> pb::ScramCredentialUpsertion {
    let salt = b"a salt of the test, not random!!";
    let m = ScramMechanism::Sha256;
    let salted =
        ScramCredential::salted_password(m, password.as_bytes(), salt, iterations).unwrap();
    scram_upsertion_to_pb(user, m, iterations, salt, &salted)
}

async fn alter(
    client: &ControllerClient,
    req: pb::AlterUserScramCredentialsRequest,
) -> pb::AlterUserScramCredentialsResponse {
    client
        .admin_write(|mut c| {
            let req = req.clone();
            async move { c.alter_user_scram_credentials(req).await }
        })
        .await
        .expect("alter answered")
}

async fn describe(
    client: &ControllerClient,
    users: &[&str],
) -> pb::DescribeUserScramCredentialsResponse {
    let req = pb::DescribeUserScramCredentialsRequest {
        users: users.iter().map(|u| u.to_string()).collect(),
    };
    client
        .admin(|mut c| {
            let req = req.clone();
            async move { c.describe_user_scram_credentials(req).await }
        })
        .await
        .expect("describe answered")
}

/// `keel log dump` of controller `i` (stopped), as text and as JSON.
fn log_dump(c: &Cluster, i: usize) -> (String, String) {
    let dir = c.controller(i).data_dir.clone();
    let run = |json: bool| {
        let mut cmd = std::process::Command::new(keel_bin());
        cmd.args(["log", "dump", "--data-dir"]).arg(&dir);
        if json {
            cmd.args(["-o", "json"]);
        }
        let out = cmd.output().expect("run keel log dump");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    (run(false), run(true))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_set_listed_deleted_guarded_and_kept_across_a_restart() {
    let mut c = tls_cluster();
    c.wait_active(LONG).await.unwrap();
    let admin = client(&c);

    // alice with both mechanisms, the password on standard input.
    let v = users_ok(
        &c,
        &[
            "create",
            "--user",
            "alice",
            "--mechanism",
            "all",
            "--iterations",
            "8192",
            "--password-stdin",
        ],
        "alice-secret\n",
    );
    assert_eq!(v["user"], "alice", "{v}");
    assert_eq!(v["set"].as_array().map(Vec::len), Some(2), "{v}");
    // bob with the default mechanism, the password in a file.
    let pw = c.dir().join("bob.pw");
    std::fs::write(&pw, "bob-secret\n").unwrap();
    users_ok(
        &c,
        &[
            "create",
            "--user",
            "bob",
            "--password-file",
            pw.to_str().unwrap(),
        ],
        "",
    );
    assert_eq!(
        listed(&c),
        [
            row("alice", "SCRAM-SHA-256", 8192),
            row("alice", "SCRAM-SHA-512", 8192),
            row("bob", "SCRAM-SHA-512", 4096),
        ]
    );
    // Described by name: mechanisms and iterations; a user without
    // credentials is RESOURCE_NOT_FOUND.
    let d = describe(&admin, &["bob", "nobody"]).await;
    assert_eq!(code(&d.error), ErrorCode::None);
    assert_eq!(code(&d.results[0].error), ErrorCode::None);
    assert_eq!(
        d.results[0].credentials,
        [pb::ScramCredentialInfo {
            mechanism: pb::ScramMechanism::ScramSha512 as i32,
            iterations: 4096,
        }]
    );
    assert_eq!(code(&d.results[1].error), ErrorCode::ResourceNotFound);
    let r = users_cli_as(&c, "admin", &["list", "--user", "nobody"], "");
    assert_refused_once(&r, "RESOURCE_NOT_FOUND");

    // Bad items get Kafka's errors, each on its own; good ones go through.
    let req = pb::AlterUserScramCredentialsRequest {
        upsertions: vec![
            upsertion("carol", "pw", 4096),
            upsertion("dave", "pw", 4096),
            pb::ScramCredentialUpsertion {
                mechanism: 7,
                ..upsertion("erin", "pw", 4096)
            },
            pb::ScramCredentialUpsertion {
                iterations: 100,
                ..upsertion("frank", "pw", 4096)
            },
            upsertion("", "pw", 4096),
        ],
        deletions: vec![scram_deletion_to_pb("carol", ScramMechanism::Sha512)],
    };
    let r = alter(&admin, req).await;
    assert_eq!(code(&r.error), ErrorCode::None, "{:?}", r.error);
    let got: Vec<(&str, ErrorCode)> = r
        .results
        .iter()
        .map(|u| (u.user.as_str(), code(&u.error)))
        .collect();
    assert_eq!(
        got,
        [
            ("carol", ErrorCode::DuplicateResource),
            ("dave", ErrorCode::None),
            ("erin", ErrorCode::UnsupportedSaslMechanism),
            ("frank", ErrorCode::UnacceptableCredential),
            ("", ErrorCode::UnacceptableCredential),
            ("carol", ErrorCode::DuplicateResource),
        ]
    );

    // A user without ACLs may neither change nor see credentials, and
    // changes nothing.
    let before = listed(&c);
    assert!(before.contains(&row("dave", "SCRAM-SHA-256", 4096)));
    let mallory = user_client(&c, "mallory");
    let r = alter(
        &mallory,
        pb::AlterUserScramCredentialsRequest {
            upsertions: vec![upsertion("mallory", "pw", 4096)],
            deletions: vec![scram_deletion_to_pb("alice", ScramMechanism::Sha256)],
        },
    )
    .await;
    assert_eq!(code(&r.error), ErrorCode::ClusterAuthorizationFailed);
    assert!(r.results.is_empty());
    let d = describe(&mallory, &[]).await;
    assert_eq!(code(&d.error), ErrorCode::ClusterAuthorizationFailed);
    assert!(d.results.is_empty());
    // Through the CLI: the refusal printed once, exit 1.
    let r = users_cli_as(
        &c,
        "mallory",
        &["create", "--user", "mallory", "--password", "pw"],
        "",
    );
    assert_refused_once(&r, "CLUSTER_AUTHORIZATION_FAILED");
    let r = users_cli_as(&c, "mallory", &["list"], "");
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.said().contains("CLUSTER_AUTHORIZATION_FAILED"),
        "{}",
        r.stderr
    );
    assert_eq!(listed(&c), before);

    // Bad input to the CLI: a usage error, nothing sent.
    let r = users_cli_as(
        &c,
        "admin",
        &[
            "create",
            "--user",
            "x",
            "--iterations",
            "100",
            "--password",
            "pw",
        ],
        "",
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.said().contains("4096"), "{}", r.stderr);

    // Delete one mechanism; again is RESOURCE_NOT_FOUND.
    let v = users_ok(
        &c,
        &["delete", "--user", "alice", "--mechanism", "SCRAM-SHA-256"],
        "",
    );
    assert_eq!(v["deleted"], serde_json::json!(["SCRAM-SHA-256"]), "{v}");
    let r = users_cli_as(
        &c,
        "admin",
        &["delete", "--user", "alice", "--mechanism", "SCRAM-SHA-256"],
        "",
    );
    assert_refused_once(&r, "RESOURCE_NOT_FOUND");
    // Every credential of dave (the default), then nothing left to delete.
    users_ok(&c, &["delete", "--user", "dave"], "");
    let r = users_cli_as(&c, "admin", &["delete", "--user", "dave"], "");
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.said().contains("RESOURCE_NOT_FOUND"), "{}", r.stderr);

    // Each committed change was logged once by the active controller,
    // with who made it; never a key.
    let logs = c.log_tails(100_000);
    let changes: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("SCRAM credential changed"))
        .collect();
    // alice x2, bob, dave, alice's SHA-256 removed, dave removed.
    assert_eq!(changes.len(), 6, "{changes:#?}");
    assert!(
        changes
            .iter()
            .all(|l| l.contains("User:admin") && !l.contains("stored_key")),
        "{changes:#?}"
    );

    // Everything so far lives only in the snapshots; carol comes after.
    snapshot_all(&c).await;
    users_ok(
        &c,
        &["create", "--user", "carol", "--password", "carol-secret"],
        "",
    );
    let expected = [
        row("alice", "SCRAM-SHA-512", 8192),
        row("bob", "SCRAM-SHA-512", 4096),
        row("carol", "SCRAM-SHA-512", 4096),
    ];
    assert_eq!(listed(&c), expected);

    // The whole cluster stops; the log shows carol's credential without
    // its salt or keys.
    for i in 0..3 {
        c.controller_mut(i).kill();
    }
    let dumps: Vec<(String, String)> = (0..3).map(|i| log_dump(&c, i)).collect();
    for (text, json) in &dumps {
        for secret in ["salt", "stored_key", "server_key"] {
            assert!(!text.contains(secret), "{secret} in the dump:\n{text}");
            assert!(!json.contains(secret), "{secret} in the JSON dump:\n{json}");
        }
    }
    // A controller holding carol's entry (a majority does).
    let (text, json) = dumps
        .iter()
        .find(|(text, _)| text.contains("UserScramCredential"))
        .unwrap_or_else(|| panic!("no credential record in any dump:\n{}", dumps[0].0));
    let line = text
        .lines()
        .find(|l| l.contains("UserScramCredential"))
        .expect("a credential line");
    assert!(
        line.contains("carol") && line.contains("SCRAM-SHA-512"),
        "{line}"
    );
    assert!(line.contains("iterations: 4096"), "{line}");
    let d: Value = serde_json::from_str(json).expect("log dump JSON");
    let record = d["entries"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| e["records"].as_array().unwrap())
        .find(|r| r.get("UserScramCredential").is_some())
        .expect("the credential record");
    assert_eq!(
        record["UserScramCredential"],
        serde_json::json!({ "user": "carol", "mechanism": "SCRAM-SHA-512", "iterations": 4096 })
    );

    // Restarted from snapshot plus log: the same credentials.
    for i in 0..3 {
        c.controller_mut(i).start().unwrap();
    }
    c.wait_active(LONG).await.unwrap();
    assert_eq!(listed(&c), expected);
    c.check_alive().unwrap();
}
