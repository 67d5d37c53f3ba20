//! GPU acceptance sweep for the bit-exact libm ports (issue 3, item 3).
//!
//! For each transcendental `UnOp`, 2^24 inputs spread over every sign and exponent (the
//! patterns `i << 8 | (i & 0xFF)`), plus the special values (±0, ±inf, NaN, subnormals,
//! ±MIN_POSITIVE, ±MAX, the routines' branch thresholds, points near multiples of pi/2,
//! large arguments, the exp/sinh/cosh overflow and underflow limits) run on the GPU in
//! dispatches of 2^22 elements. The expected bits are the reference's formula
//! `canonical_f32(libm::<fn>f(canonical_f32(x)))`, computed on the CPU on all cores.
//!
//! Prints `libm sweep <fn>: <N> inputs, <D> differing` per function (with the first
//! differing inputs) and fails if a function the emitter lowers (a ported one) differs
//! anywhere. Without a GPU it prints `skipped: no CUDA device`.
//!
//! `Reciprocal` and `InverseSqrt` are swept the same way, and f32 division (which the
//! emitter computes through its inlined exact division, not `div.rn.f32`: ptxas's fast path
//! where three comparisons allow it, exact f64 steps elsewhere) on 2^24 pairs over every
//! exponent plus every pair of the special values, and by literal divisors.
//!
//! With `VYRE_LIBM_SWEEP_EXHAUSTIVE=1`, a second test checks all 2^32 inputs of each
//! function instead (a few minutes on an H200); `VYRE_LIBM_SWEEP_ONLY=sinf,cosf` limits
//! it to the named functions.

mod common;

use std::time::Instant;
use vyre_cuda::codegen::{emit_ptx, PtxTarget};
use vyre_driver::DispatchConfig;
use vyre_foundation::ir::{BinOp, BufferDecl, DataType, Expr, Node, Program, UnOp};

const BATCH: u32 = 1 << 22;

type Fun = fn(f32) -> f32;

