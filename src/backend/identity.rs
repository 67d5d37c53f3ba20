//! A program identity for cache keys that is exact where `Program::fingerprint()` is not:
//! vyre's wire format folds `-0.0` (and negative subnormal) f32 literals into `+0.0`, yet
//! the reference keeps a zero literal's sign (`1 / -0.0` is `-inf`); and it encodes every
//! `Vec` element type alike (a `Vec<u8; 3>` buffer and a `Vec<u16; 4>` one) and every
//! tensor shape alike, though their strides differ. The identity adds the sign of every
//! zero literal, in walk order, and every buffer's element type to the fingerprint. It is
//! memoised per `Program::entry` allocation, together with the last kernel-cache key
//! derived from it, so a warm dispatch does one map lookup here and hashes nothing.

use super::cache::KernelKey;
use crate::codegen::visit::{children, for_each_child, for_each_expr};
use crate::codegen::{check_nesting, CodegenError};
use rustc_hash::FxHashMap;
use std::sync::{Arc, Mutex, Weak};
use vyre_foundation::ir::{BufferDecl, DataType, Expr, Node, Program};

/// Most memoised identities kept; beyond this the memo is cleared (it is only a cache).
const MEMO_LIMIT: usize = 4096;

type Entry = Weak<Vec<Node>>;

/// One memoised program: its identity and the kernel key last derived from it (keys
/// differ only by the effective workgroup; the PTX target is fixed per backend).
struct Memo {
    entry: Entry,
    /// `Program::fingerprint()` when memoised: programs may share an entry allocation yet
    /// differ in buffers or workgroup (`with_rewritten_buffers`, `set_workgroup_size`).
    fingerprint: [u8; 32],
    /// Each buffer's element type, which the fingerprint does not always tell apart.
    elements: Vec<DataType>,
    identity: [u8; 32],
    key: Option<([u32; 3], KernelKey)>,
}

impl Memo {
    /// Whether this record describes `program`: the Weak proves the entry allocation is
    /// the one we walked (not a reuse of its address), and the fingerprint (cached inside
    /// the program) covers everything else.
    fn describes(&self, program: &Program) -> bool {
        self.entry
            .upgrade()
            .is_some_and(|live| Arc::ptr_eq(&live, &program.entry))
            && self.fingerprint == program.fingerprint()
            && (program.buffers().iter().map(|decl| &decl.element)).eq(&self.elements)
    }
}

#[derive(Default)]
pub(crate) struct ProgramIdentities {
    memo: Mutex<FxHashMap<usize, Memo>>,
}

impl ProgramIdentities {
    /// The exact identity of `program`.
    pub(crate) fn of(&self, program: &Program) -> Result<[u8; 32], CodegenError> {
        self.with_memo(program, |memo| memo.identity)
    }

    /// The kernel-cache key of `program` under `workgroup`: memoised, so a warm dispatch
    /// does not hash (`derive` runs only when the workgroup changed or on a memo miss).
    pub(crate) fn kernel_key(
        &self,
        program: &Program,
        workgroup: [u32; 3],
        derive: impl FnOnce(&[u8; 32]) -> KernelKey,
    ) -> Result<KernelKey, CodegenError> {
        self.with_memo(program, |memo| match memo.key {
            Some((memo_workgroup, key)) if memo_workgroup == workgroup => key,
            _ => {
                let key = derive(&memo.identity);
                memo.key = Some((workgroup, key));
                key
            }
        })
    }

    /// `read` on `program`'s memo. A program seen for the first time has its nesting depth
    /// checked before anything walks it recursively (vyre's fingerprint included), so the
    /// walks below cannot overflow the stack.
    fn with_memo<T>(
        &self,
        program: &Program,
        read: impl FnOnce(&mut Memo) -> T,
    ) -> Result<T, CodegenError> {
        let address = Arc::as_ptr(&program.entry) as usize;
        if let Ok(mut memo) = self.memo.lock() {
            if let Some(record) = memo.get_mut(&address).filter(|r| r.describes(program)) {
                return Ok(read(record));
            }
        }
        // A miss: check, then hash outside the lock (the walk is the expensive part).
        check_nesting(program)?;
        let mut record = Memo {
            entry: Arc::downgrade(&program.entry),
            fingerprint: program.fingerprint(),
            elements: program.buffers().iter().map(BufferDecl::element).collect(),
            identity: compute(program),
            key: None,
        };
        let value = read(&mut record);
        if let Ok(mut memo) = self.memo.lock() {
            if memo.len() >= MEMO_LIMIT {
                memo.retain(|_, record| record.entry.strong_count() > 0);
                if memo.len() >= MEMO_LIMIT {
                    memo.clear();
                }
            }
            memo.insert(address, record);
        }
        Ok(value)
    }
}

