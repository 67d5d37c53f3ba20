//! The CUDA backend core. (Being written.)

/// The CUDA backend.
pub struct CudaBackend;
