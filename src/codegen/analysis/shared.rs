//! Sub-expressions a statement computes more than once. vyre builders repeat subtrees
//! (vyre-primitives' `flush_tiny(v)` is `select(|v| <= MIN_POSITIVE, 0, v)`, so an
//! activation's whole body, `tanh` and its divisions included, appears twice), and the
//! reference evaluates each copy. Within one statement's expressions nothing changes
//! between two evaluations of a pure sub-expression (no statement runs in between, and
//! loads, operators, casts and selects have no effect), so the second copy has the value
//! and the faults of the first: the lowering computes it once. Sharing stops at the
//! statement: the next one may follow a store.

use super::super::visit::{for_each_child, for_each_expr, for_each_node, is_pure_operation};
use rustc_hash::FxHashMap;
use vyre_foundation::ir::{Expr, Node};

/// Per occurrence of a repeated sub-expression, the id of its class of equal copies.
pub(crate) type SharedExprs = FxHashMap<*const Expr, u32>;

/// Most candidates a statement is searched among (each pair may be compared).
const MAX_CANDIDATES: usize = 256;

/// The repeated pure sub-expressions of every statement in `nodes`, nested ones included.
pub(crate) fn shared_subexpressions(nodes: &[Node]) -> SharedExprs {
    let mut shared = SharedExprs::default();
    let mut next_class = 0;
    for_each_node(nodes, &mut |node| {
        let mut candidates = Vec::new();
        let mut pure = true;
        for_each_expr(node, &mut |root| {
            pure = pure && collect(root, &mut candidates);
        });
        if pure && candidates.len() >= 2 && candidates.len() <= MAX_CANDIDATES {
            classify(&candidates, &mut shared, &mut next_class);
        }
    });
    shared
}

/// Push every sub-expression of `expr` worth sharing (an operation or a load, not a leaf)
/// onto `out`; `false` when `expr` holds something with an effect or an evaluation of its
/// own (atomics, subgroup operations, calls, extensions), in which case the statement
/// shares nothing.
fn collect<'e>(expr: &'e Expr, out: &mut Vec<&'e Expr>) -> bool {
    let reads = matches!(
        expr,
        Expr::Load { .. }
            | Expr::InvocationId { .. }
            | Expr::WorkgroupId { .. }
            | Expr::LocalId { .. }
    );
    if !reads && !is_pure_operation(expr) {
        return false;
    }
    let (mut pure, mut leaf) = (true, true);
    for_each_child(expr, &mut |child| {
        leaf = false;
        pure = pure && collect(child, out);
    });
    if !leaf {
        out.push(expr);
    }
    pure
}

/// Give each group of structurally equal candidates (two or more) a class id.
fn classify(candidates: &[&Expr], shared: &mut SharedExprs, next_class: &mut u32) {
    let mut grouped = vec![false; candidates.len()];
    for (i, first) in candidates.iter().enumerate() {
        if grouped[i] {
            continue;
        }
        let copies: Vec<usize> = (i + 1..candidates.len())
            .filter(|&j| !grouped[j] && candidates[j] == *first)
            .collect();
        if copies.is_empty() {
            continue;
        }
        for j in std::iter::once(i).chain(copies) {
            grouped[j] = true;
            shared.insert(candidates[j] as *const Expr, *next_class);
        }
        *next_class += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vyre_foundation::ir::{BinOp, UnOp};

    fn flush_tiny(value: Expr) -> Expr {
        Expr::select(
            Expr::le(Expr::abs(value.clone()), Expr::f32(f32::MIN_POSITIVE)),
            Expr::f32(0.0),
            value,
        )
    }

    fn tanh_of_load() -> Expr {
        Expr::UnOp {
            op: UnOp::Tanh,
            operand: Box::new(Expr::div(Expr::load("x", Expr::var("i")), Expr::f32(30.0))),
        }
    }

    #[test]
    fn a_repeated_body_is_one_class_per_level() {
        let nodes = vec![Node::store("y", Expr::var("i"), flush_tiny(tanh_of_load()))];
        let shared = shared_subexpressions(&nodes);
        // tanh, the division and the load: each twice.
        assert_eq!(shared.len(), 6);
        let mut classes: Vec<u32> = shared.values().copied().collect();
        classes.sort_unstable();
        classes.dedup();
        assert_eq!(classes.len(), 3);
    }

    #[test]
    fn statements_share_nothing_with_each_other() {
        let nodes = vec![
            Node::store("y", Expr::var("i"), tanh_of_load()),
            Node::store("y", Expr::u32(0), tanh_of_load()),
        ];
        assert!(shared_subexpressions(&nodes).is_empty());
    }

    #[test]
    fn statements_with_effects_or_subgroup_operations_share_nothing() {
        let atomic = Expr::Atomic {
            op: vyre_foundation::ir::AtomicOp::Add,
            buffer: "c".into(),
            index: Box::new(Expr::u32(0)),
            expected: None,
            value: Box::new(Expr::u32(1)),
            ordering: vyre_foundation::ir::MemoryOrdering::Relaxed,
        };
        let twice = |extra: Expr| {
            Expr::add(
                Expr::add(Expr::load("x", Expr::u32(1)), extra),
                Expr::load("x", Expr::u32(1)),
            )
        };
        let ballot = Expr::SubgroupBallot {
            cond: Box::new(Expr::bool(true)),
        };
        for extra in [atomic, ballot] {
            let nodes = vec![Node::store("y", Expr::u32(0), twice(extra))];
            assert!(shared_subexpressions(&nodes).is_empty());
        }
        let nodes = vec![Node::store("y", Expr::u32(0), twice(Expr::u32(2)))];
        assert_eq!(shared_subexpressions(&nodes).len(), 2);
    }

    #[test]
    fn nested_statements_are_searched_one_by_one() {
        let square = |v: &str| Expr::BinOp {
            op: BinOp::Mul,
            left: Box::new(Expr::load("x", Expr::var(v))),
            right: Box::new(Expr::load("x", Expr::var(v))),
        };
        let nodes = vec![Node::if_then(
            Expr::bool(true),
            vec![Node::loop_for(
                "k",
                Expr::u32(0),
                Expr::u32(4),
                vec![Node::store("y", Expr::var("k"), square("k"))],
            )],
        )];
        assert_eq!(shared_subexpressions(&nodes).len(), 2);
    }
}
