//! Results (serialised as the JSON file), the one table (`table`), the target table
//! (`targets`) and the SVG chart (`svg`).

mod svg;
mod table;
mod targets;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
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
    /// The floor's outcome: measured, or why it has no kernel for this workload.
    pub fn insert_floor(&mut self, floor: Result<Outcome, String>) {
        let outcome = floor.unwrap_or_else(|reason| Outcome::Unsupported { reason });
        self.engines.insert("floor".into(), outcome);
    }

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
    /// The published crate the `incumbent` rows ran (results files written before this
    /// field existed are vyre-driver-cuda 0.6.5 runs).
    #[serde(default = "incumbent_before_0_7")]
    pub incumbent: String,
    pub device: Option<crate::engines::floor::driver::DeviceFacts>,
    pub environment: BTreeMap<String, String>,
    pub rows: Vec<Row>,
    /// Free-form per-engine diagnostics (metric deltas, phase times).
    pub diagnostics: BTreeMap<String, BTreeMap<String, f64>>,
    pub log: Vec<String>,
}

fn incumbent_before_0_7() -> String {
    "vyre-driver-cuda 0.6.5".into()
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
