//! [`PeerBarrier`]: the barrier across the ranks' streams of a peer-linked
//! [`super::CudaCluster`], between which exact reductions fold from every rank's memory.
//!
//! Two mechanisms ([`PeerBarrierKind`]):
//! * **Stream memory operations** (the default where every GPU has them): each rank owns W
//!   u64 flag slots in its own memory, zeroed at link time; slot p holds the last epoch rank
//!   p announced to it. A barrier of epoch e (one 64-bit counter, advanced once per barrier
//!   and identical on every rank, so it never wraps) enqueues on rank r's stream a write of
//!   e into slot r of every peer's flags, then a wait until each of its own peer slots is
//!   at least e (GEQ, not EQ: a fast peer may already have announced e + 1). The writes use
//!   the default flags, whose memory fence publishes every write of the work queued before
//!   them (a fold's remote writes into a peer's buffer included) to whoever sees the flag.
//!   The waits poll the rank's own memory; no cross-GPU event is involved.
//!   `CU_STREAM_WAIT_VALUE_FLUSH` is not used: it orders remote writes that reach the device
//!   without a fence of their writer (a NIC's RDMA, say), where the wait is satisfied by a
//!   later write of the same writer; here every writer is a peer GPU whose flag write
//!   follows its own fence. It is also only allowed where the device reports
//!   `CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES`, which x86 hosts do not.
//! * **Events**: each rank records an event; every stream waits for every peer's
//!   (`cuStreamWaitEvent` across GPUs, W (W - 1) waits): ~25 us per collective on 4x H200.
//!
//! A wait for a flag has no timeout, so an aborted dispatch must release it: [`release`]
//! writes the current epoch (every rank's, the same) into every slot of every rank, from a
//! side stream of every rank, before the dispatch's streams are drained. The epoch, not a
//! larger value: the driver compares cyclically (`(int64_t)(*addr - value) >= 0`), and the
//! slots must stay below the next barrier's epoch for later barriers to wait at all. Every
//! barrier enqueued so far has an epoch at most the current one, so every wait passes; the
//! next barrier uses the next epoch. Every rank writes every slot because a side stream may
//! share a hardware queue with a stream stuck in a wait (more streams than the device's
//! connections): one rank whose side stream runs releases all of them.

use crate::backend::launch::PeerArgs;
use crate::driver::{Device, DriverError, Event, Stream, StreamMemOp};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Environment variable setting [`CudaOptions::collective_peer_barrier`]:
/// `memops`, `memops-each` or `events`.
///
/// [`CudaOptions::collective_peer_barrier`]: crate::CudaOptions::collective_peer_barrier
pub const PEER_BARRIER_ENV: &str = "VYRE_CUDA_PEER_BARRIER";

/// How the ranks of a peer-linked [`super::CudaCluster`] wait for each other around the
/// folds of exact reductions (see [`crate::CudaOptions::collective_peer_barrier`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PeerBarrierKind {
    /// Stream memory operations (64-bit flag writes into the peers' memory and waits on
    /// the rank's own), one `cuStreamBatchMemOp` per rank and barrier. Where a GPU or the
    /// driver lacks 64-bit stream memory operations the cluster uses [`Self::Events`].
    #[default]
    MemOps,
    /// As [`Self::MemOps`], one driver call per flag write and per wait
    /// (`cuStreamWriteValue64`, `cuStreamWaitValue64`): for measuring the batch.
    MemOpsEach,
    /// A recorded event per rank and `cuStreamWaitEvent` on every peer's.
    Events,
}

impl PeerBarrierKind {
    /// Parses `VYRE_CUDA_PEER_BARRIER` (`memops`, `memops-each` or `events`).
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim() {
            "memops" => Some(Self::MemOps),
            "memops-each" => Some(Self::MemOpsEach),
            "events" => Some(Self::Events),
            _ => None,
        }
    }

    fn uses_mem_ops(self) -> bool {
        matches!(self, Self::MemOps | Self::MemOpsEach)
    }
}

/// One rank's half of the barrier of its cluster.
pub(crate) struct PeerBarrier {
    kind: PeerBarrierKind,
    mechanism: Mechanism,
}

enum Mechanism {
    Events(Event),
    MemOps(Flags),
}

/// One rank's flag slots and epoch.
struct Flags {
    /// W u64 slots in this rank's memory: slot p holds the last epoch rank p announced.
    slots: crate::driver::DeviceAlloc,
    /// W u64 addresses in this rank's memory: entry p is this rank's slot in rank p's
    /// flags (what a peer-synced fold writes to), then a zeroed u32 block count (the
    /// fold's last block to finish meets the peers; `codegen::PeerSync`).
    meeting: crate::driver::DeviceAlloc,
    /// The epoch of the last barrier enqueued; the same on every rank of the cluster.
    epoch: AtomicU64,
    /// A stream of this rank's device for zeroing the slots and for [`release`].
    side: Stream,
}

impl Flags {
    fn slot(&self, rank: usize) -> u64 {
        self.slots.ptr() + (rank * 8) as u64
    }
}

