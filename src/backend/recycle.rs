//! Reuse of resident buffers for the optimizer dispatcher: per-size free lists and a
//! content-addressed cache of static uploads. Pure bookkeeping over handles (no device
//! calls), so it is tested without a GPU; the dispatcher frees whatever these return.

use super::cache::evict_oldest;
use rustc_hash::{FxHashMap, FxHashSet};

/// Freed resident handles kept by exact byte size for reuse, bounded in idle bytes.
#[derive(Debug)]
pub(crate) struct FreeLists {
    lists: FxHashMap<usize, Vec<u64>>,
    idle: FxHashSet<u64>,
    idle_bytes: u64,
    max_idle_bytes: u64,
}

impl FreeLists {
    pub(crate) fn new(max_idle_bytes: u64) -> Self {
        Self {
            lists: FxHashMap::default(),
            idle: FxHashSet::default(),
            idle_bytes: 0,
            max_idle_bytes,
        }
    }

    /// An idle handle of exactly `byte_len` bytes.
    pub(crate) fn take(&mut self, byte_len: usize) -> Option<u64> {
        let handle = self.lists.get_mut(&byte_len)?.pop()?;
        self.idle.remove(&handle);
        self.idle_bytes -= byte_len as u64;
        Some(handle)
    }

    /// Whether `handle` is idle here (freed by its user, kept for reuse).
    pub(crate) fn contains(&self, handle: u64) -> bool {
        self.idle.contains(&handle)
    }

    /// Keeps `handle` for reuse; returns it back when the idle bound is reached (the caller
    /// frees it).
    pub(crate) fn put(&mut self, byte_len: usize, handle: u64) -> Option<u64> {
        if self.idle_bytes + byte_len as u64 > self.max_idle_bytes {
            return Some(handle);
        }
        self.idle_bytes += byte_len as u64;
        self.idle.insert(handle);
        self.lists.entry(byte_len).or_default().push(handle);
        None
    }

    /// Every idle handle (the caller frees them).
    pub(crate) fn drain(&mut self) -> Vec<u64> {
        self.idle_bytes = 0;
        self.idle.clear();
        self.lists
            .drain()
            .flat_map(|(_, handles)| handles)
            .collect()
    }

    pub(crate) fn idle_bytes(&self) -> u64 {
        self.idle_bytes
    }
}

struct StaticEntry {
    handles: Vec<u64>,
    bytes: u64,
    users: u32,
    used: u64,
}

/// Resident copies of immutable payload sets, keyed by a digest of their content (and
/// cache domain), retained across acquisitions and bounded in bytes. Entries in use (acquired
/// and not yet released) are never evicted.
pub(crate) struct StaticCache {
    entries: FxHashMap<[u8; 32], StaticEntry>,
    by_first_handle: FxHashMap<u64, [u8; 32]>,
    bytes: u64,
    max_bytes: u64,
    tick: u64,
}

/// The content key of a payload set: blake3 over the domain, the arity and every payload's
/// length and bytes.
pub(crate) fn static_key(domain: u64, payloads: &[&[u8]]) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"vyre-cuda static uploads v1");
    hasher.update(&domain.to_le_bytes());
    hasher.update(&(payloads.len() as u64).to_le_bytes());
    for payload in payloads {
        hasher.update(&(payload.len() as u64).to_le_bytes());
        hasher.update(payload);
    }
    *hasher.finalize().as_bytes()
}

impl StaticCache {
    pub(crate) fn new(max_bytes: u64) -> Self {
        Self {
            entries: FxHashMap::default(),
            by_first_handle: FxHashMap::default(),
            bytes: 0,
            max_bytes,
            tick: 0,
        }
    }

    /// The cached handles for `key`, marked in use.
    pub(crate) fn acquire(&mut self, key: &[u8; 32]) -> Option<Vec<u64>> {
        self.tick += 1;
        let entry = self.entries.get_mut(key)?;
        entry.users += 1;
        entry.used = self.tick;
        Some(entry.handles.clone())
    }

    /// Whether `bytes` more could be retained (after evicting idle entries).
    pub(crate) fn fits(&self, bytes: u64) -> bool {
        bytes <= self.max_bytes
    }

