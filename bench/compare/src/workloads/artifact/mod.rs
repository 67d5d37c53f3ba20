//! `artifact_*` (issue 16, point 5): vyre 0.7's production route through each backend
//! registration's facets (`route`): `ProgramGraph` -> `vyre_megakernel::compile` ->
//! `TargetCompiler::compile` -> `ArtifactMaterializer::materialize` ->
//! `ArtifactInstance::submit` -> `Submission::wait`.
//!
//! Every engine runs in a process of its own: this binary again with `--artifact-child
//! PART --engine ENGINE --child-out FILE` (`child`), which opens only that engine and
//! writes its outcomes as JSON; the parts here spawn the children and merge their outcomes
//! into rows. Cold children get `CUDA_CACHE_DISABLE=1` and an empty `HOME` and
//! `XDG_CACHE_HOME` (vyre-driver-cuda's PTX disk caches live there; its and the driver's
//! cache variables are removed); warm children inherit this process's environment.
//!
//! * `artifact_submit`: warm submit+wait of a one-kernel artifact, a different input each
//!   submit (and the same input each submit, separately), against the floor's round trip;
//! * `artifact_cold`: 1-, 4- and 16-kernel chains in fresh processes: target compile,
//!   materialize and the first submit, against one module's JIT on the floor;
//! * `artifact_corpus`: the fixture corpus as one-node artifacts, one first pass;
//! * `artifact_chain`: the 16-kernel chain warm, every output checked.

mod child;
mod route;

use crate::harness::{Ctx, Sink};
use crate::measure::R;
use crate::report::{Outcome, Row, Stats};
use child::ChildReport;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub use child::run as child_main;

/// Elements of every artifact program.
pub const N: usize = 1024;
/// Kernels of the warm chain (`artifact_chain`).
pub const CHAIN_KERNELS: usize = 16;
/// Kernels of the cold chains (`artifact_cold`).
pub const COLD_SIZES: [usize; 3] = [1, 4, CHAIN_KERNELS];

pub const SUBMIT: &str = "artifact_submit_1024";
pub const SUBMIT_SAME: &str = "artifact_submit_1024_same_input";
pub const CHAIN: &str = "artifact_chain16_submit";
pub const CORPUS: &str = "artifact_corpus_first";
/// The floor's cold JIT (a child outcome; reported in the materialize rows).
pub const FLOOR_JIT: &str = "artifact_floor_jit";

/// The rows of an `n`-kernel cold chain: target compile, materialize, first submit.
pub fn cold_ids(n: usize) -> [String; 3] {
    [
        format!("artifact_cold_compile_{n}"),
        format!("artifact_cold_materialize_{n}"),
        format!("artifact_cold_first_submit_{n}"),
    ]
}

/// The backends, in the order every row times them.
const BACKENDS: [&str; 2] = ["vyre-cuda", "incumbent"];

/// Whether `--only` selects artifact workloads and nothing else (then this process opens
/// no engine: every part runs in processes of its own).
pub fn only(only: Option<&[String]>) -> bool {
    only.is_some_and(|list| !list.is_empty() && list.iter().all(|w| w.starts_with("artifact")))
}

/// A child's environment.
#[derive(Clone, Copy, PartialEq)]
enum Env {
    /// This process's.
    Warm,
    /// `CUDA_CACHE_DISABLE=1`, an empty `HOME` and `XDG_CACHE_HOME`, no cache variables.
    Cold,
}

/// Cache locations a cold child must not inherit (the driver's; vyre-driver-cuda's).
const CACHE_VARS: [&str; 3] = [
    "CUDA_CACHE_PATH",
    "VYRE_PTX_CACHE_DIR",
    "VYRE_PTX_SOURCE_CACHE_DIR",
];

