//! `jit_probe` (only when `--only` names it): wall time of the driver's JIT by method
//! (load, O0, linker, ...) on the floor's, the incumbent's and vyre-cuda's PTX, for a vadd
//! and for the corpus. Every text gets a unique unused `.global` so no JIT cache entry hits.

use super::corpus::corpus;
use crate::engines::floor::driver::{Floor, Jit};
use crate::engines::floor::ptx;
use crate::engines::Engine;
use crate::harness::{Ctx, Sink};
use crate::programs;
use crate::report::Stats;
use std::collections::BTreeMap;
use vyre_foundation::ir::Program;

/// PTX texts of one engine: (engine, set, texts).
type Set = (&'static str, &'static str, Vec<String>);

const VADD_METHODS: [(&str, Jit); 6] = [
    ("load", Jit::Load),
    ("O0", Jit::Level(0)),
    ("O1", Jit::Level(1)),
    ("O3", Jit::Level(3)),
    ("link", Jit::Linked(4)),
    ("link-O0", Jit::Linked(0)),
];
const CORPUS_METHODS: [(&str, Jit); 3] = [
    ("load", Jit::Load),
    ("O0", Jit::Level(0)),
    ("link", Jit::Linked(4)),
];

pub fn run(ctx: &Ctx, sink: &mut Sink) {
    let Some(floor) = ctx.engines.floor.get() else {
        return sink.log("jit_probe: the floor could not open the device".into());
    };
    let (sets, corpus_ids) = sets(ctx, floor);
    let mut probe = Probe {
        floor,
        salt: std::process::id() as u64 * 1_000_000,
        serial: 0,
        found: BTreeMap::new(),
        per_text: BTreeMap::new(),
    };
    for (engine, set, texts) in &sets {
        let (methods, reps): (&[(&str, Jit)], usize) = if *set == "vadd" {
            (&VADD_METHODS, 7)
        } else {
            (&CORPUS_METHODS, 1)
        };
        probe.set(&format!("{engine}.{set}"), texts, methods, reps);
    }
    per_module(sink, &mut probe, &corpus_ids);
    for (k, v) in &probe.found {
        sink.log(format!("jit_probe {k} = {v:.0}"));
    }
    sink.diagnostics("jit_probe: driver JIT by method", probe.found);
}

/// What a dispatch of `program` hands the driver's JIT, where the engine can say here.
fn jit_text(engine: &dyn Engine, program: &Program, ctx: &Ctx) -> Option<String> {
    let config = engine.config_for(program, &ctx.config);
    engine.device_ptx(program, &config)?.ok()
}

/// The texts: a vadd of each engine, then the corpus programs every vyre engine emits (so
/// the sums compare like with like), with those programs' ids in the same order.
fn sets(ctx: &Ctx, floor: &Floor) -> (Vec<Set>, Vec<&'static str>) {
    let (major, minor) = floor.facts.compute_capability;
    let mut sets: Vec<Set> = Vec::new();
    let vadd = |k: u32| programs::vadd(1024, 0x5100_0000 + k);
    sets.push((
        "floor",
        "vadd",
        vec![ptx::cold_module(major, minor, 0x5100_0000)],
    ));
    let engines = ctx.engines.vyre();
    for (k, &engine) in (1u32..).zip(engines.iter()) {
        let text = jit_text(engine, &vadd(k), ctx);
        sets.push((engine.name(), "vadd", text.into_iter().collect()));
    }
    let fixtures = corpus();
    let mut ids = Vec::new();
    let mut corpus_texts: Vec<Vec<String>> = engines.iter().map(|_| Vec::new()).collect();
    for fixture in &fixtures {
        let program: Program = (fixture.build)();
        let texts: Vec<Option<String>> = engines
            .iter()
            .map(|&engine| jit_text(engine, &program, ctx))
            .collect();
        if texts.iter().all(Option::is_some) {
            ids.push(fixture.id);
            for (list, text) in corpus_texts.iter_mut().zip(texts) {
                list.extend(text);
            }
        }
    }
    for (engine, texts) in engines.iter().zip(corpus_texts) {
        sets.push((engine.name(), "corpus", texts));
    }
    (sets, ids)
}

