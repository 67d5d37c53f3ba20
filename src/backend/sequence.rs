//! Resident work: one executor for every resident operation. A [`ResidentBatch`] (fills,
//! uploads, a prefix of dispatch steps, a repeated group of steps, ranged reads) is
//! validated completely before anything is enqueued, then runs on one stream with one host
//! synchronisation at the end. A repeated group is captured once as a CUDA graph and
//! replayed.

use super::dispatch::{check_config, check_fault, nanos, Timing};
use super::launch::{self, GridSyncLaunch, LaunchArgs};
use super::metrics::Metrics;
use super::plan::{binding_order, DispatchPlan};
use super::pool::Block;
use super::staging::{DeviceToHost, HostToDevice};
use super::{cache::LoadedKernel, resident_id, Core, CudaBackend, ResidentBuffer};
use crate::codegen::FAULT_AREA_BYTES;
use crate::error::CudaError;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use vyre_driver::{
    DispatchConfig, ResidentDispatchStep, ResidentReadRange, ResidentSequenceTiming, Resource,
    TimedDispatchResult,
};
use vyre_foundation::ir::Program;

/// Repeat counts at least this large are captured as a graph; smaller ones are launched
/// directly (capture and instantiation cost more than they save).
const GRAPH_MIN_REPEATS: u32 = 2;

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
}

