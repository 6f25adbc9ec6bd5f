//! Backups end to end, through the `keel` binary: a three-controller
//! quorum with topics and configs is saved with `keel quorum snapshot
//! save`, stopped, and rebuilt from the file alone with `keel quorum
//! snapshot restore` into new data dirs; the restored quorum serves the
//! saved image (same hash) and takes new writes. Corrupt, truncated and
//! foreign backups, and a used data dir, are refused with their typed
//! error and leave the data dir as it was. Over TLS, only a cluster
//! administrator reads the image.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use keel_metadata::ErrorCode;
use keel_proto::client::ControllerClient;
use keel_proto::pb;
use serde_json::Value;

const LONG: Duration = Duration::from_secs(60);

/// `keel <args>`: (exit code, stdout, stderr).
fn keel(args: &[&str]) -> (i32, String, String) {
    run_text(
        Command::new(keel_bin())
            .args(args)
            .env_remove("KEEL_BOOTSTRAP"),
    )
}

/// `keel <args> -o json`, which must succeed.
fn keel_ok(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let (code, out, err) = keel(&all);
    assert_eq!(code, 0, "keel {args:?} failed: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("keel {args:?}: {e}: {out}"))
}

/// `keel quorum snapshot restore FILE ...` for node `id` into `dir`.
fn restore(file: &Path, dir: &Path, cluster_id: &str, id: u32, voters: &str) -> (i32, String) {
    let id = id.to_string();
    let (code, _, err) = keel(&[
        "quorum",
        "snapshot",
        "restore",
        file.to_str().unwrap(),
        "--data-dir",
        dir.to_str().unwrap(),
        "--cluster-id",
        cluster_id,
        "--node-id",
        &id,
        "--voters",
        voters,
    ]);
    (code, err)
}

/// Whether `dir` is absent or empty.
fn absent_or_empty(dir: &Path) -> bool {
    std::fs::read_dir(dir).map_or(true, |mut d| d.next().is_none())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_restored_from_a_backup_serves_the_saved_image_and_takes_writes() {
    // Set up: three controllers, stand-in brokers, topics and a config.
    let mut c = quorum(&[]);
    c.wait_active(LONG).await.unwrap();
    let cl = client(&c);
    for id in 1..=3 {
        register_fake_broker(&cl, CLUSTER_ID, id).await;
    }
    create_topic(&cl, "orders", 3, 3).await;
    create_topic(&cl, "audit", 1, 2).await;
    let set = admin::set_config("orders", "retention.ms".into(), "3600000".into());
    let altered = cl
        .admin(|mut x| {
            let req = set.clone();
            async move { x.incremental_alter_configs(req).await }
        })
        .await
        .unwrap();
    assert!(admin::alter_ok(&altered), "{altered:?}");
    let (converged, _) = c.wait_converged(0, LONG).await.unwrap();

    // Save through the CLI from one voter.
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join("meta.keelbak");
    let node = c.controller(1).address();
    let saved = keel_ok(&[
        "quorum",
        "snapshot",
        "save",
        file.to_str().unwrap(),
        "--allow-plaintext",
        "-b",
        &node,
    ]);
    let index = saved["index"].as_u64().unwrap();
    let hash = saved["image_hash"].as_str().unwrap().to_string();
    assert!(index >= converged, "saved {saved} before {converged}");
    assert_eq!(saved["cluster_id"], CLUSTER_ID);
    assert_eq!(hash.len(), 64, "{saved}");
    assert_eq!(saved["voters"], c.voters(), "{saved}");

    // The old quorum goes away for good.
    c.kill_all();
    let voters = c.voters();
    let dirs: Vec<_> = c.controllers().map(|n| n.data_dir.clone()).collect();
    for d in &dirs {
        std::fs::remove_dir_all(d).unwrap();
    }

    // Refusals: each leaves the target dir absent.
    let bytes = std::fs::read(&file).unwrap();
    let flipped = work.path().join("flipped.keelbak");
    let mut f = bytes.clone();
    let last = f.len() - 1;
    f[last] ^= 0x40;
    std::fs::write(&flipped, &f).unwrap();
    let truncated = work.path().join("truncated.keelbak");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    for (what, path, cluster, kind) in [
        ("a flipped byte", &flipped, CLUSTER_ID, "body_checksum"),
        ("a truncated file", &truncated, CLUSTER_ID, "truncated"),
        (
            "another cluster id",
            &file,
            "other-cluster",
            "wrong_cluster",
        ),
    ] {
        let (code, err) = restore(path, &dirs[0], cluster, 1, &voters);
        assert_ne!(code, 0, "{what} was restored");
        assert!(
            err.contains(&format!("error: {kind}:")),
            "{what}: expected {kind}: {err}"
        );
        assert!(absent_or_empty(&dirs[0]), "{what} left files behind");
    }
    std::fs::create_dir_all(&dirs[0]).unwrap();
    std::fs::write(dirs[0].join("keep-me"), b"x").unwrap();
    let (code, err) = restore(&file, &dirs[0], CLUSTER_ID, 1, &voters);
    assert_ne!(code, 0);
    assert!(err.contains("error: data_dir_not_empty:"), "{err}");
    assert_eq!(std::fs::read(dirs[0].join("keep-me")).unwrap(), b"x");
    std::fs::remove_dir_all(&dirs[0]).unwrap();

    // Restore every voter from the file into a new dir: node 1 with the
    // issue's flags alone (node id 1 and the backup's voters are the
    // defaults), the others naming theirs.
    for (i, d) in dirs.iter().enumerate() {
        let id = (i + 1).to_string();
        let mut args = vec![
            "quorum",
            "snapshot",
            "restore",
            file.to_str().unwrap(),
            "--data-dir",
            d.to_str().unwrap(),
            "--cluster-id",
            CLUSTER_ID,
        ];
        if i > 0 {
            args.extend(["--node-id", &id, "--voters", &voters]);
        }
        let r = keel_ok(&args);
        assert_eq!(
            (r["index"].as_u64(), r["image_hash"].as_str()),
            (Some(index), Some(hash.as_str()))
        );
    }

    // One voter alone cannot elect a leader: it serves the restored image
    // exactly as saved.
    c.controller_mut(0).start().unwrap();
    let deadline = tokio::time::Instant::now() + LONG;
    let alone = loop {
        if let Some(d) = c.describe_node(0, Duration::from_secs(5)).await {
            break d;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}",
            c.log_tails(30)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        (alone.last_applied_index, alone.image_hash.as_str()),
        (index, hash.as_str()),
        "{alone:?}"
    );
    assert_eq!(alone.snapshot.as_ref().map(|s| s.last_index), Some(index));

    // The whole quorum elects a leader above the backup's index and every
    // node converges on one image with the saved topics.
    c.controller_mut(1).start().unwrap();
    c.controller_mut(2).start().unwrap();
    let (after, _) = c.wait_converged(index, LONG).await.unwrap();
    assert!(after > index, "no new entry after the restore ({after})");
    let cl = client(&c);
    let names = topic_names(&cl).await;
    assert_eq!(names, vec!["audit".to_string(), "orders".to_string()]);

    // It takes new writes.
    create_topic(&cl, "after-restore", 1, 3).await;
    c.wait_converged(after + 1, LONG).await.unwrap();
    let mut names = topic_names(&cl).await;
    names.sort();
    assert_eq!(names, vec!["after-restore", "audit", "orders"]);
}

/// ReadSnapshot from controller 0 as `transport` speaks: the first message
/// (error or header fields) with every chunk of the stream joined onto it.
async fn read_snapshot(c: &Cluster, transport: keel_tls::Transport) -> pb::ReadSnapshotResponse {
    let single = ControllerClient::new(vec![c.controller(0).address()])
        .with_timeouts(Duration::from_secs(30), Duration::from_secs(60))
        .with_transport(transport);
    single
        .admin(|mut x| async move {
            let mut s = x
                .read_snapshot(pb::ReadSnapshotRequest {})
                .await?
                .into_inner();
            let mut first = s.message().await?.unwrap_or_default();
            while let Some(m) = s.message().await? {
                first.chunk.extend_from_slice(&m.chunk);
            }
            Ok(tonic::Response::new(first))
        })
        .await
        .expect("ReadSnapshot answered")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_cluster_administrator_reads_a_backup() {
    let mut c =
        Cluster::start(Spec::new(keel_bin(), CLUSTER_ID).tls(true)).expect("start a TLS quorum");
    c.wait_active(LONG).await.unwrap();
    let bob = c
        .transport_as(&keel_tls::Identity::user(CLUSTER_ID, "bob"))
        .expect("a certificate for bob");
    let refused = read_snapshot(&c, bob).await;
    assert_eq!(
        refused.error.as_ref().map(|e| e.code),
        Some(ErrorCode::ClusterAuthorizationFailed as i32),
        "{refused:?}"
    );
    assert!(
        refused.chunk.is_empty() && refused.index == 0,
        "{refused:?}"
    );
    let read = read_snapshot(&c, c.transport().clone()).await;
    assert!(read.error.is_none(), "{:?}", read.error);
    assert_eq!(read.cluster_id, CLUSTER_ID);
    assert!(read.index > 0);
    assert_eq!(read.chunk.len() as u64, read.image_bytes);
    // The bytes are the image at that index, with the hash sent.
    let image = keel_metadata::MetadataImage::decode(&read.chunk).unwrap();
    assert_eq!(
        (image.offset(), image.hash()),
        (read.index, read.image_hash)
    );
}
