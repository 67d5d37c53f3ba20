//! Subgroup operations with the reference's lane view: every lane of the subgroup,
//! including lanes that returned, and faults that count for the whole subgroup (see
//! `analysis::lockstep` for the reference's semantics and when this is exact).
//!
//! * Operand faults: the reference fails when evaluating *any* lane's operand fails, and
//!   only when some lane actually evaluates the operation. While an operation is lowered,
//!   its operands' faults are collected instead of recorded; once the warp has evaluated
//!   it, each becomes a predicate saying whether any lane raised it, recorded where the
//!   operation stands (for an operation computed early at a data-dependent branch, only
//!   by the lanes that reach it).
//! * Returned lanes: in a segment with subgroup operations and a `Return` in
//!   data-dependent control flow, a lane reaching such a `Return` stays in the warp. It
//!   copies every variable some subgroup operand reads into a frozen register (noting
//!   whether it was bound there), sets its `returned` predicate and jumps to the end of
//!   the outermost data-dependent construct. From there it follows the uniform control
//!   flow, whose values it still computes (so it takes the same branches and meets every
//!   barrier), but skips each statement with a side effect and each data-dependent
//!   construct, after evaluating the subgroup operations they hold with the others. Its
//!   own faults are never recorded. In a subgroup operand it reads its frozen values
//!   (one register per type the variable is frozen with, see `typed_lanes`); a variable
//!   it never bound fails the dispatch when a running lane evaluates the operation, as
//!   "reference to undeclared variable" does. A `Return` in uniform control
//!   flow still ends every lane, returned ones included.

use super::bytes::ByteView;
use super::{Lowerer, Val};
use crate::codegen::analysis::lockstep::{own_subgroup_ops, vars_in};
use crate::codegen::fault::DeviceFault;
use crate::codegen::kind::{Typing, ValKind};
use crate::codegen::visit::any_expr;
use crate::codegen::writer::{emit, Label, PtxWriter, Reg, RegClass};
use crate::codegen::CodegenError;
use smallvec::SmallVec;
use std::collections::BTreeMap;
use vyre_foundation::ir::{Expr, Node};

/// The state of a segment whose returned lanes stay in the warp.
pub(super) struct Returned<'p> {
    /// Set once this lane has returned.
    pred: Reg,
    /// Where a returning lane goes: the end of the outermost data-dependent construct being
    /// lowered (`None` in uniform control flow, where `Return` ends every lane).
    exit: Option<Label>,
    /// Per variable some subgroup operand reads, its value at this lane's `Return`: a
    /// register per type it may have there.
    frozen: BTreeMap<&'p str, SmallVec<[Frozen; 1]>>,
    /// The same for variables bound to bytes views: the view (generic) and the flag.
    frozen_views: BTreeMap<&'p str, (ByteView, Reg)>,
}

#[derive(Clone, Copy)]
struct Frozen {
    value: Val,
    /// Whether the variable was bound at the `Return`.
    bound: Reg,
}

/// A subgroup operation computed before its statement, with the faults it raised in any
/// lane (predicates the same in every lane), to be recorded at the statement.
#[derive(Clone)]
pub(super) struct Hoisted {
    pub(super) value: Val,
    pub(super) faults: Vec<(Reg, DeviceFault)>,
}

impl<'p> Returned<'p> {
    pub(super) fn new(w: &mut PtxWriter) -> Self {
        Self {
            pred: w.reg(RegClass::Pred),
            exit: None,
            frozen: BTreeMap::new(),
            frozen_views: BTreeMap::new(),
        }
    }
}

/// Whether `node` changes memory or ends the dispatch (what a returned lane must skip).
fn has_side_effect(node: &Node) -> bool {
    let atomic = |e: &Expr| matches!(e, Expr::Atomic { .. });
    match node {
        Node::Store { .. }
        | Node::AsyncLoad { .. }
        | Node::AsyncStore { .. }
        | Node::AsyncWait { .. }
        | Node::Trap { .. }
        | Node::IndirectDispatch { .. }
        | Node::Resume { .. } => true,
        Node::Let { value, .. } | Node::Assign { value, .. } => any_expr(value, &atomic),
        _ => false,
    }
}

impl<'p> Lowerer<'p> {
    /// Returned lanes stay in this entry's warps.
    pub(super) fn keeps_returned_lanes(&mut self) {
        self.returned = Some(Returned::new(&mut self.w));
    }

    pub(super) fn keeps_returned(&self) -> bool {
        self.returned.is_some()
    }

