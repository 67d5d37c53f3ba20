//! Pools: one idle list ([`Pool`]) with its guard ([`Pooled`]), and the pools built on it:
//! transient device memory ([`DevicePool`]) and streams ([`StreamSlot`]); staging lanes,
//! small-dispatch lanes and blocking wait events use the same [`Pool`].
//!
//! Dropping a [`Pooled`] gives the resource back (kept idle within the pool's bound, else
//! freed), so every path out of an executor, error paths included, returns what it took;
//! after a driver error, whose work may still be queued, [`Pooled::discard`] frees it
//! instead. Size-class blocks are reused by later dispatches on other streams, so
//! executors drop them only once the work using them is done.

use super::metrics::Metrics;
use crate::driver::{Device, DeviceAlloc, DriverError, Event, Stream, StreamOrderedAlloc};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Smallest block the size-class pool allocates; sizes round up to powers of two from here.
const MIN_BLOCK: usize = 64 * 1024;

/// A resource a [`Pool`] can keep idle.
pub(crate) trait Recycle: Send + 'static {
    /// What it counts against the pool's idle bound; `None`: never kept idle.
    fn weight(&self) -> Option<usize> {
        Some(1)
    }
}

/// Resources in use (taken and not yet dropped) and idle in one pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PoolCounts {
    pub(crate) in_use: usize,
    pub(crate) idle: usize,
}

struct Idle<T> {
    items: Vec<T>,
    weight: usize,
}

struct Home<T> {
    idle: Mutex<Idle<T>>,
    in_use: AtomicUsize,
    max_weight: usize,
    /// Set by [`Pool::close`]: returned resources are freed from then on.
    closed: AtomicBool,
}

impl<T: Recycle> Home<T> {
    fn put(&self, item: T) {
        let Some(weight) = item.weight() else { return };
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        if let Ok(mut idle) = self.idle.lock() {
            if idle.weight + weight <= self.max_weight {
                idle.weight += weight;
                idle.items.push(item);
            }
        }
    }
}

/// An idle list of `T`, bounded in total [`Recycle::weight`].
pub(crate) struct Pool<T> {
    home: Arc<Home<T>>,
}

impl<T: Recycle> Pool<T> {
    pub(crate) fn new(max_weight: usize) -> Self {
        Self {
            home: Arc::new(Home {
                idle: Mutex::new(Idle {
                    items: Vec::new(),
                    weight: 0,
                }),
                in_use: AtomicUsize::new(0),
                max_weight,
                closed: AtomicBool::new(false),
            }),
        }
    }

    /// The most recently returned idle resource, else a new one from `create`.
    pub(crate) fn take<E>(&self, create: impl FnOnce() -> Result<T, E>) -> Result<Pooled<T>, E> {
        self.take_chosen(|items| items.len().checked_sub(1), create)
    }

    /// The idle resource with the smallest `fit` (`None`: does not fit), else `create`'s.
    pub(crate) fn take_best<E>(
        &self,
        fit: impl Fn(&T) -> Option<usize>,
        create: impl FnOnce() -> Result<T, E>,
    ) -> Result<Pooled<T>, E> {
        let best = |items: &[T]| {
            let keyed = items.iter().enumerate();
            let fitting = keyed.filter_map(|(index, item)| fit(item).map(|key| (index, key)));
            fitting.min_by_key(|&(_, key)| key).map(|(index, _)| index)
        };
        self.take_chosen(best, create)
    }

    /// The idle resource at the index `choose` picks, else a new one from `create` (called
    /// outside the lock).
    fn take_chosen<E>(
        &self,
        choose: impl FnOnce(&[T]) -> Option<usize>,
        create: impl FnOnce() -> Result<T, E>,
    ) -> Result<Pooled<T>, E> {
        let idle = self.home.idle.lock().ok().and_then(|mut idle| {
            let index = choose(&idle.items)?;
            let item = idle.items.swap_remove(index);
            idle.weight -= item.weight().unwrap_or(0);
            Some(item)
        });
        let item = match idle {
            Some(item) => item,
            None => create()?,
        };
        self.home.in_use.fetch_add(1, Ordering::Relaxed);
        Ok(Pooled {
            item: Some(item),
            home: Arc::clone(&self.home),
        })
    }

