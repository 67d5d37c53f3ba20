//! `BinOp`, `UnOp` and `Cast` lowering with the reference's exact results.

use super::fault::DeviceFault;
use super::kind::ValKind;
use super::libm::Libm;
use super::lower::{Lowerer, Val};
use super::writer::{emit, Reg, RegClass};
use super::CodegenError;
use vyre_foundation::ir::{BinOp, DataType, UnOp};

/// Integer value variants and their PTX spellings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Int {
    U32,
    I32,
    U64,
}

impl Int {
    fn ty(self) -> &'static str {
        match self {
            Self::U32 => "u32",
            Self::I32 => "s32",
            Self::U64 => "u64",
        }
    }

    fn bits(self) -> &'static str {
        match self {
            Self::U32 | Self::I32 => "b32",
            Self::U64 => "b64",
        }
    }

    fn class(self) -> RegClass {
        match self {
            Self::U32 | Self::I32 => RegClass::B32,
            Self::U64 => RegClass::B64,
        }
    }

    fn kind(self) -> ValKind {
        match self {
            Self::U32 => ValKind::U32,
            Self::I32 => ValKind::I32,
            Self::U64 => ValKind::U64,
        }
    }

    fn unsigned_max(self) -> &'static str {
        match self {
            Self::U32 | Self::I32 => "0xFFFFFFFF",
            Self::U64 => "0xFFFFFFFFFFFFFFFF",
        }
    }

    fn shift_mask(self) -> u32 {
        match self {
            Self::U32 | Self::I32 => 31,
            Self::U64 => 63,
        }
    }
}

fn cmp_suffix(op: BinOp) -> Option<&'static str> {
    Some(match op {
        BinOp::Eq => "eq",
        BinOp::Ne => "ne",
        BinOp::Lt => "lt",
        BinOp::Gt => "gt",
        BinOp::Le => "le",
        BinOp::Ge => "ge",
        _ => return None,
    })
}

fn unsupported_binop(op: BinOp, kind: ValKind) -> CodegenError {
    CodegenError::unsupported(
        format!("BinOp::{op:?} on {}", kind.name()),
        "the reference defines no result for this operator on this type",
        "Cast the operands to a type the operator supports",
    )
}

fn unsupported_unop(op: &UnOp, kind: ValKind) -> CodegenError {
    CodegenError::unsupported(
        format!("UnOp::{op:?} on {}", kind.name()),
        "the reference defines no result for this operator on this type",
        "Cast the operand to a type the operator supports",
    )
}

