//! The one place that enqueues kernels: arguments are built from the kernel's own ABI, so
//! their number and types always match what the emitter declared.

use super::cache::{CooperativeEntry, LoadedKernel};
use super::metrics::Metrics;
use crate::codegen::{KernelParam, VECTOR_LANES};
use crate::driver::{DriverError, Function, GraphExec, KernelArg, Stream};
use std::ops::Range;

/// Device addresses and element counts for one launch, in the kernel's declaration order.
#[derive(Debug, Clone, Default)]
pub(crate) struct LaunchArgs {
    pub(crate) pointers: smallvec::SmallVec<[u64; 8]>,
    pub(crate) counts: smallvec::SmallVec<[u32; 8]>,
    /// The fault word's address; required exactly when the kernel has one.
    pub(crate) fault: Option<u64>,
    /// The meeting points of a peer-synced fold; required exactly when the kernel is one.
    pub(crate) peer: Option<PeerArgs>,
}

/// The `Peer*` parameters of a peer-synced fold (`codegen::KernelParam`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PeerArgs {
    pub(crate) slots: u64,
    pub(crate) flags: u64,
    pub(crate) counter: u64,
    pub(crate) epoch: u64,
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

/// Enqueues `launches` back-to-back launches of `kernel` on `stream`, and counts them (and
/// how programs with grid-wide barriers ran) in `metrics`.
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
    check_args(abi, args)?;
    // The scalar and cooperative entries' arguments (the vector entry builds its own).
    let scalar_args = || kernel_args(abi.params(), args, &(0..0));
    match choose(kernel, grid, args, mode)? {
        Entries::Vector(invocations) => {
            launch_vector(stream, kernel, args, &invocations, launches, u32::MAX)?;
            count_vector_launches(metrics, launches);
            return Ok(());
        }
        Entries::Cooperative(entry) => {
            let kernel_args = scalar_args();
            for _ in 0..launches {
                let function = &entry.function;
                stream.launch_cooperative(function, grid, abi.workgroup_size, &kernel_args)?;
                Metrics::bump(&metrics.grid_sync_cooperative);
            }
        }
        Entries::Scalar(functions) => {
            let kernel_args = scalar_args();
            for _ in 0..launches {
                // A program split at grid-wide barriers has one entry per segment; stream
                // order makes each segment see every write of the one before.
                for function in functions {
                    stream.launch(function, grid, abi.workgroup_size, &kernel_args)?;
                }
                if functions.len() > 1 {
                    Metrics::bump(&metrics.grid_sync_split);
                }
            }
        }
    }
    Metrics::add(&metrics.launches, u64::from(launches));
    Ok(())
}

/// Compiles the modules a launch of `kernel` over `grid` and `args` would run that are not
/// loaded yet (`cache::LazyModule`), without launching: before a stream capture, so that
/// no module is loaded while the stream only records.
pub(crate) fn load_entries(
    kernel: &LoadedKernel,
    grid: [u32; 3],
    args: &LaunchArgs,
    mode: GridSyncLaunch,
) -> Result<(), DriverError> {
    choose(kernel, grid, args, mode).map(drop)
}

/// The entries one launch runs.
enum Entries<'k> {
    /// The vector entry, over these invocations.
    Vector(Range<u32>),
    /// The single-kernel form of a split program, its grid resident at once.
    Cooperative(&'k CooperativeEntry),
    /// The segment entries (or the checked variant), in order.
    Scalar(&'k [Function]),
}

/// What a launch of `kernel` over `grid` and `args` runs, loading its module if needed.
fn choose<'k>(
    kernel: &'k LoadedKernel,
    grid: [u32; 3],
    args: &LaunchArgs,
    mode: GridSyncLaunch,
) -> Result<Entries<'k>, DriverError> {
    if let Some(invocations) = vector_invocations(kernel, grid, args) {
        return Ok(Entries::Vector(invocations));
    }
    if mode == GridSyncLaunch::CooperativeWhereItFits {
        let blocks = grid.iter().map(|&d| u64::from(d)).product::<u64>();
        if let Some(entry) = kernel.cooperative_for(blocks)? {
            return Ok(Entries::Cooperative(entry));
        }
    }
    kernel.scalar_functions(&args.counts).map(Entries::Scalar)
}

