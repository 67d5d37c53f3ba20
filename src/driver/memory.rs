//! Device memory ([`DeviceAlloc`]) and page-locked host memory ([`PinnedHostBuffer`]).

use super::{Check, Device, DriverError};
use cudarc::driver::{result, sys};
use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::Arc;

/// A `cuMemAlloc` device allocation, freed on drop. `Send + Sync`.
#[derive(Debug)]
pub struct DeviceAlloc {
    device: Arc<Device>,
    ptr: sys::CUdeviceptr,
    len: usize,
    generation: u64,
}

impl DeviceAlloc {
    /// Allocates `bytes` of uninitialised device memory. Zero bytes make no driver call and
    /// yield address 0.
    pub fn new(device: &Arc<Device>, bytes: usize) -> Result<DeviceAlloc, DriverError> {
        let generation = device.generation();
        let ptr = if bytes == 0 {
            0
        } else {
            device.bind_live(generation, "cuMemAlloc_v2")?;
            // SAFETY: the context is current; device memory is only touched through raw
            // addresses by the caller, never read as Rust values.
            unsafe { result::malloc_sync(bytes) }.check("cuMemAlloc_v2")?
        };
        Ok(DeviceAlloc {
            device: Arc::clone(device),
            ptr,
            len: bytes,
            generation,
        })
    }

    /// The device address (0 for an empty allocation).
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-byte allocation.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device this memory lives on.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }
}

impl Drop for DeviceAlloc {
    fn drop(&mut self) {
        if self.ptr == 0 {
            return;
        }
        // A reset (generation change) already freed the memory.
        if let Err(e) = self.device.bind_live(self.generation, "cuMemFree_v2") {
            tracing::debug!(%e, "device allocation not freed");
            return;
        }
        // SAFETY: `ptr` came from `cuMemAlloc` in this (still live) context and is freed once.
        // cuMemFree waits for outstanding work that may use it.
        if let Err(e) = unsafe { result::free_sync(self.ptr) }.check("cuMemFree_v2") {
            tracing::warn!(%e, bytes = self.len, "freeing device memory failed");
        }
    }
}

/// Page-locked host memory for truly asynchronous copies. `Send + Sync`.
///
/// The memory is allocated page-aligned by Rust, zero-filled, and registered with the driver
/// (`cuMemHostRegister`, `PORTABLE`). Unlike `cuMemHostAlloc` memory, it remains valid host
/// memory even if the context is reset by [`Device::reset_after_fault`] (it is then merely
/// no longer page-locked), so the safe slice accessors can never dangle.
#[derive(Debug)]
pub struct PinnedHostBuffer {
    device: Arc<Device>,
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer uniquely owns its heap memory (like `Vec<u8>`); the driver handle
// (`Arc<Device>`) is itself `Send + Sync`. Shared access only hands out `&[u8]`.
unsafe impl Send for PinnedHostBuffer {}
// SAFETY: see `Send`; `&PinnedHostBuffer` allows only reads.
unsafe impl Sync for PinnedHostBuffer {}

const PAGE: usize = 4096;

impl PinnedHostBuffer {
    /// Allocates and pins `bytes` of zeroed host memory. Zero bytes make no driver call.
    pub fn new(device: &Arc<Device>, bytes: usize) -> Result<Self, DriverError> {
        let mut buffer = PinnedHostBuffer {
            device: Arc::clone(device),
            ptr: NonNull::dangling(),
            len: 0,
        };
        if bytes == 0 {
            return Ok(buffer);
        }
        let layout = Self::layout(bytes)?;
        // SAFETY: `layout` has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            return Err(host_oom(bytes));
        };
        buffer.ptr = ptr;
        buffer.len = bytes;
        // From here on, `Drop` frees the memory if binding or registration fails.
        let generation = device.generation();
        device.bind_live(generation, "cuMemHostRegister_v2")?;
        // SAFETY: `ptr..ptr+bytes` is a live allocation owned by `buffer`, unregistered in
        // `Drop` before it is deallocated.
        unsafe {
            sys::cuMemHostRegister_v2(ptr.as_ptr().cast(), bytes, sys::CU_MEMHOSTREGISTER_PORTABLE)
        }
        .check("cuMemHostRegister_v2")?;
        Ok(buffer)
    }

    fn layout(bytes: usize) -> Result<Layout, DriverError> {
        Layout::from_size_align(bytes, PAGE).map_err(|_| host_oom(bytes))
    }

