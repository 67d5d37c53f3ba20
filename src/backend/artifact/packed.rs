//! The packed lane of artifact submissions: the packed dispatch path's round trip
//! (`small.rs`), asynchronous, and replayed as one CUDA graph.
//!
//! An artifact whose storage slots all have declared sizes and fit one small-dispatch lane's
//! arena gets a [`PackedPlan`] at load: every slot at a fixed 256-byte-aligned offset of the
//! arena (the caller's inputs first, the slots read back and the fault area last, so one
//! copy uploads everything and one copy downloads what is returned), and each node's grid,
//! argument offsets and element counts. The artifact keeps its own lanes (stream, arena and
//! pinned buffer of exactly that size); the first submission on a lane captures its round
//! trip — one upload, the nodes' launches, one download — into a graph kept with the lane's
//! pinned buffer. A submission whose bindings are all host bytes (or unbound) packs them
//! into the pinned buffer and replays the graph: one driver call; [`PackedFlight::finish`]
//! waits and unpacks. Nothing is planned, resolved or allocated per submission. (A grid
//! override launches the nodes directly instead.)
//!
//! The device time comes from the kernels themselves: the target compiler emits them timed
//! (`crate::codegen::emit_timed`), so they stamp `%globaltimer` into the fault area, which
//! the upload zeroes and the download reads back anyway; no CUDA event is recorded or
//! queried per submission. (Kernels loaded untimed are timed with the lane's events
//! around their launches instead.)

use super::{LoadedArtifact, LoadedNode, SlotBinding};
use crate::backend::dispatch::{check_fault, nanos, Timing, BINDING_ALIGN, FAULT_ALIGN};
use crate::backend::launch::GridSyncLaunch;
use crate::backend::launch::{self, LaunchArgs};
use crate::backend::metrics::Metrics;
use crate::backend::plan::{binding_order, shape_output, DispatchPlan, GridLimits};
use crate::backend::pool::{Pool, Pooled};
use crate::backend::small::SmallLane;
use crate::codegen::{clock_span_ns, FAULT_AREA_BYTES};
use crate::driver::{DriverError, Exchange, Stream, Wait};
use crate::error::CudaError;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use vyre_driver::DispatchConfig;

/// Where one submission's data sits in a lane's arena, and how each node launches.
pub(super) struct PackedPlan {
    /// Each storage slot's offset.
    offsets: Vec<usize>,
    /// The fault area's offset, when a kernel has a fault word.
    fault: Option<usize>,
    /// Whether every kernel stamps the clock into the fault area (then there is one): the
    /// device time is read from there instead of from timing events.
    timed: bool,
    /// Bytes uploaded: everything up to the end of the fault area.
    total: usize,
    /// Bytes downloaded: the slots read back and the fault word (the whole fault area,
    /// clock stamps included, when `timed`).
    download: Range<usize>,
    launches: Vec<NodeLaunch>,
    /// This artifact's idle lanes, `total` bytes each, most with the round trip captured.
    lanes: Pool<SmallLane>,
    /// Kernel launches one replay makes (counted when a lane captures).
    replay_launches: AtomicU64,
}

/// Idle lanes an artifact keeps (concurrent submissions beyond that create lanes that are
/// freed when they finish).
const MAX_IDLE_LANES: usize = 4;

/// One node's launch, relative to the arena.
#[derive(Clone)]
struct NodeLaunch {
    grid: [u32; 3],
    /// The arena offset of each kernel binding (`abi.bindings` order).
    offsets: smallvec::SmallVec<[usize; 8]>,
    counts: smallvec::SmallVec<[u32; 8]>,
}

