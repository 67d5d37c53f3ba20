//! The IR walker: `put_block` over statements and `put_expr` over expressions, writing
//! PTX with one fresh virtual register per defined value.
//!
//! Every operation reproduces what `vyre-reference` computes for the same value
//! variants (see `kind.rs`); cases where the reference raises a run-time error branch to
//! an out-of-line block that records a [`DeviceFault`] and ends the invocation.

mod bytes;

use super::abi::{BindingRole, KernelAbi, SharedBuffer};
use super::async_copy::{self, PendingCopy};
use super::fault::DeviceFault;
use super::kind::{element_stride, ValKind};
use super::libm::Libm;
use super::reduction::{
    commutative_opcode, partial_buffers as partial_buffers_of, read_variables, DiscardedAtomic,
    Partial, PARTIALS,
};
use super::uniform::Uniformity;
use super::visit::{any_expr_in, contains_barrier};
use super::writer::{emit, Label, PtxWriter, Reg, RegClass};
use super::CodegenError;
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::BTreeSet;
use vyre_foundation::ir::{AtomicOp, DataType, Expr, MemoryOrdering, Node, Program};

mod vector;

/// Deepest expression/statement nesting the walker accepts (protects the host stack).
const MAX_NESTING: u32 = 384;

/// A lowered value: which reference variant it is and the register holding it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Val {
    pub(crate) kind: ValKind,
    pub(crate) reg: Reg,
}

#[derive(Clone, Copy)]
struct Local {
    val: Val,
    loop_var: bool,
}

#[derive(Clone, Copy)]
enum Space {
    /// Global memory: base address register and element-count register.
    Global { base: Reg, len: Reg },
    /// Shared memory: byte offset into `vyre_shared` and static element count.
    Shared { offset: u32, count: u32 },
}

impl Space {
    /// The PTX state-space qualifier for `ld`/`st`.
    fn state_space(self) -> &'static str {
        match self {
            Self::Global { .. } => "global",
            Self::Shared { .. } => "shared",
        }
    }
}

#[derive(Clone)]
struct BufferSlot {
    space: Space,
    element: DataType,
    stride: u32,
    /// Storage buffer the reference allows atomics on.
    storage: bool,
    /// Storage buffer the program cannot write (a read-only input).
    read_only: bool,
}

/// Registers holding the invocation coordinates.
struct Ids {
    local: [Reg; 3],
    group: [Reg; 3],
    global: [Reg; 3],
    linear_local: Reg,
}

pub(crate) struct Lowerer<'p> {
    w: PtxWriter,
    buffers: FxHashMap<&'p str, BufferSlot>,
    binding_regs: Vec<(Reg, Reg)>,
    shared: Vec<SharedBuffer>,
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
    /// Set once this lane has recorded a fault: its later results are discarded anyway,
    /// so it leaves data-dependent loops early.
    faulted: Reg,
    /// Zero that ptxas cannot prove is zero (`%dynamic_smem_size`; kernels are always
    /// launched without dynamic shared memory). ORed into f32 constants and into the
    /// inputs of int->float conversions, it keeps ptxas 13.0 (sm_90) from constant-folding
    /// f32 arithmetic with the wrong rounding, folding `-0.0` away, and fusing sign
    /// extensions or byte extractions into wrong `I2F` forms (all found by the fuzzer).
    opaque_zero: Reg,
    /// The program calls libm `.func`s, so every branch and loop test is hidden from
    /// ptxas's constant folding ([`Lowerer::branch_pred`]).
    guard_branches: bool,
    depth: u32,
    workgroup_size: [u32; 3],
    libm_used: BTreeSet<Libm>,
    uniformity: Uniformity<'p>,
    /// Target architecture (`redux.sync` needs sm_80).
    pub(crate) sm: u32,
    /// Lanes present in this invocation's 32-lane subgroup, and their member mask.
    pub(crate) subgroup_lanes: Reg,
    pub(crate) subgroup_mask: Reg,
    /// Async copies started and not yet waited for, by tag.
    pub(crate) pending_copies: FxHashMap<&'p str, PendingCopy<'p>>,
    /// How many data-dependent branches enclose the current statement.
    divergence: u32,
    /// Subgroup operations already computed at their enclosing divergent branch.
    hoisted: FxHashMap<*const Expr, Val>,
    /// High halves of 16-byte values, keyed by their low register.
    wide_hi: FxHashMap<Reg, Reg>,
    /// Variables some expression reads: a `Let` of an atomic outside this set discards
    /// the old value, so the atomic can be a (warp-aggregated) `red`.
    read_vars: FxHashSet<&'p str>,
    /// Buffers whose literal-index discarded atomics fold into per-workgroup partials.
    partial_buffers: FxHashSet<&'p str>,
    partials: Vec<Partial<'p>>,
    /// Where the workgroup's partials are applied; `Return` jumps there instead of exiting.
    epilogue: Option<Label>,
    /// Set while lowering the lanes of an elementwise program's vector entry.
    lanes: Option<vector::Lanes<'p>>,
}

/// Where a buffer's bytes start.
#[derive(Clone, Copy)]
pub(crate) enum ByteBase {
    Global(Reg),
    /// Byte offset of the buffer inside `vyre_shared`.
    Shared(u32),
}

impl<'p> Lowerer<'p> {
    pub(crate) fn new(
        program: &'p Program,
        abi: &KernelAbi,
        shared: Vec<SharedBuffer>,
        sm: u32,
    ) -> Self {
        let mut w = PtxWriter::default();
        let mut buffers = FxHashMap::default();
        let mut binding_regs = Vec::with_capacity(abi.bindings.len());
        for binding in &abi.bindings {
            let base = w.reg(RegClass::B64);
            let len = w.reg(RegClass::B32);
            binding_regs.push((base, len));
            let decl = &program.buffers()[binding.decl_index];
            buffers.insert(
                decl.name(),
                BufferSlot {
                    space: Space::Global { base, len },
                    element: binding.element.clone(),
                    stride: binding.element_size,
                    storage: true,
                    read_only: binding.role == BindingRole::Input,
                },
            );
        }
        for buffer in &shared {
            let decl = program
                .buffers()
                .iter()
                .find(|decl| decl.name() == &*buffer.name);
            if let Some(decl) = decl {
                buffers.insert(
                    decl.name(),
                    BufferSlot {
                        space: Space::Shared {
                            offset: buffer.offset,
                            count: buffer.count,
                        },
                        element: buffer.element.clone(),
                        stride: element_stride(&buffer.element).unwrap_or(4),
                        storage: false,
                        read_only: false,
                    },
                );
            }
        }
        let three = |w: &mut PtxWriter| {
            [
                w.reg(RegClass::B32),
                w.reg(RegClass::B32),
                w.reg(RegClass::B32),
            ]
        };
        let ids = Ids {
            local: three(&mut w),
            group: three(&mut w),
            global: three(&mut w),
            linear_local: w.reg(RegClass::B32),
        };
        let shared_base = w.reg(RegClass::B32);
        let fault_ptr = w.reg(RegClass::B64);
        let faulted = w.reg(RegClass::Pred);
        let opaque_zero = w.reg(RegClass::B32);
        let subgroup_lanes = w.reg(RegClass::B32);
        let subgroup_mask = w.reg(RegClass::B32);
        // Only atomics consult which variables are read (a discarded atomic result may
        // become a `red`): skip the two whole-program walks for programs without any.
        let mut read_vars = FxHashSet::default();
        let mut partial_buffers = FxHashSet::default();
        if any_expr_in(program.entry(), &|e| matches!(e, Expr::Atomic { .. })) {
            read_variables(program.entry(), &mut read_vars);
            partial_buffers = partial_buffers_of(program.entry(), &read_vars);
        }
        let epilogue = (!partial_buffers.is_empty()).then(|| w.label());
        Self {
            w,
            buffers,
            binding_regs,
            shared,
            shared_base,
            locals: FxHashMap::default(),
            byte_views: FxHashMap::default(),
            scopes: vec![Vec::new()],
            ids,
            fault_ptr,
            exit_faults: Vec::new(),
            segment_end: None,
            uses_fault_word: false,
            faulted,
            opaque_zero,
            guard_branches: calls_libm(program.entry()),
            depth: 0,
            workgroup_size: abi.workgroup_size,
            libm_used: BTreeSet::new(),
            uniformity: Uniformity::analyse(program),
            sm,
            subgroup_lanes,
            subgroup_mask,
            pending_copies: FxHashMap::default(),
            divergence: 0,
            hoisted: FxHashMap::default(),
            wide_hi: FxHashMap::default(),
            partial_buffers,
            partials: Vec::new(),
            epilogue,
            read_vars,
            lanes: None,
        }
    }

