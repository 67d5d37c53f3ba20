//! `VyreBackend` adapter and registration. (Being written.)

/// Backend id under which vyre-cuda registers.
pub const CUDA_BACKEND_ID: &str = "cuda";