    /// The registers [`Lowerer::init_returned`] zeroes: the returned flag, and each frozen
    /// variable's flag and value.
    pub(super) fn returned_prologue_regs(&self) -> Vec<Reg> {
        let Some(returned) = &self.returned else {
            return Vec::new();
        };
        let mut regs = vec![returned.pred];
        for frozen in returned.frozen.values().flatten() {
            regs.push(frozen.bound);
            regs.extend(self.value_regs(frozen.value.reg));
        }
        for (view, bound) in returned.frozen_views.values() {
            regs.push(*bound);
            regs.extend(view.regs());
        }
        regs
    }

    /// The prologue's part: no lane has returned, no variable is frozen. The frozen values
    /// are written too (zero): a `selp` reads them in lanes that never returned, and ptxas
    /// may give a read that no write reaches any value (`fuzz::check`'s `undefined_read`).
    pub(super) fn init_returned(&self, p: &mut PtxWriter) {
        for reg in self.returned_prologue_regs() {
            p.put_zero(reg);
        }
    }

    /// `Return` in data-dependent control flow of a segment whose returned lanes stay:
    /// freeze what subgroup operands read, become a returned lane, leave the construct.
    /// `false` when this `Return` ends the invocation as usual.
    pub(super) fn return_and_stay(&mut self) -> Result<bool, CodegenError> {
        let Some((pred, exit)) = self
            .returned
            .as_ref()
            .and_then(|r| r.exit.map(|exit| (r.pred, exit)))
        else {
            return Ok(false);
        };
        let facts = self.facts;
        for &name in &facts.subgroup_operand_vars {
            if let Some(view) = self.byte_views.get(name).copied() {
                let (frozen, bound) = self.frozen_view(name)?;
                self.move_view(frozen, view);
                emit!(self.w, "setp.eq.u32 {bound}, 0, 0");
                continue;
            }
            let Some(local) = self.locals.get(name).copied() else {
                continue;
            };
            let frozen = self.frozen(name, local.val.kind)?;
            self.mov(frozen.value.reg, local.val.reg);
            self.mov_companions(frozen.value.reg, local.val);
            emit!(self.w, "setp.eq.u32 {}, 0, 0", frozen.bound);
        }
        emit!(self.w, "setp.eq.u32 {pred}, 0, 0");
        let pending = std::mem::take(&mut self.unanchored);
        self.carried.extend(pending);
        emit!(self.w, "bra {exit}");
        Ok(true)
    }

    /// The frozen register of variable `name` bound to a value of `kind`.
    fn frozen(&mut self, name: &'p str, kind: ValKind) -> Result<Frozen, CodegenError> {
        let Some(returned) = self.returned.as_mut() else {
            return Err(frozen_outside_returned());
        };
        let known = returned.frozen.get(name).into_iter().flatten();
        if let Some(known) = known.into_iter().find(|f| f.value.kind == kind) {
            return Ok(*known);
        }
        let frozen = Frozen {
            value: Val::new(kind, self.w.reg(kind.reg_class())),
            bound: self.w.reg(RegClass::Pred),
        };
        returned.frozen.entry(name).or_default().push(frozen);
        self.add_companions(frozen.value.reg, kind);
        Ok(frozen)
    }

    /// Whether this returned lane froze variable `name` bound to `typing`.
    pub(super) fn frozen_flag(
        &mut self,
        name: &'p str,
        typing: Typing,
    ) -> Result<Reg, CodegenError> {
        Ok(match typing {
            Typing::Value(kind) => self.frozen(name, kind)?.bound,
            Typing::View => self.frozen_view(name)?.1,
        })
    }

    /// The frozen registers of variable `name` bound to `typing`.
    pub(super) fn frozen_binding(
        &mut self,
        name: &'p str,
        typing: Typing,
    ) -> Result<Result<Val, ByteView>, CodegenError> {
        Ok(match typing {
            Typing::Value(kind) => Ok(self.frozen(name, kind)?.value),
            Typing::View => Err(self.frozen_view(name)?.0),
        })
    }

    /// Set in a returned lane: whether it has returned.
    pub(super) fn returned_pred(&self) -> Option<Reg> {
        self.returned.as_ref().map(|r| r.pred)
    }

    /// The frozen view of variable `name`, bound to a bytes view, and its flag.
    fn frozen_view(&mut self, name: &'p str) -> Result<(ByteView, Reg), CodegenError> {
        let known = self
            .returned
            .as_ref()
            .map(|r| r.frozen_views.get(name).copied());
        match known {
            None => Err(frozen_outside_returned()),
            Some(Some(frozen)) => Ok(frozen),
            Some(None) => {
                let frozen = (self.generic_view_regs(), self.pred());
                if let Some(returned) = self.returned.as_mut() {
                    returned.frozen_views.insert(name, frozen);
                }
                Ok(frozen)
            }
        }
    }

