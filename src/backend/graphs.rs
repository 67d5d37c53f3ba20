//! Cached CUDA graphs of resident step lists.
//!
//! A resident sequence (a prefix of steps, then a repeated group unrolled a bounded number
//! of times) is captured once into a CUDA graph and the instantiated executable is cached,
//! keyed by everything that decides what the graph does: each step's program identity,
//! effective workgroup, grid override, launch count and resident handles. A handle packs
//! its slot's generation and is never issued twice, so a live handle always names the same
//! device memory: equal keys mean an identical graph. A replay first resolves every handle
//! of the key in the handle table (a freed handle fails there, exactly as an uncached
//! dispatch would) and holds the buffers until the replay is done, so a cached graph is
//! never replayed over freed memory. Freeing a handle also drops the entries that use it.
//!
//! Entries are checked out for the duration of one replay (removed from the map and put
//! back afterwards), so one executable and its fault word never serve two calls at once;
//! a concurrent call with the same key captures its own.

use super::cache::{evict_oldest, LoadedKernel};
use crate::driver::{DeviceAlloc, GraphExec};
use rustc_hash::{FxHashMap, FxHashSet, FxHasher};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

/// Most cached executables; the least recently used is dropped beyond this.
const MAX_CACHED_GRAPHS: usize = 64;
/// Most step-list fingerprints remembered for the capture-on-second-sight rule.
const MAX_SEEN: usize = 4096;

/// One step as the cache sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct StepKey {
    pub(crate) identity: [u8; 32],
    pub(crate) workgroup: [u32; 3],
    pub(crate) grid_override: Option<[u32; 3]>,
    pub(crate) launches: u32,
    pub(crate) handles: smallvec::SmallVec<[u64; 4]>,
}

/// The work of one graph: `prefix` once, then `repeated` `unroll` times.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct GraphKey {
    pub(crate) prefix: Arc<[StepKey]>,
    pub(crate) repeated: Arc<[StepKey]>,
    pub(crate) unroll: u32,
}

impl GraphKey {
    /// Every handle the graph's kernels address, once each.
    pub(crate) fn handles(&self) -> smallvec::SmallVec<[u64; 8]> {
        let mut handles: smallvec::SmallVec<[u64; 8]> = self
            .prefix
            .iter()
            .chain(self.repeated.iter())
            .flat_map(|step| step.handles.iter().copied())
            .collect();
        handles.sort_unstable();
        handles.dedup();
        handles
    }

    fn fingerprint(&self) -> u64 {
        let mut hasher = FxHasher::default();
        self.hash(&mut hasher);
        hasher.finish()
    }
}

/// An instantiated graph and what it needs to stay valid.
pub(crate) struct CachedGraph {
    pub(crate) exec: GraphExec,
    /// Keeps every module the graph launches loaded.
    pub(crate) _kernels: Vec<Arc<LoadedKernel>>,
    /// The handles of the key, once each (resolved before every replay).
    pub(crate) handles: smallvec::SmallVec<[u64; 8]>,
    /// The graph's own fault word. It is zero whenever the entry is in the cache: kernels
    /// write it only to record a fault (`atom.cas` from 0), and a faulted entry is dropped.
    pub(crate) fault: Option<DeviceAlloc>,
    /// Kernel launches per replay.
    pub(crate) launches: u64,
    /// Programs with grid-wide barriers launched per replay: `[cooperative, split]`.
    pub(crate) grid_sync_launches: [u64; 2],
    /// The cache's tick when it was last given back (least recently used goes first).
    pub(crate) last_used: u64,
}

#[derive(Default)]
struct State {
    entries: FxHashMap<GraphKey, CachedGraph>,
    seen: FxHashSet<u64>,
    tick: u64,
}

/// The bounded cache of instantiated step-list graphs.
#[derive(Default)]
pub(crate) struct GraphCache {
    state: Mutex<State>,
}

impl GraphCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Checks the entry for `key` out of the cache.
    pub(crate) fn take(&self, key: &GraphKey) -> Option<CachedGraph> {
        self.lock().entries.remove(key)
    }

    /// Returns an idle entry (its replays completed, its fault word zero). An entry whose
    /// handles are no longer all live (`live`) is dropped instead.
    pub(crate) fn give_back(
        &self,
        key: GraphKey,
        mut graph: CachedGraph,
        live: impl Fn(u64) -> bool,
    ) {
        if !graph.handles.iter().all(|&handle| live(handle)) {
            return;
        }
        let mut state = self.lock();
        state.tick += 1;
        graph.last_used = state.tick;
        if state.entries.contains_key(&key) {
            // A concurrent call captured the same graph; keep the one already there.
            return;
        }
        while state.entries.len() >= MAX_CACHED_GRAPHS {
            if evict_oldest(&mut state.entries, |entry| Some(entry.last_used)).is_none() {
                break;
            }
        }
        state.entries.insert(key, graph);
    }

    /// True the first time this step list is seen (since the memory of sightings was last
    /// cleared): one-off lists are launched directly instead of paying for a capture.
    pub(crate) fn first_sighting(&self, key: &GraphKey) -> bool {
        let fingerprint = key.fingerprint();
        let mut state = self.lock();
        if state.seen.len() >= MAX_SEEN {
            state.seen.clear();
        }
        state.seen.insert(fingerprint)
    }

    /// Drops every entry that addresses `handle` (called when it is freed).
    pub(crate) fn forget_handle(&self, handle: u64) {
        self.lock()
            .entries
            .retain(|_, entry| !entry.handles.contains(&handle));
    }

    pub(crate) fn clear(&self) {
        let mut state = self.lock();
        state.entries.clear();
        state.seen.clear();
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(identity: u8, handles: &[u64]) -> StepKey {
        StepKey {
            identity: [identity; 32],
            workgroup: [64, 1, 1],
            grid_override: None,
            launches: 1,
            handles: handles.iter().copied().collect(),
        }
    }

    #[test]
    fn keys_differ_by_any_step_field_and_list_their_handles_once() {
        let a = GraphKey {
            prefix: vec![step(1, &[7, 9]), step(2, &[9])].into(),
            repeated: vec![step(3, &[5])].into(),
            unroll: 4,
        };
        assert_eq!(a.handles().as_slice(), [5, 7, 9]);
        let mut b = a.clone();
        assert_eq!(a, b);
        b.unroll = 5;
        assert_ne!(a, b);
        let c = GraphKey {
            prefix: vec![step(1, &[7, 8]), step(2, &[9])].into(),
            ..a.clone()
        };
        assert_ne!(a, c);
        let mut d_step = step(1, &[7, 9]);
        d_step.grid_override = Some([2, 1, 1]);
        let d = GraphKey {
            prefix: vec![d_step, step(2, &[9])].into(),
            ..a.clone()
        };
        assert_ne!(a, d);
    }

    #[test]
    fn sightings_are_remembered() {
        let cache = GraphCache::default();
        let key = GraphKey {
            prefix: vec![step(1, &[1])].into(),
            repeated: Vec::new().into(),
            unroll: 0,
        };
        assert!(cache.first_sighting(&key));
        assert!(!cache.first_sighting(&key));
        assert_eq!(cache.len(), 0);
        assert!(cache.take(&key).is_none());
    }
}
