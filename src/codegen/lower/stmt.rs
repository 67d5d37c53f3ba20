//! Statements: one `put_*` per `Node` construct.

use super::{Lowerer, Val};
use crate::codegen::analysis::unroll;
use crate::codegen::fault::DeviceFault;
use crate::codegen::kind::ValKind;
use crate::codegen::visit::{for_each_node, has_barrier, is_constant};
use crate::codegen::writer::{emit, Label, Reg, RegClass};
use crate::codegen::CodegenError;
use vyre_foundation::ir::{Expr, Node};

impl<'p> Lowerer<'p> {
    pub(super) fn put_scoped_block(&mut self, nodes: &'p [Node]) -> Result<(), CodegenError> {
        self.push_scope();
        let result = self.put_block(nodes);
        self.pop_scope();
        result
    }

    pub(super) fn put_block(&mut self, nodes: &'p [Node]) -> Result<(), CodegenError> {
        let mut rest = nodes;
        while let Some((node, after)) = rest.split_first() {
            rest = match self.tree_reduction_at(node) {
                Some(tree) => {
                    self.put_tree_reduction(&tree)?;
                    &rest[tree.statements..]
                }
                None => {
                    self.put_node(node)?;
                    after
                }
            };
        }
        Ok(())
    }

    /// The recursion depth is bounded by `analysis::nesting`, checked up front.
    fn put_node(&mut self, node: &'p Node) -> Result<(), CodegenError> {
        if self.returned_lanes_skip(node) {
            return self.put_skipped_by_returned(node, |this| this.put_node_here(node));
        }
        self.put_node_here(node)
    }

    pub(super) fn put_node_here(&mut self, node: &'p Node) -> Result<(), CodegenError> {
        // Shared sub-expressions live for one statement (`analysis::shared`).
        self.shared_values.clear();
        let result = self.put_node_kind(node);
        self.shared_values.clear();
        result
    }

    fn put_node_kind(&mut self, node: &'p Node) -> Result<(), CodegenError> {
        match node {
            Node::Let { name, value } => self.put_let(name.as_str(), value),
            Node::Assign { name, value } => self.put_assign(name.as_str(), value),
            Node::Store {
                buffer,
                index,
                value,
            } => self.per_lane(|this| this.put_store_node(buffer.as_str(), index, value)),
            Node::If {
                cond,
                then,
                otherwise,
            } => self.put_if(node, cond, then, otherwise),
            Node::Loop {
                var,
                from,
                to,
                body,
            } => self.put_loop(node, var.as_str(), from, to, body),
            Node::Return => {
                self.fault_pending_copies();
                if !self.lane_return() && !self.schedule_return() && !self.return_and_stay()? {
                    self.end_invocation();
                }
                Ok(())
            }
            Node::Barrier { .. } if self.runs_alone() => Ok(()),
            Node::Barrier { .. } => {
                // Top-level GridSyncs split the kernel into segments (analysis::grid_sync);
                // one left inside If/Loop is a workgroup barrier, as in the reference.
                // Lanes that returned earlier have exited and are not waited for, exactly
                // as the reference releases a barrier once every live lane reached it.
                emit!(self.w, "{}.sync 0", self.cta_barrier());
                Ok(())
            }
            Node::Block(nodes) => self.put_scoped_block(nodes),
            Node::Region { body, .. } => self.put_scoped_block(body),
            Node::IndirectDispatch { .. } | Node::Resume { .. } => {
                // The reference rejects these whenever it reaches them.
                self.fault_always(DeviceFault::RejectedByReference);
                Ok(())
            }
            Node::AsyncLoad { .. } | Node::AsyncStore { .. } => self.start_copy(node),
            Node::AsyncWait { tag } => self.finish_copy(tag.as_str()),
            Node::Trap { address, .. } => {
                let address = self.put_expr(address)?;
                self.u32_checked(address, DeviceFault::Trap)?;
                self.fault_always(DeviceFault::Trap);
                Ok(())
            }
            // `prepare` lowered the program's own collectives for one rank before it
            // inlined calls, as the reference does; one left came with a call's body, and
            // vyre's validator refuses the inlined program (V046).
            Node::AllReduce { .. }
            | Node::AllGather { .. }
            | Node::ReduceScatter { .. }
            | Node::Broadcast { .. } => Err(CodegenError::unsupported(
                "collective from an inlined call",
                "a called op's body holds a collective statement, which only the program's \
                 top level may hold on a single-GPU backend",
                "move the collective out of the called op to the caller's top level",
            )),
            Node::Opaque(_) => {
                // As `Expr::Opaque`: a run-time failure of the reference where reached.
                self.fault_always(DeviceFault::RejectedByReference);
                Ok(())
            }
            _ => Err(CodegenError::unsupported(
                "an unknown Node variant",
                "this vyre IR statement is newer than vyre-cuda",
                "upgrade vyre-cuda",
            )),
        }
    }