/// The floor's JIT timings, keyed `engine.set.*`.
struct Probe<'f> {
    floor: &'f Floor,
    /// This process's salts: `salt + serial` for every text JIT-compiled.
    salt: u64,
    serial: u64,
    found: BTreeMap<String, f64>,
    /// Each text's time of one method and repetition, keyed `engine.set.method` (kept for
    /// the sets run once per text: the corpus).
    per_text: BTreeMap<String, Vec<f64>>,
}

impl Probe<'_> {
    /// Every method on every text of one set, `reps` times each.
    fn set(&mut self, key: &str, texts: &[String], methods: &[(&str, Jit)], reps: usize) {
        let mut bytes: Vec<f64> = texts.iter().map(|t| t.len() as f64).collect();
        if bytes.is_empty() {
            return;
        }
        let m = &mut self.found;
        m.insert(format!("{key}.programs"), bytes.len() as f64);
        m.insert(
            format!("{key}.ptx_bytes.median"),
            Stats::from_ns(&mut bytes).median_ns,
        );
        for &(method, how) in methods {
            let mut times = Vec::new();
            for text in texts {
                for _ in 0..reps {
                    self.serial += 1;
                    let salted = salted(text, self.salt + self.serial);
                    match self.floor.jit_time(&salted, how) {
                        Ok(d) => times.push(d.as_secs_f64() * 1e9),
                        Err(e) => {
                            self.found.insert(format!("{key}.{method}.error: {e}"), 0.0);
                        }
                    }
                }
            }
            if times.is_empty() {
                continue;
            }
            if reps == 1 && times.len() == texts.len() {
                self.per_text
                    .insert(format!("{key}.{method}"), times.clone());
            }
            let sum: f64 = times.iter().sum();
            self.found.insert(format!("{key}.{method}.sum_ns"), sum);
            self.found.insert(
                format!("{key}.{method}.median_ns"),
                Stats::from_ns(&mut times).median_ns,
            );
        }
    }
}

/// The corpus module by module (default JIT): how many vyre-cuda modules take more than
/// twice the incumbent's time (issue 18: none may), and the ten with the largest ratio.
fn per_module(sink: &mut Sink, probe: &mut Probe<'_>, ids: &[&'static str]) {
    let (Some(ours), Some(theirs)) = (
        probe.per_text.get("vyre-cuda.corpus.load"),
        probe.per_text.get("incumbent.corpus.load"),
    ) else {
        return;
    };
    if ours.len() != ids.len() || theirs.len() != ids.len() {
        return;
    }
    let mut ratios: Vec<(f64, &str, f64, f64)> = ids
        .iter()
        .zip(ours.iter().zip(theirs))
        .map(|(id, (&a, &b))| (a / b.max(1.0), *id, a, b))
        .collect();
    ratios.sort_by(|x, y| y.0.total_cmp(&x.0));
    let over = ratios.iter().filter(|r| r.0 > 2.0).count();
    sink.log(format!(
        "jit_probe corpus.load: {over} of {} vyre-cuda modules over 2x the incumbent's JIT time",
        ratios.len()
    ));
    for (ratio, id, a, b) in ratios.iter().take(10) {
        sink.log(format!(
            "jit_probe corpus.load {id}: vyre-cuda {:.1} ms, incumbent {:.1} ms ({ratio:.2}x)",
            a / 1e6,
            b / 1e6
        ));
    }
    probe
        .found
        .insert("corpus.load.modules_over_2x".into(), over as f64);
    if let Some(worst) = ratios.first() {
        probe.found.insert("corpus.load.max_ratio".into(), worst.0);
    }
}

/// `text` with an unused `.global` named after `salt` after its header.
pub fn salted(text: &str, salt: u64) -> String {
    match text.find(".address_size 64\n") {
        Some(at) => {
            let end = at + ".address_size 64\n".len();
            format!(
                "{}.global .u32 vyre_probe_salt_{};\n{}",
                &text[..end],
                salt,
                &text[end..]
            )
        }
        None => text.to_string(),
    }
}
