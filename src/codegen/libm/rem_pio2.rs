//! `rem_pio2f` and the part of `rem_pio2_large` it uses (libm 0.2.16, from FreeBSD
//! `e_rem_pio2f.c` / `k_rem_pio2.c`): `x = n*pi/2 + y`, with `y` an f64.
//!
//! Built as one internal routine returning `(y: f64, n: i32)`. The large-argument path is
//! the generic Payne-Hanek reduction specialised to what `rem_pio2f` passes (one input
//! digit `jx = 0`, `prec = 0`, so `jk = jp = 3`); its loops and arrays are kept as in the
//! source (arrays in `.local` memory) so every f64 operation happens in the same order.

use super::ptx::{f64c, int, Class, Cmp, Cvt, Func, Label, Mem, Op, Table, R};
use super::scalbn::scalbn;

pub(super) const NAME: &str = "vyre_libm_rem_pio2f";

const TOINT: Op = f64c(1.5 / f64::EPSILON);
const INV_PIO2: Op = f64c(6.36619772367581382433e-01); /* 0x3FE45F30, 0x6DC9C883 */
const PIO2_1: Op = f64c(1.57079631090164184570e+00); /* 0x3FF921FB, 0x50000000 */
const PIO2_1T: Op = f64c(1.58932547735281966916e-08); /* 0x3E5110b4, 0x611A6263 */

/// 2^24 and 2^-24.
const X1P24: Op = Op::F64(0x4170_0000_0000_0000);
const X1P_24: Op = Op::F64(0x3E70_0000_0000_0000);

/// `rem_pio2f(x) -> (n, y)` as a routine returning `(y: f64, n: b32)`.
pub(super) fn rem_pio2f() -> Func {
    let mut f = Func::new(NAME, &[Class::F32], &[Class::F64, Class::B32]);
    let x = f.params[0];
    let x64 = f.cvt(Cvt::F64F32, x);
    let xb = f.bits(x);
    let ix = f.and(xb, int(0x7fff_ffff));
    // |x| ~< 2^28*(pi/2), medium size
    let medium = f.ucmp(Cmp::Lt, ix, int(0x4dc9_0fdb));
    f.when(medium, |f| {
        let tmp = f.eval(x64 * INV_PIO2 + TOINT);
        let f_n = f.eval(tmp - TOINT);
        let n = f.cvt(Cvt::S32F64, f_n);
        let y = f.eval(x64 - f_n * PIO2_1 - f_n * PIO2_1T);
        f.ret(&[y.into(), n.into()]);
    });
    // x is inf or NaN
    let special = f.ucmp(Cmp::Ge, ix, int(0x7f80_0000));
    f.when(special, |f| {
        let y = f.eval(x64 - x64);
        f.ret(&[y.into(), int(0)]);
    });
    // scale x into [2^23, 2^24-1]
    let sign = f.scmp(Cmp::Lt, xb, int(0));
    let exp = f.shr_u(ix, int(23));
    let e0 = f.isub(exp, int(0x7f + 23));
    let shifted = f.shl(e0, int(23));
    let tx_bits = f.isub(ix, shifted);
    let tx32 = f.bits(tx_bits);
    let tx = f.cvt(Cvt::F64F32, tx32);
    let (n, y) = rem_pio2_large(&mut f, tx, e0);
    let neg_n = f.isub(int(0), n);
    let neg_y = f.neg(y);
    let n = f.selp(sign, neg_n, n);
    let y = f.selp(sign, neg_y, y);
    f.ret(&[y.into(), n.into()]);
    f
}

/// `rem_pio2_large(&[x], &mut y, e0, 0)`: returns `(n & 7, y[0])`.
fn rem_pio2_large(f: &mut Func, x: R, e0: R) -> (R, R) {
    let s = Large::setup(f, x, e0);
    let recompute = f.label();
    f.place(recompute);
    s.distill(f);
    let jz1 = s.compute_n(f);
    s.complement(f, jz1);
    let z_zero = s.recompute_if_zero(f, jz1, recompute);
    s.chop(f, z_zero);
    let fw = s.to_float(f);
    s.times_pio2(f, fw);
    s.compress(f, fw)
}

