//! Host <-> device transfers through pooled, page-locked staging buffers.
//!
//! Copies from or to ordinary (pageable) Rust memory are cut into pieces of at most one
//! chunk (4 MiB by default) and packed into pinned chunk buffers ("slots"). Each worker owns
//! two slots and alternates between them, so the host `memcpy` of piece k+1 overlaps the
//! DMA of piece k: an upload copies into one slot while the other is on the bus; a download
//! lets the device fill one slot while the host drains the other. Every slot has an event
//! recorded after its copies; a slot is only rewritten (or read back) after its event
//! completes, so a lane returned to the pool with copies still in flight is safe to reuse.
//!
//! Large transfers are split across several worker threads (each with its own slot pair,
//! all feeding the same stream), because one CPU core cannot `memcpy` as fast as PCIe moves
//! pinned data. Many small pieces share a slot, so a batch of small readbacks costs one wait.

use super::metrics::Metrics;
use super::pool::{Pool, PoolCounts, Pooled, Recycle};
use crate::driver::{Device, DriverError, StagingBuffer, Stream};
use std::sync::Arc;

/// Uploads this small (in total) go straight from pageable memory: the driver's own
/// pageable path is as fast for them.
pub(crate) const DIRECT_UPLOAD_MAX: usize = 64 * 1024;

/// Lanes kept idle for reuse.
const MAX_IDLE_LANES: usize = 16;

/// The lane slots a queued download fills ([`Staging::queue_download`]); one-thread
/// transfers use slots 0 and 1, so a thread can upload while its last download is queued.
const QUEUED_SLOTS: std::ops::Range<usize> = 2..4;

pub(crate) struct HostToDevice<'a> {
    pub(crate) dst: u64,
    pub(crate) src: &'a [u8],
}

pub(crate) struct DeviceToHost<'a> {
    pub(crate) src: u64,
    pub(crate) dst: &'a mut [u8],
}

/// Transfer tuning, fixed per backend.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StagingConfig {
    /// Bytes per pinned slot.
    pub(crate) chunk: usize,
    /// Most worker threads one transfer uses.
    pub(crate) workers: usize,
}

impl StagingConfig {
    pub(crate) fn new(chunk: usize, workers: usize) -> Self {
        Self {
            chunk: chunk.max(64 * 1024),
            workers: workers.clamp(1, 16),
        }
    }

    /// Workers for `total` bytes: one per chunk, at most `workers`.
    fn workers_for(&self, total: usize) -> usize {
        (total / self.chunk).clamp(1, self.workers)
    }
}

/// One pinned chunk of a lane, allocated on first use.
type Slot = Option<StagingBuffer>;

/// `slot`'s buffer with a fresh fill (after the previous fill's copies completed).
fn restart<'s>(
    slot: &'s mut Slot,
    staging: &Staging,
) -> Result<&'s mut StagingBuffer, DriverError> {
    let chunk = staging.config.chunk;
    if slot.is_none() {
        staging.metrics.pinned_allocation(chunk);
        *slot = Some(StagingBuffer::new(&staging.device, chunk)?);
    }
    let buffer = slot.as_mut().expect("allocated above");
    buffer.restart()?;
    Ok(buffer)
}

/// Pinned slots for one transfer at a time (two per worker). Dropping a lane waits for
/// its copies in flight (each [`StagingBuffer`] does).
pub(crate) struct Lane {
    slots: Vec<Slot>,
    /// The slot a one-thread transfer starts in: the one after the slot the previous
    /// one-thread transfer ended in, so a thread uploading piece after piece (the chunked
    /// pipeline) fills one slot while the other's copy is in flight.
    turn: usize,
}

impl Recycle for Lane {}

/// The pool of lanes, for one device.
pub(crate) struct Staging {
    config: StagingConfig,
    lanes: Pool<Lane>,
    device: Arc<Device>,
    metrics: Arc<Metrics>,
}

