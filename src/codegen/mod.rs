//! Program -> PTX. Pure Rust: no CUDA calls, usable with no GPU.
//!
//! [`emit_ptx`] is the whole public surface: given a `Program`, the `DispatchConfig`
//! (its `workgroup_override` decides the block shape) and a [`PtxTarget`], it returns the
//! PTX text and the [`KernelAbi`] the host needs to launch it. Tests, offline (AOT)
//! compilation and outside tools use it directly:
//!
//! ```
//! use vyre_cuda::codegen::{emit_ptx, PtxTarget};
//! use vyre_driver::DispatchConfig;
//! use vyre_foundation::ir::{BufferDecl, DataType, Expr, Node, Program};
//!
//! let program = Program::wrapped(
//!     vec![
//!         BufferDecl::read("a", 0, DataType::U32),
//!         BufferDecl::output("out", 1, DataType::U32).with_count(4),
//!     ],
//!     [64, 1, 1],
//!     vec![Node::store(
//!         "out",
//!         Expr::InvocationId { axis: 0 },
//!         Expr::add(Expr::load("a", Expr::InvocationId { axis: 0 }), Expr::u32(1)),
//!     )],
//! );
//! let kernel = emit_ptx(&program, &DispatchConfig::default(), PtxTarget::sm90()).unwrap();
//! assert!(kernel.ptx.contains(".target sm_90"));
//! assert_eq!(kernel.abi.input_count(), 1);
//! ```
//!
//! The emitter follows `vyre-reference` bit for bit: wrapping integer arithmetic, the
//! reference's division/shift/cast rules, flushed f32 subnormals, canonical NaN stores,
//! `.rn` arithmetic without FMA contraction, zero for out-of-bounds loads and dropped
//! out-of-bounds stores. Constructs it cannot lower exactly are rejected with a
//! [`CodegenError`] naming the construct.

mod abi;
mod async_copy;
pub(crate) mod elementwise;
mod error;
mod fault;
mod grid_sync;
mod kind;
mod libm;
mod lower;
mod ops;
mod prepare;
mod reduction;
mod subgroup;
mod target;
mod uniform;
pub(crate) mod visit;
mod writer;

pub use abi::{
    BindingRole, KernelAbi, KernelBinding, COOPERATIVE_ENTRY, FAULT_AREA_BYTES, KERNEL_ENTRY,
    VECTOR_ENTRY,
};
pub use elementwise::VECTOR_LANES;
pub use error::CodegenError;
pub use fault::DeviceFault;
pub use target::{PtxIsa, PtxTarget, NEWEST_CHECKED_ISA, OLDEST_SM};

use std::fmt::Write as _;
use vyre_driver::DispatchConfig;
use vyre_foundation::ir::Program;

/// Version of the emitter's output format; part of every cache key.
pub const EMITTER_VERSION: u32 = 7;

/// Largest block CUDA launches on any architecture we target.
const MAX_THREADS_PER_BLOCK: u32 = 1024;

/// A kernel ready to load: PTX text plus its launch ABI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmittedKernel {
    /// PTX module text (NUL-free).
    pub ptx: String,
    /// How to launch it.
    pub abi: KernelAbi,
    /// The target it was written for.
    pub target: PtxTarget,
}

