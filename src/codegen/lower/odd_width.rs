//! Loads and stores of elements 3, 5, 6 or 7 bytes wide ([`odd_width`]): no PTX type has
//! that width and the elements sit at every byte offset, so each byte moves on its own.

use super::memory::Space;
use super::{Lowerer, Val};
use crate::codegen::kind::ValKind;
use crate::codegen::writer::{emit, Reg, RegClass};

#[cfg(doc)]
use crate::codegen::kind::odd_width;

impl Lowerer<'_> {
    /// The `width` bytes at `addr` as a [`ValKind::Bytes`] value, zeros where `in_bounds`
    /// is false (the reference's zero value of the element).
    pub(super) fn load_odd_width(
        &mut self,
        space: Space,
        in_bounds: Reg,
        addr: Reg,
        width: u8,
    ) -> Val {
        let bytes: Vec<Reg> = (0..width).map(|_| self.w.reg(RegClass::B32)).collect();
        match space {
            Space::Global { .. } => {
                // Out of bounds, the module's zero page (16 bytes) is read instead.
                let zero = self.zero_page();
                let safe = self.w.reg(RegClass::B64);
                emit!(self.w, "selp.b64 {safe}, {addr}, {zero}, {in_bounds}");
                for (k, byte) in bytes.iter().enumerate() {
                    emit!(self.w, "ld.global.u8 {byte}, [{safe}+{k}]");
                }
            }
            Space::Shared { .. } => {
                for (k, byte) in bytes.iter().enumerate() {
                    emit!(self.w, "mov.u32 {byte}, 0");
                    emit!(self.w, "@{in_bounds} ld.shared.u8 {byte}, [{addr}+{k}]");
                }
            }
        }
        let kind = ValKind::Bytes(width);
        let low = self.pack_bytes(&bytes[..bytes.len().min(4)]);
        if width <= 4 {
            return Val::new(kind, low);
        }
        let high = self.pack_bytes(&bytes[4..]);
        let reg = self.w.reg(RegClass::B64);
        emit!(self.w, "mov.b64 {reg}, {{{low}, {high}}}");
        Val::new(kind, reg)
    }

    /// Bytes (each the low byte of its register) packed little-endian into one word.
    fn pack_bytes(&mut self, bytes: &[Reg]) -> Reg {
        let word = self.w.reg(RegClass::B32);
        emit!(self.w, "mov.b32 {word}, {}", bytes[0]);
        for (k, byte) in bytes.iter().enumerate().skip(1) {
            emit!(self.w, "bfi.b32 {word}, {byte}, {word}, {}, 8", 8 * k);
        }
        word
    }

    /// `@in_bounds` stores of the low `width` bytes of `payload` (a `.b32` up to four
    /// bytes, else a `.b64`) at `addr`.
    pub(super) fn store_odd_width(
        &mut self,
        space: Space,
        in_bounds: Reg,
        addr: Reg,
        payload: Reg,
        width: u8,
    ) {
        let words = match width <= 4 {
            true => vec![payload],
            false => {
                let (low, high) = (self.w.reg(RegClass::B32), self.w.reg(RegClass::B32));
                emit!(self.w, "mov.b64 {{{low}, {high}}}, {payload}");
                vec![low, high]
            }
        };
        let space = space.state_space();
        for k in 0..usize::from(width) {
            let (word, shift) = (words[k / 4], 8 * (k % 4));
            let byte = match shift {
                0 => word,
                _ => {
                    let byte = self.w.reg(RegClass::B32);
                    emit!(self.w, "shr.b32 {byte}, {word}, {shift}");
                    byte
                }
            };
            emit!(self.w, "@{in_bounds} st.{space}.u8 [{addr}+{k}], {byte}");
        }
    }
}