impl<'a> Step<'a> {
    pub(crate) fn new(program: &'a Program, handles: &'a [u64]) -> Self {
        Self {
            program,
            handles,
            grid_override: None,
            workgroup_override: None,
            launches: 1,
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

fn range_error(handle: u64, offset: usize, len: usize, size: usize, what: &str) -> CudaError {
    CudaError::invalid_input(
        format!(
            "{what} of {len} byte(s) at offset {offset} does not fit resident buffer {handle:#x} of {size} byte(s)"
        ),
        "keep offset + length within the resident buffer's byte length",
    )
}

fn check_range(
    buffer: &ResidentBuffer,
    handle: u64,
    offset: usize,
    len: usize,
    what: &str,
) -> Result<(), CudaError> {
    match offset.checked_add(len) {
        Some(end) if end <= buffer.len() => Ok(()),
        _ => Err(range_error(handle, offset, len, buffer.len(), what)),
    }
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
        let started = Instant::now();
        self.usable()?;
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
        // Validate and resolve everything before touching the device; the `Arc`s keep each
        // buffer alive until the batch is done, even if another thread frees its handle.
        let mut held: Vec<Arc<ResidentBuffer>> = Vec::new();
        let mut fills = Vec::with_capacity(batch.fills.len());
        for fill in batch.fills {
            let buffer = self.resident(fill.handle)?;
            check_range(&buffer, fill.handle, fill.offset, fill.len, "a fill")?;
            fills.push((buffer.ptr() + fill.offset as u64, fill.len, fill.value));
            held.push(buffer);
        }
        let mut uploads: Vec<HostToDevice<'_>> = Vec::with_capacity(batch.uploads.len());
        for upload in batch.uploads {
            let buffer = self.resident(upload.handle)?;
            if upload.whole && upload.bytes.len() != buffer.len() {
                return Err(CudaError::invalid_input(
                    format!(
                        "{} byte(s) uploaded into resident buffer {:#x} of {} byte(s)",
                        upload.bytes.len(),
                        upload.handle,
                        buffer.len()
                    ),
                    "upload exactly the buffer's byte length, or use upload_resident_at for a sub-range",
                ));
            }
            check_range(
                &buffer,
                upload.handle,
                upload.offset,
                upload.bytes.len(),
                "an upload",
            )?;
            uploads.push(HostToDevice {
                dst: buffer.ptr() + upload.offset as u64,
                src: upload.bytes,
            });
            held.push(buffer);
        }
        let prefix = batch
            .prefix
            .iter()
            .map(|step| self.prepare_step(step, &mut held))
            .collect::<Result<Vec<_>, _>>()?;
        let repeated = batch
            .repeated
            .iter()
            .map(|step| self.prepare_step(step, &mut held))
            .collect::<Result<Vec<_>, _>>()?;
        let mut reads = Vec::with_capacity(batch.reads.len());
        for read in batch.reads {
            let buffer = self.resident(read.handle)?;
            check_range(&buffer, read.handle, read.offset, read.len, "a read")?;
            reads.push((buffer.ptr() + read.offset as u64, read.len));
            held.push(buffer);
        }
        let steps = !prefix.is_empty() || (!repeated.is_empty() && batch.repeat_count > 0);
        let needs_fault = prefix
            .iter()
            .chain(&repeated)
            .any(|step| step.kernel.abi.fault_word);

        let slot = self
            .streams
            .take(&self.device, &self.metrics)
            .map_err(|e| self.driver_error(e))?;
        let fault_block = if needs_fault {
            Some(
                self.pool
                    .take(&self.device, &slot.stream, FAULT_AREA_BYTES, &self.metrics)
                    .map_err(|e| self.driver_error(e))?,
            )
        } else {
            None
        };
        let fault_ptr = fault_block.as_ref().map(Block::ptr);
        let stream = &slot.stream;
        let mut word = [0u8; 4];
        let mut enqueue_ns = 0;
        let mut wait_started = started;
        let outcome = (|| -> Result<Option<u64>, CudaError> {
            for &(dst, len, value) in &fills {
                stream.memset_u8(dst, value, len)?;
            }
            let mut lane = self.staging.take();
            let uploaded = {
                let _span = tracing::trace_span!("vyre_cuda.upload").entered();
                self.staging
                    .upload(&mut lane, &self.device, stream, &uploads, &self.metrics)
            };
            self.staging.give_back(lane);
            uploaded?;
            if let Some(fault) = fault_ptr {
                stream.memset_zero(fault, FAULT_AREA_BYTES)?;
            }
            if timed {
                slot.start.record(stream)?;
            }
            let launch_one = |stream: &crate::driver::Stream,
                              step: &PreparedStep,
                              mode: GridSyncLaunch,
                              metrics: &Metrics| {
                let mut args = step.args.clone();
                if step.kernel.abi.fault_word {
                    args.fault = fault_ptr;
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
            };
            {
                let _span = tracing::trace_span!(
                    "vyre_cuda.launch",
                    steps = prefix.len() + repeated.len(),
                    repeats = batch.repeat_count
                )
                .entered();
                for step in &prefix {
                    launch_one(stream, step, self.grid_sync, &self.metrics)?;
                    Metrics::add(&self.metrics.launches, u64::from(step.launches));
                }
                if !repeated.is_empty() && batch.repeat_count > 0 {
                    let per_repeat: u64 = repeated.iter().map(|s| u64::from(s.launches)).sum();
                    if batch.repeat_count >= GRAPH_MIN_REPEATS {
                        // Launches made during capture are counted per replay below.
                        let capture = |mode: GridSyncLaunch, counted: &Metrics| {
                            stream
                                .capture(|capturing| -> Result<(), CudaError> {
                                    for step in &repeated {
                                        launch_one(capturing, step, mode, counted)?;
                                    }
                                    Ok(())
                                })
                                .and_then(|graph| Ok(graph.instantiate()?))
                        };
                        let mut counted = Metrics::default();
                        let mode = self.capture_grid_sync();
                        let exec = match capture(mode, &counted) {
                            Ok(exec) => {
                                self.note_cooperative_capture(&counted, true);
                                exec
                            }
                            Err(error)
                                if counted.grid_sync_cooperative.load(Ordering::Relaxed) > 0 =>
                            {
                                // Cooperative kernels could not be captured (or the graph
                                // not instantiated) on this device: split them in graphs.
                                tracing::info!(%error, "cooperative launches do not work under CUDA graph capture here; grid-wide barriers in captured sequences are split into launches");
                                self.note_cooperative_capture(&counted, false);
                                counted = Metrics::default();
                                capture(GridSyncLaunch::Split, &counted)?
                            }
                            Err(error) => return Err(error),
                        };
                        let replays = u64::from(batch.repeat_count);
                        Metrics::add(
                            &self.metrics.grid_sync_cooperative,
                            counted.grid_sync_cooperative.load(Ordering::Relaxed) * replays,
                        );
                        Metrics::add(
                            &self.metrics.grid_sync_split,
                            counted.grid_sync_split.load(Ordering::Relaxed) * replays,
                        );
                        Metrics::bump(&self.metrics.graph_captures);
                        launch::replay(stream, &exec, batch.repeat_count)?;
                        Metrics::add(&self.metrics.graph_launches, u64::from(batch.repeat_count));
                        // `exec` may be destroyed with replays in flight; the driver
                        // finishes them.
                    } else {
                        for _ in 0..batch.repeat_count {
                            for step in &repeated {
                                launch_one(stream, step, self.grid_sync, &self.metrics)?;
                            }
                        }
                    }
                    Metrics::add(
                        &self.metrics.launches,
                        per_repeat * u64::from(batch.repeat_count),
                    );
                }
            }
            if timed {
                slot.end.record(stream)?;
            }
            enqueue_ns = nanos(started);
            wait_started = Instant::now();
            let _span = tracing::trace_span!("vyre_cuda.readback").entered();
            let mut copies: Vec<DeviceToHost<'_>> = Vec::with_capacity(reads.len() + 1);
            for ((src, len), out) in reads.iter().zip(outputs.iter_mut()) {
                out.truncate(*len);
                out.resize(*len, 0);
                copies.push(DeviceToHost {
                    src: *src,
                    dst: out.as_mut_slice(),
                });
            }
            if let Some(fault) = fault_ptr {
                copies.push(DeviceToHost {
                    src: fault,
                    dst: &mut word,
                });
            }
            let mut lane = self.staging.take();
            let downloaded =
                self.staging
                    .download(&mut lane, &self.device, stream, &mut copies, &self.metrics);
            self.staging.give_back(lane);
            downloaded?;
            stream.synchronize()?;
            Ok(if timed && steps {
                Some(slot.end.elapsed_ns_since(&slot.start)?)
            } else if timed {
                Some(0)
            } else {
                None
            })
        })();
        drop(held);
        let device_ns = match outcome {
            Ok(device_ns) => {
                if let Some(block) = fault_block {
                    self.pool.give_back(block, &slot.stream);
                }
                self.streams.give_back(slot);
                device_ns
            }
            Err(error) => return Err(self.classify(error)),
        };
        let mut faulted = Vec::new();
        if let Err(error) = check_fault(self, u32::from_le_bytes(word), &mut faulted) {
            for out in outputs.iter_mut() {
                out.clear();
            }
            return Err(error);
        }
        Ok(Timing {
            wall_ns: nanos(started),
            device_ns,
            enqueue_ns,
            wait_ns: nanos(wait_started),
        })
    }

    fn prepare_step(
        &self,
        step: &Step<'_>,
        held: &mut Vec<Arc<ResidentBuffer>>,
    ) -> Result<PreparedStep, CudaError> {
        let mut config = DispatchConfig::default();
        config.grid_override = step.grid_override;
        config.workgroup_override = step.workgroup_override;
        check_config(&config, self.grid_sync)?;
        let kernel = self.kernel(step.program, &config)?;
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
            },
            kernel,
            launches: step.launches.max(1),
        })
    }
}

