//! # vyre-cuda
//!
//! A CUDA backend for the [vyre](https://crates.io/crates/vyre-foundation) GPU compiler.
//!
//! * [`codegen`] lowers a vyre [`Program`](vyre_foundation::ir::Program) to PTX text with
//!   our own emitter. It makes no CUDA calls and is usable with no GPU at all
//!   ([`codegen::emit_ptx`]).
//! * [`driver`] is the only module that talks to the CUDA driver (through `cudarc`, with
//!   `libcuda` loaded at run time, so no toolkit is needed to build).
//! * [`backend`] holds [`CudaBackend`]: dispatch (borrowed, timed, async, compiled
//!   pipelines), resident buffers and sequences, caches, pools and device memory.
//! * [`optimizer`] holds [`CudaOptimizerDispatcher`], vyre-self-substrate's
//!   `OptimizerDispatcher` over resident buffers.
//! * [`adapter`] implements `vyre_driver::VyreBackend` and registers the backend id
//!   [`BACKEND_ID`] (`"vyre-cuda"`) through `inventory`, so linking the crate is enough for
//!   `vyre_driver::registered_backends()` to list it, next to vyre-driver-cuda if that is
//!   linked too. vyre-cuda 0.2.x serves vyre 0.7 (`=0.7.2`); 0.1.x served vyre 0.6.
//!
//! Every successful dispatch is byte-identical to `vyre-reference`; every failure is a
//! `BackendError` whose message carries a `Fix:` hint.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod adapter;
mod artifact;
pub mod backend;
pub mod codegen;
mod compat;
pub mod driver;
mod error;
pub mod optimizer;

pub use artifact::materializer::ARTIFACT_MODULES_ENV;
pub use artifact::payload_ptx;
pub use backend::{
    collective_fold_program, serve_jit_helper, CollectiveReduction, CudaBackend, CudaCluster,
    CudaDeviceBuffer, CudaOptions, CudaPendingDispatch, CudaPipeline, PeerBarrierKind, PoolKind,
    COLLECTIVE_PEER_FOLD_ENV, COLLECTIVE_REDUCTION_ENV, COLLECTIVE_TIMEOUT_ENV, JIT_HELPER_ENV,
    JIT_OPTIMIZATION_LEVEL_ENV, PEER_BARRIER_ENV, SPLIT_COMPILE_ENV,
};
pub use compat::{BACKEND_ID, PAYLOAD_FORMAT, TARGET_ID};
pub use driver::nccl::NcclUniqueId;
pub use error::{CudaError, CUDA_BACKEND_ID};
pub use optimizer::CudaOptimizerDispatcher;

/// The version of the NCCL library this process uses for collectives across GPUs, for logs.
///
/// NCCL is loaded at run time on first use (`$VYRE_NCCL_LIBRARY`, then `libnccl.so.2`,
/// then `libnccl.so`) and must be 2.18 or newer; without it this is an error naming every
/// library tried and how to install one. Single-GPU dispatch never needs NCCL.
pub fn nccl_version() -> Result<driver::NcclVersion, CudaError> {
    Ok(driver::nccl::version()?)
}