/// `args` has one pointer and count per binding, and a fault word exactly when the kernel
/// takes one.
fn check_args(abi: &crate::codegen::KernelAbi, args: &LaunchArgs) -> Result<(), DriverError> {
    if args.pointers.len() != abi.bindings.len() || args.counts.len() != abi.bindings.len() {
        return Err(mismatch("binding count"));
    }
    if args.fault.is_some() != abi.fault_word {
        return Err(mismatch("fault word"));
    }
    if args.peer.is_some() != abi.peer_sync.is_some() {
        return Err(mismatch("peer meeting points"));
    }
    Ok(())
}

/// The argument of each of the entry's `params` (the emitter's declaration order, see
/// `KernelAbi::params`), from `args` (which passed [`check_args`]) and, for the vector
/// entry, `invocations`.
fn kernel_args(
    params: impl Iterator<Item = KernelParam>,
    args: &LaunchArgs,
    invocations: &Range<u32>,
) -> smallvec::SmallVec<[KernelArg; 24]> {
    params
        .map(|param| match param {
            KernelParam::Pointer(index) => KernelArg::U64(args.pointers[index]),
            KernelParam::Count(index) => KernelArg::U32(args.counts[index]),
            KernelParam::FaultArea => KernelArg::U64(args.fault.unwrap_or(0)),
            KernelParam::InvocationBase => KernelArg::U32(invocations.start),
            KernelParam::InvocationEnd => KernelArg::U32(invocations.end),
            KernelParam::PeerSlots => KernelArg::U64(args.peer.map_or(0, |p| p.slots)),
            KernelParam::PeerFlags => KernelArg::U64(args.peer.map_or(0, |p| p.flags)),
            KernelParam::PeerCounter => KernelArg::U64(args.peer.map_or(0, |p| p.counter)),
            KernelParam::PeerEpoch => KernelArg::U64(args.peer.map_or(0, |p| p.epoch)),
        })
        .collect()
}

/// The invocation range the vector entry would run for this launch, when it may: the
/// kernel has one, the grid is 1-D with at least `CudaOptions::vector_min_invocations`
/// invocations, and [`vector_fits`] holds for `args`.
fn vector_invocations(
    kernel: &LoadedKernel,
    grid: [u32; 3],
    args: &LaunchArgs,
) -> Option<Range<u32>> {
    if kernel.vector.is_none() || grid[1] != 1 || grid[2] != 1 {
        return None;
    }
    let total = u64::from(grid[0]) * u64::from(kernel.abi.workgroup_size[0]);
    let total = u32::try_from(total).ok()?;
    let invocations = 0..total;
    // Small launches keep the scalar entry: the vector form only pays off in bandwidth,
    // and its module is compiled on first use.
    let min = kernel
        .vector
        .as_ref()
        .map_or(u32::MAX, |v| v.min_invocations);
    (total >= min && vector_fits(kernel, args, &invocations) && kernel.vector_function().is_some())
        .then_some(invocations)
}

/// Whether the vector entry may run `invocations` over `args`: the range ends early
/// enough that `end + lanes` does not wrap, starts on a lane boundary, every binding base
/// (as passed: a chunk's base may be virtual, `chunk - start * stride`) but a broadcast
/// one (read with scalar loads only) is 16-byte aligned, and no two bindings' addressed
/// bytes (elements `start .. min(end, count)`; every element of an accumulated or
/// broadcast binding) overlap: the vector entry reads never-stored buffers ahead of the
/// stores, which an alias would make visible.
pub(crate) fn vector_fits(
    kernel: &LoadedKernel,
    args: &LaunchArgs,
    invocations: &Range<u32>,
) -> bool {
    let abi = &kernel.abi;
    if kernel.vector.is_none()
        || invocations.end.checked_add(VECTOR_LANES).is_none()
        || invocations.start % VECTOR_LANES != 0
        || (args.pointers.iter().zip(&abi.bindings)).any(|(p, b)| !b.broadcast && p % 16 != 0)
    {
        return false;
    }
    let spans: smallvec::SmallVec<[(u64, u64); 8]> = args
        .pointers
        .iter()
        .zip(&args.counts)
        .zip(&abi.bindings)
        .map(|((&p, &count), binding)| {
            let stride = u64::from(binding.element_size);
            // An accumulated or broadcast binding may be addressed at any element.
            let (first, end) = if binding.whole() {
                (0, u64::from(count))
            } else {
                (
                    u64::from(invocations.start.min(count)),
                    u64::from(invocations.end.min(count)),
                )
            };
            (p.wrapping_add(first * stride), p.wrapping_add(end * stride))
        })
        .collect();
    spans.iter().enumerate().all(|(i, a)| {
        spans[i + 1..]
            .iter()
            .all(|b| a.0 >= a.1 || b.0 >= b.1 || a.1 <= b.0 || b.1 <= a.0)
    })
}

