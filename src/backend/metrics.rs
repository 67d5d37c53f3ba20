//! Counters behind `backend_metric_snapshot`: plain relaxed atomics, one per event.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! metrics {
    ($($field:ident => $name:literal),* $(,)?) => {
        /// Backend telemetry counters.
        #[derive(Debug, Default)]
        pub(crate) struct Metrics {
            $(pub(crate) $field: AtomicU64,)*
        }

        impl Metrics {
            /// Stable, Prometheus-friendly `(name, value)` pairs.
            pub(crate) fn snapshot(&self) -> Vec<(&'static str, u64)> {
                vec![$(($name, self.$field.load(Ordering::Relaxed)),)*]
            }
        }
    };
}

metrics! {
    dispatches => "vyre_cuda_dispatches_total",
    dispatch_errors => "vyre_cuda_dispatch_errors_total",
    async_dispatches => "vyre_cuda_async_dispatches_total",
    resident_dispatches => "vyre_cuda_resident_dispatches_total",
    resident_sequences => "vyre_cuda_resident_sequences_total",
    launches => "vyre_cuda_kernel_launches_total",
    grid_sync_cooperative => "vyre_cuda_grid_sync_cooperative_launches_total",
    grid_sync_split => "vyre_cuda_grid_sync_split_launches_total",
    chunked_dispatches => "vyre_cuda_chunked_dispatches_total",
    vector_launches => "vyre_cuda_vector_launches_total",
    packed_dispatches => "vyre_cuda_packed_dispatches_total",
    artifact_packed_submits => "vyre_cuda_artifact_packed_submits_total",
    clock_timed_submits => "vyre_cuda_clock_timed_submits_total",
    graph_captures => "vyre_cuda_graph_captures_total",
    graph_launches => "vyre_cuda_graph_launches_total",
    graph_cache_hits => "vyre_cuda_graph_cache_hits_total",
    kernel_cache_hits => "vyre_cuda_kernel_cache_hits_total",
    kernel_cache_misses => "vyre_cuda_kernel_cache_misses_total",
    ptx_cache_hits => "vyre_cuda_ptx_cache_hits_total",
    ptx_generations => "vyre_cuda_ptx_generations_total",
    step_machine_kernels => "vyre_cuda_step_machine_kernels_total",
    ptx_bytes => "vyre_cuda_ptx_bytes_total",
    module_loads => "vyre_cuda_module_loads_total",
    module_evictions => "vyre_cuda_module_evictions_total",
    device_allocations => "vyre_cuda_device_allocations_total",
    device_allocation_bytes => "vyre_cuda_device_allocation_bytes_total",
    pool_reuses => "vyre_cuda_pool_reuses_total",
    pinned_allocations => "vyre_cuda_pinned_allocations_total",
    pinned_allocation_bytes => "vyre_cuda_pinned_allocation_bytes_total",
    stream_creations => "vyre_cuda_stream_creations_total",
    resident_allocations => "vyre_cuda_resident_allocations_total",
    resident_frees => "vyre_cuda_resident_frees_total",
    bytes_to_device => "vyre_cuda_bytes_to_device_total",
    bytes_to_host => "vyre_cuda_bytes_to_host_total",
    staged_bytes => "vyre_cuda_staged_upload_bytes_total",
    timed_dispatches => "vyre_cuda_timed_dispatches_total",
    timed_device_ns => "vyre_cuda_timed_device_ns_total",
    timed_wall_ns => "vyre_cuda_timed_wall_ns_total",
    kernel_faults => "vyre_cuda_kernel_runtime_errors_total",
    sticky_errors => "vyre_cuda_sticky_context_errors_total",
}

impl Metrics {
    pub(crate) fn add(counter: &AtomicU64, value: u64) {
        counter.fetch_add(value, Ordering::Relaxed);
    }

    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn device_allocation(&self, bytes: usize) {
        Self::bump(&self.device_allocations);
        Self::add(&self.device_allocation_bytes, bytes as u64);
    }

    pub(crate) fn pinned_allocation(&self, bytes: usize) {
        Self::bump(&self.pinned_allocations);
        Self::add(&self.pinned_allocation_bytes, bytes as u64);
    }
}