    fn put_let(&mut self, name: &'p str, value: &'p Expr) -> Result<(), CodegenError> {
        if self.is_bytes_view(value) {
            let view = self.put_bytes_view(value)?;
            return self.bind_bytes_view(name, value, view);
        }
        let value = match value {
            Expr::Atomic { .. } if !self.facts.read_vars.contains(name) => {
                self.put_atomic(value, false)?
            }
            _ => self.put_expr(value)?,
        };
        let value = if self.is_wide_float(name) {
            self.half_as_wide(value)
        } else {
            value
        };
        // An f32 variable that may later be assigned a half load holds a `Half` (an f32
        // value never reads as the out-of-bounds mark).
        let kind = if value.kind == ValKind::F32 && self.facts.half_locals.contains(name) {
            ValKind::Half
        } else {
            value.kind
        };
        let reg = match self.step_register(name, Val::new(kind, value.reg))? {
            Some(reg) => reg,
            None => self.w.reg(value.kind.reg_class()),
        };
        self.mov(reg, value.reg);
        // A step machine's variable keeps its companions for every binding.
        self.add_companions(reg, value.kind);
        self.mov_companions(reg, value);
        self.bind(name, Val::new(kind, reg), false)?;
        self.mark_bound(name);
        Ok(())
    }

    fn put_assign(&mut self, name: &'p str, value: &'p Expr) -> Result<(), CodegenError> {
        if self.byte_views.contains_key(name) {
            return self.assign_bytes_view(name, value);
        }
        let value = self.put_expr(value)?;
        let Some(local) = self.locals.get(name).copied() else {
            return Err(CodegenError::invalid(
                format!("assignment to undeclared variable `{name}`"),
                "add a Let before assigning it",
            ));
        };
        if local.loop_var {
            return Err(CodegenError::invalid(
                format!("assignment to loop variable `{name}`"),
                "loop variables are immutable; copy it into a Let first",
            ));
        }
        let value = self.assigned_float(name, local.val, value)?;
        let widens = local.val.kind == ValKind::Half && value.kind == ValKind::F32;
        if local.val.kind != value.kind && !widens {
            return Err(CodegenError::unsupported(
                "Node::Assign changing a variable's type",
                format!(
                    "`{name}` holds a {} but is assigned a {}",
                    local.val.kind.name(),
                    value.kind.name()
                ),
                "assign a value of the variable's own type (insert a Cast)",
            ));
        }
        self.assign_reg(local.val.reg, value.reg);
        self.mov_companions(local.val.reg, value);
        Ok(())
    }

    fn put_store_node(
        &mut self,
        buffer: &str,
        index: &'p Expr,
        value: &'p Expr,
    ) -> Result<(), CodegenError> {
        let index = self.put_index(index)?;
        if self.is_bytes_view(value) {
            let view = self.put_bytes_view(value)?;
            return self.put_bytes_view_store(buffer, index, view);
        }
        let value = self.put_expr(value)?;
        self.put_store(buffer, index, value)
    }

