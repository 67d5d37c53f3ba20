//! `expf`, `exp2f`, `logf`, `log2f` (libm 0.2.16, from FreeBSD `e_expf.c`, `s_exp2f.c`,
//! `e_logf.c`, `e_log2f.c`). On x86_64 with SSE2 libm takes the generic code (the x87
//! variants are for i586 only). `exp2f` evaluates its polynomial in f64 with a table;
//! the others are all f32.

use super::ptx::{f32c, f64c, int, Class, Cmp, Cvt, Func, Op, Table, R};
use super::scalbn::scalbn;

pub(super) const EXPF: &str = "vyre_libm_expf";

const INV_LN2: Op = f32c(1.4426950216e+00); /* 0x3fb8aa3b */
pub(super) const X1P127: Op = Op::F32(0x7f00_0000);
const ONE: Op = f32c(1.0);

/// Overflow: `return x * 2^127`.
pub(super) fn overflow(f: &mut Func, x: R) {
    f.ret1(x * X1P127);
}

/// `k = (INV_LN2 * x + (if sign { -0.5 } else { 0.5 })) as i32`, the nearest multiple
/// of ln2 (expf and expm1f).
pub(super) fn nearest_k(f: &mut Func, x: R, sign: R) -> R {
    let half = f.selp(sign, f32c(-0.5), f32c(0.5));
    f.cvt(Cvt::S32F32, INV_LN2 * x + half)
}

/// `hi = x - k * ln2_hi` (exact here) and `lo = k * ln2_lo`, for expf and expm1f
/// (each with its own split of ln2).
pub(super) fn split_by_k(f: &mut Func, [x, k]: [R; 2], [hi, lo]: [R; 2], ln2: [Op; 2]) {
    let kf = f.cvt(Cvt::F32S32, k);
    f.set(hi, x - kf * ln2[0]);
    f.set(lo, kf * ln2[1]);
}

pub(super) fn expf() -> Func {
    const P1: Op = f32c(1.6666625440e-1); /*  0xaaaa8f.0p-26 */
    const P2: Op = f32c(-2.7667332906e-3); /* -0xb55215.0p-32 */
    let mut f = Func::new(EXPF, &[Class::F32], &[Class::F32]);
    let x0 = f.params[0];
    let bits = f.bits(x0);
    let sign = f.shr_u(bits, int(31)); // sign bit of x (0 or 1)
    let signb = f.scmp(Cmp::Ne, sign, int(0));
    let hx = f.and(bits, int(0x7fff_ffff)); // high word of |x|
                                            // special cases: if |x| >= -87.33655f or NaN
    let special = f.ucmp(Cmp::Ge, hx, int(0x42ae_ac50));
    f.when(special, |f| {
        let nan = f.ucmp(Cmp::Gt, hx, int(0x7f80_0000));
        f.when(nan, |f| f.ret1(x0));
        // x >= 88.722839f: overflow
        let big = f.ucmp(Cmp::Ge, hx, int(0x42b1_7218));
        let positive = f.scmp(Cmp::Eq, sign, int(0));
        f.when(big, |f| f.when(positive, |f| overflow(f, x0)));
        // underflow: x <= -103.972084f
        f.when(signb, |f| {
            let zero = f.ucmp(Cmp::Ge, hx, int(0x42cf_f1b5));
            f.when(zero, |f| f.ret1(f32c(0.0)));
        });
    });
    let (x, k, hi, lo) = expf_reduce(&mut f, x0, hx, [sign, signb]);
    // x is now in primary range
    let xx = f.eval(x * x);
    let c = f.eval(x - xx * (P1 + xx * P2));
    // In range (`div_in_range`): 2 - c lies in [1.67, 2.37] and |x * c| >= 3.6e-18 (the
    // reduced |x| is above 2^-14, or near a multiple of ln2 no closer than 1.9e-9).
    let q = f.div_in_range(x * c, f32c(2.0) - c);
    let y = f.eval(ONE + (q - lo + hi));
    let k_zero = f.scmp(Cmp::Eq, k, int(0));
    f.when(k_zero, |f| f.ret1(y));
    let y = scalbn(&mut f, y, k);
    f.ret1(y);
    f
}