/// Run `part` for `engine` in a fresh process of this binary; its report, or why none.
fn spawn(ctx: &Ctx, sink: &mut Sink, part: &str, engine: &str, env: Env) -> R<ChildReport> {
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "vyre-compare-artifact-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let got = run_child(ctx, sink, &dir, part, engine, env);
    let _ = std::fs::remove_dir_all(&dir);
    let report = got?;
    for line in &report.log {
        sink.log(format!("  [{part} {engine}] {line}"));
    }
    if let Some(device) = &report.device {
        sink.report
            .environment
            .entry("artifact children's device".into())
            .or_insert_with(|| device.clone());
    }
    Ok(report)
}

fn run_child(
    ctx: &Ctx,
    sink: &mut Sink,
    dir: &Path,
    part: &str,
    engine: &str,
    env: Env,
) -> R<ChildReport> {
    let io = |e: std::io::Error| format!("starting the {part}/{engine} child: {e}");
    let home = dir.join("home");
    std::fs::create_dir_all(&home).map_err(io)?;
    let out = dir.join("report.json");
    let exe = std::env::current_exe().map_err(io)?;
    let mut cmd = Command::new(exe);
    cmd.args(["--artifact-child", part, "--engine", engine, "--child-out"])
        .arg(&out)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("stdout")).map_err(io)?)
        .stderr(std::fs::File::create(dir.join("stderr")).map_err(io)?);
    if ctx.opts.quick {
        cmd.arg("--quick");
    }
    if env == Env::Cold {
        cmd.env("CUDA_CACHE_DISABLE", "1")
            .env("HOME", &home)
            .env("XDG_CACHE_HOME", home.join(".cache"));
        for var in CACHE_VARS {
            cmd.env_remove(var);
        }
    }
    let timeout = Duration::from_secs(if part == "corpus" { 400 } else { 150 });
    let mut child = cmd.spawn().map_err(io)?;
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status.to_string(),
            Ok(None) if started.elapsed() > timeout => {
                // Our own child, by its handle.
                let _ = child.kill();
                let _ = child.wait();
                break format!("killed after {} s", timeout.as_secs());
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => break format!("wait failed: {e}"),
        }
    };
    if env == Env::Cold {
        let left = count_files(&home);
        if left > 0 {
            sink.log(format!(
                "  [{part} {engine}] left {left} files in its fresh HOME (an engine disk cache, written, never read: it started empty)"
            ));
        }
    }
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    serde_json::from_str(&text).map_err(|_| {
        let stderr = std::fs::read_to_string(dir.join("stderr")).unwrap_or_default();
        let tail: String = stderr
            .chars()
            .rev()
            .take(600)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        format!(
            "the {part}/{engine} child ({status}) wrote no report; stderr: {}",
            tail.trim()
        )
    })
}

fn count_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| {
                    let path = e.path();
                    if path.is_dir() {
                        count_files(&path)
                    } else {
                        1
                    }
                })
                .sum()
        })
        .unwrap_or(0)
}

/// `engine`'s outcome of row `id` in a child's report (or why there is none).
fn outcome_of(got: &R<ChildReport>, id: &str) -> Outcome {
    match got {
        Err(e) => Outcome::Unsupported { reason: e.clone() },
        Ok(report) => report
            .outcomes
            .get(id)
            .cloned()
            .unwrap_or_else(|| Outcome::Unsupported {
                reason: format!("the child reported nothing for {id}"),
            }),
    }
}

/// A failed outcome is logged loudly (mismatches above all).
fn push_loud(sink: &mut Sink, row: Row) {
    for (engine, outcome) in &row.engines {
        if let Outcome::Fail { reason } = outcome {
            sink.log(format!("!!! {} {engine}: FAIL: {reason}", row.id));
        }
    }
    sink.push(row);
}

