//! An entry's frame around the lowered body: the prologue (parameters, invocation ids,
//! subgroup masks, zeroed workgroup memory, partials), the epilogue that applies
//! per-workgroup partials, and the out-of-line fault blocks.

use super::reduction::{Partial, PARTIALS};
use super::{LoweredBody, Lowerer, Segment};
use crate::codegen::abi::KernelParam;
use crate::codegen::analysis::lockstep;
use crate::codegen::analysis::replicated::Replication;
use crate::codegen::clock::{self, EndRegs, CLOCK_END};
use crate::codegen::module::{STORE_SINK, ZERO_PAGE};
use crate::codegen::writer::{emit, PtxWriter, Reg, RegClass};
use crate::codegen::CodegenError;
use rustc_hash::FxHashMap;

impl<'p> Lowerer<'p> {
    /// End every invocation by branching to `label` instead of exiting (the cooperative
    /// entry's segments: a thread that exits would never reach the next grid barrier).
    pub(crate) fn ending_at(mut self, label: String) -> Self {
        self.segment_end = Some(label);
        self
    }

    /// Stamp the clock into the fault area (`crate::codegen::clock`) when `timed`, unless
    /// the entry is a cooperative entry's segment ([`Self::ending_at`]; that entry stamps
    /// around all of its segments).
    pub(crate) fn stamping_clock(mut self, timed: bool) -> Self {
        self.clock = timed;
        self
    }

    /// Read buffers at literal indices without a bounds check, recording the elements each
    /// must hold (`KernelBinding::literal_extent`), when `trusting`.
    pub(crate) fn trusting_literal_extents(mut self, trusting: bool) -> Self {
        self.literal_extents = trusting.then(FxHashMap::default);
        self
    }

    /// Whether this entry stamps the clock itself.
    fn stamps_clock(&self) -> bool {
        self.clock && self.segment_end.is_none()
    }

    /// End this invocation's body (`Return`): through the epilogue that flushes
    /// per-workgroup atomic partials when there is one (every lane must reach its barrier),
    /// else straight out.
    pub(super) fn end_invocation(&mut self) {
        match self.epilogue {
            Some(epilogue) => emit!(self.w, "bra {epilogue}"),
            None => self.exit_kernel(),
        }
    }

    /// Leave the kernel (or, in a cooperative entry, the segment: a thread that exits would
    /// never reach the next grid barrier; in a timed entry, through the clock's end block).
    pub(super) fn exit_kernel(&mut self) {
        if let Some(head) = self.view_blocks {
            self.heap_free_list(head);
        }
        match &self.segment_end {
            Some(label) => emit!(self.w, "bra {label}"),
            None if self.clock => emit!(self.w, "bra {CLOCK_END}"),
            None => emit!(self.w, "exit"),
        }
    }

