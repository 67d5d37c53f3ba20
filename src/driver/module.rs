//! [`Module`] (PTX JIT-loaded with `cuModuleLoadDataEx`) and its kernels ([`Function`]).

use super::{release, Check, Device, DriverError};
use cudarc::driver::{result, sys};
use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Size of the buffer that receives the PTX JIT error log.
const JIT_LOG_BYTES: usize = 16 * 1024;

/// `CU_JIT_SPLIT_COMPILE` (CUDA 12.8+, not in the 12.0 bindings): compile a module's
/// functions on up to this many threads. Measured on an H100 (driver 580), a 16-entry
/// module's JIT falls from 42 ms to 17 ms; a single-entry module gains nothing.
const CU_JIT_SPLIT_COMPILE: u32 = 34;

/// Set once a driver rejected `CU_JIT_SPLIT_COMPILE` (older than CUDA 12.8): never asked
/// again.
static SPLIT_COMPILE_UNSUPPORTED: AtomicBool = AtomicBool::new(false);

/// How the driver's JIT compiles one module.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JitSettings {
    /// Compile the module's functions on up to this many threads (`CU_JIT_SPLIT_COMPILE`).
    pub split_threads: Option<u32>,
    /// `CU_JIT_OPTIMIZATION_LEVEL` (0..=4); `None`: the driver's default, 4.
    pub optimization_level: Option<u32>,
}

/// A loaded CUDA module, unloaded on drop. `Send + Sync`.
#[derive(Debug)]
pub struct Module {
    device: Arc<Device>,
    raw: sys::CUmodule,
    /// Each entry's parameter list, read from the PTX it was loaded from.
    entries: Vec<(String, Arc<[ParamKind]>)>,
}

/// A kernel parameter's type, as declared in the PTX (`.param .u32` / `.param .u64`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ParamKind {
    /// `.param .u32` / `.s32` / `.b32`.
    U32,
    /// `.param .u64` / `.s64` / `.b64`.
    U64,
}

/// One kernel argument value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelArg {
    /// A 32-bit value.
    U32(u32),
    /// A 64-bit value (device addresses included).
    U64(u64),
}

impl KernelArg {
    pub(crate) fn kind(self) -> ParamKind {
        match self {
            Self::U32(_) => ParamKind::U32,
            Self::U64(_) => ParamKind::U64,
        }
    }
}

/// The parameter lists of the `.entry` declarations in `ptx`. An entry whose parameters
/// are not all plain 32/64-bit scalars gets no signature, and cannot be launched.
fn entry_signatures(ptx: &str) -> Vec<(String, Arc<[ParamKind]>)> {
    let mut entries = Vec::new();
    let mut rest = ptx;
    while let Some(at) = rest.find(".entry ") {
        rest = &rest[at + ".entry ".len()..];
        let Some(open) = rest.find('(') else { break };
        let name = rest[..open].trim().to_string();
        let Some(close) = rest[open..].find(')') else {
            break;
        };
        let list = &rest[open + 1..open + close];
        let params: Option<Vec<ParamKind>> = list
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| match p.split_whitespace().collect::<Vec<_>>()[..] {
                [".param", ".u32" | ".s32" | ".b32", _] => Some(ParamKind::U32),
                [".param", ".u64" | ".s64" | ".b64", _] => Some(ParamKind::U64),
                _ => None,
            })
            .collect();
        if let Some(params) = params {
            entries.push((name, Arc::from(params)));
        }
        rest = &rest[open + close..];
    }
    entries
}

// SAFETY: module handles may be used from any thread; operations bind the context first.
unsafe impl Send for Module {}
// SAFETY: see `Send`; no operation mutates Rust-side state.
unsafe impl Sync for Module {}

impl Module {
    /// JIT-compiles and loads PTX text. On failure the driver's JIT error log is attached to
    /// the error ([`DriverError::log`]). PTX containing a NUL byte is rejected without a
    /// driver call.
    pub fn load_ptx(device: &Arc<Device>, ptx: &str) -> Result<Arc<Module>, DriverError> {
        Self::load_ptx_with(device, ptx, JitSettings::default())
    }

