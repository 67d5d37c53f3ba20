//! `Expr::Atomic`: `atom` with the reference's operand checks, or, when nobody reads the
//! old value, a `red` (see `reduction`).

use super::memory::{BufferSlot, Space};
use super::{Lowerer, Val};
use crate::codegen::analysis::atomics::commutative_opcode;
use crate::codegen::analysis::steps::shares_an_atomic_buffer;
use crate::codegen::fault::DeviceFault;
use crate::codegen::kind::ValKind;
use crate::codegen::writer::{emit, Label, Reg, RegClass};
use crate::codegen::CodegenError;
use vyre_foundation::ir::{AtomicOp, Expr, MemoryOrdering};

/// An atomic, checked, with its operands lowered.
struct Prepared<'p> {
    op: AtomicOp,
    buffer: &'p str,
    literal_index: Option<u32>,
    ordering: MemoryOrdering,
    opcode: &'static str,
    operands: Operands,
}

/// An atomic's lowered operands and the element's address.
pub(super) struct Operands {
    pub(super) index: Reg,
    pub(super) expected: Option<Reg>,
    pub(super) value: Reg,
    pub(super) in_bounds: Reg,
    pub(super) addr: Reg,
}

impl<'p> Lowerer<'p> {
    /// Lower `atomic` (an `Expr::Atomic`); `result_used` is false when nobody reads the
    /// old value, which allows a (warp- or workgroup-aggregated) `red`.
    pub(super) fn put_atomic(
        &mut self,
        atomic: &'p Expr,
        result_used: bool,
    ) -> Result<Val, CodegenError> {
        let prepared = self.prepare_atomic(atomic)?;
        let (buffer, literal_index) = (prepared.buffer, prepared.literal_index);
        let old = self.w.reg(RegClass::B32);
        // An out-of-bounds atomic returns 0 and writes nothing.
        emit!(self.w, "mov.u32 {old}, 0");
        match commutative_opcode(prepared.op).filter(|_| !result_used) {
            Some(opcode) => {
                let partial = literal_index
                    .filter(|_| self.facts.partial_buffers.contains(buffer))
                    .map(|index| self.partial_slot(buffer, index, opcode));
                self.put_reduction(opcode, &prepared.operands, literal_index.is_some(), partial);
            }
            None => self.put_atom(prepared.opcode, prepared.ordering, old, &prepared.operands),
        }
        Ok(Val::new(ValKind::U32, old))
    }

    /// `atomic` inside a subgroup operand of a step machine (whose rounds are then serial,
    /// see `analysis::steps`): the reference evaluates the operand once for every lane of
    /// the subgroup, lane 0 upward, and each evaluation runs the atomic on the shared
    /// memory. Every lane computes its operands, then the lanes run their atomics one
    /// after another in lane order, each seeing the ones before. Inside an operand that
    /// runs in lane turns (`put_lane_operand`) the atomic runs in its lane's turn only.
    pub(super) fn put_atomic_in_lane_order(
        &mut self,
        atomic: &'p Expr,
    ) -> Result<Val, CodegenError> {
        let mut prepared = self.prepare_atomic(atomic)?;
        let old = self.w.reg(RegClass::B32);
        emit!(self.w, "mov.u32 {old}, 0");
        let in_bounds = prepared.operands.in_bounds;
        let mine = self.pred();
        if let Some(turn) = self.operand_turn {
            emit!(self.w, "and.pred {mine}, {in_bounds}, {turn}");
            prepared.operands.in_bounds = mine;
            self.put_atom(prepared.opcode, prepared.ordering, old, &prepared.operands);
            return Ok(Val::new(ValKind::U32, old));
        }
        let (lane, turn, top) = self.put_turns_start();
        emit!(
            self.w,
            "setp.eq.and.u32 {mine}, {lane}, {turn}, {in_bounds}"
        );
        prepared.operands.in_bounds = mine;
        self.put_atom(prepared.opcode, prepared.ordering, old, &prepared.operands);
        emit!(self.w, "bar.warp.sync {}", self.subgroup_mask);
        self.put_next_turn(turn, top);
        Ok(Val::new(ValKind::U32, old))
    }

