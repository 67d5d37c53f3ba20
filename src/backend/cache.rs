//! Kernel caches: the PTX-source cache (emitted text + ABI) and the loaded-module cache,
//! both bounded by entry count and bytes with least-recently-used eviction.
//!
//! Eviction only drops the cache's `Arc`: a dispatch that already holds a kernel keeps its
//! module loaded until it finishes, so eviction never unloads a module in use.

use crate::codegen::{EmittedKernel, KernelAbi, PtxTarget, EMITTER_VERSION, VECTOR_ENTRY};
use crate::driver::{Device, DriverError, Function, Module};
use rustc_hash::FxHashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// blake3 over the program's exact identity (its fingerprint plus the signs of its zero
/// literals, see `identity.rs`), the effective workgroup size, the PTX target, the
/// emitter version and the crate version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct KernelKey([u8; 32]);

impl KernelKey {
    pub(crate) fn new(program_identity: &[u8; 32], workgroup: [u32; 3], target: PtxTarget) -> Self {
        let mut hasher = blake3::Hasher::new();
        hasher.update(program_identity);
        for dim in workgroup {
            hasher.update(&dim.to_le_bytes());
        }
        hasher.update(&target.sm().to_le_bytes());
        hasher.update(&target.isa().major.to_le_bytes());
        hasher.update(&target.isa().minor.to_le_bytes());
        hasher.update(&EMITTER_VERSION.to_le_bytes());
        hasher.update(env!("CARGO_PKG_VERSION").as_bytes());
        Self(*hasher.finalize().as_bytes())
    }

    /// A key for code that is not one program's emission (an artifact's kernel): `identity`
    /// names the code itself.
    pub(crate) fn of_code(identity: &[u8; 32]) -> Self {
        Self(*identity)
    }

    pub(crate) fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Lower-case hex of the key (64 characters).
    pub(crate) fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// A kernel ready to launch. Holding it keeps its modules loaded.
pub(crate) struct LoadedKernel {
    pub(crate) key: KernelKey,
    pub(crate) abi: KernelAbi,
    /// One entry per segment, launched in order (see `KernelAbi::segments`).
    pub(crate) segments: OnDemand<Vec<Function>>,
    /// The single-kernel form of a split program, where the device can launch it.
    pub(crate) cooperative: Option<CooperativeForm>,
    /// The elementwise vector entry, when the ABI has one (`KernelAbi::vector_lanes`):
    /// its own module, JIT-compiled on first use (loaded as no entry when it fails).
    pub(crate) vector: Option<LazyVector>,
    /// The entry with every load checked (`codegen::EmittedKernel::checked_ptx`), for
    /// launches where a buffer is shorter than its binding's literal extent: its own module,
    /// JIT-compiled on first need.
    pub(crate) checked: Option<LazyModule<Function>>,
    /// Whether it may be launched with a null fault area: a timed kernel that writes its
    /// area only to stamp the clock (`codegen::KernelEntries::fault_area_optional`).
    pub(crate) fault_area_optional: bool,
}

impl LoadedKernel {
    /// A kernel with `abi` and no loaded entries, for tests of what is planned from an ABI
    /// (layouts, launch arguments) without a device.
    #[cfg(test)]
    pub(crate) fn unloaded(abi: KernelAbi) -> Self {
        Self {
            key: KernelKey::new(
                &[0; 32],
                abi.workgroup_size,
                crate::codegen::PtxTarget::sm90(),
            ),
            abi,
            segments: OnDemand::Loaded(Vec::new()),
            cooperative: None,
            vector: None,
            checked: None,
            fault_area_optional: false,
        }
    }

    /// Whether a launch must point it at a zeroed fault area: it takes one
    /// (`KernelAbi::fault_word`) and cannot do with a null one.
    pub(crate) fn needs_fault_area(&self) -> bool {
        self.abi.fault_word && !self.fault_area_optional
    }

    /// The vector entry, loading its module on first use; `None` when the kernel has none
    /// or its module failed to load (logged once; launches then use the scalar entry).
    pub(crate) fn vector_function(&self) -> Option<&Function> {
        let vector = self.vector.as_ref()?;
        let loaded = vector.entry.get(|module| {
            let function = module.and_then(|m| m.function(VECTOR_ENTRY));
            if let Err(error) = &function {
                tracing::warn!(%error, "vyre-cuda: the vector entry's module did not load; this kernel keeps using its scalar entry");
            }
            Ok(function.ok())
        });
        loaded.ok()?.as_ref()
    }

