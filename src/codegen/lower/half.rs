//! F16 and BF16 as `vyre-reference` 0.7 computes them (`float16.rs`, `oob.rs`,
//! `expr_cast.rs`): a load widens the element to an f32 value, operators compute in f32,
//! and rounding to 16 bits happens only at a store into an F16/BF16 buffer and at a cast
//! to F16/BF16 (which widens the rounded value back to f32). An out-of-bounds load yields
//! `Value::Bytes([0, 0])` instead of a float: it travels as [`OOB_HALF_BITS`] in the f32
//! register (see [`ValKind::Half`]); float operators fail on it and everything else reads
//! it as +0.0, exactly where the reference's bytes and its `Float(0.0)` agree.

use super::{Lowerer, Val};
use crate::codegen::fault::DeviceFault;
use crate::codegen::kind::{ValKind, OOB_HALF_BITS};
use crate::codegen::writer::{emit, Reg, RegClass};
use crate::codegen::CodegenError;
use vyre_foundation::ir::DataType;

/// A 16-bit float element format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HalfFormat {
    /// IEEE binary16.
    F16,
    /// bfloat16: the high half of an f32.
    Bf16,
}

impl HalfFormat {
    pub(crate) fn of(ty: &DataType) -> Option<Self> {
        match ty {
            DataType::F16 => Some(Self::F16),
            DataType::BF16 => Some(Self::Bf16),
            _ => None,
        }
    }

    /// The bits `f32_to_f16` / `f32_to_bf16` store for every NaN.
    fn canonical_nan(self) -> u32 {
        match self {
            Self::F16 => 0x7E00,
            Self::Bf16 => 0x7FC0,
        }
    }
}

