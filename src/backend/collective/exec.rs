//! One dispatch of a program holding collectives on a set of local ranks, from one host
//! thread: the ranks of a [`super::CudaCluster`], or the one rank of a joined backend.
//!
//! Everything is enqueued before anything is awaited, one stream per rank: each segment's
//! kernels, then the collective (NCCL calls in one group over the local ranks, so one
//! thread can drive them all), so stream order makes a collective a barrier. Shapes,
//! kernels and memory are all settled first: once one rank has enqueued a collective, no
//! error of ours may stop another rank from enqueueing its half. The wait has a deadline;
//! a timeout or an NCCL error aborts every communicator involved. Exact reductions of
//! ranks linked by peer access (every rank of a `CudaCluster` whose GPUs reach each
//! other's memory) fold from the ranks' buffers directly (`Fold::peer_all_reduce`,
//! `Fold::peer_reduce_scatter`): one kernel per rank that meets the others itself
//! (`Fold::synced`), else the fold between barriers across the ranks' streams
//! (`barrier.rs`).

use super::barrier::{self, Member, PeerBarrierKind};
use super::{CollectiveReduction, FoldForm, RankComm, Schedule};
use crate::backend::cache::LoadedKernel;
use crate::backend::dispatch::{check_fault, nanos, shape_outputs, Timing, BINDING_ALIGN};
use crate::backend::launch::{self, LaunchArgs};
use crate::backend::plan::{binding_order, starts_zeroed, DispatchPlan};
use crate::backend::pool::{Block, Pooled, StreamSlot};
use crate::backend::staging::{DeviceToHost, HostToDevice};
use crate::backend::{Core, ResidentBuffer};
use crate::codegen::{
    buffer_abi, fold_operator, split_collectives, CollectiveKind, CollectiveStep, KernelAbi,
    RankStep, FAULT_AREA_BYTES, FOLD_WORKGROUP, VECTOR_LANES,
};
use crate::driver::nccl::{NcclComm, NcclDataType, NcclGroup, NcclRedOp};
use crate::driver::{DriverError, Stream};
use crate::error::CudaError;
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};
use vyre_driver::{DispatchConfig, Resource};
use vyre_foundation::ir::{CollectiveOp, DataType, Program};

/// Where one rank's buffers come from.
pub(crate) enum Bound<'a> {
    /// Host inputs, as `CudaBackend::dispatch_borrowed` takes them; outputs come back.
    Host(&'a [&'a [u8]]),
    /// Resident buffers in binding order, as `dispatch_resident_timed` takes them; the
    /// results stay in them.
    Resident(&'a [Resource]),
}

/// How one reduction combines the ranks.
#[derive(Clone)]
enum Reduction {
    /// NCCL's own operator (exact for integers; NCCL's order for floats).
    Native(NcclDataType, NcclRedOp),
    /// Rank-order fold by a kernel over `element`s of `element_bytes`.
    Fold {
        op: CollectiveOp,
        element: DataType,
        element_bytes: usize,
    },
}

/// One collective with everything decided: byte lengths and the reduction.
struct Planned {
    step: CollectiveStep,
    /// Indices into the ABI's bindings (and each job's addresses) of the input and output.
    input_binding: usize,
    output_binding: usize,
    /// Bytes of the input and output buffers (equal on every rank).
    input_bytes: usize,
    output_bytes: usize,
    reduction: Option<Reduction>,
    /// Whether an exact reduction folds from every rank's memory (peer access) rather
    /// than exchanging blocks through NCCL first.
    peer: bool,
    /// How a peer-folded AllReduce gives every rank the folded blocks.
    spread: Spread,
}

/// One local rank's state for the dispatch.
struct Job<'a> {
    core: &'a Core,
    rank: &'a RankComm,
    comm: MutexGuard<'a, Option<NcclComm>>,
    abi: KernelAbi,
    plan: DispatchPlan,
    /// Device address of every binding (declaration order).
    addresses: smallvec::SmallVec<[u64; 8]>,
    /// The resident buffers bound, kept alive until the dispatch ends.
    _held: Vec<Arc<ResidentBuffer>>,
    slot: Pooled<StreamSlot>,
    /// Taken by [`Job::reserve`], once every rank's plan is known.
    block: Option<Block>,
    /// Offsets in `block`: the host bindings, the fault areas (one per segment and one for
    /// the folds), the fold scratch.
    host_offsets: smallvec::SmallVec<[usize; 8]>,
    faults_at: usize,
    fault_areas: usize,
    scratch_at: usize,
    segments: Vec<Arc<LoadedKernel>>,
    folds: Vec<Option<Arc<LoadedKernel>>>,
    /// Each collective's peer-synced fold (`codegen::PeerSync`), where it meets the other
    /// ranks itself instead of between barriers.
    synced: Vec<Option<Arc<LoadedKernel>>>,
}

impl Job<'_> {
    fn comm(&self) -> &NcclComm {
        self.comm.as_ref().expect("locked communicators are live")
    }

    fn stream(&self) -> &Stream {
        &self.slot.stream
    }

    fn base(&self) -> u64 {
        self.block.as_ref().map_or(0, |block| block.ptr())
    }

    fn fault(&self, index: usize) -> u64 {
        self.base() + (self.faults_at + index * FAULT_AREA_BYTES) as u64
    }

    fn scratch(&self) -> u64 {
        self.base() + self.scratch_at as u64
    }
}

