//! GPU: elementwise programs through the vector entry (4 invocations per thread, 16-byte
//! loads/stores) and the chunked, overlapped borrowed pipeline, byte-identical to
//! vyre-reference: every element size, lengths that are not multiples of 4, buffers of
//! different sizes, read-write buffers, early returns, faults in the vector body,
//! resident buffers (aliased ones take the scalar entry), chunked dispatches above
//! and below the threshold, and reductions and histograms (discarded order-independent
//! atomics on accumulated buffers) on both the vector entry and the chunked pipeline, and
//! programs reading inputs at an index every invocation shares (user-style saxpy with its
//! scale in a one-element buffer and `y` in place, a parameter block) on every path.
//! Skips without a CUDA device.

mod common;

use common::gpu::{reference, Rng};
use common::kernels::{saxpy_user, scale_bias_clamp};
use std::sync::OnceLock;
use vyre_cuda::{CudaBackend, CudaOptions};
use vyre_driver::DispatchConfig;
use vyre_foundation::ir::{BinOp, BufferDecl, DataType, Expr, Node, Program};

const CHUNKED: &str = "vyre_cuda_chunked_dispatches_total";
const VECTOR: &str = "vyre_cuda_vector_launches_total";

/// The backend these tests use: the vector entry for every launch that may take it
/// (`vector_min_invocations = 0`), so small programs exercise it too. The default
/// backend (`common::gpu::backend`) keeps small launches on the scalar entry.
fn backend() -> Option<&'static CudaBackend> {
    static VECTOR_EVERYWHERE: OnceLock<CudaBackend> = OnceLock::new();
    common::gpu::backend()?;
    Some(VECTOR_EVERYWHERE.get_or_init(|| {
        let mut options = CudaOptions::from_env().expect("options");
        options.vector_min_invocations = 0;
        CudaBackend::with_options(options).expect("open a CUDA backend")
    }))
}

/// The vector entry on at most `blocks` blocks: every thread loops over groups of 4
/// invocations a grid apart (`CudaOptions::vector_max_blocks`).
fn looping(blocks: u32) -> Option<CudaBackend> {
    common::gpu::backend()?;
    let mut options = CudaOptions::from_env().expect("options");
    options.vector_min_invocations = 0;
    options.vector_max_blocks = blocks;
    Some(CudaBackend::with_options(options).expect("open a CUDA backend"))
}

fn gid() -> Expr {
    Expr::InvocationId { axis: 0 }
}

fn bin(op: BinOp, left: Expr, right: Expr) -> Expr {
    Expr::BinOp {
        op,
        left: Box::new(left),
        right: Box::new(right),
    }
}

/// `dst[i] = src[i]` for any element type (through a `Let` index), `x[i] = (x[i] + i) * 3`
/// on a read-write u32 buffer (a load after a store in the same invocation), an early
/// `Return` for every fifth invocation, then an f32 from the index and a u64 from `x`.
fn mixed(element: DataType, src: u32, dst: u32, x: u32, f: u32) -> Program {
    Program::wrapped(
        vec![
            BufferDecl::read("src", 0, element.clone()).with_count(src),
            BufferDecl::output("dst", 1, element).with_count(dst),
            BufferDecl::read_write("x", 2, DataType::U32).with_count(x),
            BufferDecl::read_write("f", 3, DataType::F32).with_count(f),
            BufferDecl::read_write("w", 4, DataType::U64).with_count(f),
        ],
        [64, 1, 1],
        vec![
            Node::let_bind("i", gid()),
            Node::store("dst", Expr::var("i"), Expr::load("src", Expr::var("i"))),
            Node::store(
                "x",
                Expr::var("i"),
                bin(BinOp::Add, Expr::load("x", Expr::var("i")), Expr::var("i")),
            ),
            Node::store(
                "x",
                Expr::var("i"),
                bin(BinOp::Mul, Expr::load("x", Expr::var("i")), Expr::u32(3)),
            ),
            Node::if_then(
                bin(
                    BinOp::Eq,
                    bin(BinOp::Mod, gid(), Expr::u32(5)),
                    Expr::u32(0),
                ),
                vec![Node::Return],
            ),
            Node::store(
                "f",
                gid(),
                bin(BinOp::Div, Expr::cast(DataType::F32, gid()), Expr::f32(3.0)),
            ),
            Node::store(
                "w",
                gid(),
                Expr::cast(DataType::U64, Expr::load("x", gid())),
            ),
        ],
    )
}

