//! Chunked, overlapped borrowed dispatch of large elementwise programs.
//!
//! An elementwise program (see `codegen::elementwise`) lets invocation `i` touch only
//! element `i` of each buffer, so its invocation range can run as independent chunks,
//! each needing only the same element range of every buffer. A dispatch whose inputs
//! total at least [`CHUNKED_MIN_INPUT_BYTES`] is cut into chunks of about
//! [`CHUNK_BYTES`] per buffer, which pipeline threads (nearly one per core, each with its
//! own stream, device block and pinned staging lane) take from a shared queue. Per chunk a
//! thread copies the inputs' element range into pinned memory and uploads it, zeroes the
//! outputs' range, launches the vector entry over the chunk's invocations and queues the
//! returned ranges' copies back; it copies them into the caller's buffers after it has
//! staged and launched its next chunk, so its own host copies overlap its transfers. The
//! host copies run on every thread at once (one core copies pageable memory at only
//! ~6.5 GB/s), and while one thread waits for its copies the others upload, compute and
//! read back, so both copy directions and the kernels overlap.
//!
//! Exactness: a chunk's device buffer for binding `b` holds elements
//! `[start, min(end, len_b))`; the kernel gets the binding's real element count and a
//! virtual base `chunk_buffer - start * stride`, so `gid`, `BufLen` and every bounds check
//! are those of the whole dispatch. Elements no invocation addresses (at or past the
//! invocation count) are filled on the host: zero for fresh outputs, the input bytes for
//! read-write buffers. Each stream has a fault word; all are checked once at the end, and
//! a fault returns no outputs.
//!
//! Whole bindings (`KernelBinding::whole`) are not cut: one device copy of each, filled
//! before the chunks start (input bytes or zeros), is passed with its real base to every
//! chunk's launch on every stream. Accumulated ones (reduction targets and histograms) are
//! read back once after all streams finished; their one order-independent operator makes
//! the result the same for any interleaving of the chunks' atomics. Broadcast ones (inputs
//! read at indices every invocation shares, such as a scale) are only read.

use super::cache::LoadedKernel;
use super::dispatch::BINDING_ALIGN;
use super::dispatch::{check_fault, nanos, shape_outputs, size_outputs, Prepared, Timing};
use super::launch::{self, LaunchArgs};
use super::metrics::Metrics;
use super::plan::{starts_zeroed, DispatchPlan};
use super::pool::{Block, Pooled, StreamSlot};
use super::staging::{join_all, DeviceToHost, HostToDevice, Lane, QueuedDownload, Workers};
use super::Core;
use crate::codegen::KernelAbi;
use crate::driver::{DriverError, Stream};
use crate::error::CudaError;
use std::ops::Range;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// Dispatches whose inputs total less than this take the ordinary path.
pub(crate) const CHUNKED_MIN_INPUT_BYTES: usize = 32 << 20;

/// Bytes of the widest buffer one chunk covers, by default.
const CHUNK_BYTES: usize = 2 << 20;

/// Most pipeline threads (and streams) one chunked dispatch runs on.
const MAX_PIPELINE_THREADS: usize = 15;

/// Environment variable overriding the pipeline thread count (1..=15; read once per
/// process, an invalid value keeps the default).
const PIPELINE_THREADS_ENV: &str = "VYRE_CUDA_PIPELINE_THREADS";

/// Environment variable overriding [`CHUNK_BYTES`] (64 KiB ..= 256 MiB; read once).
const PIPELINE_CHUNK_ENV: &str = "VYRE_CUDA_PIPELINE_CHUNK_BYTES";

fn env_number(name: &str, range: std::ops::RangeInclusive<usize>) -> Option<usize> {
    std::env::var(name)
        .ok()
        .and_then(|text| text.trim().parse::<usize>().ok())
        .filter(|value| range.contains(value))
}

/// Pipeline threads: every core but one (which the rest of the process keeps).
fn pipeline_threads() -> usize {
    static THREADS: OnceLock<usize> = OnceLock::new();
    *THREADS.get_or_init(|| {
        env_number(PIPELINE_THREADS_ENV, 1..=MAX_PIPELINE_THREADS).unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map_or(4, |cores| cores.get().saturating_sub(1))
                .clamp(2, MAX_PIPELINE_THREADS)
        })
    })
}

