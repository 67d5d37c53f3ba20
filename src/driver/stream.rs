//! [`Stream`] (copies, memsets, launches) and [`Event`] (completion and timing).

use super::{release, Check, Device, DriverError, Function, KernelArg};
use cudarc::driver::{result, sys};
use std::ffi::c_void;
use std::sync::Arc;

/// A non-blocking CUDA stream (`CU_STREAM_NON_BLOCKING`), destroyed on drop. `Send + Sync`.
#[derive(Debug)]
pub struct Stream {
    device: Arc<Device>,
    raw: sys::CUstream,
}

// SAFETY: CUDA stream handles may be used from any thread (the driver API is thread-safe);
// every operation first binds the owning context on the calling thread.
unsafe impl Send for Stream {}
// SAFETY: see `Send`; no operation mutates Rust-side state.
unsafe impl Sync for Stream {}

/// One stream memory operation of [`Stream::batch_mem_ops`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamMemOp {
    /// [`Stream::write_value64`]: `value` to the u64 at `addr`, after a memory fence.
    Write64 {
        /// Device address, 8-byte aligned.
        addr: u64,
        /// The value written.
        value: u64,
    },
    /// [`Stream::wait_value64_geq`]: hold the stream until the u64 at `addr` is at least
    /// `value` (cyclic comparison).
    WaitGeq64 {
        /// Device address, 8-byte aligned.
        addr: u64,
        /// The value waited for.
        value: u64,
    },
}

/// Maps `CUDA_ERROR_NOT_READY` to `Ok(false)` and success to `Ok(true)`.
fn ready(status: sys::CUresult, call: &'static str) -> Result<bool, DriverError> {
    match status {
        sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        other => other.check(call).map(|()| true),
    }
}

impl Stream {
    /// Creates a stream that does not synchronise with the legacy default stream.
    pub fn new(device: &Arc<Device>) -> Result<Stream, DriverError> {
        let raw = device.run("cuStreamCreate", || {
            result::stream::create(result::stream::StreamKind::NonBlocking)
        })?;
        Ok(Stream {
            device: Arc::clone(device),
            raw,
        })
    }

    /// The device the stream belongs to.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// The raw handle, for FFI inside this crate's driver layer.
    pub fn raw(&self) -> sys::CUstream {
        self.raw
    }

    /// Runs the copy or memset `call` on this stream's device, or nothing for zero bytes.
    fn enqueue<R: Check<()>>(
        &self,
        call: &'static str,
        len: usize,
        f: impl FnOnce() -> R,
    ) -> Result<(), DriverError> {
        if len == 0 {
            return Ok(());
        }
        self.device.run(call, f)
    }

    /// Blocks until all work queued on the stream is done.
    pub fn synchronize(&self) -> Result<(), DriverError> {
        // SAFETY: `raw` is a live stream of the current context.
        self.device.run("cuStreamSynchronize", || unsafe {
            result::stream::synchronize(self.raw)
        })
    }

    /// True when all queued work is done (`cuStreamQuery`; `NOT_READY` gives `Ok(false)`).
    pub fn query_idle(&self) -> Result<bool, DriverError> {
        self.device.enter("cuStreamQuery")?;
        // SAFETY: `raw` is a live stream of the current context.
        ready(unsafe { sys::cuStreamQuery(self.raw) }, "cuStreamQuery")
    }

    /// Host-to-device copy of `src` into the device address `dst_ptr`, ordered on this stream.
    ///
    /// For pageable `src` (ordinary Rust memory) the driver stages the bytes before returning,
    /// so `src` may be dropped or reused right after. If `src` is page-locked (e.g. a
    /// [`PinnedHostBuffer`](super::PinnedHostBuffer)), the copy is truly asynchronous: do not
    /// modify it before the stream is synchronised. Zero bytes make no driver call.
    pub fn copy_to_device(&self, dst_ptr: u64, src: &[u8]) -> Result<(), DriverError> {
        // SAFETY: `src` is valid for reads of its length for the duration of the call, which is
        // all the driver needs for pageable memory (see above). The device range is the
        // caller's responsibility; a bad address is reported by the driver, not host UB.
        self.enqueue("cuMemcpyHtoDAsync_v2", src.len(), || unsafe {
            result::memcpy_htod_async(dst_ptr, src, self.raw)
        })
    }