impl PackedPlan {
    /// The plan, or `None` when a slot has no declared size (runtime-sized: its length
    /// comes with each submission) or the arena would exceed `capacity` bytes.
    pub(super) fn new(
        limits: GridLimits,
        nodes: &[LoadedNode],
        slot_bytes: &[usize],
        zeroed: &[bool],
        reads: &[usize],
        capacity: usize,
    ) -> Result<Option<Self>, CudaError> {
        if slot_bytes.contains(&0) {
            return Ok(None);
        }
        let read = |slot: usize| reads.contains(&slot);
        // Inputs, then slots that start zeroed and are not read, then the read slots.
        let rank = |slot: usize| match (zeroed[slot], read(slot)) {
            (_, true) => 2,
            (false, false) => 0,
            (true, false) => 1,
        };
        let mut order: Vec<usize> = (0..slot_bytes.len()).collect();
        order.sort_by_key(|&slot| rank(slot));
        let mut offsets = vec![0; slot_bytes.len()];
        let (mut next, mut data_end, mut download_at) = (0, 0, None);
        for slot in order {
            offsets[slot] = next;
            data_end = next + slot_bytes[slot];
            if read(slot) && download_at.is_none() {
                download_at = Some(next);
            }
            next += slot_bytes[slot].next_multiple_of(BINDING_ALIGN);
        }
        let faults = nodes.iter().any(|node| node.kernel.abi.fault_word);
        let fault = faults.then(|| data_end.next_multiple_of(FAULT_ALIGN));
        let total = fault.map_or(data_end, |at| at + FAULT_AREA_BYTES);
        if total > capacity {
            return Ok(None);
        }
        let timed = fault.is_some() && nodes.iter().all(|node| node.timed);
        let fault_read = if timed { FAULT_AREA_BYTES } else { 4 };
        let download_end = fault.map_or(data_end, |at| at + fault_read);
        let download_at = download_at.or(fault).unwrap_or(download_end);
        let mut plan = Self {
            offsets,
            fault,
            timed,
            total,
            download: download_at..download_end,
            launches: Vec::with_capacity(nodes.len()),
            lanes: Pool::new(MAX_IDLE_LANES),
            replay_launches: AtomicU64::new(0),
        };
        for node in nodes {
            let launch = plan.node_launch(limits, node, slot_bytes, None)?;
            plan.launches.push(launch);
        }
        Ok(Some(plan))
    }

    /// `node`'s grid (the reference's, or `grid`), argument offsets and element counts.
    fn node_launch(
        &self,
        limits: GridLimits,
        node: &LoadedNode,
        slot_bytes: &[usize],
        grid: Option<[u32; 3]>,
    ) -> Result<NodeLaunch, CudaError> {
        let abi = &node.kernel.abi;
        let mut lens: smallvec::SmallVec<[usize; 8]> = smallvec::smallvec![0; abi.bindings.len()];
        let mut offsets = smallvec::smallvec![0; abi.bindings.len()];
        for (&position, &slot) in binding_order(&node.program, abi).iter().zip(&node.slots) {
            lens[position] = slot_bytes[slot];
            offsets[position] = self.offsets[slot];
        }
        let mut config = DispatchConfig::default();
        config.grid_override = grid;
        let plan = DispatchPlan::resident(&node.program, abi, &lens, &config, limits)?;
        Ok(NodeLaunch {
            grid: plan.grid,
            offsets,
            counts: plan.bindings.iter().map(|b| b.elements).collect(),
        })
    }

    /// The upload of everything and the download of the reads and fault word, for an
    /// arena at `base`.
    fn transfer(&self, base: u64) -> Exchange {
        Exchange {
            upload_dst: base,
            upload_len: self.total,
            download_src: base + self.download.start as u64,
            download_at: self.download.start,
            download_len: self.download.len(),
        }
    }
}