    /// [`Module::load_ptx`] with `settings`. Split compilation falls back to serial where
    /// the driver (older than CUDA 12.8) does not know the option.
    pub fn load_ptx_with(
        device: &Arc<Device>,
        ptx: &str,
        settings: JitSettings,
    ) -> Result<Arc<Module>, DriverError> {
        let image = ptx_image(ptx)?;
        let mut settings = settings;
        if SPLIT_COMPILE_UNSUPPORTED.load(Ordering::Relaxed) {
            settings.split_threads = None;
        }
        let raw = match Self::jit(device, &image, settings) {
            Err(error)
                if settings.split_threads.is_some()
                    && error.code() == Some(sys::CUresult::CUDA_ERROR_INVALID_VALUE as u32) =>
            {
                SPLIT_COMPILE_UNSUPPORTED.store(true, Ordering::Relaxed);
                settings.split_threads = None;
                Self::jit(device, &image, settings)?
            }
            loaded => loaded?,
        };
        Ok(Module::wrap(device, raw, entry_signatures(ptx)))
    }

    /// One `cuModuleLoadDataEx` of `image` with `settings`.
    fn jit(
        device: &Arc<Device>,
        image: &CString,
        settings: JitSettings,
    ) -> Result<sys::CUmodule, DriverError> {
        let mut log = JitLog::new();
        if let Some(threads) = settings.split_threads {
            log.push(CU_JIT_SPLIT_COMPILE, threads as usize as *mut c_void);
        }
        if let Some(level) = settings.optimization_level {
            let option = sys::CUjit_option::CU_JIT_OPTIMIZATION_LEVEL as u32;
            log.push(option, level as usize as *mut c_void);
        }
        let mut raw: sys::CUmodule = std::ptr::null_mut();
        // SAFETY: `image` is a NUL-terminated PTX string; `options`/`values` have the same
        // length, passed; the log buffer is writable for `JIT_LOG_BYTES` bytes and outlives
        // the call (the JIT is synchronous). The options are C enum values the driver reads
        // as integers (Rust never reads them as `CUjit_option`). The context is current.
        device
            .run("cuModuleLoadDataEx", || unsafe {
                sys::cuModuleLoadDataEx(
                    &mut raw,
                    image.as_ptr().cast(),
                    log.options.len() as u32,
                    log.options.as_mut_ptr().cast::<sys::CUjit_option>(),
                    log.values.as_mut_ptr(),
                )
            })
            .map_err(|e| log.attach(e))?;
        Ok(raw)
    }

    /// Loads a cubin (an ELF image the driver's JIT made from `ptx`, see
    /// [`compile_to_cubin`]) with `cuModuleLoadData`: no compilation happens in this
    /// process. `ptx` supplies the entries' parameter lists.
    pub fn load_cubin(
        device: &Arc<Device>,
        cubin: &[u8],
        ptx: &str,
    ) -> Result<Arc<Module>, DriverError> {
        if !cubin.starts_with(b"\x7fELF") {
            return Err(DriverError::invalid_ptx_text(
                "the compiled image handed to cuModuleLoadData is not an ELF cubin",
            ));
        }
        let mut raw: sys::CUmodule = std::ptr::null_mut();
        // SAFETY: `cubin` is a complete ELF image (checked magic; the driver reads its
        // own size from the ELF headers) that outlives the synchronous call; the context is
        // current.
        device.run("cuModuleLoadData", || unsafe {
            sys::cuModuleLoadData(&mut raw, cubin.as_ptr().cast())
        })?;
        Ok(Module::wrap(device, raw, entry_signatures(ptx)))
    }

    fn wrap(
        device: &Arc<Device>,
        raw: sys::CUmodule,
        entries: Vec<(String, Arc<[ParamKind]>)>,
    ) -> Arc<Module> {
        Arc::new(Module {
            device: Arc::clone(device),
            raw,
            entries,
        })
    }

    /// Looks up the kernel `name` (`cuModuleGetFunction`); the [`Function`] keeps the module
    /// loaded.
    pub fn function(self: &Arc<Self>, name: &str) -> Result<Function, DriverError> {
        let c_name = CString::new(name).map_err(|_| {
            DriverError::described(
                "cuModuleGetFunction",
                sys::CUresult::CUDA_ERROR_INVALID_VALUE,
                format!("kernel name {name:?} contains a NUL byte"),
            )
        })?;
        self.device.enter("cuModuleGetFunction")?;
        // SAFETY: `raw` is a live module of the current context.
        let raw = unsafe { result::module::get_function(self.raw, c_name) }.map_err(|e| {
            DriverError::from_cuda("cuModuleGetFunction", e)
                .with_description(format!("no kernel named `{name}` in the module"))
        })?;
        let params = self
            .entries
            .iter()
            .find(|(entry, _)| entry == name)
            .map(|(_, params)| Arc::clone(params));
        Ok(Function {
            module: Arc::clone(self),
            raw,
            params,
        })
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: `raw` is a live module, unloaded once; every `Function` holds an
        // `Arc<Module>`, so none outlives it.
        release(&self.device, "cuModuleUnload", || unsafe {
            result::module::unload(self.raw)
        });
    }
}