    /// View variable `name` (bound to `view`) read in a subgroup operand: a returned
    /// lane's view at its `Return`, a serial step machine's round-start copy.
    pub(super) fn operand_view(
        &mut self,
        name: &'p str,
        view: ByteView,
    ) -> Result<ByteView, CodegenError> {
        let view = self.snapshot_view(name, view);
        let Some(pred) = self.returned.as_ref().map(|r| r.pred) else {
            return Ok(view);
        };
        if self.operand_faults.is_empty() {
            return Ok(view);
        }
        let (frozen, _) = self.frozen_view(name)?;
        Ok(self.select_view(pred, frozen, view))
    }

    /// Variable `name` (bound to `val`) read in a subgroup operand: what a returned lane
    /// held at its `Return`.
    pub(super) fn operand_var(&mut self, name: &'p str, val: Val) -> Result<Val, CodegenError> {
        let Some(pred) = self.returned.as_ref().map(|r| r.pred) else {
            return Ok(val);
        };
        if self.operand_faults.is_empty() {
            return Ok(val);
        }
        let frozen = self.frozen(name, val.kind)?;
        Ok(self.select_val(val.kind, pred, frozen.value, val))
    }

    /// Lower subgroup operation `op` with the whole warp: its value and, per fault its
    /// operands may raise, a predicate (the same in every lane) saying whether any lane of
    /// the subgroup raised it.
    pub(super) fn put_subgroup_op(
        &mut self,
        op: &'p Expr,
    ) -> Result<(Val, Vec<(Reg, DeviceFault)>), CodegenError> {
        let enclosing_turn = self.leave_operand_turn();
        self.operand_faults.push(Vec::new());
        let value = self.put_subgroup_value(op);
        let mut raised = self.operand_faults.pop().unwrap_or_default();
        self.operand_turn = enclosing_turn;
        let value = value?;
        if self.operand_faults.is_empty() {
            if let Some(unbound) = self.unbound_in_returned_lane(op)? {
                raised.push((unbound, DeviceFault::UndeclaredVariable));
            }
        }
        let mask = self.subgroup_mask;
        let anywhere = raised
            .into_iter()
            .map(|(p, fault)| {
                let (any, p) = (self.pred(), self.sync_operand(p));
                emit!(self.w, "vote.sync.any.pred {any}, {p}, {mask}");
                (any, fault)
            })
            .collect::<Vec<_>>();
        let results: Vec<Reg> = self.value_regs(value.reg).collect();
        self.unanchored.extend(results);
        self.unanchored.extend(anywhere.iter().map(|(any, _)| *any));
        Ok((value, anywhere))
    }

    /// Record the faults of a subgroup operation evaluated for this statement (inside
    /// another operation's operand they belong to that one).
    pub(super) fn record_operand_faults(&mut self, faults: Vec<(Reg, DeviceFault)>) {
        for (p, fault) in faults {
            self.fault_if(p, fault);
        }
    }

    /// Set when this lane returned without binding a variable `op` reads.
    fn unbound_in_returned_lane(&mut self, op: &'p Expr) -> Result<Option<Reg>, CodegenError> {
        if self.steps.is_some() {
            return Ok(self.unbound_in_step_machine(op));
        }
        let Some(pred) = self.returned.as_ref().map(|r| r.pred) else {
            return Ok(None);
        };
        let (bad, unbound) = (self.pred(), self.pred());
        self.w.put_zero(bad);
        for name in vars_in(op) {
            match self.locals.get(name).copied() {
                Some(local) => {
                    self.frozen(name, local.val.kind)?;
                }
                None if self.byte_views.contains_key(name) => {
                    self.frozen_view(name)?;
                }
                None => continue,
            }
            // Frozen with any type (`typed_lanes`).
            let flags = self.frozen_flags(name);
            let bound = self.any_of(&flags);
            emit!(self.w, "not.pred {unbound}, {bound}");
            emit!(self.w, "or.pred {bad}, {bad}, {unbound}");
        }
        emit!(self.w, "and.pred {bad}, {bad}, {pred}");
        Ok(Some(bad))
    }

