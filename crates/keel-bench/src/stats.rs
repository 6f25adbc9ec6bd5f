//! Percentiles, medians and machine facts.

use keel_testkit::probe;
use serde_json::{json, Value};

/// Raises this process's open-file limit toward `want` files
/// ([`keel_tls::admission::raise_open_files`]); processes started
/// afterwards (a bench's controllers) inherit it. Returns the soft limit
/// in force (`None`: it cannot be read).
pub fn raise_fd_limit(want: u64) -> Option<u64> {
    keel_tls::admission::raise_open_files(Some(want))
        .ok()
        .map(|f| f.now)
}

/// Nearest-rank percentile (`p` in 0..=100) of unsorted samples; 0 if empty.
pub fn percentile(samples: &[f64], p: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    let mut v = samples.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    percentile_sorted(&v, p)
}

/// Nearest-rank percentile of sorted samples.
pub fn percentile_sorted(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Median (mean of the two middle values for an even count); 0 if empty.
pub fn median(samples: &[f64]) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    let mut v = samples.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A JSON value as a table cell (so width and alignment apply).
pub fn cell(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// Rounds to 3 decimals for JSON and tables.
pub fn r3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Rounds to 1 decimal.
pub fn r1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// The `leadership_changes` of every part (trial, level, size) added up;
/// a part whose count is unknown (`null`) adds nothing.
pub fn leadership_changes_total(parts: &[Value]) -> u64 {
    parts
        .iter()
        .filter_map(|p| p["leadership_changes"].as_u64())
        .sum()
}

/// Latency summary of samples in milliseconds.
pub fn latency_json(ms: &[f64]) -> Value {
    let mut v = ms.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    json!({
        "samples": v.len(),
        "p50_ms": r3(percentile_sorted(&v, 50.0)),
        "p99_ms": r3(percentile_sorted(&v, 99.0)),
        "max_ms": r3(v.last().copied().unwrap_or(0.0)),
    })
}

/// nproc, CPU model, total memory, kernel, build profile.
pub fn machine() -> Value {
    let nproc = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    json!({
        "nproc": nproc,
        "cpu_model": probe::cpu_model().unwrap_or_else(|| "unknown".into()),
        "mem_total_bytes": probe::mem_total_bytes(),
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).unwrap_or_default(),
        "build": if cfg!(debug_assertions) { "debug" } else { "release" },
        "keel_version": env!("CARGO_PKG_VERSION"),
        "load_generator_threads": tokio::runtime::Handle::try_current()
            .map(|h| h.metrics().num_workers())
            .ok(),
    })
}

/// 4 KiB syncs the disk probe times.
const PROBE_SMALL_SYNCS: usize = 200;
/// Wall-time bound of the probe's large-write part.
const PROBE_LARGE_SECS: f64 = 1.0;
/// Upper bound on the probe's large writes.
const PROBE_LARGE_MAX: usize = 2_000;
/// Bytes of each large write (a 1,000-record bulk entry is ~130 KB).
const PROBE_LARGE_BYTES: usize = 128 * 1024;

/// What this machine's disk does under the kind of writes a commit makes,
/// measured in a scratch file in `dir` (the filesystem the clusters' data
/// dirs live on): `fdatasync_4k_*` times a 4 KiB overwrite followed by
/// `fdatasync` of an already written file (a log segment the store has
/// filled ahead, so no file metadata rides along); `sync_128k_*` appends
/// 128 KiB and syncs, repeatedly for up to a second (a bulk entry's
/// write). The numbers let figures from different hosts be compared: a
/// durable commit cannot finish faster than one sync. Errors are reported
/// in the JSON (`error`), never fatal.
pub fn disk_probe(dir: &std::path::Path) -> Value {
    match probe(dir) {
        Ok(v) => v,
        Err(e) => json!({ "error": e.to_string() }),
    }
}

/// One table line for a [`disk_probe`] result.
pub fn disk_probe_line(v: &Value) -> String {
    if let Some(e) = v["error"].as_str() {
        return format!("host disk probe failed: {e}\n");
    }
    format!(
        "host disk (probe before the run): 4 KiB overwrite + fdatasync p50 {} µs, p99 {} µs; 128 KiB append + fdatasync {} MB/s ({} syncs/s)\n",
        cell(&v["fdatasync_4k_p50_us"]),
        cell(&v["fdatasync_4k_p99_us"]),
        cell(&v["sync_128k_mb_per_s"]),
        cell(&v["sync_128k_per_s"])
    )
}

fn probe(dir: &std::path::Path) -> std::io::Result<Value> {
    use std::os::unix::fs::FileExt;
    use std::time::Instant;
    let scratch = tempfile::tempfile_in(dir)?;
    let page = vec![0x5au8; 4096];
    let filled = vec![0u8; PROBE_SMALL_SYNCS * page.len()];
    scratch.write_all_at(&filled, 0)?;
    scratch.sync_all()?;
    let mut small_us = Vec::with_capacity(PROBE_SMALL_SYNCS);
    for i in 0..PROBE_SMALL_SYNCS {
        let t = Instant::now();
        scratch.write_all_at(&page, (i * page.len()) as u64)?;
        scratch.sync_data()?;
        small_us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let large = tempfile::tempfile_in(dir)?;
    let chunk = vec![0xa5u8; PROBE_LARGE_BYTES];
    let started = Instant::now();
    let mut writes = 0usize;
    while writes < PROBE_LARGE_MAX && started.elapsed().as_secs_f64() < PROBE_LARGE_SECS {
        large.write_all_at(&chunk, (writes * chunk.len()) as u64)?;
        large.sync_data()?;
        writes += 1;
    }
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    Ok(json!({
        "dir": dir.display().to_string(),
        "fdatasync_4k_p50_us": r1(percentile(&small_us, 50.0)),
        "fdatasync_4k_p99_us": r1(percentile(&small_us, 99.0)),
        "fdatasync_4k_samples": PROBE_SMALL_SYNCS,
        "sync_128k_mb_per_s": r1((writes * PROBE_LARGE_BYTES) as f64 / secs / 1e6),
        "sync_128k_per_s": r1(writes as f64 / secs),
    }))
}

/// Seconds since the Unix epoch (for the `started_at` stamp).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
        assert_eq!(percentile(&[], 99.0), 0.0);
        assert_eq!(percentile(&[7.0], 1.0), 7.0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn machine_has_the_contract_keys() {
        let m = machine();
        for k in ["nproc", "cpu_model", "mem_total_bytes"] {
            assert!(m.get(k).is_some(), "{k}");
        }
    }

    #[test]
    fn the_disk_probe_times_syncs_and_reports_a_bad_dir_as_an_error() {
        let dir = tempfile::tempdir().expect("dir");
        let v = disk_probe(dir.path());
        assert!(v["fdatasync_4k_p50_us"].as_f64().expect("p50") > 0.0, "{v}");
        assert!(v["fdatasync_4k_p99_us"].as_f64() >= v["fdatasync_4k_p50_us"].as_f64());
        assert!(v["sync_128k_per_s"].as_f64().expect("rate") > 0.0, "{v}");
        // The scratch files are anonymous: nothing is left behind.
        assert_eq!(std::fs::read_dir(dir.path()).expect("ls").count(), 0);
        let v = disk_probe(&dir.path().join("missing"));
        assert!(v["error"].is_string(), "{v}");
    }
}