    /// Host-to-device copy from `len` bytes at `src`, without staging.
    ///
    /// # Safety
    /// `src` must be valid for reads of `len` bytes and must neither be freed nor modified
    /// until the copy completes (synchronise the stream or an event recorded after it).
    pub unsafe fn copy_to_device_async_raw(
        &self,
        dst_ptr: u64,
        src: *const u8,
        len: usize,
    ) -> Result<(), DriverError> {
        // SAFETY: the caller guarantees `src` stays valid and unmodified until completion.
        self.enqueue("cuMemcpyHtoDAsync_v2", len, || unsafe {
            sys::cuMemcpyHtoDAsync_v2(dst_ptr, src.cast(), len, self.raw)
        })
    }

    /// Device-to-host copy into `dst`, then waits for the stream, so `dst` holds the data (and
    /// all earlier work on the stream is done) when this returns. Zero bytes make no call.
    pub fn copy_to_host_blocking(&self, dst: &mut [u8], src_ptr: u64) -> Result<(), DriverError> {
        if dst.is_empty() {
            return Ok(());
        }
        // SAFETY: `dst` is exclusively borrowed until we return. Into pageable memory the
        // driver completes the copy before `cuMemcpyDtoHAsync` returns; into page-locked
        // memory it completes by the stream synchronisation below, and if that reports an
        // error the context is faulted and the driver abandons the pending work.
        self.enqueue("cuMemcpyDtoHAsync_v2", dst.len(), || unsafe {
            result::memcpy_dtoh_async(dst, src_ptr, self.raw)
        })?;
        self.synchronize()
    }

    /// Device-to-host copy into `len` bytes at `dst` (normally page-locked memory).
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes and must not be read, freed or otherwise
    /// accessed until the copy completes (synchronise the stream or an event recorded after
    /// it).
    pub unsafe fn copy_to_host_async(
        &self,
        dst: *mut u8,
        len: usize,
        src_ptr: u64,
    ) -> Result<(), DriverError> {
        // SAFETY: the caller guarantees `dst` stays valid and untouched until completion.
        self.enqueue("cuMemcpyDtoHAsync_v2", len, || unsafe {
            sys::cuMemcpyDtoHAsync_v2(dst.cast(), src_ptr, len, self.raw)
        })
    }

    /// Device-to-device copy of `len` bytes, ordered on this stream. Zero bytes make no call.
    pub fn copy_device_to_device(
        &self,
        dst_ptr: u64,
        src_ptr: u64,
        len: usize,
    ) -> Result<(), DriverError> {
        // SAFETY: only device memory is accessed; bad addresses are reported by the driver.
        self.enqueue("cuMemcpyDtoDAsync_v2", len, || unsafe {
            result::memcpy_dtod_async(dst_ptr, src_ptr, len, self.raw)
        })
    }

    /// Zero-fills `len` bytes at `dst_ptr` (32-bit stores when address and length allow).
    pub fn memset_zero(&self, dst_ptr: u64, len: usize) -> Result<(), DriverError> {
        self.memset_u8(dst_ptr, 0, len)
    }

    /// Fills `len` bytes at `dst_ptr` with `value`, ordered on this stream: a zero fill of
    /// whole aligned words with `cuMemsetD32Async`, anything else with `cuMemsetD8Async`.
    /// Zero bytes make no call.
    pub fn memset_u8(&self, dst_ptr: u64, value: u8, len: usize) -> Result<(), DriverError> {
        if value == 0 && dst_ptr % 4 == 0 && len % 4 == 0 {
            // SAFETY: only device memory is accessed; bad addresses are reported by the driver.
            return self.enqueue("cuMemsetD32Async", len, || unsafe {
                sys::cuMemsetD32Async(dst_ptr, 0, len / 4, self.raw)
            });
        }
        // SAFETY: as above.
        self.enqueue("cuMemsetD8Async", len, || unsafe {
            result::memset_d8_async(dst_ptr, value, len, self.raw)
        })
    }

