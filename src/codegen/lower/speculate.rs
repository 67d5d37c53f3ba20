//! Small branches in loops run as straight-line code: `if c { acc = acc + x[i] * x[i] }`
//! evaluates its body in every iteration, its assignments and stores guarded by `c`.
//!
//! A branch in a loop body stops ptxas from unrolling the loop, so each iteration's load
//! waits out the memory latency alone: the strided reductions of vyre-libs' norms and
//! softmax (`if idx < n { acc += f(x[idx]) }`) ran one load in flight per thread. Without
//! the branch ptxas unrolls the loop and issues the loads of several iterations before
//! their uses (SASS of `nn::norm::rms_norm`, ptxas 13.0 sm_90).
//!
//! Evaluating a body the reference skips must change nothing it observes: its loads read
//! checked addresses (out of bounds, the zero page) and have no effect; every fault a
//! speculated expression records is guarded by the condition (`fault_if` through
//! [`Lowerer::guarded`]); stores and assignments to variables outside the body are
//! guarded; `Let`s bind only in the body's own scope. Bodies with an effect that cannot be
//! guarded so (atomics, subgroup operations, bytes views and their heap snapshots,
//! async copies, barriers, nested control flow) keep their branch, as do contexts that
//! track lanes across statements (step machines, returned lanes, replicated and vector
//! entries).

use super::memory::{BufferSlot, Space};
use super::Lowerer;
use crate::codegen::libm::Libm;
use crate::codegen::visit::{any_expr, for_each_child, is_constant};
use crate::codegen::writer::{emit, Reg, RegClass};
use crate::codegen::CodegenError;
use vyre_foundation::ir::{DataType, Expr, Node};

/// The most expression nodes a speculated branch may hold, condition included: its work
/// is done in every iteration, taken or not.
const MAX_NODES: usize = 48;

impl<'p> Lowerer<'p> {
    /// Whether `if cond { then }` (no else) runs as straight-line code here.
    pub(super) fn speculates(&self, cond: &'p Expr, then: &'p [Node], otherwise: &[Node]) -> bool {
        let context = self.loop_depth > 0
            && self.speculation.is_none()
            && self.steps.is_none()
            && self.returned.is_none()
            && self.lanes.is_none()
            && self.schedule.is_none()
            // A branch anchors pending subgroup results (`checks::anchor`).
            && self.unanchored.is_empty();
        if !context || !otherwise.is_empty() || then.is_empty() || is_constant(cond) {
            return false;
        }
        let mut exprs = vec![cond];
        for node in then {
            match node {
                Node::Let { value, .. } if !self.is_bytes_view(value) => exprs.push(value),
                Node::Assign { name, value } if self.guardable_local(name.as_str()) => {
                    exprs.push(value)
                }
                Node::Store {
                    buffer,
                    index,
                    value,
                } if self.plain_buffer(buffer.as_str()) && !self.is_bytes_view(value) => {
                    exprs.extend([index, value])
                }
                _ => return false,
            }
        }
        exprs.iter().map(|e| expr_nodes(e)).sum::<usize>() <= MAX_NODES
            && exprs
                .iter()
                .any(|e| any_expr(e, &|x| matches!(x, Expr::Load { .. })))
            && !exprs.iter().any(|e| any_expr(e, &|x| !self.speculable(x)))
    }

    /// The branch `if cond { then }` as straight-line code (see the module's header).
    pub(super) fn put_speculated(
        &mut self,
        cond: &'p Expr,
        then: &'p [Node],
    ) -> Result<(), CodegenError> {
        let cond = self.put_expr(cond)?;
        let taken = self.truthy(cond);
        self.speculation = Some(taken);
        let result = self.put_scoped_block(then);
        self.speculation = None;
        result
    }

    /// `p`, and while a speculated branch is lowered, its condition too: what `p` guards
    /// (a fault, a store) happens only where the reference takes the branch.
    pub(super) fn guarded(&mut self, p: Reg) -> Reg {
        let Some(taken) = self.speculation else {
            return p;
        };
        let both = self.pred();
        emit!(self.w, "and.pred {both}, {p}, {taken}");
        both
    }

    /// In a speculated branch, where a global store writes: `addr` where `in_bounds`
    /// (which includes the branch's condition) holds, else the module's store sink. A
    /// predicated store kept ptxas from unrolling the loop (`nn::norm::rms_norm`'s
    /// write-back loop, ptxas 13.0 sm_90); an unpredicated one to a selected address does
    /// not. Workgroup stores stay predicated.
    pub(super) fn sunk_store_address(
        &mut self,
        slot: &BufferSlot,
        in_bounds: Reg,
        addr: Reg,
    ) -> Option<Reg> {
        if self.speculation.is_none() || !matches!(slot.space, Space::Global { .. }) {
            return None;
        }
        let sink = *self
            .store_sink
            .get_or_insert_with(|| self.w.reg(RegClass::B64));
        let sunk = self.w.reg(RegClass::B64);
        emit!(self.w, "selp.b64 {sunk}, {addr}, {sink}, {in_bounds}");
        Some(sunk)
    }

    /// `dst = src` for an assignment: guarded in a speculated branch.
    pub(super) fn assign_reg(&mut self, dst: Reg, src: Reg) {
        match self.speculation {
            Some(taken) => emit!(self.w, "@{taken} mov.{} {dst}, {src}", dst.class().ty()),
            None => self.mov(dst, src),
        }
    }

    /// A variable an assignment in a speculated branch may write: one register (raw
    /// `Bytes` values, the only ones with companion registers, are not among the kinds),
    /// no bytes view.
    fn guardable_local(&self, name: &str) -> bool {
        use crate::codegen::kind::ValKind as K;
        let Some(local) = self.locals.get(name) else {
            return false;
        };
        !local.loop_var
            && !self.byte_views.contains_key(name)
            && matches!(
                local.val.kind,
                K::U32 | K::I32 | K::Bool | K::F32 | K::F64 | K::U64 | K::Half
            )
    }

    /// Whether `buffer`'s loads and stores are plain checked accesses of a 32-bit element.
    fn plain_buffer(&self, buffer: &str) -> bool {
        self.buffers.get(buffer).is_some_and(|slot| {
            matches!(slot.element, DataType::U32 | DataType::I32 | DataType::F32)
        })
    }

    /// Whether evaluating `expr` itself (not its children) has no effect but guarded faults.
    fn speculable(&self, expr: &Expr) -> bool {
        match expr {
            Expr::LitU32(_)
            | Expr::LitI32(_)
            | Expr::LitF32(_)
            | Expr::LitBool(_)
            | Expr::InvocationId { .. }
            | Expr::WorkgroupId { .. }
            | Expr::LocalId { .. }
            | Expr::SubgroupLocalId
            | Expr::SubgroupSize
            | Expr::BinOp { .. }
            | Expr::Select { .. }
            | Expr::Cast { .. }
            | Expr::Fma { .. } => true,
            // An inlined libm body is too much work to do where the branch is not taken.
            Expr::UnOp { op, .. } => Libm::for_unop(op).is_none(),
            Expr::Var(name) => !self.byte_views.contains_key(name.as_str()),
            Expr::Load { buffer, .. } | Expr::BufLen { buffer } => {
                self.plain_buffer(buffer.as_str())
            }
            _ => false,
        }
    }
}

/// The number of expression nodes in `expr`.
fn expr_nodes(expr: &Expr) -> usize {
    let mut count = 1;
    for_each_child(expr, &mut |child| count += expr_nodes(child));
    count
}
