//! Loops the driver's JIT is told not to unroll (`.pragma "nounroll"`).
//!
//! ptxas unrolls a loop of a small constant trip count whole, and a loop holding other
//! loops copies them with it. Measured on the fixture corpus (2026-12-01, H200): that
//! unrolling was two thirds of the driver JIT's time over the incumbent's (826 of 1137
//! ms), in loops whose unrolled copies add up to thousands of expressions (a 117-trip
//! classifier of 48 expressions a trip, the 2-4 trip sweeps of a multigrid cycle around
//! inner loops), where each iteration is long already and the copies buy no speed. The
//! loops that unrolling makes fast (a dot product, a tile loop, a strided pass: small
//! bodies, or trips too long to unroll whole) stay as they are.
//!
//! A trip known only at run time (a buffer length, a kernel parameter ptxas knows is
//! invariant) ptxas unrolls 4x with a remainder loop. Rolling every such loop took 3% off
//! the corpus' driver JIT but cost vyre-primitives' conv1d (a straight-line gather loop)
//! 6.5% kernel time (2026-12-01, H200): only bodies that branch or hold an atomic, whose
//! unrolled copies do not overlap, are kept rolled.

use crate::codegen::visit::{any_expr_in, any_node, children, for_each_child, for_each_expr};
use vyre_foundation::ir::{Expr, Node};

/// Longest constant trip ptxas unrolls whole; longer loops it unrolls a few iterations at
/// a time, which costs little.
const FULL_UNROLL_TRIP: u64 = 256;

/// Copies ptxas makes of a loop body it unrolls partially (a trip count known only at run
/// time).
const PARTIAL_UNROLL: u64 = 4;

/// Expression nodes up to which a loop's whole unrolled body is left to ptxas.
const MAX_UNROLLED_EXPRS: u64 = 1024;

/// Longest constant trip of a loop holding other loops that is kept rolled whatever its
/// size: unrolling it only copies the inner loops.
const MAX_NESTING_TRIP: u64 = 16;

/// Whether the loop `from..to` over `body` keeps ptxas from unrolling it.
pub(crate) fn keeps_rolled(from: &Expr, to: &Expr, body: &[Node]) -> bool {
    // Only a trip ptxas unrolls whole needs the body's size.
    match constant_trip(from, to) {
        Some(trip) if (2..=FULL_UNROLL_TRIP).contains(&trip) => {
            rolled(trip, body, unrolled_exprs(body))
        }
        None => branches_or_atomics(body),
        _ => false,
    }
}

/// [`keeps_rolled`] for a loop of `trip` (in `2..=FULL_UNROLL_TRIP`) over `body`, whose
/// unrolled body holds `exprs` expression nodes.
fn rolled(trip: u64, body: &[Node], exprs: u64) -> bool {
    let nests = any_node(body, &|node| matches!(node, Node::Loop { .. }));
    (nests && trip <= MAX_NESTING_TRIP) || trip * exprs > MAX_UNROLLED_EXPRS
}

/// Whether `body` branches (an `If`, a loop) or holds an atomic: ptxas's unrolled copies of
/// such a body stay apart (the branches, the atomics' order), so unrolling buys them little
/// (quest_paging's rolled run-time loops: no kernel time lost).
fn branches_or_atomics(body: &[Node]) -> bool {
    any_node(body, &|node| {
        matches!(node, Node::If { .. } | Node::Loop { .. })
    }) || any_expr_in(body, &|expr| matches!(expr, Expr::Atomic { .. }))
}

fn constant_trip(from: &Expr, to: &Expr) -> Option<u64> {
    match (from, to) {
        (Expr::LitU32(from), Expr::LitU32(to)) => Some(u64::from(to.saturating_sub(*from))),
        _ => None,
    }
}