    /// Retains a new set (in use by the caller) under `key`; returns the handle sets
    /// evicted to make room (the caller frees them). The set must fit ([`Self::fits`]).
    pub(crate) fn insert(&mut self, key: [u8; 32], handles: Vec<u64>, bytes: u64) -> Vec<Vec<u64>> {
        self.tick += 1;
        let mut evicted = Vec::new();
        while self.bytes + bytes > self.max_bytes {
            let idle = |entry: &StaticEntry| (entry.users == 0).then_some(entry.used);
            let Some(entry) = evict_oldest(&mut self.entries, idle) else {
                break;
            };
            self.bytes -= entry.bytes;
            if let Some(first) = entry.handles.first() {
                self.by_first_handle.remove(first);
            }
            evicted.push(entry.handles);
        }
        if let Some(first) = handles.first() {
            self.by_first_handle.insert(*first, key);
        }
        self.bytes += bytes;
        self.entries.insert(
            key,
            StaticEntry {
                handles,
                bytes,
                users: 1,
                used: self.tick,
            },
        );
        evicted
    }

    /// Marks the set whose handles are `handles` as no longer in use. Returns false when the
    /// set is not cached (it was not retained).
    pub(crate) fn release(&mut self, handles: &[u64]) -> bool {
        let Some(key) = handles.first().and_then(|h| self.by_first_handle.get(h)) else {
            return handles.is_empty();
        };
        match self.entries.get_mut(key) {
            Some(entry) if entry.handles == handles => {
                entry.users = entry.users.saturating_sub(1);
                true
            }
            _ => false,
        }
    }

    /// Every cached handle (the caller frees them).
    pub(crate) fn drain(&mut self) -> Vec<u64> {
        self.bytes = 0;
        self.by_first_handle.clear();
        self.entries
            .drain()
            .flat_map(|(_, entry)| entry.handles)
            .collect()
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_lists_reuse_exact_sizes_within_the_idle_bound() {
        let mut lists = FreeLists::new(100);
        assert_eq!(lists.take(16), None);
        assert_eq!(lists.put(16, 1), None);
        assert_eq!(lists.put(32, 2), None);
        assert!(lists.contains(2) && lists.contains(1));
        assert_eq!(lists.take(32), Some(2));
        assert!(!lists.contains(2));
        assert_eq!(lists.take(32), None);
        assert_eq!(lists.put(90, 3), Some(3), "over the bound: caller frees it");
        assert_eq!(lists.idle_bytes(), 16);
        assert_eq!(lists.drain(), [1]);
        assert_eq!(lists.idle_bytes(), 0);
    }

    #[test]
    fn static_keys_separate_domains_arity_and_boundaries() {
        let a = static_key(1, &[b"ab", b"c"]);
        assert_eq!(a, static_key(1, &[b"ab", b"c"]));
        assert_ne!(a, static_key(2, &[b"ab", b"c"]));
        assert_ne!(a, static_key(1, &[b"a", b"bc"]));
        assert_ne!(a, static_key(1, &[b"abc"]));
    }

    #[test]
    fn static_cache_hits_retains_and_evicts_only_idle_sets() {
        let mut cache = StaticCache::new(100);
        let k1 = static_key(0, &[b"one"]);
        let k2 = static_key(0, &[b"two"]);
        let k3 = static_key(0, &[b"three"]);
        assert!(cache.insert(k1, vec![1, 2], 60).is_empty());
        assert_eq!(cache.acquire(&k1), Some(vec![1, 2]));
        // Both users of k1 still hold it: nothing can be evicted, the cache overflows.
        assert!(cache.insert(k2, vec![3], 60).is_empty());
        assert_eq!(cache.bytes(), 120);
        assert!(cache.release(&[1, 2]));
        assert!(cache.release(&[1, 2]));
        assert!(cache.release(&[3]));
        assert!(!cache.release(&[9]));
        // Now idle: inserting k3 evicts the least recently used idle set (k1).
        let evicted = cache.insert(k3, vec![4], 30);
        assert_eq!(evicted, [vec![1, 2]]);
        assert_eq!(cache.acquire(&k1), None);
        assert_eq!(cache.acquire(&k2), Some(vec![3]));
        assert_eq!(cache.len(), 2);
        assert!(cache.fits(100) && !cache.fits(101));
        let mut drained = cache.drain();
        drained.sort_unstable();
        assert_eq!(drained, [3, 4]);
        assert_eq!(cache.bytes(), 0);
    }
}
