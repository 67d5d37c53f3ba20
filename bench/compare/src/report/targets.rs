//! Issue 5's targets (and issue 16's, where a run has artifact rows, and issue 18's, where
//! it has user-style saxpy rows), each with vyre-cuda's measured ratio and met / not met.

use super::{fmt_ratio, fmt_time, Outcome, Report, Row};
use crate::workloads::libs::{build::PREFIX as LIBS, HBM_TARGET};
use std::fmt::Write as _;

/// (workload, target, measured, verdict).
type Target = (String, String, String, String);

const US: &str = "vyre-cuda";

fn verdict(ok: Option<bool>) -> String {
    match ok {
        Some(true) => "met".to_string(),
        Some(false) => "NOT met".to_string(),
        None => "not measured".to_string(),
    }
}

/// The verdict of a target with two conditions: met when both are; NOT met when either
/// measured one is not; not measured otherwise.
fn both(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a && b),
        (Some(a), None) => Some(a).filter(|ok| !ok),
        (None, Some(b)) => Some(b).filter(|ok| !ok),
        _ => None,
    }
}

fn target(workload: &str, goal: &str, measured: String, ok: Option<bool>) -> Target {
    (workload.into(), goal.into(), measured, verdict(ok))
}

impl Report {
    /// vyre-cuda's median over `other`'s in row `id`.
    fn ours_over(&self, id: &str, other: &str) -> Option<f64> {
        self.row(id).and_then(|row| row.ratio(US, other))
    }

    fn ours_median(&self, id: &str) -> Option<f64> {
        self.row(id).and_then(|row| row.median(US))
    }

    /// Issue 5's targets, each with the measured ratio and met / not met.
    pub fn targets(&self) -> Vec<Target> {
        let mut t = vec![self.tiny_target()];
        t.extend(self.floor_throughput_targets());
        let step = self.ours_median("resident_sequence_100");
        t.push(target(
            "resident sequence, 100 steps",
            "<= 1.5 us per step",
            step.map(|ns| format!("{:.2} us per step", ns / 1e3))
                .unwrap_or_else(|| "-".into()),
            step.map(|ns| ns <= 1500.0),
        ));
        t.push(self.cold_target());
        t.extend(self.incumbent_targets());
        let cpu = self.ours_median("tiny_cpu");
        t.push(target(
            "host CPU time per warm tiny dispatch",
            "<= 5 us",
            cpu.map(fmt_time).unwrap_or_else(|| "-".into()),
            cpu.map(|ns| ns <= 5000.0),
        ));
        if self.rows.iter().any(|row| row.id.starts_with("artifact_")) {
            t.extend(self.artifact_targets());
        }
        if self
            .rows
            .iter()
            .any(|row| row.id.starts_with("saxpy_user_"))
        {
            t.push(self.user_style_target(
                "saxpy_user",
                "user-style saxpy (scale in a 1-element buffer, y in place)",
            ));
        }
        if (self.rows.iter()).any(|row| row.id.starts_with("params_user_")) {
            t.push(self.user_style_target(
                "params_user",
                "parameters in a buffer (scale, bias, clamp bounds; y in place)",
            ));
        }
        t.extend(self.libs_targets());
        t
    }

    /// The kernel rows of the vyre-libs workloads (`libs_<name>_kernel`).
    fn libs_kernel_rows(&self) -> impl Iterator<Item = &Row> {
        (self.rows.iter()).filter(|row| row.id.starts_with(LIBS) && row.id.ends_with("_kernel"))
    }

