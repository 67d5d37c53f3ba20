//! `scalbn`/`scalbnf` (libm's `generic::scalbn`): `x * 2^n` with the same pre-scaling steps.

use super::ptx::{f32b, f64b, int, Class, Cmp, Cvt, Func, Op, R};

/// `scalbnf(x, n)` for an f32 `x`, or `scalbn(x, n)` for an f64 `x`; `n` is an `i32`.
pub(super) fn scalbn(f: &mut Func, x: R, n: R) -> R {
    let wide = x.class == Class::F64;
    // exp_max, exp_min, 2^exp_max, 2^exp_min * 2^(sig_bits + 1), -exp_min - (sig_bits + 1)
    let (exp_max, exp_min, f_exp_max, mul, add) = if wide {
        (
            1023i64,
            -1022i64,
            f64b(0x7FE0 << 48),
            f64b((1 + 53) << 52),
            1022 - 53,
        )
    } else {
        (127, -126, f32b(254 << 23), f32b((1 + 24) << 23), 126 - 24)
    };
    let x = f.copy(x.class, x);
    let n = f.copy(Class::B32, n);
    let over = f.scmp(Cmp::Gt, n, int(exp_max));
    f.if_else(
        over,
        |f| prescale(f, [x, n], f_exp_max, -exp_max, (Cmp::Gt, exp_max)),
        |f| {
            let under = f.scmp(Cmp::Lt, n, int(exp_min));
            f.when(under, |f| prescale(f, [x, n], mul, add, (Cmp::Lt, exp_min)));
        },
    );
    // scale = from_parts(false, (EXP_BIAS + n) as u32, 0)
    let biased = f.iadd(n, int(exp_max));
    let scale = if wide {
        let wide_bits = f.cvt(Cvt::U64U32, biased);
        let bits = f.shl(wide_bits, int(52));
        f.bits(bits)
    } else {
        let bits = f.shl(biased, int(23));
        f.bits(bits)
    };
    f.eval(x * scale)
}

/// `x *= factor; n += dn`, and once more if n is still past `limit` (`cmp`), after which
/// n is clamped to `limit`.
fn prescale(f: &mut Func, [x, n]: [R; 2], factor: Op, dn: i64, (cmp, limit): (Cmp, i64)) {
    let step = |f: &mut Func| {
        f.set(x, x * factor);
        f.bump(n, dn);
    };
    step(f);
    let past = f.scmp(cmp, n, int(limit));
    f.when(past, |f| {
        step(f);
        let past = f.scmp(cmp, n, int(limit));
        f.when(past, |f| f.set(n, int(limit)));
    });
}
