//! Stress: 8 threads x 10,000 mixed operations (borrowed, async, timed and pipeline
//! dispatches, resident allocate/upload/dispatch/read/free, sequences, bad handles) on one
//! backend. Every result is checked; device memory returns to its starting level after
//! the frees and `shutdown`. Skips without a CUDA device.

mod common;

use common::gpu::{backend, fresh, reference, Rng};
use common::kernels::{accumulate, affine, vadd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use vyre_cuda::CudaOptions;
use vyre_driver::{DispatchConfig, ResidentDispatchStep, ResidentReadRange, Resource};

const THREADS: u64 = 8;
const OPS: u64 = 10_000;

#[test]
fn eight_threads_ten_thousand_mixed_operations() {
    let Some(shared) = backend() else { return };
    let (free_start, total) = shared.memory_info().unwrap();
    let backend = Arc::new(fresh(CudaOptions::from_env().unwrap()).unwrap());
    backend.prepare().unwrap();
    let n = 1024u32;
    let programs = Arc::new((vadd(n, 1), affine(5, 3, 64), accumulate()));
    // Precomputed reference results for the fixed inputs each thread uses.
    let mut rng = Rng::new(40);
    let a = rng.bytes_u32(n as usize);
    let b = rng.bytes_u32(n as usize);
    let vadd_want = reference(&programs.0, &[a.clone(), b.clone()]).unwrap();
    let affine_want = reference(&programs.1, std::slice::from_ref(&a)).unwrap();
    let pipeline = Arc::new(
        backend
            .compile(Arc::new(programs.0.clone()), &DispatchConfig::default())
            .unwrap(),
    );
    let dispatches = Arc::new(AtomicU64::new(0));
    let expected_errors = Arc::new(AtomicU64::new(0));
    let started = std::time::Instant::now();
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let backend = Arc::clone(&backend);
            let programs = Arc::clone(&programs);
            let pipeline = Arc::clone(&pipeline);
            let dispatches = Arc::clone(&dispatches);
            let expected_errors = Arc::clone(&expected_errors);
            let (a, b) = (a.clone(), b.clone());
            let (vadd_want, affine_want) = (vadd_want.clone(), affine_want.clone());
            std::thread::spawn(move || {
                let config = DispatchConfig::default();
                let inputs = [a.as_slice(), b.as_slice()];
                let mut out = Vec::new();
                let mut resident: Vec<Resource> = Vec::new();
                for op in 0..OPS {
                    match (op + t) % 10 {
                        0..=2 => {
                            backend
                                .dispatch_borrowed_into(&programs.0, &inputs, &config, &mut out)
                                .unwrap();
                            assert_eq!(out, vadd_want);
                            dispatches.fetch_add(1, Ordering::Relaxed);
                        }
                        3 => {
                            let pending = backend
                                .dispatch_borrowed_async(&programs.1, &inputs[..1], &config)
                                .unwrap();
                            if op % 7 == 0 {
                                drop(pending); // dropped unawaited
                            } else {
                                assert_eq!(pending.wait().unwrap(), affine_want);
                            }
                            dispatches.fetch_add(1, Ordering::Relaxed);
                        }
                        4 => {
                            let timed = backend
                                .dispatch_borrowed_timed(&programs.0, &inputs, &config)
                                .unwrap();
                            assert_eq!(timed.outputs, vadd_want);
                            assert!(timed.device_ns.is_some());
                            dispatches.fetch_add(1, Ordering::Relaxed);
                        }
                        5 => {
                            pipeline
                                .dispatch_borrowed_into(&inputs, &config, &mut out)
                                .unwrap();
                            assert_eq!(out, vadd_want);
                            dispatches.fetch_add(1, Ordering::Relaxed);
                        }
                        6 => {
                            // Resident vadd: allocate, upload, dispatch, read, keep some.
                            let ra = backend.allocate_resident(a.len()).unwrap();
                            let rb = backend.allocate_resident(b.len()).unwrap();
                            let ro = backend.allocate_resident(n as usize * 4).unwrap();
                            backend
                                .upload_resident_many(&[(&ra, &a[..]), (&rb, &b[..])])
                                .unwrap();
                            backend
                                .dispatch_resident_timed(
                                    &programs.0,
                                    &[ro.clone(), rb.clone(), ra.clone()],
                                    &config,
                                )
                                .unwrap();
                            assert_eq!(backend.download_resident(&ro).unwrap(), vadd_want[0]);
                            dispatches.fetch_add(1, Ordering::Relaxed);
                            backend.free_resident(ra).unwrap();
                            backend.free_resident(rb).unwrap();
                            resident.push(ro);
                        }
                        7 => {
                            // Sequence on a kept buffer: affine then accumulate into itself.
                            if let Some(acc) = resident.last() {
                                let x = backend.allocate_resident(a.len()).unwrap();
                                backend.upload_resident(&x, &a).unwrap();
                                backend.upload_resident(acc, &vadd_want[0]).unwrap();
                                let xs = [x.clone()];
                                let pair = [acc.clone(), x.clone()];
                                let steps = [
                                    ResidentDispatchStep {
                                        program: &programs.1,
                                        resources: &xs,
                                        grid_override: None,
                                        workgroup_override: None,
                                    },
                                    ResidentDispatchStep {
                                        program: &programs.2,
                                        resources: &pair,
                                        grid_override: None,
                                        workgroup_override: None,
                                    },
                                ];
                                let mut got = Vec::new();
                                backend
                                    .dispatch_resident_sequence_read_ranges_into(
                                        &steps,
                                        &[ResidentReadRange {
                                            resource: acc,
                                            byte_offset: 0,
                                            byte_len: 16,
                                        }],
                                        &mut [&mut got],
                                    )
                                    .unwrap();
                                let want: Vec<u8> = vadd_want[0][..16]
                                    .chunks_exact(4)
                                    .zip(affine_want[0][..16].chunks_exact(4))
                                    .flat_map(|(p, q)| {
                                        let p = u32::from_le_bytes(p.try_into().unwrap());
                                        let q = u32::from_le_bytes(q.try_into().unwrap());
                                        p.wrapping_add(q).to_le_bytes()
                                    })
                                    .collect();
                                assert_eq!(got, want);
                                backend.free_resident(x).unwrap();
                                dispatches.fetch_add(2, Ordering::Relaxed);
                            }
                        }
                        8 => {
                            // Expected failures: freed handle, bad range, bad input count.
                            let r = backend.allocate_resident(64).unwrap();
                            backend.free_resident(r.clone()).unwrap();
                            assert!(backend.download_resident(&r).is_err());
                            if let Some(kept) = resident.first() {
                                assert!(backend.download_resident_range(kept, 4096, 1).is_err());
                            }
                            assert!(backend
                                .dispatch_borrowed_into(
                                    &programs.0,
                                    &inputs[..1],
                                    &config,
                                    &mut out
                                )
                                .is_err());
                            expected_errors.fetch_add(3, Ordering::Relaxed);
                        }
                        _ => {
                            if resident.len() > 4 {
                                for r in resident.drain(..) {
                                    backend.free_resident(r).unwrap();
                                }
                            }
                        }
                    }
                }
                for r in resident {
                    backend.free_resident(r).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let elapsed = started.elapsed();
    let metrics = backend.metric_snapshot();
    let get = |name: &str| {
        metrics
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, v)| *v)
    };
    let (free_after_frees, _) = backend.memory_info().unwrap();
    println!(
        "stress: {} threads x {} ops in {:.2?}: {} dispatches, {} expected errors, {} dispatch errors counted, {} resident buffers left",
        THREADS,
        OPS,
        elapsed,
        dispatches.load(Ordering::Relaxed),
        expected_errors.load(Ordering::Relaxed),
        get("vyre_cuda_dispatch_errors_total"),
        get("vyre_cuda_resident_buffers"),
    );
    println!(
        "stress telemetry: ptx_generations {} module_loads {} device_allocations {} pool_reuses {} pinned_allocations {} streams {} pool_idle {} staging_idle {} resident_bytes {}",
        get("vyre_cuda_ptx_generations_total"),
        get("vyre_cuda_module_loads_total"),
        get("vyre_cuda_device_allocations_total"),
        get("vyre_cuda_pool_reuses_total"),
        get("vyre_cuda_pinned_allocations_total"),
        get("vyre_cuda_stream_creations_total"),
        get("vyre_cuda_pool_idle_bytes"),
        get("vyre_cuda_staging_idle_bytes"),
        get("vyre_cuda_resident_bytes"),
    );
    assert_eq!(get("vyre_cuda_resident_buffers"), 0);
    assert_eq!(get("vyre_cuda_resident_bytes"), 0);
    backend.shutdown().unwrap();
    drop(pipeline);
    let (free_end, _) = shared.memory_info().unwrap();
    println!(
        "stress memory (of {total}): free at start {free_start}, after frees {free_after_frees} (pool {} idle), after shutdown {free_end}",
        get("vyre_cuda_pool_idle_bytes")
    );
    // The driver reserves memory in 2 MiB pages; allow a little slack for its bookkeeping.
    assert!(
        free_end + (8 << 20) >= free_start,
        "device memory leaked: {} bytes",
        free_start - free_end
    );
}
