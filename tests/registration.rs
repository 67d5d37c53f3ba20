//! Linking vyre-cuda registers backend id "vyre-cuda" with vyre's registry.

mod common;

use vyre_cuda::BACKEND_ID;
use vyre_driver::backend::registered_backends;

#[test]
fn vyre_cuda_is_registered_by_linking_the_crate() {
    let registrations = registered_backends().expect("a valid registry");
    let ids: Vec<&str> = registrations.iter().map(|r| r.id).collect();
    assert!(ids.contains(&BACKEND_ID), "registered backends: {ids:?}");
    let ours = vyre_driver::backend::backend_registration(BACKEND_ID).unwrap();
    assert_eq!(ours.target_id.as_str(), vyre_cuda::TARGET_ID);
    assert!(!ours.reference_oracle);
    assert_eq!(ours.payload_format, Some(vyre_cuda::PAYLOAD_FORMAT));
    // Ahead of vyre-driver-cuda (rank 5) when both are linked.
    assert_eq!(vyre_driver::backend::backend_precedence(BACKEND_ID), Ok(4));
    assert_eq!(
        vyre_driver::backend::backend_dispatches(BACKEND_ID),
        Ok(true)
    );
    // The artifact route's compiler is device-free; vyre checks its format is ours.
    let compiler = ours
        .target_compiler()
        .expect("a target compiler on any machine");
    assert_eq!(compiler.format().identity(), vyre_cuda::PAYLOAD_FORMAT);
}

#[test]
fn acquire_opens_the_device_or_explains_why_not() {
    match vyre_driver::backend::acquire(BACKEND_ID) {
        Ok(backend) => {
            assert_eq!(backend.id(), BACKEND_ID);
            assert_eq!(backend.version(), env!("CARGO_PKG_VERSION"));
            assert!(backend.max_workgroup_size()[0] >= 1024);
            // The profile reports the device, not placeholders.
            let profile = backend.device_profile();
            assert_eq!(profile.backend, BACKEND_ID);
            assert!(profile.compute_units > 0 && profile.l2_cache_bytes > 0);
            assert!(profile.mem_bw_gbps > 0 && profile.max_shared_memory_bytes >= 48 << 10);
            assert_eq!(profile.subgroup_size, 32);
            assert_eq!(
                profile.timing_quality,
                vyre_driver::DeviceTimingQuality::DeviceTimestamps
            );
            assert_eq!(
                profile.max_storage_buffer_binding_size,
                backend.max_storage_buffer_bytes()
            );
            // What dispatch refuses, the capability queries deny.
            assert!(!backend.supports_indirect_dispatch());
            assert!(!backend.supports_tensor_cores());
            assert!(!backend.supports_distributed_collectives());
            assert!(!profile.supports_indirect_dispatch && !profile.supports_tensor_cores);
            println!("device profile: {profile:?}");
        }
        Err(error) => {
            let text = error.to_string();
            assert!(text.matches("Fix:").count() == 1, "{text}");
            if common::gpu::backend().is_some() {
                panic!("a device is present but acquire failed: {text}");
            }
        }
    }
}

#[test]
fn registered_dispatch_matches_the_reference() {
    let Some(_) = common::gpu::backend() else {
        return;
    };
    let backend = vyre_driver::backend::acquire(BACKEND_ID).expect("acquire vyre-cuda");
    let case = &common::programs::u32_binops()[2];
    let want = common::gpu::reference(&case.program, &case.inputs).unwrap();
    assert_eq!(
        backend
            .dispatch(&case.program, &case.inputs, &case.config)
            .unwrap(),
        want
    );
}

/// Every kind of failure a user can meet through the registry (`acquire("vyre-cuda")`) says what
/// went wrong and carries exactly one `Fix:` (vyre-driver's own variants append a hint of
/// their own, so a second one slips in easily).
#[test]
fn every_failure_through_the_registry_carries_exactly_one_fix() {
    use vyre_driver::persistent::PersistentThreadMode;
    use vyre_driver::speculate::SpeculationMode;
    use vyre_driver::DispatchConfig;
    use vyre_foundation::ir::{BufferDecl, DataType, Expr, Node, Program};
    let Some(_) = common::gpu::backend() else {
        println!("skipped: no CUDA device");
        return;
    };
    let backend = vyre_driver::backend::acquire(BACKEND_ID).expect("acquire vyre-cuda");
    let copy = common::kernels::vadd(64, 1);
    let trap = Program::wrapped(
        vec![BufferDecl::output("out", 0, DataType::U32).with_count(64)],
        [64, 1, 1],
        vec![
            Node::if_then(
                Expr::eq(Expr::gid_x(), Expr::u32(5)),
                vec![Node::trap(Expr::u32(7), "boom")],
            ),
            Node::store("out", Expr::gid_x(), Expr::u32(1)),
        ],
    );
    let unknown_call = Program::wrapped(
        vec![BufferDecl::output("out", 0, DataType::U32).with_count(1)],
        [1, 1, 1],
        vec![Node::store(
            "out",
            Expr::u32(0),
            Expr::call("some.unknown.op", vec![]),
        )],
    );
    // A negative test: a raw entry that is not Region-wrapped.
    #[allow(deprecated)]
    let unwrapped = Program::from_raw_parts(
        vec![BufferDecl::output("out", 0, DataType::U32).with_count(1)],
        [1, 1, 1],
        vec![Node::store("out", Expr::u32(0), Expr::u32(1))],
    );
    let words = |n: usize| vec![0u8; n * 4];
    let mut speculate = DispatchConfig::default();
    speculate.speculation = Some(SpeculationMode::Force);
    let mut persistent = DispatchConfig::default();
    persistent.persistent_thread = Some(PersistentThreadMode::Force);
    let mut zero_iterations = DispatchConfig::default();
    zero_iterations.fixpoint_iterations = Some(0);
    let default = DispatchConfig::default();
    type Outcome = Result<Vec<Vec<u8>>, vyre_driver::BackendError>;
    let cases: Vec<(&str, Outcome)> = vec![
        (
            "wrong input count",
            backend.dispatch(&copy, &[words(64)], &default),
        ),
        (
            "short input",
            backend.dispatch(&copy, &[words(64), words(3)], &default),
        ),
        ("run-time trap", backend.dispatch(&trap, &[], &default)),
        (
            "unknown call",
            backend.dispatch(&unknown_call, &[], &default),
        ),
        (
            "unwrapped program",
            backend.dispatch(&unwrapped, &[], &default),
        ),
        (
            "forced speculation",
            backend.dispatch(&copy, &[words(64), words(64)], &speculate),
        ),
        (
            "forced persistent",
            backend.dispatch(&copy, &[words(64), words(64)], &persistent),
        ),
        (
            "zero iterations",
            backend.dispatch(&copy, &[words(64), words(64)], &zero_iterations),
        ),
    ];
    let mut texts: Vec<(&str, String)> = cases
        .into_iter()
        .map(|(name, result)| (name, result.expect_err(name).to_string()))
        .collect();
    let huge = backend
        .allocate_resident(1 << 50)
        .map(|_| ())
        .expect_err("2^50 bytes");
    texts.push(("out of memory", huge.to_string()));
    backend.shutdown().expect("shutdown");
    let after = backend.dispatch(&copy, &[words(64), words(64)], &default);
    texts.push(("after shutdown", after.expect_err("shut down").to_string()));
    for (name, text) in &texts {
        println!("{name}: {text}");
        assert_eq!(text.matches("Fix:").count(), 1, "{name}: {text}");
    }
}