/// Enqueues `launches` launches of the vector entry over `invocations`, on at most
/// `max_blocks` blocks (the entry loops over what a smaller grid leaves).
fn launch_vector(
    stream: &Stream,
    kernel: &LoadedKernel,
    args: &LaunchArgs,
    invocations: &Range<u32>,
    launches: u32,
    max_blocks: u32,
) -> Result<(), DriverError> {
    let function = kernel
        .vector_function()
        .ok_or_else(|| mismatch("vector entry"))?;
    let threads = (invocations.end.saturating_sub(invocations.start)).div_ceil(VECTOR_LANES);
    let blocks = threads.div_ceil(kernel.abi.workgroup_size[0]);
    let option = kernel.vector.as_ref().map_or(u32::MAX, |v| v.max_blocks);
    let grid = [blocks.min(max_blocks).min(option).max(1), 1, 1];
    let kernel_args = kernel_args(kernel.abi.vector_params(), args, invocations);
    for _ in 0..launches {
        stream.launch(function, grid, kernel.abi.workgroup_size, &kernel_args)?;
    }
    Ok(())
}

/// Enqueues one launch of the vector entry over `invocations` (a chunk of a larger
/// dispatch: `args.pointers` are then the chunk's virtual bases). The caller checked
/// [`vector_fits`] and keeps the memory alive as for [`enqueue`].
pub(crate) fn enqueue_range(
    stream: &Stream,
    kernel: &LoadedKernel,
    args: &LaunchArgs,
    invocations: Range<u32>,
) -> Result<(), DriverError> {
    check_args(&kernel.abi, args)?;
    if !vector_fits(kernel, args, &invocations) {
        return Err(mismatch("vector entry range or alignment"));
    }
    launch_vector(stream, kernel, args, &invocations, 1, u32::MAX)
}

/// [`enqueue`] of one launch over a 1-D `grid` whose vector entry, where it runs, uses at
/// most `max_blocks` blocks, each thread looping over several groups of invocations.
pub(crate) fn enqueue_capped(
    stream: &Stream,
    kernel: &LoadedKernel,
    grid: [u32; 3],
    args: &LaunchArgs,
    mode: GridSyncLaunch,
    max_blocks: u32,
    metrics: &Metrics,
) -> Result<(), DriverError> {
    let Some(invocations) = vector_invocations(kernel, grid, args) else {
        return enqueue(stream, kernel, grid, args, 1, mode, metrics);
    };
    check_args(&kernel.abi, args)?;
    launch_vector(stream, kernel, args, &invocations, 1, max_blocks)?;
    count_vector_launches(metrics, 1);
    Ok(())
}

/// Enqueues one launch of a peer-synced fold's vector entry (the only entry that meets
/// the peers) over invocations `0..values` on at most `max_blocks` blocks. Fails, having
/// enqueued nothing, where the entry cannot run these bindings ([`vector_fits`]).
pub(crate) fn enqueue_peer_synced(
    stream: &Stream,
    kernel: &LoadedKernel,
    args: &LaunchArgs,
    values: u32,
    max_blocks: u32,
    metrics: &Metrics,
) -> Result<(), DriverError> {
    check_args(&kernel.abi, args)?;
    let invocations = 0..values;
    if args.peer.is_none() || !vector_fits(kernel, args, &invocations) {
        return Err(mismatch("peer-synced fold bindings"));
    }
    launch_vector(stream, kernel, args, &invocations, 1, max_blocks)?;
    count_vector_launches(metrics, 1);
    Ok(())
}

fn count_vector_launches(metrics: &Metrics, launches: u32) {
    Metrics::add(&metrics.vector_launches, u64::from(launches));
    Metrics::add(&metrics.launches, u64::from(launches));
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
