//! The step machine: a segment whose subgroup operations no converged placement reads
//! exactly (`analysis::lockstep`) runs the reference's own schedule, warp by warp.
//!
//! The segment is flattened into the reference's steps (`docs/SUBGROUP_LOCKSTEP.md` has
//! the table): each statement; an `If` choosing its branch; a `Block`, `Region` or `Loop`
//! opening; the end of a branch, block, region or loop body (closing its scope); a loop
//! iteration's start or exit test. Each step is a PTX block that stores the lane's next
//! step in `pc`, so lanes in different branches, iterations or after a `Return` simply
//! hold different `pc`s. A warp loops over rounds:
//!
//! 1. every lane done: leave; every lane done or waiting at a barrier: `barrier.sync`,
//!    as the reference releases a barrier once every invocation still running waits
//!    (with [`StepPlan::workgroup_rounds`], the workgroup's warps take every round
//!    together: first the reference's check of the barrier-holding branches' histories,
//!    then "done" and "released" are barrier reductions over the workgroup);
//! 2. each subgroup operation that some lane is at is evaluated by the whole warp, every
//!    lane with its own registers, which are the reference's round-start snapshot (the
//!    steps have not run yet); a variable some lane has not bound fails the dispatch, as
//!    the reference's "undeclared variable" does;
//! 3. every running lane takes its step (`brx.idx pc`), and the warp meets again.
//!
//! A variable some subgroup operand reads has one register per type it is bound to,
//! whichever `Let` binds it, and a flag per type saying whether the lane has it bound so:
//! the reference evaluates another lane's operand on that lane's variables by name, so
//! lanes in different scopes still agree (`typed_lanes` evaluates an operand whose
//! variables lanes hold with different types). Closing a scope clears its flags; `Return`
//! keeps them, as the reference does.
//!
//! In [`RoundMode::Serial`] (a subgroup operand loads a buffer the segment writes) lane
//! after lane takes its step, the subgroup operations it meets evaluated just before on
//! copies of the variables made at the round's start, so each lane's operands see the
//! stores of the lanes before it in the round, as in the reference.

use super::bytes::ByteView;
use super::returned::Hoisted;
use super::{Lowerer, Val};
use crate::codegen::analysis::lockstep::{own_subgroup_ops, vars_in};
use crate::codegen::analysis::steps::{RoundMode, StepPlan};
use crate::codegen::fault::DeviceFault;
use crate::codegen::kind::{Typing, ValKind};
use crate::codegen::visit::any_expr;
use crate::codegen::writer::{emit, Label, Reg, RegClass};
use crate::codegen::CodegenError;
use smallvec::SmallVec;
use std::collections::BTreeMap;
use vyre_foundation::ir::{Expr, Node};

/// A step's number, the lane's `pc` while it is next. Step 0 is "done".
type StepId = u32;
const DONE: StepId = 0;

/// The state of a segment lowered as a step machine.
pub(super) struct StepMachine<'p> {
    mode: RoundMode,
    /// Each barrier-holding branch's history, checked across the workgroup at every
    /// round's start when the workgroup takes its rounds together (else empty).
    workgroup_histories: Option<Vec<Reg>>,
    /// The lane's next step.
    pc: Reg,
    /// Set while the lane waits at a barrier.
    waiting: Reg,
    /// Set when the lane takes a step in this (sub-)round.
    running: Reg,
    /// Serial mode: the lane of the warp whose turn it is.
    turn: Option<Reg>,
    /// Each step's block, by number (step 0 is the round's end).
    targets: Vec<Label>,
    round_end: Label,
    /// Where the next evaluation of subgroup operations is written; the dispatch follows
    /// the last one.
    chain: Label,
    /// Where each (serial: each lane's) turn of a round starts.
    sub_round: Label,
    /// Variables some subgroup operand reads: one register per type each (see the
    /// module's header).
    named: BTreeMap<&'p str, SmallVec<[Named; 1]>>,
    /// The same for variables bound to bytes views (generic views).
    views: BTreeMap<&'p str, NamedView>,
    /// Set while a subgroup operand is evaluated in serial mode: it reads the copies.
    reading_snapshot: bool,
    /// The results of the rounds' subgroup operations: the dispatch to the steps that
    /// read them steers by them (see `checks::anchor`).
    unanchored: Vec<Reg>,
    /// The writer's register counts before the first round: every register allocated after
    /// it belongs to the machine's rounds and steps.
    first_regs: [u32; 5],
}