    /// Subgroup operand `operand` of a step machine, evaluated as the reference does when
    /// two of its atomics act on one buffer: lane by lane, every atomic of lane k (in the
    /// operand's order) before lane k + 1's. Each turn the whole warp evaluates the operand
    /// and only the turn's lane runs the atomics (a subgroup operation nested in the operand
    /// runs whole in every turn, `leave_operand_turn`); a lane keeps the value and the
    /// faults of its own turn. Other operands are evaluated at once (`put_expr`).
    pub(super) fn put_lane_operand(&mut self, operand: &'p Expr) -> Result<Val, CodegenError> {
        if self.steps.is_none() || self.operand_turn.is_some() || !shares_an_atomic_buffer(operand)
        {
            return self.put_expr(operand);
        }
        let (mine, first) = (self.pred(), self.pred());
        let (lane, turn, top) = self.put_turns_start();
        emit!(self.w, "setp.eq.u32 {mine}, {lane}, {turn}");
        emit!(self.w, "setp.eq.u32 {first}, {turn}, 0");
        self.operand_turn = Some(mine);
        self.operand_faults.push(Vec::new());
        let value = self.put_expr(operand);
        let raised = self.operand_faults.pop().unwrap_or_default();
        self.operand_turn = None;
        let value = value?;
        let kept = self.keep_in_turn(value, mine);
        for (p, fault) in raised {
            // Raised in any turn of this lane's own: cleared in the first turn, then ORed.
            let (any, here) = (self.pred(), self.pred());
            emit!(self.w, "@{first} setp.ne.u32 {any}, 0, 0");
            emit!(self.w, "and.pred {here}, {p}, {mine}");
            emit!(self.w, "or.pred {any}, {any}, {here}");
            self.fault_if(any, fault);
        }
        emit!(self.w, "bar.warp.sync {}", self.subgroup_mask);
        self.put_next_turn(turn, top);
        Ok(kept)
    }

    /// Leave the lane turn of an enclosing operand (`put_lane_operand`) for a subgroup
    /// operation nested in it: the reference evaluates that operation whole within the
    /// turn's lane's evaluation, every lane's operand (its atomics in lane order too,
    /// `put_atomic_in_lane_order`) on the memory the turn's atomics so far left, which a
    /// warp barrier makes visible to the other lanes. The enclosing turn, to restore.
    pub(super) fn leave_operand_turn(&mut self) -> Option<Reg> {
        let turn = self.operand_turn.take()?;
        emit!(self.w, "bar.warp.sync {}", self.subgroup_mask);
        Some(turn)
    }

    /// A copy of `value` written in the turn `mine` holds (both words of a wide value).
    fn keep_in_turn(&mut self, value: Val, mine: Reg) -> Val {
        let kept = Val::new(value.kind, self.w.reg(value.reg.class()));
        emit!(
            self.w,
            "@{mine} mov.{} {}, {}",
            kept.reg.class().ty(),
            kept.reg,
            value.reg
        );
        if let Some(words) = self.upper.get(&value.reg).cloned() {
            let kept_words = (words.into_iter())
                .map(|word| {
                    let kept_word = self.w.reg(RegClass::B64);
                    emit!(self.w, "@{mine} mov.b64 {kept_word}, {word}");
                    kept_word
                })
                .collect();
            self.upper.insert(kept.reg, kept_words);
        }
        if let Some(filled) = self.filled.get(&value.reg).copied() {
            let kept_filled = self.b32();
            emit!(self.w, "@{mine} mov.b32 {kept_filled}, {filled}");
            self.filled.insert(kept.reg, kept_filled);
        }
        kept
    }

    /// The start of a loop giving each lane of the subgroup a turn, lane 0 upward: the
    /// lane's index, the turn counter (0) and the label each turn starts at.
    fn put_turns_start(&mut self) -> (Reg, Reg, Label) {
        let (lane, turn, top) = (self.b32(), self.b32(), self.w.label());
        emit!(self.w, "and.b32 {lane}, {}, 31", self.ids.linear_local);
        emit!(self.w, "mov.u32 {turn}, 0");
        self.w.put_label(top);
        (lane, turn, top)
    }

    /// The next lane's turn: `turn += 1`, back to `top` while a lane of the subgroup is
    /// left (the loop is the same in every lane).
    pub(super) fn put_next_turn(&mut self, turn: Reg, top: Label) {
        let more = self.pred();
        emit!(self.w, "add.u32 {turn}, {turn}, 1");
        emit!(
            self.w,
            "setp.lt.u32 {more}, {turn}, {}",
            self.subgroup_lanes
        );
        let more = self.branch_pred(more);
        emit!(self.w, "@{more} bra {top}");
    }

