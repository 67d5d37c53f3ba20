//! Subgroup ballot, shuffle and reduce with the reference's lane order.
//!
//! Subgroups are the 32-lane chunks of the linear local index, which is how hardware
//! forms warps; `analysis::lockstep` guarantees the whole chunk is converged at the
//! operation and reads what the reference reads (returned lanes included, see `returned`).
//! Reductions fold lane 0 upward from the operator's identity, exactly as the reference
//! does (order matters for f32), except for the integer operators `redux.sync` computes
//! exactly on sm_80+.

use super::bytes::ViewLaneUse;
use super::{Lowerer, Val};
use crate::codegen::fault::DeviceFault;
use crate::codegen::kind::ValKind;
use crate::codegen::writer::{emit, Reg, RegClass};
use crate::codegen::CodegenError;
use vyre_foundation::ir::{BinOp, Expr, SubgroupReduceOp};

fn unknown_reduce(op: SubgroupReduceOp) -> CodegenError {
    CodegenError::unsupported(
        format!("SubgroupReduce::{op:?}"),
        "this reduction operator is newer than vyre-cuda",
        "upgrade vyre-cuda",
    )
}

impl<'p> Lowerer<'p> {
    /// The value of subgroup operation `op`, its operands' faults collected by the caller
    /// (`returned::put_subgroup_op`).
    pub(super) fn put_subgroup_value(&mut self, op: &'p Expr) -> Result<Val, CodegenError> {
        match op {
            Expr::SubgroupBallot { cond } => self.put_ballot(cond),
            Expr::SubgroupShuffle { value, lane } => {
                let value = self.put_subgroup_operand(value, ViewLaneUse::Shuffled)?;
                let lane = self.put_subgroup_operand(lane, ViewLaneUse::Lane)?;
                self.put_shuffle(value, lane)
            }
            Expr::SubgroupReduce { op, value } => {
                let value = self.put_subgroup_operand(value, ViewLaneUse::Reduced)?;
                self.put_subgroup_reduce(*op, value)
            }
            _ => Err(CodegenError::invalid(
                "a subgroup operation that is not one",
                "report this vyre-cuda bug",
            )),
        }
    }

    /// A subgroup operand's lane value; a view (a bytes load) as `wanted` takes it.
    pub(super) fn put_subgroup_operand(
        &mut self,
        operand: &'p Expr,
        wanted: ViewLaneUse,
    ) -> Result<Val, CodegenError> {
        let several = self.several_typed_vars(operand);
        if !several.is_empty() {
            return self.put_typed_lanes(operand, wanted, several);
        }
        self.put_one_typing_operand(operand, wanted)
    }

    /// [`Self::put_subgroup_operand`] where every lane holds the operand's variables with
    /// the types they have here.
    pub(super) fn put_one_typing_operand(
        &mut self,
        operand: &'p Expr,
        wanted: ViewLaneUse,
    ) -> Result<Val, CodegenError> {
        if self.is_bytes_view(operand) {
            return self.put_view_lane_operand(operand, wanted);
        }
        self.put_lane_operand(operand)
    }

    pub(super) fn put_shuffle(&mut self, value: Val, lane: Val) -> Result<Val, CodegenError> {
        let value = self.half_lane(value);
        if !matches!(value.kind, ValKind::U32 | ValKind::F32 | ValKind::F64) {
            return Ok(self.uncombined_lanes(value));
        }
        let source = self.u32_checked(lane, DeviceFault::SubgroupLaneNotU32)?;
        let source = self.sync_operand(source);
        let v = self.sync_operand(value.reg);
        let (lanes, mask) = (self.subgroup_lanes, self.subgroup_mask);
        let d = self.w.reg(value.kind.reg_class());
        let present = self.pred();
        if value.kind == ValKind::F64 {
            // The reference hands the source lane's f64 over whole: both words.
            let (lo, hi) = (self.b32(), self.b32());
            emit!(self.w, "mov.b64 {{{lo}, {hi}}}, {v}");
            emit!(self.w, "shfl.sync.idx.b32 {lo}, {lo}, {source}, 31, {mask}");
            emit!(self.w, "shfl.sync.idx.b32 {hi}, {hi}, {source}, 31, {mask}");
            emit!(self.w, "mov.b64 {d}, {{{lo}, {hi}}}");
        } else {
            emit!(self.w, "shfl.sync.idx.b32 {d}, {v}, {source}, 31, {mask}");
        }
        // A source lane outside the subgroup reads 0 in the reference.
        emit!(self.w, "setp.lt.u32 {present}, {source}, {lanes}");
        let (ty, zero) = (d.class().ty(), d.class().zero());
        emit!(self.w, "selp.{ty} {d}, {d}, {zero}, {present}");
        Ok(Val::new(value.kind, d))
    }

