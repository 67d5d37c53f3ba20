//! `sinf`, `cosf`, `tanf` (libm 0.2.16, from FreeBSD `s_sinf.c`, `s_cosf.c`, `s_tanf.c`)
//! with their f64 kernels `k_sinf`, `k_cosf`, `k_tanf` inlined.

use super::ptx::{f32c, f64c, int, Class, Cmp, Cvt, Func, Op, R};
use core::f64::consts::FRAC_PI_2;

/* Small multiples of pi/2 rounded to double precision. */
const PIO2_1: f64 = 1. * FRAC_PI_2;
const PIO2_2: f64 = 2. * FRAC_PI_2;
const PIO2_3: f64 = 3. * FRAC_PI_2;
const PIO2_4: f64 = 4. * FRAC_PI_2;

/// `k_sinf(x)`: |sin(x)/x - s(x)| < 2**-37.5 on [-pi/4, pi/4].
fn k_sinf(f: &mut Func, x: R) -> R {
    const S1: Op = f64c(-0.166666666416265235595); /* -0x15555554cbac77.0p-55 */
    const S2: Op = f64c(0.0083333293858894631756); /*  0x111110896efbb2.0p-59 */
    const S3: Op = f64c(-0.000198393348360966317347); /* -0x1a00f9e2cae774.0p-65 */
    const S4: Op = f64c(0.0000027183114939898219064); /*  0x16cd878c3b46a7.0p-71 */
    let z = f.eval(x * x);
    let w = f.eval(z * z);
    let r = f.eval(S3 + z * S4);
    let s = f.eval(z * x);
    f.cvt(Cvt::F32F64, x + s * (S1 + z * S2) + s * w * r)
}

/// `k_cosf(x)`: |cos(x) - c(x)| < 2**-34.1 on [-pi/4, pi/4].
fn k_cosf(f: &mut Func, x: R) -> R {
    const C0: Op = f64c(-0.499999997251031003120); /* -0x1ffffffd0c5e81.0p-54 */
    const C1: Op = f64c(0.0416666233237390631894); /*  0x155553e1053a42.0p-57 */
    const C2: Op = f64c(-0.00138867637746099294692); /* -0x16c087e80f1e27.0p-62 */
    const C3: Op = f64c(0.0000243904487962774090654); /*  0x199342e0ee5069.0p-68 */
    let z = f.eval(x * x);
    let w = f.eval(z * z);
    let r = f.eval(C2 + z * C3);
    f.cvt(Cvt::F32F64, f64c(1.0) + z * C0 + w * C1 + w * z * r)
}

/// `k_tanf(x, odd)`: |tan(x)/x - t(x)| < 2**-25.5 on [-pi/4, pi/4]; `odd` is a predicate.
fn k_tanf(f: &mut Func, x: R, odd: Option<R>) -> R {
    const T: [Op; 6] = [
        f64c(0.333331395030791399758),   /* 0x15554d3418c99f.0p-54 */
        f64c(0.133392002712976742718),   /* 0x1112fd38999f72.0p-55 */
        f64c(0.0533812378445670393523),  /* 0x1b54c91d865afe.0p-57 */
        f64c(0.0245283181166547278873),  /* 0x191df3908c33ce.0p-58 */
        f64c(0.00297435743359967304927), /* 0x185dadfcecf44e.0p-61 */
        f64c(0.00946564784943673166728), /* 0x1362b9bf971bcd.0p-59 */
    ];
    let z = f.eval(x * x);
    let r = f.eval(T[4] + z * T[5]);
    let t = f.eval(T[2] + z * T[3]);
    let w = f.eval(z * z);
    let s = f.eval(z * x);
    let u = f.eval(T[0] + z * T[1]);
    let r = f.eval(x + s * u + s * w * (t + w * r));
    // (if odd { -1. / r } else { r }) as f32
    let r = match odd {
        Some(odd) => {
            let inv = f.eval(f64c(-1.0) / r);
            f.selp(odd, inv, r)
        }
        None => r,
    };
    f.cvt(Cvt::F32F64, r)
}

/// The parts of the argument the ranges read: x, `x as f64`, |x| bits and its sign.
#[derive(Debug, Clone, Copy)]
struct Arg {
    x: R,
    x64: R,
    ix: R,
    sign: R,
}