impl Staging {
    pub(crate) fn new(config: StagingConfig, device: Arc<Device>, metrics: Arc<Metrics>) -> Self {
        Self {
            config,
            lanes: Pool::new(MAX_IDLE_LANES),
            device,
            metrics,
        }
    }

    pub(crate) fn take(&self) -> Pooled<Lane> {
        // At least the queued-download slots; each is pinned on first use only.
        let slots = (2 * self.config.workers).max(QUEUED_SLOTS.end);
        let Ok(lane) = self.lanes.take(|| {
            Ok::<_, std::convert::Infallible>(Lane {
                slots: (0..slots).map(|_| None).collect(),
                turn: 0,
            })
        });
        lane
    }

    /// Runs `transfer` through a lane of its own, discarded if the transfer fails.
    pub(crate) fn with_lane<R>(
        &self,
        transfer: impl FnOnce(&mut Lane) -> Result<R, DriverError>,
    ) -> Result<R, DriverError> {
        let mut lane = self.take();
        let result = transfer(&mut lane);
        lane.discard_if(result.is_err());
        result
    }

    pub(crate) fn close(&self) {
        self.lanes.close();
    }

    pub(crate) fn counts(&self) -> PoolCounts {
        self.lanes.counts()
    }

    /// Pinned bytes held by idle lanes.
    pub(crate) fn idle_bytes(&self) -> usize {
        self.lanes.idle_sum(|lane| {
            lane.slots
                .iter()
                .filter_map(|slot| slot.as_ref().map(StagingBuffer::capacity))
                .sum()
        })
    }

