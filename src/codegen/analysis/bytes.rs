//! What decides whether a bytes view (the rest of a bytes buffer, see `lower::bytes`) may
//! be read late: the reference snapshots the bytes when it evaluates the load, so a view
//! bound by `Let` or `Assign` is exact only if no write can reach its buffer before it is
//! read, or if it is never read at all.

use super::atomics::read_variables;
use super::uniform::written_buffers;
use crate::codegen::visit::for_each_node;
use rustc_hash::FxHashSet;
use vyre_foundation::ir::{DataType, Node, Program};

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
        facts
    }
}
