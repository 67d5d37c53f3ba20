//! Replays every saved fuzz finding in `tests/fuzz_regressions/*.case`.
//!
//! * CPU (always): the emitter must not panic, every rejection must carry `Fix:`, every
//!   module the runtime loads must assemble for sm_80 and sm_90 with the CUDA 13 ptxas and
//!   the CUDA 12 one, and vyre-reference must not panic.
//! * GPU (with a device): dispatch and compare with the reference byte for byte (or both
//!   fail; an `Unsupported` rejection is also acceptable).
//!
//! A case whose `status:` is `open` documents a known, unfixed bug: its result is
//! reported but does not fail the test (set `VYRE_CUDA_FUZZ_STRICT=1` to make it fail);
//! when an open case passes, the report says so — flip it to `status: fixed`, after
//! which it must keep passing.

mod common;
#[path = "fuzz/mod.rs"]
mod fuzz;

use fuzz::case::{load_dir, regression_dir, SavedCase};
use fuzz::check::{cpu_check, gpu_check, GpuVerdict};
use fuzz::oracle::{judge, validate, Outcome};

fn strict() -> bool {
    std::env::var("VYRE_CUDA_FUZZ_STRICT").is_ok_and(|v| v == "1")
}

fn cases() -> Vec<SavedCase> {
    load_dir(&regression_dir()).unwrap_or_else(|e| panic!("cannot load regression cases: {e}"))
}

/// Kinds of finding the CPU replay can observe (the rest need a GPU).
fn cpu_kind(kind: &str) -> bool {
    ["emitter-", "missing-fix", "ptxas-", "reference-panic"]
        .iter()
        .any(|k| kind.starts_with(k))
}

