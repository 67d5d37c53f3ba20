//! A conservative uniformity analysis: which values are provably the same for every
//! invocation of a workgroup.
//!
//! Control flow steered only by uniform values keeps every lane on the same path; the
//! subgroup lowering (`lockstep`) and barrier loops rely on it. Loops containing barriers
//! must have provably uniform bounds (a lane that leaves early would otherwise make the
//! reference fail while hardware runs on).

use crate::codegen::visit::{
    all_children, any_expr_in, children, for_each_expr_in, for_each_node, has_barrier,
};
use crate::codegen::CodegenError;
use rustc_hash::FxHashSet;
use vyre_foundation::ir::{Expr, Node, Program};

pub(crate) struct Uniformity<'p> {
    /// Variables that may differ between invocations.
    divergent_vars: FxHashSet<&'p str>,
    /// Buffers the program writes (their loads may differ over time).
    written: FxHashSet<&'p str>,
    /// Variables that are ever `Assign`ed, or bound by more than one `Let`/loop.
    mutable_vars: FxHashSet<&'p str>,
}

impl<'p> Uniformity<'p> {
    pub(crate) fn analyse(program: &'p Program) -> Self {
        let mut facts = Self {
            divergent_vars: FxHashSet::default(),
            written: written_buffers(program.entry()),
            mutable_vars: mutable_vars(program.entry()),
        };
        // Iterate to a fixpoint: a variable becomes divergent when any assignment to it is
        // divergent or sits in divergent control flow.
        loop {
            let before = facts.divergent_vars.len();
            facts.mark(program.entry(), true);
            if facts.divergent_vars.len() == before {
                break;
            }
        }
        facts
    }

    fn mark(&mut self, nodes: &'p [Node], uniform_ctx: bool) {
        for node in nodes {
            let inner = self.body_uniform(node, uniform_ctx);
            match node {
                Node::Let { name, value } | Node::Assign { name, value }
                    if !uniform_ctx || !self.is_uniform(value) =>
                {
                    self.divergent_vars.insert(name.as_str());
                }
                Node::Loop { var, .. } if !inner => {
                    self.divergent_vars.insert(var.as_str());
                }
                _ => {}
            }
            for body in children(node) {
                self.mark(body, inner);
            }
        }
    }

    /// Whether the statements nested in `node` run in provably uniform control flow,
    /// given whether `node` itself does.
    fn body_uniform(&self, node: &Node, uniform_ctx: bool) -> bool {
        uniform_ctx
            && match node {
                // Every running invocation takes the same side of a branch holding a
                // barrier, or the dispatch fails there, as in the reference (which checks
                // it: converged code with `check_branch_agreement`, a step machine after
                // each round).
                Node::If {
                    cond,
                    then,
                    otherwise,
                } => self.is_uniform(cond) || has_barrier(then) || has_barrier(otherwise),
                Node::Loop { from, to, .. } => self.is_uniform(from) && self.is_uniform(to),
                _ => true,
            }
    }

    /// Whether `expr` is provably the same for every invocation of a workgroup.
    pub(crate) fn is_uniform(&self, expr: &Expr) -> bool {
        self.built_from(expr, &|leaf| match leaf {
            Expr::SubgroupSize => true,
            Expr::Var(name) => !self.divergent_vars.contains(name.as_str()),
            _ => false,
        })
    }

    /// Whether `expr` has the same value whenever a lane evaluates it (no writes to what
    /// it reads, no mutable variables, no side effects), so a subgroup operation over it
    /// may run early, at the enclosing divergent branch, with the whole subgroup.
    pub(crate) fn is_time_invariant(&self, expr: &Expr, bound_inside: &FxHashSet<&str>) -> bool {
        self.built_from(expr, &|leaf| match leaf {
            Expr::LocalId { .. } | Expr::InvocationId { .. } => true,
            Expr::Var(name) => {
                !self.mutable_vars.contains(name.as_str()) && !bound_inside.contains(name.as_str())
            }
            _ => false,
        })
    }

    /// Whether `expr` is pure arithmetic over literals, buffer lengths, workgroup ids,
    /// loads of never-written buffers and the leaves `leaf` accepts.
    fn built_from(&self, expr: &Expr, leaf: &impl Fn(&Expr) -> bool) -> bool {
        match expr {
            Expr::LitU32(_)
            | Expr::LitI32(_)
            | Expr::LitF32(_)
            | Expr::LitBool(_)
            | Expr::BufLen { .. }
            | Expr::WorkgroupId { .. } => true,
            Expr::Load { buffer, index } => {
                !self.written.contains(buffer.as_str()) && self.built_from(index, leaf)
            }
            Expr::BinOp { .. }
            | Expr::UnOp { .. }
            | Expr::Cast { .. }
            | Expr::Select { .. }
            | Expr::Fma { .. } => all_children(expr, |child| self.built_from(child, leaf)),
            _ => leaf(expr),
        }
    }

