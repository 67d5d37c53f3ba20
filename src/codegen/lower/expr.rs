//! Expressions: one `put_*` per `Expr` construct (operators are in `ops.rs`).

use super::bytes::ViewLaneUse;
use super::memory::{Counted, Space};
use super::{bytes, canonical_f32_bits_host, Ids, Lowerer, Val};
use crate::codegen::fault::DeviceFault;
use crate::codegen::kind::{buf_len, view_element, ValKind};
use crate::codegen::writer::{emit, Reg, RegClass};
use crate::codegen::CodegenError;
use vyre_foundation::ir::{BinOp, DataType, Expr};

impl<'p> Lowerer<'p> {
    /// The recursion depth is bounded by `analysis::nesting`, checked up front.
    pub(super) fn put_expr(&mut self, expr: &'p Expr) -> Result<Val, CodegenError> {
        // Subgroup operations computed early (see `returned`).
        if let Some(hoisted) = self.hoisted.remove(&(expr as *const Expr)) {
            self.record_operand_faults(hoisted.faults);
            return Ok(hoisted.value);
        }
        let Some(&class) = self.facts.shared.get(&(expr as *const Expr)) else {
            return self.put_expr_once(expr);
        };
        // Reused only where it is defined: no label placed since (a step machine may
        // lower one statement's expression again in another step's block).
        let here = self.w.block_mark();
        match self.shared_values.get(&class) {
            Some(&(value, mark)) if mark == here => return Ok(value),
            _ => {}
        }
        let value = self.put_expr_once(expr)?;
        self.shared_values
            .insert(class, (value, self.w.block_mark()));
        Ok(value)
    }

    /// [`Self::put_expr`] of an expression not computed before in this statement.
    fn put_expr_once(&mut self, expr: &'p Expr) -> Result<Val, CodegenError> {
        match expr {
            Expr::LitU32(v) => Ok(Val::new(ValKind::U32, self.imm_b32(*v))),
            Expr::LitI32(v) => Ok(Val::new(ValKind::I32, self.imm_b32(*v as u32))),
            Expr::LitBool(v) => Ok(Val::new(ValKind::Bool, self.imm_b32(u32::from(*v)))),
            Expr::LitF32(v) => Ok(Val::new(
                ValKind::F32,
                self.f32_const(canonical_f32_bits_host(*v)),
            )),
            Expr::Var(name) => self.put_var(name.as_str()),
            Expr::Load { buffer, index } => {
                let trusted = self.trusted_literal(buffer.as_str(), index)?;
                let index = self.put_index(index)?;
                if view_element(&self.slot(buffer.as_str())?.element) {
                    return Err(bytes::runtime_sized_use(&format!("a load from `{buffer}`")));
                }
                let proven = trusted || self.proven_loads.contains(&(expr as *const Expr));
                self.put_load(buffer.as_str(), index, proven)
            }
            Expr::BufLen { buffer } => self.put_buf_len(buffer.as_str()),
            Expr::InvocationId { axis } => self.id_axis(*axis, |ids| &ids.global),
            Expr::WorkgroupId { axis } => self.id_axis(*axis, |ids| &ids.group),
            Expr::LocalId { axis } => self.id_axis(*axis, |ids| &ids.local),
            Expr::BinOp { op, left, right }
                if self.is_bytes_view(left) || self.is_bytes_view(right) =>
            {
                self.put_bytes_operand(*op, left, right)
            }
            Expr::BinOp { op, left, right } => {
                let left_val = self.put_expr(left)?;
                if let Some(quotient) = self.put_div_by_literal(*op, left_val, right) {
                    return Ok(quotient);
                }
                let right_val = self.put_expr(right)?;
                let (left_val, right_val) =
                    self.unfoldable_tautology(*op, (left, left_val), (right, right_val));
                self.put_binop(*op, left_val, right_val)
            }
            Expr::UnOp { op, operand } => {
                let operand = self.put_expr(operand)?;
                self.put_unop(op, operand)
            }
            Expr::Select {
                cond,
                true_val,
                false_val,
            } => self.put_select(cond, true_val, false_val),
            Expr::Cast { target, value } => {
                let value = self.put_expr(value)?;
                self.put_cast(target, value)
            }
            Expr::Fma { a, b, c } => self.put_fma(a, b, c),
            Expr::Atomic { .. } if self.steps.is_some() && !self.operand_faults.is_empty() => {
                self.put_atomic_in_lane_order(expr)
            }
            Expr::Atomic { .. } => self.put_atomic(expr, true),
            // Every composite call was inlined (prepare.rs); what is left has no IR body.
            Expr::Call { op_id, .. } => Err(CodegenError::unsupported(
                format!("Expr::Call({op_id})"),
                "the op has no IR body registered in vyre's OperationRegistry (an unknown op, or an intrinsic with only a CPU implementation), so there is nothing to run on the GPU",
                "link the crate that registers the op's composition body, or express the operation in IR",
            )),
            Expr::BufferRef { buffer } => Err(CodegenError::unsupported(
                format!("Expr::BufferRef({buffer})"),
                "a buffer reference is only meaningful as an argument of a call that is inlined",
                "pass Expr::buffer_ref only as an Expr::Call argument of an op with an IR body",
            )),
            Expr::SubgroupBallot { .. }
            | Expr::SubgroupShuffle { .. }
            | Expr::SubgroupReduce { .. } => {
                let (value, faults) = self.put_subgroup_op(expr)?;
                self.record_operand_faults(faults);
                Ok(value)
            }
            Expr::SubgroupLocalId | Expr::SubgroupSize => {
                self.fault_always(DeviceFault::RejectedByReference);
                Ok(Val::new(ValKind::U32, self.imm_b32(0)))
            }
            Expr::Opaque(ext) => {
                // The reference fails when it evaluates one (it has no evaluator for
                // extensions) and runs programs that never reach it.
                self.fault_always(DeviceFault::RejectedByReference);
                let kind = match ext.result_type() {
                    Some(DataType::Bool) => ValKind::Bool,
                    Some(ty) => ValKind::of_load(&ty).unwrap_or(ValKind::U32),
                    None => ValKind::U32,
                };
                Ok(self.discarded_zero(kind))
            }
            _ => Err(CodegenError::unsupported(
                "an unknown Expr variant",
                "this vyre IR expression is newer than vyre-cuda",
                "upgrade vyre-cuda",
            )),
        }
    }

