//! `AsyncLoad` / `AsyncStore` / `AsyncWait`: per-invocation byte copies the reference
//! captures at the start node and applies at the matching wait.
//!
//! The emitter performs the copy at the wait. That is exact when nothing between the
//! start and the wait can change the source bytes or end the invocation, so it accepts a
//! start only when its wait follows in the same statement list with no intervening store
//! or atomic to the source, barrier, `Return` or reuse of the tag; anything else is
//! rejected rather than approximated.

use crate::codegen::visit::any_expr;
use crate::codegen::CodegenError;
use vyre_foundation::ir::{Expr, Node};

pub(crate) fn rejected(detail: impl Into<String>) -> CodegenError {
    CodegenError::unsupported(
        "async copy",
        detail,
        "put the AsyncWait right after its AsyncLoad/AsyncStore in the same block, with nothing in between that writes the source, synchronises or returns",
    )
}

/// Check the start/wait pairing of one statement list (see the module docs).
pub(crate) fn check_block(nodes: &[Node]) -> Result<(), CodegenError> {
    for (index, node) in nodes.iter().enumerate() {
        let (source, tag) = match node {
            Node::AsyncLoad { source, tag, .. } | Node::AsyncStore { source, tag, .. } => {
                (source, tag)
            }
            Node::AsyncWait { tag } => {
                let started = nodes[..index].iter().rev().any(|earlier| match earlier {
                    Node::AsyncLoad { tag: t, .. } | Node::AsyncStore { tag: t, .. } => t == tag,
                    _ => false,
                });
                if !started {
                    return Err(rejected(format!(
                        "AsyncWait `{tag}` has no AsyncLoad/AsyncStore before it in the same block"
                    )));
                }
                continue;
            }
            _ => continue,
        };
        let Some(wait) = nodes[index + 1..]
            .iter()
            .position(|later| matches!(later, Node::AsyncWait { tag: t } if t == tag))
        else {
            return Err(rejected(format!(
                "async transfer `{tag}` has no AsyncWait after it in the same block"
            )));
        };
        for between in &nodes[index + 1..index + 1 + wait] {
            if disturbs(between, source.as_str(), tag.as_str()) {
                return Err(rejected(format!(
                    "a statement between async transfer `{tag}` and its wait may change its source, synchronise or return"
                )));
            }
        }
    }
    Ok(())
}

fn disturbs(node: &Node, source: &str, tag: &str) -> bool {
    let writes_source = |expr: &Expr| expr_writes(expr, source);
    match node {
        Node::Store {
            buffer,
            index,
            value,
        } => buffer.as_str() == source || writes_source(index) || writes_source(value),
        Node::Let { value, .. } | Node::Assign { value, .. } => writes_source(value),
        Node::AsyncLoad {
            destination,
            tag: t,
            ..
        }
        | Node::AsyncStore {
            destination,
            tag: t,
            ..
        } => destination.as_str() == source || t.as_str() == tag,
        Node::AsyncWait { .. } => false,
        // Anything with nested statements, barriers, returns, traps: be conservative.
        _ => true,
    }
}

fn expr_writes(expr: &Expr, buffer: &str) -> bool {
    any_expr(
        expr,
        &|e| matches!(e, Expr::Atomic { buffer: b, .. } if b.as_str() == buffer),
    )
}
