//! The `VyreBackend` adapter over [`CudaBackend`] and its `inventory` registration.
//!
//! Linking vyre-cuda is enough for `vyre_driver::registered_backends()` to list
//! `"vyre-cuda"` and for `vyre_driver::acquire("vyre-cuda")` to open the device; it ranks
//! ahead of vyre-driver-cuda (`"cuda"`), and a binary may link both. Applications that want
//! the direct API (resident workflows, the PTX emitter) use [`CudaBackend`] itself.

use crate::backend::{CudaBackend, CudaPendingDispatch, CudaPipeline};
use crate::error::{CudaError, CUDA_BACKEND_ID};
use std::collections::HashSet;
use std::sync::OnceLock;
use vyre_driver::backend::private::Sealed;
use vyre_driver::backend::{BackendCapability, BackendPrecedence};
use vyre_driver::pipeline::PipelineCacheSnapshot;
use vyre_driver::{
    BackendError, BackendRegistration, CompiledPipeline, DeviceBuffer, DispatchConfig,
    OutputBuffers, PendingDispatch, ResidentDispatchStep, ResidentReadRange,
    ResidentSequenceTiming, Resource, TimedDispatchResult, VyreBackend,
};
use vyre_foundation::ir::{OpId, Program};
use vyre_foundation::operation::TargetId;

fn err(error: CudaError) -> BackendError {
    error.into()
}

/// Trait methods that call the inherent method of the same name of `$target`, map its value
/// where a `map` is given, and convert its error.
macro_rules! forward {
    ($target:ident: $($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty $(, map $map:expr)?;)*) => {$(
        fn $name(&self, $($arg: $ty),*) -> Result<$ret, BackendError> {
            $target::$name(self, $($arg),*)$(.map($map))?.map_err(err)
        }
    )*};
}

/// Statement-level op ids the emitter accepts: vyre's default set plus `Trap` (a kernel
/// fault, as in the reference) and `AsyncStore` ([`crate::compat::ASYNC_STORE_OP_ID`]).
/// Indirect dispatch and `Resume` are accepted because the reference defines them as
/// run-time errors, which the kernel reproduces.
pub fn supported_ops() -> &'static HashSet<OpId> {
    static OPS: OnceLock<HashSet<OpId>> = OnceLock::new();
    OPS.get_or_init(|| {
        let mut ops = vyre_driver::backend::default_supported_ops_with_trap().clone();
        ops.insert(OpId::from(crate::compat::ASYNC_STORE_OP_ID));
        ops
    })
}

/// Semantic operations of the target compiler: none until vyre-cuda registers one (the
/// registration then names its payload format too, `crate::compat::PAYLOAD_FORMAT`).
fn semantic_operations() -> &'static HashSet<OpId> {
    static NONE: OnceLock<HashSet<OpId>> = OnceLock::new();
    NONE.get_or_init(HashSet::new)
}

impl Sealed for CudaBackend {}
impl Sealed for CudaPendingDispatch {}
impl Sealed for CudaPipeline {}

impl PendingDispatch for CudaPendingDispatch {
    fn is_ready(&self) -> bool {
        CudaPendingDispatch::is_ready(self)
    }

    fn await_result(self: Box<Self>) -> Result<Vec<Vec<u8>>, BackendError> {
        self.wait().map_err(err)
    }

    fn await_result_into(self: Box<Self>, outputs: &mut OutputBuffers) -> Result<(), BackendError> {
        self.wait_into(outputs).map_err(err)
    }

    fn await_timed_result(self: Box<Self>) -> Result<TimedDispatchResult, BackendError> {
        self.wait_timed().map_err(err)
    }
}

impl CompiledPipeline for CudaPipeline {
    fn id(&self) -> &str {
        CudaPipeline::id(self)
    }

    fn dispatch(
        &self,
        inputs: &[Vec<u8>],
        config: &DispatchConfig,
    ) -> Result<Vec<Vec<u8>>, BackendError> {
        let borrowed: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
        CudaPipeline::dispatch_borrowed(self, &borrowed, config).map_err(err)
    }

    forward! {CudaPipeline:
        dispatch_borrowed(inputs: &[&[u8]], config: &DispatchConfig) -> Vec<Vec<u8>>;
        dispatch_borrowed_timed(inputs: &[&[u8]], config: &DispatchConfig) -> TimedDispatchResult;
        dispatch_borrowed_into(
            inputs: &[&[u8]],
            config: &DispatchConfig,
            outputs: &mut OutputBuffers
        ) -> ();
    }

    fn dispatch_persistent_handles(
        &self,
        inputs: &[Resource],
        config: &DispatchConfig,
    ) -> Result<OutputBuffers, BackendError> {
        CudaPipeline::dispatch_resident(self, inputs, config).map_err(err)
    }
}

