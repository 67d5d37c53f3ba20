//! vyre-cuda's target compiler, without a device: the registration offers it, it is
//! deterministic, compiles multi-group artifacts and every corpus fixture the dispatch
//! route compiles, rejects what it cannot bind, and its PTX assembles with ptxas.

mod common;

use common::corpus::fixtures;
use common::ptxas::{assemble_all_targets, require_ptxas};
use std::collections::BTreeMap;
use vyre_foundation::ir::{
    BufferAccess, BufferDecl, DataType, Expr, GraphInput, GraphOutput, Node, Program, ProgramGraph,
    ShapeDim, ValueContract, ValueLifetime,
};
use vyre_megakernel::{Artifact, CompileRequest, Digest, ExternalFacts, SearchBudget};

fn registration() -> &'static vyre_driver::BackendRegistration {
    vyre_driver::backend::backend_registration(vyre_cuda::BACKEND_ID)
        .expect("vyre-cuda registers itself")
}

fn contract(count: u64, lifetime: ValueLifetime) -> ValueContract {
    let access = match lifetime {
        ValueLifetime::Invocation => BufferAccess::ReadOnly,
        _ => BufferAccess::ReadWrite,
    };
    ValueContract {
        dtype: DataType::U32,
        shape: vec![ShapeDim::Known(count)],
        access,
        lifetime,
    }
}

/// The contract of a produced value (an output buffer is read-write).
fn produced(count: u64, lifetime: ValueLifetime) -> ValueContract {
    ValueContract {
        access: BufferAccess::ReadWrite,
        ..contract(count, lifetime)
    }
}

/// `dst[i] = src[n-1-i] * 3 + k`: reads another invocation's element of its input.
fn reverse_scale(src: &str, dst: &str, n: u32, k: u32, workgroup: u32) -> Program {
    let i = Expr::InvocationId { axis: 0 };
    let body = vec![Node::if_then(
        Expr::lt(i.clone(), Expr::u32(n)),
        vec![Node::store(
            dst,
            i.clone(),
            Expr::add(
                Expr::mul(
                    Expr::load(src, Expr::sub(Expr::u32(n - 1), i)),
                    Expr::u32(3),
                ),
                Expr::u32(k),
            ),
        )],
    )];
    Program::wrapped(
        vec![
            BufferDecl::storage(src, 0, BufferAccess::ReadOnly, DataType::U32).with_count(n),
            BufferDecl::output(dst, 1, DataType::U32).with_count(n),
        ],
        [workgroup, 1, 1],
        body,
    )
}

/// A chain of `len` such nodes over `n` elements, value `v0` in and `v<len>` out;
/// workgroup sizes alternate so that vyre's fusion keeps several groups.
pub fn chain(len: u32, n: u32) -> ProgramGraph {
    let mut graph = ProgramGraph::new();
    let mut value = graph
        .add_external_value("v0", contract(u64::from(n), ValueLifetime::Invocation))
        .unwrap();
    for k in 1..=len {
        let (src, dst) = (format!("v{}", k - 1), format!("v{k}"));
        let lifetime = if k == len {
            ValueLifetime::Output
        } else {
            ValueLifetime::Invocation
        };
        let workgroup = if k % 2 == 0 { 64 } else { 128 };
        let (_, produced) = graph
            .add_node(
                format!("node{k}"),
                reverse_scale(&src, &dst, n, k, workgroup),
                vec![GraphInput {
                    buffer: src,
                    value,
                    contract: contract(u64::from(n), ValueLifetime::Invocation),
                }],
                vec![GraphOutput {
                    buffer: dst.clone(),
                    name: dst,
                    contract: produced(u64::from(n), lifetime),
                    retained_successor_of: None,
                }],
            )
            .unwrap();
        value = produced[0];
    }
    graph
}

pub fn compile(graph: ProgramGraph) -> Artifact {
    let request = CompileRequest::new(
        graph,
        ExternalFacts::new(Digest([0; 32]), BTreeMap::new()),
        SearchBudget::new(64, 1 << 20, 0, 0, 10_000_000_000),
        1 << 30,
    )
    .validate()
    .expect("a valid request");
    vyre_megakernel::compile(&request).expect("vyre-megakernel compiles the graph")
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
    let artifact = compile(chain(16, 4096));
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
        let request = CompileRequest::new(
            graph,
            ExternalFacts::new(Digest([0; 32]), BTreeMap::new()),
            SearchBudget::new(64, 1 << 20, 0, 0, 10_000_000_000),
            1 << 30,
        );
        let Ok(request) = request.validate() else {
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
        .add_external_value("input", contract(64, ValueLifetime::Invocation))
        .unwrap();
    graph
        .add_node(
            "renamed",
            reverse_scale("src", "dst", 64, 1, 64),
            vec![GraphInput {
                buffer: "src".into(),
                value: input,
                contract: contract(64, ValueLifetime::Invocation),
            }],
            vec![GraphOutput {
                buffer: "dst".into(),
                name: "result".into(),
                contract: produced(64, ValueLifetime::Output),
                retained_successor_of: None,
            }],
        )
        .unwrap();
    let error = registration()
        .target_compiler()
        .unwrap()
        .compile(&compile(graph))
        .expect_err("buffers bind by name");
    let text = error.to_string();
    assert!(
        text.contains("name each graph value after the buffer"),
        "{text}"
    );
}