    /// A buffer index: the reference's `try_as_u32` of the value.
    pub(super) fn put_index(&mut self, index: &'p Expr) -> Result<Reg, CodegenError> {
        if self.is_bytes_view(index) {
            let view = self.put_bytes_view(index)?;
            return Ok(self.view_as_u32(view, DeviceFault::IndexNotU32));
        }
        let value = self.put_expr(index)?;
        self.u32_checked(value, DeviceFault::IndexNotU32)
    }

    fn put_var(&mut self, name: &'p str) -> Result<Val, CodegenError> {
        if self.byte_views.contains_key(name) {
            return Err(bytes::runtime_sized_use(&format!("variable `{name}`")));
        }
        let val = self
            .locals
            .get(name)
            .map(|local| local.val)
            .ok_or_else(|| {
                CodegenError::invalid(
                    format!("reference to undeclared variable `{name}`"),
                    "add a Let before this use",
                )
            })?;
        let val = self.snapshot_var(name, val);
        self.operand_var(name, val)
    }

    /// The operands of `op`, the zero of an unsigned tautology (`0 > y`, `0 <= y`,
    /// `y < 0`, `y >= 0`) passed through the opaque zero. ptxas 13.0 (sm_90) folds these as
    /// signed comparisons when it knows `y` is 0 or all ones (`-b`, `b * 0xFFFFFFFF`,
    /// `selp -1, 0` of a condition `b`): `0 > -1` came out true (fuzz seed
    /// 0xe65391424bfe6cd3).
    fn unfoldable_tautology(
        &mut self,
        op: BinOp,
        (left, left_val): (&Expr, Val),
        (right, right_val): (&Expr, Val),
    ) -> (Val, Val) {
        let opaque = |s: &mut Self, v: Val| Val::new(v.kind, s.opaque(v.reg));
        match op {
            BinOp::Gt | BinOp::Le if self.facts.is_unsigned_zero(left) => {
                (opaque(self, left_val), right_val)
            }
            BinOp::Lt | BinOp::Ge if self.facts.is_unsigned_zero(right) => {
                (left_val, opaque(self, right_val))
            }
            _ => (left_val, right_val),
        }
    }

