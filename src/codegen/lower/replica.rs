//! Replicated segments (`analysis::replicated`): every invocation runs the same
//! computation, so the grid's first invocation runs it alone, once or in the reference's
//! schedule, and the others leave at once.

use super::Lowerer;
use crate::codegen::writer::{emit, Label, RegClass};
use crate::codegen::CodegenError;
use vyre_foundation::ir::Node;

/// One thread running a replicated segment.
#[derive(Debug, Clone, Copy)]
pub(super) struct Schedule {
    /// Where `Return` goes when the segment runs once per workgroup: the end of the
    /// current workgroup's run.
    next_workgroup: Option<Label>,
    /// How often each store runs: once, or once per lane of the workgroup, as the
    /// reference steps every lane through a statement before the next.
    lanes: u32,
}

impl<'p> Lowerer<'p> {
    /// `nodes` run once, by the grid's first invocation.
    pub(super) fn put_once(&mut self, nodes: &'p [Node]) -> Result<(), CodegenError> {
        self.leave_unless_first_invocation();
        self.schedule = Some(Schedule {
            next_workgroup: None,
            lanes: 1,
        });
        let result = self.put_block(nodes);
        self.schedule = None;
        result
    }

    /// Every invocation but the grid's first leaves here.
    fn leave_unless_first_invocation(&mut self) {
        let any = self.w.reg(RegClass::B32);
        let ids = [self.ids.local, self.ids.group].concat();
        emit!(self.w, "mov.u32 {any}, {}", ids[0]);
        for id in &ids[1..] {
            emit!(self.w, "or.b32 {any}, {any}, {id}");
        }
        let first = self.w.reg(RegClass::Pred);
        emit!(self.w, "setp.eq.u32 {first}, {any}, 0");
        let stay = self.w.label();
        emit!(self.w, "@{first} bra {stay}");
        self.exit_kernel();
        self.w.put_label(stay);
    }

    /// `nodes` run by the grid's first invocation once per workgroup of the grid, in order,
    /// each store once per lane, each workgroup's run on zeroed workgroup memory: what the
    /// reference computes for a segment every invocation of which is the same.
    pub(super) fn put_reference_schedule(&mut self, nodes: &'p [Node]) -> Result<(), CodegenError> {
        self.leave_unless_first_invocation();
        let remaining = self.w.reg(RegClass::B64);
        let blocks = self.w.reg(RegClass::B32);
        let wide = self.w.reg(RegClass::B64);
        emit!(self.w, "mov.u64 {remaining}, 1");
        for axis in ["x", "y", "z"] {
            emit!(self.w, "mov.u32 {blocks}, %nctaid.{axis}");
            emit!(self.w, "cvt.u64.u32 {wide}, {blocks}");
            emit!(self.w, "mul.lo.u64 {remaining}, {remaining}, {wide}");
        }
        let (top, next, end) = (self.w.label(), self.w.label(), self.w.label());
        self.w.put_label(top);
        let done = self.w.reg(RegClass::Pred);
        emit!(self.w, "setp.eq.u64 {done}, {remaining}, 0");
        // After a recorded fault the results are discarded: stop.
        emit!(self.w, "or.pred {done}, {done}, {}", self.faulted);
        let done = self.branch_pred(done);
        emit!(self.w, "@{done} bra {end}");
        self.zero_shared_alone();
        self.schedule = Some(Schedule {
            next_workgroup: Some(next),
            lanes: self.workgroup_size.iter().product(),
        });
        let result = self.put_block(nodes);
        self.schedule = None;
        result?;
        self.w.put_label(next);
        emit!(self.w, "sub.u64 {remaining}, {remaining}, 1");
        emit!(self.w, "bra {top}");
        self.w.put_label(end);
        Ok(())
    }

    /// Workgroup memory zeroed by this thread alone (the others have left); the first run
    /// finds it zeroed already by the prologue, and writing zeros again is harmless.
    fn zero_shared_alone(&mut self) {
        if self.shared.is_empty() {
            return;
        }
        let offset = self.w.reg(RegClass::B32);
        let addr = self.w.reg(RegClass::B32);
        let (top, end) = (self.w.label(), self.w.label());
        emit!(self.w, "mov.u32 {offset}, 0");
        self.w.put_label(top);
        let done = self.w.reg(RegClass::Pred);
        emit!(
            self.w,
            "setp.ge.u32 {done}, {offset}, {}",
            self.shared_bytes
        );
        let done = self.branch_pred(done);
        emit!(self.w, "@{done} bra {end}");
        emit!(self.w, "add.u32 {addr}, {}, {offset}", self.shared_base);
        emit!(self.w, "st.shared.v4.u32 [{addr}], {{0, 0, 0, 0}}");
        emit!(self.w, "add.u32 {offset}, {offset}, 16");
        emit!(self.w, "bra {top}");
        self.w.put_label(end);
    }

    /// In a reference schedule, `Return` ends the current workgroup's run.
    pub(super) fn schedule_return(&mut self) -> bool {
        let Some(next) = self.schedule.and_then(|s| s.next_workgroup) else {
            return false;
        };
        emit!(self.w, "bra {next}");
        true
    }

    /// One thread running the segment alone: its barriers wait for nobody.
    pub(super) fn runs_alone(&self) -> bool {
        self.schedule.is_some()
    }

    /// `store` once, or in a reference schedule once per lane of the workgroup (each lane
    /// evaluates the index and value again, seeing the previous lane's store).
    pub(super) fn per_lane(
        &mut self,
        store: impl FnOnce(&mut Self) -> Result<(), CodegenError>,
    ) -> Result<(), CodegenError> {
        let Some(lanes) = self.schedule.map(|s| s.lanes).filter(|&lanes| lanes > 1) else {
            return store(self);
        };
        let lane = self.w.reg(RegClass::B32);
        emit!(self.w, "mov.u32 {lane}, 0");
        let top = self.w.label();
        self.w.put_label(top);
        store(self)?;
        emit!(self.w, "add.u32 {lane}, {lane}, 1");
        let more = self.w.reg(RegClass::Pred);
        emit!(self.w, "setp.lt.u32 {more}, {lane}, {lanes}");
        let more = self.branch_pred(more);
        emit!(self.w, "@{more} bra {top}");
        Ok(())
    }
}