    fn put_if(
        &mut self,
        node: &'p Node,
        cond_expr: &'p Expr,
        then: &'p [Node],
        otherwise: &'p [Node],
    ) -> Result<(), CodegenError> {
        if self.speculates(cond_expr, then, otherwise) {
            return self.put_speculated(cond_expr, then);
        }
        let divergent = !self.facts.uniformity.is_uniform(cond_expr);
        let outermost = divergent && self.divergence == 0;
        // Where returned lanes stay, they skip the outermost divergent branch: its end is
        // needed before its condition.
        let early = (outermost && self.keeps_returned()).then(|| (self.w.label(), self.w.label()));
        let exit = match outermost {
            true => {
                let ops = self.branch_ops(then, otherwise);
                self.enter_divergent(node, ops, early.map(|(_, end)| end))?
            }
            false => None,
        };
        let cond = self.put_expr(cond_expr)?;
        let p = self.truthy(cond);
        // A condition of literals (`if false`, `if cast<bool>(1.5)`) is hidden from ptxas's
        // constant folding: ptxas 12.9-13.0 crash with SIGSEGV deleting such a dead branch
        // inside a loop whose live path exits (`tests/fuzz_regressions/
        // cpu-ptxas-crash-3-constant-branch-in-loop-with-exit.case`).
        let p = match is_constant(cond_expr) {
            true => self.opaque_pred(p),
            false => self.branch_pred(p),
        };
        if divergent && (has_barrier(then) || has_barrier(otherwise)) {
            self.check_branch_agreement(p);
        }
        self.put_branch_history(node, p);
        self.divergence += u32::from(divergent);
        let (else_label, end_label) = early.unwrap_or_else(|| (self.w.label(), self.w.label()));
        emit!(self.w, "@!{p} bra {else_label}");
        let mut result = self.put_scoped_block(then);
        if otherwise.is_empty() {
            self.w.put_label(else_label);
            self.w.put_label(end_label);
        } else {
            emit!(self.w, "bra {end_label}");
            // The then-branch's subgroup results are anchored after the `If`, on its way
            // on, not by the else-branch's first branch.
            let then_results = std::mem::take(&mut self.unanchored);
            self.w.put_label(else_label);
            result = result.and_then(|()| self.put_scoped_block(otherwise));
            self.unanchored.extend(then_results);
            self.w.put_label(end_label);
        }
        self.divergence -= u32::from(divergent);
        if outermost {
            self.leave_divergent(exit);
        }
        result
    }

    /// The reference fails when live lanes disagree on a branch holding a barrier; check
    /// agreement with barrier reductions (every live lane is here: enclosing branches with
    /// barriers were checked the same way).
    fn check_branch_agreement(&mut self, p: Reg) {
        let (all, any) = (self.pred(), self.pred());
        let barrier = self.cta_barrier();
        emit!(self.w, "{barrier}.red.and.pred {all}, 0, {p}");
        emit!(self.w, "{barrier}.red.or.pred {any}, 0, {p}");
        emit!(self.w, "xor.pred {all}, {all}, {any}");
        // `all` is the same in every lane (a barrier reduction), so all exit.
        self.fault_exit_if(all, DeviceFault::DivergentBarrier);
    }

    /// The reference fails as well when a barrier-holding `If` in a loop takes another
    /// value than it took before (it keeps every value an invocation's condition took and
    /// compares them all, across iterations too). Live lanes agree at each evaluation
    /// (uniform condition, or `check_branch_agreement`), so each lane keeps its own history.
    pub(super) fn put_branch_history(&mut self, node: &'p Node, p: Reg) {
        let Some(&history) = self.branch_history.get(&(node as *const Node)) else {
            return;
        };
        let (taken, both) = (self.b32(), self.pred());
        emit!(self.w, "selp.u32 {taken}, 1, 2, {p}");
        emit!(self.w, "or.b32 {history}, {history}, {taken}");
        emit!(self.w, "setp.eq.u32 {both}, {history}, 3");
        self.fault_if(both, DeviceFault::DivergentBarrier);
    }

    /// Empty histories for the barrier-holding `If`s of an outermost loop, which runs
    /// at most once per invocation (or of a step machine); their registers, in order.
    pub(super) fn start_branch_histories(&mut self, body: &'p [Node]) -> Vec<Reg> {
        let mut branches = Vec::new();
        for_each_node(body, &mut |node| {
            if let Node::If {
                then, otherwise, ..
            } = node
            {
                if has_barrier(then) || has_barrier(otherwise) {
                    branches.push(node as *const Node);
                }
            }
        });
        let mut histories = Vec::new();
        for branch in branches {
            let history = self.b32();
            emit!(self.w, "mov.u32 {history}, 0");
            self.branch_history.insert(branch, history);
            histories.push(history);
        }
        histories
    }

