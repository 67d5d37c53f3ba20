//! The floor: the CUDA driver API called directly (cudarc's `driver::result`/`sys`, no
//! safe layer, no event tracking), hand-written PTX (`super::ptx`), pinned host memory.
//!
//! Every public operation here enqueues its work and synchronises before it returns, so a
//! host slice handed to an asynchronous copy outlives the copy.

use super::ptx;
use cudarc::driver::{result, sys};
use std::ffi::{c_void, CString};
use std::time::{Duration, Instant};

pub type R<T> = Result<T, String>;

fn ck<T>(what: &str, r: Result<T, result::DriverError>) -> R<T> {
    r.map_err(|e| format!("{what}: {e:?}"))
}

fn ckr(what: &str, r: sys::CUresult) -> R<()> {
    ck(what, r.result())
}

/// Make every wait in device `ordinal`'s primary context block (sleep) instead of spin:
/// `cuDevicePrimaryCtxSetFlags(CU_CTX_SCHED_BLOCKING_SYNC)`, before anyone retains it.
pub fn set_blocking_sync(ordinal: i32) -> R<()> {
    // SAFETY: only tries to dlopen libcuda (cudarc panics on a missing library later).
    if !unsafe { sys::is_culib_present() } {
        return Err("libcuda not found".into());
    }
    ck("cuInit", result::init())?;
    let dev = ck("cuDeviceGet", result::device::get(ordinal))?;
    // SAFETY: a valid device; flag 4 is CU_CTX_SCHED_BLOCKING_SYNC.
    ckr("cuDevicePrimaryCtxSetFlags", unsafe {
        sys::cuDevicePrimaryCtxSetFlags_v2(dev, 4)
    })
}

/// Threads per block of every floor launch.
pub const BLOCK: u32 = 256;

/// One device allocation (`cuMemAlloc`), freed on drop.
pub struct DevBuf {
    pub ptr: u64,
    pub len: usize,
}

impl DevBuf {
    pub fn new(len: usize) -> R<Self> {
        // SAFETY: plain allocation in the current context (the floor binds its context
        // before every operation); the pointer is only used through this type.
        let ptr = ck("cuMemAlloc", unsafe { result::malloc_sync(len.max(1)) })?;
        Ok(Self { ptr, len })
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from cuMemAlloc and is freed exactly once; every operation
        // that used it synchronised before returning.
        let _ = unsafe { result::free_sync(self.ptr) };
    }
}

/// Page-locked host memory (`cuMemHostAlloc`), freed on drop.
pub struct Pinned {
    ptr: *mut u8,
    len: usize,
}

impl Pinned {
    pub fn new(len: usize) -> R<Self> {
        // SAFETY: allocates `len` bytes of page-locked memory; owned by this value.
        let ptr = ck("cuMemHostAlloc", unsafe {
            result::malloc_host(len.max(1), sys::CU_MEMHOSTALLOC_PORTABLE)
        })?;
        Ok(Self {
            ptr: ptr.cast(),
            len,
        })
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` points to `len` bytes we own for our whole lifetime; no device
        // copy is in flight outside a floor operation (which synchronises before returning).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as `as_slice`, and `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from cuMemHostAlloc and is freed exactly once.
        let _ = unsafe { result::free_host(self.ptr.cast()) };
    }
}

/// Page-aligned host memory registered with `cuMemHostRegister` (how vyre-cuda pins its
/// staging and small-dispatch buffers), for comparing with `cuMemHostAlloc` memory.
pub struct Registered {
    ptr: *mut u8,
    len: usize,
}

impl Registered {
    pub fn new(len: usize) -> R<Self> {
        let layout = std::alloc::Layout::from_size_align(len.max(1).next_multiple_of(4096), 4096)
            .map_err(|e| e.to_string())?;
        // SAFETY: non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err("host allocation failed".into());
        }
        // SAFETY: `ptr..ptr+size` is a live allocation owned by this value, unregistered
        // before it is freed.
        let status = unsafe {
            sys::cuMemHostRegister_v2(ptr.cast(), layout.size(), sys::CU_MEMHOSTREGISTER_PORTABLE)
        };
        if status != sys::CUresult::CUDA_SUCCESS {
            // SAFETY: allocated above with this layout.
            unsafe { std::alloc::dealloc(ptr, layout) };
            return Err(format!("cuMemHostRegister: {status:?}"));
        }
        Ok(Self { ptr, len })
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` points to at least `len` bytes we own; no copy is in flight outside
        // a floor operation (which synchronises before returning).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as `as_slice`, and `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        // SAFETY: registered and allocated in `new` with this layout, released once.
        unsafe {
            let _ = sys::cuMemHostUnregister(self.ptr.cast());
            if let Ok(layout) =
                std::alloc::Layout::from_size_align(self.len.max(1).next_multiple_of(4096), 4096)
            {
                std::alloc::dealloc(self.ptr, layout);
            }
        }
    }
}