/// The ported routines, and the two operators computed through the emitter's exact f32
/// division (`1 / x`, `1 / sqrt(x)`, as `vyre_reference::ieee754` writes them).
fn routines() -> [(UnOp, &'static str, Fun); 15] {
    [
        (UnOp::Reciprocal, "reciprocal", |x| 1.0 / x),
        (UnOp::InverseSqrt, "inverse_sqrt", |x| 1.0 / libm::sqrtf(x)),
        (UnOp::Sin, "sinf", libm::sinf),
        (UnOp::Cos, "cosf", libm::cosf),
        (UnOp::Tan, "tanf", libm::tanf),
        (UnOp::Asin, "asinf", libm::asinf),
        (UnOp::Acos, "acosf", libm::acosf),
        (UnOp::Atan, "atanf", libm::atanf),
        (UnOp::Sinh, "sinhf", libm::sinhf),
        (UnOp::Cosh, "coshf", libm::coshf),
        (UnOp::Tanh, "tanhf", libm::tanhf),
        (UnOp::Exp, "expf", libm::expf),
        (UnOp::Exp2, "exp2f", libm::exp2f),
        (UnOp::Log, "logf", libm::logf),
        (UnOp::Log2, "log2f", libm::log2f),
    ]
}

/// vyre-reference's `canonical_f32`: NaN -> 0x7FC00000, subnormal -> same-signed zero.
fn canonical(x: f32) -> f32 {
    if x.is_nan() {
        f32::from_bits(0x7FC0_0000)
    } else if x.is_subnormal() {
        f32::from_bits(x.to_bits() & 0x8000_0000)
    } else {
        x
    }
}

/// The special values: branch thresholds of the routines (±8 ulps), points near
/// multiples of pi/2, values near the exp/sinh/cosh limits, and classic edge values; each
/// with both signs.
fn special_inputs() -> Vec<u32> {
    let mut out: Vec<u32> = vec![
        0,
        1,
        2,
        0x40_0000,
        0x7f_ffff,
        0x80_0000,
        0x80_0001,
        0x7f7f_ffff,
        0x7f7f_fffe,
        0x7f80_0000,
        0x7fc0_0000,
        0x7f80_0001,
        0x7fff_ffff,
        0x3f80_0000,
    ];
    let thresholds: [u32; 40] = include!("../src/codegen/libm/branch_thresholds.in");
    for t in thresholds {
        for d in 0..=16u32 {
            out.push(t.wrapping_add(d).wrapping_sub(8));
        }
    }
    // near k*pi/2 for k up to 2^16, and near the f32s closest to huge multiples
    for k in 1..=65536u32 {
        let v = (f64::from(k) * std::f64::consts::FRAC_PI_2) as f32;
        for d in 0..=4u32 {
            out.push(v.to_bits().wrapping_add(d).wrapping_sub(2));
        }
    }
    for e in 0..=100u32 {
        let v = (std::f64::consts::FRAC_PI_2 * 2f64.powi(e as i32)) as f32;
        for d in 0..=4u32 {
            out.push(v.to_bits().wrapping_add(d).wrapping_sub(2));
        }
    }
    for v in [
        1e30f32, 1e38, 3e38, 1e10, 1e20, 123456.7, 1e5, 1e6, 1e7, 4.2e8, 1e9, 0.5, 1.5, 2.5, 10.0,
        88.0, 88.5, 88.72, 89.0, 89.5, 90.0, 87.0, 87.33, 103.0, 103.97, 104.0, 126.0, 127.0,
        149.0, 150.0, 151.0, 127.5, 127.99, 128.0, 0.1, 0.3, 0.7, 0.9, 0.99, 0.999, 2.0, 3.0, 1e-3,
        1e-5, 1e-7, 1e-20, 1e-30, 1e-38,
    ] {
        for d in 0..=4u32 {
            out.push(v.to_bits().wrapping_add(d).wrapping_sub(2));
        }
    }
    // every 2^12th subnormal, and a stride through the largest binades
    out.extend((0..1u32 << 11).map(|i| i << 12 | 1));
    out.extend((0..1u32 << 12).map(|i| 0x7f00_0000 | i << 11));
    let mut signed: Vec<u32> = out.iter().map(|b| b ^ 0x8000_0000).collect();
    out.append(&mut signed);
    out.sort_unstable();
    out.dedup();
    out
}

/// 2^24 patterns `i << 8 | (i & 0xFF)` (every sign and exponent), then the specials.
fn inputs() -> Vec<u32> {
    let mut out: Vec<u32> = (0..1u32 << 24).map(|i| (i << 8) | (i & 0xFF)).collect();
    out.extend(special_inputs());
    out
}

/// `canonical(f(canonical(x)))` bits for every input, on all cores.
fn expected(f: Fun, inputs: &[u32]) -> Vec<u32> {
    let threads = std::thread::available_parallelism().map_or(4, |n| n.get());
    let chunk = inputs.len().div_ceil(threads);
    let mut out = vec![0u32; inputs.len()];
    std::thread::scope(|s| {
        for (src, dst) in inputs.chunks(chunk).zip(out.chunks_mut(chunk)) {
            s.spawn(move || {
                for (x, y) in src.iter().zip(dst.iter_mut()) {
                    *y = canonical(f(canonical(f32::from_bits(*x)))).to_bits();
                }
            });
        }
    });
    out
}

/// `out[i] = op(a[i])` over `BATCH` elements.
fn program(op: &UnOp) -> Program {
    program_of(op, BATCH)
}

/// `out[i] = op(a[i])` over `n` elements.
fn program_of(op: &UnOp, n: u32) -> Program {
    let gid = Expr::InvocationId { axis: 0 };
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::F32).with_count(n),
            BufferDecl::output("out", 1, DataType::F32).with_count(n),
        ],
        [256, 1, 1],
        vec![Node::if_then(
            Expr::BinOp {
                op: BinOp::Lt,
                left: Box::new(gid.clone()),
                right: Box::new(Expr::u32(n)),
            },
            vec![Node::store(
                "out",
                gid.clone(),
                Expr::UnOp {
                    op: op.clone(),
                    operand: Box::new(Expr::load("a", gid)),
                },
            )],
        )],
    )
}

