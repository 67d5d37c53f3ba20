//! The `VyreBackend` adapter over [`CudaBackend`] and its `inventory` registration.
//!
//! Linking vyre-cuda is enough for `vyre_driver::registered_backends()` to list `"cuda"`
//! and for `vyre_driver::acquire("cuda")` to open the device. Applications that want the
//! direct API (resident workflows, the PTX emitter) use [`CudaBackend`] itself.

use crate::backend::CudaBackend;
use std::collections::HashSet;
use std::sync::OnceLock;
use vyre_driver::backend::private::Sealed;
use vyre_driver::backend::{BackendCapability, BackendPrecedence};
use vyre_driver::{BackendError, BackendRegistration, DispatchConfig, OutputBuffers, VyreBackend};
use vyre_foundation::ir::{OpId, Program};

/// Backend id under which vyre-cuda registers.
pub const CUDA_BACKEND_ID: &str = "cuda";

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

    fn backend_metric_snapshot(&self) -> Vec<(&'static str, u64)> {
        self.metric_snapshot()
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
