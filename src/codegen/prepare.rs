//! The program the reference actually interprets: the same normalisation
//! `vyre-reference` applies before running (`program_for_interpreter`), plus inlining of
//! `Expr::Call`s whose op vyre can resolve to IR.

use super::CodegenError;
use std::borrow::Cow;
use vyre_foundation::ir::{Expr, Node, Program};

/// Normalise `program` exactly as the reference does, then inline calls.
pub(crate) fn prepare(program: &Program) -> Result<Cow<'_, Program>, CodegenError> {
    let mut current: Cow<'_, Program> = match program.top_level_region_violation() {
        None => Cow::Borrowed(program),
        Some(message) => {
            if program.entry().is_empty()
                || matches!(program.entry().first(), Some(Node::Store { .. }))
            {
                return Err(CodegenError::invalid(
                    format!("the program is not a top-level Region-wrapped Program: {message}"),
                    "build the program with Program::wrapped",
                ));
            }
            Cow::Owned(program.clone().reconcile_runnable_top_level())
        }
    };
    // World-of-one collectives: AllReduce/Broadcast are no-ops, AllGather/ReduceScatter
    // are bounded copies; any other group is an error, as in the reference.
    match vyre_foundation::transform::collectives::lower_single_rank_collectives(&current) {
        Ok(Some(lowered)) => current = Cow::Owned(lowered),
        Ok(None) => {}
        Err(error) => {
            return Err(CodegenError::invalid(
                format!("collective cannot run on one device: {error}"),
                "use CommGroup::WORLD (root 0) on a single GPU",
            ))
        }
    }
    if contains_call(current.entry()) {
        let inlined = vyre_foundation::ir::inline_calls(&current).map_err(|error| {
            CodegenError::unsupported(
                "Expr::Call",
                format!("the call cannot be inlined into IR: {error}"),
                "register the called op with an IR body (or inline it before dispatch)",
            )
        })?;
        current = Cow::Owned(inlined);
    }
    Ok(current)
}

fn contains_call(nodes: &[Node]) -> bool {
    nodes.iter().any(node_has_call)
}

fn node_has_call(node: &Node) -> bool {
    match node {
        Node::Let { value, .. } | Node::Assign { value, .. } => expr_has_call(value),
        Node::Store { index, value, .. } => expr_has_call(index) || expr_has_call(value),
        Node::If {
            cond,
            then,
            otherwise,
        } => expr_has_call(cond) || contains_call(then) || contains_call(otherwise),
        Node::Loop { from, to, body, .. } => {
            expr_has_call(from) || expr_has_call(to) || contains_call(body)
        }
        Node::Block(body) => contains_call(body),
        Node::Region { body, .. } => contains_call(body),
        Node::AsyncLoad { offset, size, .. } | Node::AsyncStore { offset, size, .. } => {
            expr_has_call(offset) || expr_has_call(size)
        }
        Node::Trap { address, .. } => expr_has_call(address),
        _ => false,
    }
}

fn expr_has_call(expr: &Expr) -> bool {
    match expr {
        Expr::Call { .. } => true,
        Expr::Load { index, .. } => expr_has_call(index),
        Expr::BinOp { left, right, .. } => expr_has_call(left) || expr_has_call(right),
        Expr::UnOp { operand, .. } => expr_has_call(operand),
        Expr::Select {
            cond,
            true_val,
            false_val,
        } => expr_has_call(cond) || expr_has_call(true_val) || expr_has_call(false_val),
        Expr::Cast { value, .. } => expr_has_call(value),
        Expr::Fma { a, b, c } => expr_has_call(a) || expr_has_call(b) || expr_has_call(c),
        Expr::Atomic {
            index,
            expected,
            value,
            ..
        } => {
            expr_has_call(index)
                || expected.as_deref().is_some_and(expr_has_call)
                || expr_has_call(value)
        }
        Expr::SubgroupBallot { cond } => expr_has_call(cond),
        Expr::SubgroupShuffle { value, lane } => expr_has_call(value) || expr_has_call(lane),
        Expr::SubgroupReduce { value, .. } => expr_has_call(value),
        _ => false,
    }
}
