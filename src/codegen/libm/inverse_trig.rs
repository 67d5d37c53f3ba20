//! `asinf`, `acosf`, `atanf` (libm 0.2.16, from FreeBSD `e_asinf.c`, `e_acosf.c`,
//! `s_atanf.c`). `asinf` finishes in f64 (libm's `sqrt` is `sqrtsd`: correctly rounded);
//! `acosf` and `atanf` are all f32.

use super::ptx::{f32c, f64c, int, Class, Cmp, Cvt, Func, Op, Table, E, R};

const P_S0: Op = f32c(1.6666586697e-01);
const P_S1: Op = f32c(-4.2743422091e-02);
const P_S2: Op = f32c(-8.6563630030e-03);
const Q_S1: Op = f32c(-7.0662963390e-01);
const ONE: Op = f32c(1.0);
const TWO: Op = f32c(2.0);
const HALF: Op = f32c(0.5);

/// `r(z)` of asinf/acosf, in f32. In range (`div_in_range`): z is +0 or at least 2^-52,
/// so p is +0 or above 2^-56, and q lies in [0.82, 1].
fn r(f: &mut Func, z: R) -> R {
    let p = f.eval(z * (P_S0 + z * (P_S1 + z * P_S2)));
    let q = f.eval(ONE + z * Q_S1);
    f.div_in_range(p, q)
}

pub(super) fn asinf() -> Func {
    const PIO2: Op = f64c(1.570796326794896558e+00);
    const X1P_120: Op = Op::F64(0x3870_0000_0000_0000); // 2^-120 as f64
    let mut f = Func::new("vyre_libm_asinf", &[Class::F32], &[Class::F32]);
    let x = f.params[0];
    let hx = f.bits(x);
    let ix = f.and(hx, int(0x7fff_ffff));
    let ge_one = f.ucmp(Cmp::Ge, ix, int(0x3f80_0000));
    f.when(ge_one, |f| {
        // |x| == 1
        let one = f.ucmp(Cmp::Eq, ix, int(0x3f80_0000));
        f.when(one, |f| {
            let x64 = f.cvt(Cvt::F64F32, x);
            let y = f.cvt(Cvt::F32F64, x64 * PIO2 + X1P_120);
            f.ret1(y);
        });
        // asin(|x|>1) is NaN (the source's 0/(x-x))
        f.ret1(f32c(f32::NAN));
    });
    let lt_half = f.ucmp(Cmp::Lt, ix, int(0x3f00_0000));
    f.when(lt_half, |f| {
        // if 0x1p-126 <= |x| < 0x1p-12, avoid raising underflow
        let normal = f.ucmp(Cmp::Ge, ix, int(0x0080_0000));
        let tiny = f.ucmp(Cmp::Lt, ix, int(0x3980_0000));
        f.when(normal, |f| f.when(tiny, |f| f.ret1(x)));
        let xx = f.eval(x * x);
        let t = r(f, xx);
        f.ret1(x + x * t);
    });
    // 1 > |x| >= 0.5
    let ax = f.abs(x);
    let z = f.eval((ONE - ax) * HALF);
    let z64 = f.cvt(Cvt::F64F32, z);
    let s = f.sqrt(z64);
    // x = (PIO2 - 2. * (s + s * (r(z) as f64))) as f32
    let rz = r(&mut f, z);
    let rz = f.cvt(Cvt::F64F32, rz);
    let y = f.cvt(Cvt::F32F64, PIO2 - f64c(2.0) * (s + s * rz));
    let neg = f.neg(y);
    let sign = f.scmp(Cmp::Lt, hx, int(0));
    let y = f.selp(sign, neg, y);
    f.ret1(y);
    f
}

const PIO2_HI: Op = f32c(1.5707962513e+00); /* 0x3fc90fda */
const PIO2_LO: Op = f32c(7.5497894159e-08); /* 0x33a22168 */
const X1P_120: Op = Op::F32(0x0380_0000); // 2^-120 as f32

pub(super) fn acosf() -> Func {
    let mut f = Func::new("vyre_libm_acosf", &[Class::F32], &[Class::F32]);
    let x = f.params[0];
    let hx = f.bits(x);
    let ix = f.and(hx, int(0x7fff_ffff));
    let sign = f.scmp(Cmp::Lt, hx, int(0));
    // |x| >= 1 or nan
    let ge_one = f.ucmp(Cmp::Ge, ix, int(0x3f80_0000));
    f.when(ge_one, |f| {
        let one = f.ucmp(Cmp::Eq, ix, int(0x3f80_0000));
        f.when(one, |f| {
            f.when(sign, |f| f.ret1(TWO * PIO2_HI + X1P_120));
            f.ret1(f32c(0.0));
        });
        // acos(|x|>1) is NaN (the source's 0/(x-x))
        f.ret1(f32c(f32::NAN));
    });
    // |x| < 0.5
    let lt_half = f.ucmp(Cmp::Lt, ix, int(0x3f00_0000));
    f.when(lt_half, |f| {
        // |x| < 2**-26
        let tiny = f.ucmp(Cmp::Le, ix, int(0x3280_0000));
        f.when(tiny, |f| f.ret1(PIO2_HI + X1P_120));
        let xx = f.eval(x * x);
        let t = r(f, xx);
        f.ret1(PIO2_HI - (x - (PIO2_LO - x * t)));
    });
    // x < -0.5
    f.when(sign, |f| {
        let z = f.eval((ONE + x) * HALF);
        let s = f.sqrt(z);
        let t = r(f, z);
        let w = f.eval(t * s - PIO2_LO);
        f.ret1(TWO * (PIO2_HI - (s + w)));
    });
    // x > 0.5; df is s with the low 12 bits cleared
    let z = f.eval((ONE - x) * HALF);
    let s = f.sqrt(z);
    let sb = f.bits(s);
    let dfb = f.and(sb, int(0xffff_f000));
    let df = f.bits(dfb);
    // In range: z >= 2^-25 here, so z - df * df is +0 or at least ~2^-48
    let c = f.div_in_range(z - df * df, s + df);
    let t = r(&mut f, z);
    let w = f.eval(t * s + c);
    f.ret1(TWO * (df + w));
    f
}

