//! The ports, run by the test-only interpreter with PTX semantics, against `libm` 0.2.16
//! itself: raw results (before vyre's canonicalisation) must have the same bits, any NaN
//! matching any NaN. The GPU sweep (`tests/gpu_libm_sweep.rs`) checks the emitted PTX.

use super::interp::Machine;
use super::{functions, inline_call, tables_text, Libm};
use std::collections::BTreeSet;

fn reference(f: Libm, x: f32) -> f32 {
    match f {
        Libm::Sin => libm::sinf(x),
        Libm::Cos => libm::cosf(x),
        Libm::Tan => libm::tanf(x),
        Libm::Asin => libm::asinf(x),
        Libm::Acos => libm::acosf(x),
        Libm::Atan => libm::atanf(x),
        Libm::Sinh => libm::sinhf(x),
        Libm::Cosh => libm::coshf(x),
        Libm::Tanh => libm::tanhf(x),
        Libm::Exp => libm::expf(x),
        Libm::Exp2 => libm::exp2f(x),
        Libm::Log => libm::logf(x),
        Libm::Log2 => libm::log2f(x),
    }
}

fn machine() -> Machine {
    Machine::new(functions(&Libm::all().into_iter().collect()))
}

fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Branch thresholds of the routines, the special values, and points near multiples of
/// pi/2 and near the exp/sinh/cosh overflow and underflow limits, each with neighbours.
pub(super) fn special_inputs() -> Vec<u32> {
    let mut out: Vec<u32> = vec![
        0,
        1,
        2,
        0x7f_ffff,
        0x80_0000,
        0x80_0001,
        0x7f7f_ffff,
        0x7f80_0000,
        0x7fc0_0000,
        0x7f80_0001,
        0x3f80_0000,
    ];
    let thresholds: [u32; 40] = include!("branch_thresholds.in");
    for t in thresholds {
        for d in 0..=16u32 {
            out.push(t.wrapping_add(d).wrapping_sub(8));
        }
    }
    for k in 1..=4096u32 {
        let v = (f64::from(k) * std::f64::consts::FRAC_PI_2) as f32;
        for d in 0..=4u32 {
            out.push(v.to_bits().wrapping_add(d).wrapping_sub(2));
        }
    }
    for v in [
        1e30f32, 1e38, 3e38, 1e10, 1e20, 123456.7, 1e5, 1e6, 1e7, 4.2e8, 1e9, 0.5, 1.5, 2.5, 10.0,
        88.0, 89.0, -87.0, -88.0, -103.0, -104.0, -126.0, -127.0, -149.0, -150.0, -151.0, 127.5,
        127.99, 128.0, 0.1, 0.3, 0.7, 0.9, 0.99, 0.999, 2.0, 3.0, 1e-3, 1e-5, 1e-7, 1e-20,
    ] {
        out.push(v.to_bits());
    }
    let mut signed: Vec<u32> = out.iter().map(|b| b ^ 0x8000_0000).collect();
    out.append(&mut signed);
    out.sort_unstable();
    out.dedup();
    out
}

/// Inputs `i << shift | (i & mask)`: every sign and exponent, `2^(32 - shift)` of them.
fn strided(shift: u32) -> impl Iterator<Item = u32> {
    let mask = (1u32 << shift) - 1;
    (0..1u32 << (32 - shift)).map(move |i| (i << shift) | (i & mask))
}

fn check(m: &Machine, f: Libm, inputs: impl Iterator<Item = u32>) -> (u64, Vec<String>) {
    let mut n = 0u64;
    let mut bad = Vec::new();
    for bits in inputs {
        n += 1;
        let x = f32::from_bits(bits);
        let want = reference(f, x);
        let got = m.call_f32(f.symbol(), x);
        if !same(want, got) {
            bad.push(format!(
                "{:?}({bits:#010x}) want {:#010x} got {:#010x}",
                f,
                want.to_bits(),
                got.to_bits()
            ));
        }
    }
    (n, bad)
}

#[test]
fn ports_match_libm_on_special_and_sampled_inputs() {
    let m = machine();
    let specials = special_inputs();
    let mut failures = Vec::new();
    for f in Libm::all() {
        let (_, bad) = check(&m, f, specials.iter().copied().chain(strided(18)));
        failures.extend(bad.into_iter().take(8));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The sweep the GPU test runs, on the interpreter: 2^24 inputs per routine. Slow; run with
/// `cargo test --release --lib -- --ignored libm`.
#[test]
#[ignore]
fn ports_match_libm_on_2_pow_24_inputs() {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut failures = Vec::new();
    for f in Libm::all() {
        let results: Vec<(u64, Vec<String>)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    s.spawn(move || {
                        let m = machine();
                        let part = strided(8)
                            .enumerate()
                            .filter(|(i, _)| i % threads == t)
                            .map(|(_, b)| b);
                        check(&m, f, part)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let n: u64 = results.iter().map(|r| r.0).sum();
        let bad: Vec<String> = results.into_iter().flat_map(|r| r.1).collect();
        println!("interp sweep {f:?}: {n} inputs, {} differing", bad.len());
        failures.extend(bad.into_iter().take(8));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn tables_are_written_once_and_only_for_the_routines_used() {
    let all: BTreeSet<Libm> = Libm::all().into_iter().collect();
    let text = tables_text(&all);
    assert_eq!(
        text.matches(".const .align 4 .b32 vyre_libm_ipio2[690]")
            .count(),
        1
    );
    assert!(!text.contains(".func"));
    assert!(tables_text(&BTreeSet::new()).is_empty());
    let only_cosh: BTreeSet<Libm> = [Libm::Cosh].into_iter().collect();
    assert!(!tables_text(&only_cosh).contains("ipio2"));
}

#[test]
fn an_inlined_routine_brings_its_helpers_and_calls_nothing() {
    let mut tags = 0;
    let text = inline_call(Libm::Cosh, "%f1", "%f2", &mut tags);
    assert!(text.contains("// vyre_libm_coshf inlined"));
    assert!(text.contains("// vyre_libm_expf inlined"));
    assert!(text.contains("// vyre_libm_expm1f inlined"));
    assert!(!text.contains("call") && !text.contains(".func"));
    // the one approximation is the estimate the inlined exact division refines
    assert!(text.contains("// vyre_div_rn_f32 inlined"));
    let mut approximate = text.lines().filter(|l| l.contains(".approx"));
    assert!(approximate.all(|l| l.trim().starts_with("rcp.approx.ftz.f")));
    assert!(text.contains("mov.f32 %lmx0, %f1;") && text.contains("mov.f32 %f2, %lmx1;"));
    // Every instance, nested ones included, has its own tag: labels never collide.
    let again = inline_call(Libm::Cosh, "%f3", "%f4", &mut tags);
    let labels = |t: &str| -> BTreeSet<String> {
        t.lines()
            .filter(|l| l.ends_with(':'))
            .map(str::to_string)
            .collect()
    };
    assert!(labels(&text).is_disjoint(&labels(&again)));
    assert!(tags >= 4, "{tags}");
}