    /// End every invocation by branching to `label` instead of exiting (the cooperative
    /// entry's segments: a thread that exits would never reach the next grid barrier).
    pub(crate) fn ending_at(mut self, label: String) -> Self {
        self.segment_end = Some(label);
        self
    }

    /// End this invocation's body (`Return`): through the epilogue that flushes
    /// per-workgroup atomic partials when there is one (every lane must reach its barrier),
    /// else straight out.
    fn end_invocation(&mut self) {
        match self.epilogue {
            Some(epilogue) => emit!(self.w, "bra {epilogue}"),
            None => self.exit_kernel(),
        }
    }

    /// Leave the kernel (or, in a cooperative entry, the segment: a thread that exits would
    /// never reach the next grid barrier).
    fn exit_kernel(&mut self) {
        match &self.segment_end {
            None => emit!(self.w, "exit"),
            Some(label) => emit!(self.w, "bra {label}"),
        }
    }

    /// Lower the program body and return `(prologue + body text, uses fault word, writer)`.
    pub(crate) fn lower_entry(mut self, entry: &'p [Node]) -> Result<LoweredBody, CodegenError> {
        self.put_block(entry)?;
        self.finish_entry()
    }

    /// Close the entry: the epilogue (per-workgroup atomic partials; such programs have no
    /// barriers, so never segments or a vector entry), the final exit, the out-of-line
    /// fault blocks, the prologue.
    fn finish_entry(mut self) -> Result<LoweredBody, CodegenError> {
        self.put_epilogue()?;
        self.exit_kernel();
        for (fault, label) in std::mem::take(&mut self.exit_faults) {
            self.w.put_label(label);
            let scratch = self.w.reg(RegClass::B32);
            emit!(
                self.w,
                "atom.global.cas.b32 {scratch}, [{}], 0, {}",
                self.fault_ptr,
                fault.code()
            );
            self.exit_kernel();
        }
        let fault_word = self.uses_fault_word;
        let prologue = self.prologue(fault_word);
        let mut decls = self.w.register_decls();
        if !self.partials.is_empty() {
            decls.push_str(&format!(
                "\t.shared .align 4 .b32 {PARTIALS}[{}];\n",
                self.partials.len()
            ));
        }
        Ok(LoweredBody {
            libm_used: std::mem::take(&mut self.libm_used),
            decls,
            prologue,
            body: self.w.into_body(),
            fault_word,
        })
    }

    fn prologue(&mut self, fault_word: bool) -> String {
        let mut p = PtxWriter::default();
        for (index, (base, len)) in self.binding_regs.iter().enumerate() {
            emit!(p, "ld.param.u64 {base}, [vyre_p{index}]");
            emit!(p, "cvta.to.global.u64 {base}, {base}");
            emit!(p, "ld.param.u32 {len}, [vyre_n{index}]");
        }
        if fault_word {
            emit!(p, "ld.param.u64 {}, [vyre_fault]", self.fault_ptr);
            emit!(p, "cvta.to.global.u64 {0}, {0}", self.fault_ptr);
        }
        emit!(p, "setp.ne.u32 {}, 0, 0", self.faulted);
        emit!(p, "mov.u32 {}, %dynamic_smem_size", self.opaque_zero);
        for (axis, name) in ["x", "y", "z"].into_iter().enumerate() {
            let (l, g, gl) = (
                self.ids.local[axis],
                self.ids.group[axis],
                self.ids.global[axis],
            );
            emit!(p, "mov.u32 {l}, %tid.{name}");
            emit!(p, "mov.u32 {g}, %ctaid.{name}");
            emit!(
                p,
                "mad.lo.u32 {gl}, {g}, {}, {l}",
                self.workgroup_size[axis]
            );
        }
        let [wx, wy, _] = self.workgroup_size;
        let lin = self.ids.linear_local;
        emit!(
            p,
            "mad.lo.u32 {lin}, {}, {wy}, {}",
            self.ids.local[2],
            self.ids.local[1]
        );
        emit!(p, "mad.lo.u32 {lin}, {lin}, {wx}, {}", self.ids.local[0]);
        // Subgroups are 32-lane chunks of the linear local index (as hardware warps are);
        // the last one is short when the workgroup is not a multiple of 32.
        let (lanes, mask) = (self.subgroup_lanes, self.subgroup_mask);
        let threads: u32 = self.workgroup_size.iter().product();
        emit!(p, "and.b32 {lanes}, {lin}, -32");
        emit!(p, "sub.u32 {lanes}, {threads}, {lanes}");
        emit!(p, "min.u32 {lanes}, {lanes}, 32");
        // shl by 32 yields 0 in PTX, so a full subgroup gets 0xFFFFFFFF.
        emit!(p, "shl.b32 {mask}, 1, {lanes}");
        emit!(p, "sub.u32 {mask}, {mask}, 1");
        if !self.shared.is_empty() {
            // The reference zero-fills every workgroup buffer for each workgroup.
            let base = self.shared_base;
            emit!(p, "mov.u32 {base}, vyre_shared");
            let total = self.shared_bytes();
            let threads: u32 = self.workgroup_size.iter().product();
            let offset = self.w.reg(RegClass::B32);
            let addr = self.w.reg(RegClass::B32);
            let done = self.w.reg(RegClass::Pred);
            let (top, end) = (self.w.label(), self.w.label());
            emit!(p, "shl.b32 {offset}, {lin}, 4");
            p.put_label(top);
            emit!(p, "setp.ge.u32 {done}, {offset}, {total}");
            emit!(p, "@{done} bra {end}");
            emit!(p, "add.u32 {addr}, {base}, {offset}");
            emit!(p, "st.shared.v4.u32 [{addr}], {{0, 0, 0, 0}}");
            emit!(p, "add.u32 {offset}, {offset}, {}", threads * 16);
            emit!(p, "bra {top}");
            p.put_label(end);
            emit!(p, "barrier.sync 0");
        }
        if !self.partials.is_empty() {
            let first = self.w.reg(RegClass::Pred);
            emit!(p, "setp.eq.u32 {first}, {lin}, 0");
            for (slot, partial) in self.partials.iter().enumerate() {
                emit!(
                    p,
                    "@{first} st.shared.u32 [{PARTIALS}+{}], {}",
                    slot * 4,
                    partial.identity()
                );
            }
            emit!(p, "barrier.sync 0");
        }
        p.into_body()
    }

    /// The shared slot of the partial for `buffer[index]`, allocated on first use.
    fn partial_slot(&mut self, buffer: &'p str, index: u32, opcode: &'static str) -> u32 {
        let slot = match self
            .partials
            .iter()
            .position(|p| p.buffer == buffer && p.index == index)
        {
            Some(slot) => slot,
            None => {
                self.partials.push(Partial {
                    buffer,
                    index,
                    opcode,
                });
                self.partials.len() - 1
            }
        };
        slot as u32
    }

