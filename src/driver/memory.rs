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
}

impl DeviceAlloc {
    /// Allocates `bytes` of uninitialised device memory. Zero bytes make no driver call and
    /// yield address 0.
    pub fn new(device: &Arc<Device>, bytes: usize) -> Result<DeviceAlloc, DriverError> {
        let ptr = if bytes == 0 {
            0
        } else {
            // SAFETY: the context is current; device memory is only touched through raw
            // addresses by the caller, never read as Rust values.
            device.run("cuMemAlloc_v2", || unsafe { result::malloc_sync(bytes) })?
        };
        Ok(DeviceAlloc {
            device: Arc::clone(device),
            ptr,
            len: bytes,
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
}

/// Frees device memory from `cuMemAlloc` (or `cuMemAllocAsync`); never panics, errors are
/// logged.
fn free_device_memory(device: &Device, ptr: u64, len: usize) {
    if ptr == 0 {
        return;
    }
    if let Err(e) = device.enter("cuMemFree_v2") {
        tracing::debug!(%e, "device memory not freed");
        return;
    }
    // SAFETY: `ptr` came from `cuMemAlloc`/`cuMemAllocAsync` in this context and its owner
    // frees it exactly once; cuMemFree waits for outstanding work using it.
    if let Err(e) = unsafe { result::free_sync(ptr) }.check("cuMemFree_v2") {
        tracing::warn!(%e, bytes = len, "freeing device memory failed");
    }
}

impl Drop for DeviceAlloc {
    fn drop(&mut self) {
        free_device_memory(&self.device, self.ptr, self.len);
    }
}

/// Page-locked host memory for truly asynchronous copies. `Send + Sync`.
///
/// The memory is allocated page-aligned by Rust, zero-filled, and registered with the driver
/// (`cuMemHostRegister`, `PORTABLE`). Unlike `cuMemHostAlloc` memory, it is Rust's own
/// allocation and stays valid whatever happens to the context, so the safe slice accessors
/// can never dangle.
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
        // SAFETY: `ptr..ptr+bytes` is a live allocation owned by `buffer`, unregistered in
        // `Drop` before it is deallocated.
        device.run("cuMemHostRegister_v2", || unsafe {
            sys::cuMemHostRegister_v2(ptr.as_ptr().cast(), bytes, sys::CU_MEMHOSTREGISTER_PORTABLE)
        })?;
        Ok(buffer)
    }

    fn layout(bytes: usize) -> Result<Layout, DriverError> {
        Layout::from_size_align(bytes, PAGE).map_err(|_| host_oom(bytes))
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
        // Unregister by address: harmless if the registration is already gone (a lost
        // context, or `new` failed to register).
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
        if let Ok(layout) = Self::layout(self.len) {
            // SAFETY: `ptr` was allocated by `alloc_zeroed` with this very layout.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

fn host_oom(bytes: usize) -> DriverError {
    DriverError::described(
        "PinnedHostBuffer::new",
        sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY,
        format!("cannot allocate {bytes} bytes of host memory to pin"),
    )
}

/// Device memory from the device's stream-ordered pool (`cuMemAllocAsync`), freed on drop
/// with `cuMemFreeAsync` on the stream it was allocated on (ordered after the work queued
/// there, no host wait; `cuMemFree`, which waits, if that fails). `Send + Sync`.
#[derive(Debug)]
pub(crate) struct StreamOrderedAlloc {
    stream: Arc<super::Stream>,
    ptr: sys::CUdeviceptr,
    len: usize,
}

impl StreamOrderedAlloc {
    /// Allocates `bytes` (at least 1) ordered on `stream`: the memory may be used by work
    /// queued on `stream` after this call.
    pub(crate) fn new(stream: &Arc<super::Stream>, bytes: usize) -> Result<Self, DriverError> {
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: the context is current and `stream` is live; `ptr` is a valid out pointer.
        stream.device().run("cuMemAllocAsync", || unsafe {
            sys::cuMemAllocAsync(&mut ptr, bytes.max(1), stream.raw())
        })?;
        Ok(Self {
            stream: Arc::clone(stream),
            ptr,
            len: bytes,
        })
    }

    /// Keeps up to `bytes` of freed memory in the device's default stream-ordered pool
    /// instead of returning it to the driver at every synchronisation
    /// (`CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`).
    pub(crate) fn set_release_threshold(
        device: &Arc<Device>,
        bytes: u64,
    ) -> Result<(), DriverError> {
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: `pool` is a valid out pointer; the device handle is valid.
        device.run("cuDeviceGetDefaultMemPool", || unsafe {
            sys::cuDeviceGetDefaultMemPool(&mut pool, device.raw())
        })?;
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
    pub(crate) fn ptr(&self) -> u64 {
        self.ptr
    }
}

impl Drop for StreamOrderedAlloc {
    fn drop(&mut self) {
        let device = self.stream.device();
        // SAFETY: `ptr` came from `cuMemAllocAsync` in this context and is freed once: here,
        // or by `free_device_memory` below when the ordered free fails.
        let freed = device.run("cuMemFreeAsync", || unsafe {
            sys::cuMemFreeAsync(self.ptr, self.stream.raw())
        });
        if let Err(error) = freed {
            tracing::warn!(%error, "returning stream-ordered memory failed");
            free_device_memory(device, self.ptr, self.len);
        }
    }
}

/// A pinned staging buffer with an event that tracks the copies in flight from or into it,
/// so that safe code can overlap host `memcpy`s with DMA. `Send + Sync`.
///
/// A *fill* is a run of copies into disjoint, increasing regions of the buffer on one
/// stream. Every enqueued copy is followed by an event record, so the event always covers
/// all copies of the fill; the host only touches a region after the event completed
/// ([`StagingBuffer::read`], [`StagingBuffer::restart`]) or before any copy of it was
/// enqueued. `Drop` waits for copies still in flight.
#[derive(Debug)]
pub struct StagingBuffer {
    buffer: PinnedHostBuffer,
    event: super::Event,
    /// Bytes of the current fill.
    used: usize,
    /// Copies were enqueued and the event has not been waited for since.
    in_flight: bool,
    /// The stream of the current fill (raw handle, compared only).
    stream: usize,
}

impl StagingBuffer {
    /// Allocates and pins `bytes` of host memory.
    pub fn new(device: &Arc<Device>, bytes: usize) -> Result<Self, DriverError> {
        Ok(Self {
            buffer: PinnedHostBuffer::new(device, bytes)?,
            event: super::Event::new(device, false)?,
            used: 0,
            in_flight: false,
            stream: 0,
        })
    }

    /// Size in bytes.
    pub fn capacity(&self) -> usize {
        self.buffer.len()
    }

    /// Bytes still free in the current fill.
    pub fn remaining(&self) -> usize {
        self.buffer.len() - self.used
    }

    /// Waits for the copies in flight and starts a new, empty fill.
    pub fn restart(&mut self) -> Result<(), DriverError> {
        self.wait()?;
        self.used = 0;
        Ok(())
    }

    fn wait(&mut self) -> Result<(), DriverError> {
        if self.in_flight {
            self.event.synchronize()?;
            self.in_flight = false;
        }
        Ok(())
    }

    /// Reserves `len` bytes of the fill for a copy on `stream`; returns their offset.
    fn reserve(&mut self, stream: &super::Stream, len: usize) -> Result<usize, DriverError> {
        let raw = stream.raw() as usize;
        if self.in_flight && self.stream != raw {
            // A fill never spans streams: the event would only cover the last one.
            self.restart()?;
        }
        if len > self.remaining() {
            return Err(DriverError::described(
                "StagingBuffer",
                sys::CUresult::CUDA_ERROR_INVALID_VALUE,
                format!(
                    "a {len}-byte copy does not fit the {} bytes left in the staging buffer",
                    self.remaining()
                ),
            ));
        }
        self.stream = raw;
        let offset = self.used;
        self.used += len;
        Ok(offset)
    }

    /// Copies `src` into the buffer and enqueues its transfer to device address `dst` on
    /// `stream`. `src` may be reused as soon as this returns.
    pub fn upload(
        &mut self,
        stream: &super::Stream,
        src: &[u8],
        dst: u64,
    ) -> Result<(), DriverError> {
        if src.is_empty() {
            return Ok(());
        }
        let offset = self.reserve(stream, src.len())?;
        // The region [offset, offset + len) belongs to no earlier copy of this fill, and
        // copies of earlier fills were waited for by `restart`.
        self.buffer.as_mut_slice()[offset..offset + src.len()].copy_from_slice(src);
        // SAFETY: the region is inside the pinned buffer, which is neither freed nor
        // rewritten until the event recorded below completes (`restart`, `read` and `Drop`
        // wait for it; later copies of this fill use later regions).
        unsafe {
            stream.copy_to_device_async_raw(dst, self.buffer.as_ptr().add(offset), src.len())?
        };
        self.event.record(stream)?;
        self.in_flight = true;
        Ok(())
    }

    /// Enqueues a transfer of `len` bytes from device address `src` into the buffer on
    /// `stream`, behind the work already queued there; returns the offset to
    /// [`read`](Self::read) them from.
    pub fn download(
        &mut self,
        stream: &super::Stream,
        src: u64,
        len: usize,
    ) -> Result<usize, DriverError> {
        let offset = self.reserve(stream, len)?;
        if len == 0 {
            return Ok(offset);
        }
        // SAFETY: the region is inside the pinned buffer and is not read or rewritten by
        // the host until the event recorded below completes (`read`, `restart`, `Drop`).
        unsafe { stream.copy_to_host_async(self.buffer.as_mut_ptr().add(offset), len, src)? };
        self.event.record(stream)?;
        self.in_flight = true;
        Ok(offset)
    }

    /// The bytes at `offset..offset + len` of the current fill, after waiting for the
    /// copies in flight.
    pub fn read(&mut self, offset: usize, len: usize) -> Result<&[u8], DriverError> {
        self.wait()?;
        Ok(&self.buffer.as_slice()[offset..offset + len])
    }
}

impl Drop for StagingBuffer {
    fn drop(&mut self) {
        // Never unpin memory that a DMA may still read or write.
        if self.in_flight {
            if let Err(e) = self.event.settle() {
                tracing::debug!(%e, "waiting for a staging buffer failed");
            }
        }
    }
}
