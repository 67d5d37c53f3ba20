//! [`Device`]: one CUDA device with its retained primary context, and [`DeviceInfo`].

use super::{init, Check, DriverError};
use cudarc::driver::{result, sys};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Bumped whenever a context we bound may have been destroyed or replaced (a device reset or
/// a dropped [`Device`]); invalidates every thread's [`BOUND`] cache.
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
    /// 32-bit registers per block.
    pub max_registers_per_block: u32,
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
    /// Host memory can be mapped into the device address space.
    pub can_map_host_memory: bool,
    /// Host and device share one virtual address space.
    pub unified_addressing: bool,
}

impl DeviceInfo {
    /// Theoretical peak memory bandwidth in GB/s (`2 * clock * bus / 8`, double data rate),
    /// 0 when the clock or bus width is unknown.
    pub fn memory_bandwidth_gbps(&self) -> u64 {
        2 * u64::from(self.memory_clock_khz) * 1000 * u64::from(self.memory_bus_width_bits)
            / 8
            / 1_000_000_000
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
            max_registers_per_block: hard(A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK)?,
            l2_cache_bytes: soft(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
            // SAFETY: `dev` came from `cuDeviceGet`.
            total_memory_bytes: unsafe { result::device::total_mem(dev) }
                .check("cuDeviceTotalMem_v2")? as u64,
            driver_version,
            cooperative_launch: soft(A::CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH) != 0,
            memory_clock_khz: soft(A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE),
            memory_bus_width_bits: soft(A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH),
            can_map_host_memory: soft(A::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY) != 0,
            unified_addressing: soft(A::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING) != 0,
        })
    }
}

/// One CUDA device and a retained reference to its primary context. `Send + Sync`.
///
/// Every resource type holds an `Arc<Device>`, so the context outlives them all.
#[derive(Debug)]
pub struct Device {
    dev: sys::CUdevice,
    /// The primary context; replaced by [`Device::reset_after_fault`].
    ctx: AtomicPtr<sys::CUctx_st>,
    /// Whether we hold a primary-context retain that `Drop` must release.
    retained: AtomicBool,
    /// Bumped by every reset; resources created under an older generation are dead.
    generation: AtomicU64,
    /// Serialises resets.
    reset_lock: Mutex<()>,
    info: DeviceInfo,
}

impl Device {
    /// Opens device `ordinal`: `cuInit`, `cuDeviceGet`, probes [`DeviceInfo`] and retains the
    /// primary context.
    pub fn open(ordinal: usize) -> Result<Arc<Device>, DriverError> {
        init()?;
        let count = super::device_count()?;
        if ordinal >= count {
            return Err(DriverError::from_code(
                "cuDeviceGet",
                sys::CUresult::CUDA_ERROR_INVALID_DEVICE as u32,
            )
            .with_description(format!(
                "CUDA device ordinal {ordinal} requested but only {count} device(s) are visible"
            )));
        }
        let raw_ordinal = i32::try_from(ordinal).unwrap_or(i32::MAX);
        let dev = result::device::get(raw_ordinal).check("cuDeviceGet")?;
        let info = DeviceInfo::probe(ordinal, dev)?;
        // SAFETY: `dev` came from `cuDeviceGet`; the retain is released in `Drop`.
        let ctx = unsafe { result::primary_ctx::retain(dev) }.check("cuDevicePrimaryCtxRetain")?;
        let device = Arc::new(Device {
            dev,
            ctx: AtomicPtr::new(ctx),
            retained: AtomicBool::new(true),
            generation: AtomicU64::new(0),
            reset_lock: Mutex::new(()),
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

    /// Waits for all work in the context (`cuCtxSynchronize`).
    pub fn synchronize(&self) -> Result<(), DriverError> {
        self.bind()?;
        result::ctx::synchronize().check("cuCtxSynchronize")
    }

    /// `(free, total)` device memory in bytes (`cuMemGetInfo`).
    pub fn memory_info(&self) -> Result<(u64, u64), DriverError> {
        self.bind()?;
        let (free, total) = result::mem_get_info().check("cuMemGetInfo_v2")?;
        Ok((free as u64, total as u64))
    }

    /// Tries to recover from a sticky error ([`DriverError::is_sticky`]): releases our
    /// retain, resets the primary context (`cuDevicePrimaryCtxReset`), retains it again and
    /// binds it.
    ///
    /// **Everything created on this device before the call is destroyed**, whether or not
    /// the recovery succeeds: device allocations, streams, events, modules and functions.
    /// Their operations then fail with `CUDA_ERROR_CONTEXT_IS_DESTROYED` and dropping them
    /// makes no driver call; pinned host buffers stay readable but are no longer page-locked.
    /// Other `Device` handles on the same ordinal lose their resources as well. Do not use
    /// this device from other threads while the reset runs.
    ///
    /// Most drivers keep a kernel fault for the whole process (observed with driver 13.0 on
    /// an H200: the re-retain fails with `CUDA_ERROR_ILLEGAL_ADDRESS`). Then this returns that
    /// (still sticky) error, the device stays unusable, and the process must be restarted.
    pub fn reset_after_fault(&self) -> Result<(), DriverError> {
        let _guard = self.reset_lock.lock().unwrap_or_else(|p| p.into_inner());
        self.generation.fetch_add(1, Ordering::AcqRel);
        BIND_EPOCH.fetch_add(1, Ordering::AcqRel);
        if self.retained.swap(false, Ordering::AcqRel) {
            // SAFETY: we hold one retain on `self.dev`'s primary context.
            if let Err(e) = unsafe { result::primary_ctx::release(self.dev) } {
                tracing::warn!(error = ?e, "cuDevicePrimaryCtxRelease before reset failed");
            }
        }
        // SAFETY: `self.dev` came from `cuDeviceGet`; resetting destroys all context state,
        // which the generation bump above makes every resource of ours aware of.
        unsafe { sys::cuDevicePrimaryCtxReset_v2(self.dev) }.check("cuDevicePrimaryCtxReset")?;
        // SAFETY: as above; the new retain is released in `Drop` (tracked by `retained`).
        let ctx = unsafe { result::primary_ctx::retain(self.dev) }.map_err(|e| {
            DriverError::from_cuda("cuDevicePrimaryCtxRetain", e).with_description(
                "the driver keeps the kernel fault for the whole process after the context \
                 reset, so this device cannot be recovered in-process: restart the process",
            )
        })?;
        self.retained.store(true, Ordering::Release);
        self.ctx.store(ctx, Ordering::Release);
        BIND_EPOCH.fetch_add(1, Ordering::AcqRel);
        self.bind()
    }

    /// The raw `CUdevice` handle, for FFI inside the driver layer.
    pub(crate) fn raw(&self) -> sys::CUdevice {
        self.dev
    }

    /// Current reset generation; resources record it at creation.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Binds the context and checks that a resource of generation `generation` is still alive.
    #[inline]
    pub(crate) fn bind_live(&self, generation: u64, call: &'static str) -> Result<(), DriverError> {
        if generation != self.generation() {
            return Err(DriverError::stale(call));
        }
        self.bind()
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        BIND_EPOCH.fetch_add(1, Ordering::AcqRel);
        if self.retained.swap(false, Ordering::AcqRel) {
            // SAFETY: we hold one retain on this device's primary context; every resource
            // holds an `Arc<Device>`, so none is left using it.
            if let Err(e) = unsafe { result::primary_ctx::release(self.dev) } {
                tracing::warn!(error = ?e, ordinal = self.info.ordinal, "cuDevicePrimaryCtxRelease failed");
            }
        }
    }
}