/// Inputs of [`mixed`]: `src` one element longer than declared (which widens the
/// buffer, as in the reference), then `x`, `f` and `w`.
fn mixed_inputs(rng: &mut Rng, element: &DataType, src: u32, x: u32, f: u32) -> Vec<Vec<u8>> {
    let src_len = (src as usize + 1) * element_bytes(element);
    let mut src_bytes = rng.bytes_u32(src_len.div_ceil(4));
    src_bytes.truncate(src_len);
    vec![
        src_bytes,
        rng.bytes_u32(x as usize),
        rng.bytes_u32(f as usize),
        rng.bytes_u32(f as usize * 2),
    ]
}

/// Element types and `(src, dst, x, f)` counts [`mixed`] runs with.
const ELEMENTS: [DataType; 7] = [
    DataType::U8,
    DataType::U16,
    DataType::U32,
    DataType::F32,
    DataType::U64,
    DataType::F64,
    DataType::Vec4U32,
];
const SHAPES: [(u32, u32, u32, u32); 6] = [
    (1, 1, 1, 1),
    (3, 5, 2, 4),
    (4, 4, 4, 4),
    (37, 41, 29, 33),
    (1023, 1029, 1030, 1021),
    (4099, 4096, 4101, 4095),
];

fn element_bytes(element: &DataType) -> usize {
    match element {
        DataType::U8 => 1,
        DataType::U16 => 2,
        DataType::U32 | DataType::F32 => 4,
        DataType::U64 | DataType::F64 => 8,
        _ => 16,
    }
}

/// The GPU's outputs equal the reference's, which must succeed.
fn check_ok(backend: &CudaBackend, name: &str, program: &Program, inputs: &[Vec<u8>]) {
    let want = reference(program, inputs).unwrap_or_else(|e| panic!("{name}: reference: {e}"));
    let got = backend
        .dispatch(program, inputs, &DispatchConfig::default())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(want == got, "{name}: bytes differ from the reference");
}

/// The GPU matches the reference, or both fail (the GPU with a `Fix:`).
fn check(backend: &CudaBackend, name: &str, program: &Program, inputs: &[Vec<u8>]) {
    let want = reference(program, inputs);
    let got = backend
        .dispatch(program, inputs, &DispatchConfig::default())
        .map_err(|e| e.to_string());
    match (&want, &got) {
        (Ok(want), Ok(got)) => assert!(want == got, "{name}: bytes differ from the reference"),
        (Err(_), Err(error)) => assert!(error.matches("Fix:").count() == 1, "{name}: {error}"),
        _ => panic!("{name}: reference {want:?} vs gpu {got:?}"),
    }
}

#[test]
fn every_element_size_and_ragged_length_matches_the_reference() {
    let Some(backend) = backend() else { return };
    let mut rng = Rng::new(11);
    let mut runs = 0;
    for element in ELEMENTS {
        for (src, dst, x, f) in SHAPES {
            let program = mixed(element.clone(), src, dst, x, f);
            let inputs = mixed_inputs(&mut rng, &element, src, x, f);
            let name = format!("{element} {src}/{dst}/{x}/{f}");
            let vector = backend.metric(VECTOR);
            check_ok(backend, &name, &program, &inputs);
            assert!(backend.metric(VECTOR) > vector, "{name}: no vector launch");
            // The default backend keeps launches this small on the scalar entry.
            let scalar = common::gpu::backend().unwrap();
            let vector = scalar.metric(VECTOR);
            check_ok(scalar, &name, &program, &inputs);
            assert_eq!(
                scalar.metric(VECTOR),
                vector,
                "{name}: small launch took the vector entry"
            );
            runs += 1;
        }
    }
    println!(
        "elementwise: {runs} programs matched the reference on the vector and the scalar entry"
    );
}

#[test]
fn a_grid_smaller_than_the_range_loops_over_it_like_the_reference() {
    let mut rng = Rng::new(12);
    let mut runs = 0;
    for blocks in [1u32, 2, 3] {
        let Some(backend) = looping(blocks) else {
            return;
        };
        for element in ELEMENTS {
            for (src, dst, x, f) in SHAPES {
                let program = mixed(element.clone(), src, dst, x, f);
                let inputs = mixed_inputs(&mut rng, &element, src, x, f);
                let name = format!("{blocks} blocks: {element} {src}/{dst}/{x}/{f}");
                let vector = backend.metric(VECTOR);
                check_ok(&backend, &name, &program, &inputs);
                assert!(backend.metric(VECTOR) > vector, "{name}: no vector launch");
                runs += 1;
            }
        }
        // A fault in a later pass of the loop fails the dispatch as the reference does.
        for at in [0u32, 255, 256, 700, 1001] {
            let inputs = vec![Rng::new(u64::from(at)).bytes_u32(1024)];
            let mut odd = inputs.clone();
            odd[0][at as usize * 4] |= 1;
            let name = format!("{blocks} blocks: division by zero at {at}");
            check(&backend, &name, &division_by_zero_at(at), &odd);
            let error = backend
                .dispatch(&trap_at(at), &inputs, &DispatchConfig::default())
                .unwrap_err();
            assert!(error.to_string().matches("Fix:").count() == 1, "{error}");
        }
        for n in [1u32, 4097, 70_001] {
            let name = format!("{blocks} blocks: reductions {n}");
            check_ok(&backend, &name, &reductions(n), &reduction_inputs(n));
        }
    }
    println!("elementwise: {runs} programs matched the reference on grids of 1-3 blocks");
}

