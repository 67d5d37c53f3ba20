//! The crate's typed error. Every variant becomes a `BackendError` with a `Fix:` hint at
//! the `VyreBackend` boundary.

use crate::codegen::CodegenError;
use crate::driver::DriverError;
use vyre_driver::BackendError;

/// Everything that can go wrong inside vyre-cuda.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CudaError {
    /// The program cannot be lowered to PTX (unsupported construct, invalid shape, ...).
    #[error(transparent)]
    Codegen(#[from] CodegenError),
    /// A CUDA driver call failed.
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// The caller's inputs or configuration do not fit the program's dispatch ABI.
    #[error("{message} Fix: {fix}")]
    InvalidInput {
        /// What is wrong.
        message: String,
        /// How to fix it.
        fix: String,
    },
    /// The program was rejected by vyre's validator or capability checks.
    #[error("{0}")]
    Rejected(BackendError),
    /// The kernel reported a run-time error that the reference also reports.
    #[error("kernel run-time error: {message}. Fix: {fix}")]
    KernelRuntime {
        /// The reference's description of the failing operation.
        message: String,
        /// How to avoid it.
        fix: String,
    },
    /// The backend was shut down; it cannot be used any more.
    #[error("the CUDA backend was shut down. Fix: create a new backend (CudaBackend::new or vyre_driver::acquire) after shutdown")]
    ShutDown,
    /// An earlier sticky driver error (e.g. an illegal address) destroyed the CUDA context.
    #[error("the CUDA device is lost: {cause}. Fix: restart the process; the driver keeps this error for the whole process, so in-process recovery is not possible")]
    DeviceLost {
        /// The error that destroyed the context.
        cause: String,
    },
    /// The JIT helper process (`VYRE_CUDA_JIT_HELPER`) could not compile a kernel: it did
    /// not start, died (the driver's PTX compiler crashed on the kernel), or reported an
    /// error.
    #[error("{message}. Fix: {fix}")]
    JitHelper {
        /// What happened.
        message: String,
        /// How to get past it.
        fix: String,
    },
    /// A device allocation would exceed the free device memory.
    #[error("device out of memory: requested {requested} bytes, {available} available")]
    OutOfMemory {
        /// Bytes requested.
        requested: u64,
        /// Bytes the device reported free.
        available: u64,
    },
}

impl CudaError {
    pub(crate) fn invalid_input(message: impl Into<String>, fix: impl Into<String>) -> Self {
        Self::InvalidInput {
            message: message.into(),
            fix: fix.into(),
        }
    }
}

impl From<CudaError> for BackendError {
    fn from(error: CudaError) -> Self {
        match error {
            CudaError::Codegen(inner) => inner.into(),
            CudaError::Driver(inner) => inner.into(),
            CudaError::InvalidInput { message, fix } => BackendError::InvalidProgram {
                fix: format!("Fix: {fix} ({message})"),
            },
            CudaError::Rejected(inner) => inner,
            CudaError::KernelRuntime { message, fix } => BackendError::DispatchFailed {
                code: None,
                message: format!("kernel run-time error: {message}. Fix: {fix}"),
            },
            error @ (CudaError::ShutDown
            | CudaError::DeviceLost { .. }
            | CudaError::JitHelper { .. }) => BackendError::DispatchFailed {
                code: None,
                message: error.to_string(),
            },
            CudaError::OutOfMemory {
                requested,
                available,
            } => BackendError::DeviceOutOfMemory {
                requested,
                available,
            },
        }
    }
}