    /// Frees every idle resource; resources returned later are freed too (shutdown).
    pub(crate) fn close(&self) {
        self.home.closed.store(true, Ordering::Release);
        if let Ok(mut idle) = self.home.idle.lock() {
            idle.items.clear();
            idle.weight = 0;
        }
    }

    pub(crate) fn counts(&self) -> PoolCounts {
        PoolCounts {
            in_use: self.home.in_use.load(Ordering::Relaxed),
            idle: self.home.idle.lock().map_or(0, |idle| idle.items.len()),
        }
    }

    pub(crate) fn idle_sum(&self, size: impl Fn(&T) -> usize) -> usize {
        self.home
            .idle
            .lock()
            .map_or(0, |idle| idle.items.iter().map(size).sum())
    }
}

/// One resource taken from a [`Pool`]; dropping it gives it back.
pub(crate) struct Pooled<T: Recycle> {
    /// `None` only once discarded (inside `discard` and `drop`).
    item: Option<T>,
    home: Arc<Home<T>>,
}

impl<T: Recycle> Pooled<T> {
    /// Frees the resource instead of recycling it (after a driver error).
    pub(crate) fn discard(mut self) {
        drop(self.item.take());
    }

    /// [`Self::discard`] when `failed`, else an ordinary drop (back to the pool).
    pub(crate) fn discard_if(self, failed: bool) {
        if failed {
            self.discard();
        }
    }
}

impl<T: Recycle> Deref for Pooled<T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.item
            .as_ref()
            .expect("a pooled resource is present until dropped")
    }
}

impl<T: Recycle> DerefMut for Pooled<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.item
            .as_mut()
            .expect("a pooled resource is present until dropped")
    }
}

impl<T: Recycle> Drop for Pooled<T> {
    fn drop(&mut self) {
        self.home.in_use.fetch_sub(1, Ordering::Relaxed);
        if let Some(item) = self.item.take() {
            self.home.put(item);
        }
    }
}

/// Which pool serves transient device memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolKind {
    /// Power-of-two blocks reused across dispatches, bounded by idle bytes (a warm
    /// dispatch of a known shape makes no driver allocation call).
    SizeClasses,
    /// The driver's stream-ordered pool (`cuMemAllocAsync`) with a raised release
    /// threshold: two cheap driver calls per dispatch.
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

/// Transient device memory: a size-class block, or stream-ordered memory (never kept idle:
/// dropping it frees it ordered on its stream).
pub(crate) enum Memory {
    Classes(DeviceAlloc),
    StreamOrdered(StreamOrderedAlloc),
}

impl Memory {
    pub(crate) fn ptr(&self) -> u64 {
        match self {
            Self::Classes(block) => block.ptr(),
            Self::StreamOrdered(block) => block.ptr(),
        }
    }
}

impl Recycle for Memory {
    fn weight(&self) -> Option<usize> {
        match self {
            Self::Classes(block) => Some(block.len()),
            Self::StreamOrdered(_) => None,
        }
    }
}

/// One dispatch's transient device memory.
pub(crate) type Block = Pooled<Memory>;

pub(crate) struct DevicePool {
    kind: PoolKind,
    blocks: Pool<Memory>,
    device: Arc<Device>,
    metrics: Arc<Metrics>,
}

impl DevicePool {
    /// Keeps at most `max_idle_bytes` of size-class blocks idle.
    pub(crate) fn new(
        kind: PoolKind,
        max_idle_bytes: usize,
        device: Arc<Device>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            kind,
            blocks: Pool::new(max_idle_bytes),
            device,
            metrics,
        }
    }

    /// At least `bytes` of device memory usable by work queued on `stream` from now on.
    pub(crate) fn take(&self, stream: &Arc<Stream>, bytes: usize) -> Result<Block, DriverError> {
        if self.kind == PoolKind::StreamOrdered {
            return self.blocks.take(|| {
                self.metrics.device_allocation(bytes);
                StreamOrderedAlloc::new(stream, bytes).map(Memory::StreamOrdered)
            });
        }
        let mut created = false;
        let block = self.blocks.take_best(
            |memory| match memory {
                Memory::Classes(block) if block.len() >= bytes => Some(block.len()),
                _ => None,
            },
            || {
                created = true;
                let size = bytes.max(MIN_BLOCK).next_power_of_two();
                self.metrics.device_allocation(size);
                DeviceAlloc::new(&self.device, size).map(Memory::Classes)
            },
        )?;
        if !created {
            Metrics::bump(&self.metrics.pool_reuses);
        }
        Ok(block)
    }

    pub(crate) fn close(&self) {
        self.blocks.close();
    }

    pub(crate) fn counts(&self) -> PoolCounts {
        self.blocks.counts()
    }

    pub(crate) fn idle_bytes(&self) -> usize {
        self.blocks.idle_sum(|memory| memory.weight().unwrap_or(0))
    }
}

