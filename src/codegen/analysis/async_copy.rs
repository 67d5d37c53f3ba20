//! `AsyncLoad` / `AsyncStore` / `AsyncWait`: per-invocation byte copies the reference
//! captures at the start node and applies at the matching wait (`vyre-reference`'s
//! hashmap interpreter: a tag started twice, a wait with no started transfer and an
//! invocation that ends with a transfer pending are run-time errors).
//!
//! The lowering keeps each tag's state in registers at run time, so starts and waits may
//! sit anywhere in a segment's statement tree (the reference runs each grid-barrier
//! segment with fresh invocations, so a transfer never outlives its segment). What this
//! analysis decides is where the payload bytes are read: at the wait, which is exact when
//! they cannot change in between, or into a snapshot taken at the start.

use super::uniform::written_buffers;
use crate::codegen::visit::{any_expr, children};
use vyre_foundation::ir::{Expr, Node};

/// One start node of a segment.
pub(crate) struct AsyncStart<'p> {
    pub(crate) node: &'p Node,
    pub(crate) tag: &'p str,
    /// The payload must be captured at the start: the source is written somewhere in the
    /// segment and the start is not followed, in its own statement list, by its wait with
    /// nothing in between that could write the source or let another invocation do so.
    pub(crate) snapshot: bool,
}

/// Every start node of `segment`, in program order.
pub(crate) fn starts(segment: &[Node]) -> Vec<AsyncStart<'_>> {
    let written = written_buffers(segment);
    let mut out = Vec::new();
    collect(segment, &|source| written.contains(source), &mut out);
    out
}

fn collect<'p>(nodes: &'p [Node], written: &impl Fn(&str) -> bool, out: &mut Vec<AsyncStart<'p>>) {
    for (index, node) in nodes.iter().enumerate() {
        match node {
            Node::AsyncLoad { source, tag, .. } | Node::AsyncStore { source, tag, .. } => {
                out.push(AsyncStart {
                    node,
                    tag: tag.as_str(),
                    snapshot: written(source.as_str())
                        && !waited_undisturbed(&nodes[index + 1..], source, tag),
                });
            }
            _ => {
                for body in children(node) {
                    collect(body, written, out);
                }
            }
        }
    }
}

/// Whether `rest` reaches the wait for `tag` through statements that leave `source` alone.
fn waited_undisturbed(rest: &[Node], source: &str, tag: &str) -> bool {
    for node in rest {
        if matches!(node, Node::AsyncWait { tag: t } if t.as_str() == tag) {
            return true;
        }
        if disturbs(node, source) {
            return false;
        }
    }
    false
}

fn disturbs(node: &Node, source: &str) -> bool {
    let writes_source = |expr: &Expr| {
        any_expr(
            expr,
            &|e| matches!(e, Expr::Atomic { buffer, .. } if buffer.as_str() == source),
        )
    };
    match node {
        Node::Store {
            buffer,
            index,
            value,
        } => buffer.as_str() == source || writes_source(index) || writes_source(value),
        Node::Let { value, .. } | Node::Assign { value, .. } => writes_source(value),
        Node::AsyncLoad { destination, .. } | Node::AsyncStore { destination, .. } => {
            destination.as_str() == source
        }
        // Another tag's wait may write the source; nested statements, barriers (another
        // invocation may write it meanwhile), returns and traps: be conservative.
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vyre_foundation::ir::Expr;

    fn load(source: &str, tag: &str) -> Node {
        Node::AsyncLoad {
            source: source.into(),
            destination: "out".into(),
            offset: Box::new(Expr::u32(0)),
            size: Box::new(Expr::u32(4)),
            tag: tag.into(),
        }
    }

    fn wait(tag: &str) -> Node {
        Node::AsyncWait { tag: tag.into() }
    }

    fn snapshots(body: &[Node]) -> Vec<bool> {
        starts(body).iter().map(|start| start.snapshot).collect()
    }

    #[test]
    fn a_source_nobody_writes_is_read_at_the_wait() {
        let body = vec![
            load("a", "t"),
            Node::if_then(Expr::bool(true), vec![wait("t")]),
        ];
        assert_eq!(snapshots(&body), [false]);
    }

    #[test]
    fn a_written_source_is_captured_unless_the_wait_follows_undisturbed() {
        let store = || Node::store("a", Expr::u32(0), Expr::u32(1));
        let paired = vec![load("a", "t"), wait("t"), store()];
        assert_eq!(snapshots(&paired), [false]);
        let between = vec![load("a", "t"), store(), wait("t")];
        assert_eq!(snapshots(&between), [true]);
        let nested = vec![
            load("a", "t"),
            Node::if_then(Expr::bool(true), vec![wait("t")]),
            store(),
        ];
        assert_eq!(snapshots(&nested), [true]);
        // Tag `u` writes `a` at its wait, between `t`'s start and wait.
        let other_wait = vec![
            Node::AsyncLoad {
                source: "b".into(),
                destination: "a".into(),
                offset: Box::new(Expr::u32(0)),
                size: Box::new(Expr::u32(4)),
                tag: "u".into(),
            },
            load("a", "t"),
            wait("u"),
            wait("t"),
        ];
        assert_eq!(snapshots(&other_wait), [false, true]);
    }
}
