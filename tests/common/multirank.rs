//! A multi-rank oracle for vyre's collectives (issue 19), built from vyre-reference.
//!
//! [`reference_ranks`] runs one program on W ranks (rank order 0..W-1). Collectives are
//! top-level statements that split the program like a top-level `Barrier(GridSync)`:
//! every rank runs a segment over its whole grid with vyre-reference, then the
//! collective runs once across ranks on the host, then the next segment starts with
//! fresh locals and re-zeroed workgroup memory. Scopes (`Block`, `Region`) holding a
//! collective or a GridSync are dissolved first, as the reference dissolves them for
//! GridSync; a collective inside `If` or `Loop` is an error.
//!
//! Per collective (`fold` = left fold in rank order, `r0 op r1 op ... op r(W-1)`):
//! * `AllReduce{buf}`: every rank gets `fold(buf_0, ..., buf_{W-1})` element-wise.
//! * `Broadcast{buf, root}`: every rank gets `buf_root`; `root >= W` is an error.
//! * `AllGather{in, out}`: `out_r = in_0 ++ ... ++ in_{W-1}`; needs `len(out) = W * len(in)`.
//! * `ReduceScatter{in, out}`: `out_r = block r of fold(in_0, ..., in_{W-1})`, blocks of
//!   `len(out)`; needs `len(in) = W * len(out)`.
//!
//! The whole program first passes vyre's validator with collectives allowed, so what the
//! reference refuses on one rank (more than one output buffer, say) is refused here too.
//!
//! Folds, by element type:
//! * Every type but U64/I64 folds on vyre-reference itself: each step runs the program
//!   `acc[i] = acc[i] <op> next[i]` (`Sum` is `BinOp::Add`, the others their namesakes),
//!   so the type folds exactly as a vyre program on the reference computes it: u32 wraps,
//!   i32 wraps with signed Min/Max, f32 canonicalises NaN to 0x7FC0_0000 and flushes
//!   subnormal operands and results to signed zero (its float_ops.rs), F16/BF16 widen to
//!   f32 and round to nearest even on store. A pair the reference rejects (a bitwise op
//!   on f32, say) is an error naming the op and the type.
//! * U64/I64 fold on the host, because the reference refuses 64-bit integer arithmetic
//!   (V084): Sum wraps, Min/Max compare unsigned or signed, the bitwise ops act on bits.
//! * One rank folds nothing, so W = 1 leaves the bytes untouched (NaN payloads included),
//!   as the reference's single-rank lowering does.
//!
//! Data movement (Broadcast, AllGather) copies bytes, so it covers every fixed-size type.

#![allow(dead_code)]

use vyre_foundation::ir::{
    BinOp, BufferAccess, BufferDecl, CollectiveOp, CommGroup, DataType, Expr, MemoryOrdering, Node,
    Program,
};
use vyre_reference::value::Value;
use vyre_reference::{is_reference_input, is_reference_output};

/// One rank's buffer contents, indexed like `Program::buffers` (workgroup buffers stay
/// empty: the reference allocates them per workgroup).
type Memory = Vec<Vec<u8>>;

/// The program cut at its top-level split points, in execution order.
enum Step {
    Segment(Vec<Node>),
    Collective(Node),
}

/// Runs `program` on `per_rank_inputs.len()` ranks. Each rank's inputs are what
/// `vyre_reference::reference_eval` takes (one per `is_reference_input` buffer, in
/// `Program::buffers` order); each rank's result is what it returns (the
/// `is_reference_output` buffers, in that order, output byte ranges applied).
pub fn reference_ranks(
    program: &Program,
    per_rank_inputs: &[Vec<Vec<u8>>],
) -> Result<Vec<Vec<Vec<u8>>>, String> {
    if per_rank_inputs.is_empty() {
        return Err("no ranks. Fix: pass one input vector per rank (W >= 1).".into());
    }
    let program = normalize(program)?;
    validate(&program)?;
    let steps = split(program.entry())?;
    let carried = carried_program(&program);
    let mut ranks = per_rank_inputs
        .iter()
        .map(|inputs| initial_memory(&program, inputs))
        .collect::<Result<Vec<_>, _>>()?;
    let floor_applies = program.stats().atomic_op_count > 0;
    for step in steps {
        match step {
            // An empty segment (a collective first or last, or two in a row) writes
            // nothing: skip the reference run, which costs a whole-grid pass per rank.
            Step::Segment(nodes) if nodes.is_empty() => {}
            Step::Segment(nodes) => {
                let segment = carried.with_rewritten_wrapped_entry(nodes);
                for memory in &mut ranks {
                    run_segment(&segment, memory, floor_applies)?;
                }
            }
            Step::Collective(node) => apply_collective(&program, &node, &mut ranks)?,
        }
    }
    Ok(ranks
        .into_iter()
        .map(|memory| outputs(&program, memory))
        .collect())
}

