//! Grid-wide barriers, as the reference runs them: scopes that contain a top-level
//! `Barrier(GridSync)` are flattened, the body is split at each such barrier, and the
//! whole grid runs each segment (with fresh invocations) before the next. A `GridSync`
//! inside `If`/`Loop` is not a split point; the reference treats it as a workgroup
//! barrier there, and so does the emitter.
//!
//! A split program is emitted twice: one entry per segment (launched in order; always
//! correct, whatever the grid), and, where it is exact, one cooperative entry that runs
//! every segment with a software grid barrier between them (one launch, but the whole
//! grid must be resident at once, which the host checks before choosing it).
//!
//! The reference's per-segment state maps onto the cooperative entry as follows: each
//! segment is lowered in its own PTX scope with its own registers and prologue (fresh
//! invocation-local variables and ids), the prologue re-zeroes the workgroup buffers (the
//! reference resets workgroup memory for every workgroup of every segment), and `Return`
//! or a workgroup-wide fault branches to the segment's end instead of exiting, so the
//! invocation comes back fresh in the next segment and every thread of every block
//! reaches every grid barrier.

use super::visit::contains_barrier;
use std::fmt::Write as _;
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

fn contains_return(node: &Node) -> bool {
    matches!(node, Node::Return)
        || super::visit::children(node)
            .iter()
            .any(|body| body.iter().any(contains_return))
}

/// Whether the cooperative entry runs `segments` exactly as the split entries do. Not
/// when a segment holds both a `Return` and a workgroup barrier: a returned lane has
/// exited in the split form and no longer counts at the barrier, while in the cooperative
/// entry it waits at the segment end and the barrier would never fill.
pub(crate) fn cooperative_is_exact(segments: &[&[Node]]) -> bool {
    segments.len() > 1
        && !segments.iter().any(|segment| {
            segment.iter().any(contains_return) && segment.iter().any(contains_barrier)
        })
}

/// Label after segment `index` of the cooperative entry.
pub(crate) fn segment_end_label(index: usize) -> String {
    format!("vyre_segment_end_{index}")
}

/// Registers of the grid barrier, declared at entry scope (segments declare `%p`, `%r`,
/// `%rd`... in their own nested scopes, so these names never clash).
pub(crate) const BARRIER_DECLS: &str =
    "\t.reg .pred %gp<3>;\n\t.reg .b32 %gr<6>;\n\t.reg .b64 %grd<4>;\n";

/// Entry prologue of the grid barrier: the addresses of its words in the fault area
/// (`+4` arrival count, `+8` generation, `+12` stop flag), whether this thread leads its
/// block, and the grid's block count.
pub(crate) fn barrier_prologue(out: &mut String) {
    out.push_str(concat!(
        "\tld.param.u64 %grd0, [vyre_fault];\n",
        "\tcvta.to.global.u64 %grd0, %grd0;\n",
        "\tadd.u64 %grd1, %grd0, 4;\n",
        "\tadd.u64 %grd2, %grd0, 8;\n",
        "\tadd.u64 %grd3, %grd0, 12;\n",
        "\tmov.u32 %gr0, %tid.x;\n",
        "\tmov.u32 %gr1, %tid.y;\n",
        "\tor.b32 %gr0, %gr0, %gr1;\n",
        "\tmov.u32 %gr1, %tid.z;\n",
        "\tor.b32 %gr0, %gr0, %gr1;\n",
        "\tsetp.eq.u32 %gp0, %gr0, 0;\n",
        "\tmov.u32 %gr1, %nctaid.x;\n",
        "\tmov.u32 %gr2, %nctaid.y;\n",
        "\tmul.lo.u32 %gr1, %gr1, %gr2;\n",
        "\tmov.u32 %gr2, %nctaid.z;\n",
        "\tmul.lo.u32 %gr1, %gr1, %gr2;\n",
    ));
}

/// Grid barrier `index`, then leave for `done` when a fault was recorded.
///
/// Every thread of the block arrives (`barrier.sync`); the leader announces the block with
/// an acquire-release add on the arrival count, having first read the generation it is
/// waiting to see advance. The last block to arrive resets the count, copies the fault
/// word into the stop flag and publishes the next generation with a release store; the
/// others poll the generation (acquire, with `nanosleep` backoff) and then read the stop
/// flag, which no block can overwrite before every block has read it (that takes the next
/// barrier to fill). So every block sees the same stop decision, and a block-wide
/// `barrier.red` hands the leader's copy to every thread: the exit is uniform. The words
/// return to "count 0" after every barrier, so they need no re-zeroing between launches
/// that share one fault area (sequences).
pub(crate) fn barrier(out: &mut String, index: usize, done: &str) {
    let wait = format!("vyre_grid_wait_{index}");
    let joined = format!("vyre_grid_joined_{index}");
    let _ = write!(
        out,
        concat!(
            "\tbarrier.sync 0;\n",
            "\tmov.u32 %gr4, 0;\n",
            "\t@!%gp0 bra {joined};\n",
            "\tld.acquire.gpu.global.u32 %gr2, [%grd2];\n",
            "\tatom.acq_rel.gpu.global.add.u32 %gr3, [%grd1], 1;\n",
            "\tadd.u32 %gr3, %gr3, 1;\n",
            "\tsetp.lt.u32 %gp1, %gr3, %gr1;\n",
            "\t@%gp1 bra {wait};\n",
            "\tst.relaxed.gpu.global.u32 [%grd1], 0;\n",
            "\tld.relaxed.gpu.global.u32 %gr4, [%grd0];\n",
            "\tst.relaxed.gpu.global.u32 [%grd3], %gr4;\n",
            "\tadd.u32 %gr2, %gr2, 1;\n",
            "\tst.release.gpu.global.u32 [%grd2], %gr2;\n",
            "\tbra {joined};\n",
            "{wait}:\n",
            "\tnanosleep.u32 32;\n",
            "\tld.acquire.gpu.global.u32 %gr5, [%grd2];\n",
            "\tsetp.eq.u32 %gp1, %gr5, %gr2;\n",
            "\t@%gp1 bra {wait};\n",
            "\tld.relaxed.gpu.global.u32 %gr4, [%grd3];\n",
            "{joined}:\n",
            "\tsetp.ne.u32 %gp1, %gr4, 0;\n",
            "\tbarrier.red.or.pred %gp2, 0, %gp1;\n",
            "\t@%gp2 bra {done};\n",
        ),
        wait = wait,
        joined = joined,
        done = done,
    );
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
    fn grid_sync_inside_control_flow_is_not_a_split_point() {
        let body = vec![Node::if_then(
            vyre_foundation::ir::Expr::bool(true),
            vec![gs()],
        )];
        assert!(!contains_grid_sync(&body));
    }
}
