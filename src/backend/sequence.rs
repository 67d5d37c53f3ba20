//! Resident work: one executor for every resident operation. A [`ResidentBatch`] (fills,
//! uploads, a prefix of dispatch steps, a repeated group of steps, ranged reads) is
//! validated completely before anything is enqueued, then runs on one stream with one host
//! synchronisation at the end. Step lists run as cached CUDA graphs (`graphs.rs`): the
//! prefix and the repeated group unrolled up to [`MAX_UNROLL`] times are captured into one
//! graph the first time they are needed, and later identical calls replay it. A one-off
//! prefix-only list (seen for the first time) and a single launch run directly.

use super::dispatch::{check_config, check_fault, count, nanos, resized, Timing};
use super::graphs::{CachedGraph, GraphKey, StepKey};
use super::launch::{self, GridSyncLaunch, LaunchArgs};
use super::metrics::Metrics;
use super::plan::{binding_order, DispatchPlan};
use super::pool::{Block, Pooled, StreamSlot};
use super::staging::{DeviceToHost, HostToDevice};
use super::{cache::LoadedKernel, Core, CudaBackend, ResidentBuffer};
use crate::codegen::FAULT_AREA_BYTES;
use crate::driver::{DeviceAlloc, DriverError, Stream};
use crate::error::CudaError;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use vyre_driver::{
    DispatchConfig, ResidentDispatchStep, ResidentReadRange, ResidentSequenceTiming, Resource,
    TimedDispatchResult,
};
use vyre_foundation::ir::Program;

/// Prefix-only step lists with fewer kernel launches than this are launched directly:
/// a graph of one launch saves nothing.
const GRAPH_MIN_LAUNCHES: u64 = 2;
/// Most repeats of a repeated group unrolled into one graph; longer runs replay it.
pub(crate) const MAX_UNROLL: u32 = 64;
/// Most kernel launches of a repeated group unrolled into one graph.
const MAX_UNROLLED_LAUNCHES: u32 = 4096;

/// Fill `len` bytes at `offset` of a resident buffer with `value`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fill {
    pub(crate) handle: u64,
    pub(crate) offset: usize,
    pub(crate) len: usize,
    pub(crate) value: u8,
}

/// Copy host bytes into a resident buffer at `offset`; `whole` requires them to cover it
/// exactly.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Upload<'a> {
    pub(crate) handle: u64,
    pub(crate) offset: usize,
    pub(crate) bytes: &'a [u8],
    pub(crate) whole: bool,
}

/// Read `len` bytes at `offset` of a resident buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Read {
    pub(crate) handle: u64,
    pub(crate) offset: usize,
    pub(crate) len: usize,
}

/// One resident dispatch: handles in binding order.
#[derive(Clone, Copy)]
pub(crate) struct Step<'a> {
    pub(crate) program: &'a Program,
    pub(crate) handles: &'a [u64],
    pub(crate) grid_override: Option<[u32; 3]>,
    pub(crate) workgroup_override: Option<[u32; 3]>,
    /// Back-to-back launches (`DispatchConfig::fixpoint_iterations`).
    pub(crate) launches: u32,
    /// The kernel to launch, when it was loaded already (an artifact's); else the
    /// program's from the kernel cache.
    pub(crate) kernel: Option<&'a Arc<LoadedKernel>>,
}

impl<'a> Step<'a> {
    pub(crate) fn new(program: &'a Program, handles: &'a [u64]) -> Self {
        Self {
            program,
            handles,
            grid_override: None,
            workgroup_override: None,
            launches: 1,
            kernel: None,
        }
    }

    /// A step of `program` over `handles` with `config`'s overrides, launched `launches`
    /// times.
    pub(crate) fn configured(
        program: &'a Program,
        handles: &'a [u64],
        config: &DispatchConfig,
        launches: u32,
    ) -> Self {
        Self {
            program,
            handles,
            grid_override: super::plan::explicit_grid(config),
            workgroup_override: config.workgroup_override,
            launches,
            kernel: None,
        }
    }
}

/// Everything one resident operation does, in this order.
#[derive(Default, Clone, Copy)]
pub(crate) struct ResidentBatch<'a> {
    pub(crate) fills: &'a [Fill],
    pub(crate) uploads: &'a [Upload<'a>],
    pub(crate) prefix: &'a [Step<'a>],
    pub(crate) repeated: &'a [Step<'a>],
    pub(crate) repeat_count: u32,
    pub(crate) reads: &'a [Read],
}

struct PreparedStep {
    kernel: Arc<LoadedKernel>,
    grid: [u32; 3],
    args: LaunchArgs,
    launches: u32,
}

/// How a batch's steps run: launched one by one (`direct`: the prefix only), or as graphs
/// replayed in order. At most one of the two is non-empty.
struct Work {
    direct: Vec<PreparedStep>,
    graphs: Vec<Segment>,
}

impl Work {
    fn direct(direct: Vec<PreparedStep>) -> Self {
        Self {
            direct,
            graphs: Vec::new(),
        }
    }
}

