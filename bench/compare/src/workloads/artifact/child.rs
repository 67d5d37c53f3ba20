//! One part of the artifact rows for one engine, in a process of its own
//! (`--artifact-child PART --engine ENGINE --child-out FILE`): it opens only that engine,
//! measures, and writes a [`ChildReport`] as JSON for the parent to merge.

use super::route::{self, guarded, Route};
use super::{cold_ids, CHAIN, CHAIN_KERNELS, CORPUS, FLOOR_JIT, N, SUBMIT, SUBMIT_SAME};
use crate::engines::floor::driver::{self, DevBuf, Floor, Pinned};
use crate::engines::floor::ptx;
use crate::measure::R;
use crate::programs::{self, Rng, ALPHA, SALT};
use crate::report::{Outcome, Stats};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};
use vyre_driver::ArtifactInstance;
use vyre_foundation::ir::{BufferAccess, BufferDecl, Program, ProgramGraph};
use vyre_megakernel::Artifact;

/// What a child found: outcomes by row id, the corpus part's per-program results, its log.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ChildReport {
    pub outcomes: BTreeMap<String, Outcome>,
    #[serde(default)]
    pub cases: Vec<CaseResult>,
    #[serde(default)]
    pub log: Vec<String>,
    /// The device's name, where the child opened it.
    #[serde(default)]
    pub device: Option<String>,
}

/// One corpus program's first pass as an artifact.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaseResult {
    pub id: String,
    /// `matched`, `mismatched`, `failed` (an engine stage erred or panicked) or
    /// `reference_failed` (the engine ran; vyre-reference rejects the fixture's inputs).
    pub status: String,
    /// The stage that failed or mismatched (`graph`, `neutral_compile`, `target_compile`,
    /// `materialize`, `submit`, `output`, `reference`), empty when matched.
    pub stage: String,
    pub detail: Option<String>,
    /// Wall time from graph construction to the completion (ns), failed stages included.
    pub wall_ns: f64,
    /// Wall time per stage that ran (ns).
    pub stages: BTreeMap<String, f64>,
}

/// Run `part` for `engine`, write the report to `out`. Never panics out: a panic is
/// recorded as every expected row's failure.
pub fn run(part: &str, engine: &str, out: &Path, quick: bool) {
    let mut rep = ChildReport::default();
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        dispatch(part, engine, quick, &mut rep)
    }));
    if let Err(panic) = ran {
        let why = format!("panicked: {}", route::panic_text(&*panic));
        rep.log.push(format!("{part}/{engine}: {why}"));
        for id in expected_ids(part) {
            rep.outcomes.entry(id).or_insert_with(|| Outcome::Fail {
                reason: why.clone(),
            });
        }
    }
    let text = serde_json::to_string(&rep).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    if let Err(e) = std::fs::write(out, text) {
        eprintln!("writing {}: {e}", out.display());
        std::process::exit(3);
    }
}

/// The row ids `part` fills.
fn expected_ids(part: &str) -> Vec<String> {
    match part {
        "submit" => vec![SUBMIT.into(), SUBMIT_SAME.into()],
        "chain" => vec![CHAIN.into()],
        "corpus" => vec![CORPUS.into()],
        "jit" => vec![FLOOR_JIT.into()],
        _ => match part.strip_prefix("cold:").and_then(|n| n.parse().ok()) {
            Some(n) => cold_ids(n).to_vec(),
            None => Vec::new(),
        },
    }
}

fn dispatch(part: &str, engine: &str, quick: bool, rep: &mut ChildReport) {
    let samples = if quick { 60 } else { 300 };
    match (part, engine) {
        ("submit", "floor") => floor_submit(samples, rep),
        ("submit", _) => engine_submit(engine, samples, rep),
        ("chain", _) => engine_chain(engine, samples, rep),
        ("jit", "floor") => floor_jit(rep),
        ("corpus", _) => engine_corpus(engine, rep),
        _ => match part.strip_prefix("cold:").and_then(|n| n.parse().ok()) {
            Some(n) => engine_cold(engine, n, rep),
            None => rep
                .log
                .push(format!("unknown artifact part {part:?} for {engine}")),
        },
    }
}

