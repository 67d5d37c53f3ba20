//! Program -> PTX. Pure Rust: no CUDA calls, usable with no GPU.
//!
//! [`emit_ptx`] is the whole public surface: given a `Program`, an optional workgroup
//! size overriding the program's (the block shape) and a [`PtxTarget`], it returns the
//! PTX text and the [`KernelAbi`] the host needs to launch it. Tests, offline (AOT)
//! compilation and outside tools use it directly:
//!
//! ```
//! use vyre_cuda::codegen::{emit_ptx, PtxTarget};
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
//! let kernel = emit_ptx(&program, None, PtxTarget::sm90()).unwrap();
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
mod analysis;
mod clock;
mod collective;
mod error;
mod fault;
mod kind;
pub(crate) use kind::{buf_len, count_param, declared_bytes};
mod libm;
mod lower;
mod module;
mod prepare;
mod shared_module;
mod target;
pub(crate) mod visit;
mod writer;

pub use abi::{
    clock_span_ns, BindingRole, KernelAbi, KernelBinding, KernelParam, PeerSync, CLOCK_END_AT,
    CLOCK_START_AT, COOPERATIVE_ENTRY, FAULT_AREA_BYTES, KERNEL_ENTRY, VECTOR_ENTRY, VECTOR_LANES,
};
pub use analysis::nesting::{check_nesting, MAX_EXPRESSION_DEPTH, MAX_STATEMENT_DEPTH};
pub use collective::{
    fold_operator, fold_program, fold_program_around, fold_program_around_in_place,
    has_collectives, peer_fold_program, peer_fold_program_local, ranked_program, split_collectives,
    CollectiveKind, CollectiveStep, RankStep, FOLD_WORKGROUP,
};
pub use error::CodegenError;
pub use fault::DeviceFault;
pub use shared_module::{compose_module, AbiFlags, KernelEntries};
pub use target::{PtxIsa, PtxTarget, NEWEST_CHECKED_ISA, OLDEST_SM};

use std::borrow::Cow;
use vyre_foundation::ir::{Node, Program};

/// Version of the emitter's output format; part of every cache key. (52: a workgroup
/// tree reduction's levels of stride over 16 as straight-line code; 51: its levels
/// `s <= 16` run as shuffles in warp 0 with one barrier (`analysis::tree_reduction`);
/// 50: f32 division,
/// `Reciprocal` and `InverseSqrt` (and the libm ports' divisions not known to be in range)
/// through v44's inlined exact division again (ptxas's fast path checked by three
/// comparisons, exact f64 steps elsewhere), and a power-of-two literal divisor a multiply;
/// 49: the libm ports' divisions whose operands are in range take ptxas's fast path alone
/// (`div_in_range`), their special-case divisions are constants; 48: `tanhf` divides once
/// (the three ranges' numerators selected) and takes `1 + 0/x` as a select; 47: the
/// dispatch route's cooperative entry is a module of its own
/// (`EmittedKernel::cooperative_ptx`), so a kernel with grid-wide barriers compiles only
/// the form its launches use; 46: a single-entry kernel reads buffers at literal indices
/// without bounds checks, the host launching its checked variant where a buffer is shorter
/// (`KernelBinding::literal_extent`); 45: v41's division (`div.rn.f32`) again, 42-44
/// reverted (see CHANGELOG); under other lanes' variable types an fma takes a u32's bits;
/// 44: the inlined division's f32 steps checked by three comparisons after them; 43:
/// ptxas's f32 fast path where the exponents allow it; 42: f32 division through an inlined
/// exact f64 division; 41: loops of a
/// run-time trip whose body branches or holds an atomic carry `.pragma "nounroll"`;
/// 40: a shuffle's f64 lane value at an f32 or half lane is held as f64; 39: loops of a
/// short constant trip whose unrolled body would be large, or that hold other loops, carry
/// `.pragma "nounroll"` (`analysis::unroll`); 38: a subgroup
/// operand over a variable lanes hold with different types takes each lane's own
/// (`lower::typed_lanes`); 37: a small `If`
/// without `else` in a loop whose body loads runs as straight-line code, its faults,
/// stores and assignments guarded (`lower::speculate`), so ptxas unrolls the loop; 36: a step machine
/// whose workgroup takes its rounds together spends one round on the reference's root
/// frame after a lane's last statement, so its branch histories count in that round's
/// check; 35: every branch
/// predicate anchoring subgroup results goes through the opaque zero first, not only literal
/// `If` conditions (ptxas folds more: `buflen` of a workgroup buffer); 34: the truthiness of a
/// raw value wider than four bytes, and a literal branch condition anchoring subgroup results, go
/// through the opaque zero (ptxas miscompiled a constant branch anchoring a ballot for
/// sm_90), and subgroup operations nested in an operand with two atomics on one buffer
/// lower; 33: bytes views
/// bound by `Let`/`Assign` and read after their buffer may change are copied into
/// device-heap blocks, and a parallel segment with a barrier in a data-dependent branch
/// runs as a step machine; 32: async payload
/// snapshots without a static size of at most 4096 bytes in device-heap blocks; 31: step machines
/// with a barrier in a data-dependent branch take their rounds workgroup-wide, and a
/// barrier-holding branch's body counts as uniform control flow; 30: the first branch
/// after subgroup operations steers by their results; 29: the zero of an
/// unsigned tautology (`0 > y`, `y >= 0`; a literal or a variable bound to one) through the
/// opaque zero; 28: integer `Negate` takes its operand through the opaque zero; 27: `If`s
/// on literal conditions steer by an opaque predicate; 26: bounds checks of loop loads
/// hoisted before the loop, `analysis::loop_bounds`; 25: no cooperative
/// entry where a lane that faults could be awaited there; 24: workgroup barriers of
/// entries whose leaving lanes exit take the `.aligned` form; 23: repeated pure
/// sub-expressions of a statement computed once; 22 was an unmerged experiment.)
pub const EMITTER_VERSION: u32 = 52;