/// What the floor learned about the device.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct DeviceFacts {
    pub name: String,
    pub compute_capability: (i32, i32),
    pub multiprocessors: i32,
    pub driver_version: i32,
    pub sm_clock_khz: i32,
    pub memory_clock_khz: i32,
    pub context_flags: u32,
}

struct Module {
    raw: sys::CUmodule,
}

/// How [`Floor::jit_time`] JIT-compiles PTX.
#[derive(Debug, Clone, Copy)]
pub enum Jit {
    /// `cuModuleLoadData` (the driver's defaults: optimisation level 4).
    Load,
    /// `cuModuleLoadDataEx` with `CU_JIT_OPTIMIZATION_LEVEL` = the level (0..=4).
    Level(u32),
    /// The linker (`cuLinkCreate`/`cuLinkAddData`/`cuLinkComplete`) at the level, then a
    /// `cuModuleLoadData` of its cubin.
    Linked(u32),
}

impl Module {
    /// JIT with `CU_JIT_OPTIMIZATION_LEVEL` = `level` (the driver's default is 4).
    fn load_at(ptx_text: &str, level: u32) -> R<Self> {
        let text = CString::new(ptx_text).map_err(|e| e.to_string())?;
        let mut options = [sys::CUjit_option::CU_JIT_OPTIMIZATION_LEVEL];
        // The option's value is the integer itself, cast to a pointer (driver ABI).
        let mut values = [level as usize as *mut c_void];
        let mut raw = std::ptr::null_mut();
        // SAFETY: `text` is NUL-terminated and outlives the call; one option with its value.
        ckr("cuModuleLoadDataEx", unsafe {
            sys::cuModuleLoadDataEx(
                &mut raw,
                text.as_ptr().cast(),
                1,
                options.as_mut_ptr(),
                values.as_mut_ptr(),
            )
        })?;
        Ok(Self { raw })
    }

