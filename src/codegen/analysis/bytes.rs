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
use crate::codegen::kind::{view_element, wide_element, WideElement};
use crate::codegen::visit::{any_expr_in, for_each_node, has_barrier};
use rustc_hash::FxHashSet;
use std::collections::BTreeSet;
use vyre_foundation::ir::{Expr, Node, Program};

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
    /// Some `Let` or `Assign` may bind a view of a written bytes buffer to a variable read
    /// later: its bytes are then copied at the binding (`lower::bytes`), into device-heap
    /// blocks the invocation gives back where it leaves.
    pub(crate) snapshots: bool,
    /// Some load is a view of zero bytes in no buffer (a [`WideElement`] out of bounds or of
    /// zero stride): its address is null, and view reads test for it.
    pub(crate) zero_views: bool,
}

impl<'p> BytesFacts<'p> {
    /// `subgroup_operand_vars`: the variables subgroup operands read (their views are
    /// copied even where read in time, see `lower::bytes::bind_bytes_view`).
    pub(crate) fn analyse(program: &'p Program, subgroup_operand_vars: &BTreeSet<&str>) -> Self {
        let mut facts = Self::default();
        let has_bytes = program
            .buffers()
            .iter()
            .any(|buffer| view_element(&buffer.element()));
        if !has_bytes {
            return facts;
        }
        facts.zero_views = (program.buffers().iter())
            .any(|buffer| wide_element(&buffer.element()).is_some_and(WideElement::loads_zeros));
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
        let bytes_buffers: FxHashSet<&str> = (program.buffers().iter())
            .filter(|buffer| view_element(&buffer.element()))
            .map(|buffer| buffer.name())
            .collect();
        let written_bytes =
            |buffer: &str| bytes_buffers.contains(buffer) && facts.written.contains(buffer);
        let mut snapshots = false;
        // The bindings `lower::bytes` copies: every `Assign`, and every `Let` but those read
        // in time (`read_before_writes`) whose variable no subgroup operand reads.
        for_each_node(entry, &mut |node| {
            if let Node::Let { name, value } | Node::Assign { name, value } = node {
                let in_time = matches!(node, Node::Let { .. })
                    && facts.read_before_writes.contains(&(value as *const Expr))
                    && !subgroup_operand_vars.contains(name.as_str());
                snapshots |= facts.read_vars.contains(name.as_str())
                    && !in_time
                    && views_written(value, &written_bytes);
            }
        });
        facts.snapshots = snapshots;
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

/// Whether `value` is a bytes view (`lower::bytes::is_bytes_view`: a load, a cast to bytes
/// or to a wide element of one, a select of two) with bytes in a buffer `written` says the program writes.
fn views_written(value: &Expr, written: &impl Fn(&str) -> bool) -> bool {
    match value {
        Expr::Load { buffer, .. } => written(buffer.as_str()),
        Expr::Cast { target, value } if view_element(target) => views_written(value, written),
        Expr::Select {
            true_val,
            false_val,
            ..
        } => views_written(true_val, written) || views_written(false_val, written),
        _ => false,
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