/// Largest block CUDA launches on any architecture we target.
const MAX_THREADS_PER_BLOCK: u32 = 1024;

/// A kernel ready to load: its PTX module texts plus its launch ABI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmittedKernel {
    /// PTX module text (NUL-free) of the segment entries and, unless
    /// [`Self::cooperative_ptx`] holds it, the cooperative entry.
    pub ptx: String,
    /// The [`VECTOR_ENTRY`] alone, as a module of its own (NUL-free), exactly when
    /// [`KernelAbi::vector_lanes`] > 0. The driver JIT-compiles a whole module at load, so
    /// the runtime loads it only when a dispatch is large enough to use it: small and
    /// one-off dispatches do not pay for a second entry's compilation.
    pub vector_ptx: Option<String>,
    /// The entries of `ptx` with every load bounds-checked, as a module of its own, exactly
    /// when a binding has a [`KernelBinding::literal_extent`]: the host launches it instead
    /// where a bound buffer is shorter than that (rare: a buffer that does not hold the
    /// elements the program reads at fixed indices), compiling it on first need.
    pub checked_ptx: Option<String>,
    /// The cooperative entry alone, as a module of its own (NUL-free), when the dispatch
    /// route ([`emit_prepared`]) emits a kernel with grid-wide barriers: a launch whose grid
    /// fits resident runs it and never needs the segment entries of `ptx`, a larger one runs
    /// those and never needs it, so the runtime compiles each on first need. Kernels made to
    /// share a module ([`emit_named`], [`emit_timed`]) keep it in `ptx`.
    pub cooperative_ptx: Option<String>,
    /// How to launch it.
    pub abi: KernelAbi,
    /// The target it was written for.
    pub target: PtxTarget,
    /// Whether its entries stamp the device clock into the fault area ([`emit_timed`]).
    pub timed: bool,
    /// Whether its entries record faults or keep a grid barrier in the fault area: what
    /// [`KernelAbi::fault_word`] says of a kernel that is not timed. A timed kernel without
    /// either writes its area only to stamp the clock, and skips the stamps when launched
    /// with a null area.
    pub reports_faults: bool,
    /// How many of its segments run as a step machine: the reference's rounds taken warp
    /// by warp, for subgroup operations whose lanes are at different steps (exact; see
    /// `docs/SUBGROUP_LOCKSTEP.md`).
    pub step_machine_segments: u32,
    /// Where the entries start in `ptx` (after the header).
    pub(crate) entries_at: usize,
    /// The libm routines the entries call (inlined; their `.const` tables are in the header).
    pub(crate) libm: std::collections::BTreeSet<libm::Libm>,
}

