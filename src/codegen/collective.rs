//! Collectives across ranks, as far as they are a compiler matter: a backend with a
//! communicator runs a program holding `AllReduce`/`AllGather`/`ReduceScatter`/`Broadcast`
//! as segments (ordinary programs over the same buffers) with the collectives between
//! them, and folds in rank order with a kernel written as a vyre `Program`.
//!
//! The rules are the multi-rank oracle's (tests/common/multirank.rs), which extends the
//! reference's `GridSync` model: a collective is a top-level split point (scopes holding
//! one are dissolved), it runs once per rank-dispatch, and the next segment starts with
//! fresh invocations. A collective inside `If` or `Loop` could not run once per dispatch
//! and is refused, as are groups other than `CommGroup::WORLD` (no sub-communicators yet).

use super::analysis::nesting::check_nesting;
use super::prepare::prepare_with;
use super::visit::any_node;
use super::CodegenError;
use vyre_foundation::ir::{
    BinOp, BufferAccess, BufferDecl, CollectiveOp, CommGroup, DataType, Expr, Node, Program,
};

/// Which collective a [`CollectiveStep`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CollectiveKind {
    /// Every rank gets the element-wise rank-order fold of the buffer.
    AllReduce,
    /// Every rank's output is the inputs of ranks 0..W concatenated.
    AllGather,
    /// Rank r's output is block r of the fold of the inputs.
    ReduceScatter,
    /// Every rank gets the root's buffer.
    Broadcast,
}

/// One collective between two segments. `input` and `output` index `Program::buffers()`
/// (the same buffer for `AllReduce` and `Broadcast`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectiveStep {
    /// Which collective.
    pub kind: CollectiveKind,
    /// The reduction (`AllReduce`, `ReduceScatter`); `None` for data movement.
    pub op: Option<CollectiveOp>,
    /// The buffer read.
    pub input: usize,
    /// The buffer written.
    pub output: usize,
    /// `Broadcast`'s root rank (0 otherwise).
    pub root: u32,
    /// Element type of both buffers.
    pub element: DataType,
}

/// A program cut at its top-level collectives, in execution order.
#[derive(Debug, Clone)]
pub enum RankStep {
    /// An ordinary program over the original buffer table (never empty).
    Segment(Program),
    /// A collective, run once per rank-dispatch.
    Collective(CollectiveStep),
}

fn is_collective(node: &Node) -> bool {
    matches!(
        node,
        Node::AllReduce { .. }
            | Node::AllGather { .. }
            | Node::ReduceScatter { .. }
            | Node::Broadcast { .. }
    )
}

/// Whether `program` holds a collective anywhere (control flow included).
#[must_use]
pub fn has_collectives(program: &Program) -> bool {
    any_node(program.entry(), &is_collective)
}

/// Whether a collective is reachable through transparent scopes only.
fn on_sequential_path(nodes: &[Node]) -> bool {
    nodes.iter().any(|node| match node {
        Node::Block(inner) => on_sequential_path(inner),
        Node::Region { body, .. } => on_sequential_path(body),
        other => is_collective(other),
    })
}

/// Dissolve every `Block`/`Region` holding a top-level collective.
fn flatten(nodes: &[Node], out: &mut Vec<Node>) {
    for node in nodes {
        match node {
            Node::Block(inner) if on_sequential_path(inner) => flatten(inner, out),
            Node::Region { body, .. } if on_sequential_path(body) => flatten(body, out),
            other => out.push(other.clone()),
        }
    }
}

/// `program` cut at its collectives for a backend with a communicator, or `None` when it
/// holds none (it then runs as on one GPU). The program is normalised and its calls
/// inlined as the reference does, without the single-rank lowering of collectives.
pub fn split_collectives(program: &Program) -> Result<Option<Vec<RankStep>>, CodegenError> {
    if !has_collectives(program) {
        return Ok(None);
    }
    let prepared = ranked_program(program)?;
    let mut flat = Vec::new();
    flatten(prepared.entry(), &mut flat);
    let mut steps = Vec::new();
    let mut current = Vec::new();
    for node in flat {
        if is_collective(&node) {
            push_segment(&prepared, &mut current, &mut steps);
            steps.push(RankStep::Collective(step_of(&prepared, &node)?));
        } else if any_node(std::slice::from_ref(&node), &is_collective) {
            return Err(CodegenError::invalid(
                "a collective inside If or Loop cannot run once per rank-dispatch",
                "move the collective to the top level of the program",
            ));
        } else {
            current.push(node);
        }
    }
    push_segment(&prepared, &mut current, &mut steps);
    Ok(Some(steps))
}

