//! Prints (does not assert) what one durable sled write costs on this
//! machine: the floor under every Raft append and vote.

use std::time::Instant;

#[tokio::test]
async fn measure_sled_flush_cost() {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::open(dir.path().join("db")).unwrap();
    let tree = db.open_tree("logs").unwrap();
    let record = vec![7u8; 200];
    let rounds = 500u64;
    // Warm up the files.
    for i in 0..20u64 {
        tree.insert(i.to_be_bytes(), record.clone()).unwrap();
        db.flush_async().await.unwrap();
    }
    let started = Instant::now();
    for i in 0..rounds {
        tree.insert((1_000 + i).to_be_bytes(), record.clone())
            .unwrap();
        db.flush_async().await.unwrap();
    }
    let per_flush = started.elapsed() / rounds as u32;
    println!(
        "sled insert(200 B) + flush_async: {per_flush:.2?} per durable write ({rounds} rounds)"
    );
}
