//! The one table (markdown): a line per workload and engine.

use super::{fmt_ratio, fmt_time, Outcome, Report, Row, ENGINES};
use std::fmt::Write as _;

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
}
