//! The fuzzer's own machinery: the generator is deterministic, its programs are accepted
//! by vyre's validator (acceptance rate reported) and run on vyre-reference
//! independently of lane order; cases survive the regression-file round trip; the
//! shrinker minimises.

mod common;
#[path = "fuzz/mod.rs"]
mod fuzz;

use fuzz::gen::{generate, GenConfig};
use fuzz::oracle::{judge, reference, validate, Outcome};
use fuzz::rng::program_seed;
use std::collections::BTreeMap;

#[test]
fn generated_programs_are_valid_runnable_and_lane_order_independent() {
    let config = GenConfig::default();
    let n = 1500u64;
    let (mut drafts, mut ok, mut errors, mut lane_dependent) = (0u64, 0u64, 0u64, 0u64);
    let mut rejections: BTreeMap<String, u32> = BTreeMap::new();
    let mut reference_errors: BTreeMap<String, u32> = BTreeMap::new();
    for i in 0..n {
        let g = generate(program_seed(0xACCE, i), &config);
        drafts += u64::from(g.rejected_drafts) + 1;
        if let Some(r) = g.last_rejection {
            *rejections.entry(r.chars().take(100).collect()).or_default() += 1;
        }
        assert!(validate(&g.case.program).is_ok());
        let verdict = judge(&g.case);
        match &verdict.outcome {
            Outcome::Ok(_) => ok += 1,
            Outcome::Err(e) => {
                errors += 1;
                let key: String = e
                    .split(" cannot represent")
                    .next()
                    .unwrap_or(e)
                    .chars()
                    .take(70)
                    .collect();
                *reference_errors.entry(key).or_default() += 1;
            }
            Outcome::Panic(p) => panic!("vyre-reference panicked on seed {:#x}: {p}", g.case.seed),
        }
        lane_dependent += u64::from(verdict.lane_order_dependent);
    }
    let acceptance = n as f64 / drafts as f64;
    println!(
        "generator: {n} programs from {drafts} drafts ({:.1}% accepted by vyre's validator); reference: {ok} ok, {errors} run-time errors, {lane_dependent} lane-order dependent",
        100.0 * acceptance
    );
    for (message, count) in &rejections {
        println!("  validator rejected x{count}: {message}");
    }
    for (message, count) in &reference_errors {
        println!("  reference error x{count}: {message}");
    }
    assert!(acceptance > 0.8, "acceptance rate fell to {acceptance}");
    assert!(
        ok > n * 3 / 4,
        "too few programs run to completion: {ok} of {n}"
    );
    assert!(
        lane_dependent * 100 < n,
        "{lane_dependent} lane-order dependent programs"
    );
}

#[test]
fn generation_is_deterministic() {
    let config = GenConfig::default();
    for i in 0..50 {
        let seed = program_seed(3, i);
        let (a, b) = (generate(seed, &config).case, generate(seed, &config).case);
        assert_eq!(a.program.to_wire().unwrap(), b.program.to_wire().unwrap());
        assert_eq!(a.inputs, b.inputs);
    }
}

#[test]
fn cases_survive_the_regression_file_round_trip() {
    let config = GenConfig::default();
    for i in 0..1000 {
        let case = generate(program_seed(11, i), &config).case;
        let text = fuzz::case::render(&case, "test", "fixed", "a comment\nover two lines").unwrap();
        let back = fuzz::case::parse(std::path::Path::new("x.case"), &text).unwrap();
        assert_eq!(back.kind, "test");
        assert_eq!(back.status, "fixed");
        assert_eq!(back.case.seed, case.seed);
        assert_eq!(back.case.inputs, case.inputs);
        assert_eq!(
            back.case.program.to_wire().unwrap(),
            case.program.to_wire().unwrap(),
            "seed {:#x}",
            case.seed
        );
        assert_eq!(
            back.case.program.buffers().len(),
            case.program.buffers().len()
        );
        for (a, b) in back
            .case
            .program
            .buffers()
            .iter()
            .zip(case.program.buffers().iter())
        {
            assert_eq!(a.name(), b.name(), "declaration order must survive");
            assert_eq!(a.is_output(), b.is_output());
            assert_eq!(a.access(), b.access());
        }
        assert_eq!(
            reference(&back.case),
            reference(&case),
            "seed {:#x}",
            case.seed
        );
    }
}