fn chunk_bytes() -> usize {
    static BYTES: OnceLock<usize> = OnceLock::new();
    *BYTES.get_or_init(|| {
        env_number(PIPELINE_CHUNK_ENV, (64 << 10)..=(256 << 20)).unwrap_or(CHUNK_BYTES)
    })
}

/// One chunk: its invocations and, per returned binding, the caller's bytes it fills.
struct Chunk<'o> {
    invocations: Range<u32>,
    outputs: Vec<&'o mut [u8]>,
}

/// How one chunked dispatch is cut and laid out.
struct Geometry {
    /// Invocations of the whole dispatch.
    total: u32,
    ranges: Vec<Range<u32>>,
    /// Pipeline threads (and streams).
    streams: usize,
    /// Indices (into `abi.bindings`) of the returned bindings, in output order.
    returned: Vec<usize>,
    /// Byte offset of each binding's chunk buffer inside a stream's block.
    offsets: Vec<usize>,
    /// Bytes of a stream's block: the chunk buffers, then the fault word.
    block_bytes: usize,
    /// Byte offset of each whole binding's buffer in the whole-buffer block.
    whole_offsets: Vec<usize>,
    /// Bytes of the whole-buffer block (0: no whole binding).
    whole_bytes: usize,
}

impl Geometry {
    /// The chunked layout of `prepared`; `None` when it should take the ordinary path (not
    /// one launch of an elementwise program with a vector entry over large inputs, or one
    /// chunk would cover it all).
    fn plan(prepared: &Prepared, inputs: &[&[u8]]) -> Option<Self> {
        let input_bytes: usize = inputs.iter().map(|input| input.len()).sum();
        let Prepared { kernel, plan, .. } = prepared;
        let abi = &kernel.abi;
        if input_bytes < CHUNKED_MIN_INPUT_BYTES
            || prepared.launches != 1
            || abi.vector_lanes == 0
            || kernel.vector_function().is_none()
        {
            return None;
        }
        let total = u64::from(plan.grid[0]) * u64::from(abi.workgroup_size[0]);
        let total = u32::try_from(total)
            .ok()
            .filter(|&total| plan.grid[1] == 1 && plan.grid[2] == 1 && total < u32::MAX - 64)?;
        let widest = abi
            .bindings
            .iter()
            .filter(|b| !b.whole())
            .map(|b| b.element_size)
            .max()
            .unwrap_or(4) as usize;
        // A multiple of 16 invocations, so every chunk's virtual bases stay 16-byte
        // aligned for every element size.
        let chunk = ((chunk_bytes() / widest).max(1 << 12) & !15) as u32;
        if total <= chunk {
            return None;
        }
        let streams = pipeline_threads().min(total.div_ceil(chunk) as usize);
        let mut geometry = Self {
            total,
            ranges: chunk_ranges(total, chunk, streams),
            streams,
            returned: (0..abi.bindings.len())
                .filter(|&b| abi.bindings[b].role.is_returned())
                .collect(),
            offsets: Vec::with_capacity(abi.bindings.len()),
            block_bytes: 0,
            whole_offsets: Vec::with_capacity(abi.bindings.len()),
            whole_bytes: 0,
        };
        for (binding, bytes) in abi.bindings.iter().zip(&plan.bindings) {
            geometry.offsets.push(geometry.block_bytes);
            geometry.whole_offsets.push(geometry.whole_bytes);
            if binding.whole() {
                geometry.whole_bytes += bytes.len.max(1).next_multiple_of(BINDING_ALIGN);
            } else {
                geometry.block_bytes += (chunk as usize * binding.element_size as usize)
                    .next_multiple_of(BINDING_ALIGN);
            }
        }
        // The fault word follows the chunk buffers.
        geometry.block_bytes += BINDING_ALIGN;
        Some(geometry)
    }

    fn fault_offset(&self) -> usize {
        self.block_bytes - BINDING_ALIGN
    }
}

/// The device resources of one chunked dispatch: per pipeline thread a stream and its
/// block, and the whole-buffer block. Dropped, they go back to their pools.
struct Lease {
    streams: Vec<(Pooled<StreamSlot>, Block)>,
    whole: Option<Block>,
}