    /// The entries a launch over buffers of `counts` elements runs, in order: the
    /// kernel's, or its checked variant where a buffer is shorter than the elements the
    /// kernel reads from it at literal indices (`KernelBinding::literal_extent`).
    pub(crate) fn scalar_functions(&self, counts: &[u32]) -> Result<&[Function], DriverError> {
        let short = (self.abi.bindings.iter().zip(counts)).any(|(b, &n)| n < b.literal_extent);
        if let (Some(checked), true) = (&self.checked, short) {
            let name = self.abi.entry_name(0);
            let function = checked.get(|module| module?.function(&name));
            return function.map(std::slice::from_ref).map_err(|error| {
                DriverError::invalid_ptx_text(format!(
                    "the kernel's bounds-checked variant (for a buffer shorter than the elements it reads at fixed indices) did not load: {error}"
                ))
            });
        }
        let abi = &self.abi;
        let segments = self.segments.get(|module| {
            let module = module?;
            (0..abi.segments)
                .map(|segment| module.function(&abi.entry_name(segment)))
                .collect()
        });
        segments.map(Vec::as_slice)
    }

    /// The cooperative entry when a launch of `blocks` blocks can use it: the kernel has
    /// one and that many blocks are resident at once. A grid over the device's bound for
    /// any kernel of this block size never loads the entry's module.
    pub(crate) fn cooperative_for(
        &self,
        blocks: u64,
    ) -> Result<Option<&CooperativeEntry>, DriverError> {
        let Some(form) = &self.cooperative else {
            return Ok(None);
        };
        if blocks > form.resident_bound {
            return Ok(None);
        }
        let threads = self.abi.threads_per_workgroup();
        let name = self.abi.cooperative_entry_name();
        let entry = form
            .entry
            .get(|module| CooperativeEntry::find(&module?, &name, threads, form.multiprocessors))?;
        Ok(entry.as_ref().filter(|entry| blocks <= entry.max_blocks))
    }
}

/// Entries loaded with the kernel, or in a module of their own compiled on first need.
pub(crate) enum OnDemand<T> {
    Loaded(T),
    Lazy(LazyModule<T>),
}

impl<T> OnDemand<T> {
    fn get(
        &self,
        resolve: impl FnOnce(Result<Arc<Module>, DriverError>) -> Result<T, DriverError>,
    ) -> Result<&T, DriverError> {
        match self {
            Self::Loaded(value) => Ok(value),
            Self::Lazy(module) => module.get(resolve),
        }
    }
}

/// What a [`LazyModule`] holds (named in its load's span).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LazyKind {
    /// The elementwise vector entry ([`crate::codegen::VECTOR_ENTRY`]).
    Vector,
    /// The entry with every load checked, named like the kernel's first entry.
    Checked,
    /// The segment entries of a kernel whose cooperative entry is a module of its own.
    Segments,
    /// The cooperative entry alone (`codegen::EmittedKernel::cooperative_ptx`).
    Cooperative,
}

impl LazyKind {
    fn name(self) -> &'static str {
        match self {
            Self::Vector => "vector",
            Self::Checked => "checked",
            Self::Segments => "segments",
            Self::Cooperative => "cooperative",
        }
    }
}

/// A module text JIT-compiled on first use, and what launches need of it once loaded. A
/// load that fails is not kept: the next launch that needs the module tries again.
pub(crate) struct LazyModule<T> {
    pub(crate) device: Arc<Device>,
    pub(crate) jit: Arc<super::jit::Jit>,
    pub(crate) ptx: String,
    pub(crate) kind: LazyKind,
    pub(crate) loaded: OnceLock<T>,
    /// Held while loading: launches that need the module at once compile it once.
    pub(crate) loading: Mutex<()>,
    /// Where the load is counted (`vyre_cuda_module_loads_total`).
    pub(crate) metrics: Arc<super::metrics::Metrics>,
}

