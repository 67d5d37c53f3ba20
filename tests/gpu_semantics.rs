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
                assert!(error.to_string().contains("Fix:"), "{}: {error}", case.name);
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
    let reciprocal_of = |zero: f32| {
        Program::wrapped(
            vec![BufferDecl::output("out", 0, DataType::F32).with_count(1)],
            [1, 1, 1],
            vec![Node::store(
                "out",
                Expr::u32(0),
                Expr::BinOp {
                    op: BinOp::Div,
                    left: Box::new(Expr::f32(1.0)),
                    right: Box::new(Expr::f32(zero)),
                },
            )],
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
