//! Grid-wide barriers, as the reference runs them: a top-level `Barrier(GridSync)` (after
//! flattening scopes) splits the body into segments the whole grid runs in turn, with fresh
//! invocations; inside `If`/`Loop` it is a workgroup barrier, there and here.
//!
//! A split program gets one entry per segment (always correct) and, where exact, a cooperative
//! entry running every segment with a software grid barrier between them: each segment has
//! its own PTX scope, registers and prologue (which re-zeroes workgroup buffers), and `Return`
//! or a workgroup-wide fault jumps to the segment's end, so every thread reaches every barrier.

use super::uniform::has_subgroup;
use crate::codegen::visit::{any_node, has_barrier, has_return};
use vyre_foundation::ir::{MemoryOrdering, Node};

fn is_grid_sync(node: &Node) -> bool {
    matches!(
        node,
        Node::Barrier {
            ordering: MemoryOrdering::GridSync
        }
    )
}

/// Whether the sequential scope tree (top level, `Block`s, `Region`s) holds a `GridSync`.
pub(crate) fn contains_grid_sync(nodes: &[Node]) -> bool {
    nodes.iter().any(|node| match node {
        Node::Block(inner) => contains_grid_sync(inner),
        Node::Region { body, .. } => contains_grid_sync(body),
        other => is_grid_sync(other),
    })
}

/// Dissolve every `Block`/`Region` that contains a `GridSync`, so each one is top level.
pub(crate) fn flatten(nodes: &[Node], out: &mut Vec<Node>) {
    for node in nodes {
        match node {
            Node::Block(inner) if contains_grid_sync(inner) => flatten(inner, out),
            Node::Region { body, .. } if contains_grid_sync(body) => flatten(body, out),
            other => out.push(other.clone()),
        }
    }
}

/// Split a flattened body at its top-level `GridSync` barriers (a trailing barrier gives
/// an empty last segment, as in the reference).
pub(crate) fn split(nodes: &[Node]) -> Vec<&[Node]> {
    let mut segments = Vec::new();
    let mut start = 0;
    for (index, node) in nodes.iter().enumerate() {
        if is_grid_sync(node) {
            segments.push(&nodes[start..index]);
            start = index + 1;
        }
    }
    segments.push(&nodes[start..]);
    segments
}

/// Whether the cooperative entry runs `segments` exactly as the split entries do. Not
/// when a segment holds both a `Return` and a workgroup barrier: a returned lane has
/// exited in the split form and no longer counts at the barrier, while in the cooperative
/// entry it waits at the segment end and the barrier would never fill.
pub(crate) fn cooperative_is_exact(segments: &[&[Node]]) -> bool {
    segments.len() > 1
        && !segments
            .iter()
            .any(|segment| has_return(segment) && has_barrier(segment))
}

/// Whether, in the cooperative entry, a lane of `segment` that recorded a fault could be
/// awaited by its workgroup: a lane that faulted leaves the loop it is in (or the next one
/// it meets) and ends, which in the cooperative entry means waiting at the segment's end,
/// while a barrier or a warp-synchronous operation of the others after that waits for it
/// (a hang; the split entries' lanes exit instead). Only a segment whose lowering records
/// faults asks this.
pub(crate) fn faulted_lanes_may_be_awaited(segment: &[Node]) -> bool {
    any_node(segment, &|node| matches!(node, Node::Loop { .. }))
        && (has_barrier(segment) || has_subgroup(segment))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gs() -> Node {
        Node::barrier_with_ordering(MemoryOrdering::GridSync)
    }

    #[test]
    fn nested_grid_syncs_surface_and_split() {
        let body = vec![Node::block(vec![Node::Return, gs(), Node::Return]), gs()];
        assert!(contains_grid_sync(&body));
        let mut flat = Vec::new();
        flatten(&body, &mut flat);
        let segments = split(&flat);
        assert_eq!(
            segments.iter().map(|s| s.len()).collect::<Vec<_>>(),
            [1, 1, 0]
        );
    }

    #[test]
    fn cooperative_form_is_refused_only_for_return_beside_a_workgroup_barrier() {
        let wg = || Node::barrier_with_ordering(MemoryOrdering::SeqCst);
        let ret_only: Vec<Node> = vec![Node::Return];
        let barrier_only: Vec<Node> = vec![wg()];
        let both: Vec<Node> = vec![
            Node::if_then(vyre_foundation::ir::Expr::bool(true), vec![Node::Return]),
            wg(),
        ];
        assert!(cooperative_is_exact(&[&ret_only, &barrier_only]));
        assert!(!cooperative_is_exact(&[&barrier_only, &both]));
        assert!(
            !cooperative_is_exact(&[&ret_only]),
            "one segment needs no grid barrier"
        );
    }

    #[test]
    fn faulted_lanes_may_be_awaited_after_a_loop_beside_a_barrier_or_subgroup_operation() {
        use vyre_foundation::ir::{Expr, SubgroupReduceOp};
        let looped = || Node::loop_for("i", Expr::u32(0), Expr::u32(4), vec![]);
        let reduce = Node::let_bind(
            "r",
            Expr::SubgroupReduce {
                op: SubgroupReduceOp::Add,
                value: Box::new(Expr::u32(1)),
            },
        );
        assert!(faulted_lanes_may_be_awaited(&[looped(), Node::barrier()]));
        assert!(faulted_lanes_may_be_awaited(&[looped(), reduce.clone()]));
        assert!(!faulted_lanes_may_be_awaited(&[looped()]));
        assert!(!faulted_lanes_may_be_awaited(&[Node::barrier(), reduce]));
    }

    #[test]
    fn grid_sync_inside_control_flow_is_not_a_split_point() {
        let body = vec![Node::if_then(
            vyre_foundation::ir::Expr::bool(true),
            vec![gs()],
        )];
        assert!(!contains_grid_sync(&body));
    }
}