#[test]
fn libm_ports_match_the_reference_on_the_gpu() {
    let Some(backend) = common::gpu::backend() else {
        return;
    };
    let config = DispatchConfig::default();
    let inputs = inputs();
    let mut failures = Vec::new();
    for (op, name, f) in routines() {
        let started = Instant::now();
        let program = program(&op);
        if let Err(error) = emit_ptx(&program, config.workgroup_override, PtxTarget::sm90()) {
            println!("libm sweep {name}: not ported (the emitter rejects it: {error})");
            continue;
        }
        let want = expected(f, &inputs);
        let mut got: Vec<u32> = Vec::with_capacity(inputs.len());
        for batch in inputs.chunks(BATCH as usize) {
            let mut bytes: Vec<u8> = batch.iter().flat_map(|b| b.to_le_bytes()).collect();
            bytes.resize(BATCH as usize * 4, 0);
            let outputs = backend
                .dispatch(&program, &[bytes], &config)
                .unwrap_or_else(|e| panic!("{name}: dispatch failed: {e}"));
            got.extend(
                outputs[0]
                    .chunks_exact(4)
                    .take(batch.len())
                    .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])),
            );
        }
        let differing: Vec<usize> = (0..inputs.len())
            .filter(|&i| canonical(f32::from_bits(got[i])).to_bits() != want[i])
            .collect();
        println!(
            "libm sweep {name}: {} inputs, {} differing ({:.1} s)",
            inputs.len(),
            differing.len(),
            started.elapsed().as_secs_f64()
        );
        for &i in differing.iter().take(8) {
            println!(
                "    {name}({:#010x}) want {:#010x} got {:#010x}",
                inputs[i], want[i], got[i]
            );
        }
        if !differing.is_empty() {
            failures.push(format!("{name}: {} differing inputs", differing.len()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `out[i] = a[i] / b[i]` over `n` elements, or `a[i] / divisor` for a literal divisor.
fn quotient_program(n: u32, divisor: Option<f32>) -> Program {
    let gid = Expr::InvocationId { axis: 0 };
    let right = match divisor {
        Some(d) => Expr::f32(d),
        None => Expr::load("b", gid.clone()),
    };
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::F32).with_count(n),
            BufferDecl::read("b", 1, DataType::F32).with_count(n),
            BufferDecl::output("out", 2, DataType::F32).with_count(n),
        ],
        [256, 1, 1],
        vec![Node::store(
            "out",
            gid.clone(),
            Expr::BinOp {
                op: BinOp::Div,
                left: Box::new(Expr::load("a", gid)),
                right: Box::new(right),
            },
        )],
    )
}

/// 2^24 pairs (dividends over every sign and exponent, divisors hashed from them); 2^21
/// pairs whose divisor's mantissa is all ones or all zeros (the reciprocal closest to a tie
/// of f32 rounding, and exact), or whose dividend's exponent is near where the emitter's
/// fast path stops; then every pair of the classic special values.
fn quotient_inputs() -> (Vec<u32>, Vec<u32>) {
    let hash = |i: u32| i.wrapping_mul(0x9E37_79B1).rotate_left(13) ^ i.wrapping_mul(0x85EB_CA6B);
    let (mut a, mut b): (Vec<u32>, Vec<u32>) = (0..1u32 << 24)
        .map(|i| ((i << 8) | (i & 0xFF), hash(i)))
        .unzip();
    for i in 0..1u32 << 21 {
        let h = hash(i ^ 0x5555_5555);
        let (x, y) = match i % 3 {
            0 => (h, (h.rotate_left(7) & 0xFF80_0000) | 0x7F_FFFF),
            1 => (h, h.rotate_left(7) & 0xFF80_0000),
            // biased exponent 16..48 around the fast path's lower bound (|a| >= 2^-100: 27)
            _ => ((h & 0x807F_FFFF) | ((16 + i % 32) << 23), h.rotate_left(11)),
        };
        a.push(x);
        b.push(y);
    }
    let magnitudes = [
        0,
        1,
        0x7F_FFFF,
        0x80_0000,
        0x80_0001,
        0x3F80_0000,
        0x4040_0000,
        0x3EAA_AAAB,
        0x7F7F_FFFE,
        0x7F7F_FFFF,
        0x7F80_0000,
        0x7FC0_0000,
        0x7F80_0001,
    ];
    let specials: Vec<u32> = magnitudes
        .iter()
        .flat_map(|&m: &u32| [m, m | 0x8000_0000])
        .collect();
    for &x in &specials {
        for &y in &specials {
            a.push(x);
            b.push(y);
        }
    }
    (a, b)
}

/// The GPU's `a / b` of every pair, in dispatches of `BATCH`.
fn gpu_quotients(
    backend: &vyre_cuda::CudaBackend,
    program: &Program,
    a: &[u32],
    b: &[u32],
) -> Vec<u32> {
    let config = DispatchConfig::default();
    let bytes = |words: &[u32]| {
        let mut out: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        out.resize(BATCH as usize * 4, 0);
        out
    };
    let mut got = Vec::with_capacity(a.len());
    for (x, y) in a.chunks(BATCH as usize).zip(b.chunks(BATCH as usize)) {
        let outputs = backend
            .dispatch(program, &[bytes(x), bytes(y)], &config)
            .unwrap_or_else(|e| panic!("division: dispatch failed: {e}"));
        let words = outputs[0].chunks_exact(4).take(x.len());
        got.extend(words.map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])));
    }
    got
}

