//! Every error path of the dispatch executors returns what it took from the pools. A test
//! hook (`CudaBackend::fail_driver_call`) fails the nth allocation, copy, launch or wait
//! of a call, for n = 1, 2, 3, 4, 6, 9, ... until the call makes fewer calls of that kind;
//! each injected failure must fail the call, leave every pool's in-use count
//! (`vyre_cuda_<pool>_in_use`) and the resident buffers at their baseline, and the same
//! call must then succeed with outputs byte-identical to vyre-reference (or, for the
//! large chunked inputs, to the host formula the reference is checked against here).
//! Kernel faults (a signed division by zero) are checked the same way. Allocations are
//! swept on cold backends (a warm pool makes none). Skips without a CUDA device.

mod common;

use common::gpu::{fresh, reference, Rng};
use common::kernels::{affine, signed_div, vadd, words};
use vyre_cuda::backend::FailPoint;
use vyre_cuda::{CudaBackend, CudaError, CudaOptions};
use vyre_driver::{DispatchConfig, ResidentDispatchStep, ResidentReadRange, Resource};

const KINDS: [FailPoint; 4] = [
    FailPoint::Alloc,
    FailPoint::Copy,
    FailPoint::Launch,
    FailPoint::Wait,
];

/// Sizes: packed small path, general path, chunked path (inputs over 32 MiB).
const SMALL: u32 = 1000;
const GENERAL: u32 = 50_000;
const CHUNKED: u32 = 5 << 20;

type Op<'a> = &'a dyn Fn(&CudaBackend) -> Result<(), String>;

fn new_backend() -> Option<CudaBackend> {
    fresh(CudaOptions::from_env().expect("options"))
}

/// Every pool's in-use count and the live resident buffers.
fn held(backend: &CudaBackend) -> Vec<(&'static str, u64)> {
    backend
        .metric_snapshot()
        .into_iter()
        .filter(|(name, _)| name.ends_with("_in_use") || *name == "vyre_cuda_resident_buffers")
        .collect()
}

fn next(nth: u32) -> u32 {
    (nth + nth / 2).max(nth + 1)
}

/// Injects every kind of failure into `op` (see the module docs). `swallowing`: `op` may
/// succeed although a failure was injected (a dropped pending dispatch only logs).
fn sweep(what: &str, op: Op<'_>, swallowing: bool) {
    let Some(warm) = new_backend() else { return };
    op(&warm).unwrap_or_else(|e| panic!("{what}: clean run: {e}"));
    let baseline = held(&warm);
    assert!(
        baseline
            .iter()
            .all(|(name, n)| *n == 0 || name.starts_with("vyre_cuda_resident")),
        "{what}: resources in use at rest: {baseline:?}"
    );
    for kind in KINDS {
        let (mut nth, mut failures) = (1u32, 0u32);
        loop {
            // A warm pool allocates nothing: allocation failures run on a cold backend.
            let cold = (kind == FailPoint::Alloc).then(|| new_backend().expect("backend"));
            let backend = cold.as_ref().unwrap_or(&warm);
            backend.fail_driver_call(kind, nth);
            let result = op(backend);
            if backend.disarm_driver_failure() {
                result.unwrap_or_else(|e| panic!("{what}: {kind:?} never injected: {e}"));
                break;
            }
            assert!(
                result.is_err() || swallowing,
                "{what}: {kind:?} #{nth} was injected but the call succeeded"
            );
            assert_eq!(held(backend), baseline, "{what}: after {kind:?} #{nth}");
            op(backend).unwrap_or_else(|e| panic!("{what}: after {kind:?} #{nth}: {e}"));
            assert_eq!(held(backend), baseline, "{what}: after {kind:?} #{nth}");
            assert!(!backend.device_lost());
            failures += 1;
            nth = next(nth);
            assert!(nth < 100_000, "{what}: {kind:?}: no end to the calls");
        }
        println!("{what}: {kind:?}: {failures} injected failure(s)");
    }
}