/// Argument reduction: `(x, k, hi, lo)` with x = hi - lo = x0 - k*ln2 (tiny |x| returns
/// 1 + x).
fn expf_reduce(f: &mut Func, x0: R, hx: R, [sign, signb]: [R; 2]) -> (R, R, R, R) {
    const LN2_HI: Op = f32c(6.9314575195e-01); /* 0x3f317200 */
    const LN2_LO: Op = f32c(1.4286067653e-06); /* 0x35bfbe8e */
    let x = f.copy(Class::F32, x0);
    let k = f.reg(Class::B32);
    let hi = f.reg(Class::F32);
    let lo = f.reg(Class::F32);
    // if |x| > 0.5 ln2
    let reduce = f.ucmp(Cmp::Gt, hx, int(0x3eb1_7218));
    f.if_else(
        reduce,
        |f| {
            // if |x| > 1.5 ln2: k = nearest; else k = 1 - sign - sign
            let far = f.ucmp(Cmp::Gt, hx, int(0x3f85_1592));
            f.if_else(
                far,
                |f| f.update(k, |f| nearest_k(f, x, signb)),
                |f| {
                    f.update(k, |f| {
                        let t = f.isub(int(1), sign);
                        f.isub(t, sign)
                    })
                },
            );
            split_by_k(f, [x, k], [hi, lo], [LN2_HI, LN2_LO]);
            f.set(x, hi - lo);
        },
        |f| {
            // |x| > 2**-14
            let above = f.ucmp(Cmp::Gt, hx, int(0x3900_0000));
            f.if_else(
                above,
                |f| {
                    f.set(k, int(0));
                    f.set(hi, x);
                    f.set(lo, f32c(0.0));
                },
                |f| f.ret1(ONE + x),
            );
        },
    );
    (x, k, hi, lo)
}

static EXP2FT: Table = Table {
    name: "vyre_libm_exp2ft",
    class: Class::F64,
    data: &[
        0x3fe6a09e667f3bcd,
        0x3fe7a11473eb0187,
        0x3fe8ace5422aa0db,
        0x3fe9c49182a3f090,
        0x3feae89f995ad3ad,
        0x3fec199bdd85529c,
        0x3fed5818dcfba487,
        0x3feea4afa2a490da,
        0x3ff0000000000000,
        0x3ff0b5586cf9890f,
        0x3ff172b83c7d517b,
        0x3ff2387a6e756238,
        0x3ff306fe0a31b715,
        0x3ff3dea64c123422,
        0x3ff4bfdad5362a27,
        0x3ff5ab07dd485429,
    ],
};

pub(super) fn exp2f() -> Func {
    const TBLSIZE: u32 = 16;
    let redux = f32c(f32::from_bits(0x4b40_0000) / TBLSIZE as f32);
    let mut f = Func::new("vyre_libm_exp2f", &[Class::F32], &[Class::F32]);
    let x = f.params[0];
    exp2f_special(&mut f, x);
    // Reduce x, computing z, i0, and k.
    let ui = f.bits(x + redux);
    let i0 = f.iadd(ui, int(i64::from(TBLSIZE / 2)));
    let k = f.shr_u(i0, int(4)); // i0 / TBLSIZE
    let t = f.iadd(k, int(0x3ff));
    let t = f.cvt(Cvt::U64U32, t);
    let t = f.shl(t, int(52));
    let ukf = f.bits(t); // f64::from_bits(((0x3ff + k) as u64) << 52)
    let i0 = f.and(i0, int(i64::from(TBLSIZE - 1)));
    let uf = f.bits(ui);
    let z = f.cvt(Cvt::F64F32, x - (uf - redux));
    // r = exp2(y) = exp2ft[i0] * p(z), in f64
    let [p1, p2, p3, p4] = [0x3f31_7218, 0x3e75_fdf0, 0x3d63_59a4, 0x3c1d_964e]
        .map(|bits: u32| f64c(f64::from(f32::from_bits(bits))));
    let r = f.ld(&EXP2FT, i0);
    let t = f.eval(r * z);
    let r = f.eval(r + t * (p1 + z * p2) + t * (z * z) * (p3 + z * p4));
    // Scale by 2**k
    let y = f.cvt(Cvt::F32F64, r * ukf);
    f.ret1(y);
    f
}

/// Filter out exceptional cases: NaN, overflow, underflow to 0 and tiny |x|.
fn exp2f_special(f: &mut Func, x: R) {
    let ui = f.bits(x);
    let ix = f.and(ui, int(0x7fff_ffff));
    let big = f.ucmp(Cmp::Gt, ix, int(0x42fc_0000));
    f.if_else(
        big,
        |f| {
            // |x| > 126
            let nan = f.ucmp(Cmp::Gt, ix, int(0x7f80_0000));
            f.when(nan, |f| f.ret1(x));
            // x >= 128 (0x43000000 <= ui < 0x80000000)
            let ge_128 = f.ucmp(Cmp::Ge, ui, int(0x4300_0000));
            let positive = f.ucmp(Cmp::Lt, ui, int(0x8000_0000));
            f.when(ge_128, |f| f.when(positive, |f| overflow(f, x)));
            // x <= -150
            let le_m150 = f.ucmp(Cmp::Ge, ui, int(0xc316_0000));
            f.when(le_m150, |f| f.ret1(f32c(0.0)));
        },
        |f| {
            // |x| <= 0x1p-25
            let tiny = f.ucmp(Cmp::Le, ix, int(0x3300_0000));
            f.when(tiny, |f| f.ret1(ONE + x));
        },
    );
}

