//! `sinhf`, `coshf`, `tanhf` (libm 0.2.16, from musl `sinhf.c`, `coshf.c`, `tanhf.c`) and
//! their helpers `expm1f` (FreeBSD `s_expm1f.c`, an internal routine) and `k_expo2f`
//! (inlined). All f32.

use super::exp_log::{nearest_k, overflow, split_by_k, X1P127};
use super::ptx::{f32c, int, Class, Cmp, Func, Op, R};

pub(super) const EXPM1F: &str = "vyre_libm_expm1f";

const LN2_HI: f32 = 6.9313812256e-01; /* 0x3f317180 */
const LN2_LO: f32 = 9.0580006145e-06; /* 0x3717f7d1 */
const Q1: Op = f32c(-3.3333212137e-2); /* -0x888868.0p-28 */
const Q2: Op = f32c(1.5807170421e-3); /*  0xcf3010.0p-33 */
const ONE: Op = f32c(1.0);
const TWO: Op = f32c(2.0);
const HALF: Op = f32c(0.5);

/// `expm1f` (not a vyre op itself; sinhf, coshf and tanhf call it).
pub(super) fn expm1f() -> Func {
    let mut f = Func::new(EXPM1F, &[Class::F32], &[Class::F32]);
    let x0 = f.params[0];
    let bits = f.bits(x0);
    let sign = f.scmp(Cmp::Lt, bits, int(0));
    let hx = f.and(bits, int(0x7fff_ffff));
    // filter out huge and non-finite arguments: if |x| >= 27*ln2
    let huge = f.ucmp(Cmp::Ge, hx, int(0x4195_b844));
    f.when(huge, |f| {
        let nan = f.ucmp(Cmp::Gt, hx, int(0x7f80_0000));
        f.when(nan, |f| f.ret1(x0));
        f.when(sign, |f| f.ret1(f32c(-1.0)));
        // x > log(FLT_MAX)
        let over = f.ucmp(Cmp::Gt, hx, int(0x42b1_7217));
        f.when(over, |f| overflow(f, x0));
    });
    let (x, k, c) = expm1_reduce(&mut f, x0, hx, sign);
    // x is now in primary range; e is the correction of x - e + 1 ~ exp(x) 2^-k
    let hfx = f.eval(HALF * x);
    let hxs = f.eval(x * hfx);
    let r1 = f.eval(ONE + hxs * (Q1 + hxs * Q2));
    let t = f.eval(f32c(3.0) - r1 * hfx);
    // In range: r1 ~ 1 and t ~ 3 for the reduced |x| <= 0.35, so r1 - t ~ -2 and the
    // divisor ~ 6
    let ratio = f.div_in_range(r1 - t, f32c(6.0) - x * t);
    let e = f.eval(hxs * ratio);
    let k_zero = f.scmp(Cmp::Eq, k, int(0));
    f.when(k_zero, |f| f.ret1(x - (x * e - hxs)));
    // e = x * (e - c) - c; e -= hxs
    let e = f.eval(x * (e - c) - c - hxs);
    expm1_scale(&mut f, x, e, k);
    f
}

/// Argument reduction: `(x, k, c)` with x = hi - lo the reduced argument and c its
/// correction (tiny |x| returns x itself).
fn expm1_reduce(f: &mut Func, x0: R, hx: R, sign: R) -> (R, R, R) {
    let x = f.copy(Class::F32, x0);
    let k = f.reg(Class::B32);
    let c = f.copy(Class::F32, f32c(0.0));
    // if |x| > 0.5 ln2
    let reduce = f.ucmp(Cmp::Gt, hx, int(0x3eb1_7218));
    f.if_else(
        reduce,
        |f| {
            let (hi, lo) = expm1_hi_lo(f, [x, k], hx, sign);
            f.set(x, hi - lo);
            f.set(c, (hi - x) - lo);
        },
        |f| {
            // when |x|<2**-25, return x
            let tiny = f.ucmp(Cmp::Lt, hx, int(0x3300_0000));
            f.when(tiny, |f| f.ret1(x0));
            f.set(k, int(0));
        },
    );
    (x, k, c)
}

