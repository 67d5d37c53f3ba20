//! The CUDA backend core: program validation, the kernel caches, device memory, resident
//! buffers and every dispatch path. [`CudaBackend`] is public for applications that want
//! the device directly (resident workflows, device timing, the PTX); the `VyreBackend`
//! adapter in [`crate::adapter`] maps onto it.
//!
//! All state lives in one `Arc`'d core, so pending dispatches, compiled pipelines and
//! device buffers can keep what they use alive without borrowing the backend.

pub(crate) mod artifact;
mod cache;
mod chunked;
mod collective;
mod device_buffer;
mod dispatch;
mod graphs;
mod identity;
mod jit;
mod launch;
mod metrics;
mod pending;
mod pipeline;
mod plan;
mod pool;
pub(crate) mod recycle;
mod resident;
mod sequence;
mod small;
mod staging;

#[doc(hidden)]
pub use crate::driver::FailPoint;
pub use collective::{
    collective_fold_program, CollectiveReduction, CudaCluster, PeerBarrierKind,
    COLLECTIVE_PEER_FOLD_ENV, COLLECTIVE_REDUCTION_ENV, COLLECTIVE_TIMEOUT_ENV,
    DEFAULT_COLLECTIVE_TIMEOUT, PEER_BARRIER_ENV,
};
pub use device_buffer::CudaDeviceBuffer;
pub use pending::CudaPendingDispatch;
pub use pipeline::CudaPipeline;
pub(crate) use plan::{binding_order, reference_grid_for};
pub use pool::PoolKind;
pub(crate) use sequence::{Fill, Read, ResidentBatch, Step, Upload};

use crate::codegen::{emit_prepared, reference_program, CodegenError, EmittedKernel, PtxTarget};
use crate::compat::HandleNamespace;
use crate::driver::{Device, DeviceAlloc, DeviceInfo, DriverError};
use crate::error::CudaError;
use cache::{
    CooperativeEntry, CooperativeForm, KernelCache, KernelKey, LazyKind, LazyModule, LazyVector,
    LoadedKernel, Lru, OnDemand,
};
use identity::ProgramIdentities;
use launch::GridSyncLaunch;
use metrics::Metrics;
use plan::GridLimits;
use pool::{DevicePool, Pool, Pooled, StreamSlot};
use resident::{Budget, HandleError, HandleTable};
use staging::{Staging, StagingConfig};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use vyre_driver::{DispatchConfig, Resource};
use vyre_foundation::ir::Program;
use vyre_foundation::validate::{
    validate::validate_with_options, BackendCapabilities, ValidationOptions,
};

/// Environment variable naming the CUDA device ordinal to use (default 0).
pub const DEVICE_ENV: &str = "VYRE_CUDA_DEVICE";
/// Environment variable choosing the transient memory pool (`size-classes`, `stream-ordered`).
pub const POOL_ENV: &str = "VYRE_CUDA_POOL";
/// Environment variable capping resident memory, in bytes.
pub const RESIDENT_BUDGET_ENV: &str = "VYRE_CUDA_RESIDENT_BUDGET";
/// Environment variable setting the worker threads of one large host transfer.
pub const COPY_THREADS_ENV: &str = "VYRE_CUDA_COPY_THREADS";
/// Environment variable that, set to `1`, makes [`CudaOptions::split_grid_sync`] true.
pub const SPLIT_GRID_SYNC_ENV: &str = "VYRE_CUDA_SPLIT_GRID_SYNC";
/// Environment variable setting the packed small-dispatch arena, in bytes (0 disables it).
pub const SMALL_DISPATCH_BYTES_ENV: &str = "VYRE_CUDA_SMALL_DISPATCH_BYTES";
pub use jit::{serve as serve_jit_helper, JIT_HELPER_ENV};

/// Environment variable setting [`CudaOptions::vector_min_invocations`].
pub const VECTOR_MIN_INVOCATIONS_ENV: &str = "VYRE_CUDA_VECTOR_MIN_INVOCATIONS";
/// Environment variable setting [`CudaOptions::vector_max_blocks`].
pub const VECTOR_MAX_BLOCKS_ENV: &str = "VYRE_CUDA_VECTOR_MAX_BLOCKS";
/// Environment variable setting [`CudaOptions::jit_optimization_level`] (0..=4).
pub const JIT_OPTIMIZATION_LEVEL_ENV: &str = "VYRE_CUDA_JIT_OPT_LEVEL";
/// Environment variable turning on blocking (sleeping) waits: `1` or `true`.
pub const BLOCKING_WAIT_ENV: &str = "VYRE_CUDA_BLOCKING_WAIT";

/// How a [`CudaBackend`] is set up. [`CudaOptions::from_env`] reads the `VYRE_CUDA_*`
/// variables; tests and applications can also fill it in directly.
#[derive(Debug, Clone)]
pub struct CudaOptions {
    /// Device ordinal.
    pub device: usize,
    /// Most bytes of resident buffers at once (`None`: 90% of the device's memory).
    pub resident_budget: Option<u64>,
    /// Which pool serves transient device memory.
    pub pool: PoolKind,
    /// Bytes per pinned staging chunk.
    pub staging_chunk_bytes: usize,
    /// Most worker threads one large host transfer uses.
    pub copy_threads: usize,
    /// Kernel cache bounds: PTX texts kept (entries, bytes) and modules kept loaded.
    pub ptx_cache_entries: usize,
    /// See `ptx_cache_entries`.
    pub ptx_cache_bytes: usize,
    /// See `ptx_cache_entries`.
    pub module_cache_entries: usize,
    /// See `ptx_cache_entries` (counted as PTX bytes of the loaded modules).
    pub module_cache_bytes: usize,
    /// Launch programs with grid-wide barriers as one launch per segment even where a
    /// single cooperative launch would fit (by default the cooperative form runs whenever
    /// the device supports cooperative launches and the whole grid fits resident).
    pub split_grid_sync: bool,
    /// Synchronous dispatches whose buffers (each rounded up to 256 bytes) and fault word
    /// fit in this many bytes take the packed path: one upload, the launch, one download,
    /// one wait. 0 sends every dispatch through the general path.
    pub small_dispatch_bytes: usize,
    /// Wait for small dispatches and resident sequences on blocking-sync events: the host
    /// thread sleeps instead of spinning, which saves CPU time and costs wake-up latency.
    pub blocking_wait: bool,
    /// Launches of elementwise programs with at least this many invocations use the
    /// vector entry (4 invocations per thread, 16-byte accesses), whose module is compiled
    /// on the first such launch; smaller ones use the scalar entry, so small and one-off
    /// programs pay for one JIT compilation only. 0 uses the vector entry whenever it may.
    pub vector_min_invocations: u32,
    /// Most blocks a launch of a vector entry uses: with fewer blocks than the range
    /// needs, each thread loops over groups of 4 invocations a grid apart. 0: one group
    /// per thread (as many blocks as the range needs).
    pub vector_max_blocks: u32,
    /// Compile every module in this helper executable instead of in this process
    /// (`VYRE_CUDA_JIT_HELPER`; see `backend/jit.rs` and the README's "If the driver's
    /// compiler crashes"): a crash of the driver's PTX compiler then fails one dispatch
    /// instead of killing the process. `None`: the driver's JIT runs in-process.
    pub jit_helper: Option<PathBuf>,
    /// The driver JIT's optimisation level (`CU_JIT_OPTIMIZATION_LEVEL`, 0..=4;
    /// `VYRE_CUDA_JIT_OPT_LEVEL`). `None`: the driver's default (4). Lower levels compile
    /// faster and may run slower; results are the same bits at every level (the emitted
    /// PTX fixes every rounding). Not applied by the JIT helper, which compiles at the
    /// default.
    pub jit_optimization_level: Option<u32>,
    /// Emit PTX for this SM architecture (e.g. `75`) instead of the device's own; it must
    /// not be newer than the device, whose driver JIT-compiles the older PTX for it. For
    /// testing the code paths of older GPUs (bf16 rounding below sm_80) on a newer one.
    /// `None`: the device's architecture.
    pub emit_sm: Option<u32>,
    /// On a rank ([`CudaBackend::join`], [`CudaCluster`]): how long a dispatch holding
    /// collectives may wait for its peers before every communicator it uses is aborted
    /// (`VYRE_CUDA_COLLECTIVE_TIMEOUT_MS`; default 60 s).
    pub collective_timeout: std::time::Duration,
    /// On a rank: how float reductions combine the ranks (`VYRE_CUDA_COLLECTIVE_REDUCTION`,
    /// `exact` (default) or `native`).
    pub collective_reduction: CollectiveReduction,
    /// In a [`CudaCluster`] whose GPUs can reach each other's memory: exact reductions
    /// fold by reading every rank's block directly (peer access) instead of exchanging
    /// blocks through NCCL first (`VYRE_CUDA_COLLECTIVE_PEER_FOLD`, `1` (default) or `0`).
    /// Same bits either way; the peer fold moves the bytes once.
    pub collective_peer_fold: bool,
    /// How the ranks of such a cluster wait for each other around those folds
    /// (`VYRE_CUDA_PEER_BARRIER`, `memops` (default), `memops-each` or `events`): flags
    /// written and waited for by stream memory operations, or cross-GPU events. A cluster
    /// whose GPUs lack 64-bit stream memory operations uses events
    /// ([`CudaCluster::peer_barrier`] says which). Same bits either way. With flags
    /// (`memops`, `memops-each`) the fold kernels of floats and bits meet the other ranks
    /// themselves through the same flag words instead (`codegen::PeerSync`), unless
    /// `VYRE_CUDA_PEER_SYNC=barriers`.
    pub collective_peer_barrier: PeerBarrierKind,
}