/// Warm-up before a timed loop: at least `WARMUP_MIN` round trips and `WARMUP_TIME` (the
/// GPU's clocks ramp up), at most `WARMUP_MAX`, each with a fresh input (a memoised
/// identical input would leave the GPU idle).
const WARMUP_MIN: usize = 100;
const WARMUP_TIME: Duration = Duration::from_millis(200);
const WARMUP_MAX: usize = 20_000;

/// Run `once` for the warm-up; how many times it ran.
fn warm_up(mut once: impl FnMut() -> R<()>) -> R<usize> {
    let started = Instant::now();
    let mut n = 0;
    while n < WARMUP_MIN || (started.elapsed() < WARMUP_TIME && n < WARMUP_MAX) {
        once().map_err(|e| format!("warm-up {n}: {e}"))?;
        n += 1;
    }
    Ok(n)
}

/// Named host inputs of one submit.
type Inputs = Vec<(&'static str, Vec<u8>)>;

/// Every row id of `ids` gets `reason` as unsupported (the engine could not get that far).
fn unsupported(rep: &mut ChildReport, ids: &[String], reason: &str) {
    for id in ids {
        rep.outcomes.insert(
            id.clone(),
            Outcome::Unsupported {
                reason: reason.into(),
            },
        );
    }
}

fn ns(d: Duration) -> f64 {
    d.as_secs_f64() * 1e9
}

fn one(ns_value: f64, extra: BTreeMap<String, f64>, note: Option<String>) -> Outcome {
    Outcome::Ok {
        stats: Stats::from_ns(&mut [ns_value]),
        extra,
        note,
    }
}

/// A fresh literal for this process (cold rows: new to every cache, as `cold_compile`).
fn nonce() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    (t ^ (t >> 32)) as u32 ^ std::process::id().rotate_left(16)
}

/// Graph, neutral artifact, payload and instance of `graph` on `route`; an error names the
/// stage that failed.
fn materialized(
    route: &Route,
    graph: ProgramGraph,
) -> R<(Artifact, Box<dyn ArtifactInstance>, Duration)> {
    let artifact = route::neutral_compile(graph)?;
    let payload = route.compile(&artifact)?;
    let started = Instant::now();
    let instance = route.materialize(&artifact, &payload)?;
    Ok((artifact, instance, started.elapsed()))
}

/// The timed samples of a warm loop and what they returned.
struct Loop {
    total: Vec<f64>,
    submit: Vec<f64>,
    outputs: Vec<Vec<u8>>,
    warmups: usize,
}

/// The warm-up (inputs from `warm`), then submit+wait of `timed(k)` for each sample `k`,
/// back to back, the output `out` kept for the checks; bindings are built outside the
/// timed region.
fn submit_loop(
    artifact: &Artifact,
    instance: &dyn ArtifactInstance,
    warm: &mut dyn FnMut() -> Inputs,
    timed: &dyn Fn(usize) -> Inputs,
    count: usize,
    out: &str,
) -> R<Loop> {
    let warmups = warm_up(|| {
        let bindings = route::host_bindings(artifact, warm())?;
        route::submit_wait(instance, bindings).map(|_| ())
    })?;
    let mut got = Loop {
        total: Vec::with_capacity(count),
        submit: Vec::with_capacity(count),
        outputs: Vec::with_capacity(count),
        warmups,
    };
    for k in 0..count {
        let bindings = route::host_bindings(artifact, timed(k))?;
        let done =
            route::submit_wait(instance, bindings).map_err(|e| format!("submit {k}: {e}"))?;
        got.total.push(ns(done.total));
        got.submit.push(ns(done.submit));
        got.outputs
            .push(route::output(artifact, &done.completion, out)?);
    }
    Ok(got)
}

