//! Bit-exact PTX ports of the `libm` 0.2.16 single-precision routines that
//! `vyre-reference` uses for its transcendental `UnOp`s.
//!
//! Each routine is built as a function taking and returning one `.f32` and inlined where
//! a kernel calls it (see [`inline_call`]), reproducing the Rust code operation for
//! operation (same constants, same order, `.rn` rounding, fma only where the original uses
//! fma) so the GPU result has the reference's bits for every input.

// The constants are written exactly as in the libm sources (which carry more digits than
// an f32 needs) so they can be compared with them line by line; so is their `x - x` (NaN for
// an infinite or NaN x, else +0).
#![allow(clippy::excessive_precision, clippy::approx_constant, clippy::eq_op)]

mod division;
mod exp_log;
mod hyperbolic;
#[cfg(test)]
mod interp;
mod inverse_trig;
mod ptx;
mod rem_pio2;
mod scalbn;
#[cfg(test)]
mod tests;
mod trig;

use ptx::{Func, EXACT_DIVISION};
use std::cell::OnceCell;
use std::collections::BTreeSet;
use std::sync::OnceLock;
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

/// Each routine with the `UnOp` it computes and its symbol (the name of its code, which
/// payloads record and inlined blocks are labelled with). Every one is ported:
/// `tests/gpu_libm_sweep.rs` found no differing input on a GPU (2^24 inputs over every
/// exponent and sign plus the special values), nor on all 2^32 inputs (H200,
/// `VYRE_LIBM_SWEEP_EXHAUSTIVE=1`).
const ROUTINES: [(Libm, UnOp, &str); 13] = [
    (Libm::Sin, UnOp::Sin, "vyre_libm_sinf"),
    (Libm::Cos, UnOp::Cos, "vyre_libm_cosf"),
    (Libm::Tan, UnOp::Tan, "vyre_libm_tanf"),
    (Libm::Asin, UnOp::Asin, "vyre_libm_asinf"),
    (Libm::Acos, UnOp::Acos, "vyre_libm_acosf"),
    (Libm::Atan, UnOp::Atan, "vyre_libm_atanf"),
    (Libm::Sinh, UnOp::Sinh, "vyre_libm_sinhf"),
    (Libm::Cosh, UnOp::Cosh, "vyre_libm_coshf"),
    (Libm::Tanh, UnOp::Tanh, "vyre_libm_tanhf"),
    (Libm::Exp, UnOp::Exp, "vyre_libm_expf"),
    (Libm::Exp2, UnOp::Exp2, "vyre_libm_exp2f"),
    (Libm::Log, UnOp::Log, "vyre_libm_logf"),
    (Libm::Log2, UnOp::Log2, "vyre_libm_log2f"),
];

impl Libm {
    pub(crate) fn for_unop(op: &UnOp) -> Option<Self> {
        ROUTINES
            .iter()
            .find(|(_, u, _)| u == op)
            .map(|(f, _, _)| *f)
    }

    pub(crate) fn symbol(self) -> &'static str {
        let routine = ROUTINES.iter().find(|(f, _, _)| *f == self);
        routine.expect("every routine has a row").2
    }

    /// The routine named `symbol`.
    pub(crate) fn from_symbol(symbol: &str) -> Option<Self> {
        ROUTINES
            .iter()
            .find(|(_, _, s)| *s == symbol)
            .map(|(f, _, _)| *f)
    }

    #[cfg(test)]
    pub(crate) fn all() -> [Libm; 13] {
        ROUTINES.map(|(f, _, _)| f)
    }
}

