//! vyre-cuda's target compiler, without a device: the registration offers it, it is
//! deterministic, compiles multi-group artifacts and every corpus fixture the dispatch
//! route compiles, rejects what it cannot bind, and its PTX assembles with ptxas.

mod common;

use common::artifact::{
    compile, registration, request, request_with_symbols, reverse_chain, reverse_scale,
};
use common::corpus::fixtures;
use common::ptxas::{assemble_all_targets, require_ptxas};
use vyre_foundation::ir::{
    BufferAccess, DataType, GraphInput, GraphOutput, ProgramGraph, ShapeDim, ValueContract,
    ValueLifetime,
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
    assert_eq!(compiler.format().version(), 1);
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
                if let Some(ptxas) = &ptxas {
                    let ptx = vyre_cuda::payload_ptx(&payload).unwrap();
                    if let Err(error) = assemble_all_targets(ptxas, &ptx) {
                        failures.push(format!("{}: ptxas: {error}", fixture.id));
                    }
                }
            }
            (Err(_), false) => both_reject += 1,
            (Err(error), true) => failures.push(format!("{}: {error}", fixture.id)),
        }
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
