//! A program identity for cache keys that is exact where `Program::fingerprint()` is not:
//! vyre's wire format folds `-0.0` (and negative subnormal) f32 literals into `+0.0`, yet
//! the reference keeps a zero literal's sign (`1 / -0.0` is `-inf`). The identity adds
//! the sign of every zero literal, in walk order, to the fingerprint. It is memoised per
//! `Program::entry` allocation, so a warm dispatch does one map lookup, not a walk.

use crate::codegen::visit::{children, for_each_child, for_each_expr};
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
        for_each_expr(node, &mut |expr| expr_zero_signs(expr, out));
        for body in children(node) {
            zero_signs(body, out);
        }
    }
}

fn expr_zero_signs(expr: &Expr, out: &mut Vec<u8>) {
    // Zero and subnormal literals canonicalise to a signed zero: record the sign.
    if let Expr::LitF32(value) = expr {
        if value.abs() < f32::MIN_POSITIVE {
            out.push(u8::from(value.is_sign_negative()));
        }
    }
    for_each_child(expr, &mut |child| expr_zero_signs(child, out));
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
