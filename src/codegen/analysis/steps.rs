//! Which segments run as a step machine, and in which round mode (see `lower::steps` and
//! `docs/SUBGROUP_LOCKSTEP.md`).
//!
//! A segment whose subgroup operations [`super::lockstep::check`] cannot place in
//! converged code runs the reference's schedule itself: every warp takes the reference's
//! rounds, each lane one step per round. That is exact for every statement this module
//! accepts; it refuses the two constructs whose reference semantics span the whole
//! workgroup within a round (a barrier in a data-dependent branch) or touch memory in a
//! subgroup operand (an atomic there).

use super::lockstep::outermost_subgroup_ops;
use super::uniform::{written_buffers, Uniformity};
use crate::codegen::visit::{any_expr, for_each_expr, for_each_node, has_barrier};
use crate::codegen::CodegenError;
use vyre_foundation::ir::{Expr, Node};

/// How a step machine's warp takes a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RoundMode {
    /// Every lane takes its step at once, after the round's subgroup operations were
    /// evaluated: exact when no subgroup operand loads a buffer the segment writes.
    Parallel,
    /// Lane after lane, each with the subgroup operations it meets evaluated on the
    /// round-start snapshot of the variables and memory as the earlier lanes left it, as
    /// the reference runs a round.
    Serial,
}

/// The round mode for `segment`, or the refusal of a construct the step machine does not
/// reproduce.
pub(crate) fn round_mode(
    segment: &[Node],
    uniformity: &Uniformity<'_>,
) -> Result<RoundMode, CodegenError> {
    let mut refusal = None;
    for_each_node(segment, &mut |node| {
        if refusal.is_some() {
            return;
        }
        refusal = refused(node, uniformity).err();
    });
    if let Some(refusal) = refusal {
        return Err(refusal);
    }
    let written = written_buffers(segment);
    let mut loads_written = false;
    for_each_node(segment, &mut |node| {
        for_each_expr(node, &mut |expr| {
            for op in outermost_subgroup_ops(expr) {
                loads_written |= any_expr(
                    op,
                    &|e| matches!(e, Expr::Load { buffer, .. } if written.contains(buffer.as_str())),
                );
            }
        })
    });
    Ok(match loads_written {
        true => RoundMode::Serial,
        false => RoundMode::Parallel,
    })
}

fn refused(node: &Node, uniformity: &Uniformity<'_>) -> Result<(), CodegenError> {
    match node {
        // A uniform condition is the same in every lane, so each lane's own history of it
        // (`put_branch_history`) is the workgroup's.
        Node::If {
            cond,
            then,
            otherwise,
        } if !uniformity.is_uniform(cond) && (has_barrier(then) || has_barrier(otherwise)) => {
            Err(CodegenError::unsupported(
                "Barrier in a data-dependent branch of a segment run as a step machine",
                "the reference checks the choices of every invocation still running at a branch holding a barrier against each other, round by round across the workgroup, which a warp stepping alone cannot see",
                "make the branch's condition uniform, move the Barrier out of the branch, or move the subgroup operations into converged control flow",
            ))
        }
        _ => {
            let mut atomic = false;
            for_each_expr(node, &mut |expr| {
                for op in outermost_subgroup_ops(expr) {
                    atomic |= any_expr(op, &|e| matches!(e, Expr::Atomic { .. }));
                }
            });
            match atomic {
                true => Err(CodegenError::unsupported(
                    "atomic in a subgroup operand",
                    "the reference evaluates every lane's operand on a copy of memory, so the atomic writes nothing there",
                    "run the atomic in a Let before the subgroup operation",
                )),
                false => Ok(()),
            }
        }
    }
}