/// Part 1: warm submit+wait of the one-kernel artifact, per engine in its own process.
pub fn submit(ctx: &Ctx, sink: &mut Sink) {
    let mut rows = [
        Row::new(
            SUBMIT,
            "artifact submit+wait, 1 kernel (f32 a*s[0]+b, 1024), host bindings, new input each submit",
            None,
        ),
        Row::new(
            SUBMIT_SAME,
            "the same, the SAME input every submit (vyre-driver-cuda memoises identical inputs)",
            None,
        ),
    ];
    for engine in ["floor", "vyre-cuda", "incumbent"] {
        let got = spawn(ctx, sink, "submit", engine, Env::Warm);
        for row in &mut rows {
            row.engines.insert(engine.into(), outcome_of(&got, &row.id));
        }
    }
    let samples = if ctx.opts.quick { 60 } else { 300 };
    for row in &mut rows {
        row.notes.push(format!(
            "each engine in a fresh process of its own (this process's environment); the artifact \
             (ProgramGraph::from_program of out[i] = a[i] * s[0] + b[i]) compiled and materialized once, \
             then a warm-up (at least 100 submits and 200 ms, fresh inputs; extra.warmup_submits) and {samples} \
             timed submit+wait round trips back to back; the BindingSet (owned host Vecs) \
             built outside the timed region; every output checked against vyre-reference. Floor: the same \
             kernel hand-written, a, b and s in one pinned upload, one launch, one pinned readback, one sync"
        ));
    }
    for row in rows {
        push_loud(sink, row);
    }
}

/// Part 2: cold target compile, materialize and first submit of 1-, 4- and 16-kernel
/// chains, each sample a fresh process with empty caches; the floor's one module's JIT.
pub fn cold(ctx: &Ctx, sink: &mut Sink) {
    let runs = if ctx.opts.quick { 2 } else { 7 };
    let mut floor_runs = Vec::new();
    let mut found: BTreeMap<(usize, &str), Vec<R<ChildReport>>> = BTreeMap::new();
    // Interleaved: run r of every engine and size before run r + 1 of any.
    for _ in 0..runs {
        floor_runs.push(spawn(ctx, sink, "jit", "floor", Env::Cold));
        for n in COLD_SIZES {
            for engine in BACKENDS {
                let got = spawn(ctx, sink, &format!("cold:{n}"), engine, Env::Cold);
                found.entry((n, engine)).or_default().push(got);
            }
        }
    }
    let floor_jit = aggregate(&floor_runs, FLOOR_JIT);
    for n in COLD_SIZES {
        let ids = cold_ids(n);
        let measures = [
            format!("cold TargetCompiler::compile of a {n}-kernel chain artifact"),
            format!("cold ArtifactMaterializer::materialize, {n}-kernel chain (floor: one module's JIT)"),
            format!("cold first submit+wait, {n}-kernel chain, after materialize"),
        ];
        let plan = chain_plan(n);
        for (k, (id, measure)) in ids.iter().zip(&measures).enumerate() {
            let mut row = Row::new(id, measure, None);
            row.notes.push(plan.clone());
            row.engines.insert(
                "floor".into(),
                if k == 1 {
                    floor_jit.clone()
                } else {
                    Outcome::Unsupported {
                        reason: "hand-written PTX: the floor's reference here is one module's JIT (the materialize rows)".into(),
                    }
                },
            );
            for engine in BACKENDS {
                let runs_of = found.get(&(n, engine)).map(Vec::as_slice).unwrap_or(&[]);
                row.engines.insert(engine.into(), aggregate(runs_of, id));
            }
            row.notes.push(format!(
                "each sample a fresh process per engine ({runs} per engine, interleaved) with CUDA_CACHE_DISABLE=1 \
                 and an empty HOME/XDG_CACHE_HOME; the chain's kernels are distinct elementwise u32 kernels \
                 with fresh literals (new to every cache), neighbours of different workgroup sizes so each stays \
                 a fusion group of its own (the group count is in the notes and extra.fusion_groups); the \
                 materializer is acquired (extra.acquire_ns) and vyre_megakernel::compile run \
                 (extra.neutral_compile_ns) before the timed stages"
            ));
            if k == 1 {
                row.notes.push(
                    "floor: cuModuleLoadData + cuModuleGetFunction of one hand-written one-kernel module \
                     (the chain's first kernel shape, fresh literals) in a fresh process with \
                     CUDA_CACHE_DISABLE=1, the first JIT of that process (so it pays the driver's one-time \
                     JIT start-up, as an engine's materialize does when its acquisition JITs nothing, \
                     vyre-cuda's included; extra.second_jit_of_process_ns: a second such JIT, without it); \
                     issue 16's target: materializing N <= 16 kernels <= 1.2x this (the time / floor column)"
                        .into(),
                );
            }
            push_loud(sink, row);
        }
    }
}