/// Whether `bindings` can take the packed lane: no caller's resident buffer (those are
/// used in place).
pub(super) fn fits(bindings: &[SlotBinding<'_>]) -> bool {
    bindings
        .iter()
        .all(|binding| !matches!(binding, SlotBinding::Resident(..)))
}

/// A packed submission in flight: its lane (stream, arena, pinned buffer with the copies
/// in flight) until [`PackedFlight::finish`]; dropping it unfinished waits for the work.
pub(super) struct PackedFlight {
    lane: Option<Pooled<SmallLane>>,
    started: Instant,
    enqueue_ns: u64,
}

impl LoadedArtifact {
    /// Packs `bindings` into one of the artifact's lanes and enqueues the round trip: the
    /// captured graph, or with a `grid` override the upload, launches and download.
    pub(super) fn submit_packed(
        &self,
        plan: &PackedPlan,
        bindings: &[SlotBinding<'_>],
        grid: Option<[u32; 3]>,
    ) -> Result<PackedFlight, CudaError> {
        let started = Instant::now();
        let core = self.backend.core();
        core.usable()?;
        let overridden = match grid {
            None => None,
            Some(grid) => Some(
                self.nodes
                    .iter()
                    .map(|node| plan.node_launch(core.limits, node, &self.slot_bytes, Some(grid)))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        let blocking = core.small.blocking_wait();
        let mut lane = plan
            .lanes
            .take(|| SmallLane::new(core, plan.total, blocking))
            .map_err(|e| core.driver_error(e))?;
        let enqueued = self
            .pack(plan, &mut lane, bindings)
            .and_then(|()| match &overridden {
                None => self.replay_packed(plan, &mut lane),
                Some(launches) => self.enqueue_packed(plan, launches, &mut lane),
            });
        if let Err(error) = enqueued {
            lane.discard();
            return Err(core.driver_error(error));
        }
        Metrics::bump(&core.metrics.artifact_packed_submits);
        Metrics::add(&core.metrics.bytes_to_device, plan.total as u64);
        Metrics::add(&core.metrics.bytes_to_host, plan.download.len() as u64);
        Ok(PackedFlight {
            lane: Some(lane),
            started,
            enqueue_ns: nanos(started),
        })
    }

    /// Writes the bound host bytes, zeroed slots and a zeroed fault area into the lane's
    /// pinned buffer. Padding between slots is never addressed.
    fn pack(
        &self,
        plan: &PackedPlan,
        lane: &mut SmallLane,
        bindings: &[SlotBinding<'_>],
    ) -> Result<(), DriverError> {
        let packed = lane.exchange.bytes()?;
        for (slot, binding) in bindings.iter().enumerate() {
            let at = plan.offsets[slot];
            let region = &mut packed[at..at + self.slot_bytes[slot]];
            match binding {
                SlotBinding::Host(bytes) if !self.zeroed[slot] => region.copy_from_slice(bytes),
                _ => region.fill(0),
            }
        }
        if let Some(fault) = plan.fault {
            packed[fault..fault + FAULT_AREA_BYTES].fill(0);
        }
        Ok(())
    }

    /// Replays the lane's captured round trip, capturing it first on a new lane.
    fn replay_packed(&self, plan: &PackedPlan, lane: &mut SmallLane) -> Result<(), DriverError> {
        if !lane.exchange.is_captured() {
            self.capture_packed(plan, lane)?;
        }
        let stream = Arc::clone(&lane.slot.stream);
        lane.exchange.replay(&stream)?;
        let metrics = &self.backend.core().metrics;
        Metrics::bump(&metrics.graph_launches);
        Metrics::add(
            &metrics.launches,
            plan.replay_launches.load(Ordering::Relaxed),
        );
        Ok(())
    }

    /// Captures the round trip over `lane`: the upload, the nodes' launches (between the
    /// timing events unless the kernels are timed), the download. Cooperative launches
    /// that cannot be captured here are split at their grid barriers instead (as for
    /// resident sequences).
    fn capture_packed(&self, plan: &PackedPlan, lane: &mut SmallLane) -> Result<(), DriverError> {
        let core = self.backend.core();
        let SmallLane {
            exchange,
            slot,
            arena,
            ..
        } = lane;
        let base = arena.ptr();
        let stream = Arc::clone(&slot.stream);
        // Launches made during capture are counted per replay.
        let capture = |mode: GridSyncLaunch, counted: &Metrics| {
            for (node, launch) in self.nodes.iter().zip(&plan.launches) {
                let args = node_args(plan, node, launch, base);
                launch::load_entries(&node.kernel, launch.grid, &args, mode)?;
            }
            exchange.capture(&stream, plan.transfer(base), |capturing: &Stream| {
                if !plan.timed {
                    slot.start.record_captured(capturing)?;
                }
                self.launch_nodes(capturing, plan, &plan.launches, base, mode, counted)?;
                match plan.timed {
                    true => Ok(()),
                    false => slot.end.record_captured(capturing),
                }
            })
        };
        let ((), counted) = core.capture_splitting_if_needed(capture)?;
        Metrics::bump(&core.metrics.graph_captures);
        plan.replay_launches
            .store(counted.launches.load(Ordering::Relaxed), Ordering::Relaxed);
        Ok(())
    }

    /// The upload, the nodes' `launches` (between the timing events unless the kernels
    /// are timed), and the download, enqueued directly.
    fn enqueue_packed(
        &self,
        plan: &PackedPlan,
        launches: &[NodeLaunch],
        lane: &mut SmallLane,
    ) -> Result<(), DriverError> {
        let core = self.backend.core();
        let SmallLane {
            exchange,
            slot,
            arena,
            ..
        } = lane;
        let base = arena.ptr();
        let stream = Arc::clone(&slot.stream);
        exchange.start(&stream, plan.transfer(base), |stream: &Stream| {
            slot.timed(stream, !plan.timed, || {
                self.launch_nodes(stream, plan, launches, base, core.grid_sync, &core.metrics)
            })
        })
    }

    /// Launches every node in order over the arena at `base`.
    fn launch_nodes(
        &self,
        stream: &Stream,
        plan: &PackedPlan,
        launches: &[NodeLaunch],
        base: u64,
        mode: GridSyncLaunch,
        metrics: &Metrics,
    ) -> Result<(), DriverError> {
        for (node, launch) in self.nodes.iter().zip(launches) {
            let args = node_args(plan, node, launch, base);
            launch::enqueue(stream, &node.kernel, launch.grid, &args, 1, mode, metrics)?;
        }
        Ok(())
    }
}

/// The arguments of `node`'s `launch` over the arena at `base`.
fn node_args(plan: &PackedPlan, node: &LoadedNode, launch: &NodeLaunch, base: u64) -> LaunchArgs {
    let fault = plan.fault.filter(|_| node.kernel.abi.fault_word);
    LaunchArgs {
        pointers: launch.offsets.iter().map(|&o| base + o as u64).collect(),
        counts: launch.counts.clone(),
        fault: fault.map(|at| base + at as u64),
        peer: None,
    }
}

impl PackedFlight {
    /// Whether the work has completed (non-blocking).
    pub(super) fn is_complete(&self) -> bool {
        self.lane
            .as_ref()
            .is_none_or(|lane| lane.exchange.is_idle().unwrap_or(true))
    }

    /// Waits, checks the fault word and copies out the read slots (in `artifact.reads`
    /// order, shaped as the reference returns them).
    pub(super) fn finish(
        mut self,
        artifact: &LoadedArtifact,
    ) -> Result<(Vec<Vec<u8>>, Timing), CudaError> {
        let core = artifact.backend.core();
        let (Some(mut lane), Some(plan)) = (self.lane.take(), &artifact.packed) else {
            return Err(super::waited_twice());
        };
        let wait_started = Instant::now();
        let waited = wait(&mut lane).and_then(|()| lane.slot.device_ns(!plan.timed));
        let event_ns = match waited {
            Ok(device_ns) => device_ns,
            Err(error) => {
                lane.discard();
                return Err(core.driver_error(error));
            }
        };
        // Nothing is in flight any more: this does not wait.
        let packed = lane.exchange.bytes().map_err(|e| core.driver_error(e))?;
        check_fault(core, fault_word(packed, plan.fault), &mut Vec::new())?;
        let device_ns = match plan.fault.filter(|_| plan.timed) {
            Some(at) => {
                let span = clock_span_ns(&packed[at..at + FAULT_AREA_BYTES]);
                if span.is_some() {
                    Metrics::bump(&core.metrics.clock_timed_submits);
                }
                span
            }
            None => event_ns,
        };
        let outputs = artifact
            .reads
            .iter()
            .map(|&slot| {
                let at = plan.offsets[slot];
                let mut bytes = packed[at..at + artifact.slot_bytes[slot]].to_vec();
                shape_output(&mut bytes, artifact.returned_ranges[slot].as_ref());
                bytes
            })
            .collect();
        let timing = Timing::since(self.started, self.enqueue_ns, wait_started, device_ns);
        Ok((outputs, timing))
    }
}

/// Waits for the lane's round trip: sleeping on its blocking event when
/// `CudaOptions::blocking_wait` gave it one.
fn wait(lane: &mut SmallLane) -> Result<(), DriverError> {
    let SmallLane {
        exchange, blocking, ..
    } = lane;
    exchange.wait(blocking.as_ref().map_or(Wait::Stream, Wait::Event))
}

fn fault_word(packed: &[u8], fault: Option<usize>) -> u32 {
    fault.map_or(0, |at| {
        u32::from_le_bytes([packed[at], packed[at + 1], packed[at + 2], packed[at + 3]])
    })
}

impl Drop for PackedFlight {
    fn drop(&mut self) {
        if let Some(mut lane) = self.lane.take() {
            let failed = wait(&mut lane).is_err();
            lane.discard_if(failed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cache::LoadedKernel;
    use crate::codegen::{emit_ptx, emit_timed, PtxTarget};
    use std::sync::Arc;
    use vyre_foundation::ir::{BufferDecl, DataType, Expr, Node, Program};

    const LIMITS: GridLimits = GridLimits {
        max_grid_dim: [i32::MAX as u32, 65535, 65535],
        max_buffer_bytes: 1 << 34,
    };

    /// `out[i] = a[i] / b[i]` (i32: a fault word) over 100 elements.
    fn node(slots: Vec<usize>) -> LoadedNode {
        let program = divider();
        let emitted = emit_ptx(&program, None, PtxTarget::sm90()).unwrap();
        assert!(emitted.abi.fault_word && !emitted.timed);
        loaded(program, &emitted, slots)
    }

    /// [`node`] as the target compiler emits it: timed.
    fn timed_node(slots: Vec<usize>) -> LoadedNode {
        let program = divider();
        let emitted = emit_timed(&program, None, PtxTarget::sm80(), "vyre_node0").unwrap();
        assert!(emitted.abi.fault_word && emitted.timed);
        loaded(program, &emitted, slots)
    }

    fn loaded(
        program: Program,
        emitted: &crate::codegen::EmittedKernel,
        slots: Vec<usize>,
    ) -> LoadedNode {
        LoadedNode {
            program,
            kernel: Arc::new(LoadedKernel::unloaded(emitted.abi.clone())),
            slots,
            timed: emitted.entries().flags.timed,
        }
    }

    fn divider() -> Program {
        Program::wrapped(
            vec![
                BufferDecl::read("a", 0, DataType::I32).with_count(100),
                BufferDecl::read("b", 1, DataType::I32).with_count(100),
                BufferDecl::output("out", 2, DataType::I32).with_count(100),
            ],
            [64, 1, 1],
            vec![Node::store(
                "out",
                Expr::gid_x(),
                Expr::div(
                    Expr::load("a", Expr::gid_x()),
                    Expr::load("b", Expr::gid_x()),
                ),
            )],
        )
    }

    #[test]
    fn inputs_come_first_and_one_download_covers_the_reads_and_the_fault_word() {
        // Two nodes over five slots: 0 and 3 are the caller's inputs, 1 an intermediate
        // (zeroed, not read), 2 and 4 are read back.
        let nodes = [
            node(vec![0, 3, 1]),
            node(vec![1, 0, 4]),
            node(vec![1, 3, 2]),
        ];
        let bytes = [400, 400, 400, 400, 400];
        let zeroed = [false, true, true, false, true];
        let plan = PackedPlan::new(LIMITS, &nodes, &bytes, &zeroed, &[4, 2], 1 << 16)
            .unwrap()
            .expect("it fits");
        assert_eq!(plan.offsets, [0, 1024, 1536, 512, 2048]);
        assert_eq!(plan.fault, Some(2448));
        assert_eq!(plan.total, 2448 + FAULT_AREA_BYTES);
        assert_eq!(plan.download, 1536..2452);
        assert!(!plan.timed, "untimed kernels keep the timing events");
        let first = &plan.launches[0];
        assert_eq!(first.grid, [2, 1, 1]);
        assert_eq!(first.offsets.as_slice(), [0, 512, 1024]);
        assert_eq!(first.counts.as_slice(), [100, 100, 100]);
    }

    #[test]
    fn timed_kernels_download_their_clock_stamps_with_the_fault_word() {
        let bytes = [400, 400, 400];
        let zeroed = [false, false, true];
        let plan = |nodes: &[LoadedNode]| {
            PackedPlan::new(LIMITS, nodes, &bytes, &zeroed, &[2], 1 << 16)
                .unwrap()
                .expect("it fits")
        };
        let timed = plan(&[timed_node(vec![0, 1, 2]), timed_node(vec![2, 1, 2])]);
        assert!(timed.timed);
        assert_eq!(timed.fault, Some(1424));
        // The download runs from the read slot through the whole fault area, whose upload
        // (zeroed by `pack`) starts the stamps.
        assert_eq!(timed.download, 1024..1424 + FAULT_AREA_BYTES);
        assert_eq!(timed.total, 1424 + FAULT_AREA_BYTES);
        // One untimed kernel: the stamps would not cover it, so events time the run.
        let mixed = plan(&[timed_node(vec![0, 1, 2]), node(vec![2, 1, 2])]);
        assert!(!mixed.timed);
        assert_eq!(mixed.download, 1024..1428);
    }

    #[test]
    fn runtime_sized_slots_and_artifacts_over_the_arena_take_the_batch_lane() {
        let nodes = [node(vec![0, 1, 2])];
        let plan = |bytes: [usize; 3], capacity| {
            PackedPlan::new(
                LIMITS,
                &nodes,
                &bytes,
                &[false, false, true],
                &[2],
                capacity,
            )
            .unwrap()
        };
        assert!(plan([400, 0, 400], 1 << 16).is_none());
        assert!(plan([400, 400, 400], 1024).is_none());
        assert!(plan([400, 400, 400], 0).is_none());
        assert!(plan([400, 400, 400], 1024 + 400 + FAULT_AREA_BYTES).is_some());
    }
}