/// `fault` must fail with the kernel's runtime error, return every pool resource, and be
/// followed by a clean `op`.
fn faults(what: &str, fault: Op<'_>, op: Op<'_>) {
    let Some(backend) = new_backend() else { return };
    op(&backend).unwrap_or_else(|e| panic!("{what}: clean run: {e}"));
    let baseline = held(&backend);
    for round in 0..3 {
        let error = fault(&backend).expect_err("the kernel faults");
        assert!(error.contains("KernelRuntime"), "{what}: {error}");
        assert_eq!(held(&backend), baseline, "{what}: fault round {round}");
        op(&backend).unwrap_or_else(|e| panic!("{what}: after a fault: {e}"));
        assert_eq!(held(&backend), baseline, "{what}: round {round}");
    }
}

fn text(error: CudaError) -> String {
    format!("{error:?}")
}

fn vadd_inputs(n: u32) -> Vec<Vec<u8>> {
    let mut rng = Rng::new(u64::from(n));
    vec![rng.bytes_u32(n as usize), rng.bytes_u32(n as usize)]
}

/// `vadd(n, salt)` on the host: `a + b + salt`, wrapping.
fn vadd_host(inputs: &[Vec<u8>], salt: u32) -> Vec<u8> {
    words(&inputs[0])
        .iter()
        .zip(words(&inputs[1]))
        .flat_map(|(a, b)| a.wrapping_add(b).wrapping_add(salt).to_le_bytes())
        .collect()
}

/// `signed_div` inputs whose divisors include a zero (at `n / 2`).
fn division_by_zero(n: u32) -> Vec<Vec<u8>> {
    let a = vec![7u8; n as usize * 4];
    let mut d = vec![0u8; n as usize * 4];
    for (i, word) in d.chunks_exact_mut(4).enumerate() {
        if i != n as usize / 2 {
            word.copy_from_slice(&3i32.to_le_bytes());
        }
    }
    vec![a, d]
}

/// A borrowed dispatch of `vadd(n)` (`async_wait`: through `dispatch_async` and `wait`).
fn dispatch_vadd(
    n: u32,
    timed: bool,
    async_wait: bool,
) -> impl Fn(&CudaBackend) -> Result<(), String> {
    let inputs = vadd_inputs(n);
    let program = vadd(n, 5);
    let want = vadd_host(&inputs, 5);
    if n <= GENERAL {
        assert_eq!(
            reference(&program, &inputs).unwrap(),
            std::slice::from_ref(&want)
        );
    }
    move |backend| {
        let config = DispatchConfig::default();
        let outputs = if async_wait {
            backend
                .dispatch_async(&program, &inputs, &config)
                .and_then(|p| p.wait())
        } else if timed {
            let borrowed: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
            backend
                .dispatch_borrowed_timed(&program, &borrowed, &config)
                .map(|t| t.outputs)
        } else {
            backend.dispatch(&program, &inputs, &config)
        };
        let outputs = outputs.map_err(text)?;
        assert!(
            outputs == [want.clone()],
            "vadd({n}) differs from the reference"
        );
        Ok(())
    }
}

#[test]
fn the_packed_path_returns_its_lane_on_every_error() {
    sweep("packed", &dispatch_vadd(SMALL, false, false), false);
    sweep("packed timed", &dispatch_vadd(SMALL, true, false), false);
    let program = signed_div(256);
    let inputs = division_by_zero(256);
    faults(
        "packed",
        &|b| {
            b.dispatch(&program, &inputs, &DispatchConfig::default())
                .map(drop)
                .map_err(text)
        },
        &dispatch_vadd(SMALL, false, false),
    );
}

