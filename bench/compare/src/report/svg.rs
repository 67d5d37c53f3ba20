//! The SVG chart: horizontal bars of time / floor (log scale) per workload and engine.

use super::{fmt_time, Outcome, Report, Row};
use std::fmt::Write as _;

const COLOURS: [(&str, &str); 3] = [
    ("floor", "#7f7f7f"),
    ("incumbent", "#d62728"),
    ("vyre-cuda", "#1f77b4"),
];
/// The ratio axis (log scale).
const LO: f64 = 0.01;
const HI: f64 = 100.0;
const LEFT: f64 = 110.0;
const PLOT_W: f64 = 640.0;
const BAR_H: f64 = 14.0;
const GAP: f64 = 8.0;
const TOP: f64 = 60.0;

struct Bar {
    engine: &'static str,
    ratio: Option<f64>,
    text: String,
}

/// A workload's title and its engines' bars.
type Group = (String, Vec<Bar>);

/// The x coordinate of ratio `r`.
fn x(r: f64) -> f64 {
    LEFT + (r.clamp(LO, HI).log10() - LO.log10()) / (HI.log10() - LO.log10()) * PLOT_W
}

fn colour(engine: &str) -> &'static str {
    COLOURS
        .iter()
        .find(|(e, _)| *e == engine)
        .map(|c| c.1)
        .unwrap_or("#000")
}

impl Report {
    /// Horizontal bars of time / floor (log scale) per workload and engine; rows without a
    /// floor are drawn against the incumbent and say so.
    pub fn svg(&self) -> String {
        let groups: Vec<Group> = self.rows.iter().filter_map(group).collect();
        let total_bars: usize = groups.iter().map(|g| g.1.len()).sum();
        let height = TOP + total_bars as f64 * BAR_H + groups.len() as f64 * (GAP + BAR_H) + 50.0;
        let mut s = self.svg_header(height);
        let mut y = TOP;
        for (title, bars) in &groups {
            let _ = writeln!(
                s,
                r#"<text x="10" y="{:.1}" font-weight="bold">{}</text>"#,
                y + BAR_H - 3.0,
                xml(title)
            );
            y += BAR_H;
            for bar in bars {
                draw_bar(&mut s, bar, y);
                y += BAR_H;
            }
            y += GAP;
        }
        s.push_str("</svg>\n");
        s
    }

    /// The opening tag, background, titles and the axis ticks.
    fn svg_header(&self, height: f64) -> String {
        let width = LEFT + PLOT_W + 170.0;
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
            r#"<text x="10" y="18" font-size="14" font-weight="bold">time / floor (log scale, lower is better): floor, {}, vyre-cuda</text>"#,
            xml(&self.incumbent)
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
                r#"<line x1="{tx:.1}" y1="{TOP}" x2="{tx:.1}" y2="{:.0}" stroke="{}" stroke-width="{}"/>"#,
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
        s
    }
}

/// A row's bars against the floor, else the incumbent; none when neither ran.
fn group(row: &Row) -> Option<Group> {
    let base = if row.median("floor").is_some() {
        "floor"
    } else if row.median("incumbent").is_some() {
        "incumbent"
    } else {
        return None;
    };
    let mut bars = Vec::new();
    for (engine, _) in COLOURS {
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
    Some((title, bars))
}

/// One engine's label and bar (or its status) at height `y`.
fn draw_bar(s: &mut String, bar: &Bar, y: f64) {
    let colour = colour(bar.engine);
    let _ = writeln!(
        s,
        r#"<text x="{:.0}" y="{:.1}" text-anchor="end" fill="{colour}">{}</text>"#,
        LEFT - 4.0,
        y + BAR_H - 3.0,
        bar.engine
    );
    if let Some(r) = bar.ratio {
        let (x0, x1) = (x(LO), x(r));
        let _ = writeln!(
            s,
            r#"<rect x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{colour}"/>"#,
            y + 1.0,
            (x1 - x0).max(1.0),
            BAR_H - 2.0
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}">{}</text>"#,
            x1 + 4.0,
            y + BAR_H - 3.0,
            xml(&bar.text)
        );
    } else {
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" fill="{colour}">{}</text>"#,
            x(LO) + 4.0,
            y + BAR_H - 3.0,
            xml(&bar.text)
        );
    }
}

fn xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
