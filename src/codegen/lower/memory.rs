//! Buffer addressing, loads and stores, with the reference's bounds rules: out-of-bounds
//! loads read zero and out-of-bounds stores are dropped.

use super::half::HalfFormat;
use super::{Lowerer, Val};
#[cfg(doc)]
use crate::codegen::kind::nibble_vector;
use crate::codegen::kind::{
    element_stride, odd_width, unaddressed_width, view_element, wide_element, ValKind,
};
use crate::codegen::writer::{emit, Reg, RegClass};
use crate::codegen::CodegenError;
use rustc_hash::FxHashSet;
use vyre_foundation::ir::{DataType, Expr, Node};

#[derive(Clone, Copy)]
pub(super) enum Space {
    /// Global memory: base address register and element-count register.
    Global { base: Reg, len: Reg },
    /// Shared memory: byte offset into `vyre_shared` and static element count.
    Shared { offset: u32, count: u32 },
}

impl Space {
    pub(super) fn state_space(self) -> &'static str {
        match self {
            Self::Global { .. } => "global",
            Self::Shared { .. } => "shared",
        }
    }
}

#[derive(Clone)]
pub(super) struct BufferSlot {
    pub(super) space: Space,
    pub(super) element: DataType,
    pub(super) stride: u32,
    /// Storage buffer the reference allows atomics on.
    pub(super) storage: bool,
    /// The reference's element count (`BufLen`) where the addressed count does not give
    /// it: a buffer of a [`nibble_vector`] of several lanes, whose trailing partial element
    /// may count.
    pub(super) counted: Option<Counted>,
}

/// Where a buffer's reference element count is (see [`BufferSlot::counted`]).
#[derive(Clone, Copy)]
pub(super) enum Counted {
    /// A storage buffer's: its count parameter, of which it addresses half.
    Param(Reg),
    /// A workgroup buffer's, from its declared size.
    Static(u32),
}