/// `q[at] = 0. + x * f[fi]` (`fa`, `q`: the arrays f and q).
fn q_term(f: &mut Func, x: R, [fa, q]: [Mem; 2], fi: Op, at: Op) {
    let fv = f.ld(fa, fi);
    f.st(q, at, f64c(0.0) + x * fv);
}

const JK: i64 = 3; // INIT_JK[prec]
const JP: i64 = JK;
const JX: i64 = 0; // nx - 1

/// The arrays (`.local` handles) and the variables (registers, assigned with `set`) of
/// `rem_pio2_large`; each method is one step of the source, in its order.
struct Large {
    x: R,
    jv: R,
    q0: R,
    fa: Mem,
    fq: Mem,
    q: Mem,
    iq: Mem,
    jz: R,
    z: R,
    n: R,
    ih: R,
    i: R,
    j: R,
    carry: R,
    k: R,
}

impl Large {
    /// Determine jv and q0, set up f[] from ipio2[] and compute q[0..=jk].
    fn setup(f: &mut Func, x: R, e0: R) -> Self {
        let fa = f.local("vyre_rp_f", Class::F64, 20);
        let fq = f.local("vyre_rp_fq", Class::F64, 20);
        let q = f.local("vyre_rp_q", Class::F64, 20);
        let iq = f.local("vyre_rp_iq", Class::B32, 20);
        // determine jx, jv, q0 (jv = max((e0 - 3) / 24, 0))
        let t = f.isub(e0, int(3));
        let jv = f.idiv_s(t, int(24));
        let negative = f.scmp(Cmp::Lt, jv, int(0));
        let jv = f.selp(negative, int(0), jv);
        let jv1 = f.iadd(jv, int(1));
        let t = f.imul(jv1, int(24));
        let q0 = f.reg(Class::B32);
        let t = f.isub(e0, t);
        f.set(q0, t);
        // set up f[0] to f[jx+jk] where f[jx+jk] = ipio2[jv+jk]; j = jv - jx >= 0 here
        for i in 0..=JX + JK {
            let j = f.iadd(jv, int(i - JX));
            let digit = f.ld(&IPIO2, j);
            let v = f.cvt(Cvt::F64S32, digit);
            f.st(fa, int(i), v);
        }
        // compute q[0],q[1],...q[jk]
        for i in 0..=JK {
            q_term(f, x, [fa, q], int(JX + i), int(i));
        }
        Large {
            x,
            jv,
            q0,
            fa,
            fq,
            q,
            iq,
            jz: f.copy(Class::B32, int(JK)),
            z: f.reg(Class::F64),
            n: f.reg(Class::B32),
            ih: f.reg(Class::B32),
            i: f.reg(Class::B32),
            j: f.reg(Class::B32),
            carry: f.reg(Class::B32),
            k: f.reg(Class::B32),
        }
    }

    /// `(fw, digit)`: `z` split into 24-bit parts, `fw = (2^-24 z) as i32` (as an f64) and
    /// `digit = (z - 2^24 fw) as i32`.
    fn split24(f: &mut Func, z: R) -> (R, R) {
        let t = f.cvt(Cvt::S32F64, X1P_24 * z);
        let fw = f.cvt(Cvt::F64S32, t);
        (fw, f.cvt(Cvt::S32F64, z - X1P24 * fw))
    }

    /// Distill q[] into iq[] reversingly.
    fn distill(&self, f: &mut Func) {
        let (i, j, z) = (self.i, self.j, self.z);
        f.set(i, int(0));
        let qz = f.ld(self.q, self.jz);
        f.set(z, qz);
        f.set(j, self.jz);
        f.until(
            |f| f.scmp(Cmp::Lt, j, int(1)),
            |f, _| {
                let (fw, digit) = Self::split24(f, z);
                f.st(self.iq, i, digit);
                let jm1 = f.isub(j, int(1));
                let qj = f.ld(self.q, jm1);
                f.set(z, qj + fw);
                f.bump(i, 1);
                f.set(j, jm1);
            },
        );
    }

