//! `report.html`: latency of every operation over time colored by outcome,
//! throughput over time, fault windows shaded and labelled (SVG, plotters).

use std::collections::BTreeMap;

use plotters::prelude::*;
use serde_json::{json, Value};

use crate::history::{OpRecord, Outcome};
use crate::nemesis::FaultEvent;

fn color(o: Outcome) -> RGBColor {
    match o {
        Outcome::Ok => RGBColor(46, 139, 87),
        Outcome::Fail => RGBColor(30, 100, 200),
        Outcome::Info => RGBColor(220, 50, 47),
    }
}

fn fault_color(i: usize) -> RGBAColor {
    let palette = [
        RGBColor(255, 165, 0),
        RGBColor(186, 85, 211),
        RGBColor(255, 99, 71),
        RGBColor(100, 149, 237),
    ];
    palette[i % palette.len()].mix(0.18)
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

/// A chart's coordinates: seconds across, a value up.
type Plot =
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>;

/// Width of a chart's data area in pixels: the SVG's 1,100 less its
/// margins and the y labels.
const PLOT_WIDTH_PX: f64 = 1_030.0;

/// About how wide one character of a fault label is, in pixels (11 px
/// sans-serif), and the gap kept after a label.
const LABEL_CHAR_PX: f64 = 6.5;
const LABEL_GAP_PX: f64 = 8.0;

/// Rows of fault labels under a chart's top edge; a label that fits in
/// none is left out (the fault is still shaded, and listed in the table).
const LABEL_ROWS: usize = 5;

/// Height of one row of labels, in pixels.
const LABEL_ROW_PX: f64 = 13.0;

/// The row of each fault's label on a chart `end_s` seconds wide, so that
/// no two labels in a row overlap: in the order the faults start, each
/// label takes the first row whose last label ended before it begins;
/// `None` where every row is taken.
fn label_rows(faults: &[FaultEvent], end_s: f64) -> Vec<Option<usize>> {
    let s_per_px = end_s / PLOT_WIDTH_PX;
    let mut order: Vec<usize> = (0..faults.len()).collect();
    order.sort_by(|&a, &b| faults[a].start_ms.total_cmp(&faults[b].start_ms));
    let mut row_ends: Vec<f64> = Vec::new();
    let mut rows = vec![None; faults.len()];
    for i in order {
        let from = faults[i].start_ms / 1000.0;
        let width_px = faults[i].kind.chars().count() as f64 * LABEL_CHAR_PX + LABEL_GAP_PX;
        let row = match row_ends.iter().position(|&end| end <= from) {
            Some(r) => r,
            None if row_ends.len() < LABEL_ROWS => {
                row_ends.push(0.0);
                row_ends.len() - 1
            }
            None => continue,
        };
        row_ends[row] = from + width_px * s_per_px;
        rows[i] = Some(row);
    }
    rows
}

/// Shades each fault's window on a chart whose data area is `height_px`
/// high, and labels it with its kind in the row [`label_rows`] gives.
fn shade<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Plot>,
    faults: &[FaultEvent],
    end_s: f64,
    (ymin, ymax): (f64, f64),
    height_px: f64,
) -> Result<(), String> {
    let rows = label_rows(faults, end_s);
    let row_h = (ymax - ymin) * LABEL_ROW_PX / height_px;
    for (i, f) in faults.iter().enumerate() {
        let a = f.start_ms / 1000.0;
        let b = f.end_ms.map_or(end_s, |e| e / 1000.0).max(a + 0.3);
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(a, ymin), (b, ymax)],
                fault_color(i).filled(),
            )))
            .map_err(|e| e.to_string())?;
        let Some(row) = rows[i] else {
            continue;
        };
        chart
            .draw_series(std::iter::once(Text::new(
                f.kind.clone(),
                (a, ymax - row as f64 * row_h),
                ("sans-serif", 11).into_font().color(&BLACK),
            )))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// A chart on `root`, cleared to white: `caption` above, `0..end_s`
/// seconds across, `0..ymax` in `y_unit` up, its mesh drawn and `faults`
/// shaded (`height_px`: the data area's height, as [`shade`] takes it).
fn shaded_chart<'a, 'b>(
    root: &'a Area<'b>,
    caption: &str,
    (y_unit, ymax): (&str, f64),
    end_s: f64,
    faults: &[FaultEvent],
    height_px: f64,
) -> Result<ChartContext<'a, SVGBackend<'b>, Plot>, String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(root)
        .caption(caption, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..end_s, 0f64..ymax)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc(y_unit)
        .draw()
        .map_err(|e| e.to_string())?;
    shade(&mut chart, faults, end_s, (0.0, ymax), height_px)?;
    Ok(chart)
}

