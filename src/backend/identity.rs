//! A program identity for cache keys that is exact where `Program::fingerprint()` is not:
//! vyre's wire format folds `-0.0` (and negative subnormal) f32 literals into `+0.0`, yet
//! the reference keeps a zero literal's sign (`1 / -0.0` is `-inf`). The identity adds
//! the sign of every zero literal, in walk order, to the fingerprint. It is memoised per
//! `Program::entry` allocation, so a warm dispatch does one map lookup, not a walk.

use rustc_hash::FxHashMap;
use std::sync::{Arc, Mutex, Weak};
use vyre_foundation::ir::{Expr, Node, Program};

/// Most memoised identities kept; beyond this the memo is cleared (it is only a cache).
const MEMO_LIMIT: usize = 4096;

type Entry = Weak<Vec<Node>>;

#[derive(Default)]
pub(crate) struct ProgramIdentities {
    memo: Mutex<FxHashMap<usize, (Entry, [u8; 32])>>,
}

impl ProgramIdentities {
    /// The exact identity of `program`.
    pub(crate) fn of(&self, program: &Program) -> [u8; 32] {
        let address = Arc::as_ptr(&program.entry) as usize;
        if let Ok(memo) = self.memo.lock() {
            if let Some((entry, identity)) = memo.get(&address) {
                // The Weak proves the allocation is the one we hashed, not a reuse.
                if entry
                    .upgrade()
                    .is_some_and(|live| Arc::ptr_eq(&live, &program.entry))
                {
                    return *identity;
                }
            }
        }
        let identity = compute(program);
        if let Ok(mut memo) = self.memo.lock() {
            if memo.len() >= MEMO_LIMIT {
                memo.retain(|_, (entry, _)| entry.strong_count() > 0);
                if memo.len() >= MEMO_LIMIT {
                    memo.clear();
                }
            }
            memo.insert(address, (Arc::downgrade(&program.entry), identity));
        }
        identity
    }
}

fn compute(program: &Program) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(&program.fingerprint());
    let mut signs = Vec::new();
    zero_signs(program.entry(), &mut signs);
    hasher.update(&(signs.len() as u64).to_le_bytes());
    hasher.update(&signs);
    *hasher.finalize().as_bytes()
}

fn zero_signs(nodes: &[Node], out: &mut Vec<u8>) {
    for node in nodes {
        match node {
            Node::Let { value, .. } | Node::Assign { value, .. } => expr_zero_signs(value, out),
            Node::Store { index, value, .. } => {
                expr_zero_signs(index, out);
                expr_zero_signs(value, out);
            }
            Node::If {
                cond,
                then,
                otherwise,
            } => {
                expr_zero_signs(cond, out);
                zero_signs(then, out);
                zero_signs(otherwise, out);
            }
            Node::Loop { from, to, body, .. } => {
                expr_zero_signs(from, out);
                expr_zero_signs(to, out);
                zero_signs(body, out);
            }
            Node::Block(body) => zero_signs(body, out),
            Node::Region { body, .. } => zero_signs(body, out),
            Node::AsyncLoad { offset, size, .. } | Node::AsyncStore { offset, size, .. } => {
                expr_zero_signs(offset, out);
                expr_zero_signs(size, out);
            }
            Node::Trap { address, .. } => expr_zero_signs(address, out),
            _ => {}
        }
    }
}

fn expr_zero_signs(expr: &Expr, out: &mut Vec<u8>) {
    let mut visit = |e: &Expr| expr_zero_signs(e, out);
    match expr {
        // Zero and subnormal literals canonicalise to a signed zero: record the sign.
        Expr::LitF32(value) if value.abs() < f32::MIN_POSITIVE => {
            out.push(u8::from(value.is_sign_negative()));
        }
        Expr::Load { index, .. } => visit(index),
        Expr::BinOp { left, right, .. } => {
            visit(left);
            visit(right);
        }
        Expr::UnOp { operand, .. } => visit(operand),
        Expr::Select {
            cond,
            true_val,
            false_val,
        } => {
            visit(cond);
            visit(true_val);
            visit(false_val);
        }
        Expr::Cast { value, .. } => visit(value),
        Expr::Fma { a, b, c } => {
            visit(a);
            visit(b);
            visit(c);
        }
        Expr::Atomic {
            index,
            expected,
            value,
            ..
        } => {
            visit(index);
            if let Some(expected) = expected {
                visit(expected);
            }
            visit(value);
        }
        Expr::SubgroupBallot { cond } => visit(cond),
        Expr::SubgroupShuffle { value, lane } => {
            visit(value);
            visit(lane);
        }
        Expr::SubgroupReduce { value, .. } => visit(value),
        Expr::Call { args, .. } => args.iter().for_each(visit),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vyre_foundation::ir::{BufferDecl, DataType};

    fn program(zero: f32) -> Program {
        Program::wrapped(
            vec![BufferDecl::output("out", 0, DataType::F32).with_count(1)],
            [1, 1, 1],
            vec![Node::store("out", Expr::u32(0), Expr::f32(zero))],
        )
    }

    #[test]
    fn signed_zero_literals_get_distinct_identities() {
        let ids = ProgramIdentities::default();
        let (plus, minus) = (program(0.0), program(-0.0));
        assert_eq!(
            plus.fingerprint(),
            minus.fingerprint(),
            "vyre folds the sign"
        );
        assert_ne!(ids.of(&plus), ids.of(&minus));
    }

    #[test]
    fn identity_is_memoised_per_entry_and_stable() {
        let ids = ProgramIdentities::default();
        let p = program(-0.0);
        let clone = p.clone();
        assert_eq!(ids.of(&p), ids.of(&clone));
        assert_eq!(ids.of(&p), compute(&p));
    }
}