impl Default for CudaOptions {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Self {
            device: 0,
            resident_budget: None,
            pool: PoolKind::SizeClasses,
            staging_chunk_bytes: 4 << 20,
            copy_threads: (cores / 2).clamp(1, 8),
            ptx_cache_entries: 4096,
            ptx_cache_bytes: 256 << 20,
            module_cache_entries: 1024,
            module_cache_bytes: 512 << 20,
            split_grid_sync: false,
            small_dispatch_bytes: small::DEFAULT_SMALL_DISPATCH_BYTES,
            vector_min_invocations: 1 << 16,
            vector_max_blocks: 0,
            blocking_wait: false,
            jit_helper: None,
            jit_optimization_level: None,
            emit_sm: None,
            collective_timeout: DEFAULT_COLLECTIVE_TIMEOUT,
            collective_reduction: CollectiveReduction::Exact,
            collective_peer_fold: true,
            collective_peer_barrier: PeerBarrierKind::MemOps,
        }
    }
}

impl CudaOptions {
    /// Defaults overridden by `VYRE_CUDA_DEVICE`, `VYRE_CUDA_POOL`,
    /// `VYRE_CUDA_RESIDENT_BUDGET`, `VYRE_CUDA_COPY_THREADS`, `VYRE_CUDA_SPLIT_GRID_SYNC`,
    /// `VYRE_CUDA_SMALL_DISPATCH_BYTES`, `VYRE_CUDA_BLOCKING_WAIT`,
    /// `VYRE_CUDA_VECTOR_MIN_INVOCATIONS`, `VYRE_CUDA_VECTOR_MAX_BLOCKS`, `VYRE_CUDA_JIT_HELPER`, `VYRE_CUDA_JIT_OPT_LEVEL`, `VYRE_CUDA_COLLECTIVE_TIMEOUT_MS`,
    /// `VYRE_CUDA_COLLECTIVE_REDUCTION`, `VYRE_CUDA_COLLECTIVE_PEER_FOLD` and
    /// `VYRE_CUDA_PEER_BARRIER`.
    pub fn from_env() -> Result<Self, CudaError> {
        let mut options = Self::default();
        let number = |name: &str| {
            env_var(name, "a number", "a non-negative integer", |t| {
                t.parse::<u64>().ok()
            })
        };
        if let Some(device) = number(DEVICE_ENV)? {
            options.device = device as usize;
        }
        if let Some(helper) = std::env::var_os(JIT_HELPER_ENV).filter(|h| !h.is_empty()) {
            options.jit_helper = Some(PathBuf::from(helper));
        }
        let level = |t: &str| t.parse::<u32>().ok().filter(|l| *l <= MAX_JIT_LEVEL);
        let levels = "an optimisation level from 0 to 4";
        options.jit_optimization_level =
            env_var(JIT_OPTIMIZATION_LEVEL_ENV, "a JIT level", levels, level)?;
        let kinds = "`size-classes` or `stream-ordered`";
        if let Some(pool) = env_var(POOL_ENV, "a pool kind", kinds, PoolKind::parse)? {
            options.pool = pool;
        }
        options.resident_budget = number(RESIDENT_BUDGET_ENV)?.or(options.resident_budget);
        if let Some(threads) = number(COPY_THREADS_ENV)? {
            options.copy_threads = threads.max(1) as usize;
        }
        let split = |t: &str| match t {
            "1" => Some(true),
            "0" | "" => Some(false),
            _ => None,
        };
        let always_split = "1 (always split grid-wide barriers into launches) or 0";
        if let Some(on) = env_var(SPLIT_GRID_SYNC_ENV, "0 or 1", always_split, split)? {
            options.split_grid_sync = on;
        }
        if let Some(min) = number(VECTOR_MIN_INVOCATIONS_ENV)? {
            options.vector_min_invocations = u32::try_from(min).unwrap_or(u32::MAX);
        }
        if let Some(blocks) = number(VECTOR_MAX_BLOCKS_ENV)? {
            options.vector_max_blocks = u32::try_from(blocks).unwrap_or(u32::MAX);
        }
        if let Some(bytes) = number(SMALL_DISPATCH_BYTES_ENV)? {
            options.small_dispatch_bytes = bytes as usize;
        }
        let switch = |t: &str| match t {
            "1" | "true" => Some(true),
            "0" | "false" | "" => Some(false),
            _ => None,
        };
        if let Some(on) = env_var(BLOCKING_WAIT_ENV, "a switch", "1 or 0", switch)? {
            options.blocking_wait = on;
        }
        if let Some(ms) = number(COLLECTIVE_TIMEOUT_ENV)? {
            options.collective_timeout = std::time::Duration::from_millis(ms.max(1));
        }
        let modes = "`exact` or `native`";
        let parse = CollectiveReduction::parse;
        if let Some(mode) = env_var(COLLECTIVE_REDUCTION_ENV, "a reduction mode", modes, parse)? {
            options.collective_reduction = mode;
        }
        if let Some(on) = env_var(COLLECTIVE_PEER_FOLD_ENV, "a switch", "1 or 0", switch)? {
            options.collective_peer_fold = on;
        }
        let barriers = "`memops`, `memops-each` or `events`";
        let parse = PeerBarrierKind::parse;
        if let Some(kind) = env_var(PEER_BARRIER_ENV, "a peer barrier", barriers, parse)? {
            options.collective_peer_barrier = kind;
        }
        Ok(options)
    }
}

