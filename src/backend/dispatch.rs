//! The borrowed dispatch path (synchronous, timed and asynchronous): plan, stage inputs,
//! launch, read back, check the fault word, shape outputs.

use super::cache::LoadedKernel;
use super::launch::{self, GridSyncLaunch, LaunchArgs};
use super::metrics::Metrics;
use super::plan::{shape_output, starts_zeroed, DispatchPlan};
use super::pool::{Block, Pooled, StreamSlot};
use super::staging::{DeviceToHost, HostToDevice};
use super::{Core, CudaBackend};
use crate::codegen::{DeviceFault, KernelAbi, FAULT_AREA_BYTES};
use crate::error::CudaError;
use std::sync::Arc;
use std::time::Instant;
use vyre_driver::{DispatchConfig, ResidentSequenceTiming, TimedDispatchResult};
use vyre_foundation::ir::Program;

/// Each binding starts on a 256-byte boundary inside the dispatch's device block.
pub(crate) const BINDING_ALIGN: usize = 256;

/// Alignment of the fault word after the data.
pub(crate) const FAULT_ALIGN: usize = 16;

/// Host and device time of one dispatch.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Timing {
    pub(crate) wall_ns: u64,
    pub(crate) device_ns: Option<u64>,
    pub(crate) enqueue_ns: u64,
    pub(crate) wait_ns: u64,
}

impl Timing {
    /// The times of a dispatch begun at `started` that took `enqueue_ns` to enqueue and
    /// began waiting at `wait_started`; the wall and wait times end now.
    pub(crate) fn since(
        started: Instant,
        enqueue_ns: u64,
        wait_started: Instant,
        device_ns: Option<u64>,
    ) -> Self {
        Self {
            wall_ns: nanos(started),
            device_ns,
            enqueue_ns,
            wait_ns: nanos(wait_started),
        }
    }

    /// The trait's timed result: wall, device (events), enqueue and wait times.
    pub(crate) fn into_result(self, outputs: Vec<Vec<u8>>) -> TimedDispatchResult {
        TimedDispatchResult {
            outputs,
            wall_ns: self.wall_ns,
            device_ns: self.device_ns,
            enqueue_ns: Some(self.enqueue_ns),
            wait_ns: Some(self.wait_ns),
        }
    }

    /// The same times for a resident sequence.
    pub(crate) fn into_sequence_timing(self) -> ResidentSequenceTiming {
        ResidentSequenceTiming {
            wall_ns: self.wall_ns,
            device_ns: self.device_ns,
            enqueue_ns: Some(self.enqueue_ns),
            wait_ns: Some(self.wait_ns),
        }
    }
}

/// Counts a dispatch's outcome in `metrics`: an error, or (`timed`) its wall and device time.
pub(crate) fn count<E>(metrics: &Metrics, result: &Result<Timing, E>, timed: bool) {
    match result {
        Ok(timing) if timed => {
            Metrics::bump(&metrics.timed_dispatches);
            Metrics::add(&metrics.timed_wall_ns, timing.wall_ns);
            Metrics::add(&metrics.timed_device_ns, timing.device_ns.unwrap_or(0));
        }
        Ok(_) => {}
        Err(_) => Metrics::bump(&metrics.dispatch_errors),
    }
}