    /// Compute n and ih (whether q > 0.5, 2 for the upper half); returns jz - 1.
    fn compute_n(&self, f: &mut Func) -> R {
        let (z, n, ih, q0) = (self.z, self.n, self.ih, self.q0);
        f.update(z, |f| scalbn(f, z, q0));
        let t = f.cvt(Cvt::FloorF64, z * f64c(0.125));
        f.set(z, z - f64c(8.0) * t);
        f.update(n, |f| f.cvt(Cvt::S32F64, z));
        let t = f.cvt(Cvt::F64S32, n);
        f.set(z, z - t);
        f.set(ih, int(0));
        let jz1 = f.isub(self.jz, int(1));
        let q0_pos = f.scmp(Cmp::Gt, q0, int(0));
        f.if_else(
            q0_pos,
            |f| {
                // need iq[jz-1] to determine n
                let s = f.isub(int(24), q0);
                let digit = f.ld(self.iq, jz1);
                f.update(self.i, |f| f.shr_s(digit, s));
                f.update(n, |f| f.iadd(n, self.i));
                let t = f.shl(self.i, s);
                let digit = f.isub(digit, t);
                f.st(self.iq, jz1, digit);
                let s = f.isub(int(23), q0);
                f.update(ih, |f| f.shr_s(digit, s));
            },
            |f| {
                let q0_zero = f.scmp(Cmp::Eq, q0, int(0));
                f.if_else(
                    q0_zero,
                    |f| {
                        let digit = f.ld(self.iq, jz1);
                        f.update(ih, |f| f.shr_s(digit, int(23)));
                    },
                    |f| {
                        let half = f.fcmp(Cmp::Ge, z, f64c(0.5));
                        f.when(half, |f| f.set(ih, int(2)));
                    },
                );
            },
        );
        jz1
    }

    /// q > 0.5: n += 1 and q = 1 - q (iq[] complemented, z from 1).
    fn complement(&self, f: &mut Func, jz1: R) {
        let (i, carry, z, q0) = (self.i, self.carry, self.z, self.q0);
        let ih_pos = f.scmp(Cmp::Gt, self.ih, int(0));
        f.when(ih_pos, |f| {
            f.bump(self.n, 1);
            f.set(carry, int(0));
            // compute 1-q
            f.count(i, int(0), (Cmp::Ge, self.jz.into()), |f, _| {
                let digit = f.ld(self.iq, i);
                let no_carry = f.scmp(Cmp::Eq, carry, int(0));
                f.if_else(
                    no_carry,
                    |f| {
                        let nonzero = f.scmp(Cmp::Ne, digit, int(0));
                        f.when(nonzero, |f| {
                            f.set(carry, int(1));
                            let t = f.isub(int(0x100_0000), digit);
                            f.st(self.iq, i, t);
                        });
                    },
                    |f| {
                        let t = f.isub(int(0xff_ffff), digit);
                        f.st(self.iq, i, t);
                    },
                );
            });
            // rare case: chance is 1 in 12
            for (q0_is, mask) in [(1, 0x7f_ffff), (2, 0x3f_ffff)] {
                let hit = f.scmp(Cmp::Eq, q0, int(q0_is));
                f.when(hit, |f| {
                    let digit = f.ld(self.iq, jz1);
                    let t = f.and(digit, int(mask));
                    f.st(self.iq, jz1, t);
                });
            }
            let ih_two = f.scmp(Cmp::Eq, self.ih, int(2));
            f.when(ih_two, |f| {
                f.set(z, f64c(1.0) - z);
                let carried = f.scmp(Cmp::Ne, carry, int(0));
                f.when(carried, |f| {
                    let one = f.copy(Class::F64, f64c(1.0));
                    let s = scalbn(f, one, q0);
                    f.set(z, z - s);
                });
            });
        });
    }

    /// Check if recomputation is needed (z == 0 with the remaining digits all zero):
    /// then fetch more digits of 2/pi and jump back to `recompute`. Returns `z == 0`.
    fn recompute_if_zero(&self, f: &mut Func, jz1: R, recompute: Label) -> R {
        let (i, j) = (self.i, self.j);
        let z_zero = f.fcmp(Cmp::Eq, self.z, f64c(0.0));
        f.when(z_zero, |f| {
            // j = iq[jk] | ... | iq[jz-1]
            f.set(j, int(0));
            f.count(i, jz1, (Cmp::Lt, int(JK)), |f, _| {
                let digit = f.ld(self.iq, i);
                f.update(j, |f| f.or(j, digit));
            });
            let all_zero = f.scmp(Cmp::Eq, j, int(0));
            f.when(all_zero, |f| self.fetch_more(f, recompute));
        });
        z_zero
    }