impl EmittedKernel {
    /// Every module text of the kernel: `ptx`, then the vector, checked and cooperative
    /// modules it has.
    pub fn modules(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.ptx.as_str())
            .chain(self.vector_ptx.as_deref())
            .chain(self.checked_ptx.as_deref())
            .chain(self.cooperative_ptx.as_deref())
    }

    /// The kernel's entries without the module header, to share a module with others.
    #[must_use]
    pub fn entries(&self) -> KernelEntries {
        KernelEntries::new(
            &self.abi,
            self.timed,
            self.reports_faults,
            self.ptx[self.entries_at..].to_string(),
            self.libm.clone(),
            self.vector_ptx.clone(),
        )
    }
}

/// Lower `program` to a PTX kernel for `target`: [`reference_program`], then
/// [`emit_prepared`].
///
/// The program should already have passed vyre's validator (the backend validates the
/// [`reference_program`] before emitting); anything the emitter cannot lower exactly is an
/// error, never a kernel with different semantics.
pub fn emit_ptx(
    program: &Program,
    workgroup_override: Option<[u32; 3]>,
    target: PtxTarget,
) -> Result<EmittedKernel, CodegenError> {
    emit_prepared(&*reference_program(program)?, workgroup_override, target)
}

/// The program the reference interprets (`vyre-reference`'s normalisation, collectives
/// lowered for one device, composite calls inlined), which the reference also validates.
/// A program nested deeper than [`MAX_STATEMENT_DEPTH`] or [`MAX_EXPRESSION_DEPTH`] is
/// rejected first ([`check_nesting`]), so no walk can overflow the stack.
pub fn reference_program(program: &Program) -> Result<Cow<'_, Program>, CodegenError> {
    check_nesting(program)?;
    let prepared = prepare::prepare(program)?;
    if let Cow::Owned(inlined) = &prepared {
        // Inlining calls may nest the program deeper than it was.
        check_nesting(inlined)?;
    }
    Ok(prepared)
}

/// The launch ABI `program`'s buffers give under `workgroup_size` (bindings in declaration
/// order, shared memory), without lowering its body: what a host needs to plan buffers
/// and the grid for a program it runs in pieces (a program split at collectives).
pub fn buffer_abi(program: &Program, workgroup_size: [u32; 3]) -> Result<KernelAbi, CodegenError> {
    abi::layout(program, workgroup_size).map(|(abi, _)| abi)
}

/// Lower a [`reference_program`] to a PTX kernel for `target`; the effective workgroup
/// size is `workgroup_override`, else the program's. A single-entry kernel may read
/// buffers at literal indices unchecked ([`KernelBinding::literal_extent`]): launch
/// [`EmittedKernel::checked_ptx`] instead where a bound buffer is shorter.
pub fn emit_prepared(
    program: &Program,
    workgroup_override: Option<[u32; 3]>,
    target: PtxTarget,
) -> Result<EmittedKernel, CodegenError> {
    let route = Route::Dispatch;
    emit_entries(program, workgroup_override, target, KERNEL_ENTRY, route)
}

/// Who launches an emitted kernel, which decides what its entries may assume.
#[derive(Clone, Copy)]
enum Route {
    /// The backend's own dispatch ([`emit_prepared`]): it launches the checked variant
    /// where a buffer is shorter than a literal extent, so loads at literal indices may
    /// skip their checks.
    Dispatch,
    /// A kernel named to share a module with others ([`emit_named`]): every load checked.
    Shared,
    /// An artifact's kernel, stamping the clock ([`emit_timed`]): every load checked.
    Timed,
    /// A fold meeting the other ranks itself ([`emit_peer_synced`]).
    PeerSynced(PeerSync),
}

/// [`emit_prepared`] with entries named `entry`, `entry_1`, ..., `entry_coop`, so that
/// several kernels can share one module ([`compose_module`]); every load is checked (no
/// [`KernelBinding::literal_extent`]: a shared module has no checked variant).
pub fn emit_named(
    program: &Program,
    workgroup_override: Option<[u32; 3]>,
    target: PtxTarget,
    entry: &str,
) -> Result<EmittedKernel, CodegenError> {
    emit_entries(program, workgroup_override, target, entry, Route::Shared)
}