    pub(super) fn put_subgroup_reduce(
        &mut self,
        op: SubgroupReduceOp,
        value: Val,
    ) -> Result<Val, CodegenError> {
        let mask = self.subgroup_mask;
        let value = self.half_lane(value);
        // f64 lanes fold as the f32s they round to, which may be subnormal: the reference
        // canonicalises each partial result, which the f32 fold (over canonical lanes)
        // need not do.
        let subnormal_lanes = value.kind == ValKind::F64;
        let value = self.f64_lane_as_f32(value);
        match value.kind {
            ValKind::U32 => {
                // `redux.sync` (sm_80+) computes all but Mul exactly.
                let (identity, binop, redux) = match op {
                    SubgroupReduceOp::Add => (0, BinOp::Add, Some("add.u32")),
                    SubgroupReduceOp::Mul => (1, BinOp::Mul, None),
                    SubgroupReduceOp::Min => (u32::MAX, BinOp::Min, Some("min.u32")),
                    SubgroupReduceOp::Max => (0, BinOp::Max, Some("max.u32")),
                    SubgroupReduceOp::And => (u32::MAX, BinOp::BitAnd, Some("and.b32")),
                    SubgroupReduceOp::Or => (0, BinOp::BitOr, Some("or.b32")),
                    SubgroupReduceOp::Xor => (0, BinOp::BitXor, Some("xor.b32")),
                    other => return Err(unknown_reduce(other)),
                };
                if let Some(redux) = redux.filter(|_| self.sm >= 80) {
                    let (d, v) = (self.b32(), self.sync_operand(value.reg));
                    emit!(self.w, "redux.sync.{redux} {d}, {v}, {mask}");
                    return Ok(Val::new(ValKind::U32, d));
                }
                let acc = Val::new(ValKind::U32, self.imm_b32(identity));
                self.fold_lanes(acc, value, binop, false)
            }
            ValKind::F32 => {
                let (identity, binop) = match op {
                    SubgroupReduceOp::Add => (0.0f32, BinOp::Add),
                    SubgroupReduceOp::Mul => (1.0, BinOp::Mul),
                    SubgroupReduceOp::Min => (f32::INFINITY, BinOp::Min),
                    SubgroupReduceOp::Max => (f32::NEG_INFINITY, BinOp::Max),
                    SubgroupReduceOp::And | SubgroupReduceOp::Or | SubgroupReduceOp::Xor => {
                        return Err(CodegenError::unsupported(
                            format!("SubgroupReduce::{op:?} of f32 lanes"),
                            "bitwise subgroup reductions require integer lanes",
                            "use an integer value or Add/Mul/Min/Max",
                        ))
                    }
                    other => return Err(unknown_reduce(other)),
                };
                let reg = self.f32_const(identity.to_bits());
                self.fold_lanes(Val::new(ValKind::F32, reg), value, binop, subnormal_lanes)
            }
            _ => Ok(self.uncombined_lanes(value)),
        }
    }

    /// An f64 lane rounded to the f32 the reference folds (`lane as f32`: round to
    /// nearest, subnormals kept; the fold canonicalises each partial result).
    fn f64_lane_as_f32(&mut self, value: Val) -> Val {
        if value.kind != ValKind::F64 {
            return value;
        }
        let f = self.w.reg(RegClass::F32);
        emit!(self.w, "cvt.rn.f32.f64 {f}, {}", value.reg);
        Val::new(ValKind::F32, f)
    }

    /// Lanes the reference does not combine (only u32 and f32 lanes, f64 and in-bounds
    /// halves counting as f32): it fails the dispatch when it reaches the operation, so
    /// the operation records that fault where it runs; its value (zero) is discarded.
    fn uncombined_lanes(&mut self, value: Val) -> Val {
        self.fault_always(DeviceFault::SubgroupLanesNotCombinable);
        self.discarded_zero(value.kind)
    }

    /// A half lane value as the f32 it is; the reference fails the whole collective when a
    /// lane holds an out-of-bounds half load's bytes, as a half or beside an f64-held value
    /// (that lane records the fault).
    pub(super) fn half_lane(&mut self, value: Val) -> Val {
        match value.kind {
            ValKind::Half => self.float_operand(value),
            _ => {
                self.fault_half_bytes(value);
                value
            }
        }
    }

    /// `op(acc, lane)` on f32s that may be subnormal, rounded and then canonicalised as
    /// the reference's `canonical_f32(op.combine_f32(acc, lane))` (no `.ftz`: that would
    /// flush a subnormal operand first).
    fn combine_exact_f32(&mut self, op: BinOp, acc: Reg, lane: Reg) -> Result<Reg, CodegenError> {
        let inst = match op {
            BinOp::Add => "add.rn.f32",
            BinOp::Mul => "mul.rn.f32",
            BinOp::Min => "min.f32",
            BinOp::Max => "max.f32",
            _ => {
                return Err(CodegenError::invalid(
                    "a subgroup reduction of f64 lanes by a non-float operator",
                    "report this vyre-cuda bug",
                ))
            }
        };
        let d = self.w.reg(RegClass::F32);
        emit!(self.w, "{inst} {d}, {acc}, {lane}");
        Ok(self.flush_subnormal(d))
    }

    /// `acc = op(acc, lane[k])` for k = 0, 1, ... over the lanes present, in order. With
    /// `flush` (f64 lanes rounded to f32, possibly subnormal), each step combines with
    /// `combine_exact_f32`.
    fn fold_lanes(
        &mut self,
        acc: Val,
        value: Val,
        op: BinOp,
        flush: bool,
    ) -> Result<Val, CodegenError> {
        let (lanes, mask) = (self.subgroup_lanes, self.subgroup_mask);
        let v = self.sync_operand(value.reg);
        let result = self.w.reg(acc.kind.reg_class());
        self.mov(result, acc.reg);
        for k in 0..32u32 {
            let lane_k = self.w.reg(value.kind.reg_class());
            emit!(self.w, "shfl.sync.idx.b32 {lane_k}, {v}, {k}, 31, {mask}");
            let combined = match flush {
                true => Val::new(ValKind::F32, self.combine_exact_f32(op, result, lane_k)?),
                false => {
                    self.put_binop(op, Val::new(acc.kind, result), Val::new(value.kind, lane_k))?
                }
            };
            let present = self.pred();
            emit!(self.w, "setp.lt.u32 {present}, {k}, {lanes}");
            let ty = result.class().ty();
            emit!(self.w, "@{present} mov.{ty} {result}, {}", combined.reg);
        }
        Ok(Val::new(acc.kind, result))
    }
}