/// A kernel of a loaded [`Module`]; keeps the module alive. `Send + Sync`.
#[derive(Debug, Clone)]
pub struct Function {
    module: Arc<Module>,
    raw: sys::CUfunction,
    /// The entry's declared parameters; `None` when they are not plain scalars.
    params: Option<Arc<[ParamKind]>>,
}

// SAFETY: function handles may be used from any thread; operations bind the context first,
// and the `Arc<Module>` keeps the handle valid.
unsafe impl Send for Function {}
// SAFETY: see `Send`.
unsafe impl Sync for Function {}

impl Function {
    pub(crate) fn raw(&self) -> sys::CUfunction {
        self.raw
    }

    /// The declared parameters, when they are plain 32/64-bit scalars.
    pub(crate) fn params(&self) -> Option<&[ParamKind]> {
        self.params.as_deref()
    }

    fn attribute(&self, attribute: sys::CUfunction_attribute) -> Result<u32, DriverError> {
        // SAFETY: `raw` is a live function of the current context.
        let value = self.module.device.run("cuFuncGetAttribute", || unsafe {
            result::function::get_function_attribute(self.raw, attribute)
        })?;
        Ok(u32::try_from(value).unwrap_or(0))
    }

    /// The largest block size this kernel can be launched with (register-limited).
    pub fn max_threads_per_block(&self) -> Result<u32, DriverError> {
        self.attribute(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
    }

    /// Registers per thread.
    pub fn num_registers(&self) -> Result<u32, DriverError> {
        self.attribute(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_NUM_REGS)
    }

    /// How many blocks of `block_threads` threads (and no dynamic shared memory) one
    /// multiprocessor holds at once for this kernel
    /// (`cuOccupancyMaxActiveBlocksPerMultiprocessor`): times the SM count, the largest
    /// grid a cooperative launch accepts.
    pub fn max_active_blocks_per_multiprocessor(
        &self,
        block_threads: u32,
    ) -> Result<u32, DriverError> {
        let block = i32::try_from(block_threads).unwrap_or(i32::MAX);
        // SAFETY: `raw` is a live function of the current context.
        let blocks =
            self.module
                .device
                .run("cuOccupancyMaxActiveBlocksPerMultiprocessor", || unsafe {
                    result::occupancy::max_active_block_per_multiprocessor(self.raw, block, 0)
                })?;
        Ok(u32::try_from(blocks).unwrap_or(0))
    }

    /// Allows launches with up to `bytes` of dynamic shared memory (needed above 48 KiB, up
    /// to [`DeviceInfo::max_shared_memory_per_block_optin`](super::DeviceInfo)).
    pub fn set_max_dynamic_shared_bytes(&self, bytes: u32) -> Result<(), DriverError> {
        let value = i32::try_from(bytes).unwrap_or(i32::MAX);
        let attribute = sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
        // SAFETY: `raw` is a live function of the current context.
        self.module.device.run("cuFuncSetAttribute", || unsafe {
            result::function::set_function_attribute(self.raw, attribute, value)
        })
    }
}

/// A `cuLink` session, destroyed on drop (which also frees the cubin it completed).
struct LinkState(sys::CUlinkState);

impl Drop for LinkState {
    fn drop(&mut self) {
        // SAFETY: `self.0` is a live link state created by `cuLinkCreate`, destroyed once.
        if let Err(e) = unsafe { sys::cuLinkDestroy(self.0) }.check("cuLinkDestroy") {
            tracing::warn!(%e, "destroying a CUDA link state failed");
        }
    }
}

/// JIT-compiles `ptx` for `device` to a cubin through the driver's linker (`cuLinkCreate`,
/// `cuLinkAddData`, `cuLinkComplete`; the driver's default optimisation level), returning
/// bytes instead of a loaded module, so a helper process can compile and the caller only
/// loads ([`Module::load_cubin`]). The linker compiles the module by its own route, not
/// exactly as `cuModuleLoadDataEx` does: on the H100 (driver 580.159.04) the PTX of
/// `../shared/regressions/ptxas-crash-1` crashes the latter at -O3 and compiles here.
pub fn compile_to_cubin(device: &Arc<Device>, ptx: &str) -> Result<Vec<u8>, DriverError> {
    let image = ptx_image(ptx)?;
    let mut log = JitLog::new();
    let mut raw: sys::CUlinkState = std::ptr::null_mut();
    // SAFETY: `options`/`values` have the same length, passed (C enum integers, see
    // `Module::jit`); the log buffer stays writable for
    // `JIT_LOG_BYTES` bytes until the link state is destroyed (it lives to the end of this
    // function, after `state` is dropped); the context is current.
    device.run("cuLinkCreate", || unsafe {
        sys::cuLinkCreate_v2(
            log.options.len() as u32,
            log.options.as_mut_ptr().cast::<sys::CUjit_option>(),
            log.values.as_mut_ptr(),
            &mut raw,
        )
    })?;
    let state = LinkState(raw);
    let name = c"vyre_kernel.ptx";
    let bytes = image.as_bytes_with_nul();
    // SAFETY: `bytes` is the NUL-terminated PTX (its length includes the NUL, as the
    // driver expects for PTX input) and outlives the call; no per-input options.
    let added = unsafe {
        sys::cuLinkAddData_v2(
            state.0,
            sys::CUjitInputType::CU_JIT_INPUT_PTX,
            bytes.as_ptr().cast_mut().cast(),
            bytes.len(),
            name.as_ptr(),
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    }
    .check("cuLinkAddData");
    let mut cubin: *mut c_void = std::ptr::null_mut();
    let mut size = 0usize;
    // SAFETY: `state` is live; the driver writes the cubin's address and size, the image
    // staying valid until `state` is destroyed (copied out below first).
    let completed = added.and_then(|()| {
        unsafe { sys::cuLinkComplete(state.0, &mut cubin, &mut size) }.check("cuLinkComplete")
    });
    completed.map_err(|e| log.attach(e))?;
    // SAFETY: the driver returned `size` readable bytes at `cubin`, owned by `state`,
    // which is still alive here.
    let out = unsafe { std::slice::from_raw_parts(cubin.cast::<u8>(), size) }.to_vec();
    drop(state);
    Ok(out)
}

/// `ptx` as the NUL-terminated image the driver reads; text with a NUL byte is refused.
fn ptx_image(ptx: &str) -> Result<CString, DriverError> {
    CString::new(ptx).map_err(|e| {
        DriverError::invalid_ptx_text(format!(
            "the PTX text contains a NUL byte at offset {}",
            e.nul_position()
        ))
    })
}

/// The JIT options that make the driver write its error log into our buffer.
struct JitLog {
    buffer: Vec<u8>,
    /// `CUjit_option` values, as the C enum's integers (so that options newer than the
    /// bindings can be passed).
    options: Vec<u32>,
    values: Vec<*mut c_void>,
}

impl JitLog {
    fn new() -> Self {
        let mut buffer = vec![0u8; JIT_LOG_BYTES];
        // The size option's value is the integer itself, cast to a pointer (driver ABI).
        let values = vec![buffer.as_mut_ptr().cast(), JIT_LOG_BYTES as *mut c_void];
        Self {
            buffer,
            options: vec![
                sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER as u32,
                sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES as u32,
            ],
            values,
        }
    }

    /// One more option and its value.
    fn push(&mut self, option: u32, value: *mut c_void) {
        self.options.push(option);
        self.values.push(value);
    }

    /// `error` with the log the driver wrote attached: the buffer starts zeroed, so the log
    /// ends at its first NUL byte (or fills the buffer).
    fn attach(&self, error: DriverError) -> DriverError {
        let text = self.buffer.split(|&b| b == 0).next().unwrap_or_default();
        error.with_log(String::from_utf8_lossy(text).into_owned())
    }
}

#[cfg(test)]
mod signature_tests {
    use super::*;

    #[test]
    fn entry_parameter_lists_are_read_from_the_ptx() {
        let ptx = ".visible .entry a(\n\t.param .u64 p0,\n\t.param .u32 n0\n)\n{}\n.visible .entry b()\n{}\n.entry c(.param .align 8 .b8 blob[16])\n{}";
        let entries = entry_signatures(ptx);
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].0, "a");
        assert_eq!(&*entries[0].1, &[ParamKind::U64, ParamKind::U32]);
        assert_eq!(entries[1].0, "b");
        assert!(entries[1].1.is_empty());
    }
}
