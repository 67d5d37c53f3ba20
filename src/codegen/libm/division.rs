//! `a / b` on f32, correctly rounded (the bits of `div.rn.f32`), without `div.rn.f32`.
//!
//! ptxas lowers `div.rn.f32` to a fast path and a call of a slow-path subroutine that it
//! compiles into every kernel dividing at all: measured offline (ptxas 13.0, sm_90), that
//! subroutine costs about 8 ms of JIT per dividing kernel. This routine keeps ptxas's fast
//! path (the hardware reciprocal estimate, one Newton step, the quotient and one remainder
//! correction, all f32 fmas: ptxas's own sequence) where three comparisons show every step
//! stayed normal and exact (ptxas tests the operands with its `FCHK` instruction, which PTX
//! does not expose), and replaces the subroutine by an inlined computation in f64 for the
//! rest: two Newton steps and one remainder correction give the f64 quotient within one
//! f64 ulp, and `cvt.rn.f32.f64` rounds it to f32. That double rounding is exact: an f32
//! quotient that is not exactly an f32 midpoint lies at least 2^-49 (relative) away from
//! one, far beyond the f64 error, and an exactly representable quotient (an f32 midpoint
//! among them) comes out of the correction exactly. Both operands are exact in f64 (f32
//! subnormals are f64 normals), so nothing is flushed. (The f64 path alone is exact
//! everywhere, but an elementwise kernel dividing every element, vyre-libs' swiglu, took
//! 21% longer with it; so it did with a guard of fifteen integer operations on the
//! exponents before the f32 steps, which is why the guard is three comparisons after them:
//! with those, swiglu, gelu, the norms and softmax run as fast as with `div.rn.f32` on an
//! H200, BENCHMARKS.md, twenty-eighth session.) Divisions whose operands are known to be in
//! range skip the guard ([`Func::div_in_range`]).

use super::ptx::{f32c, f64c, int, Class, Cmp, Cvt, Func, R};

/// The routine's symbol (blocks inlined from it are labelled with it).
pub(crate) use super::ptx::EXACT_DIVISION as SYMBOL;

/// `div_rn_f32(a, b) = a / b` as IEEE round-to-nearest-even, subnormals kept.
pub(super) fn div_rn_f32() -> Func {
    let mut f = Func::new(SYMBOL, &[Class::F32, Class::F32], &[Class::F32]);
    let [a, b] = [f.params[0], f.params[1]];
    let (q0, q) = f.fast_quotient(a.into(), b);
    let exact = f32_steps_were_exact(&mut f, a, q0);
    f.when(exact, |f| f.ret1(q));
    let q = f64_quotient(&mut f, a, b);
    f.ret1(q);
    f
}

/// Set when the f32 steps gave the correctly rounded quotient: `|a| >= 2^-100` (so the
/// remainder `a - b * q0` is an exact f32: its grid, about ulp(a) * 2^-24, stays above the
/// smallest subnormal) and `2^-120 <= |q0| <= 2^120` (the quotient, and with it 1/b, normal
/// with room to spare). Three comparisons, which NaNs fail: a zero, infinite or NaN `b`
/// makes q0 infinite, zero or NaN, as does a subnormal `b` (the estimate flushes it), and
/// `a` zero, subnormal, infinite or NaN fails one of them too.
fn f32_steps_were_exact(f: &mut Func, a: R, q0: R) -> R {
    let (size_a, size_q) = (f.abs(a), f.abs(q0));
    let a_large = f.fcmp(Cmp::Ge, size_a, f32c(2f32.powi(-100)));
    let q_above = f.fcmp(Cmp::Ge, size_q, f32c(2f32.powi(-120)));
    let q_below = f.fcmp(Cmp::Le, size_q, f32c(2f32.powi(120)));
    let q_normal = f.and_pred(q_above, q_below);
    f.and_pred(a_large, q_normal)
}