impl Lowerer<'_> {
    fn bool_of(&mut self, p: Reg) -> Val {
        let reg = self.b32();
        emit!(self.writer(), "selp.u32 {reg}, 1, 0, {p}");
        Val {
            kind: ValKind::Bool,
            reg,
        }
    }

    pub(crate) fn put_binop(&mut self, op: BinOp, l: Val, r: Val) -> Result<Val, CodegenError> {
        // Every `Value::Float` (f32 or f64-held) meets the f32 operators as an f32.
        let is_float = |v: Val| matches!(v.kind, ValKind::F32 | ValKind::F64);
        let (l, r) = if is_float(l) && is_float(r) {
            (self.float_operand(l), self.float_operand(r))
        } else {
            (l, r)
        };
        if l.kind != r.kind {
            return Err(CodegenError::unsupported(
                format!("BinOp::{op:?} on mismatched operands"),
                format!("operands are {} and {}", l.kind.name(), r.kind.name()),
                "insert an explicit Cast so both operands have the same type",
            ));
        }
        match l.kind {
            ValKind::U32 => self.int_binop(op, l.reg, r.reg, Int::U32),
            ValKind::I32 => self.int_binop(op, l.reg, r.reg, Int::I32),
            ValKind::U64 => self.int_binop(op, l.reg, r.reg, Int::U64),
            ValKind::Bool => self.bool_binop(op, l.reg, r.reg),
            ValKind::F32 => self.f32_binop(op, l.reg, r.reg),
            ValKind::F64 | ValKind::Bytes(_) => Err(unsupported_binop(op, l.kind)),
        }
    }

    fn int_binop(&mut self, op: BinOp, a: Reg, b: Reg, t: Int) -> Result<Val, CodegenError> {
        let (ty, bits) = (t.ty(), t.bits());
        let d = self.reg(t.class());
        let value = |reg| Val {
            kind: t.kind(),
            reg,
        };
        if let Some(cmp) = cmp_suffix(op) {
            let p = self.pred();
            emit!(self.writer(), "setp.{cmp}.{ty} {p}, {a}, {b}");
            return Ok(self.bool_of(p));
        }
        match op {
            BinOp::Add | BinOp::WrappingAdd => emit!(self.writer(), "add.{ty} {d}, {a}, {b}"),
            BinOp::Sub | BinOp::WrappingSub => emit!(self.writer(), "sub.{ty} {d}, {a}, {b}"),
            BinOp::Mul => emit!(self.writer(), "mul.lo.{ty} {d}, {a}, {b}"),
            BinOp::Div | BinOp::Mod => {
                // Operands through the opaque zero: ptxas 13.0 folds signed division and
                // remainder of known operands through unsigned magnitudes, losing signs.
                let (a, b) = (self.opaque(a), self.opaque(b));
                let is_div = op == BinOp::Div;
                let opcode = if is_div { "div" } else { "rem" };
                if t == Int::I32 {
                    // Division by zero and MIN / -1 are reference errors.
                    let (zero, min, neg_one) = (self.pred(), self.pred(), self.pred());
                    emit!(self.writer(), "setp.eq.s32 {zero}, {b}, 0");
                    let (by_zero, overflow) = if is_div {
                        (
                            DeviceFault::SignedDivisionByZero,
                            DeviceFault::SignedDivisionOverflow,
                        )
                    } else {
                        (
                            DeviceFault::SignedRemainderByZero,
                            DeviceFault::SignedRemainderOverflow,
                        )
                    };
                    self.fault_if(zero, by_zero);
                    emit!(self.writer(), "setp.eq.s32 {min}, {a}, -2147483648");
                    emit!(self.writer(), "setp.eq.s32 {neg_one}, {b}, -1");
                    emit!(self.writer(), "and.pred {min}, {min}, {neg_one}");
                    self.fault_if(min, overflow);
                    // After a recorded fault divide by 1 instead (the result is discarded).
                    emit!(self.writer(), "or.pred {zero}, {zero}, {min}");
                    let safe = self.reg(RegClass::B32);
                    emit!(self.writer(), "selp.b32 {safe}, 1, {b}, {zero}");
                    emit!(self.writer(), "{opcode}.s32 {d}, {a}, {safe}");
                } else {
                    // Unsigned: x / 0 = MAX, x % 0 = 0 (PTX leaves both unspecified).
                    let zero = self.pred();
                    emit!(self.writer(), "setp.eq.{ty} {zero}, {b}, 0");
                    let safe = self.reg(t.class());
                    emit!(self.writer(), "selp.{bits} {safe}, 1, {b}, {zero}");
                    emit!(self.writer(), "{opcode}.{ty} {d}, {a}, {safe}");
                    let on_zero = if is_div { t.unsigned_max() } else { "0" };
                    emit!(self.writer(), "selp.{bits} {d}, {on_zero}, {d}, {zero}");
                }
            }
            BinOp::BitAnd => emit!(self.writer(), "and.{bits} {d}, {a}, {b}"),
            BinOp::BitOr => emit!(self.writer(), "or.{bits} {d}, {a}, {b}"),
            BinOp::BitXor => emit!(self.writer(), "xor.{bits} {d}, {a}, {b}"),
            BinOp::Shl | BinOp::Shr => {
                // The reference masks the count; PTX would clamp it.
                let count = self.b32();
                if t == Int::U64 {
                    emit!(self.writer(), "cvt.u32.u64 {count}, {b}");
                    emit!(
                        self.writer(),
                        "and.b32 {count}, {count}, {}",
                        t.shift_mask()
                    );
                } else {
                    emit!(self.writer(), "and.b32 {count}, {b}, {}", t.shift_mask());
                }
                if op == BinOp::Shl {
                    emit!(self.writer(), "shl.{bits} {d}, {a}, {count}");
                } else {
                    emit!(self.writer(), "shr.{ty} {d}, {a}, {count}");
                }
            }
            BinOp::RotateLeft | BinOp::RotateRight if t == Int::U32 => {
                let dir = if op == BinOp::RotateLeft { "l" } else { "r" };
                // `.wrap` takes the count modulo 32, as the reference's `& 31` does.
                emit!(self.writer(), "shf.{dir}.wrap.b32 {d}, {a}, {a}, {b}");
            }
            BinOp::And | BinOp::Or => {
                let (pa, pb) = (self.pred(), self.pred());
                emit!(self.writer(), "setp.ne.{ty} {pa}, {a}, 0");
                emit!(self.writer(), "setp.ne.{ty} {pb}, {b}, 0");
                let logic = if op == BinOp::And { "and" } else { "or" };
                emit!(self.writer(), "{logic}.pred {pa}, {pa}, {pb}");
                return Ok(self.bool_of(pa));
            }
            BinOp::Min => emit!(self.writer(), "min.{ty} {d}, {a}, {b}"),
            BinOp::Max => emit!(self.writer(), "max.{ty} {d}, {a}, {b}"),
            BinOp::AbsDiff => {
                let lo = self.reg(t.class());
                emit!(self.writer(), "max.{ty} {d}, {a}, {b}");
                emit!(self.writer(), "min.{ty} {lo}, {a}, {b}");
                emit!(
                    self.writer(),
                    "sub.{} {d}, {d}, {lo}",
                    if t == Int::U64 { "u64" } else { "u32" }
                );
                if t == Int::I32 {
                    // i32 abs_diff is a u32 in the reference.
                    return Ok(Val {
                        kind: ValKind::U32,
                        reg: d,
                    });
                }
            }
            BinOp::SaturatingAdd | BinOp::SaturatingSub if t == Int::I32 => {
                let opcode = if op == BinOp::SaturatingAdd {
                    "add"
                } else {
                    "sub"
                };
                emit!(self.writer(), "{opcode}.sat.s32 {d}, {a}, {b}");
            }
            BinOp::SaturatingAdd => {
                let overflow = self.pred();
                emit!(self.writer(), "add.{ty} {d}, {a}, {b}");
                emit!(self.writer(), "setp.lt.{ty} {overflow}, {d}, {a}");
                emit!(
                    self.writer(),
                    "selp.{bits} {d}, {}, {d}, {overflow}",
                    t.unsigned_max()
                );
            }
            BinOp::SaturatingSub => {
                let underflow = self.pred();
                emit!(self.writer(), "sub.{ty} {d}, {a}, {b}");
                emit!(self.writer(), "setp.lt.{ty} {underflow}, {a}, {b}");
                emit!(self.writer(), "selp.{bits} {d}, 0, {d}, {underflow}");
            }
            BinOp::SaturatingMul if t == Int::I32 => {
                let wide = self.reg(RegClass::B64);
                emit!(self.writer(), "mul.wide.s32 {wide}, {a}, {b}");
                emit!(self.writer(), "max.s64 {wide}, {wide}, -2147483648");
                emit!(self.writer(), "min.s64 {wide}, {wide}, 2147483647");
                emit!(self.writer(), "cvt.u32.u64 {d}, {wide}");
            }
            BinOp::SaturatingMul => {
                let (hi, overflow) = (self.reg(t.class()), self.pred());
                emit!(self.writer(), "mul.hi.{ty} {hi}, {a}, {b}");
                emit!(self.writer(), "mul.lo.{ty} {d}, {a}, {b}");
                emit!(self.writer(), "setp.ne.{ty} {overflow}, {hi}, 0");
                emit!(
                    self.writer(),
                    "selp.{bits} {d}, {}, {d}, {overflow}",
                    t.unsigned_max()
                );
            }
            BinOp::MulHigh if t != Int::I32 => emit!(self.writer(), "mul.hi.{ty} {d}, {a}, {b}"),
            _ => return Err(unsupported_binop(op, t.kind())),
        }
        Ok(value(d))
    }

    fn bool_binop(&mut self, op: BinOp, a: Reg, b: Reg) -> Result<Val, CodegenError> {
        let reg = self.b32();
        match op {
            BinOp::Eq | BinOp::Ne => {
                let p = self.pred();
                let cmp = if op == BinOp::Eq { "eq" } else { "ne" };
                emit!(self.writer(), "setp.{cmp}.u32 {p}, {a}, {b}");
                return Ok(self.bool_of(p));
            }
            BinOp::And => emit!(self.writer(), "and.b32 {reg}, {a}, {b}"),
            BinOp::Or => emit!(self.writer(), "or.b32 {reg}, {a}, {b}"),
            _ => return Err(unsupported_binop(op, ValKind::Bool)),
        }
        Ok(Val {
            kind: ValKind::Bool,
            reg,
        })
    }

    fn f32_binop(&mut self, op: BinOp, a: Reg, b: Reg) -> Result<Val, CodegenError> {
        if let Some(cmp) = cmp_suffix(op) {
            // Rust's `!=` is unordered (true with a NaN); the others are ordered.
            let cmp = if cmp == "ne" { "neu" } else { cmp };
            let p = self.pred();
            emit!(self.writer(), "setp.{cmp}.f32 {p}, {a}, {b}");
            return Ok(self.bool_of(p));
        }
        let d = self.reg(RegClass::F32);
        let d = match op {
            // A subnormal sum/difference of normal operands is exact, so flushing the
            // result (`.ftz`) equals the reference's round-then-canonicalise.
            BinOp::Add => {
                emit!(self.writer(), "add.rn.ftz.f32 {d}, {a}, {b}");
                d
            }
            BinOp::Sub => {
                emit!(self.writer(), "sub.rn.ftz.f32 {d}, {a}, {b}");
                d
            }
            // Products and quotients round first, then flush (never `.ftz`, which may
            // flush a result that rounds up to the smallest normal).
            BinOp::Mul => {
                emit!(self.writer(), "mul.rn.f32 {d}, {a}, {b}");
                self.flush_subnormal(d)
            }
            BinOp::Div => {
                emit!(self.writer(), "div.rn.f32 {d}, {a}, {b}");
                self.flush_subnormal(d)
            }
            BinOp::Min | BinOp::Max => {
                // Rust f32::min/max on x86-64: the other operand when one is NaN, and the
                // first operand on ties (so min(+0, -0) = +0).
                let (b_wins, a_nan) = (self.pred(), self.pred());
                let cmp = if op == BinOp::Min { "lt" } else { "gt" };
                emit!(self.writer(), "setp.{cmp}.f32 {b_wins}, {b}, {a}");
                emit!(self.writer(), "testp.notanumber.f32 {a_nan}, {a}");
                emit!(self.writer(), "or.pred {b_wins}, {b_wins}, {a_nan}");
                emit!(self.writer(), "selp.f32 {d}, {b}, {a}, {b_wins}");
                d
            }
            _ => return Err(unsupported_binop(op, ValKind::F32)),
        };
        Ok(Val {
            kind: ValKind::F32,
            reg: d,
        })
    }

    pub(crate) fn put_unop(&mut self, op: &UnOp, v: Val) -> Result<Val, CodegenError> {
        if let Some((shift, mask)) = unpack_shift_mask(op) {
            if !matches!(v.kind, ValKind::U32 | ValKind::I32) {
                return Err(unsupported_unop(op, v.kind));
            }
            let reg = self.b32();
            emit!(self.writer(), "shr.u32 {reg}, {}, {shift}", v.reg);
            emit!(self.writer(), "and.b32 {reg}, {reg}, {mask}");
            return Ok(Val {
                kind: ValKind::U32,
                reg,
            });
        }
        match v.kind {
            ValKind::U32 | ValKind::I32 => self.int_unop(op, v, Int::U32),
            ValKind::U64 => self.int_unop(op, v, Int::U64),
            ValKind::Bool => match op {
                UnOp::LogicalNot => {
                    let reg = self.b32();
                    emit!(self.writer(), "xor.b32 {reg}, {}, 1", v.reg);
                    Ok(Val {
                        kind: ValKind::Bool,
                        reg,
                    })
                }
                _ => Err(unsupported_unop(op, v.kind)),
            },
            ValKind::F32 => self.f32_unop(op, v.reg),
            ValKind::F64 => {
                let v = self.float_operand(v);
                self.f32_unop(op, v.reg)
            }
            ValKind::Bytes(_) => Err(unsupported_unop(op, v.kind)),
        }
    }

    /// Integer unary ops; the result keeps the operand's variant (`t` picks the width).
    fn int_unop(&mut self, op: &UnOp, v: Val, t: Int) -> Result<Val, CodegenError> {
        let (a, bits) = (v.reg, t.bits());
        let d = self.reg(t.class());
        let wide = t == Int::U64;
        match op {
            UnOp::Negate => emit!(
                self.writer(),
                "neg.{} {d}, {a}",
                if wide { "s64" } else { "s32" }
            ),
            UnOp::BitNot => {
                // Operand through the opaque zero: ptxas 13.0 (sm_90) folds `not x` to 0
                // where a dominating branch proved x == 0 (it must be all ones).
                let a = self.opaque(a);
                emit!(self.writer(), "not.{bits} {d}, {a}");
            }
            UnOp::LogicalNot => {
                let p = self.pred();
                emit!(self.writer(), "setp.eq.{} {p}, {a}, 0", t.ty());
                return Ok(self.bool_of(p));
            }
            UnOp::Popcount | UnOp::Clz | UnOp::Ctz => {
                let count = self.b32();
                match op {
                    UnOp::Popcount => emit!(self.writer(), "popc.{bits} {count}, {a}"),
                    UnOp::Clz => emit!(self.writer(), "clz.{bits} {count}, {a}"),
                    _ => {
                        // ctz(x) = clz(reverse(x)); both give the bit width for 0.
                        let reversed = self.reg(t.class());
                        emit!(self.writer(), "brev.{bits} {reversed}, {a}");
                        emit!(self.writer(), "clz.{bits} {count}, {reversed}");
                    }
                }
                if wide {
                    emit!(self.writer(), "cvt.u64.u32 {d}, {count}");
                } else {
                    return Ok(Val {
                        kind: v.kind,
                        reg: count,
                    });
                }
            }
            UnOp::ReverseBits => emit!(self.writer(), "brev.{bits} {d}, {a}"),
            _ => return Err(unsupported_unop(op, v.kind)),
        }
        Ok(Val {
            kind: v.kind,
            reg: d,
        })
    }

    fn f32_unop(&mut self, op: &UnOp, a: Reg) -> Result<Val, CodegenError> {
        let d = self.reg(RegClass::F32);
        let float = |reg| Val {
            kind: ValKind::F32,
            reg,
        };
        let one = self.f32_const(0x3F80_0000);
        match op {
            // Sign-bit operations on the bits: ptxas 13.0 folds `neg.f32` of a zero into +0.
            UnOp::Negate | UnOp::Abs => {
                let (bits, out) = (self.b32(), self.b32());
                emit!(self.writer(), "mov.b32 {bits}, {a}");
                if matches!(op, UnOp::Negate) {
                    emit!(self.writer(), "xor.b32 {out}, {bits}, 0x80000000");
                } else {
                    // Through the opaque zero: ptxas 13.0 otherwise treats |x| as >= 0
                    // and folds ordered comparisons with a NaN to true.
                    emit!(self.writer(), "and.b32 {out}, {bits}, 0x7FFFFFFF");
                    let out = self.opaque(out);
                    emit!(self.writer(), "mov.b32 {d}, {out}");
                    return Ok(float(d));
                }
                emit!(self.writer(), "mov.b32 {d}, {out}");
            }
            // Correctly rounded, like libm's sqrtf; never subnormal for normal input.
            UnOp::Sqrt => emit!(self.writer(), "sqrt.rn.f32 {d}, {a}"),
            UnOp::InverseSqrt => {
                let root = self.reg(RegClass::F32);
                emit!(self.writer(), "sqrt.rn.f32 {root}, {a}");
                emit!(self.writer(), "div.rn.f32 {d}, {one}, {root}");
                return Ok(float(self.flush_subnormal(d)));
            }
            UnOp::Reciprocal => {
                emit!(self.writer(), "div.rn.f32 {d}, {one}, {a}");
                return Ok(float(self.flush_subnormal(d)));
            }
            UnOp::Floor => emit!(self.writer(), "cvt.rmi.f32.f32 {d}, {a}"),
            UnOp::Ceil => emit!(self.writer(), "cvt.rpi.f32.f32 {d}, {a}"),
            UnOp::Trunc => emit!(self.writer(), "cvt.rzi.f32.f32 {d}, {a}"),
            UnOp::Round => {
                // Ties away from zero (Rust f32::round), not PTX's ties-to-even `.rni`:
                // t = trunc(x); if |x - t| >= 0.5 { t += copysign(1, x) }. x - t is exact.
                let (frac, step, away) = (
                    self.reg(RegClass::F32),
                    self.reg(RegClass::F32),
                    self.pred(),
                );
                let (bits, sign, half) = (self.b32(), self.b32(), self.f32_const(0x3F00_0000));
                emit!(self.writer(), "cvt.rzi.f32.f32 {d}, {a}");
                emit!(self.writer(), "sub.rn.f32 {frac}, {a}, {d}");
                let frac_bits = self.b32();
                emit!(self.writer(), "mov.b32 {frac_bits}, {frac}");
                emit!(
                    self.writer(),
                    "and.b32 {frac_bits}, {frac_bits}, 0x7FFFFFFF"
                );
                let frac_bits = self.opaque(frac_bits);
                emit!(self.writer(), "mov.b32 {frac}, {frac_bits}");
                emit!(self.writer(), "setp.ge.f32 {away}, {frac}, {half}");
                // copysign(1, x) on the bits.
                emit!(self.writer(), "mov.b32 {bits}, {a}");
                emit!(self.writer(), "and.b32 {sign}, {bits}, 0x80000000");
                emit!(self.writer(), "or.b32 {sign}, {sign}, 0x3F800000");
                emit!(self.writer(), "mov.b32 {step}, {sign}");
                emit!(self.writer(), "@{away} add.rn.f32 {d}, {d}, {step}");
            }
            UnOp::Sign => {
                // NaN -> NaN, > 0 -> 1, < 0 -> -1, ±0 -> +0.
                let (pos, neg) = (self.pred(), self.pred());
                let (zero, minus_one) = (self.f32_const(0), self.f32_const(0xBF80_0000));
                emit!(self.writer(), "setp.gt.f32 {pos}, {a}, {zero}");
                emit!(self.writer(), "setp.lt.f32 {neg}, {a}, {zero}");
                emit!(self.writer(), "selp.f32 {d}, {one}, {zero}, {pos}");
                emit!(self.writer(), "@{neg} mov.f32 {d}, {minus_one}");
                let nan = self.pred();
                emit!(self.writer(), "testp.notanumber.f32 {nan}, {a}");
                emit!(self.writer(), "@{nan} mov.f32 {d}, {a}");
            }
            UnOp::IsNan | UnOp::IsInf | UnOp::IsFinite => {
                let test = match op {
                    UnOp::IsNan => "notanumber",
                    UnOp::IsInf => "infinite",
                    _ => "finite",
                };
                let p = self.pred();
                emit!(self.writer(), "testp.{test}.f32 {p}, {a}");
                return Ok(self.bool_of(p));
            }
            UnOp::Sin
            | UnOp::Cos
            | UnOp::Tan
            | UnOp::Asin
            | UnOp::Acos
            | UnOp::Atan
            | UnOp::Sinh
            | UnOp::Cosh
            | UnOp::Tanh
            | UnOp::Exp
            | UnOp::Exp2
            | UnOp::Log
            | UnOp::Log2 => {
                if let Some(f) = Libm::for_unop(op).filter(|f| f.is_ported()) {
                    return Ok(float(self.call_libm(f, a)));
                }
                return Err(CodegenError::unsupported(
                    format!("UnOp::{op:?}"),
                    "no bit-exact PTX port of the reference's libm routine exists in vyre-cuda yet, and approximate intrinsics would not match the reference",
                    "compute the transcendental on the host or avoid it in GPU programs for now",
                ));
            }
            _ => return Err(unsupported_unop(op, ValKind::F32)),
        }
        Ok(float(d))
    }

    pub(crate) fn put_cast(&mut self, target: &DataType, v: Val) -> Result<Val, CodegenError> {
        let float_ok = matches!(
            target,
            DataType::U32
                | DataType::I32
                | DataType::Bool
                | DataType::F32
                | DataType::Vec2U32
                | DataType::Vec4U32
                | DataType::Bytes
        );
        if matches!(v.kind, ValKind::F32 | ValKind::F64) && !float_ok {
            return Err(CodegenError::unsupported(
                format!("Cast from f32 to {target}"),
                "the reference defines float casts only to u32, i32, bool and f32",
                "cast the f32 to u32 or i32 first, then narrow or widen the integer",
            ));
        }
        let a = v.reg;
        Ok(match target {
            DataType::U32 | DataType::I32 => {
                let kind = if *target == DataType::U32 {
                    ValKind::U32
                } else {
                    ValKind::I32
                };
                let reg = match v.kind {
                    ValKind::F32 | ValKind::F64 => {
                        // Truncate toward zero, saturate, NaN -> 0: exactly Rust's `as`.
                        let reg = self.b32();
                        let sign = if kind == ValKind::U32 { "u32" } else { "s32" };
                        let from = if v.kind == ValKind::F32 { "f32" } else { "f64" };
                        emit!(self.writer(), "cvt.rzi.{sign}.{from} {reg}, {a}");
                        reg
                    }
                    // i32 <-> u32 reinterpret the bits (`as`); the rest use try_as_u32.
                    ValKind::I32 => a,
                    _ => self.u32_checked(v, DeviceFault::CastOutOfRange)?,
                };
                Val { kind, reg }
            }
            DataType::U64 | DataType::I64 => {
                let reg = self.reg(RegClass::B64);
                match v.kind {
                    ValKind::I32 => emit!(self.writer(), "cvt.s64.s32 {reg}, {a}"),
                    ValKind::U64 | ValKind::Bytes(5..=8) => self.mov(reg, a),
                    // More than eight raw bytes never read as a u64 in the reference.
                    ValKind::Bytes(_) => {
                        self.fault_always(DeviceFault::CastOutOfRange);
                        emit!(self.writer(), "mov.u64 {reg}, 0");
                    }
                    _ => emit!(self.writer(), "cvt.u64.u32 {reg}, {a}"),
                }
                Val {
                    kind: ValKind::U64,
                    reg,
                }
            }
            // A Float stays the same Float (an f64-held value is not rounded here).
            DataType::F32 if v.kind == ValKind::F64 => v,
            DataType::F32 => {
                let reg = self.reg(RegClass::F32);
                match v.kind {
                    ValKind::F32 => self.mov(reg, a),
                    // Inputs pass through the opaque zero: ptxas 13.0 fuses sign
                    // extensions and byte extractions into wrong I2F forms otherwise.
                    ValKind::I32 => {
                        let a = self.opaque(a);
                        emit!(self.writer(), "cvt.rn.f32.s32 {reg}, {a}");
                    }
                    ValKind::U64 => {
                        let a = self.opaque(a);
                        emit!(self.writer(), "cvt.rn.f32.u64 {reg}, {a}");
                    }
                    _ => {
                        let bits = self.u32_checked(v, DeviceFault::CastOutOfRange)?;
                        let bits = self.opaque(bits);
                        emit!(self.writer(), "cvt.rn.f32.u32 {reg}, {bits}");
                    }
                }
                Val {
                    kind: ValKind::F32,
                    reg,
                }
            }
            DataType::Bool => {
                let p = self.truthy(v);
                self.bool_of(p)
            }
            DataType::U8 | DataType::U16 | DataType::I8 | DataType::I16 => {
                let low = match a.class() {
                    RegClass::B64 => {
                        let low = self.b32();
                        emit!(self.writer(), "cvt.u32.u64 {low}, {a}");
                        low
                    }
                    _ => a,
                };
                let reg = self.b32();
                match target {
                    DataType::U8 => emit!(self.writer(), "and.b32 {reg}, {low}, 255"),
                    DataType::U16 => emit!(self.writer(), "and.b32 {reg}, {low}, 65535"),
                    // Sign-extend with shl + shr.s32, not bfe.s32: ptxas 13.0 (sm_90)
                    // folds a bfe.s32 feeding an unsigned int->float conversion into a
                    // signed I2F.S8/S16, which is wrong (found by the fuzzer).
                    DataType::I8 => {
                        emit!(self.writer(), "shl.b32 {reg}, {low}, 24");
                        emit!(self.writer(), "shr.s32 {reg}, {reg}, 24");
                    }
                    _ => {
                        emit!(self.writer(), "shl.b32 {reg}, {low}, 16");
                        emit!(self.writer(), "shr.s32 {reg}, {reg}, 16");
                    }
                }
                let kind = if matches!(target, DataType::U8 | DataType::U16) {
                    ValKind::U32
                } else {
                    ValKind::I32
                };
                Val { kind, reg }
            }
            DataType::Vec4U32 => {
                // The value's bytes, zero-padded to sixteen.
                let lo = match v.kind {
                    ValKind::F32 | ValKind::F64 => self.float_bytes(v),
                    ValKind::U64 | ValKind::Bytes(5..) => a,
                    _ => {
                        let wide = self.reg(RegClass::B64);
                        emit!(self.writer(), "cvt.u64.u32 {wide}, {a}");
                        wide
                    }
                };
                let hi = self.high_half(v);
                let reg = self.reg(RegClass::B64);
                self.mov(reg, lo);
                self.set_high_half(reg, hi);
                Val {
                    kind: ValKind::Bytes(16),
                    reg,
                }
            }
            DataType::Vec2U32 => {
                // The value's bytes, zero-padded or truncated to eight.
                let reg = match v.kind {
                    ValKind::F32 | ValKind::F64 => self.float_bytes(v),
                    ValKind::U64 | ValKind::Bytes(5..) => a,
                    _ => {
                        let wide = self.reg(RegClass::B64);
                        emit!(self.writer(), "cvt.u64.u32 {wide}, {a}");
                        wide
                    }
                };
                Val {
                    kind: ValKind::Bytes(8),
                    reg,
                }
            }
            // The reference's catch-all: the value's own bytes, unconverted.
            DataType::Bytes | DataType::F16 | DataType::BF16 | DataType::F64 => {
                let reg = match v.kind {
                    ValKind::F32 | ValKind::F64 => self.float_bytes(v),
                    _ => a,
                };
                Val {
                    kind: ValKind::Bytes(v.kind.byte_len()),
                    reg,
                }
            }
            other => {
                return Err(CodegenError::unsupported(
                    format!("Cast to {other}"),
                    "this cast target is not lowered yet",
                    "cast to a scalar integer, f32, bool or a raw byte type",
                ))
            }
        })
    }
}

fn unpack_shift_mask(op: &UnOp) -> Option<(u32, u32)> {
    match op {
        UnOp::Unpack4Low => Some((0, 0x0F)),
        UnOp::Unpack4High => Some((4, 0x0F)),
        UnOp::Unpack8Low => Some((0, 0xFF)),
        UnOp::Unpack8High => Some((24, 0xFF)),
        _ => None,
    }
}