#[derive(Clone, Copy)]
struct Named {
    val: Val,
    bound: Reg,
    /// Serial mode: the round-start copies of `val` and `bound`.
    snapshot: Option<(Reg, Reg)>,
}

#[derive(Clone, Copy)]
struct NamedView {
    view: ByteView,
    bound: Reg,
    /// Serial mode: the round-start copies.
    snapshot: Option<(ByteView, Reg)>,
}

impl<'p> Lowerer<'p> {
    /// Lower `nodes` as a step machine (see the module's header).
    pub(super) fn put_step_machine(
        &mut self,
        nodes: &'p [Node],
        plan: StepPlan,
    ) -> Result<(), CodegenError> {
        let mode = plan.mode;
        let round_end = self.w.label();
        self.steps = Some(StepMachine {
            mode,
            workgroup_histories: None,
            pc: self.w.reg(RegClass::B32),
            waiting: self.w.reg(RegClass::Pred),
            running: self.w.reg(RegClass::Pred),
            turn: (mode == RoundMode::Serial).then(|| self.w.reg(RegClass::B32)),
            targets: vec![round_end],
            round_end,
            chain: self.w.label(),
            sub_round: self.w.label(),
            named: BTreeMap::new(),
            views: BTreeMap::new(),
            reading_snapshot: false,
            unanchored: Vec::new(),
            first_regs: [0; 5],
        });
        let labels = RoundLabels {
            round: self.w.label(),
            init: self.w.label(),
            snapshot: self.w.label(),
            finish: self.w.label(),
        };
        // Each lane's history of every barrier-holding branch, kept for its whole run as
        // the reference keeps it.
        let histories = self.start_branch_histories(nodes);
        self.machine_mut()?.workgroup_histories = plan.workgroup_rounds.then_some(histories);
        emit!(self.w, "bra {}", labels.init);
        self.machine_mut()?.first_regs = self.w.reg_mark();
        self.put_round_start(&labels)?;
        let first = match nodes.is_empty() {
            true => DONE,
            false => self.new_step()?,
        };
        let last = match plan.workgroup_rounds && !nodes.is_empty() {
            true => self.new_step()?,
            false => DONE,
        };
        self.put_step_list(nodes, first, last)?;
        if last != DONE {
            self.put_root_close(last)?;
        }
        self.put_round_end(&labels, first)
    }