    /// The workgroup barrier instruction of this entry's body. Where a lane that leaves
    /// the body exits, every live lane of a warp reaches each barrier at the same
    /// instruction (barriers sit in uniform control flow, and divergent branches holding
    /// one are checked first), so the `.aligned` form (`bar`) holds, as CUDA's
    /// `__syncthreads` does. The non-`.aligned` form hangs the GPU there: ptxas 13.0 gives
    /// it a divergent-warp fallback that deadlocks with a later warp-synchronous operation
    /// (`tests/fuzz_regressions/gpu-hang-4f2d46484763c667-shrunk.case`). In a cooperative
    /// entry a leaving lane waits at its segment's end barrier instead, so warp-mates may
    /// wait at different barrier instructions, which only the non-`.aligned` form allows;
    /// timed entries (whose lanes leave through the clock's end block) keep it as well,
    /// not yet run with the other.
    pub(super) fn cta_barrier(&self) -> &'static str {
        if self.segment_end.is_none() && !self.clock {
            "bar"
        } else {
            "barrier"
        }
    }

    pub(crate) fn lower_entry(
        mut self,
        segment: &Segment<'p>,
    ) -> Result<LoweredBody, CodegenError> {
        match (segment.steps, segment.replication) {
            (Some(plan), _) => {
                self.plan_async_copies(segment.nodes)?;
                self.put_step_machine(segment.nodes, plan)?;
            }
            (None, Replication::Parallel) => {
                if lockstep::keeps_returned_lanes(segment.nodes, &self.facts.uniformity) {
                    self.keeps_returned_lanes();
                }
                self.plan_async_copies(segment.nodes)?;
                self.put_block(segment.nodes)?;
                self.fault_pending_copies();
            }
            (None, Replication::Once) => self.put_once(segment.nodes)?,
            (None, Replication::Serial) => self.put_reference_schedule(segment.nodes)?,
        }
        self.finish_entry()
    }

    /// Close the entry: the epilogue (per-workgroup atomic partials; such programs have no
    /// barriers, so never segments or a vector entry), the final exit, the out-of-line
    /// fault blocks, the clock's end block, the prologue.
    pub(super) fn finish_entry(mut self) -> Result<LoweredBody, CodegenError> {
        self.put_epilogue()?;
        self.exit_kernel();
        for (fault, label) in std::mem::take(&mut self.exit_faults) {
            self.w.put_label(label);
            self.write_fault("", fault);
            self.free_heap_snapshots();
            self.exit_kernel();
        }
        let clocked = self.stamps_clock();
        if clocked {
            self.put_clock_end();
        }
        let fault_word = self.uses_fault_word;
        let prologue = self.prologue(fault_word || clocked, clocked);
        let mut decls = self.w.register_decls();
        decls.push_str(&self.async_decls());
        if clocked {
            decls.push_str(clock::ARRIVED_DECL);
        }
        if !self.partials.is_empty() {
            decls.push_str(&format!(
                "\t.shared .align 4 .b32 {PARTIALS}[{}];\n",
                self.partials.len()
            ));
        }
        let to_learn = self.take_learned();
        Ok(LoweredBody {
            to_learn,
            libm_used: std::mem::take(&mut self.libm_used),
            decls,
            prologue,
            body: self.w.into_body(),
            fault_word,
            literal_extents: self
                .literal_extents
                .take()
                .map(|extents| extents.into_iter().collect())
                .unwrap_or_default(),
        })
    }

    /// The prologue, written last: only then is it known whether a fault word is used.
    /// Its scratch registers still come from the body's writer, so they are declared.
    /// `clocked`: stamp the block's start (the barrier ending the prologue orders it
    /// before any invocation reaches the end block).
    fn prologue(&mut self, fault_word: bool, clocked: bool) -> String {
        let mut p = PtxWriter::default();
        self.load_params(&mut p, fault_word);
        p.put_zero(self.faulted);
        if let Some(head) = self.view_blocks {
            p.put_zero(head);
        }
        for &reg in &self.anchored {
            p.put_zero(reg);
        }
        emit!(p, "mov.u32 {}, %dynamic_smem_size", self.opaque_zero);
        if let Some(zero) = self.zero_page {
            emit!(p, "mov.u64 {zero}, {ZERO_PAGE}");
            emit!(p, "cvta.to.global.u64 {zero}, {zero}");
        }
        if let Some(sink) = self.store_sink {
            emit!(p, "mov.u64 {sink}, {STORE_SINK}");
            emit!(p, "cvta.to.global.u64 {sink}, {sink}");
        }
        self.compute_ids(&mut p);
        self.compute_subgroup(&mut p);
        if clocked {
            // The block's first invocation stamps, unless the area is null (a kernel that
            // writes its area only for the stamps may be launched without one).
            let (leader, time) = (self.w.reg(RegClass::Pred), self.w.reg(RegClass::B64));
            emit!(p, "setp.eq.u32 {leader}, {}, 0", self.ids.linear_local);
            emit!(
                p,
                "setp.ne.and.u64 {leader}, {}, 0, {leader}",
                self.fault_ptr
            );
            clock::put_start(&mut p, leader, self.fault_ptr, time);
        }
        self.init_returned(&mut p);
        if !self.shared.is_empty() {
            self.zero_shared(&mut p);
        }
        if !self.partials.is_empty() {
            self.init_partials(&mut p);
        }
        // Zeroing workgroup memory and partials ends with a barrier already.
        if clocked && self.shared.is_empty() && self.partials.is_empty() {
            emit!(p, "{}.sync 0", self.cta_barrier());
        }
        p.into_body()
    }

    /// The registers the prologue writes that the body allocated on first use: a step
    /// machine, which writes every register allocated inside it before its first round,
    /// leaves these alone. Keep in step with [`Lowerer::prologue`].
    pub(super) fn lazy_prologue_regs(&self) -> Vec<Reg> {
        let mut regs = self.returned_prologue_regs();
        regs.extend(self.zero_page);
        regs.extend(self.store_sink);
        regs.extend(&self.anchored);
        regs
    }

    /// The clock's end block, where every invocation of a timed entry ends.
    fn put_clock_end(&mut self) {
        let regs = EndRegs {
            words: [(); 3].map(|()| self.w.reg(RegClass::B32)),
            pred: self.w.reg(RegClass::Pred),
            time: self.w.reg(RegClass::B64),
        };
        let threads = self.workgroup_size.iter().product();
        self.w.put_named_label(CLOCK_END);
        // A null area: no stamps (nor a zeroed arrival count to add to).
        emit!(self.w, "setp.eq.u64 {}, {}, 0", regs.pred, self.fault_ptr);
        emit!(self.w, "@{} exit", regs.pred);
        clock::put_end(&mut self.w, threads, self.fault_ptr, &regs, "exit");
    }

    fn load_params(&self, p: &mut PtxWriter, fault_word: bool) {
        for (index, regs) in self.binding_regs.iter().enumerate() {
            let (pointer, count) = (KernelParam::Pointer(index), KernelParam::Count(index));
            let (base, len) = (regs.base, regs.len);
            emit!(p, "ld.param.u64 {base}, [{}]", pointer.name());
            emit!(p, "cvta.to.global.u64 {base}, {base}");
            match regs.counted {
                // Two counted elements to every addressed one (`kind::nibble_vector`).
                Some(counted) => {
                    emit!(p, "ld.param.u32 {counted}, [{}]", count.name());
                    emit!(p, "shr.u32 {len}, {counted}, 1");
                }
                None => emit!(p, "ld.param.u32 {len}, [{}]", count.name()),
            }
        }
        if fault_word {
            let fault = KernelParam::FaultArea.name();
            emit!(p, "ld.param.u64 {}, [{fault}]", self.fault_ptr);
            emit!(p, "cvta.to.global.u64 {0}, {0}", self.fault_ptr);
        }
    }

    /// Local, workgroup and global ids per axis, and the linear local index.
    fn compute_ids(&self, p: &mut PtxWriter) {
        let ids = &self.ids;
        for (axis, name) in ["x", "y", "z"].into_iter().enumerate() {
            let (l, g, gl) = (ids.local[axis], ids.group[axis], ids.global[axis]);
            let size = self.workgroup_size[axis];
            emit!(p, "mov.u32 {l}, %tid.{name}");
            emit!(p, "mov.u32 {g}, %ctaid.{name}");
            emit!(p, "mad.lo.u32 {gl}, {g}, {size}, {l}");
        }
        let ([wx, wy, _], [x, y, z]) = (self.workgroup_size, ids.local);
        let lin = ids.linear_local;
        emit!(p, "mad.lo.u32 {lin}, {z}, {wy}, {y}");
        emit!(p, "mad.lo.u32 {lin}, {lin}, {wx}, {x}");
    }

    /// Subgroups are 32-lane chunks of the linear local index (as hardware warps are);
    /// the last one is short when the workgroup is not a multiple of 32.
    fn compute_subgroup(&self, p: &mut PtxWriter) {
        let lin = self.ids.linear_local;
        let (lanes, mask) = (self.subgroup_lanes, self.subgroup_mask);
        let threads: u32 = self.workgroup_size.iter().product();
        emit!(p, "and.b32 {lanes}, {lin}, -32");
        emit!(p, "sub.u32 {lanes}, {threads}, {lanes}");
        emit!(p, "min.u32 {lanes}, {lanes}, 32");
        // shl by 32 yields 0 in PTX, so a full subgroup gets 0xFFFFFFFF.
        emit!(p, "shl.b32 {mask}, 1, {lanes}");
        emit!(p, "sub.u32 {mask}, {mask}, 1");
    }

    /// The reference zero-fills every workgroup buffer for each workgroup.
    fn zero_shared(&mut self, p: &mut PtxWriter) {
        let lin = self.ids.linear_local;
        let base = self.shared_base;
        emit!(p, "mov.u32 {base}, vyre_shared");
        let total = self.shared_bytes;
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
        emit!(p, "{}.sync 0", self.cta_barrier());
    }

    /// Every per-workgroup partial starts at its operator's identity.
    fn init_partials(&mut self, p: &mut PtxWriter) {
        let first = self.w.reg(RegClass::Pred);
        emit!(p, "setp.eq.u32 {first}, {}, 0", self.ids.linear_local);
        for (slot, partial) in self.partials.iter().enumerate() {
            emit!(
                p,
                "@{first} st.shared.u32 [{PARTIALS}+{}], {}",
                slot * 4,
                partial.identity()
            );
        }
        emit!(p, "{}.sync 0", self.cta_barrier());
    }

    /// The shared slot of the partial for `buffer[index]`, allocated on first use.
    pub(super) fn partial_slot(
        &mut self,
        buffer: &'p str,
        index: u32,
        opcode: &'static str,
    ) -> u32 {
        let found = self
            .partials
            .iter()
            .position(|p| p.buffer == buffer && p.index == index);
        let slot = found.unwrap_or_else(|| {
            self.partials.push(Partial {
                buffer,
                index,
                opcode,
            });
            self.partials.len() - 1
        });
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
        // Returned lanes branch here from wherever they returned: the label joins every
        // path, and such programs hold no other barrier, so every live lane of a warp
        // meets at this one instruction.
        emit!(self.w, "{}.sync 0", self.cta_barrier());
        let first = self.w.reg(RegClass::Pred);
        emit!(self.w, "setp.eq.u32 {first}, {}, 0", self.ids.linear_local);
        for slot in 0..self.partials.len() {
            let partial = self.partials[slot];
            let target = self.slot(partial.buffer)?;
            let index_reg = self.imm_b32(partial.index);
            let (in_bounds, addr) = self.element_address(&target, index_reg);
            let value = self.w.reg(RegClass::B32);
            emit!(self.w, "ld.shared.u32 {value}, [{PARTIALS}+{}]", slot * 4);
            emit!(self.w, "and.pred {in_bounds}, {in_bounds}, {first}");
            self.global_red(in_bounds, partial.opcode, addr, value);
        }
        Ok(())
    }
}