/// Environment variable `name` through `parse` (given the trimmed text); `None` when unset.
/// A value `parse` rejects is reported as not being `what`, with `expected` as the fix.
fn env_var<T>(
    name: &str,
    what: &str,
    expected: &str,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Result<Option<T>, CudaError> {
    let Ok(text) = std::env::var(name) else {
        return Ok(None);
    };
    let parsed = parse(text.trim()).ok_or_else(|| {
        CudaError::invalid_input(
            format!("{name}={text:?} is not {what}"),
            format!("set {name} to {expected}, or unset it"),
        )
    })?;
    Ok(Some(parsed))
}

/// The highest `CU_JIT_OPTIMIZATION_LEVEL` (the driver's default).
const MAX_JIT_LEVEL: u32 = 4;

/// A level the driver accepts, checked before any device work: the driver answers another
/// with `CUDA_ERROR_INVALID_VALUE` at every JIT, which would also read as a driver that does
/// not know split compilation.
fn check_jit_level(level: Option<u32>) -> Result<(), CudaError> {
    match level {
        Some(level) if level > MAX_JIT_LEVEL => Err(CudaError::invalid_input(
            format!("CudaOptions::jit_optimization_level is {level}; the driver's levels are 0 to {MAX_JIT_LEVEL}"),
            format!("set jit_optimization_level to a level from 0 to {MAX_JIT_LEVEL}, or to None"),
        )),
        _ => Ok(()),
    }
}

/// The compute capability to emit for: the device's, or `emit_sm` when that is not newer.
fn emitted_architecture(
    (major, minor): (u32, u32),
    emit_sm: Option<u32>,
) -> Result<(u32, u32), CudaError> {
    let Some(sm) = emit_sm else {
        return Ok((major, minor));
    };
    if sm > major * 10 + minor {
        return Err(CudaError::invalid_input(
            format!("CudaOptions::emit_sm is sm_{sm}, newer than the device (sm_{major}{minor})"),
            format!("set emit_sm to at most {major}{minor}, or to None"),
        ));
    }
    Ok((sm / 10, sm % 10))
}

/// A resident buffer: device memory counted against the resident budget until the last
/// holder (the handle table or a dispatch using it) drops it.
pub(crate) struct ResidentBuffer {
    alloc: DeviceAlloc,
    budget: Arc<Budget>,
}

impl ResidentBuffer {
    pub(crate) fn ptr(&self) -> u64 {
        self.alloc.ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.alloc.len()
    }
}

impl Drop for ResidentBuffer {
    fn drop(&mut self) {
        self.budget.release(self.alloc.len() as u64);
    }
}

/// Everything a backend owns.
/// Set to `0` to JIT an artifact's module serially (diagnostics: see
/// `split_compile_threads`).
pub const SPLIT_COMPILE_ENV: &str = "VYRE_CUDA_SPLIT_COMPILE";

/// Threads for the JIT of one module holding `kernels`: one per kernel up to the host's
/// parallelism, for modules of several kernels (a single kernel gains nothing, measured).
/// Not for a module with a cooperative entry: split compilation of grid-barrier entries
/// has not been checked on its own on the GPU (the one wrong result seen while it was on,
/// `fft_radix2`'s, stayed with it off), so those keep compiling serially, as before.
fn split_compile_threads(kernels: &[SharedKernel]) -> Option<u32> {
    let off = std::env::var(SPLIT_COMPILE_ENV).is_ok_and(|value| value == "0");
    if off || kernels.len() < 2 || kernels.iter().any(|kernel| kernel.abi.cooperative) {
        return None;
    }
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let threads = kernels.len().min(cpus);
    (threads > 1).then_some(threads as u32)
}

/// One kernel of a module that holds several ([`Core::load_shared`]).
pub(crate) struct SharedKernel {
    pub(crate) key: KernelKey,
    pub(crate) abi: crate::codegen::KernelAbi,
    /// Its vector entry's own module, when it has one.
    pub(crate) vector_ptx: Option<String>,
    /// See [`LoadedKernel::fault_area_optional`].
    pub(crate) fault_area_optional: bool,
}

pub(crate) struct Core {
    device: Arc<Device>,
    target: PtxTarget,
    limits: GridLimits,
    kernels: KernelCache,
    identities: ProgramIdentities,
    streams: Pool<StreamSlot>,
    pool: DevicePool,
    staging: Staging,
    small: small::SmallLanes,
    graphs: graphs::GraphCache,
    resident: HandleTable<ResidentBuffer>,
    /// The instance's namespace of `Resource::Resident` handles.
    pub(crate) handles: HandleNamespace,
    budget: Arc<Budget>,
    metrics: Arc<Metrics>,
    /// How programs with grid-wide barriers launch (cooperative only where the device
    /// supports it and the options allow it).
    grid_sync: GridSyncLaunch,
    /// [`CudaOptions::vector_min_invocations`].
    vector_min_invocations: u32,
    /// [`CudaOptions::vector_max_blocks`] (0 as `u32::MAX`).
    vector_max_blocks: u32,
    /// Where modules are compiled ([`CudaOptions::jit_helper`]).
    jit: Arc<jit::Jit>,
    /// Set when the last capture that held cooperative launches failed: they do not work
    /// inside a CUDA graph capture on this device (see `sequence.rs`).
    cooperative_capture_fails: AtomicBool,
    /// Set by [`CudaBackend::shutdown`].
    shut_down: AtomicBool,
    /// Set by the first sticky driver error: the context is gone for the whole process.
    lost: Mutex<Option<String>>,
    /// The communicator of a rank ([`CudaBackend::join`], [`CudaCluster`]).
    rank: OnceLock<collective::RankComm>,
}

/// Runs vyre programs on one NVIDIA GPU.
///
/// `Send + Sync`: any number of threads may dispatch at once; each dispatch takes its own
/// stream (and staging lane) from a pool, so dispatches from several threads overlap.
#[derive(Clone)]
pub struct CudaBackend {
    core: Arc<Core>,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend")
            .field("device", &self.core.device.info().name)
            .field("target", &self.core.target)
            .finish_non_exhaustive()
    }
}

impl CudaBackend {
    /// Open the device with [`CudaOptions::from_env`].
    pub fn new() -> Result<Self, CudaError> {
        Self::with_options(CudaOptions::from_env()?)
    }

    /// Open a device with explicit options.
    pub fn with_options(options: CudaOptions) -> Result<Self, CudaError> {
        check_jit_level(options.jit_optimization_level)?;
        let device = Device::open(options.device)?;
        let info = device.info();
        let (major, minor) = emitted_architecture(info.compute_capability, options.emit_sm)?;
        let target = PtxTarget::for_device(major, minor, info.driver_version)?;
        let limits = GridLimits {
            max_grid_dim: info.max_grid_dim,
            max_buffer_bytes: info.total_memory_bytes,
        };
        let budget = options
            .resident_budget
            .unwrap_or(info.total_memory_bytes / 10 * 9);
        let transient_idle = (info.total_memory_bytes / 16) as usize;
        if options.pool == PoolKind::StreamOrdered {
            crate::driver::StreamOrderedAlloc::set_release_threshold(
                &device,
                transient_idle as u64,
            )?;
        }
        tracing::debug!(device = %info.name, %target, ?options, "vyre-cuda backend opened");
        let metrics = Arc::new(Metrics::default());
        let staging = StagingConfig::new(options.staging_chunk_bytes, options.copy_threads);
        let core = Core {
            target,
            limits,
            kernels: KernelCache {
                ptx: Mutex::new(Lru::new(options.ptx_cache_entries, options.ptx_cache_bytes)),
                modules: Mutex::new(Lru::new(
                    options.module_cache_entries,
                    options.module_cache_bytes,
                )),
            },
            identities: ProgramIdentities::default(),
            streams: Pool::new(64),
            pool: DevicePool::new(
                options.pool,
                transient_idle,
                Arc::clone(&device),
                Arc::clone(&metrics),
            ),
            staging: Staging::new(staging, Arc::clone(&device), Arc::clone(&metrics)),
            small: small::SmallLanes::new(options.small_dispatch_bytes, options.blocking_wait),
            graphs: graphs::GraphCache::default(),
            resident: HandleTable::new(),
            handles: HandleNamespace::new().map_err(CudaError::Vyre)?,
            budget: Arc::new(Budget::new(budget)),
            metrics,
            grid_sync: if info.cooperative_launch && !options.split_grid_sync {
                GridSyncLaunch::CooperativeWhereItFits
            } else {
                GridSyncLaunch::Split
            },
            vector_min_invocations: options.vector_min_invocations,
            vector_max_blocks: match options.vector_max_blocks {
                0 => u32::MAX,
                blocks => blocks,
            },
            jit: Arc::new(jit::Jit::new(
                options.jit_helper,
                options.device,
                options.jit_optimization_level,
            )),
            cooperative_capture_fails: AtomicBool::new(false),
            shut_down: AtomicBool::new(false),
            lost: Mutex::new(None),
            rank: OnceLock::new(),
            device,
        };
        Ok(Self {
            core: Arc::new(core),
        })
    }

    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// The device this backend runs on.
    #[must_use]
    pub fn device_info(&self) -> &DeviceInfo {
        self.core.device.info()
    }

