//! The IR walker: `put_block` over statements and `put_expr` over expressions, writing
//! PTX with one fresh virtual register per defined value.
//!
//! Every operation reproduces what `vyre-reference` computes for the same value
//! variants (see `kind.rs`); where the reference raises a run-time error, the kernel
//! records a [`DeviceFault`] (see `checks.rs`). Each construct's child module shares the
//! [`Lowerer`]'s state.

mod async_copy;
mod atomic;
mod bytes;
mod checks;
mod entry;
mod expr;
mod half;
mod heap;
mod memory;
mod odd_width;
mod ops;
mod peer_sync;
mod reduction;
mod replica;
mod returned;
mod speculate;
mod steps;
mod stmt;
mod subgroup;
mod tree_reduction;
mod typed_lanes;
mod values;
mod vector;

use super::abi::{KernelAbi, SharedBuffer};
use super::analysis::replicated::Replication;
use super::analysis::steps::StepPlan;
use super::analysis::ProgramFacts;
use super::fault::DeviceFault;
use super::kind::{
    buf_len, declared_bytes, element_stride, loads_may_be_empty, nibble_vector,
    param_is_reference_count, Typing, ValKind,
};
use super::libm::Libm;
use super::writer::{Label, PtxWriter, Reg, RegClass};
use super::CodegenError;
use async_copy::AsyncTag;
use memory::{BufferSlot, Counted, Space};
use reduction::Partial;
use returned::{Hoisted, Returned};
use rustc_hash::{FxHashMap, FxHashSet};
use smallvec::SmallVec;
use std::collections::BTreeSet;
pub(crate) use typed_lanes::lower_segment;
use typed_lanes::Learned;
use vyre_foundation::ir::{Expr, Node, Program};

/// A lowered value: which reference variant it is and the register holding it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Val {
    pub(crate) kind: ValKind,
    pub(crate) reg: Reg,
}

impl Val {
    pub(crate) fn new(kind: ValKind, reg: Reg) -> Self {
        Self { kind, reg }
    }
}

#[derive(Clone, Copy)]
struct Local {
    val: Val,
    loop_var: bool,
}

struct Ids {
    local: [Reg; 3],
    group: [Reg; 3],
    global: [Reg; 3],
    linear_local: Reg,
}

impl Ids {
    fn allocate(w: &mut PtxWriter) -> Self {
        let mut three = || [(); 3].map(|()| w.reg(RegClass::B32));
        Self {
            local: three(),
            group: three(),
            global: three(),
            linear_local: w.reg(RegClass::B32),
        }
    }
}

/// One body launched over the whole grid (the entry, or a grid-barrier segment of it), and
/// how its invocations run.
pub(crate) struct Segment<'p> {
    pub(crate) nodes: &'p [Node],
    pub(crate) replication: Replication,
    /// Set when the segment runs as a step machine (see `steps`).
    pub(crate) steps: Option<StepPlan>,
}