pub(crate) fn nanos(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// `out` resized to `len` bytes (its capacity reused), as a download's destination.
pub(crate) fn resized(out: &mut Vec<u8>, len: usize) -> &mut [u8] {
    out.truncate(len);
    out.resize(len, 0);
    out
}

/// Makes `outputs` one buffer per returned binding of `abi` (existing buffers reused).
pub(crate) fn size_outputs(abi: &KernelAbi, outputs: &mut Vec<Vec<u8>>) {
    let returned = abi.bindings.iter().filter(|b| b.role.is_returned()).count();
    outputs.truncate(returned);
    outputs.resize_with(returned, Vec::new);
}

/// Cuts each returned buffer (in `outputs`, in order) to its binding's declared
/// `output_byte_range`, as the reference does.
pub(crate) fn shape_outputs(abi: &KernelAbi, outputs: &mut [Vec<u8>]) {
    let returned = abi.bindings.iter().filter(|b| b.role.is_returned());
    for (binding, out) in returned.zip(outputs) {
        shape_output(out, binding.output_byte_range.as_ref());
    }
}

/// Where each binding sits in a dispatch's device memory (the packed path's arena, the
/// general path's block): inputs first, then the returned buffers, then the fault word, so
/// one download covers everything returned.
pub(crate) struct Layout {
    pub(crate) offsets: smallvec::SmallVec<[usize; 8]>,
    pub(crate) fault: Option<usize>,
    /// Bytes in use (uploaded whole on the packed path).
    pub(crate) total: usize,
    /// Start of the downloaded range (the first returned buffer, or the fault word).
    pub(crate) download_at: usize,
    pub(crate) download_end: usize,
}

impl Layout {
    pub(crate) fn new(kernel: &LoadedKernel, plan: &DispatchPlan) -> Self {
        let abi = &kernel.abi;
        let mut offsets: smallvec::SmallVec<[usize; 8]> =
            smallvec::smallvec![0; abi.bindings.len()];
        let mut next = 0usize;
        let mut data_end = 0usize;
        let (mut download_at, mut download_end) = (usize::MAX, 0usize);
        for returned in [false, true] {
            for (index, (binding, bytes)) in abi.bindings.iter().zip(&plan.bindings).enumerate() {
                if binding.role.is_returned() != returned {
                    continue;
                }
                offsets[index] = next;
                data_end = next + bytes.len;
                if returned {
                    download_at = download_at.min(next);
                    download_end = data_end;
                }
                next += bytes.len.next_multiple_of(BINDING_ALIGN);
            }
        }
        // The fault word follows the last byte of data (16-byte aligned), so the upload and
        // the download end a few bytes after the data.
        let fault = abi
            .fault_word
            .then(|| data_end.next_multiple_of(FAULT_ALIGN));
        if download_at == usize::MAX {
            download_at = fault.unwrap_or(data_end);
            download_end = download_at;
        }
        // The fault word and the cooperative entry's grid-barrier words start zeroed.
        let end = fault.map_or(data_end, |at| at + FAULT_AREA_BYTES);
        Self {
            offsets,
            fault,
            total: end,
            download_at,
            download_end: fault.map_or(download_end, |at| at + 4),
        }
    }

    /// The launch arguments for this layout at device address `base`.
    pub(crate) fn args(&self, base: u64, plan: &DispatchPlan) -> LaunchArgs {
        LaunchArgs {
            pointers: self.offsets.iter().map(|o| base + *o as u64).collect(),
            counts: plan.bindings.iter().map(|b| b.elements).collect(),
            fault: self.fault.map(|o| base + o as u64),
            peer: None,
        }
    }

    /// `(offset, byte length)` of each returned binding, in output order.
    pub(crate) fn returned<'a>(
        &'a self,
        abi: &'a KernelAbi,
        plan: &'a DispatchPlan,
    ) -> impl Iterator<Item = (usize, usize)> + 'a {
        let bindings = abi.bindings.iter().zip(&plan.bindings).zip(&self.offsets);
        bindings
            .filter(|((binding, _), _)| binding.role.is_returned())
            .map(|((_, bytes), &offset)| (offset, bytes.len))
    }
}

/// A dispatch whose inputs are uploaded and whose launches are enqueued. Owns its device
/// memory and stream (back to their pools when it is dropped, discarded after a driver
/// error) until [`InFlight::finish`] or [`InFlight::cancel`].
pub(crate) struct InFlight {
    kernel: Arc<LoadedKernel>,
    plan: DispatchPlan,
    /// Where each binding and the fault word sit in `block`.
    layout: Layout,
    block: Block,
    slot: Pooled<StreamSlot>,
    timed: bool,
    started: Instant,
    enqueue_ns: u64,
}

/// What every borrowed dispatch path needs before it touches the device: the launch
/// count, the loaded kernel and the plan (built once per dispatch, whichever path runs).
pub(crate) struct Prepared {
    pub(crate) launches: u32,
    pub(crate) kernel: Arc<LoadedKernel>,
    pub(crate) plan: DispatchPlan,
}