    /// The PTX target chosen for this device and driver.
    #[must_use]
    pub fn target(&self) -> PtxTarget {
        self.core.target
    }

    /// `(free, total)` device memory in bytes, as the driver reports it.
    pub fn memory_info(&self) -> Result<(u64, u64), CudaError> {
        Ok(self.core.device.memory_info()?)
    }

    /// The PTX this backend would load for `program` (no device work).
    pub fn emit(
        &self,
        program: &Program,
        config: &DispatchConfig,
    ) -> Result<EmittedKernel, CudaError> {
        let program = validated(program)?;
        Ok(emit_prepared(
            &program,
            config.workgroup_override,
            self.core.target,
        )?)
    }

    /// Telemetry counters and gauges as stable `(name, value)` pairs.
    #[must_use]
    pub fn metric_snapshot(&self) -> Vec<(&'static str, u64)> {
        self.core.metric_snapshot()
    }

    /// One telemetry value by name (0 when unknown).
    #[must_use]
    pub fn metric(&self, name: &str) -> u64 {
        self.core
            .metric_snapshot()
            .into_iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, v)| v)
    }

    /// Whether programs with grid-wide barriers run as one cooperative launch wherever the
    /// grid fits resident: the device supports cooperative launches and
    /// [`CudaOptions::split_grid_sync`] is off. Otherwise (and for grids too large to be
    /// resident) they run as ordered launches, one per segment.
    #[must_use]
    pub fn cooperative_grid_sync(&self) -> bool {
        self.core.grid_sync == GridSyncLaunch::CooperativeWhereItFits
    }

    /// Whether `program` dispatched over `inputs` with `config` would run as one cooperative
    /// launch: it has grid-wide barriers, cooperative launches are on, and its grid fits
    /// resident on the device. Compiles the kernel (kept in the kernel cache) to read its
    /// occupancy; `false` for programs without grid-wide barriers.
    ///
    /// # Errors
    /// Whatever compiling the kernel or planning the dispatch reports (an invalid program,
    /// wrong input count or sizes, a grid over the device's limits).
    pub fn cooperative_grid_sync_fits(
        &self,
        program: &Program,
        inputs: &[&[u8]],
        config: &DispatchConfig,
    ) -> Result<bool, CudaError> {
        if !self.cooperative_grid_sync() {
            return Ok(false);
        }
        let core = &self.core;
        core.usable()?;
        let kernel = core.kernel(program, config)?;
        let input_lens: smallvec::SmallVec<[usize; 8]> = inputs.iter().map(|i| i.len()).collect();
        let plan = plan::DispatchPlan::new(program, &kernel.abi, &input_lens, config, core.limits)?;
        let blocks = plan.grid.iter().map(|&d| u64::from(d)).product::<u64>();
        let entry = kernel
            .cooperative_for(blocks)
            .map_err(|e| core.driver_error(e))?;
        Ok(entry.is_some())
    }

    /// `(hits, misses)` of the loaded-kernel cache.
    #[must_use]
    pub fn kernel_cache_counters(&self) -> (u64, u64) {
        let m = &self.core.metrics;
        (
            m.kernel_cache_hits.load(Ordering::Relaxed),
            m.kernel_cache_misses.load(Ordering::Relaxed),
        )
    }

    /// Warm up: make the context current, create a stream with its events, a staging lane
    /// with one pinned slot and a small-dispatch lane (arena and pinned buffer), so the
    /// first dispatch pays none of that.
    pub fn prepare(&self) -> Result<(), CudaError> {
        self.core.prepare()
    }

    /// Test hook: fails the `nth` (from 1) later driver call of `kind` on this backend's
    /// device, once, with a non-sticky error (see [`FailPoint`]).
    #[doc(hidden)]
    pub fn fail_driver_call(&self, kind: FailPoint, nth: u32) {
        self.core.device.fail_call(kind, nth);
    }

    /// Test hook: disarms [`Self::fail_driver_call`]; true when its failure had not been
    /// injected yet.
    #[doc(hidden)]
    pub fn disarm_driver_failure(&self) -> bool {
        self.core.device.disarm()
    }

    /// Wait for all work on the device.
    pub fn flush(&self) -> Result<(), CudaError> {
        self.core.usable()?;
        self.core
            .device
            .synchronize()
            .map_err(|e| self.core.driver_error(e))
    }

    /// Release everything: resident buffers, cached kernels, pools, streams, the JIT
    /// helper process (with its CUDA context) when one runs. Afterwards
    /// every call fails with [`CudaError::ShutDown`]. Memory that a dispatch still running
    /// on another thread uses is released when that dispatch finishes.
    pub fn shutdown(&self) -> Result<(), CudaError> {
        self.core.shutdown()
    }

    /// Whether a sticky driver error destroyed the context (then every call fails; only a
    /// new process can use the GPU again).
    #[must_use]
    pub fn device_lost(&self) -> bool {
        self.core.lost_cause().is_some()
    }

    /// Whether the backend can continue: `Ok` while the device is healthy, else
    /// [`CudaError::DeviceLost`]. A sticky context error (e.g. `CUDA_ERROR_ILLEGAL_ADDRESS`)
    /// cannot be recovered in-process on driver 580 (resetting or re-creating contexts keeps
    /// failing), so the caller must restart the process. vyre-cuda's own kernels report
    /// run-time errors through a fault word, so failing dispatches do not poison later ones.
    pub fn try_recover(&self) -> Result<(), CudaError> {
        self.core.usable()
    }
}