/// A stream with the events one dispatch needs: `start`/`end` (timing) and `done`
/// (completion only, cheaper).
#[derive(Debug)]
pub(crate) struct StreamSlot {
    pub(crate) stream: Arc<Stream>,
    pub(crate) start: Event,
    pub(crate) end: Event,
    pub(crate) done: Event,
}

impl StreamSlot {
    pub(crate) fn new(device: &Arc<Device>, metrics: &Metrics) -> Result<Self, DriverError> {
        Metrics::bump(&metrics.stream_creations);
        Ok(Self {
            stream: Arc::new(Stream::new(device)?),
            start: Event::new(device, true)?,
            end: Event::new(device, true)?,
            done: Event::new(device, false)?,
        })
    }

    /// Runs `enqueue`, between the timing events on `stream` when `timed`.
    pub(crate) fn timed<T>(
        &self,
        stream: &Stream,
        timed: bool,
        enqueue: impl FnOnce() -> Result<T, DriverError>,
    ) -> Result<T, DriverError> {
        if timed {
            self.start.record(stream)?;
        }
        let value = enqueue()?;
        if timed {
            self.end.record(stream)?;
        }
        Ok(value)
    }

    /// The device time between the timing events (once they completed), when `timed`.
    pub(crate) fn device_ns(&self, timed: bool) -> Result<Option<u64>, DriverError> {
        timed
            .then(|| self.end.elapsed_ns_since(&self.start))
            .transpose()
    }
}

impl Recycle for StreamSlot {}

impl Recycle for Event {}

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

    #[derive(Debug, PartialEq)]
    struct Item(usize);

    impl Recycle for Item {
        fn weight(&self) -> Option<usize> {
            (self.0 > 0).then_some(self.0)
        }
    }

    #[test]
    fn guards_return_on_drop_within_the_bound_and_discard_frees() {
        let pool: Pool<Item> = Pool::new(10);
        let counts = |in_use, idle| PoolCounts { in_use, idle };
        let a = pool.take(|| Ok::<_, ()>(Item(4))).unwrap();
        let b = pool.take(|| Ok::<_, ()>(Item(8))).unwrap();
        assert_eq!(pool.counts(), counts(2, 0));
        drop(a);
        drop(b); // 4 + 8 > 10: freed, not kept
        assert_eq!(pool.counts(), counts(0, 1));
        let a = pool.take(|| Ok::<_, ()>(Item(1))).unwrap();
        assert_eq!(*a, Item(4), "the idle one is reused");
        a.discard();
        assert_eq!(pool.counts(), counts(0, 0));
        let zero = pool.take(|| Ok::<_, ()>(Item(0))).unwrap();
        drop(zero); // weight None: never kept
        assert_eq!(pool.counts(), counts(0, 0));
        assert!(pool.take(|| Err::<Item, _>("no")).is_err());
        assert_eq!(pool.counts(), counts(0, 0));
    }

    #[test]
    fn best_fit_takes_the_smallest_that_fits_and_close_frees_later_returns() {
        let pool: Pool<Item> = Pool::new(100);
        let items: Vec<_> = [8, 2, 4]
            .into_iter()
            .map(|n| pool.take(|| Ok::<_, ()>(Item(n))).unwrap())
            .collect();
        drop(items);
        assert_eq!(pool.idle_sum(|item| item.0), 14);
        let fit = |need: usize| move |item: &Item| (item.0 >= need).then_some(item.0);
        let three = pool.take_best(fit(3), || Ok::<_, ()>(Item(99))).unwrap();
        assert_eq!(*three, Item(4));
        let nine = pool.take_best(fit(9), || Ok::<_, ()>(Item(16))).unwrap();
        assert_eq!(*nine, Item(16));
        pool.close();
        drop((three, nine));
        assert_eq!(pool.counts(), PoolCounts { in_use: 0, idle: 0 });
    }
}