impl Arg {
    fn new(f: &mut Func) -> Self {
        let x = f.params[0];
        let x64 = f.cvt(Cvt::F64F32, x);
        let bits = f.bits(x);
        let sign = f.scmp(Cmp::Lt, bits, int(0));
        let ix = f.and(bits, int(0x7fff_ffff));
        Arg { x, x64, ix, sign }
    }

    /// `if sign { x64 + c } else { x64 - c }`.
    fn toward_zero(self, f: &mut Func, c: f64) -> R {
        let plus = f.eval(self.x64 + f64c(c));
        let minus = f.eval(self.x64 - f64c(c));
        f.selp(self.sign, plus, minus)
    }

    /// `|x| <= bound` (on the bits).
    fn le(self, f: &mut Func, bound: i64) -> R {
        f.ucmp(Cmp::Le, self.ix, int(bound))
    }
}

/// One of sinf, cosf and tanf by the ranges of |x| they share: `kernel(x64)` for
/// |x| ~<= pi/4 (where |x| < 2^-12 returns `tiny`, or x), `near` for |x| ~<= 5pi/4,
/// `far` for |x| ~<= 9pi/4, NaN for Inf and NaN, and `general(n, y)` with
/// `(n, y) = rem_pio2f(x)` beyond. `near`, `far` and `general` return.
struct Trig {
    name: &'static str,
    tiny: Option<Op>,
    kernel: fn(&mut Func, R) -> R,
    near: fn(&mut Func, Arg),
    far: fn(&mut Func, Arg),
    general: fn(&mut Func, R, R),
}

impl Trig {
    fn build(&self, rem: &Func) -> Func {
        let mut f = Func::new(self.name, &[Class::F32], &[Class::F32]);
        let a = Arg::new(&mut f);
        let small = a.le(&mut f, 0x3f49_0fda);
        f.when(small, |f| {
            // |x| ~<= pi/4
            let tiny = f.ucmp(Cmp::Lt, a.ix, int(0x3980_0000));
            let tiny_value = self.tiny.unwrap_or(a.x.into());
            f.when(tiny, |f| f.ret1(tiny_value));
            let y = (self.kernel)(f, a.x64);
            f.ret1(y);
        });
        let le_5pio4 = a.le(&mut f, 0x407b_53d1);
        f.when(le_5pio4, |f| (self.near)(f, a));
        let le_9pio4 = a.le(&mut f, 0x40e2_31d5);
        f.when(le_9pio4, |f| (self.far)(f, a));
        // f(Inf or NaN) is NaN
        let special = f.ucmp(Cmp::Ge, a.ix, int(0x7f80_0000));
        f.when(special, |f| f.ret1(a.x - a.x));
        // general argument reduction needed: (n, y) = rem_pio2f(x)
        let out = f.call(rem, &[a.x.into()]);
        (self.general)(&mut f, out[1], out[0]);
        f
    }
}

/// `sinf` (`shift` 0) or `cosf` (`shift` 1: sinf a quadrant on) of `n*pi/2 + y`; by
/// n mod 4 that is `k_sinf(y)`, `k_cosf(y)`, `k_sinf(-y)`, `-k_cosf(y)`.
fn by_quadrant(f: &mut Func, n: R, y: R, shift: i64) {
    let quadrant = f.and(n, int(3));
    let odd = f.and(quadrant, int(1));
    let sin_case = f.scmp(if shift == 0 { Cmp::Eq } else { Cmp::Ne }, odd, int(0));
    f.when(sin_case, |f| {
        let negated = f.scmp(Cmp::Eq, quadrant, int(2 - shift));
        let arg = f.negate_if(negated, y);
        let v = k_sinf(f, arg);
        f.ret1(v);
    });
    let c = k_cosf(f, y);
    let neg = f.neg(c);
    let positive = f.scmp(Cmp::Eq, quadrant, int(1 - shift));
    let v = f.selp(positive, c, neg);
    f.ret1(v);
}