/// The program a rank runs: normalised and its calls inlined as the reference does, the
/// collectives kept (no single-rank lowering); nesting checked before and after.
pub fn ranked_program(program: &Program) -> Result<std::borrow::Cow<'_, Program>, CodegenError> {
    check_nesting(program)?;
    let prepared = prepare_with(program, false)?;
    check_nesting(&prepared)?;
    Ok(prepared)
}

fn push_segment(program: &Program, nodes: &mut Vec<Node>, steps: &mut Vec<RankStep>) {
    if !nodes.is_empty() {
        let segment = program.with_rewritten_wrapped_entry(std::mem::take(nodes));
        steps.push(RankStep::Segment(segment));
    }
}

fn step_of(program: &Program, node: &Node) -> Result<CollectiveStep, CodegenError> {
    let (kind, op, input, output, root, group) = match node {
        Node::AllReduce { buffer, op, group } => (
            CollectiveKind::AllReduce,
            Some(*op),
            buffer,
            buffer,
            0,
            group,
        ),
        Node::Broadcast {
            buffer,
            root,
            group,
        } => (
            CollectiveKind::Broadcast,
            None,
            buffer,
            buffer,
            *root,
            group,
        ),
        Node::AllGather {
            input,
            output,
            group,
        } => (CollectiveKind::AllGather, None, input, output, 0, group),
        Node::ReduceScatter {
            input,
            output,
            op,
            group,
        } => (
            CollectiveKind::ReduceScatter,
            Some(*op),
            input,
            output,
            0,
            group,
        ),
        _ => unreachable!("step_of is called on collectives only"),
    };
    if *group != CommGroup::WORLD {
        return Err(CodegenError::invalid(
            format!(
                "{kind:?} uses CommGroup({}), which is not registered",
                group.as_u32()
            ),
            "use CommGroup::WORLD (every rank of the communicator)",
        ));
    }
    let (input, output) = (buffer(program, input)?, buffer(program, output)?);
    let element = program.buffers()[input].element();
    let output_element = program.buffers()[output].element();
    if element != output_element {
        return Err(CodegenError::invalid(
            format!("{kind:?} reads {element} but writes {output_element}"),
            "give the collective's input and output one element type",
        ));
    }
    Ok(CollectiveStep {
        kind,
        op,
        input,
        output,
        root,
        element,
    })
}

/// The index of the storage buffer a collective names.
fn buffer(program: &Program, name: &str) -> Result<usize, CodegenError> {
    let index = program
        .buffers()
        .iter()
        .position(|decl| decl.name() == name)
        .ok_or_else(|| {
            CodegenError::invalid(
                format!("a collective names buffer `{name}`, which is not declared"),
                "declare the buffer in the program",
            )
        })?;
    if program.buffers()[index].access() == BufferAccess::Workgroup {
        return Err(CodegenError::invalid(
            format!("a collective on workgroup buffer `{name}`"),
            "run collectives on storage buffers",
        ));
    }
    Ok(index)
}

/// The vyre operator a collective reduction folds with.
#[must_use]
pub fn fold_operator(op: CollectiveOp) -> Option<BinOp> {
    Some(match op {
        CollectiveOp::Sum => BinOp::Add,
        CollectiveOp::Min => BinOp::Min,
        CollectiveOp::Max => BinOp::Max,
        CollectiveOp::BitAnd => BinOp::BitAnd,
        CollectiveOp::BitOr => BinOp::BitOr,
        CollectiveOp::BitXor => BinOp::BitXor,
        _ => return None,
    })
}

/// Threads per block of the fold kernel.
pub const FOLD_WORKGROUP: u32 = 256;

/// The rank-order fold as a vyre program: with `m = len(out)`,
/// `out[i] = gathered[i] op gathered[m + i] op ... op gathered[(world - 1) * m + i]`, a left
/// fold whose every step is stored (so each step rounds and canonicalises exactly as one
/// reference fold step does). Buffers: binding 0 `gathered` (read), binding 1 `out`
/// (read-write), both of `element`. A world of one copies `gathered` into `out`; the
/// runtime never folds one rank (a lone rank's bytes stay untouched).
#[must_use]
pub fn fold_program(op: BinOp, element: DataType, world: usize) -> Program {
    fold_program_with(op, element, world, None)
}

