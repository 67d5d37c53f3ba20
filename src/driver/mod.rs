//! CUDA driver layer: the only module with `unsafe` FFI. (Being written.)

/// A failed CUDA driver call.
#[derive(Debug, Clone, thiserror::Error)]
#[error("CUDA driver error")]
pub struct DriverError;

impl From<DriverError> for vyre_driver::BackendError {
    fn from(e: DriverError) -> Self {
        vyre_driver::BackendError::new(e.to_string())
    }
}