pub(super) fn sinf(rem: &Func) -> Func {
    Trig {
        name: "vyre_libm_sinf",
        tiny: None,
        kernel: k_sinf,
        near: |f, a| {
            let le_3pio4 = a.le(f, 0x4016_cbe3);
            f.when(le_3pio4, |f| {
                // if sign { -k_cosf(x64 + S1_PIO2) } else { k_cosf(x64 - S1_PIO2) }
                let arg = a.toward_zero(f, PIO2_1);
                let c = k_cosf(f, arg);
                let y = f.negate_if(a.sign, c);
                f.ret1(y);
            });
            // k_sinf(if sign { -(x64 + S2_PIO2) } else { -(x64 - S2_PIO2) })
            let arg = a.toward_zero(f, PIO2_2);
            let arg = f.neg(arg);
            let y = k_sinf(f, arg);
            f.ret1(y);
        },
        far: |f, a| {
            let le_7pio4 = a.le(f, 0x40af_eddf);
            f.when(le_7pio4, |f| {
                // if sign { k_cosf(x64 + S3_PIO2) } else { -k_cosf(x64 - S3_PIO2) }
                let arg = a.toward_zero(f, PIO2_3);
                let c = k_cosf(f, arg);
                let neg = f.neg(c);
                let y = f.selp(a.sign, c, neg);
                f.ret1(y);
            });
            let arg = a.toward_zero(f, PIO2_4);
            let y = k_sinf(f, arg);
            f.ret1(y);
        },
        general: |f, n, y| by_quadrant(f, n, y, 0),
    }
    .build(rem)
}

pub(super) fn cosf(rem: &Func) -> Func {
    Trig {
        name: "vyre_libm_cosf",
        tiny: Some(f32c(1.0)),
        kernel: k_cosf,
        near: |f, a| {
            let gt_3pio4 = f.ucmp(Cmp::Gt, a.ix, int(0x4016_cbe3));
            f.when(gt_3pio4, |f| {
                // -k_cosf(if sign { x64 + C2_PIO2 } else { x64 - C2_PIO2 })
                let arg = a.toward_zero(f, PIO2_2);
                let c = k_cosf(f, arg);
                let y = f.neg(c);
                f.ret1(y);
            });
            // if sign { k_sinf(x64 + C1_PIO2) } else { k_sinf(C1_PIO2 - x64) }
            let plus = f.eval(a.x64 + f64c(PIO2_1));
            let minus = f.eval(f64c(PIO2_1) - a.x64);
            let arg = f.selp(a.sign, plus, minus);
            let y = k_sinf(f, arg);
            f.ret1(y);
        },
        far: |f, a| {
            let gt_7pio4 = f.ucmp(Cmp::Gt, a.ix, int(0x40af_eddf));
            f.when(gt_7pio4, |f| {
                // k_cosf(if sign { x64 + C4_PIO2 } else { x64 - C4_PIO2 })
                let arg = a.toward_zero(f, PIO2_4);
                let y = k_cosf(f, arg);
                f.ret1(y);
            });
            // if sign { k_sinf(-x64 - C3_PIO2) } else { k_sinf(x64 - C3_PIO2) }
            let nx = f.neg(a.x64);
            let plus = f.eval(nx - f64c(PIO2_3));
            let minus = f.eval(a.x64 - f64c(PIO2_3));
            let arg = f.selp(a.sign, plus, minus);
            let y = k_sinf(f, arg);
            f.ret1(y);
        },
        general: |f, n, y| by_quadrant(f, n, y, 1),
    }
    .build(rem)
}

/// `tanf`: near and far are `k_tanf(x64 -+ k*pi/2, k odd)` for the two multiples of
/// pi/2 each range spans.
pub(super) fn tanf(rem: &Func) -> Func {
    fn between(f: &mut Func, a: Arg, bound: i64, [lo, hi]: [f64; 2]) {
        let in_lower = a.le(f, bound);
        let a_lo = a.toward_zero(f, lo);
        let a_hi = a.toward_zero(f, hi);
        let arg = f.selp(in_lower, a_lo, a_hi);
        let y = k_tanf(f, arg, Some(in_lower));
        f.ret1(y);
    }
    Trig {
        name: "vyre_libm_tanf",
        tiny: None,
        kernel: |f, x64| k_tanf(f, x64, None),
        near: |f, a| between(f, a, 0x4016_cbe3, [PIO2_1, PIO2_2]),
        far: |f, a| between(f, a, 0x40af_eddf, [PIO2_3, PIO2_4]),
        general: |f, n, y| {
            let odd = f.and(n, int(1));
            let odd = f.scmp(Cmp::Ne, odd, int(0));
            let v = k_tanf(f, y, Some(odd));
            f.ret1(v);
        },
    }
    .build(rem)
}
