//! Loads whose bounds check one test before their loop covers (loop versioning).
//!
//! A global load in a loop body whose index is `S + c * v` (`v` the loop variable, `c` a
//! literal, `S` a sum of loop-invariant u32 terms, all wrapping u32 arithmetic) reads, for
//! `v` in `[from, to)`, indices at most `S + c * (to - 1)`. When that sum, computed without
//! wrapping, is below the buffer's length, every iteration's load is in bounds and the
//! per-access select of the reference's out-of-bounds zero is dead. The lowering
//! (`stmt::put_loop`) then emits the loop twice, checked and unchecked, and each invocation
//! takes one after that single test; the unchecked copy reads exactly the addresses the
//! checked one would, so it is as safe as it.
//!
//! Only small innermost loops of plain statements qualify: the hot loops of library
//! kernels (a matmul's dot product). A copied body doubles the driver JIT's work on it, and
//! statements with their own machinery (barriers, subgroup operations, atomics, async
//! copies, returns) keep one copy.

use crate::codegen::visit::{for_each_child, for_each_expr_in, for_each_node};
use rustc_hash::{FxHashMap, FxHashSet};
use vyre_foundation::ir::{BinOp, Expr, Node};

/// Expression nodes up to which a loop body is copied.
const MAX_BODY_EXPRS: usize = 96;

/// Expression nodes a body may hold per load it checks before the loop: the copy pays
/// where the per-load check (a compare and a 64-bit select) is a large share of the
/// body's work, as in a dot product (about 8), not in a hash round reading one byte.
const MAX_EXPRS_PER_LOAD: usize = 12;

/// `index = sum(term * multiplier) + coef * v`, wrapping u32.
pub(crate) struct AffineIndex<'p> {
    pub(crate) coef: u32,
    pub(crate) terms: Vec<(&'p Expr, u32)>,
}

/// A load of a loop body whose bounds one test before the loop can cover.
pub(crate) struct HoistedCheck<'p> {
    /// The `Expr::Load` itself (its address identifies it to the lowering).
    pub(crate) load: &'p Expr,
    pub(crate) buffer: &'p str,
    pub(crate) index: AffineIndex<'p>,
}

/// For every qualifying loop of `nodes` (by address), its loads whose check can move
/// before it.
pub(crate) fn hoistable_checks(nodes: &[Node]) -> FxHashMap<*const Node, Vec<HoistedCheck<'_>>> {
    let mut loops = FxHashMap::default();
    for_each_node(nodes, &mut |node| {
        if let Node::Loop { var, body, .. } = node {
            let checks = loop_checks(var.as_str(), body);
            if !checks.is_empty() {
                loops.insert(node as *const Node, checks);
            }
        }
    });
    loops
}

fn loop_checks<'p>(var: &'p str, body: &'p [Node]) -> Vec<HoistedCheck<'p>> {
    let Some(names) = plain_body(body) else {
        return Vec::new();
    };
    let invariant = Invariance { var, names };
    let (mut exprs, mut opaque) = (0usize, false);
    let mut checks = Vec::new();
    for_each_expr_in(body, &mut |expr| {
        exprs += 1;
        match expr {
            Expr::Atomic { .. }
            | Expr::SubgroupBallot { .. }
            | Expr::SubgroupShuffle { .. }
            | Expr::SubgroupReduce { .. }
            | Expr::Call { .. }
            | Expr::Opaque(_) => opaque = true,
            Expr::Load { buffer, index } => {
                if let Some(index) = invariant.affine(index) {
                    checks.push(HoistedCheck {
                        load: expr,
                        buffer: buffer.as_str(),
                        index,
                    });
                }
            }
            _ => {}
        }
    });
    if opaque || exprs > MAX_BODY_EXPRS {
        return Vec::new();
    }
    if exprs > MAX_EXPRS_PER_LOAD * checks.len() {
        checks.clear();
    }
    checks
}

/// The names a body binds or assigns, when it holds only plain statements (no nested
/// loop, barrier, return, trap or async copy).
fn plain_body(body: &[Node]) -> Option<FxHashSet<&str>> {
    let mut names = FxHashSet::default();
    let mut plain = true;
    for_each_node(body, &mut |node| match node {
        Node::Let { name, .. } | Node::Assign { name, .. } => {
            names.insert(name.as_str());
        }
        Node::Store { .. } | Node::If { .. } | Node::Block(_) | Node::Region { .. } => {}
        _ => plain = false,
    });
    plain.then_some(names)
}

struct Invariance<'b> {
    var: &'b str,
    /// Variables bound or assigned in the body: not invariant.
    names: FxHashSet<&'b str>,
}

