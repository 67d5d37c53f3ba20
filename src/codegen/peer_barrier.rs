//! The barrier across the GPUs of a peer-linked cluster, as one small hand-written kernel
//! per rank (each rank's stream runs it where the ranks must meet).
//!
//! Every rank owns `W` 64-bit flag words (`mine`), one per peer, that the peers write over
//! the peer link; `slots[k]` is the address of this rank's word in rank `k`'s flags. Lane
//! `k` of the one warp publishes this GPU's earlier work (`fence.sc.sys`), stores the
//! barrier's epoch into `slots[k]` with release semantics, then spins with acquire loads
//! until rank `k` has stored the same epoch (or a later one) into `mine[k]`. Epochs only
//! grow, so the words never need resetting. A rank that never arrives is waited for until
//! `timeout_ns` has passed on the GPU's clock; the lane then gives up, so a stream never
//! stays blocked after the host has given up on the dispatch (its deadline is the same).
//! Costs one launch and one NVLink round trip, against `W - 1` cross-GPU event waits per
//! rank for a barrier made of `cuStreamWaitEvent`s.

use super::PtxTarget;
use std::fmt::Write as _;

/// The entry's name.
pub const PEER_BARRIER_ENTRY: &str = "vyre_peer_barrier";

/// Threads of the barrier's one block: one lane per rank, up to this many ranks.
pub const PEER_BARRIER_LANES: u32 = 32;

/// The barrier kernel for `target`. Parameters, in order: `slots` (u64, a device array of
/// `world` addresses), `mine` (u64, this rank's `world` flag words), `world` (u32), `rank`
/// (u32), `epoch` (u64), `timeout_ns` (u64).
#[must_use]
pub fn peer_barrier_ptx(target: PtxTarget) -> String {
    let mut out = String::new();
    let _ = writeln!(out, ".version {}", target.isa());
    let _ = writeln!(out, ".target sm_{}", target.sm());
    let _ = writeln!(out, ".address_size 64\n");
    out.push_str(&format!(
        ".visible .entry {PEER_BARRIER_ENTRY}(\n\t.param .u64 slots,\n\t.param .u64 mine,\n\t\
         .param .u32 world,\n\t.param .u32 rank,\n\t.param .u64 epoch,\n\t.param .u64 timeout_ns\n)\n"
    ));
    out.push_str(BODY);
    out
}

const BODY: &str = "{
\t.reg .pred %p<4>;
\t.reg .b32 %r<4>;
\t.reg .b64 %rd<12>;
\tld.param.u64 %rd1, [slots];
\tld.param.u64 %rd2, [mine];
\tld.param.u32 %r1, [world];
\tld.param.u32 %r2, [rank];
\tld.param.u64 %rd3, [epoch];
\tld.param.u64 %rd4, [timeout_ns];
\tcvta.to.global.u64 %rd1, %rd1;
\tcvta.to.global.u64 %rd2, %rd2;
\tmov.u32 %r3, %tid.x;
\tsetp.ge.u32 %p1, %r3, %r1;
\tsetp.eq.or.u32 %p1, %r3, %r2, %p1;
\t@%p1 bra DONE;
\tfence.sc.sys;
\tmul.wide.u32 %rd5, %r3, 8;
\tadd.u64 %rd6, %rd1, %rd5;
\tld.global.u64 %rd7, [%rd6];
\tst.release.sys.global.u64 [%rd7], %rd3;
\tadd.u64 %rd8, %rd2, %rd5;
\tmov.u64 %rd9, %globaltimer;
\tadd.u64 %rd9, %rd9, %rd4;
WAIT:
\tld.acquire.sys.global.u64 %rd10, [%rd8];
\tsetp.ge.u64 %p2, %rd10, %rd3;
\t@%p2 bra DONE;
\tmov.u64 %rd11, %globaltimer;
\tsetp.lt.u64 %p3, %rd11, %rd9;
\t@%p3 bra WAIT;
DONE:
\tbarrier.sync 0;
\tret;
}
";
