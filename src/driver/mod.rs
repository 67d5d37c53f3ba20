//! CUDA driver layer: the only module of the crate with `unsafe` FFI.
//!
//! Thin RAII types over `cudarc::driver::{result, sys}` (cudarc's `safe` layer is not used):
//! [`Device`] (retained primary context), [`DeviceAlloc`], [`PinnedHostBuffer`], [`Stream`],
//! [`Event`], [`Module`] and [`Function`]; and NCCL, also loaded at run time (`nccl`).
//!
//! `libcuda` is loaded at run time. cudarc panics when the library or one of its symbols is
//! missing, so every entry point first checks [`driver_library_present`] (computed once:
//! library loadable *and* every entry point used here resolvable) and returns a
//! [`DriverError`] instead.
//!
//! A sticky error (a kernel fault) loses the context for the whole process: the driver keeps
//! it, so there is no in-process recovery; the backend marks its device lost instead.

mod device;
mod error;
mod graph;
mod memory;
mod module;
pub mod nccl;
mod round_trip;
mod stream;

#[doc(hidden)]
pub use device::FailPoint;
pub use device::{Device, DeviceInfo};
pub use error::{DriverError, DriverErrorKind};
pub(crate) use graph::GraphExec;
pub use memory::{DeviceAlloc, PinnedHostBuffer};
pub(crate) use memory::{StagingBuffer, StreamOrderedAlloc};
pub(crate) use module::compile_to_cubin;
pub use module::{Function, JitSettings, KernelArg, Module};
pub use nccl::{NcclError, NcclVersion};
pub(crate) use round_trip::{Exchange, RoundTripBuffer, Wait};
pub use stream::{Event, Stream, StreamMemOp};

use cudarc::driver::{result, sys};
use std::sync::OnceLock;

/// Every libcuda entry point this module calls (directly or through `cudarc::driver::result`),
/// by subsystem. cudarc resolves symbols lazily and panics on a missing one, so they are all
/// checked once.
const REQUIRED_SYMBOLS: &str = "
    cuInit cuDriverGetVersion cuGetErrorName cuGetErrorString
    cuDeviceGetCount cuDeviceGet cuDeviceGetName cuDeviceGetAttribute cuDeviceTotalMem_v2
    cuDevicePrimaryCtxRetain cuDevicePrimaryCtxRelease_v2 cuCtxSetCurrent cuCtxSynchronize
    cuDeviceCanAccessPeer cuCtxEnablePeerAccess
    cuMemGetInfo_v2 cuMemAlloc_v2 cuMemFree_v2 cuMemHostRegister_v2 cuMemHostUnregister
    cuStreamCreate cuStreamDestroy_v2 cuStreamSynchronize cuStreamQuery
    cuMemcpyHtoDAsync_v2 cuMemcpyDtoHAsync_v2 cuMemcpyDtoDAsync_v2 cuMemsetD8Async cuMemsetD32Async
    cuLaunchKernel cuLaunchCooperativeKernel cuOccupancyMaxActiveBlocksPerMultiprocessor
    cuEventCreate cuEventRecord cuStreamWaitEvent cuEventQuery cuEventSynchronize cuEventElapsedTime cuEventDestroy_v2
    cuModuleLoadDataEx cuModuleLoadData
    cuLinkCreate_v2 cuLinkAddData_v2 cuLinkComplete cuLinkDestroy
    cuModuleGetFunction cuModuleUnload cuFuncGetAttribute cuFuncSetAttribute
    cuStreamBeginCapture_v2 cuStreamEndCapture cuGraphInstantiateWithFlags cuGraphLaunch
    cuGraphDestroy cuGraphExecDestroy
    cuMemAllocAsync cuMemFreeAsync cuDeviceGetDefaultMemPool cuMemPoolSetAttribute
";

/// The names tried for libcuda, in cudarc's order for the usual platforms.
const LIBCUDA_NAMES: &[&str] = &["libcuda.so", "libcuda.so.1", "nvcuda.dll"];

/// libcuda opened through this crate's own `libloading` handle, used only to look entry
/// points up by name (the library is reference-counted by the loader, so this is the same
/// mapping cudarc uses). cudarc's own loader type changed between 0.19 patch releases
/// (`culib()` returns its generated `Lib` in 0.19.0 and a `libloading::Library` later), so
/// going through our own handle keeps the crate building against every cudarc 0.19.x —
/// vyre-driver-cuda 0.6.5 pins `cudarc =0.19.0`, and a program linking both resolves to it.
pub(crate) fn libcuda() -> Option<&'static libloading::Library> {
    static LIB: OnceLock<Option<libloading::Library>> = OnceLock::new();
    LIB.get_or_init(|| {
        LIBCUDA_NAMES.iter().copied().find_map(|name| {
            // SAFETY: opening libcuda runs its initialisers, the documented way to use the
            // driver; nothing is called through the handle here.
            unsafe { libloading::Library::new(name) }.ok()
        })
    })
    .as_ref()
}