impl Core {
    pub(crate) fn metric_snapshot(&self) -> Vec<(&'static str, u64)> {
        let mut snapshot = self.metrics.snapshot();
        let (ptx_entries, ptx_bytes) = self
            .kernels
            .ptx
            .lock()
            .map(|p| (p.len(), p.bytes()))
            .unwrap_or((0, 0));
        let gauges = [
            ("vyre_cuda_loaded_kernels", self.kernels.loaded()),
            ("vyre_cuda_ptx_cache_entries", ptx_entries),
            ("vyre_cuda_ptx_cache_bytes", ptx_bytes),
            ("vyre_cuda_pool_idle_bytes", self.pool.idle_bytes()),
            ("vyre_cuda_staging_idle_bytes", self.staging.idle_bytes()),
            ("vyre_cuda_small_lane_idle_bytes", self.small.idle_bytes()),
            ("vyre_cuda_cached_graphs", self.graphs.len()),
            ("vyre_cuda_idle_streams", self.streams.counts().idle),
        ];
        snapshot.extend(gauges.map(|(name, value)| (name, value as u64)));
        let (lanes, events) = self.small.counts();
        let counts = [
            self.streams.counts(),
            self.pool.counts(),
            self.staging.counts(),
            lanes,
            events,
        ];
        for ((in_use, idle), counts) in POOL_METRICS.into_iter().zip(counts) {
            snapshot.push((in_use, counts.in_use as u64));
            snapshot.push((idle, counts.idle as u64));
        }
        snapshot.extend([
            ("vyre_cuda_resident_buffers", self.resident.live() as u64),
            ("vyre_cuda_resident_bytes", self.budget.in_use()),
            ("vyre_cuda_resident_budget_bytes", self.budget.limit()),
        ]);
        snapshot
    }

    pub(crate) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// A synchronous borrowed dispatch: across the ranks when this backend is a rank and
    /// `program` holds collectives, else the one-GPU path ([`Core::run`]).
    pub(crate) fn dispatch_now(
        &self,
        program: &Program,
        inputs: &[&[u8]],
        config: &DispatchConfig,
        timed: bool,
        outputs: &mut Vec<Vec<u8>>,
    ) -> Result<dispatch::Timing, CudaError> {
        if self.rank_for(program).is_none() {
            return self.run(program, inputs, config, None, timed, outputs);
        }
        Metrics::bump(&self.metrics.dispatches);
        let result = collective::run_host(self, program, inputs, config, outputs);
        dispatch::count(&self.metrics, &result, timed);
        result.map_err(|e| self.classify(e))
    }

    /// Runs `capture` (which records work into a CUDA graph, counting its launches in the
    /// `Metrics` it is given) with grid-wide barriers launched as outside a capture, unless
    /// a capture already showed that cooperative launches cannot be captured here. When a
    /// capture holding cooperative launches fails, that is remembered and the work is
    /// captured again with the barriers split into launches. Returns the capture's value
    /// and what the successful capture counted.
    pub(crate) fn capture_splitting_if_needed<T, E: std::fmt::Display>(
        &self,
        mut capture: impl FnMut(GridSyncLaunch, &Metrics) -> Result<T, E>,
    ) -> Result<(T, Metrics), E> {
        let mode = match self.cooperative_capture_fails.load(Ordering::Relaxed) {
            true => GridSyncLaunch::Split,
            false => self.grid_sync,
        };
        let counted = Metrics::default();
        let captured = capture(mode, &counted);
        let cooperative = counted.grid_sync_cooperative.load(Ordering::Relaxed) > 0;
        if cooperative {
            self.cooperative_capture_fails
                .store(captured.is_err(), Ordering::Relaxed);
        }
        match captured {
            Ok(value) => Ok((value, counted)),
            Err(error) if cooperative => {
                tracing::info!(%error, "cooperative launches do not work under CUDA graph capture here; grid-wide barriers in captured work are split into launches");
                let counted = Metrics::default();
                capture(GridSyncLaunch::Split, &counted).map(|value| (value, counted))
            }
            Err(error) => Err(error),
        }
    }

    fn lost_cause(&self) -> Option<String> {
        self.lost.lock().ok().and_then(|l| l.clone())
    }

    /// Fails fast once the backend is shut down or its device lost.
    pub(crate) fn usable(&self) -> Result<(), CudaError> {
        if self.shut_down.load(Ordering::Acquire) {
            return Err(CudaError::ShutDown);
        }
        match self.lost_cause() {
            Some(cause) => Err(self.lost(cause)),
            None => Ok(()),
        }
    }

    /// A failed module load as the caller sees it.
    fn load_error(&self, error: jit::LoadError) -> CudaError {
        match error {
            jit::LoadError::Driver(e) => self.driver_error(e),
            jit::LoadError::Helper(message) => CudaError::JitHelper {
                message,
                fix: "the kernel cannot run on this driver; report the program (vyre-cuda \
                      avoids every PTX shape known to crash NVIDIA's compiler), and check \
                      that VYRE_CUDA_JIT_HELPER names a working vyre-cuda-jit"
                    .to_string(),
            },
            jit::LoadError::HelperUnavailable(message) => CudaError::JitHelper {
                message,
                fix: "point VYRE_CUDA_JIT_HELPER at a vyre-cuda-jit executable (`cargo \
                      install vyre-cuda --bin vyre-cuda-jit`), or unset it to compile in \
                      this process"
                    .to_string(),
            },
        }
    }

    /// Classifies a driver error: a sticky one marks the device lost for good.
    pub(crate) fn driver_error(&self, error: DriverError) -> CudaError {
        if error.is_sticky() {
            Metrics::bump(&self.metrics.sticky_errors);
            if let Ok(mut lost) = self.lost.lock() {
                if lost.is_none() {
                    tracing::error!(%error, "CUDA context hit a sticky error; the device is lost for this process");
                    *lost = Some(error.to_string());
                }
            }
            return self.lost(error.to_string());
        }
        CudaError::Driver(error)
    }

    fn lost(&self, cause: String) -> CudaError {
        CudaError::DeviceLost {
            device: self.device.info().ordinal,
            cause,
        }
    }

    /// Maps a `CudaError::Driver` through [`Core::driver_error`].
    pub(crate) fn classify(&self, error: CudaError) -> CudaError {
        match error {
            CudaError::Driver(inner) => self.driver_error(inner),
            other => other,
        }
    }

    fn prepare(&self) -> Result<(), CudaError> {
        self.usable()?;
        self.device.bind().map_err(|e| self.driver_error(e))?;
        let slot = self.stream().map_err(|e| self.driver_error(e))?;
        // One tiny download allocates a staging lane's first pinned slot and runs the stream.
        let block = self
            .pool
            .take(&slot.stream, 4)
            .map_err(|e| self.driver_error(e))?;
        let mut word = [0u8; 4];
        let copy = staging::DeviceToHost {
            src: block.ptr(),
            dst: &mut word,
        };
        let result = slot
            .stream
            .memset_zero(block.ptr(), 4)
            .and_then(|()| self.staging.download_now(&slot.stream, &mut [copy]))
            .and_then(|()| slot.stream.synchronize());
        block.discard_if(result.is_err());
        slot.discard_if(result.is_err());
        result.map_err(|e| self.driver_error(e))?;
        self.small.prepare(self).map_err(|e| self.driver_error(e))
    }

    pub(crate) fn stream(&self) -> Result<Pooled<StreamSlot>, DriverError> {
        self.streams
            .take(|| StreamSlot::new(&self.device, &self.metrics))
    }

    fn shutdown(&self) -> Result<(), CudaError> {
        if self.shut_down.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let synced = if self.lost_cause().is_none() {
            self.device.synchronize()
        } else {
            Ok(())
        };
        self.graphs.clear();
        drop(self.resident.drain());
        self.kernels.clear();
        self.jit.stop();
        self.pool.close();
        self.small.close();
        self.staging.close();
        self.streams.close();
        synced.map_err(|e| self.driver_error(e))
    }

    /// The loaded kernel for `program` under `config`: a module-cache hit, else PTX from
    /// the PTX cache or the emitter, then one module load.
    pub(crate) fn kernel(
        &self,
        program: &Program,
        config: &DispatchConfig,
    ) -> Result<Arc<LoadedKernel>, CudaError> {
        self.refuse_collectives_here(program)?;
        let workgroup = config
            .workgroup_override
            .unwrap_or_else(|| program.workgroup_size());
        let key = self.program_key(program, workgroup)?;
        self.cached_module(key, || self.emitted(&key, program, config, workgroup))
    }

