//! Which segments run as a step machine, and in which round mode (see `lower::steps` and
//! `docs/SUBGROUP_LOCKSTEP.md`).
//!
//! A segment whose subgroup operations [`super::lockstep::check`] cannot place in
//! converged code runs the reference's schedule itself: every warp takes the reference's
//! rounds, each lane one step per round. That is exact for every statement this module
//! accepts. A barrier in a data-dependent branch makes the workgroup's warps take every
//! round together ([`StepPlan::workgroup_rounds`]): after each round the reference checks
//! every running invocation's choices at such branches against the others', across the
//! workgroup.

use super::lockstep::outermost_subgroup_ops;
use super::uniform::{written_buffers, Uniformity};
use crate::codegen::visit::{any_expr, for_each_child, for_each_expr, for_each_node, has_barrier};
use vyre_foundation::ir::{Expr, Node};

/// How a step machine's warp takes a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RoundMode {
    /// Every lane takes its step at once, after the round's subgroup operations were
    /// evaluated: exact when no subgroup operand loads a buffer the segment writes or
    /// holds an atomic.
    Parallel,
    /// Lane after lane, each with the subgroup operations it meets evaluated on the
    /// round-start snapshot of the variables and memory as the earlier lanes left it, as
    /// the reference runs a round.
    Serial,
}

/// How a step machine takes its rounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StepPlan {
    pub(crate) mode: RoundMode,
    /// Set when a data-dependent branch holds a barrier: the reference then checks, after
    /// every round, that the invocations still running took one side at each such branch
    /// (each invocation's whole history of it counts), so the workgroup's warps take each
    /// round together and compare their lanes' histories with barrier reductions.
    pub(crate) workgroup_rounds: bool,
}

/// How `segment` runs as a step machine.
pub(crate) fn plan(segment: &[Node], uniformity: &Uniformity<'_>) -> StepPlan {
    StepPlan {
        mode: round_mode(segment),
        workgroup_rounds: has_divergent_barrier_branch(segment, uniformity),
    }
}

/// Serial when a subgroup operand loads a buffer the segment writes or holds an atomic.
fn round_mode(segment: &[Node]) -> RoundMode {
    let written = written_buffers(segment);
    let mut loads_written = false;
    for_each_node(segment, &mut |node| {
        for_each_expr(node, &mut |expr| {
            for op in outermost_subgroup_ops(expr) {
                // An atomic there runs once per lane of every evaluation, in lane order
                // (`put_atomic_in_lane_order`): each evaluation must see the ones before.
                loads_written |= any_expr(op, &|e| match e {
                    Expr::Load { buffer, .. } => written.contains(buffer.as_str()),
                    Expr::Atomic { .. } => true,
                    _ => false,
                });
            }
        })
    });
    match loads_written {
        true => RoundMode::Serial,
        false => RoundMode::Parallel,
    }
}

/// Whether two atomics in `operand` act on one buffer: the reference then runs all of one
/// lane's before the next lane's.
pub(crate) fn shares_an_atomic_buffer(operand: &Expr) -> bool {
    atomic_buffers(operand)
        .windows(2)
        .any(|pair| pair[0] == pair[1])
}

/// The buffers of the atomics in `expr`, sorted (a buffer twice: two atomics on it).
fn atomic_buffers(expr: &Expr) -> Vec<&str> {
    fn visit<'e>(expr: &'e Expr, found: &mut Vec<&'e str>) {
        if let Expr::Atomic { buffer, .. } = expr {
            found.push(buffer.as_str());
        }
        for_each_child(expr, &mut |child| visit(child, found));
    }
    let mut buffers = Vec::new();
    visit(expr, &mut buffers);
    buffers.sort_unstable();
    buffers
}

/// Whether `segment` holds a branch whose condition may differ between invocations and
/// which holds a barrier. Such a segment runs as a step machine even without subgroup
/// operations: whether the reference fails there depends on its schedule (it checks the
/// invocations still running after every round, so lanes that took one side and finished
/// before others reached the branch do not count), which converged code does not follow:
/// lanes that took an extra statement on the way reach the branch rounds later
/// (`tests/fuzz_regressions/gpu-error-divergent-barrier-after-others-finished.case`).
pub(crate) fn has_divergent_barrier_branch(segment: &[Node], uniformity: &Uniformity<'_>) -> bool {
    let mut found = false;
    for_each_node(segment, &mut |node| {
        found |= is_divergent_barrier_branch(node, uniformity);
    });
    found
}

/// A branch whose condition may differ between invocations and which holds a barrier. (Of
/// a uniform condition every lane's own history (`put_branch_history`) is the workgroup's.)
fn is_divergent_barrier_branch(node: &Node, uniformity: &Uniformity<'_>) -> bool {
    match node {
        Node::If {
            cond,
            then,
            otherwise,
        } => !uniformity.is_uniform(cond) && (has_barrier(then) || has_barrier(otherwise)),
        _ => false,
    }
}
