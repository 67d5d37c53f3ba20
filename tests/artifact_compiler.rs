//! vyre-cuda's target compiler, without a device: the registration offers it, it is
//! deterministic, compiles multi-group artifacts and every corpus fixture the dispatch
//! route compiles, rejects what it cannot bind, and its PTX assembles with ptxas.

mod common;

use common::artifact::{
    compile, registration, request, request_with_symbols, reverse_chain, reverse_scale,
};
use common::corpus::fixtures;
use common::ptxas::{assemble_all_targets, require_ptxas, GATE_ARCHS};
use common::ptxas_batch::{assemble_for_archs, Kernel};
use vyre_cuda::codegen::{emit_ptx, emit_timed, reference_program, EmittedKernel, PtxTarget};
use vyre_foundation::ir::{
    BufferAccess, DataType, GraphInput, GraphOutput, Program, ProgramGraph, ShapeDim,
    ValueContract, ValueLifetime,
};

fn contract(access: BufferAccess, lifetime: ValueLifetime) -> ValueContract {
    ValueContract {
        dtype: DataType::U32,
        shape: vec![ShapeDim::Known(64)],
        access,
        lifetime,
    }
}

#[test]
fn the_registration_offers_a_compiler_of_its_own_format() {
    let registration = registration();
    assert_eq!(registration.payload_format, Some(vyre_cuda::PAYLOAD_FORMAT));
    let compiler = registration
        .target_compiler()
        .expect("a device-free compiler");
    assert_eq!(compiler.format().identity(), "vyre-cuda-ptx");
    assert_eq!(compiler.format().version(), 3);
    assert_eq!(compiler.profile().subgroup_size(), 32);
}

#[test]
fn a_multi_group_chain_compiles_deterministically_and_assembles() {
    let compiler = registration().target_compiler().unwrap();
    let artifact = compile(&request(reverse_chain(16, 4096, 1).0));
    let first = compiler.compile(&artifact).expect("the chain compiles");
    let second = compiler
        .compile(&artifact)
        .expect("the chain compiles again");
    assert_eq!(
        first.digest(),
        second.digest(),
        "the same artifact gives the same payload"
    );
    assert_eq!(first.bytes(), second.bytes());
    assert!(
        artifact.fusion().len() > 1,
        "alternating workgroups keep several groups"
    );
    assert_eq!(
        first.entries().len(),
        artifact.fusion().len(),
        "one entry per fusion group"
    );
    let ptx = vyre_cuda::payload_ptx(&first).expect("our own payload");
    for node in 1..=16u32 {
        assert!(
            ptx.contains(&format!(".visible .entry vyre_node{}(", node - 1)),
            "node {node}'s entry"
        );
    }
    assert_eq!(ptx.matches(".version").count(), 1, "one module, one header");
    if let Some(ptxas) = require_ptxas() {
        assemble_all_targets(&ptxas, &ptx).unwrap();
    }
}

#[test]
fn every_corpus_fixture_the_dispatch_route_emits_compiles_as_an_artifact() {
    let compiler = registration().target_compiler().unwrap();
    let ptxas = require_ptxas();
    let (mut compiled, mut both_reject) = (0, 0);
    let mut failures = Vec::new();
    let mut kernels = Vec::new();
    for fixture in fixtures() {
        let program = (fixture.build)();
        let dispatch =
            vyre_cuda::codegen::emit_ptx(&program, None, vyre_cuda::codegen::PtxTarget::sm80());
        let Ok(graph) = ProgramGraph::from_program(fixture.id, program) else {
            continue;
        };
        let Ok(request) = request_with_symbols(graph, Default::default()) else {
            continue;
        };
        let Ok(artifact) = vyre_megakernel::compile(&request) else {
            continue;
        };
        match (compiler.compile(&artifact), dispatch.is_ok()) {
            (Ok(payload), _) => {
                compiled += 1;
                kernels.push(Kernel {
                    id: fixture.id.to_string(),
                    ptx: vyre_cuda::payload_ptx(&payload).unwrap(),
                });
            }
            (Err(_), false) => both_reject += 1,
            (Err(error), true) => failures.push(format!("{}: {error}", fixture.id)),
        }
    }
    if let Some(ptxas) = &ptxas {
        let refused = assemble_for_archs(ptxas, &kernels, &GATE_ARCHS);
        failures.extend(refused.iter().map(|r| format!("ptxas: {r}")));
    }
    println!("{compiled} fixtures compiled as artifacts, {both_reject} rejected by both routes");
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(compiled >= 200, "the corpus compiles ({compiled})");
}

#[test]
fn a_buffer_with_no_value_of_its_name_is_rejected_with_a_fix() {
    let mut graph = ProgramGraph::new();
    let input = graph
        .add_external_value(
            "input",
            contract(BufferAccess::ReadOnly, ValueLifetime::Invocation),
        )
        .unwrap();
    graph
        .add_node(
            "renamed",
            reverse_scale("src", "dst", 64, 1, 64, 1),
            vec![GraphInput {
                buffer: "src".into(),
                value: input,
                contract: contract(BufferAccess::ReadOnly, ValueLifetime::Invocation),
            }],
            vec![GraphOutput {
                buffer: "dst".into(),
                name: "result".into(),
                contract: contract(BufferAccess::ReadWrite, ValueLifetime::Output),
                retained_successor_of: None,
            }],
        )
        .unwrap();
    let error = registration()
        .target_compiler()
        .unwrap()
        .compile(&compile(&request(graph)))
        .expect_err("buffers bind by name");
    let text = error.to_string();
    assert!(
        text.contains("name each graph value after the buffer"),
        "{text}"
    );
}