#[test]
fn the_general_path_returns_its_stream_and_block_on_every_error() {
    sweep("general", &dispatch_vadd(GENERAL, false, false), false);
    sweep("general timed", &dispatch_vadd(GENERAL, true, false), false);
    let program = signed_div(GENERAL);
    let inputs = division_by_zero(GENERAL);
    faults(
        "general",
        &|b| {
            b.dispatch(&program, &inputs, &DispatchConfig::default())
                .map(drop)
                .map_err(text)
        },
        &dispatch_vadd(GENERAL, false, false),
    );
}

#[test]
fn async_dispatches_return_their_resources_on_every_error() {
    sweep("async", &dispatch_vadd(GENERAL, false, true), false);
    let program = vadd(GENERAL, 5);
    let inputs = vadd_inputs(GENERAL);
    let dropped = |b: &CudaBackend| {
        let pending = b
            .dispatch_async(&program, &inputs, &DispatchConfig::default())
            .map_err(text)?;
        drop(pending);
        Ok(())
    };
    sweep("async dropped unawaited", &dropped, true);
    let program = signed_div(GENERAL);
    let inputs = division_by_zero(GENERAL);
    faults(
        "async",
        &|b| {
            b.dispatch_async(&program, &inputs, &DispatchConfig::default())
                .and_then(|p| p.wait())
                .map(drop)
                .map_err(text)
        },
        &dispatch_vadd(GENERAL, false, true),
    );
}

#[test]
fn chunked_dispatches_return_every_stream_block_and_lane_on_every_error() {
    let clean = dispatch_vadd(CHUNKED, false, false);
    let counted = |b: &CudaBackend| {
        let before = b.metric("vyre_cuda_chunked_dispatches_total");
        clean(b)?;
        assert_eq!(
            b.metric("vyre_cuda_chunked_dispatches_total"),
            before + 1,
            "the large vadd runs chunked"
        );
        Ok(())
    };
    sweep("chunked", &counted, false);
    let program = signed_div(CHUNKED);
    let inputs = division_by_zero(CHUNKED);
    faults(
        "chunked",
        &|b| {
            b.dispatch(&program, &inputs, &DispatchConfig::default())
                .map(drop)
                .map_err(text)
        },
        &counted,
    );
}

/// Allocates, uploads and frees resident buffers around `run`, whatever it returns.
fn with_resident(
    backend: &CudaBackend,
    contents: &[&[u8]],
    run: impl FnOnce(&[Resource]) -> Result<(), String>,
) -> Result<(), String> {
    let mut resources = Vec::new();
    let mut result = Ok(());
    for bytes in contents {
        match backend.allocate_resident(bytes.len()) {
            Ok(resource) => {
                let uploaded = backend.upload_resident(&resource, bytes).map_err(text);
                resources.push(resource);
                if let Err(error) = uploaded {
                    result = Err(error);
                    break;
                }
            }
            Err(error) => {
                result = Err(text(error));
                break;
            }
        }
    }
    if result.is_ok() {
        result = run(&resources);
    }
    for resource in resources {
        backend.free_resident(resource).expect("free");
    }
    result
}

#[test]
fn resident_dispatches_return_their_resources_on_every_error() {
    let n = GENERAL;
    let program = vadd(n, 9);
    let inputs = vadd_inputs(n);
    let want = reference(&program, &inputs).unwrap();
    let op = |b: &CudaBackend| {
        let zeros = vec![0u8; n as usize * 4];
        // Binding order: out, b, a.
        with_resident(b, &[&zeros, &inputs[1], &inputs[0]], |r| {
            b.dispatch_resident_timed(&program, r, &DispatchConfig::default())
                .map_err(text)?;
            let got = b.download_resident(&r[0]).map_err(text)?;
            assert!(got == want[0], "resident vadd differs from the reference");
            Ok(())
        })
    };
    sweep("resident", &op, false);
    let div = signed_div(n);
    let zero = division_by_zero(n);
    faults(
        "resident",
        &|b| {
            let out = vec![0u8; n as usize * 4];
            with_resident(b, &[&zero[0], &zero[1], &out], |r| {
                b.dispatch_resident_timed(&div, r, &DispatchConfig::default())
                    .map(drop)
                    .map_err(text)
            })
        },
        &op,
    );
}