/// [`emit_named`] for a kernel that times itself (the artifact route's kernels): it always
/// takes a fault area, and each block of every entry stamps `%globaltimer` into it when it
/// starts and when its last invocation ends, folded with the other blocks' (and other
/// launches' sharing the area) into the earliest start and the latest end. The zeroed area
/// starts the stamps; [`clock_span_ns`] reads the device time back from it, with no CUDA
/// event recorded around the launches. A null area skips the stamps: a kernel that does not
/// [`EmittedKernel::reports_faults`] may then be launched without any area.
pub fn emit_timed(
    program: &Program,
    workgroup_override: Option<[u32; 3]>,
    target: PtxTarget,
    entry: &str,
) -> Result<EmittedKernel, CodegenError> {
    emit_entries(program, workgroup_override, target, entry, Route::Timed)
}

/// [`emit_prepared`] of a collective's fold kernel whose vector entry meets the other
/// ranks itself before and after folding ([`PeerSync`]; the host launches that entry
/// only). The program must be elementwise and unable to fault (a fold of floats or bits):
/// every thread of every block must reach the final meeting.
pub fn emit_peer_synced(
    program: &Program,
    target: PtxTarget,
    sync: PeerSync,
) -> Result<EmittedKernel, CodegenError> {
    let emitted = emit_entries(program, None, target, KERNEL_ENTRY, Route::PeerSynced(sync))?;
    if emitted.vector_ptx.is_none() || emitted.reports_faults || sync.rank >= sync.world {
        return Err(CodegenError::invalid(
            "a peer-synced fold must be elementwise, fault-free and of a rank in its world",
            "report this as a vyre-cuda bug with the collective",
        ));
    }
    Ok(emitted)
}

fn emit_entries(
    program: &Program,
    workgroup_override: Option<[u32; 3]>,
    target: PtxTarget,
    entry: &str,
    route: Route,
) -> Result<EmittedKernel, CodegenError> {
    let timed = matches!(route, Route::Timed);
    let peer = match route {
        Route::PeerSynced(sync) => Some(sync),
        _ => None,
    };
    // PTX compilers mis-handle an entry named like one of its own parameters (ptxas 13.0
    // corrupts its heap), so a name that could be one is refused before any work.
    if entry.starts_with("vyre_p")
        || entry.starts_with("vyre_n") && entry[6..].chars().all(|c| c.is_ascii_digit())
        || entry == "vyre_fault"
    {
        return Err(CodegenError::invalid(
            format!("entry name `{entry}` could be a kernel parameter's name"),
            "name entries outside the vyre_p<N>/vyre_n<N>/vyre_fault parameter names",
        ));
    }
    let workgroup_size = workgroup_override.unwrap_or_else(|| program.workgroup_size());
    check_workgroup(workgroup_size)?;
    let facts = analysis::ProgramFacts::analyse(program, workgroup_size);
    analysis::uniform::check(program, &facts.uniformity)?;
    let (mut abi, shared) = abi::layout(program, workgroup_size)?;
    abi.entry = entry.to_string();
    abi.peer_sync = peer;
    let segments = facts
        .segments()
        .into_iter()
        .map(|nodes| segment(program, &facts, nodes, workgroup_size))
        .collect::<Result<Vec<_>, _>>()?;
    // The dispatch route's single entries (no grid barrier): their literal-index loads may
    // trust the host (`KernelBinding::literal_extent`), which has the checked variant below.
    let trusting = matches!(route, Route::Dispatch) && segments.len() == 1;
    let lowerer =
        || lower::Lowerer::new(program, &facts, &abi, &shared, target.sm()).stamping_clock(timed);
    let lower_all = |trust: bool| {
        segments
            .iter()
            .map(|segment| {
                lower::lower_segment(|| lowerer().trusting_literal_extents(trust), segment)
            })
            .collect::<Result<Vec<_>, _>>()
    };
    let bodies = lower_all(trusting)?;
    let trusted = bodies.iter().any(|body| !body.literal_extents.is_empty());
    let checked = if trusted {
        Some(lower_all(false)?)
    } else {
        None
    };
    let cooperative = lower_cooperative(&segments, lowerer)?;
    let vector = match &facts.elementwise {
        Some(shape) => Some(lowerer().lower_vector_entry(&abi, program.entry(), shape)?),
        None => None,
    };
    abi.cooperative = !cooperative.is_empty();
    abi.segments = bodies.len() as u32;
    if let Some(shape) = &facts.elementwise {
        abi.vector_lanes = VECTOR_LANES;
        for binding in &mut abi.bindings {
            binding.accumulated = shape.accumulated.contains(&*binding.name);
            binding.broadcast = shape.broadcast.contains(&*binding.name);
        }
    }
    let reports_faults = abi.cooperative
        || bodies
            .iter()
            .chain(vector.as_ref())
            .any(|body| body.fault_word);
    abi.fault_word = timed || reports_faults;
    let bodies = module::Bodies {
        segments: &bodies,
        cooperative: &cooperative,
        vector: vector.as_ref(),
        clock: timed,
        cooperative_alone: matches!(route, Route::Dispatch),
    };
    let composed = module::compose(program, &abi, target, &bodies);
    for body in bodies.segments {
        record_literal_extents(&mut abi, &body.literal_extents);
    }
    let checked_ptx = checked.map(|checked| {
        let bodies = module::Bodies {
            segments: &checked,
            cooperative: &[],
            vector: None,
            clock: timed,
            cooperative_alone: false,
        };
        module::compose(program, &abi, target, &bodies).ptx
    });
    let step_machine_segments = segments.iter().filter(|s| s.steps.is_some()).count() as u32;
    Ok(EmittedKernel {
        ptx: composed.ptx,
        vector_ptx: composed.vector_ptx,
        checked_ptx,
        cooperative_ptx: composed.cooperative_ptx,
        abi,
        target,
        timed,
        reports_faults,
        step_machine_segments,
        entries_at: composed.entries_at,
        libm: composed.libm,
    })
}

