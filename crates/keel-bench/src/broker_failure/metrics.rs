//! The active controller's Prometheus metrics, scraped before and after a
//! fence: the event queue's p99 across it, the commit p99 and the longest
//! event.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::anyhow;
use prometheus_parse::{Scrape, Value as Metric};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The event loop's queue time, per event kind.
const QUEUE: &str = "keel_controller_event_queue_time_seconds";

/// One scrape of a controller's metrics.
pub struct Metrics(Scrape);

/// GETs `/metrics` from `addr`. The exporter speaks plain HTTP/1.1 and
/// closes the connection after the answer, so a request line and a read
/// to the end are all it takes.
pub async fn scrape(addr: SocketAddr) -> anyhow::Result<Metrics> {
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        let req = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        anyhow::Ok(String::from_utf8_lossy(&buf).into_owned())
    };
    let text = tokio::time::timeout(Duration::from_secs(5), fut)
        .await
        .map_err(|_| anyhow!("scrape of {addr} timed out"))??;
    let body = text.split_once("\r\n\r\n").map_or(&*text, |(_, b)| b);
    parse(body)
}

/// Parses the Prometheus text format.
pub fn parse(body: &str) -> anyhow::Result<Metrics> {
    Ok(Metrics(Scrape::parse(
        body.lines().map(|l| Ok(l.to_string())),
    )?))
}

impl Metrics {
    /// A plain sample (`<name>{kind="..."}`, e.g. a summary's `_count`).
    fn plain(&self, name: &str, kind: &str) -> f64 {
        self.0
            .samples
            .iter()
            .find(|s| s.metric == name && s.labels.get("kind") == Some(kind))
            .and_then(|s| match s.value {
                Metric::Counter(v) | Metric::Gauge(v) | Metric::Untyped(v) => Some(v),
                _ => None,
            })
            .unwrap_or(0.0)
    }

    /// Quantile `q` of summary `name`, per label set's `kind`.
    fn quantiles(&self, name: &str, q: f64) -> Vec<(String, f64)> {
        self.0
            .samples
            .iter()
            .filter(|s| s.metric == name)
            .filter_map(|s| match &s.value {
                Metric::Summary(qs) => qs.iter().find(|c| c.quantile == q).map(|c| {
                    let kind = s.labels.get("kind").unwrap_or("-").to_string();
                    (kind, c.count)
                }),
                _ => None,
            })
            .collect()
    }

    /// Histogram `name`'s bucket counts by upper bound, all label sets
    /// together.
    fn buckets(&self, name: &str) -> BTreeMap<u64, f64> {
        let mut m = BTreeMap::new();
        for s in self.0.samples.iter().filter(|s| s.metric == name) {
            if let Metric::Histogram(hs) = &s.value {
                for h in hs {
                    *m.entry(h.less_than.to_bits()).or_insert(0.0) += h.count;
                }
            }
        }
        m
    }

    /// Max of summary quantile `q` of `name` over all label sets, in ms.
    pub fn summary_max_ms(&self, name: &str, q: f64) -> Option<f64> {
        self.quantiles(name, q)
            .into_iter()
            .map(|(_, v)| v * 1000.0)
            .reduce(f64::max)
    }
}

/// Quantile `q` (0-1) of histogram `name` over what was observed between
/// the two scrapes, in ms: the upper bound of the bucket it falls in (for
/// `q = 1`, a bound on the longest observation). Falls back to the
/// summary's quantile after the fence for an exporter that renders
/// summaries. `None` without observations.
pub fn window_quantile_ms(before: &Metrics, after: &Metrics, name: &str, q: f64) -> Option<f64> {
    match bucket_deltas(before, after, name) {
        None => after.summary_max_ms(name, q),
        Some((deltas, total)) => quantile_ms(&deltas, total, q),
    }
}

/// Histogram `name`'s bucket counts observed between two scrapes, by upper
/// bound (ascending; +Inf last), with their total; `None` when the
/// exporter renders no histogram of that name.
fn bucket_deltas(before: &Metrics, after: &Metrics, name: &str) -> Option<(Vec<(f64, f64)>, f64)> {
    let (b0, b1) = (before.buckets(name), after.buckets(name));
    if b1.is_empty() {
        return None;
    }
    // Positive bounds order as their bits do; +Inf comes last.
    let deltas: Vec<(f64, f64)> = b1
        .iter()
        .map(|(le, v)| (f64::from_bits(*le), v - b0.get(le).copied().unwrap_or(0.0)))
        .collect();
    let total = deltas.last().map_or(0.0, |d| d.1);
    Some((deltas, total))
}

/// The upper bound (ms) of the bucket quantile `q` falls in; `None`
/// without observations.
fn quantile_ms(deltas: &[(f64, f64)], total: f64, q: f64) -> Option<f64> {
    if total <= 0.0 {
        return None;
    }
    deltas
        .iter()
        .find(|(_, c)| *c >= q * total)
        .map(|(le, _)| le * 1000.0)
}