    /// Issue 18's targets for the vyre-libs workloads (only where a run has their rows):
    /// per workload, kernel time <= the incumbent's and, where memory-bound (the rows
    /// that carry an HBM share), >= 0.7x the HBM roofline; over all of them, a geometric
    /// mean <= 0.7x the incumbent.
    fn libs_targets(&self) -> Vec<Target> {
        let mut t: Vec<Target> = self.libs_kernel_rows().map(libs_target).collect();
        if t.is_empty() {
            return t;
        }
        let ratios: Vec<f64> = (self.libs_kernel_rows())
            .filter_map(|row| row.ratio(US, "incumbent"))
            .collect();
        // Workloads where vyre-cuda's output is wrong: the mean cannot be met over them.
        let wrong = (self.libs_kernel_rows())
            .filter(|row| matches!(row.engines.get(US), Some(Outcome::Fail { .. })))
            .count();
        let geomean = (!ratios.is_empty())
            .then(|| (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp());
        t.push(target(
            "vyre-libs workloads, kernel time (geometric mean)",
            "<= 0.7x the incumbent",
            format!(
                "{} incumbent over the {} of {} workloads both ran correctly ({wrong} wrong on vyre-cuda)",
                fmt_ratio(geomean),
                ratios.len(),
                t.len()
            ),
            match wrong {
                0 => geomean.map(|g| g <= 0.7),
                _ => Some(false),
            },
        ));
        t
    }

    /// Issue 18's targets: an elementwise program written as users write it (`prefix`:
    /// saxpy with its scale in a buffer, or a parameter block; `y` in place) costs no more
    /// than vadd of the same bytes (both vyre-cuda, end to end).
    fn user_style_target(&self, prefix: &str, what: &str) -> Target {
        let ratios: Vec<Option<f64>> = [24, 26]
            .iter()
            .map(|k| {
                let user = self.ours_median(&format!("{prefix}_f32_2^{k}"))?;
                Some(user / self.ours_median(&format!("vadd_u32_2^{k}"))?)
            })
            .collect();
        let within = (ratios.iter())
            .map(|r| r.map(|r| r <= 1.1))
            .reduce(both)
            .flatten();
        target(
            &format!("{what}, 2^24 / 2^26 end to end"),
            "<= 1.1x vyre-cuda's vadd_u32 of the same bytes",
            ratios
                .iter()
                .map(|r| fmt_ratio(*r))
                .collect::<Vec<_>>()
                .join(" / ")
                + " vadd",
            within,
        )
    }

    /// Issue 16's targets for the artifact route (only where a run has artifact rows).
    fn artifact_targets(&self) -> Vec<Target> {
        let submit = self.ours_over("artifact_submit_1024", "floor");
        let materialize: Vec<Option<f64>> = [1, 4, 16]
            .iter()
            .map(|n| self.ours_over(&format!("artifact_cold_materialize_{n}"), "floor"))
            .collect();
        let within = materialize
            .iter()
            .map(|r| r.map(|r| r <= 1.2))
            .reduce(both)
            .flatten();
        let corpus = self.ours_over("artifact_corpus_first", "incumbent");
        vec![
            target(
                "artifact warm submit+wait, 1 kernel (1024 elements), a new input each submit",
                "<= 1.3x the floor's round trip (upload, launch, download, sync)",
                format!("{} floor", fmt_ratio(submit)),
                submit.map(|r| r <= 1.3),
            ),
            target(
                "artifact cold materialize, 1 / 4 / 16 kernels",
                "<= 1.2x one module's JIT (the floor's first JIT of a fresh process)",
                materialize
                    .iter()
                    .map(|r| fmt_ratio(*r))
                    .collect::<Vec<_>>()
                    .join(" / "),
                within,
            ),
            target(
                "fixture corpus as artifacts, first pass (empty caches)",
                "<= 0.3x the incumbent's first pass",
                format!("{} incumbent (programs both matched)", fmt_ratio(corpus)),
                corpus.map(|r| r <= 0.3),
            ),
        ]
    }

    fn tiny_target(&self) -> Target {
        let (a, b) = (
            self.ours_over("tiny", "floor"),
            self.ours_over("tiny", "incumbent"),
        );
        target(
            "tiny dispatch p50",
            "<= 1.3x the floor's minimal round trip, and <= 0.35x the incumbent",
            format!("{} floor, {} incumbent", fmt_ratio(a), fmt_ratio(b)),
            both(a.map(|a| a <= 1.3), b.map(|b| b <= 0.35)),
        )
    }

    /// Throughput ratio = the floor's time / ours.
    fn floor_throughput_targets(&self) -> Vec<Target> {
        [
            (
                "vadd_u32_2^26",
                "vadd_u32 2^26 borrowed end to end",
                ">= 0.8x the floor's pinned-memory end-to-end throughput",
                0.8,
            ),
            (
                "resident_vadd_2^26",
                "resident elementwise kernel 2^26",
                ">= 0.97x the floor's hand-written kernel throughput",
                0.97,
            ),
        ]
        .into_iter()
        .map(|(id, workload, goal, limit)| {
            let tp = self.ours_over(id, "floor").map(|x| 1.0 / x);
            target(
                workload,
                goal,
                format!("{} of the floor's throughput", fmt_ratio(tp)),
                tp.map(|x| x >= limit),
            )
        })
        .collect()
    }

    fn cold_target(&self) -> Target {
        let cold = self.ours_over("cold_compile", "incumbent");
        let emit = self.ours_median("emit_ptx_corpus");
        target(
            "cold compile, first dispatch",
            "<= 0.5x the incumbent; emitter time for the corpus median program <= 50 us",
            format!(
                "{} incumbent; emitter median {}",
                fmt_ratio(cold),
                emit.map(fmt_time).unwrap_or_else(|| "-".into())
            ),
            both(cold.map(|c| c <= 0.5), emit.map(|e| e <= 50_000.0)),
        )
    }

    /// Time ratios over the incumbent.
    fn incumbent_targets(&self) -> Vec<Target> {
        let whole = "<= 0.5x the incumbent's wall time";
        let matched = " incumbent (cases both matched)";
        [
            (
                "warm_1024",
                "warm re-dispatch, 1024 elements",
                "<= 0.4x the incumbent",
                0.4,
                " incumbent",
            ),
            (
                "reduce_atomic_2^24",
                "reduce_atomic 2^24 end to end",
                "<= 0.15x the incumbent",
                0.15,
                " incumbent",
            ),
            (
                "corpus_warm",
                "whole fixture corpus end to end (warm pass)",
                whole,
                0.5,
                matched,
            ),
            (
                "corpus_first",
                "whole fixture corpus end to end (first pass, compiles included)",
                whole,
                0.5,
                matched,
            ),
        ]
        .into_iter()
        .map(|(id, workload, goal, limit, suffix)| {
            let r = self.ours_over(id, "incumbent");
            target(
                workload,
                goal,
                format!("{}{suffix}", fmt_ratio(r)),
                r.map(|x| x <= limit),
            )
        })
        .collect()
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
}

/// One vyre-libs workload's target (see [`Report::libs_targets`]).
fn libs_target(row: &Row) -> Target {
    let stem = row.id.trim_end_matches("_kernel");
    let ratio = row.ratio(US, "incumbent");
    let share = |outcome: Option<&Outcome>| match outcome {
        Some(Outcome::Ok { extra, .. }) => extra.get("hbm_roofline_pct").map(|p| p / 100.0),
        _ => None,
    };
    // Memory-bound rows are those whose engines carry an HBM share.
    let memory_bound = row.engines.values().any(|o| share(Some(o)).is_some());
    let ours = share(row.engines.get(US));
    let mut goal = "kernel time <= the incumbent's".to_string();
    let mut measured = format!("{} incumbent", fmt_ratio(ratio));
    let mut hbm = None;
    if memory_bound {
        goal.push_str(&format!(", and >= {HBM_TARGET}x the HBM roofline"));
        measured.push_str(&format!(", {} HBM roofline", fmt_ratio(ours)));
        hbm = ours.map(|s| s >= HBM_TARGET);
    }
    // A wrong output cannot meet a target (the ratio leaves it out: it has no time).
    let wrong = matches!(row.engines.get(US), Some(Outcome::Fail { .. }));
    let ok = if wrong {
        Some(false)
    } else {
        both(ratio.map(|r| r <= 1.0), hbm)
    };
    target(&format!("{stem} (resident kernel)"), &goal, measured, ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Stats;
    use std::collections::BTreeMap;

    fn ok(ns: f64, hbm_pct: Option<f64>) -> Outcome {
        let mut extra = BTreeMap::new();
        if let Some(p) = hbm_pct {
            extra.insert("hbm_roofline_pct".to_string(), p);
        }
        Outcome::Ok {
            stats: Stats::from_ns(&mut [ns]),
            extra,
            note: None,
        }
    }

    fn row(id: &str, ours: Outcome, incumbent: Outcome) -> Row {
        let mut row = Row::new(id, "kernel", None);
        row.engines.insert(US.into(), ours);
        row.engines.insert("incumbent".into(), incumbent);
        row
    }

    fn verdicts(rows: Vec<Row>) -> Vec<(String, String)> {
        let report = Report {
            rows,
            ..Report::default()
        };
        (report.libs_targets().into_iter())
            .map(|(w, _, _, v)| (w, v))
            .collect()
    }

    /// Per workload: faster than the incumbent and (memory-bound) >= 0.7 of HBM; a wrong
    /// output is NOT met; the geometric mean is over the workloads both ran correctly and
    /// NOT met while vyre-cuda is wrong anywhere. End-to-end rows are not targets.
    #[test]
    fn libs_targets_follow_the_measured_rows() {
        let fail = || Outcome::Fail { reason: "x".into() };
        let v = verdicts(vec![
            row("libs_a_kernel", ok(50.0, Some(80.0)), ok(100.0, Some(40.0))),
            row("libs_b_kernel", ok(50.0, Some(60.0)), ok(100.0, Some(30.0))),
            row("libs_c_kernel", ok(120.0, None), ok(100.0, None)),
            row("libs_c_e2e", ok(1.0, None), ok(100.0, None)),
        ]);
        let want = [
            ("libs_a (resident kernel)", "met"),
            ("libs_b (resident kernel)", "NOT met"),
            ("libs_c (resident kernel)", "NOT met"),
        ];
        for (k, (w, verdict)) in want.iter().enumerate() {
            assert_eq!((v[k].0.as_str(), v[k].1.as_str()), (*w, *verdict));
        }
        // (0.5 * 0.5 * 1.2)^(1/3) = 0.67
        assert_eq!(v[3].1, "met");
        assert_eq!(v.len(), 4);

        let v = verdicts(vec![
            row("libs_a_kernel", ok(10.0, Some(90.0)), ok(100.0, Some(40.0))),
            row("libs_d_kernel", fail(), ok(100.0, Some(40.0))),
        ]);
        assert_eq!(v[0].1, "met");
        assert_eq!(v[1].1, "NOT met", "a wrong output");
        assert_eq!(v[2].1, "NOT met", "the mean, with a wrong workload");
        assert!(verdicts(Vec::new()).is_empty());
    }
}