#[test]
fn the_shrinker_minimises_while_the_predicate_holds() {
    // A stand-in failure: "the sm_90 kernel inlines the exact f32 division".
    let config = GenConfig::default();
    let mut predicate = |case: &fuzz::case::FuzzCase| {
        validate(&case.program).is_ok()
            && vyre_cuda::codegen::emit_ptx(
                &case.program,
                case.config.workgroup_override,
                vyre_cuda::codegen::PtxTarget::sm90(),
            )
            .is_ok_and(|k| k.ptx.contains("// vyre_div_rn_f32 inlined"))
    };
    let mut shrunk = 0;
    for i in 0..400 {
        let case = generate(program_seed(5, i), &config).case;
        if !predicate(&case) {
            continue;
        }
        let (small, stats) = fuzz::shrink::shrink(&case, &mut predicate, Default::default());
        assert!(predicate(&small));
        assert!(
            stats.after < stats.before || stats.before.0 <= 6,
            "{stats:?}"
        );
        assert!(
            stats.after.0 <= 8,
            "seed {:#x} shrank only to {:?}:\n{}",
            case.seed,
            stats.after,
            fuzz::case::pretty(&small.program)
        );
        shrunk += 1;
        if shrunk == 3 {
            println!("{}", fuzz::case::pretty(&small.program));
            break;
        }
    }
    assert_eq!(shrunk, 3);
}

#[test]
fn gpu_shrinking_keeps_own_slot_indices_and_the_lin_binding() {
    // Under `freeze_own_indices` the shrinker must not open cross-invocation races: the
    // `lin` binding and every store index survive unchanged.
    let config = GenConfig::default();
    let mut predicate = |case: &fuzz::case::FuzzCase| {
        validate(&case.program).is_ok()
            && vyre_cuda::codegen::emit_ptx(
                &case.program,
                case.config.workgroup_override,
                vyre_cuda::codegen::PtxTarget::sm90(),
            )
            .is_ok_and(|k| k.ptx.contains("st.global"))
    };
    let budget = fuzz::shrink::Budget {
        freeze_own_indices: true,
        ..Default::default()
    };
    fn stores(nodes: &[vyre_foundation::ir::Node], out: &mut Vec<String>) {
        use vyre_foundation::ir::Node;
        for n in nodes {
            match n {
                Node::Store { buffer, index, .. } => {
                    out.push(format!("{}[{}]", &**buffer, fuzz::case::expr(index)))
                }
                Node::If {
                    then, otherwise, ..
                } => {
                    stores(then, out);
                    stores(otherwise, out);
                }
                Node::Loop { body, .. } | Node::Block(body) => stores(body, out),
                Node::Region { body, .. } => stores(body, out),
                _ => {}
            }
        }
    }
    let mut checked = 0;
    for i in 0..200 {
        let case = generate(program_seed(23, i), &config).case;
        if !predicate(&case) {
            continue;
        }
        let (small, _) = fuzz::shrink::shrink(&case, &mut predicate, budget);
        let lin = |c: &fuzz::case::FuzzCase| {
            fuzz::case::pretty(&c.program)
                .lines()
                .find(|l| l.contains("let lin ="))
                .map(str::to_string)
        };
        assert_eq!(lin(&small), lin(&case), "seed {:#x}", case.seed);
        assert_eq!(
            small.program.workgroup_size(),
            case.program.workgroup_size()
        );
        let (mut before, mut after) = (Vec::new(), Vec::new());
        stores(case.program.entry(), &mut before);
        stores(small.program.entry(), &mut after);
        for s in &after {
            assert!(
                before.contains(s),
                "seed {:#x}: new store index {s}",
                case.seed
            );
        }
        checked += 1;
        if checked == 5 {
            break;
        }
    }
    assert_eq!(checked, 5);
}