impl Lease {
    /// Gives everything back to its pool, or after a driver error (`failed`) frees it
    /// (freeing waits for whatever is still queued).
    fn release(self, failed: bool) {
        for (slot, block) in self.streams {
            block.discard_if(failed);
            slot.discard_if(failed);
        }
        if let Some(block) = self.whole {
            block.discard_if(failed);
        }
    }

    fn first_stream(&self) -> &Stream {
        &self.streams[0].0.stream
    }

    /// Device address of each whole binding's buffer (0 for the others).
    fn whole_pointers(&self, abi: &KernelAbi, geometry: &Geometry) -> Vec<u64> {
        abi.bindings
            .iter()
            .zip(&geometry.whole_offsets)
            .map(|(binding, &offset)| match &self.whole {
                Some(block) if binding.whole() => block.ptr() + offset as u64,
                _ => 0,
            })
            .collect()
    }
}

/// One chunked dispatch, as every step of it (and every pipeline thread) sees it.
struct Shared<'a> {
    core: &'a Core,
    kernel: &'a LoadedKernel,
    plan: &'a DispatchPlan,
    inputs: &'a [&'a [u8]],
    geometry: &'a Geometry,
    /// Device address of each whole binding's buffer (0 for the others).
    whole: Vec<u64>,
}

impl Core {
    /// Runs `program` chunked when it is an elementwise program with large inputs;
    /// `Ok(None)` when the dispatch should take the ordinary path.
    pub(crate) fn run_chunked(
        &self,
        prepared: &Prepared,
        inputs: &[&[u8]],
        started: Instant,
        outputs: &mut Vec<Vec<u8>>,
    ) -> Result<Option<Timing>, CudaError> {
        let Some(geometry) = Geometry::plan(prepared, inputs) else {
            return Ok(None);
        };
        let lease = self.lease(&geometry).map_err(|e| self.driver_error(e))?;
        if lease
            .streams
            .iter()
            .map(|(_, block)| block)
            .chain(&lease.whole)
            .any(|block| block.ptr() % BINDING_ALIGN as u64 != 0)
        {
            // Never expected (device allocations are 256-byte aligned); the ordinary path
            // does not need the alignment.
            return Ok(None);
        }
        let code = self.pipeline(prepared, inputs, &geometry, &lease, outputs);
        lease.release(code.is_err());
        let code = code.map_err(|e| {
            outputs.clear();
            self.driver_error(e)
        })?;
        let wait_started = Instant::now();
        check_fault(self, code, outputs)?;
        shape_outputs(&prepared.kernel.abi, outputs);
        let enqueue_ns = nanos(started);
        Ok(Some(Timing::since(started, enqueue_ns, wait_started, None)))
    }

    /// A stream and block per pipeline thread, and the whole-buffer block.
    fn lease(&self, geometry: &Geometry) -> Result<Lease, DriverError> {
        let mut streams = Vec::with_capacity(geometry.streams);
        for _ in 0..geometry.streams {
            let slot = self.stream()?;
            let block = self.pool.take(&slot.stream, geometry.block_bytes)?;
            streams.push((slot, block));
        }
        let whole = if geometry.whole_bytes > 0 {
            let stream = &streams[0].0.stream;
            Some(self.pool.take(stream, geometry.whole_bytes)?)
        } else {
            None
        };
        Ok(Lease { streams, whole })
    }

