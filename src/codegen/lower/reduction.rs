//! Atomics whose returned value is never read, lowered as `red` (no result round trip)
//! and, on sm_80+, aggregated across the warp when every active lane targets the same
//! element: one `redux.sync` combines the lanes' operands and one lane issues the `red`.
//!
//! Why this is exact: the reference runs invocations one at a time and ignores the
//! ordering field, so the final contents of the target are the fold of every lane's
//! operand in some order. The aggregated operators (wrapping u32 add, unsigned min/max,
//! and/or/xor) are associative and commutative on u32, so any grouping gives the same
//! bits. `Exchange` and `CompareExchange` are order-dependent and keep their `atom`. The
//! old value is never read (the `Let` binding it is never referenced), so what a lane
//! would have observed is unobservable; a program that reads the target again within the
//! same dispatch without a barrier races with the other lanes' atomics in the reference
//! too (its result depends on lane order), so `relaxed` suffices for every ordering.
//!
//! One step further, for a buffer that the program touches *only* through such atomics,
//! all with one operator, in a program without barriers or async copies: the atomics on a
//! literal index fold into a per-workgroup partial in shared memory (initialised to the
//! operator's identity), and one lane applies each partial to global memory when the
//! workgroup ends (`Return` jumps there too). With one commutative, associative operator
//! and no reader of the buffer, when each contribution lands cannot be observed; the
//! partial is applied only when the index is in bounds, as the reference drops an
//! out-of-bounds atomic. This turns 2^19 same-address global reductions (one per warp,
//! serialised at one L2 slice) into one per workgroup.

use super::Lowerer;
use crate::codegen::writer::{emit, Reg};

/// Shared-memory array holding the per-workgroup partials.
pub(super) const PARTIALS: &str = "vyre_partial";

/// One per-workgroup partial: the global element it is applied to, and how.
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

/// An `atom` whose old value nobody reads, with its operands already lowered.
pub(super) struct DiscardedAtomic {
    /// `<op>.<type>` shared by `red` and `redux.sync` (see `analysis::atomics::commutative_opcode`).
    pub(super) opcode: &'static str,
    /// Element index (u32) and whether it is a literal (then trivially the same for all lanes).
    pub(super) index: Reg,
    pub(super) literal_index: bool,
    pub(super) value: Reg,
    pub(super) in_bounds: Reg,
    pub(super) addr: Reg,
    /// Shared-memory partial this atomic folds into instead (see the module docs).
    pub(super) partial: Option<u32>,
}

impl Lowerer<'_> {
    /// Emit `discarded` as per-lane `red`, or warp-aggregated where that is exact.
    pub(super) fn put_reduction(&mut self, discarded: DiscardedAtomic) {
        let DiscardedAtomic {
            opcode,
            index,
            literal_index,
            value,
            in_bounds,
            addr,
            partial,
        } = discarded;
        if let Some(slot) = partial {
            let target = format!("[{PARTIALS}+{}]", slot * 4);
            if self.sm < 80 {
                emit!(self.writer(), "red.shared.{opcode} {target}, {value}");
                return;
            }
            let active = self.b32();
            emit!(self.writer(), "activemask.b32 {active}");
            let combined = self.b32();
            emit!(
                self.writer(),
                "redux.sync.{opcode} {combined}, {value}, {active}"
            );
            let leader = self.lowest_active_lane(active);
            emit!(
                self.writer(),
                "@{leader} red.shared.{opcode} {target}, {combined}"
            );
            return;
        }
        if self.sm < 80 {
            // An out-of-bounds atomic writes nothing.
            emit!(
                self.writer(),
                "@{in_bounds} red.relaxed.gpu.global.{opcode} [{addr}], {value}"
            );
            return;
        }
        // The lanes converged here; they all execute the straight-line code below.
        let active = self.b32();
        emit!(self.writer(), "activemask.b32 {active}");
        let same = self.pred();
        if literal_index {
            emit!(self.writer(), "setp.eq.u32 {same}, 0, 0");
        } else {
            let matched = self.b32();
            emit!(
                self.writer(),
                "match.all.sync.b32 {matched}|{same}, {index}, {active}"
            );
        }
        let combined = self.b32();
        emit!(
            self.writer(),
            "redux.sync.{opcode} {combined}, {value}, {active}"
        );
        let leader = self.lowest_active_lane(active);
        emit!(self.writer(), "and.pred {leader}, {leader}, {same}");
        // Same index and buffer, so `in_bounds` agrees across the aggregated lanes.
        emit!(self.writer(), "and.pred {leader}, {leader}, {in_bounds}");
        emit!(
            self.writer(),
            "@{leader} red.relaxed.gpu.global.{opcode} [{addr}], {combined}"
        );
        let alone = self.pred();
        emit!(self.writer(), "not.pred {alone}, {same}");
        emit!(self.writer(), "and.pred {alone}, {alone}, {in_bounds}");
        emit!(
            self.writer(),
            "@{alone} red.relaxed.gpu.global.{opcode} [{addr}], {value}"
        );
    }
}

impl Lowerer<'_> {
    /// A predicate that holds on the lowest lane of `active`: no active lane below it.
    fn lowest_active_lane(&mut self, active: Reg) -> Reg {
        let below = self.b32();
        emit!(self.writer(), "mov.u32 {below}, %lanemask_lt");
        emit!(self.writer(), "and.b32 {below}, {below}, {active}");
        let leader = self.pred();
        emit!(self.writer(), "setp.eq.u32 {leader}, {below}, 0");
        leader
    }
}