/// Lowers one entry body. One per segment, cooperative segment and vector entry: each has
/// its own registers and labels; all share the program's [`ProgramFacts`].
pub(crate) struct Lowerer<'p> {
    w: PtxWriter,
    facts: &'p ProgramFacts<'p>,
    /// Target architecture (`redux.sync` needs sm_80).
    sm: u32,
    workgroup_size: [u32; 3],
    buffers: FxHashMap<&'p str, BufferSlot>,
    /// Base and length registers of each binding, in ABI order.
    binding_regs: Vec<BindingRegs>,
    shared: &'p [SharedBuffer],
    shared_bytes: u32,
    shared_base: Reg,
    locals: FxHashMap<&'p str, Local>,
    /// Variables bound to run-time-sized bytes values (see `bytes`).
    byte_views: FxHashMap<&'p str, bytes::ByteView>,
    scopes: Vec<Vec<&'p str>>,
    ids: Ids,
    fault_ptr: Reg,
    /// Faults that end every lane of the workgroup (out-of-line record-and-exit blocks).
    exit_faults: Vec<(DeviceFault, Label)>,
    /// Where an invocation ends: `None` exits the thread; in the cooperative entry, the
    /// label after this segment (every thread must reach the grid barrier there).
    segment_end: Option<String>,
    /// Whether any fault is recorded at all (the kernel then takes a fault word).
    uses_fault_word: bool,
    /// Whether the entry stamps the clock into the fault area (`super::clock`): set for
    /// a timed kernel's entries, except the cooperative entry's segments (that entry
    /// stamps around all of them).
    clock: bool,
    /// Set once this lane has recorded a fault: its later results are discarded anyway,
    /// so it leaves data-dependent loops early.
    faulted: Reg,
    /// Where a `Let`/`Assign` may snapshot a bytes view (`analysis::bytes`): the head of
    /// the lane's list of heap blocks holding such snapshots, given back where it leaves.
    view_blocks: Option<Reg>,
    /// Zero that ptxas cannot prove is zero (`%dynamic_smem_size`; kernels are always
    /// launched without dynamic shared memory). ORed into f32 constants and into the
    /// inputs of int->float conversions, it keeps ptxas 13.0 (sm_90) from constant-folding
    /// f32 arithmetic with the wrong rounding, folding `-0.0` away, and fusing sign
    /// extensions or byte extractions into wrong `I2F` forms (all found by the fuzzer).
    opaque_zero: Reg,
    /// The global address of the module's zero page, once a load reads it (see
    /// `memory::load_or_zero`).
    zero_page: Option<Reg>,
    /// The global address of the module's store sink, once a speculated store writes it
    /// (see `speculate`).
    store_sink: Option<Reg>,
    libm_used: BTreeSet<Libm>,
    /// Inlined libm instances so far (their labels and `.local` arrays are numbered).
    libm_inlines: u32,
    /// Lanes present in this invocation's 32-lane subgroup, and their member mask.
    subgroup_lanes: Reg,
    subgroup_mask: Reg,
    /// The async transfer tags of this segment, in order of their first start.
    async_tags: Vec<AsyncTag<'p>>,
    /// How many data-dependent branches enclose the current statement.
    divergence: u32,
    /// How many loops enclose the current statement.
    loop_depth: u32,
    /// Each barrier-holding `If` inside a loop: which values its condition took so far
    /// (bit 0 true, bit 1 false; see `put_branch_history`).
    branch_history: FxHashMap<*const Node, Reg>,
    /// Subgroup operations already computed, at their enclosing divergent branch or
    /// before a statement returned lanes skip (see `returned`).
    hoisted: FxHashMap<*const Expr, Hoisted>,
    /// The value of each class of repeated sub-expressions (`facts.shared`) the current
    /// statement has computed, with the writer's block mark where it was; emptied when a
    /// statement starts and ends.
    shared_values: FxHashMap<u32, (Val, u32)>,
    /// The subgroup operations being lowered, innermost last: the faults their operands
    /// raise, recorded once the whole subgroup has evaluated them (see `returned`).
    operand_faults: Vec<Vec<(Reg, DeviceFault)>>,
    /// Lowering a subgroup operand under other lanes' variable types (`typed_lanes`):
    /// what the validator's static types refuse is then judged by the reference's run-time
    /// rules (an fma takes a u32's bits).
    typing_elsewhere: bool,
    /// Results of subgroup operations that no branch steers by yet: the next branch
    /// steers by them too (see `checks::anchor`).
    unanchored: Vec<Reg>,
    /// Every register an anchor reads: the prologue writes them, as an anchor may be
    /// reached on a path that skipped the operation (a loop's exit before any iteration).
    anchored: Vec<Reg>,
    /// Results not anchored yet where a lane returned (and left its construct): anchored
    /// after that construct, where its path goes on.
    carried: Vec<Reg>,
    /// Set while a step machine evaluates a subgroup operand in lane turns: whether this
    /// lane's turn it is (its atomics run then; see `atomic::put_lane_operand`).
    operand_turn: Option<Reg>,
    /// Set in a segment whose returned lanes stay in the warp (see `returned`).
    returned: Option<Returned<'p>>,
    /// The upper words (bytes 8.., a `.b64` each) of wide values, keyed by their low
    /// register.
    upper: FxHashMap<Reg, SmallVec<[Reg; 1]>>,
    /// Whether the program has buffers whose loads may be empty ([`loads_may_be_empty`]):
    /// its raw values over four bytes wide then carry a filled flag.
    maybe_empty: bool,
    /// The filled flags of such values (`.b32`, 1 for the element's bytes, 0 for the empty
    /// bytes of an out-of-bounds load), keyed by their low register; a value without one
    /// is filled. An f64-held value's flag is 0 where it holds an out-of-bounds half
    /// load's bytes instead (`half::half_as_wide`).
    filled: FxHashMap<Reg, Reg>,
    /// Whether the program has F16/BF16 buffers: its f64-held variables carry a filled
    /// flag, as they may be assigned a half load.
    half_buffers: bool,
    partials: Vec<Partial<'p>>,
    /// Where the workgroup's partials are applied; `Return` jumps there instead of exiting.
    epilogue: Option<Label>,
    /// Set while lowering the lanes of an elementwise program's vector entry.
    lanes: Option<vector::Lanes<'p>>,
    /// Set while one thread runs a replicated segment once per workgroup (see `replica`).
    schedule: Option<replica::Schedule>,
    /// Set while lowering a segment as a step machine.
    steps: Option<steps::StepMachine<'p>>,
    /// The loads of the loop copy being lowered whose bounds a test before the loop
    /// proved (see `analysis::loop_bounds`): they skip the per-access check.
    proven_loads: FxHashSet<*const Expr>,
    /// Set for entries the host launches only where every buffer holds the elements they
    /// read at literal indices (`KernelBinding::literal_extent`): those loads skip their
    /// check, and each buffer's extent so far is recorded here.
    literal_extents: Option<FxHashMap<String, u32>>,
    /// While a branch is lowered as straight-line code, its condition: it guards the
    /// branch's faults, stores and assignments (see `speculate`).
    speculation: Option<Reg>,
    /// What this lowering found out about its variables' types so far (see `typed_lanes`).
    learned: Learned,
    /// The same, complete, from an earlier lowering of this entry.
    known: Learned,
}