    fn put_buf_len(&mut self, buffer: &str) -> Result<Val, CodegenError> {
        let slot = self.slot(buffer)?;
        let reg = self.w.reg(RegClass::B32);
        if let Some(counted) = slot.counted {
            match counted {
                Counted::Param(counted) => self.mov(reg, counted),
                Counted::Static(counted) => emit!(self.w, "mov.u32 {reg}, {counted}"),
            }
            return Ok(Val::new(ValKind::U32, reg));
        }
        // `len` counts addressed elements; the reference's `Buffer::len` may count more in
        // one (two 4-bit elements a byte), saturating at u32::MAX.
        let per_addressed = buf_len(&slot.element, u64::from(slot.stride));
        match slot.space {
            Space::Global { len, .. } => match per_addressed {
                1 => self.mov(reg, len),
                2 => {
                    let p = self.w.reg(RegClass::Pred);
                    emit!(self.w, "shl.b32 {reg}, {len}, 1");
                    emit!(self.w, "setp.ge.u32 {p}, {len}, 2147483648");
                    emit!(self.w, "selp.b32 {reg}, -1, {reg}, {p}");
                }
                other => {
                    return Err(CodegenError::invalid(
                        format!("buffer `{buffer}` counts {other} elements in each addressed one"),
                        "report this vyre-cuda bug",
                    ))
                }
            },
            Space::Shared { count, .. } => {
                let bytes = u64::from(count) * u64::from(slot.stride);
                let len = buf_len(&slot.element, bytes);
                emit!(self.w, "mov.u32 {reg}, {len}");
            }
        }
        Ok(Val::new(ValKind::U32, reg))
    }

    fn id_axis(&mut self, axis: u8, pick: impl Fn(&Ids) -> &[Reg; 3]) -> Result<Val, CodegenError> {
        let Some(reg) = pick(&self.ids).get(axis as usize).copied() else {
            return Err(CodegenError::invalid(
                format!("invocation/workgroup ID axis {axis} out of range"),
                "use axis 0, 1, or 2",
            ));
        };
        Ok(Val::new(ValKind::U32, reg))
    }

    fn put_select(
        &mut self,
        cond: &'p Expr,
        true_val: &'p Expr,
        false_val: &'p Expr,
    ) -> Result<Val, CodegenError> {
        let p = self.put_condition(cond)?;
        // The reference evaluates both arms (side effects included), then picks.
        let mut t = self.put_expr(true_val)?;
        let mut f = self.put_expr(false_val)?;
        // An f32 arm joins a half arm as a `Half` (no f32 value is the out-of-bounds mark);
        // an f64-held arm (a shuffle's value from an f64 lane) makes the other f64-held
        // (a half with its out-of-bounds flag, `half::half_as_wide`).
        let kind = match (t.kind, f.kind) {
            (ValKind::Half, ValKind::F32) | (ValKind::F32, ValKind::Half) => ValKind::Half,
            (ValKind::F64, ValKind::F32 | ValKind::Half)
            | (ValKind::F32 | ValKind::Half, ValKind::F64) => {
                (t, f) = (self.half_as_wide(t), self.half_as_wide(f));
                ValKind::F64
            }
            (t, _) => t,
        };
        if t.kind != f.kind && kind != ValKind::Half {
            return Err(CodegenError::unsupported(
                "Expr::Select with arms of different types",
                format!("arms are {} and {}", t.kind.name(), f.kind.name()),
                "Cast both arms to one type",
            ));
        }
        Ok(self.select_val(kind, p, t, f))
    }

    fn put_fma(&mut self, a: &'p Expr, b: &'p Expr, c: &'p Expr) -> Result<Val, CodegenError> {
        let a = self.put_expr(a)?;
        let b = self.put_expr(b)?;
        let c = self.put_expr(c)?;
        let (a, b, c) = (
            self.fma_operand(a),
            self.fma_operand(b),
            self.fma_operand(c),
        );
        if [a.kind, b.kind, c.kind] != [ValKind::F32; 3] {
            return Err(CodegenError::unsupported(
                "Expr::Fma on non-f32 operands",
                "fma is lowered for f32 operands only",
                "Cast the operands to f32",
            ));
        }
        let reg = self.w.reg(RegClass::F32);
        emit!(self.w, "fma.rn.f32 {reg}, {}, {}, {}", a.reg, b.reg, c.reg);
        Ok(Val::new(ValKind::F32, self.flush_subnormal(reg)))
    }

    /// An fma operand as the reference takes it: a float rounded to f32; under other
    /// lanes' variable types, where the validator's static check did not look, also a u32
    /// as the f32 with its bits (`Value::try_as_f32`; canonicalised: a subnormal flushed).
    fn fma_operand(&mut self, value: Val) -> Val {
        if value.kind != ValKind::U32 || !self.typing_elsewhere {
            return self.float_operand(value);
        }
        Val::new(ValKind::F32, self.bits_as_f32(value.reg))
    }

    pub(super) fn put_ballot(&mut self, cond: &'p Expr) -> Result<Val, CodegenError> {
        let cond = self.put_subgroup_operand(cond, ViewLaneUse::Condition)?;
        let p = self.truthy(cond);
        let p = self.sync_operand(p);
        let (reg, mask) = (self.b32(), self.subgroup_mask);
        emit!(self.w, "vote.sync.ballot.b32 {reg}, {p}, {mask}");
        Ok(Val::new(ValKind::U32, reg))
    }
}
