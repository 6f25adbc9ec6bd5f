//! The standard Prometheus process metrics (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, `process_open_fds`, ...), read from
//! `/proc/self` at scrape time: the names node dashboards and alerts
//! everywhere already use. Rendered as text beside the recorder's output
//! (the `metrics` crate's counters are integers; CPU seconds are not).

use std::fmt::Write;

use crate::metric_names::{Kind, PROCESS_CATALOG};

/// This process's figures in Prometheus text format. A figure `/proc`
/// cannot give (another OS, a restricted mount) is left out.
pub fn render() -> String {
    let mut values: Vec<(&str, f64)> = Vec::new();
    if let Ok(me) = procfs::process::Process::myself() {
        if let Ok(stat) = me.stat() {
            let ticks = procfs::ticks_per_second() as f64;
            values.push((
                "process_cpu_seconds_total",
                (stat.utime + stat.stime) as f64 / ticks,
            ));
            values.push((
                "process_resident_memory_bytes",
                (stat.rss * procfs::page_size()) as f64,
            ));
            values.push(("process_virtual_memory_bytes", stat.vsize as f64));
            values.push(("process_threads", stat.num_threads as f64));
            if let Ok(boot) = procfs::boot_time_secs() {
                values.push((
                    "process_start_time_seconds",
                    boot as f64 + stat.starttime as f64 / ticks,
                ));
            }
        }
        if let Ok(n) = me.fd_count() {
            values.push(("process_open_fds", n as f64));
        }
        if let Ok(limits) = me.limits() {
            if let procfs::process::LimitValue::Value(v) = limits.max_open_files.soft_limit {
                values.push(("process_max_fds", v as f64));
            }
        }
    }
    let mut out = String::new();
    for (name, value) in values {
        let Some((_, kind, help)) = PROCESS_CATALOG.iter().find(|(n, _, _)| *n == name) else {
            continue;
        };
        let kind = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_process_metric_is_rendered_with_help_and_type() {
        let text = render();
        for (name, _, _) in PROCESS_CATALOG {
            assert!(text.contains(&format!("# HELP {name} ")), "{name}: {text}");
            assert!(text.contains(&format!("# TYPE {name} ")), "{name}: {text}");
        }
        let rss = text
            .lines()
            .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
            .and_then(|v| v.parse::<f64>().ok())
            .expect("rss line");
        assert!(rss > 0.0, "{text}");
    }
}