/// Lower `program` to a PTX kernel for `target`.
///
/// The effective workgroup size is `config.workgroup_override`, else the program's.
/// The program should already have passed vyre's validator (the backend validates before
/// calling this); anything the emitter cannot lower exactly is an error, never a kernel
/// with different semantics.
pub fn emit_ptx(
    program: &Program,
    config: &DispatchConfig,
    target: PtxTarget,
) -> Result<EmittedKernel, CodegenError> {
    let workgroup_size = config
        .workgroup_override
        .unwrap_or_else(|| program.workgroup_size());
    check_workgroup(workgroup_size)?;
    let program = prepare::prepare(program)?;
    let program = program.as_ref();
    uniform::check(program)?;
    let (mut abi, shared) = abi::layout(program, workgroup_size)?;
    let flattened;
    let segments: Vec<&[vyre_foundation::ir::Node]> =
        if grid_sync::contains_grid_sync(program.entry()) {
            let mut nodes = Vec::new();
            grid_sync::flatten(program.entry(), &mut nodes);
            flattened = nodes;
            grid_sync::split(&flattened)
        } else {
            vec![program.entry()]
        };
    let mut bodies = Vec::with_capacity(segments.len());
    for segment in &segments {
        let lowerer = lower::Lowerer::new(program, &abi, shared.clone(), target.sm());
        abi.shared_bytes = lowerer.shared_bytes();
        bodies.push(lowerer.lower_entry(segment)?);
    }
    let mut cooperative = Vec::new();
    if grid_sync::cooperative_is_exact(&segments) {
        for (index, segment) in segments.iter().enumerate() {
            let lowerer = lower::Lowerer::new(program, &abi, shared.clone(), target.sm())
                .ending_at(grid_sync::segment_end_label(index));
            cooperative.push(lowerer.lower_entry(segment)?);
        }
    }
    abi.cooperative = !cooperative.is_empty();
    abi.segments = bodies.len() as u32;
    // Elementwise programs have no barriers, so never a cooperative form as well.
    let vector = match elementwise::classify(program, workgroup_size) {
        Some(shape) if bodies.len() == 1 => {
            let lowerer = lower::Lowerer::new(program, &abi, shared, target.sm());
            abi.vector_lanes = VECTOR_LANES;
            for binding in &mut abi.bindings {
                binding.accumulated = shape.accumulated.contains(&*binding.name);
            }
            Some(lowerer.lower_vector_entry(&abi, program.entry(), &shape)?)
        }
        _ => None,
    };
    abi.fault_word = abi.cooperative
        || bodies
            .iter()
            .chain(vector.as_ref())
            .any(|body| body.fault_word);
    let ptx = compose(
        program,
        &abi,
        target,
        &bodies,
        &cooperative,
        vector.as_ref(),
    );
    Ok(EmittedKernel { ptx, abi, target })
}

/// Splits a module emitted with a vector entry ([`KernelAbi::vector_lanes`] > 0) into two
/// modules: every other entry, and the vector entry alone (each with the shared header and
/// helper functions). The driver JIT-compiles a whole module at load, so the runtime loads
/// the vector module only when a dispatch is large enough to use it: small and one-off
/// dispatches do not pay for a second entry's compilation. `None` when `ptx` has no vector
/// entry.
#[must_use]
pub fn split_vector_entry(ptx: &str) -> Option<(String, String)> {
    const ENTRY: &str = "\n.visible .entry ";
    let start = ptx.find(&format!("{ENTRY}{VECTOR_ENTRY}("))? + 1;
    let entries = ptx.find(ENTRY)? + 1;
    let end = ptx[start..]
        .find(ENTRY)
        .map_or(ptx.len(), |offset| start + offset + 1);
    let header = &ptx[..entries];
    let vector = &ptx[start..end];
    let others = format!("{}{}", &ptx[..start], &ptx[end..]);
    Some((others, format!("{header}{vector}")))
}

fn check_workgroup(size: [u32; 3]) -> Result<(), CodegenError> {
    if size.contains(&0) {
        return Err(CodegenError::invalid(
            format!("workgroup size {size:?} contains zero"),
            "all workgroup dimensions must be >= 1",
        ));
    }
    let threads = size.iter().try_fold(1u32, |acc, d| acc.checked_mul(*d));
    match threads {
        Some(threads) if threads <= MAX_THREADS_PER_BLOCK => Ok(()),
        _ => Err(CodegenError::invalid(
            format!("workgroup size {size:?} exceeds {MAX_THREADS_PER_BLOCK} invocations"),
            "use at most 1024 invocations per workgroup (set DispatchConfig::workgroup_override)",
        )),
    }
}