    /// Apply each per-workgroup partial to global memory once every lane is done (lanes
    /// that returned wait here; lanes that exited on a fault are not waited for).
    fn put_epilogue(&mut self) -> Result<(), CodegenError> {
        let Some(epilogue) = self.epilogue else {
            return Ok(());
        };
        self.w.put_label(epilogue);
        if self.partials.is_empty() {
            return Ok(());
        }
        emit!(self.w, "barrier.sync 0");
        let first = self.w.reg(RegClass::Pred);
        emit!(self.w, "setp.eq.u32 {first}, {}, 0", self.ids.linear_local);
        for slot in 0..self.partials.len() {
            let (buffer, index, opcode) = {
                let p = &self.partials[slot];
                (p.buffer, p.index, p.opcode)
            };
            let target = self.slot(buffer)?;
            let index_reg = self.imm_b32(index);
            let (in_bounds, addr) = self.element_address(&target, index_reg);
            let value = self.w.reg(RegClass::B32);
            emit!(self.w, "ld.shared.u32 {value}, [{PARTIALS}+{}]", slot * 4);
            emit!(self.w, "and.pred {in_bounds}, {in_bounds}, {first}");
            emit!(
                self.w,
                "@{in_bounds} red.relaxed.gpu.global.{opcode} [{addr}], {value}"
            );
        }
        Ok(())
    }

    pub(crate) fn shared_bytes(&self) -> u32 {
        self.shared
            .last()
            .map(|last| {
                let bytes = last.offset + last.count * element_stride(&last.element).unwrap_or(4);
                bytes.next_multiple_of(16)
            })
            .unwrap_or(0)
    }

    // ---------------------------------------------------------------- statements

    fn enter(&mut self) -> Result<(), CodegenError> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(CodegenError::unsupported(
                "deeply nested IR",
                format!("nesting deeper than {MAX_NESTING} levels"),
                "split the expression into Let bindings",
            ));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
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

    fn bind(&mut self, name: &'p str, val: Val, loop_var: bool) -> Result<(), CodegenError> {
        if self.locals.contains_key(name) || self.byte_views.contains_key(name) {
            return Err(CodegenError::invalid(
                format!("duplicate local binding `{name}`"),
                "choose a unique local name; shadowing is not allowed",
            ));
        }
        self.locals.insert(name, Local { val, loop_var });
        if let Some(scope) = self.scopes.last_mut() {
            scope.push(name);
        }
        Ok(())
    }

    fn put_scoped_block(&mut self, nodes: &'p [Node]) -> Result<(), CodegenError> {
        self.push_scope();
        let result = self.put_block(nodes);
        self.pop_scope();
        result
    }

    fn put_block(&mut self, nodes: &'p [Node]) -> Result<(), CodegenError> {
        if nodes.iter().any(|n| {
            matches!(
                n,
                Node::AsyncLoad { .. } | Node::AsyncStore { .. } | Node::AsyncWait { .. }
            )
        }) {
            async_copy::check_block(nodes)?;
        }
        for node in nodes {
            self.put_node(node)?;
        }
        Ok(())
    }

    fn put_node(&mut self, node: &'p Node) -> Result<(), CodegenError> {
        self.enter()?;
        let result = self.put_node_inner(node);
        self.leave();
        result
    }

    fn put_node_inner(&mut self, node: &'p Node) -> Result<(), CodegenError> {
        match node {
            Node::Let { name, value } if self.is_bytes_view(value) => {
                let view = self.put_bytes_view(value)?;
                self.bind_bytes_view(name.as_str(), view)
            }
            Node::Let { name, value } => {
                let value = match value {
                    Expr::Atomic { .. } if !self.read_vars.contains(name.as_str()) => {
                        self.put_atomic(value, false)?
                    }
                    _ => self.put_expr(value)?,
                };
                let reg = self.w.reg(value.kind.reg_class());
                self.mov(reg, value.reg);
                if value.kind == ValKind::Bytes(16) {
                    let hi = self.w.reg(RegClass::B64);
                    let source_hi = self.high_half(value);
                    self.mov(hi, source_hi);
                    self.wide_hi.insert(reg, hi);
                }
                self.bind(
                    name.as_str(),
                    Val {
                        kind: value.kind,
                        reg,
                    },
                    false,
                )
            }
            Node::Assign { name, value } => {
                if self.byte_views.contains_key(name.as_str()) {
                    return Err(bytes::runtime_sized_use(&format!(
                        "the assignment to variable `{name}`"
                    )));
                }
                let value = self.put_expr(value)?;
                let Some(local) = self.locals.get(name.as_str()).copied() else {
                    return Err(CodegenError::invalid(
                        format!("assignment to undeclared variable `{name}`"),
                        "add a Let before assigning it",
                    ));
                };
                if local.loop_var {
                    return Err(CodegenError::invalid(
                        format!("assignment to loop variable `{name}`"),
                        "loop variables are immutable; copy it into a Let first",
                    ));
                }
                if local.val.kind != value.kind {
                    return Err(CodegenError::unsupported(
                        "Node::Assign changing a variable's type",
                        format!(
                            "`{name}` holds a {} but is assigned a {}",
                            local.val.kind.name(),
                            value.kind.name()
                        ),
                        "assign a value of the variable's own type (insert a Cast)",
                    ));
                }
                self.mov(local.val.reg, value.reg);
                if value.kind == ValKind::Bytes(16) {
                    let (dst, src) = (self.high_half(local.val), self.high_half(value));
                    self.mov(dst, src);
                }
                Ok(())
            }
            Node::Store {
                buffer,
                index,
                value,
            } => {
                let index = self.put_index(index)?;
                if self.is_bytes_view(value) {
                    let view = self.put_bytes_view(value)?;
                    return self.put_bytes_view_store(buffer.as_str(), index, view);
                }
                let value = self.put_expr(value)?;
                self.put_store(buffer.as_str(), index, value)
            }
            Node::If {
                cond,
                then,
                otherwise,
            } => {
                let cond_expr = cond;
                let cond = self.put_expr(cond)?;
                let p = self.truthy(cond);
                let p = self.branch_pred(p);
                let has_barrier = then.iter().chain(otherwise.iter()).any(contains_barrier);
                if has_barrier && !self.uniformity.is_uniform(cond_expr) {
                    // The reference fails when live lanes disagree on a branch holding a
                    // barrier; check agreement with barrier reductions (every live lane is
                    // here: enclosing branches with barriers were checked the same way).
                    let (all, any) = (self.pred(), self.pred());
                    emit!(self.w, "barrier.red.and.pred {all}, 0, {p}");
                    emit!(self.w, "barrier.red.or.pred {any}, 0, {p}");
                    emit!(self.w, "xor.pred {all}, {all}, {any}");
                    // `all` is the same in every lane (a barrier reduction), so all exit.
                    self.fault_exit_if(all, DeviceFault::DivergentBarrier);
                }
                let divergent = !self.uniformity.is_uniform(cond_expr);
                if divergent && self.divergence == 0 {
                    // The reference evaluates subgroup operations over every lane of the
                    // chunk, in or out of the branch; compute them here, converged.
                    let ops: Vec<&'p Expr> = self
                        .uniformity
                        .hoistable(then)
                        .into_iter()
                        .chain(self.uniformity.hoistable(otherwise))
                        .flatten()
                        .collect();
                    for op in ops {
                        let value = self.put_expr(op)?;
                        self.hoisted.insert(op as *const Expr, value);
                    }
                }
                self.divergence += u32::from(divergent);
                let (else_label, end_label) = (self.w.label(), self.w.label());
                emit!(self.w, "@!{p} bra {else_label}");
                let mut result = self.put_scoped_block(then);
                if otherwise.is_empty() {
                    self.w.put_label(else_label);
                    self.w.put_label(end_label);
                } else {
                    emit!(self.w, "bra {end_label}");
                    self.w.put_label(else_label);
                    result = result.and_then(|()| self.put_scoped_block(otherwise));
                    self.w.put_label(end_label);
                }
                self.divergence -= u32::from(divergent);
                result
            }
            Node::Loop {
                var,
                from,
                to,
                body,
            } => {
                let divergent =
                    !(self.uniformity.is_uniform(from) && self.uniformity.is_uniform(to));
                let from = self.put_expr(from)?;
                let from = self.u32_checked(from, DeviceFault::LoopBoundNotU32)?;
                let to = self.put_expr(to)?;
                let to = self.u32_checked(to, DeviceFault::LoopBoundNotU32)?;
                let counter = self.w.reg(RegClass::B32);
                let bound = self.w.reg(RegClass::B32);
                self.mov(counter, from);
                self.mov(bound, to);
                let mut done = self.w.reg(RegClass::Pred);
                let (top, end) = (self.w.label(), self.w.label());
                self.w.put_label(top);
                emit!(self.w, "setp.ge.u32 {done}, {counter}, {bound}");
                if !body
                    .iter()
                    .any(|n| contains_barrier(n) || super::uniform::node_has_subgroup(n))
                {
                    // A lane that recorded a fault stops iterating (its results are
                    // discarded); never in loops with barriers or subgroup operations,
                    // where every lane must stay in step.
                    emit!(self.w, "or.pred {done}, {done}, {}", self.faulted);
                }
                done = self.branch_pred(done);
                emit!(self.w, "@{done} bra {end}");
                self.push_scope();
                self.divergence += u32::from(divergent);
                // The body sees an immutable copy, so nothing in it can steer the loop.
                let var_reg = self.w.reg(RegClass::B32);
                self.mov(var_reg, counter);
                let result = self
                    .bind(
                        var.as_str(),
                        Val {
                            kind: ValKind::U32,
                            reg: var_reg,
                        },
                        true,
                    )
                    .and_then(|()| self.put_block(body));
                self.divergence -= u32::from(divergent);
                self.pop_scope();
                result?;
                emit!(self.w, "add.u32 {counter}, {counter}, 1");
                emit!(self.w, "bra {top}");
                self.w.put_label(end);
                Ok(())
            }
            Node::Return => {
                if self.lane_return() {
                    return Ok(());
                }
                self.end_invocation();
                Ok(())
            }
            Node::Barrier { .. } => {
                // Top-level GridSyncs split the kernel into segments (grid_sync.rs); one
                // left inside If/Loop is a workgroup barrier, as in the reference.
                // Non-`.aligned` form: lanes that returned earlier have exited and are not
                // waited for, exactly as the reference releases a barrier once every live
                // lane reached it.
                emit!(self.w, "barrier.sync 0");
                Ok(())
            }
            Node::Block(nodes) => self.put_scoped_block(nodes),
            Node::Region { body, .. } => self.put_scoped_block(body),
            Node::IndirectDispatch { .. } | Node::Resume { .. } => {
                // The reference rejects these whenever it reaches them.
                self.fault_always(DeviceFault::RejectedByReference);
                Ok(())
            }
            Node::AsyncLoad {
                source,
                destination,
                offset,
                size,
                tag,
            } => self.start_copy(
                false,
                source.as_str(),
                destination.as_str(),
                offset,
                size,
                tag.as_str(),
            ),
            Node::AsyncStore {
                source,
                destination,
                offset,
                size,
                tag,
            } => self.start_copy(
                true,
                source.as_str(),
                destination.as_str(),
                offset,
                size,
                tag.as_str(),
            ),
            Node::AsyncWait { tag } => self.finish_copy(tag.as_str()),
            Node::Trap { address, .. } => {
                let address = self.put_expr(address)?;
                self.u32_checked(address, DeviceFault::Trap)?;
                self.fault_always(DeviceFault::Trap);
                Ok(())
            }
            Node::AllReduce { .. } => Err(unsupported_node("Node::AllReduce")),
            Node::AllGather { .. } => Err(unsupported_node("Node::AllGather")),
            Node::ReduceScatter { .. } => Err(unsupported_node("Node::ReduceScatter")),
            Node::Broadcast { .. } => Err(unsupported_node("Node::Broadcast")),
            Node::Opaque(ext) => Err(CodegenError::unsupported(
                format!("Node::Opaque({})", ext.extension_kind()),
                "opaque node extensions have no PTX lowering",
                "lower the extension to core IR before dispatch",
            )),
            _ => Err(unsupported_node("an unknown Node variant")),
        }
    }