impl Core {
    /// Checks the backend and `config`, loads the kernel (unless given) and plans the
    /// dispatch of `program` over `inputs`.
    pub(crate) fn prepare_dispatch(
        &self,
        program: &Program,
        inputs: &[&[u8]],
        config: &DispatchConfig,
        kernel: Option<Arc<LoadedKernel>>,
    ) -> Result<Prepared, CudaError> {
        self.usable()?;
        let launches = check_config(config, self.grid_sync)?;
        let kernel = match kernel {
            Some(kernel) => kernel,
            None => self.kernel(program, config)?,
        };
        let input_lens: smallvec::SmallVec<[usize; 8]> = inputs.iter().map(|i| i.len()).collect();
        let plan = DispatchPlan::new(program, &kernel.abi, &input_lens, config, self.limits)?;
        Ok(Prepared {
            launches,
            kernel,
            plan,
        })
    }

    /// Stages `inputs`, zeroes outputs and enqueues the launches. When this returns, the
    /// inputs have been read: the caller may drop them.
    pub(crate) fn start(
        &self,
        program: &Program,
        inputs: &[&[u8]],
        config: &DispatchConfig,
    ) -> Result<InFlight, CudaError> {
        let started = Instant::now();
        let prepared = self.prepare_dispatch(program, inputs, config, None)?;
        // Timed: an asynchronous dispatch reports its device time when awaited.
        self.start_prepared(prepared, inputs, true, started)
    }

    /// [`Core::start`] after [`Core::prepare_dispatch`]; `started` is when the dispatch began.
    fn start_prepared(
        &self,
        prepared: Prepared,
        inputs: &[&[u8]],
        timed: bool,
        started: Instant,
    ) -> Result<InFlight, CudaError> {
        let Prepared {
            launches,
            kernel,
            plan,
        } = prepared;
        let layout = Layout::new(&kernel, &plan);
        let slot = self.stream().map_err(|e| self.driver_error(e))?;
        let block = self
            .pool
            .take(&slot.stream, layout.total.max(1))
            .map_err(|e| self.driver_error(e))?;
        let mut flight = InFlight {
            kernel,
            plan,
            layout,
            block,
            slot,
            timed,
            started,
            enqueue_ns: 0,
        };
        if let Err(error) = self.enqueue(&flight, inputs, launches) {
            flight.discard();
            return Err(self.driver_error(error));
        }
        flight.enqueue_ns = nanos(started);
        Ok(flight)
    }

    fn enqueue(
        &self,
        flight: &InFlight,
        inputs: &[&[u8]],
        launches: u32,
    ) -> Result<(), crate::driver::DriverError> {
        let InFlight {
            kernel,
            plan,
            layout,
            slot,
            ..
        } = flight;
        let base = flight.block.ptr();
        let stream = &slot.stream;
        {
            let _span = tracing::trace_span!("vyre_cuda.upload").entered();
            let mut copies: smallvec::SmallVec<[HostToDevice<'_>; 8]> = smallvec::SmallVec::new();
            for ((binding, bytes), offset) in kernel
                .abi
                .bindings
                .iter()
                .zip(&plan.bindings)
                .zip(&layout.offsets)
            {
                let dst = base + *offset as u64;
                if let Some(input) = bytes.input {
                    copies.push(HostToDevice {
                        dst,
                        src: inputs[input],
                    });
                } else if starts_zeroed(binding.role) {
                    stream.memset_zero(dst, bytes.len)?;
                }
            }
            if let Some(fault) = layout.fault {
                stream.memset_zero(base + fault as u64, FAULT_AREA_BYTES)?;
            }
            self.staging.upload_now(stream, &copies)?;
        }
        let args = layout.args(base, plan);
        let _span = tracing::trace_span!("vyre_cuda.launch", grid = ?plan.grid).entered();
        slot.timed(stream, flight.timed, || {
            let mode = self.grid_sync;
            launch::enqueue(
                stream,
                kernel,
                plan.grid,
                &args,
                launches,
                mode,
                &self.metrics,
            )
        })?;
        slot.done.record(stream)
    }
}

impl InFlight {
    /// Whether the launches have completed (non-blocking).
    pub(crate) fn is_complete(&self) -> bool {
        self.slot.done.is_complete().unwrap_or(true)
    }