/// `(hi, lo)` of the reduction, setting k: x = k*ln2 + (hi - lo).
fn expm1_hi_lo(f: &mut Func, [x, k]: [R; 2], hx: R, sign: R) -> (R, R) {
    let hi = f.reg(Class::F32);
    let lo = f.reg(Class::F32);
    // and |x| < 1.5 ln2: k = -1 (hi = x + LN2_HI) or 1 (hi = x - LN2_HI)
    let near = f.ucmp(Cmp::Lt, hx, int(0x3F85_1592));
    let by_one = |f: &mut Func, k_is: i64| {
        let ln2_hi = f32c(LN2_HI);
        f.set(hi, if k_is < 0 { x + ln2_hi } else { x - ln2_hi });
        f.set(lo, f32c(k_is as f32 * LN2_LO));
        f.set(k, int(k_is));
    };
    f.if_else(
        near,
        |f| f.if_else(sign, |f| by_one(f, -1), |f| by_one(f, 1)),
        |f| {
            f.update(k, |f| nearest_k(f, x, sign));
            split_by_k(f, [x, k], [hi, lo], [f32c(LN2_HI), f32c(LN2_LO)]);
        },
    );
    (hi, lo)
}

/// exp(x) ~ 2^k (x_reduced - e + 1), minus 1, by the cases of k.
fn expm1_scale(f: &mut Func, x: R, e: R, k: R) {
    let k_m1 = f.scmp(Cmp::Eq, k, int(-1));
    f.when(k_m1, |f| f.ret1(HALF * (x - e) - HALF));
    let k_1 = f.scmp(Cmp::Eq, k, int(1));
    f.when(k_1, |f| {
        let low = f.fcmp(Cmp::Lt, x, f32c(-0.25));
        f.when(low, |f| f.ret1(f32c(-2.0) * (e - (x + HALF))));
        f.ret1(ONE + TWO * (x - e));
    });
    // twopk = f32::from_bits(((0x7f + k) << 23) as u32)
    let t = f.iadd(k, int(0x7f));
    let t = f.shl(t, int(23));
    let twopk = f.bits(t);
    // k < 0 or k > 56: it suffices to return exp(x) - 1
    let negative = f.scmp(Cmp::Lt, k, int(0));
    let past = f.scmp(Cmp::Gt, k, int(56));
    let outside = f.copy(Class::Pred, negative);
    f.when(past, |f| f.set(outside, past));
    f.when(outside, |f| {
        let y = f.eval(x - e + ONE);
        let k_128 = f.scmp(Cmp::Eq, k, int(128));
        let scaled = f.reg(Class::F32);
        f.if_else(
            k_128,
            |f| f.set(scaled, y * TWO * X1P127),
            |f| f.set(scaled, y * twopk),
        );
        f.ret1(scaled - ONE);
    });
    // uf = f32::from_bits(((0x7f - k) << 23) as u32) (2^-k)
    let t = f.isub(int(0x7f), k);
    let t = f.shl(t, int(23));
    let uf = f.bits(t);
    let lt_23 = f.scmp(Cmp::Lt, k, int(23));
    f.when(lt_23, |f| f.ret1((x - e + (ONE - uf)) * twopk));
    f.ret1((x - (e + uf) + ONE) * twopk);
}

/// `k_expo2f(x)`: `expf(x - k*ln2) * 2^(k/2) * 2^(k/2)` with `k = 235`.
fn k_expo2f(f: &mut Func, expf: &Func, x: R) -> R {
    const K: u32 = 235;
    let k_ln2 = Op::F32(0x4322_e3bc);
    // note that k is odd and scale*scale overflows
    let scale = Op::F32((0x7f + K / 2) << 23);
    let t = f.eval(x - k_ln2);
    let e = f.call(expf, &[t.into()])[0];
    f.eval(e * scale * scale)
}

pub(super) fn sinhf(expm1f: &Func, expf: &Func) -> Func {
    let mut f = Func::new("vyre_libm_sinhf", &[Class::F32], &[Class::F32]);
    let x = f.params[0];
    let bits = f.bits(x);
    let sign = f.scmp(Cmp::Lt, bits, int(0));
    let h = f.selp(sign, f32c(-0.5), f32c(0.5));
    // |x|
    let ix = f.and(bits, int(0x7fff_ffff));
    let absx = f.bits(ix);
    // |x| < log(FLT_MAX)
    let finite = f.ucmp(Cmp::Lt, ix, int(0x42b1_7217));
    f.when(finite, |f| {
        let t = f.call(expm1f, &[absx.into()])[0];
        let lt_one = f.ucmp(Cmp::Lt, ix, int(0x3f80_0000));
        f.when(lt_one, |f| {
            let tiny = f.ucmp(Cmp::Lt, ix, int(0x3f80_0000 - (12 << 23)));
            f.when(tiny, |f| f.ret1(x));
            // In range: 2^-12 <= |x| < 1, so t * t >= 2^-24 and t + 1 <= e
            let tt = f.eval(t * t);
            let q = f.div_in_range(tt, t + ONE);
            f.ret1(h * (TWO * t - q));
        });
        f.ret1(h * (t + t / (t + ONE)));
    });
    // |x| > logf(FLT_MAX) or nan: 2. * h * k_expo2f(absx)
    let two_h = f.eval(TWO * h);
    let e = k_expo2f(&mut f, expf, absx);
    f.ret1(two_h * e);
    f
}

