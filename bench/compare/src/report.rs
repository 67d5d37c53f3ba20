//! Results, the one table, the target table, the JSON file and the SVG chart.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

pub const ENGINES: [&str; 3] = ["floor", "incumbent", "vyre-cuda"];

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Stats {
    pub samples: usize,
    pub median_ns: f64,
    pub p10_ns: f64,
    pub p90_ns: f64,
}

impl Stats {
    pub fn from_durations(samples: &[Duration]) -> Self {
        let mut ns: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e9).collect();
        Self::from_ns(&mut ns)
    }

    pub fn from_ns(ns: &mut [f64]) -> Self {
        ns.sort_by(|a, b| a.total_cmp(b));
        let at = |q: f64| {
            if ns.is_empty() {
                f64::NAN
            } else {
                ns[((ns.len() - 1) as f64 * q).round() as usize]
            }
        };
        Self {
            samples: ns.len(),
            median_ns: at(0.5),
            p10_ns: at(0.1),
            p90_ns: at(0.9),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// Checked against vyre-reference, then timed.
    Ok {
        stats: Stats,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        extra: BTreeMap<String, f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    /// Ran but returned bytes that differ from vyre-reference: excluded from ratios.
    Fail { reason: String },
    /// The engine cannot run this workload (rejected it, or lacks the API).
    Unsupported { reason: String },
}

impl Outcome {
    pub fn ok(stats: Stats) -> Self {
        Outcome::Ok {
            stats,
            extra: BTreeMap::new(),
            note: None,
        }
    }

    pub fn median(&self) -> Option<f64> {
        match self {
            Outcome::Ok { stats, .. } => Some(stats.median_ns),
            _ => None,
        }
    }

    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Ok { .. } => "ok",
            Outcome::Fail { .. } => "FAIL",
            Outcome::Unsupported { .. } => "unsupported",
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    /// Stable id, e.g. `vadd_u32_2^26`.
    pub id: String,
    /// What the time measures.
    pub measure: String,
    /// Bytes the workload must move (for GB/s), if meaningful.
    pub bytes: Option<f64>,
    pub engines: BTreeMap<String, Outcome>,
    #[serde(default)]
    pub notes: Vec<String>,
}

impl Row {
    pub fn new(id: &str, measure: &str, bytes: Option<f64>) -> Self {
        Self {
            id: id.to_string(),
            measure: measure.to_string(),
            bytes,
            engines: BTreeMap::new(),
            notes: Vec::new(),
        }
    }

    pub fn median(&self, engine: &str) -> Option<f64> {
        self.engines.get(engine).and_then(Outcome::median)
    }

    /// `engine`'s median over `other`'s, when both ran correctly.
    pub fn ratio(&self, engine: &str, other: &str) -> Option<f64> {
        Some(self.median(engine)? / self.median(other)?)
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Report {
    pub date: String,
    pub command: String,
    pub device: Option<crate::engines::floor::driver::DeviceFacts>,
    pub environment: BTreeMap<String, String>,
    pub rows: Vec<Row>,
    /// Free-form per-engine diagnostics (metric deltas, phase times).
    pub diagnostics: BTreeMap<String, BTreeMap<String, f64>>,
    pub log: Vec<String>,
}

pub fn fmt_time(ns: f64) -> String {
    if !ns.is_finite() {
        "-".into()
    } else if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.1} us", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

fn fmt_ratio(r: Option<f64>) -> String {
    match r {
        Some(r) if r.is_finite() => format!("{r:.2}x"),
        _ => "-".into(),
    }
}

impl Report {
    pub fn row(&self, id: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.id == id)
    }

    /// The one table (markdown): a line per workload and engine.
    pub fn table(&self) -> String {
        let mut s = String::new();
        s.push_str("| workload | measure | engine | median | p10 | p90 | GB/s | time / floor | time / incumbent | status |\n");
        s.push_str("|---|---|---|---|---|---|---|---|---|---|\n");
        for row in &self.rows {
            for engine in ENGINES {
                let Some(outcome) = row.engines.get(engine) else {
                    continue;
                };
                match outcome {
                    Outcome::Ok { stats, .. } => {
                        let gbs = row
                            .bytes
                            .map(|b| format!("{:.1}", b / stats.median_ns))
                            .unwrap_or_else(|| "-".into());
                        let vs_floor = if engine == "floor" {
                            "1.00x".into()
                        } else {
                            fmt_ratio(row.ratio(engine, "floor"))
                        };
                        let vs_inc = if engine == "incumbent" {
                            "1.00x".into()
                        } else {
                            fmt_ratio(row.ratio(engine, "incumbent"))
                        };
                        let _ = writeln!(
                            s,
                            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | ok ({} samples) |",
                            row.id,
                            row.measure,
                            engine,
                            fmt_time(stats.median_ns),
                            fmt_time(stats.p10_ns),
                            fmt_time(stats.p90_ns),
                            gbs,
                            vs_floor,
                            vs_inc,
                            stats.samples
                        );
                    }
                    Outcome::Fail { reason } | Outcome::Unsupported { reason } => {
                        let short: String = reason.chars().take(90).collect();
                        let _ = writeln!(
                            s,
                            "| {} | {} | {} | - | - | - | - | - | - | {}: {} |",
                            row.id,
                            row.measure,
                            engine,
                            outcome.label(),
                            short.replace('|', "/").replace('\n', " ")
                        );
                    }
                }
            }
        }
        s
    }

    /// Issue 5's targets, each with the measured ratio and met / not met.
    pub fn targets(&self) -> Vec<(String, String, String, String)> {
        let mut t = Vec::new();
        let us = "vyre-cuda";
        let verdict = |ok: Option<bool>| match ok {
            Some(true) => "met".to_string(),
            Some(false) => "NOT met".to_string(),
            None => "not measured".to_string(),
        };
        let r = |id: &str, other: &str| self.row(id).and_then(|row| row.ratio(us, other));
        let m = |id: &str| self.row(id).and_then(|row| row.median(us));

        // tiny
        let (a, b) = (r("tiny", "floor"), r("tiny", "incumbent"));
        t.push((
            "tiny dispatch p50".into(),
            "<= 1.3x the floor's minimal round trip, and <= 0.35x the incumbent".into(),
            format!("{} floor, {} incumbent", fmt_ratio(a), fmt_ratio(b)),
            verdict(match (a, b) {
                (Some(a), Some(b)) => Some(a <= 1.3 && b <= 0.35),
                (Some(a), None) => Some(a <= 1.3).filter(|ok| !ok),
                (None, Some(b)) => Some(b <= 0.35).filter(|ok| !ok),
                _ => None,
            }),
        ));
        // vadd 2^26 end to end: throughput ratio = floor time / our time
        let tp = r("vadd_u32_2^26", "floor").map(|x| 1.0 / x);
        t.push((
            "vadd_u32 2^26 borrowed end to end".into(),
            ">= 0.8x the floor's pinned-memory end-to-end throughput".into(),
            format!("{} of the floor's throughput", fmt_ratio(tp)),
            verdict(tp.map(|x| x >= 0.8)),
        ));
        let tp = r("resident_vadd_2^26", "floor").map(|x| 1.0 / x);
        t.push((
            "resident elementwise kernel 2^26".into(),
            ">= 0.97x the floor's hand-written kernel throughput".into(),
            format!("{} of the floor's throughput", fmt_ratio(tp)),
            verdict(tp.map(|x| x >= 0.97)),
        ));
        let step = m("resident_sequence_100");
        t.push((
            "resident sequence, 100 steps".into(),
            "<= 1.5 us per step".into(),
            step.map(|ns| format!("{:.2} us per step", ns / 1e3))
                .unwrap_or_else(|| "-".into()),
            verdict(step.map(|ns| ns <= 1500.0)),
        ));
        let cold = r("cold_compile", "incumbent");
        let emit = m("emit_ptx_corpus");
        t.push((
            "cold compile, first dispatch".into(),
            "<= 0.5x the incumbent; emitter time for the corpus median program <= 50 us".into(),
            format!(
                "{} incumbent; emitter median {}",
                fmt_ratio(cold),
                emit.map(fmt_time).unwrap_or_else(|| "-".into())
            ),
            verdict(match (cold, emit) {
                (Some(c), Some(e)) => Some(c <= 0.5 && e <= 50_000.0),
                (Some(c), None) => Some(c <= 0.5).filter(|ok| !ok),
                (None, Some(e)) => Some(e <= 50_000.0).filter(|ok| !ok),
                _ => None,
            }),
        ));
        let warm = r("warm_1024", "incumbent");
        t.push((
            "warm re-dispatch, 1024 elements".into(),
            "<= 0.4x the incumbent".into(),
            format!("{} incumbent", fmt_ratio(warm)),
            verdict(warm.map(|x| x <= 0.4)),
        ));
        let red = r("reduce_atomic_2^24", "incumbent");
        t.push((
            "reduce_atomic 2^24 end to end".into(),
            "<= 0.15x the incumbent".into(),
            format!("{} incumbent", fmt_ratio(red)),
            verdict(red.map(|x| x <= 0.15)),
        ));
        let corpus = r("corpus_warm", "incumbent");
        t.push((
            "whole fixture corpus end to end (warm pass)".into(),
            "<= 0.5x the incumbent's wall time".into(),
            format!("{} incumbent (cases both matched)", fmt_ratio(corpus)),
            verdict(corpus.map(|x| x <= 0.5)),
        ));
        let first = r("corpus_first", "incumbent");
        t.push((
            "whole fixture corpus end to end (first pass, compiles included)".into(),
            "<= 0.5x the incumbent's wall time".into(),
            format!("{} incumbent (cases both matched)", fmt_ratio(first)),
            verdict(first.map(|x| x <= 0.5)),
        ));
        let cpu = m("tiny_cpu");
        t.push((
            "host CPU time per warm tiny dispatch".into(),
            "<= 5 us".into(),
            cpu.map(fmt_time).unwrap_or_else(|| "-".into()),
            verdict(cpu.map(|ns| ns <= 5000.0)),
        ));
        t
    }

    pub fn targets_table(&self) -> String {
        let mut s = String::from(
            "| workload | target | measured (vyre-cuda) | verdict |\n|---|---|---|---|\n",
        );
        for (w, target, measured, verdict) in self.targets() {
            let _ = writeln!(s, "| {w} | {target} | {measured} | {verdict} |");
        }
        s
    }

    /// Horizontal bars of time / floor (log scale) per workload and engine; rows without a
    /// floor are drawn against the incumbent and say so.
    pub fn svg(&self) -> String {
        let colours = [
            ("floor", "#7f7f7f"),
            ("incumbent", "#d62728"),
            ("vyre-cuda", "#1f77b4"),
        ];
        struct Bar {
            engine: &'static str,
            ratio: Option<f64>,
            text: String,
        }
        let mut groups: Vec<(String, Vec<Bar>)> = Vec::new();
        for row in &self.rows {
            let base = if row.median("floor").is_some() {
                "floor"
            } else if row.median("incumbent").is_some() {
                "incumbent"
            } else {
                continue;
            };
            let mut bars = Vec::new();
            for (engine, _) in colours {
                let Some(outcome) = row.engines.get(engine) else {
                    continue;
                };
                let ratio = row.ratio(engine, base);
                let text = match (outcome, ratio) {
                    (Outcome::Ok { stats, .. }, Some(r)) => {
                        format!("{r:.2}x ({})", fmt_time(stats.median_ns))
                    }
                    _ => outcome.label().to_string(),
                };
                bars.push(Bar {
                    engine,
                    ratio,
                    text,
                });
            }
            let title = if base == "floor" {
                row.id.clone()
            } else {
                format!("{} (vs incumbent)", row.id)
            };
            groups.push((title, bars));
        }
        let (lo, hi) = (0.01f64, 100.0f64);
        let (left, plot_w, bar_h, gap) = (110.0, 640.0, 14.0, 8.0);
        let x = |r: f64| {
            left + (r.clamp(lo, hi).log10() - lo.log10()) / (hi.log10() - lo.log10()) * plot_w
        };
        let total_bars: usize = groups.iter().map(|g| g.1.len()).sum();
        let top = 60.0;
        let height = top + total_bars as f64 * bar_h + groups.len() as f64 * (gap + bar_h) + 50.0;
        let width = left + plot_w + 170.0;
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height:.0}" font-family="sans-serif" font-size="11">"#
        );
        let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let device = self
            .device
            .as_ref()
            .map(|d| {
                format!(
                    "{}, CUDA driver API {}.{}",
                    d.name,
                    d.driver_version / 1000,
                    d.driver_version % 1000 / 10
                )
            })
            .unwrap_or_default();
        let _ = writeln!(
            s,
            r#"<text x="10" y="18" font-size="14" font-weight="bold">time / floor (log scale, lower is better): floor, vyre-driver-cuda 0.6.5, vyre-cuda</text>"#
        );
        let _ = writeln!(
            s,
            r#"<text x="10" y="34">{} {} — median of each engine over the floor's median</text>"#,
            xml(&self.date),
            xml(&device)
        );
        for tick in [0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0] {
            let tx = x(tick);
            let _ = writeln!(
                s,
                r#"<line x1="{tx:.1}" y1="{top}" x2="{tx:.1}" y2="{:.0}" stroke="{}" stroke-width="{}"/>"#,
                height - 40.0,
                if tick == 1.0 { "#000" } else { "#ddd" },
                if tick == 1.0 { 1.2 } else { 0.6 }
            );
            let _ = writeln!(
                s,
                r#"<text x="{tx:.1}" y="{:.0}" text-anchor="middle">{tick}x</text>"#,
                height - 26.0
            );
        }
        let mut y = top;
        for (title, bars) in &groups {
            let _ = writeln!(
                s,
                r#"<text x="10" y="{:.1}" font-weight="bold">{}</text>"#,
                y + bar_h - 3.0,
                xml(title)
            );
            y += bar_h;
            for bar in bars {
                let colour = colours
                    .iter()
                    .find(|(e, _)| *e == bar.engine)
                    .map(|c| c.1)
                    .unwrap_or("#000");
                let _ = writeln!(
                    s,
                    r#"<text x="{:.0}" y="{:.1}" text-anchor="end" fill="{colour}">{}</text>"#,
                    left - 4.0,
                    y + bar_h - 3.0,
                    bar.engine
                );
                if let Some(r) = bar.ratio {
                    let (x0, x1) = (x(lo), x(r));
                    let _ = writeln!(
                        s,
                        r#"<rect x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{colour}"/>"#,
                        y + 1.0,
                        (x1 - x0).max(1.0),
                        bar_h - 2.0
                    );
                    let _ = writeln!(
                        s,
                        r#"<text x="{:.1}" y="{:.1}">{}</text>"#,
                        x1 + 4.0,
                        y + bar_h - 3.0,
                        xml(&bar.text)
                    );
                } else {
                    let _ = writeln!(
                        s,
                        r#"<text x="{:.1}" y="{:.1}" fill="{colour}">{}</text>"#,
                        x(lo) + 4.0,
                        y + bar_h - 3.0,
                        xml(&bar.text)
                    );
                }
                y += bar_h;
            }
            y += gap;
        }
        s.push_str("</svg>\n");
        s
    }
}

fn xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