    fn put_store(&mut self, buffer: &str, index: Reg, value: Val) -> Result<(), CodegenError> {
        let slot = self.slot(buffer)?;
        if slot.element == DataType::Bytes {
            return self.put_value_into_bytes(buffer, index, value);
        }
        let Some(payload) = self.store_payload(&slot.element, value)? else {
            return Err(CodegenError::unsupported(
                format!(
                    "Store of a {} into a {} buffer",
                    value.kind.name(),
                    slot.element
                ),
                "this value/element combination is not lowered",
                "Cast the value to the buffer's element type before storing",
            ));
        };
        let (in_bounds, addr) = self.element_address(&slot, index);
        if self.lane_store(buffer, in_bounds, payload) {
            return Ok(());
        }
        let space = slot.space.state_space();
        if slot.stride == 16 {
            // The value's bytes, zero-padded to sixteen.
            let hi = self.high_half(value);
            emit!(
                self.w,
                "@{in_bounds} st.{space}.v2.u64 [{addr}], {{{payload}, {hi}}}"
            );
            return Ok(());
        }
        let width = match slot.stride {
            1 => "u8",
            2 => "u16",
            4 => "u32",
            _ => "u64",
        };
        emit!(
            self.w,
            "@{in_bounds} st.{space}.{width} [{addr}], {payload}"
        );
        Ok(())
    }

    /// The register to write for `value` into an element of `element`, following the
    /// reference's `write_element`: F32 elements canonicalise floats (and reinterpret u32
    /// bits); every other element receives the value's little-endian bytes truncated or
    /// zero-padded to the element width (a Float contributes its f64 bytes).
    fn store_payload(
        &mut self,
        element: &DataType,
        value: Val,
    ) -> Result<Option<Reg>, CodegenError> {
        let stride = element_stride(element).unwrap_or(4);
        if *element == DataType::F32 {
            let reg = match value.kind {
                ValKind::F32 => self.canonical_f32_bits(value.reg),
                ValKind::F64 => {
                    let f = self.float_operand(value).reg;
                    self.canonical_f32_bits(f)
                }
                ValKind::U32 => {
                    let f = self.w.reg(RegClass::F32);
                    emit!(self.w, "mov.b32 {f}, {}", value.reg);
                    let f = self.flush_subnormal(f);
                    self.canonical_f32_bits(f)
                }
                // The reference writes 0.0 for any other value variant.
                _ => self.imm_b32(0),
            };
            return Ok(Some(reg));
        }
        let bytes = match value.kind {
            ValKind::F32 | ValKind::F64 => Val {
                kind: ValKind::U64,
                reg: self.float_bytes(value),
            },
            _ => value,
        };
        let reg = match (stride, bytes.reg.class()) {
            (8 | 16, RegClass::B64) => bytes.reg,
            (8 | 16, _) => {
                let wide = self.w.reg(RegClass::B64);
                emit!(self.w, "cvt.u64.u32 {wide}, {}", bytes.reg);
                wide
            }
            (_, RegClass::B64) => {
                let narrow = self.w.reg(RegClass::B32);
                emit!(self.w, "cvt.u32.u64 {narrow}, {}", bytes.reg);
                narrow
            }
            (_, RegClass::B32) => bytes.reg,
            _ => return Ok(None),
        };
        Ok(Some(reg))
    }

    // ---------------------------------------------------------------- expressions

    pub(crate) fn put_expr(&mut self, expr: &'p Expr) -> Result<Val, CodegenError> {
        self.enter()?;
        let result = self.put_expr_inner(expr);
        self.leave();
        result
    }