/// One graph of a batch, replayed `times` times.
struct Segment {
    key: GraphKey,
    graph: Found,
    times: u32,
}

enum Found {
    /// From the cache, or captured by this call.
    Ready(CachedGraph),
    /// Not cached: the steps to capture (the prefix, and the repeated group that the key
    /// unrolls `key.unroll` times).
    Capture {
        prefix: Vec<PreparedStep>,
        repeated: Vec<PreparedStep>,
    },
}

/// The graphs that run `prefix` once and `repeated` `repeats` times: one graph when the
/// repeats fit the unroll bound, else the prefix with `unroll` repeats, then a graph of
/// `unroll` repeats replayed, then one of the remainder.
fn segments(
    prefix: &Arc<[StepKey]>,
    repeated: &Arc<[StepKey]>,
    repeats: u32,
    unroll: u32,
) -> smallvec::SmallVec<[(GraphKey, u32); 3]> {
    let key = |prefix: &Arc<[StepKey]>, unroll: u32| GraphKey {
        prefix: Arc::clone(prefix),
        repeated: Arc::clone(repeated),
        unroll,
    };
    if repeats <= unroll {
        return smallvec::smallvec![(key(prefix, repeats), 1)];
    }
    let none: Arc<[StepKey]> = Arc::from([]);
    let mut out = smallvec::SmallVec::new();
    let mut rest = repeats;
    if !prefix.is_empty() {
        out.push((key(prefix, unroll), 1));
        rest -= unroll;
    }
    if rest / unroll > 0 {
        out.push((key(&none, unroll), rest / unroll));
    }
    if rest % unroll > 0 {
        out.push((key(&none, rest % unroll), 1));
    }
    out
}

/// Enqueues one prepared step, pointing its fault word (if any) at `fault` (a kernel that
/// can do without one gets a null area when there is none); grid-wide barriers launch per
/// `mode`, counted in `metrics`.
fn launch_step(
    stream: &Stream,
    step: &PreparedStep,
    fault: Option<u64>,
    mode: GridSyncLaunch,
    metrics: &Metrics,
) -> Result<(), DriverError> {
    let mut args = step.args.clone();
    if step.kernel.abi.fault_word {
        args.fault = fault.or_else(|| step.kernel.fault_area_optional.then_some(0));
    }
    launch::enqueue(
        stream,
        &step.kernel,
        step.grid,
        &args,
        step.launches,
        mode,
        metrics,
    )
}

/// Checks that `len` bytes at `offset` fit resident buffer `handle`; `what` names the
/// operation in the error.
fn check_range(
    buffer: &ResidentBuffer,
    handle: u64,
    offset: usize,
    len: usize,
    what: &str,
) -> Result<(), CudaError> {
    match offset.checked_add(len) {
        Some(end) if end <= buffer.len() => Ok(()),
        _ => Err(CudaError::invalid_input(
            format!(
                "{what} of {len} byte(s) at offset {offset} does not fit resident buffer {handle:#x} of {} byte(s)",
                buffer.len()
            ),
            "keep offset + length within the resident buffer's byte length",
        )),
    }
}

/// A batch resolved against the handle table before anything is enqueued: device
/// addresses, the work, and the buffers held (even if another thread frees their
/// handles) until the batch is done.
struct Resolved<'b> {
    held: Vec<Arc<ResidentBuffer>>,
    fills: Vec<(u64, usize, u8)>,
    uploads: Vec<HostToDevice<'b>>,
    work: Work,
    reads: Vec<(u64, usize)>,
}

/// A resident batch whose work is enqueued: it owns its stream, fault word and the
/// buffers it uses until [`ResidentFlight::finish`] reads back and waits, or
/// [`ResidentFlight::cancel`] waits.
pub(crate) struct ResidentFlight {
    slot: Pooled<StreamSlot>,
    fault: Option<Block>,
    held: Vec<Arc<ResidentBuffer>>,
    work: Work,
    reads: Vec<(u64, usize)>,
    timed: bool,
    started: Instant,
    enqueue_ns: u64,
}

impl ResidentFlight {
    /// Whether the enqueued work has completed (non-blocking).
    pub(crate) fn is_complete(&self) -> bool {
        self.slot.done.is_complete().unwrap_or(true)
    }

    /// Reads the ranges back into `outputs` (one per read), waits and checks the fault
    /// words; the stream and fault word go back to their pools (freed after a driver
    /// error), the graphs back to the cache.
    pub(crate) fn finish(
        self,
        core: &Core,
        outputs: &mut [&mut Vec<u8>],
    ) -> Result<Timing, CudaError> {
        let waited = self.wait(core, outputs);
        let Self {
            slot,
            fault,
            held,
            work,
            started,
            enqueue_ns,
            ..
        } = self;
        release(slot, fault, waited.is_err());
        let (code, wait_started, device_ns) = waited.map_err(|e| core.classify(e))?;
        if code == 0 {
            core.return_graphs(work);
        }
        drop(held);
        check_fault(core, code, &mut Vec::new())
            .inspect_err(|_| outputs.iter_mut().for_each(|out| out.clear()))?;
        Ok(Timing::since(started, enqueue_ns, wait_started, device_ns))
    }