    /// Fills the whole buffers, runs the pipeline threads and reads the accumulated ones
    /// back; returns the first non-zero fault word (0: none).
    fn pipeline(
        &self,
        prepared: &Prepared,
        inputs: &[&[u8]],
        geometry: &Geometry,
        lease: &Lease,
        outputs: &mut Vec<Vec<u8>>,
    ) -> Result<u32, DriverError> {
        let shared = Shared {
            core: self,
            kernel: &prepared.kernel,
            plan: &prepared.plan,
            inputs,
            geometry,
            whole: lease.whole_pointers(&prepared.kernel.abi, geometry),
        };
        shared.fill_whole(lease.first_stream())?;
        Metrics::bump(&self.metrics.chunked_dispatches);
        shared.prepare_outputs(outputs);
        let queue = Mutex::new(shared.split_outputs(outputs).into_iter());
        let results = std::thread::scope(|scope| {
            let handles: Vec<_> = lease
                .streams
                .iter()
                .map(|(slot, block)| {
                    let (shared, queue) = (&shared, &queue);
                    scope.spawn(move || shared.run_stream(&slot.stream, block.ptr(), queue))
                })
                .collect();
            join_all(handles, "chunked dispatch worker", "a pipeline thread")
        });
        let mut code = 0u32;
        for result in results {
            let word = result?;
            if code == 0 {
                code = word;
            }
        }
        if code == 0 {
            // Every stream has finished; the accumulators hold their final contents.
            shared.read_accumulators(lease.first_stream(), outputs)?;
        }
        Ok(code)
    }
}

/// Cuts `0..total` into chunks of `chunk` invocations, except that the first `streams`
/// (one per pipeline thread, which take them together) grow from `chunk / streams` to
/// `chunk`. Equal first chunks would finish their host copies all at once, leaving the
/// copy engine idle until then and then queueing all of them; staggered ones hand it
/// work from early on and keep the threads' later chunks out of step. Every chunk but the
/// last is a multiple of 16 invocations.
fn chunk_ranges(total: u32, chunk: u32, streams: usize) -> Vec<Range<u32>> {
    let streams = streams.max(1) as u64;
    let mut ranges = Vec::with_capacity(total.div_ceil(chunk) as usize + streams as usize);
    let mut start = 0u32;
    while start < total {
        let k = ranges.len() as u64;
        let size = if k < streams {
            ((u64::from(chunk) * (k + 1) / streams) as u32).next_multiple_of(16)
        } else {
            chunk
        };
        let end = start.saturating_add(size).min(total);
        ranges.push(start..end);
        start = end;
    }
    ranges
}