#[test]
fn reference_grid_matches_the_reference() {
    // `lin` relies on the generator knowing the exact grid: every invocation must see a
    // distinct lin, and the largest lin + 1 must be the number of invocations.
    let config = GenConfig::default();
    for i in 0..100 {
        let case = generate(program_seed(17, i), &config).case;
        let floor = case.config.dispatch_elements.unwrap_or(0);
        let grid = fuzz::gen::reference_grid(&case.program, &case.inputs, floor);
        let wg = case.program.workgroup_size();
        let total: u32 = (0..3).map(|a| grid[a] * wg[a]).product();
        assert!(total >= 1);
        // Reference: count invocations with an atomic counter program over the same
        // buffers and workgroup.
        let mut buffers: Vec<_> = case.program.buffers().to_vec();
        buffers.push(
            vyre_foundation::ir::BufferDecl::read_write(
                "probe_count",
                999,
                vyre_foundation::ir::DataType::U32,
            )
            .with_count(1),
        );
        let program = vyre_foundation::ir::Program::wrapped(
            buffers,
            wg,
            vec![vyre_foundation::ir::Node::let_bind(
                "probe",
                vyre_foundation::ir::Expr::Atomic {
                    op: vyre_foundation::ir::AtomicOp::Add,
                    buffer: "probe_count".into(),
                    index: Box::new(vyre_foundation::ir::Expr::u32(0)),
                    expected: None,
                    value: Box::new(vyre_foundation::ir::Expr::u32(1)),
                    ordering: vyre_foundation::ir::MemoryOrdering::SeqCst,
                },
            )],
        );
        let mut inputs = case.inputs.clone();
        inputs.push(vec![0; 4]);
        let probe = fuzz::case::FuzzCase {
            seed: 0,
            program,
            inputs,
            config: case.config.clone(),
        };
        let Outcome::Ok(out) = reference(&probe) else {
            panic!("probe failed")
        };
        let counted = u32::from_le_bytes(out.last().unwrap()[..4].try_into().unwrap());
        // The probe has an atomic, so inputs count toward the grid as well: compare with
        // the generator's rule applied to the probe itself.
        let probe_grid = fuzz::gen::reference_grid(&probe.program, &probe.inputs, floor);
        let expected: u32 = (0..3).map(|a| probe_grid[a] * wg[a]).product();
        assert_eq!(
            counted, expected,
            "seed {:#x}: wg {wg:?} grid {probe_grid:?} floor {floor} config {:?}",
            case.seed, probe.config.dispatch_elements
        );
    }
}

#[test]
#[ignore]
fn dump_case_ptx() {
    let path = std::env::var("CASE").unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let saved = fuzz::case::parse(std::path::Path::new(&path), &text).unwrap();
    let k = vyre_cuda::codegen::emit_ptx(
        &saved.case.program,
        saved.case.config.workgroup_override,
        vyre_cuda::codegen::PtxTarget::sm90(),
    )
    .unwrap();
    println!("{}", k.ptx);
    println!("{:?}", reference(&saved.case));
}

#[test]
#[ignore]
fn dump_shard_ptx() {
    // Writes the sm_90 / PTX 9.0 kernels of one shard's first programs to /tmp/shard.
    let base =
        u64::from_str_radix(std::env::var("BASE").unwrap().trim_start_matches("0x"), 16).unwrap();
    let shard: u64 = std::env::var("SHARD").unwrap().parse().unwrap();
    let shards: u64 = std::env::var("SHARDS").unwrap().parse().unwrap();
    let count: u64 = std::env::var("COUNT").unwrap().parse().unwrap();
    let dir = std::path::Path::new("/tmp/shard");
    std::fs::create_dir_all(dir).unwrap();
    let target =
        vyre_cuda::codegen::PtxTarget::new(90, vyre_cuda::codegen::PtxIsa::new(9, 0)).unwrap();
    for local in 0..count {
        let i = local * shards + shard;
        let seed = program_seed(base, i);
        let case = generate(seed, &GenConfig::default()).case;
        if let Ok(k) =
            vyre_cuda::codegen::emit_ptx(&case.program, case.config.workgroup_override, target)
        {
            std::fs::write(dir.join(format!("{local:05}-{seed:016x}.ptx")), k.ptx).unwrap();
        }
    }
}