    /// Waits for the work and reads back: the first non-zero fault word, when the wait
    /// began, and the device time.
    fn wait(
        &self,
        core: &Core,
        outputs: &mut [&mut Vec<u8>],
    ) -> Result<(u32, Instant, Option<u64>), CudaError> {
        let stream = &self.slot.stream;
        if let Some(blocking) = core.small.blocking_event(&core.device)? {
            // Sleep through the kernels; the readback below is then short.
            let slept = blocking
                .record(stream)
                .and_then(|()| blocking.synchronize());
            blocking.discard_if(slept.is_err());
            slept?;
        }
        let wait_started = Instant::now();
        let fault = self.fault.as_ref().map(|block| block.ptr());
        let code = core.read_resolved(stream, fault, &self.work, &self.reads, outputs)?;
        let device_ns = if self.work.direct.is_empty() && self.work.graphs.is_empty() {
            self.timed.then_some(0)
        } else {
            self.slot.device_ns(self.timed)?
        };
        Ok((code, wait_started, device_ns))
    }

    /// Waits for the work, then returns the resources (a dropped asynchronous dispatch).
    pub(crate) fn cancel(self) {
        let failed = self.slot.stream.synchronize().is_err();
        release(self.slot, self.fault, failed);
    }
}

/// Returns a batch's stream and fault word to their pools, or frees them after a driver
/// error (`failed`).
fn release(slot: Pooled<StreamSlot>, fault: Option<Block>, failed: bool) {
    if let Some(block) = fault {
        block.discard_if(failed);
    }
    slot.discard_if(failed);
}

impl Core {
    /// Runs `batch`; `outputs[i]` receives `batch.reads[i]`. With `timed`, device time
    /// covers the dispatch steps (CUDA events around them).
    pub(crate) fn run_resident(
        &self,
        batch: &ResidentBatch<'_>,
        outputs: &mut [&mut Vec<u8>],
        timed: bool,
    ) -> Result<Timing, CudaError> {
        if outputs.len() != batch.reads.len() {
            return Err(CudaError::invalid_input(
                format!(
                    "{} read range(s) but {} output slot(s)",
                    batch.reads.len(),
                    outputs.len()
                ),
                "pass exactly one output Vec per read range",
            ));
        }
        self.enqueue_resident(batch, timed)?.finish(self, outputs)
    }

    /// Resolves `batch` and enqueues its fills, uploads and steps; the host bytes of its
    /// uploads have been read when this returns.
    pub(crate) fn enqueue_resident(
        &self,
        batch: &ResidentBatch<'_>,
        timed: bool,
    ) -> Result<ResidentFlight, CudaError> {
        let started = Instant::now();
        self.usable()?;
        let Resolved {
            held,
            fills,
            uploads,
            mut work,
            reads,
        } = self.resolve(batch)?;
        let needs_fault = work
            .direct
            .iter()
            .any(|step| step.kernel.needs_fault_area());
        let slot = self.stream().map_err(|e| self.driver_error(e))?;
        let fault = needs_fault
            .then(|| self.pool.take(&slot.stream, FAULT_AREA_BYTES))
            .transpose()
            .map_err(|e| self.driver_error(e))?;
        let fault_ptr = fault.as_ref().map(|block| block.ptr());
        let enqueued = self.enqueue_resolved(&slot, fault_ptr, batch, &fills, &uploads, &mut work);
        let enqueued = enqueued.and_then(|()| {
            slot.timed(&slot.stream, timed, || {
                self.launch_work(&slot.stream, fault_ptr, batch, &work)
            })?;
            Ok(slot.done.record(&slot.stream)?)
        });
        if let Err(error) = enqueued {
            release(slot, fault, true);
            return Err(self.classify(error));
        }
        Ok(ResidentFlight {
            slot,
            fault,
            held,
            work,
            reads,
            timed,
            started,
            enqueue_ns: nanos(started),
        })
    }

