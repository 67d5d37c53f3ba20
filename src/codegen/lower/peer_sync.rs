//! The meetings of a peer-synced fold's vector entry (see [`PeerSync`]): before the fold
//! every block announces the epoch to every peer and waits for theirs; after it the last
//! block of the grid to finish announces the next epoch and waits for the peers' own last
//! blocks. Thread 0 of a block does the talking; `bar.sync` holds the block's other
//! threads.
//!
//! Ordering: the announcement is a `st.release.sys` into the peer's memory and the wait an
//! `ld.acquire.sys` of this GPU's own flag word, so a peer that sees the epoch also sees
//! what was written before it. Before the final meeting every thread runs `fence.sc.sys`
//! (its stores into peers' buffers are performed system-wide), the block meets at
//! `bar.sync`, and thread 0 counts the block done with an acq_rel atomic: the last block
//! counted has seen every block's fence before it announces. Every block announces the
//! first epoch itself (the same value), so no block waits on one that has not started.
//! A wait has no deadline: an aborted dispatch's host writes the epoch into every flag
//! word (`backend::collective::barrier::release`), which ends it.

use super::Lowerer;
use crate::codegen::abi::{KernelParam, PeerSync};
use crate::codegen::writer::{emit, Reg, RegClass};

/// The registers the two meetings share.
pub(crate) struct PeerRegs {
    sync: PeerSync,
    slots: Reg,
    flags: Reg,
    counter: Reg,
    epoch: Reg,
    /// Set on every thread but thread 0 of the block.
    quiet: Reg,
}

impl Lowerer<'_> {
    /// Loads the meeting parameters and meets the peers at the first epoch.
    pub(crate) fn put_peer_meeting_in(&mut self, sync: PeerSync) -> PeerRegs {
        let mut param = |p: KernelParam, global: bool| {
            let reg = self.w.reg(RegClass::B64);
            emit!(self.w, "ld.param.u64 {reg}, [{}]", p.name());
            if global {
                emit!(self.w, "cvta.to.global.u64 {reg}, {reg}");
            }
            reg
        };
        let slots = param(KernelParam::PeerSlots, true);
        let flags = param(KernelParam::PeerFlags, true);
        let counter = param(KernelParam::PeerCounter, true);
        let epoch = param(KernelParam::PeerEpoch, false);
        let (tid, quiet) = (self.b32(), self.pred());
        emit!(self.w, "mov.u32 {tid}, %tid.x");
        emit!(self.w, "setp.ne.u32 {quiet}, {tid}, 0");
        let regs = PeerRegs {
            sync,
            slots,
            flags,
            counter,
            epoch,
            quiet,
        };
        let done = self.w.label();
        emit!(self.w, "@{quiet} bra {done}");
        self.put_meeting(&regs, epoch);
        self.w.put_label(done);
        emit!(self.w, "bar.sync 0");
        regs
    }

    /// After the fold: the grid's last block to finish meets the peers at the next epoch
    /// and zeroes the block count for the next launch.
    pub(crate) fn put_peer_meeting_out(&mut self, regs: &PeerRegs) {
        emit!(self.w, "fence.sc.sys");
        emit!(self.w, "bar.sync 0");
        let done = self.w.label();
        emit!(self.w, "@{} bra {done}", regs.quiet);
        let (before, blocks, last) = (self.b32(), self.b32(), self.pred());
        let counter = regs.counter;
        emit!(
            self.w,
            "atom.acq_rel.gpu.global.add.u32 {before}, [{counter}], 1"
        );
        emit!(self.w, "mov.u32 {blocks}, %nctaid.x");
        emit!(self.w, "sub.u32 {blocks}, {blocks}, 1");
        emit!(self.w, "setp.ne.u32 {last}, {before}, {blocks}");
        emit!(self.w, "@{last} bra {done}");
        let next = self.w.reg(RegClass::B64);
        emit!(self.w, "add.u64 {next}, {}, 1", regs.epoch);
        self.put_meeting(regs, next);
        emit!(self.w, "st.relaxed.gpu.global.u32 [{counter}], 0");
        self.w.put_label(done);
    }

    /// Stores `epoch` into this rank's word in every peer's flags, then waits for every
    /// peer's word in this rank's flags to reach it (no deadline: see the module docs).
    fn put_meeting(&mut self, regs: &PeerRegs, epoch: Reg) {
        let PeerSync { world, rank } = regs.sync;
        let peers = (0..world).filter(|&k| k != rank);
        for k in peers.clone() {
            let slot = self.w.reg(RegClass::B64);
            emit!(self.w, "ld.global.u64 {slot}, [{}+{}]", regs.slots, k * 8);
            emit!(self.w, "st.release.sys.global.u64 [{slot}], {epoch}");
        }
        for k in peers {
            let wait = self.w.label();
            let (seen, waiting) = (self.w.reg(RegClass::B64), self.pred());
            let flag = format!("[{}+{}]", regs.flags, k * 8);
            self.w.put_label(wait);
            emit!(self.w, "ld.acquire.sys.global.u64 {seen}, {flag}");
            emit!(self.w, "setp.lt.u64 {waiting}, {seen}, {epoch}");
            emit!(self.w, "@{waiting} bra {wait}");
        }
    }
}