    fn machine(&self) -> Result<&StepMachine<'p>, CodegenError> {
        self.steps.as_ref().ok_or_else(not_in_a_machine)
    }

    fn machine_mut(&mut self) -> Result<&mut StepMachine<'p>, CodegenError> {
        self.steps.as_mut().ok_or_else(not_in_a_machine)
    }

    fn new_step(&mut self) -> Result<StepId, CodegenError> {
        let label = self.w.label();
        let machine = self.machine_mut()?;
        machine.targets.push(label);
        Ok((machine.targets.len() - 1) as StepId)
    }

    /// Steps 1 and 2 of a round, up to the first evaluation of subgroup operations.
    fn put_round_start(&mut self, labels: &RoundLabels) -> Result<(), CodegenError> {
        let m = self.machine()?;
        let (pc, waiting, running, turn, chain) = (m.pc, m.waiting, m.running, m.turn, m.chain);
        let histories = m.workgroup_histories.clone();
        self.w.put_label(labels.round);
        let (done, idle, all) = (self.pred(), self.pred(), self.pred());
        emit!(self.w, "setp.eq.u32 {done}, {pc}, {DONE}");
        let barrier = self.cta_barrier();
        let mask = self.subgroup_mask;
        // Each is true in every lane of the warp, or of the workgroup taking its rounds
        // together (a barrier reduction every warp of it takes at the same round).
        match &histories {
            Some(histories) => {
                self.check_histories_across_workgroup(done, histories);
                emit!(self.w, "{barrier}.red.and.pred {all}, 0, {done}");
            }
            None => {
                let synced = self.sync_operand(done);
                emit!(self.w, "vote.sync.all.pred {all}, {synced}, {mask}");
            }
        }
        let all = self.branch_pred(all);
        emit!(self.w, "@{all} bra {}", labels.finish);
        emit!(self.w, "or.pred {idle}, {done}, {waiting}");
        let released = match histories.is_some() {
            true => {
                let released = self.pred();
                emit!(self.w, "{barrier}.red.and.pred {released}, 0, {idle}");
                released
            }
            false => {
                let synced = self.sync_operand(idle);
                let released = self.pred();
                emit!(self.w, "vote.sync.all.pred {released}, {synced}, {mask}");
                released
            }
        };
        let released = self.branch_pred(released);
        let go = self.w.label();
        emit!(self.w, "@!{released} bra {go}");
        // Warps stepping alone meet here; a workgroup's reduction was its barrier already.
        if histories.is_none() {
            emit!(self.w, "{barrier}.sync 0");
        }
        self.w.put_zero(waiting);
        self.w.put_label(go);
        let sub_round = self.machine()?.sub_round;
        if turn.is_some() {
            emit!(self.w, "bra {}", labels.snapshot);
        }
        // Serial rounds come back here for the next lane's turn.
        self.w.put_label(sub_round);
        emit!(
            self.w,
            "setp.ne.and.u32 {running}, {pc}, {DONE}, !{waiting}"
        );
        if let Some(turn) = turn {
            let lane = self.b32();
            emit!(self.w, "and.b32 {lane}, {}, 31", self.ids.linear_local);
            emit!(
                self.w,
                "setp.eq.and.u32 {running}, {lane}, {turn}, {running}"
            );
        }
        emit!(self.w, "bra {chain}");
        Ok(())
    }

    /// The reference's check after every round: the invocations still running (not
    /// `done`) took one side at each barrier-holding branch, each one's whole history of
    /// it counting. Barrier reductions give every lane of the workgroup the same answer, so
    /// on a disagreement all of them leave.
    fn check_histories_across_workgroup(&mut self, done: Reg, histories: &[Reg]) {
        let barrier = self.cta_barrier();
        for &history in histories {
            let (then_taken, else_taken, both) = (self.pred(), self.pred(), self.pred());
            for (side, bit) in [(then_taken, 1), (else_taken, 2)] {
                let (seen, mine) = (self.b32(), self.pred());
                emit!(self.w, "and.b32 {seen}, {history}, {bit}");
                emit!(self.w, "setp.ne.and.u32 {mine}, {seen}, 0, !{done}");
                emit!(self.w, "{barrier}.red.or.pred {side}, 0, {mine}");
            }
            emit!(self.w, "and.pred {both}, {then_taken}, {else_taken}");
            self.fault_exit_if(both, DeviceFault::DivergentBarrier);
        }
    }

    /// Write every register of the machine's rounds and steps once before the first round.
    /// A step reads registers that earlier steps wrote (a `Let`'s value, a loop's counter),
    /// and no write dominates such a read in the PTX. ptxas 12.9 and 13.0 at -O2 and above
    /// (and the driver's JIT) then may give the read another value of the same expression:
    /// a `Let` of a load, read in a later step, became that step's own load of the address
    /// after a store to it (`tests/fuzz_regressions/gpu-mismatch-step-machine-let-read-as-a-later-load.case`;
    /// the gate is the fuzz checker's `undefined_read`). ptxas drops the writes that every
    /// read finds overwritten. Registers the prologue writes are left alone.
    fn define_machine_registers(&mut self) -> Result<(), CodegenError> {
        let first = self.machine()?.first_regs;
        let prologue = self.lazy_prologue_regs();
        for reg in self.w.regs_since(first) {
            if !prologue.contains(&reg) {
                self.w.put_zero(reg);
            }
        }
        Ok(())
    }

    /// Step 3, the round's end, and the blocks reached only by branches: the first
    /// round's set-up, serial mode's snapshot, the way out.
    fn put_round_end(&mut self, labels: &RoundLabels, first: StepId) -> Result<(), CodegenError> {
        let m = self.machine()?;
        let (pc, waiting, running, turn, chain, round_end) =
            (m.pc, m.waiting, m.running, m.turn, m.chain, m.round_end);
        let targets = m.targets.clone();
        let named: Vec<Named> = m.named.values().flatten().copied().collect();
        let views: Vec<NamedView> = m.views.values().copied().collect();
        let sub_round = m.sub_round;
        let mask = self.subgroup_mask;
        self.w.put_label(chain);
        let table = self.w.label();
        let list = targets
            .iter()
            .map(Label::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        emit!(self.w, "{table}: .branchtargets {list}");
        self.release_round_results()?;
        let running = self.branch_pred(running);
        emit!(self.w, "@{running} brx.idx {pc}, {table}");
        self.w.put_label(round_end);
        emit!(self.w, "bar.warp.sync {mask}");
        // A lane that recorded a fault is done: the dispatch fails, and its garbage must
        // not keep it stepping.
        emit!(self.w, "@{} mov.u32 {pc}, {DONE}", self.faulted);
        if let Some(turn) = turn {
            self.put_next_turn(turn, sub_round);
        }
        emit!(self.w, "bra {}", labels.round);
        self.w.put_label(labels.init);
        self.define_machine_registers()?;
        emit!(self.w, "mov.u32 {pc}, {first}");
        self.w.put_zero(waiting);
        let flags = named.iter().map(|n| n.bound);
        for bound in flags.chain(views.iter().map(|v| v.bound)) {
            self.w.put_zero(bound);
        }
        emit!(self.w, "bra {}", labels.round);
        if turn.is_some() {
            self.w.put_label(labels.snapshot);
            for named in &named {
                if let Some((value, bound)) = named.snapshot {
                    self.mov(value, named.val.reg);
                    self.mov_companions(value, named.val);
                    emit!(self.w, "mov.pred {bound}, {}", named.bound);
                }
            }
            for named in &views {
                if let Some((view, bound)) = named.snapshot {
                    self.move_view(view, named.view);
                    emit!(self.w, "mov.pred {bound}, {}", named.bound);
                }
            }
            if let Some(turn) = turn {
                emit!(self.w, "mov.u32 {turn}, 0");
            }
            emit!(self.w, "bra {sub_round}");
        }
        self.w.put_label(labels.finish);
        // A lane that finished with a transfer pending fails the dispatch (one that
        // returned so has recorded it at its `Return` already).
        self.fault_pending_copies();
        self.end_invocation();
        Ok(())
    }

    /// `nodes` as steps, the first numbered `first`, the last going on to `next`.
    fn put_step_list(
        &mut self,
        nodes: &'p [Node],
        first: StepId,
        next: StepId,
    ) -> Result<(), CodegenError> {
        let mut here = first;
        for (index, node) in nodes.iter().enumerate() {
            let after = match index + 1 == nodes.len() {
                true => next,
                false => self.new_step()?,
            };
            self.put_step(node, here, after)?;
            here = after;
        }
        Ok(())
    }

    /// `nodes` in a scope of their own: their steps from `first`, then the step closing
    /// the scope, which goes on to `next`.
    fn put_scoped_steps(
        &mut self,
        nodes: &'p [Node],
        first: StepId,
        next: StepId,
    ) -> Result<(), CodegenError> {
        self.push_scope();
        let close = match nodes.is_empty() {
            true => first,
            false => self.new_step()?,
        };
        let result = self.put_step_list(nodes, first, close);
        self.put_scope_close(close, next)?;
        result
    }

    /// The round in which a lane that ran off the segment's end (no `Return`) pops the
    /// reference's root frame: it is done only after it, so the histories of its
    /// barrier-holding branches still count in the check after the round of its last
    /// statement (`tests/fuzz_regressions/gpu-missed-error-divergent-barrier-lane-done-a-round-after-its-last-step.case`). Only
    /// the workgroup's history checks can tell that round from none: a warp stepping
    /// alone releases its barrier waiters one round early, all of them alike.
    fn put_root_close(&mut self, id: StepId) -> Result<(), CodegenError> {
        self.begin_step(id)?;
        self.goto_step(DONE)
    }

    /// The step closing the innermost scope: its variables are no longer bound.
    fn put_scope_close(&mut self, id: StepId, next: StepId) -> Result<(), CodegenError> {
        self.begin_step(id)?;
        let names = self.scopes.last().cloned().unwrap_or_default();
        for name in names {
            for bound in self.machine()?.bound_flags(name) {
                self.w.put_zero(bound);
            }
        }
        self.pop_scope();
        self.goto_step(next)
    }

    fn begin_step(&mut self, id: StepId) -> Result<(), CodegenError> {
        let label = self.machine()?.targets.get(id as usize).copied();
        self.w.put_label(label.ok_or_else(not_in_a_machine)?);
        Ok(())
    }

    /// The lane's next step is `next`; the round goes on.
    fn goto_step(&mut self, next: StepId) -> Result<(), CodegenError> {
        let (pc, round_end) = (self.machine()?.pc, self.machine()?.round_end);
        emit!(self.w, "mov.u32 {pc}, {next}");
        emit!(self.w, "bra {round_end}");
        Ok(())
    }

    fn put_step(&mut self, node: &'p Node, id: StepId, next: StepId) -> Result<(), CodegenError> {
        self.put_step_ops(id, node)?;
        self.begin_step(id)?;
        match node {
            Node::If {
                cond,
                then,
                otherwise,
            } => {
                let cond = self.put_expr(cond)?;
                let p = self.truthy(cond);
                self.put_branch_history(node, p);
                let (then_first, else_first) = (self.new_step()?, self.new_step()?);
                let pc = self.machine()?.pc;
                let round_end = self.machine()?.round_end;
                emit!(self.w, "selp.u32 {pc}, {then_first}, {else_first}, {p}");
                emit!(self.w, "bra {round_end}");
                self.put_scoped_steps(then, then_first, next)?;
                self.put_scoped_steps(otherwise, else_first, next)
            }
            Node::Block(body) => self.put_block_steps(body, next),
            Node::Region { body, .. } => self.put_block_steps(body, next),
            Node::Loop {
                var,
                from,
                to,
                body,
            } => self.put_loop_steps(var.as_str(), from, to, body, next),
            Node::Return => {
                self.fault_pending_copies();
                self.goto_step(DONE)?;
                Ok(())
            }
            Node::Barrier { .. } => {
                let waiting = self.machine()?.waiting;
                emit!(self.w, "setp.eq.u32 {waiting}, 0, 0");
                self.goto_step(next)?;
                Ok(())
            }
            _ => {
                self.put_node_here(node)?;
                self.goto_step(next)?;
                Ok(())
            }
        }
    }

    /// A `Block` or `Region`: opening its scope is this step.
    fn put_block_steps(&mut self, body: &'p [Node], next: StepId) -> Result<(), CodegenError> {
        let first = self.new_step()?;
        self.goto_step(first)?;
        self.put_scoped_steps(body, first, next)
    }

    /// A `Loop` (its bounds evaluated in the current step), its iteration step (exit test
    /// or binding the loop variable) and its body, whose closing step goes back to the
    /// iteration step.
    fn put_loop_steps(
        &mut self,
        var: &'p str,
        from: &'p Expr,
        to: &'p Expr,
        body: &'p [Node],
        next: StepId,
    ) -> Result<(), CodegenError> {
        let from = self.put_expr(from)?;
        let from = self.u32_checked(from, DeviceFault::LoopBoundNotU32)?;
        let to = self.put_expr(to)?;
        let to = self.u32_checked(to, DeviceFault::LoopBoundNotU32)?;
        let (counter, bound) = (self.b32(), self.b32());
        self.mov(counter, from);
        self.mov(bound, to);
        let iteration = self.new_step()?;
        self.goto_step(iteration)?;
        self.begin_step(iteration)?;
        let (pc, round_end) = (self.machine()?.pc, self.machine()?.round_end);
        let exit = self.pred();
        emit!(self.w, "setp.ge.u32 {exit}, {counter}, {bound}");
        emit!(self.w, "@{exit} mov.u32 {pc}, {next}");
        let exit = self.branch_pred(exit);
        emit!(self.w, "@{exit} bra {round_end}");
        self.push_scope();
        let value = Val::new(ValKind::U32, counter);
        let var_reg = match self.step_register(var, value)? {
            Some(reg) => reg,
            None => self.b32(),
        };
        self.mov(var_reg, counter);
        self.bind(var, Val::new(ValKind::U32, var_reg), true)?;
        self.mark_bound(var);
        emit!(self.w, "add.u32 {counter}, {counter}, 1");
        let close = self.new_step()?;
        let first = match body.is_empty() {
            true => close,
            false => self.new_step()?,
        };
        self.goto_step(first)?;
        let result = self.put_step_list(body, first, close);
        self.put_scope_close(close, iteration)?;
        result
    }

    /// The evaluation, before the round's steps, of the subgroup operations statement
    /// `node` (step `id`) holds: every round, or, when an operand holds an atomic (which
    /// acts on memory), only when some lane is at the step.
    ///
    /// Operands without side effects are not skipped by a branch because ptxas 13.0 at
    /// -O1 and above, and the driver's JIT (580), can guard a `redux.sync` inside a region
    /// that a warp-uniform branch skips with an unrelated predicate (the lane's fault flag,
    /// say), so the warp reduces over no lanes and every later step reads garbage
    /// (`tests/fuzz_regressions/gpu-missed-error-redux-under-uniform-branch-*.case`; ptxas
    /// 12.9 and -O0 compile the same PTX correctly). A value computed where no lane is at
    /// the step is never read, and its faults are recorded only by lanes at it.
    fn put_step_ops(&mut self, id: StepId, node: &'p Node) -> Result<(), CodegenError> {
        let ops = own_subgroup_ops(node);
        if ops.is_empty() {
            return Ok(());
        }
        let m = self.machine()?;
        let (pc, running, link, serial) = (m.pc, m.running, m.chain, m.turn.is_some());
        let next = self.w.label();
        self.machine_mut()?.chain = next;
        self.w.put_label(link);
        let acts_on_memory = ops
            .iter()
            .any(|op| any_expr(op, &|e| matches!(e, Expr::Atomic { .. })));
        if acts_on_memory {
            let (here, any, mask) = (self.pred(), self.pred(), self.subgroup_mask);
            emit!(self.w, "setp.eq.and.u32 {here}, {pc}, {id}, {running}");
            let here = self.sync_operand(here);
            emit!(self.w, "vote.sync.any.pred {any}, {here}, {mask}");
            // The earlier evaluations of the round run before this branch too.
            self.release_round_results()?;
            let any = self.branch_pred(any);
            emit!(self.w, "@!{any} bra {next}");
        }
        self.machine_mut()?.reading_snapshot = serial;
        let result = self.hoist_in_step(ops);
        self.machine_mut()?.reading_snapshot = false;
        emit!(self.w, "bra {next}");
        result
    }

    /// Hand the results of the round's evaluations so far to the next branch, which every
    /// lane of the round takes after them (see `checks::anchor`).
    fn release_round_results(&mut self) -> Result<(), CodegenError> {
        let results = std::mem::take(&mut self.machine_mut()?.unanchored);
        self.unanchored.extend(results);
        Ok(())
    }

    fn hoist_in_step(&mut self, ops: Vec<&'p Expr>) -> Result<(), CodegenError> {
        let before = self.unanchored.len();
        for op in ops {
            let (value, faults) = self.put_subgroup_op(op)?;
            self.hoisted
                .insert(op as *const Expr, Hoisted { value, faults });
        }
        let results = self.unanchored.split_off(before);
        self.machine_mut()?.unanchored.extend(results);
        Ok(())
    }

    /// In a step machine, the register variable `name` (first bound to `value`) lives in
    /// when a subgroup operand reads it; `None` for a register of its own.
    pub(super) fn step_register(
        &mut self,
        name: &'p str,
        value: Val,
    ) -> Result<Option<Reg>, CodegenError> {
        let Some(machine) = self.steps.as_ref() else {
            return Ok(None);
        };
        if !self.facts.subgroup_operand_vars.contains(name) {
            return Ok(None);
        }
        let known = machine.named.get(name).into_iter().flatten();
        if let Some(known) = known.into_iter().find(|n| n.val.kind == value.kind) {
            return Ok(Some(known.val.reg));
        }
        let serial = machine.mode == RoundMode::Serial;
        let class = value.kind.reg_class();
        let named = Named {
            val: Val::new(value.kind, self.w.reg(class)),
            bound: self.w.reg(RegClass::Pred),
            snapshot: serial.then(|| (self.w.reg(class), self.w.reg(RegClass::Pred))),
        };
        // A wide value's upper words (and a filled flag) live in registers of their own
        // too, the copy's in its own.
        let copies = std::iter::once(named.val.reg).chain(named.snapshot.map(|(c, _)| c));
        for low in copies {
            self.add_companions(low, value.kind);
        }
        self.machine_mut()?
            .named
            .entry(name)
            .or_default()
            .push(named);
        Ok(Some(named.val.reg))
    }

    /// In a step machine, the generic view registers variable `name` lives in when a
    /// subgroup operand reads it and it is bound to a bytes view; `None` for registers of
    /// its own.
    pub(super) fn step_view(&mut self, name: &'p str) -> Result<Option<ByteView>, CodegenError> {
        let Some(machine) = self.steps.as_ref() else {
            return Ok(None);
        };
        if !self.facts.subgroup_operand_vars.contains(name) {
            return Ok(None);
        }
        if let Some(known) = machine.views.get(name) {
            return Ok(Some(known.view));
        }
        let serial = machine.mode == RoundMode::Serial;
        let named = NamedView {
            view: self.generic_view_regs(),
            bound: self.pred(),
            snapshot: serial.then(|| (self.generic_view_regs(), self.pred())),
        };
        self.machine_mut()?.views.insert(name, named);
        Ok(Some(named.view))
    }

    /// `name` was just bound in this lane (a step machine's flags for subgroup operands:
    /// that of the type it is bound to now is set, the others cleared).
    pub(super) fn mark_bound(&mut self, name: &str) {
        let Some(machine) = self.steps.as_ref() else {
            return;
        };
        let now = match self.locals.get(name) {
            Some(local) => (machine.named.get(name).into_iter().flatten())
                .find(|named| named.val.reg == local.val.reg)
                .map(|named| named.bound),
            None => machine.views.get(name).map(|named| named.bound),
        };
        for flag in machine.bound_flags(name) {
            match Some(flag) == now {
                true => emit!(self.w, "setp.eq.u32 {flag}, 0, 0"),
                false => self.w.put_zero(flag),
            }
        }
    }

    /// In a step machine, whether this lane holds variable `name` bound to `typing` (at
    /// the round's start while a serial round's operand reads the snapshot); `None`
    /// where no binding of that type has registers yet.
    pub(super) fn step_typing_flag(&self, name: &str, typing: Typing) -> Option<Reg> {
        let machine = self.steps.as_ref()?;
        let flags = match typing {
            Typing::Value(kind) => (machine.named.get(name).into_iter().flatten())
                .find(|named| named.val.kind == kind)
                .map(|named| (named.bound, named.snapshot.map(|(_, b)| b)))?,
            Typing::View => machine
                .views
                .get(name)
                .map(|named| (named.bound, named.snapshot.map(|(_, b)| b)))?,
        };
        Some(machine.flag_read(flags))
    }

    /// View variable `name` (bound to `view`) read in a subgroup operand of a serial
    /// round: the copy made at the round's start.
    pub(super) fn snapshot_view(&self, name: &str, view: ByteView) -> ByteView {
        let Some(machine) = self.steps.as_ref().filter(|m| m.reading_snapshot) else {
            return view;
        };
        match machine.views.get(name).and_then(|named| named.snapshot) {
            Some((copy, _)) => copy,
            None => view,
        }
    }

    /// Variable `name` (bound to `val`) read in a subgroup operand of a serial round: the
    /// copy made at the round's start.
    pub(super) fn snapshot_var(&self, name: &str, val: Val) -> Val {
        let Some(machine) = self.steps.as_ref().filter(|m| m.reading_snapshot) else {
            return val;
        };
        let named = machine.named.get(name).into_iter().flatten();
        match named.into_iter().find(|named| named.val.reg == val.reg) {
            Some(Named {
                snapshot: Some((reg, _)),
                ..
            }) => Val::new(val.kind, *reg),
            _ => val,
        }
    }

    /// In a step machine, set in a lane that has not bound (now, or at the round's start
    /// in serial mode) a variable `op` reads.
    pub(super) fn unbound_in_step_machine(&mut self, op: &'p Expr) -> Option<Reg> {
        let machine = self.steps.as_ref()?;
        let flags: Vec<Vec<Reg>> = vars_in(op)
            .into_iter()
            .map(|name| machine.operand_flags(name))
            .filter(|flags| !flags.is_empty())
            .collect();
        let bad = self.pred();
        self.w.put_zero(bad);
        for typings in flags {
            let bound = self.any_of(&typings);
            let unbound = self.pred();
            emit!(self.w, "not.pred {unbound}, {bound}");
            emit!(self.w, "or.pred {bad}, {bad}, {unbound}");
        }
        Some(bad)
    }
}

