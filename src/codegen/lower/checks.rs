//! Run-time checks: recording [`DeviceFault`]s where the reference raises an error, the
//! reference's truthiness and u32 conversion, and branch predicates ptxas cannot fold.

use super::{Lowerer, Val};
use crate::codegen::fault::DeviceFault;
use crate::codegen::kind::ValKind;
use crate::codegen::writer::{emit, Reg, RegClass};
use crate::codegen::CodegenError;

impl Lowerer<'_> {
    /// Record `fault` in the fault word when `p` holds (the first fault of a dispatch
    /// wins) and carry on: the dispatch fails, so what the lane computes afterwards is
    /// discarded, and callers substitute safe operands. Recording inline instead of
    /// branching to exit blocks also keeps clear of a ptxas 13.0 sm_90 miscompile that
    /// merged such blocks into a wrongly predicated `EXIT`.
    ///
    /// Inside a subgroup operand the fault is collected instead: it counts for the whole
    /// subgroup once evaluated (see `returned`). A lane that returned records nothing.
    pub(crate) fn fault_if(&mut self, p: Reg, fault: DeviceFault) {
        if let Some(raised) = self.operand_faults.last_mut() {
            raised.push((p, fault));
            return;
        }
        let p = self.running_only(p);
        let p = self.guarded(p);
        self.uses_fault_word = true;
        self.write_fault(&format!("@{p} "), fault);
        emit!(self.w, "or.pred {0}, {0}, {p}", self.faulted);
    }

    /// `{guard}atom.global.cas`: write `fault`'s code into the fault word unless an
    /// earlier fault is there.
    pub(super) fn write_fault(&mut self, guard: &str, fault: DeviceFault) {
        let (scratch, ptr, code) = (self.w.reg(RegClass::B32), self.fault_ptr, fault.code());
        emit!(
            self.w,
            "{guard}atom.global.cas.b32 {scratch}, [{ptr}], 0, {code}"
        );
    }

    /// Record `fault` and end the invocation when `p` holds. Only for predicates uniform
    /// across the workgroup, so no lane is left waiting at a later barrier.
    pub(super) fn fault_exit_if(&mut self, p: Reg, fault: DeviceFault) {
        self.uses_fault_word = true;
        let known = self.exit_faults.iter().find(|(f, _)| *f == fault);
        let label = known.map(|&(_, label)| label).unwrap_or_else(|| {
            let label = self.w.label();
            self.exit_faults.push((fault, label));
            label
        });
        let p = self.branch_pred(p);
        emit!(self.w, "@{p} bra {label}");
    }

    /// The predicate a branch or loop test steers by: `p` itself, or, in a program that
    /// calls libm `.func`s, `p` xor a predicate that is false at run time but opaque to
    /// ptxas. ptxas 12.9-13.5 (and the driver JIT, in-process) crash with SIGSEGV removing
    /// constant-folded dead code that holds a loop calling a `.func` with a two-exit loop
    /// (`vyre_libm_rem_pio2f`; `tests/fuzz_regressions/cpu-ptxas-crash-{1,2}-*.case`), so no
    /// branch or loop test of such a program may be foldable.
    ///
    /// The hidden predicate is `opaque zero == 16`, not `!= 0`: under `!= 0` ptxas would
    /// learn the opaque zero's value and fold what it guards, bringing back the
    /// miscompiles it prevents (`gpu-mismatch-97b6641b948d4a05.case`).
    pub(super) fn branch_pred(&mut self, p: Reg) -> Reg {
        match self.facts.calls_libm {
            true => self.opaque_pred(p),
            false => self.anchored_pred(p),
        }
    }

    /// `p`, or, after subgroup operations no branch steers by yet, `p` through the
    /// opaque predicate that depends on their results (see [`Self::anchor`]).
    pub(super) fn anchored_pred(&mut self, p: Reg) -> Reg {
        match self.unanchored.is_empty() {
            true => p,
            false => self.opaque_pred(p),
        }
    }

    /// `p` xor a predicate that is false at run time but opaque to ptxas (see
    /// [`Self::branch_pred`]), which also depends on the subgroup results not anchored yet;
    /// where there are such results, `p` is hidden first ([`Self::hide_constant`]): the
    /// emitter cannot tell every predicate ptxas folds (`buflen` of a workgroup buffer, a
    /// bounds check at a literal index), so it hides them all.
    pub(super) fn opaque_pred(&mut self, p: Reg) -> Reg {
        let p = match self.unanchored.is_empty() {
            true => p,
            false => self.hide_constant(p),
        };
        let never = self.pred();
        self.put_hidden(never, false);
        self.anchor(never);
        let out = self.pred();
        emit!(self.w, "xor.pred {out}, {p}, {never}");
        out
    }

    /// `p` xor the hidden `opaque zero == 16`: the same at run time, but not foldable
    /// where `p` is a constant to ptxas. ptxas 12.9-13.0 (sm_90) compile a branch steering by
    /// `true xor (hidden && subgroup result)` ([`Self::opaque_pred`] of a constant) whose
    /// taken side ends the kernel into an exit guarded with the wrong polarity: every lane
    /// took the other side (`tests/fuzz_regressions/
    /// gpu-error-constant-branch-after-a-ballot-takes-the-other-side.case`).
    fn hide_constant(&mut self, p: Reg) -> Reg {
        let (hidden, out) = (self.pred(), self.pred());
        self.put_hidden(hidden, false);
        emit!(self.w, "xor.pred {out}, {p}, {hidden}");
        out
    }

    /// Set `p` to `holds` through the opaque zero (`opaque zero != 16`, or `== 16` for
    /// false): its run-time value, which ptxas cannot fold (see [`Self::branch_pred`] for
    /// why 16 and not 0).
    fn put_hidden(&mut self, p: Reg, holds: bool) {
        let compare = if holds { "ne" } else { "eq" };
        emit!(self.w, "setp.{compare}.u32 {p}, {}, 16", self.opaque_zero);
    }

    /// Make the hidden predicate `never` depend on every subgroup result computed since
    /// the last branch. ptxas 13.0 (sm_90) may otherwise sink a warp-synchronous
    /// instruction whose result only a data-dependent branch reads into that branch: the
    /// lanes that took it wait in the `vote.sync`/`shfl.sync` for lanes that never come,
    /// and the warp hangs (`tests/fuzz_regressions/gpu-hang-vote-sunk-into-a-branch.case`:
    /// the fault vote of a subgroup reduction, sunk past the `If` that used it, in a
    /// kernel with a barrier in a loop). A branch steering by the result keeps the
    /// instruction above it, where every lane still runs.
    fn anchor(&mut self, never: Reg) {
        let results = std::mem::take(&mut self.unanchored);
        self.anchored.extend(&results);
        for r in results {
            match r.class() {
                RegClass::Pred => emit!(self.w, "and.pred {never}, {never}, {r}"),
                RegClass::B64 | RegClass::F64 => {
                    emit!(self.w, "setp.ne.and.b64 {never}, {r}, 0, {never}")
                }
                RegClass::B32 | RegClass::F32 => {
                    emit!(self.w, "setp.ne.and.b32 {never}, {r}, 0, {never}")
                }
            }
        }
    }

    /// `p ? 0 : r`: the safe operand substituted after a recorded fault.
    pub(super) fn zero_if(&mut self, p: Reg, r: Reg) -> Reg {
        let out = self.w.reg(r.class());
        emit!(self.w, "selp.{} {out}, 0, {r}, {p}", r.class().ty());
        out
    }

    /// Record `fault` unconditionally (the reference always errors here).
    pub(crate) fn fault_always(&mut self, fault: DeviceFault) {
        let p = self.true_pred();
        self.fault_if(p, fault);
    }

    /// A predicate that holds, for guarded instructions that must always run.
    pub(crate) fn true_pred(&mut self) -> Reg {
        let p = self.pred();
        emit!(self.w, "setp.eq.u32 {p}, 0, 0");
        p
    }

    /// A predicate that does not hold.
    pub(super) fn false_pred(&mut self) -> Reg {
        let p = self.pred();
        self.w.put_zero(p);
        p
    }

    /// Set where any of `flags` is (the one flag itself when there is one).
    pub(super) fn any_of(&mut self, flags: &[Reg]) -> Reg {
        if let [flag] = flags {
            return *flag;
        }
        let any = self.false_pred();
        for flag in flags {
            emit!(self.w, "or.pred {any}, {any}, {flag}");
        }
        any
    }

    /// Predicate that is true when the reference's `truthy()` holds for `value`.
    pub(crate) fn truthy(&mut self, value: Val) -> Reg {
        // A raw value wider than 4 bytes has no u32 reading, which the reference treats as
        // true; the empty bytes read as 0.
        if matches!(value.kind, ValKind::Bytes(5..)) {
            if let Some(filled) = self.filled_pred(value) {
                return filled;
            }
        }
        let p = self.pred();
        match value.kind {
            ValKind::F32 | ValKind::F64 => {
                let (ty, zero) = (value.reg.class().ty(), value.reg.class().zero());
                emit!(self.w, "setp.neu.{ty} {p}, {}, {zero}", value.reg);
            }
            // `.ftz` reads the out-of-bounds bytes' subnormal as the zero they are; no
            // in-bounds half is subnormal.
            ValKind::Half => emit!(self.w, "setp.neu.ftz.f32 {p}, {}, 0f00000000", value.reg),
            ValKind::U64 => emit!(self.w, "setp.ne.u64 {p}, {}, 0", value.reg),
            // True, but not to ptxas: see [`Self::hide_constant`].
            ValKind::Bytes(width) if width > 4 => self.put_hidden(p, true),
            _ => emit!(self.w, "setp.ne.u32 {p}, {}, 0", value.reg),
        }
        p
    }

    /// The reference's `try_as_u32`, raising `fault` where it yields `None`.
    pub(crate) fn u32_checked(
        &mut self,
        value: Val,
        fault: DeviceFault,
    ) -> Result<Reg, CodegenError> {
        // The bytes of an out-of-bounds half load read as 0, like +0.0.
        let value = self.settle_half(value);
        Ok(match value.kind {
            ValKind::U32 | ValKind::Bool => value.reg,
            ValKind::Bytes(width) if width <= 4 => value.reg,
            ValKind::I32 => {
                let p = self.pred();
                emit!(self.w, "setp.lt.s32 {p}, {}, 0", value.reg);
                self.fault_if(p, fault);
                self.zero_if(p, value.reg)
            }
            // More than four raw bytes never read as a u32 in the reference.
            ValKind::Bytes(_) => {
                self.fault_unless_empty(value, fault);
                self.imm_b32(0)
            }
            ValKind::U64 => {
                let p = self.pred();
                emit!(self.w, "setp.gt.u64 {p}, {}, 4294967295", value.reg);
                self.fault_if(p, fault);
                let r = self.b32();
                emit!(self.w, "cvt.u32.u64 {r}, {}", value.reg);
                self.zero_if(p, r)
            }
            ValKind::F32 | ValKind::F64 | ValKind::Half => {
                // Finite, >= 0 and <= u32::MAX, then truncated.
                let (x, ty) = (value.reg, value.reg.class().ty());
                let bad = match value.kind {
                    ValKind::F64 => self.float_range_fault(x, "le", "0d41EFFFFFFFE00000", fault),
                    _ => self.float_range_fault(x, "lt", "0f4F800000", fault),
                };
                let r = self.b32();
                emit!(self.w, "cvt.rzi.u32.{ty} {r}, {x}");
                self.zero_if(bad, r)
            }
        })
    }

    /// Record `fault` for a raw value too wide for the reading asked of it (which the
    /// reference has no reading for), unless it is the empty bytes (which read as 0).
    pub(super) fn fault_unless_empty(&mut self, value: Val, fault: DeviceFault) {
        match self.filled_pred(value) {
            Some(filled) => self.fault_if(filled, fault),
            None => self.fault_always(fault),
        }
    }

    /// Record `fault` unless the float `x` is `>= 0` and `{below} max` (never for NaN);
    /// the predicate where it was recorded.
    pub(super) fn float_range_fault(
        &mut self,
        x: Reg,
        below: &str,
        max: &str,
        fault: DeviceFault,
    ) -> Reg {
        let (ty, zero) = (x.class().ty(), x.class().zero());
        let (ok, small) = (self.pred(), self.pred());
        emit!(self.w, "setp.ge.{ty} {ok}, {x}, {zero}");
        emit!(self.w, "setp.{below}.{ty} {small}, {x}, {max}");
        emit!(self.w, "and.pred {ok}, {ok}, {small}");
        let bad = self.pred();
        emit!(self.w, "not.pred {bad}, {ok}");
        self.fault_if(bad, fault);
        bad
    }
}