/// A trap at invocation `at`, then `out[i] = i + 1`.
fn trap_at(at: u32) -> Program {
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::I32).with_count(1024),
            BufferDecl::output("out", 1, DataType::U32).with_count(1024),
        ],
        [128, 1, 1],
        vec![
            Node::if_then(
                bin(BinOp::Eq, gid(), Expr::u32(at)),
                vec![Node::trap(Expr::u32(7), "boom")],
            ),
            Node::store("out", gid(), bin(BinOp::Add, gid(), Expr::u32(1))),
        ],
    )
}

/// `out[i] = a[i]`, then `out[i] = a[i] / d` (i32) where `d` is zero at invocation `at`
/// when `a[at]` is odd: a run-time error there.
fn division_by_zero_at(at: u32) -> Program {
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::I32).with_count(1024),
            BufferDecl::output("out", 1, DataType::I32).with_count(1024),
        ],
        [128, 1, 1],
        vec![
            Node::store("out", gid(), Expr::load("a", gid())),
            Node::store(
                "out",
                gid(),
                bin(
                    BinOp::Div,
                    Expr::load("a", gid()),
                    Expr::select(
                        bin(
                            BinOp::And,
                            bin(BinOp::Eq, gid(), Expr::u32(at)),
                            bin(
                                BinOp::Eq,
                                bin(
                                    BinOp::BitAnd,
                                    Expr::cast(DataType::U32, Expr::load("a", gid())),
                                    Expr::u32(1),
                                ),
                                Expr::u32(1),
                            ),
                        ),
                        Expr::i32(0),
                        Expr::i32(3),
                    ),
                ),
            ),
        ],
    )
}

/// No GPU needed: the programs above are valid and run on the reference (so the GPU
/// comparisons cannot pass by both sides rejecting them), and the trap faults there.
#[test]
fn the_test_programs_run_on_the_reference() {
    let mut rng = Rng::new(3);
    for element in ELEMENTS {
        for (src, dst, x, f) in SHAPES {
            let program = mixed(element.clone(), src, dst, x, f);
            let inputs = mixed_inputs(&mut rng, &element, src, x, f);
            assert_eq!(inputs[0].len() % element_bytes(&element), 0);
            reference(&program, &inputs).unwrap();
        }
    }
    let program = pipeline(1000, 501, 1300);
    reference(&program, &pipeline_inputs(1000, 501, 13)).unwrap();
    // The host fold the chunked reduction test checks against is the reference's.
    let inputs = reduction_inputs(4097);
    let want = reference(&reductions(4097), &inputs).unwrap();
    let (folds, out) = host_reductions(&inputs, 4097);
    let host: Vec<Vec<u32>> = folds.into_iter().chain([out]).collect();
    assert_eq!(want.iter().map(|w| words(w)).collect::<Vec<_>>(), host);
    let error = reference(&trap_at(5), &[Rng::new(1).bytes_u32(1024)]).unwrap_err();
    assert!(error.to_lowercase().contains("trap"), "{error}");
    let mut a = vec![0u8; 4096];
    reference(&division_by_zero_at(5), &[a.clone()]).unwrap();
    a[5 * 4] = 1;
    reference(&division_by_zero_at(5), &[a]).unwrap_err();
    // A shared-index load past the end (index 1 of one element, or of none) reads zero.
    let zero = reference(&saxpy_user(0), &saxpy_inputs(&[0.0], 1000)).unwrap();
    for (index, alpha) in [(1, &[1.5f32][..]), (0, &[])] {
        let got = reference(&saxpy_user(index), &saxpy_inputs(alpha, 1000)).unwrap();
        assert!(got == zero, "alpha[{index}] of {alpha:?}");
    }
    for params in PARAMS {
        reference(&scale_bias_clamp(1000), &clamp_inputs(params, 1000)).unwrap();
    }
}