    fn put_expr_inner(&mut self, expr: &'p Expr) -> Result<Val, CodegenError> {
        match expr {
            Expr::LitU32(v) => Ok(self.lit_b32(ValKind::U32, *v)),
            Expr::LitI32(v) => Ok(self.lit_b32(ValKind::I32, *v as u32)),
            Expr::LitBool(v) => Ok(self.lit_b32(ValKind::Bool, u32::from(*v))),
            Expr::LitF32(v) => Ok(Val {
                kind: ValKind::F32,
                reg: self.f32_const(canonical_f32_bits_host(*v)),
            }),
            Expr::Var(name) if self.byte_views.contains_key(name.as_str()) => {
                Err(bytes::runtime_sized_use(&format!("variable `{name}`")))
            }
            Expr::Var(name) => self
                .locals
                .get(name.as_str())
                .map(|local| local.val)
                .ok_or_else(|| {
                    CodegenError::invalid(
                        format!("reference to undeclared variable `{name}`"),
                        "add a Let before this use",
                    )
                }),
            Expr::Load { buffer, index } => {
                let index = self.put_index(index)?;
                self.put_load(buffer.as_str(), index)
            }
            Expr::BufLen { buffer } => {
                let slot = self.slot(buffer.as_str())?;
                let reg = self.w.reg(RegClass::B32);
                match slot.space {
                    Space::Global { len, .. } => self.mov(reg, len),
                    Space::Shared { count, .. } => emit!(self.w, "mov.u32 {reg}, {count}"),
                }
                Ok(Val {
                    kind: ValKind::U32,
                    reg,
                })
            }
            Expr::InvocationId { axis } => self.id_axis(*axis, |ids| &ids.global),
            Expr::WorkgroupId { axis } => self.id_axis(*axis, |ids| &ids.group),
            Expr::LocalId { axis } => self.id_axis(*axis, |ids| &ids.local),
            Expr::BinOp { op, left, right } => {
                let left = self.put_expr(left)?;
                let right = self.put_expr(right)?;
                self.put_binop(*op, left, right)
            }
            Expr::UnOp { op, operand } => {
                let operand = self.put_expr(operand)?;
                self.put_unop(op, operand)
            }
            Expr::Select {
                cond,
                true_val,
                false_val,
            } => {
                let cond = self.put_expr(cond)?;
                let p = self.truthy(cond);
                // The reference evaluates both arms (side effects included), then picks.
                let t = self.put_expr(true_val)?;
                let f = self.put_expr(false_val)?;
                if t.kind != f.kind {
                    return Err(CodegenError::unsupported(
                        "Expr::Select with arms of different types",
                        format!("arms are {} and {}", t.kind.name(), f.kind.name()),
                        "Cast both arms to one type",
                    ));
                }
                let reg = self.w.reg(t.kind.reg_class());
                emit!(
                    self.w,
                    "selp.{} {reg}, {}, {}, {p}",
                    sel_type(t.reg),
                    t.reg,
                    f.reg
                );
                if t.kind == ValKind::Bytes(16) {
                    let (t_hi, f_hi) = (self.high_half(t), self.high_half(f));
                    let hi = self.w.reg(RegClass::B64);
                    emit!(self.w, "selp.b64 {hi}, {t_hi}, {f_hi}, {p}");
                    self.wide_hi.insert(reg, hi);
                }
                Ok(Val { kind: t.kind, reg })
            }
            Expr::Cast { target, value } => {
                let value = self.put_expr(value)?;
                self.put_cast(target, value)
            }
            Expr::Fma { a, b, c } => {
                let a = self.put_expr(a)?;
                let b = self.put_expr(b)?;
                let c = self.put_expr(c)?;
                let (a, b, c) = (
                    self.float_operand(a),
                    self.float_operand(b),
                    self.float_operand(c),
                );
                if [a.kind, b.kind, c.kind] != [ValKind::F32; 3] {
                    return Err(CodegenError::unsupported(
                        "Expr::Fma on non-f32 operands",
                        "fma is lowered for f32 operands only",
                        "Cast the operands to f32",
                    ));
                }
                let reg = self.w.reg(RegClass::F32);
                emit!(self.w, "fma.rn.f32 {reg}, {}, {}, {}", a.reg, b.reg, c.reg);
                Ok(Val {
                    kind: ValKind::F32,
                    reg: self.flush_subnormal(reg),
                })
            }
            Expr::Atomic { .. } => self.put_atomic(expr, true),
            Expr::Call { op_id, .. } => Err(CodegenError::unsupported(
                format!("Expr::Call({op_id})"),
                "calls are not inlined by vyre-cuda yet",
                "inline the call with vyre_foundation::ir::inline_calls before dispatch",
            )),
            Expr::SubgroupBallot { .. }
            | Expr::SubgroupShuffle { .. }
            | Expr::SubgroupReduce { .. }
                if self.hoisted.contains_key(&(expr as *const Expr)) =>
            {
                Ok(self.hoisted[&(expr as *const Expr)])
            }
            Expr::SubgroupBallot { cond } => {
                let cond = self.put_expr(cond)?;
                let p = self.truthy(cond);
                let reg = self.b32();
                emit!(
                    self.w,
                    "vote.sync.ballot.b32 {reg}, {p}, {}",
                    self.subgroup_mask
                );
                Ok(Val {
                    kind: ValKind::U32,
                    reg,
                })
            }
            Expr::SubgroupShuffle { value, lane } => {
                let value = self.put_expr(value)?;
                let lane = self.put_expr(lane)?;
                self.put_shuffle(value, lane)
            }
            Expr::SubgroupReduce { op, value } => {
                let value = self.put_expr(value)?;
                self.put_subgroup_reduce(*op, value)
            }
            Expr::SubgroupLocalId | Expr::SubgroupSize => {
                self.fault_always(DeviceFault::RejectedByReference);
                Ok(self.lit_b32(ValKind::U32, 0))
            }
            Expr::Opaque(ext) => Err(CodegenError::unsupported(
                format!("Expr::Opaque({})", ext.extension_kind()),
                "opaque expression extensions have no PTX lowering",
                "lower the extension to core IR before dispatch",
            )),
            _ => Err(CodegenError::unsupported(
                "an unknown Expr variant",
                "this vyre IR expression is newer than vyre-cuda",
                "upgrade vyre-cuda",
            )),
        }
    }

    fn put_load(&mut self, buffer: &str, index: Reg) -> Result<Val, CodegenError> {
        let slot = self.slot(buffer)?;
        if slot.element == DataType::Bytes {
            return Err(bytes::runtime_sized_use(&format!("a load from `{buffer}`")));
        }
        let Some(kind) = ValKind::of_load(&slot.element) else {
            return Err(CodegenError::unsupported(
                format!("Load from a {} buffer", slot.element),
                "element type not lowered",
                "use a supported element type",
            ));
        };
        if let Some(word) = self.lane_load(buffer, index) {
            return Ok(self.word_value(kind, word));
        }
        let (in_bounds, addr) = self.element_address(&slot, index);
        let space = slot.space.state_space();
        let reg = self.w.reg(kind.reg_class());
        if slot.stride == 16 {
            let hi = self.w.reg(RegClass::B64);
            emit!(self.w, "mov.u64 {reg}, 0");
            emit!(self.w, "mov.u64 {hi}, 0");
            emit!(
                self.w,
                "@{in_bounds} ld.{space}.v2.u64 {{{reg}, {hi}}}, [{addr}]"
            );
            self.wide_hi.insert(reg, hi);
            return Ok(Val { kind, reg });
        }
        let (width, zero) = match (slot.stride, kind) {
            (_, ValKind::F32) => ("f32", "0f00000000"),
            (_, ValKind::F64) => ("f64", "0d0000000000000000"),
            (1, _) => ("u8", "0"),
            (2, _) => ("u16", "0"),
            (4, _) => ("u32", "0"),
            _ => ("u64", "0"),
        };
        // Out-of-bounds loads read the typed zero, never another element.
        emit!(self.w, "mov.{} {reg}, {zero}", sel_type(reg));
        emit!(self.w, "@{in_bounds} ld.{space}.{width} {reg}, [{addr}]");
        let reg = if kind == ValKind::F32 {
            self.flush_subnormal(reg)
        } else {
            reg
        };
        Ok(Val { kind, reg })
    }