    /// Reads the outputs back (into `outputs`, reusing its buffers), waits and checks the
    /// fault word; the resources go back to their pools (discarded after a driver error).
    pub(crate) fn finish(
        self,
        core: &Core,
        outputs: &mut Vec<Vec<u8>>,
    ) -> Result<Timing, CudaError> {
        let result = self.read_back(core, outputs);
        if super::failed_on_device(&result) {
            self.discard();
        }
        result
    }

    fn read_back(&self, core: &Core, outputs: &mut Vec<Vec<u8>>) -> Result<Timing, CudaError> {
        let wait_started = Instant::now();
        let _span = tracing::trace_span!("vyre_cuda.readback").entered();
        let abi = &self.kernel.abi;
        let base = self.block.ptr();
        let stream = &self.slot.stream;
        size_outputs(abi, outputs);
        let mut word = [0u8; 4];
        {
            let mut copies: smallvec::SmallVec<[DeviceToHost<'_>; 8]> = smallvec::SmallVec::new();
            let returned = self.layout.returned(abi, &self.plan);
            for ((offset, len), out) in returned.zip(outputs.iter_mut()) {
                copies.push(DeviceToHost {
                    src: base + offset as u64,
                    dst: resized(out, len),
                });
            }
            if let Some(fault) = self.layout.fault {
                copies.push(DeviceToHost {
                    src: base + fault as u64,
                    dst: &mut word,
                });
            }
            core.staging
                .download_now(stream, &mut copies)
                .and_then(|()| stream.synchronize())
                .map_err(|e| core.driver_error(e))?;
        }
        let device_ns = self
            .slot
            .device_ns(self.timed)
            .map_err(|e| core.driver_error(e))?;
        check_fault(core, u32::from_le_bytes(word), outputs)?;
        shape_outputs(abi, outputs);
        Ok(Timing::since(
            self.started,
            self.enqueue_ns,
            wait_started,
            device_ns,
        ))
    }

    /// Frees the memory and stream instead of pooling them (after a driver error; freeing
    /// device memory waits for the work that uses it).
    fn discard(self) {
        self.block.discard();
        self.slot.discard();
    }

    /// Waits for the launches, then returns the resources (a dropped async dispatch).
    pub(crate) fn cancel(self) {
        if self.slot.stream.synchronize().is_err() {
            self.discard();
        }
    }
}

/// Decodes the fault word; a non-zero one fails the dispatch with the reference's error.
pub(crate) fn check_fault(
    core: &Core,
    code: u32,
    outputs: &mut Vec<Vec<u8>>,
) -> Result<(), CudaError> {
    if code == 0 {
        return Ok(());
    }
    Metrics::bump(&core.metrics.kernel_faults);
    outputs.clear();
    let (message, fix) = match DeviceFault::from_code(code) {
        Some(fault) => (fault.message().to_string(), fault.fix().to_string()),
        None => (
            format!("the kernel reported unknown fault code {code}"),
            "report this as a vyre-cuda bug with the program".to_string(),
        ),
    };
    Err(CudaError::KernelRuntime { message, fix })
}

impl Core {
    /// A synchronous borrowed dispatch (optionally with an already-loaded kernel).
    pub(crate) fn run(
        &self,
        program: &Program,
        inputs: &[&[u8]],
        config: &DispatchConfig,
        kernel: Option<Arc<LoadedKernel>>,
        timed: bool,
        outputs: &mut Vec<Vec<u8>>,
    ) -> Result<Timing, CudaError> {
        Metrics::bump(&self.metrics.dispatches);
        let started = Instant::now();
        let result = self
            .prepare_dispatch(program, inputs, config, kernel)
            .and_then(|prepared| self.run_prepared(prepared, inputs, timed, started, outputs));
        count(&self.metrics, &result, timed);
        result.map_err(|e| self.classify(e))
    }