#[test]
fn faults_in_the_vector_body_fail_like_the_reference() {
    let Some(backend) = backend() else { return };
    for at in [0u32, 1, 2, 3, 4, 5, 6, 7, 1001] {
        let program = trap_at(at);
        let inputs = vec![Rng::new(u64::from(at)).bytes_u32(1024)];
        let error = backend
            .dispatch(&program, &inputs, &DispatchConfig::default())
            .unwrap_err();
        assert!(error.to_string().matches("Fix:").count() == 1, "{error}");
        // An i32 division by zero also faults (in lane `at % 4`), after the lane's
        // first store; with an even `a[at]` the same program succeeds.
        let program = division_by_zero_at(at);
        let (mut odd, mut even) = (inputs.clone(), inputs.clone());
        odd[0][at as usize * 4] |= 1;
        even[0][at as usize * 4] &= !1;
        check(
            backend,
            &format!("division by zero at {at}"),
            &program,
            &odd,
        );
        assert!(backend
            .dispatch(&program, &odd, &DispatchConfig::default())
            .is_err());
        check_ok(
            backend,
            &format!("no division by zero at {at}"),
            &program,
            &even,
        );
    }
}

/// `out[i] = a[i] + b[i] * 3` (u32), `half[i] = a[i]` (u8, shorter than the range),
/// `x[i] ^= i` in place (u32, longer than the range), `wide[i] = b[i]` (u64); all but
/// `out` are read-write.
fn pipeline(n: u32, half: u32, out_count: u32) -> Program {
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(n),
            BufferDecl::read("b", 1, DataType::U32).with_count(n),
            BufferDecl::output("out", 2, DataType::U32).with_count(out_count),
            BufferDecl::read_write("half", 3, DataType::U8).with_count(half),
            BufferDecl::read_write("x", 4, DataType::U32).with_count(n),
            BufferDecl::read_write("wide", 5, DataType::U64).with_count(n / 3),
        ],
        [256, 1, 1],
        vec![
            Node::let_bind("i", gid()),
            Node::store(
                "out",
                Expr::var("i"),
                bin(
                    BinOp::Add,
                    Expr::load("a", Expr::var("i")),
                    bin(BinOp::Mul, Expr::load("b", Expr::var("i")), Expr::u32(3)),
                ),
            ),
            Node::store(
                "half",
                Expr::var("i"),
                Expr::cast(DataType::U8, Expr::load("a", Expr::var("i"))),
            ),
            Node::store(
                "x",
                Expr::var("i"),
                bin(
                    BinOp::BitXor,
                    Expr::load("x", Expr::var("i")),
                    Expr::var("i"),
                ),
            ),
            Node::store(
                "wide",
                Expr::var("i"),
                Expr::cast(DataType::U64, Expr::load("b", Expr::var("i"))),
            ),
        ],
    )
}

/// Inputs of [`pipeline`]: a (and a byte of a partial element), b (7 longer), half, x
/// (`x_extra` longer, and two bytes of a partial element, which the reference keeps),
/// wide.
fn pipeline_inputs(n: u32, half: u32, x_extra: usize) -> Vec<Vec<u8>> {
    let mut rng = Rng::new(u64::from(n));
    let mut half_bytes = rng.bytes_u32(half.div_ceil(4) as usize);
    half_bytes.truncate(half as usize);
    let mut a = rng.bytes_u32(n as usize);
    a.push(0x3d);
    let mut x = rng.bytes_u32(n as usize + x_extra);
    x.extend([0xa7, 0x5c]);
    vec![
        a,
        rng.bytes_u32(n as usize + 7),
        half_bytes,
        x,
        rng.bytes_u32((n / 3) as usize * 2),
    ]
}

#[test]
fn the_pipeline_program_matches_the_reference_at_small_sizes() {
    let Some(backend) = backend() else { return };
    for n in [1u32, 5, 1000, 4097] {
        let program = pipeline(n, n / 2 + 1, n + 300);
        let inputs = pipeline_inputs(n, n / 2 + 1, 13);
        check_ok(backend, &format!("pipeline {n}"), &program, &inputs);
    }
}

