//! The one place that enqueues kernels: arguments are built from the kernel's own ABI, so
//! their number and types always match what the emitter declared.

use super::cache::LoadedKernel;
use super::metrics::Metrics;
use crate::driver::{DriverError, GraphExec, KernelArg, Stream};

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

/// How a program split at grid-wide barriers may be launched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GridSyncLaunch {
    /// One cooperative launch of the single-kernel form wherever the grid fits resident.
    CooperativeWhereItFits,
    /// Always one launch per segment.
    Split,
}

/// Enqueues `launches` back-to-back launches of `kernel` on `stream`, and counts how
/// programs with grid-wide barriers ran in `metrics`.
///
/// The caller keeps every address in `args` allocated until the launches complete (it
/// synchronises `stream`, or an event recorded after them, before releasing memory).
pub(crate) fn enqueue(
    stream: &Stream,
    kernel: &LoadedKernel,
    grid: [u32; 3],
    args: &LaunchArgs,
    launches: u32,
    mode: GridSyncLaunch,
    metrics: &Metrics,
) -> Result<(), DriverError> {
    let abi = &kernel.abi;
    if args.pointers.len() != abi.bindings.len() || args.counts.len() != abi.bindings.len() {
        return Err(mismatch("binding count"));
    }
    if args.fault.is_some() != abi.fault_word {
        return Err(mismatch("fault word"));
    }
    // Every pointer, every element count, then the fault word: the emitter's order.
    let mut kernel_args: smallvec::SmallVec<[KernelArg; 24]> = smallvec::SmallVec::new();
    kernel_args.extend(args.pointers.iter().map(|p| KernelArg::U64(*p)));
    kernel_args.extend(args.counts.iter().map(|c| KernelArg::U32(*c)));
    if let Some(fault) = args.fault {
        kernel_args.push(KernelArg::U64(fault));
    }
    let blocks = grid.iter().map(|&d| u64::from(d)).product::<u64>();
    let cooperative = kernel.cooperative.as_ref().filter(|entry| {
        mode == GridSyncLaunch::CooperativeWhereItFits && blocks <= entry.max_blocks
    });
    for _ in 0..launches {
        match cooperative {
            Some(entry) => {
                stream.launch_cooperative(
                    &entry.function,
                    grid,
                    abi.workgroup_size,
                    &kernel_args,
                )?;
                Metrics::bump(&metrics.grid_sync_cooperative);
            }
            None => {
                // A program split at grid-wide barriers has one entry per segment; stream
                // order makes each segment see every write of the one before.
                for function in &kernel.functions {
                    stream.launch(function, grid, abi.workgroup_size, &kernel_args)?;
                }
                if kernel.functions.len() > 1 {
                    Metrics::bump(&metrics.grid_sync_split);
                }
            }
        }
    }
    Ok(())
}

/// Enqueues `replays` launches of a captured graph on `stream`, under the same obligation
/// as [`enqueue`]: the addresses captured in it stay allocated until the replays complete.
pub(crate) fn replay(stream: &Stream, graph: &GraphExec, replays: u32) -> Result<(), DriverError> {
    for _ in 0..replays {
        // The caller holds the captured buffers (by `Arc`) until it has synchronised.
        graph.launch(stream)?;
    }
    Ok(())
}