    /// A buffer's byte base and byte length (`.b64`).
    pub(crate) fn byte_range_of(&mut self, buffer: &str) -> Result<(ByteBase, Reg), CodegenError> {
        let slot = self.slot(buffer)?;
        let bytes = self.w.reg(RegClass::B64);
        Ok(match slot.space {
            Space::Global { base, len } => {
                emit!(self.w, "mul.wide.u32 {bytes}, {len}, {}", slot.stride);
                (ByteBase::Global(base), bytes)
            }
            Space::Shared { offset, count } => {
                emit!(
                    self.w,
                    "mov.u64 {bytes}, {}",
                    u64::from(count) * u64::from(slot.stride)
                );
                (ByteBase::Shared(offset), bytes)
            }
        })
    }

    /// `@p ld/st.u8` of `byte` at byte `at` of a buffer.
    pub(crate) fn byte_access(&mut self, p: Reg, base: ByteBase, at: Reg, byte: Reg, store: bool) {
        match base {
            ByteBase::Global(base) => {
                let addr = self.w.reg(RegClass::B64);
                emit!(self.w, "add.s64 {addr}, {base}, {at}");
                if store {
                    emit!(self.w, "@{p} st.global.u8 [{addr}], {byte}");
                } else {
                    emit!(self.w, "@{p} ld.global.u8 {byte}, [{addr}]");
                }
            }
            ByteBase::Shared(offset) => {
                let addr = self.w.reg(RegClass::B32);
                emit!(self.w, "cvt.u32.u64 {addr}, {at}");
                emit!(self.w, "add.u32 {addr}, {addr}, {}", self.shared_base);
                emit!(self.w, "add.u32 {addr}, {addr}, {offset}");
                if store {
                    emit!(self.w, "@{p} st.shared.u8 [{addr}], {byte}");
                } else {
                    emit!(self.w, "@{p} ld.shared.u8 {byte}, [{addr}]");
                }
            }
        }
    }

    /// `(in-bounds predicate, address register)` for `slot[index]`.
    fn element_address(&mut self, slot: &BufferSlot, index: Reg) -> (Reg, Reg) {
        let p = self.w.reg(RegClass::Pred);
        match slot.space {
            Space::Global { base, len } => {
                emit!(self.w, "setp.lt.u32 {p}, {index}, {len}");
                let offset = self.w.reg(RegClass::B64);
                emit!(self.w, "mul.wide.u32 {offset}, {index}, {}", slot.stride);
                let addr = self.w.reg(RegClass::B64);
                emit!(self.w, "add.s64 {addr}, {base}, {offset}");
                (p, addr)
            }
            Space::Shared { offset, count } => {
                emit!(self.w, "setp.lt.u32 {p}, {index}, {count}");
                let addr = self.w.reg(RegClass::B32);
                emit!(
                    self.w,
                    "mad.lo.u32 {addr}, {index}, {}, {}",
                    slot.stride,
                    self.shared_base
                );
                if offset != 0 {
                    emit!(self.w, "add.u32 {addr}, {addr}, {offset}");
                }
                (p, addr)
            }
        }
    }

    fn id_axis(&mut self, axis: u8, pick: impl Fn(&Ids) -> &[Reg; 3]) -> Result<Val, CodegenError> {
        let Some(reg) = pick(&self.ids).get(axis as usize).copied() else {
            return Err(CodegenError::invalid(
                format!("invocation/workgroup ID axis {axis} out of range"),
                "use axis 0, 1, or 2",
            ));
        };
        Ok(Val {
            kind: ValKind::U32,
            reg,
        })
    }

    /// Lower `atomic` (an `Expr::Atomic`); `result_used` is false when nobody reads the
    /// old value, which allows a (warp- or workgroup-aggregated) `red`.
    fn put_atomic(&mut self, atomic: &'p Expr, result_used: bool) -> Result<Val, CodegenError> {
        let Expr::Atomic {
            op,
            buffer,
            index,
            expected,
            value,
            ordering,
        } = atomic
        else {
            return Err(CodegenError::invalid(
                "put_atomic called on a non-atomic expression",
                "report this vyre-cuda bug",
            ));
        };
        let (op, buffer, index, expected, value, ordering) = (
            *op,
            buffer.as_str(),
            &**index,
            expected.as_deref(),
            &**value,
            *ordering,
        );
        let opcode = match (commutative_opcode(op), op) {
            (Some(opcode), _) => opcode,
            (None, AtomicOp::Exchange) => "exch.b32",
            (None, AtomicOp::CompareExchange) => "cas.b32",
            (None, other) => {
                return Err(CodegenError::unsupported(
                    format!("AtomicOp::{other:?}"),
                    "the reference defines no semantics for this atomic",
                    "use Add, Or, And, Xor, Min, Max, Exchange, CompareExchange or LruUpdate",
                ))
            }
        };
        match (op, expected.is_some()) {
            (AtomicOp::CompareExchange, false) => {
                return Err(CodegenError::invalid(
                    "compare-exchange atomic is missing its expected value",
                    "set Expr::Atomic.expected for AtomicOp::CompareExchange",
                ))
            }
            (AtomicOp::CompareExchange, true) | (_, false) => {}
            (_, true) => {
                return Err(CodegenError::invalid(
                    "non-compare-exchange atomic includes an expected value",
                    "use Expr::Atomic.expected only with AtomicOp::CompareExchange",
                ))
            }
        }
        let slot = self.slot(buffer)?;
        let Space::Global { base, len } = slot.space else {
            return Err(CodegenError::invalid(
                format!("atomic target `{buffer}` is workgroup memory"),
                "atomics only support ReadWrite storage buffers",
            ));
        };
        if !slot.storage || slot.stride != 4 {
            return Err(CodegenError::unsupported(
                format!("atomic on a {} buffer", slot.element),
                "atomics are lowered for 4-byte storage elements",
                "use a u32 storage buffer",
            ));
        }
        let literal_index = match index {
            Expr::LitU32(index) => Some(*index),
            _ => None,
        };
        let index = self.put_index(index)?;
        let expected = match expected {
            Some(expr) => {
                let v = self.put_expr(expr)?;
                Some(self.u32_checked(v, DeviceFault::AtomicOperandNotU32)?)
            }
            None => None,
        };
        let value = self.put_expr(value)?;
        let value = self.u32_checked(value, DeviceFault::AtomicOperandNotU32)?;
        let slot = BufferSlot {
            space: Space::Global { base, len },
            ..slot
        };
        let (in_bounds, addr) = self.element_address(&slot, index);
        let old = self.w.reg(RegClass::B32);
        // An out-of-bounds atomic returns 0 and writes nothing.
        emit!(self.w, "mov.u32 {old}, 0");
        if let Some(opcode) = commutative_opcode(op).filter(|_| !result_used) {
            let partial = literal_index
                .filter(|_| self.partial_buffers.contains(buffer))
                .map(|index| self.partial_slot(buffer, index, opcode));
            let discarded = DiscardedAtomic {
                opcode,
                index,
                literal_index: literal_index.is_some(),
                value,
                in_bounds,
                addr,
                partial,
            };
            self.put_reduction(discarded);
            return Ok(Val {
                kind: ValKind::U32,
                reg: old,
            });
        }
        let sem = match ordering {
            MemoryOrdering::Relaxed => "relaxed",
            MemoryOrdering::Acquire => "acquire",
            MemoryOrdering::Release => "release",
            _ => "acq_rel",
        };
        match expected {
            Some(expected) => emit!(
                self.w,
                "@{in_bounds} atom.{sem}.gpu.global.{opcode} {old}, [{addr}], {expected}, {value}"
            ),
            None => emit!(
                self.w,
                "@{in_bounds} atom.{sem}.gpu.global.{opcode} {old}, [{addr}], {value}"
            ),
        }
        Ok(Val {
            kind: ValKind::U32,
            reg: old,
        })
    }