/// Issue 17's shape: deterministic, every program valid for the reference (subgroup
/// operations allowed), run by vyre-reference without a panic (run-time errors are part
/// of what it generates: bytes arithmetic, copies left pending), and saved cases of it
/// (subgroup and async nodes) survive the regression-file round trip.
#[test]
fn complete_shape_programs_are_valid_deterministic_and_round_trip() {
    let config = GenConfig::complete();
    let n = 300u64;
    let (mut drafts, mut ok) = (0u64, 0u64);
    let mut rejections: BTreeMap<String, u32> = BTreeMap::new();
    for i in 0..n {
        let seed = program_seed(0xC0A1, i);
        let g = generate(seed, &config);
        drafts += u64::from(g.rejected_drafts) + 1;
        if let Some(r) = g.last_rejection {
            *rejections.entry(r.chars().take(100).collect()).or_default() += 1;
        }
        assert!(validate(&g.case.program).is_ok());
        let again = generate(seed, &config).case;
        let wire = g.case.program.to_wire().unwrap();
        assert_eq!(wire, again.program.to_wire().unwrap());
        assert_eq!(g.case.inputs, again.inputs);
        let text = fuzz::case::render(&g.case, "test", "fixed", "complete").unwrap();
        let back = fuzz::case::parse(std::path::Path::new("x.case"), &text).unwrap();
        assert_eq!(back.case.program.to_wire().unwrap(), wire, "seed {seed:#x}");
        match reference(&g.case) {
            Outcome::Ok(_) => ok += 1,
            Outcome::Err(_) => {}
            Outcome::Panic(p) => panic!("vyre-reference panicked on seed {seed:#x}: {p}"),
        }
    }
    let acceptance = n as f64 / drafts as f64;
    println!(
        "complete shape: {n} programs from {drafts} drafts ({:.1}% accepted), {ok} run on the reference without error",
        100.0 * acceptance
    );
    for (message, count) in &rejections {
        println!("  validator rejected x{count}: {message}");
    }
    // The generator redrafts what the validator rejects; a collapse of the rate means
    // a construct it builds has become invalid.
    assert!(acceptance > 0.25, "acceptance rate fell to {acceptance}");
    assert!(ok > n / 3, "only {ok} of {n} programs run on the reference");
}

/// Every `Stmt::RawCopy` of a program writes the same function of its index into
/// `rmirror` (the plain load in all of them or the parity select in all of them), so
/// invocations writing one slot write one value: a program mixing the forms raced on the
/// GPU where the sequential reference ordered the writes (call 2 of 2026-11-29, three
/// programs), and the lane-reversed reference run does not catch every such race. The
/// comparison form fails the dispatch wherever it runs, so it writes nothing.
#[test]
fn raw_copies_of_a_program_write_one_function_of_the_index() {
    use vyre_foundation::ir::{BinOp, Expr, Node};
    fn collect<'a>(
        nodes: &'a [Node],
        lets: &mut BTreeMap<String, &'a Expr>,
        out: &mut Vec<(String, &'a Expr)>,
    ) {
        for node in nodes {
            match node {
                Node::Let { name, value } => {
                    lets.insert(name.to_string(), value);
                }
                Node::Store {
                    buffer,
                    index: Expr::Var(index),
                    value,
                } if buffer.as_str() == "rmirror" => out.push((index.to_string(), value)),
                Node::If {
                    then, otherwise, ..
                } => {
                    collect(then, lets, out);
                    collect(otherwise, lets, out);
                }
                Node::Loop { body, .. } => collect(body, lets, out),
                Node::Block(body) => collect(body, lets, out),
                Node::Region { body, .. } => collect(body, lets, out),
                _ => {}
            }
        }
    }
    /// The value with the index variable renamed and `Let`-held values inlined; `None`
    /// for the comparison form.
    fn shape(value: &Expr, index: &str, lets: &BTreeMap<String, &Expr>) -> Option<String> {
        let value = match value {
            Expr::Var(held) if held.as_str() != index => lets.get(held.as_str()).copied()?,
            other => other,
        };
        if let Expr::Select { cond, .. } = value {
            if matches!(**cond, Expr::BinOp { op: BinOp::Eq, ref left, .. } if matches!(**left, Expr::Load { .. }))
            {
                return None;
            }
        }
        Some(format!("{value:?}").replace(&format!("{index:?}"), "\"<index>\""))
    }
    let config = GenConfig::complete();
    let mut checked = 0;
    for i in 0..600 {
        let case = generate(program_seed(0x4A11, i), &config).case;
        let mut lets = BTreeMap::new();
        let mut stores = Vec::new();
        collect(case.program.entry(), &mut lets, &mut stores);
        let shapes: std::collections::BTreeSet<String> = stores
            .iter()
            .filter_map(|(index, value)| shape(value, index, &lets))
            .collect();
        assert!(
            shapes.len() <= 1,
            "program {i}: raw copies of several forms: {shapes:#?}"
        );
        checked += usize::from(stores.len() > 1);
    }
    assert!(
        checked > 20,
        "only {checked} programs hold two or more raw copies"
    );
}
