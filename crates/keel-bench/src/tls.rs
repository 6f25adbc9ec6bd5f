//! `--tls` in `commit` and `compare`: Keel measured in the same run over
//! plaintext and over mutual TLS (two quorums, their levels interleaved so
//! machine noise hits both alike), and the comparison of the two per
//! writer count: ops/s and the servers' CPU per op, and TLS ÷ plaintext of
//! each.

use serde_json::{json, Value};

use crate::stats::{cell, r3};

/// The writer count the aim is stated at.
pub const AIM_WRITERS: usize = 64;
/// The aim: TLS ÷ plaintext of the servers' CPU per op at [`AIM_WRITERS`].
pub const AIM_CPU_PER_OP_RATIO: f64 = 1.25;

/// `a ÷ b`; `None` when either is missing or not finite, or `b` is not
/// positive.
pub fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 && a.is_finite() && b.is_finite() => Some(a / b),
        _ => None,
    }
}

/// The comparison at one writer count: `plaintext` and `tls` are the two
/// quorums' figures (each with `ops_per_s` and `server_cpu_us_per_op`).
pub fn comparison(writers: usize, plaintext: Value, tls: Value) -> Value {
    let f = |v: &Value, k: &str| v[k].as_f64();
    let cpu = ratio(
        f(&tls, "server_cpu_us_per_op"),
        f(&plaintext, "server_cpu_us_per_op"),
    );
    let ops = ratio(f(&tls, "ops_per_s"), f(&plaintext, "ops_per_s"));
    json!({
        "writers": writers,
        "plaintext": plaintext,
        "tls": tls,
        "cpu_per_op_ratio": cpu.map(r3),
        "ops_per_s_ratio": ops.map(r3),
    })
}

/// The top-level `tls` field: how the two were measured and the figures
/// at [`AIM_WRITERS`] writers (`null` when that count was not measured).
pub fn summary_json(comparisons: &[Value], rounds: usize, order: &str) -> Value {
    let at = comparisons
        .iter()
        .find(|c| c["writers"].as_u64() == Some(AIM_WRITERS as u64))
        .map(|c| {
            let cpu = c["cpu_per_op_ratio"].as_f64();
            json!({
                "cpu_per_op_ratio": c["cpu_per_op_ratio"],
                "ops_per_s_ratio": c["ops_per_s_ratio"],
                "within_aim": cpu.map(|r| r <= AIM_CPU_PER_OP_RATIO),
            })
        });
    json!({
        "rounds": rounds,
        "order": order,
        "clients": "the writers connect over mutual TLS with the cluster's `admin` user certificate (rustls); one connection per writer (or one shared, as --connections says), opened before the level starts and kept for it",
        "servers": "two 3-controller quorums of this binary, one plaintext (--allow-plaintext) and one with --tls-cert/--tls-key/--tls-ca, same flags otherwise; CPU per op is utime+stime of the quorum's 3 processes over the level divided by its ops",
        "aim": format!("TLS costs at most {:.0}% more server CPU per op than plaintext at {AIM_WRITERS} writers", (AIM_CPU_PER_OP_RATIO - 1.0) * 100.0),
        "at_64_writers": at,
    })
}

/// Table lines for the comparisons.
pub fn table(comparisons: &[Value], rounds: usize) -> String {
    let mut t = format!(
        "TLS vs plaintext (Keel, same run, medians of {rounds} interleaved round(s); srv µs/op = CPU of the 3 controllers per op)\n"
    );
    let row = |c: [&str; 7]| {
        format!(
            "{:>10} {:>12} {:>12} {:>9} {:>15} {:>15} {:>12}\n",
            c[0], c[1], c[2], c[3], c[4], c[5], c[6]
        )
    };
    t += &row([
        "writers",
        "plain ops/s",
        "tls ops/s",
        "ops ratio",
        "plain srv µs/op",
        "tls srv µs/op",
        "CPU/op ratio",
    ]);
    for c in comparisons {
        t += &row([
            &cell(&c["writers"]),
            &cell(&c["plaintext"]["ops_per_s"]),
            &cell(&c["tls"]["ops_per_s"]),
            &cell(&c["ops_per_s_ratio"]),
            &cell(&c["plaintext"]["server_cpu_us_per_op"]),
            &cell(&c["tls"]["server_cpu_us_per_op"]),
            &cell(&c["cpu_per_op_ratio"]),
        ]);
    }
    t
}

/// The summary-line part: the ratios at [`AIM_WRITERS`] writers, else at
/// the largest count measured.
pub fn summary_line(comparisons: &[Value]) -> String {
    let c = comparisons
        .iter()
        .find(|c| c["writers"].as_u64() == Some(AIM_WRITERS as u64))
        .or_else(|| comparisons.iter().max_by_key(|c| c["writers"].as_u64()));
    match c {
        Some(c) => format!(
            "TLS ÷ plaintext at {} writers: CPU/op {}, ops/s {}",
            cell(&c["writers"]),
            cell(&c["cpu_per_op_ratio"]),
            cell(&c["ops_per_s_ratio"])
        ),
        None => "TLS: nothing measured".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_are_tls_over_plaintext_and_absent_without_both() {
        let c = comparison(
            64,
            json!({ "ops_per_s": 1000.0, "server_cpu_us_per_op": 200.0 }),
            json!({ "ops_per_s": 900.0, "server_cpu_us_per_op": 240.0 }),
        );
        assert_eq!(c["cpu_per_op_ratio"].as_f64(), Some(1.2));
        assert_eq!(c["ops_per_s_ratio"].as_f64(), Some(0.9));
        let s = summary_json(std::slice::from_ref(&c), 3, "o");
        assert_eq!(s["at_64_writers"]["within_aim"], true);
        assert!(summary_line(&[c]).contains("CPU/op 1.2"));
        let none = comparison(
            1,
            json!({ "ops_per_s": null, "server_cpu_us_per_op": 0.0 }),
            json!({ "ops_per_s": 900.0, "server_cpu_us_per_op": 240.0 }),
        );
        assert_eq!(none["cpu_per_op_ratio"], Value::Null);
        assert_eq!(none["ops_per_s_ratio"], Value::Null);
        assert_eq!(summary_json(&[none], 1, "o")["at_64_writers"], Value::Null);
        assert_eq!(ratio(Some(f64::NAN), Some(1.0)), None);
    }
}