/// Counts (and prints the first of) the pairs whose GPU quotient is not the reference's
/// `canonical(canonical(a) / canonical(b))`.
fn differing_quotients(what: &str, a: &[u32], b: &[u32], got: &[u32]) -> usize {
    let f = f32::from_bits;
    let differing: Vec<usize> = (0..a.len())
        .filter(|&i| {
            let want = canonical(canonical(f(a[i])) / canonical(f(b[i])));
            canonical(f(got[i])).to_bits() != want.to_bits()
        })
        .collect();
    println!("{what}: {} pairs, {} differing", a.len(), differing.len());
    for &i in differing.iter().take(8) {
        println!("    {:#010x} / {:#010x} got {:#010x}", a[i], b[i], got[i]);
    }
    differing.len()
}

#[test]
fn f32_division_matches_the_reference_on_the_gpu() {
    let Some(backend) = common::gpu::backend() else {
        return;
    };
    let (a, b) = quotient_inputs();
    let got = gpu_quotients(backend, &quotient_program(BATCH, None), &a, &b);
    let mut failures = Vec::new();
    if differing_quotients("f32 division", &a, &b, &got) > 0 {
        failures.push("a / b".to_string());
    }
    // a power-of-two literal divisor is a multiply by its reciprocal; others divide
    let dividends = inputs();
    for divisor in [2.0f32, 0.5, -4.0, 3.0, 2f32.powi(-126), 2f32.powi(127)] {
        let program = quotient_program(BATCH, Some(divisor));
        let divisors = vec![divisor.to_bits(); dividends.len()];
        let got = gpu_quotients(backend, &program, &dividends, &divisors);
        let what = format!("f32 division by the literal {divisor:e}");
        if differing_quotients(&what, &dividends, &divisors, &got) > 0 {
            failures.push(what);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every f32 bit pattern, in dispatches of 2^24 elements; the reference results for a
/// dispatch are computed on all other cores while the GPU runs it.
#[test]
fn libm_ports_match_the_reference_on_every_input() {
    if std::env::var("VYRE_LIBM_SWEEP_EXHAUSTIVE").map_or(true, |v| v != "1") {
        return;
    }
    let Some(backend) = common::gpu::backend() else {
        return;
    };
    const CHUNK: u32 = 1 << 24;
    let only = std::env::var("VYRE_LIBM_SWEEP_ONLY").unwrap_or_default();
    let threads = std::thread::available_parallelism()
        .map_or(4, |n| n.get())
        .saturating_sub(1)
        .max(1);
    let config = DispatchConfig::default();
    let mut failures = Vec::new();
    for (op, name, f) in routines() {
        if !only.is_empty() && !only.split(',').any(|o| o == name) {
            continue;
        }
        let started = Instant::now();
        let program = program_of(&op, CHUNK);
        if let Err(error) = emit_ptx(&program, config.workgroup_override, PtxTarget::sm90()) {
            println!("libm sweep {name}: not ported (the emitter rejects it: {error})");
            continue;
        }
        let mut differing = 0u64;
        let mut first = Vec::new();
        let mut outputs: Vec<Vec<u8>> = Vec::new();
        let mut want = vec![0u32; CHUNK as usize];
        let mut bytes = vec![0u8; CHUNK as usize * 4];
        for chunk in 0..(1u64 << 32) / u64::from(CHUNK) {
            let start = (chunk * u64::from(CHUNK)) as u32;
            for (k, w) in bytes.chunks_exact_mut(4).enumerate() {
                w.copy_from_slice(&(start + k as u32).to_le_bytes());
            }
            let per = (CHUNK as usize).div_ceil(threads);
            let result = std::thread::scope(|s| {
                for (t, dst) in want.chunks_mut(per).enumerate() {
                    s.spawn(move || {
                        let base = start + (t * per) as u32;
                        for (k, y) in dst.iter_mut().enumerate() {
                            let x = f32::from_bits(base + k as u32);
                            *y = canonical(f(canonical(x))).to_bits();
                        }
                    });
                }
                backend.dispatch_borrowed_into(&program, &[&bytes], &config, &mut outputs)
            });
            result.unwrap_or_else(|e| panic!("{name}: dispatch failed: {e}"));
            for (k, w) in outputs[0].chunks_exact(4).enumerate() {
                let got = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                if canonical(f32::from_bits(got)).to_bits() != want[k] {
                    differing += 1;
                    if first.len() < 8 {
                        first.push((start + k as u32, want[k], got));
                    }
                }
            }
        }
        println!(
            "libm sweep {name}: {} inputs (all), {differing} differing ({:.1} s)",
            1u64 << 32,
            started.elapsed().as_secs_f64()
        );
        for (x, w, g) in &first {
            println!("    {name}({x:#010x}) want {w:#010x} got {g:#010x}");
        }
        if differing > 0 {
            failures.push(format!("{name}: {differing} differing inputs"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