#[test]
fn chunked_dispatches_match_the_single_launch_byte_for_byte() {
    let Some(backend) = backend() else { return };
    // Above the threshold (32 MiB of inputs), ragged, with buffers of different sizes;
    // and just below it, which must take the ordinary path.
    for (n, chunked) in [(9_000_005u32, true), (20_000_003, true), (2_000_001, false)] {
        let program = pipeline(n, n / 2 + 3, n + 1000);
        let inputs = pipeline_inputs(n, n / 2 + 3, 4099);
        let borrowed: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
        let before = backend.metric(CHUNKED);
        let got = backend
            .dispatch_borrowed(&program, &borrowed, &DispatchConfig::default())
            .unwrap();
        assert_eq!(
            backend.metric(CHUNKED) - before,
            u64::from(chunked),
            "n={n}"
        );
        // The timed variant is one launch over the whole range.
        let single = backend
            .dispatch_borrowed_timed(&program, &borrowed, &DispatchConfig::default())
            .unwrap();
        assert!(
            got == single.outputs,
            "n={n}: chunked and single launch differ"
        );
        // Spot-check the arithmetic on the host too.
        let word = |bytes: &[u8], i: usize| {
            u32::from_le_bytes(bytes[i * 4..i * 4 + 4].try_into().unwrap())
        };
        for i in [0usize, 1, 4095, n as usize / 2, n as usize - 1] {
            let expect = word(&inputs[0], i).wrapping_add(word(&inputs[1], i).wrapping_mul(3));
            assert_eq!(word(&got[0], i), expect, "n={n} out[{i}]");
            assert_eq!(
                word(&got[2], i),
                word(&inputs[3], i) ^ i as u32,
                "n={n} x[{i}]"
            );
        }
        // out[i] past `a` (n) but inside `b` (n + 7) is b[i] * 3, then zero.
        let tail = (n as usize + 1000) * 4;
        assert!(got[0][(n as usize + 7) * 4..tail].iter().all(|&b| b == 0));
        assert_eq!(got[2].len(), inputs[3].len());
        assert_eq!(
            got[2][got[2].len() - 2..],
            [0xa7, 0x5c],
            "n={n}: x's partial element"
        );
        // A reused output Vec gives the same bytes.
        let mut reused = got.clone();
        for out in &mut reused {
            out.iter_mut().for_each(|b| *b = 0xA5);
        }
        backend
            .dispatch_borrowed_into(&program, &borrowed, &DispatchConfig::default(), &mut reused)
            .unwrap();
        assert!(reused == got, "n={n}: reused outputs differ");
        if !chunked {
            continue;
        }
        // A grid override covering only the first half: elements past the invocations
        // are zero in outputs and keep the input in read-write buffers.
        let mut config = DispatchConfig::default();
        let invocations = (n as usize / 2).next_multiple_of(256);
        config.grid_override = Some([(invocations / 256) as u32, 1, 1]);
        let before = backend.metric(CHUNKED);
        let half = backend
            .dispatch_borrowed(&program, &borrowed, &config)
            .unwrap();
        assert_eq!(backend.metric(CHUNKED) - before, 1, "n={n}: grid override");
        let single = backend
            .dispatch_borrowed_timed(&program, &borrowed, &config)
            .unwrap();
        assert!(
            half == single.outputs,
            "n={n}: grid override: chunked and single differ"
        );
        assert!(half[0][invocations * 4..].iter().all(|&b| b == 0));
        assert_eq!(half[2][invocations * 4..], inputs[3][invocations * 4..]);
        assert_eq!(half[2][..invocations * 4], got[2][..invocations * 4]);
    }
}

#[test]
fn a_fault_in_a_late_chunk_fails_the_whole_dispatch() {
    let Some(backend) = backend() else { return };
    let n = 12_000_001u32;
    let program = Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(n),
            BufferDecl::output("out", 1, DataType::U32).with_count(n),
        ],
        [256, 1, 1],
        vec![
            Node::if_then(
                bin(BinOp::Eq, gid(), Expr::u32(n - 3)),
                vec![Node::trap(Expr::u32(1), "late")],
            ),
            Node::store("out", gid(), Expr::load("a", gid())),
        ],
    );
    late_chunk_fault_fails_the_dispatch(backend, &program, &Rng::new(5).bytes_u32(n as usize));
}

/// A chunked dispatch of `program` over `a` faults in a late chunk: it fails whole (no
/// outputs, even into reused buffers) with the error the single launch reports.
fn late_chunk_fault_fails_the_dispatch(backend: &CudaBackend, program: &Program, a: &[u8]) {
    let before = backend.metric(CHUNKED);
    let mut outputs = vec![vec![1u8; 16]];
    let error = backend
        .dispatch_borrowed_into(program, &[a], &DispatchConfig::default(), &mut outputs)
        .unwrap_err();
    assert_eq!(backend.metric(CHUNKED) - before, 1);
    assert!(outputs.is_empty(), "a failed dispatch returns no outputs");
    let single = backend
        .dispatch_borrowed_timed(program, &[a], &DispatchConfig::default())
        .unwrap_err();
    assert_eq!(error.to_string(), single.to_string());
}

