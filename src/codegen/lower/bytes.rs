//! Buffers of `Bytes` elements, as `vyre-reference`'s `oob.rs` treats them: addressed per
//! byte; `Load(buf, i)` yields the rest of the buffer from byte `i` (a run-time length) and
//! `Store(buf, i, v)` writes `v.to_bytes()` at byte `i`, truncated at the buffer's end.
//!
//! A bytes load is lowered as a *view* (first-byte address and length) read late, which is
//! exact because views are taken only of buffers the program cannot write. A view may be
//! bound by `Let` and stored into a bytes buffer (a byte copy) or a u32 buffer (its first four
//! bytes, zero-padded); any other use is rejected. Overlapping copies of the same bytes agree
//! under any interleaving, so byte copies add no race beyond those plain stores already have.

use super::{Lowerer, Space, Val};
use crate::codegen::kind::ValKind;
use crate::codegen::writer::{emit, Reg, RegClass};
use crate::codegen::CodegenError;
use vyre_foundation::ir::{DataType, Expr};

/// A run-time-sized `Value::Bytes` that lives in a read-only buffer.
#[derive(Clone, Copy)]
pub(super) struct ByteView {
    /// Global address of the first byte (past the buffer's end when `len` is 0).
    start: Reg,
    /// Number of bytes (`.b32`).
    len: Reg,
    /// The bytes live in a writable buffer: the view is only valid within the statement
    /// that loads it (a later store could change the bytes the reference snapshotted).
    writable: bool,
}

impl<'p> Lowerer<'p> {
    /// Whether the reference evaluates `expr` to a run-time-sized `Value::Bytes`: a load
    /// from a bytes buffer, or a variable bound to one.
    pub(super) fn is_bytes_view(&self, expr: &Expr) -> bool {
        match expr {
            Expr::Load { buffer, .. } => self
                .buffers
                .get(buffer.as_str())
                .is_some_and(|slot| slot.element == DataType::Bytes),
            Expr::Var(name) => self.byte_views.contains_key(name.as_str()),
            // The reference's cast to bytes of a bytes value is `to_bytes()`: the same bytes.
            Expr::Cast {
                target: DataType::Bytes,
                value,
            } => self.is_bytes_view(value),
            Expr::Select {
                true_val,
                false_val,
                ..
            } => self.is_bytes_view(true_val) && self.is_bytes_view(false_val),
            _ => false,
        }
    }

    /// Lower an expression [`Self::is_bytes_view`] accepted.
    pub(super) fn put_bytes_view(&mut self, expr: &'p Expr) -> Result<ByteView, CodegenError> {
        match expr {
            Expr::Load { buffer, index } => {
                let index = self.put_index(index)?;
                self.bytes_load(buffer.as_str(), index)
            }
            Expr::Var(name) => self
                .byte_views
                .get(name.as_str())
                .copied()
                .ok_or_else(|| runtime_sized_use(&format!("variable `{name}`"))),
            Expr::Cast {
                target: DataType::Bytes,
                value,
            } if self.is_bytes_view(value) => self.put_bytes_view(value),
            Expr::Select {
                cond,
                true_val,
                false_val,
            } => {
                // As the reference: the condition, both arms, then the pick.
                let cond = self.put_expr(cond)?;
                let p = self.truthy(cond);
                let t = self.put_bytes_view(true_val)?;
                let f = self.put_bytes_view(false_val)?;
                let start = self.w.reg(RegClass::B64);
                let len = self.w.reg(RegClass::B32);
                emit!(self.w, "selp.b64 {start}, {}, {}, {p}", t.start, f.start);
                emit!(self.w, "selp.b32 {len}, {}, {}, {p}", t.len, f.len);
                Ok(ByteView {
                    start,
                    len,
                    writable: t.writable || f.writable,
                })
            }
            _ => Err(runtime_sized_use("this expression")),
        }
    }