    /// Writes `value` to the eight bytes at device address `addr` (8-byte aligned) once
    /// the work queued before it on this stream is done (`cuStreamWriteValue64_v2` with
    /// `CU_STREAM_WRITE_VALUE_DEFAULT`: the driver puts a memory fence, like
    /// `__threadfence_system()` scoped to the stream, before the write, so whoever sees
    /// `value` also sees every write of that work, remote writes into a peer's memory
    /// included). `addr` may lie in another device's `cuMemAlloc` memory that this device
    /// has peer access to. Needs [`Device::stream_mem_ops_64`].
    pub fn write_value64(&self, addr: u64, value: u64) -> Result<(), DriverError> {
        let flags = sys::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as u32;
        // SAFETY: a stream-ordered 8-byte write of device memory: no host memory is
        // touched, and a bad address is reported by the driver, not host UB.
        self.device.run("cuStreamWriteValue64_v2", || unsafe {
            sys::cuStreamWriteValue64_v2(self.raw, addr, value, flags)
        })
    }

    /// Holds the work queued on this stream after this call until the u64 at device
    /// address `addr` (8-byte aligned, normally this device's own memory) is at least
    /// `value` (`cuStreamWaitValue64_v2` with `CU_STREAM_WAIT_VALUE_GEQ`). The driver
    /// compares cyclically, `(int64_t)(*addr - value) >= 0`: values less than 2^63 apart
    /// compare as numbers. Nothing times out: some stream or the host must write the value.
    /// Needs [`Device::stream_mem_ops_64`].
    pub fn wait_value64_geq(&self, addr: u64, value: u64) -> Result<(), DriverError> {
        let flags = sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32;
        // SAFETY: a stream-ordered wait that reads 8 bytes of device memory: no host memory
        // is touched, and a bad address is reported by the driver, not host UB.
        self.device.run("cuStreamWaitValue64_v2", || unsafe {
            sys::cuStreamWaitValue64_v2(self.raw, addr, value, flags)
        })
    }

    /// Enqueues `ops` in order with one driver call (`cuStreamBatchMemOp_v2`, at most 256
    /// operations): what [`Stream::write_value64`] and [`Stream::wait_value64_geq`] do one
    /// by one, each write with its memory fence. No operations make no call. Needs
    /// [`Device::stream_mem_ops_64`].
    pub fn batch_mem_ops(&self, ops: &[StreamMemOp]) -> Result<(), DriverError> {
        use sys::CUstreamBatchMemOpType as Op;
        const MAX_OPS: usize = 256;
        if ops.is_empty() {
            return Ok(());
        }
        if ops.len() > MAX_OPS {
            return Err(DriverError::described(
                "cuStreamBatchMemOp_v2",
                sys::CUresult::CUDA_ERROR_INVALID_VALUE,
                format!(
                    "{} stream memory operations in one batch (at most {MAX_OPS})",
                    ops.len()
                ),
            ));
        }
        let write = sys::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as u32;
        let geq = sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32;
        let mut params: smallvec::SmallVec<[sys::CUstreamBatchMemOpParams; 16]> = ops
            .iter()
            .map(|op| {
                // Zeroed first, so the bytes the operation's own fields leave are defined.
                let mut param = sys::CUstreamBatchMemOpParams { pad: [0; 6] };
                match *op {
                    StreamMemOp::Write64 { addr, value } => {
                        param.writeValue =
                            sys::CUstreamBatchMemOpParams_union_CUstreamMemOpWriteValueParams_st {
                                operation: Op::CU_STREAM_MEM_OP_WRITE_VALUE_64,
                                address: addr,
                                __bindgen_anon_1: sys::CUstreamBatchMemOpParams_union_CUstreamMemOpWriteValueParams_st__bindgen_ty_1 { value64: value },
                                flags: write,
                                alias: 0,
                            };
                    }
                    StreamMemOp::WaitGeq64 { addr, value } => {
                        param.waitValue =
                            sys::CUstreamBatchMemOpParams_union_CUstreamMemOpWaitValueParams_st {
                                operation: Op::CU_STREAM_MEM_OP_WAIT_VALUE_64,
                                address: addr,
                                __bindgen_anon_1: sys::CUstreamBatchMemOpParams_union_CUstreamMemOpWaitValueParams_st__bindgen_ty_1 { value64: value },
                                flags: geq,
                                alias: 0,
                            };
                    }
                }
                param
            })
            .collect();
        let count = params.len() as u32;
        // SAFETY: `params` holds `count` fully initialised operations (each a write or a wait
        // of 8 bytes of device memory, the union zeroed around its fields) and lives until
        // the call returns (the driver copies them); batch flags must be 0. No host memory
        // is touched by the operations; bad addresses are reported by the driver.
        self.device.run("cuStreamBatchMemOp_v2", || unsafe {
            sys::cuStreamBatchMemOp_v2(self.raw, count, params.as_mut_ptr(), 0)
        })
    }