    /// The cache key of `program`'s plain emission under `workgroup` on this device.
    fn program_key(&self, program: &Program, workgroup: [u32; 3]) -> Result<KernelKey, CudaError> {
        Ok(self.identities.kernel_key(program, workgroup, |identity| {
            KernelKey::new(identity, workgroup, self.target)
        })?)
    }

    /// The loaded peer-synced form of the fold kernel `program` for rank `sync.rank`
    /// (`codegen::emit_peer_synced`), cached beside the plain kernels under a key of its
    /// own.
    pub(crate) fn peer_synced_kernel(
        &self,
        program: &Program,
        sync: crate::codegen::PeerSync,
    ) -> Result<Arc<LoadedKernel>, CudaError> {
        let plain = self.program_key(program, program.workgroup_size())?;
        let mut hasher = blake3::Hasher::new();
        hasher.update(plain.bytes());
        hasher.update(b"peer-synced");
        hasher.update(&sync.world.to_le_bytes());
        hasher.update(&sync.rank.to_le_bytes());
        let key = KernelKey::of_code(hasher.finalize().as_bytes());
        self.cached_module(key, || {
            let program = validated(program)?;
            Ok(Arc::new(crate::codegen::emit_peer_synced(
                &program,
                self.target,
                sync,
            )?))
        })
    }

    /// The module cache's kernel under `key`, else `emit`'s PTX loaded and cached.
    fn cached_module(
        &self,
        key: KernelKey,
        emit: impl FnOnce() -> Result<Arc<EmittedKernel>, CudaError>,
    ) -> Result<Arc<LoadedKernel>, CudaError> {
        let cached = (self.kernels.modules.lock().ok()).and_then(|mut m| m.get(&key));
        if let Some(kernel) = cached {
            Metrics::bump(&self.metrics.kernel_cache_hits);
            return Ok(kernel);
        }
        Metrics::bump(&self.metrics.kernel_cache_misses);
        let _span = tracing::debug_span!("vyre_cuda.compile", key = %key.hex()).entered();
        let emitted = emit()?;
        let kernel = Arc::new(self.load(key, &emitted)?);
        let Ok(mut modules) = self.kernels.modules.lock() else {
            return Ok(kernel);
        };
        // The kernel holds every module text it may still compile.
        let bytes = emitted.modules().map(str::len).sum();
        let (kernel, evicted) = modules.insert(key, kernel, bytes);
        drop(modules);
        Metrics::add(&self.metrics.module_evictions, evicted.len() as u64);
        Ok(kernel)
    }

    /// Loads `emitted` as a module and looks its entries up. A kernel whose cooperative
    /// entry is a module of its own (`EmittedKernel::cooperative_ptx`) loads neither that
    /// nor its segment entries here: its first launch compiles the form it runs.
    fn load(&self, key: KernelKey, emitted: &EmittedKernel) -> Result<LoadedKernel, CudaError> {
        self.check_shared_memory(&emitted.abi)?;
        let cooperative_ptx = emitted.cooperative_ptx.as_ref();
        let (abi, vector) = (emitted.abi.clone(), emitted.vector_ptx.as_ref());
        let mut kernel = match cooperative_ptx.filter(|_| self.grid_sync != GridSyncLaunch::Split) {
            Some(cooperative) => {
                let segments = OnDemand::Lazy(self.lazy(&emitted.ptx, LazyKind::Segments));
                let entry = OnDemand::Lazy(self.lazy(cooperative, LazyKind::Cooperative));
                let cooperative = Some(self.cooperative_form(&abi, entry));
                self.kernel_of(key, abi, vector, segments, cooperative)
            }
            None => {
                let module = self.load_module(&emitted.ptx, None)?;
                self.kernel_in(&module, key, abi, vector)?
            }
        };
        // The variant with every load checked, compiled only for a launch that needs it.
        kernel.checked =
            (emitted.checked_ptx.as_ref()).map(|ptx| self.lazy(ptx, LazyKind::Checked));
        Ok(kernel)
    }

    /// The module `ptx`, compiled on first use.
    fn lazy<T>(&self, ptx: &str, kind: LazyKind) -> LazyModule<T> {
        LazyModule {
            device: Arc::clone(&self.device),
            jit: Arc::clone(&self.jit),
            ptx: ptx.to_owned(),
            kind,
            loaded: OnceLock::new(),
            loading: std::sync::Mutex::new(()),
            metrics: Arc::clone(&self.metrics),
        }
    }

    /// Loads one module holding several kernels' entries (an artifact's, see
    /// `codegen::compose_module`) and looks each kernel's entries up in it: one JIT
    /// compilation for all of them.
    pub(crate) fn load_shared(
        &self,
        ptx: &str,
        kernels: Vec<SharedKernel>,
    ) -> Result<Vec<Arc<LoadedKernel>>, CudaError> {
        for kernel in &kernels {
            self.check_shared_memory(&kernel.abi)?;
        }
        let module = self.load_module(ptx, split_compile_threads(&kernels))?;
        kernels
            .into_iter()
            .map(|kernel| {
                let vector = kernel.vector_ptx.as_ref();
                let mut loaded = self.kernel_in(&module, kernel.key, kernel.abi, vector)?;
                loaded.fault_area_optional = kernel.fault_area_optional;
                Ok(Arc::new(loaded))
            })
            .collect()
    }

    fn check_shared_memory(&self, abi: &crate::codegen::KernelAbi) -> Result<(), CudaError> {
        let max_shared = self.device.info().max_shared_memory_per_block;
        if abi.shared_bytes > max_shared {
            return Err(CodegenError::invalid(
                format!(
                    "workgroup buffers need {} bytes of shared memory; the device allows {max_shared}",
                    abi.shared_bytes,
                ),
                "shrink the workgroup buffers",
            )
            .into());
        }
        Ok(())
    }

    fn load_module(
        &self,
        ptx: &str,
        split: Option<u32>,
    ) -> Result<Arc<crate::driver::Module>, CudaError> {
        let _span = tracing::debug_span!("vyre_cuda.module_load").entered();
        let module = self
            .jit
            .load(&self.device, ptx, split)
            .map_err(|e| self.load_error(e))?;
        Metrics::bump(&self.metrics.module_loads);
        Ok(module)
    }

