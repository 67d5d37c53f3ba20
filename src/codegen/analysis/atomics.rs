//! Which atomics discard their old value, and which buffers are touched only by such
//! atomics. The lowering turns the former into `red` (see `lower::reduction` for why that
//! is exact) and folds the latter into per-workgroup partials; the elementwise analysis
//! treats the latter as accumulated buffers.

use crate::codegen::visit::{for_each_child, for_each_expr, for_each_expr_in, for_each_node};
use rustc_hash::{FxHashMap, FxHashSet};
use vyre_foundation::ir::{AtomicOp, Expr, Node};

/// The `red`/`redux` operator an atomic whose result is discarded lowers to, where the
/// operator is order-independent.
pub(crate) fn commutative_opcode(op: AtomicOp) -> Option<&'static str> {
    Some(match op {
        AtomicOp::Add => "add.u32",
        AtomicOp::Or => "or.b32",
        AtomicOp::And => "and.b32",
        AtomicOp::Xor => "xor.b32",
        AtomicOp::Min => "min.u32",
        AtomicOp::Max | AtomicOp::LruUpdate => "max.u32",
        _ => return None,
    })
}

/// A `Let` of an atomic without `expected` whose name no expression reads: the atomic's
/// old value is discarded.
pub(crate) struct DiscardedLet<'p> {
    pub(crate) op: AtomicOp,
    pub(crate) buffer: &'p str,
    pub(crate) index: &'p Expr,
    pub(crate) value: &'p Expr,
}

/// `node` as a [`DiscardedLet`], given every name some expression reads.
pub(crate) fn discarded_let<'p>(
    node: &'p Node,
    read_vars: &FxHashSet<&str>,
) -> Option<DiscardedLet<'p>> {
    match node {
        Node::Let {
            name,
            value:
                Expr::Atomic {
                    op,
                    buffer,
                    index,
                    expected: None,
                    value,
                    ..
                },
        } if !read_vars.contains(name.as_str()) => Some(DiscardedLet {
            op: *op,
            buffer: buffer.as_str(),
            index,
            value,
        }),
        _ => None,
    }
}

/// Buffers whose discarded atomics may fold into per-workgroup partials: the program has
/// no barrier, no async copy and no subgroup operation, and touches the buffer only
/// through `Let`s of atomics that nobody reads, all with the same commutative operator and
/// no `expected`. (Partials are applied after an epilogue barrier that returned and faulted
/// lanes wait at: a subgroup operation of the lanes still running would wait for them
/// there, a deadlock; GPU hang of fuzz seed 0x00eae19323e57f12.)
pub(crate) fn partial_buffers<'p>(
    nodes: &'p [Node],
    read_vars: &FxHashSet<&'p str>,
) -> FxHashSet<&'p str> {
    let mut census = Census {
        read_vars,
        opcodes: FxHashMap::default(),
        other_use: FxHashSet::default(),
        blocked: false,
    };
    census.nodes(nodes);
    if census.blocked {
        return FxHashSet::default();
    }
    census
        .opcodes
        .into_iter()
        .filter(|(buffer, opcode)| opcode.is_some() && !census.other_use.contains(buffer))
        .map(|(buffer, _)| buffer)
        .collect()
}

struct Census<'p, 'r> {
    read_vars: &'r FxHashSet<&'p str>,
    /// The single operator of each buffer's discarded literal-index atomics (`None` once
    /// two operators or a computed index were seen).
    opcodes: FxHashMap<&'p str, Option<&'static str>>,
    /// Buffers used any other way.
    other_use: FxHashSet<&'p str>,
    /// The program has a construct that rules the transformation out everywhere.
    blocked: bool,
}

impl<'p> Census<'p, '_> {
    fn nodes(&mut self, nodes: &'p [Node]) {
        for_each_node(nodes, &mut |node| {
            if let Some(atomic) = discarded_let(node, self.read_vars) {
                let opcode = commutative_opcode(atomic.op)
                    .filter(|_| matches!(atomic.index, Expr::LitU32(_)));
                let entry = self.opcodes.entry(atomic.buffer).or_insert(opcode);
                if *entry != opcode {
                    *entry = None;
                }
                self.expr(atomic.index);
                self.expr(atomic.value);
                return;
            }
            match node {
                Node::Store { buffer, .. } => {
                    self.other_use.insert(buffer.as_str());
                }
                Node::Let { .. }
                | Node::Assign { .. }
                | Node::If { .. }
                | Node::Loop { .. }
                | Node::Block(_)
                | Node::Region { .. }
                | Node::Return => {}
                _ => self.blocked = true,
            }
            for_each_expr(node, &mut |expr| self.expr(expr));
        });
    }

    fn expr(&mut self, expr: &'p Expr) {
        match expr {
            Expr::Load { buffer, .. } | Expr::Atomic { buffer, .. } => {
                self.other_use.insert(buffer.as_str());
            }
            Expr::SubgroupBallot { .. }
            | Expr::SubgroupShuffle { .. }
            | Expr::SubgroupReduce { .. } => self.blocked = true,
            _ => {}
        }
        for_each_child(expr, &mut |child| self.expr(child));
    }
}

/// Every variable name some expression of `nodes` reads (`Expr::Var`), at any depth.
pub(crate) fn read_variables<'p>(nodes: &'p [Node], out: &mut FxHashSet<&'p str>) {
    for_each_expr_in(nodes, &mut |expr| {
        if let Expr::Var(name) = expr {
            out.insert(name.as_str());
        }
    });
}