fn compose(
    program: &Program,
    abi: &KernelAbi,
    target: PtxTarget,
    bodies: &[lower::LoweredBody],
    cooperative: &[lower::LoweredBody],
    vector: Option<&lower::LoweredBody>,
) -> String {
    let size: usize = bodies
        .iter()
        .chain(cooperative)
        .chain(vector)
        .map(|b| b.body.len() + b.prologue.len())
        .sum();
    let mut out = String::with_capacity(size + 1024);
    let digest = program.fingerprint();
    let _ = writeln!(
        out,
        "//\n// Generated by vyre-cuda {} (emitter v{EMITTER_VERSION}) for program {:02x}{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}\n//",
        env!("CARGO_PKG_VERSION"),
        digest[0], digest[1], digest[2], digest[3], digest[4], digest[5], digest[6], digest[7]
    );
    let _ = writeln!(out, ".version {}", target.isa());
    let _ = writeln!(out, ".target sm_{}", target.sm());
    let _ = writeln!(out, ".address_size 64\n");
    let libm_used: std::collections::BTreeSet<_> = bodies
        .iter()
        .chain(cooperative)
        .chain(vector)
        .flat_map(|b| b.libm_used.iter().copied())
        .collect();
    out.push_str(&libm::module_text(&libm_used));
    let mut params: Vec<String> = Vec::with_capacity(abi.bindings.len() * 2 + 1);
    for index in 0..abi.bindings.len() {
        params.push(format!("\t.param .u64 vyre_p{index}"));
    }
    for index in 0..abi.bindings.len() {
        params.push(format!("\t.param .u32 vyre_n{index}"));
    }
    if abi.fault_word {
        params.push("\t.param .u64 vyre_fault".to_string());
    }
    let vector_params = params
        .iter()
        .map(String::as_str)
        .chain(["\t.param .u32 vyre_inv_base", "\t.param .u32 vyre_inv_end"])
        .collect::<Vec<_>>()
        .join(",\n");
    let params = params.join(",\n");
    let [x, y, z] = abi.workgroup_size;
    let shared = (abi.shared_bytes > 0).then(|| {
        format!(
            "\t.shared .align 16 .b8 vyre_shared[{}];\n",
            abi.shared_bytes
        )
    });
    let entries = bodies
        .iter()
        .enumerate()
        .map(|(index, body)| (abi.entry_name(index as u32), &params, body))
        .chain(vector.map(|body| (VECTOR_ENTRY.to_string(), &vector_params, body)));
    for (name, params, body) in entries {
        let _ = writeln!(out, ".visible .entry {name}(\n{params}\n)");
        let _ = writeln!(out, ".reqntid {x}, {y}, {z}\n{{");
        out.push_str(&body.decls);
        out.push_str(shared.as_deref().unwrap_or_default());
        out.push_str(&body.prologue);
        out.push_str(&body.body);
        out.push_str("}\n\n");
    }
    if !cooperative.is_empty() {
        let _ = writeln!(out, ".visible .entry {COOPERATIVE_ENTRY}(\n{params}\n)");
        let _ = writeln!(out, ".reqntid {x}, {y}, {z}\n{{");
        out.push_str(grid_sync::BARRIER_DECLS);
        out.push_str(shared.as_deref().unwrap_or_default());
        grid_sync::barrier_prologue(&mut out);
        let done = "vyre_grid_done";
        for (index, body) in cooperative.iter().enumerate() {
            // Each segment in its own scope: its registers and labels are its own.
            out.push_str("\t{\n");
            out.push_str(&body.decls);
            out.push_str(&body.prologue);
            out.push_str(&body.body);
            out.push_str("\t}\n");
            let _ = writeln!(out, "{}:", grid_sync::segment_end_label(index));
            if index + 1 < cooperative.len() {
                grid_sync::barrier(&mut out, index, done);
            }
        }
        let _ = writeln!(out, "{done}:\n\tret;\n}}\n");
    }
    out
}
