//! Blocks of the device heap (the PTX system calls `malloc` and `free`, declared by the
//! module where an entry calls them: `module::ModuleUses`), for the snapshots the
//! reference takes of run-time size: an async copy's payload (`async_copy`) and the bytes
//! a `Let` or `Assign` binds from a buffer the program writes (`bytes`). A block the heap
//! cannot give fails the dispatch ([`DeviceFault::SnapshotHeap`]); every block is given
//! back before the invocation leaves, so none outlives its dispatch.

use super::Lowerer;
use crate::codegen::fault::DeviceFault;
use crate::codegen::writer::{emit, Reg, RegClass};

impl Lowerer<'_> {
    /// `block = malloc(bytes)`; returns the predicate set where the heap could not give it
    /// (the fault is recorded, `block` is 0).
    pub(super) fn heap_alloc(&mut self, block: Reg, bytes: Reg) -> Reg {
        self.w.raw(&format!(
            "\t{{\n\t.param .b64 vyre_heap_bytes;\n\tst.param.b64 [vyre_heap_bytes], {bytes};\n\t.param .b64 vyre_heap_block;\n\tcall (vyre_heap_block), malloc, (vyre_heap_bytes);\n\tld.param.b64 {block}, [vyre_heap_block];\n\t}}\n"
        ));
        let failed = self.pred();
        emit!(self.w, "setp.eq.u64 {failed}, {block}, 0");
        self.fault_if(failed, DeviceFault::SnapshotHeap);
        failed
    }

    /// `free(block)` unless it is 0; then it is 0.
    pub(super) fn heap_free(&mut self, block: Reg) {
        let (none, skip) = (self.pred(), self.w.label());
        emit!(self.w, "setp.eq.u64 {none}, {block}, 0");
        let none = self.branch_pred(none);
        emit!(self.w, "@{none} bra {skip}");
        self.w.raw(&format!(
            "\t{{\n\t.param .b64 vyre_heap_free;\n\tst.param.b64 [vyre_heap_free], {block};\n\tcall free, (vyre_heap_free);\n\t}}\n"
        ));
        self.w.put_zero(block);
        self.w.put_label(skip);
    }

    /// A block of `bytes` more than `bytes` whose first eight hold the list `head` pointed
    /// to, now pointed to by `head` (the lane's list of blocks it gives back where it
    /// leaves, [`Self::heap_free_list`]); the address of its first free byte, or 0.
    pub(super) fn heap_alloc_listed(&mut self, head: Reg, bytes: Reg) -> Reg {
        let (total, block) = (self.w.reg(RegClass::B64), self.w.reg(RegClass::B64));
        emit!(self.w, "add.u64 {total}, {bytes}, 8");
        let failed = self.heap_alloc(block, total);
        let skip = self.w.label();
        let failed = self.branch_pred(failed);
        emit!(self.w, "@{failed} bra {skip}");
        emit!(self.w, "st.u64 [{block}], {head}");
        emit!(self.w, "mov.u64 {head}, {block}");
        emit!(self.w, "add.u64 {block}, {block}, 8");
        self.w.put_label(skip);
        block
    }

    /// Give back every block of the list `head` points to.
    pub(super) fn heap_free_list(&mut self, head: Reg) {
        let (top, end, done, next) = (
            self.w.label(),
            self.w.label(),
            self.pred(),
            self.w.reg(RegClass::B64),
        );
        self.w.put_label(top);
        emit!(self.w, "setp.eq.u64 {done}, {head}, 0");
        let done = self.branch_pred(done);
        emit!(self.w, "@{done} bra {end}");
        emit!(self.w, "ld.u64 {next}, [{head}]");
        self.heap_free(head);
        emit!(self.w, "mov.u64 {head}, {next}");
        emit!(self.w, "bra {top}");
        self.w.put_label(end);
    }
}
