//! GPU: every hand-written semantic case (each BinOp/UnOp/Cast over edge values, control
//! flow, early return, OOB access, workgroup memory, barriers, 2D workgroups, atomics,
//! run-time errors) is byte-identical to vyre-reference, or fails where it fails.

mod common;

#[test]
fn semantic_cases_match_the_reference_byte_for_byte() {
    let Some(backend) = common::gpu::backend() else {
        return;
    };
    let mut failures = Vec::new();
    let cases = common::programs::all_cases();
    for case in &cases {
        let want = common::gpu::reference(&case.program, &case.inputs);
        let got = backend.dispatch(&case.program, &case.inputs, &case.config);
        match (&want, &got) {
            (Ok(want), Ok(got)) if want == got => {}
            (Ok(want), Ok(got)) => {
                let first = first_difference(want, got);
                failures.push(format!("{}: bytes differ ({first})", case.name));
            }
            (Err(_), Err(error)) if case.expect_error => {
                assert!(
                    error.to_string().matches("Fix:").count() == 1,
                    "{}: {error}",
                    case.name
                );
            }
            (want, got) => failures.push(format!(
                "{}: reference {:?} vs gpu {:?}",
                case.name,
                want.as_ref().map(|_| "ok"),
                got.as_ref().map(|_| "ok")
            )),
        }
    }
    println!(
        "{} semantic cases run, {} failed",
        cases.len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn first_difference(want: &[Vec<u8>], got: &[Vec<u8>]) -> String {
    if want.len() != got.len() {
        return format!("{} outputs vs {}", want.len(), got.len());
    }
    for (index, (w, g)) in want.iter().zip(got).enumerate() {
        if w.len() != g.len() {
            return format!("output {index}: {} bytes vs {}", w.len(), g.len());
        }
        if let Some(at) = w.iter().zip(g.iter()).position(|(a, b)| a != b) {
            let word = at / 4 * 4;
            let end = (word + 4).min(w.len());
            return format!(
                "output {index} word {}: want {:02x?} got {:02x?}",
                word / 4,
                &w[word..end],
                &g[word..end]
            );
        }
    }
    "equal".into()
}

#[test]
fn a_failing_dispatch_does_not_poison_the_next() {
    let Some(backend) = common::gpu::backend() else {
        return;
    };
    let faults = common::programs::fault_cases();
    let good = &common::programs::u32_binops()[0];
    for fault in &faults {
        assert!(backend
            .dispatch(&fault.program, &fault.inputs, &fault.config)
            .is_err());
        let want = common::gpu::reference(&good.program, &good.inputs).unwrap();
        let got = backend
            .dispatch(&good.program, &good.inputs, &good.config)
            .unwrap();
        assert_eq!(want, got, "dispatch after {} went wrong", fault.name);
    }
}

#[test]
fn warm_dispatch_generates_no_ptx_and_loads_no_module() {
    let Some(backend) = common::gpu::backend() else {
        return;
    };
    let case = &common::programs::u32_binops()[1];
    backend
        .dispatch(&case.program, &case.inputs, &case.config)
        .unwrap();
    let metric = |name: &str| {
        backend
            .metric_snapshot()
            .into_iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
            .unwrap()
    };
    let (ptx, loads, allocs) = (
        metric("vyre_cuda_ptx_generations_total"),
        metric("vyre_cuda_module_loads_total"),
        metric("vyre_cuda_device_allocations_total"),
    );
    for _ in 0..10 {
        backend
            .dispatch(&case.program, &case.inputs, &case.config)
            .unwrap();
    }
    assert_eq!(metric("vyre_cuda_ptx_generations_total"), ptx);
    assert_eq!(metric("vyre_cuda_module_loads_total"), loads);
    assert_eq!(metric("vyre_cuda_device_allocations_total"), allocs);
}

#[test]
fn programs_differing_only_in_a_zero_sign_do_not_share_a_kernel() {
    use vyre_foundation::ir::{BinOp, BufferDecl, DataType, Expr, Node, Program};
    let Some(backend) = common::gpu::backend() else {
        return;
    };
    // (A literal zero divisor would be rejected by vyre's validator, so store the zero
    // itself, and its sum with 0.0, whose sign depends on both signs.)
    let reciprocal_of = |zero: f32| {
        Program::wrapped(
            vec![BufferDecl::output("out", 0, DataType::F32).with_count(2)],
            [1, 1, 1],
            vec![
                Node::store("out", Expr::u32(0), Expr::f32(zero)),
                Node::store(
                    "out",
                    Expr::u32(1),
                    Expr::BinOp {
                        op: BinOp::Add,
                        left: Box::new(Expr::f32(zero)),
                        right: Box::new(Expr::f32(-0.0)),
                    },
                ),
            ],
        )
    };
    for zero in [0.0f32, -0.0, 0.0] {
        let program = reciprocal_of(zero);
        let want = common::gpu::reference(&program, &[]).unwrap();
        let got = backend
            .dispatch(&program, &[], &vyre_driver::DispatchConfig::default())
            .unwrap();
        assert_eq!(want, got, "1 / {zero:?}");
    }
}

#[test]
fn the_packed_small_path_and_the_general_path_agree_on_every_case() {
    let Some(packed) = common::gpu::backend() else {
        return;
    };
    let mut options = vyre_cuda::CudaOptions::from_env().unwrap();
    options.small_dispatch_bytes = 0;
    let general = common::gpu::fresh(options.clone()).unwrap();
    options.small_dispatch_bytes = 64 << 10;
    options.blocking_wait = true;
    let sleeping = common::gpu::fresh(options).unwrap();
    let packed_before = packed.metric("vyre_cuda_packed_dispatches_total");
    let cases = common::programs::all_cases();
    let mut mismatches = Vec::new();
    // Each case twice: a reused output Vec must not leak the previous case's bytes.
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    for case in cases.iter().chain(&cases) {
        let inputs: Vec<&[u8]> = case.inputs.iter().map(Vec::as_slice).collect();
        let got_packed =
            packed.dispatch_borrowed_into(&case.program, &inputs, &case.config, &mut a);
        let got_general =
            general.dispatch_borrowed_into(&case.program, &inputs, &case.config, &mut b);
        let got_sleeping =
            sleeping.dispatch_borrowed_into(&case.program, &inputs, &case.config, &mut c);
        match (&got_packed, &got_general, &got_sleeping) {
            (Ok(()), Ok(()), Ok(())) if a == b && b == c => {}
            (Err(x), Err(y), Err(z))
                if x.to_string() == y.to_string() && y.to_string() == z.to_string() => {}
            _ => mismatches.push(format!(
                "{}: packed {:?} general {:?} blocking-wait {:?} (outputs equal: {})",
                case.name,
                got_packed.as_ref().map_err(ToString::to_string),
                got_general.as_ref().map_err(ToString::to_string),
                got_sleeping.as_ref().map_err(ToString::to_string),
                a == b && b == c
            )),
        }
    }
    let packed_runs = packed.metric("vyre_cuda_packed_dispatches_total") - packed_before;
    println!(
        "{} cases x2 on three paths; {packed_runs} took the packed path; {} mismatches",
        cases.len(),
        mismatches.len()
    );
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    assert!(packed_runs > 0, "small cases take the packed path");
    assert_eq!(general.metric("vyre_cuda_packed_dispatches_total"), 0);
    assert!(sleeping.metric("vyre_cuda_packed_dispatches_total") > 0);
}

#[test]
fn a_warm_packed_dispatch_allocates_nothing_and_is_timed() {
    let Some(backend) = common::gpu::backend() else {
        return;
    };
    let case = &common::programs::u32_binops()[0];
    let inputs: Vec<&[u8]> = case.inputs.iter().map(Vec::as_slice).collect();
    let want = common::gpu::reference(&case.program, &case.inputs).unwrap();
    let mut out = Vec::new();
    backend
        .dispatch_borrowed_into(&case.program, &inputs, &case.config, &mut out)
        .unwrap();
    let counters = [
        "vyre_cuda_device_allocations_total",
        "vyre_cuda_pinned_allocations_total",
        "vyre_cuda_stream_creations_total",
        "vyre_cuda_packed_dispatches_total",
        "vyre_cuda_bytes_to_device_total",
        "vyre_cuda_bytes_to_host_total",
    ];
    let before: Vec<u64> = counters.iter().map(|c| backend.metric(c)).collect();
    backend
        .dispatch_borrowed_into(&case.program, &inputs, &case.config, &mut out)
        .unwrap();
    assert_eq!(out, want);
    let after: Vec<u64> = counters.iter().map(|c| backend.metric(c)).collect();
    assert_eq!(
        &after[..3],
        &before[..3],
        "no allocation, pinning or stream"
    );
    assert_eq!(after[3], before[3] + 1);
    let input_bytes: u64 = case.inputs.iter().map(|i| i.len() as u64).sum();
    let output_bytes: u64 = want.iter().map(|o| o.len() as u64).sum();
    // One packed upload (inputs, zeroed outputs, padding) and one packed download.
    assert!(after[4] - before[4] >= input_bytes);
    assert!(after[5] - before[5] >= output_bytes);
    let timed = backend
        .dispatch_borrowed_timed(&case.program, &inputs, &case.config)
        .unwrap();
    assert_eq!(timed.outputs, want);
    assert!(timed.device_ns.is_some_and(|ns| ns > 0), "{timed:?}");
    assert!(timed.wall_ns >= timed.enqueue_ns.unwrap());
}
