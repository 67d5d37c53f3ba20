//! Buffers of `Bytes` elements, as `vyre-reference`'s `oob.rs` treats them: addressed per
//! byte; `Load(buf, i)` yields the rest of the buffer from byte `i` (a run-time length) and
//! `Store(buf, i, v)` writes `v.to_bytes()` at byte `i`, truncated at the buffer's end.
//! Storage and workgroup bytes buffers alike (a workgroup one holds `count` bytes).
//!
//! A bytes load is lowered as a *view* (first-byte address and length) read late. The
//! reference snapshots the bytes at the load, so a view is read within the statement that
//! loads it; bound by `Let` or `Assign` it stays a view where no store or barrier can come
//! between the binding and the reads (see `analysis::bytes`), else the binding copies the
//! bytes into a device-heap block (`heap`; [`Lowerer::copy_to_heap`]). A view may be stored into a bytes buffer (a byte copy) or a u32 buffer (its
//! first four bytes, zero-padded), used as an index or a `Select` condition (its `try_as_u32` and `truthy`), or meet an operator (the
//! reference's mismatched-operands error, recorded as a fault). Overlapping copies of the
//! same bytes agree under any interleaving, so byte copies add no race beyond those plain
//! stores already have.
//!
//! Loads of elements wider than registers hold ([`WideElement`]) are views too, generic
//! ones: the element's bytes, or out of bounds its zero bytes (at the null address, which
//! every read of a view tests in a program with such loads) or the empty bytes. Stored
//! into an element of their type, their bytes are copied and the rest zeroed.

use super::memory::{BufferSlot, Space};
use super::ops::binop_is_boolean;
use super::{Lowerer, Val};
use crate::codegen::fault::DeviceFault;
use crate::codegen::kind::{view_element, wide_element, Typing, ValKind, WideElement};
use crate::codegen::writer::{emit, Reg, RegClass};
use crate::codegen::CodegenError;
use vyre_foundation::ir::{BinOp, DataType, Expr};

/// The state space a view's address lives in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ViewSpace {
    /// A `.b64` global address.
    Global,
    /// A `.b32` shared-window address.
    Shared,
    /// A `.b64` generic address (a `Select` of views in different spaces).
    Generic,
}

impl ViewSpace {
    /// The `ld`/`st` state-space qualifier.
    fn qualifier(self) -> &'static str {
        match self {
            Self::Global => ".global",
            Self::Shared => ".shared",
            Self::Generic => "",
        }
    }

    fn class(self) -> RegClass {
        match self {
            Self::Shared => RegClass::B32,
            Self::Global | Self::Generic => RegClass::B64,
        }
    }
}

/// A run-time-sized `Value::Bytes`: `len` bytes from `start`.
#[derive(Clone, Copy)]
pub(super) struct ByteView {
    /// Address of the first byte (past the buffer's end when `len` is 0).
    start: Reg,
    /// Number of bytes (`.b32`).
    len: Reg,
    space: ViewSpace,
    /// The program writes the bytes' buffer: the view is valid only within the statement
    /// that loads it (a later store could change the bytes the reference snapshotted).
    writable: bool,
}

impl ByteView {
    /// A generic view of `len` bytes from `start` (`writable`: of a buffer the program
    /// writes).
    fn generic_at(start: Reg, len: Reg, writable: bool) -> Self {
        Self {
            start,
            len,
            space: ViewSpace::Generic,
            writable,
        }
    }

    /// `len` bytes from `start`, an address in a buffer of `space`.
    fn in_buffer(space: Space, start: Reg, len: Reg) -> Self {
        let space = match space {
            Space::Global { .. } => ViewSpace::Global,
            Space::Shared { .. } => ViewSpace::Shared,
        };
        Self {
            start,
            len,
            space,
            writable: true,
        }
    }

    /// The registers the view lives in.
    pub(super) fn regs(&self) -> [Reg; 2] {
        [self.start, self.len]
    }
}

/// What a subgroup operation takes from an operand that is a view.
#[derive(Clone, Copy)]
pub(super) enum ViewLaneUse {
    Condition,
    Lane,
    Shuffled,
    Reduced,
}