/// Whether libcuda exports `symbol`: for the optional entry points, which are not in
/// [`REQUIRED_SYMBOLS`] (their callers check first and take another path without them).
pub(crate) fn symbol_present(symbol: &str) -> bool {
    let Some(lib) = libcuda() else {
        return false;
    };
    // SAFETY: looking a symbol up never calls it; the placeholder fn-pointer type is only
    // used to ask whether the symbol exists, and the symbol is dropped unused.
    unsafe { lib.get::<unsafe extern "C" fn()>(symbol.as_bytes()) }.is_ok()
}

/// `Ok` when libcuda is loaded and has every entry point we use; cached for the process.
fn library_status() -> &'static Result<(), DriverError> {
    static STATUS: OnceLock<Result<(), DriverError>> = OnceLock::new();
    STATUS.get_or_init(|| {
        let Some(lib) = libcuda() else {
            return Err(DriverError::library_missing());
        };
        for symbol in REQUIRED_SYMBOLS.split_whitespace() {
            // SAFETY: looking a symbol up never calls it; the placeholder fn-pointer type is
            // only used to ask whether the symbol exists, and the symbol is dropped unused.
            if unsafe { lib.get::<unsafe extern "C" fn()>(symbol.as_bytes()) }.is_err() {
                return Err(DriverError::library_too_old(symbol));
            }
        }
        // SAFETY: `is_culib_present` only tries to dlopen the candidate library names (the
        // ones above among them), so cudarc's own `culib` will load instead of panicking.
        if !unsafe { sys::is_culib_present() } {
            return Err(DriverError::library_missing());
        }
        Ok(())
    })
}

/// True when libcuda can be loaded and exports every entry point this crate needs.
/// Never panics; the answer is computed once per process.
pub fn driver_library_present() -> bool {
    library_status().is_ok()
}

/// Loads libcuda (checked) and runs `cuInit(0)` once per process. Before that, it gives the
/// driver's on-disk PTX JIT cache a 1 GiB limit unless the user set `CUDA_CACHE_MAXSIZE`
/// (the driver reads its environment at `cuInit`; its built-in limit is small enough that a
/// few hundred distinct kernels evict each other).
pub(crate) fn init() -> Result<(), DriverError> {
    static INIT: OnceLock<Result<(), DriverError>> = OnceLock::new();
    library_status().clone()?;
    INIT.get_or_init(|| {
        let (name, value) = ("CUDA_CACHE_MAXSIZE", "1073741824");
        if std::env::var_os(name).is_none() {
            // Runs once, before the first driver call of this crate.
            std::env::set_var(name, value);
            tracing::debug!(name, value, "set CUDA JIT cache default");
        }
        result::init().check("cuInit")
    })
    .clone()
}

/// Number of CUDA devices visible to this process (`cuInit(0)` then `cuDeviceGetCount`).
///
/// `Ok(0)` when the driver is installed but reports no device (`CUDA_ERROR_NO_DEVICE`);
/// `Err` when libcuda is missing or the driver fails otherwise.
pub fn device_count() -> Result<usize, DriverError> {
    match init() {
        Err(e) if e.code() == Some(sys::CUresult::CUDA_ERROR_NO_DEVICE as u32) => return Ok(0),
        other => other?,
    }
    let count = result::device::get_count().check("cuDeviceGetCount")?;
    Ok(usize::try_from(count).unwrap_or(0))
}

/// Runs `destroy` (one driver call, `call`) in `device`'s context from a `Drop`: a
/// failure is logged, never raised.
pub(crate) fn release(
    device: &Device,
    call: &'static str,
    destroy: impl FnOnce() -> Result<(), result::DriverError>,
) {
    if let Err(error) = device.bind().and_then(|()| destroy().check(call)) {
        tracing::warn!(%error, "releasing a CUDA handle failed");
    }
}

/// Converts a driver result into ours, naming the failed entry point.
pub(crate) trait Check<T> {
    fn check(self, call: &'static str) -> Result<T, DriverError>;
}

impl<T> Check<T> for Result<T, result::DriverError> {
    #[inline]
    fn check(self, call: &'static str) -> Result<T, DriverError> {
        self.map_err(|e| DriverError::from_cuda(call, e))
    }
}

impl Check<()> for sys::CUresult {
    #[inline]
    fn check(self, call: &'static str) -> Result<(), DriverError> {
        self.result().check(call)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_driver_means_errors_not_panics() {
        if driver_library_present() {
            return; // covered by tests/driver_smoke.rs on machines with a driver
        }
        assert!(device_count().is_err());
        let err = Device::open(0).expect_err("no libcuda, so no device");
        assert!(
            err.to_string().contains("libcuda could not be loaded"),
            "{err}"
        );
        let text = crate::CudaError::from(err).to_string();
        assert!(text.contains("Fix: install"), "{text}");
        assert!(text.contains("LD_LIBRARY_PATH"), "{text}");
    }
}