/// What vyre's (engine-neutral) `vyre_megakernel::compile` makes of an `n`-kernel chain:
/// how many fusion groups, i.e. modules every target compiles.
fn chain_plan(n: usize) -> String {
    let kernels = route::chain_kernels(n, N as u32, 0);
    match route::chain_graph(&kernels, N as u32).and_then(route::neutral_compile) {
        Ok(artifact) => format!(
            "{n} kernels -> {} fusion groups (vyre_megakernel::compile)",
            artifact.fusion().len()
        ),
        Err(e) => format!("{n} kernels: vyre_megakernel::compile failed here: {e}"),
    }
}

/// The outcomes of row `id` over the runs of one engine: the stats over the runs' values,
/// each extra's median; the first run that did not succeed decides otherwise.
fn aggregate(runs: &[R<ChildReport>], id: &str) -> Outcome {
    if runs.is_empty() {
        return Outcome::Unsupported {
            reason: "not run".into(),
        };
    }
    let mut values = Vec::new();
    let mut extras: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut note = None;
    for (k, run) in runs.iter().enumerate() {
        match outcome_of(run, id) {
            Outcome::Ok {
                stats,
                extra,
                note: n,
            } => {
                values.push(stats.median_ns);
                for (key, v) in extra {
                    extras.entry(key).or_default().push(v);
                }
                note = note.or(n);
            }
            Outcome::Fail { reason } => {
                return Outcome::Fail {
                    reason: format!("process {} of {}: {reason}", k + 1, runs.len()),
                }
            }
            Outcome::Unsupported { reason } => {
                return Outcome::Unsupported {
                    reason: format!("process {} of {}: {reason}", k + 1, runs.len()),
                }
            }
        }
    }
    Outcome::Ok {
        stats: Stats::from_ns(&mut values),
        extra: extras
            .into_iter()
            .map(|(k, mut v)| (k, Stats::from_ns(&mut v).median_ns))
            .collect(),
        note,
    }
}

/// Part 3: the fixture corpus as one-node artifacts, one first pass per engine in a fresh
/// process with empty caches.
pub fn corpus(ctx: &Ctx, sink: &mut Sink) {
    let reports: Vec<(&str, R<ChildReport>)> = BACKENDS
        .iter()
        .map(|&engine| (engine, spawn(ctx, sink, "corpus", engine, Env::Cold)))
        .collect();
    let mut row = Row::new(
        CORPUS,
        "first pass, fixture corpus as 1-node artifacts (graph..submit+wait), empty caches, common matched",
        None,
    );
    row.engines.insert(
        "floor".into(),
        Outcome::Unsupported {
            reason: "no hand-written kernels for the fixture corpus".into(),
        },
    );
    let ran: Vec<&ChildReport> = reports
        .iter()
        .filter_map(|(_, r)| r.as_ref().ok())
        .filter(|r| !r.cases.is_empty())
        .collect();
    let matched = |r: &ChildReport| -> BTreeSet<String> {
        r.cases
            .iter()
            .filter(|c| c.status == "matched")
            .map(|c| c.id.clone())
            .collect()
    };
    let common: BTreeSet<String> = ran
        .iter()
        .map(|r| matched(r))
        .reduce(|a, b| a.intersection(&b).cloned().collect())
        .unwrap_or_default();
    for (engine, got) in &reports {
        let outcome = match got {
            Ok(report) if !report.cases.is_empty() => corpus_outcome(sink, engine, report, &common),
            _ => outcome_of(got, CORPUS),
        };
        row.engines.insert(engine.to_string(), outcome);
    }
    row.notes.push(format!(
        "each engine in a fresh process with CUDA_CACHE_DISABLE=1 and an empty HOME/XDG_CACHE_HOME; every \
         corpus program with test inputs (vyre-primitives and vyre-libs, the corpus of corpus_first) as \
         ProgramGraph::from_program, vyre_megakernel::compile, TargetCompiler::compile, materialize, and its \
         first case submitted once, checked against vyre-reference; the time is the sum of each program's \
         wall (graph to completion) over the {} programs every engine matched (extra.all_programs_wall_ns: \
         over all; the neutral compile, the same code for both, is in extra.common_neutral_compile_ns); \
         the materializer acquired once per process (extra.acquire_ns). No ulp_budget exists on this route: \
         vyre-driver-cuda's compiler passes none, so its Exp/Log/Sin/Cos/Tanh programs fail",
        common.len()
    ));
    push_loud(sink, row);
}