/// [`fold_program`] for rank `own`, whose block is read from its own buffer instead of a
/// copy in `gathered` (block `own` of `gathered` is never read): binding 0 `gathered`
/// (read), binding 1 `own` (read, `m` elements), binding 2 `out` (read-write). `own` and
/// `out` must not be the same memory (vyre buffers never alias): an AllReduce folding its
/// block in place uses [`fold_program_around_in_place`].
#[must_use]
pub fn fold_program_around(op: BinOp, element: DataType, world: usize, own: usize) -> Program {
    fold_program_with(op, element, world, Some((own, false)))
}

/// [`fold_program_around`] with the rank's own block in `out` itself (an AllReduce folds
/// its block in place): binding 0 `gathered` (read), binding 1 `out` (read-write), whose
/// element is read before the fold's first step is stored over it.
#[must_use]
pub fn fold_program_around_in_place(
    op: BinOp,
    element: DataType,
    world: usize,
    own: usize,
) -> Program {
    fold_program_with(op, element, world, Some((own, true)))
}

/// `own`: the rank whose block is not in `gathered`, and whether it lies in `out`.
fn fold_program_with(
    op: BinOp,
    element: DataType,
    world: usize,
    own: Option<(usize, bool)>,
) -> Program {
    let i = || Expr::var("i");
    let m = || Expr::buf_len("out");
    let block = |k: usize| {
        match own {
            Some((rank, true)) if rank == k => return Expr::var("mine"),
            Some((rank, false)) if rank == k => return Expr::load("own", i()),
            _ => {}
        }
        let offset = Expr::BinOp {
            op: BinOp::Mul,
            left: Box::new(Expr::u32(k as u32)),
            right: Box::new(m()),
        };
        Expr::load(
            "gathered",
            Expr::BinOp {
                op: BinOp::Add,
                left: Box::new(offset),
                right: Box::new(i()),
            },
        )
    };
    let mut body = Vec::with_capacity(world.max(1) + 1);
    if matches!(own, Some((_, true))) {
        body.push(Node::let_bind("mine", Expr::load("out", i())));
    }
    body.extend(rank_order_steps(op, "out", world, block));
    let mut buffers = vec![BufferDecl::read("gathered", 0, element.clone())];
    if matches!(own, Some((_, false))) {
        buffers.push(BufferDecl::read("own", 1, element.clone()));
    }
    let out_binding = buffers.len() as u32;
    buffers.push(BufferDecl::read_write("out", out_binding, element));
    fold_kernel(buffers, "out", body)
}

/// The left fold of `value(0) .. value(world - 1)` into `target[i]`, every step stored
/// (so each step rounds and canonicalises as one reference fold step does); one rank's
/// value is stored as it is.
fn rank_order_steps(
    op: BinOp,
    target: &str,
    world: usize,
    value: impl Fn(usize) -> Expr,
) -> Vec<Node> {
    let i = || Expr::var("i");
    if world < 2 {
        return vec![Node::store(target, i(), value(0))];
    }
    let combine = |left: Expr, right: Expr| Expr::BinOp {
        op,
        left: Box::new(left),
        right: Box::new(right),
    };
    let mut steps = vec![Node::store(target, i(), combine(value(0), value(1)))];
    for k in 2..world {
        let step = combine(Expr::load(target, i()), value(k));
        steps.push(Node::store(target, i(), step));
    }
    steps
}

/// A fold kernel: invocation `i` runs `body` while `i` is below the length of `counted`.
fn fold_kernel(buffers: Vec<BufferDecl>, counted: &str, body: Vec<Node>) -> Program {
    let in_range = Expr::BinOp {
        op: BinOp::Lt,
        left: Box::new(Expr::var("i")),
        right: Box::new(Expr::buf_len(counted)),
    };
    Program::wrapped(
        buffers,
        [FOLD_WORKGROUP, 1, 1],
        vec![
            Node::let_bind("i", Expr::gid_x()),
            Node::if_then(in_range, body),
        ],
    )
}

/// The rank-order fold for ranks that read each other's memory directly (one process,
/// peer access between the GPUs): binding `k` (`rank0` .. `rank{W-1}`) is rank `k`'s copy
/// of the block being folded, all of `m` elements. With `in_place = Some(own)` (an
/// AllReduce) every binding is read-write and the folded value is written back to every
/// rank's copy; the fold itself is stored in rank `own`'s copy (step by step, as
/// [`fold_program`] stores each step) after its original value was read. With `None` (a
/// ReduceScatter) the ranks' copies are read only and the fold goes to binding `W`, `out`.
/// Each invocation touches only index `i` of every binding, so the kernels of different
/// ranks, folding different blocks, never touch the same memory.
#[must_use]
pub fn peer_fold_program(
    op: BinOp,
    element: DataType,
    world: usize,
    in_place: Option<usize>,
) -> Program {
    peer_fold_with(op, element, world, in_place, true)
}