    /// Find k, the number of terms needed, add q[jz+1] to q[jz+k] and recompute.
    fn fetch_more(&self, f: &mut Func, recompute: Label) {
        let (i, k, jz) = (self.i, self.k, self.jz);
        // (the source would index out of bounds, and panic, past iq[0])
        f.count(k, int(1), (Cmp::Gt, int(JK)), |f, done| {
            let at = f.isub(int(JK), k);
            let digit = f.ld(self.iq, at);
            let nonzero = f.scmp(Cmp::Ne, digit, int(0));
            f.bra_if(nonzero, true, done);
        });
        // add q[jz+1] to q[jz+k]
        let last = f.iadd(jz, k);
        let first = f.iadd(jz, int(1));
        f.count(i, first, (Cmp::Gt, last.into()), |f, _| {
            let at = f.iadd(self.jv, i);
            let digit = f.ld(&IPIO2, at);
            let v = f.cvt(Cvt::F64S32, digit);
            let fi = f.iadd(i, int(JX));
            f.st(self.fa, fi, v);
            q_term(f, self.x, [self.fa, self.q], fi.into(), i.into());
        });
        f.set(jz, last);
        f.bra(recompute);
    }

    /// Chop off zero terms (z == 0), or break z into 24-bit digits if necessary.
    fn chop(&self, f: &mut Func, z_zero: R) {
        let (jz, q0, z, iq) = (self.jz, self.q0, self.z, self.iq);
        let drop_digit = |f: &mut Func| {
            f.bump(jz, -1);
            f.bump(q0, -24);
        };
        f.if_else(
            z_zero,
            |f| {
                drop_digit(f);
                f.until(
                    |f| {
                        let digit = f.ld(iq, jz);
                        f.scmp(Cmp::Ne, digit, int(0))
                    },
                    |f, _| drop_digit(f),
                );
            },
            |f| {
                // break z into 24-bit if necessary
                let mq0 = f.isub(int(0), q0);
                f.update(z, |f| scalbn(f, z, mq0));
                let big = f.fcmp(Cmp::Ge, z, X1P24);
                f.if_else(
                    big,
                    |f| {
                        let (fw, digit) = Self::split24(f, z);
                        f.st(iq, jz, digit);
                        f.bump(jz, 1);
                        f.bump(q0, 24);
                        let digit = f.cvt(Cvt::S32F64, fw);
                        f.st(iq, jz, digit);
                    },
                    |f| {
                        let digit = f.cvt(Cvt::S32F64, z);
                        f.st(iq, jz, digit);
                    },
                );
            },
        );
    }

    /// Convert the integer "bit" chunks to floating-point values in q[]; returns the
    /// variable `fw`.
    fn to_float(&self, f: &mut Func) -> R {
        let i = self.i;
        let one = f.copy(Class::F64, f64c(1.0));
        let fw = f.reg(Class::F64);
        f.update(fw, |f| scalbn(f, one, self.q0));
        f.count(i, self.jz, (Cmp::Lt, int(0)), |f, _| {
            let digit = f.ld(self.iq, i);
            let v = f.cvt(Cvt::F64S32, digit);
            f.st(self.q, i, fw * v);
            f.set(fw, fw * X1P_24);
        });
        fw
    }

    /// Compute fq[jz - i] = PIo2[0,...,jp] * q[i,...,jz].
    fn times_pio2(&self, f: &mut Func, fw: R) {
        let (i, k) = (self.i, self.k);
        f.count(i, self.jz, (Cmp::Lt, int(0)), |f, _| {
            f.set(fw, f64c(0.0));
            f.set(k, int(0));
            let span = f.isub(self.jz, i);
            f.until(
                |f| f.scmp(Cmp::Gt, k, int(JP)),
                |f, done| {
                    let past_jz = f.scmp(Cmp::Gt, k, span);
                    f.bra_if(past_jz, true, done);
                    let c = f.ld(&PIO2, k);
                    let at = f.iadd(i, k);
                    let qv = f.ld(self.q, at);
                    f.set(fw, fw + c * qv);
                    f.bump(k, 1);
                },
            );
            f.st(self.fq, span, fw);
        });
    }

