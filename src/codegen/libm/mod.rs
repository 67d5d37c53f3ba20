//! Bit-exact PTX ports of the `libm` 0.2.16 single-precision routines that
//! `vyre-reference` uses for its transcendental `UnOp`s.
//!
//! Each routine is emitted once per module as a `.func` taking and returning one `.f32`,
//! reproducing the Rust code operation for operation (same constants, same order, `.rn`
//! rounding, fma only where the original uses fma) so the GPU result has the reference's
//! bits for every input.

use std::collections::BTreeSet;
use vyre_foundation::ir::UnOp;

/// A transcendental routine of the reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Libm {
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Tanh,
    Exp,
    Exp2,
    Log,
    Log2,
}

impl Libm {
    pub(crate) fn for_unop(op: &UnOp) -> Option<Self> {
        Some(match op {
            UnOp::Sin => Self::Sin,
            UnOp::Cos => Self::Cos,
            UnOp::Tan => Self::Tan,
            UnOp::Asin => Self::Asin,
            UnOp::Acos => Self::Acos,
            UnOp::Atan => Self::Atan,
            UnOp::Sinh => Self::Sinh,
            UnOp::Cosh => Self::Cosh,
            UnOp::Tanh => Self::Tanh,
            UnOp::Exp => Self::Exp,
            UnOp::Exp2 => Self::Exp2,
            UnOp::Log => Self::Log,
            UnOp::Log2 => Self::Log2,
            _ => return None,
        })
    }

    /// The `.func` symbol, e.g. `vyre_libm_sinf`.
    pub(crate) fn symbol(self) -> &'static str {
        match self {
            Self::Sin => "vyre_libm_sinf",
            Self::Cos => "vyre_libm_cosf",
            Self::Tan => "vyre_libm_tanf",
            Self::Asin => "vyre_libm_asinf",
            Self::Acos => "vyre_libm_acosf",
            Self::Atan => "vyre_libm_atanf",
            Self::Sinh => "vyre_libm_sinhf",
            Self::Cosh => "vyre_libm_coshf",
            Self::Tanh => "vyre_libm_tanhf",
            Self::Exp => "vyre_libm_expf",
            Self::Exp2 => "vyre_libm_exp2f",
            Self::Log => "vyre_libm_logf",
            Self::Log2 => "vyre_libm_log2f",
        }
    }

    /// Whether a bit-exact port exists. Until one does, the emitter rejects the op.
    pub(crate) fn is_ported(self) -> bool {
        false
    }
}

/// Every `.func` definition (with shared internal helpers emitted once) that the routines
/// in `used` need, ready to be placed before the kernel entry.
pub(crate) fn module_text(used: &BTreeSet<Libm>) -> String {
    let _ = used;
    String::new()
}