/// One rank in a barrier: its rank number, its half of the barrier and its stream.
pub(crate) struct Member<'a> {
    pub(crate) rank: usize,
    pub(crate) barrier: &'a PeerBarrier,
    pub(crate) stream: &'a Stream,
}

impl<'a> Member<'a> {
    fn flags(&self) -> &'a Flags {
        match &self.barrier.mechanism {
            Mechanism::MemOps(flags) => flags,
            Mechanism::Events(_) => unreachable!("the ranks of a cluster share one barrier kind"),
        }
    }

    fn event(&self) -> &'a Event {
        match &self.barrier.mechanism {
            Mechanism::Events(event) => event,
            Mechanism::MemOps(_) => unreachable!("the ranks of a cluster share one barrier kind"),
        }
    }
}

impl PeerBarrier {
    /// This rank's flags, where the barrier is made of memory operations.
    fn flags(&self) -> Option<&Flags> {
        match &self.mechanism {
            Mechanism::MemOps(flags) => Some(flags),
            Mechanism::Events(_) => None,
        }
    }

    /// The mechanism this barrier uses.
    pub(crate) fn kind(&self) -> PeerBarrierKind {
        self.kind
    }

    /// Every rank's half of the barrier on `devices` (rank order), peer access enabled
    /// between every pair: `wanted` where every device has 64-bit stream memory operations,
    /// else events (logged once per process). A failure names the rank it happened on.
    pub(crate) fn link(
        devices: &[Arc<Device>],
        wanted: PeerBarrierKind,
    ) -> Result<Vec<Self>, (usize, DriverError)> {
        let mem_ops = wanted.uses_mem_ops() && devices.iter().all(|d| d.stream_mem_ops_64());
        if wanted.uses_mem_ops() && !mem_ops {
            static LOGGED: std::sync::Once = std::sync::Once::new();
            LOGGED.call_once(|| {
                tracing::info!(
                    "a GPU of the cluster (or its driver) has no 64-bit stream memory \
                     operations: the peer barriers of exact reductions use cross-GPU events"
                );
            });
        }
        let world = devices.len();
        let mut barriers: Vec<Self> = Vec::with_capacity(world);
        for (rank, device) in devices.iter().enumerate() {
            let mechanism = if mem_ops {
                Mechanism::MemOps(Flags::new(device, world).map_err(|e| (rank, e))?)
            } else {
                Mechanism::Events(Event::new(device, false).map_err(|e| (rank, e))?)
            };
            let kind = if mem_ops {
                wanted
            } else {
                PeerBarrierKind::Events
            };
            barriers.push(Self { kind, mechanism });
        }
        let all: Vec<&Flags> = barriers.iter().filter_map(Self::flags).collect();
        if all.len() == world {
            for (rank, flags) in all.iter().enumerate() {
                flags.point_at(rank, &all).map_err(|e| (rank, e))?;
            }
        }
        Ok(barriers)
    }
}

impl Flags {
    fn new(device: &Arc<Device>, world: usize) -> Result<Self, DriverError> {
        let slots = crate::driver::DeviceAlloc::new(device, world * 8)?;
        let meeting = crate::driver::DeviceAlloc::new(device, world * 8 + 8)?;
        let side = Stream::new(device)?;
        side.memset_zero(slots.ptr(), slots.len())?;
        side.memset_zero(meeting.ptr(), meeting.len())?;
        side.synchronize()?;
        Ok(Self {
            slots,
            meeting,
            epoch: AtomicU64::new(0),
            side,
        })
    }

    /// Writes, for rank `rank`, its slot's address in every rank's flags.
    fn point_at(&self, rank: usize, all: &[&Flags]) -> Result<(), DriverError> {
        let addresses: Vec<u8> = all
            .iter()
            .flat_map(|flags| flags.slot(rank).to_le_bytes())
            .collect();
        self.side.copy_to_device(self.meeting.ptr(), &addresses)?;
        self.side.synchronize()
    }
}