    /// The kernel whose entries `abi` names, in `module`.
    fn kernel_in(
        &self,
        module: &Arc<crate::driver::Module>,
        key: KernelKey,
        abi: crate::codegen::KernelAbi,
        vector_ptx: Option<&String>,
    ) -> Result<LoadedKernel, CudaError> {
        let functions = (0..abi.segments)
            .map(|segment| module.function(&abi.entry_name(segment)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.driver_error(e))?;
        let cooperative = if abi.cooperative && self.grid_sync != GridSyncLaunch::Split {
            let multiprocessors = self.device.info().multiprocessor_count;
            let (name, threads) = (abi.cooperative_entry_name(), abi.threads_per_workgroup());
            let entry = CooperativeEntry::find(module, &name, threads, multiprocessors)
                .map_err(|e| self.driver_error(e))?;
            Some(self.cooperative_form(&abi, OnDemand::Loaded(entry)))
        } else {
            None
        };
        let segments = OnDemand::Loaded(functions);
        Ok(self.kernel_of(key, abi, vector_ptx, segments, cooperative))
    }

    /// A kernel of `segments` and `cooperative`, with its vector entry's module (if any):
    /// an elementwise program's vector entry is a module of its own, compiled by the driver
    /// only when a dispatch large enough to use it comes (see `LazyVector`).
    fn kernel_of(
        &self,
        key: KernelKey,
        abi: crate::codegen::KernelAbi,
        vector_ptx: Option<&String>,
        segments: OnDemand<Vec<crate::driver::Function>>,
        cooperative: Option<CooperativeForm>,
    ) -> LoadedKernel {
        let vector = vector_ptx.map(|ptx| LazyVector {
            entry: self.lazy(ptx, LazyKind::Vector),
            min_invocations: self.vector_min_invocations,
            max_blocks: self.vector_max_blocks,
        });
        LoadedKernel {
            key,
            abi,
            segments,
            cooperative,
            vector,
            checked: None,
            fault_area_optional: false,
        }
    }

    /// The cooperative form of a kernel of `abi` with `entry`, bounded by what the device
    /// keeps resident.
    fn cooperative_form(
        &self,
        abi: &crate::codegen::KernelAbi,
        entry: OnDemand<Option<CooperativeEntry>>,
    ) -> CooperativeForm {
        let info = self.device.info();
        CooperativeForm {
            entry,
            resident_bound: info
                .resident_blocks_bound(abi.threads_per_workgroup(), abi.shared_bytes),
            multiprocessors: info.multiprocessor_count,
        }
    }

    fn emitted(
        &self,
        key: &KernelKey,
        program: &Program,
        config: &DispatchConfig,
        workgroup: [u32; 3],
    ) -> Result<Arc<EmittedKernel>, CudaError> {
        if let Some(emitted) = self.kernels.ptx.lock().ok().and_then(|mut p| p.get(key)) {
            Metrics::bump(&self.metrics.ptx_cache_hits);
            return Ok(emitted);
        }
        let program = validated(program)?;
        self.check_launch_shape(workgroup)?;
        let emitted = {
            let _span = tracing::debug_span!("vyre_cuda.emit_ptx").entered();
            Arc::new(emit_prepared(
                &program,
                config.workgroup_override,
                self.target,
            )?)
        };
        Metrics::bump(&self.metrics.ptx_generations);
        Metrics::add(&self.metrics.ptx_bytes, emitted.ptx.len() as u64);
        if emitted.step_machine_segments > 0 {
            Metrics::bump(&self.metrics.step_machine_kernels);
            tracing::debug!(
                segments = emitted.step_machine_segments,
                "vyre_cuda: subgroup operations over lanes at different steps run as a step machine"
            );
        }
        let size = emitted.ptx.len();
        Ok(match self.kernels.ptx.lock() {
            Ok(mut ptx) => ptx.insert(*key, emitted, size).0,
            Err(_) => emitted,
        })
    }

    fn check_launch_shape(&self, workgroup: [u32; 3]) -> Result<(), CudaError> {
        let info = self.device.info();
        let threads: u64 = workgroup.iter().map(|d| u64::from(*d)).product();
        let fits = workgroup
            .iter()
            .zip(info.max_block_dim)
            .all(|(dim, max)| *dim >= 1 && *dim <= max)
            && threads <= u64::from(info.max_threads_per_block);
        if fits {
            Ok(())
        } else {
            Err(CudaError::invalid_input(
                format!(
                    "workgroup {workgroup:?} exceeds the device's block limits {:?} / {} threads",
                    info.max_block_dim, info.max_threads_per_block
                ),
                "use a smaller workgroup (DispatchConfig::workgroup_override)",
            ))
        }
    }

    // ---- resident buffers ------------------------------------------------------------

    /// The resident-table handle of a `Resource::Resident` of this backend.
    pub(crate) fn resident_id(&self, resource: &Resource) -> Result<u64, CudaError> {
        (self.handles.id(resource)).map_err(|(what, fix)| CudaError::invalid_input(what, fix))
    }

    /// The `Resource::Resident` of resident-table handle `id`.
    pub(crate) fn resident_resource(&self, id: u64) -> Resource {
        self.handles.resource(id)
    }

    pub(crate) fn resident(&self, handle: u64) -> Result<Arc<ResidentBuffer>, CudaError> {
        self.resident.get(handle).map_err(handle_error)
    }

    /// Allocates a zero-filled resident buffer of `byte_len` bytes.
    pub(crate) fn allocate_resident(&self, byte_len: usize) -> Result<u64, CudaError> {
        self.usable()?;
        if byte_len == 0 {
            return Err(CudaError::invalid_input(
                "a resident buffer of 0 bytes was requested",
                "allocate at least one byte (a program buffer with no elements needs no resident buffer of its own; bind any 1-byte buffer)",
            ));
        }
        let requested = byte_len as u64;
        self.budget
            .reserve(requested)
            .map_err(|available| CudaError::OutOfMemory {
                requested,
                available,
            })?;
        let alloc = self
            .resident_alloc(requested)
            .inspect_err(|_| self.budget.release(requested))?;
        let buffer = ResidentBuffer {
            alloc,
            budget: Arc::clone(&self.budget),
        };
        // Fresh buffers start zeroed, like the reference's outputs.
        let slot = self.stream().map_err(|e| self.driver_error(e))?;
        let zeroed = slot
            .stream
            .memset_zero(buffer.ptr(), byte_len)
            .and_then(|()| slot.stream.synchronize());
        slot.discard_if(zeroed.is_err());
        zeroed.map_err(|e| self.driver_error(e))?;
        let handle = self.resident.insert(buffer).map_err(handle_error)?;
        Metrics::bump(&self.metrics.resident_allocations);
        Ok(handle)
    }

    /// Device memory for a resident buffer, refused with the numbers of an `OutOfMemory`
    /// when the device has less free.
    fn resident_alloc(&self, requested: u64) -> Result<DeviceAlloc, CudaError> {
        let (free, _) = self
            .device
            .memory_info()
            .map_err(|e| self.driver_error(e))?;
        let out_of_memory = CudaError::OutOfMemory {
            requested,
            available: free,
        };
        if requested > free {
            return Err(out_of_memory);
        }
        let alloc = DeviceAlloc::new(&self.device, requested as usize).map_err(|e| {
            if e.is_out_of_memory() {
                out_of_memory
            } else {
                self.driver_error(e)
            }
        })?;
        self.metrics.device_allocation(alloc.len());
        Ok(alloc)
    }

    /// Drops the table's reference; the memory is released once no dispatch uses it.
    pub(crate) fn free_resident(&self, handle: u64) -> Result<(), CudaError> {
        self.usable()?;
        drop(self.resident.remove(handle).map_err(handle_error)?);
        // Cached graphs that address it can never replay again: release them now.
        self.graphs.forget_handle(handle);
        Metrics::bump(&self.metrics.resident_frees);
        Ok(())
    }
}

/// Whether `result` failed on the device: a driver error (not a fault the kernel reported
/// after completing), after which the stream and memory it used are discarded, not pooled.
pub(crate) fn failed_on_device<T>(result: &Result<T, CudaError>) -> bool {
    matches!(result, Err(error) if !matches!(error, CudaError::KernelRuntime { .. }))
}

/// The telemetry names of the pools' counts: `(in use, idle)`, in `Core::pool_counts` order.
const POOL_METRICS: [(&str, &str); 5] = [
    ("vyre_cuda_streams_in_use", "vyre_cuda_streams_idle"),
    (
        "vyre_cuda_device_blocks_in_use",
        "vyre_cuda_device_blocks_idle",
    ),
    (
        "vyre_cuda_staging_lanes_in_use",
        "vyre_cuda_staging_lanes_idle",
    ),
    ("vyre_cuda_small_lanes_in_use", "vyre_cuda_small_lanes_idle"),
    ("vyre_cuda_wait_events_in_use", "vyre_cuda_wait_events_idle"),
];

fn handle_error(error: HandleError) -> CudaError {
    let (message, fix) = error.message();
    CudaError::invalid_input(message, fix)
}

/// The program the reference interprets (calls inlined, [`reference_program`]), checked by
/// vyre's validator with the options the reference interpreter uses (subgroup operations
/// allowed), so the backend rejects exactly what the reference rejects.
///
/// The order is the reference's: normalise, lower `CommGroup::WORLD` collectives for one
/// rank, inline, *then* validate. Validating the program as given instead would raise V046
/// (no collective support) on every collective, even the WORLD ones the reference runs;
/// a group other than WORLD or a nonzero Broadcast root fails in the lowering, as there.
pub(crate) fn validated(program: &Program) -> Result<std::borrow::Cow<'_, Program>, CudaError> {
    validated_as_reference(reference_program(program)?, false)
}

