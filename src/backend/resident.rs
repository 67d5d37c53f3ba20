//! Resident buffers: a generation-checked handle table and the resident-memory budget.
//!
//! A handle (`Resource::Resident(u64)`) packs three fields:
//!
//! | bits  | field |
//! |-------|-------|
//! | 48-63 | the owning backend instance's tag (never 0) |
//! | 24-47 | the slot's generation, bumped on every free |
//! | 0-23  | the slot index |
//!
//! So a freed or stale handle (old generation), a handle from another backend instance
//! (other tag) or a forged value (unknown slot, wrong tag or generation) is rejected with
//! a clear error: it can never reach a dangling pointer. A slot whose generation is about
//! to wrap is retired instead of reused, so a handle value is never issued twice.
//!
//! Entries are `Arc`s: a dispatch clones the `Arc`s of the buffers it binds, so a free that
//! races with a running dispatch only drops the table's reference, and the memory is
//! released when the dispatch finishes.

use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const INDEX_BITS: u32 = 24;
const GENERATION_BITS: u32 = 24;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;
const GENERATION_MASK: u64 = (1 << GENERATION_BITS) - 1;
const TAG_SHIFT: u32 = INDEX_BITS + GENERATION_BITS;

/// Why a handle was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HandleError {
    /// Made by another backend instance (or forged with another tag).
    Foreign { handle: u64, tag: u16, ours: u16 },
    /// Our tag, but no such slot was ever issued (forged).
    Unknown { handle: u64 },
    /// The slot exists but the handle's generation is not the live one: it was freed
    /// (and possibly reused since).
    Freed { handle: u64 },
    /// No more slots (2^24 live buffers, or every slot retired).
    Exhausted,
}

impl HandleError {
    pub(crate) fn message(&self) -> (String, &'static str) {
        match self {
            Self::Foreign { handle, tag, ours } => (
                format!(
                    "resident handle {handle:#x} belongs to another backend instance (tag {tag}, this backend is {ours})"
                ),
                "use a handle only with the CudaBackend that allocated it",
            ),
            Self::Unknown { handle } => (
                format!("resident handle {handle:#x} was never allocated by this backend"),
                "pass the Resource returned by allocate_resident, unmodified",
            ),
            Self::Freed { handle } => (
                format!("resident handle {handle:#x} was already freed"),
                "do not use a resident handle after free_resident (allocate a new one)",
            ),
            Self::Exhausted => (
                "the resident handle table is full".to_string(),
                "free resident buffers that are no longer needed",
            ),
        }
    }
}

struct Slot<T> {
    generation: u64,
    value: Option<Arc<T>>,
}

struct Table<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    live: usize,
}

impl<T> Table<T> {
    /// Takes slot `index`'s value, if any, and bumps its generation; a slot whose
    /// generation would wrap is retired instead of freed for reuse.
    fn retire(&mut self, index: usize) -> Option<Arc<T>> {
        let slot = &mut self.slots[index];
        let value = slot.value.take()?;
        slot.generation += 1;
        if slot.generation <= GENERATION_MASK {
            self.free.push(index as u32);
        }
        self.live -= 1;
        Some(value)
    }
}

/// Generation-checked handles for one backend instance.
pub(crate) struct HandleTable<T> {
    tag: u16,
    table: Mutex<Table<T>>,
}

/// Tags for backend instances: distinct for the first 65535 instances of a process.
fn next_tag() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(1);
    loop {
        let tag = NEXT.fetch_add(1, Ordering::Relaxed);
        if tag != 0 {
            return tag;
        }
    }
}

impl<T> HandleTable<T> {
    pub(crate) fn new() -> Self {
        Self::with_tag(next_tag())
    }