/// The quotient in f64, rounded once to f32: exact for every a and b.
fn f64_quotient(f: &mut Func, a: R, b: R) -> R {
    let x = f.cvt(Cvt::F64F32, a);
    let y = f.cvt(Cvt::F64F32, b);
    let estimate = f.rcp_approx(y);
    let minus_y = f.neg(y);
    let mut r = estimate;
    for _ in 0..2 {
        // r += r * (1 - y * r): the relative error squares each step
        let e = f.fma(minus_y, r, f64c(1.0));
        r = f.fma(r, e, r);
    }
    let q = f.eval(x * r);
    // the remainder x - y * q is exact in f64; one step corrects q to within an ulp
    let rem = f.fma(minus_y, q, x);
    let q = f.fma(rem, r, q);
    // With a or b zero, infinite or NaN the steps above meet inf - inf or lose a zero's
    // sign, but the estimate is exact there (1/±0 = ±inf, 1/±inf = ±0, NaN stays NaN)
    // and so is x * estimate: 0/0, inf/inf and NaN give NaN, x/0 = ±inf, x/inf = ±0.
    let special = {
        let a_edge = edge_rank(f, a);
        let b_edge = edge_rank(f, b);
        let worst = f.max_u(a_edge, b_edge);
        f.ucmp(Cmp::Ge, worst, int(0x7F7F_FFFF))
    };
    let exact = f.eval(x * estimate);
    let q = f.selp(special, exact, q);
    f.cvt(Cvt::F32F64, q)
}

/// `|v|`'s bits minus one, unsigned: at least `0x7F7F_FFFF` exactly when v is ±0 (which
/// wraps around), infinite or NaN.
fn edge_rank(f: &mut Func, v: R) -> R {
    let bits = f.bits(v);
    let magnitude = f.and(bits, int(0x7FFF_FFFF));
    f.isub(magnitude, int(1))
}

#[cfg(test)]
mod tests {
    use super::super::interp::Machine;
    use super::super::ptx::{Class, Func};
    use super::{div_rn_f32, SYMBOL};