/// The modules the runtime may load for a kernel (`EmittedKernel::modules`).
fn modules(kernel: &EmittedKernel) -> Vec<&str> {
    kernel.modules().collect()
}

/// Programs of every entry shape the emitter writes: plain and elementwise (a vector
/// entry), workgroup memory and barriers, per-workgroup atomic partials, replicated
/// segments, faults, subgroups, and grid-wide barriers (split segments and the cooperative
/// entry).
fn entry_shapes() -> Vec<(String, Program)> {
    use common::{grid_programs, kernels, programs};
    let mut all: Vec<(String, Program)> = vec![
        ("vadd".into(), kernels::vadd(4096, 7)),
        ("accumulate".into(), kernels::accumulate()),
        ("signed_div".into(), kernels::signed_div(1024)),
        ("saxpy_user".into(), kernels::saxpy_user(0)),
    ];
    for case in grid_programs::all() {
        all.push((format!("grid {}", case.name), case.program));
    }
    let cases = (programs::workgroup_cases().into_iter())
        .chain(programs::replicated_cases())
        .chain(programs::fault_cases())
        .chain(programs::subgroup_cases().into_iter().step_by(4))
        .chain(programs::control_and_memory().into_iter().step_by(2));
    all.extend(cases.map(|case| (case.name, case.program)));
    all
}

/// The artifact route's kernels time themselves (`emit_timed`): every entry of every
/// shape stamps the clock at its blocks' start and end, takes the fault area that holds
/// the stamps, keeps the dispatch kernel's launch ABI otherwise, and assembles; the
/// dispatch route's kernels of the same programs carry no stamps.
#[test]
fn artifact_kernels_stamp_the_clock_in_every_entry_and_assemble() {
    let ptxas = require_ptxas();
    let target = PtxTarget::sm80();
    let (mut timed_entries, mut cooperative, mut vector, mut optional) = (0, 0, 0, 0);
    for (name, program) in entry_shapes() {
        // As the target compiler emits a node: the reference's program, timed.
        let dispatch = emit_ptx(&program, None, target);
        let prepared = reference_program(&program).map(|p| p.into_owned());
        let timed = (prepared.as_ref().map_err(Clone::clone))
            .and_then(|prepared| emit_timed(prepared, None, target, "vyre_node3"));
        let (dispatch, timed) = match (dispatch, timed) {
            (Ok(dispatch), Ok(timed)) => (dispatch, timed),
            (Err(a), Err(b)) => {
                assert_eq!(a.to_string(), b.to_string(), "{name}: the same refusal");
                continue;
            }
            (dispatch, timed) => panic!(
                "{name}: dispatch {:?}, timed {:?}",
                dispatch.err(),
                timed.err()
            ),
        };
        assert!(!dispatch.timed && timed.timed, "{name}");
        let parts = timed.entries();
        assert!(parts.flags.timed, "{name}: the payload records it");
        // What the area holds besides the stamps is the dispatch kernel's: a kernel that
        // took none may be launched without one (no stamps then).
        assert_eq!(timed.reports_faults, dispatch.abi.fault_word, "{name}");
        assert_eq!(parts.flags.fault_word, dispatch.abi.fault_word, "{name}");
        assert_eq!(
            parts.fault_area_optional(),
            !dispatch.abi.fault_word,
            "{name}"
        );
        let mut expected = dispatch.abi.clone();
        expected.entry = "vyre_node3".into();
        expected.fault_word = true;
        // An artifact's kernel checks every load: no literal extents, no checked variant.
        for binding in &mut expected.bindings {
            binding.literal_extent = 0;
        }
        assert!(timed.checked_ptx.is_none(), "{name}");
        assert_eq!(timed.abi, expected, "{name}: only the fault area is added");
        let prepared = prepared.unwrap();
        assert_eq!(
            parts.abi(&prepared, prepared.workgroup_size()).unwrap(),
            expected,
            "{name}: the payload's parts rebuild the same ABI"
        );
        for module in modules(&dispatch) {
            assert!(
                !module.contains("%globaltimer"),
                "{name}: a dispatch kernel"
            );
        }
        for module in modules(&timed) {
            let entries = module.matches(".entry ").count();
            assert!(entries > 0, "{name}");
            assert_eq!(
                module.matches("%globaltimer").count(),
                2 * entries,
                "{name}: a start and an end stamp per entry"
            );
            timed_entries += entries;
            if let Some(ptxas) = &ptxas {
                assemble_all_targets(ptxas, module).unwrap_or_else(|e| panic!("{name}: {e}"));
            }
        }
        cooperative += usize::from(timed.abi.cooperative);
        vector += usize::from(timed.vector_ptx.is_some());
        optional += usize::from(parts.fault_area_optional());
    }
    println!(
        "{timed_entries} timed entries: {cooperative} cooperative, {vector} vector, {optional} with an optional area"
    );
    assert!(
        cooperative > 0 && vector > 0 && optional > 0,
        "every entry shape is covered"
    );
}
