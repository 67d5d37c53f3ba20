//! What decides whether a bytes view (the rest of a bytes buffer, see `lower::bytes`) may
//! be read late: the reference snapshots the bytes when it evaluates the load, so a view
//! bound by `Let` or `Assign` is exact only if no write can reach its buffer before it is
//! read, or if it is never read at all.
//!
//! A `Let` of a load from a buffer the program writes is read late exactly when every read
//! of its variable comes before this invocation can write the buffer: the statements from
//! the `Let` to the last one reading the variable write nothing to it and hold no barrier
//! (after one, other invocations' earlier stores are in the buffer), the last one except
//! when it is a `Store` of the variable itself (it reads the bytes before it writes, as a
//! direct copy does). Other invocations' stores without a barrier between are a race the
//! GPU does not order either.

use super::atomics::read_variables;
use super::uniform::written_buffers;
use crate::codegen::visit::{any_expr_in, for_each_node, has_barrier};
use rustc_hash::FxHashSet;
use vyre_foundation::ir::{DataType, Expr, Node, Program};

/// Facts about a program with bytes buffers (all empty for one without).
#[derive(Default)]
pub(crate) struct BytesFacts<'p> {
    /// Buffers some statement or atomic of the program writes (async copies count for
    /// both ends).
    pub(crate) written: FxHashSet<&'p str>,
    /// Variables some expression reads.
    pub(crate) read_vars: FxHashSet<&'p str>,
    /// Variables some `Assign` writes.
    pub(crate) assigned: FxHashSet<&'p str>,
    /// The values of the `Let`s of loads from written bytes buffers whose variable is read
    /// only before the buffer can change (see the module's header).
    pub(crate) read_before_writes: FxHashSet<*const Expr>,
}

impl<'p> BytesFacts<'p> {
    pub(crate) fn analyse(program: &'p Program) -> Self {
        let mut facts = Self::default();
        let has_bytes = program
            .buffers()
            .iter()
            .any(|buffer| buffer.element() == DataType::Bytes);
        if !has_bytes {
            return facts;
        }
        let entry = program.entry();
        facts.written = written_buffers(entry);
        read_variables(entry, &mut facts.read_vars);
        for_each_node(entry, &mut |node| match node {
            // A copy's source counts as written too (conservatively).
            Node::AsyncLoad { source, .. } | Node::AsyncStore { source, .. } => {
                facts.written.insert(source.as_str());
            }
            Node::Assign { name, .. } => {
                facts.assigned.insert(name.as_str());
            }
            _ => {}
        });
        facts.find_reads_before_writes(entry);
        facts
    }

    /// Fill [`Self::read_before_writes`] from every statement list of `nodes`.
    fn find_reads_before_writes(&mut self, nodes: &'p [Node]) {
        for (k, node) in nodes.iter().enumerate() {
            if let Node::Let {
                name,
                value: value @ Expr::Load { buffer, .. },
            } = node
            {
                let written = self.written.contains(buffer.as_str());
                if written && read_before_writes(name.as_str(), buffer.as_str(), &nodes[k + 1..]) {
                    self.read_before_writes.insert(value as *const Expr);
                }
            }
            for body in crate::codegen::visit::children(node) {
                self.find_reads_before_writes(body);
            }
        }
    }
}

/// Whether variable `name`, bound just before `rest` to a view of `buffer`, is read in
/// `rest` only before a write to `buffer` or a barrier can come.
fn read_before_writes(name: &str, buffer: &str, rest: &[Node]) -> bool {
    let reads = |node: &Node| {
        any_expr_in(
            std::slice::from_ref(node),
            &|e| matches!(e, Expr::Var(v) if v.as_str() == name),
        )
    };
    let Some(last) = rest.iter().rposition(reads) else {
        return true;
    };
    let changes = |node: &Node| {
        let nodes = std::slice::from_ref(node);
        has_barrier(nodes)
            || written_buffers(nodes).contains(buffer)
            || crate::codegen::visit::any_node(nodes, &|n| matches!(n, Node::AsyncWait { .. }))
    };
    let copies_it = |node: &Node| match node {
        Node::Store { value, .. } => {
            matches!(value, Expr::Var(v) if v.as_str() == name)
                && !any_expr_in(std::slice::from_ref(node), &|e| {
                    matches!(e, Expr::Atomic { .. })
                })
        }
        _ => false,
    };
    rest[..last].iter().all(|node| !changes(node))
        && (!changes(&rest[last]) || copies_it(&rest[last]))
}