/// The outcome of a checked loop: its stats, or FAIL with the mismatches counted.
fn checked(
    mut total: Vec<f64>,
    mismatches: Vec<String>,
    extra: BTreeMap<String, f64>,
    note: String,
) -> Outcome {
    let stats = Stats::from_ns(&mut total);
    if mismatches.is_empty() {
        return Outcome::Ok {
            stats,
            extra,
            note: Some(note),
        };
    }
    Outcome::Fail {
        reason: format!(
            "MISMATCH: {} of {} outputs differ from vyre-reference (median {:.0} ns, not used); first: {}",
            mismatches.len(),
            stats.samples,
            stats.median_ns,
            mismatches[0]
        ),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    Stats::from_ns(&mut v).median_ns
}

/// One axpb input: random `a`, `b`, `s` (finite normals).
fn axpb_input(rng: &mut Rng) -> [Vec<u8>; 3] {
    [rng.f32_bytes(N), rng.f32_bytes(N), rng.f32_bytes(1)]
}

/// The axpb inputs of the timed samples.
fn axpb_inputs(seed: u64, count: usize) -> Vec<[Vec<u8>; 3]> {
    let mut rng = Rng::new(seed);
    (0..count).map(|_| axpb_input(&mut rng)).collect()
}

fn named([a, b, s]: [Vec<u8>; 3]) -> Inputs {
    vec![("a", a), ("b", b), ("s", s)]
}

/// Check each timed sample's output (`outputs[k]`: input `k`, or input 0 when `same`)
/// against vyre-reference.
fn check_axpb(inputs: &[[Vec<u8>; 3]], outputs: &[Vec<u8>], same: bool) -> Vec<String> {
    let program = programs::axpb(N as u32);
    let mut cached: Option<Result<Vec<Vec<u8>>, String>> = None;
    let mut bad = Vec::new();
    for (k, got) in outputs.iter().enumerate() {
        let j = if same { 0 } else { k };
        let [a, b, s] = &inputs[j];
        let want = match (&cached, same) {
            (Some(w), true) => w.clone(),
            _ => {
                let w = programs::reference(&program, &[a.as_slice(), b.as_slice(), s.as_slice()]);
                cached = Some(w.clone());
                w
            }
        };
        match want {
            Ok(w) if w.len() == 1 && w[0] == *got => {}
            Ok(w) => bad.push(format!(
                "sample {k}: {}",
                crate::check::Expect::Full(w)
                    .check_one(got)
                    .err()
                    .unwrap_or_default()
            )),
            Err(e) => bad.push(format!("sample {k}: reference failed: {e}")),
        }
    }
    bad
}

/// Part 1 for a backend: warm submit+wait of the one-kernel artifact, a different input
/// each submit, then the same input each submit.
fn engine_submit(engine: &str, samples: usize, rep: &mut ChildReport) {
    let ids = [SUBMIT.to_string(), SUBMIT_SAME.to_string()];
    let route = match Route::open(engine) {
        Ok(r) => r,
        Err(e) => return unsupported(rep, &ids, &e),
    };
    let graph = match ProgramGraph::from_program("axpb", programs::axpb(N as u32)) {
        Ok(g) => g,
        Err(e) => return unsupported(rep, &ids, &format!("ProgramGraph::from_program: {e}")),
    };
    let (artifact, instance, materialize) = match materialized(&route, graph) {
        Ok(m) => m,
        Err(e) => return unsupported(rep, &ids, &e),
    };
    let groups = artifact.fusion().len() as f64;
    let inputs = axpb_inputs(16, samples);
    let mut rng = Rng::new(99);
    for (id, same) in [(SUBMIT, false), (SUBMIT_SAME, true)] {
        // The same-input loop warms up on that input too: its steady state.
        let mut warm = || {
            named(if same {
                inputs[0].clone()
            } else {
                axpb_input(&mut rng)
            })
        };
        let timed = |k: usize| named(inputs[if same { 0 } else { k }].clone());
        let looped = submit_loop(
            &artifact,
            instance.as_ref(),
            &mut warm,
            &timed,
            samples,
            "out",
        );
        let outcome = match looped {
            Err(e) => Outcome::Fail { reason: e },
            Ok(l) => {
                let bad = check_axpb(&inputs, &l.outputs, same);
                let mut extra = BTreeMap::new();
                extra.insert("submit_call_median_ns".into(), median(l.submit));
                extra.insert("materialize_ns".into(), ns(materialize));
                extra.insert("fusion_groups".into(), groups);
                extra.insert("mismatched_outputs".into(), bad.len() as f64);
                extra.insert("warmup_submits".into(), l.warmups as f64);
                let note = if same {
                    "the SAME a, b, s every submit (vyre-driver-cuda memoises identical inputs); every output checked"
                } else {
                    "a different a, b, s every submit (fresh random, bindings built outside the timed region); every output checked"
                };
                checked(l.total, bad, extra, note.into())
            }
        };
        rep.outcomes.insert(id.into(), outcome);
    }
}

/// Part 1 for the floor: the same kernel hand-written; upload, launch, download, sync.
fn floor_submit(samples: usize, rep: &mut ChildReport) {
    let ids = [SUBMIT.to_string(), SUBMIT_SAME.to_string()];
    let opened = guarded("Floor::open", || {
        let floor = Floor::open(0, SALT, ALPHA)?;
        let (major, minor) = floor.facts.compute_capability;
        let kernel = floor.load_kernel(&ptx::axpb_module(major, minor), "floor_axpb")?;
        Ok((floor, kernel))
    });
    let (floor, kernel) = match opened {
        Ok(f) => f,
        Err(e) => return unsupported(rep, &ids, &e),
    };
    rep.device = Some(floor.facts.name.clone());
    let inputs = axpb_inputs(16, samples);
    for (id, same) in [(SUBMIT, false), (SUBMIT_SAME, true)] {
        let timed = |pageable| floor_loop(&floor, &kernel, &inputs, samples, same, pageable);
        let outcome = match timed(false).and_then(|pinned| Ok((pinned, timed(true)?))) {
            Err(e) => Outcome::Unsupported { reason: e },
            Ok(((pinned, warmups, outputs), (pageable, _, page_outputs))) => {
                let mut bad = check_axpb(&inputs, &outputs, same);
                bad.extend(check_axpb(&inputs, &page_outputs, same));
                let mut extra = BTreeMap::new();
                extra.insert("pageable_three_uploads_median_ns".into(), median(pageable));
                extra.insert("mismatched_outputs".into(), bad.len() as f64);
                extra.insert("warmup_round_trips".into(), warmups as f64);
                checked(
                    pinned,
                    bad,
                    extra,
                    "a, b, s in one pinned upload, one launch, one pinned readback, one stream sync \
                     (inputs written into the pinned buffer outside the timed region); extra: the \
                     same from the pageable Vecs, one upload per buffer, timed after"
                        .into(),
                )
            }
        };
        rep.outcomes.insert(id.into(), outcome);
    }
}

/// The floor's timed round trips (after its warm-up, fresh inputs), how many warm-ups, the
/// outputs: from pinned staging (one upload of a, b, s) or from the pageable Vecs.
type FloorLoop = (Vec<f64>, usize, Vec<Vec<u8>>);

fn floor_loop(
    floor: &Floor,
    kernel: &driver::OwnKernel,
    inputs: &[[Vec<u8>; 3]],
    samples: usize,
    same: bool,
    pageable: bool,
) -> R<FloorLoop> {
    let n4 = 4 * N as u64;
    let (a_off, b_off, s_off) = (0, n4, 2 * n4);
    let out_off = (2 * n4 + 4).next_multiple_of(256);
    let dev = DevBuf::new((out_off + n4) as usize)?;
    let mut packed = Pinned::new((2 * n4 + 4) as usize)?;
    let mut out = Pinned::new(n4 as usize)?;
    let mut page_out = vec![0u8; n4 as usize];
    let params = [a_off, b_off, s_off, out_off];
    // The wall of one round trip, and its output (copied after the timed region).
    let mut round_trip = |[a, b, s]: &[Vec<u8>; 3]| -> R<(Duration, Vec<u8>)> {
        if pageable {
            let started = Instant::now();
            floor.round_trip(
                kernel,
                &[
                    (a.as_slice(), a_off),
                    (b.as_slice(), b_off),
                    (s.as_slice(), s_off),
                ],
                &params,
                N as u32,
                &mut page_out,
                out_off,
                &dev,
            )?;
            return Ok((started.elapsed(), page_out.clone()));
        }
        let p = packed.as_mut_slice();
        p[..a.len()].copy_from_slice(a);
        p[b_off as usize..b_off as usize + b.len()].copy_from_slice(b);
        p[s_off as usize..].copy_from_slice(s);
        let started = Instant::now();
        floor.round_trip(
            kernel,
            &[(packed.as_slice(), 0)],
            &params,
            N as u32,
            out.as_mut_slice(),
            out_off,
            &dev,
        )?;
        Ok((started.elapsed(), out.as_slice().to_vec()))
    };
    let mut rng = Rng::new(99);
    let warmups = warm_up(|| {
        let input = if same {
            inputs[0].clone()
        } else {
            axpb_input(&mut rng)
        };
        round_trip(&input).map(|_| ())
    })?;
    let (mut taken, mut outputs) = (Vec::new(), Vec::new());
    for k in 0..samples {
        let (t, output) = round_trip(&inputs[if same { 0 } else { k }])?;
        taken.push(ns(t));
        outputs.push(output);
    }
    Ok((taken, warmups, outputs))
}

/// Part 4: warm submit+wait of the 16-kernel chain, every output checked against
/// vyre-reference running the 16 nodes in order.
fn engine_chain(engine: &str, samples: usize, rep: &mut ChildReport) {
    let ids = [CHAIN.to_string()];
    let kernels = route::chain_kernels(CHAIN_KERNELS, N as u32, 0);
    let graph = match route::chain_graph(&kernels, N as u32) {
        Ok(g) => g,
        Err(e) => return unsupported(rep, &ids, &e),
    };
    let route = match Route::open(engine) {
        Ok(r) => r,
        Err(e) => return unsupported(rep, &ids, &e),
    };
    let (artifact, instance, materialize) = match materialized(&route, graph) {
        Ok(m) => m,
        Err(e) => return unsupported(rep, &ids, &e),
    };
    let groups = artifact.fusion().len() as f64;
    // Timed sample k differs from the base input in word k (a fresh value): every input is
    // new, and the expected output is the base's with word k from a reference run of the
    // same chain over the fresh values. Warm-ups change a word to a random value.
    let samples = samples.min(N);
    let mut rng = Rng::new(44);
    let base = rng.u32_bytes(N);
    let with_word = |k: usize, v: u32| {
        let mut x = base.clone();
        x[4 * k..4 * k + 4].copy_from_slice(&v.to_le_bytes());
        vec![("v0", x)]
    };
    let fresh: Vec<u32> = (0..samples)
        .map(|k| {
            let old = u32::from_le_bytes(base[4 * k..4 * k + 4].try_into().unwrap_or([0; 4]));
            let mut v = rng.next_u32();
            if v == old {
                v ^= 1;
            }
            v
        })
        .collect();
    let mut warm_rng = Rng::new(45);
    let mut w = 0usize;
    let mut warm = || {
        w += 1;
        with_word(w % N, warm_rng.next_u32())
    };
    let timed = |k: usize| with_word(k, fresh[k]);
    let out_name = format!("v{CHAIN_KERNELS}");
    let looped = submit_loop(
        &artifact,
        instance.as_ref(),
        &mut warm,
        &timed,
        samples,
        &out_name,
    );
    let outcome = match looped {
        Err(e) => Outcome::Fail { reason: e },
        Ok(l) => {
            let bad = check_chain(&kernels, &base, &fresh, &l.outputs);
            let mut extra = BTreeMap::new();
            extra.insert("submit_call_median_ns".into(), median(l.submit));
            extra.insert("materialize_ns".into(), ns(materialize));
            extra.insert("fusion_groups".into(), groups);
            extra.insert("mismatched_outputs".into(), bad.len() as f64);
            extra.insert("warmup_submits".into(), l.warmups as f64);
            checked(
                l.total,
                bad,
                extra,
                format!(
                    "{} fusion groups; a different input every submit (one word changed); every output checked against vyre-reference running the {CHAIN_KERNELS} nodes in order",
                    artifact.fusion().len()
                ),
            )
        }
    };
    rep.outcomes.insert(CHAIN.into(), outcome);
}

/// The chain's mismatches: output `k` (input: `base` with word `k` = `fresh[k]`) against
/// the reference.
fn check_chain(
    kernels: &[Program],
    base: &[u8],
    fresh: &[u32],
    outputs: &[Vec<u8>],
) -> Vec<String> {
    let want_base = match programs::chain_reference(kernels, base) {
        Ok(w) => w,
        Err(e) => return vec![format!("reference failed: {e}")],
    };
    let small = route::chain_kernels(kernels.len(), fresh.len() as u32, 0);
    let fresh_bytes: Vec<u8> = fresh.iter().flat_map(|v| v.to_le_bytes()).collect();
    let want_fresh = match programs::chain_reference(&small, &fresh_bytes) {
        Ok(w) => w,
        Err(e) => return vec![format!("reference failed: {e}")],
    };
    let mut bad = Vec::new();
    for (k, got) in outputs.iter().enumerate() {
        let mut want = want_base.clone();
        want[4 * k..4 * k + 4].copy_from_slice(&want_fresh[4 * k..4 * k + 4]);
        if *got != want {
            bad.push(format!(
                "sample {k}: {}",
                crate::check::Expect::Full(vec![want])
                    .check_one(got)
                    .err()
                    .unwrap_or_default()
            ));
        }
    }
    bad
}

/// Part 2 for a backend, in a fresh process with empty caches: an `n`-kernel chain with
/// fresh literals: `target_compiler.compile`, `materializer.materialize`, the first
/// submit+wait (checked), each timed.
fn engine_cold(engine: &str, n: usize, rep: &mut ChildReport) {
    let ids = cold_ids(n);
    let kernels = route::chain_kernels(n, N as u32, nonce());
    let route = match Route::open(engine) {
        Ok(r) => r,
        Err(e) => return unsupported(rep, &ids, &e),
    };
    let mut extra = BTreeMap::new();
    extra.insert("kernels".into(), n as f64);
    extra.insert("acquire_ns".into(), ns(route.acquire));
    let started = Instant::now();
    let artifact = match route::chain_graph(&kernels, N as u32).and_then(route::neutral_compile) {
        Ok(a) => a,
        Err(e) => return unsupported(rep, &ids, &e),
    };
    extra.insert("neutral_compile_ns".into(), ns(started.elapsed()));
    extra.insert("fusion_groups".into(), artifact.fusion().len() as f64);
    let note = format!(
        "{n} kernels, {} fusion groups (modules)",
        artifact.fusion().len()
    );
    let started = Instant::now();
    let payload = match route.compile(&artifact) {
        Ok(p) => p,
        Err(e) => return unsupported(rep, &ids, &e),
    };
    let t_compile = started.elapsed();
    extra.insert("payload_bytes".into(), payload.bytes().len() as f64);
    rep.outcomes.insert(
        ids[0].clone(),
        one(ns(t_compile), extra.clone(), Some(note.clone())),
    );
    let started = Instant::now();
    let instance = match route.materialize(&artifact, &payload) {
        Ok(i) => i,
        Err(e) => return unsupported(rep, &ids[1..], &e),
    };
    let t_materialize = started.elapsed();
    rep.outcomes.insert(
        ids[1].clone(),
        one(ns(t_materialize), extra.clone(), Some(note.clone())),
    );
    let x = Rng::new(7).u32_bytes(N);
    let out_name = format!("v{n}");
    let first = route::host_bindings(&artifact, vec![("v0", x.clone())])
        .and_then(|b| route::submit_wait(instance.as_ref(), b))
        .and_then(|done| {
            Ok((
                done.total,
                route::output(&artifact, &done.completion, &out_name)?,
            ))
        });
    let outcome = match first {
        Err(e) => Outcome::Fail { reason: e },
        Ok((t, got)) => match programs::chain_reference(&kernels, &x) {
            Err(e) => Outcome::Unsupported {
                reason: format!("reference: {e}"),
            },
            Ok(want) if want == got => one(ns(t), extra, Some(note)),
            Ok(want) => Outcome::Fail {
                reason: format!(
                    "MISMATCH: {}",
                    crate::check::Expect::Full(vec![want])
                        .check_one(&got)
                        .err()
                        .unwrap_or_default()
                ),
            },
        },
    };
    rep.outcomes.insert(ids[2].clone(), outcome);
}

/// Part 2's reference for the floor, in a fresh process with the JIT cache disabled: the
/// driver JIT of one hand-written one-kernel module (the chain's first kernel shape, fresh
/// literals), the first of the process, as an engine's materialize is: it also pays the
/// driver's one-time JIT start-up. A second such JIT, without it, is in the extra
/// `second_jit_of_process_ns`.
fn floor_jit(rep: &mut ChildReport) {
    let salt = nonce();
    let (c, d) = (
        programs::chain_literal(0, salt) | 1,
        programs::chain_literal(1, salt),
    );
    let jitted = guarded("the floor's JIT", || {
        driver::first_jits(
            |major, minor| {
                vec![
                    ptx::chain_module(major, minor, c, d),
                    ptx::chain_module(major, minor, c ^ 2, d ^ 1),
                ]
            },
            "floor_chain",
        )
    });
    let outcome = match jitted {
        Err(e) => Outcome::Unsupported { reason: e },
        Ok((taken, device, _)) if taken.len() == 2 => {
            rep.device = Some(device);
            let mut extra = BTreeMap::new();
            extra.insert("second_jit_of_process_ns".into(), ns(taken[1]));
            one(
                ns(taken[0]),
                extra,
                Some(
                    "cuModuleLoadData + cuModuleGetFunction of one hand-written one-kernel module \
                     (y = x * c + d, fresh literals), the first JIT of a fresh process"
                        .into(),
                ),
            )
        }
        Ok((taken, ..)) => Outcome::Unsupported {
            reason: format!("{} JITs timed, 2 expected", taken.len()),
        },
    };
    rep.outcomes.insert(FLOOR_JIT.into(), outcome);
}

/// Part 3: every corpus program with test inputs as a one-node artifact, its first case
/// submitted once, in a fresh process with empty caches.
fn engine_corpus(engine: &str, rep: &mut ChildReport) {
    let route = match Route::open(engine) {
        Ok(r) => r,
        Err(e) => return unsupported(rep, &[CORPUS.to_string()], &e),
    };
    let started = Instant::now();
    for fixture in crate::workloads::corpus::corpus() {
        let Some(inputs) = fixture.inputs else {
            continue;
        };
        let program = (fixture.build)();
        let Some(case) = inputs().into_iter().next() else {
            continue;
        };
        let result = corpus_case(&route, fixture.id, &program, &case);
        rep.cases.push(result);
    }
    let total: f64 = rep.cases.iter().map(|c| c.wall_ns).sum();
    let count = |s: &str| rep.cases.iter().filter(|c| c.status == s).count() as f64;
    let mut extra = BTreeMap::new();
    extra.insert("programs".into(), rep.cases.len() as f64);
    extra.insert("matched".into(), count("matched"));
    extra.insert("mismatched".into(), count("mismatched"));
    extra.insert("failed".into(), count("failed"));
    extra.insert("reference_failed".into(), count("reference_failed"));
    extra.insert("acquire_ns".into(), ns(route.acquire));
    extra.insert("pass_wall_ns".into(), ns(started.elapsed()));
    rep.outcomes.insert(CORPUS.into(), one(total, extra, None));
}

/// One corpus program: graph, neutral compile, target compile, materialize, submit + wait
/// (each stage timed), then its outputs against vyre-reference (outside the timing).
fn corpus_case(route: &Route, id: &str, program: &Program, case: &[Vec<u8>]) -> CaseResult {
    let mut result = CaseResult {
        id: id.into(),
        status: "failed".into(),
        stage: String::new(),
        detail: None,
        wall_ns: 0.0,
        stages: BTreeMap::new(),
    };
    let started = Instant::now();
    let t = Instant::now();
    let artifact = ProgramGraph::from_program(id, program.clone())
        .map_err(|e| format!("ProgramGraph::from_program: {e}"))
        .and_then(route::neutral_compile);
    stage("neutral_compile", &mut result, t);
    let done = artifact.and_then(|artifact| {
        let t = Instant::now();
        let payload = route.compile(&artifact);
        stage("target_compile", &mut result, t);
        let payload = payload?;
        let t = Instant::now();
        let instance = route.materialize(&artifact, &payload);
        stage("materialize", &mut result, t);
        let instance = instance?;
        let t = Instant::now();
        let submitted = case_bindings(&artifact, program, case)
            .and_then(|b| route::submit_wait(instance.as_ref(), b));
        stage("submit", &mut result, t);
        Ok((artifact, submitted?))
    });
    result.wall_ns = ns(started.elapsed());
    match done {
        Err(e) => result.detail = Some(e),
        Ok((artifact, submitted)) => {
            let borrowed: Vec<&[u8]> = case.iter().map(Vec::as_slice).collect();
            let got = case_outputs(&artifact, program, &submitted.completion);
            match (programs::reference(program, &borrowed), got) {
                (Err(e), _) => {
                    // The fixture's own inputs fail the reference: no verdict on the engine.
                    result.status = "reference_failed".into();
                    result.stage = "reference".into();
                    result.detail = Some(e);
                }
                (Ok(_), Err(e)) => {
                    result.status = "mismatched".into();
                    result.stage = "output".into();
                    result.detail = Some(e);
                }
                (Ok(want), Ok(got)) => match crate::check::Expect::Full(want).check(&got) {
                    Ok(()) => {
                        result.status = "matched".into();
                        result.stage.clear();
                    }
                    Err(e) => {
                        result.status = "mismatched".into();
                        result.stage = "output".into();
                        result.detail = Some(e);
                    }
                },
            }
        }
    }
    result
}

/// Record stage `name`, begun at `t`, as the last one `result` reached.
fn stage(name: &str, result: &mut CaseResult, t: Instant) {
    result.stages.insert(name.into(), ns(t.elapsed()));
    result.stage = name.into();
}

/// Host bindings of a fixture case. Fixture inputs are vyre-reference's inputs: one per
/// buffer it takes input for (`is_reference_input`), in `Program::buffers` order, or (its
/// older form) one per non-workgroup buffer, the outputs' values unused here.
fn case_bindings(
    artifact: &Artifact,
    program: &Program,
    case: &[Vec<u8>],
) -> R<vyre_driver::BindingSet> {
    let takes: Vec<&BufferDecl> = program
        .buffers()
        .iter()
        .filter(|decl| vyre_reference::is_reference_input(decl))
        .collect();
    let named: Vec<(&str, Vec<u8>)> = if case.len() == takes.len() {
        takes
            .iter()
            .zip(case)
            .map(|(decl, bytes)| (decl.name(), bytes.clone()))
            .collect()
    } else {
        let all: Vec<&BufferDecl> = program
            .buffers()
            .iter()
            .filter(|decl| decl.access() != BufferAccess::Workgroup)
            .collect();
        if case.len() != all.len() {
            return Err(format!(
                "the fixture case has {} inputs; the program takes {} ({} buffers)",
                case.len(),
                takes.len(),
                all.len()
            ));
        }
        all.iter()
            .zip(case)
            .filter(|(decl, _)| vyre_reference::is_reference_input(decl))
            .map(|(decl, bytes)| (decl.name(), bytes.clone()))
            .collect()
    };
    route::host_bindings(artifact, named)
}

/// The completion's outputs in vyre-reference's output order (its output buffers, in
/// `Program::buffers` order).
fn case_outputs(
    artifact: &Artifact,
    program: &Program,
    completion: &vyre_driver::Completion,
) -> R<Vec<Vec<u8>>> {
    program
        .buffers()
        .iter()
        .filter(|decl| vyre_reference::is_reference_output(decl))
        .map(|decl| route::output(artifact, completion, decl.name()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `check_chain`'s shortcut (the base's reference output with word k from a reference
    /// run over the fresh values) agrees with the reference run on each whole input, and
    /// catches a wrong word.
    #[test]
    fn check_chain_matches_whole_reference_runs() {
        let kernels = route::chain_kernels(CHAIN_KERNELS, N as u32, 0);
        let mut rng = Rng::new(5);
        let base = rng.u32_bytes(N);
        let fresh: Vec<u32> = (0..3).map(|_| rng.next_u32()).collect();
        let mut outputs: Vec<Vec<u8>> = fresh
            .iter()
            .enumerate()
            .map(|(k, v)| {
                let mut x = base.clone();
                x[4 * k..4 * k + 4].copy_from_slice(&v.to_le_bytes());
                programs::chain_reference(&kernels, &x).expect("reference")
            })
            .collect();
        assert!(check_chain(&kernels, &base, &fresh, &outputs).is_empty());
        outputs[2][9] ^= 1;
        let bad = check_chain(&kernels, &base, &fresh, &outputs);
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert!(bad[0].starts_with("sample 2:"), "{bad:?}");
    }
}