/// The program as `reference_eval` prepares it, less the single-rank collective
/// lowering: the top-level Region rule, then composite calls inlined (their bodies may
/// hold atomics, which change the reference's grid).
fn normalize(program: &Program) -> Result<Program, String> {
    let program = match program.top_level_region_violation() {
        None => program.clone(),
        Some(message)
            if program.entry().is_empty()
                || matches!(program.entry().first(), Some(Node::Store { .. })) =>
        {
            return Err(format!(
                "reference interpreter requires a top-level Region-wrapped Program: {message}"
            ));
        }
        Some(_) => program.clone().reconcile_runnable_top_level(),
    };
    vyre_foundation::ir::inline_composite_calls(&program).map_err(|e| e.to_string())
}

/// vyre's validator on the whole program, as the reference runs it (subgroup operations
/// allowed) but with collectives allowed too: what the reference refuses on one rank (two
/// output buffers, say) is refused on W ranks, before any segment runs.
fn validate(program: &Program) -> Result<(), String> {
    use vyre_foundation::validate::{
        validate::validate_with_options, BackendCapabilities, ValidationOptions,
    };
    let options = ValidationOptions::default().with_backend_capabilities(BackendCapabilities {
        supports_subgroup_ops: true,
        supports_distributed_collectives: true,
        ..Default::default()
    });
    let report = validate_with_options(program, options);
    match report.errors.first() {
        None => Ok(()),
        Some(error) => Err(format!("vyre's validator rejects the program: {error}")),
    }
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

fn is_grid_sync(node: &Node) -> bool {
    matches!(
        node,
        Node::Barrier {
            ordering: MemoryOrdering::GridSync
        }
    )
}

/// A split point reachable through transparent scopes only, the reference's rule for
/// GridSync (`contains_grid_sync`).
fn contains_split(nodes: &[Node]) -> bool {
    nodes.iter().any(|node| match node {
        Node::Block(inner) => contains_split(inner),
        Node::Region { body, .. } => contains_split(body),
        other => is_collective(other) || is_grid_sync(other),
    })
}

/// Whether a collective sits anywhere below `nodes`, control flow included.
fn contains_collective(nodes: &[Node]) -> bool {
    nodes.iter().any(|node| match node {
        Node::If {
            then, otherwise, ..
        } => contains_collective(then) || contains_collective(otherwise),
        Node::Loop { body, .. } | Node::Block(body) => contains_collective(body),
        Node::Region { body, .. } => contains_collective(body),
        other => is_collective(other),
    })
}

/// Dissolves the scopes that hold a split point, so every split point is top-level.
fn flatten(nodes: &[Node], out: &mut Vec<Node>) {
    for node in nodes {
        match node {
            Node::Block(inner) if contains_split(inner) => flatten(inner, out),
            Node::Region { body, .. } if contains_split(body) => flatten(body, out),
            other => out.push(other.clone()),
        }
    }
}

/// Segments and collectives in order; a GridSync only ends a segment. A collective left
/// inside control flow after flattening cannot run once per rank-dispatch.
fn split(entry: &[Node]) -> Result<Vec<Step>, String> {
    let mut flat = Vec::new();
    flatten(entry, &mut flat);
    let mut steps = Vec::new();
    let mut current = Vec::new();
    for node in flat {
        if is_collective(&node) {
            steps.push(Step::Segment(std::mem::take(&mut current)));
            steps.push(Step::Collective(node));
        } else if is_grid_sync(&node) {
            steps.push(Step::Segment(std::mem::take(&mut current)));
        } else if contains_collective(std::slice::from_ref(&node)) {
            return Err(
                "a collective inside If or Loop cannot run once per rank-dispatch. Fix: move it to the top level of the program."
                    .into(),
            );
        } else {
            current.push(node);
        }
    }
    steps.push(Step::Segment(current));
    Ok(steps)
}

/// The buffer table every segment runs with: backend-allocated outputs become plain
/// `ReadWrite` buffers, so their contents enter each segment as inputs and come back
/// whole (no output byte range) for the next one. Everything else is unchanged, which
/// keeps the reference's grid inference (outputs versus inputs) as for `program`.
fn carried_program(program: &Program) -> Program {
    let buffers = program
        .buffers()
        .iter()
        .map(|decl| {
            let mut decl = decl.clone();
            if decl.is_backend_allocated_output() {
                decl.access = BufferAccess::ReadWrite;
                decl.is_output = false;
                decl.pipeline_live_out = false;
                decl.output_byte_range = None;
            }
            decl
        })
        .collect();
    program.with_rewritten_buffers(buffers)
}

/// A rank's buffers before the first segment: its inputs, and zeroed outputs of their
/// declared size (the reference zero-fills backend-allocated outputs).
fn initial_memory(program: &Program, inputs: &[Vec<u8>]) -> Result<Memory, String> {
    let mut inputs = inputs.iter();
    let mut memory = Vec::with_capacity(program.buffers().len());
    for decl in program.buffers() {
        let bytes = if decl.access() == BufferAccess::Workgroup {
            Vec::new()
        } else if is_reference_input(decl) {
            inputs.next().cloned().ok_or_else(|| {
                format!(
                    "missing input for buffer `{}`. Fix: pass one input per reference input buffer.",
                    decl.name()
                )
            })?
        } else {
            decl.require_static_readback_size()?;
            vec![0; decl.static_byte_len()?.unwrap_or(0)]
        };
        memory.push(bytes);
    }
    if inputs.next().is_some() {
        return Err(
            "unused inputs supplied. Fix: pass exactly one input per reference input buffer."
                .into(),
        );
    }
    Ok(memory)
}

/// One rank through one segment: every non-workgroup buffer is an input of the carried
/// program and every writable one comes back.
fn run_segment(segment: &Program, memory: &mut Memory, floor_applies: bool) -> Result<(), String> {
    let decls = segment.buffers();
    let inputs: Vec<Value> = decls
        .iter()
        .zip(memory.iter())
        .filter(|(decl, _)| is_reference_input(decl))
        .map(|(_, bytes)| Value::from(bytes.clone()))
        .collect();
    let floor = if floor_applies {
        input_floor(decls, memory)?
    } else {
        0
    };
    let results = vyre_reference::reference_eval_with_dispatch(segment, &inputs, floor)
        .map_err(|e| e.to_string())?;
    let written = decls
        .iter()
        .enumerate()
        .filter(|(_, decl)| is_reference_output(decl))
        .map(|(index, _)| index);
    for (index, value) in written.zip(results) {
        memory[index] = value.to_bytes();
    }
    Ok(())
}

/// The grid floor a segment needs to dispatch as the whole program would. The reference
/// widens the grid to its largest input when the program has atomics
/// (`force_full_span`); a segment without the atomics would not, so the floor restores
/// it. Element counts mirror the reference's `element_count` (bit width, else size).
fn input_floor(decls: &[BufferDecl], memory: &Memory) -> Result<u32, String> {
    let mut floor = 1u32;
    for (decl, bytes) in decls.iter().zip(memory) {
        if decl.access() == BufferAccess::Workgroup || is_reference_output(decl) {
            continue;
        }
        let element = decl.element();
        let count = match (element.bit_width(), element.size_bytes()) {
            (Some(bits), _) => bytes.len() * 8 / bits,
            (None, Some(0)) => bytes.len(),
            (None, Some(size)) => bytes.len() / size,
            (None, None) => return Err(format!("buffer `{}` is unsized", decl.name())),
        };
        floor = floor.max(u32::try_from(count).map_err(|e| e.to_string())?);
    }
    Ok(floor)
}

/// The original program's outputs, in the reference's order and byte ranges.
fn outputs(program: &Program, mut memory: Memory) -> Vec<Vec<u8>> {
    program
        .buffers()
        .iter()
        .enumerate()
        .filter(|(_, decl)| is_reference_output(decl))
        .map(|(index, decl)| {
            let mut bytes = std::mem::take(&mut memory[index]);
            if let Some(range) = decl.output_byte_range() {
                if range.start <= range.end && range.end <= bytes.len() {
                    bytes.truncate(range.end);
                    bytes.drain(..range.start);
                }
            }
            bytes
        })
        .collect()
}

fn apply_collective(program: &Program, node: &Node, ranks: &mut [Memory]) -> Result<(), String> {
    let world = ranks.len();
    match node {
        Node::AllReduce { buffer, op, group } => {
            require_world(*group, "AllReduce")?;
            let index = buffer_index(program, buffer)?;
            let folded = fold(program, index, *op, ranks)?;
            ranks
                .iter_mut()
                .for_each(|memory| memory[index] = folded.clone());
        }
        Node::Broadcast {
            buffer,
            root,
            group,
        } => {
            require_world(*group, "Broadcast")?;
            let index = buffer_index(program, buffer)?;
            let root = usize::try_from(*root).ok().filter(|root| *root < world).ok_or_else(|| {
                format!("Broadcast root {root} is not a rank of a world of {world}. Fix: use a root below W.")
            })?;
            same_length(ranks, index, buffer)?;
            let source = ranks[root][index].clone();
            ranks
                .iter_mut()
                .for_each(|memory| memory[index] = source.clone());
        }
        Node::AllGather {
            input,
            output,
            group,
        } => {
            require_world(*group, "AllGather")?;
            let (input, output) = pair(program, input, output)?;
            let n = same_length(ranks, input, "AllGather input")?;
            need_length(ranks, output, world * n, "AllGather output", "W x input")?;
            let gathered: Vec<u8> = ranks.iter().flat_map(|m| m[input].clone()).collect();
            ranks
                .iter_mut()
                .for_each(|memory| memory[output] = gathered.clone());
        }
        Node::ReduceScatter {
            input,
            output,
            op,
            group,
        } => {
            require_world(*group, "ReduceScatter")?;
            let (input, output) = pair(program, input, output)?;
            let m = same_length(ranks, output, "ReduceScatter output")?;
            need_length(ranks, input, world * m, "ReduceScatter input", "W x output")?;
            let folded = fold(program, input, *op, ranks)?;
            for (rank, memory) in ranks.iter_mut().enumerate() {
                memory[output] = folded[rank * m..(rank + 1) * m].to_vec();
            }
        }
        other => return Err(format!("not a collective: {other:?}")),
    }
    Ok(())
}

fn require_world(group: CommGroup, kind: &str) -> Result<(), String> {
    if group == CommGroup::WORLD {
        return Ok(());
    }
    Err(format!(
        "{kind} uses CommGroup({}), which is not registered. Fix: use CommGroup::WORLD.",
        group.as_u32()
    ))
}

/// The buffer's index; a collective cannot name a missing or workgroup buffer.
fn buffer_index(program: &Program, name: &str) -> Result<usize, String> {
    let index = program
        .buffers()
        .iter()
        .position(|decl| decl.name() == name)
        .ok_or_else(|| format!("collective names unknown buffer `{name}`. Fix: declare it."))?;
    if program.buffers()[index].access() == BufferAccess::Workgroup {
        return Err(format!(
            "collective on workgroup buffer `{name}`. Fix: use a storage buffer."
        ));
    }
    Ok(index)
}

/// Input and output of AllGather/ReduceScatter, which must share an element type.
fn pair(program: &Program, input: &str, output: &str) -> Result<(usize, usize), String> {
    let (i, o) = (
        buffer_index(program, input)?,
        buffer_index(program, output)?,
    );
    let (a, b) = (
        program.buffers()[i].element(),
        program.buffers()[o].element(),
    );
    if a != b {
        return Err(format!(
            "collective input `{input}` is {a} but output `{output}` is {b}. Fix: use one element type."
        ));
    }
    Ok((i, o))
}

/// The byte length every rank binds for this buffer (SPMD: ranks agree on shapes).
fn same_length(ranks: &[Memory], index: usize, what: &str) -> Result<usize, String> {
    let len = ranks[0][index].len();
    if let Some(rank) = ranks.iter().position(|memory| memory[index].len() != len) {
        return Err(format!(
            "{what}: rank {rank} binds {} bytes, rank 0 binds {len}. Fix: bind the same shapes on every rank.",
            ranks[rank][index].len()
        ));
    }
    Ok(len)
}

fn need_length(
    ranks: &[Memory],
    index: usize,
    want: usize,
    what: &str,
    rule: &str,
) -> Result<(), String> {
    let have = same_length(ranks, index, what)?;
    if have != want {
        return Err(format!(
            "{what} has {have} bytes but the shape rule ({rule}, W = {}) needs {want}. Fix: size it so.",
            ranks.len()
        ));
    }
    Ok(())
}

/// The rank-order left fold of buffer `index` over every rank.
fn fold(
    program: &Program,
    index: usize,
    op: CollectiveOp,
    ranks: &[Memory],
) -> Result<Vec<u8>, String> {
    same_length(ranks, index, "collective buffer")?;
    let element = program.buffers()[index].element();
    let mut acc = ranks[0][index].clone();
    for memory in &ranks[1..] {
        let next = &memory[index];
        acc = match element {
            DataType::U64 => fold_words64(op, false, &acc, next)?,
            DataType::I64 => fold_words64(op, true, &acc, next)?,
            _ => fold_on_reference(&element, op, acc, next)?,
        };
    }
    Ok(acc)
}

/// One fold step run by vyre-reference, so the element semantics are its own.
fn fold_on_reference(
    element: &DataType,
    op: CollectiveOp,
    acc: Vec<u8>,
    next: &[u8],
) -> Result<Vec<u8>, String> {
    if acc.is_empty() {
        return Ok(acc);
    }
    let step = fold_program(element.clone(), binop(op)?);
    let inputs = [Value::from(acc), Value::from(next.to_vec())];
    let mut out = vyre_reference::reference_eval(&step, &inputs)
        .map_err(|e| format!("{op:?} over {element} on the reference: {e}"))?;
    Ok(out.remove(0).to_bytes())
}

/// One fold step over little-endian 64-bit words, on the host: vyre-reference refuses
/// 64-bit integer arithmetic (V084), so U64/I64 fold as NCCL's Uint64/Int64 do: Sum
/// wraps, Min/Max compare unsigned or signed, the bitwise ops act on the bits.
fn fold_words64(
    op: CollectiveOp,
    signed: bool,
    acc: &[u8],
    next: &[u8],
) -> Result<Vec<u8>, String> {
    let word = |c: &[u8]| u64::from_le_bytes(c.try_into().expect("8-byte chunk"));
    let pick = |a: u64, b: u64, less: bool| {
        let a_first = if signed {
            (a as i64) < (b as i64)
        } else {
            a < b
        };
        if a_first == less {
            a
        } else {
            b
        }
    };
    let mut out = Vec::with_capacity(acc.len());
    for (a, b) in acc.chunks_exact(8).zip(next.chunks_exact(8)) {
        let (a, b) = (word(a), word(b));
        let value = match op {
            CollectiveOp::Sum => a.wrapping_add(b),
            CollectiveOp::Min => pick(a, b, true),
            CollectiveOp::Max => pick(a, b, false),
            CollectiveOp::BitAnd => a & b,
            CollectiveOp::BitOr => a | b,
            CollectiveOp::BitXor => a ^ b,
            other => return Err(format!("collective op {other:?} has no fold")),
        };
        out.extend_from_slice(&value.to_le_bytes());
    }
    Ok(out)
}

fn binop(op: CollectiveOp) -> Result<BinOp, String> {
    Ok(match op {
        CollectiveOp::Sum => BinOp::Add,
        CollectiveOp::Min => BinOp::Min,
        CollectiveOp::Max => BinOp::Max,
        CollectiveOp::BitAnd => BinOp::BitAnd,
        CollectiveOp::BitOr => BinOp::BitOr,
        CollectiveOp::BitXor => BinOp::BitXor,
        other => return Err(format!("collective op {other:?} has no fold")),
    })
}

/// `acc[i] = acc[i] <op> next[i]` for every element, both buffers runtime-sized.
fn fold_program(element: DataType, op: BinOp) -> Program {
    let i = Expr::gid_x();
    let value = Expr::BinOp {
        op,
        left: Box::new(Expr::load("acc", i.clone())),
        right: Box::new(Expr::load("next", i.clone())),
    };
    Program::wrapped(
        vec![
            BufferDecl::read_write("acc", 0, element.clone()),
            BufferDecl::read("next", 1, element),
        ],
        [64, 1, 1],
        vec![Node::if_then(
            Expr::lt(i.clone(), Expr::buf_len("acc")),
            vec![Node::store("acc", i, value)],
        )],
    )
}