    /// Compress fq[] into y[] (prec 0): `(n & 7, ±(fq[jz] + ... + fq[0]))`.
    fn compress(&self, f: &mut Func, fw: R) -> (R, R) {
        let i = self.i;
        f.set(fw, f64c(0.0));
        f.count(i, self.jz, (Cmp::Lt, int(0)), |f, _| {
            let v = f.ld(self.fq, i);
            f.set(fw, fw + v);
        });
        let neg = f.neg(fw);
        let ih_zero = f.scmp(Cmp::Eq, self.ih, int(0));
        let y = f.selp(ih_zero, fw, neg);
        let n = f.and(self.n, int(7));
        (n, y)
    }
}

/// `PIo2`: pi/2 split into 24-bit pieces.
static PIO2: Table = Table {
    name: "vyre_libm_pio2",
    class: Class::F64,
    data: &[
        1.57079625129699707031e+00f64.to_bits(), /* 0x3FF921FB, 0x40000000 */
        7.54978941586159635335e-08f64.to_bits(), /* 0x3E74442D, 0x00000000 */
        5.39030252995776476554e-15f64.to_bits(), /* 0x3CF84698, 0x80000000 */
        3.28200341580791294123e-22f64.to_bits(), /* 0x3B78CC51, 0x60000000 */
        1.27065575308067607349e-29f64.to_bits(), /* 0x39F01B83, 0x80000000 */
        1.22933308981111328932e-36f64.to_bits(), /* 0x387A2520, 0x40000000 */
        2.73370053816464559624e-44f64.to_bits(), /* 0x36E38222, 0x80000000 */
        2.16741683877804819444e-51f64.to_bits(), /* 0x3569F31D, 0x00000000 */
    ],
};

