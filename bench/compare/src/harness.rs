//! What every workload gets: the options and engines ([`Ctx`], read-only) and where its
//! rows, diagnostics and log lines go ([`Sink`], saved to the JSON file after each row).

use crate::cli::Opts;
use crate::engines::Engines;
use crate::measure::{e2e_on, E2e, Sampling};
use crate::report::{self, fmt_time, Outcome, Report, Row};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use vyre_driver::DispatchConfig;

pub struct Ctx {
    pub opts: Opts,
    pub engines: Engines,
    pub config: DispatchConfig,
    /// A timed loop's budget (see [`crate::measure::measure`]).
    pub budget: Duration,
}

impl Ctx {
    pub fn new(opts: Opts, engines: Engines) -> Self {
        let budget = Duration::from_secs(if opts.quick { 5 } else { 15 });
        Self {
            opts,
            engines,
            config: DispatchConfig::default(),
            budget,
        }
    }

    /// Whether `--only` selects workload `id` (ids or prefixes).
    pub fn wants(&self, id: &str) -> bool {
        match &self.opts.only {
            None => true,
            Some(list) => list.iter().any(|w| id.starts_with(w.as_str())),
        }
    }

    /// Whether `--only` names `id` exactly (probes that run only when named).
    pub fn named(&self, id: &str) -> bool {
        self.opts.only.iter().flatten().any(|w| w == id)
    }

    /// The sample count of a row (`--quick`: a fifth, at least 10).
    pub fn samples(&self, full: usize) -> usize {
        if self.opts.quick {
            (full / 5).max(10)
        } else {
            full
        }
    }

    pub fn sampling(&self, warmup: usize, samples: usize) -> Sampling {
        Sampling {
            warmup,
            samples,
            budget: self.budget,
        }
    }

    /// Check, then time, every vyre engine on an end-to-end borrowed dispatch; each
    /// outcome goes into `row` under the engine's name.
    pub fn e2e_each(&self, row: &mut Row, job: &E2e<'_>, warmup: usize, samples: usize) {
        for engine in self.engines.vyre() {
            let outcome = match engine.backend() {
                Some(backend) => e2e_on(backend, job, &self.config, self.sampling(warmup, samples)),
                None => Outcome::Unsupported {
                    reason: "engine not available".into(),
                },
            };
            row.engines.insert(engine.name().into(), outcome);
        }
    }
}

pub struct Sink {
    pub report: Report,
    json: PathBuf,
}

impl Sink {
    pub fn new(report: Report, json: PathBuf) -> Self {
        Self { report, json }
    }

    pub fn log(&mut self, line: String) {
        println!("{line}");
        self.report.log.push(line);
    }

    /// Log a row (a line, and each engine's failure), add it to the report, save.
    pub fn push(&mut self, row: Row) {
        let mut line = format!("{:<24} {:<44}", row.id, row.measure);
        for engine in report::ENGINES {
            if let Some(o) = row.engines.get(engine) {
                let v = match o.median() {
                    Some(m) => fmt_time(m),
                    None => o.label().to_string(),
                };
                line.push_str(&format!(" | {engine}: {v}"));
            }
        }
        self.log(line);
        for engine in report::ENGINES {
            if let Some(Outcome::Fail { reason } | Outcome::Unsupported { reason }) =
                row.engines.get(engine)
            {
                let short: String = reason.chars().take(400).collect();
                self.log(format!("    {engine}: {short}"));
            }
        }
        self.report.rows.push(row);
        self.save();
    }

    /// Add a diagnostics section, save.
    pub fn diagnostics(&mut self, name: &str, values: BTreeMap<String, f64>) {
        self.report.diagnostics.insert(name.into(), values);
        self.save();
    }

    pub fn save(&self) {
        if let Ok(text) = serde_json::to_string_pretty(&self.report) {
            let _ = std::fs::write(&self.json, text);
        }
    }
}