    /// JIT through the linker (`cuLinkCreate`/`cuLinkAddData`/`cuLinkComplete`) at
    /// optimisation `level`, then load the resulting cubin: the path an engine takes to get
    /// a cubin it can keep in its own cache.
    fn load_linked(ptx_text: &str, level: u32) -> R<Self> {
        let text = CString::new(ptx_text).map_err(|e| e.to_string())?;
        let mut options = [sys::CUjit_option::CU_JIT_OPTIMIZATION_LEVEL];
        let mut values = [level as usize as *mut c_void];
        let mut state = std::ptr::null_mut();
        // SAFETY: one option with its value; `state` receives the linker.
        ckr("cuLinkCreate", unsafe {
            sys::cuLinkCreate_v2(1, options.as_mut_ptr(), values.as_mut_ptr(), &mut state)
        })?;
        let name = CString::new("probe.ptx").map_err(|e| e.to_string())?;
        let linked = (|| -> R<Self> {
            // SAFETY: `text` (with its NUL) and `name` outlive the call; no options.
            ckr("cuLinkAddData", unsafe {
                sys::cuLinkAddData_v2(
                    state,
                    sys::CUjitInputType::CU_JIT_INPUT_PTX,
                    text.as_ptr() as *mut c_void,
                    text.as_bytes_with_nul().len(),
                    name.as_ptr(),
                    0,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            })?;
            let mut cubin = std::ptr::null_mut();
            let mut size = 0usize;
            // SAFETY: `cubin` points into the linker's memory until `cuLinkDestroy`.
            ckr("cuLinkComplete", unsafe {
                sys::cuLinkComplete(state, &mut cubin, &mut size)
            })?;
            let mut raw = std::ptr::null_mut();
            // SAFETY: `cubin` is a complete image owned by the live linker.
            ckr("cuModuleLoadData(cubin)", unsafe {
                sys::cuModuleLoadData(&mut raw, cubin as *const c_void)
            })?;
            Ok(Self { raw })
        })();
        // SAFETY: the linker is destroyed once; the module holds its own copy of the image.
        unsafe { sys::cuLinkDestroy(state) };
        linked
    }

    fn load(ptx_text: &str) -> R<Self> {
        let text = CString::new(ptx_text).map_err(|e| e.to_string())?;
        // SAFETY: `text` is a NUL-terminated PTX image that lives across the call.
        let raw = ck("cuModuleLoadData", unsafe {
            result::module::load_data(text.as_ptr().cast())
        })?;
        Ok(Self { raw })
    }

    fn function(&self, name: &str) -> R<sys::CUfunction> {
        let name = CString::new(name).map_err(|e| e.to_string())?;
        // SAFETY: `raw` is a live module; the function handle lives as long as it.
        ck("cuModuleGetFunction", unsafe {
            result::module::get_function(self.raw, name)
        })
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: a module we loaded, unloaded once; no launch of it is in flight (every
        // floor operation synchronises before returning).
        let _ = unsafe { result::module::unload(self.raw) };
    }
}

/// An instantiated CUDA graph.
pub struct GraphExec {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        // SAFETY: both handles came from capture/instantiate and are destroyed once.
        unsafe {
            let _ = result::graph::exec_destroy(self.exec);
            let _ = result::graph::destroy(self.graph);
        }
    }
}

#[derive(Clone, Copy)]
pub enum Kernel {
    Vadd,
    Saxpy,
}

pub struct Floor {
    dev: sys::CUdevice,
    ctx: sys::CUcontext,
    streams: [sys::CUstream; 4],
    events: [sys::CUevent; 2],
    blocking_event: sys::CUevent,
    _module: Module,
    f_vadd: sys::CUfunction,
    f_saxpy: sys::CUfunction,
    f_reduce: sys::CUfunction,
    f_step: sys::CUfunction,
    pub facts: DeviceFacts,
}

impl Floor {
    /// Retain device `ordinal`'s primary context (the one both backends use too), make
    /// streams and events, JIT the main module.
    pub fn open(ordinal: i32, vadd_salt: u32, alpha: f32) -> R<Self> {
        // SAFETY: only tries to dlopen libcuda (cudarc panics on a missing library later).
        if !unsafe { sys::is_culib_present() } {
            return Err("libcuda not found".into());
        }
        ck("cuInit", result::init())?;
        let dev = ck("cuDeviceGet", result::device::get(ordinal))?;
        // SAFETY: `dev` is a valid device; the retain is released in Drop.
        let ctx = ck("cuDevicePrimaryCtxRetain", unsafe {
            result::primary_ctx::retain(dev)
        })?;
        // SAFETY: `ctx` is the context we just retained.
        ck("cuCtxSetCurrent", unsafe { result::ctx::set_current(ctx) })?;
        let attr = |a: sys::CUdevice_attribute| -> R<i32> {
            // SAFETY: `dev` is valid and `a` a defined attribute.
            ck("cuDeviceGetAttribute", unsafe {
                result::device::get_attribute(dev, a)
            })
        };
        use sys::CUdevice_attribute as A;
        let major = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let mut driver_version = 0i32;
        // SAFETY: writes one int through a valid pointer.
        ckr("cuDriverGetVersion", unsafe {
            sys::cuDriverGetVersion(&mut driver_version)
        })?;
        let mut context_flags = 0u32;
        // SAFETY: writes one uint through a valid pointer; a context is current.
        ckr("cuCtxGetFlags", unsafe {
            sys::cuCtxGetFlags(&mut context_flags)
        })?;
        let facts = DeviceFacts {
            name: ck("cuDeviceGetName", result::device::get_name(dev))?,
            compute_capability: (major, minor),
            multiprocessors: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            driver_version,
            sm_clock_khz: attr(A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)?,
            memory_clock_khz: attr(A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)?,
            context_flags,
        };
        let mut streams = [std::ptr::null_mut(); 4];
        for s in &mut streams {
            *s = ck(
                "cuStreamCreate",
                result::stream::create(result::stream::StreamKind::NonBlocking),
            )?;
        }
        let events = [
            ck(
                "cuEventCreate",
                result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT),
            )?,
            ck(
                "cuEventCreate",
                result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT),
            )?,
        ];
        let mut blocking_event = std::ptr::null_mut();
        // SAFETY: writes one event handle; flags BLOCKING_SYNC | DISABLE_TIMING.
        ckr("cuEventCreate", unsafe {
            sys::cuEventCreate(&mut blocking_event, 1 | 2)
        })?;
        let module = Module::load(&ptx::main_module(major, minor, vadd_salt, alpha))?;
        Ok(Self {
            dev,
            ctx,
            streams,
            events,
            blocking_event,
            f_vadd: module.function("floor_vadd")?,
            f_saxpy: module.function("floor_saxpy")?,
            f_reduce: module.function("floor_reduce")?,
            f_step: module.function("floor_step")?,
            _module: module,
            facts,
        })
    }

    pub fn bind(&self) -> R<()> {
        // SAFETY: `ctx` is our retained primary context, alive while `self` is.
        ck("cuCtxSetCurrent", unsafe {
            result::ctx::set_current(self.ctx)
        })
    }

    fn sync(&self, stream: usize) -> R<()> {
        // SAFETY: a stream we created.
        ck("cuStreamSynchronize", unsafe {
            result::stream::synchronize(self.streams[stream])
        })
    }

    fn sync_all(&self) -> R<()> {
        for s in 0..self.streams.len() {
            self.sync(s)?;
        }
        Ok(())
    }

    /// Enqueue a host-to-device copy. The caller synchronises before `src` goes away.
    fn h2d(&self, dst: u64, src: &[u8], stream: usize) -> R<()> {
        // SAFETY: `dst..dst+len` lies inside a live DevBuf (callers slice within it), `src`
        // outlives the copy because every floor operation synchronises before returning.
        ck("cuMemcpyHtoDAsync", unsafe {
            result::memcpy_htod_async(dst, src, self.streams[stream])
        })
    }

    /// Enqueue a device-to-host copy. The caller synchronises before reading `dst`.
    fn d2h(&self, dst: &mut [u8], src: u64, stream: usize) -> R<()> {
        // SAFETY: as `h2d`, and the caller holds `dst` mutably until it synchronises.
        ck("cuMemcpyDtoHAsync", unsafe {
            result::memcpy_dtoh_async(dst, src, self.streams[stream])
        })
    }

    fn zero(&self, dst: u64, bytes: usize, stream: usize) -> R<()> {
        // SAFETY: `dst..dst+bytes` lies inside a live DevBuf.
        ck("cuMemsetD8Async", unsafe {
            result::memset_d8_async(dst, 0, bytes, self.streams[stream])
        })
    }

    /// Launch `f` with 1-D `grid`, `BLOCK` threads. `params` must match `f`'s PTX
    /// signature: each entry points at a live value of the declared width.
    fn launch(
        &self,
        f: sys::CUfunction,
        grid: u32,
        params: &mut [*mut c_void],
        stream: usize,
    ) -> R<()> {
        // SAFETY: the callers below build `params` from the PTX signatures in `ptx.rs`
        // (u64 pointers into live DevBufs, then u32 counts); the values live across the
        // call, which copies them.
        ck("cuLaunchKernel", unsafe {
            result::launch_kernel(
                f,
                (grid.max(1), 1, 1),
                (BLOCK, 1, 1),
                0,
                self.streams[stream],
                params,
            )
        })
    }

    /// Elementwise kernel (`vadd` or `saxpy`, 4 elements per thread) over `n` elements.
    fn launch_elementwise(
        &self,
        f: sys::CUfunction,
        a: u64,
        b: u64,
        out: u64,
        n: u32,
        stream: usize,
    ) -> R<()> {
        let (mut a, mut b, mut out, mut n_) = (a, b, out, n);
        let mut params: [*mut c_void; 4] = [
            (&mut a as *mut u64).cast(),
            (&mut b as *mut u64).cast(),
            (&mut out as *mut u64).cast(),
            (&mut n_ as *mut u32).cast(),
        ];
        let threads = n.div_ceil(4);
        self.launch(f, threads.div_ceil(BLOCK), &mut params, stream)
    }

    fn function(&self, kernel: Kernel) -> sys::CUfunction {
        match kernel {
            Kernel::Vadd => self.f_vadd,
            Kernel::Saxpy => self.f_saxpy,
        }
    }

    fn launch_reduce(&self, a: u64, out: u64, n: u32, stream: usize) -> R<()> {
        let (mut a, mut out, mut n_) = (a, out, n);
        let mut params: [*mut c_void; 3] = [
            (&mut a as *mut u64).cast(),
            (&mut out as *mut u64).cast(),
            (&mut n_ as *mut u32).cast(),
        ];
        let vectors = (n / 4).max(1);
        let grid = vectors
            .div_ceil(BLOCK)
            .min(self.facts.multiprocessors.max(1) as u32 * 16);
        self.launch(self.f_reduce, grid, &mut params, stream)
    }

    fn launch_step(&self, x: u64, n: u32, stream: usize) -> R<()> {
        let (mut x, mut n_) = (x, n);
        let mut params: [*mut c_void; 2] =
            [(&mut x as *mut u64).cast(), (&mut n_ as *mut u32).cast()];
        self.launch(self.f_step, n.div_ceil(BLOCK), &mut params, stream)
    }

    /// End to end, one elementwise kernel over two inputs: upload, launch, read back,
    /// synchronise. Work is cut into `chunk`-element pieces spread over the streams so
    /// uploads, kernels and readbacks overlap (with pinned `a`/`b`/`out` the copies are
    /// truly asynchronous; with pageable ones the driver stages them itself).
    #[allow(clippy::too_many_arguments)]
    pub fn elementwise_e2e(
        &self,
        kernel: Kernel,
        a: &[u8],
        b: &[u8],
        out: &mut [u8],
        dev: &[DevBuf; 3],
        chunk: usize,
    ) -> R<()> {
        self.bind()?;
        let n = a.len() / 4;
        let f = self.function(kernel);
        let mut start = 0usize;
        let mut index = 0usize;
        while start < n {
            let len = chunk.min(n - start);
            let s = index % self.streams.len();
            let (off, bytes) = (start * 4, len * 4);
            self.h2d(dev[0].ptr + off as u64, &a[off..off + bytes], s)?;
            self.h2d(dev[1].ptr + off as u64, &b[off..off + bytes], s)?;
            self.launch_elementwise(
                f,
                dev[0].ptr + off as u64,
                dev[1].ptr + off as u64,
                dev[2].ptr + off as u64,
                len as u32,
                s,
            )?;
            self.d2h(&mut out[off..off + bytes], dev[2].ptr + off as u64, s)?;
            start += len;
            index += 1;
        }
        self.sync_all()
    }

    /// Enqueues the tiny round trip on stream 0: `ab` (both inputs, back to back, `n`
    /// elements each) in one upload, one launch, one readback; the caller waits.
    fn enqueue_tiny(&self, ab: &[u8], out: &mut [u8], dev: &DevBuf) -> R<()> {
        self.bind()?;
        let n = out.len() / 4;
        let half = (n * 4) as u64;
        let out_off = (2 * half).next_multiple_of(256);
        self.h2d(dev.ptr, ab, 0)?;
        self.launch_elementwise(
            self.f_vadd,
            dev.ptr,
            dev.ptr + half,
            dev.ptr + out_off,
            n as u32,
            0,
        )?;
        self.d2h(out, dev.ptr + out_off, 0)?;
        Ok(())
    }

    /// The minimal round trip for a tiny elementwise dispatch: `ab` (both inputs,
    /// back to back, `n` elements each) in one upload, one launch, one readback, one sync.
    pub fn tiny_e2e(&self, ab: &[u8], out: &mut [u8], dev: &DevBuf) -> R<()> {
        self.enqueue_tiny(ab, out, dev)?;
        self.sync(0)
    }

    /// Device bytes `tiny_e2e` needs for `n` elements.
    pub fn tiny_bytes(n: usize) -> usize {
        (2 * n * 4).next_multiple_of(256) + n * 4
    }

    /// Kernel time (events) of one elementwise launch over resident buffers.
    pub fn elementwise_kernel_time(
        &self,
        kernel: Kernel,
        dev: &[DevBuf; 3],
        n: u32,
    ) -> R<Duration> {
        let f = self.function(kernel);
        self.event_time(|| self.launch_elementwise(f, dev[0].ptr, dev[1].ptr, dev[2].ptr, n, 0))
    }

    /// Time of one device-to-device copy of `src` into `dst` (events around
    /// `cuMemcpyDtoDAsync`): what the device's memory moves at its best, the HBM
    /// roofline of the vyre-libs rows (each byte is read once and written once).
    pub fn copy_time(&self, dst: &DevBuf, src: &DevBuf) -> R<Duration> {
        if src.len > dst.len {
            return Err(format!("copy of {} bytes into {}", src.len, dst.len));
        }
        self.event_time(|| {
            // SAFETY: both ranges lie inside live allocations of ours; the copy completes
            // before `event_time` returns.
            ck("cuMemcpyDtoDAsync", unsafe {
                result::memcpy_dtod_async(dst.ptr, src.ptr, src.len, self.streams[0])
            })
        })
    }

    /// Device time (events on stream 0) of the work `enqueue` puts on stream 0.
    fn event_time(&self, enqueue: impl FnOnce() -> R<()>) -> R<Duration> {
        self.bind()?;
        // SAFETY: our events and stream.
        ck("cuEventRecord", unsafe {
            result::event::record(self.events[0], self.streams[0])
        })?;
        enqueue()?;
        // SAFETY: as above.
        ck("cuEventRecord", unsafe {
            result::event::record(self.events[1], self.streams[0])
        })?;
        // SAFETY: a recorded event of ours.
        ck("cuEventSynchronize", unsafe {
            result::event::synchronize(self.events[1])
        })?;
        // SAFETY: both events recorded on one stream and complete.
        let ms = ck("cuEventElapsedTime", unsafe {
            result::event::elapsed(self.events[0], self.events[1])
        })?;
        Ok(Duration::from_secs_f64(f64::from(ms) / 1e3))
    }

    pub fn upload(&self, dst: &DevBuf, src: &[u8]) -> R<()> {
        if src.len() > dst.len {
            return Err(format!("upload of {} bytes into {}", src.len(), dst.len));
        }
        self.bind()?;
        self.h2d(dst.ptr, src, 0)?;
        self.sync(0)
    }

    pub fn download(&self, dst: &mut [u8], src: &DevBuf) -> R<()> {
        if dst.len() > src.len {
            return Err(format!("download of {} bytes from {}", dst.len(), src.len));
        }
        self.bind()?;
        self.d2h(dst, src.ptr, 0)?;
        self.sync(0)
    }

    /// End to end `out = sum(a)`: zero the slot, upload in chunks over the streams with a
    /// reduce launch per chunk (atomics commute), then read the 4-byte result back.
    pub fn reduce_e2e(
        &self,
        a: &[u8],
        out: &mut [u8],
        dev_a: &DevBuf,
        dev_out: &DevBuf,
        chunk: usize,
    ) -> R<()> {
        self.bind()?;
        let n = a.len() / 4;
        self.zero(dev_out.ptr, 4, 0)?;
        // The other streams' launches must see the zeroed slot.
        self.sync(0)?;
        let mut start = 0usize;
        let mut index = 0usize;
        while start < n {
            let len = chunk.min(n - start);
            let s = index % self.streams.len();
            let (off, bytes) = (start * 4, len * 4);
            self.h2d(dev_a.ptr + off as u64, &a[off..off + bytes], s)?;
            self.launch_reduce(dev_a.ptr + off as u64, dev_out.ptr, len as u32, s)?;
            start += len;
            index += 1;
        }
        for s in 1..self.streams.len() {
            self.sync(s)?;
        }
        self.d2h(&mut out[..4], dev_out.ptr, 0)?;
        self.sync(0)
    }

    /// `steps` launches of the step kernel on stream 0, then a readback and one sync.
    pub fn sequence(&self, x: &DevBuf, n: u32, steps: usize, out: &mut [u8]) -> R<()> {
        self.bind()?;
        for _ in 0..steps {
            self.launch_step(x.ptr, n, 0)?;
        }
        self.d2h(out, x.ptr, 0)?;
        self.sync(0)
    }

    /// Capture `steps` step launches on stream 0 into a graph.
    pub fn capture_sequence(&self, x: &DevBuf, n: u32, steps: usize) -> R<GraphExec> {
        self.bind()?;
        // SAFETY: our stream; thread-local capture ends below on every path.
        ck("cuStreamBeginCapture", unsafe {
            result::stream::begin_capture(
                self.streams[0],
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        })?;
        let mut launched = Ok(());
        for _ in 0..steps {
            launched = self.launch_step(x.ptr, n, 0);
            if launched.is_err() {
                break;
            }
        }
        // SAFETY: ends the capture begun above.
        let graph = ck("cuStreamEndCapture", unsafe {
            result::stream::end_capture(self.streams[0])
        })?;
        launched?;
        let mut exec = std::ptr::null_mut();
        // SAFETY: `graph` is a captured graph; flags 0.
        ckr("cuGraphInstantiateWithFlags", unsafe {
            sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0)
        })?;
        Ok(GraphExec { graph, exec })
    }

    /// One replay of a captured sequence, then a readback and one sync.
    pub fn replay(&self, graph: &GraphExec, x: &DevBuf, out: &mut [u8]) -> R<()> {
        self.bind()?;
        // SAFETY: an instantiated graph of ours, launched on our stream.
        ck("cuGraphLaunch", unsafe {
            result::graph::launch(graph.exec, self.streams[0])
        })?;
        self.d2h(out, x.ptr, 0)?;
        self.sync(0)
    }

    /// Wall time of one driver JIT of `ptx_text` by `how`; the module is unloaded after.
    pub fn jit_time(&self, ptx_text: &str, how: Jit) -> R<Duration> {
        self.bind()?;
        let started = Instant::now();
        let module = match how {
            Jit::Load => Module::load(ptx_text)?,
            Jit::Level(level) => Module::load_at(ptx_text, level)?,
            Jit::Linked(level) => Module::load_linked(ptx_text, level)?,
        };
        let elapsed = started.elapsed();
        drop(module);
        Ok(elapsed)
    }

    /// `tiny_e2e` for one element with vyre-cuda's packed-dispatch copy sizes: the upload is
    /// all of `packed` (inputs at 0 and 256, the output at 512), the readback all of `out`
    /// from offset 512 (the output and what follows it).
    pub fn tiny_packed_sizes(&self, packed: &[u8], out: &mut [u8], dev: &DevBuf) -> R<()> {
        self.bind()?;
        self.h2d(dev.ptr, packed, 0)?;
        self.launch_elementwise(self.f_vadd, dev.ptr, dev.ptr + 256, dev.ptr + 512, 1, 0)?;
        self.d2h(out, dev.ptr + 512, 0)?;
        self.sync(0)
    }

    /// `tiny_e2e`, but the host waits on a blocking-sync event (the thread sleeps instead
    /// of spinning), so its CPU time is the API calls alone.
    pub fn tiny_e2e_blocking(&self, ab: &[u8], out: &mut [u8], dev: &DevBuf) -> R<()> {
        self.enqueue_tiny(ab, out, dev)?;
        // SAFETY: our blocking event and stream.
        ck("cuEventRecord", unsafe {
            result::event::record(self.blocking_event, self.streams[0])
        })?;
        // SAFETY: a recorded event of ours.
        ck("cuEventSynchronize", unsafe {
            result::event::synchronize(self.blocking_event)
        })
    }

    /// The tiny round trip the way a plain pageable caller does it: two uploads straight
    /// from pageable memory, launch, pageable readback, sync.
    pub fn tiny_pageable(&self, a: &[u8], b: &[u8], out: &mut [u8], dev: &DevBuf) -> R<()> {
        self.bind()?;
        let n = out.len() / 4;
        let half = (n * 4) as u64;
        let out_off = (2 * half).next_multiple_of(256);
        self.h2d(dev.ptr, a, 0)?;
        self.h2d(dev.ptr + half, b, 0)?;
        self.launch_elementwise(
            self.f_vadd,
            dev.ptr,
            dev.ptr + half,
            dev.ptr + out_off,
            n as u32,
            0,
        )?;
        self.d2h(out, dev.ptr + out_off, 0)?;
        self.sync(0)
    }

    /// Launch the 1-element kernel and synchronise: no copies at all.
    pub fn launch_sync(&self, dev: &DevBuf) -> R<()> {
        self.bind()?;
        self.launch_elementwise(self.f_vadd, dev.ptr, dev.ptr + 4, dev.ptr + 256, 1, 0)?;
        self.sync(0)
    }

    /// Cold path: JIT a fresh module, fetch its kernel, run it end to end on `n` elements
    /// from pinned staging, unload it. Returns the wall time of everything but the unload.
    pub fn cold_vadd(
        &self,
        ptx_text: &str,
        ab: &[u8],
        out: &mut [u8],
        dev: &DevBuf,
    ) -> R<Duration> {
        self.bind()?;
        let started = Instant::now();
        let module = Module::load(ptx_text)?;
        let f = module.function("floor_vadd")?;
        let n = out.len() / 4;
        let half = (n * 4) as u64;
        let out_off = (2 * half).next_multiple_of(256);
        self.h2d(dev.ptr, ab, 0)?;
        let (mut a, mut b, mut o, mut n_) = (dev.ptr, dev.ptr + half, dev.ptr + out_off, n as u32);
        let mut params: [*mut c_void; 4] = [
            (&mut a as *mut u64).cast(),
            (&mut b as *mut u64).cast(),
            (&mut o as *mut u64).cast(),
            (&mut n_ as *mut u32).cast(),
        ];
        // One element per thread (`ptx::vadd_scalar`).
        self.launch(f, (n as u32).div_ceil(BLOCK), &mut params, 0)?;
        self.d2h(out, dev.ptr + out_off, 0)?;
        self.sync(0)?;
        let elapsed = started.elapsed();
        drop(module);
        Ok(elapsed)
    }
}

