//! The one place that enqueues kernels: arguments are built from the kernel's own ABI, so
//! their number and types always match what the emitter declared.

use super::cache::LoadedKernel;
use crate::driver::{DriverError, GraphExec, Stream};
use std::ffi::c_void;

/// Device addresses and element counts for one launch, in the kernel's declaration order.
#[derive(Debug, Clone, Default)]
pub(crate) struct LaunchArgs {
    pub(crate) pointers: smallvec::SmallVec<[u64; 8]>,
    pub(crate) counts: smallvec::SmallVec<[u32; 8]>,
    /// The fault word's address; required exactly when the kernel has one.
    pub(crate) fault: Option<u64>,
}

fn mismatch(what: &str) -> DriverError {
    DriverError::from_code(
        "cuLaunchKernel",
        cudarc::driver::sys::CUresult::CUDA_ERROR_INVALID_VALUE as u32,
    )
    .with_description(format!(
        "vyre-cuda launch arguments do not match the kernel ABI: {what}"
    ))
}

/// Enqueues `launches` back-to-back launches of `kernel` on `stream`.
///
/// The caller keeps every address in `args` allocated until the launches complete (it
/// synchronises `stream`, or an event recorded after them, before releasing memory).
pub(crate) fn enqueue(
    stream: &Stream,
    kernel: &LoadedKernel,
    grid: [u32; 3],
    args: &LaunchArgs,
    launches: u32,
) -> Result<(), DriverError> {
    let abi = &kernel.abi;
    if args.pointers.len() != abi.bindings.len() || args.counts.len() != abi.bindings.len() {
        return Err(mismatch("binding count"));
    }
    if args.fault.is_some() != abi.fault_word {
        return Err(mismatch("fault word"));
    }
    // The driver reads each parameter through these pointers during `cuLaunchKernel`.
    let mut pointers = args.pointers.clone();
    let mut counts = args.counts.clone();
    let mut fault = args.fault.unwrap_or(0);
    let mut params: smallvec::SmallVec<[*mut c_void; 17]> = smallvec::SmallVec::new();
    for pointer in pointers.iter_mut() {
        params.push((pointer as *mut u64).cast());
    }
    for count in counts.iter_mut() {
        params.push((count as *mut u32).cast());
    }
    if abi.fault_word {
        params.push((&mut fault as *mut u64).cast());
    }
    for _ in 0..launches {
        // SAFETY: `params` holds one pointer per kernel parameter in the order the emitter
        // declares them (`codegen::compose`: a `.u64` per binding, a `.u32` per binding,
        // then the `.u64` fault word when `abi.fault_word`), each pointing at a live local
        // of that width; the counts were checked against the ABI above. Every address is
        // device memory the caller keeps allocated until the launch completes, and the
        // kernel bounds-checks every access against the element counts it is given.
        unsafe {
            stream.launch(&kernel.function, grid, abi.workgroup_size, 0, &mut params)?;
        }
    }
    Ok(())
}

/// Enqueues `replays` launches of a captured graph on `stream`, under the same obligation
/// as [`enqueue`]: the addresses captured in it stay allocated until the replays complete.
pub(crate) fn replay(stream: &Stream, graph: &GraphExec, replays: u32) -> Result<(), DriverError> {
    for _ in 0..replays {
        // SAFETY: the graph was captured from `enqueue` calls whose buffers the caller
        // holds (by `Arc`) until it has synchronised the stream after these replays.
        unsafe { graph.launch(stream)? };
    }
    Ok(())
}
