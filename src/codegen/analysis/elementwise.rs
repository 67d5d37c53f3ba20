//! Elementwise ("map") programs: whether a program may run several invocations per thread
//! with vector loads and stores, and have its invocation range split into independent chunks.
//!
//! Invocation `i` must touch global memory only at element `i` (every index is
//! `InvocationId { axis: 0 }`, directly or through a never-reassigned `Let`), the workgroup is
//! 1-D, and nothing lets invocations observe each other (barriers, workgroup memory, subgroup
//! operations, async copies, other IDs, unresolved calls). The one atomic allowed is on an
//! *accumulated* buffer: touched only through discarded atomics with one order-independent
//! operator (`analysis::atomics::commutative_opcode`) and no `expected`, so its final contents
//! do not depend on invocation order; a chunked dispatch gives every chunk the whole buffer.
//! The one other load allowed is of a *broadcast* buffer: an input (read-only, never
//! written) read only at indices every invocation of the dispatch computes alike (literals
//! and `BufLen`s combined by pure operators, directly or through never-reassigned `Let`s;
//! never an id: workgroup and local ids differ across the grid). Nothing writes it, so any
//! order of invocations reads the same values; a chunked dispatch binds it whole.

use super::atomics::{commutative_opcode, discarded_let};
use crate::codegen::abi::{role, BindingRole};
use crate::codegen::kind::{loads_may_be_empty, nibble_vector, unaddressed_width, view_element};
use crate::codegen::visit::{all_children, for_each_expr, for_each_node, is_pure_operation};
use rustc_hash::{FxHashMap, FxHashSet};
use vyre_foundation::ir::{BufferAccess, Expr, Node, Program};

/// What the vector lowering needs to know about an elementwise program.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Elementwise<'p> {
    /// Buffers some `Store` writes.
    pub(crate) stored: FxHashSet<&'p str>,
    /// Buffers some `Load` reads.
    pub(crate) loaded: FxHashSet<&'p str>,
    /// Buffers touched only through discarded order-independent atomics (module docs).
    pub(crate) accumulated: FxHashSet<&'p str>,
    /// Input buffers read only at indices every invocation shares (module docs).
    pub(crate) broadcast: FxHashSet<&'p str>,
}

/// `Some` when `program` (already prepared as the reference runs it) is elementwise for
/// the effective `workgroup_size`. `read_vars` holds every variable some expression reads
/// (it may be left empty for a program without atomics: it only tells discarded atomics
/// apart).
pub(crate) fn classify<'p>(
    program: &'p Program,
    workgroup_size: [u32; 3],
    read_vars: &FxHashSet<&'p str>,
) -> Option<Elementwise<'p>> {
    if workgroup_size[1] != 1 || workgroup_size[2] != 1 {
        return None;
    }
    // A `Bytes` load is the rest of the buffer from its index and a `Bytes` store writes
    // a whole value's bytes from its index: both reach past element `i`; a wide element's
    // loads are views too, not words a lane carries. An element the
    // reference never addresses (zero stride) has no element `i` to carry in a lane. A
    // load of a vector of lanes that may be empty carries a filled flag, which raw words
    // in a lane do not; a vector of 4-bit lanes takes the reference's count, not the
    // addressed one the chunks and lanes split.
    if program.buffers().iter().any(|decl| {
        decl.access() == BufferAccess::Workgroup
            || view_element(&decl.element())
            || unaddressed_width(&decl.element()).is_some()
            || loads_may_be_empty(&decl.element())
            || nibble_vector(&decl.element())
    }) {
        return None;
    }
    let mut walk = Walk {
        lets: FxHashMap::default(),
        mutable: FxHashSet::default(),
        read: read_vars,
        globals: program.buffers().iter().map(|decl| decl.name()).collect(),
        inputs: (program.buffers().iter())
            .filter(|decl| role(decl) == BindingRole::Input)
            .map(|decl| decl.name())
            .collect(),
        found: Elementwise::default(),
        operators: FxHashMap::default(),
    };
    walk.collect_bindings(program.entry());
    let mut ok = true;
    for_each_node(program.entry(), &mut |node| {
        ok = ok && walk.check_node(node)
    });
    if !ok {
        return None;
    }
    // An accumulated buffer is touched by nothing but its one operator's atomics, and a
    // broadcast buffer by nothing but its shared-index loads (a chunk holds only its own
    // elements of the others).
    let accumulated: FxHashSet<&str> = walk.operators.into_keys().collect();
    let found = walk.found;
    let apart = |set: &FxHashSet<&str>, others: &[&FxHashSet<&str>]| {
        others.iter().all(|other| set.is_disjoint(other))
    };
    (apart(&accumulated, &[&found.loaded, &found.stored])
        && apart(
            &found.broadcast,
            &[&found.loaded, &found.stored, &accumulated],
        ))
    .then(|| Elementwise {
        accumulated,
        ..found
    })
}