/// Expression nodes of `nodes` as ptxas sees them unrolled: a nested loop's body counts
/// once per copy it gets (every iteration of a constant trip it unrolls whole, a few of
/// another, one of a loop kept rolled). Each body is sized once, so the walk is linear
/// however deep the loops nest.
fn unrolled_exprs(nodes: &[Node]) -> u64 {
    nodes
        .iter()
        .map(|node| {
            let mut own = 0;
            for_each_expr(node, &mut |expr| own += expr_nodes(expr));
            let nested: u64 = children(node).into_iter().map(unrolled_exprs).sum();
            let copies = match node {
                Node::Loop { from, to, body, .. } => match constant_trip(from, to) {
                    Some(trip) if trip > FULL_UNROLL_TRIP => PARTIAL_UNROLL,
                    Some(trip) if trip >= 2 && rolled(trip, body, nested) => 1,
                    Some(trip) => trip,
                    None if branches_or_atomics(body) => 1,
                    None => PARTIAL_UNROLL,
                },
                _ => 1,
            };
            own + copies * nested
        })
        .sum()
}

fn expr_nodes(expr: &Expr) -> u64 {
    let mut count = 1;
    for_each_child(expr, &mut |child| count += expr_nodes(child));
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted(trip: u32, body: Vec<Node>) -> Node {
        Node::loop_for("i", Expr::u32(0), Expr::u32(trip), body)
    }

    /// `acc = acc + x[i] * y[i]`: 8 expression nodes a trip.
    fn dot() -> Node {
        let at = |b: &str| Expr::load(b, Expr::var("i"));
        Node::assign(
            "acc",
            Expr::add(Expr::var("acc"), Expr::mul(at("x"), at("y"))),
        )
    }

    fn is_rolled(node: &Node) -> bool {
        match node {
            Node::Loop { from, to, body, .. } => keeps_rolled(from, to, body),
            _ => unreachable!("a loop"),
        }
    }

    #[test]
    fn small_unrolled_bodies_and_long_trips_are_left_to_ptxas() {
        assert!(!is_rolled(&counted(16, vec![dot()])));
        assert!(!is_rolled(&counted(128, vec![dot()])));
        assert!(!is_rolled(&counted(4096, vec![dot(); 40])));
    }

    fn run_time(body: Vec<Node>) -> Node {
        Node::loop_for("i", Expr::u32(0), Expr::var("n"), body)
    }

    #[test]
    fn run_time_trips_stay_rolled_where_the_body_branches_or_holds_an_atomic() {
        assert!(!is_rolled(&run_time(vec![dot(); 40])));
        let guarded = Node::if_then(Expr::lt(Expr::var("i"), Expr::u32(7)), vec![dot()]);
        assert!(is_rolled(&run_time(vec![guarded])));
        let atomic = Node::let_bind("old", Expr::atomic_add("h", Expr::var("i"), Expr::u32(1)));
        assert!(is_rolled(&run_time(vec![atomic])));
        assert!(is_rolled(&run_time(vec![counted(4, vec![dot()])])));
    }

    /// A rolled run-time loop is one copy in its parent's unrolled size, a straight-line one
    /// the 4 ptxas makes: 32 trips around ~20 expressions stay under the limit, around
    /// 4 x 16 exceed it.
    #[test]
    fn run_time_loops_count_as_ptxas_copies_them() {
        let guarded = Node::if_then(Expr::lt(Expr::var("i"), Expr::u32(7)), vec![dot(); 2]);
        assert!(!is_rolled(&counted(32, vec![run_time(vec![guarded])])));
        assert!(is_rolled(&counted(32, vec![run_time(vec![dot(); 2])])));
    }

    #[test]
    fn large_unrolled_bodies_and_short_loops_around_loops_stay_rolled() {
        assert!(is_rolled(&counted(117, vec![dot(); 6])));
        assert!(is_rolled(&counted(4, vec![counted(4, vec![dot()])])));
        // 64 copies of a 16-trip inner loop: 64 * 16 * 8 expressions.
        assert!(is_rolled(&counted(64, vec![counted(16, vec![dot()])])));
        assert!(!is_rolled(&counted(64, vec![counted(1, vec![dot()])])));
    }

    /// Each body is sized once: 60 nested loops of 17 trips (none kept rolled by nesting
    /// alone) are decided at once, not in 2^60 walks.
    #[test]
    fn deep_nests_are_sized_in_one_walk() {
        let nest = (0..60).fold(vec![dot()], |body, _| vec![counted(17, body)]);
        assert!(is_rolled(&nest[0]));
    }
}
