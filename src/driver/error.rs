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

/// The class of every code that is not [`DriverErrorKind::Other`] (CUresult values are
/// stable across CUDA versions); each code's name is used only when the driver cannot name
/// it itself. Sticky errors leave the CUDA context unusable ("any further CUDA work will
/// return the same error", CUDA driver API docs), in practice for the rest of the process;
/// `CONTEXT_IS_DESTROYED` is deliberately not one: it reports a stale handle, not a
/// corrupted context.
const CLASSES: [(sys::CUresult, DriverErrorKind); 30] = {
    use sys::CUresult as R;
    use DriverErrorKind as K;
    [
        (R::CUDA_ERROR_OUT_OF_MEMORY, K::OutOfMemory),
        (R::CUDA_ERROR_NOT_INITIALIZED, K::NoDriver),
        (R::CUDA_ERROR_DEINITIALIZED, K::NoDriver),
        (R::CUDA_ERROR_STUB_LIBRARY, K::NoDriver),
        (R::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, K::NoDriver),
        (R::CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, K::NoDriver),
        (R::CUDA_ERROR_DEVICE_UNAVAILABLE, K::NoDevice),
        (R::CUDA_ERROR_NO_DEVICE, K::NoDevice),
        (R::CUDA_ERROR_INVALID_DEVICE, K::NoDevice),
        (R::CUDA_ERROR_SYSTEM_NOT_READY, K::NoDevice),
        (R::CUDA_ERROR_INVALID_IMAGE, K::Jit),
        (R::CUDA_ERROR_NO_BINARY_FOR_GPU, K::Jit),
        (R::CUDA_ERROR_INVALID_PTX, K::Jit),
        (R::CUDA_ERROR_JIT_COMPILER_NOT_FOUND, K::Jit),
        (R::CUDA_ERROR_UNSUPPORTED_PTX_VERSION, K::Jit),
        (R::CUDA_ERROR_JIT_COMPILATION_DISABLED, K::Jit),
        (R::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, K::LaunchResources),
        (R::CUDA_ERROR_CONTEXT_IS_DESTROYED, K::Other),
        (R::CUDA_ERROR_ECC_UNCORRECTABLE, K::Sticky),
        (R::CUDA_ERROR_NVLINK_UNCORRECTABLE, K::Sticky),
        (R::CUDA_ERROR_ILLEGAL_ADDRESS, K::Sticky),
        (R::CUDA_ERROR_LAUNCH_TIMEOUT, K::Sticky),
        (R::CUDA_ERROR_ASSERT, K::Sticky), // device-side assert
        (R::CUDA_ERROR_HARDWARE_STACK_ERROR, K::Sticky),
        (R::CUDA_ERROR_ILLEGAL_INSTRUCTION, K::Sticky),
        (R::CUDA_ERROR_MISALIGNED_ADDRESS, K::Sticky),
        (R::CUDA_ERROR_INVALID_ADDRESS_SPACE, K::Sticky),
        (R::CUDA_ERROR_INVALID_PC, K::Sticky),
        (R::CUDA_ERROR_LAUNCH_FAILED, K::Sticky),
        (R::CUDA_ERROR_EXTERNAL_DEVICE, K::Sticky),
    ]
};

/// The [`CLASSES`] entry of `code`.
fn class(code: u32) -> Option<(sys::CUresult, DriverErrorKind)> {
    CLASSES.into_iter().find(|(known, _)| *known as u32 == code)
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
            name: name.unwrap_or_else(|| {
                class(code).map_or("CUDA_ERROR_UNRECOGNIZED".into(), |(r, _)| format!("{r:?}"))
            }),
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

    /// The class of this failure.
    pub fn kind(&self) -> DriverErrorKind {
        match self.code {
            None if self.name == NO_DRIVER => DriverErrorKind::NoDriver,
            None if self.name == BAD_PTX_TEXT => DriverErrorKind::Jit,
            None => DriverErrorKind::Other,
            Some(code) => class(code).map_or(DriverErrorKind::Other, |(_, kind)| kind),
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
        let e = err(218).with_log("line 3: syntax error\n".into());
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
        assert_eq!(err(100).kind(), DriverErrorKind::NoDevice);
    }

    #[test]
    fn library_missing_is_actionable() {
        let e = DriverError::library_missing();
        assert_eq!(e.code(), None);
        assert!(e.to_string().contains("libcuda could not be loaded"));
        assert_eq!(e.kind(), DriverErrorKind::NoDriver);
        assert_eq!(
            DriverError::library_too_old("cuFoo").kind(),
            DriverErrorKind::NoDriver
        );
    }
}
