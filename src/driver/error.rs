//! [`DriverError`]: a failed CUDA driver call, classified for recovery and remediation.

use cudarc::driver::{result, sys};
use std::ffi::{c_char, CStr};
use std::fmt;

/// A failed CUDA driver call (or a driver precondition that does not hold).
///
/// Display: `<call> failed: <CUDA_ERROR_NAME> (<code>): <description>[; JIT log: ...]`.
#[derive(Debug, Clone)]
pub struct DriverError {
    call: &'static str,
    code: Option<u32>,
    name: String,
    description: String,
    log: Option<String>,
}

/// Name used for errors raised when libcuda cannot be loaded or is unusable.
const NO_DRIVER: &str = "CUDA_DRIVER_NOT_FOUND";
/// Name used for PTX text that cannot be handed to the driver at all.
const BAD_PTX_TEXT: &str = "INVALID_PTX_TEXT";

// CUresult values the classification needs (stable across CUDA versions).
const OUT_OF_MEMORY: u32 = 2;
const NOT_INITIALIZED: u32 = 3;
const DEINITIALIZED: u32 = 4;
const STUB_LIBRARY: u32 = 34;
const DEVICE_UNAVAILABLE: u32 = 46;
const NO_DEVICE: u32 = 100;
const INVALID_DEVICE: u32 = 101;
const INVALID_IMAGE: u32 = 200;
const NO_BINARY_FOR_GPU: u32 = 209;
const ECC_UNCORRECTABLE: u32 = 214;
const INVALID_PTX: u32 = 218;
const NVLINK_UNCORRECTABLE: u32 = 220;
const JIT_COMPILER_NOT_FOUND: u32 = 221;
const UNSUPPORTED_PTX_VERSION: u32 = 222;
const JIT_COMPILATION_DISABLED: u32 = 223;
const LAUNCH_OUT_OF_RESOURCES: u32 = 701;
const CONTEXT_IS_DESTROYED: u32 = 709;
const SYSTEM_NOT_READY: u32 = 802;
const SYSTEM_DRIVER_MISMATCH: u32 = 803;
const COMPAT_NOT_SUPPORTED_ON_DEVICE: u32 = 804;

/// Errors after which the CUDA context is unusable ("any further CUDA work will return the
/// same error", CUDA driver API docs); in practice for the rest of the process.
/// `CONTEXT_IS_DESTROYED` (709) is deliberately not here: it reports a stale handle, not
/// a corrupted context.
const STICKY: [u32; 12] = [
    ECC_UNCORRECTABLE,    // uncorrectable ECC error during execution
    NVLINK_UNCORRECTABLE, // uncorrectable NVLink error during execution
    700,                  // ILLEGAL_ADDRESS
    702,                  // LAUNCH_TIMEOUT
    710,                  // ASSERT (device-side assert)
    714,                  // HARDWARE_STACK_ERROR
    715,                  // ILLEGAL_INSTRUCTION
    716,                  // MISALIGNED_ADDRESS
    717,                  // INVALID_ADDRESS_SPACE
    718,                  // INVALID_PC
    719,                  // LAUNCH_FAILED
    911,                  // EXTERNAL_DEVICE
];

/// Names for the codes above, used only when the driver cannot name a code itself.
fn fallback_name(code: u32) -> &'static str {
    match code {
        OUT_OF_MEMORY => "CUDA_ERROR_OUT_OF_MEMORY",
        NOT_INITIALIZED => "CUDA_ERROR_NOT_INITIALIZED",
        NO_DEVICE => "CUDA_ERROR_NO_DEVICE",
        INVALID_DEVICE => "CUDA_ERROR_INVALID_DEVICE",
        INVALID_PTX => "CUDA_ERROR_INVALID_PTX",
        UNSUPPORTED_PTX_VERSION => "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
        ECC_UNCORRECTABLE => "CUDA_ERROR_ECC_UNCORRECTABLE",
        700 => "CUDA_ERROR_ILLEGAL_ADDRESS",
        LAUNCH_OUT_OF_RESOURCES => "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
        702 => "CUDA_ERROR_LAUNCH_TIMEOUT",
        CONTEXT_IS_DESTROYED => "CUDA_ERROR_CONTEXT_IS_DESTROYED",
        710 => "CUDA_ERROR_ASSERT",
        715 => "CUDA_ERROR_ILLEGAL_INSTRUCTION",
        716 => "CUDA_ERROR_MISALIGNED_ADDRESS",
        719 => "CUDA_ERROR_LAUNCH_FAILED",
        _ => "CUDA_ERROR_UNRECOGNIZED",
    }
}