    /// Whether this returned lane froze variable `name`, one flag per type.
    fn frozen_flags(&self, name: &str) -> Vec<Reg> {
        let Some(returned) = &self.returned else {
            return Vec::new();
        };
        let values = returned.frozen.get(name).into_iter().flatten();
        let views = returned.frozen_views.get(name).into_iter();
        (values.map(|f| f.bound))
            .chain(views.map(|(_, bound)| *bound))
            .collect()
    }

    /// `p` of a lane that has not returned (a returned lane's faults are not recorded).
    pub(super) fn running_only(&mut self, p: Reg) -> Reg {
        let Some(pred) = self.returned.as_ref().map(|r| r.pred) else {
            return p;
        };
        let running = self.pred();
        emit!(self.w, "not.pred {running}, {pred}");
        emit!(self.w, "and.pred {running}, {running}, {p}");
        running
    }

    /// Evaluate `ops` now, with the whole warp, for their statements to use later.
    pub(super) fn hoist(&mut self, ops: Vec<&'p Expr>) -> Result<(), CodegenError> {
        for op in ops {
            let (value, faults) = self.put_subgroup_op(op)?;
            self.hoisted
                .insert(op as *const Expr, Hoisted { value, faults });
        }
        Ok(())
    }

    /// Whether returned lanes skip `node` here (a side effect in uniform control flow).
    pub(super) fn returned_lanes_skip(&self, node: &Node) -> bool {
        self.returned.is_some() && self.divergence == 0 && has_side_effect(node)
    }

    /// `node` with a side effect, in uniform control flow: its subgroup operations run
    /// with every lane, then returned lanes skip it. A `Let`'s variable is written on the
    /// way past it too (zero): returned lanes go on through the statements without side
    /// effects and read it, and ptxas may give a read that no write reaches any value
    /// (`fuzz::check`'s `undefined_read`).
    pub(super) fn put_skipped_by_returned(
        &mut self,
        node: &'p Node,
        put: impl FnOnce(&mut Self) -> Result<(), CodegenError>,
    ) -> Result<(), CodegenError> {
        self.hoist(own_subgroup_ops(node))?;
        let skip = self.w.label();
        self.skip_if_returned(skip);
        put(self)?;
        let bound = match node {
            Node::Let { name, .. } => self.bound_regs(name),
            _ => Vec::new(),
        };
        if bound.is_empty() {
            self.w.put_label(skip);
            return Ok(());
        }
        let after = self.w.label();
        emit!(self.w, "bra {after}");
        self.w.put_label(skip);
        for reg in bound {
            self.w.put_zero(reg);
        }
        self.w.put_label(after);
        Ok(())
    }

    /// The registers variable `name` is bound to: its value (both halves of a wide one)
    /// or its bytes view.
    fn bound_regs(&self, name: &str) -> Vec<Reg> {
        if let Some(view) = self.byte_views.get(name) {
            return view.regs().to_vec();
        }
        match self.locals.get(name) {
            Some(local) => self.value_regs(local.val.reg).collect(),
            None => Vec::new(),
        }
    }

    fn skip_if_returned(&mut self, to: Label) {
        let Some(pred) = self.returned.as_ref().map(|r| r.pred) else {
            return;
        };
        let pred = self.branch_pred(pred);
        emit!(self.w, "@{pred} bra {to}");
    }

    /// At the outermost data-dependent construct: the subgroup operations of its own
    /// condition or bounds and those `inside` it run now with every lane; where returned
    /// lanes stay (`end` is then the construct's end), they skip it, and a `Return` in it
    /// leads to `end`. Returns what [`Self::leave_divergent`] restores.
    pub(super) fn enter_divergent(
        &mut self,
        node: &'p Node,
        inside: Vec<&'p Expr>,
        end: Option<Label>,
    ) -> Result<Option<Label>, CodegenError> {
        self.hoist(own_subgroup_ops(node))?;
        self.hoist(inside)?;
        let Some(end) = end else {
            return Ok(None);
        };
        self.skip_if_returned(end);
        Ok(self
            .returned
            .as_mut()
            .and_then(|returned| returned.exit.replace(end)))
    }

    pub(super) fn leave_divergent(&mut self, exit: Option<Label>) {
        if let Some(returned) = self.returned.as_mut() {
            returned.exit = exit;
        }
        let carried = std::mem::take(&mut self.carried);
        self.unanchored.extend(carried);
    }
}

/// A frozen variable asked for outside a segment whose returned lanes stay.
fn frozen_outside_returned() -> CodegenError {
    CodegenError::invalid(
        "a frozen variable outside a segment whose returned lanes stay",
        "report this vyre-cuda bug",
    )
}