    /// Small dispatches take the packed path (one upload, launch, one download, one wait);
    /// large elementwise ones run as overlapped chunks (chunked.rs; the timed variant
    /// keeps the single launch its device time measures); the rest, and whatever does not
    /// fit a lane, the general one.
    fn run_prepared(
        &self,
        prepared: Prepared,
        inputs: &[&[u8]],
        timed: bool,
        started: Instant,
        outputs: &mut Vec<Vec<u8>>,
    ) -> Result<Timing, CudaError> {
        if let Some(result) = self.run_small(&prepared, inputs, timed, started, outputs) {
            return result;
        }
        if !timed {
            if let Some(timing) = self.run_chunked(&prepared, inputs, started, outputs)? {
                return Ok(timing);
            }
        }
        self.start_prepared(prepared, inputs, timed, started)
            .and_then(|flight| flight.finish(self, outputs))
    }
}

impl CudaBackend {
    /// Run `program` with owned inputs.
    pub fn dispatch(
        &self,
        program: &Program,
        inputs: &[Vec<u8>],
        config: &DispatchConfig,
    ) -> Result<Vec<Vec<u8>>, CudaError> {
        let borrowed: smallvec::SmallVec<[&[u8]; 8]> = inputs.iter().map(Vec::as_slice).collect();
        self.dispatch_borrowed(program, &borrowed, config)
    }

    /// Run `program` with borrowed inputs; returns one buffer per output in declaration
    /// order (see [`crate::codegen::KernelAbi`]).
    pub fn dispatch_borrowed(
        &self,
        program: &Program,
        inputs: &[&[u8]],
        config: &DispatchConfig,
    ) -> Result<Vec<Vec<u8>>, CudaError> {
        let mut outputs = Vec::new();
        self.dispatch_borrowed_into(program, inputs, config, &mut outputs)?;
        Ok(outputs)
    }

    /// Run `program`, writing the outputs into `outputs` and reusing its buffers'
    /// capacity.
    pub fn dispatch_borrowed_into(
        &self,
        program: &Program,
        inputs: &[&[u8]],
        config: &DispatchConfig,
        outputs: &mut Vec<Vec<u8>>,
    ) -> Result<(), CudaError> {
        self.core()
            .dispatch_now(program, inputs, config, false, outputs)
            .map(|_| ())
    }

    /// Run `program` and report its timing: `wall_ns` (the whole call), `enqueue_ns`
    /// (staging inputs and enqueueing the launches), `wait_ns` (waiting and reading back)
    /// and `device_ns` (the kernel launches alone, measured with CUDA events).
    pub fn dispatch_borrowed_timed(
        &self,
        program: &Program,
        inputs: &[&[u8]],
        config: &DispatchConfig,
    ) -> Result<TimedDispatchResult, CudaError> {
        let mut outputs = Vec::new();
        let timing = self
            .core()
            .dispatch_now(program, inputs, config, true, &mut outputs)?;
        Ok(timing.into_result(outputs))
    }
}

/// Reject configuration the backend cannot honour; returns how many back-to-back
/// launches `fixpoint_iterations` asks for.
pub(crate) fn check_config(
    config: &DispatchConfig,
    grid_sync: GridSyncLaunch,
) -> Result<u32, CudaError> {
    use vyre_driver::persistent::PersistentThreadMode;
    use vyre_driver::speculate::SpeculationMode;
    // With cooperative launches, grid-wide barriers already run as one launch wherever the
    // grid fits resident (and as ordered launches where it does not), so the flag asks for
    // nothing more; without them it must be refused (the trait's contract).
    if config.cooperative && grid_sync == GridSyncLaunch::Split {
        return Err(CudaError::UnsupportedSetting {
            feature: "cooperative grid-sync launch",
            fix: "leave DispatchConfig::cooperative false; this device or backend configuration launches grid-wide barriers as ordered launches, one per segment",
        });
    }
    if config.speculation == Some(SpeculationMode::Force) {
        return Err(CudaError::UnsupportedSetting {
            feature: "forced speculation",
            fix: "use SpeculationMode::Auto or Disable",
        });
    }
    if config.persistent_thread == Some(PersistentThreadMode::Force) {
        return Err(CudaError::UnsupportedSetting {
            feature: "forced persistent-thread dispatch",
            fix: "use PersistentThreadMode::Auto or Disable",
        });
    }
    match config.fixpoint_iterations {
        Some(0) => Err(CudaError::invalid_input(
            "DispatchConfig::fixpoint_iterations is 0",
            "set it to at least 1, or leave it unset for one launch",
        )),
        Some(iterations) => Ok(iterations),
        None => Ok(1),
    }
}