/// Reserves two epochs on every rank of `members` (every rank of one cluster, all with
/// memory-operation flags) for one peer-synced fold (`codegen::PeerSync`), advanced
/// everywhere before anything is enqueued as for a barrier (so [`release`] covers a fold
/// enqueued in part), and returns where each member's kernel meets the others. `None`
/// where the ranks use events.
pub(crate) fn reserve_meetings(members: &[Member<'_>]) -> Option<Vec<PeerArgs>> {
    let flags: Vec<&Flags> = (members.iter())
        .map(|m| m.barrier.flags())
        .collect::<Option<_>>()?;
    let first = 1 + flags
        .iter()
        .map(|f| f.epoch.load(Ordering::Acquire))
        .max()
        .unwrap_or(0);
    for f in &flags {
        f.epoch.store(first + 1, Ordering::Release);
    }
    let world = flags.len();
    Some(
        flags
            .iter()
            .map(|f| PeerArgs {
                slots: f.meeting.ptr(),
                flags: f.slots.ptr(),
                counter: f.meeting.ptr() + (world * 8) as u64,
                epoch: first,
            })
            .collect(),
    )
}

/// Enqueues one barrier on the streams of `members`, every rank of one cluster: work
/// queued on any of them after it starts only once the work queued on all of them before
/// it is done. A failure names the rank whose driver call failed.
pub(crate) fn enqueue(members: &[Member<'_>]) -> Result<(), (usize, DriverError)> {
    let Some(first) = members.first() else {
        return Ok(());
    };
    match first.barrier.kind {
        PeerBarrierKind::Events => enqueue_events(members),
        kind => enqueue_mem_ops(members, kind == PeerBarrierKind::MemOps),
    }
}

fn enqueue_events(members: &[Member<'_>]) -> Result<(), (usize, DriverError)> {
    for member in members {
        (member.event().record(member.stream)).map_err(|e| (member.rank, e))?;
    }
    for member in members {
        for peer in members.iter().filter(|peer| peer.rank != member.rank) {
            (peer.event().wait_on(member.stream)).map_err(|e| (member.rank, e))?;
        }
    }
    Ok(())
}

/// The flag barrier. The epoch advances on every rank before anything is enqueued, so that
/// [`release`] covers a barrier enqueued in part: a failed enqueue (batched, rank r's waits
/// go in before rank r + 1's writes) may leave a stream waiting for a write that was never
/// enqueued, and the abort that follows a failed enqueue releases it. One call at a time,
/// every rank's writes go in before any rank's waits.
fn enqueue_mem_ops(members: &[Member<'_>], batched: bool) -> Result<(), (usize, DriverError)> {
    let epoch = 1 + members
        .iter()
        .map(|m| m.flags().epoch.load(Ordering::Acquire))
        .max()
        .unwrap_or(0);
    for member in members {
        member.flags().epoch.store(epoch, Ordering::Release);
    }
    let peers = |member: &Member<'_>| {
        let rank = member.rank;
        members.iter().filter(move |peer| peer.rank != rank)
    };
    if batched {
        for member in members {
            let writes = peers(member).map(|peer| StreamMemOp::Write64 {
                addr: peer.flags().slot(member.rank),
                value: epoch,
            });
            let waits = peers(member).map(|peer| StreamMemOp::WaitGeq64 {
                addr: member.flags().slot(peer.rank),
                value: epoch,
            });
            let ops: smallvec::SmallVec<[StreamMemOp; 16]> = writes.chain(waits).collect();
            (member.stream.batch_mem_ops(&ops)).map_err(|e| (member.rank, e))?;
        }
        return Ok(());
    }
    for member in members {
        for peer in peers(member) {
            (member.stream)
                .write_value64(peer.flags().slot(member.rank), epoch)
                .map_err(|e| (member.rank, e))?;
        }
    }
    for member in members {
        for peer in peers(member) {
            (member.stream)
                .wait_value64_geq(member.flags().slot(peer.rank), epoch)
                .map_err(|e| (member.rank, e))?;
        }
    }
    Ok(())
}

/// After a failed dispatch, before its streams are drained: lets every flag wait enqueued
/// so far pass (see the module docs). Returns the side streams that carry the writes: wait
/// for them with [`settle`] once the dispatch's streams are drained, before the flags are
/// used again. Errors are logged (a lost context cannot write; the others still do).
pub(crate) fn release<'a>(members: &[Member<'a>]) -> Vec<&'a Stream> {
    let mem_ops = |member: &Member<'a>| matches!(member.barrier.mechanism, Mechanism::MemOps(_));
    if !members.iter().all(mem_ops) {
        return Vec::new();
    }
    let epoch = (members.iter())
        .map(|m| m.flags().epoch.load(Ordering::Acquire))
        .max()
        .unwrap_or(0);
    for member in members {
        member.flags().epoch.store(epoch, Ordering::Release);
    }
    let mut sides = Vec::with_capacity(members.len());
    for writer in members {
        let side = &writer.flags().side;
        let written = members.iter().try_for_each(|target| {
            let flags = target.flags();
            (0..flags.slots.len() / 8)
                .try_for_each(|slot| side.write_value64(flags.slot(slot), epoch))
        });
        if let Err(error) = written {
            let rank = writer.rank;
            tracing::warn!(rank, %error, "releasing the peer barrier's waits failed");
        }
        sides.push(side);
    }
    sides
}

/// Waits for the side streams [`release`] wrote from.
pub(crate) fn settle(sides: &[&Stream]) {
    for side in sides {
        if let Err(error) = side.synchronize() {
            tracing::debug!(%error, "waiting for a peer barrier release failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn barrier_kinds_parse_and_default_to_mem_ops() {
        assert_eq!(
            PeerBarrierKind::parse("memops"),
            Some(PeerBarrierKind::MemOps)
        );
        assert_eq!(
            PeerBarrierKind::parse(" memops-each "),
            Some(PeerBarrierKind::MemOpsEach)
        );
        assert_eq!(
            PeerBarrierKind::parse("events"),
            Some(PeerBarrierKind::Events)
        );
        assert_eq!(PeerBarrierKind::parse("flags"), None);
        assert_eq!(PeerBarrierKind::default(), PeerBarrierKind::MemOps);
        assert!(PeerBarrierKind::MemOpsEach.uses_mem_ops());
        assert!(!PeerBarrierKind::Events.uses_mem_ops());
    }
}