/// Writes each binding's literal extent (the elements a trusting entry reads at literal
/// indices) into `abi`, the largest over the entries.
fn record_literal_extents(abi: &mut KernelAbi, extents: &[(String, u32)]) {
    for (name, extent) in extents {
        if let Some(binding) = abi.bindings.iter_mut().find(|b| &*b.name == name.as_str()) {
            binding.literal_extent = binding.literal_extent.max(*extent);
        }
    }
}

/// How `nodes`, one launch's body, runs: in parallel or replicated, and as a step machine
/// where no converged placement of its subgroup operations reads what the reference reads.
fn segment<'p>(
    program: &Program,
    facts: &analysis::ProgramFacts<'p>,
    nodes: &'p [Node],
    workgroup_size: [u32; 3],
) -> Result<lower::Segment<'p>, CodegenError> {
    let replication =
        analysis::replicated::classify(program, nodes, workgroup_size.iter().product());
    // `lockstep::check` passes segments without subgroup operations, and a segment with
    // one is never replicated (`analysis::replicated`), so a step machine runs in parallel.
    // A parallel segment with a barrier in a data-dependent branch takes the reference's
    // schedule too (`analysis::steps::has_divergent_barrier_branch`); a replicated one has
    // no data-dependent branch its invocations could take at different times.
    let divergent_barrier = replication == analysis::replicated::Replication::Parallel
        && analysis::steps::has_divergent_barrier_branch(nodes, &facts.uniformity);
    let steps = match analysis::lockstep::check(nodes, &facts.uniformity) {
        Ok(()) if !divergent_barrier => None,
        _ => Some(analysis::steps::plan(nodes, &facts.uniformity)),
    };
    Ok(lower::Segment {
        nodes,
        replication,
        steps,
    })
}

/// The segments of the cooperative entry, where it runs them exactly as the split
/// entries do (see `analysis::grid_sync`), a lane that faults included; none otherwise.
fn lower_cooperative<'p>(
    segments: &[lower::Segment<'p>],
    lowerer: impl Fn() -> lower::Lowerer<'p>,
) -> Result<Vec<lower::LoweredBody>, CodegenError> {
    let nodes: Vec<&[Node]> = segments.iter().map(|segment| segment.nodes).collect();
    // A step machine's warps leave one by one, which a grid barrier after it cannot wait for.
    let steps = segments.iter().any(|segment| segment.steps.is_some());
    if steps || !analysis::grid_sync::cooperative_is_exact(&nodes) {
        return Ok(Vec::new());
    }
    let bodies = segments
        .iter()
        .enumerate()
        .map(|(index, segment)| {
            let ending = || lowerer().ending_at(module::segment_end_label(index));
            lower::lower_segment(ending, segment)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let awaited = |(segment, body): (&lower::Segment<'p>, &lower::LoweredBody)| {
        body.fault_word && analysis::grid_sync::faulted_lanes_may_be_awaited(segment.nodes)
    };
    if segments.iter().zip(&bodies).any(awaited) {
        return Ok(Vec::new());
    }
    Ok(bodies)
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
