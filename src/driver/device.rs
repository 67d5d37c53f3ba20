//! [`Device`]: one CUDA device with its retained primary context, and [`DeviceInfo`].

use super::{init, Check, DriverError};
use cudarc::driver::{result, sys};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Bumped whenever a context we bound may have been destroyed (a dropped [`Device`]); invalidates every thread's [`BOUND`] cache.
static BIND_EPOCH: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// `(context address, epoch)` last made current on this thread by [`Device::bind`].
    static BOUND: Cell<(usize, u64)> = const { Cell::new((0, u64::MAX)) };
}

/// Static properties of a CUDA device, probed once by [`Device::open`].
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    /// Device ordinal (`cuDeviceGet` index).
    pub ordinal: usize,
    /// Marketing name, e.g. `"NVIDIA H100 80GB HBM3"`.
    pub name: String,
    /// `(major, minor)` compute capability.
    pub compute_capability: (u32, u32),
    /// Streaming multiprocessors.
    pub multiprocessor_count: u32,
    /// Threads per warp.
    pub warp_size: u32,
    /// Maximum threads per block.
    pub max_threads_per_block: u32,
    /// Maximum block dimensions (x, y, z).
    pub max_block_dim: [u32; 3],
    /// Maximum grid dimensions (x, y, z).
    pub max_grid_dim: [u32; 3],
    /// Static + dynamic shared memory per block without opt-in, in bytes.
    pub max_shared_memory_per_block: u32,
    /// Shared memory per block with `set_max_dynamic_shared_bytes` opt-in, in bytes.
    pub max_shared_memory_per_block_optin: u32,
    /// L2 cache size in bytes.
    pub l2_cache_bytes: u32,
    /// Total device memory in bytes.
    pub total_memory_bytes: u64,
    /// `cuDriverGetVersion`, e.g. `12040` for CUDA 12.4.
    pub driver_version: i32,
    /// Cooperative (grid-synchronising) launches are supported.
    pub cooperative_launch: bool,
    /// Peak memory clock in kHz (0 if the driver does not report it).
    pub memory_clock_khz: u32,
    /// Memory bus width in bits (0 if the driver does not report it).
    pub memory_bus_width_bits: u32,
    /// Most resident threads per multiprocessor (0 if the driver does not report it).
    pub max_threads_per_multiprocessor: u32,
    /// Most resident blocks per multiprocessor (0 if the driver does not report it).
    pub max_blocks_per_multiprocessor: u32,
    /// Shared memory per multiprocessor in bytes (0 if the driver does not report it).
    pub max_shared_memory_per_multiprocessor: u32,
}

impl DeviceInfo {
    /// Theoretical peak memory bandwidth in GB/s (`2 * clock * bus / 8`, double data rate),
    /// 0 when the clock or bus width is unknown.
    pub fn memory_bandwidth_gbps(&self) -> u64 {
        2 * u64::from(self.memory_clock_khz) * 1000 * u64::from(self.memory_bus_width_bits)
            / 8
            / 1_000_000_000
    }

    /// An upper bound on how many blocks of `threads` threads and `shared_bytes` bytes of
    /// static shared memory are resident on the device at once, whatever their registers:
    /// the limits the driver reports (an unreported one bounds nothing).
    pub fn resident_blocks_bound(&self, threads: u32, shared_bytes: u32) -> u64 {
        let per_multiprocessor = [
            (self.max_blocks_per_multiprocessor, 1),
            (self.max_threads_per_multiprocessor, threads),
            (self.max_shared_memory_per_multiprocessor, shared_bytes),
        ]
        .into_iter()
        .filter(|&(limit, per_block)| limit > 0 && per_block > 0)
        .map(|(limit, per_block)| u64::from(limit / per_block))
        .min()
        .unwrap_or(u64::MAX);
        per_multiprocessor.saturating_mul(u64::from(self.multiprocessor_count))
    }

