//! The packed path for small synchronous dispatches: the floor's four driver calls.
//!
//! Every binding of the dispatch and its fault word live in one device arena owned by a
//! pooled [`SmallLane`], at 256-byte-aligned offsets laid out so that the returned buffers
//! and the fault word come last and are contiguous. The host packs the inputs, zeroed
//! outputs and a zeroed fault word into the lane's pinned buffer (the same layout), then:
//!
//! 1. one `cuMemcpyHtoDAsync` of the whole arena (this also zeroes the outputs and the
//!    fault word: no memsets),
//! 2. the launches,
//! 3. one `cuMemcpyDtoHAsync` of the returned buffers and the fault word,
//! 4. one wait (`cuStreamSynchronize`, or a blocking-sync event when
//!    `CudaOptions::blocking_wait` is set),
//!
//! then copies the outputs into the caller's buffers. A warm dispatch allocates nothing,
//! hashes nothing and takes three uncontended locks (identity memo, module cache, lanes).

use super::dispatch::BINDING_ALIGN;
use super::dispatch::{check_fault, nanos, shape_outputs, size_outputs, Layout, Prepared, Timing};
use super::launch;
use super::metrics::Metrics;
use super::plan::starts_zeroed;
use super::pool::{Pool, PoolCounts, Pooled, Recycle, StreamSlot};
use super::Core;
use crate::codegen::FAULT_AREA_BYTES;
use crate::driver::{
    Device, DeviceAlloc, DriverError, Event, Exchange, RoundTripBuffer, Stream, Wait,
};
use crate::error::CudaError;
use std::sync::Arc;
use std::time::Instant;

/// Default arena size: dispatches whose bindings (each rounded up to 256 bytes) plus the
/// fault word fit take the packed path. Chosen by measurement (`bench/compare`,
/// `diagnostics.small_dispatch_threshold`, H200): the packed path took 0.69-0.77x the
/// general path's time up to a 49 KiB arena and 1.2x from 98 KiB, where packing on the host
/// and uploading zeroed outputs cost more than a device memset and pageable copies.
pub(crate) const DEFAULT_SMALL_DISPATCH_BYTES: usize = 64 * 1024;

/// Idle lanes kept for reuse (each holds one arena and one pinned buffer), and idle
/// blocking wait events.
const MAX_IDLE_LANES: usize = 16;

/// A stream with its own device arena and pinned exchange buffer, used by one small
/// dispatch at a time.
pub(crate) struct SmallLane {
    /// Declared first: dropping it waits for its copies (and drops a round trip captured
    /// over the arena and the events) before the rest goes.
    pub(super) exchange: RoundTripBuffer,
    pub(super) slot: StreamSlot,
    pub(super) arena: DeviceAlloc,
    /// Set with `CudaOptions::blocking_wait`: waits sleep on this event.
    pub(super) blocking: Option<Event>,
}

impl SmallLane {
    /// A lane of `capacity` arena and pinned bytes.
    pub(super) fn new(
        core: &Core,
        capacity: usize,
        blocking_wait: bool,
    ) -> Result<Self, DriverError> {
        let slot = StreamSlot::new(&core.device, &core.metrics)?;
        core.metrics.device_allocation(capacity);
        let arena = DeviceAlloc::new(&core.device, capacity)?;
        core.metrics.pinned_allocation(capacity);
        let exchange = RoundTripBuffer::new(&core.device, capacity)?;
        let blocking = if blocking_wait {
            Some(Event::new_blocking(&core.device)?)
        } else {
            None
        };
        Ok(Self {
            exchange,
            slot,
            arena,
            blocking,
        })
    }
}

impl Recycle for SmallLane {}

pub(crate) struct SmallLanes {
    /// Arena (and pinned buffer) bytes per lane; 0 disables the packed path.
    capacity: usize,
    blocking_wait: bool,
    lanes: Pool<SmallLane>,
    /// Blocking-sync events for other waits (resident sequences).
    events: Pool<Event>,
}

impl SmallLanes {
    pub(crate) fn new(capacity: usize, blocking_wait: bool) -> Self {
        Self {
            capacity: capacity.next_multiple_of(BINDING_ALIGN),
            blocking_wait,
            lanes: Pool::new(MAX_IDLE_LANES),
            events: Pool::new(MAX_IDLE_LANES),
        }
    }

    /// With `CudaOptions::blocking_wait`, a blocking-sync event to wait on; otherwise
    /// `None`.
    pub(crate) fn blocking_event(
        &self,
        device: &Arc<Device>,
    ) -> Result<Option<Pooled<Event>>, DriverError> {
        if !self.blocking_wait {
            return Ok(None);
        }
        self.events.take(|| Event::new_blocking(device)).map(Some)
    }