/// Event-queue p99 in ms across the fence, from two scrapes: bucket deltas
/// if the exporter renders a histogram, else the summary's 0.99 quantile
/// after the fence, the max over kinds with events across the fence.
/// Returns (p99 ms, method, per-kind detail).
pub fn queue_p99(before: &Metrics, after: &Metrics) -> (Option<f64>, &'static str, Value) {
    if let Some((deltas, total)) = bucket_deltas(before, after, QUEUE) {
        if total <= 0.0 {
            return (None, "histogram bucket deltas (no events)", json!({}));
        }
        let p99 = quantile_ms(&deltas, total, 0.99);
        return (
            p99,
            "histogram bucket deltas across the fence, all kinds (upper bucket bound)",
            json!({"events": total}),
        );
    }
    let mut detail = serde_json::Map::new();
    let mut worst: Option<f64> = None;
    for (kind, p99) in after.quantiles(QUEUE, 0.99) {
        let ms = p99 * 1000.0;
        let (count, sum) = (format!("{QUEUE}_count"), format!("{QUEUE}_sum"));
        let n = after.plain(&count, &kind) - before.plain(&count, &kind);
        let mean_ms = if n > 0.0 {
            (after.plain(&sum, &kind) - before.plain(&sum, &kind)) / n * 1000.0
        } else {
            0.0
        };
        // Kinds with no event across the fence only carry older samples.
        if n > 0.0 {
            worst = Some(worst.map_or(ms, |w: f64| w.max(ms)));
        }
        detail.insert(
            kind,
            json!({"p99_ms": (ms * 1000.0).round() / 1000.0, "events_in_window": n, "mean_ms_in_window": (mean_ms * 1000.0).round() / 1000.0}),
        );
    }
    (
        worst,
        "summary quantile 0.99 rendered by the exporter after the fence, max over the event kinds that had events across the fence; the exporter's summary window is longer than the fence, so it also holds earlier samples of those kinds (per-kind means across the fence from _sum/_count deltas are in event_queue_by_kind_trials)",
        Value::Object(detail),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_quantile_comes_from_the_bucket_deltas_between_two_scrapes() {
        let h = |c: [u32; 4]| {
            format!(
                "# TYPE keel_controller_commit_latency_seconds histogram\n\
                 keel_controller_commit_latency_seconds_bucket{{le=\"0.001\"}} {}\n\
                 keel_controller_commit_latency_seconds_bucket{{le=\"0.01\"}} {}\n\
                 keel_controller_commit_latency_seconds_bucket{{le=\"0.1\"}} {}\n\
                 keel_controller_commit_latency_seconds_bucket{{le=\"+Inf\"}} {}\n\
                 keel_controller_commit_latency_seconds_sum 1\n\
                 keel_controller_commit_latency_seconds_count {}\n",
                c[0], c[1], c[2], c[3], c[3]
            )
        };
        let name = "keel_controller_commit_latency_seconds";
        // Before: 100 fast ones. Across the window: 10 more fast, 89 under
        // 10 ms, 1 under 100 ms.
        let before = parse(&h([100, 100, 100, 100])).unwrap();
        let after = parse(&h([110, 199, 200, 200])).unwrap();
        assert_eq!(window_quantile_ms(&before, &after, name, 0.5), Some(10.0));
        assert_eq!(window_quantile_ms(&before, &after, name, 1.0), Some(100.0));
        assert_eq!(window_quantile_ms(&after, &after, name, 0.99), None);
    }

    #[test]
    fn the_queue_p99_comes_from_the_kinds_with_events_across_the_fence() {
        let before = parse("").unwrap();
        let after = parse(
            "# TYPE keel_controller_event_queue_time_seconds summary\n\
             keel_controller_event_queue_time_seconds{kind=\"heartbeat\",quantile=\"0.99\"} 0.012\n\
             keel_controller_event_queue_time_seconds{kind=\"heartbeat\",quantile=\"1\"} 0.02\n\
             keel_controller_event_queue_time_seconds_sum{kind=\"heartbeat\"} 0.024\n\
             keel_controller_event_queue_time_seconds_count{kind=\"heartbeat\"} 3\n\
             keel_controller_event_queue_time_seconds{kind=\"idle\",quantile=\"0.99\"} 0.5\n",
        )
        .unwrap();
        let (p99, _, detail) = queue_p99(&before, &after);
        assert_eq!(p99.map(|x| (x * 1000.0).round()), Some(12_000.0));
        assert_eq!(detail["heartbeat"]["events_in_window"], 3.0);
        assert_eq!(detail["heartbeat"]["mean_ms_in_window"], 8.0);
        assert_eq!(
            after.summary_max_ms("keel_controller_event_queue_time_seconds", 1.0),
            Some(20.0)
        );
    }

    #[test]
    fn histogram_buckets_give_the_p99_of_the_events_between_two_scrapes() {
        let text = |a: u32, b: u32| {
            format!(
                "# TYPE keel_controller_event_queue_time_seconds histogram\n\
                 keel_controller_event_queue_time_seconds_bucket{{kind=\"k\",le=\"0.001\"}} {a}\n\
                 keel_controller_event_queue_time_seconds_bucket{{kind=\"k\",le=\"0.01\"}} {b}\n\
                 keel_controller_event_queue_time_seconds_bucket{{kind=\"k\",le=\"+Inf\"}} {b}\n"
            )
        };
        let (p99, _, _) = queue_p99(
            &parse(&text(10, 10)).unwrap(),
            &parse(&text(60, 110)).unwrap(),
        );
        assert_eq!(p99, Some(10.0), "50 of the 100 new events took up to 10 ms");
    }
}
