//! Value helpers shared by the lowering and `ops.rs`: fresh registers, literals, the
//! reference's float canonicalisation, the opaque zero, and libm calls.

use super::{Lowerer, Val};
use crate::codegen::kind::{loads_may_be_empty, ValKind};
use crate::codegen::libm::{self, Libm};
use crate::codegen::writer::{emit, Reg, RegClass};
use smallvec::SmallVec;
use vyre_foundation::ir::DataType;

impl Lowerer<'_> {
    pub(crate) fn mov(&mut self, dst: Reg, src: Reg) {
        emit!(self.w, "mov.{} {dst}, {src}", dst.class().ty());
    }

    pub(super) fn imm_b32(&mut self, bits: u32) -> Reg {
        let reg = self.w.reg(RegClass::B32);
        emit!(self.w, "mov.b32 {reg}, {bits}");
        reg
    }

    pub(crate) fn b32(&mut self) -> Reg {
        self.w.reg(RegClass::B32)
    }

    pub(crate) fn pred(&mut self) -> Reg {
        self.w.reg(RegClass::Pred)
    }

    /// A zero of `kind`, standing for a value no one observes (the lane has recorded a
    /// fault, so the dispatch fails).
    pub(crate) fn discarded_zero(&mut self, kind: ValKind) -> Val {
        let zero = self.w.reg(kind.reg_class());
        let (ty, literal) = (zero.class().ty(), zero.class().zero());
        emit!(self.w, "mov.{ty} {zero}, {literal}");
        Val::new(kind, zero)
    }

    /// The all-zero raw value of `kind` (`Value::Bytes` of its width), every word of a
    /// wide one.
    pub(super) fn zero_bytes(&mut self, kind: ValKind) -> Val {
        let zero = self.discarded_zero(kind);
        if kind.is_wide() {
            let words = (0..kind.upper_words())
                .map(|_| {
                    let word = self.w.reg(RegClass::B64);
                    emit!(self.w, "mov.b64 {word}, 0");
                    word
                })
                .collect();
            self.upper.insert(zero.reg, words);
        }
        zero
    }

    /// The low 32 bits of `r` (`r` itself unless it is a `.b64`).
    pub(super) fn low_word(&mut self, r: Reg) -> Reg {
        if r.class() != RegClass::B64 {
            return r;
        }
        let low = self.b32();
        emit!(self.w, "cvt.u32.u64 {low}, {r}");
        low
    }

    /// The eight little-endian bytes of a `Value::Float` (an f64), as a `.b64` register:
    /// an f32 value widens exactly (its NaN to the canonical f64 NaN), an f64 value keeps
    /// its bits.
    pub(crate) fn float_bytes(&mut self, value: Val) -> Reg {
        let value = self.settle_half(value);
        let wide = self.w.reg(RegClass::B64);
        if value.kind == ValKind::F64 {
            emit!(self.w, "mov.b64 {wide}, {}", value.reg);
            return wide;
        }
        let d = self.w.reg(RegClass::F64);
        emit!(self.w, "cvt.f64.f32 {d}, {}", value.reg);
        emit!(self.w, "mov.b64 {wide}, {d}");
        let nan = self.w.reg(RegClass::Pred);
        emit!(self.w, "testp.notanumber.f32 {nan}, {}", value.reg);
        emit!(self.w, "selp.b64 {wide}, 0x7FF8000000000000, {wide}, {nan}");
        wide
    }

    /// A float value as an f64-held one, for a place whose lanes may hold f64 values: the
    /// same `Value::Float` (an f32 widens exactly, its NaN to the canonical f64 NaN as the
    /// reference's).
    pub(crate) fn widened_float(&mut self, value: Val) -> Val {
        if value.kind != ValKind::F32 {
            return value;
        }
        let bits = self.float_bytes(value);
        let wide = self.w.reg(RegClass::F64);
        emit!(self.w, "mov.b64 {wide}, {bits}");
        Val::new(ValKind::F64, wide)
    }

    /// A float operand as the reference's f32 operators see it: an f64 value is rounded
    /// to f32 (`as f32`) and canonicalised; an f16/bf16 load fails out of bounds (held
    /// as a half or, where it may be an f64, an f64-held value: `half::half_as_wide`).
    pub(crate) fn float_operand(&mut self, value: Val) -> Val {
        if value.kind == ValKind::Half {
            return self.half_operand(value);
        }
        self.fault_half_bytes(value);
        self.rounded_f32(value)
    }

    /// An f64-held value rounded to f32 (`as f32`) and canonicalised, as stores into f32
    /// and half buffers write it (an out-of-bounds half's bytes as +0.0); others unchanged.
    pub(crate) fn rounded_f32(&mut self, value: Val) -> Val {
        if value.kind != ValKind::F64 {
            return value;
        }
        let f = self.w.reg(RegClass::F32);
        emit!(self.w, "cvt.rn.f32.f64 {f}, {}", value.reg);
        Val::new(ValKind::F32, self.flush_subnormal(f))
    }

    /// The registers a value lives in: `reg`, the upper words of a wide value, the filled
    /// flag of a value that may be empty.
    pub(super) fn value_regs(&self, reg: Reg) -> impl Iterator<Item = Reg> {
        let upper = self.upper.get(&reg).cloned().unwrap_or_default();
        std::iter::once(reg)
            .chain(upper)
            .chain(self.filled.get(&reg).copied())
    }

    /// Give the register `low` of a variable (or a copy) holding values of `kind` the
    /// companions such values have: the upper words of a wide value; a filled flag for a
    /// raw value over four bytes in a program where such values may be empty. Kept where
    /// `low` has them already (a step machine's variable, bound again).
    pub(super) fn add_companions(&mut self, low: Reg, kind: ValKind) {
        if kind.is_wide() && !self.upper.contains_key(&low) {
            let words = (0..kind.upper_words())
                .map(|_| self.w.reg(RegClass::B64))
                .collect();
            self.upper.insert(low, words);
        }
        let may_be_empty = self.maybe_empty && matches!(kind, ValKind::Bytes(5..));
        let may_be_half = self.half_buffers && kind == ValKind::F64;
        if (may_be_empty || may_be_half) && !self.filled.contains_key(&low) {
            let filled = self.b32();
            self.filled.insert(low, filled);
        }
    }

    /// Copy `src`'s companions into those of the value whose low register is `dst` (a
    /// missing upper word is zero, a missing filled flag 1).
    pub(super) fn mov_companions(&mut self, dst: Reg, src: Val) {
        if let Some(words) = self.upper.get(&dst).cloned() {
            let sources = self.upper_of(src, words.len());
            for (word, source) in words.into_iter().zip(sources) {
                self.mov(word, source);
            }
        }
        if let Some(filled) = self.filled.get(&dst).copied() {
            let source = self.filled_flag(src);
            self.mov(filled, source);
        }
    }

    /// A predicate that holds where `value` is filled, if it tracks a filled flag (see
    /// `Lowerer::filled`).
    pub(super) fn filled_pred(&mut self, value: Val) -> Option<Reg> {
        let flag = self.filled.get(&value.reg).copied()?;
        let filled = self.pred();
        emit!(self.w, "setp.ne.u32 {filled}, {flag}, 0");
        Some(filled)
    }

    /// The filled flag of `value` (see `Lowerer::filled`): its tracked one, or 1.
    pub(super) fn filled_flag(&mut self, value: Val) -> Reg {
        match self.filled.get(&value.reg) {
            Some(&filled) => filled,
            None => self.imm_b32(1),
        }
    }

    /// Track `value` as filled where `in_bounds` holds, else the empty bytes (`None`:
    /// in bounds), if it is loaded from a buffer whose loads may be empty
    /// ([`loads_may_be_empty`]).
    pub(super) fn mark_filled(&mut self, element: &DataType, value: Val, in_bounds: Option<Reg>) {
        if !loads_may_be_empty(element) {
            return;
        }
        let filled = match in_bounds {
            Some(p) => {
                let filled = self.b32();
                emit!(self.w, "selp.u32 {filled}, 1, 0, {p}");
                filled
            }
            None => self.imm_b32(1),
        };
        self.filled.insert(value.reg, filled);
    }

    /// Bytes 8..16 of a value as a `.b64` register: the tracked first upper word of a
    /// wide value, zero for anything shorter.
    pub(crate) fn high_half(&mut self, value: Val) -> Reg {
        self.upper_of(value, 1)[0]
    }

    /// The first `count` upper words of a value (bytes 8.., eight a word): its tracked
    /// ones, then zero.
    pub(crate) fn upper_of(&mut self, value: Val, count: usize) -> SmallVec<[Reg; 1]> {
        let mut words = SmallVec::new();
        if value.kind.is_wide() {
            if let Some(tracked) = self.upper.get(&value.reg) {
                words.extend(tracked.iter().copied().take(count));
            }
        }
        if words.len() < count {
            let zero = self.w.reg(RegClass::B64);
            emit!(self.w, "mov.u64 {zero}, 0");
            words.resize(count, zero);
        }
        words
    }

    /// `p ? t : f` for two values in registers of one class, both halves of a wide
    /// value; the result has `kind`.
    pub(crate) fn select_val(&mut self, kind: ValKind, p: Reg, t: Val, f: Val) -> Val {
        let class = t.reg.class();
        let reg = self.w.reg(class);
        emit!(
            self.w,
            "selp.{} {reg}, {}, {}, {p}",
            class.ty(),
            t.reg,
            f.reg
        );
        if t.kind.is_wide() {
            let count = t.kind.upper_words();
            let (t_words, f_words) = (self.upper_of(t, count), self.upper_of(f, count));
            let words = (t_words.into_iter().zip(f_words))
                .map(|(t_word, f_word)| {
                    let word = self.w.reg(RegClass::B64);
                    emit!(self.w, "selp.b64 {word}, {t_word}, {f_word}, {p}");
                    word
                })
                .collect();
            self.upper.insert(reg, words);
        }
        if self.filled.contains_key(&t.reg) || self.filled.contains_key(&f.reg) {
            let (t_filled, f_filled) = (self.filled_flag(t), self.filled_flag(f));
            let filled = self.b32();
            emit!(self.w, "selp.b32 {filled}, {t_filled}, {f_filled}, {p}");
            self.filled.insert(reg, filled);
        }
        Val::new(kind, reg)
    }

    /// An f32 constant ptxas cannot fold (see `opaque_zero`).
    pub(crate) fn f32_const(&mut self, bits: u32) -> Reg {
        let raw = self.w.reg(RegClass::B32);
        emit!(self.w, "or.b32 {raw}, {}, {bits}", self.opaque_zero);
        let f = self.w.reg(RegClass::F32);
        emit!(self.w, "mov.b32 {f}, {raw}");
        f
    }

    /// `r` passed through the opaque zero, so ptxas cannot fuse what produced it into the
    /// instruction that consumes it.
    pub(crate) fn opaque(&mut self, r: Reg) -> Reg {
        let out = self.w.reg(r.class());
        let zero = self.opaque_zero;
        match r.class() {
            RegClass::B64 | RegClass::F64 => {
                let wide = self.w.reg(RegClass::B64);
                emit!(self.w, "cvt.u64.u32 {wide}, {zero}");
                emit!(self.w, "or.b64 {out}, {r}, {wide}");
            }
            RegClass::Pred => emit!(self.w, "setp.ne.or.u32 {out}, {zero}, 0, {r}"),
            RegClass::B32 | RegClass::F32 => emit!(self.w, "or.b32 {out}, {r}, {zero}"),
        }
        out
    }

    /// An operand of a warp-synchronous instruction (`vote`, `shfl`, `redux`, `match`), passed
    /// through the opaque zero. With an operand ptxas can prove constant the instruction
    /// has no register input left, and ptxas 13.0 then rematerialises it where its result
    /// is used: inside a data-dependent branch, where the lanes that took the other way
    /// never arrive and the warp hangs (fuzz seed 0xfe07102fb36b3fcd: a `vote.sync.any`
    /// of a fault predicate known false, recomputed in the branch that used it).
    pub(super) fn sync_operand(&mut self, r: Reg) -> Reg {
        self.opaque(r)
    }

    /// `f(a)` through the bit-exact libm port, as the reference's `canonical_*` wrappers
    /// compute it (the result is flushed like every f32 result). The routine is inlined,
    /// not called (see `libm::inline_call`).
    pub(crate) fn call_libm(&mut self, f: Libm, a: Reg) -> Reg {
        self.libm_used.insert(f);
        let d = self.w.reg(RegClass::F32);
        let block = libm::inline_call(f, &a.to_string(), &d.to_string(), &mut self.libm_inlines);
        self.w.raw(&block);
        self.flush_subnormal(d)
    }

    /// A 32-bit word as the f32 with its bits, canonicalised (a subnormal flushed): the
    /// reference's `Value::try_as_f32` of a u32, and an f32 element's raw word.
    pub(super) fn bits_as_f32(&mut self, word: Reg) -> Reg {
        let f = self.w.reg(RegClass::F32);
        emit!(self.w, "mov.b32 {f}, {word}");
        self.flush_subnormal(f)
    }

    /// `a / b` rounded like `div.rn.f32`, then flushed like every f32 result; through the
    /// inlined exact division (see `libm::inline_division`), not `div.rn.f32`.
    pub(crate) fn f32_divide(&mut self, a: Reg, b: Reg) -> Reg {
        let d = self.w.reg(RegClass::F32);
        let block = libm::inline_division(
            &a.to_string(),
            &b.to_string(),
            &d.to_string(),
            &mut self.libm_inlines,
        );
        self.w.raw(&block);
        self.flush_subnormal(d)
    }

    /// Flush a subnormal f32 to a zero of the same sign (the reference's canonical form).
    /// `x + -0.0` with `.ftz` is exact for every other input, including ±0 and infinities.
    pub(crate) fn flush_subnormal(&mut self, f: Reg) -> Reg {
        let minus_zero = self.f32_const(0x8000_0000);
        let out = self.w.reg(RegClass::F32);
        emit!(self.w, "add.rn.ftz.f32 {out}, {f}, {minus_zero}");
        out
    }

    /// The bits the reference stores for a float register: NaN becomes `0x7FC00000`.
    pub(super) fn canonical_f32_bits(&mut self, f: Reg) -> Reg {
        let bits = self.b32();
        emit!(self.w, "mov.b32 {bits}, {f}");
        let nan = self.pred();
        emit!(self.w, "testp.notanumber.f32 {nan}, {f}");
        emit!(self.w, "selp.b32 {bits}, 0x7FC00000, {bits}, {nan}");
        bits
    }
}