impl Lowerer<'_> {
    /// The value of an F16/BF16 element loaded as the 16 bits in `raw` (zero-extended;
    /// `in_bounds` tells whether the load was): `f16_to_f32` is `cvt.f32.f16`, exact for
    /// every input; `bf16_to_f32` is the bits shifted up, subnormals flushed (NaN payloads
    /// are canonicalised where bits become observable, as for every f32 value). Out of
    /// bounds: [`OOB_HALF_BITS`].
    pub(super) fn half_value(&mut self, format: HalfFormat, raw: Reg, in_bounds: Reg) -> Val {
        let mut wide = self.widen_half(format, raw);
        if format == HalfFormat::Bf16 {
            // A bf16 subnormal widens to an f32 subnormal, which the reference flushes.
            wide = self.flush_subnormal(wide);
        }
        let reg = self.w.reg(RegClass::F32);
        emit!(
            self.w,
            "selp.f32 {reg}, {wide}, 0f{OOB_HALF_BITS:08X}, {in_bounds}"
        );
        Val::new(ValKind::Half, reg)
    }

    /// The f32 value of the 16 bits in `bits` (a `.b32` holding them zero-extended),
    /// exactly (a bf16 subnormal stays subnormal).
    fn widen_half(&mut self, format: HalfFormat, bits: Reg) -> Reg {
        let f = self.w.reg(RegClass::F32);
        match format {
            HalfFormat::F16 => {
                // PTX converts only from a 16-bit register, scoped here.
                self.w.open_scope();
                emit!(self.w, ".reg .b16 vyre_h");
                emit!(self.w, "cvt.u16.u32 vyre_h, {bits}");
                emit!(self.w, "cvt.f32.f16 {f}, vyre_h");
                self.w.close_scope();
                f
            }
            HalfFormat::Bf16 => {
                // `cvt.f32.bf16` needs sm_90; the shift is the reference's own formula.
                let high = self.b32();
                emit!(self.w, "shl.b32 {high}, {bits}, 16");
                emit!(self.w, "mov.b32 {f}, {high}");
                f
            }
        }
    }

    /// The 16 bits (zero-extended in a `.b32`) that `f32_to_f16` / `f32_to_bf16` give for
    /// the f32 `f`: round to nearest even, overflow to infinity, every NaN to the canonical
    /// one (selected here: the NaN a `cvt` makes is not relied on). The reference's
    /// subnormal flush comes first: `f` is an f32 value, flushed where it was made, or the
    /// out-of-bounds mark, which both formats round to +0 like the +0.0 it reads as.
    fn half_bits(&mut self, format: HalfFormat, f: Reg) -> Reg {
        let bits = self.b32();
        match format {
            HalfFormat::F16 => self.cvt_to_b16("f16", f, bits),
            HalfFormat::Bf16 if self.sm >= 80 => self.cvt_to_b16("bf16", f, bits),
            HalfFormat::Bf16 => self.bf16_round_integer(f, bits),
        }
        let (nan, out) = (self.pred(), self.b32());
        emit!(self.w, "testp.notanumber.f32 {nan}, {f}");
        let canonical = format.canonical_nan();
        emit!(self.w, "selp.b32 {out}, {canonical}, {bits}, {nan}");
        out
    }

    /// `bits = cvt.rn.{ty}.f32(f)`, zero-extended.
    fn cvt_to_b16(&mut self, ty: &str, f: Reg, bits: Reg) {
        self.w.open_scope();
        emit!(self.w, ".reg .b16 vyre_h");
        emit!(self.w, "cvt.rn.{ty}.f32 vyre_h, {f}");
        emit!(self.w, "cvt.u32.u16 {bits}, vyre_h");
        self.w.close_scope();
    }

    /// `f32_to_bf16` below sm_80 (no `cvt.rn.bf16.f32`), the reference's integer formula:
    /// `(x + 0x7FFF + ((x >> 16) & 1)) >> 16`; NaNs are replaced afterwards.
    fn bf16_round_integer(&mut self, f: Reg, bits: Reg) {
        let (x, odd) = (self.b32(), self.b32());
        emit!(self.w, "mov.b32 {x}, {f}");
        emit!(self.w, "bfe.u32 {odd}, {x}, 16, 1");
        emit!(self.w, "add.u32 {x}, {x}, 32767");
        emit!(self.w, "add.u32 {x}, {x}, {odd}");
        emit!(self.w, "shr.u32 {bits}, {x}, 16");
    }

    /// The 16 bits a store of `value` writes into an F16/BF16 element: a float rounded
    /// (an out-of-bounds half load's bytes round as the +0.0 they read as), any other
    /// value 0, as the reference's `write_element`.
    pub(super) fn half_store_bits(&mut self, format: HalfFormat, value: Val) -> Reg {
        match value.kind {
            ValKind::F32 | ValKind::Half => self.half_bits(format, value.reg),
            ValKind::F64 => {
                let f = self.rounded_f32(value).reg;
                self.half_bits(format, f)
            }
            _ => self.imm_b32(0),
        }
    }

    /// `Cast(F16/BF16, value)`: the reference's `try_as_f32` (a float, or a u32's bits),
    /// rounded to 16 bits and widened back: an f32 value like any other (never subnormal,
    /// as the rounded input was not).
    pub(super) fn cast_to_half(
        &mut self,
        format: HalfFormat,
        value: Val,
    ) -> Result<Val, CodegenError> {
        let f = match value.kind {
            ValKind::F32 | ValKind::F64 | ValKind::Half => self.float_operand(value).reg,
            ValKind::U32 => self.bits_as_f32(value.reg),
            other => {
                return Err(CodegenError::unsupported(
                    format!("Cast from {} to {format:?}", other.name()),
                    "the reference converts only a float or a u32's bits to f16/bf16",
                    "Cast the value to f32 first",
                ))
            }
        };
        let bits = self.half_bits(format, f);
        Ok(Val::new(ValKind::F32, self.widen_half(format, bits)))
    }

    /// A [`ValKind::Half`] operand of a float operator: the reference fails on the bytes
    /// of an out-of-bounds load (`mismatched operands`); in bounds it is the f32 value.
    pub(crate) fn half_operand(&mut self, value: Val) -> Val {
        let oob = self.half_is_oob(value);
        self.fault_if(oob, DeviceFault::HalfOutOfBounds);
        Val::new(ValKind::F32, value.reg)
    }

    /// A value where the reference's `Bytes([0, 0])` and `Float(0.0)` behave alike (stores
    /// into non-half buffers, truthiness, integer conversion, raw-byte casts): a
    /// [`ValKind::Half`] becomes the f32 it reads as, the bytes +0.0. Others unchanged.
    pub(crate) fn settle_half(&mut self, value: Val) -> Val {
        if value.kind != ValKind::Half {
            return value;
        }
        Val::new(ValKind::F32, self.flush_subnormal(value.reg))
    }

    /// A half as an f64-held value, for a place that also holds f64 values (a shuffle's
    /// from an f64 lane): the f32 it reads as, widened, with a filled flag that is 0 where
    /// it is an out-of-bounds load's bytes (and the value +0.0, as those read elsewhere).
    pub(crate) fn half_as_wide(&mut self, value: Val) -> Val {
        if value.kind != ValKind::Half {
            return self.widened_float(value);
        }
        let oob = self.half_is_oob(value);
        let settled = self.settle_half(value);
        let wide = self.widened_float(settled);
        let filled = self.b32();
        emit!(self.w, "selp.u32 {filled}, 0, 1, {oob}");
        self.filled.insert(wide.reg, filled);
        wide
    }

    /// Where an f64-held value holds an out-of-bounds half's bytes, the fault of a float
    /// operator or collective meeting them (as [`Self::half_operand`]'s).
    pub(crate) fn fault_half_bytes(&mut self, value: Val) {
        if value.kind != ValKind::F64 {
            return;
        }
        if let Some(filled) = self.filled.get(&value.reg).copied() {
            let oob = self.pred();
            emit!(self.w, "setp.eq.u32 {oob}, {filled}, 0");
            self.fault_if(oob, DeviceFault::HalfOutOfBounds);
        }
    }

    /// Whether a [`ValKind::Half`] register holds the out-of-bounds bytes.
    pub(super) fn half_is_oob(&mut self, value: Val) -> Reg {
        let oob = self.pred();
        emit!(self.w, "testp.subnormal.f32 {oob}, {}", value.reg);
        oob
    }
}