impl<'p> Lowerer<'p> {
    /// A lowerer for one entry of `program`'s kernel laid out as `abi` and `shared`.
    pub(crate) fn new(
        program: &'p Program,
        facts: &'p ProgramFacts<'p>,
        abi: &KernelAbi,
        shared: &'p [SharedBuffer],
        sm: u32,
    ) -> Self {
        // Register numbering follows allocation order: keep it stable.
        let mut w = PtxWriter::default();
        let (buffers, binding_regs) = buffer_slots(&mut w, program, abi, shared);
        let ids = Ids::allocate(&mut w);
        let shared_base = w.reg(RegClass::B32);
        let fault_ptr = w.reg(RegClass::B64);
        let faulted = w.reg(RegClass::Pred);
        let view_blocks = facts.bytes.snapshots.then(|| w.reg(RegClass::B64));
        let opaque_zero = w.reg(RegClass::B32);
        let subgroup_lanes = w.reg(RegClass::B32);
        let subgroup_mask = w.reg(RegClass::B32);
        let epilogue = (!facts.partial_buffers.is_empty()).then(|| w.label());
        let maybe_empty = buffers
            .values()
            .any(|slot| loads_may_be_empty(&slot.element));
        let half_buffers =
            (buffers.values()).any(|slot| half::HalfFormat::of(&slot.element).is_some());
        Self {
            w,
            facts,
            sm,
            workgroup_size: abi.workgroup_size,
            buffers,
            binding_regs,
            shared,
            shared_bytes: abi.shared_bytes,
            shared_base,
            locals: FxHashMap::default(),
            byte_views: FxHashMap::default(),
            scopes: vec![Vec::new()],
            ids,
            fault_ptr,
            exit_faults: Vec::new(),
            segment_end: None,
            uses_fault_word: false,
            clock: false,
            faulted,
            view_blocks,
            opaque_zero,
            zero_page: None,
            store_sink: None,
            libm_used: BTreeSet::new(),
            libm_inlines: 0,
            subgroup_lanes,
            subgroup_mask,
            async_tags: Vec::new(),
            divergence: 0,
            loop_depth: 0,
            branch_history: FxHashMap::default(),
            hoisted: FxHashMap::default(),
            shared_values: FxHashMap::default(),
            operand_faults: Vec::new(),
            typing_elsewhere: false,
            unanchored: Vec::new(),
            anchored: Vec::new(),
            carried: Vec::new(),
            operand_turn: None,
            returned: None,
            upper: FxHashMap::default(),
            maybe_empty,
            filled: FxHashMap::default(),
            half_buffers,
            partials: Vec::new(),
            epilogue,
            lanes: None,
            schedule: None,
            steps: None,
            proven_loads: FxHashSet::default(),
            literal_extents: None,
            speculation: None,
            learned: Learned::default(),
            known: Learned::default(),
        }
    }