impl VyreBackend for CudaBackend {
    fn id(&self) -> &'static str {
        CUDA_BACKEND_ID
    }

    fn version(&self) -> &'static str {
        env!("CARGO_PKG_VERSION")
    }

    fn supported_ops(&self) -> &HashSet<OpId> {
        supported_ops()
    }

    forward! {CudaBackend:
        dispatch(program: &Program, inputs: &[Vec<u8>], config: &DispatchConfig) -> Vec<Vec<u8>>;
        dispatch_borrowed(program: &Program, inputs: &[&[u8]], config: &DispatchConfig)
            -> Vec<Vec<u8>>;
        dispatch_borrowed_into(
            program: &Program,
            inputs: &[&[u8]],
            config: &DispatchConfig,
            outputs: &mut OutputBuffers
        ) -> ();
        dispatch_borrowed_timed(program: &Program, inputs: &[&[u8]], config: &DispatchConfig)
            -> TimedDispatchResult;
        allocate_resident(byte_len: usize) -> Resource;
        upload_resident(resource: &Resource, bytes: &[u8]) -> ();
        upload_resident_many(uploads: &[(&Resource, &[u8])]) -> ();
        upload_resident_at(resource: &Resource, dst_offset_bytes: usize, bytes: &[u8]) -> ();
        upload_resident_at_many(uploads: &[(&Resource, usize, &[u8])]) -> ();
        download_resident(resource: &Resource) -> Vec<u8>;
        download_resident_into(resource: &Resource, out: &mut Vec<u8>) -> ();
        download_resident_range(resource: &Resource, byte_offset: usize, byte_len: usize)
            -> Vec<u8>;
        download_resident_range_into(
            resource: &Resource,
            byte_offset: usize,
            byte_len: usize,
            out: &mut Vec<u8>
        ) -> ();
        download_resident_ranges_into(
            ranges: &[(&Resource, usize, usize)],
            outputs: &mut [&mut Vec<u8>]
        ) -> ();
        free_resident(resource: Resource) -> ();
        dispatch_resident_timed(program: &Program, resources: &[Resource], config: &DispatchConfig)
            -> TimedDispatchResult;
        dispatch_resident_sequence_read_ranges_into(
            steps: &[ResidentDispatchStep<'_>],
            read_ranges: &[ResidentReadRange<'_>],
            outputs: &mut [&mut Vec<u8>]
        ) -> ();
        dispatch_resident_sequence_read_ranges_timed_into(
            steps: &[ResidentDispatchStep<'_>],
            read_ranges: &[ResidentReadRange<'_>],
            outputs: &mut [&mut Vec<u8>]
        ) -> ResidentSequenceTiming;
        upload_device_buffer(buffer: &mut dyn DeviceBuffer, bytes: &[u8]) -> ();
        download_device_buffer(buffer: &dyn DeviceBuffer) -> Vec<u8>;
        free_device_buffer(buffer: Box<dyn DeviceBuffer>) -> ();
        dispatch_with_device_buffers(
            program: &Program,
            inputs: &[&dyn DeviceBuffer],
            outputs: &mut [&mut dyn DeviceBuffer],
            config: &DispatchConfig
        ) -> ();
        cooperative_grid_sync_fits(program: &Program, inputs: &[&[u8]], config: &DispatchConfig)
            -> bool;
        prepare() -> ();
        flush() -> ();
        shutdown() -> ();
        try_recover() -> ();
        dispatch_async(program: &Program, inputs: &[Vec<u8>], config: &DispatchConfig)
            -> Box<dyn PendingDispatch>, map |p| Box::new(p) as Box<dyn PendingDispatch>;
        dispatch_borrowed_async(program: &Program, inputs: &[&[u8]], config: &DispatchConfig)
            -> Box<dyn PendingDispatch>, map |p| Box::new(p) as Box<dyn PendingDispatch>;
        dispatch_resident_async(program: &Program, resources: &[Resource], config: &DispatchConfig)
            -> Box<dyn PendingDispatch>, map |p| Box::new(p) as Box<dyn PendingDispatch>;
        allocate_device_buffer(byte_len: usize)
            -> Box<dyn DeviceBuffer>, map |b| Box::new(b) as Box<dyn DeviceBuffer>;
        // The trait's form does not return the replay timing.
        dispatch_resident_repeated_sequence_read_ranges_into(
            prefix_steps: &[ResidentDispatchStep<'_>],
            repeated_steps: &[ResidentDispatchStep<'_>],
            repeat_count: u32,
            read_ranges: &[ResidentReadRange<'_>],
            outputs: &mut [&mut Vec<u8>]
        ) -> (), map |_| ();
    }

    fn pipeline_cache_snapshot(&self) -> Option<PipelineCacheSnapshot> {
        let (hits, misses) = self.kernel_cache_counters();
        Some(PipelineCacheSnapshot { hits, misses })
    }

    fn backend_metric_snapshot(&self) -> Vec<(&'static str, u64)> {
        self.metric_snapshot()
    }

    fn supports_resident_dispatch(&self) -> bool {
        true
    }

    fn supports_async_compute(&self) -> bool {
        true
    }

    fn max_workgroup_size(&self) -> [u32; 3] {
        self.device_info().max_block_dim
    }

    fn max_compute_workgroups_per_dimension(&self) -> u32 {
        self.device_info().max_grid_dim[0]
    }

    fn max_compute_invocations_per_workgroup(&self) -> u32 {
        self.device_info().max_threads_per_block
    }

    fn supports_f16(&self) -> bool {
        // F16 buffers are numeric as in vyre-reference 0.7: loads widen to f32, operators
        // compute in f32, stores and casts round to nearest even (`cvt.rn.f16.f32`), and an
        // out-of-bounds load fails the operators the reference fails; dispatch runs them
        // on every GPU the emitter targets (sm_70+).
        true
    }

    fn supports_bf16(&self) -> bool {
        // The same for BF16: stores and casts round with `cvt.rn.bf16.f32` on sm_80+ and
        // the reference's integer rounding below; loads are a shift.
        true
    }

    fn supports_subgroup_ops(&self) -> bool {
        // Ballot, shuffle and reduce are lowered natively (vote/shfl/redux.sync).
        true
    }

    fn subgroup_size(&self) -> Option<u32> {
        Some(self.device_info().warp_size)
    }

    fn max_storage_buffer_bytes(&self) -> u64 {
        self.device_info().total_memory_bytes
    }

    fn supports_grid_sync(&self) -> bool {
        // Grid-wide barriers run on the device either way (one cooperative launch where
        // the grid fits resident, else ordered launches per segment); report the native
        // form only where cooperative launches exist.
        self.cooperative_grid_sync()
    }

    fn device_profile(&self) -> vyre_driver::DeviceProfile {
        let info = self.device_info();
        let mut profile = vyre_driver::DeviceProfile::conservative(CUDA_BACKEND_ID);
        profile.supports_subgroup_ops = true;
        profile.supports_f16 = true;
        profile.supports_bf16 = true;
        profile.supports_trap_propagation = true;
        profile.has_subgroup_shuffle = true;
        profile.has_mul_high = true;
        // Separate INT32 and FP32 pipes since Volta (sm_70, the oldest target).
        profile.has_dual_issue_fp32_int32 = true;
        profile.has_shared_memory = true;
        // PTX's per-thread register ceiling on every supported architecture.
        profile.regs_per_thread_max = 255;
        profile.max_native_int_width = 64;
        profile.max_workgroup_size = info.max_block_dim;
        profile.max_invocations_per_workgroup = info.max_threads_per_block;
        profile.max_shared_memory_bytes = info.max_shared_memory_per_block;
        profile.max_storage_buffer_binding_size = info.total_memory_bytes;
        profile.subgroup_size = info.warp_size;
        profile.compute_units = info.multiprocessor_count;
        profile.l2_cache_bytes = info.l2_cache_bytes;
        profile.mem_bw_gbps = u32::try_from(info.memory_bandwidth_gbps()).unwrap_or(u32::MAX);
        profile.shared_memory_bank_count = 32;
        profile.timing_quality = vyre_driver::DeviceTimingQuality::DeviceTimestamps;
        profile.supports_device_timestamps = true;
        profile.shared_memory_bank_width_bytes = 4;
        profile
    }

    fn device_lost(&self) -> bool {
        CudaBackend::device_lost(self)
    }

    fn is_distributed(&self) -> bool {
        // A rank (`CudaBackend::join`, `CudaCluster`) runs programs across GPUs.
        self.rank_info().is_some()
    }

    fn supports_distributed_collectives(&self) -> bool {
        // Only a rank runs collectives across GPUs; a plain backend lowers WORLD
        // collectives for one rank, as the reference does.
        self.rank_info().is_some()
    }
}

fn factory() -> Result<Box<dyn VyreBackend>, BackendError> {
    CudaBackend::new()
        .map(|backend| Box::new(backend) as Box<dyn VyreBackend>)
        .map_err(Into::into)
}

fn target_compiler() -> Result<Box<dyn vyre_megakernel::TargetCompiler>, BackendError> {
    Ok(Box::new(
        crate::artifact::compiler::CudaTargetCompiler::new(),
    ))
}

fn materializer() -> Result<Box<dyn vyre_driver::ArtifactMaterializer>, BackendError> {
    Ok(Box::new(
        crate::artifact::materializer::CudaMaterializer::new()?,
    ))
}

inventory::submit! {
    BackendRegistration {
        id: CUDA_BACKEND_ID,
        target_id: TargetId::expect_valid(crate::compat::TARGET_ID),
        payload_format: Some(crate::compat::PAYLOAD_FORMAT),
        reference_oracle: false,
        factory,
        supported_ops,
        semantic_operations,
        target_compiler: Some(target_compiler),
        materializer: Some(materializer),
    }
}

// Ahead of vyre-driver-cuda's rank 5: linked together, `acquire_preferred_dispatch_backend`
// falls back to precedence only between backends of equal capability.
inventory::submit! {
    BackendPrecedence { id: CUDA_BACKEND_ID, rank: 4 }
}

inventory::submit! {
    BackendCapability { id: CUDA_BACKEND_ID, dispatches: true }
}