    /// [`Staging::upload`] through a lane of its own.
    pub(crate) fn upload_now(
        &self,
        stream: &Stream,
        copies: &[HostToDevice<'_>],
    ) -> Result<(), DriverError> {
        self.with_lane(|lane| self.upload(lane, stream, copies, Workers::BySize))
    }

    /// [`Staging::download`] through a lane of its own.
    pub(crate) fn download_now(
        &self,
        stream: &Stream,
        copies: &mut [DeviceToHost<'_>],
    ) -> Result<(), DriverError> {
        self.with_lane(|lane| self.download(lane, stream, copies, Workers::BySize))
    }

    /// Enqueues `copies` on `stream`. When this returns, the source bytes have been read
    /// (into the driver's or our staging memory), so the caller may drop or reuse them; the
    /// device copies complete in stream order.
    pub(crate) fn upload(
        &self,
        lane: &mut Lane,
        stream: &Stream,
        copies: &[HostToDevice<'_>],
        workers: Workers,
    ) -> Result<(), DriverError> {
        let total: usize = copies.iter().map(|c| c.src.len()).sum();
        Metrics::add(&self.metrics.bytes_to_device, total as u64);
        if total <= DIRECT_UPLOAD_MAX {
            for copy in copies {
                stream.copy_to_device(copy.dst, copy.src)?;
            }
            return Ok(());
        }
        Metrics::add(&self.metrics.staged_bytes, total as u64);
        let chunk = self.config.chunk;
        let pieces: Vec<HostToDevice<'_>> = copies
            .iter()
            .flat_map(|copy| {
                copy.src
                    .chunks(chunk)
                    .enumerate()
                    .map(move |(k, src)| HostToDevice {
                        dst: copy.dst + (k * chunk) as u64,
                        src,
                    })
            })
            .collect();
        let workers = self.workers(workers, total);
        spread(
            self,
            lane,
            stream,
            pieces,
            |p| p.src.len(),
            workers,
            upload_worker,
        )
    }

    /// Enqueues `copies` on `stream` behind the work already queued there and waits for
    /// them: when this returns `Ok`, every destination holds its bytes.
    pub(crate) fn download(
        &self,
        lane: &mut Lane,
        stream: &Stream,
        copies: &mut [DeviceToHost<'_>],
        workers: Workers,
    ) -> Result<(), DriverError> {
        let total: usize = copies.iter().map(|c| c.dst.len()).sum();
        Metrics::add(&self.metrics.bytes_to_host, total as u64);
        if total == 0 {
            return Ok(());
        }
        let pieces = cut_downloads(
            copies.iter_mut().map(|c| (c.src, &mut *c.dst)),
            self.config.chunk,
        );
        let workers = self.workers(workers, total);
        spread(
            self,
            lane,
            stream,
            pieces,
            |p| p.dst.len(),
            workers,
            download_worker,
        )
    }
}

/// A download whose device-to-host copies are queued on a stream but not yet waited for
/// ([`Staging::queue_download`]).
pub(crate) struct QueuedDownload<'d> {
    /// Per queued slot: where each destination's bytes land in it.
    waiting: [Vec<(usize, &'d mut [u8])>; 2],
}

impl Staging {
    /// Queues `copies` on `stream` behind the work already there, into the lane's two
    /// queued-download slots, and returns without waiting; [`Staging::finish_download`]
    /// waits and copies the bytes out. The calling thread can meanwhile stage its next
    /// upload (the chunked pipeline). When the copies need more than those two slots hold,
    /// nothing is queued and they come back, cut into slot-sized pieces, as `Ok(Err(..))`.
    pub(crate) fn queue_download<'d>(
        &self,
        lane: &mut Lane,
        stream: &Stream,
        copies: Vec<DeviceToHost<'d>>,
    ) -> Result<Result<QueuedDownload<'d>, Vec<DeviceToHost<'d>>>, DriverError> {
        let chunk = self.config.chunk;
        let pieces = cut_downloads(copies.into_iter().map(|c| (c.src, c.dst)), chunk);
        // Each piece's slot: packed in order, at most one slot's bytes per slot.
        let mut slots = Vec::with_capacity(pieces.len());
        let (mut slot, mut used) = (0usize, 0usize);
        for piece in &pieces {
            if used + piece.dst.len() > chunk {
                slot += 1;
                used = 0;
            }
            slots.push(slot);
            used += piece.dst.len();
        }
        if slot >= QUEUED_SLOTS.len() {
            return Ok(Err(pieces));
        }
        let total: usize = pieces.iter().map(|p| p.dst.len()).sum();
        Metrics::add(&self.metrics.bytes_to_host, total as u64);
        let mut queued = QueuedDownload {
            waiting: [Vec::new(), Vec::new()],
        };
        for (piece, slot) in pieces.into_iter().zip(slots) {
            let lane_slot = &mut lane.slots[QUEUED_SLOTS.start + slot];
            if queued.waiting[slot].is_empty() {
                // The slot's first piece: wait for its previous fill (finished, normally).
                restart(lane_slot, self)?;
            }
            let buffer = lane_slot.as_mut().expect("restarted above");
            let at = buffer.download(stream, piece.src, piece.dst.len())?;
            queued.waiting[slot].push((at, piece.dst));
        }
        Ok(Ok(queued))
    }

    /// Waits for a queued download and copies its bytes to their destinations.
    pub(crate) fn finish_download(
        &self,
        lane: &mut Lane,
        queued: QueuedDownload<'_>,
    ) -> Result<(), DriverError> {
        for (slot, mut waiting) in queued.waiting.into_iter().enumerate() {
            drain(&mut lane.slots[QUEUED_SLOTS.start + slot], &mut waiting)?;
        }
        Ok(())
    }

    fn workers(&self, policy: Workers, total: usize) -> usize {
        match policy {
            Workers::BySize => self.config.workers_for(total),
            Workers::CallingThread => 1,
        }
    }
}

/// Device-to-host copies cut, in order, into pieces of at most `chunk` bytes.
fn cut_downloads<'d>(
    copies: impl IntoIterator<Item = (u64, &'d mut [u8])>,
    chunk: usize,
) -> Vec<DeviceToHost<'d>> {
    let mut pieces = Vec::new();
    for (src, dst) in copies {
        for (k, dst) in dst.chunks_mut(chunk).enumerate() {
            pieces.push(DeviceToHost {
                src: src + (k * chunk) as u64,
                dst,
            });
        }
    }
    pieces
}

/// How many threads one transfer uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Workers {
    /// One per chunk of the transfer, at most the configured number.
    BySize,
    /// Only the calling thread (callers that already run one transfer per thread).
    CallingThread,
}

/// Joins scoped worker threads, in order; a thread that panicked reports a driver-style
/// error from `call` saying `what` panicked.
pub(crate) fn join_all<T>(
    handles: Vec<std::thread::ScopedJoinHandle<'_, Result<T, DriverError>>>,
    call: &'static str,
    what: &str,
) -> Vec<Result<T, DriverError>> {
    let panicked = || {
        let code = cudarc::driver::sys::CUresult::CUDA_ERROR_UNKNOWN as u32;
        Err(DriverError::from_code(call, code).with_description(format!("{what} panicked")))
    };
    let joined = handles.into_iter();
    joined
        .map(|h| h.join().unwrap_or_else(|_| panicked()))
        .collect()
}

/// A transfer worker: copies its pieces on `stream` through its slots, filling them in turn
/// from the given one; returns the index of the last slot filled.
type Worker<T> = fn(&Staging, &Stream, &mut [Slot], Vec<T>, usize) -> Result<usize, DriverError>;

/// Runs `worker` over `pieces`: on the calling thread through the lane's first two slots
/// (from the slot after the one its last such transfer ended in), or split over `workers`
/// threads with two slots each.
fn spread<T: Send>(
    staging: &Staging,
    lane: &mut Lane,
    stream: &Stream,
    pieces: Vec<T>,
    len: impl Fn(&T) -> usize,
    workers: usize,
    worker: Worker<T>,
) -> Result<(), DriverError> {
    if workers == 1 {
        let last = worker(staging, stream, &mut lane.slots[..2], pieces, lane.turn)?;
        lane.turn = (last + 1) % 2;
        return Ok(());
    }
    let groups = partition(pieces, len, workers);
    let results = std::thread::scope(|scope| {
        let handles: Vec<_> = groups
            .into_iter()
            .zip(lane.slots.chunks_mut(2))
            .map(|(group, slots)| {
                scope.spawn(move || worker(staging, stream, slots, group, 0).map(drop))
            })
            .collect();
        join_all(handles, "staging worker", "a staging worker thread")
    });
    results.into_iter().collect()
}

/// Splits `items` (in order) into at most `groups` runs of roughly equal bytes.
fn partition<T>(items: Vec<T>, len: impl Fn(&T) -> usize, groups: usize) -> Vec<Vec<T>> {
    let total: usize = items.iter().map(&len).sum();
    let target = total.div_ceil(groups.max(1)).max(1);
    let mut out: Vec<Vec<T>> = vec![Vec::new()];
    let mut filled = 0usize;
    for item in items {
        if filled >= target && out.len() < groups {
            out.push(Vec::new());
            filled = 0;
        }
        filled += len(&item);
        out.last_mut().expect("one group exists").push(item);
    }
    out
}

/// The slot a piece of `len` bytes goes into when `slots` are filled in turn from `first`,
/// and its buffer: the open slot (`open`) while it has room, else the next one, restarted
/// after `reuse` has emptied it.
fn slot_for<'s>(
    staging: &Staging,
    slots: &'s mut [Slot],
    open: &mut Option<usize>,
    first: usize,
    len: usize,
    reuse: impl FnOnce(usize, &mut Slot) -> Result<(), DriverError>,
) -> Result<(usize, &'s mut StagingBuffer), DriverError> {
    let fits = |current: usize| {
        slots[current]
            .as_ref()
            .is_some_and(|b| b.remaining() >= len)
    };
    let current = match *open {
        Some(current) if fits(current) => current,
        _ => {
            let next = open.map_or(first, |current| current + 1) % slots.len();
            reuse(next, &mut slots[next])?;
            restart(&mut slots[next], staging)?;
            *open = Some(next);
            next
        }
    };
    Ok((current, slots[current].as_mut().expect("restarted")))
}

/// Copies `pieces` through `slots`, filling them in turn from `first`; returns the index
/// of the last slot filled.
fn upload_worker(
    staging: &Staging,
    stream: &Stream,
    slots: &mut [Slot],
    pieces: Vec<HostToDevice<'_>>,
    first: usize,
) -> Result<usize, DriverError> {
    let mut open = None;
    for piece in &pieces {
        let len = piece.src.len();
        let (_, buffer) = slot_for(staging, slots, &mut open, first, len, |_, _| Ok(()))?;
        buffer.upload(stream, piece.src, piece.dst)?;
    }
    Ok(open.unwrap_or(first % slots.len()))
}

/// Copies the bytes `entries` wait for out of `slot`'s buffer (waiting for its copies).
fn drain(slot: &mut Slot, entries: &mut Vec<(usize, &mut [u8])>) -> Result<(), DriverError> {
    if let Some(buffer) = slot.as_mut() {
        for (at, dst) in entries.drain(..) {
            dst.copy_from_slice(buffer.read(at, dst.len())?);
        }
    }
    Ok(())
}

/// Copies `pieces` back through `slots`, filling them in turn from `first`, and waits for
/// them; returns the index of the last slot filled.
fn download_worker(
    staging: &Staging,
    stream: &Stream,
    slots: &mut [Slot],
    pieces: Vec<DeviceToHost<'_>>,
    first: usize,
) -> Result<usize, DriverError> {
    // Destinations waiting for each slot's copies: (offset in the slot, destination).
    let mut waiting: Vec<Vec<(usize, &mut [u8])>> = (0..slots.len()).map(|_| Vec::new()).collect();
    let mut open = None;
    for piece in pieces {
        let len = piece.dst.len();
        let reuse = |index: usize, slot: &mut Slot| drain(slot, &mut waiting[index]);
        let (current, buffer) = slot_for(staging, slots, &mut open, first, len, reuse)?;
        let at = buffer.download(stream, piece.src, len)?;
        waiting[current].push((at, piece.dst));
    }
    // Drain in the order the slots were filled.
    let current = open.unwrap_or(first % slots.len());
    for step in 1..=slots.len() {
        let index = (current + step) % slots.len();
        drain(&mut slots[index], &mut waiting[index])?;
    }
    Ok(current)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_keeps_order_and_balances_bytes() {
        let groups = partition((1..=8).collect::<Vec<usize>>(), |x| *x, 3);
        assert!(groups.len() <= 3);
        let flat: Vec<usize> = groups.iter().flatten().copied().collect();
        assert_eq!(flat, (1..=8).collect::<Vec<_>>());
        let groups = partition(vec![4usize; 8], |x| *x, 4);
        assert_eq!(groups.len(), 4);
        assert!(groups.iter().all(|g| g.len() == 2));
        assert_eq!(partition(Vec::<usize>::new(), |x| *x, 4).len(), 1);
    }

    #[test]
    fn downloads_are_cut_in_order_into_chunk_sized_pieces() {
        let (mut a, mut b) = (vec![0u8; 10], vec![0u8; 3]);
        let pieces = cut_downloads([(1000, &mut a[..]), (5000, &mut b[..])], 4);
        let shape: Vec<(u64, usize)> = pieces.iter().map(|p| (p.src, p.dst.len())).collect();
        assert_eq!(shape, [(1000, 4), (1004, 4), (1008, 2), (5000, 3)]);
    }

    #[test]
    fn workers_scale_with_size() {
        let config = StagingConfig::new(8 << 20, 4);
        assert_eq!(config.workers_for(1 << 20), 1);
        assert_eq!(config.workers_for(16 << 20), 2);
        assert_eq!(config.workers_for(1 << 30), 4);
        assert_eq!(StagingConfig::new(1, 0).workers, 1);
    }
}
