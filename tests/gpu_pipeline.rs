//! Compiled pipelines, the kernel caches (LRU) and warm-dispatch telemetry on the
//! GPU. Skips without a CUDA device.

mod common;

use common::gpu::{backend, fresh, reference, Rng};
use common::kernels::{affine, vadd};
use std::sync::Arc;
use vyre_cuda::CudaOptions;
use vyre_driver::{CompiledPipeline, DispatchConfig, Resource, VyreBackend};

#[test]
fn compiled_pipelines_are_bit_identical_and_shareable_across_threads() {
    let Some(backend) = backend() else { return };
    let dynamic: &dyn VyreBackend = backend;
    let program = vadd(3000, 77);
    let before = dynamic.pipeline_cache_snapshot().unwrap();
    let compile = || -> Arc<dyn CompiledPipeline> {
        let config = DispatchConfig::default();
        Arc::new(backend.compile(Arc::new(program.clone()), &config).unwrap())
    };
    let pipeline = compile();
    let prefix = format!("{}:", vyre_cuda::BACKEND_ID);
    assert!(
        pipeline.id().starts_with(&prefix) && pipeline.id().len() == prefix.len() + 64,
        "{}",
        pipeline.id()
    );
    let shared = compile();
    assert_eq!(shared.id(), pipeline.id());
    let after = dynamic.pipeline_cache_snapshot().unwrap();
    assert!(
        after.hits > before.hits,
        "the second compile hits the cache"
    );
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let pipeline = Arc::clone(&pipeline);
            let program = program.clone();
            std::thread::spawn(move || {
                let mut rng = Rng::new(100 + t);
                for _ in 0..25 {
                    let inputs = vec![rng.bytes_u32(3000), rng.bytes_u32(3000)];
                    let got = pipeline
                        .dispatch(&inputs, &DispatchConfig::default())
                        .unwrap();
                    assert_eq!(got, reference(&program, &inputs).unwrap());
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut rng = Rng::new(7);
    let inputs = vec![rng.bytes_u32(3000), rng.bytes_u32(3000)];
    assert_eq!(
        pipeline
            .dispatch(&inputs, &DispatchConfig::default())
            .unwrap(),
        dynamic
            .dispatch(&program, &inputs, &DispatchConfig::default())
            .unwrap()
    );
    let borrowed: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
    let timed = pipeline
        .dispatch_borrowed_timed(&borrowed, &DispatchConfig::default())
        .unwrap();
    assert!(timed.device_ns.is_some());
    // Persistent handles: resident buffers in binding order (out, b, a).
    let ra = dynamic.allocate_resident(inputs[0].len()).unwrap();
    let rb = dynamic.allocate_resident(inputs[1].len()).unwrap();
    let out = dynamic.allocate_resident(12000).unwrap();
    dynamic
        .upload_resident_many(&[(&ra, &inputs[0][..]), (&rb, &inputs[1][..])])
        .unwrap();
    let handles: Vec<Resource> = vec![out.clone(), rb.clone(), ra.clone()];
    let outputs = pipeline
        .dispatch_persistent_handles(&handles, &DispatchConfig::default())
        .unwrap();
    assert_eq!(outputs, reference(&program, &inputs).unwrap());
    for r in [ra, rb, out] {
        dynamic.free_resident(r).unwrap();
    }
}

#[test]
fn a_warm_dispatch_generates_loads_and_allocates_nothing() {
    let Some(backend) = backend() else { return };
    let program = vadd(1 << 16, 5);
    let mut rng = Rng::new(21);
    let inputs = vec![rng.bytes_u32(1 << 16), rng.bytes_u32(1 << 16)];
    let want = reference(&program, &inputs).unwrap();
    let borrowed: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
    let mut out = Vec::new();
    backend
        .dispatch_borrowed_into(&program, &borrowed, &DispatchConfig::default(), &mut out)
        .unwrap();
    let counters = [
        "vyre_cuda_ptx_generations_total",
        "vyre_cuda_module_loads_total",
        "vyre_cuda_device_allocations_total",
        "vyre_cuda_pinned_allocations_total",
        "vyre_cuda_kernel_cache_hits_total",
    ];
    let before: Vec<u64> = counters.iter().map(|c| backend.metric(c)).collect();
    backend
        .dispatch_borrowed_into(&program, &borrowed, &DispatchConfig::default(), &mut out)
        .unwrap();
    assert_eq!(out, want);
    let after: Vec<u64> = counters.iter().map(|c| backend.metric(c)).collect();
    for ((name, b), a) in counters.iter().zip(&before).zip(&after) {
        println!("warm dispatch: {name} {b} -> {a}");
    }
    assert_eq!(
        &after[..4],
        &before[..4],
        "a warm dispatch made no generation, load or allocation"
    );
    assert_eq!(after[4], before[4] + 1);
}

#[test]
fn the_module_cache_is_bounded_and_evicts_least_recently_used() {
    let Some(_) = backend() else { return };
    let mut options = CudaOptions::from_env().unwrap();
    options.module_cache_entries = 3;
    options.ptx_cache_entries = 3;
    let small = fresh(options).unwrap();
    let mut rng = Rng::new(22);
    let inputs = vec![rng.bytes_u32(300)];
    let programs: Vec<_> = (1..=6).map(|k| affine(k, k, 64)).collect();
    // A pipeline holds its kernel: eviction from the cache must not unload it.
    let pinned = small
        .compile(Arc::new(programs[0].clone()), &DispatchConfig::default())
        .unwrap();
    for program in &programs {
        let got = small
            .dispatch(program, &inputs, &DispatchConfig::default())
            .unwrap();
        assert_eq!(got, reference(program, &inputs).unwrap());
    }
    assert_eq!(small.metric("vyre_cuda_loaded_kernels"), 3);
    assert!(small.metric("vyre_cuda_module_evictions_total") >= 3);
    let borrowed: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
    assert_eq!(
        pinned
            .dispatch_borrowed(&borrowed, &DispatchConfig::default())
            .unwrap(),
        reference(&programs[0], &inputs).unwrap()
    );
    // Re-dispatching an evicted program recompiles it and still matches.
    let loads = small.metric("vyre_cuda_module_loads_total");
    let got = small
        .dispatch(&programs[1], &inputs, &DispatchConfig::default())
        .unwrap();
    assert_eq!(got, reference(&programs[1], &inputs).unwrap());
    assert_eq!(small.metric("vyre_cuda_module_loads_total"), loads + 1);
}
