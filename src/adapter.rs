//! The `VyreBackend` adapter over [`CudaBackend`] and its `inventory` registration.
//!
//! Linking vyre-cuda is enough for `vyre_driver::registered_backends()` to list `"cuda"`
//! and for `vyre_driver::acquire("cuda")` to open the device. Applications that want the
//! direct API (resident workflows, the PTX emitter) use [`CudaBackend`] itself.

use crate::backend::{CudaBackend, CudaPendingDispatch, CudaPipeline};
use crate::error::{CudaError, CUDA_BACKEND_ID};
use std::collections::HashSet;
use std::sync::{Arc, OnceLock};
use vyre_driver::backend::private::Sealed;
use vyre_driver::backend::{BackendCapability, BackendPrecedence};
use vyre_driver::pipeline::PipelineCacheSnapshot;
use vyre_driver::{
    BackendError, BackendRegistration, CompiledPipeline, DeviceBuffer, DispatchConfig,
    OutputBuffers, PendingDispatch, ResidentDispatchStep, ResidentReadRange,
    ResidentSequenceTiming, Resource, TimedDispatchResult, VyreBackend,
};
use vyre_foundation::ir::{OpId, Program};

fn err(error: CudaError) -> BackendError {
    error.into()
}

/// Statement-level op ids the emitter accepts: vyre's default set plus `Trap` (a kernel
/// fault, as in the reference) and `vyre.node.unknown`, the id vyre-driver's validator
/// gives `AsyncStore` (contract §7.2). Indirect dispatch and `Resume` are accepted because
/// the reference defines them as run-time errors, which the kernel reproduces.
pub fn supported_ops() -> &'static HashSet<OpId> {
    static OPS: OnceLock<HashSet<OpId>> = OnceLock::new();
    OPS.get_or_init(|| {
        let mut ops = vyre_driver::backend::default_supported_ops_with_trap().clone();
        ops.insert(OpId::from("vyre.node.unknown"));
        ops
    })
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

    fn dispatch_borrowed(
        &self,
        inputs: &[&[u8]],
        config: &DispatchConfig,
    ) -> Result<Vec<Vec<u8>>, BackendError> {
        CudaPipeline::dispatch_borrowed(self, inputs, config).map_err(err)
    }

    fn dispatch_borrowed_timed(
        &self,
        inputs: &[&[u8]],
        config: &DispatchConfig,
    ) -> Result<TimedDispatchResult, BackendError> {
        CudaPipeline::dispatch_borrowed_timed(self, inputs, config).map_err(err)
    }

    fn dispatch_borrowed_into(
        &self,
        inputs: &[&[u8]],
        config: &DispatchConfig,
        outputs: &mut OutputBuffers,
    ) -> Result<(), BackendError> {
        CudaPipeline::dispatch_borrowed_into(self, inputs, config, outputs).map_err(err)
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

    fn dispatch(
        &self,
        program: &Program,
        inputs: &[Vec<u8>],
        config: &DispatchConfig,
    ) -> Result<Vec<Vec<u8>>, BackendError> {
        CudaBackend::dispatch(self, program, inputs, config).map_err(Into::into)
    }

    fn dispatch_borrowed(
        &self,
        program: &Program,
        inputs: &[&[u8]],
        config: &DispatchConfig,
    ) -> Result<Vec<Vec<u8>>, BackendError> {
        CudaBackend::dispatch_borrowed(self, program, inputs, config).map_err(Into::into)
    }

    fn dispatch_borrowed_into(
        &self,
        program: &Program,
        inputs: &[&[u8]],
        config: &DispatchConfig,
        outputs: &mut OutputBuffers,
    ) -> Result<(), BackendError> {
        CudaBackend::dispatch_borrowed_into(self, program, inputs, config, outputs)
            .map_err(Into::into)
    }

    fn dispatch_borrowed_timed(
        &self,
        program: &Program,
        inputs: &[&[u8]],
        config: &DispatchConfig,
    ) -> Result<TimedDispatchResult, BackendError> {
        CudaBackend::dispatch_borrowed_timed(self, program, inputs, config).map_err(err)
    }

    fn dispatch_async(
        &self,
        program: &Program,
        inputs: &[Vec<u8>],
        config: &DispatchConfig,
    ) -> Result<Box<dyn PendingDispatch>, BackendError> {
        CudaBackend::dispatch_async(self, program, inputs, config)
            .map(|pending| Box::new(pending) as Box<dyn PendingDispatch>)
            .map_err(err)
    }

    fn dispatch_borrowed_async(
        &self,
        program: &Program,
        inputs: &[&[u8]],
        config: &DispatchConfig,
    ) -> Result<Box<dyn PendingDispatch>, BackendError> {
        CudaBackend::dispatch_borrowed_async(self, program, inputs, config)
            .map(|pending| Box::new(pending) as Box<dyn PendingDispatch>)
            .map_err(err)
    }

    fn compile_native(
        &self,
        program: &Program,
        config: &DispatchConfig,
    ) -> Result<Option<Arc<dyn CompiledPipeline>>, BackendError> {
        self.compile_native_shared(Arc::new(program.clone()), config)
    }

    fn compile_native_shared(
        &self,
        program: Arc<Program>,
        config: &DispatchConfig,
    ) -> Result<Option<Arc<dyn CompiledPipeline>>, BackendError> {
        let pipeline = self.compile(program, config).map_err(err)?;
        Ok(Some(Arc::new(pipeline) as Arc<dyn CompiledPipeline>))
    }

    fn pipeline_cache_snapshot(&self) -> Option<PipelineCacheSnapshot> {
        let (hits, misses) = self.kernel_cache_counters();
        Some(PipelineCacheSnapshot { hits, misses })
    }

    fn backend_metric_snapshot(&self) -> Vec<(&'static str, u64)> {
        self.metric_snapshot()
    }

    fn allocate_resident(&self, byte_len: usize) -> Result<Resource, BackendError> {
        CudaBackend::allocate_resident(self, byte_len).map_err(err)
    }

    fn upload_resident(&self, resource: &Resource, bytes: &[u8]) -> Result<(), BackendError> {
        CudaBackend::upload_resident(self, resource, bytes).map_err(err)
    }

    fn upload_resident_many(&self, uploads: &[(&Resource, &[u8])]) -> Result<(), BackendError> {
        CudaBackend::upload_resident_many(self, uploads).map_err(err)
    }

    fn upload_resident_at(
        &self,
        resource: &Resource,
        dst_offset_bytes: usize,
        bytes: &[u8],
    ) -> Result<(), BackendError> {
        CudaBackend::upload_resident_at(self, resource, dst_offset_bytes, bytes).map_err(err)
    }

    fn upload_resident_at_many(
        &self,
        uploads: &[(&Resource, usize, &[u8])],
    ) -> Result<(), BackendError> {
        CudaBackend::upload_resident_at_many(self, uploads).map_err(err)
    }

    fn download_resident(&self, resource: &Resource) -> Result<Vec<u8>, BackendError> {
        CudaBackend::download_resident(self, resource).map_err(err)
    }

    fn download_resident_into(
        &self,
        resource: &Resource,
        out: &mut Vec<u8>,
    ) -> Result<(), BackendError> {
        CudaBackend::download_resident_into(self, resource, out).map_err(err)
    }

    fn download_resident_range(
        &self,
        resource: &Resource,
        byte_offset: usize,
        byte_len: usize,
    ) -> Result<Vec<u8>, BackendError> {
        CudaBackend::download_resident_range(self, resource, byte_offset, byte_len).map_err(err)
    }

    fn download_resident_range_into(
        &self,
        resource: &Resource,
        byte_offset: usize,
        byte_len: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), BackendError> {
        CudaBackend::download_resident_range_into(self, resource, byte_offset, byte_len, out)
            .map_err(err)
    }

    fn download_resident_ranges_into(
        &self,
        ranges: &[(&Resource, usize, usize)],
        outputs: &mut [&mut Vec<u8>],
    ) -> Result<(), BackendError> {
        CudaBackend::download_resident_ranges_into(self, ranges, outputs).map_err(err)
    }

    fn free_resident(&self, resource: Resource) -> Result<(), BackendError> {
        CudaBackend::free_resident(self, resource).map_err(err)
    }

    fn dispatch_resident_timed(
        &self,
        program: &Program,
        resources: &[Resource],
        config: &DispatchConfig,
    ) -> Result<TimedDispatchResult, BackendError> {
        CudaBackend::dispatch_resident_timed(self, program, resources, config).map_err(err)
    }

    fn dispatch_resident_sequence_read_ranges_into(
        &self,
        steps: &[ResidentDispatchStep<'_>],
        read_ranges: &[ResidentReadRange<'_>],
        outputs: &mut [&mut Vec<u8>],
    ) -> Result<(), BackendError> {
        CudaBackend::dispatch_resident_sequence_read_ranges_into(self, steps, read_ranges, outputs)
            .map_err(err)
    }

    fn dispatch_resident_sequence_read_ranges_timed_into(
        &self,
        steps: &[ResidentDispatchStep<'_>],
        read_ranges: &[ResidentReadRange<'_>],
        outputs: &mut [&mut Vec<u8>],
    ) -> Result<ResidentSequenceTiming, BackendError> {
        CudaBackend::dispatch_resident_sequence_read_ranges_timed_into(
            self,
            steps,
            read_ranges,
            outputs,
        )
        .map_err(err)
    }

    fn dispatch_resident_repeated_sequence_read_ranges_into(
        &self,
        prefix_steps: &[ResidentDispatchStep<'_>],
        repeated_steps: &[ResidentDispatchStep<'_>],
        repeat_count: u32,
        read_ranges: &[ResidentReadRange<'_>],
        outputs: &mut [&mut Vec<u8>],
    ) -> Result<(), BackendError> {
        CudaBackend::dispatch_resident_repeated_sequence_read_ranges_into(
            self,
            prefix_steps,
            repeated_steps,
            repeat_count,
            read_ranges,
            outputs,
        )
        .map(|_| ())
        .map_err(err)
    }

    fn supports_resident_dispatch(&self) -> bool {
        true
    }

    fn supports_async_compute(&self) -> bool {
        true
    }

    fn allocate_device_buffer(
        &self,
        byte_len: usize,
    ) -> Result<Box<dyn DeviceBuffer>, BackendError> {
        CudaBackend::allocate_device_buffer(self, byte_len)
            .map(|buffer| Box::new(buffer) as Box<dyn DeviceBuffer>)
            .map_err(err)
    }

    fn upload_device_buffer(
        &self,
        buffer: &mut dyn DeviceBuffer,
        bytes: &[u8],
    ) -> Result<(), BackendError> {
        CudaBackend::upload_device_buffer(self, buffer, bytes).map_err(err)
    }

    fn download_device_buffer(&self, buffer: &dyn DeviceBuffer) -> Result<Vec<u8>, BackendError> {
        CudaBackend::download_device_buffer(self, buffer).map_err(err)
    }

    fn free_device_buffer(&self, buffer: Box<dyn DeviceBuffer>) -> Result<(), BackendError> {
        CudaBackend::free_device_buffer(self, buffer).map_err(err)
    }

    fn dispatch_with_device_buffers(
        &self,
        program: &Program,
        inputs: &[&dyn DeviceBuffer],
        outputs: &mut [&mut dyn DeviceBuffer],
        config: &DispatchConfig,
    ) -> Result<(), BackendError> {
        CudaBackend::dispatch_with_device_buffers(self, program, inputs, outputs, config)
            .map_err(err)
    }

    fn prepare(&self) -> Result<(), BackendError> {
        CudaBackend::prepare(self).map_err(err)
    }

    fn flush(&self) -> Result<(), BackendError> {
        CudaBackend::flush(self).map_err(err)
    }

    fn shutdown(&self) -> Result<(), BackendError> {
        CudaBackend::shutdown(self).map_err(err)
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
        // The reference gives F16/BF16 no arithmetic: loads, stores and raw-byte casts,
        // all of which the emitter lowers natively.
        true
    }

    fn supports_bf16(&self) -> bool {
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

    fn allows_host_grid_sync_split(&self) -> bool {
        true
    }

    fn supports_grid_sync(&self) -> bool {
        // Grid-wide barriers run on the device either way (one cooperative launch where
        // the grid fits resident, else ordered launches per segment); report the native
        // form only where cooperative launches exist.
        self.cooperative_grid_sync()
    }

    fn cooperative_grid_sync_fits(
        &self,
        program: &Program,
        inputs: &[&[u8]],
        config: &DispatchConfig,
    ) -> Result<bool, BackendError> {
        CudaBackend::cooperative_grid_sync_fits(self, program, inputs, config).map_err(Into::into)
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
        profile.has_shared_memory = true;
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

    fn try_recover(&self) -> Result<(), BackendError> {
        CudaBackend::try_recover(self).map_err(Into::into)
    }
}

fn factory() -> Result<Box<dyn VyreBackend>, BackendError> {
    CudaBackend::new()
        .map(|backend| Box::new(backend) as Box<dyn VyreBackend>)
        .map_err(Into::into)
}

inventory::submit! {
    BackendRegistration {
        id: CUDA_BACKEND_ID,
        factory,
        supported_ops,
    }
}

inventory::submit! {
    BackendPrecedence { id: CUDA_BACKEND_ID, rank: 5 }
}

inventory::submit! {
    BackendCapability { id: CUDA_BACKEND_ID, dispatches: true }
}