    pub(crate) fn with_tag(tag: u16) -> Self {
        Self {
            tag: tag.max(1),
            table: Mutex::new(Table {
                slots: Vec::new(),
                free: Vec::new(),
                live: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table<T>> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn pack(&self, index: usize, generation: u64) -> u64 {
        (u64::from(self.tag) << TAG_SHIFT) | (generation << INDEX_BITS) | index as u64
    }

    fn unpack(&self, handle: u64) -> Result<(usize, u64), HandleError> {
        let tag = (handle >> TAG_SHIFT) as u16;
        if tag != self.tag {
            return Err(HandleError::Foreign {
                handle,
                tag,
                ours: self.tag,
            });
        }
        Ok((
            (handle & INDEX_MASK) as usize,
            (handle >> INDEX_BITS) & GENERATION_MASK,
        ))
    }

    pub(crate) fn insert(&self, value: T) -> Result<u64, HandleError> {
        let mut table = self.lock();
        let index = match table.free.pop() {
            Some(index) => index as usize,
            None => {
                let index = table.slots.len();
                if index as u64 > INDEX_MASK {
                    return Err(HandleError::Exhausted);
                }
                table.slots.push(Slot {
                    generation: 0,
                    value: None,
                });
                index
            }
        };
        let slot = &mut table.slots[index];
        slot.value = Some(Arc::new(value));
        let generation = slot.generation;
        table.live += 1;
        Ok(self.pack(index, generation))
    }

    pub(crate) fn get(&self, handle: u64) -> Result<Arc<T>, HandleError> {
        let table = self.lock();
        let index = self.find(&table, handle)?;
        Ok(Arc::clone(
            table.slots[index].value.as_ref().expect("found live"),
        ))
    }

    /// Removes `handle`'s value (the caller drops it; holders of clones keep it alive).
    pub(crate) fn remove(&self, handle: u64) -> Result<Arc<T>, HandleError> {
        let mut table = self.lock();
        let index = self.find(&table, handle)?;
        Ok(table.retire(index).expect("found live"))
    }

    /// Removes every value (shutdown); the handles become `Freed`.
    pub(crate) fn drain(&self) -> Vec<Arc<T>> {
        let mut table = self.lock();
        let drained: Vec<Arc<T>> = (0..table.slots.len())
            .filter_map(|index| table.retire(index))
            .collect();
        drained
    }

    fn find(&self, table: &Table<T>, handle: u64) -> Result<usize, HandleError> {
        let (index, generation) = self.unpack(handle)?;
        let slot = table
            .slots
            .get(index)
            .ok_or(HandleError::Unknown { handle })?;
        if generation > slot.generation {
            Err(HandleError::Unknown { handle })
        } else if generation < slot.generation || slot.value.is_none() {
            Err(HandleError::Freed { handle })
        } else {
            Ok(index)
        }
    }

    pub(crate) fn live(&self) -> usize {
        self.lock().live
    }
}

/// The resident-memory budget: allocations are refused with the numbers a
/// `DeviceOutOfMemory` needs before the driver is asked.
pub(crate) struct Budget {
    limit: u64,
    in_use: AtomicU64,
}

impl Budget {
    pub(crate) fn new(limit: u64) -> Self {
        Self {
            limit,
            in_use: AtomicU64::new(0),
        }
    }

    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    pub(crate) fn in_use(&self) -> u64 {
        self.in_use.load(Ordering::Acquire)
    }

    /// Reserves `bytes`, or returns the bytes still available.
    pub(crate) fn reserve(&self, bytes: u64) -> Result<(), u64> {
        let available = |in_use: u64| self.limit.saturating_sub(in_use);
        self.in_use
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |in_use| {
                (bytes <= available(in_use)).then_some(in_use + bytes)
            })
            .map(drop)
            .map_err(available)
    }

    pub(crate) fn release(&self, bytes: u64) {
        self.in_use.fetch_sub(bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_freed_handles_are_rejected() {
        let table = HandleTable::with_tag(7);
        let a = table.insert("a").unwrap();
        let b = table.insert("b").unwrap();
        assert_ne!(a, b);
        assert_eq!(*table.get(a).unwrap(), "a");
        assert_eq!(*table.remove(a).unwrap(), "a");
        assert_eq!(table.get(a).unwrap_err(), HandleError::Freed { handle: a });
        assert_eq!(
            table.remove(a).unwrap_err(),
            HandleError::Freed { handle: a }
        );
        // The slot is reused with a new generation: the old handle stays dead.
        let c = table.insert("c").unwrap();
        assert_eq!(c & INDEX_MASK, a & INDEX_MASK);
        assert_ne!(c, a);
        assert_eq!(table.get(a).unwrap_err(), HandleError::Freed { handle: a });
        assert_eq!(*table.get(c).unwrap(), "c");
        assert_eq!(table.live(), 2);
    }

    #[test]
    fn foreign_and_forged_handles_are_rejected() {
        let ours = HandleTable::with_tag(1);
        let theirs = HandleTable::with_tag(2);
        let mine = ours.insert(1u32).unwrap();
        let foreign = theirs.insert(2u32).unwrap();
        assert!(matches!(
            ours.get(foreign),
            Err(HandleError::Foreign {
                tag: 2,
                ours: 1,
                ..
            })
        ));
        assert!(matches!(
            ours.get(0),
            Err(HandleError::Foreign { tag: 0, .. })
        ));
        assert!(matches!(
            ours.get(u64::MAX),
            Err(HandleError::Foreign { .. })
        ));
        // Our tag, a slot never issued.
        let forged = (1u64 << TAG_SHIFT) | 12345;
        assert_eq!(
            ours.get(forged).unwrap_err(),
            HandleError::Unknown { handle: forged }
        );
        // Our tag and slot, a generation from the future.
        let future = mine + (5 << INDEX_BITS);
        assert_eq!(
            ours.remove(future).unwrap_err(),
            HandleError::Unknown { handle: future }
        );
        assert_eq!(*ours.get(mine).unwrap(), 1);
        for error in [
            HandleError::Foreign {
                handle: 1,
                tag: 2,
                ours: 1,
            },
            HandleError::Unknown { handle: 1 },
            HandleError::Freed { handle: 1 },
            HandleError::Exhausted,
        ] {
            let (message, fix) = error.message();
            assert!(!message.is_empty() && !fix.is_empty());
        }
    }

    #[test]
    fn values_outlive_their_removal_while_held() {
        let table = HandleTable::with_tag(3);
        let handle = table.insert(vec![1u8; 4]).unwrap();
        let held = table.get(handle).unwrap();
        drop(table.remove(handle).unwrap());
        assert_eq!(*held, [1, 1, 1, 1]);
    }

    #[test]
    fn a_slot_is_retired_before_its_generation_wraps() {
        let table = HandleTable::with_tag(4);
        let first = table.insert(0).unwrap();
        {
            let mut inner = table.lock();
            inner.slots[0].generation = GENERATION_MASK;
            inner.slots[0].value = Some(Arc::new(0));
        }
        let last = table.pack(0, GENERATION_MASK);
        table.remove(last).unwrap();
        let next = table.insert(1).unwrap();
        assert_ne!(
            next & INDEX_MASK,
            0,
            "the exhausted slot must not be reused"
        );
        assert!(table.get(first).is_err() && table.get(last).is_err());
    }

    #[test]
    fn drain_frees_everything() {
        let table = HandleTable::with_tag(5);
        let handles: Vec<u64> = (0..10).map(|i| table.insert(i).unwrap()).collect();
        assert_eq!(table.drain().len(), 10);
        assert_eq!(table.live(), 0);
        for handle in handles {
            assert!(matches!(table.get(handle), Err(HandleError::Freed { .. })));
        }
    }

    #[test]
    fn budget_reserves_and_reports_what_is_left() {
        let budget = Budget::new(100);
        budget.reserve(60).unwrap();
        assert_eq!(budget.reserve(50), Err(40));
        budget.reserve(40).unwrap();
        assert_eq!(budget.reserve(1), Err(0));
        budget.release(30);
        assert_eq!(budget.in_use(), 70);
        budget.reserve(30).unwrap();
    }

    #[test]
    fn concurrent_inserts_and_removes_keep_handles_unique() {
        let table = Arc::new(HandleTable::with_tag(6));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let table = Arc::clone(&table);
                std::thread::spawn(move || {
                    let mut seen = Vec::new();
                    for i in 0..1000 {
                        let h = table.insert(t * 1000 + i).unwrap();
                        assert_eq!(*table.get(h).unwrap(), t * 1000 + i);
                        seen.push(h);
                        if i % 2 == 0 {
                            table.remove(h).unwrap();
                        }
                    }
                    seen
                })
            })
            .collect();
        let mut all: Vec<u64> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        let count = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), count, "a handle value was issued twice");
        assert_eq!(table.live(), 2000);
    }
}