    pub(crate) fn enabled(&self) -> bool {
        self.capacity > 0
    }

    /// Arena bytes per lane (0: the packed path is off).
    pub(super) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Whether waits sleep on a blocking event (`CudaOptions::blocking_wait`).
    pub(super) fn blocking_wait(&self) -> bool {
        self.blocking_wait
    }

    fn take(&self, core: &Core) -> Result<Pooled<SmallLane>, DriverError> {
        self.lanes
            .take(|| SmallLane::new(core, self.capacity, self.blocking_wait))
    }

    /// Creates one lane ahead of the first dispatch.
    pub(crate) fn prepare(&self, core: &Core) -> Result<(), DriverError> {
        if self.enabled() {
            self.take(core)?;
        }
        Ok(())
    }

    pub(crate) fn close(&self) {
        self.lanes.close();
        self.events.close();
    }

    /// `(lanes, wait events)` in use and idle.
    pub(crate) fn counts(&self) -> (PoolCounts, PoolCounts) {
        (self.lanes.counts(), self.events.counts())
    }

    /// Pinned bytes held by idle lanes.
    pub(crate) fn idle_bytes(&self) -> usize {
        self.lanes.counts().idle * self.capacity
    }
}

impl Core {
    /// Runs a synchronous dispatch on the packed path when the packed path is on and its
    /// arena fits a lane; `None` when it does not (the general path runs it).
    pub(crate) fn run_small(
        &self,
        prepared: &Prepared,
        inputs: &[&[u8]],
        timed: bool,
        started: Instant,
        outputs: &mut Vec<Vec<u8>>,
    ) -> Option<Result<Timing, CudaError>> {
        if !self.small.enabled() || !inputs_fit(inputs, self.small.capacity) {
            return None;
        }
        let layout = Layout::new(&prepared.kernel, &prepared.plan);
        if layout.total > self.small.capacity {
            return None;
        }
        let mut lane = match self.small.take(self) {
            Ok(lane) => lane,
            Err(error) => return Some(Err(self.driver_error(error))),
        };
        let result = pack(&mut lane, prepared, &layout, inputs)
            .map_err(|e| self.driver_error(e))
            .and_then(|()| self.round_trip(&mut lane, prepared, &layout, timed, started, outputs));
        // A lane whose stream saw a driver error is not pooled.
        lane.discard_if(super::failed_on_device(&result));
        Some(result)
    }

    /// One upload of the packed arena, the launches, one download, one wait; then the
    /// outputs are unpacked.
    fn round_trip(
        &self,
        lane: &mut SmallLane,
        prepared: &Prepared,
        layout: &Layout,
        timed: bool,
        started: Instant,
        outputs: &mut Vec<Vec<u8>>,
    ) -> Result<Timing, CudaError> {
        let Prepared {
            launches,
            kernel,
            plan,
        } = prepared;
        let base = lane.arena.ptr();
        let args = layout.args(base, plan);
        let exchange = Exchange {
            upload_dst: base,
            upload_len: layout.total,
            download_src: base + layout.download_at as u64,
            download_at: layout.download_at,
            download_len: layout.download_end - layout.download_at,
        };
        let (mut enqueue_ns, mut wait_started) = (0, started);
        let SmallLane {
            slot,
            exchange: buffer,
            blocking,
            ..
        } = lane;
        let wait = blocking.as_ref().map_or(Wait::Stream, Wait::Event);
        let _span = tracing::trace_span!("vyre_cuda.packed_dispatch", grid = ?plan.grid).entered();
        let enqueue = |stream: &Stream| {
            slot.timed(stream, timed, || {
                let mode = self.grid_sync;
                launch::enqueue(
                    stream,
                    kernel,
                    plan.grid,
                    &args,
                    *launches,
                    mode,
                    &self.metrics,
                )
            })?;
            enqueue_ns = nanos(started);
            wait_started = Instant::now();
            Ok(())
        };
        let device_ns = buffer
            .round_trip(&slot.stream, exchange, enqueue, wait)
            .and_then(|()| slot.device_ns(timed))
            .map_err(|e| self.driver_error(e))?;
        Metrics::bump(&self.metrics.packed_dispatches);
        Metrics::add(&self.metrics.bytes_to_device, exchange.upload_len as u64);
        Metrics::add(&self.metrics.bytes_to_host, exchange.download_len as u64);
        unpack(self, lane, prepared, layout, outputs)?;
        Ok(Timing::since(started, enqueue_ns, wait_started, device_ns))
    }
}

