//! `scalbn`/`scalbnf` (libm's `generic::scalbn`): `x * 2^n` with the same pre-scaling steps.

use super::ptx::{int, Class, Cmp, Cvt, Func, Op, R};

/// `scalbnf(x, n)` for an f32 `x`, or `scalbn(x, n)` for an f64 `x`; `n` is an `i32`.
pub(super) fn scalbn(f: &mut Func, x: R, n: R) -> R {
    let wide = x.class == Class::F64;
    // F::EXP_MAX, F::SIG_BITS; `pow2(e)` is 2^e in x's width
    let (exp_max, sig_bits) = if wide { (1023, 52) } else { (127, 23) };
    let exp_min = 1 - exp_max;
    let pow2 = |e: i64| {
        let bits = ((exp_max + e) as u64) << sig_bits;
        if wide {
            Op::F64(bits)
        } else {
            Op::F32(bits as u32)
        }
    };
    let x = f.copy(x.class, x);
    let n = f.copy(Class::B32, n);
    let over = f.scmp(Cmp::Gt, n, int(exp_max));
    f.if_else(
        over,
        |f| prescale(f, [x, n], pow2(exp_max), -exp_max, (Cmp::Gt, exp_max)),
        |f| {
            let under = f.scmp(Cmp::Lt, n, int(exp_min));
            // x *= 2^exp_min * 2^(sig_bits + 1)
            let (mul, add) = (pow2(exp_min + sig_bits + 1), -exp_min - (sig_bits + 1));
            f.when(under, |f| prescale(f, [x, n], mul, add, (Cmp::Lt, exp_min)));
        },
    );
    // scale = from_parts(false, (EXP_BIAS + n) as u32, 0)
    let mut biased = f.iadd(n, int(exp_max));
    if wide {
        biased = f.cvt(Cvt::U64U32, biased);
    }
    let bits = f.shl(biased, int(sig_bits));
    let scale = f.bits(bits);
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
