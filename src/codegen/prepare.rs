//! The program the reference actually interprets: the same normalisation and call
//! inlining `vyre-reference` applies before running (`program_for_interpreter`).

use super::visit::any_expr_in;
use super::CodegenError;
use std::borrow::Cow;
use vyre_foundation::ir::{Expr, Node, Program};

/// Normalise `program` exactly as the reference does, then inline calls.
pub(crate) fn prepare(program: &Program) -> Result<Cow<'_, Program>, CodegenError> {
    prepare_with(program, true)
}

/// [`prepare`], lowering collectives for one rank only when `single_rank` (a backend
/// with a communicator keeps them: they split the program, see `codegen::collective`).
pub(crate) fn prepare_with(
    program: &Program,
    single_rank: bool,
) -> Result<Cow<'_, Program>, CodegenError> {
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
    let lowered = if single_rank {
        vyre_foundation::transform::collectives::lower_single_rank_collectives(&current)
    } else {
        Ok(None)
    };
    match lowered {
        Ok(Some(lowered)) => current = Cow::Owned(lowered),
        Ok(None) => {}
        Err(error) => {
            return Err(CodegenError::invalid(
                format!("collective cannot run on one device: {error}"),
                "use CommGroup::WORLD (root 0) on a single GPU",
            ))
        }
    }
    // Composite calls are their IR body (an `Expr::BufferRef` argument rebinds the callee's
    // buffer); calls without one stay and are rejected when lowered.
    if any_expr_in(current.entry(), &|expr| matches!(expr, Expr::Call { .. })) {
        let inlined = vyre_foundation::ir::inline_composite_calls(&current).map_err(|error| {
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
