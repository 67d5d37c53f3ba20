//! Segments whose invocations all run the same computation: no invocation, local or
//! workgroup id, subgroup operation or async copy, and no atomic unless every workgroup
//! is one invocation (lanes that take different old values would stop running in step).
//!
//! The reference runs a segment's workgroups one after another and a workgroup's lanes
//! statement by statement, so each such invocation sees what the previous ones wrote.
//! Launched in parallel they race: vyre-libs' in-place FFT (`fft_radix2`) read a slot
//! another block had already advanced a stage and came out 1 ulp off on some runs. Such a
//! segment runs on one thread instead ([`Replication`]).

use super::uniform::written_buffers;
use crate::codegen::visit::{any_node, children, for_each_child, for_each_expr, is_pure_operation};
use rustc_hash::FxHashSet;
use vyre_foundation::ir::{BufferAccess, Expr, Node, Program};

/// How a segment's invocations run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Replication {
    /// Invocations differ, or the segment writes nothing: all of them, in parallel.
    Parallel,
    /// Every invocation is the same and running it again, or any of its stores again,
    /// writes exactly what one run wrote: the first invocation alone.
    Once,
    /// Every invocation is the same but a repeat may change memory: the first invocation
    /// runs the reference's schedule, the segment once per workgroup of the grid and each
    /// store once per lane of the workgroup.
    Serial,
}

/// How `segment` of `program` runs with `lanes` invocations per workgroup.
pub(crate) fn classify(program: &Program, segment: &[Node], lanes: u32) -> Replication {
    let writes = any_node(segment, &|node| matches!(node, Node::Store { .. }));
    if !writes || !same_in_every_invocation(segment, lanes == 1) {
        return Replication::Parallel;
    }
    let shared: FxHashSet<&str> = program
        .buffers()
        .iter()
        .filter(|decl| decl.access() == BufferAccess::Workgroup)
        .map(|decl| decl.name())
        .collect();
    let written = written_buffers(segment);
    let mut run = StableRun {
        written: &written,
        shared: &shared,
        defined: FxHashSet::default(),
    };
    if run.block(segment) {
        Replication::Once
    } else {
        Replication::Serial
    }
}

/// Whether every statement and expression of `nodes` computes the same in every
/// invocation (an allow-list: anything not known to be invocation-independent is not).
fn same_in_every_invocation(nodes: &[Node], atomics: bool) -> bool {
    nodes.iter().all(|node| {
        let statement_ok = matches!(
            node,
            Node::Let { .. }
                | Node::Store { .. }
                | Node::Barrier { .. }
                | Node::Assign { .. }
                | Node::If { .. }
                | Node::Loop { .. }
                | Node::Return
                | Node::Block(_)
                | Node::Region { .. }
        );
        let mut exprs_ok = true;
        for_each_expr(node, &mut |expr| {
            exprs_ok = exprs_ok && expr_same(expr, atomics)
        });
        statement_ok
            && exprs_ok
            && children(node)
                .into_iter()
                .all(|body| same_in_every_invocation(body, atomics))
    })
}

fn expr_same(expr: &Expr, atomics: bool) -> bool {
    let leaf_ok = match expr {
        Expr::Atomic { .. } => atomics,
        Expr::Load { .. } => true,
        other => is_pure_operation(other),
    };
    let mut children_ok = true;
    for_each_child(expr, &mut |child| {
        children_ok = children_ok && expr_same(child, atomics)
    });
    leaf_ok && children_ok
}

/// Proof that one run of a straight-line segment writes the same whatever memory it
/// starts from and however often each of its statements repeats: every load of a written
/// storage buffer reads a literal slot an earlier store of the run wrote, and no store
/// reads the slot it writes. Loads of buffers the segment never writes read the same
/// every time, and workgroup memory starts zeroed for every workgroup.
struct StableRun<'p> {
    written: &'p FxHashSet<&'p str>,
    shared: &'p FxHashSet<&'p str>,
    /// The literal slots stored so far in this run.
    defined: FxHashSet<(&'p str, u32)>,
}

impl<'p> StableRun<'p> {
    fn block(&mut self, nodes: &'p [Node]) -> bool {
        nodes.iter().all(|node| match node {
            Node::Let { value, .. } => self.expr(value, None),
            Node::Store {
                buffer,
                index: Expr::LitU32(index),
                value,
            } => {
                let slot = (buffer.as_str(), *index);
                let stable = self.expr(value, Some(slot));
                self.defined.insert(slot);
                stable
            }
            Node::Barrier { .. } => true,
            Node::Block(body) => self.block(body),
            Node::Region { body, .. } => self.block(body),
            // Control flow, assignments and computed store indices: not proven.
            _ => false,
        })
    }