/// [`peer_fold_program`] in place at rank `own` that writes the fold to `own`'s copy only
/// (the other ranks then copy it from there).
#[must_use]
pub fn peer_fold_program_local(op: BinOp, element: DataType, world: usize, own: usize) -> Program {
    peer_fold_with(op, element, world, Some(own), false)
}

fn peer_fold_with(
    op: BinOp,
    element: DataType,
    world: usize,
    in_place: Option<usize>,
    write_back: bool,
) -> Program {
    let world = world.max(2);
    let i = || Expr::var("i");
    let name = |k: usize| format!("rank{k}");
    let target = in_place.map_or_else(|| "out".to_string(), name);
    let value = |k: usize| {
        if in_place == Some(k) {
            Expr::var("own")
        } else {
            Expr::load(name(k), i())
        }
    };
    let mut body = Vec::with_capacity(2 * world + 1);
    if let Some(own) = in_place {
        body.push(Node::let_bind("own", Expr::load(name(own), i())));
    }
    body.extend(rank_order_steps(op, &target, world, value));
    if let Some(own) = in_place.filter(|_| write_back) {
        for k in (0..world).filter(|&k| k != own) {
            body.push(Node::store(name(k), i(), Expr::load(&target, i())));
        }
    }
    let mut buffers: Vec<BufferDecl> = (0..world)
        .map(|k| match in_place {
            Some(_) => BufferDecl::read_write(&name(k), k as u32, element.clone()),
            None => BufferDecl::read(&name(k), k as u32, element.clone()),
        })
        .collect();
    if in_place.is_none() {
        buffers.push(BufferDecl::read_write("out", world as u32, element));
    }
    fold_kernel(buffers, &target, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn program(entry: Vec<Node>) -> Program {
        Program::wrapped(
            vec![
                BufferDecl::read_write("a", 0, DataType::U32).with_count(4),
                BufferDecl::read_write("b", 1, DataType::U32).with_count(8),
                BufferDecl::workgroup("w", 4, DataType::U32),
            ],
            [4, 1, 1],
            entry,
        )
    }

    fn all_reduce(buffer: &str) -> Node {
        Node::AllReduce {
            buffer: buffer.into(),
            op: CollectiveOp::Sum,
            group: CommGroup::WORLD,
        }
    }

    fn store() -> Node {
        Node::store("a", Expr::gid_x(), Expr::u32(1))
    }

    #[test]
    fn the_fold_around_a_ranks_own_block_equals_the_gathered_fold() {
        use vyre_reference::value::Value;
        let m = 5usize;
        let words = |seed: u32, n: usize| -> Vec<u8> {
            (0..n as u32)
                .flat_map(|k| (k.wrapping_mul(0x9E37_79B9) ^ seed).to_le_bytes())
                .collect()
        };
        for world in 2..=4 {
            for own in 0..world {
                let gathered = words(world as u32 * 31 + own as u32, world * m);
                let mine = gathered[own * m * 4..(own + 1) * m * 4].to_vec();
                // Block `own` of the gathered buffer is never read: scramble it.
                let mut holey = gathered.clone();
                holey[own * m * 4..(own + 1) * m * 4].fill(0xA5);
                let want = vyre_reference::reference_eval(
                    &fold_program(BinOp::Add, DataType::U32, world),
                    &[Value::from(gathered), Value::from(vec![0u8; m * 4])],
                )
                .expect("the gathered fold runs");
                let got = vyre_reference::reference_eval(
                    &fold_program_around(BinOp::Add, DataType::U32, world, own),
                    &[
                        Value::from(holey.clone()),
                        Value::from(mine.clone()),
                        Value::from(vec![0u8; m * 4]),
                    ],
                )
                .expect("the fold around the own block runs");
                assert_eq!(
                    got.iter().map(Value::to_bytes).collect::<Vec<_>>(),
                    want.iter().map(Value::to_bytes).collect::<Vec<_>>(),
                    "world {world}, own {own}"
                );
                // In place: the own block is the output, read before any step is stored.
                let in_place = vyre_reference::reference_eval(
                    &fold_program_around_in_place(BinOp::Add, DataType::U32, world, own),
                    &[Value::from(holey), Value::from(mine)],
                )
                .expect("the in-place fold runs");
                assert_eq!(
                    in_place.iter().map(Value::to_bytes).collect::<Vec<_>>(),
                    want.iter().map(Value::to_bytes).collect::<Vec<_>>(),
                    "world {world}, own {own}, in place"
                );
            }
        }
    }

    #[test]
    fn the_peer_fold_equals_the_gathered_fold_in_place_and_scattered() {
        use vyre_reference::value::Value;
        let m = 5usize;
        let words = |seed: u32| -> Vec<u8> {
            (0..m as u32)
                .flat_map(|k| (k.wrapping_mul(0x9E37_79B9) ^ seed).to_le_bytes())
                .collect()
        };
        let bytes = |values: Vec<Value>| values.iter().map(Value::to_bytes).collect::<Vec<_>>();
        for world in 2..=4 {
            let ranks: Vec<Vec<u8>> = (0..world)
                .map(|k| words(world as u32 * 7 + k as u32))
                .collect();
            let want = vyre_reference::reference_eval(
                &fold_program(BinOp::Sub, DataType::U32, world),
                &[Value::from(ranks.concat()), Value::from(vec![0u8; m * 4])],
            )
            .expect("the gathered fold runs");
            let folded = want[0].to_bytes();
            let mut inputs: Vec<Value> = ranks.iter().cloned().map(Value::from).collect();
            inputs.push(Value::from(vec![0u8; m * 4]));
            let scattered = vyre_reference::reference_eval(
                &peer_fold_program(BinOp::Sub, DataType::U32, world, None),
                &inputs,
            )
            .expect("the scattered peer fold runs");
            assert_eq!(bytes(scattered), vec![folded.clone()], "world {world}");
            for own in 0..world {
                let inputs: Vec<Value> = ranks.iter().cloned().map(Value::from).collect();
                let in_place = vyre_reference::reference_eval(
                    &peer_fold_program(BinOp::Sub, DataType::U32, world, Some(own)),
                    &inputs,
                )
                .expect("the in-place peer fold runs");
                assert_eq!(
                    bytes(in_place),
                    vec![folded.clone(); world],
                    "world {world}, own {own}"
                );
                let local = vyre_reference::reference_eval(
                    &peer_fold_program_local(BinOp::Sub, DataType::U32, world, own),
                    &ranks.iter().cloned().map(Value::from).collect::<Vec<_>>(),
                )
                .expect("the local peer fold runs");
                let mut want_local = ranks.clone();
                want_local[own] = folded.clone();
                assert_eq!(bytes(local), want_local, "world {world}, own {own}, local");
            }
        }
    }

    #[test]
    fn programs_without_collectives_are_not_split() {
        assert!(split_collectives(&program(vec![store()]))
            .unwrap()
            .is_none());
    }

    #[test]
    fn collectives_in_nested_scopes_split_and_empty_segments_vanish() {
        let steps = split_collectives(&program(vec![
            Node::block(vec![store(), all_reduce("a")]),
            all_reduce("b"),
            store(),
        ]))
        .unwrap()
        .unwrap();
        let shape: Vec<&str> = steps
            .iter()
            .map(|s| match s {
                RankStep::Segment(_) => "segment",
                RankStep::Collective(_) => "collective",
            })
            .collect();
        assert_eq!(
            shape,
            ["segment", "collective", "collective", "segment"],
            "{steps:?}"
        );
        let RankStep::Collective(step) = &steps[2] else {
            unreachable!()
        };
        assert_eq!(
            (step.kind, step.input, step.output),
            (CollectiveKind::AllReduce, 1, 1)
        );
    }

    #[test]
    fn misplaced_or_unroutable_collectives_are_refused_with_a_fix() {
        let nested = Node::if_then(Expr::bool(true), vec![all_reduce("a")]);
        let group = Node::AllReduce {
            buffer: "a".into(),
            op: CollectiveOp::Sum,
            group: CommGroup(3),
        };
        let mismatched = Node::AllGather {
            input: "a".into(),
            output: "b".into(),
            group: CommGroup::WORLD,
        };
        for (entry, words) in [
            (vec![nested], "inside If or Loop"),
            (vec![group], "CommGroup(3)"),
            (vec![all_reduce("w")], "workgroup buffer"),
        ] {
            let error = split_collectives(&program(entry)).unwrap_err();
            assert!(error.to_string().contains(words), "{error}");
            assert!(!error.fix().is_empty());
        }
        assert!(split_collectives(&program(vec![mismatched])).is_ok());
    }
}