const fn f32_bits(v: f32) -> u64 {
    v.to_bits() as u64
}

static ATAN_HI: Table = Table {
    name: "vyre_libm_atan_hi",
    class: Class::F32,
    data: &[
        f32_bits(4.6364760399e-01), /* atan(0.5)hi 0x3eed6338 */
        f32_bits(7.8539812565e-01), /* atan(1.0)hi 0x3f490fda */
        f32_bits(9.8279368877e-01), /* atan(1.5)hi 0x3f7b985e */
        f32_bits(1.5707962513e+00), /* atan(inf)hi 0x3fc90fda */
    ],
};

static ATAN_LO: Table = Table {
    name: "vyre_libm_atan_lo",
    class: Class::F32,
    data: &[
        f32_bits(5.0121582440e-09), /* atan(0.5)lo 0x31ac3769 */
        f32_bits(3.7748947079e-08), /* atan(1.0)lo 0x33222168 */
        f32_bits(3.4473217170e-08), /* atan(1.5)lo 0x33140fb4 */
        f32_bits(7.5497894159e-08), /* atan(inf)lo 0x33a22168 */
    ],
};

pub(super) fn atanf() -> Func {
    const A_T: [Op; 5] = [
        f32c(3.3333328366e-01),
        f32c(-1.9999158382e-01),
        f32c(1.4253635705e-01),
        f32c(-1.0648017377e-01),
        f32c(6.1687607318e-02),
    ];
    let mut f = Func::new("vyre_libm_atanf", &[Class::F32], &[Class::F32]);
    let x0 = f.params[0];
    let bits = f.bits(x0);
    let sign = f.scmp(Cmp::Lt, bits, int(0));
    let ix = f.and(bits, int(0x7fff_ffff));
    // if |x| >= 2**26
    let huge = f.ucmp(Cmp::Ge, ix, int(0x4c80_0000));
    f.when(huge, |f| {
        let nan = f.fcmp(Cmp::Ne, x0, x0);
        f.when(nan, |f| f.ret1(x0));
        let hi = f.ld(&ATAN_HI, int(3));
        let z = f.eval(hi + X1P_120);
        let y = f.negate_if(sign, z);
        f.ret1(y);
    });
    let (x, id) = atan_reduce(&mut f, x0, ix);
    // the polynomial on the reduced x, plus the table entry id, with x's sign
    let z = f.eval(x * x);
    let w = f.eval(z * z);
    let s1 = f.eval(z * (A_T[0] + w * (A_T[2] + w * A_T[4])));
    let s2 = f.eval(w * (A_T[1] + w * A_T[3]));
    let s = f.eval(s1 + s2);
    let no_id = f.scmp(Cmp::Lt, id, int(0));
    f.when(no_id, |f| f.ret1(x - x * s));
    let hi = f.ld(&ATAN_HI, id);
    let lo = f.ld(&ATAN_LO, id);
    let z = f.eval(hi - ((x * s - lo) - x));
    let y = f.negate_if(sign, z);
    f.ret1(y);
    f
}

/// Argument reduction: `(x, id)`, id = -1 for |x| < 7/16 (x unchanged; tiny |x|
/// returns x) and otherwise the index of atan(0.5), atan(1), atan(1.5) or atan(inf)
/// that the reduced x is an offset from.
fn atan_reduce(f: &mut Func, x0: R, ix: R) -> (R, R) {
    let x = f.copy(Class::F32, x0);
    let id = f.reg(Class::B32);
    let small = f.ucmp(Cmp::Lt, ix, int(0x3ee0_0000));
    // x = v; id = n
    // x = a / b; id = n. In range (`div_in_range`): each numerator is +0 or at least
    // 2^-24 in magnitude, each divisor in [1, 2^26], each quotient within [2^-26, 1]
    let reduced = |f: &mut Func, a: E, b: E, n: i64| {
        let v = f.div_in_range(a, b);
        f.set(x, v);
        f.set(id, int(n));
    };
    let below = |f: &mut Func, bound: i64| f.ucmp(Cmp::Lt, ix, int(bound));
    f.if_else(
        small,
        |f| {
            // |x| < 0.4375; |x| < 2**-12 returns x
            let tiny = f.ucmp(Cmp::Lt, ix, int(0x3980_0000));
            f.when(tiny, |f| f.ret1(x0));
            f.set(id, int(-1));
        },
        |f| {
            f.update(x, |f| f.abs(x));
            let lt_19_16 = below(f, 0x3f98_0000);
            f.if_else(
                lt_19_16,
                |f| {
                    let lt_11_16 = below(f, 0x3f30_0000);
                    f.if_else(
                        lt_11_16,
                        // 7/16 <= |x| < 11/16
                        |f| reduced(f, TWO * x - ONE, TWO + x, 0),
                        // 11/16 <= |x| < 19/16
                        |f| reduced(f, x - ONE, x + ONE, 1),
                    );
                },
                |f| {
                    let lt_39_16 = below(f, 0x401c_0000);
                    f.if_else(
                        lt_39_16,
                        // |x| < 2.4375
                        |f| reduced(f, x - f32c(1.5), ONE + f32c(1.5) * x, 2),
                        // 2.4375 <= |x| < 2**26
                        |f| reduced(f, f32c(-1.0).into(), x.into(), 3),
                    );
                },
            );
        },
    );
    (x, id)
}