    fn probe(ordinal: usize, dev: sys::CUdevice) -> Result<Self, DriverError> {
        use sys::CUdevice_attribute as A;
        // SAFETY: `dev` came from `cuDeviceGet`; attribute queries need no context.
        let attr =
            |a: A| unsafe { result::device::get_attribute(dev, a) }.check("cuDeviceGetAttribute");
        // Attributes that are informational only: a driver that cannot report one yields 0.
        let soft = |a: A| attr(a).map_or(0, |v| u32::try_from(v).unwrap_or(0));
        let hard = |a: A| attr(a).map(|v| u32::try_from(v).unwrap_or(0));
        let mut driver_version = 0;
        // SAFETY: the out pointer is a valid, writable i32.
        unsafe { sys::cuDriverGetVersion(&mut driver_version) }.check("cuDriverGetVersion")?;
        Ok(Self {
            ordinal,
            name: result::device::get_name(dev).check("cuDeviceGetName")?,
            compute_capability: (
                hard(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
                hard(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
            ),
            multiprocessor_count: hard(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            warp_size: hard(A::CU_DEVICE_ATTRIBUTE_WARP_SIZE)?,
            max_threads_per_block: hard(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            max_block_dim: [
                hard(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
                hard(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
                hard(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
            ],
            max_grid_dim: [
                hard(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
                hard(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
                hard(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
            ],
            max_shared_memory_per_block: hard(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?,
            max_shared_memory_per_block_optin: soft(
                A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            ),
            l2_cache_bytes: soft(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
            // SAFETY: `dev` came from `cuDeviceGet`.
            total_memory_bytes: unsafe { result::device::total_mem(dev) }
                .check("cuDeviceTotalMem_v2")? as u64,
            driver_version,
            cooperative_launch: soft(A::CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH) != 0,
            memory_clock_khz: soft(A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE),
            memory_bus_width_bits: soft(A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH),
            max_threads_per_multiprocessor: soft(
                A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
            ),
            max_blocks_per_multiprocessor: soft(
                A::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR,
            ),
            max_shared_memory_per_multiprocessor: soft(
                A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
            ),
        })
    }
}

/// One CUDA device and a retained reference to its primary context. `Send + Sync`.
///
/// Every resource type holds an `Arc<Device>`, so the context outlives them all.
#[derive(Debug)]
pub struct Device {
    dev: sys::CUdevice,
    /// The retained primary context.
    ctx: AtomicPtr<sys::CUctx_st>,
    injected: Injected,
    info: DeviceInfo,
}

impl Device {
    /// Opens device `ordinal`: `cuInit`, `cuDeviceGet`, probes [`DeviceInfo`] and retains the
    /// primary context.
    pub fn open(ordinal: usize) -> Result<Arc<Device>, DriverError> {
        init()?;
        let count = super::device_count()?;
        if ordinal >= count {
            return Err(DriverError::described(
                "cuDeviceGet",
                sys::CUresult::CUDA_ERROR_INVALID_DEVICE,
                format!(
                    "CUDA device ordinal {ordinal} requested but only {count} device(s) are visible"
                ),
            ));
        }
        let raw_ordinal = i32::try_from(ordinal).unwrap_or(i32::MAX);
        let dev = result::device::get(raw_ordinal).check("cuDeviceGet")?;
        let info = DeviceInfo::probe(ordinal, dev)?;
        // SAFETY: `dev` came from `cuDeviceGet`; the retain is released in `Drop`.
        let ctx = unsafe { result::primary_ctx::retain(dev) }.check("cuDevicePrimaryCtxRetain")?;
        let device = Arc::new(Device {
            dev,
            ctx: AtomicPtr::new(ctx),
            injected: Injected::default(),
            info,
        });
        device.bind()?;
        Ok(device)
    }

    /// The properties probed at open time.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// Makes the primary context current on the calling thread. Costs one thread-local
    /// compare when this thread last bound the same context through this module.
    ///
    /// The cache assumes no other code switches this thread's current context behind our
    /// back; code that does must call [`Device::bind`] again after it (it is cheap anyway).
    #[inline]
    pub fn bind(&self) -> Result<(), DriverError> {
        let ctx = self.ctx.load(Ordering::Acquire);
        let key = (ctx as usize, BIND_EPOCH.load(Ordering::Acquire));
        // `try_with`: during thread teardown the cache may be gone; then just bind.
        if BOUND.try_with(Cell::get).ok() == Some(key) {
            return Ok(());
        }
        // SAFETY: `ctx` is our retained primary context, alive while `self` is.
        unsafe { result::ctx::set_current(ctx) }.check("cuCtxSetCurrent")?;
        let _ = BOUND.try_with(|bound| bound.set(key));
        Ok(())
    }

    /// Forgets which context this thread last made current, so that the next
    /// [`Device::bind`] on it makes its context current again. For code that may switch
    /// the thread's current context behind this module's back (NCCL does).
    pub(crate) fn forget_bound_context() {
        let _ = BOUND.try_with(|bound| bound.set((0, u64::MAX)));
    }

    /// Waits for all work in the context (`cuCtxSynchronize`).
    pub fn synchronize(&self) -> Result<(), DriverError> {
        self.run("cuCtxSynchronize", result::ctx::synchronize)
    }

    /// `(free, total)` device memory in bytes (`cuMemGetInfo`).
    pub fn memory_info(&self) -> Result<(u64, u64), DriverError> {
        let (free, total) = self.run("cuMemGetInfo_v2", result::mem_get_info)?;
        Ok((free as u64, total as u64))
    }

    /// Lets kernels of this device read and write `peer`'s `cuMemAlloc` memory through its
    /// own addresses (`cuCtxEnablePeerAccess`). `Ok(false)` when the hardware cannot
    /// (`cuDeviceCanAccessPeer`); enabling it twice is not an error.
    pub fn enable_peer_access(&self, peer: &Device) -> Result<bool, DriverError> {
        let mut can = 0i32;
        // SAFETY: `can` is a valid out pointer; both device handles are valid.
        self.run("cuDeviceCanAccessPeer", || unsafe {
            sys::cuDeviceCanAccessPeer(&mut can, self.dev, peer.dev)
        })?;
        if can == 0 {
            return Ok(false);
        }
        self.enter("cuCtxEnablePeerAccess")?;
        // SAFETY: this device's context is current and `peer.ctx` is a live retained
        // primary context.
        let status = unsafe { sys::cuCtxEnablePeerAccess(peer.ctx.load(Ordering::Acquire), 0) };
        match status {
            sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => Ok(true),
            status => status.check("cuCtxEnablePeerAccess").map(|()| true),
        }
    }

    /// Whether streams of this device can write and wait for 64-bit values in device
    /// memory ([`Stream::write_value64`](super::Stream::write_value64),
    /// [`Stream::wait_value64_geq`](super::Stream::wait_value64_geq),
    /// [`Stream::batch_mem_ops`](super::Stream::batch_mem_ops)): libcuda exports the v2
    /// entry points (`cuStreamWriteValue64_v2`, `cuStreamWaitValue64_v2`,
    /// `cuStreamBatchMemOp_v2`) and the device
    /// reports `CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS` (attribute 122, CUDA 12's
    /// attribute of the v2 calls; the `_V1` attributes 92 and 93 describe the deprecated v1
    /// calls, which are not used). False when the driver does not know the attribute.
    pub fn stream_mem_ops_64(&self) -> bool {
        let calls = [
            "cuStreamWriteValue64_v2",
            "cuStreamWaitValue64_v2",
            "cuStreamBatchMemOp_v2",
        ];
        let exported = calls.into_iter().all(super::symbol_present);
        let attribute = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS;
        // SAFETY: `dev` came from `cuDeviceGet`; attribute queries need no context.
        exported && unsafe { result::device::get_attribute(self.dev, attribute) } == Ok(1)
    }

    /// The raw `CUdevice` handle, for FFI inside the driver layer.
    pub(crate) fn raw(&self) -> sys::CUdevice {
        self.dev
    }

    /// Makes the context current before driver call `call`; fails it instead when a test
    /// armed [`Device::fail_call`] for it (one relaxed load otherwise).
    #[inline]
    pub(crate) fn enter(&self, call: &'static str) -> Result<(), DriverError> {
        if self.injected.armed.load(Ordering::Relaxed) {
            self.injected.hit(call)?;
        }
        self.bind()
    }

    /// Makes driver call `call` (through `f`) after [`Device::enter`], naming it in the error.
    #[inline]
    pub(crate) fn run<T, R: Check<T>>(
        &self,
        call: &'static str,
        f: impl FnOnce() -> R,
    ) -> Result<T, DriverError> {
        self.enter(call)?;
        f().check(call)
    }

    /// Test hook: fails the `nth` (from 1) later driver call of `kind` on this device with
    /// a non-sticky error, once. Replaces an earlier plan.
    #[doc(hidden)]
    pub fn fail_call(&self, kind: FailPoint, nth: u32) {
        let mut plan = self.injected.plan.lock().unwrap_or_else(|p| p.into_inner());
        *plan = (nth > 0).then_some((kind, nth));
        self.injected.armed.store(nth > 0, Ordering::Relaxed);
    }

    /// Test hook: disarms [`Device::fail_call`]; true when its failure was not injected yet.
    #[doc(hidden)]
    pub fn disarm(&self) -> bool {
        let mut plan = self.injected.plan.lock().unwrap_or_else(|p| p.into_inner());
        self.injected.armed.store(false, Ordering::Relaxed);
        plan.take().is_some()
    }
}

/// The kinds of driver call [`Device::fail_call`] can fail (test hook).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailPoint {
    /// Device or pinned memory allocation (`cuMemAlloc*`, `cuMemHostRegister`).
    Alloc,
    /// Copies and memsets (`cuMemcpy*`, `cuMemset*`).
    Copy,
    /// Kernel and graph launches.
    Launch,
    /// Host waits (`cuStreamSynchronize`, `cuEventSynchronize`).
    Wait,
}

impl FailPoint {
    fn of(call: &str) -> Option<Self> {
        let kinds = [
            ("cuMemAlloc", Self::Alloc),
            ("cuMemHostRegister", Self::Alloc),
            ("cuMemcpy", Self::Copy),
            ("cuMemset", Self::Copy),
            ("cuLaunch", Self::Launch),
            ("cuGraphLaunch", Self::Launch),
            ("cuStreamSynchronize", Self::Wait),
            ("cuEventSynchronize", Self::Wait),
        ];
        kinds
            .iter()
            .find(|(prefix, _)| call.starts_with(prefix))
            .map(|(_, kind)| *kind)
    }
}

/// The armed plan of [`Device::fail_call`].
#[derive(Debug, Default)]
struct Injected {
    armed: AtomicBool,
    plan: Mutex<Option<(FailPoint, u32)>>,
}

impl Injected {
    #[cold]
    fn hit(&self, call: &'static str) -> Result<(), DriverError> {
        let Some(kind) = FailPoint::of(call) else {
            return Ok(());
        };
        let mut plan = self.plan.lock().unwrap_or_else(|p| p.into_inner());
        match plan.as_mut() {
            Some((armed, nth)) if *armed == kind => *nth -= 1,
            _ => return Ok(()),
        }
        if plan.is_some_and(|(_, nth)| nth == 0) {
            *plan = None;
            self.armed.store(false, Ordering::Relaxed);
            let code = match kind {
                FailPoint::Alloc => sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY,
                FailPoint::Launch => sys::CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
                FailPoint::Copy | FailPoint::Wait => sys::CUresult::CUDA_ERROR_INVALID_VALUE,
            };
            return Err(DriverError::from_code(call, code as u32)
                .with_description("failure injected by a test (Device::fail_call)"));
        }
        Ok(())
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        BIND_EPOCH.fetch_add(1, Ordering::AcqRel);
        // SAFETY: we hold one retain on this device's primary context; every resource
        // holds an `Arc<Device>`, so none is left using it.
        if let Err(e) = unsafe { result::primary_ctx::release(self.dev) } {
            tracing::warn!(error = ?e, ordinal = self.info.ordinal, "cuDevicePrimaryCtxRelease failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::DeviceInfo;

    /// An H200's limits: 132 multiprocessors of 2048 threads, 32 blocks and 228 KiB of
    /// shared memory each.
    fn h200() -> DeviceInfo {
        DeviceInfo {
            ordinal: 0,
            name: String::new(),
            compute_capability: (9, 0),
            multiprocessor_count: 132,
            warp_size: 32,
            max_threads_per_block: 1024,
            max_block_dim: [1024, 1024, 64],
            max_grid_dim: [u32::MAX >> 1, 65535, 65535],
            max_shared_memory_per_block: 48 << 10,
            max_shared_memory_per_block_optin: 227 << 10,
            l2_cache_bytes: 0,
            total_memory_bytes: 0,
            driver_version: 13000,
            cooperative_launch: true,
            memory_clock_khz: 0,
            memory_bus_width_bits: 0,
            max_threads_per_multiprocessor: 2048,
            max_blocks_per_multiprocessor: 32,
            max_shared_memory_per_multiprocessor: 228 << 10,
        }
    }

    #[test]
    fn the_residency_bound_is_the_tightest_reported_limit() {
        let info = h200();
        // Threads bound 1024-invocation blocks, the block count 64-invocation ones, shared
        // memory blocks that take 100 KiB of it.
        assert_eq!(info.resident_blocks_bound(1024, 0), 2 * 132);
        assert_eq!(info.resident_blocks_bound(64, 0), 32 * 132);
        assert_eq!(info.resident_blocks_bound(256, 100 << 10), 2 * 132);
        // A limit the driver did not report bounds nothing.
        let unreported = DeviceInfo {
            max_threads_per_multiprocessor: 0,
            max_blocks_per_multiprocessor: 0,
            max_shared_memory_per_multiprocessor: 0,
            ..h200()
        };
        assert_eq!(unreported.resident_blocks_bound(1024, 4096), u64::MAX);
    }
}