/// A rank's program (collectives kept, see `codegen::ranked_program`) checked by vyre's
/// validator as [`validated`] checks a one-GPU program, with collectives allowed: a rank
/// refuses what the reference refuses, before anything is enqueued.
pub(crate) fn validated_ranked(
    program: &Program,
) -> Result<std::borrow::Cow<'_, Program>, CudaError> {
    validated_as_reference(crate::codegen::ranked_program(program)?, true)
}

/// vyre's validator with the options the reference interpreter uses (subgroup operations
/// allowed), and distributed collectives allowed when `collectives`.
fn validated_as_reference(
    program: std::borrow::Cow<'_, Program>,
    collectives: bool,
) -> Result<std::borrow::Cow<'_, Program>, CudaError> {
    let options = ValidationOptions::default().with_backend_capabilities(BackendCapabilities {
        supports_subgroup_ops: true,
        supports_distributed_collectives: collectives,
        ..Default::default()
    });
    let report = validate_with_options(&program, options);
    if report.errors.is_empty() {
        return Ok(program);
    }
    Err(CudaError::InvalidProgram {
        errors: report.errors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_public_runtime_types_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<CudaBackend>();
        assert_send_sync::<CudaPendingDispatch>();
        assert_send_sync::<CudaPipeline>();
        assert_send_sync::<CudaDeviceBuffer>();
        assert_send_sync::<crate::CudaOptimizerDispatcher>();
        assert_send_sync::<CudaCluster>();
    }

    #[test]
    fn options_parse_the_environment_names() {
        assert_eq!(
            PoolKind::parse("stream-ordered"),
            Some(PoolKind::StreamOrdered)
        );
        let defaults = CudaOptions::default();
        assert_eq!(defaults.pool, PoolKind::SizeClasses);
        assert!(defaults.copy_threads >= 1 && defaults.staging_chunk_bytes >= 64 << 10);
    }

    fn collective_program(node: vyre_foundation::ir::Node) -> Program {
        use vyre_foundation::ir::{BufferDecl, DataType};
        Program::wrapped(
            vec![
                BufferDecl::read_write("a", 0, DataType::U32).with_count(64),
                BufferDecl::output("out", 1, DataType::U32).with_count(64),
            ],
            [64, 1, 1],
            vec![node],
        )
    }

    fn collectives(group: vyre_foundation::ir::CommGroup, root: u32) -> Vec<Program> {
        use vyre_foundation::ir::{CollectiveOp, Node};
        vec![
            collective_program(Node::AllReduce {
                buffer: "a".into(),
                op: CollectiveOp::Sum,
                group,
            }),
            collective_program(Node::AllGather {
                input: "a".into(),
                output: "out".into(),
                group,
            }),
            collective_program(Node::ReduceScatter {
                input: "a".into(),
                output: "out".into(),
                op: CollectiveOp::Min,
                group,
            }),
            collective_program(Node::Broadcast {
                buffer: "a".into(),
                root,
                group,
            }),
        ]
    }

    #[test]
    fn world_collectives_are_valid_as_in_the_reference() {
        use vyre_foundation::ir::CommGroup;
        for program in collectives(CommGroup::WORLD, 0) {
            // Validated as given, vyre's V046 rejects every collective node: this is the
            // order `validated` must not use.
            let options =
                ValidationOptions::default().with_backend_capabilities(BackendCapabilities {
                    supports_subgroup_ops: true,
                    ..Default::default()
                });
            let report = validate_with_options(&program, options);
            assert!(
                report.errors.iter().any(|e| e.to_string().contains("V046")),
                "{:?}",
                report.errors
            );
            let prepared = validated(&program).expect("the reference runs WORLD collectives");
            emit_prepared(&prepared, None, PtxTarget::sm90()).expect("and so do we");
        }
    }

    #[test]
    fn transport_collectives_are_rejected_with_one_fix() {
        use vyre_foundation::ir::CommGroup;
        let programs = collectives(CommGroup(2), 0)
            .into_iter()
            .chain(collectives(CommGroup::WORLD, 1).into_iter().skip(3));
        let mut count = 0;
        for program in programs {
            let error = validated(&program).expect_err("the reference rejects it");
            let text = error.to_string();
            assert_eq!(text.matches("Fix:").count(), 1, "{text}");
            assert!(text.contains("CommGroup::WORLD"), "{text}");
            count += 1;
        }
        assert_eq!(count, 5);
    }

    /// Bytes forms that vyre's validator refuses: the reference refuses them before running
    /// (its error names the rule), and so does every route here, with the same rule.
    #[test]
    fn bytes_forms_the_validator_refuses_are_refused_as_in_the_reference() {
        use vyre_foundation::ir::{BinOp, BufferDecl, DataType, Expr, Node};
        let view = || Expr::load("a", Expr::u32(0));
        let binary = |op, right| Expr::BinOp {
            op,
            left: Box::new(view()),
            right: Box::new(right),
        };
        let select = |other| Expr::Select {
            cond: Box::new(Expr::bool(true)),
            true_val: Box::new(view()),
            false_val: Box::new(other),
        };
        let cast = |target, value| Expr::Cast {
            target,
            value: Box::new(value),
        };
        let store = |value| vec![Node::store("out", Expr::gid_x(), value)];
        let cases = [
            ("V029", store(select(Expr::u32(1)))),
            ("V023", store(select(cast(DataType::Bytes, Expr::u32(1))))),
            ("V123", vec![Node::if_then(view(), store(Expr::u32(1)))]),
            ("V091", store(binary(BinOp::BitAnd, view()))),
            ("V096", store(binary(BinOp::Eq, Expr::u32(1)))),
            ("V012", store(cast(DataType::U32, view()))),
        ];
        for (rule, body) in cases {
            let program = Program::wrapped(
                vec![
                    BufferDecl::read("a", 0, DataType::Bytes)
                        .with_count(8)
                        .with_bytes_extraction(true),
                    BufferDecl::output("out", 1, DataType::U32).with_count(4),
                ],
                [4, 1, 1],
                body,
            );
            let input = vyre_reference::value::Value::from(vec![1u8; 8]);
            let theirs = vyre_reference::reference_eval(&program, &[input])
                .expect_err("the reference refuses it")
                .to_string();
            assert!(theirs.contains(rule), "{rule}: {theirs}");
            let ours = validated(&program).expect_err("refused").to_string();
            assert!(ours.contains(rule), "{rule}: {ours}");
            assert_eq!(ours.matches("Fix:").count(), 1, "{ours}");
        }
    }

    #[test]
    fn emit_sm_picks_an_older_architecture_only() {
        assert_eq!(emitted_architecture((9, 0), None).unwrap(), (9, 0));
        assert_eq!(emitted_architecture((9, 0), Some(75)).unwrap(), (7, 5));
        let error = emitted_architecture((8, 0), Some(90)).unwrap_err();
        assert!(error.to_string().contains("emit_sm"), "{error}");
    }
}