    /// Launch `function` with `args`, which must match the parameters declared in the
    /// PTX the function was loaded from (checked here, so the launch itself is safe on the
    /// host side; what the kernel does with device addresses is the kernel's business, and
    /// vyre-cuda's kernels bounds-check every access). No dynamic shared memory is passed.
    pub fn launch(
        &self,
        function: &Function,
        grid: [u32; 3],
        block: [u32; 3],
        args: &[KernelArg],
    ) -> Result<(), DriverError> {
        self.launch_checked(function, grid, block, args, false)
    }

    /// [`Stream::launch`] through `cuLaunchCooperativeKernel`: every block of `grid` is
    /// resident at once, so blocks may wait for each other (grid barriers). The driver
    /// refuses (`CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE`) a grid that cannot be resident,
    /// and devices without the `COOPERATIVE_LAUNCH` attribute; callers check both first
    /// ([`Function::max_active_blocks_per_multiprocessor`], `DeviceInfo::cooperative_launch`).
    pub fn launch_cooperative(
        &self,
        function: &Function,
        grid: [u32; 3],
        block: [u32; 3],
        args: &[KernelArg],
    ) -> Result<(), DriverError> {
        self.launch_checked(function, grid, block, args, true)
    }

    fn launch_checked(
        &self,
        function: &Function,
        grid: [u32; 3],
        block: [u32; 3],
        args: &[KernelArg],
        cooperative: bool,
    ) -> Result<(), DriverError> {
        let call = if cooperative {
            "cuLaunchCooperativeKernel"
        } else {
            "cuLaunchKernel"
        };
        check_args(function, args, call)?;
        // The driver reads each parameter through a pointer to its value.
        let mut values: smallvec::SmallVec<[KernelArg; 24]> = args.iter().copied().collect();
        let mut pointers: smallvec::SmallVec<[*mut c_void; 24]> = values
            .iter_mut()
            .map(|value| match value {
                KernelArg::U32(v) => (v as *mut u32).cast::<c_void>(),
                KernelArg::U64(v) => (v as *mut u64).cast::<c_void>(),
            })
            .collect();
        let params = if pointers.is_empty() {
            std::ptr::null_mut()
        } else {
            pointers.as_mut_ptr()
        };
        let (f, [gx, gy, gz], [bx, by, bz]) = (function.raw(), grid, block);
        let extra = std::ptr::null_mut();
        // SAFETY: the function and stream belong to the current context; `pointers` holds
        // one pointer per declared parameter, each to a live value of the declared width
        // (checked against the PTX declaration above), valid for this call. The
        // cooperative form takes no `extra`.
        self.device.run(call, || unsafe {
            if cooperative {
                sys::cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, 0, self.raw, params)
            } else {
                sys::cuLaunchKernel(f, gx, gy, gz, bx, by, bz, 0, self.raw, params, extra)
            }
        })
    }
}

/// Checks `args` against the parameters the PTX declares for `function`.
fn check_args(
    function: &Function,
    args: &[KernelArg],
    call: &'static str,
) -> Result<(), DriverError> {
    let mismatch = |what: String| {
        DriverError::described(
            call,
            sys::CUresult::CUDA_ERROR_INVALID_VALUE,
            format!("kernel arguments do not match the PTX entry: {what}"),
        )
    };
    let Some(params) = function.params() else {
        return Err(mismatch(
            "the entry's parameters are not plain 32/64-bit scalars".into(),
        ));
    };
    if params.len() != args.len() || params.iter().zip(args).any(|(p, a)| *p != a.kind()) {
        return Err(mismatch(format!("declared {params:?}, given {args:?}")));
    }
    Ok(())
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: `raw` is a live stream, destroyed once. Pending work still completes.
        release(&self.device, "cuStreamDestroy_v2", || unsafe {
            result::stream::destroy(self.raw)
        });
    }
}

/// A CUDA event for completion tracking and (optionally) timing. `Send + Sync`.
#[derive(Debug)]
pub struct Event {
    device: Arc<Device>,
    raw: sys::CUevent,
}

// SAFETY: CUDA event handles may be used from any thread; operations bind the context first.
unsafe impl Send for Event {}
// SAFETY: see `Send`.
unsafe impl Sync for Event {}