impl<'p> Lowerer<'p> {
    /// Whether the reference evaluates `expr` to a run-time-sized `Value::Bytes`: a load
    /// from a bytes buffer, or a variable bound to one.
    pub(super) fn is_bytes_view(&self, expr: &Expr) -> bool {
        match expr {
            Expr::Load { buffer, .. } => self
                .buffers
                .get(buffer.as_str())
                .is_some_and(|slot| view_element(&slot.element)),
            Expr::Var(name) => self.byte_views.contains_key(name.as_str()),
            // The reference's cast of a bytes value to bytes (or a wide element) is
            // `to_bytes()`: the same bytes.
            Expr::Cast { target, value } if view_element(target) => self.is_bytes_view(value),
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
                let slot = self.slot(buffer)?;
                match wide_element(&slot.element) {
                    Some(wide) => Ok(self.wide_load(buffer, &slot, wide, index)),
                    None => self.bytes_region(buffer.as_str(), index),
                }
            }
            Expr::Var(name) => {
                let view = (self.byte_views.get(name.as_str()).copied())
                    .ok_or_else(|| runtime_sized_use(&format!("variable `{name}`")))?;
                self.operand_view(name.as_str(), view)
            }
            Expr::Cast { target, value } if view_element(target) && self.is_bytes_view(value) => {
                self.put_bytes_view(value)
            }
            Expr::Select {
                cond,
                true_val,
                false_val,
            } => {
                // As the reference: the condition, both arms, then the pick.
                let p = self.put_condition(cond)?;
                let t = self.put_bytes_view(true_val)?;
                let f = self.put_bytes_view(false_val)?;
                Ok(self.select_view(p, t, f))
            }
            _ => Err(runtime_sized_use("this expression")),
        }
    }

    /// `p ? t : f`, in one space (generic where the arms' spaces differ).
    pub(super) fn select_view(&mut self, p: Reg, t: ByteView, f: ByteView) -> ByteView {
        let (t, f) = self.same_space(t, f);
        let start = self.w.reg(t.space.class());
        let len = self.b32();
        let ty = t.space.class().ty();
        emit!(self.w, "selp.{ty} {start}, {}, {}, {p}", t.start, f.start);
        emit!(self.w, "selp.b32 {len}, {}, {}, {p}", t.len, f.len);
        ByteView {
            start,
            len,
            space: t.space,
            writable: t.writable || f.writable,
        }
    }

    /// The two views in one space: their own, or both generic.
    fn same_space(&mut self, a: ByteView, b: ByteView) -> (ByteView, ByteView) {
        match a.space == b.space {
            true => (a, b),
            false => (self.generic(a), self.generic(b)),
        }
    }

    /// Registers of a view with a generic address (what a variable that lanes in
    /// different scopes bind, or a returned lane's frozen copy, lives in), not yet written.
    pub(super) fn generic_view_regs(&mut self) -> ByteView {
        ByteView {
            start: self.w.reg(RegClass::B64),
            len: self.b32(),
            space: ViewSpace::Generic,
            writable: false,
        }
    }

    /// The view with a generic address.
    pub(super) fn generic(&mut self, view: ByteView) -> ByteView {
        let start = self.w.reg(RegClass::B64);
        match view.space {
            ViewSpace::Generic => return view,
            ViewSpace::Global => emit!(self.w, "cvta.global.u64 {start}, {}", view.start),
            ViewSpace::Shared => {
                let wide = self.w.reg(RegClass::B64);
                emit!(self.w, "cvt.u64.u32 {wide}, {}", view.start);
                emit!(self.w, "cvta.shared.u64 {start}, {wide}");
            }
        }
        ByteView {
            start,
            space: ViewSpace::Generic,
            ..view
        }
    }

    /// The predicate of the reference's `truthy()` of a condition, a view included.
    pub(super) fn put_condition(&mut self, cond: &'p Expr) -> Result<Reg, CodegenError> {
        if !self.is_bytes_view(cond) {
            let value = self.put_expr(cond)?;
            return Ok(self.truthy(value));
        }
        let view = self.put_bytes_view(cond)?;
        Ok(self.view_truthy(view))
    }

    /// The reference's `truthy()` of a view: more than four bytes have no u32 reading,
    /// which it takes as true; else whether the zero-padded word is nonzero.
    fn view_truthy(&mut self, view: ByteView) -> Reg {
        let word = self.bytes_prefix_u32(view);
        let (long, nonzero) = (self.pred(), self.pred());
        emit!(self.w, "setp.gt.u32 {long}, {}, 4", view.len);
        emit!(self.w, "setp.ne.u32 {nonzero}, {word}, 0");
        emit!(self.w, "or.pred {nonzero}, {nonzero}, {long}");
        nonzero
    }

    /// A subgroup operand that is a view, as the lane value the operation needs: a ballot
    /// condition's truthiness (`Bool`), a shuffle lane's `try_as_u32` (or
    /// `SubgroupLaneNotU32`), or for a shuffled or reduced value a stand-in of a kind no
    /// subgroup operation combines (the reference fails on `Value::Bytes` lanes where the
    /// operation runs). A view variable reads as the lane's own binding
    /// ([`Lowerer::operand_view`]: a returned lane's frozen view, a step machine's
    /// round-start one).
    pub(super) fn put_view_lane_operand(
        &mut self,
        operand: &'p Expr,
        wanted: ViewLaneUse,
    ) -> Result<Val, CodegenError> {
        let view = self.put_bytes_view(operand)?;
        Ok(match wanted {
            ViewLaneUse::Condition => {
                let p = self.view_truthy(view);
                let flag = self.b32();
                emit!(self.w, "selp.u32 {flag}, 1, 0, {p}");
                Val::new(ValKind::Bool, flag)
            }
            ViewLaneUse::Lane => Val::new(
                ValKind::U32,
                self.view_as_u32(view, DeviceFault::SubgroupLaneNotU32),
            ),
            ViewLaneUse::Shuffled | ViewLaneUse::Reduced => self.discarded_zero(ValKind::Bytes(8)),
        })
    }

    /// The reference's `try_as_u32` of a view: its bytes zero-padded when there are at
    /// most four, else `fault`.
    pub(super) fn view_as_u32(&mut self, view: ByteView, fault: DeviceFault) -> Reg {
        let word = self.bytes_prefix_u32(view);
        let long = self.pred();
        emit!(self.w, "setp.gt.u32 {long}, {}, 4", view.len);
        self.fault_if(long, fault);
        self.zero_if(long, word)
    }

    /// `BinOp(op, left, right)` with a view operand: the reference evaluates both
    /// operands, then fails (no operator takes `Value::Bytes`). The value stands in for
    /// the result the failed dispatch discards.
    pub(super) fn put_bytes_operand(
        &mut self,
        op: BinOp,
        left: &'p Expr,
        right: &'p Expr,
    ) -> Result<Val, CodegenError> {
        let mut fixed = None;
        for operand in [left, right] {
            if self.is_bytes_view(operand) {
                self.put_bytes_view(operand)?;
            } else {
                fixed = Some(self.put_expr(operand)?);
            }
        }
        let boolean = binop_is_boolean(op);
        Ok(self.rejected_operator(DeviceFault::BytesOperand, boolean, fixed))
    }

    /// Bind `name` to a view (`Let name = view`), in registers of its own so that an
    /// `Assign` to it changes no other view (generic ones where an `Assign` may bring a
    /// view of another space).
    pub(super) fn bind_bytes_view(
        &mut self,
        name: &'p str,
        value: &'p Expr,
        view: ByteView,
    ) -> Result<(), CodegenError> {
        // A view of a written buffer whose variable is read before any write can come
        // (`analysis::bytes`), unless other lanes read it in subgroup operands, wherever
        // this lane is by then.
        let read_in_time = self
            .facts
            .bytes
            .read_before_writes
            .contains(&(value as *const Expr))
            && !self.facts.subgroup_operand_vars.contains(name);
        let view = match !read_in_time && self.must_snapshot(name, view) {
            true => self.copy_to_heap(view)?,
            false => view,
        };
        self.declare(name)?;
        let view = match self.facts.bytes.assigned.contains(name) {
            true => self.generic(view),
            false => view,
        };
        let bound = match self.step_view(name)? {
            Some(named) => named,
            None => ByteView {
                start: self.w.reg(view.space.class()),
                len: self.b32(),
                space: view.space,
                writable: false,
            },
        };
        self.move_view(bound, view);
        self.byte_views.insert(name, bound);
        self.note_typing(name, Typing::View);
        self.mark_bound(name);
        Ok(())
    }

    /// `Assign name = value` of a variable bound to a view.
    pub(super) fn assign_bytes_view(
        &mut self,
        name: &'p str,
        value: &'p Expr,
    ) -> Result<(), CodegenError> {
        if !self.is_bytes_view(value) {
            return Err(runtime_sized_use(&format!(
                "variable `{name}`, assigned a fixed-size value,"
            )));
        }
        let view = self.put_bytes_view(value)?;
        let view = match self.must_snapshot(name, view) {
            true => self.copy_to_heap(view)?,
            false => view,
        };
        let bound = self.byte_views[name];
        self.move_view(bound, view);
        Ok(())
    }

    /// Copy view `from` into `to`'s registers: `to` is of `from`'s space or generic (a
    /// view of another space is converted first).
    pub(super) fn move_view(&mut self, to: ByteView, from: ByteView) {
        let from = match to.space != from.space {
            true => self.generic(from),
            false => from,
        };
        self.mov(to.start, from.start);
        self.mov(to.len, from.len);
    }

    /// Whether variable `name` must hold a copy of `view`'s bytes rather than the view:
    /// they are in a buffer the program writes, which may change them before the variable
    /// is read (the reference snapshots them at the binding).
    fn must_snapshot(&self, name: &str, view: ByteView) -> bool {
        view.writable && self.facts.bytes.read_vars.contains(name)
    }

    /// A copy of `view`'s bytes in a heap block of the lane's list (`heap`): a generic view
    /// of no bytes where the heap cannot give the block (the dispatch fails there).
    fn copy_to_heap(&mut self, view: ByteView) -> Result<ByteView, CodegenError> {
        let head = self.view_blocks.ok_or_else(|| {
            CodegenError::invalid(
                "a bytes snapshot `analysis::bytes` did not foresee",
                "report this vyre-cuda bug",
            )
        })?;
        let bytes = self.w.reg(RegClass::B64);
        emit!(self.w, "cvt.u64.u32 {bytes}, {}", view.len);
        let start = self.heap_alloc_listed(head, bytes);
        let (failed, len) = (self.pred(), self.b32());
        emit!(self.w, "setp.eq.u64 {failed}, {start}, 0");
        emit!(self.w, "selp.b32 {len}, 0, {}, {failed}", view.len);
        let copy = ByteView {
            start,
            len,
            space: ViewSpace::Generic,
            writable: false,
        };
        self.copy_bytes(view, copy);
        Ok(copy)
    }

    /// The bytes of `buffer` from byte `index` on (none when `index` is past the end): a
    /// load's view, or a store's destination.
    fn bytes_region(&mut self, buffer: &str, index: Reg) -> Result<ByteView, CodegenError> {
        let slot = self.slot(buffer)?;
        let writable = self.facts.bytes.written.contains(buffer);
        let (start, len, space) = match slot.space {
            Space::Global { base, len } => {
                let rest = self.bytes_after(len, index);
                (self.byte_address(base, index), rest, ViewSpace::Global)
            }
            Space::Shared { offset, count } => {
                let count = self.imm_b32(count);
                let rest = self.bytes_after(count, index);
                // Wraps only past the end, where the view is empty.
                let start = self.b32();
                emit!(self.w, "add.u32 {start}, {}, {index}", self.shared_base);
                emit!(self.w, "add.u32 {start}, {start}, {offset}");
                (start, rest, ViewSpace::Shared)
            }
        };
        Ok(ByteView {
            start,
            len,
            space,
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

    /// Address of byte `k` (`.b32`) of `view`.
    fn byte_of(&mut self, view: ByteView, k: Reg) -> Reg {
        let addr = self.w.reg(view.space.class());
        if view.space == ViewSpace::Shared {
            emit!(self.w, "add.u32 {addr}, {}, {k}", view.start);
            return addr;
        }
        let k64 = self.w.reg(RegClass::B64);
        emit!(self.w, "cvt.u64.u32 {k64}, {k}");
        emit!(self.w, "add.s64 {addr}, {}, {k64}", view.start);
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
    /// buffer, or its first four (zero-padded) into a u32 element; vyre's validator
    /// rejects a bytes value stored into any other element (V121).
    pub(super) fn put_bytes_view_store(
        &mut self,
        buffer: &str,
        index: Reg,
        view: ByteView,
    ) -> Result<(), CodegenError> {
        let slot = self.slot(buffer)?;
        if let Some(wide) = wide_element(&slot.element) {
            if let Some(dst) = self.wide_destination(&slot, wide, index) {
                let copied = self.copy_bytes(view, dst);
                self.zero_bytes_from(dst, copied);
            }
            return Ok(());
        }
        match &slot.element {
            DataType::Bytes => {
                let dst = self.bytes_region(buffer, index)?;
                self.copy_bytes(view, dst);
                Ok(())
            }
            DataType::U32 => {
                let word = self.bytes_prefix_u32(view);
                self.put_store(buffer, index, Val::new(ValKind::Bytes(4), word))
            }
            element => Err(CodegenError::unsupported(
                format!("Store of a run-time-sized bytes value into a {element} buffer"),
                "only bytes and u32 buffers take a bytes value",
                "store the bytes into a bytes or u32 buffer",
            )),
        }
    }

    /// Copy `min(view.len, dst.len)` bytes from the view to `dst`, one byte per
    /// iteration; that count. The reference snapshots the view before writing, so a copy
    /// within one buffer behaves like `memmove`: it runs from the last byte down when the
    /// destination lies above the source (views in different spaces never overlap).
    fn copy_bytes(&mut self, view: ByteView, dst: ByteView) -> Reg {
        let (view, dst) = self.same_space(view, dst);
        let present = self.zero_view_test(view);
        let count = self.b32();
        emit!(self.w, "min.u32 {count}, {}, {}", dst.len, view.len);
        // Byte `step` of the copy is byte `k` (forward) or `count - 1 - k` (backward).
        let backward = self.pred();
        let ty = match view.space.class() {
            RegClass::B32 => "u32",
            _ => "u64",
        };
        emit!(
            self.w,
            "setp.gt.{ty} {backward}, {}, {}",
            dst.start,
            view.start
        );
        self.view_byte_loop("0", count, |this, k| {
            this.copy_byte(view, dst, (k, count, backward), present)
        });
        count
    }

    /// Byte `k` of a copy of `count` (`backward`: byte `count - 1 - k`), read as zero where
    /// `present` (see [`Self::zero_view_test`]) does not hold.
    fn copy_byte(
        &mut self,
        view: ByteView,
        dst: ByteView,
        (k, count, backward): (Reg, Reg, Reg),
        present: Option<Reg>,
    ) {
        let down = self.b32();
        emit!(self.w, "sub.u32 {down}, {count}, {k}");
        emit!(self.w, "sub.u32 {down}, {down}, 1");
        let at = self.b32();
        emit!(self.w, "selp.b32 {at}, {down}, {k}, {backward}");
        let (from, to) = (self.byte_of(view, at), self.byte_of(dst, at));
        let (q, byte) = (view.space.qualifier(), self.b32());
        match present {
            Some(present) => {
                emit!(self.w, "mov.u32 {byte}, 0");
                emit!(self.w, "@{present} ld{q}.u8 {byte}, [{from}]");
            }
            None => emit!(self.w, "ld{q}.u8 {byte}, [{from}]"),
        }
        emit!(self.w, "st{q}.u8 [{to}], {byte}");
    }

    /// `for k in first..limit { body(k) }` over a view's `.b32` byte indices, the exit test
    /// steering by subgroup results not anchored yet (see `checks::anchor`). The async
    /// copies' `byte_loop` is its `.u64` twin (steering by `branch_pred`); one loop for both
    /// would change either family's kernels, which waits for a GPU run.
    fn view_byte_loop(
        &mut self,
        first: impl std::fmt::Display,
        limit: Reg,
        body: impl FnOnce(&mut Self, Reg),
    ) {
        let k = self.b32();
        emit!(self.w, "mov.u32 {k}, {first}");
        let (top, end) = (self.w.label(), self.w.label());
        self.w.put_label(top);
        let done = self.pred();
        emit!(self.w, "setp.ge.u32 {done}, {k}, {limit}");
        let done = self.anchored_pred(done);
        emit!(self.w, "@{done} bra {end}");
        body(self, k);
        emit!(self.w, "add.u32 {k}, {k}, 1");
        emit!(self.w, "bra {top}");
        self.w.put_label(end);
    }

    /// The view's first four bytes, little-endian, zero-padded past its end.
    fn bytes_prefix_u32(&mut self, view: ByteView) -> Reg {
        let (start, len, q) = (view.start, view.len, view.space.qualifier());
        let backed = self.zero_view_test(view);
        let word = self.b32();
        emit!(self.w, "mov.u32 {word}, 0");
        for k in 0..4u32 {
            let present = self.pred();
            emit!(self.w, "setp.gt.u32 {present}, {len}, {k}");
            if let Some(backed) = backed {
                emit!(self.w, "and.pred {present}, {present}, {backed}");
            }
            let byte = self.b32();
            emit!(self.w, "mov.u32 {byte}, 0");
            emit!(self.w, "@{present} ld{q}.u8 {byte}, [{start}+{k}]");
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
        self.put_value_bytes(value, |this| this.bytes_region(buffer, index))
    }

    /// `Store(buffer, index, value)` of a fixed-size value into a [`WideElement`] (vyre's
    /// validator refuses it, the reference's `write_element` would run it): the element
    /// zeroed, then the value's bytes as into a bytes buffer.
    pub(super) fn put_value_into_wide(
        &mut self,
        slot: &BufferSlot,
        wide: WideElement,
        index: Reg,
        value: Val,
    ) -> Result<(), CodegenError> {
        match self.wide_destination(slot, wide, index) {
            Some(dst) => {
                self.zero_bytes_from(dst, 0);
                self.put_value_bytes(value, |_| Ok(dst))
            }
            None => Ok(()),
        }
    }

    /// All of fixed-size `value`'s `to_bytes()` into the view `dst` gives (lowered once the
    /// value's bytes are), truncated at its end.
    fn put_value_bytes(
        &mut self,
        value: Val,
        dst: impl FnOnce(&mut Self) -> Result<ByteView, CodegenError>,
    ) -> Result<(), CodegenError> {
        // An out-of-bounds half load is two zero bytes, not a Float's eight (an f64-held
        // value's filled flag tells which it is).
        let (float, filled) = match value.kind {
            ValKind::Half => {
                let (oob, float) = (self.half_is_oob(value), self.pred());
                emit!(self.w, "not.pred {float}, {oob}");
                (Some(float), None)
            }
            ValKind::F64 => (self.filled_pred(value), None),
            // The empty bytes (an out-of-bounds load of a vector of lanes) write nothing.
            _ => (None, self.filled_pred(value)),
        };
        let low = self.bytes_b64(value);
        let upper = self.upper_of(value, value.kind.upper_words().max(1));
        let dst = dst(self)?;
        let q = dst.space.qualifier();
        for k in 0..u32::from(value.kind.byte_len()) {
            let fits = self.pred();
            emit!(self.w, "setp.gt.u32 {fits}, {}, {k}", dst.len);
            if let Some(float) = float.filter(|_| k >= 2) {
                emit!(self.w, "and.pred {fits}, {fits}, {float}");
            }
            if let Some(filled) = filled {
                emit!(self.w, "and.pred {fits}, {fits}, {filled}");
            }
            let half = match k / 8 {
                0 => low,
                word => upper[word as usize - 1],
            };
            let shifted = self.w.reg(RegClass::B64);
            emit!(self.w, "shr.b64 {shifted}, {half}, {}", 8 * (k % 8));
            let byte = self.b32();
            emit!(self.w, "cvt.u32.u64 {byte}, {shifted}");
            emit!(self.w, "@{fits} st{q}.u8 [{}+{k}], {byte}", dst.start);
        }
        Ok(())
    }

    /// `buffer[index]` of a wide element: a generic view of its bytes; out of bounds (or
    /// of zero stride) its zero bytes, at the null address (see [`Self::zero_view_test`]),
    /// or the empty bytes where its type has no zero value.
    fn wide_load(
        &mut self,
        buffer: &str,
        slot: &BufferSlot,
        wide: WideElement,
        index: Reg,
    ) -> ByteView {
        let (start, len) = (self.w.reg(RegClass::B64), self.b32());
        let (width, zeros) = match wide {
            WideElement::Zeros { width, .. } => {
                emit!(self.w, "mov.u64 {start}, 0");
                emit!(self.w, "mov.u32 {len}, {width}");
                return ByteView::generic_at(start, len, false);
            }
            WideElement::Addressed { width, zeros } => (width, zeros),
        };
        let (in_bounds, addr) = self.element_address(slot, index);
        let out_of_bounds = if zeros { width } else { 0 };
        emit!(
            self.w,
            "selp.b32 {len}, {width}, {out_of_bounds}, {in_bounds}"
        );
        let element = self.generic(ByteView::in_buffer(slot.space, addr, len));
        emit!(
            self.w,
            "selp.b64 {start}, {}, 0, {in_bounds}",
            element.start
        );
        ByteView::generic_at(start, len, self.facts.bytes.written.contains(buffer))
    }

    /// The bytes a store into `slot[index]` of a wide element writes: none out of bounds
    /// (an empty view), `None` for a zero-stride element (the reference's stride is zero:
    /// every store is out of bounds).
    fn wide_destination(
        &mut self,
        slot: &BufferSlot,
        wide: WideElement,
        index: Reg,
    ) -> Option<ByteView> {
        let WideElement::Addressed { width, .. } = wide else {
            return None;
        };
        let (in_bounds, addr) = self.element_address(slot, index);
        let len = self.b32();
        emit!(self.w, "selp.b32 {len}, {width}, 0, {in_bounds}");
        Some(ByteView::in_buffer(slot.space, addr, len))
    }

    /// Zero the bytes of `dst` from byte `from` (`.b32`) to its end.
    fn zero_bytes_from(&mut self, dst: ByteView, from: impl std::fmt::Display) {
        self.view_byte_loop(from, dst.len, |this, k| {
            let to = this.byte_of(dst, k);
            emit!(this.w, "st{}.u8 [{to}], 0", dst.space.qualifier());
        });
    }

    /// For a program with views of zero bytes in no buffer (`BytesFacts::zero_views`):
    /// whether `view`'s bytes are in memory (its address is not null); a read of a null
    /// view's byte is a zero.
    fn zero_view_test(&mut self, view: ByteView) -> Option<Reg> {
        if !self.facts.bytes.zero_views || view.space != ViewSpace::Generic {
            return None;
        }
        let backed = self.pred();
        emit!(self.w, "setp.ne.u64 {backed}, {}, 0", view.start);
        Some(backed)
    }
}

/// The error for a run-time-sized bytes value used where only a fixed-size value lowers.
pub(super) fn runtime_sized_use(what: &str) -> CodegenError {
    CodegenError::unsupported(
        "run-time-sized bytes value",
        format!(
            "{what} is a `Load` of a bytes buffer (the rest of the buffer, whose length is \
             known only at run time) or of an element over 255 bytes; it lowers as the value \
             of a Store, an index, a Select condition or an operand (a run-time error), \
             directly or through a Let"
        ),
        "store the loaded bytes directly (`out[j] = in[i]`), or read single bytes from a u8 \
         buffer to compute with them",
    )
}