/// An engine's corpus outcome: the sum over `common`, its counts, every miss logged.
fn corpus_outcome(
    sink: &mut Sink,
    engine: &str,
    report: &ChildReport,
    common: &BTreeSet<String>,
) -> Outcome {
    let mut extra = match report.outcomes.get(CORPUS) {
        Some(Outcome::Ok { extra, .. }) => extra.clone(),
        _ => BTreeMap::new(),
    };
    let mut sum = 0.0;
    let mut stage_sums: BTreeMap<String, f64> = BTreeMap::new();
    let mut misses = Vec::new();
    for case in &report.cases {
        if common.contains(&case.id) {
            sum += case.wall_ns;
            for (stage, ns) in &case.stages {
                *stage_sums.entry(stage.clone()).or_default() += ns;
            }
        }
        if case.status != "matched" {
            let detail = case.detail.clone().unwrap_or_default();
            sink.log(format!(
                "{CORPUS} {engine}: {} {} at {}: {}",
                case.id,
                case.status,
                case.stage,
                detail.chars().take(300).collect::<String>()
            ));
            *extra
                .entry(format!("{}_at_{}", case.status, case.stage))
                .or_default() += 1.0;
            misses.push(format!("{} ({} at {})", case.id, case.status, case.stage));
        }
    }
    extra.insert("common_programs".into(), common.len() as f64);
    extra.insert(
        "all_programs_wall_ns".into(),
        report.cases.iter().map(|c| c.wall_ns).sum(),
    );
    for (stage, ns) in stage_sums {
        extra.insert(format!("common_{stage}_ns"), ns);
    }
    let note = (!misses.is_empty()).then(|| {
        let shown = misses.len().min(20);
        format!(
            "not matched ({}, each in the log): {}{}",
            misses.len(),
            misses[..shown].join(", "),
            if misses.len() > shown { ", ..." } else { "" }
        )
    });
    Outcome::Ok {
        stats: Stats::from_ns(&mut [sum]),
        extra,
        note,
    }
}

/// Part 4: the 16-kernel chain warm, per engine in its own process, outputs checked.
pub fn chain(ctx: &Ctx, sink: &mut Sink) {
    let mut row = Row::new(
        CHAIN,
        "artifact submit+wait, 16-kernel u32 chain (1024), warm, new input each submit",
        None,
    );
    row.engines.insert(
        "floor".into(),
        Outcome::Unsupported {
            reason: "no hand-written 16-kernel chain".into(),
        },
    );
    for engine in BACKENDS {
        let got = spawn(ctx, sink, "chain", engine, Env::Warm);
        row.engines.insert(engine.into(), outcome_of(&got, CHAIN));
    }
    row.notes.push(chain_plan(CHAIN_KERNELS));
    let samples = if ctx.opts.quick { 60 } else { 300 };
    row.notes.push(format!(
        "each engine in a fresh process of its own (this process's environment); the graph of (2) with \
         fixed literals, compiled and materialized once, a warm-up (at least 100 submits and 200 ms, fresh \
         inputs) and {samples} timed submit+wait back to back; each \
         input differs from a base input in one word (so no two submits see the same bytes); every output \
         checked against vyre-reference running the {CHAIN_KERNELS} nodes in order (a mismatch fails the row)"
    ));
    push_loud(sink, row);
}