/// What kind of failure a [`DriverError`] is: decides recovery here and the remediation
/// hint at the crate's error boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriverErrorKind {
    /// No usable libcuda (missing, too old, stub, or mismatched).
    NoDriver,
    /// No usable device.
    NoDevice,
    /// Device memory exhausted.
    OutOfMemory,
    /// A kernel fault that leaves the context unusable for the rest of the process.
    Sticky,
    /// The driver's PTX compiler rejected a module.
    Jit,
    /// A launch needs more registers or shared memory than a multiprocessor has.
    LaunchResources,
    /// Anything else.
    Other,
}

impl DriverError {
    /// libcuda could not be loaded (no NVIDIA driver, or not on the loader path).
    pub fn library_missing() -> Self {
        Self::synthetic(
            "dlopen(libcuda)",
            NO_DRIVER,
            "libcuda could not be loaded (searched libcuda.so, libcuda.so.1 and versioned \
             names); the CUDA backend needs the NVIDIA driver",
        )
    }

    /// libcuda loaded but lacks an entry point this crate calls (driver older than CUDA 12.0).
    pub(crate) fn library_too_old(symbol: &str) -> Self {
        Self::synthetic(
            "dlsym(libcuda)",
            NO_DRIVER,
            format!("libcuda was loaded but lacks `{symbol}`; the driver is older than CUDA 12.0"),
        )
    }

    /// PTX text that cannot be passed to the driver (interior NUL byte).
    pub(crate) fn invalid_ptx_text(description: impl Into<String>) -> Self {
        Self::synthetic("cuModuleLoadDataEx", BAD_PTX_TEXT, description)
    }

    /// An error with a CUDA code, named by the driver when it is loaded.
    pub(crate) fn from_code(call: &'static str, code: u32) -> Self {
        let (name, description) = if super::driver_library_present() {
            driver_strings(code)
        } else {
            (None, None)
        };
        Self {
            call,
            code: Some(code),
            name: name.unwrap_or_else(|| fallback_name(code).to_owned()),
            description: description.unwrap_or_default(),
            log: None,
        }
    }

    /// An error with a CUDA code and our own description of it.
    pub(crate) fn described(
        call: &'static str,
        code: sys::CUresult,
        description: impl Into<String>,
    ) -> Self {
        Self::from_code(call, code as u32).with_description(description)
    }

    /// Wraps an error returned by a `cudarc::driver::result` function.
    pub(crate) fn from_cuda(call: &'static str, error: result::DriverError) -> Self {
        Self::from_code(call, error.0 as u32)
    }

    fn synthetic(call: &'static str, name: &str, description: impl Into<String>) -> Self {
        Self {
            call,
            code: None,
            name: name.to_owned(),
            description: description.into(),
            log: None,
        }
    }

    pub(crate) fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    pub(crate) fn with_log(mut self, log: String) -> Self {
        let log = log.trim();
        self.log = (!log.is_empty()).then(|| log.to_owned());
        self
    }

    /// The raw `CUresult`, or `None` when the error did not come from a driver call.
    pub fn code(&self) -> Option<u32> {
        self.code
    }

    /// The driver entry point (or step) that failed, e.g. `"cuLaunchKernel"`.
    pub fn call(&self) -> &'static str {
        self.call
    }

    /// The CUDA error name, e.g. `"CUDA_ERROR_ILLEGAL_ADDRESS"`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The driver's description of the error (may be empty).
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The PTX JIT error log, for failed module loads.
    pub fn log(&self) -> Option<&str> {
        self.log.as_deref()
    }

    /// True for errors that leave the CUDA context unusable for the rest of the process.
    pub fn is_sticky(&self) -> bool {
        self.kind() == DriverErrorKind::Sticky
    }

    /// True for `CUDA_ERROR_OUT_OF_MEMORY`.
    pub fn is_out_of_memory(&self) -> bool {
        self.kind() == DriverErrorKind::OutOfMemory
    }

    /// True when no usable CUDA driver or device exists (the backend is unavailable,
    /// as opposed to a failed operation).
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self.kind(),
            DriverErrorKind::NoDriver | DriverErrorKind::NoDevice
        )
    }

    /// The class of this failure.
    pub fn kind(&self) -> DriverErrorKind {
        match self.code {
            None if self.name == NO_DRIVER => DriverErrorKind::NoDriver,
            None if self.name == BAD_PTX_TEXT => DriverErrorKind::Jit,
            None => DriverErrorKind::Other,
            Some(code) if STICKY.contains(&code) => DriverErrorKind::Sticky,
            Some(
                NOT_INITIALIZED
                | DEINITIALIZED
                | STUB_LIBRARY
                | SYSTEM_DRIVER_MISMATCH
                | COMPAT_NOT_SUPPORTED_ON_DEVICE,
            ) => DriverErrorKind::NoDriver,
            Some(NO_DEVICE | INVALID_DEVICE | DEVICE_UNAVAILABLE | SYSTEM_NOT_READY) => {
                DriverErrorKind::NoDevice
            }
            Some(OUT_OF_MEMORY) => DriverErrorKind::OutOfMemory,
            Some(
                INVALID_IMAGE
                | NO_BINARY_FOR_GPU
                | INVALID_PTX
                | JIT_COMPILER_NOT_FOUND
                | UNSUPPORTED_PTX_VERSION
                | JIT_COMPILATION_DISABLED,
            ) => DriverErrorKind::Jit,
            Some(LAUNCH_OUT_OF_RESOURCES) => DriverErrorKind::LaunchResources,
            Some(_) => DriverErrorKind::Other,
        }
    }
}

