//! Loads and stores of elements 3, 5 to 7, 9 to 15 or 17 to 255 bytes wide ([`odd_width`]):
//! no PTX type has that width and the elements sit at every byte offset, so each byte
//! moves on its own. The value is a [`ValKind::Bytes`] of the width: a `.b32` up to four
//! bytes, a `.b64` up to eight, else a wide value (its bytes 8.. in the tracked upper
//! `.b64`s).

use super::memory::Space;
use super::{Lowerer, Val};
use crate::codegen::kind::ValKind;
use crate::codegen::writer::{emit, Reg, RegClass};

#[cfg(doc)]
use crate::codegen::kind::odd_width;

impl Lowerer<'_> {
    /// The `width` bytes at `addr` as a value, zeros where `in_bounds` is false (the
    /// reference's zero value of the element).
    pub(super) fn load_odd_width(
        &mut self,
        space: Space,
        in_bounds: Reg,
        addr: Reg,
        width: u8,
    ) -> Val {
        let bytes: Vec<Reg> = (0..width).map(|_| self.w.reg(RegClass::B32)).collect();
        match space {
            // Out of bounds, the module's zero page (16 bytes) is read instead.
            Space::Global { .. } if width <= 16 => {
                let safe = self.address_or_zero_page(in_bounds, addr);
                for (k, byte) in bytes.iter().enumerate() {
                    emit!(self.w, "ld.global.u8 {byte}, [{safe}+{k}]");
                }
            }
            _ => {
                let space = space.state_space();
                for (k, byte) in bytes.iter().enumerate() {
                    emit!(self.w, "mov.u32 {byte}, 0");
                    emit!(self.w, "@{in_bounds} ld.{space}.u8 {byte}, [{addr}+{k}]");
                }
            }
        }
        let words: Vec<Reg> = bytes.chunks(4).map(|four| self.pack_bytes(four)).collect();
        let kind = ValKind::Bytes(width);
        if width <= 4 {
            return Val::new(kind, words[0]);
        }
        // Zero-extended: a width of 9 to 12 bytes fills three words.
        let pairs: Vec<Reg> = (words.chunks(2))
            .map(|two| {
                let high = match two.get(1) {
                    Some(&word) => word,
                    None => self.imm_b32(0),
                };
                self.pair(two[0], high)
            })
            .collect();
        if kind.is_wide() {
            self.upper
                .insert(pairs[0], pairs[1..].iter().copied().collect());
        }
        Val::new(kind, pairs[0])
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

    /// The `.b64` of `low` and `high`.
    fn pair(&mut self, low: Reg, high: Reg) -> Reg {
        let reg = self.w.reg(RegClass::B64);
        emit!(self.w, "mov.b64 {reg}, {{{low}, {high}}}");
        reg
    }

    /// `@in_bounds` stores of the low `width` bytes of `value` (its store payload
    /// `payload`: a `.b32` up to four bytes, else a `.b64`) at `addr`.
    pub(super) fn store_odd_width(
        &mut self,
        space: Space,
        in_bounds: Reg,
        addr: Reg,
        (value, payload): (Val, Reg),
        width: u8,
    ) {
        let mut words = Vec::new();
        if width <= 4 {
            words.push(payload);
        } else {
            self.split_into(payload, &mut words);
        }
        if width > 8 {
            let count = ValKind::Bytes(width).upper_words();
            for word in self.upper_of(value, count) {
                self.split_into(word, &mut words);
            }
        }
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

    /// Push the two words of the `.b64` `pair`, low first.
    fn split_into(&mut self, pair: Reg, words: &mut Vec<Reg>) {
        let (low, high) = (self.w.reg(RegClass::B32), self.w.reg(RegClass::B32));
        emit!(self.w, "mov.b64 {{{low}, {high}}}, {pair}");
        words.extend([low, high]);
    }
}