/// The routines in `used` and the helpers they call, each once, callees before callers.
fn functions(used: &BTreeSet<Libm>) -> Vec<Func> {
    let any = |set: &[Libm]| set.iter().any(|f| used.contains(f));
    // The shared helpers are built only when a routine needs them: most kernels use no
    // libm at all, and this runs on every emit.
    let (rem, expm1, exp) = (OnceCell::new(), OnceCell::new(), OnceCell::new());
    let rem = || rem.get_or_init(rem_pio2::rem_pio2f);
    let expm1 = || expm1.get_or_init(hyperbolic::expm1f);
    let exp = || exp.get_or_init(exp_log::expf);
    let mut out = Vec::new();
    if any(&[Libm::Sin, Libm::Cos, Libm::Tan]) {
        out.push(rem().clone());
    }
    if any(&[Libm::Sinh, Libm::Cosh, Libm::Tanh]) {
        out.push(expm1().clone());
    }
    if any(&[Libm::Exp, Libm::Sinh, Libm::Cosh]) {
        out.push(exp().clone());
    }
    for f in used {
        out.push(match f {
            Libm::Sin => trig::sinf(rem()),
            Libm::Cos => trig::cosf(rem()),
            Libm::Tan => trig::tanf(rem()),
            Libm::Asin => inverse_trig::asinf(),
            Libm::Acos => inverse_trig::acosf(),
            Libm::Atan => inverse_trig::atanf(),
            Libm::Sinh => hyperbolic::sinhf(expm1(), exp()),
            Libm::Cosh => hyperbolic::coshf(expm1(), exp()),
            Libm::Tanh => hyperbolic::tanhf(expm1()),
            // emitted above (coshf and sinhf call it too)
            Libm::Exp => continue,
            Libm::Exp2 => exp_log::exp2f(),
            Libm::Log => exp_log::logf(),
            Libm::Log2 => exp_log::log2f(),
        });
    }
    // The ports' divisions not known to be in range (sinhf's and coshf's) call the exact
    // division: a callee, so it goes first.
    if out.iter().any(|f| f.calls(EXACT_DIVISION)) {
        out.insert(0, exact_division().clone());
    }
    out
}

/// The exact f32 division routine, built once: every f32 division site of a kernel
/// inlines it, and most kernels use no other libm routine.
fn exact_division() -> &'static Func {
    static DIVISION: OnceLock<Func> = OnceLock::new();
    DIVISION.get_or_init(division::div_rn_f32)
}

/// The `.const` tables the routines in `used` read, each once, ready to be placed before
/// the kernel entries (the routines themselves are inlined where they are called, see
/// [`inline_call`]).
pub(crate) fn tables_text(used: &BTreeSet<Libm>) -> String {
    let funcs = functions(used);
    let mut out = String::new();
    let mut tables: Vec<&str> = Vec::new();
    for table in funcs.iter().flat_map(Func::tables) {
        if !tables.contains(&table.name) {
            tables.push(table.name);
            out.push_str(&ptx::table_ptx(table));
            out.push('\n');
        }
    }
    out
}

/// `dest = f(arg)` as a PTX block inlined at the call site, the routine's helpers inlined
/// into it (`tags` numbers the instances in the kernel).
///
/// Not a `call` of a `.func`: ptxas 12.9 and 13.0 at `-O1` and above (and the 580 driver's
/// JIT) give each `.func` a caller-specific copy that may write a uniform register the
/// caller keeps live across the call. The fuzzer met it (seed 0x1e73b106ca1fcb02):
/// `log2f(0)` set `UR4` to `1.0f`, where the kernel kept its zero page's address across
/// a loop, so a later out-of-bounds load read `0x..3f800000` and faulted.
pub(crate) fn inline_call(f: Libm, arg: &str, dest: &str, tags: &mut u32) -> String {
    let funcs = functions(&BTreeSet::from([f]));
    ptx::find(&funcs, f.symbol()).inline(&[arg.to_string()], &[dest.to_string()], &funcs, tags)
}

/// `dest = a / b` on f32, correctly rounded like `div.rn.f32` (subnormals kept), as a
/// block inlined like [`inline_call`]'s: ptxas compiles `div.rn.f32` into a slow-path
/// subroutine per kernel, which costs the JIT far more than this (see [`division`]).
pub(crate) fn inline_division(a: &str, b: &str, dest: &str, tags: &mut u32) -> String {
    let division = exact_division();
    let args = [a.to_string(), b.to_string()];
    division.inline(
        &args,
        &[dest.to_string()],
        std::slice::from_ref(division),
        tags,
    )
}