    /// Bind `name` to a view (`Let name = bytes_load`).
    pub(super) fn bind_bytes_view(
        &mut self,
        name: &'p str,
        view: ByteView,
    ) -> Result<(), CodegenError> {
        if view.writable {
            return Err(CodegenError::unsupported(
                "Let of a load from a writable bytes buffer",
                format!(
                    "`{name}` would hold the rest of a writable buffer, which a later store \
                     could change before the bytes are used"
                ),
                "store the load directly (`Store(dst, j, Load(buf, i))` copies like memmove), \
                 or load from a read-only buffer",
            ));
        }
        self.declare(name)?;
        self.byte_views.insert(name, view);
        Ok(())
    }

    /// `Load(buffer, index)` of a bytes buffer: the rest of the buffer from byte `index`,
    /// empty when `index` is past the end.
    fn bytes_load(&mut self, buffer: &str, index: Reg) -> Result<ByteView, CodegenError> {
        let slot = self.slot(buffer)?;
        let Space::Global { base, len } = slot.space else {
            return Err(runtime_sized_use(&format!("a load from `{buffer}`")));
        };
        let writable = !slot.read_only;
        let rest = self.bytes_after(len, index);
        Ok(ByteView {
            start: self.byte_address(base, index),
            len: rest,
            writable,
        })
    }

    /// `base + index`, for a `.b32` byte index.
    fn byte_address(&mut self, base: Reg, index: Reg) -> Reg {
        let offset = self.w.reg(RegClass::B64);
        emit!(self.w, "cvt.u64.u32 {offset}, {index}");
        let addr = self.w.reg(RegClass::B64);
        emit!(self.w, "add.s64 {addr}, {base}, {offset}");
        addr
    }

    /// `len - index` saturated at zero (`.b32`).
    fn bytes_after(&mut self, len: Reg, index: Reg) -> Reg {
        let top = self.b32();
        emit!(self.w, "max.u32 {top}, {len}, {index}");
        let rest = self.b32();
        emit!(self.w, "sub.u32 {rest}, {top}, {index}");
        rest
    }

    /// `Store(buffer, index, view)`: the reference writes the view's bytes into a bytes
    /// buffer, or its first four (zero-padded) into a u32 element.
    pub(super) fn put_bytes_view_store(
        &mut self,
        buffer: &str,
        index: Reg,
        view: ByteView,
    ) -> Result<(), CodegenError> {
        let slot = self.slot(buffer)?;
        match (&slot.element, slot.space) {
            (DataType::Bytes, Space::Global { base, len }) => {
                self.copy_bytes(view, base, len, index);
                Ok(())
            }
            (DataType::U32, _) => {
                let word = self.bytes_prefix_u32(view);
                self.put_store(buffer, index, Val::new(ValKind::Bytes(4), word))
            }
            (element, _) => Err(CodegenError::unsupported(
                format!("Store of a run-time-sized bytes value into a {element} buffer"),
                "only bytes and u32 buffers take a bytes value",
                "store the bytes into a bytes or u32 buffer",
            )),
        }
    }

    /// Copy `min(view.len, len - index)` bytes from the view to byte `index` of the
    /// destination, one byte per iteration (nothing when `index >= len`). The reference
    /// snapshots the view before writing, so a copy within one buffer behaves like
    /// `memmove`: it runs from the last byte down when the destination lies above the
    /// source.
    fn copy_bytes(&mut self, view: ByteView, base: Reg, len: Reg, index: Reg) {
        let room = self.bytes_after(len, index);
        let count = self.b32();
        emit!(self.w, "min.u32 {count}, {room}, {}", view.len);
        let dst = self.byte_address(base, index);
        // Byte `step` of the copy is byte `k` (forward) or `count - 1 - k` (backward).
        let backward = self.pred();
        emit!(self.w, "setp.gt.u64 {backward}, {dst}, {}", view.start);
        let k = self.b32();
        emit!(self.w, "mov.u32 {k}, 0");
        let (top, end) = (self.w.label(), self.w.label());
        self.w.put_label(top);
        let done = self.pred();
        emit!(self.w, "setp.ge.u32 {done}, {k}, {count}");
        emit!(self.w, "@{done} bra {end}");
        let down = self.b32();
        emit!(self.w, "sub.u32 {down}, {count}, {k}");
        emit!(self.w, "sub.u32 {down}, {down}, 1");
        let at = self.b32();
        emit!(self.w, "selp.b32 {at}, {down}, {k}, {backward}");
        let k64 = self.w.reg(RegClass::B64);
        emit!(self.w, "cvt.u64.u32 {k64}, {at}");
        let (from, to) = (self.w.reg(RegClass::B64), self.w.reg(RegClass::B64));
        emit!(self.w, "add.s64 {from}, {}, {k64}", view.start);
        emit!(self.w, "add.s64 {to}, {dst}, {k64}");
        let byte = self.b32();
        emit!(self.w, "ld.global.u8 {byte}, [{from}]");
        emit!(self.w, "st.global.u8 [{to}], {byte}");
        emit!(self.w, "add.u32 {k}, {k}, 1");
        emit!(self.w, "bra {top}");
        self.w.put_label(end);
    }