/// The driver's own name and description for `code` (`cuGetErrorName`/`cuGetErrorString`).
/// Must only be called when libcuda is present.
fn driver_strings(code: u32) -> (Option<String>, Option<String>) {
    // The entry points are resolved with a `u32` code parameter (the C ABI of the CUresult
    // enum) so that codes unknown to cudarc's Rust enum never become invalid enum values.
    type GetString = unsafe extern "C" fn(u32, *mut *const c_char) -> u32;
    let query = |symbol: &[u8]| -> Option<String> {
        let mut out: *const c_char = std::ptr::null();
        // SAFETY: libcuda is present (checked by the caller) and opened by `libcuda`. Both
        // symbols have the C signature `CUresult f(CUresult, const char**)`, and CUresult is a
        // 32-bit unsigned C enum. On success `out` points to a static NUL-terminated string
        // owned by the driver; on failure (unknown code) it is left null or reset below.
        unsafe {
            let lib = super::libcuda()?;
            let f = lib.get::<GetString>(symbol).ok()?;
            if f(code, &mut out) != 0 || out.is_null() {
                return None;
            }
            Some(CStr::from_ptr(out).to_string_lossy().into_owned())
        }
    };
    (query(b"cuGetErrorName"), query(b"cuGetErrorString"))
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {}", self.call, self.name)?;
        if let Some(code) = self.code {
            write!(f, " ({code})")?;
        }
        if !self.description.is_empty() {
            write!(f, ": {}", self.description)?;
        }
        if let Some(log) = &self.log {
            write!(f, "; JIT log: {log}")?;
        }
        Ok(())
    }
}

impl std::error::Error for DriverError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(code: u32) -> DriverError {
        DriverError::from_code("cuTest", code).with_description("something happened")
    }

    #[test]
    fn display_has_call_name_code_description_and_log() {
        let e = err(700);
        let text = e.to_string();
        assert!(text.starts_with("cuTest failed: CUDA_ERROR_ILLEGAL_ADDRESS (700)"));
        assert!(text.ends_with(": something happened"), "{text}");
        let e = err(INVALID_PTX).with_log("line 3: syntax error\n".into());
        assert!(e.to_string().ends_with("; JIT log: line 3: syntax error"));
        assert_eq!(e.log(), Some("line 3: syntax error"));
        assert_eq!(err(5).with_log("  \n".into()).log(), None);
    }

    #[test]
    fn sticky_classification() {
        for code in [214, 700, 702, 710, 714, 715, 716, 717, 718, 719] {
            assert!(err(code).is_sticky(), "{code} must be sticky");
        }
        for code in [1, 2, 100, 218, 701, 709, 720, 999] {
            assert!(!err(code).is_sticky(), "{code} must not be sticky");
        }
        assert!(!DriverError::library_missing().is_sticky());
    }

    #[test]
    fn classification() {
        assert!(err(2).is_out_of_memory());
        assert!(!err(700).is_out_of_memory());
        assert_eq!(err(34).kind(), DriverErrorKind::NoDriver);
        assert_eq!(err(218).kind(), DriverErrorKind::Jit);
        assert_eq!(err(701).kind(), DriverErrorKind::LaunchResources);
        assert_eq!(
            DriverError::invalid_ptx_text("NUL").kind(),
            DriverErrorKind::Jit
        );
        assert!(err(100).is_unavailable() && !err(2).is_unavailable());
    }

    #[test]
    fn library_missing_is_actionable() {
        let e = DriverError::library_missing();
        assert_eq!(e.code(), None);
        assert!(e.to_string().contains("libcuda could not be loaded"));
        assert!(e.is_unavailable());
        assert!(DriverError::library_too_old("cuFoo").is_unavailable());
    }
}