/// A reduction and a histogram next to an elementwise store, all guarded by `i < n`:
/// `sum[0] += a[i]` (a literal index: per-workgroup partials), `hist[a[i] & 255] += 1`
/// (a computed index, the one zeroed output), `low[i % 8] min= a[i]` and
/// `bits[b[i] & 15] ^= i` on read-write accumulators with starting contents, and
/// `out[i] = a[i] * 2` in place.
fn reductions(n: u32) -> Program {
    let i = || Expr::var("i");
    let a = || Expr::load("a", i());
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(n),
            BufferDecl::read("b", 1, DataType::U32).with_count(n),
            BufferDecl::read_write("sum", 2, DataType::U32).with_count(1),
            BufferDecl::output("hist", 3, DataType::U32).with_count(256),
            BufferDecl::read_write("low", 4, DataType::U32).with_count(8),
            BufferDecl::read_write("bits", 5, DataType::U32).with_count(16),
            BufferDecl::read_write("out", 6, DataType::U32).with_count(n),
        ],
        [256, 1, 1],
        vec![
            Node::let_bind("i", gid()),
            Node::if_then(
                bin(BinOp::Lt, i(), Expr::u32(n)),
                vec![
                    Node::let_bind("s", Expr::atomic_add("sum", Expr::u32(0), a())),
                    Node::let_bind(
                        "h",
                        Expr::atomic_add(
                            "hist",
                            bin(BinOp::BitAnd, a(), Expr::u32(255)),
                            Expr::u32(1),
                        ),
                    ),
                    Node::let_bind(
                        "m",
                        Expr::atomic_min("low", bin(BinOp::Mod, i(), Expr::u32(8)), a()),
                    ),
                    Node::let_bind(
                        "x",
                        Expr::atomic_xor(
                            "bits",
                            bin(BinOp::BitAnd, Expr::load("b", i()), Expr::u32(15)),
                            i(),
                        ),
                    ),
                    Node::store("out", i(), bin(BinOp::Mul, a(), Expr::u32(2))),
                ],
            ),
        ],
    )
}

/// Inputs of [`reductions`]: a, b, sum, low (starting minima), bits, out (all random).
fn reduction_inputs(n: u32) -> Vec<Vec<u8>> {
    let mut rng = Rng::new(u64::from(n) ^ 0xacc);
    vec![
        rng.bytes_u32(n as usize),
        rng.bytes_u32(n as usize),
        rng.bytes_u32(1),
        rng.bytes_u32(8),
        rng.bytes_u32(16),
        rng.bytes_u32(n as usize),
    ]
}

/// The host's run of the first `invocations` invocations of [`reductions`]: the four
/// accumulators (sum, histogram, minima, xor words) and `out`.
fn host_reductions(inputs: &[Vec<u8>], invocations: usize) -> (Vec<Vec<u32>>, Vec<u32>) {
    let (a, b) = (words(&inputs[0]), words(&inputs[1]));
    let mut sum = words(&inputs[2])[0];
    let mut hist = vec![0u32; 256];
    let mut low = words(&inputs[3]);
    let mut bits = words(&inputs[4]);
    let mut out = words(&inputs[5]);
    for i in 0..invocations {
        sum = sum.wrapping_add(a[i]);
        hist[(a[i] & 255) as usize] += 1;
        low[i % 8] = low[i % 8].min(a[i]);
        bits[(b[i] & 15) as usize] ^= i as u32;
        out[i] = a[i].wrapping_mul(2);
    }
    (vec![vec![sum], hist, low, bits], out)
}

fn words(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
        .collect()
}

#[test]
fn reductions_take_the_vector_entry_and_match_the_reference() {
    let Some(backend) = backend() else { return };
    for n in [1u32, 5, 1000, 4097, 70_001] {
        let program = reductions(n);
        let before = backend.metric(VECTOR);
        check_ok(
            backend,
            &format!("reductions {n}"),
            &program,
            &reduction_inputs(n),
        );
        assert!(
            backend.metric(VECTOR) > before,
            "n={n}: took the scalar entry"
        );
    }
}

#[test]
fn chunked_reductions_match_the_single_launch_and_the_host() {
    let Some(backend) = backend() else { return };
    let n = 9_000_005u32;
    let program = reductions(n);
    let inputs = reduction_inputs(n);
    let borrowed: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
    for (label, config) in [
        ("whole range", DispatchConfig::default()),
        ("first half", {
            let mut config = DispatchConfig::default();
            config.grid_override = Some([(n / 2).div_ceil(256), 1, 1]);
            config
        }),
    ] {
        let invocations = config
            .grid_override
            .map_or(n.div_ceil(256) * 256, |grid| grid[0] * 256)
            .min(n) as usize;
        let before = backend.metric(CHUNKED);
        let got = backend
            .dispatch_borrowed(&program, &borrowed, &config)
            .unwrap();
        assert_eq!(backend.metric(CHUNKED) - before, 1, "{label}: not chunked");
        let single = backend
            .dispatch_borrowed_timed(&program, &borrowed, &config)
            .unwrap();
        assert!(
            got == single.outputs,
            "{label}: chunked and single launch differ"
        );
        let (folds, doubled) = host_reductions(&inputs, invocations);
        for (k, (got, want)) in got.iter().zip(&folds).enumerate() {
            assert!(
                words(got) == *want,
                "{label}: accumulator {k} differs from the host"
            );
        }
        let out = words(&got[4]);
        assert_eq!(out.len(), n as usize);
        assert!(out == doubled, "{label}: out differs from the host");
        // Reused output Vecs (stale bytes, wrong sizes) give the same bytes.
        let mut reused = vec![vec![0xA5u8; 3]; 5];
        backend
            .dispatch_borrowed_into(&program, &borrowed, &config, &mut reused)
            .unwrap();
        assert!(reused == got, "{label}: reused outputs differ");
    }
}