impl Lowerer<'_> {
    pub(super) fn slot(&self, buffer: &str) -> Result<BufferSlot, CodegenError> {
        self.buffers.get(buffer).cloned().ok_or_else(|| {
            CodegenError::invalid(
                format!("missing buffer `{buffer}`"),
                "declare every buffer the program reads or writes",
            )
        })
    }

    pub(super) fn put_store(
        &mut self,
        buffer: &str,
        index: Reg,
        value: Val,
    ) -> Result<(), CodegenError> {
        let slot = self.slot(buffer)?;
        if slot.element == DataType::Bytes {
            return self.put_value_into_bytes(buffer, index, value);
        }
        if let Some(wide) = wide_element(&slot.element) {
            return self.put_value_into_wide(&slot, wide, index, value);
        }
        if unaddressed_width(&slot.element).is_some() {
            // The reference's stride is zero: every store is out of bounds.
            return Ok(());
        }
        let payload = self.store_payload(&slot.element, value);
        let (in_bounds, addr) = self.element_address(&slot, index);
        let in_bounds = self.guarded(in_bounds);
        if self.lane_store(buffer, in_bounds, payload) {
            return Ok(());
        }
        if let Some(width) = odd_width(&slot.element) {
            self.store_odd_width(slot.space, in_bounds, addr, (value, payload), width);
            return Ok(());
        }
        let space = slot.space.state_space();
        if slot.stride == 16 {
            // The value's bytes, zero-padded to sixteen.
            let hi = self.high_half(value);
            emit!(
                self.w,
                "@{in_bounds} st.{space}.v2.u64 [{addr}], {{{payload}, {hi}}}"
            );
            return Ok(());
        }
        let width = int_width(slot.stride);
        if let Some(sunk) = self.sunk_store_address(&slot, in_bounds, addr) {
            emit!(self.w, "st.{space}.{width} [{sunk}], {payload}");
            return Ok(());
        }
        emit!(
            self.w,
            "@{in_bounds} st.{space}.{width} [{addr}], {payload}"
        );
        Ok(())
    }

    /// The register to write for `value` into an element of `element`, following the
    /// reference's `write_element`: F16/BF16 elements round floats (see `half.rs`); F32
    /// elements canonicalise floats (and reinterpret u32 bits); every other element
    /// receives the value's little-endian bytes truncated or zero-padded to the element
    /// width (a Float contributes its f64 bytes).
    pub(super) fn store_payload(&mut self, element: &DataType, value: Val) -> Reg {
        if let Some(format) = HalfFormat::of(element) {
            return self.half_store_bits(format, value);
        }
        let value = self.settle_half(value);
        if *element == DataType::F32 {
            return match value.kind {
                ValKind::F32 => self.canonical_f32_bits(value.reg),
                ValKind::F64 => {
                    let f = self.rounded_f32(value).reg;
                    self.canonical_f32_bits(f)
                }
                ValKind::U32 => {
                    let f = self.bits_as_f32(value.reg);
                    self.canonical_f32_bits(f)
                }
                // The reference writes 0.0 for any other value variant.
                _ => self.imm_b32(0),
            };
        }
        if element_stride(element).unwrap_or(4) > 4 {
            return self.bytes_b64(value);
        }
        let bytes = match value.kind {
            ValKind::F32 | ValKind::F64 => self.float_bytes(value),
            _ => value.reg,
        };
        self.low_word(bytes)
    }

    /// Whether a load of `buffer` at `index` skips its bounds check because the host
    /// launches this entry only where the buffer holds the element: the entry trusts
    /// literal extents, the index is a literal and the buffer a plain global one (the
    /// loads `hoisted_bounds_test` may prove). Records the extent.
    pub(super) fn trusted_literal(
        &mut self,
        buffer: &str,
        index: &Expr,
    ) -> Result<bool, CodegenError> {
        let (Some(_), Expr::LitU32(k)) = (&self.literal_extents, index) else {
            return Ok(false);
        };
        let slot = self.slot(buffer)?;
        let plain = matches!(slot.space, Space::Global { .. })
            && slot.counted.is_none()
            && ValKind::of_load(&slot.element).is_some()
            && plain_element(&slot);
        let Some(extent) = k.checked_add(1).filter(|_| plain) else {
            return Ok(false);
        };
        if let Some(extents) = &mut self.literal_extents {
            let recorded = extents.entry(buffer.to_string()).or_insert(0);
            *recorded = (*recorded).max(extent);
        }
        Ok(true)
    }

    /// `buffer[index]`; `proven` where a test before the enclosing loop showed the index
    /// in bounds, or the host guarantees it ([`Self::trusted_literal`]): a plain global
    /// load then skips the check.
    pub(super) fn put_load(
        &mut self,
        buffer: &str,
        index: Reg,
        proven: bool,
    ) -> Result<Val, CodegenError> {
        let slot = self.slot(buffer)?;
        // Every element `abi::layout` accepts has a load kind but `Bytes`, whose loads
        // `put_expr` lowers as views before reaching here.
        let Some(kind) = ValKind::of_load(&slot.element) else {
            return Err(CodegenError::invalid(
                format!(
                    "a load from a {} buffer reached the fixed-size path",
                    slot.element
                ),
                "report this vyre-cuda bug",
            ));
        };
        if unaddressed_width(&slot.element).is_some() {
            // The reference's stride is zero: every load is out of bounds, a zero value.
            return Ok(self.zero_bytes(kind));
        }
        if let Some(word) = self.lane_load(buffer, index) {
            return Ok(self.word_value(kind, word));
        }
        if proven {
            // `hoisted_bounds_test` proves plain global loads only.
            let addr = self.unchecked_address(&slot, index);
            let value = self.load_plain(&slot, kind, None, addr);
            self.mark_filled(&slot.element, value, None);
            return Ok(value);
        }
        let (in_bounds, addr) = self.element_address(&slot, index);
        if let Some(width) = odd_width(&slot.element) {
            let value = self.load_odd_width(slot.space, in_bounds, addr, width);
            self.mark_filled(&slot.element, value, Some(in_bounds));
            return Ok(value);
        }
        if let Some(format) = HalfFormat::of(&slot.element) {
            let raw = self.w.reg(RegClass::B32);
            self.load_or_zero(slot.space, Some(in_bounds), addr, "u16", &[raw]);
            return Ok(self.half_value(format, raw, in_bounds));
        }
        let value = self.load_plain(&slot, kind, Some(in_bounds), addr);
        self.mark_filled(&slot.element, value, Some(in_bounds));
        Ok(value)
    }

    /// A load of one element of a fixed width (1, 2, 4, 8 or 16 bytes) as `kind`, checked
    /// by `in_bounds` unless proven in bounds (`None`).
    fn load_plain(
        &mut self,
        slot: &BufferSlot,
        kind: ValKind,
        in_bounds: Option<Reg>,
        addr: Reg,
    ) -> Val {
        let reg = self.w.reg(kind.reg_class());
        if slot.stride == 16 {
            let hi = self.w.reg(RegClass::B64);
            self.load_or_zero(slot.space, in_bounds, addr, "v2.u64", &[reg, hi]);
            self.upper.insert(reg, smallvec::smallvec![hi]);
            return Val { kind, reg };
        }
        let class = reg.class();
        let width = if class.is_float() {
            class.ty()
        } else {
            int_width(slot.stride)
        };
        self.load_or_zero(slot.space, in_bounds, addr, width, &[reg]);
        let reg = if kind == ValKind::F32 {
            self.flush_subnormal(reg)
        } else {
            reg
        };
        Val { kind, reg }
    }

    /// `ld.{space}.{ty}` of `dsts` (one register, or the two of a `v2`) from `addr`, reading
    /// zeros when `in_bounds` is false (the reference's out-of-bounds load), never another
    /// element; `None` is a load proven in bounds. A global load reads the module's zero
    /// page instead (`selp` of the address, then an unpredicated load): a predicated load
    /// into a zeroed register is a partial definition, and ptxas's time grows steeply with
    /// many of them in one block (the corpus's straight-line attention passes: 192 -> 88
    /// ms). Shared loads keep the predicate.
    pub(super) fn load_or_zero(
        &mut self,
        space: Space,
        in_bounds: Option<Reg>,
        addr: Reg,
        ty: &str,
        dsts: &[Reg],
    ) {
        let list = match dsts {
            [one] => one.to_string(),
            many => format!(
                "{{{}}}",
                many.iter()
                    .map(Reg::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let Some(in_bounds) = in_bounds else {
            let space = space.state_space();
            emit!(self.w, "ld.{space}.{ty} {list}, [{addr}]");
            return;
        };
        match space {
            Space::Global { .. } => {
                let safe = self.address_or_zero_page(in_bounds, addr);
                emit!(self.w, "ld.global.{ty} {list}, [{safe}]");
            }
            Space::Shared { .. } => {
                for dst in dsts {
                    let class = dst.class();
                    emit!(self.w, "mov.{} {dst}, {}", class.ty(), class.zero());
                }
                emit!(self.w, "@{in_bounds} ld.shared.{ty} {list}, [{addr}]");
            }
        }
    }

    /// `addr` where `in_bounds` holds, else the module's zero page (16 zero bytes): an
    /// unpredicated global load from it reads the reference's out-of-bounds zeros.
    pub(super) fn address_or_zero_page(&mut self, in_bounds: Reg, addr: Reg) -> Reg {
        let zero = self.zero_page();
        let safe = self.w.reg(RegClass::B64);
        emit!(self.w, "selp.b64 {safe}, {addr}, {zero}, {in_bounds}");
        safe
    }

    /// The global address of the module's zeroed [`ZERO_PAGE`], set up in the prologue
    /// of the entries that read it.
    fn zero_page(&mut self) -> Reg {
        match self.zero_page {
            Some(reg) => reg,
            None => {
                let reg = self.w.reg(RegClass::B64);
                self.zero_page = Some(reg);
                reg
            }
        }
    }

    /// A buffer's space and byte length (`.b64`).
    pub(super) fn byte_range_of(&mut self, buffer: &str) -> Result<(Space, Reg), CodegenError> {
        let slot = self.slot(buffer)?;
        let bytes = self.w.reg(RegClass::B64);
        match slot.space {
            Space::Global { len, .. } => {
                emit!(self.w, "mul.wide.u32 {bytes}, {len}, {}", slot.stride);
            }
            Space::Shared { count, .. } => {
                let total = u64::from(count) * u64::from(slot.stride);
                emit!(self.w, "mov.u64 {bytes}, {total}");
            }
        }
        Ok((slot.space, bytes))
    }

    /// `@p ld/st.u8` of `byte` at byte `at` of a buffer in `space`.
    pub(super) fn byte_access(&mut self, p: Reg, space: Space, at: Reg, byte: Reg, store: bool) {
        let addr = match space {
            Space::Global { base, .. } => {
                let addr = self.w.reg(RegClass::B64);
                emit!(self.w, "add.s64 {addr}, {base}, {at}");
                addr
            }
            Space::Shared { offset, .. } => {
                let addr = self.w.reg(RegClass::B32);
                emit!(self.w, "cvt.u32.u64 {addr}, {at}");
                emit!(self.w, "add.u32 {addr}, {addr}, {}", self.shared_base);
                emit!(self.w, "add.u32 {addr}, {addr}, {offset}");
                addr
            }
        };
        let space = space.state_space();
        if store {
            emit!(self.w, "@{p} st.{space}.u8 [{addr}], {byte}");
        } else {
            emit!(self.w, "@{p} ld.{space}.u8 {byte}, [{addr}]");
        }
    }

    /// `index * stride` bytes past the global address `base`.
    pub(super) fn scaled_address(&mut self, base: Reg, index: Reg, stride: u32) -> Reg {
        let offset = self.w.reg(RegClass::B64);
        emit!(self.w, "mul.wide.u32 {offset}, {index}, {stride}");
        let addr = self.w.reg(RegClass::B64);
        emit!(self.w, "add.s64 {addr}, {base}, {offset}");
        addr
    }

    /// For a loop whose loads `analysis::loop_bounds` found checkable before it: the test
    /// that every iteration's index of those loads is in bounds (`S + c * (to - 1) <
    /// len`, without wrapping), and the global loads it covers. `None` where the loop
    /// keeps one checked copy (a step machine's or returned lanes' segment, the vector
    /// entry, no plain global load, or a term that is not a u32).
    pub(super) fn hoisted_bounds_test(
        &mut self,
        node: &Node,
        to: Reg,
    ) -> Result<Option<(Reg, FxHashSet<*const Expr>)>, CodegenError> {
        let facts = self.facts;
        let Some(checks) = facts.hoisted_checks.get(&(node as *const Node)) else {
            return Ok(None);
        };
        if self.steps.is_some() || self.returned.is_some() || self.lanes.is_some() {
            return Ok(None);
        }
        let mut covered = Vec::new();
        for check in checks {
            let slot = self.slot(check.buffer)?;
            // Workgroup-buffer loads keep their predicated form: hoisting their checks
            // measured no gain (vyre-libs' matmul_tiled 400.6 -> 409.2 us on the H200).
            let Space::Global { len, .. } = slot.space else {
                continue;
            };
            let terms = &check.index.terms;
            if plain_element(&slot) && terms.iter().all(|(term, _)| self.u32_term(term)) {
                covered.push((check, len));
            }
        }
        if covered.is_empty() {
            return Ok(None);
        }
        let last = self.w.reg(RegClass::B32);
        emit!(self.w, "sub.u32 {last}, {to}, 1");
        let all = self.w.reg(RegClass::Pred);
        emit!(self.w, "mov.pred {all}, 1");
        let mut proven = FxHashSet::default();
        for (check, len) in covered {
            let sum = self.imm_b32(0);
            for &(term, multiplier) in &check.index.terms {
                let term = self.put_expr(term)?;
                if term.kind != ValKind::U32 {
                    return Ok(None);
                }
                emit!(
                    self.w,
                    "mad.lo.u32 {sum}, {}, {multiplier}, {sum}",
                    term.reg
                );
            }
            let (highest, sum64, len64) = (
                self.w.reg(RegClass::B64),
                self.w.reg(RegClass::B64),
                self.w.reg(RegClass::B64),
            );
            emit!(
                self.w,
                "mul.wide.u32 {highest}, {last}, {}",
                check.index.coef
            );
            emit!(self.w, "cvt.u64.u32 {sum64}, {sum}");
            emit!(self.w, "add.u64 {highest}, {highest}, {sum64}");
            emit!(self.w, "cvt.u64.u32 {len64}, {len}");
            let fits = self.w.reg(RegClass::Pred);
            emit!(self.w, "setp.lt.u64 {fits}, {highest}, {len64}");
            emit!(self.w, "and.pred {all}, {all}, {fits}");
            proven.insert(check.load as *const Expr);
        }
        Ok(Some((all, proven)))
    }

    /// Whether `expr` (an invariant term of `analysis::loop_bounds`) is a u32 here.
    fn u32_term(&self, expr: &Expr) -> bool {
        match expr {
            Expr::Var(name) => {
                !self.byte_views.contains_key(name.as_str())
                    && self
                        .locals
                        .get(name.as_str())
                        .is_some_and(|local| local.val.kind == ValKind::U32)
            }
            Expr::BinOp { left, right, .. } => self.u32_term(left) && self.u32_term(right),
            _ => true,
        }
    }

    /// `(in-bounds predicate, address register)` for `slot[index]`.
    pub(super) fn element_address(&mut self, slot: &BufferSlot, index: Reg) -> (Reg, Reg) {
        let p = self.w.reg(RegClass::Pred);
        match slot.space {
            Space::Global { len, .. } => emit!(self.w, "setp.lt.u32 {p}, {index}, {len}"),
            Space::Shared { count, .. } => emit!(self.w, "setp.lt.u32 {p}, {index}, {count}"),
        }
        (p, self.unchecked_address(slot, index))
    }

    /// The address of `slot[index]`, in bounds or not.
    fn unchecked_address(&mut self, slot: &BufferSlot, index: Reg) -> Reg {
        match slot.space {
            Space::Global { base, .. } => self.scaled_address(base, index, slot.stride),
            Space::Shared { offset, .. } => {
                let addr = self.w.reg(RegClass::B32);
                emit!(
                    self.w,
                    "mad.lo.u32 {addr}, {index}, {}, {}",
                    slot.stride,
                    self.shared_base
                );
                if offset != 0 {
                    emit!(self.w, "add.u32 {addr}, {addr}, {offset}");
                }
                addr
            }
        }
    }
}

/// Whether loads of `slot` are one plain `ld` of its stride (no byte-by-byte, half or
/// zero-stride form), the only ones a proven bounds test lets skip the check.
fn plain_element(slot: &BufferSlot) -> bool {
    odd_width(&slot.element).is_none()
        && HalfFormat::of(&slot.element).is_none()
        && unaddressed_width(&slot.element).is_none()
        && !view_element(&slot.element)
}

/// The integer type of a `ld`/`st` of one element of `stride` bytes.
pub(super) fn int_width(stride: u32) -> &'static str {
    match stride {
        1 => "u8",
        2 => "u16",
        4 => "u32",
        _ => "u64",
    }
}