impl<T> LazyModule<T> {
    /// What `resolve` makes of the module, loading it on the first call.
    fn get(
        &self,
        resolve: impl FnOnce(Result<Arc<Module>, DriverError>) -> Result<T, DriverError>,
    ) -> Result<&T, DriverError> {
        if let Some(value) = self.loaded.get() {
            return Ok(value);
        }
        // A poisoned lock only means another load panicked; loading again is sound.
        let _loading = self.loading.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(value) = self.loaded.get() {
            return Ok(value);
        }
        let _span =
            tracing::debug_span!("vyre_cuda.lazy_module_load", kind = self.kind.name()).entered();
        let module = self
            .jit
            .load(&self.device, &self.ptx, None)
            .map_err(|error| match error {
                super::jit::LoadError::Driver(error) => error,
                other => DriverError::invalid_ptx_text(other.to_string()),
            });
        if module.is_ok() {
            super::metrics::Metrics::bump(&self.metrics.module_loads);
        }
        let value = resolve(module)?;
        Ok(self.loaded.get_or_init(|| value))
    }
}

/// The vector entry and how launches use it.
pub(crate) struct LazyVector {
    pub(crate) entry: LazyModule<Option<Function>>,
    /// Launches of fewer invocations keep the scalar entry.
    pub(crate) min_invocations: u32,
    /// Most blocks of one launch (`CudaOptions::vector_max_blocks`).
    pub(crate) max_blocks: u32,
}

/// A kernel's cooperative entry, loaded or compiled on first need, and what decides
/// whether a launch uses it.
pub(crate) struct CooperativeForm {
    /// The entry (`None`: not one block of it fits on a multiprocessor).
    pub(crate) entry: OnDemand<Option<CooperativeEntry>>,
    /// Most blocks of the kernel's size the device keeps resident at once, whatever its
    /// registers and shared memory (`DeviceInfo::resident_blocks_bound`): a larger grid
    /// never runs cooperatively, so its launches do not compile the entry.
    pub(crate) resident_bound: u64,
    pub(crate) multiprocessors: u32,
}

/// A kernel's cooperative entry and the largest grid that is resident at once with it.
pub(crate) struct CooperativeEntry {
    pub(crate) function: Function,
    /// Occupancy (blocks per multiprocessor, for this kernel's block size, registers and
    /// shared memory) times the multiprocessor count.
    pub(crate) max_blocks: u64,
}

impl CooperativeEntry {
    /// The entry `name` of `module` and how many of its blocks of `threads` fit resident
    /// on `multiprocessors`; `None` when not one does.
    pub(crate) fn find(
        module: &Arc<Module>,
        name: &str,
        threads: u32,
        multiprocessors: u32,
    ) -> Result<Option<Self>, DriverError> {
        let function = module.function(name)?;
        let per_sm = function.max_active_blocks_per_multiprocessor(threads)?;
        let max_blocks = u64::from(per_sm) * u64::from(multiprocessors);
        Ok((max_blocks > 0).then_some(Self {
            function,
            max_blocks,
        }))
    }
}

/// A least-recently-used map bounded by entry count and total bytes (each entry states its
/// own size).
pub(crate) struct Lru<K, V> {
    map: FxHashMap<K, (V, usize, u64)>,
    tick: u64,
    bytes: usize,
    max_entries: usize,
    max_bytes: usize,
}

impl<K: Hash + Eq + Clone, V: Clone> Lru<K, V> {
    pub(crate) fn new(max_entries: usize, max_bytes: usize) -> Self {
        Self {
            map: FxHashMap::default(),
            tick: 0,
            bytes: 0,
            max_entries: max_entries.max(1),
            max_bytes,
        }
    }

    pub(crate) fn get(&mut self, key: &K) -> Option<V> {
        self.tick += 1;
        let tick = self.tick;
        self.map.get_mut(key).map(|(value, _, used)| {
            *used = tick;
            value.clone()
        })
    }