#[test]
fn a_fault_in_a_chunked_reduction_returns_nothing() {
    let Some(backend) = backend() else { return };
    let n = 12_000_001u32;
    let program = Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(n),
            BufferDecl::output("sum", 1, DataType::U32).with_count(1),
        ],
        [256, 1, 1],
        vec![
            Node::if_then(
                bin(BinOp::Eq, gid(), Expr::u32(n - 3)),
                vec![Node::trap(Expr::u32(1), "late")],
            ),
            Node::let_bind(
                "s",
                Expr::atomic_add("sum", Expr::u32(0), Expr::load("a", gid())),
            ),
        ],
    );
    late_chunk_fault_fails_the_dispatch(backend, &program, &Rng::new(6).bytes_u32(n as usize));
    // The next dispatch on the same backend is unaffected.
    let ok = reductions(4097);
    check_ok(backend, "after the fault", &ok, &reduction_inputs(4097));
}

#[test]
fn resident_elementwise_dispatch_matches_the_reference_and_aliases_safely() {
    let Some(backend) = backend() else { return };
    let n = 100_003u32;
    let half = n / 2 + 1;
    let program = pipeline(n, half, n + 5);
    let inputs = pipeline_inputs(n, half, 0);
    let want = reference(&program, &inputs).unwrap();
    // Binding order: a, b, out, half, x, wide; each input's buffer is as long as the input
    // (a and x end in a partial element).
    let sizes = [
        inputs[0].len(),
        inputs[1].len(),
        (n as usize + 5) * 4,
        inputs[2].len(),
        inputs[3].len(),
        inputs[4].len(),
    ];
    let handles: Vec<_> = sizes
        .iter()
        .map(|&len| backend.allocate_resident(len).unwrap())
        .collect();
    backend.upload_resident(&handles[0], &inputs[0]).unwrap();
    for (handle, input) in [1, 3, 4, 5].into_iter().zip(&inputs[1..]) {
        backend.upload_resident(&handles[handle], input).unwrap();
    }
    backend
        .dispatch_resident_timed(&program, &handles, &DispatchConfig::default())
        .unwrap();
    for (out, handle) in want
        .iter()
        .zip([&handles[2], &handles[3], &handles[4], &handles[5]])
    {
        assert!(backend.download_resident(handle).unwrap() == *out);
    }
    // In place through an alias: `out` and `a` are one buffer.
    let step = Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(n),
            BufferDecl::output("out", 1, DataType::U32).with_count(n),
        ],
        [256, 1, 1],
        vec![
            Node::store("out", gid(), Expr::u32(9)),
            Node::store(
                "out",
                gid(),
                bin(BinOp::Add, Expr::load("a", gid()), Expr::u32(1)),
            ),
        ],
    );
    let aliased = [handles[0].clone(), handles[0].clone()];
    backend
        .dispatch_resident_timed(&step, &aliased, &DispatchConfig::default())
        .unwrap();
    let got = backend.download_resident(&handles[0]).unwrap();
    // Invocation by invocation, the load sees its own earlier store of 9; the byte of the
    // partial element past `n` is never addressed and stays.
    let (whole, tail) = got.split_at(n as usize * 4);
    assert!(whole.chunks(4).all(|w| w == 10u32.to_le_bytes()));
    assert_eq!(tail, [0x3d]);
    for handle in handles {
        backend.free_resident(handle).unwrap();
    }
}

/// Little-endian bytes of `values`.
fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Inputs of [`saxpy_user`]: `alpha`, then `x` and `y` of `n` random words (any f32 bits:
/// NaNs, infinities and subnormals included).
fn saxpy_inputs(alpha: &[f32], n: usize) -> Vec<Vec<u8>> {
    let mut rng = Rng::new(n as u64 ^ 0x5a);
    vec![f32_bytes(alpha), rng.bytes_u32(n), rng.bytes_u32(n)]
}

/// Parameter blocks of [`scale_bias_clamp`]: all four; two (`lo` past the end reads zero,
/// `hi` is `p[1]`); none (every parameter reads zero).
const PARAMS: [&[f32]; 3] = [&[0.37, -2.5, -100.0, 250.0], &[-1.25, 3.0], &[]];

/// Inputs of [`scale_bias_clamp`]: the parameters and `n` random words of `x`.
fn clamp_inputs(params: &[f32], n: usize) -> Vec<Vec<u8>> {
    vec![f32_bytes(params), Rng::new(n as u64 ^ 0xc1).bytes_u32(n)]
}

/// Where a dispatch ran, from the backend's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    Scalar,
    Vector,
    Chunked,
}