/// Name facts gathered before the check (which locals always hold `gid`), and what the
/// check finds.
struct Walk<'p, 'r> {
    /// Every `Let` value of each name (names may be re-bound in sibling scopes).
    lets: FxHashMap<&'p str, Vec<&'p Expr>>,
    /// Names that are assigned or used as loop variables somewhere.
    mutable: FxHashSet<&'p str>,
    /// Names some expression reads (a discarded atomic's `Let` name is not among them).
    read: &'r FxHashSet<&'p str>,
    /// The program's global buffers.
    globals: FxHashSet<&'p str>,
    /// The global buffers that are only inputs (read-only, not returned).
    inputs: FxHashSet<&'p str>,
    found: Elementwise<'p>,
    /// The one operator of each accumulated buffer's atomics.
    operators: FxHashMap<&'p str, &'static str>,
}

impl<'p> Walk<'p, '_> {
    fn collect_bindings(&mut self, nodes: &'p [Node]) {
        for_each_node(nodes, &mut |node| match node {
            Node::Let { name, value } => {
                self.lets.entry(name.as_str()).or_default().push(value);
            }
            Node::Assign { name, .. } | Node::Loop { var: name, .. } => {
                self.mutable.insert(name.as_str());
            }
            _ => {}
        });
    }

    /// Whether `expr` is the invocation's own 1-D global index in every execution.
    fn is_gid(&self, expr: &Expr, depth: u32) -> bool {
        match expr {
            Expr::InvocationId { axis: 0 } => true,
            Expr::Var(name) if depth < 64 && !self.mutable.contains(name.as_str()) => self
                .lets
                .get(name.as_str())
                .is_some_and(|values| values.iter().all(|v| self.is_gid(v, depth + 1))),
            _ => false,
        }
    }

    /// Whether `expr` has the same value in every invocation of the dispatch: literals and
    /// `BufLen`s (the host passes every chunk the whole buffers' counts) combined by pure
    /// operators, directly or through never-reassigned `Let`s.
    fn is_shared(&self, expr: &Expr, depth: u32) -> bool {
        match expr {
            Expr::Var(name) => {
                depth < 64
                    && !self.mutable.contains(name.as_str())
                    && self
                        .lets
                        .get(name.as_str())
                        .is_some_and(|values| values.iter().all(|v| self.is_shared(v, depth + 1)))
            }
            Expr::BufLen { .. } => true,
            other if is_pure_operation(other) && depth < 64 => {
                all_children(other, |child| self.is_shared(child, depth + 1))
            }
            _ => false,
        }
    }

    /// Whether `node`'s own shape and expressions are elementwise (`classify` visits
    /// the nested statements).
    fn check_node(&mut self, node: &'p Node) -> bool {
        if let Some(atomic) = discarded_let(node, self.read) {
            // A discarded order-independent atomic: its buffer is accumulated, provided
            // every other atomic on it uses the same operator (two operators do not
            // commute with each other). Any other atomic fails below (`check_expr`).
            let Some(opcode) = commutative_opcode(atomic.op) else {
                return false;
            };
            if !self.globals.contains(atomic.buffer)
                || *self.operators.entry(atomic.buffer).or_insert(opcode) != opcode
            {
                return false;
            }
            return self.check_expr(atomic.index) && self.check_expr(atomic.value);
        }
        match node {
            Node::Let { .. }
            | Node::Assign { .. }
            | Node::If { .. }
            | Node::Loop { .. }
            | Node::Block(_)
            | Node::Region { .. }
            | Node::Return
            | Node::Trap { .. } => {}
            Node::Store { buffer, index, .. } => {
                if !self.globals.contains(buffer.as_str()) || !self.is_gid(index, 0) {
                    return false;
                }
                self.found.stored.insert(buffer.as_str());
            }
            _ => return false,
        }
        let mut exprs_ok = true;
        for_each_expr(node, &mut |expr| {
            exprs_ok = exprs_ok && self.check_expr(expr)
        });
        exprs_ok
    }

    fn check_expr(&mut self, expr: &'p Expr) -> bool {
        let own = match expr {
            Expr::Load { buffer, index } => {
                let buffer = buffer.as_str();
                if self.globals.contains(buffer) && self.is_gid(index, 0) {
                    self.found.loaded.insert(buffer);
                } else if self.inputs.contains(buffer) && self.is_shared(index, 0) {
                    self.found.broadcast.insert(buffer);
                } else {
                    return false;
                }
                true
            }
            Expr::InvocationId { axis } => *axis == 0,
            other => is_pure_operation(other),
        };
        if !own {
            return false;
        }
        all_children(expr, |child| self.check_expr(child))
    }
}