    /// Inserts (or keeps an existing entry for) `key`; returns the entry now cached and the
    /// entries evicted to stay within bounds. An entry larger than `max_bytes` on its own
    /// is returned but not cached.
    pub(crate) fn insert(&mut self, key: K, value: V, bytes: usize) -> (V, Vec<V>) {
        self.tick += 1;
        let tick = self.tick;
        if let Some((existing, _, used)) = self.map.get_mut(&key) {
            *used = tick;
            return (existing.clone(), Vec::new());
        }
        if bytes > self.max_bytes {
            return (value, Vec::new());
        }
        let mut evicted = Vec::new();
        while self.map.len() >= self.max_entries || self.bytes + bytes > self.max_bytes {
            let Some((old, old_bytes, _)) = evict_oldest(&mut self.map, |e| Some(e.2)) else {
                break;
            };
            self.bytes -= old_bytes;
            evicted.push(old);
        }
        self.bytes += bytes;
        self.map.insert(key, (value.clone(), bytes, tick));
        (value, evicted)
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(crate) fn clear(&mut self) {
        self.map.clear();
        self.bytes = 0;
    }
}

/// Removes the entry of `map` with the smallest `age` (`None`: the entry is not evictable).
/// A scan: the caches here hold at most a few thousand entries and evict only on a miss.
pub(crate) fn evict_oldest<K: Hash + Eq + Clone, V>(
    map: &mut FxHashMap<K, V>,
    age: impl Fn(&V) -> Option<u64>,
) -> Option<V> {
    let entries = map
        .iter()
        .filter_map(|(key, value)| Some((key, age(value)?)));
    let oldest = entries.min_by_key(|&(_, age)| age)?.0.clone();
    map.remove(&oldest)
}

/// The PTX texts kept (bounded as `CudaOptions::ptx_cache_*` says) and the modules kept
/// loaded (`CudaOptions::module_cache_*`).
pub(crate) struct KernelCache {
    pub(crate) ptx: std::sync::Mutex<Lru<KernelKey, Arc<EmittedKernel>>>,
    pub(crate) modules: std::sync::Mutex<Lru<KernelKey, Arc<LoadedKernel>>>,
}

impl KernelCache {
    pub(crate) fn clear(&self) {
        if let Ok(mut ptx) = self.ptx.lock() {
            ptx.clear();
        }
        if let Ok(mut modules) = self.modules.lock() {
            modules.clear();
        }
    }

    pub(crate) fn loaded(&self) -> usize {
        self.modules.lock().map(|m| m.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_least_recently_used_by_count() {
        let mut lru = Lru::new(2, usize::MAX);
        lru.insert("a", 1, 1);
        lru.insert("b", 2, 1);
        assert_eq!(lru.get(&"a"), Some(1)); // "b" is now the oldest
        let (_, evicted) = lru.insert("c", 3, 1);
        assert_eq!(evicted, [2]);
        assert_eq!(lru.get(&"b"), None);
        assert_eq!(lru.get(&"a"), Some(1));
        assert_eq!(lru.get(&"c"), Some(3));
        assert_eq!(lru.len(), 2);
    }

    #[test]
    fn evicts_by_bytes_and_refuses_oversized_entries() {
        let mut lru = Lru::new(100, 10);
        lru.insert(1, "x", 4);
        lru.insert(2, "y", 4);
        let (_, evicted) = lru.insert(3, "z", 4);
        assert_eq!(evicted, ["x"]);
        assert_eq!(lru.bytes(), 8);
        let (value, evicted) = lru.insert(4, "huge", 11);
        assert_eq!(value, "huge");
        assert!(evicted.is_empty());
        assert_eq!(lru.get(&4), None);
        assert_eq!(lru.bytes(), 8);
    }

    #[test]
    fn inserting_an_existing_key_keeps_the_first_value() {
        let mut lru = Lru::new(4, 100);
        lru.insert("k", 1, 5);
        let (value, evicted) = lru.insert("k", 2, 5);
        assert_eq!((value, evicted.len(), lru.bytes()), (1, 0, 5));
    }

    #[test]
    fn evicted_values_stay_alive_while_held_elsewhere() {
        let mut lru = Lru::new(1, usize::MAX);
        let held = Arc::new(7);
        lru.insert(1, Arc::clone(&held), 1);
        let (_, evicted) = lru.insert(2, Arc::new(8), 1);
        drop(evicted);
        // The cache dropped its reference; the dispatch's reference keeps the value.
        assert_eq!(Arc::strong_count(&held), 1);
        assert_eq!(*held, 7);
    }
}