impl StepMachine<'_> {
    /// Whether the lane has variable `name` bound, one flag per type, if a subgroup
    /// operand reads it.
    fn bound_flags(&self, name: &str) -> Vec<Reg> {
        let values = self.named.get(name).into_iter().flatten();
        let views = self.views.get(name).into_iter();
        (values.map(|named| named.bound))
            .chain(views.map(|named| named.bound))
            .collect()
    }

    /// The flags a subgroup operand being evaluated checks: the round-start copies while
    /// reading the snapshot.
    fn operand_flags(&self, name: &str) -> Vec<Reg> {
        let values = self.named.get(name).into_iter().flatten();
        let views = self.views.get(name).into_iter();
        (values.map(|named| (named.bound, named.snapshot.map(|(_, b)| b))))
            .chain(views.map(|named| (named.bound, named.snapshot.map(|(_, b)| b))))
            .map(|flags| self.flag_read(flags))
            .collect()
    }

    /// Of a bound flag and its serial round-start copy, the one a subgroup operand being
    /// evaluated reads.
    fn flag_read(&self, (bound, snapshot): (Reg, Option<Reg>)) -> Reg {
        match (self.reading_snapshot, snapshot) {
            (true, Some(copy)) => copy,
            _ => bound,
        }
    }
}

struct RoundLabels {
    round: Label,
    init: Label,
    snapshot: Label,
    finish: Label,
}

/// Step-machine state asked for outside a step machine, or a step never numbered.
fn not_in_a_machine() -> CodegenError {
    CodegenError::invalid(
        "a step-machine step lowered outside a step machine",
        "report this vyre-cuda bug",
    )
}
