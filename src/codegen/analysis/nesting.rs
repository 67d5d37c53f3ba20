//! The nesting limits that keep every recursive walk of the emitter and its analyses
//! within a thread's stack, checked up front by an iterative walk (an explicit stack, so
//! the check itself cannot overflow however deep the program is).

use crate::codegen::visit::{children, for_each_child, for_each_expr};
use crate::codegen::CodegenError;
use vyre_foundation::ir::{Expr, Node, Program};

/// Deepest statement nesting [`emit_ptx`](crate::codegen::emit_ptx) accepts: statement
/// lists nested in `If`/`Loop`/`Block`/`Region` bodies, the entry counting as level 1.
/// vyre's validator accepts at most `DEFAULT_MAX_NESTING_DEPTH` (64); this is 1.5 times
/// that.
pub const MAX_STATEMENT_DEPTH: usize = 96;

/// Deepest expression nesting `emit_ptx` accepts, the root of an expression counting as
/// level 1. vyre's validator accepts at most `DEFAULT_MAX_EXPR_DEPTH` (128); this is 1.5
/// times that.
pub const MAX_EXPRESSION_DEPTH: usize = 192;

/// Reject a program nested deeper than [`MAX_STATEMENT_DEPTH`] or
/// [`MAX_EXPRESSION_DEPTH`]. Within both, every walk of `emit_ptx` fits a 2 MiB thread
/// stack in debug builds with room to spare: `tests/deep_nesting.rs` emits programs at
/// both limits at once; measured (debug, x86-64), they need between 1 and 1.125 MiB, and
/// 1.25 to 1.5 MiB at 128/256 levels, so the limits leave a margin for costlier shapes.
pub fn check_nesting(program: &Program) -> Result<(), CodegenError> {
    let mut lists: Vec<(&[Node], usize)> = vec![(program.entry(), 1)];
    while let Some((nodes, depth)) = lists.pop() {
        if depth > MAX_STATEMENT_DEPTH {
            return Err(CodegenError::unsupported(
                "deeply nested statements",
                format!(
                    "If/Loop/Block/Region bodies nest deeper than {MAX_STATEMENT_DEPTH} levels"
                ),
                "flatten the nested statements (hoist inner blocks, split the program)",
            ));
        }
        for node in nodes {
            let mut result = Ok(());
            for_each_expr(node, &mut |expr| {
                if result.is_ok() {
                    result = check_expression(expr);
                }
            });
            result?;
            lists.extend(children(node).into_iter().map(|body| (body, depth + 1)));
        }
    }
    Ok(())
}

fn check_expression(root: &Expr) -> Result<(), CodegenError> {
    let mut exprs = vec![(root, 1usize)];
    while let Some((expr, depth)) = exprs.pop() {
        if depth > MAX_EXPRESSION_DEPTH {
            return Err(CodegenError::unsupported(
                "deeply nested expression",
                format!("an expression nests deeper than {MAX_EXPRESSION_DEPTH} levels"),
                "split the expression into let-bindings",
            ));
        }
        for_each_child(expr, &mut |child| exprs.push((child, depth + 1)));
    }
    Ok(())
}