/// Runs `program` on the local `ranks` (rank order), each over its `bound` buffers; for
/// host-bound ranks `outputs[i]` receives rank i's outputs.
pub(crate) fn run(
    ranks: &[&Core],
    program: &Program,
    bound: &[Bound<'_>],
    config: &DispatchConfig,
    outputs: &mut [Vec<Vec<u8>>],
) -> Result<Vec<Timing>, CudaError> {
    let started = Instant::now();
    let schedule = schedule(ranks[0], program)?;
    let mut jobs = Vec::with_capacity(ranks.len());
    for (core, bound) in ranks.iter().zip(bound) {
        jobs.push(Job::new(core, program, bound, config)?);
    }
    let mut planned = plan_collectives(&jobs, &schedule)?;
    if let Some(barrier) = peer_linked(&jobs) {
        for collective in &mut planned {
            collective.peer = folds_from_peers(collective, jobs.len(), barrier);
            collective.spread = spread(collective.input_bytes, jobs.len(), barrier);
        }
    }
    for job in &mut jobs {
        job.load(&schedule, &planned, config)?;
        job.reserve(&planned)?;
    }
    for (job, bound) in jobs.iter_mut().zip(bound) {
        job.stage(bound).map_err(|e| job.core.driver_error(e))?;
    }
    let enqueue_ns = nanos(started);
    let enqueued = enqueue(&mut jobs, &schedule, &planned, config);
    let wait_started = Instant::now();
    let waited = enqueued.and_then(|()| wait(&mut jobs));
    if let Err(error) = waited {
        abort_all(&mut jobs, &error);
        return Err(error);
    }
    let mut timings = Vec::with_capacity(jobs.len());
    for (index, job) in jobs.into_iter().enumerate() {
        let out = outputs.get_mut(index);
        timings.push(job.finish(out, started, enqueue_ns, wait_started)?);
    }
    Ok(timings)
}

/// The program cut at its collectives, cached on the first rank.
fn schedule(core: &Core, program: &Program) -> Result<Arc<Schedule>, CudaError> {
    let rank = core.rank.get().expect("only ranks run collectives");
    let identity = core.identities.of(program)?;
    if let Some(found) = rank
        .schedules
        .lock()
        .ok()
        .and_then(|s| s.get(&identity).cloned())
    {
        return Ok(found);
    }
    // A program without collectives is one segment (it still runs on every rank).
    let prepared = crate::backend::validated_ranked(program)?;
    let steps =
        split_collectives(&prepared)?.unwrap_or_else(|| vec![RankStep::Segment(program.clone())]);
    let schedule = Arc::new(Schedule { steps });
    if let Ok(mut schedules) = rank.schedules.lock() {
        schedules.insert(identity, Arc::clone(&schedule));
    }
    Ok(schedule)
}

impl<'a> Job<'a> {
    /// Locks the rank's communicator and resolves its buffers and the grid of the whole
    /// program (every segment runs on it, as the oracle's segments do).
    fn new(
        core: &'a Core,
        program: &Program,
        bound: &Bound<'_>,
        config: &DispatchConfig,
    ) -> Result<Self, CudaError> {
        core.usable()?;
        let rank = core.rank.get().expect("only ranks run collectives");
        let comm = rank.lock()?;
        crate::backend::dispatch::check_config(config, core.grid_sync)?;
        let workgroup = config
            .workgroup_override
            .unwrap_or_else(|| program.workgroup_size());
        let abi = buffer_abi(program, workgroup)?;
        let mut held = Vec::new();
        let (plan, resident) = match bound {
            Bound::Host(inputs) => {
                let lens: smallvec::SmallVec<[usize; 8]> = inputs.iter().map(|i| i.len()).collect();
                let plan = DispatchPlan::new(program, &abi, &lens, config, core.limits)?;
                (plan, None)
            }
            Bound::Resident(resources) => {
                let (plan, addresses) = resolve(core, program, &abi, resources, config, &mut held)?;
                (plan, Some(addresses))
            }
        };
        let mut host_offsets = smallvec::SmallVec::new();
        let mut next = 0usize;
        if resident.is_none() {
            for bytes in &plan.bindings {
                host_offsets.push(next);
                next += bytes.len.next_multiple_of(BINDING_ALIGN);
            }
        }
        let faults_at = next;
        let slot = core.stream().map_err(|e| core.driver_error(e))?;
        Ok(Self {
            core,
            rank,
            comm,
            abi,
            addresses: resident.unwrap_or_default(),
            plan,
            _held: held,
            slot,
            block: None,
            host_offsets,
            faults_at,
            fault_areas: 0,
            scratch_at: faults_at,
            segments: Vec::new(),
            folds: Vec::new(),
            synced: Vec::new(),
        })
    }

    /// Loads every kernel the dispatch launches (segments, folds) before anything runs.
    fn load(
        &mut self,
        schedule: &Schedule,
        planned: &[Planned],
        config: &DispatchConfig,
    ) -> Result<(), CudaError> {
        for step in &schedule.steps {
            if let RankStep::Segment(segment) = step {
                let kernel = self.core.kernel(segment, config)?;
                if kernel.abi.bindings.len() != self.abi.bindings.len() {
                    return Err(CudaError::invalid_input(
                        "a segment of the program binds other buffers than the program",
                        "report this as a vyre-cuda bug with the program",
                    ));
                }
                self.segments.push(kernel);
            }
        }
        for collective in planned {
            let (fold, synced) = match &collective.reduction {
                Some(Reduction::Fold { op, element, .. }) if self.rank.world > 1 => {
                    let world = self.rank.world;
                    let form = fold_form(collective, self.rank.rank, world);
                    let program = (self.rank.fold(*op, element.clone(), world, form))
                        .expect("planned folds have an operator");
                    let fold = self.core.kernel(&program, &DispatchConfig::default())?;
                    (Some(fold), self.synced_fold(&program, form))
                }
                _ => (None, None),
            };
            self.folds.push(fold);
            self.synced.push(synced);
        }
        // One zeroed fault area per segment and one for the folds, when any kernel
        // reports faults; none (no zeroing, no read-back) otherwise.
        let reports = |kernel: &Arc<LoadedKernel>| kernel.abi.fault_word;
        if self
            .segments
            .iter()
            .chain(self.folds.iter().flatten())
            .any(reports)
        {
            self.fault_areas = self.segments.len() + 1;
            self.scratch_at = self.faults_at + self.fault_areas * FAULT_AREA_BYTES;
        }
        Ok(())
    }

    /// The peer-synced form of a peer fold (`form` `PeerInPlace` or `PeerScatter`) on ranks
    /// whose barrier has memory-operation flags, unless `VYRE_CUDA_PEER_SYNC=barriers`.
    /// `None` where the fold reports faults (every thread must reach the last meeting) or
    /// cannot be emitted so, logged: it then runs between barriers.
    fn synced_fold(&self, program: &Program, form: FoldForm) -> Option<Arc<LoadedKernel>> {
        let flags = self.rank.peer_barrier()?.kind() != PeerBarrierKind::Events;
        let peer = matches!(form, FoldForm::PeerInPlace(_) | FoldForm::PeerScatter);
        if !(flags && peer && peer_sync_enabled()) {
            return None;
        }
        let sync = crate::codegen::PeerSync {
            world: u32::try_from(self.rank.world).ok()?,
            rank: u32::try_from(self.rank.rank).ok()?,
        };
        // Its vector entry's module is compiled here, before anything of the dispatch runs
        // (a module load may wait for the device's running work).
        let loaded = self
            .core
            .peer_synced_kernel(program, sync)
            .and_then(|kernel| {
                kernel.vector_function().ok_or_else(|| {
                    CudaError::invalid_input(
                        "the peer-synced fold's vector entry did not load",
                        "report this as a vyre-cuda bug",
                    )
                })?;
                Ok(kernel)
            });
        match loaded {
            Ok(kernel) => Some(kernel),
            Err(error) => {
                tracing::debug!(%error, "a peer fold runs between barriers");
                None
            }
        }
    }

    /// Takes device memory for the host bindings, the fault areas and the fold scratch
    /// (none when the ranks fold from each other's memory).
    fn reserve(&mut self, planned: &[Planned]) -> Result<(), CudaError> {
        let world = self.rank.world;
        let scratch = planned
            .iter()
            .filter(|p| matches!(p.reduction, Some(Reduction::Fold { .. })) && world > 1)
            .filter(|p| !p.peer)
            .map(|p| scratch_bytes(p, world))
            .max()
            .unwrap_or(0);
        let total = self.scratch_at + scratch;
        let block = self
            .core
            .pool
            .take(&self.slot.stream, total.max(1))
            .map_err(|e| self.core.driver_error(e))?;
        self.block = Some(block);
        if self.addresses.is_empty() {
            let base = self.base();
            self.addresses = self.host_offsets.iter().map(|o| base + *o as u64).collect();
        }
        Ok(())
    }

    /// Uploads host inputs, zeroes outputs and the fault areas.
    fn stage(&mut self, bound: &Bound<'_>) -> Result<(), DriverError> {
        let stream = &self.slot.stream;
        if self.fault_areas > 0 {
            stream.memset_zero(self.fault(0), self.fault_areas * FAULT_AREA_BYTES)?;
        }
        let Bound::Host(inputs) = bound else {
            return Ok(());
        };
        let mut copies: smallvec::SmallVec<[HostToDevice<'_>; 8]> = smallvec::SmallVec::new();
        for ((binding, bytes), address) in self
            .abi
            .bindings
            .iter()
            .zip(&self.plan.bindings)
            .zip(&self.addresses)
        {
            if let Some(input) = bytes.input {
                copies.push(HostToDevice {
                    dst: *address,
                    src: inputs[input],
                });
            } else if starts_zeroed(binding.role) {
                stream.memset_zero(*address, bytes.len)?;
            }
        }
        self.core.staging.upload_now(stream, &copies)
    }

    /// Enqueues segment `index` (every entry of it).
    fn launch_segment(&self, index: usize) -> Result<(), DriverError> {
        let kernel = &self.segments[index];
        let args = LaunchArgs {
            pointers: self.addresses.clone(),
            counts: self.plan.bindings.iter().map(|b| b.elements).collect(),
            fault: kernel.abi.fault_word.then(|| self.fault(index)),
            peer: None,
        };
        launch::enqueue(
            self.stream(),
            kernel,
            self.plan.grid,
            &args,
            1,
            self.core.grid_sync,
            &self.core.metrics,
        )
    }

    /// Reads back (host-bound ranks), checks the fault words and returns the resources.
    fn finish(
        self,
        outputs: Option<&mut Vec<Vec<u8>>>,
        started: Instant,
        enqueue_ns: u64,
        wait_started: Instant,
    ) -> Result<Timing, CudaError> {
        let result = self.read_back(outputs);
        let timing = Timing::since(started, enqueue_ns, wait_started, None);
        let failed = crate::backend::failed_on_device(&result);
        if let Some(block) = self.block {
            block.discard_if(failed);
        }
        self.slot.discard_if(failed);
        result.map(|()| timing)
    }

    fn read_back(&self, outputs: Option<&mut Vec<Vec<u8>>>) -> Result<(), CudaError> {
        let core = self.core;
        let host = !self.host_offsets.is_empty();
        if !host && self.fault_areas == 0 {
            // The wait saw the work complete, and nothing comes back.
            return Ok(());
        }
        let mut words = vec![0u8; self.fault_areas * FAULT_AREA_BYTES];
        let mut scratch = Vec::new();
        let outputs = outputs.unwrap_or(&mut scratch);
        if host {
            crate::backend::dispatch::size_outputs(&self.abi, outputs);
        }
        {
            let mut copies: smallvec::SmallVec<[DeviceToHost<'_>; 8]> = smallvec::SmallVec::new();
            if host {
                let returned = self
                    .abi
                    .bindings
                    .iter()
                    .zip(&self.plan.bindings)
                    .zip(&self.addresses)
                    .filter(|((binding, _), _)| binding.role.is_returned());
                for (((_, bytes), address), out) in returned.zip(outputs.iter_mut()) {
                    out.resize(bytes.len, 0);
                    copies.push(DeviceToHost {
                        src: *address,
                        dst: out.as_mut_slice(),
                    });
                }
            }
            if self.fault_areas > 0 {
                copies.push(DeviceToHost {
                    src: self.fault(0),
                    dst: &mut words,
                });
            }
            core.staging
                .download_now(self.stream(), &mut copies)
                .and_then(|()| self.stream().synchronize())
                .map_err(|e| core.driver_error(e))?;
        }
        let code = words
            .chunks_exact(FAULT_AREA_BYTES)
            .map(|area| u32::from_le_bytes([area[0], area[1], area[2], area[3]]))
            .find(|&code| code != 0)
            .unwrap_or(0);
        check_fault(core, code, outputs).map_err(|error| match error {
            CudaError::KernelRuntime { message, fix } => CudaError::KernelRuntime {
                message: format!("rank {}: {message}", self.rank.rank),
                fix,
            },
            other => other,
        })?;
        if host {
            shape_outputs(&self.abi, outputs);
        }
        Ok(())
    }
}

/// The plan and device addresses of resident `resources` (binding order).
fn resolve(
    core: &Core,
    program: &Program,
    abi: &KernelAbi,
    resources: &[Resource],
    config: &DispatchConfig,
    held: &mut Vec<Arc<ResidentBuffer>>,
) -> Result<(DispatchPlan, smallvec::SmallVec<[u64; 8]>), CudaError> {
    let order = binding_order(program, abi);
    let mut addresses = smallvec::smallvec![0u64; abi.bindings.len()];
    let mut lens = smallvec::SmallVec::<[usize; 8]>::from_elem(0, abi.bindings.len());
    if resources.len() == abi.bindings.len() {
        for (position, resource) in resources.iter().enumerate() {
            let buffer = core.resident(core.resident_id(resource)?)?;
            addresses[order[position]] = buffer.ptr();
            lens[order[position]] = buffer.len();
            held.push(buffer);
        }
    } else {
        lens.truncate(resources.len());
    }
    let plan = DispatchPlan::resident(program, abi, &lens, config, core.limits)?;
    Ok((plan, addresses))
}

/// Bytes of fold scratch one collective needs on one rank: every rank's block of the
/// part this rank folds.
fn scratch_bytes(planned: &Planned, world: usize) -> usize {
    let Some(Reduction::Fold { element_bytes, .. }) = &planned.reduction else {
        return 0;
    };
    match planned.step.kind {
        CollectiveKind::ReduceScatter => world * planned.output_bytes,
        _ if gathers_whole(planned.input_bytes, world) => world * planned.input_bytes,
        _ => {
            let values = planned.input_bytes / element_bytes;
            world * values.div_ceil(world) * element_bytes
        }
    }
}

/// An exact AllReduce whose per-rank buffer, times W, is at most this many bytes gathers
/// every rank's whole buffer and folds it on every rank (one NCCL all-gather and one
/// kernel), instead of the all-to-all of blocks, block fold and all-gather of the folded
/// blocks, which moves 2 (W - 1) / W of the bytes instead of W - 1 times them. Measured on
/// 2x H200 (NV18): the gather wins up to 8 MiB per rank, ties at 32 MiB, loses from 128
/// MiB. (The same gather for ReduceScatter measured no faster at small sizes and slower
/// from 2 MiB, so it is not used there.)
/// `VYRE_CUDA_ALLREDUCE_GATHER_BYTES` overrides the product (for measuring the crossover).
const GATHER_FOLD_MAX_BYTES: usize = 16 << 20;

fn gathers_whole(bytes: usize, world: usize) -> bool {
    static LIMIT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let limit = *LIMIT.get_or_init(|| {
        std::env::var("VYRE_CUDA_ALLREDUCE_GATHER_BYTES")
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(GATHER_FOLD_MAX_BYTES)
    });
    bytes.saturating_mul(world) <= limit
}

/// The fold kernel rank `rank` launches for `collective`: the peer forms when the ranks
/// read each other's memory; else the gathered small AllReduce folds every block from
/// scratch and the all-to-all forms read the rank's own block where it lies.
fn fold_form(collective: &Planned, rank: usize, world: usize) -> FoldForm {
    let peer = collective.peer;
    match collective.step.kind {
        CollectiveKind::ReduceScatter if peer => FoldForm::PeerScatter,
        CollectiveKind::ReduceScatter => FoldForm::Around(rank),
        _ if peer && collective.spread == Spread::Write => FoldForm::PeerInPlace(rank),
        _ if peer => FoldForm::PeerLocal(rank),
        _ if gathers_whole(collective.input_bytes, world) => FoldForm::Gathered,
        _ => FoldForm::AroundInPlace(rank),
    }
}

/// How a peer-linked exact AllReduce gives every rank the folded blocks (each rank's
/// fold kernel folds one block of every rank's buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spread {
    /// The fold kernel writes each folded element to every rank.
    Write,
    /// Each fold writes its own block; after a barrier every rank copies the others'
    /// blocks (copy engine over the peer links).
    Pull,
    /// Each fold writes its own block and NCCL send/recv carry the blocks.
    Nccl,
}

/// Measured on H200s (NV18; BENCHMARKS.md, 100 back-to-back dispatches). Two ranks: the
/// kernel writes each folded element to both below `PEER_PULL_MIN_BYTES` (1.3-2x NCCL's
/// own reduction there), and from it the copy engine is faster (128 MiB 405 vs 427 us,
/// 1 GiB 3.00 vs 3.28 ms). Four ranks with stream-memory-operation barriers: the kernel's
/// writes win below `MANY_RANKS_NCCL_SPREAD_MIN_BYTES` (8 MiB 72.8 vs 87.4 us by NCCL
/// send/recv; with emitter v12's 16-byte accesses 32 MiB 194 vs 206 us, 512 MiB 2.53 vs
/// 2.58 ms; copy-engine pulls were slower at every size) and NCCL from 1 GiB (0.93x vs
/// 0.91x NCCL direct). Four ranks with event barriers: every cross-GPU
/// event wait costs several microseconds, so NCCL carries the blocks after one barrier at
/// every size. `VYRE_CUDA_PEER_SPREAD=write|pull|nccl` forces one (for measuring).
const PEER_PULL_MIN_BYTES: usize = 128 << 20;
const MANY_RANKS_NCCL_SPREAD_MIN_BYTES: usize = 1 << 30;

fn spread(bytes: usize, world: usize, barrier: PeerBarrierKind) -> Spread {
    static FORCED: std::sync::OnceLock<Option<Spread>> = std::sync::OnceLock::new();
    let forced = FORCED.get_or_init(
        || match std::env::var("VYRE_CUDA_PEER_SPREAD").ok()?.trim() {
            "write" => Some(Spread::Write),
            "pull" => Some(Spread::Pull),
            "nccl" => Some(Spread::Nccl),
            _ => None,
        },
    );
    let many = world > 2;
    match forced {
        Some(spread) => *spread,
        None if many && barrier == PeerBarrierKind::Events => Spread::Nccl,
        None if many && bytes >= MANY_RANKS_NCCL_SPREAD_MIN_BYTES => Spread::Nccl,
        None if !many && bytes >= PEER_PULL_MIN_BYTES => Spread::Pull,
        None => Spread::Write,
    }
}

/// Blocks per SM of the peer folds with 3+ ranks (2 ranks: one pass). With fewer blocks
/// than the block of values needs, each thread loops: its stores of one pass drain while
/// it loads the next, where one pass over the whole block loads everything and then
/// stores everything. Measured on 4x H200 (docs/gpu-runs/collectives-loop-2026-11-28),
/// two runs each, exact AllReduce (remote stores): 1 block per SM 8 MiB 60.5-61.3 us,
/// 32 MiB 178.2, 128 MiB 646.4-646.6; 2 and 4 blocks 62.9-64.8, 182.4-184.1, 655.5-658.3;
/// one pass 62.8-63.7, 186.2-187.0, 661.1-661.2. Exact ReduceScatter: 1 block 8 MiB
/// 43.3-46.6, 128 MiB 340.4-341.3; 2 and 4 blocks 45.0-49.1, 358.4-359.7; one pass
/// 48.3-49.3, 349.7-349.9. On 2x H200 one pass was as fast or faster (AllReduce 32 MiB
/// 115.0 vs 117.5 us, ReduceScatter 128 MiB 218.5 vs 228). Below ~2 MiB every form is
/// one pass. `VYRE_CUDA_PEER_FOLD_BLOCKS_PER_SM` (AllReduce) and
/// `VYRE_CUDA_PEER_SCATTER_BLOCKS_PER_SM` (ReduceScatter) override it at every world
/// size (`0`: one pass), for measuring.
const MANY_RANKS_PEER_FOLD_BLOCKS_PER_SM: u32 = 1;
/// The fewest passes each thread of a peer fold makes with 3+ ranks (fewer blocks for
/// smaller folds, so that they loop too). Measured on 4x H200, AllReduce and
/// ReduceScatter 512 KiB .. 32 MiB, two runs each: summed exact times 1036.7 us (2 passes),
/// 1073.7 (1), 1081.5 (4), 1102.7 (8), the differences within run-to-run noise at 2 MiB
/// and below. `VYRE_CUDA_PEER_FOLD_PASSES` overrides it at every world size.
const MANY_RANKS_PEER_FOLD_PASSES: u32 = 2;

/// Blocks per SM a peer-synced fold may use at most: all of them resident at once (every
/// block meets the peers before folding).
const SYNCED_BLOCKS_PER_SM: u32 = 4;

/// Whether exact peer folds meet the other ranks inside their kernels
/// (`VYRE_CUDA_PEER_SYNC=kernel`, the default) or between barriers (`barriers`).
fn peer_sync_enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENABLED
        .get_or_init(|| !std::env::var("VYRE_CUDA_PEER_SYNC").is_ok_and(|v| v.trim() == "barriers"))
}

/// Which peer fold a block cap is for.
#[derive(Clone, Copy)]
enum FoldBlocks {
    Spread,
    Scatter,
}

/// The most blocks the peer fold's vector entry may use on `job`'s device.
fn peer_fold_blocks(job: &Job<'_>, fold: FoldBlocks, bytes: usize, element_bytes: usize) -> u32 {
    static FORCED: std::sync::OnceLock<[Option<u32>; 3]> = std::sync::OnceLock::new();
    let forced = FORCED.get_or_init(|| {
        let read = |name: &str| std::env::var(name).ok()?.trim().parse().ok();
        [
            read("VYRE_CUDA_PEER_FOLD_BLOCKS_PER_SM"),
            read("VYRE_CUDA_PEER_SCATTER_BLOCKS_PER_SM"),
            read("VYRE_CUDA_PEER_FOLD_PASSES"),
        ]
    });
    let world = job.rank.world;
    let default = if world == 2 {
        0
    } else {
        MANY_RANKS_PEER_FOLD_BLOCKS_PER_SM
    };
    let per_sm = match fold {
        FoldBlocks::Spread => forced[0],
        FoldBlocks::Scatter => forced[1],
    };
    let cap = match per_sm.unwrap_or(default) {
        0 => u32::MAX,
        per_sm => per_sm.saturating_mul(job.core.device.info().multiprocessor_count),
    };
    let passes = forced[2].unwrap_or(if world == 2 {
        1
    } else {
        MANY_RANKS_PEER_FOLD_PASSES
    });
    let per_block_pass = (FOLD_WORKGROUP * VECTOR_LANES) as usize * element_bytes;
    let for_passes = bytes.div_ceil(per_block_pass * passes.max(1) as usize);
    cap.min(u32::try_from(for_passes.max(1)).unwrap_or(u32::MAX))
}

/// With more than two ranks and event barriers, exact reductions smaller than this
/// (AllReduce buffer, ReduceScatter input) exchange blocks through NCCL even when the
/// ranks are linked: the peer fold's cross-GPU event barriers (W (W - 1) waits each) cost
/// more there. Measured on 4x H200: ReduceScatter 8 MiB 71 us peer vs 53 us exchanged,
/// 32 MiB 104 vs 124 us. With stream-memory-operation barriers the peer fold is as fast
/// as NCCL's own ReduceScatter from 8 B (BENCHMARKS.md), so they fold from peers at every
/// size. `VYRE_CUDA_PEER_FOLD_MIN_BYTES` overrides it for 3+ ranks (for measuring).
const MANY_RANKS_PEER_MIN_BYTES: usize = 32 << 20;

fn many_ranks_peer_min_bytes(barrier: PeerBarrierKind) -> usize {
    static FORCED: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    let forced = FORCED.get_or_init(|| {
        std::env::var("VYRE_CUDA_PEER_FOLD_MIN_BYTES")
            .ok()
            .and_then(|text| text.trim().parse().ok())
    });
    match (forced, barrier) {
        (Some(bytes), _) => *bytes,
        (None, PeerBarrierKind::Events) => MANY_RANKS_PEER_MIN_BYTES,
        (None, _) => 0,
    }
}

/// Whether `collective`, on ranks linked by peer access, folds from their memory.
fn folds_from_peers(collective: &Planned, world: usize, barrier: PeerBarrierKind) -> bool {
    let folds = matches!(collective.reduction, Some(Reduction::Fold { .. }));
    folds && (world == 2 || collective.input_bytes >= many_ranks_peer_min_bytes(barrier))
}

/// The barrier of this dispatch's ranks when its exact reductions may fold from every
/// rank's memory: every rank of the world is here and their cluster linked them.
fn peer_linked(jobs: &[Job<'_>]) -> Option<PeerBarrierKind> {
    let world = jobs[0].rank.world;
    if world < 2 || jobs.len() != world {
        return None;
    }
    let kind = jobs[0].rank.peer_barrier()?.kind();
    jobs.iter()
        .all(|job| job.rank.peer_barrier().is_some())
        .then_some(kind)
}

/// Checks every collective's shapes on every local rank and decides its reduction.
fn plan_collectives(jobs: &[Job<'_>], schedule: &Schedule) -> Result<Vec<Planned>, CudaError> {
    let first = &jobs[0];
    let world = first.rank.world;
    let mut planned = Vec::new();
    for step in &schedule.steps {
        let RankStep::Collective(step) = step else {
            continue;
        };
        let binding = |decl: usize| {
            first
                .abi
                .bindings
                .iter()
                .position(|b| b.decl_index == decl)
                .expect("collectives name storage buffers")
        };
        let (input, output) = (binding(step.input), binding(step.output));
        let bytes = |job: &Job<'_>, index: usize| job.plan.bindings[index].len;
        for job in jobs {
            for index in [input, output] {
                if bytes(job, index) != bytes(first, index) {
                    return Err(CudaError::invalid_input(
                        format!(
                            "{:?}: rank {} binds {} bytes for `{}`, rank {} binds {}",
                            step.kind,
                            job.rank.rank,
                            bytes(job, index),
                            first.abi.bindings[index].name,
                            first.rank.rank,
                            bytes(first, index)
                        ),
                        "bind the same buffer lengths on every rank (SPMD)",
                    ));
                }
            }
        }
        let (input_bytes, output_bytes) = (bytes(first, input), bytes(first, output));
        check_shape(
            step,
            input_bytes,
            output_bytes,
            world,
            &first.abi,
            input,
            output,
        )?;
        let reduction = match step.op {
            Some(op) => Some(reduction(first.rank, op, &step.element)?),
            None => None,
        };
        planned.push(Planned {
            step: step.clone(),
            input_binding: input,
            output_binding: output,
            input_bytes,
            output_bytes,
            reduction,
            peer: false,
            spread: Spread::Nccl,
        });
    }
    Ok(planned)
}

/// The shape rules of the collectives (W = `world`).
fn check_shape(
    step: &CollectiveStep,
    input_bytes: usize,
    output_bytes: usize,
    world: usize,
    abi: &KernelAbi,
    input: usize,
    output: usize,
) -> Result<(), CudaError> {
    let name = |index: usize| &*abi.bindings[index].name;
    let rule = match step.kind {
        CollectiveKind::AllGather if output_bytes != world * input_bytes => {
            Some(("output", output_bytes, "W x the input", world * input_bytes))
        }
        CollectiveKind::ReduceScatter if input_bytes != world * output_bytes => {
            Some(("input", input_bytes, "W x the output", world * output_bytes))
        }
        _ => None,
    };
    if let Some((which, have, rule, want)) = rule {
        let index = if which == "output" { output } else { input };
        return Err(CudaError::invalid_input(
            format!(
                "{:?} {which} `{}` has {have} bytes but needs {rule} = {want} (W = {world})",
                step.kind,
                name(index)
            ),
            format!("size `{}` to {want} bytes", name(index)),
        ));
    }
    if step.kind == CollectiveKind::Broadcast && step.root as usize >= world {
        return Err(CudaError::invalid_input(
            format!(
                "Broadcast root {} is not a rank of a world of {world}",
                step.root
            ),
            "use a root below the world size",
        ));
    }
    Ok(())
}

/// How `op` over `element` combines ranks on this rank's settings.
fn reduction(
    rank: &RankComm,
    op: CollectiveOp,
    element: &DataType,
) -> Result<Reduction, CudaError> {
    let native_op = match op {
        CollectiveOp::Sum => Some(NcclRedOp::Sum),
        CollectiveOp::Min => Some(NcclRedOp::Min),
        CollectiveOp::Max => Some(NcclRedOp::Max),
        _ => None,
    };
    let integer = match element {
        DataType::U32 => Some(NcclDataType::Uint32),
        DataType::I32 => Some(NcclDataType::Int32),
        DataType::U64 => Some(NcclDataType::Uint64),
        DataType::I64 => Some(NcclDataType::Int64),
        _ => None,
    };
    // Not F64: vyre-reference computes f64 arithmetic (Min and Max included) at f32
    // precision, which NCCL's Float64 does not, so f64 always folds.
    let float = match element {
        DataType::F16 => Some(NcclDataType::Float16),
        DataType::BF16 => Some(NcclDataType::Bfloat16),
        DataType::F32 => Some(NcclDataType::Float32),
        _ => None,
    };
    let native = match rank.reduction {
        CollectiveReduction::Native => integer.or(float),
        CollectiveReduction::Exact => integer,
    };
    if let (Some(dtype), Some(red)) = (native, native_op) {
        return Ok(Reduction::Native(dtype, red));
    }
    // The bitwise operators act on bits, so 64-bit integers fold as twice as many words
    // (vyre-reference has no 64-bit integer arithmetic to fold them with).
    let bitwise = matches!(
        op,
        CollectiveOp::BitAnd | CollectiveOp::BitOr | CollectiveOp::BitXor
    );
    let fold_element = match element {
        DataType::U64 | DataType::I64 if bitwise => DataType::U32,
        other => other.clone(),
    };
    let element_bytes = fold_element.size_bytes().unwrap_or(0);
    let unsupported = || {
        CudaError::invalid_input(
            format!("collective {op:?} over {element} has no rank-order fold"),
            "reduce a type and operator vyre defines (Sum/Min/Max over numbers, the bitwise \
             operators over integers)",
        )
    };
    if element_bytes == 0 || fold_operator(op).is_none() {
        return Err(unsupported());
    }
    Ok(Reduction::Fold {
        op,
        element: fold_element,
        element_bytes,
    })
}

/// Enqueues every step on every job's stream.
fn enqueue(
    jobs: &mut [Job<'_>],
    schedule: &Schedule,
    planned: &[Planned],
    config: &DispatchConfig,
) -> Result<(), CudaError> {
    // `fixpoint_iterations` runs the whole program that many times back to back, as it
    // launches every segment of a program split at grid-wide barriers.
    for _ in 0..config.fixpoint_iterations.unwrap_or(1).max(1) {
        let (mut segment, mut collective) = (0usize, 0usize);
        for step in &schedule.steps {
            match step {
                RankStep::Segment(_) => {
                    for job in jobs.iter() {
                        job.launch_segment(segment)
                            .map_err(|e| job.core.driver_error(e))?;
                    }
                    segment += 1;
                }
                RankStep::Collective(_) => {
                    run_collective(jobs, &planned[collective], collective)?;
                    collective += 1;
                }
            }
        }
    }
    for job in jobs.iter_mut() {
        job.slot
            .done
            .record(&job.slot.stream)
            .map_err(|e| job.core.driver_error(e))?;
    }
    Ok(())
}

/// Opens an NCCL group over the local ranks, runs `each` for every job, closes it.
fn grouped(
    jobs: &[Job<'_>],
    mut each: impl FnMut(&Job<'_>) -> Result<(), CudaError>,
) -> Result<(), CudaError> {
    let group = NcclGroup::start(&[]).map_err(CudaError::Nccl)?;
    let mut result = Ok(());
    for job in jobs {
        result = each(job);
        if result.is_err() {
            break;
        }
    }
    let ended = group.end().map_err(CudaError::Nccl);
    result.and(ended)
}

fn nccl(error: crate::driver::NcclError) -> CudaError {
    CudaError::Nccl(error)
}

/// One collective on every local rank.
fn run_collective(jobs: &[Job<'_>], planned: &Planned, index: usize) -> Result<(), CudaError> {
    let peer = planned.peer;
    let world = jobs[0].rank.world;
    let address = |job: &Job<'_>, binding: usize| job.addresses[binding];
    let (input_binding, output_binding) = (planned.input_binding, planned.output_binding);
    let step = &planned.step;
    match (&planned.reduction, step.kind) {
        (None, CollectiveKind::Broadcast) => grouped(jobs, |job| {
            let buffer = address(job, input_binding);
            (job.comm())
                .broadcast(
                    buffer,
                    buffer,
                    planned.input_bytes,
                    NcclDataType::Uint8,
                    step.root as usize,
                    job.stream(),
                )
                .map_err(nccl)
        }),
        (None, _) => grouped(jobs, |job| {
            (job.comm())
                .all_gather(
                    address(job, input_binding),
                    address(job, output_binding),
                    planned.input_bytes,
                    NcclDataType::Uint8,
                    job.stream(),
                )
                .map_err(nccl)
        }),
        (Some(Reduction::Native(dtype, op)), CollectiveKind::AllReduce) => grouped(jobs, |job| {
            let buffer = address(job, input_binding);
            let count = planned.input_bytes / dtype.size();
            (job.comm())
                .all_reduce(buffer, buffer, count, *dtype, *op, job.stream())
                .map_err(nccl)
        }),
        (Some(Reduction::Native(dtype, op)), _) => grouped(jobs, |job| {
            let count = planned.output_bytes / dtype.size();
            (job.comm())
                .reduce_scatter(
                    address(job, input_binding),
                    address(job, output_binding),
                    count,
                    *dtype,
                    *op,
                    job.stream(),
                )
                .map_err(nccl)
        }),
        (Some(Reduction::Fold { element_bytes, .. }), kind) => {
            let input = |job: &Job<'_>| address(job, input_binding);
            let output = |job: &Job<'_>| address(job, output_binding);
            if world == 1 {
                // One rank folds nothing: its bytes stay as they are.
                return match kind {
                    CollectiveKind::ReduceScatter => jobs.iter().try_for_each(|job| {
                        (job.stream())
                            .copy_device_to_device(output(job), input(job), planned.output_bytes)
                            .map_err(|e| job.core.driver_error(e))
                    }),
                    _ => Ok(()),
                };
            }
            let fold = Fold {
                world,
                element_bytes: *element_bytes,
                index,
            };
            match kind {
                CollectiveKind::ReduceScatter if peer => {
                    fold.peer_reduce_scatter(jobs, planned.output_bytes, &input, &output)
                }
                _ if peer => {
                    fold.peer_all_reduce(jobs, planned.input_bytes, planned.spread, &input)
                }
                CollectiveKind::ReduceScatter => {
                    fold.reduce_scatter(jobs, planned.output_bytes, &input, &output)
                }
                _ if gathers_whole(planned.input_bytes, world) => {
                    fold.gather_all_reduce(jobs, planned.input_bytes, &input)
                }
                _ => fold.all_reduce(jobs, planned.input_bytes, &input),
            }
        }
    }
}

/// The exact reductions: an all-to-all of blocks (grouped send/recv), a rank-order fold
/// kernel per rank and, for AllReduce, an all-gather of the folded blocks.
struct Fold {
    world: usize,
    element_bytes: usize,
    /// Which planned collective (its fold kernel in `Job::folds`).
    index: usize,
}

impl Fold {
    /// Rank `k`'s block of `bytes` for an AllReduce: `[start, end)` in bytes, cut on
    /// element boundaries that are 16-byte aligned from the buffer's start (where a fold's
    /// vector entry may read them), the last ones possibly shorter or empty.
    fn block(&self, bytes: usize, k: usize) -> (usize, usize) {
        let values = bytes / self.element_bytes;
        let aligned = 16 / gcd(16, self.element_bytes);
        let per = values.div_ceil(self.world).next_multiple_of(aligned);
        let start = (k * per).min(values) * self.element_bytes;
        let end = ((k + 1) * per).min(values) * self.element_bytes;
        (start, end)
    }

    fn all_reduce(
        &self,
        jobs: &[Job<'_>],
        bytes: usize,
        buffer: &dyn Fn(&Job<'_>) -> u64,
    ) -> Result<(), CudaError> {
        // Each rank gathers every rank's copy of its own block into its scratch.
        self.exchange(jobs, |job, peer| {
            let (mine, theirs) = (self.block(bytes, job.rank.rank), self.block(bytes, peer));
            let len = mine.1 - mine.0;
            let send = (buffer(job) + theirs.0 as u64, theirs.1 - theirs.0);
            let recv = (job.scratch() + (peer * len) as u64, len);
            (send, recv)
        })?;
        for job in jobs {
            let (start, end) = self.block(bytes, job.rank.rank);
            self.fold(job, None, buffer(job) + start as u64, end - start)?;
        }
        self.share_folded_blocks(jobs, bytes, buffer)
    }

    /// Every rank sends its folded block (in place in `buffer`) to every other.
    fn share_folded_blocks(
        &self,
        jobs: &[Job<'_>],
        bytes: usize,
        buffer: &dyn Fn(&Job<'_>) -> u64,
    ) -> Result<(), CudaError> {
        self.exchange(jobs, |job, peer| {
            let (mine, theirs) = (self.block(bytes, job.rank.rank), self.block(bytes, peer));
            let send = (buffer(job) + mine.0 as u64, mine.1 - mine.0);
            let recv = (buffer(job) + theirs.0 as u64, theirs.1 - theirs.0);
            (send, recv)
        })
    }

    /// A small AllReduce: every rank gathers every rank's whole buffer (one NCCL
    /// all-gather into its scratch) and folds all of it in place.
    fn gather_all_reduce(
        &self,
        jobs: &[Job<'_>],
        bytes: usize,
        buffer: &dyn Fn(&Job<'_>) -> u64,
    ) -> Result<(), CudaError> {
        grouped(jobs, |job| {
            (job.comm())
                .all_gather(
                    buffer(job),
                    job.scratch(),
                    bytes,
                    NcclDataType::Uint8,
                    job.stream(),
                )
                .map_err(nccl)
        })?;
        for job in jobs {
            self.fold(job, None, buffer(job), bytes)?;
        }
        Ok(())
    }

    fn reduce_scatter(
        &self,
        jobs: &[Job<'_>],
        block: usize,
        input: &dyn Fn(&Job<'_>) -> u64,
        output: &dyn Fn(&Job<'_>) -> u64,
    ) -> Result<(), CudaError> {
        self.exchange(jobs, |job, peer| {
            let send = (input(job) + (peer * block) as u64, block);
            let recv = (job.scratch() + (peer * block) as u64, block);
            (send, recv)
        })?;
        for job in jobs {
            let own = input(job) + (job.rank.rank * block) as u64;
            self.fold(job, Some(own), output(job), block)?;
        }
        Ok(())
    }

    /// In one group: every job sends `send` to and receives `recv` from every peer
    /// (`(address, bytes)` from `ranges(job, peer)`); a rank's own block stays where it is
    /// (the fold reads it there).
    fn exchange(
        &self,
        jobs: &[Job<'_>],
        ranges: impl Fn(&Job<'_>, usize) -> ((u64, usize), (u64, usize)),
    ) -> Result<(), CudaError> {
        grouped(jobs, |job| {
            for peer in (0..self.world).filter(|&peer| peer != job.rank.rank) {
                let ((send, send_len), (recv, recv_len)) = ranges(job, peer);
                let comm = job.comm();
                if send_len > 0 {
                    comm.send(send, send_len, NcclDataType::Uint8, peer, job.stream())
                        .map_err(nccl)?;
                }
                if recv_len > 0 {
                    comm.recv(recv, recv_len, NcclDataType::Uint8, peer, job.stream())
                        .map_err(nccl)?;
                }
            }
            Ok(())
        })
    }

    /// An exact AllReduce from every rank's memory: after a barrier, rank `r`'s kernel
    /// folds block `r` of every rank's buffer in rank order, then `spread` gives every
    /// rank every folded block: written to all by the kernel, or copied from the folding
    /// rank after a second barrier, or sent by NCCL. A last barrier (not after NCCL, whose
    /// sends follow the folds on each stream) holds every rank until every block is
    /// written.
    fn peer_all_reduce(
        &self,
        jobs: &[Job<'_>],
        bytes: usize,
        spread: Spread,
        buffer: &dyn Fn(&Job<'_>) -> u64,
    ) -> Result<(), CudaError> {
        let ranges = |job: &Job<'_>| {
            let (start, end) = self.block(bytes, job.rank.rank);
            let at = |peer: &Job<'_>| buffer(peer) + start as u64;
            (jobs.iter().map(at).collect(), end - start)
        };
        if spread == Spread::Write && self.synced(jobs, FoldBlocks::Spread, ranges)? {
            return Ok(());
        }
        peer_barrier(jobs)?;
        for job in jobs {
            let (pointers, bytes) = ranges(job);
            let max_blocks = match spread {
                Spread::Write => {
                    peer_fold_blocks(job, FoldBlocks::Spread, bytes, self.element_bytes)
                }
                Spread::Nccl | Spread::Pull => u32::MAX,
            };
            self.launch(job, pointers, bytes, max_blocks)?;
        }
        match spread {
            Spread::Write => return peer_barrier(jobs),
            // Rank k sends its folded block only after its fold has read every rank's
            // block k, so no barrier is needed before the blocks arrive.
            Spread::Nccl => return self.share_folded_blocks(jobs, bytes, buffer),
            Spread::Pull => {}
        }
        // Each rank copies every other rank's folded block from there (the copy engine
        // over the peer link).
        peer_barrier(jobs)?;
        for job in jobs {
            for peer in jobs.iter().filter(|p| p.rank.rank != job.rank.rank) {
                let (start, end) = self.block(bytes, peer.rank.rank);
                let at = start as u64;
                (job.stream())
                    .copy_device_to_device(buffer(job) + at, buffer(peer) + at, end - start)
                    .map_err(|e| job.core.driver_error(e))?;
            }
        }
        peer_barrier(jobs)
    }

    /// An exact ReduceScatter from every rank's memory: after a barrier, rank `r`'s kernel
    /// folds block `r` of every rank's input into its output; a second barrier keeps every
    /// input unchanged until all ranks have read it.
    fn peer_reduce_scatter(
        &self,
        jobs: &[Job<'_>],
        block: usize,
        input: &dyn Fn(&Job<'_>) -> u64,
        output: &dyn Fn(&Job<'_>) -> u64,
    ) -> Result<(), CudaError> {
        let ranges = |job: &Job<'_>| {
            let at = (job.rank.rank * block) as u64;
            let mut pointers: smallvec::SmallVec<[u64; 8]> =
                jobs.iter().map(|peer| input(peer) + at).collect();
            pointers.push(output(job));
            (pointers, block)
        };
        if self.synced(jobs, FoldBlocks::Scatter, ranges)? {
            return Ok(());
        }
        peer_barrier(jobs)?;
        for job in jobs {
            let (pointers, bytes) = ranges(job);
            let fold = FoldBlocks::Scatter;
            let max_blocks = peer_fold_blocks(job, fold, bytes, self.element_bytes);
            self.launch(job, pointers, bytes, max_blocks)?;
        }
        peer_barrier(jobs)
    }

    /// Runs every job's peer-synced fold (`Job::synced`) over the bindings and byte length
    /// `ranges` gives it, where every job has one that can run them (its vector entry fits
    /// the bindings), on two epochs reserved for it: the kernels meet each other before and
    /// after folding, with no barrier enqueued. `false`, having enqueued nothing, otherwise.
    fn synced(
        &self,
        jobs: &[Job<'_>],
        fold: FoldBlocks,
        ranges: impl Fn(&Job<'_>) -> (smallvec::SmallVec<[u64; 8]>, usize),
    ) -> Result<bool, CudaError> {
        let mut launches = Vec::with_capacity(jobs.len());
        for job in jobs {
            let Some(kernel) = job.synced[self.index].as_ref() else {
                return Ok(false);
            };
            let (pointers, bytes) = ranges(job);
            let values = elements(bytes / self.element_bytes)?;
            let args = LaunchArgs {
                counts: smallvec::smallvec![values; pointers.len()],
                pointers,
                fault: None,
                peer: None,
            };
            if !launch::vector_fits(kernel, &args, &(0..values)) {
                return Ok(false);
            }
            let resident = SYNCED_BLOCKS_PER_SM * job.core.device.info().multiprocessor_count;
            let blocks = peer_fold_blocks(job, fold, bytes, self.element_bytes).min(resident);
            launches.push((kernel, args, values, blocks));
        }
        let members = members(jobs).expect("peer folds run on linked ranks only");
        let Some(meetings) = barrier::reserve_meetings(&members) else {
            return Ok(false);
        };
        for ((job, (kernel, mut args, values, blocks)), meeting) in
            jobs.iter().zip(launches).zip(meetings)
        {
            args.peer = Some(meeting);
            let (stream, metrics) = (job.stream(), &job.core.metrics);
            launch::enqueue_peer_synced(stream, kernel, &args, values, blocks, metrics)
                .map_err(|e| job.core.driver_error(e))?;
        }
        Ok(true)
    }

    /// Folds the job's scratch (`world` blocks of `bytes`) into `out`; the rank's own block
    /// is read from `own` when given, else (an in-place fold) from `out` itself.
    fn fold(
        &self,
        job: &Job<'_>,
        own: Option<u64>,
        out: u64,
        bytes: usize,
    ) -> Result<(), CudaError> {
        let values = elements(bytes / self.element_bytes)?;
        let gathered = elements(bytes / self.element_bytes * self.world)?;
        let (pointers, counts) = match own {
            Some(own) => (
                smallvec::smallvec![job.scratch(), own, out],
                smallvec::smallvec![gathered, values, values],
            ),
            None => (
                smallvec::smallvec![job.scratch(), out],
                smallvec::smallvec![gathered, values],
            ),
        };
        self.launch_counted(job, pointers, counts, values, u32::MAX)
    }

    /// Launches the job's fold kernel over `bytes` of every binding in `pointers`, its
    /// vector entry on at most `max_blocks` blocks.
    fn launch(
        &self,
        job: &Job<'_>,
        pointers: smallvec::SmallVec<[u64; 8]>,
        bytes: usize,
        max_blocks: u32,
    ) -> Result<(), CudaError> {
        let values = elements(bytes / self.element_bytes)?;
        let counts = smallvec::smallvec![values; pointers.len()];
        self.launch_counted(job, pointers, counts, values, max_blocks)
    }

    /// Launches the job's fold kernel with these bindings, one invocation per value, its
    /// vector entry (where it runs) on at most `max_blocks` blocks.
    fn launch_counted(
        &self,
        job: &Job<'_>,
        pointers: smallvec::SmallVec<[u64; 8]>,
        counts: smallvec::SmallVec<[u32; 8]>,
        values: u32,
        max_blocks: u32,
    ) -> Result<(), CudaError> {
        if values == 0 {
            return Ok(());
        }
        let kernel = job.folds[self.index]
            .as_ref()
            .expect("fold kernels are loaded for every folded collective");
        let args = LaunchArgs {
            pointers,
            counts,
            fault: kernel
                .abi
                .fault_word
                .then(|| job.fault(job.fault_areas - 1)),
            peer: None,
        };
        let grid = [values.div_ceil(FOLD_WORKGROUP), 1, 1];
        let (stream, mode, metrics) = (job.stream(), job.core.grid_sync, &job.core.metrics);
        launch::enqueue_capped(stream, kernel, grid, &args, mode, max_blocks, metrics)
            .map_err(|e| job.core.driver_error(e))
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// A fold's element count as the kernel's `u32`; an error past `u32::MAX`.
fn elements(n: usize) -> Result<u32, CudaError> {
    u32::try_from(n).map_err(|_| {
        CudaError::invalid_input(
            format!("a collective over {n} elements"),
            "keep collective buffers below 2^32 elements",
        )
    })
}

/// The ranks of `jobs` as members of their cluster's peer barrier (`None` unless every
/// rank is linked).
fn members<'a>(jobs: &'a [Job<'_>]) -> Option<Vec<Member<'a>>> {
    jobs.iter()
        .map(|job| {
            Some(Member {
                rank: job.rank.rank,
                barrier: job.rank.peer_barrier()?,
                stream: job.stream(),
            })
        })
        .collect()
}

/// A barrier across the ranks' streams (stream order on each GPU; no host wait; see
/// `barrier.rs`). For ranks linked by peer access.
fn peer_barrier(jobs: &[Job<'_>]) -> Result<(), CudaError> {
    let members = members(jobs).expect("peer barriers run on linked ranks only");
    barrier::enqueue(&members).map_err(|(rank, error)| {
        let job = jobs
            .iter()
            .find(|job| job.rank.rank == rank)
            .unwrap_or(&jobs[0]);
        job.core.driver_error(error)
    })
}

/// Waits for every job's work, polling NCCL for asynchronous errors, until the deadline.
fn wait(jobs: &mut [Job<'_>]) -> Result<(), CudaError> {
    let timeout = jobs
        .iter()
        .map(|job| job.rank.timeout)
        .min()
        .unwrap_or_default();
    let started = Instant::now();
    let deadline = started + timeout;
    let mut polls = 0u32;
    loop {
        let mut done = true;
        for job in jobs.iter() {
            let complete = job
                .slot
                .done
                .is_complete()
                .map_err(|e| job.core.driver_error(e))?;
            done &= complete;
        }
        if done {
            return Ok(());
        }
        polls = polls.wrapping_add(1);
        if polls % 64 == 0 {
            for job in jobs.iter() {
                job.comm().poll_async_error().map_err(nccl)?;
            }
            if Instant::now() >= deadline {
                return Err(CudaError::CollectiveAborted {
                    message: format!(
                        "the dispatch did not complete within {} ms",
                        timeout.as_millis()
                    ),
                });
            }
        }
        // Spin (yielding) for the first milliseconds, where collectives of up to a few
        // MiB end; then sleep briefly, to free the core during long kernels.
        if started.elapsed() < Duration::from_millis(2) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(10));
        }
    }
}

/// After a failed wait (or enqueue): abort every job's communicator, so no peer stays
/// blocked in NCCL, release every flag wait of the peer barriers, so no stream waits for a
/// rank that will never announce itself, and let the streams drain before their memory is
/// released.
fn abort_all(jobs: &mut [Job<'_>], error: &CudaError) {
    let cause = error.to_string();
    for job in jobs.iter_mut() {
        let rank = job.rank;
        rank.abort(&mut job.comm, &cause);
        tracing::error!(rank = rank.rank, %cause, "collective dispatch aborted");
    }
    let members = peer_linked(jobs).and_then(|_| members(jobs));
    let sides = members.as_deref().map(barrier::release).unwrap_or_default();
    for job in jobs.iter() {
        // NCCL's kernels end once the communicator is aborted; the memory goes back only
        // after the stream has drained.
        let _ = job.slot.stream.synchronize();
    }
    // Only now: a side stream may share a hardware queue with a stream that was waiting.
    barrier::settle(&sides);
}

#[cfg(test)]
mod tests {
    use super::{many_ranks_peer_min_bytes, spread, Fold, PeerBarrierKind, Spread};

    const MIB: usize = 1 << 20;

    #[test]
    fn all_reduce_blocks_tile_the_buffer_on_16_byte_boundaries() {
        for element_bytes in [1, 2, 4, 8, 16] {
            for world in 2..=8 {
                let fold = Fold {
                    world,
                    element_bytes,
                    index: 0,
                };
                for values in [0, 1, 3, 4, 5, 17, 64, 1000, 4099, 1 << 20] {
                    let bytes = values * element_bytes;
                    let mut next = 0;
                    for k in 0..world {
                        let (start, end) = fold.block(bytes, k);
                        assert!(start == next && end >= start && end <= bytes);
                        assert!(
                            start % 16 == 0 || start == bytes,
                            "{element_bytes} {world} {values}"
                        );
                        next = end;
                    }
                    assert_eq!(next, bytes, "{element_bytes} {world} {values}");
                }
            }
        }
    }

    #[test]
    fn peer_all_reduce_spreads_as_measured() {
        if std::env::var_os("VYRE_CUDA_PEER_SPREAD").is_some() {
            return; // forced for measuring
        }
        let memops = PeerBarrierKind::MemOps;
        assert_eq!(spread(8, 2, memops), Spread::Write);
        assert_eq!(spread(128 * MIB - 1, 2, memops), Spread::Write);
        assert_eq!(spread(128 * MIB, 2, memops), Spread::Pull);
        assert_eq!(spread(128 * MIB, 2, PeerBarrierKind::Events), Spread::Pull);
        assert_eq!(spread(8, 4, memops), Spread::Write);
        assert_eq!(spread(1024 * MIB - 1, 4, memops), Spread::Write);
        assert_eq!(spread(1024 * MIB, 4, memops), Spread::Nccl);
        assert_eq!(spread(8, 4, PeerBarrierKind::Events), Spread::Nccl);
    }

    #[test]
    fn many_ranks_fold_from_peers_at_every_size_with_memory_operation_barriers() {
        if std::env::var_os("VYRE_CUDA_PEER_FOLD_MIN_BYTES").is_some() {
            return; // forced for measuring
        }
        assert_eq!(many_ranks_peer_min_bytes(PeerBarrierKind::MemOps), 0);
        assert_eq!(many_ranks_peer_min_bytes(PeerBarrierKind::MemOpsEach), 0);
        assert_eq!(many_ranks_peer_min_bytes(PeerBarrierKind::Events), 32 * MIB);
    }
}