fn compute(program: &Program) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(&program.fingerprint());
    let mut signs = Vec::new();
    zero_signs(program.entry(), &mut signs);
    hasher.update(&(signs.len() as u64).to_le_bytes());
    hasher.update(&signs);
    for decl in program.buffers() {
        hasher.update(format!("{:?}", decl.element).as_bytes());
        hasher.update(&[0]);
    }
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
        assert_ne!(ids.of(&plus).unwrap(), ids.of(&minus).unwrap());
    }

    #[test]
    fn identity_is_memoised_per_entry_and_stable() {
        let ids = ProgramIdentities::default();
        let p = program(-0.0);
        let clone = p.clone();
        assert_eq!(ids.of(&p).unwrap(), ids.of(&clone).unwrap());
        assert_eq!(ids.of(&p).unwrap(), compute(&p));
    }

    #[test]
    fn programs_sharing_an_entry_but_not_buffers_get_distinct_identities() {
        let ids = ProgramIdentities::default();
        let p = program(1.0);
        let wider = p.with_rewritten_buffers(vec![
            BufferDecl::output("out", 0, DataType::F32).with_count(8)
        ]);
        assert!(Arc::ptr_eq(&p.entry, &wider.entry));
        assert_ne!(ids.of(&p).unwrap(), ids.of(&wider).unwrap());
        assert_eq!(ids.of(&wider).unwrap(), compute(&wider));
        let mut regrouped = p.clone();
        regrouped.set_workgroup_size([32, 1, 1]);
        assert_ne!(ids.of(&p).unwrap(), ids.of(&regrouped).unwrap());
    }

    #[test]
    fn vec_element_types_vyre_encodes_alike_get_distinct_identities() {
        let ids = ProgramIdentities::default();
        let of = |count: u8| {
            let vec = DataType::Vec {
                element: Box::new(DataType::U8),
                count,
            };
            Program::wrapped(
                vec![BufferDecl::read_write("w", 0, vec).with_count(4)],
                [1, 1, 1],
                vec![Node::store(
                    "w",
                    Expr::u32(1),
                    Expr::load("w", Expr::u32(0)),
                )],
            )
        };
        let (three, four) = (of(3), of(4));
        assert_eq!(
            three.fingerprint(),
            four.fingerprint(),
            "vyre folds the count"
        );
        assert_ne!(ids.of(&three).unwrap(), ids.of(&four).unwrap());
        // Sharing the entry too: the memo must not answer for the other.
        let four_on_three = three.with_rewritten_buffers(four.buffers().to_vec());
        assert!(Arc::ptr_eq(&three.entry, &four_on_three.entry));
        assert_eq!(ids.of(&four_on_three).unwrap(), ids.of(&four).unwrap());
        assert_ne!(ids.of(&three).unwrap(), ids.of(&four_on_three).unwrap());
    }

    /// The class of the collision above: no two element types share an identity.
    #[test]
    fn every_element_type_gets_its_own_identity() {
        use vyre_spec::{QuantizationScale, QuantizationZeroPoint, TypeId};
        let vec = |element: DataType, count: u8| DataType::Vec {
            element: Box::new(element),
            count,
        };
        let shaped = |shape: [u32; 2]| DataType::TensorShaped {
            element: Box::new(DataType::U8),
            shape: shape.into_iter().collect(),
        };
        let quantized = |storage: DataType, group_size: u32| DataType::Quantized {
            storage: Box::new(storage),
            scale: QuantizationScale::PerGroup { group_size },
            zero_point: QuantizationZeroPoint::Absent,
        };
        let types = [
            DataType::U8,
            DataType::U16,
            DataType::U32,
            DataType::F32,
            DataType::Bytes,
            DataType::Vec4U32,
            vec(DataType::U8, 3),
            vec(DataType::U8, 4),
            vec(DataType::U16, 2),
            vec(DataType::U32, 2),
            vec(vec(DataType::U8, 2), 2),
            shaped([2, 3]),
            shaped([3, 2]),
            DataType::Array { element_size: 2 },
            DataType::Array { element_size: 3 },
            DataType::Handle(TypeId(1)),
            DataType::Handle(TypeId(2)),
            DataType::DeviceMesh {
                axes: [2u32, 4].into_iter().collect(),
            },
            DataType::DeviceMesh {
                axes: [4u32, 2].into_iter().collect(),
            },
            quantized(DataType::I4, 32),
            quantized(DataType::I4, 64),
            quantized(DataType::U8, 32),
        ];
        let ids = ProgramIdentities::default();
        let identities: Vec<[u8; 32]> = (types.iter())
            .map(|element| {
                let decl = BufferDecl::read_write("w", 0, element.clone()).with_count(4);
                ids.of(&Program::wrapped(vec![decl], [1, 1, 1], vec![]))
                    .unwrap()
            })
            .collect();
        for (i, a) in identities.iter().enumerate() {
            for (j, b) in identities.iter().enumerate().skip(i + 1) {
                assert_ne!(a, b, "{} and {} share an identity", types[i], types[j]);
            }
        }
    }

    #[test]
    fn kernel_keys_are_memoised_per_workgroup() {
        let ids = ProgramIdentities::default();
        let p = program(1.0);
        let target = crate::codegen::PtxTarget::sm90();
        let mut derived = 0;
        let mut key = |workgroup: [u32; 3]| {
            ids.kernel_key(&p, workgroup, |identity| {
                derived += 1;
                KernelKey::new(identity, workgroup, target)
            })
            .unwrap()
        };
        let first = key([64, 1, 1]);
        assert_eq!(key([64, 1, 1]), first);
        let other = key([32, 1, 1]);
        assert_ne!(other, first);
        assert_eq!(key([64, 1, 1]), first);
        assert_eq!(
            derived, 3,
            "derived on the first use and on each workgroup change"
        );
        assert_eq!(first, KernelKey::new(&compute(&p), [64, 1, 1], target));
    }
}
