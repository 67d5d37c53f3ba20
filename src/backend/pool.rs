//! Transient device memory: blocks are kept after a dispatch and reused by the next one
//! that fits, so a warm dispatch of a known shape makes no driver allocation call.

use super::metrics::Metrics;
use crate::driver::{Device, DeviceAlloc, DriverError};
use std::sync::{Arc, Mutex};

/// Smallest block the pool allocates; sizes round up to powers of two from here.
const MIN_BLOCK: usize = 64 * 1024;

pub(crate) struct DevicePool {
    free: Mutex<Vec<DeviceAlloc>>,
    /// Most bytes kept idle in the pool; larger returns are freed.
    max_idle_bytes: usize,
}

impl DevicePool {
    pub(crate) fn new(max_idle_bytes: usize) -> Self {
        Self {
            free: Mutex::new(Vec::new()),
            max_idle_bytes,
        }
    }

    /// A block of at least `bytes`: the smallest idle one that fits, else a new one.
    pub(crate) fn take(
        &self,
        device: &Arc<Device>,
        bytes: usize,
        metrics: &Metrics,
    ) -> Result<DeviceAlloc, DriverError> {
        if let Ok(mut free) = self.free.lock() {
            let best = free
                .iter()
                .enumerate()
                .filter(|(_, block)| block.len() >= bytes)
                .min_by_key(|(_, block)| block.len())
                .map(|(index, _)| index);
            if let Some(index) = best {
                Metrics::bump(&metrics.pool_reuses);
                return Ok(free.swap_remove(index));
            }
        }
        let size = bytes.max(MIN_BLOCK).next_power_of_two();
        Metrics::bump(&metrics.device_allocations);
        Metrics::add(&metrics.device_allocation_bytes, size as u64);
        DeviceAlloc::new(device, size)
    }

    /// Return a block for reuse (or free it when the pool is full).
    pub(crate) fn give_back(&self, block: DeviceAlloc) {
        if let Ok(mut free) = self.free.lock() {
            let idle: usize = free.iter().map(DeviceAlloc::len).sum();
            if idle + block.len() <= self.max_idle_bytes {
                free.push(block);
            }
        }
    }

    /// Drop every idle block (after a context reset they are invalid anyway).
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