/// Invocation counts that take each path on the default backend: below
/// `vector_min_invocations` (2^16), above it, and with at least 32 MiB of inputs
/// (`bytes_per_invocation` of input each).
fn sizes(bytes_per_invocation: usize) -> [(usize, Path); 3] {
    let chunked = (32 << 20) / bytes_per_invocation + 4099;
    [
        (1000, Path::Scalar),
        (70_001, Path::Vector),
        (chunked, Path::Chunked),
    ]
}

/// Dispatches on the default backend, checks the outputs against the reference byte for
/// byte (and, when chunked, against the single launch), and returns the path taken.
fn run_checked(name: &str, program: &Program, inputs: &[Vec<u8>]) -> Option<Path> {
    let backend = common::gpu::backend()?;
    let want = reference(program, inputs).unwrap_or_else(|e| panic!("{name}: reference: {e}"));
    let (vector, chunked) = (backend.metric(VECTOR), backend.metric(CHUNKED));
    let got = backend
        .dispatch(program, inputs, &DispatchConfig::default())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(want == got, "{name}: bytes differ from the reference");
    let path = if backend.metric(CHUNKED) > chunked {
        let borrowed: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
        let single = backend
            .dispatch_borrowed_timed(program, &borrowed, &DispatchConfig::default())
            .unwrap_or_else(|e| panic!("{name}: single launch: {e}"));
        assert!(single.outputs == got, "{name}: single launch differs");
        Path::Chunked
    } else if backend.metric(VECTOR) > vector {
        Path::Vector
    } else {
        Path::Scalar
    };
    Some(path)
}

#[test]
fn user_saxpy_matches_the_reference_on_every_path() {
    for (n, path) in sizes(8) {
        let name = format!("saxpy {n}");
        let inputs = saxpy_inputs(&[-1.75], n);
        let Some(took) = run_checked(&name, &saxpy_user(0), &inputs) else {
            return;
        };
        assert_eq!(took, path, "{name}");
    }
}

/// `alpha[1]` of a one-element `alpha`, and `alpha[0]` of an empty one: zero, as in the
/// reference, on every path (the whole-buffer copy of an empty buffer included).
#[test]
fn user_saxpy_past_the_end_of_alpha_reads_zero_on_every_path() {
    for (n, path) in sizes(8) {
        for (index, alpha) in [(1, &[1.5f32][..]), (0, &[])] {
            let name = format!("saxpy alpha[{index}] of {alpha:?}, {n}");
            let inputs = saxpy_inputs(alpha, n);
            let Some(took) = run_checked(&name, &saxpy_user(index), &inputs) else {
                return;
            };
            assert_eq!(took, path, "{name}");
        }
    }
}

/// The short parameter blocks run below the chunked size only: the reference needs about
/// 10 s per chunked run of this program.
#[test]
fn parameters_in_a_buffer_match_the_reference_on_every_path() {
    for (n, path) in sizes(4) {
        let blocks = if path == Path::Chunked {
            &PARAMS[..1]
        } else {
            &PARAMS
        };
        for &params in blocks {
            let name = format!("scale/bias/clamp {params:?}, {n}");
            let inputs = clamp_inputs(params, n);
            let program = scale_bias_clamp(n as u32);
            let Some(took) = run_checked(&name, &program, &inputs) else {
                return;
            };
            assert_eq!(took, path, "{name}");
        }
    }
}

/// Resident buffers: the scale bound in place (a one-element buffer, not 16-byte
/// vectorised) keeps the vector entry.
#[test]
fn resident_user_saxpy_takes_the_vector_entry() {
    let Some(backend) = common::gpu::backend() else {
        return;
    };
    let n = 70_001;
    let inputs = saxpy_inputs(&[0.625], n);
    let want = reference(&saxpy_user(0), &inputs).unwrap();
    let handles: Vec<_> = (inputs.iter())
        .map(|input| {
            let handle = backend.allocate_resident(input.len()).unwrap();
            backend.upload_resident(&handle, input).unwrap();
            handle
        })
        .collect();
    let before = backend.metric(VECTOR);
    backend
        .dispatch_resident_timed(&saxpy_user(0), &handles, &DispatchConfig::default())
        .unwrap();
    assert!(backend.metric(VECTOR) > before, "took the scalar entry");
    assert!(backend.download_resident(&handles[2]).unwrap() == want[0]);
    for handle in handles {
        backend.free_resident(handle).unwrap();
    }
}