    /// The view's first four bytes, little-endian, zero-padded past its end.
    fn bytes_prefix_u32(&mut self, view: ByteView) -> Reg {
        let (start, len) = (view.start, view.len);
        let word = self.b32();
        emit!(self.w, "mov.u32 {word}, 0");
        for k in 0..4u32 {
            let present = self.pred();
            emit!(self.w, "setp.gt.u32 {present}, {len}, {k}");
            let byte = self.b32();
            emit!(self.w, "mov.u32 {byte}, 0");
            emit!(self.w, "@{present} ld.global.u8 {byte}, [{start}+{k}]");
            if k > 0 {
                emit!(self.w, "shl.b32 {byte}, {byte}, {}", 8 * k);
            }
            emit!(self.w, "or.b32 {word}, {word}, {byte}");
        }
        word
    }

    /// `Store(bytes_buffer, index, value)` of a fixed-size value: all of `to_bytes()` (a
    /// float contributes its f64 bytes) at byte `index`, truncated at the buffer's end.
    pub(super) fn put_value_into_bytes(
        &mut self,
        buffer: &str,
        index: Reg,
        value: Val,
    ) -> Result<(), CodegenError> {
        let slot = self.slot(buffer)?;
        let Space::Global { base, len } = slot.space else {
            return Err(CodegenError::unsupported(
                "Store into a workgroup bytes buffer",
                "workgroup bytes buffers are not laid out",
                "use a u8 workgroup buffer",
            ));
        };
        // An out-of-bounds half load is two zero bytes, not a Float's eight.
        let float = match value.kind {
            ValKind::Half => {
                let (oob, float) = (self.half_is_oob(value), self.pred());
                emit!(self.w, "not.pred {float}, {oob}");
                Some(float)
            }
            _ => None,
        };
        let low = self.bytes_b64(value);
        let high = self.high_half(value);
        let room = self.bytes_after(len, index);
        let dst = self.byte_address(base, index);
        for k in 0..u32::from(value.kind.byte_len()) {
            let fits = self.pred();
            emit!(self.w, "setp.gt.u32 {fits}, {room}, {k}");
            if let Some(float) = float.filter(|_| k >= 2) {
                emit!(self.w, "and.pred {fits}, {fits}, {float}");
            }
            let half = if k < 8 { low } else { high };
            let shifted = self.w.reg(RegClass::B64);
            emit!(self.w, "shr.b64 {shifted}, {half}, {}", 8 * (k % 8));
            let byte = self.b32();
            emit!(self.w, "cvt.u32.u64 {byte}, {shifted}");
            emit!(self.w, "@{fits} st.global.u8 [{dst}+{k}], {byte}");
        }
        Ok(())
    }
}

/// The error for a run-time-sized bytes value used where only a fixed-size value lowers.
pub(super) fn runtime_sized_use(what: &str) -> CodegenError {
    CodegenError::unsupported(
        "run-time-sized bytes value",
        format!(
            "{what} is a `Load` of a bytes buffer: the rest of the buffer, whose length is \
             known only at run time; it lowers only as the value of a Store into a bytes or \
             u32 buffer, directly or through a Let"
        ),
        "store the loaded bytes directly (`out[j] = in[i]`), or read single bytes from a u8 \
         buffer to compute with them",
    )
}
