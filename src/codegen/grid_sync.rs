//! Grid-wide barriers, as the reference runs them: scopes that contain a top-level
//! `Barrier(GridSync)` are flattened, the body is split at each such barrier, and the
//! whole grid runs each segment (with fresh invocations) before the next. A `GridSync`
//! inside `If`/`Loop` is not a split point; the reference treats it as a workgroup
//! barrier there, and so does the emitter.

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
    fn grid_sync_inside_control_flow_is_not_a_split_point() {
        let body = vec![Node::if_then(
            vyre_foundation::ir::Expr::bool(true),
            vec![gs()],
        )];
        assert!(!contains_grid_sync(&body));
    }
}