    /// Whether `expr` evaluates the same in every run; `storing` is the slot the
    /// statement it belongs to writes.
    fn expr(&self, expr: &Expr, storing: Option<(&str, u32)>) -> bool {
        if let Expr::Atomic { .. } = expr {
            return false;
        }
        if let Expr::Load { buffer, index } = expr {
            let buffer = buffer.as_str();
            let literal = match **index {
                Expr::LitU32(index) => Some((buffer, index)),
                _ => None,
            };
            let own_buffer = storing.is_some_and(|(stored, _)| stored == buffer);
            if self.shared.contains(buffer) {
                if own_buffer && (literal.is_none() || literal == storing) {
                    return false;
                }
            } else if self.written.contains(buffer) {
                return literal
                    .is_some_and(|slot| storing != Some(slot) && self.defined.contains(&slot));
            }
        }
        let mut stable = true;
        for_each_child(expr, &mut |child| {
            stable = stable && self.expr(child, storing)
        });
        stable
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vyre_foundation::ir::{BufferDecl, DataType};

    fn program(workgroup: [u32; 3], body: Vec<Node>) -> Program {
        Program::wrapped(
            vec![
                BufferDecl::storage("input", 0, BufferAccess::ReadOnly, DataType::U32)
                    .with_count(4),
                BufferDecl::output("out", 1, DataType::U32).with_count(4),
                BufferDecl::workgroup("tile", 4, DataType::U32),
            ],
            workgroup,
            body,
        )
    }

    fn classified(body: Vec<Node>) -> Replication {
        classified_with(4, body)
    }

    fn classified_with(lanes: u32, body: Vec<Node>) -> Replication {
        let program = program([lanes, 1, 1], body);
        classify(&program, program.entry(), lanes)
    }

    #[test]
    fn in_place_updates_of_slots_written_earlier_run_once() {
        let body = vec![
            Node::store("out", Expr::u32(0), Expr::load("input", Expr::u32(1))),
            Node::let_bind("x", Expr::load("out", Expr::u32(0))),
            Node::store("out", Expr::u32(1), Expr::add(Expr::var("x"), Expr::u32(1))),
            Node::store("out", Expr::u32(0), Expr::load("out", Expr::u32(1))),
        ];
        assert_eq!(classified(body), Replication::Once);
    }

    #[test]
    fn reading_a_slot_before_writing_it_or_in_its_own_store_runs_serially() {
        let own_slot = vec![
            Node::store("out", Expr::u32(0), Expr::u32(1)),
            Node::store(
                "out",
                Expr::u32(0),
                Expr::add(Expr::load("out", Expr::u32(0)), Expr::u32(1)),
            ),
        ];
        assert_eq!(classified(own_slot), Replication::Serial);
        let before = vec![Node::store(
            "out",
            Expr::u32(1),
            Expr::load("out", Expr::u32(0)),
        )];
        assert_eq!(classified(before), Replication::Serial);
        let computed = vec![Node::store(
            "out",
            Expr::load("input", Expr::u32(0)),
            Expr::u32(7),
        )];
        assert_eq!(classified(computed), Replication::Serial);
        let branch = vec![Node::if_then(
            Expr::lt(Expr::load("input", Expr::u32(0)), Expr::u32(3)),
            vec![Node::store("out", Expr::u32(0), Expr::u32(1))],
        )];
        assert_eq!(classified(branch), Replication::Serial);
        let shared_own_slot = vec![Node::store(
            "tile",
            Expr::u32(1),
            Expr::add(Expr::load("tile", Expr::u32(1)), Expr::u32(1)),
        )];
        assert_eq!(classified(shared_own_slot), Replication::Serial);
    }

    #[test]
    fn workgroup_memory_starts_zeroed_in_every_run() {
        let body = vec![
            Node::store("tile", Expr::u32(0), Expr::load("tile", Expr::u32(1))),
            Node::Barrier {
                ordering: vyre_foundation::ir::MemoryOrdering::SeqCst,
            },
            Node::store(
                "out",
                Expr::u32(0),
                Expr::load("tile", Expr::load("input", Expr::u32(0))),
            ),
        ];
        assert_eq!(classified(body), Replication::Once);
    }

    #[test]
    fn anything_that_differs_between_invocations_runs_in_parallel() {
        let by_id = vec![Node::store(
            "out",
            Expr::InvocationId { axis: 0 },
            Expr::u32(1),
        )];
        assert_eq!(classified(by_id), Replication::Parallel);
        let by_group = vec![Node::store(
            "out",
            Expr::u32(0),
            Expr::WorkgroupId { axis: 0 },
        )];
        assert_eq!(classified(by_group), Replication::Parallel);
        let atomic = vec![
            Node::let_bind("old", Expr::atomic_add("out", Expr::u32(0), Expr::u32(1))),
            Node::store("out", Expr::u32(1), Expr::var("old")),
        ];
        assert_eq!(classified(atomic.clone()), Replication::Parallel);
        // One invocation per workgroup: the reference's order is one run after another.
        assert_eq!(classified_with(1, atomic), Replication::Serial);
        let nothing_written = vec![Node::let_bind("x", Expr::load("input", Expr::u32(0)))];
        assert_eq!(classified(nothing_written), Replication::Parallel);
    }
}
