//! The IR walkers every analysis shares: the expressions a statement owns, the direct
//! sub-expressions of an expression, and the statement lists nested in a statement.

use vyre_foundation::ir::{Expr, Node};

/// Visit the expressions directly owned by `node` (not those of nested statements).
pub(crate) fn for_each_expr<'p>(node: &'p Node, f: &mut impl FnMut(&'p Expr)) {
    match node {
        Node::Let { value, .. } | Node::Assign { value, .. } => f(value),
        Node::Store { index, value, .. } => {
            f(index);
            f(value);
        }
        Node::If { cond, .. } => f(cond),
        Node::Loop { from, to, .. } => {
            f(from);
            f(to);
        }
        Node::Trap { address, .. } => f(address),
        Node::AsyncLoad { offset, size, .. } | Node::AsyncStore { offset, size, .. } => {
            f(offset);
            f(size);
        }
        _ => {}
    }
}

pub(crate) fn for_each_child<'p>(expr: &'p Expr, f: &mut impl FnMut(&'p Expr)) {
    match expr {
        Expr::Load { index, .. } => f(index),
        Expr::BinOp { left, right, .. } => {
            f(left);
            f(right);
        }
        Expr::UnOp { operand, .. } => f(operand),
        Expr::Select {
            cond,
            true_val,
            false_val,
        } => {
            f(cond);
            f(true_val);
            f(false_val);
        }
        Expr::Cast { value, .. } => f(value),
        Expr::Fma { a, b, c } => {
            f(a);
            f(b);
            f(c);
        }
        Expr::Atomic {
            index,
            expected,
            value,
            ..
        } => {
            f(index);
            if let Some(expected) = expected {
                f(expected);
            }
            f(value);
        }
        Expr::SubgroupBallot { cond } => f(cond),
        Expr::SubgroupShuffle { value, lane } => {
            f(value);
            f(lane);
        }
        Expr::SubgroupReduce { value, .. } => f(value),
        Expr::Call { args, .. } => args.iter().for_each(f),
        _ => {}
    }
}

/// Whether every direct sub-expression of `expr` satisfies `test`.
pub(crate) fn all_children<'e>(expr: &'e Expr, mut test: impl FnMut(&'e Expr) -> bool) -> bool {
    let mut all = true;
    for_each_child(expr, &mut |child| all = all && test(child));
    all
}

/// The statement lists nested directly in `node` (branches, loop and scope bodies).
pub(crate) fn children(node: &Node) -> Vec<&[Node]> {
    match node {
        Node::If {
            then, otherwise, ..
        } => vec![then, otherwise],
        Node::Loop { body, .. } | Node::Block(body) => vec![body],
        Node::Region { body, .. } => vec![body],
        _ => Vec::new(),
    }
}

/// Visit every statement of `nodes` and of the statements nested in them, parents first.
pub(crate) fn for_each_node<'p>(nodes: &'p [Node], f: &mut impl FnMut(&'p Node)) {
    for node in nodes {
        f(node);
        for body in children(node) {
            for_each_node(body, f);
        }
    }
}

/// Visit every expression, at any depth, of `nodes` and of the statements nested in them.
pub(crate) fn for_each_expr_in<'p>(nodes: &'p [Node], f: &mut impl FnMut(&'p Expr)) {
    fn tree<'p>(expr: &'p Expr, f: &mut impl FnMut(&'p Expr)) {
        f(expr);
        for_each_child(expr, &mut |child| tree(child, f));
    }
    for_each_node(nodes, &mut |node| {
        for_each_expr(node, &mut |expr| tree(expr, f))
    });
}

/// Whether `test` holds for a statement of `nodes` or of the statements nested in them.
pub(crate) fn any_node(nodes: &[Node], test: &impl Fn(&Node) -> bool) -> bool {
    nodes
        .iter()
        .any(|node| test(node) || children(node).into_iter().any(|body| any_node(body, test)))
}

pub(crate) fn has_barrier(nodes: &[Node]) -> bool {
    any_node(nodes, &|node| matches!(node, Node::Barrier { .. }))
}

pub(crate) fn has_return(nodes: &[Node]) -> bool {
    any_node(nodes, &|node| matches!(node, Node::Return))
}

pub(crate) fn any_expr(expr: &Expr, test: &impl Fn(&Expr) -> bool) -> bool {
    if test(expr) {
        return true;
    }
    let mut found = false;
    for_each_child(expr, &mut |child| found = found || any_expr(child, test));
    found
}

/// Whether an expression `node` itself owns satisfies `test` (anywhere inside it).
pub(crate) fn owns_expr(node: &Node, test: &impl Fn(&Expr) -> bool) -> bool {
    let mut found = false;
    for_each_expr(node, &mut |expr| found = found || any_expr(expr, test));
    found
}

/// Whether any expression owned by `nodes` or by the statements nested in them satisfies
/// `test` (anywhere inside it).
pub(crate) fn any_expr_in(nodes: &[Node], test: &impl Fn(&Expr) -> bool) -> bool {
    any_node(nodes, &|node| owns_expr(node, test))
}

/// Whether `expr` is a literal, a variable, a buffer length or an arithmetic, select, cast
/// or fused multiply-add node: the same in every invocation given the same operands, with
/// no memory access or side effect of its own.
pub(crate) fn is_pure_operation(expr: &Expr) -> bool {
    matches!(
        expr,
        Expr::LitU32(_)
            | Expr::LitI32(_)
            | Expr::LitF32(_)
            | Expr::LitBool(_)
            | Expr::Var(_)
            | Expr::BufLen { .. }
            | Expr::BinOp { .. }
            | Expr::UnOp { .. }
            | Expr::Select { .. }
            | Expr::Cast { .. }
            | Expr::Fma { .. }
    )
}

/// Whether `expr` is built of literals alone (operators, casts and selects over them): a
/// value ptxas knows at compile time.
pub(crate) fn is_constant(expr: &Expr) -> bool {
    match expr {
        Expr::LitU32(_) | Expr::LitI32(_) | Expr::LitF32(_) | Expr::LitBool(_) => true,
        Expr::BinOp { .. }
        | Expr::UnOp { .. }
        | Expr::Cast { .. }
        | Expr::Select { .. }
        | Expr::Fma { .. } => all_children(expr, is_constant),
        _ => false,
    }
}
