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
    kernel_cache_hits => "vyre_cuda_kernel_cache_hits_total",
    kernel_cache_misses => "vyre_cuda_kernel_cache_misses_total",
    ptx_generations => "vyre_cuda_ptx_generations_total",
    ptx_bytes => "vyre_cuda_ptx_bytes_total",
    module_loads => "vyre_cuda_module_loads_total",
    device_allocations => "vyre_cuda_device_allocations_total",
    device_allocation_bytes => "vyre_cuda_device_allocation_bytes_total",
    pool_reuses => "vyre_cuda_pool_reuses_total",
    bytes_to_device => "vyre_cuda_bytes_to_device_total",
    bytes_to_host => "vyre_cuda_bytes_to_host_total",
    kernel_faults => "vyre_cuda_kernel_runtime_errors_total",
    context_recoveries => "vyre_cuda_context_recoveries_total",
}

impl Metrics {
    pub(crate) fn add(counter: &AtomicU64, value: u64) {
        counter.fetch_add(value, Ordering::Relaxed);
    }

    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}