#[cfg(test)]
mod tests {
    use super::super::atomics::read_variables;
    use super::*;
    use vyre_foundation::ir::{BufferDecl, DataType};

    fn classify(program: &Program, workgroup_size: [u32; 3]) -> Option<Elementwise<'_>> {
        let mut read = FxHashSet::default();
        read_variables(program.entry(), &mut read);
        super::classify(program, workgroup_size, &read)
    }

    fn gid() -> Expr {
        Expr::InvocationId { axis: 0 }
    }

    fn program(body: Vec<Node>) -> Program {
        Program::wrapped(
            vec![
                BufferDecl::read("a", 0, DataType::U32).with_count(64),
                BufferDecl::output("out", 1, DataType::U32).with_count(64),
            ],
            [64, 1, 1],
            body,
        )
    }

    #[test]
    fn direct_and_let_bound_gid_are_elementwise() {
        let direct = program(vec![Node::store("out", gid(), Expr::load("a", gid()))]);
        let found = classify(&direct, [64, 1, 1]).expect("elementwise");
        assert!(found.stored.contains("out") && found.loaded.contains("a"));
        let through_let = program(vec![
            Node::let_bind("i", gid()),
            Node::store("out", Expr::var("i"), Expr::load("a", Expr::var("i"))),
        ]);
        assert!(classify(&through_let, [64, 1, 1]).is_some());
    }

    #[test]
    fn discarded_order_independent_atomics_accumulate() {
        let sum = program(vec![Node::let_bind(
            "old",
            Expr::atomic_add("out", Expr::u32(0), Expr::load("a", gid())),
        )]);
        let found = classify(&sum, [64, 1, 1]).expect("a reduction is elementwise");
        assert!(found.accumulated.contains("out") && found.loaded.contains("a"));
        assert!(found.stored.is_empty());
        // A histogram: computed index, two atomics with the same operator.
        let bucket = Expr::BinOp {
            op: vyre_foundation::ir::BinOp::BitAnd,
            left: Box::new(Expr::load("a", gid())),
            right: Box::new(Expr::u32(63)),
        };
        let histogram = program(vec![
            Node::let_bind("x", Expr::atomic_max("out", bucket.clone(), gid())),
            Node::let_bind("y", Expr::atomic_max("out", gid(), Expr::u32(7))),
        ]);
        let found = classify(&histogram, [64, 1, 1]).expect("a histogram is elementwise");
        assert!(found.accumulated.contains("out"));
    }

    #[test]
    fn atomics_that_order_or_observe_are_not_accumulated() {
        let two_operators = program(vec![
            Node::let_bind("x", Expr::atomic_add("out", Expr::u32(0), gid())),
            Node::let_bind("y", Expr::atomic_max("out", Expr::u32(0), gid())),
        ]);
        assert!(classify(&two_operators, [64, 1, 1]).is_none());
        let exchange = program(vec![Node::let_bind(
            "x",
            Expr::atomic_exchange("out", Expr::u32(0), gid()),
        )]);
        assert!(classify(&exchange, [64, 1, 1]).is_none());
        let compare = program(vec![Node::let_bind(
            "x",
            Expr::atomic_compare_exchange("out", Expr::u32(0), Expr::u32(0), gid()),
        )]);
        assert!(classify(&compare, [64, 1, 1]).is_none());
        // The accumulated buffer is also stored or loaded elsewhere.
        let stored_too = program(vec![
            Node::let_bind("x", Expr::atomic_add("out", Expr::u32(0), gid())),
            Node::store("out", gid(), Expr::u32(1)),
        ]);
        assert!(classify(&stored_too, [64, 1, 1]).is_none());
        let loaded_too = program(vec![
            Node::let_bind("x", Expr::atomic_or("out", Expr::u32(0), gid())),
            Node::store("out", gid(), Expr::load("out", gid())),
        ]);
        assert!(classify(&loaded_too, [64, 1, 1]).is_none());
        // An atomic inside another expression has its result used.
        let nested = program(vec![Node::store(
            "out",
            gid(),
            Expr::atomic_add("a", Expr::u32(0), Expr::u32(1)),
        )]);
        assert!(classify(&nested, [64, 1, 1]).is_none());
    }

    /// Buffers `p` (a read-only parameter block), `x` (read-only), `y` (read-write) and
    /// `out` (an output), for the shared-index tests.
    fn with_params(body: Vec<Node>) -> Program {
        Program::wrapped(
            vec![
                BufferDecl::read("p", 0, DataType::F32).with_count(4),
                BufferDecl::read("x", 1, DataType::F32).with_count(64),
                BufferDecl::read_write("y", 2, DataType::F32).with_count(64),
                BufferDecl::output("out", 3, DataType::F32).with_count(64),
            ],
            [64, 1, 1],
            body,
        )
    }

    #[test]
    fn inputs_read_at_shared_indices_are_broadcast() {
        // User-style saxpy: `y[i] = p[0] * x[i] + y[i]`, `y` in place.
        let saxpy = with_params(vec![Node::store(
            "y",
            gid(),
            Expr::add(
                Expr::mul(Expr::load("p", Expr::u32(0)), Expr::load("x", gid())),
                Expr::load("y", gid()),
            ),
        )]);
        let found = classify(&saxpy, [64, 1, 1]).expect("saxpy is elementwise");
        assert_eq!(found.broadcast, FxHashSet::from_iter(["p"]));
        assert!(found.loaded.contains("y") && found.stored.contains("y"));
        assert!(!found.loaded.contains("p"));
        // Indices from `BufLen`, pure operators and never-reassigned `Let`s; out of
        // bounds too (the load yields zero, the same for every invocation).
        let last = Expr::sub(Expr::buf_len("p"), Expr::u32(1));
        let computed = Expr::select(
            Expr::lt(Expr::buf_len("x"), Expr::u32(8)),
            Expr::u32(1),
            Expr::add(Expr::var("k"), Expr::u32(2)),
        );
        let shapes = with_params(vec![
            Node::let_bind("k", Expr::u32(1)),
            Node::let_bind("hi", Expr::load("p", last)),
            Node::store(
                "out",
                gid(),
                Expr::add(
                    Expr::mul(Expr::load("p", computed), Expr::var("hi")),
                    Expr::load("p", Expr::u32(1 << 20)),
                ),
            ),
        ]);
        let found = classify(&shapes, [64, 1, 1]).expect("elementwise");
        assert_eq!(found.broadcast, FxHashSet::from_iter(["p"]));
        assert!(found.stored.contains("out") && found.loaded.is_empty());
    }

    #[test]
    fn other_shared_reads_are_not_elementwise() {
        let store_of = |value: Expr| with_params(vec![Node::store("out", gid(), value)]);
        // Writable buffers read at a shared index: invocation 0 may write what the others
        // read (`y`), or the buffer is returned (`out`).
        let shared_y = with_params(vec![Node::store(
            "y",
            gid(),
            Expr::add(Expr::load("y", Expr::u32(0)), Expr::load("x", gid())),
        )]);
        assert!(classify(&shared_y, [64, 1, 1]).is_none());
        assert!(classify(&store_of(Expr::load("out", Expr::u32(0))), [64, 1, 1]).is_none());
        // One input read both at `gid` and at a shared index: a chunk holds only its own
        // elements.
        let both = store_of(Expr::add(
            Expr::load("x", gid()),
            Expr::load("x", Expr::u32(0)),
        ));
        assert!(classify(&both, [64, 1, 1]).is_none());
        // Indices that differ across the grid, or that are not proven shared.
        for index in [
            Expr::WorkgroupId { axis: 0 },
            Expr::LocalId { axis: 0 },
            Expr::add(gid(), Expr::u32(0)),
            Expr::load("p", Expr::u32(0)),
            Expr::var("undefined"),
        ] {
            let program = store_of(Expr::load("p", Expr::cast(DataType::U32, index)));
            assert!(classify(&program, [64, 1, 1]).is_none());
        }
        let reassigned = with_params(vec![
            Node::let_bind("k", Expr::u32(0)),
            Node::if_then(
                Expr::lt(gid(), Expr::u32(3)),
                vec![Node::assign("k", Expr::u32(1))],
            ),
            Node::store("out", gid(), Expr::load("p", Expr::var("k"))),
        ]);
        assert!(classify(&reassigned, [64, 1, 1]).is_none());
        let rebound = with_params(vec![
            Node::if_then(
                Expr::lt(gid(), Expr::u32(3)),
                vec![
                    Node::let_bind("k", gid()),
                    Node::store("out", gid(), Expr::load("p", Expr::var("k"))),
                ],
            ),
            Node::let_bind("k", Expr::u32(0)),
            Node::store("out", gid(), Expr::load("p", Expr::var("k"))),
        ]);
        assert!(classify(&rebound, [64, 1, 1]).is_none());
        let looped = with_params(vec![Node::loop_for(
            "j",
            Expr::u32(0),
            Expr::u32(4),
            vec![Node::store("out", gid(), Expr::load("p", Expr::var("j")))],
        )]);
        assert!(classify(&looped, [64, 1, 1]).is_none());
    }

    #[test]
    fn other_indices_and_shapes_are_not() {
        let shifted = program(vec![Node::store(
            "out",
            gid(),
            Expr::load("a", Expr::add(gid(), Expr::u32(1))),
        )]);
        assert!(classify(&shifted, [64, 1, 1]).is_none());
        let reassigned = program(vec![
            Node::let_bind("i", gid()),
            Node::assign("i", Expr::u32(0)),
            Node::store("out", Expr::var("i"), Expr::u32(1)),
        ]);
        assert!(classify(&reassigned, [64, 1, 1]).is_none());
        let two_d = program(vec![Node::store("out", gid(), Expr::u32(1))]);
        assert!(classify(&two_d, [8, 8, 1]).is_none());
        let local = program(vec![Node::store("out", gid(), Expr::LocalId { axis: 0 })]);
        assert!(classify(&local, [64, 1, 1]).is_none());
        // An atomic whose old value is read lets invocations observe each other.
        let observed = program(vec![
            Node::let_bind("old", Expr::atomic_add("out", gid(), Expr::u32(1))),
            Node::store("out", gid(), Expr::var("old")),
        ]);
        assert!(classify(&observed, [64, 1, 1]).is_none());
        let barrier = program(vec![
            Node::barrier(),
            Node::store("out", gid(), Expr::u32(1)),
        ]);
        assert!(classify(&barrier, [64, 1, 1]).is_none());
        // A bytes copy at `gid` reads and writes the rest of each buffer, not element `gid`.
        let bytes = Program::wrapped(
            vec![
                BufferDecl::read("src", 0, DataType::Bytes)
                    .with_count(64)
                    .with_bytes_extraction(true),
                BufferDecl::output("dst", 1, DataType::Bytes)
                    .with_count(64)
                    .with_bytes_extraction(true),
            ],
            [64, 1, 1],
            vec![Node::store("dst", gid(), Expr::load("src", gid()))],
        );
        assert!(classify(&bytes, [64, 1, 1]).is_none());
    }
}
