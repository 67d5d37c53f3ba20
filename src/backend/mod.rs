//! The CUDA backend core: program validation, the kernel cache, device memory and the
//! dispatch path. [`CudaBackend`] is public for applications that want to hold the
//! device directly; the `VyreBackend` adapter in [`crate::adapter`] wraps it.

mod cache;
mod dispatch;
mod identity;
mod metrics;
mod plan;
mod pool;

use crate::codegen::{emit_ptx, CodegenError, EmittedKernel, PtxTarget};
use crate::driver::{Device, DeviceInfo, DriverError, Module, Stream};
use crate::error::CudaError;
use cache::{KernelCache, KernelKey, LoadedKernel};
use identity::ProgramIdentities;
use metrics::Metrics;
use plan::GridLimits;
use pool::DevicePool;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use vyre_driver::{BackendError, DispatchConfig};
use vyre_foundation::ir::Program;
use vyre_foundation::validate::{
    validate::validate_with_options, BackendCapabilities, ValidationOptions,
};

/// Environment variable naming the CUDA device ordinal to use (default 0).
pub const DEVICE_ENV: &str = "VYRE_CUDA_DEVICE";

/// Runs vyre programs on one NVIDIA GPU.
///
/// `Send + Sync`: any number of threads may dispatch at once; each dispatch takes its own
/// stream from a pool.
pub struct CudaBackend {
    device: Arc<Device>,
    target: PtxTarget,
    limits: GridLimits,
    kernels: KernelCache,
    identities: ProgramIdentities,
    streams: Mutex<Vec<Stream>>,
    pool: DevicePool,
    metrics: Metrics,
    /// Dispatches hold it shared; recovery from a sticky context error holds it exclusively.
    context_epoch: RwLock<()>,
    lost: AtomicBool,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend")
            .field("device", &self.device.info().name)
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl CudaBackend {
    /// Open the device named by `VYRE_CUDA_DEVICE` (default ordinal 0).
    pub fn new() -> Result<Self, CudaError> {
        let ordinal = match std::env::var(DEVICE_ENV) {
            Ok(text) => text.trim().parse::<usize>().map_err(|_| {
                CudaError::invalid_input(
                    format!("{DEVICE_ENV}={text:?} is not a device ordinal"),
                    format!("set {DEVICE_ENV} to a number such as 0, or unset it"),
                )
            })?,
            Err(_) => 0,
        };
        Self::with_device(ordinal)
    }

    /// Open CUDA device `ordinal`.
    pub fn with_device(ordinal: usize) -> Result<Self, CudaError> {
        let device = Device::open(ordinal)?;
        let info = device.info();
        let (major, minor) = info.compute_capability;
        let target = PtxTarget::for_device(major, minor, info.driver_version)?;
        let limits = GridLimits {
            max_grid_dim: info.max_grid_dim,
            max_buffer_bytes: info.total_memory_bytes,
        };
        let pool = DevicePool::new((info.total_memory_bytes / 16) as usize);
        tracing::debug!(device = %info.name, %target, "vyre-cuda backend opened");
        Ok(Self {
            device,
            target,
            limits,
            kernels: KernelCache::default(),
            identities: ProgramIdentities::default(),
            streams: Mutex::new(Vec::new()),
            pool,
            metrics: Metrics::default(),
            context_epoch: RwLock::new(()),
            lost: AtomicBool::new(false),
        })
    }

    /// The device this backend runs on.
    #[must_use]
    pub fn device_info(&self) -> &DeviceInfo {
        self.device.info()
    }

    /// The PTX target chosen for this device and driver.
    #[must_use]
    pub fn target(&self) -> PtxTarget {
        self.target
    }

    /// The PTX this backend would load for `program` (no device work).
    pub fn emit(
        &self,
        program: &Program,
        config: &DispatchConfig,
    ) -> Result<EmittedKernel, CudaError> {
        validate(program)?;
        Ok(emit_ptx(program, config, self.target)?)
    }

    /// Telemetry counters as stable `(name, value)` pairs.
    #[must_use]
    pub fn metric_snapshot(&self) -> Vec<(&'static str, u64)> {
        let mut snapshot = self.metrics.snapshot();
        snapshot.push(("vyre_cuda_loaded_kernels", self.kernels.len() as u64));
        snapshot.push(("vyre_cuda_pool_idle_bytes", self.pool.idle_bytes() as u64));
        snapshot
    }

    /// Whether the last recovery from a sticky context error failed.
    #[must_use]
    pub fn device_lost(&self) -> bool {
        self.lost.load(Ordering::Relaxed)
    }

    /// Run `program` with owned inputs.
    pub fn dispatch(
        &self,
        program: &Program,
        inputs: &[Vec<u8>],
        config: &DispatchConfig,
    ) -> Result<Vec<Vec<u8>>, CudaError> {
        let borrowed: smallvec::SmallVec<[&[u8]; 8]> = inputs.iter().map(Vec::as_slice).collect();
        self.dispatch_borrowed(program, &borrowed, config)
    }

    /// Run `program` with borrowed inputs; returns one buffer per output in declaration
    /// order (see [`crate::codegen::KernelAbi`]).
    pub fn dispatch_borrowed(
        &self,
        program: &Program,
        inputs: &[&[u8]],
        config: &DispatchConfig,
    ) -> Result<Vec<Vec<u8>>, CudaError> {
        let mut outputs = Vec::new();
        self.dispatch_borrowed_into(program, inputs, config, &mut outputs)?;
        Ok(outputs)
    }

    /// Run `program`, writing the outputs into `outputs` and reusing its buffers'
    /// capacity.
    pub fn dispatch_borrowed_into(
        &self,
        program: &Program,
        inputs: &[&[u8]],
        config: &DispatchConfig,
        outputs: &mut Vec<Vec<u8>>,
    ) -> Result<(), CudaError> {
        Metrics::bump(&self.metrics.dispatches);
        let result = self.run(program, inputs, config, outputs);
        if result.is_err() {
            Metrics::bump(&self.metrics.dispatch_errors);
        }
        result
    }

    /// The loaded kernel for `program` under `config`, generating and loading it on the
    /// first request only.
    fn kernel(
        &self,
        program: &Program,
        config: &DispatchConfig,
    ) -> Result<Arc<LoadedKernel>, CudaError> {
        let workgroup = config
            .workgroup_override
            .unwrap_or_else(|| program.workgroup_size());
        let key = KernelKey::new(&self.identities.of(program), workgroup, self.target);
        if let Some(kernel) = self.kernels.get(&key) {
            Metrics::bump(&self.metrics.kernel_cache_hits);
            return Ok(kernel);
        }
        Metrics::bump(&self.metrics.kernel_cache_misses);
        let _span = tracing::debug_span!("vyre_cuda.compile").entered();
        validate(program)?;
        self.check_launch_shape(workgroup)?;
        let emitted = emit_ptx(program, config, self.target)?;
        Metrics::bump(&self.metrics.ptx_generations);
        Metrics::add(&self.metrics.ptx_bytes, emitted.ptx.len() as u64);
        if emitted.abi.shared_bytes > self.device.info().max_shared_memory_per_block {
            return Err(CodegenError::invalid(
                format!(
                    "workgroup buffers need {} bytes of shared memory; the device allows {}",
                    emitted.abi.shared_bytes,
                    self.device.info().max_shared_memory_per_block
                ),
                "shrink the workgroup buffers",
            )
            .into());
        }
        let module = Module::load_ptx(&self.device, &emitted.ptx)?;
        Metrics::bump(&self.metrics.module_loads);
        let functions = (0..emitted.abi.segments)
            .map(|segment| module.function(&emitted.abi.entry_name(segment)))
            .collect::<Result<Vec<_>, _>>()?;
        let kernel = Arc::new(LoadedKernel {
            abi: emitted.abi,
            functions,
        });
        Ok(self.kernels.insert(key, kernel))
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

    fn take_stream(&self) -> Result<Stream, DriverError> {
        if let Some(stream) = self.streams.lock().ok().and_then(|mut s| s.pop()) {
            return Ok(stream);
        }
        Stream::new(&self.device)
    }

    fn return_stream(&self, stream: Stream) {
        if let Ok(mut streams) = self.streams.lock() {
            streams.push(stream);
        }
    }

    /// After a sticky error (e.g. an illegal address) the context is unusable: reset it
    /// and drop everything that belonged to it, so the next dispatch starts clean.
    fn recover_context(&self, cause: &DriverError) {
        let _exclusive = self.context_epoch.write();
        tracing::warn!(%cause, "CUDA context hit a sticky error; resetting it");
        self.kernels.clear();
        self.pool.clear();
        if let Ok(mut streams) = self.streams.lock() {
            streams.clear();
        }
        Metrics::bump(&self.metrics.context_recoveries);
        match self.device.reset_after_fault() {
            Ok(()) => self.lost.store(false, Ordering::Relaxed),
            Err(error) => {
                tracing::error!(%error, "CUDA context reset failed");
                self.lost.store(true, Ordering::Relaxed);
            }
        }
    }

    /// Reset the context if `error` poisoned it; pass the error through.
    fn after_driver_error(&self, error: DriverError) -> CudaError {
        if error.is_sticky() {
            self.recover_context(&error);
        }
        CudaError::Driver(error)
    }

    /// Attempt a context reset on request (the `try_recover` path).
    pub fn try_recover(&self) -> Result<(), CudaError> {
        let _exclusive = self.context_epoch.write();
        self.kernels.clear();
        self.pool.clear();
        if let Ok(mut streams) = self.streams.lock() {
            streams.clear();
        }
        self.device.reset_after_fault()?;
        self.lost.store(false, Ordering::Relaxed);
        Ok(())
    }
}

/// vyre's validator with the options the reference interpreter uses (subgroup operations
/// allowed), so the backend rejects exactly what the reference rejects.
fn validate(program: &Program) -> Result<(), CudaError> {
    let options = ValidationOptions::default().with_backend_capabilities(BackendCapabilities {
        supports_subgroup_ops: true,
        ..Default::default()
    });
    let report = validate_with_options(program, options);
    if report.errors.is_empty() {
        return Ok(());
    }
    let messages: Vec<&str> = report.errors.iter().map(|e| e.message()).collect();
    Err(CudaError::Rejected(BackendError::InvalidProgram {
        fix: format!(
            "Fix: repair the Program before dispatch; vyre's validator reports: {}",
            messages.join("; ")
        ),
    }))
}