impl Event {
    /// Creates an event; `timing == false` creates it with `CU_EVENT_DISABLE_TIMING`, which
    /// makes recording and querying cheaper.
    pub fn new(device: &Arc<Device>, timing: bool) -> Result<Event, DriverError> {
        let flags = if timing {
            sys::CUevent_flags::CU_EVENT_DEFAULT
        } else {
            sys::CUevent_flags::CU_EVENT_DISABLE_TIMING
        };
        Self::create(device, flags as u32)
    }

    /// Creates a completion-only event whose waits block the host thread
    /// (`CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING`): [`Event::synchronize`] sleeps
    /// until the work is done instead of spinning, whatever the context's scheduling flags.
    pub fn new_blocking(device: &Arc<Device>) -> Result<Event, DriverError> {
        Self::create(
            device,
            sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32
                | sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32,
        )
    }

    fn create(device: &Arc<Device>, flags: u32) -> Result<Event, DriverError> {
        let mut raw: sys::CUevent = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out pointer; the flags are a valid combination.
        device.run("cuEventCreate", || unsafe {
            sys::cuEventCreate(&mut raw, flags)
        })?;
        Ok(Event {
            device: Arc::clone(device),
            raw,
        })
    }

    /// Records the event at the current tail of `stream`.
    pub fn record(&self, stream: &Stream) -> Result<(), DriverError> {
        // SAFETY: both handles are live in the current context.
        self.device.run("cuEventRecord", || unsafe {
            result::event::record(self.raw, stream.raw)
        })
    }

    /// Records the event as a node of the graph `stream` is capturing
    /// (`CU_EVENT_RECORD_EXTERNAL`): each replay records it. Fails outside a capture.
    pub fn record_captured(&self, stream: &Stream) -> Result<(), DriverError> {
        let flags = sys::CUevent_record_flags::CU_EVENT_RECORD_EXTERNAL as u32;
        // SAFETY: both handles are live in the current context.
        self.device.run("cuEventRecordWithFlags", || unsafe {
            sys::cuEventRecordWithFlags(self.raw, stream.raw, flags)
        })
    }

    /// Makes work queued on `stream` after this call wait until the event's most recent
    /// record has completed (`cuStreamWaitEvent`). The event may belong to another device
    /// of this process: that is how one GPU's stream waits for another's.
    pub fn wait_on(&self, stream: &Stream) -> Result<(), DriverError> {
        // SAFETY: both handles are live; the driver accepts an event of another context.
        stream.device().run("cuStreamWaitEvent", || unsafe {
            sys::cuStreamWaitEvent(stream.raw, self.raw, 0)
        })
    }

    /// True once the recorded work is done (`NOT_READY` gives `Ok(false)`).
    pub fn is_complete(&self) -> Result<bool, DriverError> {
        self.device.enter("cuEventQuery")?;
        // SAFETY: `raw` is a live event.
        ready(unsafe { sys::cuEventQuery(self.raw) }, "cuEventQuery")
    }

    /// Blocks until the recorded work is done.
    pub fn synchronize(&self) -> Result<(), DriverError> {
        self.device.enter("cuEventSynchronize")?;
        self.settle()
    }

    /// [`Event::synchronize`] for `Drop` paths, whose errors go unreported: never failed
    /// by a test's injected failure ([`Device::fail_call`]).
    pub(crate) fn settle(&self) -> Result<(), DriverError> {
        self.device.bind()?;
        // SAFETY: `raw` is a live event.
        unsafe { result::event::synchronize(self.raw) }.check("cuEventSynchronize")
    }

    /// Nanoseconds from `start` to `self` (both recorded, completed, and created with
    /// `timing == true`). Resolution is about half a microsecond; negative spans give 0.
    pub fn elapsed_ns_since(&self, start: &Event) -> Result<u64, DriverError> {
        // SAFETY: both events are live in the current context.
        let ms = self.device.run("cuEventElapsedTime", || unsafe {
            result::event::elapsed(start.raw, self.raw)
        })?;
        Ok((f64::from(ms.max(0.0)) * 1.0e6).round() as u64)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: `raw` is a live event, destroyed once.
        release(&self.device, "cuEventDestroy_v2", || unsafe {
            result::event::destroy(self.raw)
        });
    }
}