    fn dealloc(ptr: NonNull<u8>, bytes: usize) {
        if let Ok(layout) = Self::layout(bytes) {
            // SAFETY: `ptr` was allocated by `alloc_zeroed` with this very layout.
            unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) };
        }
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-byte buffer.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes. Call only when no asynchronous copy into the buffer is in flight.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is valid (or dangling with `len == 0`) and initialised for `len` bytes.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, mutably. Call only when no asynchronous copy from or into it is in flight.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as `as_slice`, and `&mut self` guarantees unique access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Raw pointer for [`Stream::copy_to_device_async_raw`](super::Stream::copy_to_device_async_raw).
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// Raw pointer for [`Stream::copy_to_host_async`](super::Stream::copy_to_host_async).
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for PinnedHostBuffer {
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        // Unregister even after a reset: it is a lookup by address, harmless if the reset
        // already dropped the registration (or `new` failed to register).
        match self.device.bind() {
            // SAFETY: the range was registered by `new` and is still allocated.
            Ok(()) => match unsafe { sys::cuMemHostUnregister(self.ptr.as_ptr().cast()) }
                .check("cuMemHostUnregister")
            {
                Ok(()) => {}
                Err(e) => tracing::debug!(%e, "unregistering pinned host memory failed"),
            },
            Err(e) => tracing::warn!(%e, "pinned host memory could not be unregistered"),
        }
        Self::dealloc(self.ptr, self.len);
    }
}

fn host_oom(bytes: usize) -> DriverError {
    DriverError::from_code(
        "PinnedHostBuffer::new",
        sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY as u32,
    )
    .with_description(format!(
        "cannot allocate {bytes} bytes of host memory to pin"
    ))
}

/// Device memory from the device's stream-ordered pool (`cuMemAllocAsync`).
///
/// Return it with [`StreamOrderedAlloc::free_on`] (`cuMemFreeAsync`, ordered after the work
/// already queued on that stream, no host wait); dropping it instead frees it with
/// `cuMemFree`, which waits for outstanding work first. `Send + Sync`.
#[derive(Debug)]
pub struct StreamOrderedAlloc {
    device: Arc<Device>,
    ptr: sys::CUdeviceptr,
    len: usize,
    generation: u64,
}

impl StreamOrderedAlloc {
    /// Allocates `bytes` (at least 1) ordered on `stream`: the memory may be used by work
    /// queued on `stream` after this call.
    pub fn new(stream: &super::Stream, bytes: usize) -> Result<Self, DriverError> {
        let device = stream.device();
        let generation = device.generation();
        stream.enter("cuMemAllocAsync")?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: the context is current and `stream` is live; `ptr` is a valid out pointer.
        unsafe { sys::cuMemAllocAsync(&mut ptr, bytes.max(1), stream.raw()) }
            .check("cuMemAllocAsync")?;
        Ok(Self {
            device: Arc::clone(device),
            ptr,
            len: bytes,
            generation,
        })
    }

    /// Keeps up to `bytes` of freed memory in the device's default stream-ordered pool
    /// instead of returning it to the driver at every synchronisation
    /// (`CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`).
    pub fn set_release_threshold(device: &Arc<Device>, bytes: u64) -> Result<(), DriverError> {
        device.bind()?;
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: `pool` is a valid out pointer; the device handle is valid.
        unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, device.raw()) }
            .check("cuDeviceGetDefaultMemPool")?;
        let mut value: u64 = bytes;
        // SAFETY: the release threshold attribute takes a pointer to a `cuuint64_t`.
        unsafe {
            sys::cuMemPoolSetAttribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut value as *mut u64).cast(),
            )
        }
        .check("cuMemPoolSetAttribute")
    }

    /// The device address.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-byte request (which still holds a 1-byte allocation).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Frees the memory ordered after the work queued on `stream` (`cuMemFreeAsync`). If that
    /// fails, dropping `self` frees it synchronously instead.
    pub fn free_on(mut self, stream: &super::Stream) -> Result<(), DriverError> {
        self.device.bind_live(self.generation, "cuMemFreeAsync")?;
        stream.enter("cuMemFreeAsync")?;
        // SAFETY: `ptr` came from `cuMemAllocAsync` in this live context; on success it is
        // cleared so that `Drop` does not free it again.
        unsafe { sys::cuMemFreeAsync(self.ptr, stream.raw()) }.check("cuMemFreeAsync")?;
        self.ptr = 0;
        Ok(())
    }
}

impl Drop for StreamOrderedAlloc {
    fn drop(&mut self) {
        if self.ptr == 0 {
            return;
        }
        if let Err(e) = self.device.bind_live(self.generation, "cuMemFree_v2") {
            tracing::debug!(%e, "stream-ordered allocation not freed");
            return;
        }
        // SAFETY: `ptr` came from `cuMemAllocAsync` in this live context and is freed once;
        // cuMemFree accepts stream-ordered memory and waits for outstanding work.
        if let Err(e) = unsafe { result::free_sync(self.ptr) }.check("cuMemFree_v2") {
            tracing::warn!(%e, bytes = self.len, "freeing stream-ordered device memory failed");
        }
    }
}