pub(super) fn coshf(expm1f: &Func, expf: &Func) -> Func {
    let mut f = Func::new("vyre_libm_coshf", &[Class::F32], &[Class::F32]);
    let x0 = f.params[0];
    let bits = f.bits(x0);
    // |x|
    let ix = f.and(bits, int(0x7fff_ffff));
    let x = f.bits(ix);
    // |x| < log(2)
    let small = f.ucmp(Cmp::Lt, ix, int(0x3f31_7217));
    f.when(small, |f| {
        let tiny = f.ucmp(Cmp::Lt, ix, int(0x3f80_0000 - (12 << 23)));
        f.when(tiny, |f| f.ret1(f32c(1.0)));
        let t = f.call(expm1f, &[x.into()])[0];
        // In range: 2^-12 <= |x| < log(2), so t * t >= 2^-24 and the divisor is in [2, 4]
        let tt = f.eval(t * t);
        let q = f.div_in_range(tt, TWO * (ONE + t));
        f.ret1(ONE + q);
    });
    // |x| < log(FLT_MAX)
    let finite = f.ucmp(Cmp::Lt, ix, int(0x42b1_7217));
    f.when(finite, |f| {
        let t = f.call(expf, &[x.into()])[0];
        f.ret1(HALF * (t + ONE / t));
    });
    // |x| > log(FLT_MAX) or nan
    let y = k_expo2f(&mut f, expf, x);
    f.ret1(y);
    f
}

pub(super) fn tanhf(expm1f: &Func) -> Func {
    let mut f = Func::new("vyre_libm_tanhf", &[Class::F32], &[Class::F32]);
    let x0 = f.params[0];
    let bits = f.bits(x0);
    let sign = f.scmp(Cmp::Lt, bits, int(0));
    // x = |x|
    let ix = f.and(bits, int(0x7fff_ffff));
    let x = f.bits(ix);
    let tt = f.reg(Class::F32);
    let done = f.label();
    // |x| > 10 or nan (the source tests |x| > log(3)/2 first; this range lies inside it):
    // the source's `1 + 0/x` is 1, or a NaN for a NaN, without a division's cost.
    let huge = f.ucmp(Cmp::Gt, ix, int(0x4120_0000));
    f.when(huge, |f| {
        let nan = f.ucmp(Cmp::Gt, ix, int(0x7f80_0000));
        let one = f.selp(nan, x, ONE);
        f.set(tt, one);
        f.bra(done);
    });
    // |x| <= 2^-25: tanhf(x) is x itself (the source returns a subnormal x as it is, and
    // its formula rounds back to x for every normal |x| up to 2^-25, checked input by
    // input against libm). Above it the division's numerator is at least 2^-24.
    let beyond_identity = f.ucmp(Cmp::Gt, ix, int(0x3300_0000));
    f.when(beyond_identity, |f| {
        // The source's three remaining ranges each call expm1f, of 2x above
        // log(5/3)/2 ~= 0.2554 and of -2x below: one call here with the same argument
        // (one inlined copy instead of three), then the range's formula.
        let mid = f.ucmp(Cmp::Gt, ix, int(0x3e82_c578));
        let c = f.selp(mid, f32c(2.0), f32c(-2.0));
        let a = f.eval(c * x);
        let t = f.call(expm1f, &[a.into()])[0];
        // |x| > log(3)/2 ~= 0.5493: 1 - 2/(t+2); else t/(t+2) above log(5/3)/2, -t/(t+2)
        // below. Each range divides by t + 2, so one division of the range's numerator
        // (the same operations, so the same bits, at one division site instead of three).
        let big = f.ucmp(Cmp::Gt, ix, int(0x3f0c_9f54));
        let n = f.neg(t);
        let small_numerator = f.selp(mid, t, n);
        let numerator = f.selp(big, TWO, small_numerator);
        // In range: |numerator| >= 2^-24 (above), t + 2 in [1, 4.9e8] (|x| <= 10)
        let q = f.div_in_range(numerator, t + TWO);
        f.when(big, |f| {
            f.set(tt, ONE - q);
            f.bra(done);
        });
        f.set(tt, q);
        f.bra(done);
    });
    f.set(tt, x);
    f.place(done);
    let y = f.negate_if(sign, tt);
    f.ret1(y);
    f
}