const LG1: Op = f32c(0.66666662693); /*  0xaaaaaa.0p-24*/
const LG2: Op = f32c(0.40000972152); /*  0xccce13.0p-25 */
const LG3: Op = f32c(0.28498786688); /*  0x91e9ee.0p-25 */
const LG4: Op = f32c(0.24279078841); /*  0xf89e26.0p-26 */

/// The shared front of logf/log2f: special cases, then `(x, k)` reduced into
/// [sqrt(2)/2, sqrt(2)].
fn log_reduce(f: &mut Func) -> (R, R) {
    let x1p25 = Op::F32(0x4c00_0000);
    let x0 = f.params[0];
    let ix = f.bits(x0);
    let ix = f.copy(Class::B32, ix);
    let x = f.copy(Class::F32, x0);
    let k = f.copy(Class::B32, int(0));
    let negative = f.scmp(Cmp::Lt, ix, int(0));
    let subnormal = f.ucmp(Cmp::Lt, ix, int(0x0080_0000));
    let low = f.copy(Class::Pred, negative);
    f.when(subnormal, |f| f.set(low, subnormal));
    f.if_else(
        low,
        |f| {
            // x < 2**-126
            let twice = f.shl(ix, int(1));
            let zero = f.scmp(Cmp::Eq, twice, int(0));
            // log(+-0) = -inf, log(-#) = NaN (the source divides, -1/(x*x) and (x-x)/0,
            // for those constants: a division here would cost the JIT a slow path)
            f.when(zero, |f| f.ret1(f32c(f32::NEG_INFINITY)));
            f.when(negative, |f| f.ret1(f32c(f32::NAN)));
            // subnormal number, scale up x
            f.set(k, int(-25));
            f.set(x, x * x1p25);
            let t = f.bits(x);
            f.set(ix, t);
        },
        |f| {
            let special = f.ucmp(Cmp::Ge, ix, int(0x7f80_0000));
            f.when(special, |f| f.ret1(x));
            let one = f.ucmp(Cmp::Eq, ix, int(0x3f80_0000));
            f.when(one, |f| f.ret1(f32c(0.0)));
        },
    );
    // reduce x into [sqrt(2)/2, sqrt(2)]
    let ix = f.iadd(ix, int(0x3f80_0000 - 0x3f35_04f3));
    let e = f.shr_u(ix, int(23));
    let e = f.isub(e, int(0x7f));
    let k = f.iadd(k, e);
    let m = f.and(ix, int(0x007f_ffff));
    let m = f.iadd(m, int(0x3f35_04f3));
    let x = f.bits(m);
    (x, k)
}

/// `(f, s, hfsq, r)` of the log kernels.
fn log_kernel(f: &mut Func, x: R) -> (R, R, R, R) {
    let fm = f.eval(x - ONE);
    // In range: x in [sqrt(2)/2, sqrt(2)], so fm is +0 or at least 2^-24 in magnitude
    let s = f.div_in_range(fm, f32c(2.0) + fm);
    let z = f.eval(s * s);
    let w = f.eval(z * z);
    let t1 = f.eval(w * (LG2 + w * LG4));
    let t2 = f.eval(z * (LG1 + w * LG3));
    let r = f.eval(t2 + t1);
    let hfsq = f.eval(f32c(0.5) * fm * fm);
    (fm, s, hfsq, r)
}

pub(super) fn logf() -> Func {
    const LN2_HI: Op = f32c(6.9313812256e-01); /* 0x3f317180 */
    const LN2_LO: Op = f32c(9.0580006145e-06); /* 0x3717f7d1 */
    let mut f = Func::new("vyre_libm_logf", &[Class::F32], &[Class::F32]);
    let (x, k) = log_reduce(&mut f);
    let (fm, s, hfsq, r) = log_kernel(&mut f, x);
    let dk = f.cvt(Cvt::F32S32, k);
    f.ret1(s * (hfsq + r) + dk * LN2_LO - hfsq + fm + dk * LN2_HI);
    f
}

pub(super) fn log2f() -> Func {
    const IVLN2HI: Op = f32c(1.4428710938e+00); /* 0x3fb8b000 */
    const IVLN2LO: Op = f32c(-1.7605285393e-04); /* 0xb9389ad4 */
    let mut f = Func::new("vyre_libm_log2f", &[Class::F32], &[Class::F32]);
    let (x, k) = log_reduce(&mut f);
    let (fm, s, hfsq, r) = log_kernel(&mut f, x);
    // hi = f - hfsq, with the low 12 bits cleared
    let ui = f.bits(fm - hfsq);
    let ui = f.and(ui, int(0xffff_f000));
    let hi = f.bits(ui);
    let lo = f.eval(fm - hi - hfsq + s * (hfsq + r));
    let t = f.eval((lo + hi) * IVLN2LO + lo * IVLN2HI + hi * IVLN2HI);
    let kf = f.cvt(Cvt::F32S32, k);
    f.ret1(t + kf);
    f
}