impl Invariance<'_> {
    /// `expr` as an affine function of the loop variable, where it is one.
    fn affine<'p>(&self, expr: &'p Expr) -> Option<AffineIndex<'p>> {
        match expr {
            Expr::Var(name) if name.as_str() == self.var => Some(AffineIndex {
                coef: 1,
                terms: Vec::new(),
            }),
            _ if self.invariant(expr) => Some(AffineIndex {
                coef: 0,
                terms: vec![(expr, 1)],
            }),
            Expr::BinOp {
                op: BinOp::Add,
                left,
                right,
            } => {
                let (mut left, right) = (self.affine(left)?, self.affine(right)?);
                left.coef = left.coef.checked_add(right.coef)?;
                left.terms.extend(right.terms);
                Some(left)
            }
            Expr::BinOp {
                op: BinOp::Mul,
                left,
                right,
            } => match (&**left, &**right) {
                (Expr::LitU32(c), other) | (other, Expr::LitU32(c)) => {
                    let mut index = self.affine(other)?;
                    // Monotonic in `v` only while the coefficient does not wrap; the
                    // invariant part may wrap, as the program's own arithmetic does.
                    index.coef = index.coef.checked_mul(*c)?;
                    for (_, multiplier) in &mut index.terms {
                        *multiplier = multiplier.wrapping_mul(*c);
                    }
                    Some(index)
                }
                _ => None,
            },
            _ => None,
        }
    }

    /// Whether `expr` is a u32-looking value the body cannot change and whose evaluation
    /// before the loop can neither fault nor touch memory.
    fn invariant(&self, expr: &Expr) -> bool {
        let leaf = match expr {
            Expr::Var(name) => {
                return name.as_str() != self.var && !self.names.contains(name.as_str())
            }
            Expr::LitU32(_)
            | Expr::InvocationId { .. }
            | Expr::LocalId { .. }
            | Expr::WorkgroupId { .. }
            | Expr::BufLen { .. } => true,
            Expr::BinOp {
                op: BinOp::Add | BinOp::Mul | BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor,
                ..
            } => false,
            _ => return false,
        };
        let mut all = true;
        for_each_child(expr, &mut |child| all = all && self.invariant(child));
        leaf || all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vyre_foundation::ir::Expr;

    fn bin(op: BinOp, left: Expr, right: Expr) -> Expr {
        Expr::BinOp {
            op,
            left: Box::new(left),
            right: Box::new(right),
        }
    }

    fn matmul_loop(extra: Vec<Node>) -> Node {
        let a = Expr::load(
            "a",
            bin(
                BinOp::Add,
                bin(BinOp::Mul, Expr::var("row"), Expr::u32(64)),
                Expr::var("k"),
            ),
        );
        let b = Expr::load(
            "b",
            bin(
                BinOp::Add,
                bin(BinOp::Mul, Expr::var("k"), Expr::u32(32)),
                Expr::var("col"),
            ),
        );
        let mut body = vec![Node::assign(
            "acc",
            bin(BinOp::Add, Expr::var("acc"), bin(BinOp::Mul, a, b)),
        )];
        body.extend(extra);
        Node::loop_for("k", Expr::u32(0), Expr::u32(64), body)
    }

    #[test]
    fn a_dot_product_loop_checks_both_loads_once() {
        let nodes = [matmul_loop(Vec::new())];
        let loops = hoistable_checks(&nodes);
        let checks = &loops[&(&nodes[0] as *const Node)];
        let shapes: Vec<(&str, u32, usize)> = checks
            .iter()
            .map(|c| (c.buffer, c.index.coef, c.index.terms.len()))
            .collect();
        assert_eq!(shapes, [("a", 1, 1), ("b", 32, 1)]);
        assert_eq!(checks[0].index.terms[0].1, 1);
    }

    #[test]
    fn loops_with_their_own_machinery_or_changing_terms_keep_their_checks() {
        for extra in [
            vec![Node::barrier()],
            vec![Node::Return],
            vec![Node::assign("row", Expr::u32(1))],
            vec![matmul_loop(Vec::new())],
            vec![Node::let_bind(
                "s",
                Expr::atomic_add("a", Expr::u32(0), Expr::u32(1)),
            )],
        ] {
            let nodes = [matmul_loop(extra)];
            let loops = hoistable_checks(&nodes);
            let outer = loops.get(&(&nodes[0] as *const Node));
            // Assigning `row` keeps `b`'s check hoistable (it does not read `row`).
            let buffers: Vec<&str> = outer
                .map(|checks| checks.iter().map(|c| c.buffer).collect())
                .unwrap_or_default();
            assert!(buffers.is_empty() || buffers == ["b"], "{buffers:?}");
        }
    }

    #[test]
    fn a_wrapping_coefficient_or_a_load_in_the_index_is_not_affine() {
        let var = Invariance {
            var: "k",
            names: FxHashSet::default(),
        };
        let wrapping = bin(
            BinOp::Mul,
            bin(BinOp::Mul, Expr::var("k"), Expr::u32(1 << 16)),
            Expr::u32(1 << 16),
        );
        assert!(var.affine(&wrapping).is_none());
        let loaded = bin(BinOp::Add, Expr::var("k"), Expr::load("c", Expr::u32(0)));
        assert!(var.affine(&loaded).is_none());
        let divided = bin(
            BinOp::Add,
            Expr::var("k"),
            bin(BinOp::Div, Expr::var("n"), Expr::u32(2)),
        );
        assert!(var.affine(&divided).is_none());
        let wrapping_term = bin(BinOp::Mul, Expr::var("n"), Expr::u32(u32::MAX));
        let index = var.affine(&wrapping_term).unwrap();
        assert_eq!((index.coef, index.terms[0].1), (0, 1));
    }
}