/// `IPIO2`: the 24-bit digits of 2/pi (the 64-bit-pointer table of 690 entries).
static IPIO2: Table = Table {
    name: "vyre_libm_ipio2",
    class: Class::B32,
    data: &[
        0xA2F983, 0x6E4E44, 0x1529FC, 0x2757D1, 0xF534DD, 0xC0DB62, 0x95993C, 0x439041, 0xFE5163,
        0xABDEBB, 0xC561B7, 0x246E3A, 0x424DD2, 0xE00649, 0x2EEA09, 0xD1921C, 0xFE1DEB, 0x1CB129,
        0xA73EE8, 0x8235F5, 0x2EBB44, 0x84E99C, 0x7026B4, 0x5F7E41, 0x3991D6, 0x398353, 0x39F49C,
        0x845F8B, 0xBDF928, 0x3B1FF8, 0x97FFDE, 0x05980F, 0xEF2F11, 0x8B5A0A, 0x6D1F6D, 0x367ECF,
        0x27CB09, 0xB74F46, 0x3F669E, 0x5FEA2D, 0x7527BA, 0xC7EBE5, 0xF17B3D, 0x0739F7, 0x8A5292,
        0xEA6BFB, 0x5FB11F, 0x8D5D08, 0x560330, 0x46FC7B, 0x6BABF0, 0xCFBC20, 0x9AF436, 0x1DA9E3,
        0x91615E, 0xE61B08, 0x659985, 0x5F14A0, 0x68408D, 0xFFD880, 0x4D7327, 0x310606, 0x1556CA,
        0x73A8C9, 0x60E27B, 0xC08C6B, 0x47C419, 0xC367CD, 0xDCE809, 0x2A8359, 0xC4768B, 0x961CA6,
        0xDDAF44, 0xD15719, 0x053EA5, 0xFF0705, 0x3F7E33, 0xE832C2, 0xDE4F98, 0x327DBB, 0xC33D26,
        0xEF6B1E, 0x5EF89F, 0x3A1F35, 0xCAF27F, 0x1D87F1, 0x21907C, 0x7C246A, 0xFA6ED5, 0x772D30,
        0x433B15, 0xC614B5, 0x9D19C3, 0xC2C4AD, 0x414D2C, 0x5D000C, 0x467D86, 0x2D71E3, 0x9AC69B,
        0x006233, 0x7CD2B4, 0x97A7B4, 0xD55537, 0xF63ED7, 0x1810A3, 0xFC764D, 0x2A9D64, 0xABD770,
        0xF87C63, 0x57B07A, 0xE71517, 0x5649C0, 0xD9D63B, 0x3884A7, 0xCB2324, 0x778AD6, 0x23545A,
        0xB91F00, 0x1B0AF1, 0xDFCE19, 0xFF319F, 0x6A1E66, 0x615799, 0x47FBAC, 0xD87F7E, 0xB76522,
        0x89E832, 0x60BFE6, 0xCDC4EF, 0x09366C, 0xD43F5D, 0xD7DE16, 0xDE3B58, 0x929BDE, 0x2822D2,
        0xE88628, 0x4D58E2, 0x32CAC6, 0x16E308, 0xCB7DE0, 0x50C017, 0xA71DF3, 0x5BE018, 0x34132E,
        0x621283, 0x014883, 0x5B8EF5, 0x7FB0AD, 0xF2E91E, 0x434A48, 0xD36710, 0xD8DDAA, 0x425FAE,
        0xCE616A, 0xA4280A, 0xB499D3, 0xF2A606, 0x7F775C, 0x83C2A3, 0x883C61, 0x78738A, 0x5A8CAF,
        0xBDD76F, 0x63A62D, 0xCBBFF4, 0xEF818D, 0x67C126, 0x45CA55, 0x36D9CA, 0xD2A828, 0x8D61C2,
        0x77C912, 0x142604, 0x9B4612, 0xC459C4, 0x44C5C8, 0x91B24D, 0xF31700, 0xAD43D4, 0xE54929,
        0x10D5FD, 0xFCBE00, 0xCC941E, 0xEECE70, 0xF53E13, 0x80F1EC, 0xC3E7B3, 0x28F8C7, 0x940593,
        0x3E71C1, 0xB3092E, 0xF3450B, 0x9C1288, 0x7B20AB, 0x9FB52E, 0xC29247, 0x2F327B, 0x6D550C,
        0x90A772, 0x1FE76B, 0x96CB31, 0x4A1679, 0xE27941, 0x89DFF4, 0x9794E8, 0x84E6E2, 0x973199,
        0x6BED88, 0x365F5F, 0x0EFDBB, 0xB49A48, 0x6CA467, 0x427271, 0x325D8D, 0xB8159F, 0x09E5BC,
        0x25318D, 0x3974F7, 0x1C0530, 0x010C0D, 0x68084B, 0x58EE2C, 0x90AA47, 0x02E774, 0x24D6BD,
        0xA67DF7, 0x72486E, 0xEF169F, 0xA6948E, 0xF691B4, 0x5153D1, 0xF20ACF, 0x339820, 0x7E4BF5,
        0x6863B2, 0x5F3EDD, 0x035D40, 0x7F8985, 0x295255, 0xC06437, 0x10D86D, 0x324832, 0x754C5B,
        0xD4714E, 0x6E5445, 0xC1090B, 0x69F52A, 0xD56614, 0x9D0727, 0x50045D, 0xDB3BB4, 0xC576EA,
        0x17F987, 0x7D6B49, 0xBA271D, 0x296996, 0xACCCC6, 0x5414AD, 0x6AE290, 0x89D988, 0x50722C,
        0xBEA404, 0x940777, 0x7030F3, 0x27FC00, 0xA871EA, 0x49C266, 0x3DE064, 0x83DD97, 0x973FA3,
        0xFD9443, 0x8C860D, 0xDE4131, 0x9D3992, 0x8C70DD, 0xE7B717, 0x3BDF08, 0x2B3715, 0xA0805C,
        0x93805A, 0x921110, 0xD8E80F, 0xAF806C, 0x4BFFDB, 0x0F9038, 0x761859, 0x15A562, 0xBBCB61,
        0xB989C7, 0xBD4010, 0x04F2D2, 0x277549, 0xF6B6EB, 0xBB22DB, 0xAA140A, 0x2F2689, 0x768364,
        0x333B09, 0x1A940E, 0xAA3A51, 0xC2A31D, 0xAEEDAF, 0x12265C, 0x4DC26D, 0x9C7A2D, 0x9756C0,
        0x833F03, 0xF6F009, 0x8C402B, 0x99316D, 0x07B439, 0x15200C, 0x5BC3D8, 0xC492F5, 0x4BADC6,
        0xA5CA4E, 0xCD37A7, 0x36A9E6, 0x9492AB, 0x6842DD, 0xDE6319, 0xEF8C76, 0x528B68, 0x37DBFC,
        0xABA1AE, 0x3115DF, 0xA1AE00, 0xDAFB0C, 0x664D64, 0xB705ED, 0x306529, 0xBF5657, 0x3AFF47,
        0xB9F96A, 0xF3BE75, 0xDF9328, 0x3080AB, 0xF68C66, 0x15CB04, 0x0622FA, 0x1DE4D9, 0xA4B33D,
        0x8F1B57, 0x09CD36, 0xE9424E, 0xA4BE13, 0xB52333, 0x1AAAF0, 0xA8654F, 0xA5C1D2, 0x0F3F0B,
        0xCD785B, 0x76F923, 0x048B7B, 0x721789, 0x53A6C6, 0xE26E6F, 0x00EBEF, 0x584A9B, 0xB7DAC4,
        0xBA66AA, 0xCFCF76, 0x1D02D1, 0x2DF1B1, 0xC1998C, 0x77ADC3, 0xDA4886, 0xA05DF7, 0xF480C6,
        0x2FF0AC, 0x9AECDD, 0xBC5C3F, 0x6DDED0, 0x1FC790, 0xB6DB2A, 0x3A25A3, 0x9AAF00, 0x9353AD,
        0x0457B6, 0xB42D29, 0x7E804B, 0xA707DA, 0x0EAA76, 0xA1597B, 0x2A1216, 0x2DB7DC, 0xFDE5FA,
        0xFEDB89, 0xFDBE89, 0x6C76E4, 0xFCA906, 0x70803E, 0x156E85, 0xFF87FD, 0x073E28, 0x336761,
        0x86182A, 0xEABD4D, 0xAFE7B3, 0x6E6D8F, 0x396795, 0x5BBF31, 0x48D784, 0x16DF30, 0x432DC7,
        0x356125, 0xCE70C9, 0xB8CB30, 0xFD6CBF, 0xA200A4, 0xE46C05, 0xA0DD5A, 0x476F21, 0xD21262,
        0x845CB9, 0x496170, 0xE0566B, 0x015299, 0x375550, 0xB7D51E, 0xC4F133, 0x5F6E13, 0xE4305D,
        0xA92E85, 0xC3B21D, 0x3632A1, 0xA4B708, 0xD4B1EA, 0x21F716, 0xE4698F, 0x77FF27, 0x80030C,
        0x2D408D, 0xA0CD4F, 0x99A520, 0xD3A2B3, 0x0A5D2F, 0x42F9B4, 0xCBDA11, 0xD0BE7D, 0xC1DB9B,
        0xBD17AB, 0x81A2CA, 0x5C6A08, 0x17552E, 0x550027, 0xF0147F, 0x8607E1, 0x640B14, 0x8D4196,
        0xDEBE87, 0x2AFDDA, 0xB6256B, 0x34897B, 0xFEF305, 0x9EBFB9, 0x4F6A68, 0xA82A4A, 0x5AC44F,
        0xBCF82D, 0x985AD7, 0x95C7F4, 0x8D4D0D, 0xA63A20, 0x5F57A4, 0xB13F14, 0x953880, 0x0120CC,
        0x86DD71, 0xB6DEC9, 0xF560BF, 0x11654D, 0x6B0701, 0xACB08C, 0xD0C0B2, 0x485551, 0x0EFB1E,
        0xC37295, 0x3B06A3, 0x3540C0, 0x7BDC06, 0xCC45E0, 0xFA294E, 0xC8CAD6, 0x41F3E8, 0xDE647C,
        0xD8649B, 0x31BED9, 0xC397A4, 0xD45877, 0xC5E369, 0x13DAF0, 0x3C3ABA, 0x461846, 0x5F7555,
        0xF5BDD2, 0xC6926E, 0x5D2EAC, 0xED440E, 0x423E1C, 0x87C461, 0xE9FD29, 0xF3D6E7, 0xCA7C22,
        0x35916F, 0xC5E008, 0x8DD7FF, 0xE26A6E, 0xC6FDB0, 0xC10893, 0x745D7C, 0xB2AD6B, 0x9D6ECD,
        0x7B723E, 0x6A11C6, 0xA9CFF7, 0xDF7329, 0xBAC9B5, 0x5100B7, 0x0DB2E2, 0x24BA74, 0x607DE5,
        0x8AD874, 0x2C150D, 0x0C1881, 0x94667E, 0x162901, 0x767A9F, 0xBEFDFD, 0xEF4556, 0x367ED9,
        0x13D9EC, 0xB9BA8B, 0xFC97C4, 0x27A831, 0xC36EF1, 0x36C594, 0x56A8D8, 0xB5A8B4, 0x0ECCCF,
        0x2D8912, 0x34576F, 0x89562C, 0xE3CE99, 0xB920D6, 0xAA5E6B, 0x9C2A3E, 0xCC5F11, 0x4A0BFD,
        0xFBF4E1, 0x6D3B8E, 0x2C86E2, 0x84D4E9, 0xA9B4FC, 0xD1EEEF, 0xC9352E, 0x61392F, 0x442138,
        0xC8D91B, 0x0AFC81, 0x6A4AFB, 0xD81C2F, 0x84B453, 0x8C994E, 0xCC2254, 0xDC552A, 0xD6C6C0,
        0x96190B, 0xB8701A, 0x649569, 0x605A26, 0xEE523F, 0x0F117F, 0x11B5F4, 0xF5CBFC, 0x2DBC34,
        0xEEBC34, 0xCC5DE8, 0x605EDD, 0x9B8E67, 0xEF3392, 0xB817C9, 0x9B5861, 0xBC57E1, 0xC68351,
        0x103ED8, 0x4871DD, 0xDD1C2D, 0xA118AF, 0x462C21, 0xD7F359, 0x987AD9, 0xC0549E, 0xFA864F,
        0xFC0656, 0xAE79E5, 0x362289, 0x22AD38, 0xDC9367, 0xAAE855, 0x382682, 0x9BE7CA, 0xA40D51,
        0xB13399, 0x0ED7A9, 0x480569, 0xF0B265, 0xA7887F, 0x974C88, 0x36D1F9, 0xB39221, 0x4A827B,
        0x21CF98, 0xDC9F40, 0x5547DC, 0x3A74E1, 0x42EB67, 0xDF9DFE, 0x5FD45E, 0xA4677B, 0x7AACBA,
        0xA2F655, 0x23882B, 0x55BA41, 0x086E59, 0x862A21, 0x834739, 0xE6E389, 0xD49EE5, 0x40FB49,
        0xE956FF, 0xCA0F1C, 0x8A59C5, 0x2BFA94, 0xC5C1D3, 0xCFC50F, 0xAE5ADB, 0x86C547, 0x624385,
        0x3B8621, 0x94792C, 0x876110, 0x7B4C2A, 0x1A2C80, 0x12BF43, 0x902688, 0x893C78, 0xE4C4A8,
        0x7BDBE5, 0xC23AC4, 0xEAF426, 0x8A67F7, 0xBF920D, 0x2BA365, 0xB1933D, 0x0B7CBD, 0xDC51A4,
        0x63DD27, 0xDDE169, 0x19949A, 0x9529A8, 0x28CE68, 0xB4ED09, 0x209F44, 0xCA984E, 0x638270,
        0x237C7E, 0x32B90F, 0x8EF5A7, 0xE75614, 0x08F121, 0x2A9DB5, 0x4D7E6F, 0x5119A5, 0xABF9B5,
        0xD6DF82, 0x61DD96, 0x023616, 0x9F3AC4, 0xA1A283, 0x6DED72, 0x7A8D39, 0xA9B882, 0x5C326B,
        0x5B2746, 0xED3400, 0x7700D2, 0x55F4FC, 0x4D5901, 0x8071E0,
    ],
};