    fn push_scope(&mut self) {
        self.scopes.push(Vec::new());
    }

    fn pop_scope(&mut self) {
        if let Some(names) = self.scopes.pop() {
            for name in names {
                self.locals.remove(name);
                self.byte_views.remove(name);
            }
        }
    }

    /// Add `name` to the current scope (shadowing is an error); the caller binds it.
    fn declare(&mut self, name: &'p str) -> Result<(), CodegenError> {
        if self.locals.contains_key(name) || self.byte_views.contains_key(name) {
            return Err(CodegenError::invalid(
                format!("duplicate local binding `{name}`"),
                "choose a unique local name; shadowing is not allowed",
            ));
        }
        if let Some(scope) = self.scopes.last_mut() {
            scope.push(name);
        }
        Ok(())
    }

    fn bind(&mut self, name: &'p str, val: Val, loop_var: bool) -> Result<(), CodegenError> {
        self.declare(name)?;
        self.note_typing(name, Typing::Value(val.kind));
        self.locals.insert(name, Local { val, loop_var });
        Ok(())
    }
}

/// Every buffer's slot: the bindings' (with their base and length registers, also
/// returned in ABI order), then the workgroup buffers'.
fn buffer_slots<'p>(
    w: &mut PtxWriter,
    program: &'p Program,
    abi: &KernelAbi,
    shared: &[SharedBuffer],
) -> (FxHashMap<&'p str, BufferSlot>, Vec<BindingRegs>) {
    let mut buffers = FxHashMap::default();
    let mut binding_regs = Vec::with_capacity(abi.bindings.len());
    for binding in &abi.bindings {
        let base = w.reg(RegClass::B64);
        let len = w.reg(RegClass::B32);
        let counted = param_is_reference_count(&binding.element, binding.element_size)
            .then(|| w.reg(RegClass::B32));
        binding_regs.push(BindingRegs { base, len, counted });
        let decl = &program.buffers()[binding.decl_index];
        buffers.insert(
            decl.name(),
            BufferSlot {
                space: Space::Global { base, len },
                element: binding.element.clone(),
                stride: binding.element_size,
                storage: true,
                counted: counted.map(Counted::Param),
            },
        );
    }
    for buffer in shared {
        let decl = &program.buffers()[buffer.decl_index];
        let stride = element_stride(&buffer.element).unwrap_or(4);
        let counted = (nibble_vector(&buffer.element)).then(|| {
            let bytes = declared_bytes(&buffer.element, decl.count(), stride);
            Counted::Static(buf_len(&buffer.element, bytes))
        });
        buffers.insert(
            decl.name(),
            BufferSlot {
                space: Space::Shared {
                    offset: buffer.offset,
                    count: buffer.count,
                },
                element: buffer.element.clone(),
                stride,
                storage: false,
                counted,
            },
        );
    }
    (buffers, binding_regs)
}

/// The registers of a storage buffer's parameters: its base address, the elements it
/// addresses, and the reference's count where that differs (see [`BufferSlot::counted`]).
struct BindingRegs {
    base: Reg,
    len: Reg,
    counted: Option<Reg>,
}

pub(crate) struct LoweredBody {
    /// Libm ports the entry calls (their `.func`s are emitted once per module).
    pub(crate) libm_used: BTreeSet<Libm>,
    pub(crate) decls: String,
    pub(crate) prologue: String,
    pub(crate) body: String,
    pub(crate) fault_word: bool,
    /// Each buffer read at literal indices without a check, and the elements it must hold
    /// (see `Lowerer::literal_extents`).
    pub(crate) literal_extents: Vec<(String, u32)>,
    /// Set when this lowering found variable types it did not know in advance (several
    /// types of a variable subgroup operands read, widened floats): lower the entry again
    /// knowing them (`typed_lanes::lower_segment`).
    pub(crate) to_learn: Option<Learned>,
}

/// The reference canonicalises every f32 literal: NaN to `0x7FC00000`, subnormals to ±0.
fn canonical_f32_bits_host(value: f32) -> u32 {
    if value.is_nan() {
        0x7FC0_0000
    } else if value.is_subnormal() {
        value.to_bits() & 0x8000_0000
    } else {
        value.to_bits()
    }
}