impl Shared<'_> {
    /// Gives each whole binding its contents (the input's bytes, or zeros for a fresh
    /// output) and waits, so every pipeline stream sees them.
    fn fill_whole(&self, stream: &Stream) -> Result<(), DriverError> {
        let mut uploads: smallvec::SmallVec<[HostToDevice<'_>; 4]> = smallvec::SmallVec::new();
        for (b, binding) in self.kernel.abi.bindings.iter().enumerate() {
            let bytes = &self.plan.bindings[b];
            if !binding.whole() || bytes.len == 0 {
                continue;
            }
            match bytes.input {
                Some(input) => uploads.push(HostToDevice {
                    dst: self.whole[b],
                    src: &self.inputs[input][..bytes.len],
                }),
                None => stream.memset_zero(self.whole[b], bytes.len)?,
            }
        }
        if !uploads.is_empty() {
            self.core.staging.upload_now(stream, &uploads)?;
        }
        stream.synchronize()
    }

    /// Copies the returned accumulated bindings into their outputs (all streams done).
    fn read_accumulators(
        &self,
        stream: &Stream,
        outputs: &mut [Vec<u8>],
    ) -> Result<(), DriverError> {
        let mut downloads: smallvec::SmallVec<[DeviceToHost<'_>; 4]> = smallvec::SmallVec::new();
        for (out, &b) in outputs.iter_mut().zip(&self.geometry.returned) {
            if self.kernel.abi.bindings[b].accumulated {
                let len = self.plan.bindings[b].len;
                downloads.push(DeviceToHost {
                    src: self.whole[b],
                    dst: &mut out[..len],
                });
            }
        }
        if downloads.is_empty() {
            return Ok(());
        }
        self.core.staging.download_now(stream, &mut downloads)
    }

    /// Sizes every returned buffer and fills the bytes no invocation addresses: zero for
    /// outputs, the input's bytes for read-write buffers (accumulated buffers are read back
    /// whole instead). A buffer that must grow is replaced by a fresh zeroed allocation,
    /// whose pages the pipeline threads then touch in parallel as they copy results in
    /// (instead of one thread zero-filling it first).
    fn prepare_outputs(&self, outputs: &mut Vec<Vec<u8>>) {
        size_outputs(&self.kernel.abi, outputs);
        for (out, &b) in outputs.iter_mut().zip(&self.geometry.returned) {
            let len = self.plan.bindings[b].len;
            if out.len() != len {
                if out.capacity() < len {
                    *out = vec![0u8; len];
                } else {
                    out.clear();
                    out.resize(len, 0);
                }
            }
            if self.kernel.abi.bindings[b].accumulated {
                continue;
            }
            let covered = self.covered_bytes(b);
            match self.plan.bindings[b].input {
                Some(input) => out[covered..].copy_from_slice(&self.inputs[input][covered..len]),
                None => out[covered..].fill(0),
            }
        }
    }

    /// Bytes of binding `b` that some invocation of the dispatch can address: whole
    /// elements below the invocation count (none of an accumulated binding, which is read
    /// back whole after the chunks). Bytes of a trailing partial element, which no chunk
    /// moves, are not covered: they come from the input like the rest.
    fn covered_bytes(&self, b: usize) -> usize {
        let binding = &self.kernel.abi.bindings[b];
        if binding.accumulated {
            return 0;
        }
        let elements = self.plan.bindings[b].elements as usize;
        (self.geometry.total as usize).min(elements) * binding.element_size as usize
    }

    /// Cuts each returned buffer's addressed bytes into the chunks' pieces.
    fn split_outputs<'o>(&self, outputs: &'o mut [Vec<u8>]) -> Vec<Chunk<'o>> {
        let returned = &self.geometry.returned;
        let mut chunks: Vec<Chunk<'o>> = self
            .geometry
            .ranges
            .iter()
            .map(|range| Chunk {
                invocations: range.clone(),
                outputs: Vec::with_capacity(returned.len()),
            })
            .collect();
        for (out, &b) in outputs.iter_mut().zip(returned) {
            let stride = self.kernel.abi.bindings[b].element_size as usize;
            let covered = self.covered_bytes(b);
            let mut rest: &'o mut [u8] = &mut out[..covered];
            for chunk in &mut chunks {
                let start = (chunk.invocations.start as usize * stride).min(covered);
                let end = (chunk.invocations.end as usize * stride).min(covered);
                let (piece, tail) = std::mem::take(&mut rest).split_at_mut(end - start);
                chunk.outputs.push(piece);
                rest = tail;
            }
        }
        chunks
    }

    /// One pipeline threadimpl Shared<'_> {
    /// One pipeline thread: takes chunks from `queue` until it is empty, uploading,
    /// launching and reading back each on `stream`; returns the stream's fault word.
    fn run_stream<'o>(
        &self,
        stream: &Stream,
        block: u64,
        queue: &Mutex<std::vec::IntoIter<Chunk<'o>>>,
    ) -> Result<u32, DriverError> {
        let core = self.core;
        let abi = &self.kernel.abi;
        let fault = block + self.geometry.fault_offset() as u64;
        if abi.fault_word {
            stream.memset_zero(fault, 4)?;
        }
        core.staging.with_lane(|lane| {
            let mut queued: Option<QueuedDownload<'o>> = None;
            while let Some(chunk) = queue.lock().ok().and_then(|mut queue| queue.next()) {
                self.launch_chunk(lane, stream, block, fault, &chunk.invocations)?;
                // The previous chunk's results: their copies were queued before this
                // chunk's upload on the same stream, so they are done or nearly; this
                // chunk's upload and kernel run while the host copies them out.
                if let Some(previous) = queued.take() {
                    core.staging.finish_download(lane, previous)?;
                }
                queued = self.queue_results(lane, stream, block, chunk)?;
            }
            if let Some(previous) = queued.take() {
                core.staging.finish_download(lane, previous)?;
            }
            let mut word = [0u8; 4];
            if abi.fault_word {
                let copy = DeviceToHost {
                    src: fault,
                    dst: &mut word,
                };
                core.staging
                    .download(lane, stream, &mut [copy], Workers::BySize)?;
            }
            stream.synchronize()?;
            Ok(u32::from_le_bytes(word))
        })
    }

    /// Stages one chunk's inputs (zeroing its outputs' ranges) and launches the vector
    /// entry over its invocations.
    fn launch_chunk(
        &self,
        lane: &mut Lane,
        stream: &Stream,
        block: u64,
        fault: u64,
        range: &Range<u32>,
    ) -> Result<(), DriverError> {
        let core = self.core;
        let abi = &self.kernel.abi;
        let mut uploads: smallvec::SmallVec<[HostToDevice<'_>; 8]> = smallvec::SmallVec::new();
        let mut args = LaunchArgs::default();
        for (b, binding) in abi.bindings.iter().enumerate() {
            let bytes = &self.plan.bindings[b];
            args.counts.push(bytes.elements);
            if binding.whole() {
                args.pointers.push(self.whole[b]);
                continue;
            }
            let stride = binding.element_size as usize;
            let lo = range.start.min(bytes.elements) as usize * stride;
            let hi = range.end.min(bytes.elements) as usize * stride;
            let dst = block + self.geometry.offsets[b] as u64;
            if hi > lo {
                match bytes.input {
                    Some(input) => uploads.push(HostToDevice {
                        dst,
                        src: &self.inputs[input][lo..hi],
                    }),
                    None if starts_zeroed(binding.role) => stream.memset_zero(dst, hi - lo)?,
                    None => {}
                }
            }
            // The virtual base: element `gid` of the whole buffer lands in the chunk.
            args.pointers
                .push(dst.wrapping_sub(range.start as u64 * stride as u64));
        }
        args.fault = abi.fault_word.then_some(fault);
        core.staging
            .upload(lane, stream, &uploads, Workers::CallingThread)?;
        launch::enqueue_range(stream, self.kernel, &args, range.clone())?;
        Metrics::bump(&core.metrics.launches);
        Ok(())
    }

    /// Queues the copies of one chunk's results back into its output pieces: into the
    /// lane's queued-download slots when they fit (returned, to finish later), else
    /// downloaded now.
    fn queue_results<'o>(
        &self,
        lane: &mut Lane,
        stream: &Stream,
        block: u64,
        mut chunk: Chunk<'o>,
    ) -> Result<Option<QueuedDownload<'o>>, DriverError> {
        let core = self.core;
        let downloads: Vec<DeviceToHost<'o>> = self
            .geometry
            .returned
            .iter()
            .zip(chunk.outputs.drain(..))
            .filter(|(_, piece)| !piece.is_empty())
            .map(|(&b, piece)| DeviceToHost {
                src: block + self.geometry.offsets[b] as u64,
                dst: piece,
            })
            .collect();
        if downloads.is_empty() {
            return Ok(None);
        }
        match core.staging.queue_download(lane, stream, downloads)? {
            Ok(download) => Ok(Some(download)),
            Err(mut downloads) => {
                let workers = Workers::CallingThread;
                core.staging
                    .download(lane, stream, &mut downloads, workers)?;
                Ok(None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::chunk_ranges;

    #[test]
    fn chunk_ranges_cover_the_range_with_a_staggered_first_round() {
        for (total, chunk, streams) in [
            (1u32 << 24, 1u32 << 19, 15usize),
            (9_000_005, 1 << 18, 15),
            (100_003, 4096, 4),
            (5000, 4096, 2),
            (u32::MAX - 65, 1 << 19, 15),
        ] {
            let ranges = chunk_ranges(total, chunk, streams);
            assert_eq!(ranges.first().map(|r| r.start), Some(0));
            assert_eq!(ranges.last().map(|r| r.end), Some(total));
            for pair in ranges.windows(2) {
                assert_eq!(pair[0].end, pair[1].start, "contiguous");
                assert_eq!(pair[0].end % 16, 0, "chunk starts stay 16-aligned");
            }
            assert!(ranges
                .iter()
                .all(|r| r.start < r.end && r.len() <= chunk as usize));
            let first: Vec<usize> = ranges.iter().take(streams).map(|r| r.len()).collect();
            let whole_round = first.len() == streams && ranges.len() > streams;
            if whole_round {
                assert!(first.windows(2).all(|w| w[0] < w[1]), "{first:?}");
                assert!(first[0] <= chunk as usize / streams + 16);
                assert!(ranges[streams..ranges.len() - 1]
                    .iter()
                    .all(|r| r.len() == chunk as usize));
            }
        }
    }
}