    // ---------------------------------------------------------------- helpers

    fn slot(&self, buffer: &str) -> Result<BufferSlot, CodegenError> {
        self.buffers.get(buffer).cloned().ok_or_else(|| {
            CodegenError::invalid(
                format!("missing buffer `{buffer}`"),
                "declare every buffer the program reads or writes",
            )
        })
    }

    pub(crate) fn mov(&mut self, dst: Reg, src: Reg) {
        emit!(self.w, "mov.{} {dst}, {src}", sel_type(dst));
    }

    pub(crate) fn lit_b32(&mut self, kind: ValKind, bits: u32) -> Val {
        let reg = self.imm_b32(bits);
        Val { kind, reg }
    }

    pub(crate) fn imm_b32(&mut self, bits: u32) -> Reg {
        let reg = self.w.reg(RegClass::B32);
        emit!(self.w, "mov.b32 {reg}, {bits}");
        reg
    }

    pub(crate) fn b32(&mut self) -> Reg {
        self.w.reg(RegClass::B32)
    }

    pub(crate) fn pred(&mut self) -> Reg {
        self.w.reg(RegClass::Pred)
    }

    pub(crate) fn reg(&mut self, class: RegClass) -> Reg {
        self.w.reg(class)
    }

    pub(crate) fn writer(&mut self) -> &mut PtxWriter {
        &mut self.w
    }

    /// Record `fault` in the fault word when `p` holds (the first fault of a dispatch
    /// wins) and carry on: the dispatch fails, so what the lane computes afterwards is
    /// discarded, and callers substitute safe operands. Recording inline instead of
    /// branching to exit blocks also keeps clear of a ptxas 13.0 sm_90 miscompile that
    /// merged such blocks into a wrongly predicated `EXIT`.
    pub(crate) fn fault_if(&mut self, p: Reg, fault: DeviceFault) {
        self.uses_fault_word = true;
        let scratch = self.w.reg(RegClass::B32);
        emit!(
            self.w,
            "@{p} atom.global.cas.b32 {scratch}, [{}], 0, {}",
            self.fault_ptr,
            fault.code()
        );
        emit!(self.w, "or.pred {0}, {0}, {p}", self.faulted);
    }

    /// Record `fault` and end the invocation when `p` holds. Only for predicates uniform
    /// across the workgroup, so no lane is left waiting at a later barrier.
    pub(crate) fn fault_exit_if(&mut self, p: Reg, fault: DeviceFault) {
        self.uses_fault_word = true;
        let label = match self.exit_faults.iter().find(|(f, _)| *f == fault) {
            Some((_, label)) => *label,
            None => {
                let label = self.w.label();
                self.exit_faults.push((fault, label));
                label
            }
        };
        let p = self.branch_pred(p);
        emit!(self.w, "@{p} bra {label}");
    }

    /// The eight little-endian bytes of a `Value::Float` (an f64), as a `.b64` register:
    /// an f32 value widens exactly (its NaN to the canonical f64 NaN), an f64 value keeps
    /// its bits.
    pub(crate) fn float_bytes(&mut self, value: Val) -> Reg {
        let wide = self.w.reg(RegClass::B64);
        if value.kind == ValKind::F64 {
            emit!(self.w, "mov.b64 {wide}, {}", value.reg);
            return wide;
        }
        let d = self.w.reg(RegClass::F64);
        emit!(self.w, "cvt.f64.f32 {d}, {}", value.reg);
        emit!(self.w, "mov.b64 {wide}, {d}");
        let nan = self.w.reg(RegClass::Pred);
        emit!(self.w, "testp.notanumber.f32 {nan}, {}", value.reg);
        emit!(self.w, "selp.b64 {wide}, 0x7FF8000000000000, {wide}, {nan}");
        wide
    }

    /// A float operand as the reference's f32 operators see it: an f64 value is rounded
    /// to f32 (`as f32`) and canonicalised.
    pub(crate) fn float_operand(&mut self, value: Val) -> Val {
        if value.kind != ValKind::F64 {
            return value;
        }
        let f = self.w.reg(RegClass::F32);
        emit!(self.w, "cvt.rn.f32.f64 {f}, {}", value.reg);
        Val {
            kind: ValKind::F32,
            reg: self.flush_subnormal(f),
        }
    }

    /// Bytes 8..16 of a value as a `.b64` register: the tracked high half of a 16-byte
    /// value, zero for anything shorter.
    pub(crate) fn high_half(&mut self, value: Val) -> Reg {
        if value.kind == ValKind::Bytes(16) {
            if let Some(hi) = self.wide_hi.get(&value.reg) {
                return *hi;
            }
        }
        let zero = self.w.reg(RegClass::B64);
        emit!(self.w, "mov.u64 {zero}, 0");
        zero
    }

    /// Record `hi` as the high half of the 16-byte value whose low half is `lo`.
    pub(crate) fn set_high_half(&mut self, lo: Reg, hi: Reg) {
        self.wide_hi.insert(lo, hi);
    }

    /// An f32 constant ptxas cannot fold (see `opaque_zero`).
    pub(crate) fn f32_const(&mut self, bits: u32) -> Reg {
        let raw = self.w.reg(RegClass::B32);
        emit!(self.w, "or.b32 {raw}, {}, {bits}", self.opaque_zero);
        let f = self.w.reg(RegClass::F32);
        emit!(self.w, "mov.b32 {f}, {raw}");
        f
    }

    /// `r` passed through the opaque zero, so ptxas cannot fuse what produced it into the
    /// instruction that consumes it.
    pub(crate) fn opaque(&mut self, r: Reg) -> Reg {
        let out = self.w.reg(r.class());
        match r.class() {
            RegClass::B64 => {
                let wide = self.w.reg(RegClass::B64);
                emit!(self.w, "cvt.u64.u32 {wide}, {}", self.opaque_zero);
                emit!(self.w, "or.b64 {out}, {r}, {wide}");
            }
            _ => emit!(self.w, "or.b32 {out}, {r}, {}", self.opaque_zero),
        }
        out
    }

    /// The predicate a branch or loop test steers by: `p` itself, or, in a program that
    /// calls libm `.func`s, `p` xor a predicate that is false at run time but that ptxas
    /// cannot evaluate, so it cannot prove the branch constant.
    ///
    /// ptxas 12.9, 13.0 and 13.5 (-O2 and -O3, sm_80 and sm_90) crash with SIGSEGV, and
    /// the driver's JIT with them inside the caller's process, when code they prove dead
    /// by constant folding holds a loop calling a `.func` that itself loops with two exits
    /// (`vyre_libm_rem_pio2f`, behind Sin, Cos and Tan): a branch folded to never-taken
    /// around it (`../shared/regressions/ptxas-crash-1`, reduced in
    /// `tests/fuzz_regressions/cpu-ptxas-crash-1-*.case`), a loop whose test folds to
    /// done, or a certain fault that makes later loops exit at once
    /// (`cpu-ptxas-crash-2-*.case`). The PTX is legal; the compiler's removal of such dead
    /// regions is not. So no branch or loop test of such a program is foldable: the
    /// region stays (and never runs), for two instructions per test and no unrolling of
    /// constant-trip loops in kernels that call libm anyway.
    ///
    /// The hidden predicate is `opaque zero == 16`, not `!= 0`: inside a branch steered by
    /// `opaque zero != 0` ptxas would learn the opaque zero's value and fold every
    /// operand guarded by it, bringing back the miscompiles it exists to prevent (found:
    /// `not.b32` of a proven zero folded to 0, `gpu-mismatch-97b6641b948d4a05.case`).
    /// Learning `!= 16` on the path that runs tells ptxas nothing it can fold with; the
    /// path that learns `== 16` never runs.
    pub(crate) fn branch_pred(&mut self, p: Reg) -> Reg {
        if !self.guard_branches {
            return p;
        }
        let never = self.pred();
        emit!(self.w, "setp.eq.u32 {never}, {}, 16", self.opaque_zero);
        let out = self.pred();
        emit!(self.w, "xor.pred {out}, {p}, {never}");
        out
    }