/// A hand-written kernel in a module of its own (unloaded on drop).
pub struct OwnKernel {
    f: sys::CUfunction,
    _module: Module,
}

/// One upload of a round trip: host bytes and the device offset they go to.
pub type Upload<'a> = (&'a [u8], u64);

/// A parameter of one of the floor's own kernels, as its PTX signature declares it.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    /// `.u64`: a device pointer.
    Ptr(u64),
    U32(u32),
    F32(f32),
}

/// One launch of an own kernel: the kernel, its 1-D grid (`BLOCK` threads a block), its
/// parameters in signature order.
pub type Launch<'a> = (&'a OwnKernel, u32, &'a [Arg]);

impl Floor {
    /// JIT `ptx_text` into a module of its own and fetch kernel `name`.
    pub fn load_kernel(&self, ptx_text: &str, name: &str) -> R<OwnKernel> {
        self.bind()?;
        let module = Module::load(ptx_text)?;
        Ok(OwnKernel {
            f: module.function(name)?,
            _module: module,
        })
    }

    /// Device time (events on stream 0) of `launches`, enqueued back to back.
    pub fn kernels_time(&self, launches: &[Launch<'_>]) -> R<Duration> {
        self.event_time(|| {
            launches
                .iter()
                .try_for_each(|&(k, grid, args)| self.launch_args(k, grid, args))
        })
    }

    /// `launches` on stream 0, then a synchronisation.
    pub fn run_kernels(&self, launches: &[Launch<'_>]) -> R<()> {
        self.bind()?;
        for &(k, grid, args) in launches {
            self.launch_args(k, grid, args)?;
        }
        self.sync(0)
    }

    fn launch_args(&self, k: &OwnKernel, grid: u32, args: &[Arg]) -> R<()> {
        // Each value in a u64 slot: the driver copies the parameter's declared width from
        // the slot's start, which holds a u32 or f32 in its low bytes (little endian).
        let mut slots: Vec<u64> = (args.iter())
            .map(|a| match *a {
                Arg::Ptr(p) => p,
                Arg::U32(v) => u64::from(v),
                Arg::F32(v) => u64::from(v.to_bits()),
            })
            .collect();
        let mut params: Vec<*mut c_void> =
            slots.iter_mut().map(|s| (s as *mut u64).cast()).collect();
        self.launch(k.f, grid, &mut params, 0)
    }

    /// A round trip of a 1-D kernel on stream 0: `uploads` into `dev`, one launch of `k`
    /// (one thread per element, `BLOCK` per block) with the parameters `dev.ptr + offset`
    /// for each of `params` then `n`, `out` read back from `dev.ptr + out_off`, one sync.
    #[allow(clippy::too_many_arguments)]
    pub fn round_trip(
        &self,
        k: &OwnKernel,
        uploads: &[Upload<'_>],
        params: &[u64],
        n: u32,
        out: &mut [u8],
        out_off: u64,
        dev: &DevBuf,
    ) -> R<()> {
        self.bind()?;
        for &(bytes, offset) in uploads {
            self.h2d(dev.ptr + offset, bytes, 0)?;
        }
        let mut pointers: Vec<u64> = params.iter().map(|off| dev.ptr + off).collect();
        let mut n_ = n;
        let mut raw: Vec<*mut c_void> = pointers
            .iter_mut()
            .map(|p| (p as *mut u64).cast())
            .collect();
        raw.push((&mut n_ as *mut u32).cast());
        self.launch(k.f, n.div_ceil(BLOCK), &mut raw, 0)?;
        self.d2h(out, dev.ptr + out_off, 0)?;
        self.sync(0)
    }
}

/// The first driver JITs of a process: `cuInit`, device 0's primary context, then for each
/// of the texts `make` writes for the device's compute capability, in turn, the wall time of `cuModuleLoadData` + `cuModuleGetFunction(name)`
/// (each module unloaded after); the context retain released at the end. Also the
/// device's facts (name, compute capability) for the report.
pub fn first_jits(
    make: impl FnOnce(i32, i32) -> Vec<String>,
    name: &str,
) -> R<(Vec<Duration>, String, (i32, i32))> {
    // SAFETY: only tries to dlopen libcuda (cudarc panics on a missing library later).
    if !unsafe { sys::is_culib_present() } {
        return Err("libcuda not found".into());
    }
    ck("cuInit", result::init())?;
    let dev = ck("cuDeviceGet", result::device::get(0))?;
    // SAFETY: `dev` is a valid device; released below on every path.
    let ctx = ck("cuDevicePrimaryCtxRetain", unsafe {
        result::primary_ctx::retain(dev)
    })?;
    let timed = (|| -> R<(Vec<Duration>, String, (i32, i32))> {
        // SAFETY: the context we just retained.
        ck("cuCtxSetCurrent", unsafe { result::ctx::set_current(ctx) })?;
        let attr = |a: sys::CUdevice_attribute| -> R<i32> {
            // SAFETY: `dev` is valid and `a` a defined attribute.
            ck("cuDeviceGetAttribute", unsafe {
                result::device::get_attribute(dev, a)
            })
        };
        use sys::CUdevice_attribute as A;
        let cc = (
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        );
        let device = ck("cuDeviceGetName", result::device::get_name(dev))?;
        let mut taken = Vec::new();
        for text in make(cc.0, cc.1) {
            let started = Instant::now();
            let module = Module::load(&text)?;
            module.function(name)?;
            taken.push(started.elapsed());
            drop(module);
        }
        Ok((taken, device, cc))
    })();
    // SAFETY: releases the one retain taken above.
    let _ = unsafe { result::primary_ctx::release(dev) };
    timed
}

impl Drop for Floor {
    fn drop(&mut self) {
        let _ = self.bind();
        let _ = self.sync_all();
        // SAFETY: handles we created, destroyed once, after all work on them finished;
        // then the primary-context retain taken in `open` is released.
        unsafe {
            for e in self.events {
                let _ = result::event::destroy(e);
            }
            let _ = result::event::destroy(self.blocking_event);
            for s in self.streams {
                let _ = result::stream::destroy(s);
            }
        }
        // The module is unloaded by its own Drop (field order: after this body).
        // SAFETY: releases the one retain `open` took; the context stays alive while the
        // backends hold their own retains.
        let _ = unsafe { result::primary_ctx::release(self.dev) };
    }
}