fn latency_chart(
    root: &Area,
    ops: &[OpRecord],
    faults: &[FaultEvent],
    end_s: f64,
) -> Result<(), String> {
    let ymax = ops.iter().map(|o| o.latency_ms()).fold(10.0f64, f64::max) * 1.15;
    let mut chart = shaded_chart(
        root,
        "latency of every operation (ms) — green ok, blue fail, red info",
        ("ms", ymax),
        end_s,
        faults,
        310.0,
    )?;
    for outcome in [Outcome::Ok, Outcome::Fail, Outcome::Info] {
        let c = color(outcome);
        chart
            .draw_series(
                ops.iter()
                    .filter(|o| o.outcome == outcome)
                    .map(|o| Circle::new((o.invoke_ms / 1000.0, o.latency_ms()), 2, c.filled())),
            )
            .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())
}

fn throughput_chart(
    root: &Area,
    ops: &[OpRecord],
    faults: &[FaultEvent],
    end_s: f64,
) -> Result<(), String> {
    let secs = end_s.ceil().max(1.0) as usize;
    let mut buckets = vec![[0u32; 3]; secs + 1];
    for o in ops {
        let s = ((o.complete_ms / 1000.0) as usize).min(secs);
        let k = match o.outcome {
            Outcome::Ok => 0,
            Outcome::Fail => 1,
            Outcome::Info => 2,
        };
        buckets[s][k] += 1;
    }
    let ymax = buckets
        .iter()
        .flat_map(|b| b.iter())
        .copied()
        .max()
        .unwrap_or(1)
        .max(1) as f64
        * 1.15;
    let mut chart = shaded_chart(
        root,
        "throughput (completed ops per second, by outcome)",
        ("ops/s", ymax),
        end_s,
        faults,
        230.0,
    )?;
    for (k, outcome) in [Outcome::Ok, Outcome::Fail, Outcome::Info]
        .into_iter()
        .enumerate()
    {
        let c = color(outcome);
        chart
            .draw_series(LineSeries::new(
                buckets
                    .iter()
                    .enumerate()
                    .map(|(s, b)| (s as f64 + 0.5, b[k] as f64)),
                c.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())
}

/// The two SVG plots.
pub fn plots(ops: &[OpRecord], faults: &[FaultEvent], end_ms: f64) -> (String, String) {
    let end_s = (end_ms / 1000.0).max(1.0);
    let mut lat = String::new();
    let mut thr = String::new();
    {
        let root = SVGBackend::with_string(&mut lat, (1100, 380)).into_drawing_area();
        if let Err(e) = latency_chart(&root, ops, faults, end_s) {
            drop(root);
            lat = format!("<p>latency plot failed: {}</p>", html_escape(&e));
        }
    }
    {
        let root = SVGBackend::with_string(&mut thr, (1100, 300)).into_drawing_area();
        if let Err(e) = throughput_chart(&root, ops, faults, end_s) {
            drop(root);
            thr = format!("<p>throughput plot failed: {}</p>", html_escape(&e));
        }
    }
    (lat, thr)
}

pub fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The whole page.
pub fn html(results: &Value, ops: &[OpRecord], faults: &[FaultEvent], end_ms: f64) -> String {
    let (lat, thr) = plots(ops, faults, end_ms);
    let valid = results.get("valid").cloned().unwrap_or(Value::Null);
    let mut rows = String::new();
    if let Some(cs) = results.get("checkers").and_then(|c| c.as_object()) {
        for (name, v) in cs {
            let ok = v.get("valid").cloned().unwrap_or(Value::Null);
            let style = if ok == Value::Bool(true) { "ok" } else { "bad" };
            rows.push_str(&format!(
                "<tr><td>{name}</td><td class=\"{style}\">{ok}</td></tr>\n"
            ));
        }
    }
    let intruder = intruder_table(results);
    let op_rows = ops_table(ops);
    let mut frows = String::new();
    for f in faults {
        frows.push_str(&format!(
            "<tr><td>{:.1}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
            f.start_ms / 1000.0,
            f.end_ms
                .map_or("-".into(), |e| format!("{:.1}", e / 1000.0)),
            html_escape(&f.kind),
            html_escape(&f.targets.join(" ")),
            html_escape(&f.detail.join("; ")),
        ));
    }
    format!(
        r#"<!doctype html><html><head><meta charset="utf-8"><title>keel jepsen report</title>
<style>body{{font-family:sans-serif;margin:20px}} td,th{{padding:2px 8px;border-bottom:1px solid #ddd}}
.ok{{color:#2e8b57;font-weight:bold}} .bad{{color:#dc322f;font-weight:bold}} pre{{background:#f6f6f6;padding:8px;overflow:auto;max-height:600px}}</style></head>
<body><h1>keel jepsen run: <span class="{cls}">valid = {valid}</span></h1>
<table>{summary}</table>
<h2>Checkers</h2><table>{rows}</table>
{op_rows}
<h2>Latency</h2>{lat}
<h2>Throughput</h2>{thr}
<h2>Faults</h2><table><tr><th>start s</th><th>end s</th><th>kind</th><th>targets</th><th>detail</th></tr>{frows}</table>
{intruder}
<h2>results.json</h2><pre>{json}</pre>
</body></html>"#,
        cls = if valid == Value::Bool(true) {
            "ok"
        } else {
            "bad"
        },
        summary = summary_rows(results),
        json = html_escape(&serde_json::to_string_pretty(results).unwrap_or_default()),
    )
}

/// The run's summary as table rows: each count, and the faults by kind
/// (operations by kind have a table of their own).
fn summary_rows(results: &Value) -> String {
    let mut rows = String::new();
    for (key, v) in results
        .get("summary")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let cell = match v {
            Value::Object(m) if key == "ops_by_kind" || m.is_empty() => continue,
            Value::Object(m) => m
                .iter()
                .map(|(k, n)| format!("{k}: {n}"))
                .collect::<Vec<_>>()
                .join(", "),
            other => other.to_string(),
        };
        rows.push_str(&format!(
            "<tr><th>{}</th><td>{}</td></tr>\n",
            html_escape(&key.replace('_', " ")),
            html_escape(&cell)
        ));
    }
    rows
}

/// Operations per kind: how many ended ok, fail and info, and the error
/// codes they got (for results.json and the page).
pub fn ops_by_kind(ops: &[OpRecord]) -> Value {
    let mut by: BTreeMap<String, (usize, usize, usize, BTreeMap<String, usize>)> = BTreeMap::new();
    for o in ops {
        let kind = serde_json::to_value(o.op)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let e = by.entry(kind).or_default();
        match o.outcome {
            Outcome::Ok => e.0 += 1,
            Outcome::Fail => e.1 += 1,
            Outcome::Info => e.2 += 1,
        }
        if let Some(code) = &o.error {
            *e.3.entry(code.clone()).or_default() += 1;
        }
    }
    Value::Object(
        by.into_iter()
            .map(|(k, (ok, fail, info, codes))| {
                (
                    k,
                    json!({"ok": ok, "fail": fail, "info": info, "errors": codes}),
                )
            })
            .collect(),
    )
}

fn ops_table(ops: &[OpRecord]) -> String {
    let mut rows = String::new();
    if let Value::Object(m) = ops_by_kind(ops) {
        for (kind, v) in m {
            let errors = v["errors"]
                .as_object()
                .map(|e| {
                    e.iter()
                        .map(|(c, n)| format!("{c} {n}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            rows.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                html_escape(&kind),
                v["ok"],
                v["fail"],
                v["info"],
                html_escape(&errors)
            ));
        }
    }
    format!(
        "<h2>Operations</h2><table><tr><th>op</th><th>ok</th><th>fail</th><th>info</th><th>error codes</th></tr>{rows}</table>"
    )
}

/// The intruder's attempts by credential and request, with their answers
/// (empty when the run had no intruder).
fn intruder_table(results: &Value) -> String {
    let Some(d) = results.pointer("/checkers/intruder/detail") else {
        return String::new();
    };
    let n = |k: &str| d.get(k).and_then(Value::as_u64).unwrap_or(0);
    let mut rows = String::new();
    for (request, answers) in d
        .get("by_request")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let c = |k: &str| answers.get(k).and_then(Value::as_u64).unwrap_or(0);
        let accepted = c("accepted");
        rows.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"{}\">{accepted}</td></tr>\n",
            html_escape(request),
            c("refused"),
            c("errored"),
            if accepted == 0 { "ok" } else { "bad" },
        ));
    }
    format!(
        "<h2>Intruder</h2><p>{} attempts: {} refused, {} errored (no verdict), {} accepted; every attempt in intruder.jsonl</p>\n<table><tr><th>credential and request</th><th>refused</th><th>errored</th><th>accepted</th></tr>{rows}</table>",
        n("attempts"),
        n("refused"),
        n("errored"),
        n("accepted"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_lists_the_intruder_attempts_when_there_was_one() {
        let results = serde_json::json!({"valid": false, "checkers": {"intruder": {"valid": false, "detail": {
            "attempts": 3, "refused": 1, "errored": 1, "accepted": 1,
            "by_request": {"no_acls CreateAcls": {"accepted": 1}, "foreign_ca CreateTopics": {"refused": 1, "errored": 1}},
        }}}});
        let page = html(&results, &[], &[], 1000.0);
        assert!(page.contains("<h2>Intruder</h2>"), "{page}");
        assert!(page
            .contains("<td>no_acls CreateAcls</td><td>0</td><td>0</td><td class=\"bad\">1</td>"));
        let none = html(&serde_json::json!({"checkers": {}}), &[], &[], 1000.0);
        assert!(!none.contains("<h2>Intruder</h2>"));
    }

    #[test]
    fn the_page_opens_with_a_summary_table_not_a_json_dump() {
        let results = serde_json::json!({"valid": true, "checkers": {}, "summary": {
            "ops": 12, "final_heal_ms": 30212.0,
            "faults_by_kind": {"bridge": 2, "kill-broker": 1},
            "ops_by_kind": {"create": {"ok": 1}},
        }});
        let page = html(&results, &[], &[], 1000.0);
        let head = &page[page.find("<body>").expect("a body")
            ..page.find("<h2>Checkers</h2>").expect("a checkers table")];
        assert!(head.contains("<tr><th>ops</th><td>12</td></tr>"), "{head}");
        assert!(
            head.contains("<tr><th>final heal ms</th><td>30212.0</td></tr>"),
            "{head}"
        );
        assert!(
            head.contains("<td>bridge: 2, kill-broker: 1</td>"),
            "{head}"
        );
        assert!(
            !head.contains("ops_by_kind") && !head.contains('{'),
            "{head}"
        );
    }

    #[test]
    fn operations_are_counted_per_kind_with_their_error_codes() {
        let op = |kind: crate::history::OpKind, outcome: Outcome, error: Option<&str>| OpRecord {
            error: error.map(str::to_string),
            ..OpRecord::new(kind, "t", 0.0, 1.0, outcome)
        };
        use crate::history::OpKind::*;
        let ops = [
            op(AlterConfig, Outcome::Ok, None),
            op(AlterConfig, Outcome::Fail, Some("UNKNOWN_TOPIC")),
            op(CreatePartitions, Outcome::Info, Some("REQUEST_TIMED_OUT")),
        ];
        let v = ops_by_kind(&ops);
        assert_eq!(v["alter_config"]["ok"], 1);
        assert_eq!(v["alter_config"]["errors"]["UNKNOWN_TOPIC"], 1);
        assert_eq!(v["create_partitions"]["info"], 1);
        let page = html(&json!({"checkers": {}}), &ops, &[], 1000.0);
        assert!(
            page.contains("<td>alter_config</td><td>1</td><td>1</td><td>0</td>"),
            "{page}"
        );
    }

    fn fault(kind: &str, start_ms: f64) -> FaultEvent {
        FaultEvent {
            family: crate::nemesis::Family::Partition,
            kind: kind.into(),
            targets: vec![],
            start_ms,
            end_ms: Some(start_ms + 500.0),
            planned_ms: None,
            detail: vec![],
        }
    }

    #[test]
    fn fault_labels_close_together_go_to_rows_of_their_own() {
        // On a 100 s chart a 20-character label spans about 13.4 s.
        let faults = [
            fault("partition-majorities", 10_000.0),
            fault("kill-active-controller", 12_000.0),
            fault("pause-broker", 14_000.0),
            fault("bridge", 40_000.0),
        ];
        let rows = label_rows(&faults, 100.0);
        assert_eq!(rows, vec![Some(0), Some(1), Some(2), Some(0)]);
        // With every row taken, a label is left out rather than drawn
        // over another.
        let crowd: Vec<FaultEvent> = (0..LABEL_ROWS + 2)
            .map(|i| fault("kill-broker", 1_000.0 + i as f64 * 100.0))
            .collect();
        let rows = label_rows(&crowd, 100.0);
        assert!(rows[..LABEL_ROWS].iter().all(Option::is_some));
        assert_eq!(&rows[LABEL_ROWS..], &[None, None]);
    }
}