    /// Validates the batch and resolves every handle before touching the device.
    fn resolve<'b>(&self, batch: &ResidentBatch<'b>) -> Result<Resolved<'b>, CudaError> {
        let mut held: Vec<Arc<ResidentBuffer>> = Vec::new();
        let mut fills = Vec::with_capacity(batch.fills.len());
        for fill in batch.fills {
            let dst = self.locate(&mut held, fill.handle, fill.offset, fill.len, "a fill")?;
            fills.push((dst, fill.len, fill.value));
        }
        let mut uploads = Vec::with_capacity(batch.uploads.len());
        for upload in batch.uploads {
            let (handle, len) = (upload.handle, upload.bytes.len());
            let buffer = self.resident(handle)?;
            if upload.whole && len != buffer.len() {
                return Err(CudaError::invalid_input(
                    format!(
                        "{len} byte(s) uploaded into resident buffer {handle:#x} of {} byte(s)",
                        buffer.len()
                    ),
                    "upload exactly the buffer's byte length, or use upload_resident_at for a sub-range",
                ));
            }
            check_range(&buffer, handle, upload.offset, len, "an upload")?;
            uploads.push(HostToDevice {
                dst: buffer.ptr() + upload.offset as u64,
                src: upload.bytes,
            });
            held.push(buffer);
        }
        let work = self.plan_work(batch, &mut held)?;
        let mut reads = Vec::with_capacity(batch.reads.len());
        for read in batch.reads {
            let src = self.locate(&mut held, read.handle, read.offset, read.len, "a read")?;
            reads.push((src, read.len));
        }
        Ok(Resolved {
            held,
            fills,
            uploads,
            work,
            reads,
        })
    }

    /// The device address of `len` bytes at `offset` of resident buffer `handle`, checked
    /// to fit; the buffer is held in `held` until the batch is done.
    fn locate(
        &self,
        held: &mut Vec<Arc<ResidentBuffer>>,
        handle: u64,
        offset: usize,
        len: usize,
        what: &str,
    ) -> Result<u64, CudaError> {
        let buffer = self.resident(handle)?;
        check_range(&buffer, handle, offset, len, what)?;
        let address = buffer.ptr() + offset as u64;
        held.push(buffer);
        Ok(address)
    }

    /// Enqueues the fills and uploads, zeroes the fault word and captures the graphs the
    /// cache lacked.
    fn enqueue_resolved(
        &self,
        slot: &StreamSlot,
        fault: Option<u64>,
        batch: &ResidentBatch<'_>,
        fills: &[(u64, usize, u8)],
        uploads: &[HostToDevice<'_>],
        work: &mut Work,
    ) -> Result<(), CudaError> {
        let stream = &slot.stream;
        for &(dst, len, value) in fills {
            stream.memset_u8(dst, value, len)?;
        }
        {
            let _span = tracing::trace_span!("vyre_cuda.upload").entered();
            self.staging.upload_now(stream, uploads)?;
        }
        if let Some(fault) = fault {
            // The fault word and the cooperative entry's grid-barrier words.
            stream.memset_zero(fault, FAULT_AREA_BYTES)?;
        }
        for segment in &mut work.graphs {
            self.capture_segment(stream, batch, segment)?;
        }
        Ok(())
    }

    /// Launches the direct steps or replays the graphs.
    fn launch_work(
        &self,
        stream: &Stream,
        fault: Option<u64>,
        batch: &ResidentBatch<'_>,
        work: &Work,
    ) -> Result<(), DriverError> {
        let _span = tracing::trace_span!(
            "vyre_cuda.launch",
            steps = batch.prefix.len() + batch.repeated.len(),
            repeats = batch.repeat_count
        )
        .entered();
        for step in &work.direct {
            launch_step(stream, step, fault, self.grid_sync, &self.metrics)?;
        }
        for segment in &work.graphs {
            let Found::Ready(graph) = &segment.graph else {
                unreachable!("every segment was captured before launching");
            };
            launch::replay(stream, &graph.exec, segment.times)?;
            let times = u64::from(segment.times);
            let [cooperative, split] = graph.grid_sync_launches;
            Metrics::add(&self.metrics.graph_launches, times);
            Metrics::add(&self.metrics.grid_sync_cooperative, cooperative * times);
            Metrics::add(&self.metrics.grid_sync_split, split * times);
            Metrics::add(&self.metrics.launches, graph.launches * times);
        }
        Ok(())
    }

    /// Downloads the read ranges and the fault words (the direct launches' pooled word, or
    /// each graph's own) and waits; returns the first non-zero fault word.
    fn read_resolved(
        &self,
        stream: &Stream,
        fault: Option<u64>,
        work: &Work,
        reads: &[(u64, usize)],
        outputs: &mut [&mut Vec<u8>],
    ) -> Result<u32, DriverError> {
        let _span = tracing::trace_span!("vyre_cuda.readback").entered();
        let graph_faults = work
            .graphs
            .iter()
            .filter_map(|segment| match &segment.graph {
                Found::Ready(graph) => graph.fault.as_ref().map(DeviceAlloc::ptr),
                Found::Capture { .. } => None,
            });
        let fault_sources: smallvec::SmallVec<[u64; 4]> =
            fault.into_iter().chain(graph_faults).collect();
        let mut words: smallvec::SmallVec<[[u8; 4]; 4]> =
            smallvec::smallvec![[0; 4]; fault_sources.len()];
        let mut copies: Vec<DeviceToHost<'_>> =
            Vec::with_capacity(reads.len() + fault_sources.len());
        for ((src, len), out) in reads.iter().zip(outputs.iter_mut()) {
            copies.push(DeviceToHost {
                src: *src,
                dst: resized(out, *len),
            });
        }
        for (src, word) in fault_sources.iter().zip(words.iter_mut()) {
            copies.push(DeviceToHost {
                src: *src,
                dst: word,
            });
        }
        self.staging.download_now(stream, &mut copies)?;
        stream.synchronize()?;
        Ok(words
            .iter()
            .map(|word| u32::from_le_bytes(*word))
            .find(|&code| code != 0)
            .unwrap_or(0))
    }

    /// Idle graphs with zero fault words go back to the cache (a faulted graph's word is
    /// not zero any more: it is dropped instead).
    fn return_graphs(&self, work: Work) {
        for segment in work.graphs {
            if let Found::Ready(graph) = segment.graph {
                let live = |handle| self.resident.get(handle).is_ok();
                self.graphs.give_back(segment.key, graph, live);
            }
        }
    }

    /// Decides how the batch's steps run and resolves what they need: direct launches for
    /// a single launch or a step list seen for the first time, otherwise cached graphs
    /// (found, or prepared for capture).
    fn plan_work(
        &self,
        batch: &ResidentBatch<'_>,
        held: &mut Vec<Arc<ResidentBuffer>>,
    ) -> Result<Work, CudaError> {
        let repeats = if batch.repeated.is_empty() {
            0
        } else {
            batch.repeat_count
        };
        let prefix_launches: u64 = batch
            .prefix
            .iter()
            .map(|step| u64::from(step.launches.max(1)))
            .sum();
        if repeats == 0 && prefix_launches < GRAPH_MIN_LAUNCHES {
            return self.prepare_steps(batch.prefix, held).map(Work::direct);
        }
        let prefix_keys = self.step_keys(batch.prefix)?;
        let repeated_keys = if repeats > 0 {
            self.step_keys(batch.repeated)?
        } else {
            Arc::from([])
        };
        let per_repeat: u32 = batch
            .repeated
            .iter()
            .map(|step| step.launches.max(1))
            .fold(0u32, u32::saturating_add)
            .max(1);
        let unroll = repeats
            .min(MAX_UNROLL)
            .min((MAX_UNROLLED_LAUNCHES / per_repeat).max(1));
        let segments = segments(&prefix_keys, &repeated_keys, repeats, unroll);
        let mut planned = Vec::with_capacity(segments.len());
        for (key, times) in segments {
            let cached = self.graphs.take(&key);
            if cached.is_none() && repeats == 0 && self.graphs.first_sighting(&key) {
                // A prefix-only list seen for the first time: capturing it costs more than
                // launching it; the next identical call captures.
                return self.prepare_steps(batch.prefix, held).map(Work::direct);
            }
            let graph = match cached {
                Some(graph) => {
                    // Every handle must still be live (a freed one fails here, as it would
                    // uncached); holding them keeps the memory until the replay is done.
                    for &handle in &graph.handles {
                        held.push(self.resident(handle)?);
                    }
                    Metrics::bump(&self.metrics.graph_cache_hits);
                    Found::Ready(graph)
                }
                None => Found::Capture {
                    prefix: match key.prefix.is_empty() {
                        true => Vec::new(),
                        false => self.prepare_steps(batch.prefix, held)?,
                    },
                    repeated: match key.unroll {
                        0 => Vec::new(),
                        _ => self.prepare_steps(batch.repeated, held)?,
                    },
                },
            };
            planned.push(Segment { key, graph, times });
        }
        Ok(Work {
            direct: Vec::new(),
            graphs: planned,
        })
    }

    fn prepare_steps(
        &self,
        steps: &[Step<'_>],
        held: &mut Vec<Arc<ResidentBuffer>>,
    ) -> Result<Vec<PreparedStep>, CudaError> {
        steps
            .iter()
            .map(|step| self.prepare_step(step, held))
            .collect()
    }

    /// The cache's view of `steps`. Consecutive steps of one program share its identity.
    fn step_keys(&self, steps: &[Step<'_>]) -> Result<Arc<[StepKey]>, CudaError> {
        let mut keys: Vec<StepKey> = Vec::with_capacity(steps.len());
        let mut previous: Option<(&Program, [u8; 32])> = None;
        for step in steps {
            let identity = match (step.kernel, previous) {
                // A preloaded kernel is its own identity: its graph launches its entries.
                (Some(kernel), _) => *kernel.key.bytes(),
                (None, Some((program, identity))) if std::ptr::eq(program, step.program) => {
                    identity
                }
                (None, _) => self.identities.of(step.program)?,
            };
            previous = Some((step.program, identity));
            keys.push(StepKey {
                identity,
                workgroup: step
                    .workgroup_override
                    .unwrap_or_else(|| step.program.workgroup_size()),
                grid_override: step.grid_override,
                launches: step.launches.max(1),
                handles: step.handles.iter().copied().collect(),
            });
        }
        Ok(keys.into())
    }

    /// Captures and instantiates a segment's graph if the cache did not have it.
    fn capture_segment(
        &self,
        stream: &Stream,
        batch: &ResidentBatch<'_>,
        segment: &mut Segment,
    ) -> Result<(), CudaError> {
        let Found::Capture { prefix, repeated } = &segment.graph else {
            return Ok(());
        };
        let _span =
            tracing::debug_span!("vyre_cuda.graph_capture", repeats = batch.repeat_count).entered();
        let unroll = segment.key.unroll;
        let steps = || {
            prefix
                .iter()
                .chain((0..unroll).flat_map(|_| repeated.iter()))
        };
        let fault = if steps().any(|step| step.kernel.needs_fault_area()) {
            Some(self.graph_fault_word(stream)?)
        } else {
            None
        };
        let fault_ptr = fault.as_ref().map(DeviceAlloc::ptr);
        // Launches made during capture are counted per replay (see `CachedGraph`).
        let capture = |mode: GridSyncLaunch, counted: &Metrics| -> Result<_, CudaError> {
            for step in steps() {
                launch::load_entries(&step.kernel, step.grid, &step.args, mode)?;
            }
            let graph = stream.capture(|capturing| -> Result<(), CudaError> {
                for step in steps() {
                    launch_step(capturing, step, fault_ptr, mode, counted)?;
                }
                Ok(())
            })?;
            Ok(graph.instantiate()?)
        };
        // Cooperative kernels that cannot be captured (or the graph not instantiated) on
        // this device are split in graphs from then on.
        let (exec, counted) = self.capture_splitting_if_needed(capture)?;
        Metrics::bump(&self.metrics.graph_captures);
        let launches = steps().map(|s| u64::from(s.launches)).sum::<u64>();
        let mut kernels: Vec<_> = prefix.iter().chain(repeated).map(|s| &s.kernel).collect();
        kernels.sort_by_key(|kernel| Arc::as_ptr(kernel));
        kernels.dedup_by(|a, b| Arc::ptr_eq(a, b));
        segment.graph = Found::Ready(CachedGraph {
            exec,
            _kernels: kernels.into_iter().map(Arc::clone).collect(),
            handles: segment.key.handles(),
            fault,
            launches,
            grid_sync_launches: [
                counted.grid_sync_cooperative.load(Ordering::Relaxed),
                counted.grid_sync_split.load(Ordering::Relaxed),
            ],
            last_used: 0,
        });
        Ok(())
    }

    /// A graph's own fault word (then the cooperative entry's grid-barrier words), zeroed
    /// on `stream`: ordered before every replay on it; later calls find it zero (see
    /// `CachedGraph::fault`; the barrier words return to zero after each barrier).
    fn graph_fault_word(&self, stream: &Stream) -> Result<DeviceAlloc, DriverError> {
        let word = DeviceAlloc::new(&self.device, FAULT_AREA_BYTES)?;
        self.metrics.device_allocation(FAULT_AREA_BYTES);
        stream.memset_zero(word.ptr(), FAULT_AREA_BYTES)?;
        Ok(word)
    }

    fn prepare_step(
        &self,
        step: &Step<'_>,
        held: &mut Vec<Arc<ResidentBuffer>>,
    ) -> Result<PreparedStep, CudaError> {
        let mut config = DispatchConfig::default();
        config.grid_override = step.grid_override;
        config.workgroup_override = step.workgroup_override;
        let kernel = match step.kernel {
            Some(kernel) => Arc::clone(kernel),
            None => self.kernel(step.program, &config)?,
        };
        let abi = &kernel.abi;
        let order = binding_order(step.program, abi);
        let buffers = step
            .handles
            .iter()
            .map(|&handle| self.resident(handle))
            .collect::<Result<Vec<_>, _>>()?;
        let mut lens: smallvec::SmallVec<[usize; 8]> = smallvec::smallvec![0; abi.bindings.len()];
        let mut pointers: smallvec::SmallVec<[u64; 8]> = smallvec::smallvec![0; abi.bindings.len()];
        if buffers.len() == abi.bindings.len() {
            for (position, buffer) in order.iter().zip(&buffers) {
                lens[*position] = buffer.len();
                pointers[*position] = buffer.ptr();
            }
        } else {
            lens = buffers.iter().map(|b| b.len()).collect();
        }
        let plan = DispatchPlan::resident(step.program, abi, &lens, &config, self.limits)?;
        held.extend(buffers);
        Ok(PreparedStep {
            grid: plan.grid,
            args: LaunchArgs {
                pointers,
                counts: plan.bindings.iter().map(|b| b.elements).collect(),
                fault: None,
                peer: None,
            },
            kernel,
            launches: step.launches.max(1),
        })
    }
}

pub(super) fn ids(
    core: &Core,
    resources: &[Resource],
) -> Result<smallvec::SmallVec<[u64; 8]>, CudaError> {
    resources.iter().map(|r| core.resident_id(r)).collect()
}

fn with_ids<R>(
    core: &Core,
    steps: &[ResidentDispatchStep<'_>],
    run: impl FnOnce(&[Step<'_>]) -> Result<R, CudaError>,
) -> Result<R, CudaError> {
    let handles = steps
        .iter()
        .map(|step| ids(core, step.resources))
        .collect::<Result<Vec<_>, _>>()?;
    let converted: Vec<Step<'_>> = steps
        .iter()
        .zip(&handles)
        .map(|(step, handles)| Step {
            program: step.program,
            handles,
            grid_override: step.grid_override,
            workgroup_override: step.workgroup_override,
            launches: 1,
            kernel: None,
        })
        .collect();
    run(&converted)
}

/// The reads of `(resource, byte offset, byte length)` ranges.
fn reads<'r>(
    core: &Core,
    ranges: impl Iterator<Item = (&'r Resource, usize, usize)>,
) -> Result<Vec<Read>, CudaError> {
    ranges
        .map(|(resource, offset, len)| {
            let handle = core.resident_id(resource)?;
            Ok(Read {
                handle,
                offset,
                len,
            })
        })
        .collect()
}

impl CudaBackend {
    /// Allocates a zero-filled resident buffer; returns `Resource::Resident(handle)`.
    /// Refused with [`CudaError::OutOfMemory`] when it would exceed the resident budget
    /// or the device's free memory.
    pub fn allocate_resident(&self, byte_len: usize) -> Result<Resource, CudaError> {
        self.core()
            .allocate_resident(byte_len)
            .map(|id| self.core().resident_resource(id))
    }

    /// Frees a resident buffer. The handle is dead afterwards (using it is an error); a
    /// dispatch still using the memory on another thread keeps it until it finishes.
    pub fn free_resident(&self, resource: Resource) -> Result<(), CudaError> {
        let core = self.core();
        core.free_resident(core.resident_id(&resource)?)
    }

    /// Uploads exactly the buffer's byte length.
    pub fn upload_resident(&self, resource: &Resource, bytes: &[u8]) -> Result<(), CudaError> {
        self.upload_resident_many(&[(resource, bytes)])
    }

    /// Uploads several whole buffers with one synchronisation.
    pub fn upload_resident_many(&self, uploads: &[(&Resource, &[u8])]) -> Result<(), CudaError> {
        self.upload_batch(uploads.iter().map(|&(r, bytes)| (r, 0, bytes)), true)
    }

    /// Uploads `bytes` at `dst_offset` (any length that fits).
    pub fn upload_resident_at(
        &self,
        resource: &Resource,
        dst_offset: usize,
        bytes: &[u8],
    ) -> Result<(), CudaError> {
        self.upload_resident_at_many(&[(resource, dst_offset, bytes)])
    }

    /// Uploads several sub-ranges with one synchronisation.
    pub fn upload_resident_at_many(
        &self,
        uploads: &[(&Resource, usize, &[u8])],
    ) -> Result<(), CudaError> {
        self.upload_batch(uploads.iter().copied(), false)
    }

    fn upload_batch<'a>(
        &self,
        uploads: impl Iterator<Item = (&'a Resource, usize, &'a [u8])>,
        whole: bool,
    ) -> Result<(), CudaError> {
        let uploads = uploads
            .map(|(resource, offset, bytes)| {
                Ok(Upload {
                    handle: self.core().resident_id(resource)?,
                    offset,
                    bytes,
                    whole,
                })
            })
            .collect::<Result<Vec<_>, CudaError>>()?;
        let batch = ResidentBatch {
            uploads: &uploads,
            ..ResidentBatch::default()
        };
        self.core().run_resident(&batch, &mut [], false).map(drop)
    }

    /// Downloads a whole buffer.
    pub fn download_resident(&self, resource: &Resource) -> Result<Vec<u8>, CudaError> {
        let mut out = Vec::new();
        self.download_resident_into(resource, &mut out)?;
        Ok(out)
    }

    /// Downloads a whole buffer into `out` (cleared; its capacity reused).
    pub fn download_resident_into(
        &self,
        resource: &Resource,
        out: &mut Vec<u8>,
    ) -> Result<(), CudaError> {
        let handle = self.core().resident_id(resource)?;
        let len = self.core().resident(handle)?.len();
        self.download_resident_range_into(resource, 0, len, out)
    }

    /// Downloads `byte_len` bytes at `byte_offset`.
    pub fn download_resident_range(
        &self,
        resource: &Resource,
        byte_offset: usize,
        byte_len: usize,
    ) -> Result<Vec<u8>, CudaError> {
        let mut out = Vec::new();
        self.download_resident_range_into(resource, byte_offset, byte_len, &mut out)?;
        Ok(out)
    }

    /// Downloads a range into `out` (cleared; its capacity reused).
    pub fn download_resident_range_into(
        &self,
        resource: &Resource,
        byte_offset: usize,
        byte_len: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), CudaError> {
        self.download_resident_ranges_into(&[(resource, byte_offset, byte_len)], &mut [out])
    }

    /// Downloads several ranges with one synchronisation (`outputs[i]` gets `ranges[i]`).
    pub fn download_resident_ranges_into(
        &self,
        ranges: &[(&Resource, usize, usize)],
        outputs: &mut [&mut Vec<u8>],
    ) -> Result<(), CudaError> {
        let reads = reads(self.core(), ranges.iter().copied())?;
        let batch = ResidentBatch {
            reads: &reads,
            ..ResidentBatch::default()
        };
        self.core().run_resident(&batch, outputs, false).map(drop)
    }

    /// Runs `program` on resident buffers (one handle per non-workgroup buffer, sorted by
    /// `BufferDecl::binding`), bound in place: nothing is uploaded or zeroed, and the
    /// results stay on the device (`outputs` is empty; read them with
    /// `download_resident*`). `device_ns` is the kernel time from CUDA events.
    pub fn dispatch_resident_timed(
        &self,
        program: &Program,
        resources: &[Resource],
        config: &DispatchConfig,
    ) -> Result<TimedDispatchResult, CudaError> {
        if self.core().rank_for(program).is_some() {
            let timing = super::collective::run_resident(self.core(), program, resources, config);
            count(self.core().metrics(), &timing, true);
            return Ok(timing?.into_result(Vec::new()));
        }
        let timing = self.resident_step(program, resources, config, |batch| {
            let timing = self.core().run_resident(batch, &mut [], true);
            count(self.core().metrics(), &timing, true);
            timing
        })?;
        Ok(timing.into_result(Vec::new()))
    }

    /// Checks `config`, resolves `resources` (binding order) and runs `run` on the batch of
    /// the one step of `program` over them (a resident dispatch, counted).
    pub(super) fn resident_step<R>(
        &self,
        program: &Program,
        resources: &[Resource],
        config: &DispatchConfig,
        run: impl FnOnce(&ResidentBatch<'_>) -> Result<R, CudaError>,
    ) -> Result<R, CudaError> {
        let launches = check_config(config, self.core.grid_sync)?;
        let handles = ids(self.core(), resources)?;
        let step = Step::configured(program, &handles, config, launches);
        Metrics::bump(&self.core().metrics().resident_dispatches);
        run(&ResidentBatch {
            prefix: &[step],
            ..ResidentBatch::default()
        })
    }

    /// Runs the steps in order on one stream (each honouring its `grid_override` and
    /// `workgroup_override`), then reads the ranges, with one host synchronisation.
    pub fn dispatch_resident_sequence_read_ranges_into(
        &self,
        steps: &[ResidentDispatchStep<'_>],
        read_ranges: &[ResidentReadRange<'_>],
        outputs: &mut [&mut Vec<u8>],
    ) -> Result<(), CudaError> {
        self.resident_sequence(steps, &[], 0, read_ranges, outputs, false)
            .map(drop)
    }

    /// [`Self::dispatch_resident_sequence_read_ranges_into`] with timing: `device_ns`
    /// covers the whole chain of kernels.
    pub fn dispatch_resident_sequence_read_ranges_timed_into(
        &self,
        steps: &[ResidentDispatchStep<'_>],
        read_ranges: &[ResidentReadRange<'_>],
        outputs: &mut [&mut Vec<u8>],
    ) -> Result<ResidentSequenceTiming, CudaError> {
        self.resident_sequence(steps, &[], 0, read_ranges, outputs, true)
    }

    /// Runs `prefix_steps` once, then `repeated_steps` `repeat_count` times, then reads the
    /// ranges; one host synchronisation. The prefix and up to 64 repeats are captured into
    /// one cached CUDA graph (longer runs replay a graph of 64 repeats), so an identical
    /// later call replays without capturing.
    pub fn dispatch_resident_repeated_sequence_read_ranges_into(
        &self,
        prefix_steps: &[ResidentDispatchStep<'_>],
        repeated_steps: &[ResidentDispatchStep<'_>],
        repeat_count: u32,
        read_ranges: &[ResidentReadRange<'_>],
        outputs: &mut [&mut Vec<u8>],
    ) -> Result<ResidentSequenceTiming, CudaError> {
        self.resident_sequence(
            prefix_steps,
            repeated_steps,
            repeat_count,
            read_ranges,
            outputs,
            true,
        )
    }

    /// The three public resident sequences: one batch of steps and reads.
    fn resident_sequence(
        &self,
        prefix_steps: &[ResidentDispatchStep<'_>],
        repeated_steps: &[ResidentDispatchStep<'_>],
        repeat_count: u32,
        read_ranges: &[ResidentReadRange<'_>],
        outputs: &mut [&mut Vec<u8>],
        timed: bool,
    ) -> Result<ResidentSequenceTiming, CudaError> {
        let ranges = read_ranges.iter();
        let core = self.core();
        let reads = reads(
            core,
            ranges.map(|r| (r.resource, r.byte_offset, r.byte_len)),
        )?;
        Metrics::bump(&core.metrics().resident_sequences);
        let timing = with_ids(core, prefix_steps, |prefix| {
            with_ids(core, repeated_steps, |repeated| {
                let batch = ResidentBatch {
                    prefix,
                    repeated,
                    repeat_count,
                    reads: &reads,
                    ..ResidentBatch::default()
                };
                core.run_resident(&batch, outputs, timed)
            })
        })?;
        Ok(timing.into_sequence_timing())
    }
}