    /// Subgroup operations inside `nodes` (a divergent branch) that can be hoisted to the
    /// branch point, or `None` when one of them cannot (it reads something that may
    /// change). Time-invariant operands give every lane the same value at any time, in
    /// any iteration of a loop around the operation (`lockstep` checks the timing).
    pub(crate) fn hoistable<'e>(&self, nodes: &'e [Node]) -> Option<Vec<&'e Expr>> {
        self.hoistable_binding(nodes, None)
    }

    /// [`Self::hoistable`] for the body of a divergent loop over `var`.
    pub(crate) fn hoistable_in_loop<'e>(
        &self,
        var: &str,
        body: &'e [Node],
    ) -> Option<Vec<&'e Expr>> {
        self.hoistable_binding(body, Some(var))
    }

    fn hoistable_binding<'e>(&self, nodes: &'e [Node], var: Option<&str>) -> Option<Vec<&'e Expr>> {
        let mut bound_inside: FxHashSet<&str> = var.into_iter().collect();
        for_each_node(nodes, &mut |node| {
            if let Node::Let { name, .. } | Node::Loop { var: name, .. } = node {
                bound_inside.insert(name.as_str());
            }
        });
        // Time-invariant operands hold no subgroup operation, so every one visited is new.
        let (mut found, mut ok) = (Vec::new(), true);
        for_each_expr_in(nodes, &mut |expr| {
            if is_subgroup_op(expr) {
                ok &= all_children(expr, |operand| {
                    self.is_time_invariant(operand, &bound_inside)
                });
                found.push(expr);
            }
        });
        ok.then_some(found)
    }
}

/// Variables that are ever assigned, bound by more than one `Let`, or loop variables
/// (which change every iteration).
fn mutable_vars(nodes: &[Node]) -> FxHashSet<&str> {
    let (mut bound, mut mutable) = (FxHashSet::default(), FxHashSet::default());
    for_each_node(nodes, &mut |node| match node {
        Node::Let { name, .. } if !bound.insert(name.as_str()) => {
            mutable.insert(name.as_str());
        }
        Node::Assign { name, .. } | Node::Loop { var: name, .. } => {
            mutable.insert(name.as_str());
        }
        _ => {}
    });
    mutable
}

/// Buffers a store, async copy or atomic writes.
pub(crate) fn written_buffers(nodes: &[Node]) -> FxHashSet<&str> {
    let mut written = FxHashSet::default();
    for_each_node(nodes, &mut |node| match node {
        Node::Store { buffer, .. } => {
            written.insert(buffer.as_str());
        }
        Node::AsyncLoad { destination, .. } | Node::AsyncStore { destination, .. } => {
            written.insert(destination.as_str());
        }
        _ => {}
    });
    for_each_expr_in(nodes, &mut |expr| {
        if let Expr::Atomic { buffer, .. } = expr {
            written.insert(buffer.as_str());
        }
    });
    written
}

/// Reject loops holding a barrier whose bounds may differ between lanes.
pub(crate) fn check(program: &Program, facts: &Uniformity<'_>) -> Result<(), CodegenError> {
    walk_check(facts, program.entry(), true)
}

fn walk_check(
    facts: &Uniformity<'_>,
    nodes: &[Node],
    uniform_ctx: bool,
) -> Result<(), CodegenError> {
    for node in nodes {
        let inner = facts.body_uniform(node, uniform_ctx);
        if let Node::Loop { body, .. } = node {
            if !inner && has_barrier(body) {
                return Err(divergent_barrier_loop());
            }
        }
        for body in children(node) {
            walk_check(facts, body, inner)?;
        }
    }
    Ok(())
}

fn divergent_barrier_loop() -> CodegenError {
    CodegenError::unsupported(
        "Barrier in a loop with non-uniform bounds",
        "every lane must run the same number of iterations to meet at the barrier",
        "compute the loop bounds from values uniform across the workgroup",
    )
}

pub(crate) fn is_subgroup_op(expr: &Expr) -> bool {
    matches!(
        expr,
        Expr::SubgroupBallot { .. } | Expr::SubgroupShuffle { .. } | Expr::SubgroupReduce { .. }
    )
}

pub(crate) fn has_subgroup(nodes: &[Node]) -> bool {
    any_expr_in(nodes, &is_subgroup_op)
}
