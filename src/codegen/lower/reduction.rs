//! Atomics whose returned value is never read, lowered as `red` and, on sm_80+, aggregated
//! across the warp (`redux.sync`, one lane issues the `red`) when every active lane targets
//! the same element. Exact because the reference runs lanes one at a time and ignores the
//! ordering: the aggregated operators (wrapping add, unsigned min/max, and/or/xor) are
//! associative and commutative on u32, the old value is unobservable, and a reader in the
//! same dispatch without a barrier races in the reference too, so `relaxed` suffices.
//! `Exchange` and `CompareExchange` keep their `atom`.
//!
//! A buffer touched *only* through such atomics with one operator, in a program without
//! barriers or async copies, folds its literal-index atomics into a per-workgroup partial in
//! shared memory that one lane applies (when in bounds) as the workgroup ends (`Return` jumps
//! there too): one global reduction per workgroup instead of one per warp.

use super::atomic::Operands;
use super::Lowerer;
use crate::codegen::writer::{emit, Reg};

/// Shared-memory array holding the per-workgroup partials.
pub(super) const PARTIALS: &str = "vyre_partial";

/// One per-workgroup partial: the global element it is applied to, and how.
#[derive(Clone, Copy)]
pub(super) struct Partial<'p> {
    pub(super) buffer: &'p str,
    pub(super) index: u32,
    pub(super) opcode: &'static str,
}

impl Partial<'_> {
    /// The operator's identity: the partial's starting value.
    pub(super) fn identity(&self) -> u32 {
        match self.opcode {
            "and.b32" | "min.u32" => u32::MAX,
            _ => 0,
        }
    }
}

impl Lowerer<'_> {
    /// Emit an atomic whose old value nobody reads as per-lane `red`, or warp-aggregated
    /// where that is exact. `opcode` is shared by `red` and `redux.sync` (see
    /// `analysis::atomics::commutative_opcode`); a literal index is trivially the same for
    /// all lanes; `partial` is the shared-memory partial it folds into instead.
    pub(super) fn put_reduction(
        &mut self,
        opcode: &'static str,
        operands: &Operands,
        literal_index: bool,
        partial: Option<u32>,
    ) {
        let Operands {
            index,
            value,
            in_bounds,
            addr,
            ..
        } = *operands;
        if let Some(slot) = partial {
            let target = format!("[{PARTIALS}+{}]", slot * 4);
            if self.sm < 80 {
                emit!(self.w, "red.shared.{opcode} {target}, {value}");
                return;
            }
            let active = self.b32();
            emit!(self.w, "activemask.b32 {active}");
            let (combined, leader) = self.warp_combine(opcode, value, active);
            emit!(self.w, "@{leader} red.shared.{opcode} {target}, {combined}");
            return;
        }
        if self.sm < 80 {
            // An out-of-bounds atomic writes nothing.
            self.global_red(in_bounds, opcode, addr, value);
            return;
        }
        // The lanes converged here; they all execute the straight-line code below.
        let active = self.b32();
        emit!(self.w, "activemask.b32 {active}");
        let same = self.pred();
        if literal_index {
            emit!(self.w, "setp.eq.u32 {same}, 0, 0");
        } else {
            let (matched, index) = (self.b32(), self.sync_operand(index));
            emit!(
                self.w,
                "match.all.sync.b32 {matched}|{same}, {index}, {active}"
            );
        }
        let (combined, leader) = self.warp_combine(opcode, value, active);
        emit!(self.w, "and.pred {leader}, {leader}, {same}");
        // Same index and buffer, so `in_bounds` agrees across the aggregated lanes.
        emit!(self.w, "and.pred {leader}, {leader}, {in_bounds}");
        self.global_red(leader, opcode, addr, combined);
        let alone = self.pred();
        emit!(self.w, "not.pred {alone}, {same}");
        emit!(self.w, "and.pred {alone}, {alone}, {in_bounds}");
        self.global_red(alone, opcode, addr, value);
    }

    /// `red` of `value` into the global word at `addr` where `guard` holds.
    pub(super) fn global_red(&mut self, guard: Reg, opcode: &str, addr: Reg, value: Reg) {
        emit!(
            self.w,
            "@{guard} red.relaxed.gpu.global.{opcode} [{addr}], {value}"
        );
    }

    /// `value` combined over the lanes of `active` (`redux.sync`), and a predicate that
    /// holds on the lowest of them (no active lane below it), which issues the `red`.
    fn warp_combine(&mut self, opcode: &str, value: Reg, active: Reg) -> (Reg, Reg) {
        let (combined, value) = (self.b32(), self.sync_operand(value));
        emit!(self.w, "redux.sync.{opcode} {combined}, {value}, {active}");
        let below = self.b32();
        emit!(self.w, "mov.u32 {below}, %lanemask_lt");
        emit!(self.w, "and.b32 {below}, {below}, {active}");
        let leader = self.pred();
        emit!(self.w, "setp.eq.u32 {leader}, {below}, 0");
        (combined, leader)
    }
}