    /// `p ? 0 : r`: the safe operand substituted after a recorded fault.
    pub(crate) fn zero_if(&mut self, p: Reg, r: Reg) -> Reg {
        let out = self.w.reg(r.class());
        emit!(self.w, "selp.{} {out}, 0, {r}, {p}", sel_type(r));
        out
    }

    /// Record `fault` unconditionally (the reference always errors here).
    pub(crate) fn fault_always(&mut self, fault: DeviceFault) {
        let p = self.pred();
        emit!(self.w, "setp.eq.u32 {p}, 0, 0");
        self.fault_if(p, fault);
    }

    /// Predicate that is true when the reference's `truthy()` holds for `value`.
    pub(crate) fn truthy(&mut self, value: Val) -> Reg {
        let p = self.pred();
        match value.kind {
            ValKind::F32 => emit!(self.w, "setp.neu.f32 {p}, {}, 0f00000000", value.reg),
            ValKind::F64 => emit!(
                self.w,
                "setp.neu.f64 {p}, {}, 0d0000000000000000",
                value.reg
            ),
            ValKind::U64 => emit!(self.w, "setp.ne.u64 {p}, {}, 0", value.reg),
            // A raw value wider than 4 bytes has no u32 reading, which the reference
            // treats as true.
            ValKind::Bytes(width) if width > 4 => emit!(self.w, "setp.eq.u32 {p}, 0, 0"),
            _ => emit!(self.w, "setp.ne.u32 {p}, {}, 0", value.reg),
        }
        p
    }

    fn put_index(&mut self, index: &'p Expr) -> Result<Reg, CodegenError> {
        let value = self.put_expr(index)?;
        self.u32_checked(value, DeviceFault::IndexNotU32)
    }

    /// The reference's `try_as_u32`, raising `fault` where it yields `None`.
    pub(crate) fn u32_checked(
        &mut self,
        value: Val,
        fault: DeviceFault,
    ) -> Result<Reg, CodegenError> {
        Ok(match value.kind {
            ValKind::U32 | ValKind::Bool => value.reg,
            ValKind::Bytes(width) if width <= 4 => value.reg,
            ValKind::I32 => {
                let p = self.pred();
                emit!(self.w, "setp.lt.s32 {p}, {}, 0", value.reg);
                self.fault_if(p, fault);
                self.zero_if(p, value.reg)
            }
            ValKind::Bytes(_) => {
                // More than four raw bytes never read as a u32 in the reference.
                self.fault_always(fault);
                self.imm_b32(0)
            }
            ValKind::F64 => {
                // Finite, >= 0 and <= u32::MAX (in f64), then truncated.
                let (ok, small) = (self.pred(), self.pred());
                emit!(
                    self.w,
                    "setp.ge.f64 {ok}, {}, 0d0000000000000000",
                    value.reg
                );
                emit!(
                    self.w,
                    "setp.le.f64 {small}, {}, 0d41EFFFFFFFE00000",
                    value.reg
                );
                emit!(self.w, "and.pred {ok}, {ok}, {small}");
                let bad = self.pred();
                emit!(self.w, "not.pred {bad}, {ok}");
                self.fault_if(bad, fault);
                let r = self.b32();
                emit!(self.w, "cvt.rzi.u32.f64 {r}, {}", value.reg);
                self.zero_if(bad, r)
            }
            ValKind::U64 => {
                let p = self.pred();
                emit!(self.w, "setp.gt.u64 {p}, {}, 4294967295", value.reg);
                self.fault_if(p, fault);
                let r = self.b32();
                emit!(self.w, "cvt.u32.u64 {r}, {}", value.reg);
                self.zero_if(p, r)
            }
            ValKind::F32 => {
                // Finite, >= 0 and <= u32::MAX, then truncated.
                let (ok, too_big) = (self.pred(), self.pred());
                emit!(self.w, "setp.ge.f32 {ok}, {}, 0f00000000", value.reg);
                emit!(self.w, "setp.lt.f32 {too_big}, {}, 0f4F800000", value.reg);
                emit!(self.w, "and.pred {ok}, {ok}, {too_big}");
                let bad = self.pred();
                emit!(self.w, "not.pred {bad}, {ok}");
                self.fault_if(bad, fault);
                let r = self.b32();
                emit!(self.w, "cvt.rzi.u32.f32 {r}, {}", value.reg);
                self.zero_if(bad, r)
            }
        })
    }

    /// `f(a)` through the bit-exact libm port, as the reference's `canonical_*` wrappers
    /// compute it (the result is flushed like every f32 result).
    pub(crate) fn call_libm(&mut self, f: Libm, a: Reg) -> Reg {
        self.libm_used.insert(f);
        let d = self.w.reg(RegClass::F32);
        self.w.open_scope();
        emit!(self.w, ".param .f32 vyre_arg");
        emit!(self.w, ".param .f32 vyre_ret");
        emit!(self.w, "st.param.f32 [vyre_arg], {a}");
        emit!(self.w, "call (vyre_ret), {}, (vyre_arg)", f.symbol());
        emit!(self.w, "ld.param.f32 {d}, [vyre_ret]");
        self.w.close_scope();
        self.flush_subnormal(d)
    }

    /// Flush a subnormal f32 to a zero of the same sign (the reference's canonical form).
    /// `x + -0.0` with `.ftz` is exact for every other input, including ±0 and infinities.
    pub(crate) fn flush_subnormal(&mut self, f: Reg) -> Reg {
        let minus_zero = self.f32_const(0x8000_0000);
        let out = self.w.reg(RegClass::F32);
        emit!(self.w, "add.rn.ftz.f32 {out}, {f}, {minus_zero}");
        out
    }

    /// The bits the reference stores for a float register: NaN becomes `0x7FC00000`.
    pub(crate) fn canonical_f32_bits(&mut self, f: Reg) -> Reg {
        let bits = self.b32();
        emit!(self.w, "mov.b32 {bits}, {f}");
        let nan = self.pred();
        emit!(self.w, "testp.notanumber.f32 {nan}, {f}");
        emit!(self.w, "selp.b32 {bits}, 0x7FC00000, {bits}, {nan}");
        bits
    }
}

/// Output of [`Lowerer::lower_entry`].
pub(crate) struct LoweredBody {
    /// Libm ports the entry calls (their `.func`s are emitted once per module).
    pub(crate) libm_used: BTreeSet<Libm>,
    pub(crate) decls: String,
    pub(crate) prologue: String,
    pub(crate) body: String,
    pub(crate) fault_word: bool,
}

/// `selp`/`mov` type suffix for a register.
pub(crate) fn sel_type(reg: Reg) -> &'static str {
    reg.class().ty()
}

/// The reference canonicalises every f32 literal: NaN to `0x7FC00000`, subnormals to ±0.
pub(crate) fn canonical_f32_bits_host(value: f32) -> u32 {
    if value.is_nan() {
        0x7FC0_0000
    } else if value.is_subnormal() {
        value.to_bits() & 0x8000_0000
    } else {
        value.to_bits()
    }
}

fn unsupported_node(name: &str) -> CodegenError {
    CodegenError::unsupported(
        name,
        "this statement is not lowered by vyre-cuda yet",
        "remove it or lower it to core IR before dispatch",
    )
}

/// Whether `nodes` call a libm `.func` anywhere (see [`Lowerer::branch_pred`]).
fn calls_libm(nodes: &[Node]) -> bool {
    any_expr_in(
        nodes,
        &|e| matches!(e, Expr::UnOp { op, .. } if Libm::for_unop(op).is_some()),
    )
}