/// Sorts findings into failures (fixed cases, or all under strict) and open reports.
/// `observable`: whether this replay can see the case's kind of failure (an open GPU
/// mismatch passing the CPU replay says nothing about the bug).
fn report(name: &str, results: Vec<(SavedCase, Option<String>)>, observable: fn(&str) -> bool) {
    let (mut failures, mut open_failing, mut open_passing) = (Vec::new(), 0, Vec::new());
    for (saved, problem) in &results {
        let file = saved
            .path
            .file_name()
            .map_or_else(String::new, |f| f.to_string_lossy().into_owned());
        match (saved.status.as_str(), problem) {
            ("open", Some(p)) => {
                open_failing += 1;
                println!("{name}: open {file} ({}): still fails: {p}", saved.kind);
                if strict() {
                    failures.push(format!("{file}: {p}"));
                }
            }
            ("open", None) if observable(&saved.kind) => open_passing.push(file),
            (_, Some(p)) => failures.push(format!("{file}: {p}")),
            (_, None) => {}
        }
    }
    println!(
        "{name}: {} cases replayed, {} failing, {open_failing} open and still failing",
        results.len(),
        failures.len()
    );
    for file in &open_passing {
        println!("{name}: {file} is marked open but passes now: set `status: fixed` in it");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn saved_cases_emit_assemble_and_never_panic() {
    let ptxas = common::ptxas::require_ptxas();
    let mut results = Vec::new();
    for saved in cases() {
        let case = &saved.case;
        let valid = validate(&case.program).is_ok();
        let (failures, kernels, _) = cpu_check(case, valid);
        let mut problems: Vec<String> = failures
            .iter()
            .map(|f| format!("{}: {}", f.kind, f.detail))
            .collect();
        if let Some(ptxas) = &ptxas {
            for ((_, arch), ptx) in fuzz::check::targets().iter().zip(&kernels) {
                // Every module the runtime loads, with the CUDA 13 and CUDA 12 compilers.
                for module in ptx.iter().flatten() {
                    if let Err(e) = common::ptxas::assemble_arch(ptxas, module, arch) {
                        problems.push(format!("ptxas-{arch}: {e}"));
                    }
                }
            }
        }
        if let Outcome::Panic(p) = fuzz::oracle::reference(case) {
            problems.push(format!("vyre-reference panicked: {p}"));
        }
        let problem = (!problems.is_empty()).then(|| problems.join("; "));
        results.push((saved, problem));
    }
    report("fuzz-regressions (cpu)", results, cpu_kind);
}

#[test]
fn saved_cases_match_the_reference_on_the_gpu() {
    let Some(backend) = common::gpu::backend() else {
        return;
    };
    let mut results = Vec::new();
    for saved in cases() {
        let case = &saved.case;
        if validate(&case.program).is_err() {
            // Invalid programs (emitter no-panic findings) are rejected before launch.
            let problem = backend
                .dispatch(&case.program, &case.inputs, &case.config)
                .map_or_else(
                    |e| {
                        (e.to_string().matches("Fix:").count() != 1)
                            .then(|| format!("error without Fix: {e}"))
                    },
                    |_| Some("an invalid program dispatched".to_string()),
                );
            results.push((saved, problem));
            continue;
        }
        let verdict = judge(case);
        let problem = match gpu_check(backend, case, &verdict) {
            GpuVerdict::Pass | GpuVerdict::Rejected(_) => None,
            GpuVerdict::Fail(f) => Some(format!("{}: {}", f.kind, f.detail)),
        };
        results.push((saved, problem));
    }
    report("fuzz-regressions (gpu)", results, |_| true);
}

/// Known open bug found while building the fuzzer: vyre's wire encoding — and so
/// `Program::fingerprint`, which `CudaBackend`'s kernel cache key hashes — folds `-0.0`
/// and negative-subnormal f32 literals into `+0.0`. Two programs that differ only in the
/// sign of a zero literal therefore share one cache entry, and whichever is dispatched
/// second runs the first one's kernel. Set to `false` once the key covers the literal
/// bits (then the GPU test below must pass).
const LITERAL_ZERO_SIGN_SHARES_KERNEL_OPEN: bool = false;

/// `out[i] = zero` and `out[i] = zero * in[i]` for `zero` = +0.0 and -0.0.
fn signed_zero_programs() -> Vec<(String, fuzz::case::FuzzCase)> {
    use vyre_foundation::ir::{BinOp, BufferDecl, DataType, Expr, Node, Program};
    let mut out = Vec::new();
    for (label, zero) in [("+0.0", 0.0f32), ("-0.0", -0.0f32), ("-1e-45", -1e-45f32)] {
        for multiply in [false, true] {
            let value = if multiply {
                Expr::BinOp {
                    op: BinOp::Mul,
                    left: Box::new(Expr::LitF32(zero)),
                    right: Box::new(Expr::load("a", Expr::gid_x())),
                }
            } else {
                Expr::LitF32(zero)
            };
            let program = Program::wrapped(
                vec![
                    BufferDecl::read("a", 0, DataType::F32).with_count(4),
                    BufferDecl::output("out", 1, DataType::F32).with_count(4),
                ],
                [4, 1, 1],
                vec![Node::store("out", Expr::gid_x(), value)],
            );
            let inputs = vec![[1.0f32, 2.0, -3.0, 0.5]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect()];
            out.push((
                format!("out[i] = {}{label}", if multiply { "in[i] * " } else { "" }),
                fuzz::case::FuzzCase {
                    seed: 0,
                    program,
                    inputs,
                    config: Default::default(),
                },
            ));
        }
    }
    out
}

#[test]
fn signed_zero_literals_emit_distinct_kernels() {
    let programs = signed_zero_programs();
    let (plus, minus) = (&programs[0].1, &programs[2].1);
    let target = vyre_cuda::codegen::PtxTarget::sm90();
    let a = vyre_cuda::codegen::emit_ptx(&plus.program, plus.config.workgroup_override, target)
        .unwrap();
    let b = vyre_cuda::codegen::emit_ptx(&minus.program, minus.config.workgroup_override, target)
        .unwrap();
    assert_ne!(a.ptx, b.ptx, "the emitter must keep the literal's sign");
    println!(
        "fingerprints of `out[i] = +0.0` and `out[i] = -0.0` are {}",
        if plus.program.fingerprint() == minus.program.fingerprint() {
            "EQUAL (vyre's wire encoding folds the sign; a cache keyed by it conflates them)"
        } else {
            "distinct"
        }
    );
}

#[test]
fn programs_differing_only_in_a_zero_literals_sign_get_their_own_kernels() {
    let Some(backend) = common::gpu::backend() else {
        return;
    };
    let mut problems = Vec::new();
    // Dispatch every program (in both orders), each compared with the reference.
    let programs = signed_zero_programs();
    for order in [false, true] {
        let mut list: Vec<_> = programs.iter().collect();
        if order {
            list.reverse();
        }
        for (label, case) in list {
            let verdict = judge(case);
            if let GpuVerdict::Fail(f) = gpu_check(backend, case, &verdict) {
                problems.push(format!("{label}: {}: {}", f.kind, f.detail));
            }
        }
    }
    println!(
        "signed-zero literals: {} of {} dispatches differ from the reference",
        problems.len(),
        programs.len() * 2
    );
    for p in &problems {
        println!("  {p}");
    }
    if LITERAL_ZERO_SIGN_SHARES_KERNEL_OPEN && !strict() {
        if problems.is_empty() {
            println!("signed-zero literals: the open bug no longer reproduces: set LITERAL_ZERO_SIGN_SHARES_KERNEL_OPEN = false");
        }
        return;
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A kernel around `body` for the `undefined_read` gate: `%r0` holds the thread id.
fn gate_kernel(body: &str) -> String {
    format!(
        ".version 7.8\n.target sm_90\n.address_size 64\n\n.visible .entry k(\n\t.param .u64 p\n)\n{{\n\
         \t.reg .pred %p<2>;\n\t.reg .b32 %r<4>;\n\tmov.u32 %r0, %tid.x;\n{body}\texit;\n}}\n"
    )
}

/// The definite-assignment gate (`fuzz::defined::undefined_read`, which the checker and
/// `ptx_snapshots` run on every kernel) on hand-written kernels: a read that a path reaches
/// unwritten, through a guarded branch or a `brx.idx` table, or past a nested scope whose
/// write is to its own register of the same name, is found; the same kernels with the
/// register written first pass.
#[test]
fn the_undefined_read_gate_finds_reads_that_a_path_reaches_unwritten() {
    let branch = "\tsetp.eq.u32 %p0, %r0, 0;\n\t@%p0 bra $L__1;\n\tmov.u32 %r1, 7;\n$L__1:\n\tadd.u32 %r2, %r1, 1;\n";
    let steps = "\tmov.u32 %r3, 1;\n$L__2:\n\t$L__9: .branchtargets $L__3, $L__4;\n\tbrx.idx %r3, $L__9;\n\
                 $L__3:\n\tmov.u32 %r1, 5;\n\tmov.u32 %r3, 1;\n\tbra $L__2;\n$L__4:\n\tadd.u32 %r2, %r1, 1;\n";
    let shadowed = "\t{\n\t.reg .b32 %r<2>;\n\tmov.u32 %r1, 3;\n\t}\n\tadd.u32 %r2, %r1, 1;\n";
    for (name, body) in [("branch", branch), ("brx.idx", steps), ("scope", shadowed)] {
        let found = fuzz::defined::undefined_read(&gate_kernel(body));
        assert!(
            found
                .as_deref()
                .is_some_and(|line| line.starts_with("add.u32 %r2, %r1, 1;")),
            "{name}: {found:?}"
        );
        let written = gate_kernel(&format!("\tmov.u32 %r1, 0;\n{body}"));
        assert_eq!(
            fuzz::defined::undefined_read(&written),
            None,
            "{name}, written first"
        );
    }
}

/// The barrier-form gate (`fuzz::check::unaligned_barrier`): a non-`.aligned` barrier or
/// barrier reduction, guarded or not, is found in an entry whose lanes leave by `exit`;
/// the `.aligned` forms pass, and so does a cooperative entry's segment end, where leaving
/// lanes wait at another barrier.
/// The anchoring gate (`fuzz::check::unanchored_collective`): a warp-synchronous result
/// the next conditional branch does not steer by is found, also past an unconditional
/// jump; a branch steering by it through the opaque zero (`Lowerer::anchor`), a loop's
/// back edge, a libm routine's inner branch and a member mask of the lanes present pass.
#[test]
fn the_anchoring_gate_finds_collectives_a_later_branch_may_take_in() {
    let vote = "\tvote.sync.any.pred %p1, %p0, %r9;\n";
    let steered =
        "\tsetp.eq.u32 %p2, %r8, 16;\n\tand.pred %p2, %p2, %p1;\n\txor.pred %p3, %p4, %p2;\n";
    let branch = "\t@%p3 bra $L__9;\n\texit;\n$L__9:\n";
    let unsteered = format!("{vote}\tsetp.eq.u32 %p3, %r8, 3;\n{branch}");
    let found = fuzz::check::unanchored_collective(&gate_kernel(&unsteered));
    assert!(
        found.is_some_and(|line| line.starts_with(vote.trim())),
        "{unsteered}"
    );
    let jumped = format!(
        "{vote}\tbra $L__5;\n$L__4:\n\texit;\n$L__5:\n\tsetp.eq.u32 %p3, %r8, 3;\n{branch}"
    );
    assert!(
        fuzz::check::unanchored_collective(&gate_kernel(&jumped)).is_some(),
        "{jumped}"
    );
    let passing = [
        format!("{vote}{steered}{branch}"),
        format!("$L__1:\n{vote}\tbra $L__1;\n"),
        format!("{vote}\t@%p5 bra $Lv1_1;\n$Lv1_1:\n{steered}{branch}"),
        format!("\tactivemask.b32 %r9;\n{vote}\tsetp.eq.u32 %p3, %r8, 3;\n{branch}"),
    ];
    for body in passing {
        assert_eq!(
            fuzz::check::unanchored_collective(&gate_kernel(&body)),
            None,
            "{body}"
        );
    }
}

#[test]
fn the_barrier_gate_finds_unaligned_barriers_in_exiting_entries() {
    for body in [
        "\tbarrier.sync 0;\n",
        "\t@%p0 barrier.sync 0;\n",
        "\tbarrier.red.or.pred %p1, 0, %p0;\n",
    ] {
        let found = fuzz::check::unaligned_barrier(&gate_kernel(body));
        assert_eq!(found.as_deref(), Some(body.trim()), "{body:?}");
        let segment = format!("{body}vyre_segment_end_0:\n");
        assert_eq!(fuzz::check::unaligned_barrier(&gate_kernel(&segment)), None);
    }
    for body in ["\tbar.sync 0;\n", "\tbar.red.or.pred %p1, 0, %p0;\n"] {
        assert_eq!(fuzz::check::unaligned_barrier(&gate_kernel(body)), None);
    }
}

/// The early-end gate (`fuzz::check::awaited_early_end`): a cooperative segment that
/// branches to its end and then runs a warp-synchronous instruction or a barrier before
/// that end, or whose branch follows a loop holding one, is found; the same branch as the
/// segment's last instruction, and the grid barrier after the end's label, pass.
#[test]
fn the_early_end_gate_finds_synchronisation_after_a_branch_to_the_segment_end() {
    let segment = |between: &str| {
        format!(
            "\t@%p0 bra vyre_segment_end_1;\n{between}\tbra vyre_segment_end_1;\n\
             vyre_segment_end_1:\n\tbarrier.sync 0;\n"
        )
    };
    for sync in [
        "\tredux.sync.add.u32 %r1, %r0, -1;\n",
        "\tbarrier.sync 0;\n",
        "\tbar.sync 0;\n",
    ] {
        let found = fuzz::check::awaited_early_end(&gate_kernel(&segment(sync)));
        assert_eq!(found.as_deref(), Some(sync.trim()), "{sync:?}");
    }
    let plain = segment("\tadd.u32 %r1, %r0, 1;\n");
    assert_eq!(fuzz::check::awaited_early_end(&gate_kernel(&plain)), None);
    // Leaving a loop that holds a barrier: the others' later iterations wait at it.
    let looped = |body: &str, ending: &str| {
        format!(
            "$L__1:\n\t@%p1 bra $L__2;\n{body}\tbra $L__1;\n$L__2:\n{ending}\
             \tbra vyre_segment_end_1;\n$L__3:\n\tbra vyre_segment_end_1;\n\
             vyre_segment_end_1:\n\tbarrier.sync 0;\n"
        )
    };
    let (barrier, add) = ("\tbar.sync 0;\n", "\tadd.u32 %r1, %r0, 1;\n");
    let faulted = "\t@!%p0 bra $L__3;\n";
    let found = fuzz::check::awaited_early_end(&gate_kernel(&looped(barrier, faulted)));
    assert_eq!(found.as_deref(), Some("bar.sync 0;"));
    for (body, ending) in [(add, faulted), (barrier, add)] {
        let calm = gate_kernel(&looped(body, ending));
        assert_eq!(fuzz::check::awaited_early_end(&calm), None, "{calm}");
    }
}

/// `VYRE_CUDA_FUZZ_SHRINK_HANG=<file.case>`: shrink a GPU hang. A hung kernel takes its
/// process down with it, so each draft runs in a child process (this binary replaying a
/// directory that holds just the draft) and a draft whose child outlives
/// `VYRE_CUDA_FUZZ_HANG_SECONDS` (default 8) hangs. The smallest hanging draft so far is
/// kept in `<save dir>/<name>-shrunk.case` (see `fuzz::case::save_dir`) after each step, so
/// a run cut short still leaves it; `VYRE_CUDA_FUZZ_SHRINK_SECONDS` (default 450) bounds the
/// search. Without the variable this does nothing.
#[test]
fn shrink_a_hang_out_of_process() {
    let Some(path) = std::env::var_os("VYRE_CUDA_FUZZ_SHRINK_HANG") else {
        return;
    };
    let path = std::path::PathBuf::from(path);
    let env_secs = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let hang_after = std::time::Duration::from_secs(env_secs("VYRE_CUDA_FUZZ_HANG_SECONDS", 8));
    let text = std::fs::read_to_string(&path).expect("read the hang case");
    let saved = fuzz::case::parse(&path, &text).expect("parse the hang case");
    let name = path
        .file_stem()
        .map_or_else(|| "hang".into(), |s| s.to_string_lossy().into_owned());
    let out = fuzz::case::save_dir().join(format!("{name}-shrunk.case"));
    let scratch =
        std::env::temp_dir().join(format!("vyre-cuda-hang-drafts-{}", std::process::id()));
    let mut drafts = 0u32;
    let mut hangs = |case: &fuzz::case::FuzzCase| -> bool {
        if validate(&case.program).is_err() || judge(case).lane_order_dependent {
            return false;
        }
        drafts += 1;
        let dir = scratch.join(drafts.to_string());
        let hung = hangs_in_a_child(case, &dir, hang_after);
        let _ = std::fs::remove_dir_all(&dir);
        hung
    };
    assert!(
        hangs(&saved.case),
        "{}: does not hang within {hang_after:?}",
        path.display()
    );
    let mut smallest = fuzz::shrink::measure(&saved.case);
    let mut predicate = |case: &fuzz::case::FuzzCase| {
        let hung = hangs(case);
        let size = fuzz::shrink::measure(case);
        if hung && size < smallest {
            smallest = size;
            let text = fuzz::case::render(
                case,
                "hang",
                "open",
                "shrunk out of process (a draft that hangs)",
            )
            .expect("render the draft");
            std::fs::write(&out, text).expect("write the shrunk case");
        }
        hung
    };
    let budget = fuzz::shrink::Budget {
        max_evaluations: 3000,
        max_time: std::time::Duration::from_secs(env_secs("VYRE_CUDA_FUZZ_SHRINK_SECONDS", 450)),
        freeze_own_indices: true,
    };
    let (_, stats) = fuzz::shrink::shrink(&saved.case, &mut predicate, budget);
    println!(
        "shrink-hang: {stats:?}; smallest hanging draft in {}",
        out.display()
    );
}

/// Replay `case` in a child process of this binary; `true` when it outlives `limit`
/// (the child is killed).
fn hangs_in_a_child(
    case: &fuzz::case::FuzzCase,
    dir: &std::path::Path,
    limit: std::time::Duration,
) -> bool {
    std::fs::create_dir_all(dir).expect("create the draft directory");
    let text = fuzz::case::render(case, "hang", "open", "draft").expect("render the draft");
    std::fs::write(dir.join("draft.case"), text).expect("write the draft");
    let exe = std::env::current_exe().expect("this test binary");
    let mut child = std::process::Command::new(exe)
        .args([
            "--exact",
            "saved_cases_match_the_reference_on_the_gpu",
            "--test-threads=1",
        ])
        .env("VYRE_CUDA_FUZZ_REGRESSION_DIR", dir)
        .env_remove("VYRE_CUDA_FUZZ_SHRINK_HANG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the replay");
    let start = std::time::Instant::now();
    loop {
        if child.try_wait().expect("poll the replay").is_some() {
            return false;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The constant-branch gate (`fuzz::check::constant_anchored_branch`): a predicate of
/// literals (directly, or through `selp` and `setp` of constants) xor a predicate anchoring
/// a vote is found; the same through the opaque zero first (`Lowerer::hide_constant`), and
/// a data-dependent predicate, pass. The saved case's kernel as v33 emitted it is found.
#[test]
fn the_constant_branch_gate_finds_literals_xor_an_anchor() {
    let vote = "\tmov.u32 %r8, %dynamic_smem_size;\n\tvote.sync.ballot.b32 %r3, %p0, -1;\n\
                \tsetp.eq.u32 %p1, %r8, 16;\n\tsetp.ne.and.b32 %p1, %r3, 0, %p1;\n";
    let branch = "\t@!%p3 bra $L__9;\n\texit;\n$L__9:\n";
    let literal =
        "\tsetp.eq.u32 %p4, 0, 0;\n\tselp.u32 %r2, 1, 0, %p4;\n\tsetp.ne.u32 %p2, %r2, 0;\n";
    let found = format!("{vote}{literal}\txor.pred %p3, %p2, %p1;\n{branch}");
    assert_eq!(
        fuzz::check::constant_anchored_branch(&gate_kernel(&found)).as_deref(),
        Some("xor.pred %p3, %p2, %p1;"),
        "{found}"
    );
    let passing = [
        format!("{vote}{literal}\tsetp.eq.u32 %p5, %r8, 16;\n\txor.pred %p6, %p2, %p5;\n\txor.pred %p3, %p6, %p1;\n{branch}"),
        format!("{vote}\tsetp.ne.u32 %p2, %r8, 16;\n\txor.pred %p3, %p2, %p1;\n{branch}"),
        format!("{vote}\tsetp.lt.u32 %p2, %r0, 5;\n\txor.pred %p3, %p2, %p1;\n{branch}"),
    ];
    for body in passing {
        assert_eq!(
            fuzz::check::constant_anchored_branch(&gate_kernel(&body)),
            None,
            "{body}"
        );
    }
}