    /// `atomic`'s parts, checked, and its operands lowered in the reference's order.
    fn prepare_atomic(&mut self, atomic: &'p Expr) -> Result<Prepared<'p>, CodegenError> {
        let Expr::Atomic {
            op,
            buffer,
            index,
            expected,
            value,
            ordering,
        } = atomic
        else {
            return Err(CodegenError::invalid(
                "an atomic lowering called on a non-atomic expression",
                "report this vyre-cuda bug",
            ));
        };
        let (op, buffer, expected) = (*op, buffer.as_str(), expected.as_deref());
        let opcode = atomic_opcode(op)?;
        check_expected(op, expected.is_some())?;
        let slot = self.atomic_target(buffer)?;
        let literal_index = match &**index {
            Expr::LitU32(index) => Some(*index),
            _ => None,
        };
        let operands = self.atomic_operands(&slot, index, expected, value)?;
        Ok(Prepared {
            op,
            buffer,
            literal_index,
            ordering: *ordering,
            opcode,
            operands,
        })
    }

    /// The slot of an atomic's target: a 4-byte storage buffer.
    fn atomic_target(&self, buffer: &str) -> Result<BufferSlot, CodegenError> {
        let slot = self.slot(buffer)?;
        let Space::Global { .. } = slot.space else {
            return Err(CodegenError::invalid(
                format!("atomic target `{buffer}` is workgroup memory"),
                "atomics only support ReadWrite storage buffers",
            ));
        };
        if !slot.storage || slot.stride != 4 {
            return Err(CodegenError::unsupported(
                format!("atomic on a {} buffer", slot.element),
                "atomics are lowered for 4-byte storage elements",
                "use a u32 storage buffer",
            ));
        }
        Ok(slot)
    }

    /// Index, expected value and operand, in the reference's evaluation order, and the
    /// element's address.
    fn atomic_operands(
        &mut self,
        slot: &BufferSlot,
        index: &'p Expr,
        expected: Option<&'p Expr>,
        value: &'p Expr,
    ) -> Result<Operands, CodegenError> {
        let index = self.put_index(index)?;
        let expected = match expected {
            Some(expr) => {
                let v = self.put_expr(expr)?;
                Some(self.u32_checked(v, DeviceFault::AtomicOperandNotU32)?)
            }
            None => None,
        };
        let value = self.put_expr(value)?;
        let value = self.u32_checked(value, DeviceFault::AtomicOperandNotU32)?;
        let (in_bounds, addr) = self.element_address(slot, index);
        Ok(Operands {
            index,
            expected,
            value,
            in_bounds,
            addr,
        })
    }

    /// An `atom` whose old value lands in `old`.
    fn put_atom(&mut self, opcode: &str, ordering: MemoryOrdering, old: Reg, operands: &Operands) {
        let sem = match ordering {
            MemoryOrdering::Relaxed => "relaxed",
            MemoryOrdering::Acquire => "acquire",
            MemoryOrdering::Release => "release",
            _ => "acq_rel",
        };
        let Operands {
            expected,
            value,
            in_bounds,
            addr,
            ..
        } = operands;
        let expected = expected.map(|e| format!("{e}, ")).unwrap_or_default();
        emit!(
            self.w,
            "@{in_bounds} atom.{sem}.gpu.global.{opcode} {old}, [{addr}], {expected}{value}"
        );
    }
}

fn atomic_opcode(op: AtomicOp) -> Result<&'static str, CodegenError> {
    match (commutative_opcode(op), op) {
        (Some(opcode), _) => Ok(opcode),
        (None, AtomicOp::Exchange) => Ok("exch.b32"),
        (None, AtomicOp::CompareExchange) => Ok("cas.b32"),
        (None, other) => Err(CodegenError::unsupported(
            format!("AtomicOp::{other:?}"),
            "the reference defines no semantics for this atomic",
            "use Add, Or, And, Xor, Min, Max, Exchange, CompareExchange or LruUpdate",
        )),
    }
}

/// Exactly compare-exchange carries an expected value.
fn check_expected(op: AtomicOp, has_expected: bool) -> Result<(), CodegenError> {
    match (op, has_expected) {
        (AtomicOp::CompareExchange, false) => Err(CodegenError::invalid(
            "compare-exchange atomic is missing its expected value",
            "set Expr::Atomic.expected for AtomicOp::CompareExchange",
        )),
        (AtomicOp::CompareExchange, true) | (_, false) => Ok(()),
        (_, true) => Err(CodegenError::invalid(
            "non-compare-exchange atomic includes an expected value",
            "use Expr::Atomic.expected only with AtomicOp::CompareExchange",
        )),
    }
}