    /// Random f32s (xorshift): sign and mantissa random, biased exponent in
    /// `lowest..lowest + span`.
    fn random_f32s(lowest: u32, span: u32) -> impl FnMut() -> f32 {
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let bits = state as u32;
            f32::from_bits((bits & 0x807F_FFFF) | ((lowest + (bits >> 23) % span) << 23))
        }
    }

    fn quotient(m: &Machine, a: f32, b: f32) -> f32 {
        let out = m.run(SYMBOL, &[u64::from(a.to_bits()), u64::from(b.to_bits())]);
        f32::from_bits(out[0] as u32)
    }

    /// Operands across every exponent and both signs, the edges, and pairs whose quotient
    /// is exactly an f32 midpoint or lands in the subnormal range.
    fn operands() -> Vec<f32> {
        let mut bits: Vec<u32> = vec![
            0,
            1,
            2,
            3,
            0x7F_FFFF,
            0x80_0000,
            0x80_0001,
            0x3F80_0000,
            0x3F80_0001,
            0x3FFF_FFFF,
            0x4000_0000,
            0x7F7F_FFFF,
            0x7F80_0000,
            0x7FC0_0000,
        ];
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..600 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            bits.push((state >> 32) as u32 & 0x7FFF_FFFF);
        }
        let mut out: Vec<f32> = bits.iter().map(|&b| f32::from_bits(b)).collect();
        out.extend(out.clone().iter().map(|v| -v));
        out
    }

    fn assert_exact(m: &Machine) {
        let values = operands();
        let mut bad = Vec::new();
        for &a in &values {
            for &b in &values {
                let (want, got) = (a / b, quotient(m, a, b));
                let same = want.to_bits() == got.to_bits() || (want.is_nan() && got.is_nan());
                if !same && bad.len() < 8 {
                    bad.push(format!("{a:e} / {b:e}: want {want:e} got {got:e}"));
                }
            }
        }
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }

    #[test]
    fn division_is_correctly_rounded_with_an_exact_estimate() {
        assert_exact(&Machine::new(vec![div_rn_f32()]));
    }

    /// The f64 estimate carries about 2^-22 relative error; the two Newton steps absorb
    /// far more.
    #[test]
    fn division_is_correctly_rounded_with_a_coarse_f64_estimate() {
        for f64_error in [2f64.powi(-12), -(2f64.powi(-12))] {
            assert_exact(&Machine::new(vec![div_rn_f32()]).with_rcp_error(0.0, f64_error));
        }
    }

    /// The f32 steps are ptxas's own fast path of `div.rn.f32`, which relies on the
    /// hardware's estimate: one rounded the other way at b = 2 - 2^-23 (0.5 for
    /// 0.5 + 2^-24) leaves 1/b a tie the steps round down. Modelled here by the rounded
    /// reciprocal; the GPU sweep checks the hardware's for every b.
    #[test]
    fn the_f32_steps_need_the_estimate_of_the_hardware() {
        let b = f32::from_bits(0x3FFF_FFFF);
        let m = Machine::new(vec![div_rn_f32()]);
        assert_eq!(quotient(&m, 1.0, b).to_bits(), (1.0 / b).to_bits());
        let m = Machine::new(vec![div_rn_f32()]).with_rcp_error(-(2f64.powi(-25)), 0.0);
        assert_ne!(quotient(&m, 1.0, b).to_bits(), (1.0 / b).to_bits());
    }

    /// The f32 steps on 300,000 random pairs of ordinary operands (exponents within 2^±40),
    /// with the estimate rounded and 2^-25 off either way (ties of 1/b aside, see above,
    /// which random mantissas do not meet).
    #[test]
    fn the_f32_steps_round_correctly_on_ordinary_operands() {
        // biased exponents 87..=166
        let mut next = random_f32s(87, 80);
        let pairs: Vec<(f32, f32)> = (0..100_000).map(|_| (next(), next())).collect();
        let off = 2f64.powi(-25);
        for f32_error in [0.0, off, -off] {
            let m = Machine::new(vec![div_rn_f32()]).with_rcp_error(f32_error, 0.0);
            for &(a, b) in &pairs {
                let got = quotient(&m, a, b);
                assert_eq!(
                    got.to_bits(),
                    (a / b).to_bits(),
                    "{a:e} / {b:e} ({f32_error:e})"
                );
            }
        }
    }

    #[test]
    fn midpoint_and_subnormal_quotients_round_to_even() {
        let m = Machine::new(vec![div_rn_f32()]);
        let tiny = f32::from_bits(1);
        for (a, b) in [
            (tiny, 2.0),
            (f32::from_bits(3), 2.0),
            (f32::from_bits(3), 4.0),
            (f32::from_bits(0x80_0001), 2.0),
            (1.0, 3.0),
            (f32::MAX, 0.5),
            (f32::MAX, f32::from_bits(0x3F7F_FFFF)),
            (1e-30, 1e30),
            (-0.0, 5.0),
            (5.0, -0.0),
            (f32::INFINITY, -2.0),
        ] {
            let got = quotient(&m, a, b);
            assert_eq!(got.to_bits(), (a / b).to_bits(), "{a:e} / {b:e}");
        }
    }

    /// `Func::div_in_range` (the f32 steps alone, no test) is the correctly rounded
    /// quotient for operands in its range: |a| >= 2^-100 or +0, the quotient within
    /// 2^±120 (with the estimate modelled as the rounded reciprocal; the GPU sweep checks
    /// the hardware's).
    #[test]
    fn a_division_in_range_is_correctly_rounded() {
        let mut f = Func::new("div", &[Class::F32, Class::F32], &[Class::F32]);
        let [a, b] = [f.params[0], f.params[1]];
        let q = f.div_in_range(a, b);
        f.ret1(q);
        let m = Machine::new(vec![f]);
        // biased exponents 27..=226: magnitudes 2^-100 ..= 2^99
        let mut next = random_f32s(27, 200);
        let mut pairs: Vec<(f32, f32)> = (0..200_000)
            .map(|_| (next(), next()))
            .filter(|(a, b)| (a / b).abs() >= 2f32.powi(-120) && (a / b).abs() <= 2f32.powi(120))
            .collect();
        pairs.extend([
            (0.0, 3.0),
            (1.0, 3.0),
            (2.0, 1.5),
            (-1.0, 2.4375),
            (0.5, 2.0),
        ]);
        for (a, b) in pairs {
            let out = m.run("div", &[u64::from(a.to_bits()), u64::from(b.to_bits())]);
            let got = f32::from_bits(out[0] as u32);
            assert_eq!(got.to_bits(), (a / b).to_bits(), "{a:e} / {b:e}");
        }
    }
}