/// Packs the inputs, zeroed outputs and a zeroed fault word into the lane's pinned buffer.
/// Padding between bindings is never addressed (every access is bounds-checked against
/// the element counts).
fn pack(
    lane: &mut SmallLane,
    prepared: &Prepared,
    layout: &Layout,
    inputs: &[&[u8]],
) -> Result<(), DriverError> {
    let Prepared { kernel, plan, .. } = prepared;
    let packed = lane.exchange.bytes()?;
    for ((binding, bytes), offset) in kernel
        .abi
        .bindings
        .iter()
        .zip(&plan.bindings)
        .zip(&layout.offsets)
    {
        let region = &mut packed[*offset..*offset + bytes.len];
        if let Some(input) = bytes.input {
            region.copy_from_slice(inputs[input]);
        } else if starts_zeroed(binding.role) {
            region.fill(0);
        }
    }
    if let Some(fault) = layout.fault {
        packed[fault..fault + FAULT_AREA_BYTES].fill(0);
    }
    Ok(())
}

/// Checks the fault word, then copies the returned buffers (shaped like the reference's
/// `output_byte_range`) out of the lane's pinned buffer into `outputs`.
fn unpack(
    core: &Core,
    lane: &mut SmallLane,
    prepared: &Prepared,
    layout: &Layout,
    outputs: &mut Vec<Vec<u8>>,
) -> Result<(), CudaError> {
    let abi = &prepared.kernel.abi;
    let packed = lane.exchange.bytes().map_err(|e| core.driver_error(e))?;
    let word = layout.fault.map_or(0, |at| {
        u32::from_le_bytes([packed[at], packed[at + 1], packed[at + 2], packed[at + 3]])
    });
    size_outputs(abi, outputs);
    check_fault(core, word, outputs)?;
    for ((offset, len), out) in layout.returned(abi, &prepared.plan).zip(outputs.iter_mut()) {
        out.clear();
        out.extend_from_slice(&packed[offset..offset + len]);
    }
    shape_outputs(abi, outputs);
    Ok(())
}

/// Sum of the input bytes: dispatches whose inputs alone overflow a lane skip planning
/// twice.
pub(crate) fn inputs_fit(inputs: &[&[u8]], capacity: usize) -> bool {
    inputs.iter().map(|i| i.len()).sum::<usize>() <= capacity
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cache::LoadedKernel;
    use crate::backend::plan::{DispatchPlan, GridLimits};
    use crate::codegen::{emit_ptx, PtxTarget};
    use vyre_driver::DispatchConfig;
    use vyre_foundation::ir::{BufferAccess, BufferDecl, DataType, Expr, Node, Program};

    #[test]
    fn returned_buffers_and_the_fault_word_are_contiguous_at_the_end() {
        // Declaration order interleaves an output between inputs, plus a read-write buffer.
        let program = Program::wrapped(
            vec![
                BufferDecl::read("a", 0, DataType::U32),
                BufferDecl::output("out", 1, DataType::U32).with_count(3),
                BufferDecl::storage("rw", 2, BufferAccess::ReadWrite, DataType::U32),
                BufferDecl::read("b", 3, DataType::U32),
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
        );
        let emitted = emit_ptx(&program, None, PtxTarget::sm90()).unwrap();
        let limits = GridLimits {
            max_grid_dim: [i32::MAX as u32, 65535, 65535],
            max_buffer_bytes: 1 << 34,
        };
        let plan = DispatchPlan::new(
            &program,
            &emitted.abi,
            &[12, 300, 12],
            &DispatchConfig::default(),
            limits,
        )
        .unwrap();
        let kernel = LoadedKernel::unloaded(emitted.abi.clone());
        let layout = Layout::new(&kernel, &plan);
        // a, b (inputs) at 0 and 256; out, rw (returned) at 512 and 768; rw is 300 bytes,
        // so the data ends at 1068 and the fault word (if any) sits at 1072.
        assert_eq!(layout.offsets.as_slice(), [0, 512, 768, 256]);
        assert!(layout.offsets.iter().all(|o| o % BINDING_ALIGN == 0));
        assert_eq!(layout.download_at, 512);
        if emitted.abi.fault_word {
            assert_eq!(layout.fault, Some(1072));
            assert_eq!((layout.download_end, layout.total), (1076, 1076));
        } else {
            assert_eq!((layout.download_end, layout.total), (1068, 1068));
        }
    }

    #[test]
    fn a_lane_capacity_rounds_to_the_binding_alignment() {
        assert_eq!(SmallLanes::new(1000, false).capacity, 1024);
        assert!(!SmallLanes::new(0, false).enabled());
        assert!(inputs_fit(&[&[0u8; 10], &[0u8; 6]], 16));
        assert!(!inputs_fit(&[&[0u8; 10], &[0u8; 7]], 16));
    }
}