fn ids(resources: &[Resource]) -> Result<smallvec::SmallVec<[u64; 8]>, CudaError> {
    resources.iter().map(resident_id).collect()
}

fn with_ids<R>(
    steps: &[ResidentDispatchStep<'_>],
    run: impl FnOnce(&[Step<'_>]) -> Result<R, CudaError>,
) -> Result<R, CudaError> {
    let handles = steps
        .iter()
        .map(|step| ids(step.resources))
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
        })
        .collect();
    run(&converted)
}

fn read_list(ranges: &[ResidentReadRange<'_>]) -> Result<Vec<Read>, CudaError> {
    ranges
        .iter()
        .map(|range| {
            Ok(Read {
                handle: resident_id(range.resource)?,
                offset: range.byte_offset,
                len: range.byte_len,
            })
        })
        .collect()
}

impl CudaBackend {
    fn resident_op(
        &self,
        batch: &ResidentBatch<'_>,
        outputs: &mut [&mut Vec<u8>],
        timed: bool,
    ) -> Result<Timing, CudaError> {
        self.core().run_resident(batch, outputs, timed)
    }

    /// Allocates a zero-filled resident buffer; returns `Resource::Resident(handle)`.
    /// Refused with [`CudaError::OutOfMemory`] when it would exceed the resident budget
    /// or the device's free memory.
    pub fn allocate_resident(&self, byte_len: usize) -> Result<Resource, CudaError> {
        self.core()
            .allocate_resident(byte_len)
            .map(Resource::Resident)
    }

    /// Frees a resident buffer. The handle is dead afterwards (using it is an error); a
    /// dispatch still using the memory on another thread keeps it until it finishes.
    pub fn free_resident(&self, resource: Resource) -> Result<(), CudaError> {
        self.core().free_resident(resident_id(&resource)?)
    }

    /// Uploads exactly the buffer's byte length.
    pub fn upload_resident(&self, resource: &Resource, bytes: &[u8]) -> Result<(), CudaError> {
        self.upload_resident_many(&[(resource, bytes)])
    }

    /// Uploads several whole buffers with one synchronisation.
    pub fn upload_resident_many(&self, uploads: &[(&Resource, &[u8])]) -> Result<(), CudaError> {
        let uploads = uploads
            .iter()
            .map(|(resource, bytes)| {
                Ok(Upload {
                    handle: resident_id(resource)?,
                    offset: 0,
                    bytes,
                    whole: true,
                })
            })
            .collect::<Result<Vec<_>, CudaError>>()?;
        self.resident_op(
            &ResidentBatch {
                uploads: &uploads,
                ..ResidentBatch::default()
            },
            &mut [],
            false,
        )
        .map(|_| ())
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
        let uploads = uploads
            .iter()
            .map(|(resource, offset, bytes)| {
                Ok(Upload {
                    handle: resident_id(resource)?,
                    offset: *offset,
                    bytes,
                    whole: false,
                })
            })
            .collect::<Result<Vec<_>, CudaError>>()?;
        self.resident_op(
            &ResidentBatch {
                uploads: &uploads,
                ..ResidentBatch::default()
            },
            &mut [],
            false,
        )
        .map(|_| ())
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
        let handle = resident_id(resource)?;
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
        let reads = ranges
            .iter()
            .map(|(resource, offset, len)| {
                Ok(Read {
                    handle: resident_id(resource)?,
                    offset: *offset,
                    len: *len,
                })
            })
            .collect::<Result<Vec<_>, CudaError>>()?;
        self.resident_op(
            &ResidentBatch {
                reads: &reads,
                ..ResidentBatch::default()
            },
            outputs,
            false,
        )
        .map(|_| ())
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
        let launches = check_config(config, self.core.grid_sync)?;
        let handles = ids(resources)?;
        let step = Step {
            program,
            handles: &handles,
            grid_override: config.grid_override,
            workgroup_override: config.workgroup_override,
            launches,
        };
        let core = self.core();
        Metrics::bump(&core.metrics().resident_dispatches);
        let timing = self
            .resident_op(
                &ResidentBatch {
                    prefix: &[step],
                    ..ResidentBatch::default()
                },
                &mut [],
                true,
            )
            .inspect_err(|_| Metrics::bump(&core.metrics().dispatch_errors))?;
        Metrics::bump(&core.metrics().timed_dispatches);
        Metrics::add(&core.metrics().timed_wall_ns, timing.wall_ns);
        Metrics::add(
            &core.metrics().timed_device_ns,
            timing.device_ns.unwrap_or(0),
        );
        Ok(timing.into_result(Vec::new()))
    }

    /// Runs the steps in order on one stream (each honouring its `grid_override` and
    /// `workgroup_override`), then reads the ranges, with one host synchronisation.
    pub fn dispatch_resident_sequence_read_ranges_into(
        &self,
        steps: &[ResidentDispatchStep<'_>],
        read_ranges: &[ResidentReadRange<'_>],
        outputs: &mut [&mut Vec<u8>],
    ) -> Result<(), CudaError> {
        self.dispatch_resident_sequence_read_ranges_timed_into(steps, read_ranges, outputs)
            .map(|_| ())
    }

    /// [`Self::dispatch_resident_sequence_read_ranges_into`] with timing: `device_ns`
    /// covers the whole chain of kernels.
    pub fn dispatch_resident_sequence_read_ranges_timed_into(
        &self,
        steps: &[ResidentDispatchStep<'_>],
        read_ranges: &[ResidentReadRange<'_>],
        outputs: &mut [&mut Vec<u8>],
    ) -> Result<ResidentSequenceTiming, CudaError> {
        let reads = read_list(read_ranges)?;
        let core = self.core();
        Metrics::bump(&core.metrics().resident_sequences);
        let timing = with_ids(steps, |steps| {
            self.resident_op(
                &ResidentBatch {
                    prefix: steps,
                    reads: &reads,
                    ..ResidentBatch::default()
                },
                outputs,
                true,
            )
        })?;
        Ok(timing.into_sequence_timing())
    }

    /// Runs `prefix_steps` once, then `repeated_steps` `repeat_count` times (captured once
    /// as a CUDA graph and replayed), then reads the ranges; one host synchronisation.
    pub fn dispatch_resident_repeated_sequence_read_ranges_into(
        &self,
        prefix_steps: &[ResidentDispatchStep<'_>],
        repeated_steps: &[ResidentDispatchStep<'_>],
        repeat_count: u32,
        read_ranges: &[ResidentReadRange<'_>],
        outputs: &mut [&mut Vec<u8>],
    ) -> Result<ResidentSequenceTiming, CudaError> {
        let reads = read_list(read_ranges)?;
        let core = self.core();
        Metrics::bump(&core.metrics().resident_sequences);
        let timing = with_ids(prefix_steps, |prefix| {
            with_ids(repeated_steps, |repeated| {
                self.resident_op(
                    &ResidentBatch {
                        prefix,
                        repeated,
                        repeat_count,
                        reads: &reads,
                        ..ResidentBatch::default()
                    },
                    outputs,
                    true,
                )
            })
        })?;
        Ok(timing.into_sequence_timing())
    }
}