    /// The subgroup operations in the branches of the outermost divergent branch: the
    /// reference evaluates them over every lane of the chunk, in or out of the branch, so
    /// they run at the branch, converged (`analysis::lockstep` checked that this is exact).
    fn branch_ops(&self, then: &'p [Node], otherwise: &'p [Node]) -> Vec<&'p Expr> {
        let uniformity = &self.facts.uniformity;
        uniformity
            .hoistable(then)
            .into_iter()
            .chain(uniformity.hoistable(otherwise))
            .flatten()
            .collect()
    }

    fn put_loop(
        &mut self,
        node: &'p Node,
        var: &'p str,
        from: &'p Expr,
        to: &'p Expr,
        body: &'p [Node],
    ) -> Result<(), CodegenError> {
        let uniformity = &self.facts.uniformity;
        let divergent = !(uniformity.is_uniform(from) && uniformity.is_uniform(to));
        let outermost = divergent && self.divergence == 0;
        // Its subgroup operations run before it, over every lane, as for a branch. Where
        // returned lanes stay, they skip the outermost divergent loop: its end is needed
        // before its bounds.
        let early = (outermost && self.keeps_returned()).then(|| (self.w.label(), self.w.label()));
        let exit = match outermost {
            true => {
                let ops = uniformity.hoistable_in_loop(var, body).unwrap_or_default();
                self.enter_divergent(node, ops, early.map(|(_, end)| end))?
            }
            false => None,
        };
        if self.loop_depth == 0 {
            let _ = self.start_branch_histories(body);
        }
        let rolled = unroll::keeps_rolled(from, to, body);
        let from = self.put_expr(from)?;
        let from = self.u32_checked(from, DeviceFault::LoopBoundNotU32)?;
        let to = self.put_expr(to)?;
        let to = self.u32_checked(to, DeviceFault::LoopBoundNotU32)?;
        let labels = early.unwrap_or_else(|| (self.w.label(), self.w.label()));
        let checked = match early {
            None => self.hoisted_bounds_test(node, to)?,
            Some(_) => None,
        };
        let result = match checked {
            None => self.put_iterations(var, (from, to), body, (divergent, rolled), labels),
            Some((all_in_bounds, proven)) => {
                // Two copies of the loop; the one without per-load checks where the test
                // before it covers every iteration (`analysis::loop_bounds`).
                let (unchecked, after) = (self.w.label(), self.w.label());
                let all_in_bounds = self.branch_pred(all_in_bounds);
                emit!(self.w, "@{all_in_bounds} bra {unchecked}");
                self.put_iterations(var, (from, to), body, (divergent, rolled), labels)?;
                emit!(self.w, "bra {after}");
                self.w.put_label(unchecked);
                let saved = std::mem::replace(&mut self.proven_loads, proven);
                let labels = (self.w.label(), self.w.label());
                let result =
                    self.put_iterations(var, (from, to), body, (divergent, rolled), labels);
                self.proven_loads = saved;
                self.w.put_label(after);
                result
            }
        };
        result?;
        if outermost {
            self.leave_divergent(exit);
        }
        Ok(())
    }

    /// The loop's iterations, from its evaluated bounds to `end`.
    fn put_iterations(
        &mut self,
        var: &'p str,
        (from, to): (Reg, Reg),
        body: &'p [Node],
        (divergent, rolled): (bool, bool),
        (top, end): (Label, Label),
    ) -> Result<(), CodegenError> {
        let counter = self.w.reg(RegClass::B32);
        let bound = self.w.reg(RegClass::B32);
        self.mov(counter, from);
        self.mov(bound, to);
        let mut done = self.w.reg(RegClass::Pred);
        self.w.put_label(top);
        if rolled {
            // See `analysis::unroll`: the pragma sits in the loop's header block.
            self.w.raw("\t.pragma \"nounroll\";\n");
        }
        emit!(self.w, "setp.ge.u32 {done}, {counter}, {bound}");
        // A lane that recorded a fault stops iterating, so no garbage bound keeps it
        // looping, and ends (its results are discarded): going on past the loop would
        // take it down a path no other lane takes (say, past a `Return` in the body),
        // where a later subgroup operation would wait for lanes that never come. An
        // ended lane holds up neither a barrier nor a warp-synchronous operation.
        emit!(self.w, "or.pred {done}, {done}, {}", self.faulted);
        let stopped = self.w.label();
        done = self.branch_pred(done);
        emit!(self.w, "@{done} bra {stopped}");
        self.push_scope();
        self.divergence += u32::from(divergent);
        self.loop_depth += 1;
        // The body sees an immutable copy, so nothing in it can steer the loop.
        let var_reg = self.w.reg(RegClass::B32);
        self.mov(var_reg, counter);
        let result = self
            .bind(var, Val::new(ValKind::U32, var_reg), true)
            .and_then(|()| self.put_block(body));
        self.divergence -= u32::from(divergent);
        self.loop_depth -= 1;
        self.pop_scope();
        result?;
        emit!(self.w, "add.u32 {counter}, {counter}, 1");
        emit!(self.w, "bra {top}");
        self.w.put_label(stopped);
        let faulted = self.branch_pred(self.faulted);
        emit!(self.w, "@!{faulted} bra {end}");
        self.end_invocation();
        self.w.put_label(end);
        Ok(())
    }
}
