//! Pools: transient device memory and streams (each with its events).
//!
//! Transient device memory (the buffers of one borrowed dispatch, fault words) comes from
//! one of two pools, chosen once per backend ([`PoolKind`]):
//!
//! * [`PoolKind::SizeClasses`] (default): power-of-two blocks kept after a dispatch and
//!   reused by the next one that fits, bounded by idle bytes. A warm dispatch of a known
//!   shape makes no driver allocation call at all.
//! * [`PoolKind::StreamOrdered`]: the driver's stream-ordered pool (`cuMemAllocAsync` /
//!   `cuMemFreeAsync`) with a raised release threshold, so freed memory stays in the
//!   driver's pool. Every dispatch still makes two (cheap) driver calls.
//!
//! `VYRE_CUDA_POOL=stream-ordered` selects the second (the benchmark compares both).

use super::metrics::Metrics;
use crate::driver::{Device, DeviceAlloc, DriverError, Event, Stream, StreamOrderedAlloc};
use std::sync::{Arc, Mutex};

/// Smallest block the size-class pool allocates; sizes round up to powers of two from here.
const MIN_BLOCK: usize = 64 * 1024;

/// Which pool serves transient device memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolKind {
    /// Power-of-two blocks reused across dispatches (no driver call when warm).
    SizeClasses,
    /// The driver's stream-ordered pool (`cuMemAllocAsync`).
    StreamOrdered,
}

impl PoolKind {
    /// Parses `VYRE_CUDA_POOL` (`size-classes` or `stream-ordered`).
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim() {
            "size-classes" | "classes" => Some(Self::SizeClasses),
            "stream-ordered" | "driver" => Some(Self::StreamOrdered),
            _ => None,
        }
    }
}

/// One dispatch's transient device memory.
#[derive(Debug)]
pub(crate) enum Block {
    Pooled(DeviceAlloc),
    StreamOrdered(StreamOrderedAlloc),
}

impl Block {
    pub(crate) fn ptr(&self) -> u64 {
        match self {
            Self::Pooled(block) => block.ptr(),
            Self::StreamOrdered(block) => block.ptr(),
        }
    }
}

pub(crate) struct DevicePool {
    kind: PoolKind,
    free: Mutex<Vec<DeviceAlloc>>,
    /// Most bytes kept idle in the pool; larger returns are freed.
    max_idle_bytes: usize,
}

impl DevicePool {
    pub(crate) fn new(kind: PoolKind, max_idle_bytes: usize) -> Self {
        Self {
            kind,
            free: Mutex::new(Vec::new()),
            max_idle_bytes,
        }
    }

    /// At least `bytes` of device memory usable by work queued on `stream` from now on.
    pub(crate) fn take(
        &self,
        device: &Arc<Device>,
        stream: &Stream,
        bytes: usize,
        metrics: &Metrics,
    ) -> Result<Block, DriverError> {
        if self.kind == PoolKind::StreamOrdered {
            Metrics::bump(&metrics.device_allocations);
            Metrics::add(&metrics.device_allocation_bytes, bytes as u64);
            return StreamOrderedAlloc::new(stream, bytes).map(Block::StreamOrdered);
        }
        if let Ok(mut free) = self.free.lock() {
            let best = free
                .iter()
                .enumerate()
                .filter(|(_, block)| block.len() >= bytes)
                .min_by_key(|(_, block)| block.len())
                .map(|(index, _)| index);
            if let Some(index) = best {
                Metrics::bump(&metrics.pool_reuses);
                return Ok(Block::Pooled(free.swap_remove(index)));
            }
        }
        let size = bytes.max(MIN_BLOCK).next_power_of_two();
        Metrics::bump(&metrics.device_allocations);
        Metrics::add(&metrics.device_allocation_bytes, size as u64);
        DeviceAlloc::new(device, size).map(Block::Pooled)
    }

    /// Returns a block once the work on `stream` that uses it is queued. Pooled blocks are
    /// reused by later dispatches, whose work is ordered after this one only if it runs on
    /// the same stream, so callers return pooled blocks only after synchronising.
    pub(crate) fn give_back(&self, block: Block, stream: &Stream) {
        match block {
            Block::StreamOrdered(block) => {
                if let Err(error) = block.free_on(stream) {
                    tracing::warn!(%error, "returning stream-ordered memory failed");
                }
            }
            Block::Pooled(block) => {
                if let Ok(mut free) = self.free.lock() {
                    let idle: usize = free.iter().map(DeviceAlloc::len).sum();
                    if idle + block.len() <= self.max_idle_bytes {
                        free.push(block);
                    }
                }
            }
        }
    }

    /// Drop every idle block.
    pub(crate) fn clear(&self) {
        if let Ok(mut free) = self.free.lock() {
            free.clear();
        }
    }

    pub(crate) fn idle_bytes(&self) -> usize {
        self.free
            .lock()
            .map(|free| free.iter().map(DeviceAlloc::len).sum())
            .unwrap_or(0)
    }
}

/// A stream with the events one dispatch needs: `start`/`end` (timing) and `done`
/// (completion only, cheaper).
#[derive(Debug)]
pub(crate) struct StreamSlot {
    pub(crate) stream: Stream,
    pub(crate) start: Event,
    pub(crate) end: Event,
    pub(crate) done: Event,
}

/// Idle streams; a dispatch takes one (creating it if none is idle), so dispatches from
/// several threads run on different streams and overlap.
pub(crate) struct StreamPool {
    idle: Mutex<Vec<StreamSlot>>,
    max_idle: usize,
}

impl StreamPool {
    pub(crate) fn new(max_idle: usize) -> Self {
        Self {
            idle: Mutex::new(Vec::new()),
            max_idle,
        }
    }

    pub(crate) fn take(
        &self,
        device: &Arc<Device>,
        metrics: &Metrics,
    ) -> Result<StreamSlot, DriverError> {
        if let Some(slot) = self.idle.lock().ok().and_then(|mut idle| idle.pop()) {
            return Ok(slot);
        }
        Metrics::bump(&metrics.stream_creations);
        Ok(StreamSlot {
            stream: Stream::new(device)?,
            start: Event::new(device, true)?,
            end: Event::new(device, true)?,
            done: Event::new(device, false)?,
        })
    }

    pub(crate) fn give_back(&self, slot: StreamSlot) {
        if let Ok(mut idle) = self.idle.lock() {
            if idle.len() < self.max_idle {
                idle.push(slot);
            }
        }
    }

    pub(crate) fn clear(&self) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.clear();
        }
    }

    pub(crate) fn idle(&self) -> usize {
        self.idle.lock().map(|idle| idle.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_kind_parses_its_names() {
        assert_eq!(
            PoolKind::parse("stream-ordered"),
            Some(PoolKind::StreamOrdered)
        );
        assert_eq!(
            PoolKind::parse(" size-classes "),
            Some(PoolKind::SizeClasses)
        );
        assert_eq!(PoolKind::parse("bogus"), None);
    }
}