fn step<'a>(
    program: &'a vyre_foundation::ir::Program,
    resources: &'a [Resource],
) -> ResidentDispatchStep<'a> {
    ResidentDispatchStep {
        program,
        resources,
        grid_override: None,
        workgroup_override: None,
    }
}

fn range(resource: &Resource, byte_offset: usize, byte_len: usize) -> ResidentReadRange<'_> {
    ResidentReadRange {
        resource,
        byte_offset,
        byte_len,
    }
}

/// `affine(mul, add)` applied `times` times on the host.
fn affine_host(bytes: &[u8], mul: u32, add: u32, times: u32) -> Vec<u8> {
    words(bytes)
        .into_iter()
        .flat_map(|mut x| {
            for _ in 0..times {
                x = x.wrapping_mul(mul).wrapping_add(add);
            }
            x.to_le_bytes()
        })
        .collect()
}

#[test]
fn resident_sequences_return_their_resources_on_every_error() {
    let n = 4096usize;
    let (twice, thrice) = (affine(2, 1, 128), affine(3, 7, 128));
    let start = Rng::new(11).bytes_u32(n);
    let program_once = affine_host(&affine_host(&start, 2, 1, 1), 3, 7, 1);
    let after_twice = reference(&twice, std::slice::from_ref(&start)).unwrap();
    assert_eq!(
        reference(&thrice, &after_twice).unwrap(),
        std::slice::from_ref(&program_once)
    );
    // On the same buffers: direct launches on the first sighting, a captured graph on the
    // second call, a replay on the third.
    let sequence = |b: &CudaBackend| {
        with_resident(b, &[&start], |r| {
            let steps = [step(&twice, r), step(&thrice, r)];
            for _ in 0..3 {
                b.upload_resident(&r[0], &start).map_err(text)?;
                let mut out = Vec::new();
                b.dispatch_resident_sequence_read_ranges_into(
                    &steps,
                    &[range(&r[0], 0, n * 4)],
                    &mut [&mut out],
                )
                .map_err(text)?;
                assert!(out == program_once, "sequence differs from the reference");
            }
            Ok(())
        })
    };
    sweep("sequence", &sequence, false);
    // 100 repeats: a prefix graph with 64 unrolled repeats, then a graph of 36.
    let mut want = affine_host(&start, 2, 1, 1);
    for _ in 0..100 {
        want = affine_host(&want, 3, 7, 1);
    }
    // Captured on the first call, replayed on the second.
    let repeated = |b: &CudaBackend| {
        with_resident(b, &[&start], |r| {
            for _ in 0..2 {
                b.upload_resident(&r[0], &start).map_err(text)?;
                let mut out = Vec::new();
                b.dispatch_resident_repeated_sequence_read_ranges_into(
                    &[step(&twice, r)],
                    &[step(&thrice, r)],
                    100,
                    &[range(&r[0], 0, n * 4)],
                    &mut [&mut out],
                )
                .map_err(text)?;
                assert!(out == want, "repeated sequence differs from the host");
            }
            Ok(())
        })
    };
    sweep("repeated sequence", &repeated, false);
    let div = signed_div(n as u32);
    let zero = division_by_zero(n as u32);
    faults(
        "repeated sequence",
        &|b| {
            let out = vec![0u8; n * 4];
            with_resident(b, &[&zero[0], &zero[1], &out], |r| {
                let step = [step(&div, r)];
                b.dispatch_resident_repeated_sequence_read_ranges_into(
                    &step,
                    &step,
                    3,
                    &[],
                    &mut [],
                )
                .map(drop)
                .map_err(text)
            })
        },
        &repeated,
    );
}
