//! GPU: vyre 0.7's production route on vyre-cuda — `ProgramGraph` ->
//! `vyre_megakernel::compile` -> the registered target compiler -> the registered
//! materializer -> `submit` -> `Completion` — byte-identical to vyre-reference running
//! the graph's original nodes in order (`common::artifact::reference_graph`).
//!
//! Covered: the vyre-primitives/vyre-libs fixture corpus (against what the dispatch route
//! achieves on the same fixtures), multi-node graphs with several fusion groups, a
//! consumer reading other invocations' elements of a fused producer, retained state,
//! resident bindings, asynchronous submission, and every rejection of a binding or a
//! payload (each with a `Fix:` hint, the instance still usable afterwards).
//!
//! Without a device every GPU test prints `skipped: no CUDA device` before touching the
//! route; the oracle's own check against vyre-reference needs no device and always runs.

mod common;

use common::artifact::{
    assert_matches, byte_len, compile, compiler, completion_mismatches, fix_text, host_bindings,
    instantiate, instantiate_on, materializer, reference_graph, registration, request,
    request_with_symbols, run, value_id, GraphBuilder,
};
use common::gpu::{backend, fresh, Rng};
use std::collections::BTreeMap;
use std::time::Duration;
use vyre_driver::{
    ArtifactInstance, ArtifactMaterializer, BindingSet, BoundResource, Completion, DispatchConfig,
    Resource,
};
use vyre_foundation::ir::{
    BinOp, BufferAccess, BufferDecl, DataType, Expr, GraphInput, GraphOutput, Node, Program,
    ProgramGraph, ShapeDim, ValueContract, ValueLifetime,
};
use vyre_megakernel::{Artifact, TargetPayload, TargetPayloadFormat, TargetProfile};
use vyre_runtime::{ArtifactSession, RetainedArtifactSession};

// ---------------------------------------------------------------------------------------
// Kernels: what users write, one small Program per graph node, buffers named after the
// graph values they carry.

fn bin(op: BinOp, left: Expr, right: Expr) -> Expr {
    Expr::BinOp {
        op,
        left: Box::new(left),
        right: Box::new(right),
    }
}

fn cast(target: DataType, value: Expr) -> Expr {
    Expr::Cast {
        target,
        value: Box::new(value),
    }
}

fn gid() -> Expr {
    Expr::gid_x()
}

/// `body` for every invocation below `n`.
fn guarded(n: u32, body: Vec<Node>) -> Vec<Node> {
    vec![Node::if_then(bin(BinOp::Lt, gid(), Expr::u32(n)), body)]
}

/// `output[i] = f(input[i], i)` for `i < n`.
fn map(
    (input, input_type): (&str, DataType),
    (output, output_type): (&str, DataType),
    n: u32,
    workgroup: u32,
    f: impl FnOnce(Expr, Expr) -> Expr,
) -> Program {
    Program::wrapped(
        vec![
            BufferDecl::read(input, 0, input_type).with_count(n),
            BufferDecl::output(output, 1, output_type).with_count(n),
        ],
        [workgroup, 1, 1],
        guarded(
            n,
            vec![Node::store(
                output,
                gid(),
                f(Expr::load(input, gid()), gid()),
            )],
        ),
    )
}

/// `output[i] = f(a[i], b[i])` for `i < n`, all of type `ty`.
fn zip(
    [a, b, output]: [&str; 3],
    ty: DataType,
    n: u32,
    workgroup: u32,
    f: impl FnOnce(Expr, Expr) -> Expr,
) -> Program {
    Program::wrapped(
        vec![
            BufferDecl::read(a, 0, ty.clone()).with_count(n),
            BufferDecl::read(b, 1, ty.clone()).with_count(n),
            BufferDecl::output(output, 2, ty).with_count(n),
        ],
        [workgroup, 1, 1],
        guarded(
            n,
            vec![Node::store(
                output,
                gid(),
                f(Expr::load(a, gid()), Expr::load(b, gid())),
            )],
        ),
    )
}

/// `output[i] = input[index(i)] ^ i`: reads an element another invocation produced.
fn gather(input: &str, output: &str, n: u32, workgroup: u32, index: Expr) -> Program {
    map(
        (input, DataType::U32),
        (output, DataType::U32),
        n,
        workgroup,
        |_, i| bin(BinOp::BitXor, Expr::load(input, index), i),
    )
}

fn u32_chain_step(step: usize) -> impl FnOnce(Expr, Expr) -> Expr {
    move |x, i| match step % 4 {
        0 => bin(BinOp::Add, bin(BinOp::Mul, x, Expr::u32(2_654_435_761)), i),
        1 => bin(BinOp::BitXor, x.clone(), bin(BinOp::Shr, x, Expr::u32(7))),
        2 => bin(
            BinOp::Add,
            bin(BinOp::Mul, x, Expr::u32(3)),
            Expr::u32(0x9E37 + step as u32),
        ),
        _ => bin(BinOp::BitXor, x.clone(), bin(BinOp::Shl, x, Expr::u32(5))),
    }
}

fn f32_chain_step(step: usize) -> impl FnOnce(Expr, Expr) -> Expr {
    move |x, i| match step % 5 {
        0 => bin(
            BinOp::Add,
            bin(BinOp::Mul, x, Expr::f32(1.5)),
            Expr::f32(0.25),
        ),
        1 => bin(BinOp::Sub, x, Expr::f32(3.0)),
        2 => bin(BinOp::Max, x, Expr::f32(-100.0)),
        3 => bin(
            BinOp::Add,
            x,
            cast(DataType::F32, bin(BinOp::BitAnd, i, Expr::u32(255))),
        ),
        _ => bin(
            BinOp::Mul,
            bin(BinOp::Min, x, Expr::f32(60_000.0)),
            Expr::f32(0.5),
        ),
    }
}

fn u32_input(n: u32, seed: u64) -> Vec<u8> {
    Rng::new(seed).bytes_u32(n as usize)
}

fn inputs<const N: usize>(values: [(&str, Vec<u8>); N]) -> BTreeMap<String, Vec<u8>> {
    values
        .into_iter()
        .map(|(name, bytes)| (name.to_string(), bytes))
        .collect()
}

// ---------------------------------------------------------------------------------------
// Graphs.

/// Four u32 nodes, workgroups 64, 64, 128, 128: two fusion groups.
fn chain4(n: u32) -> ProgramGraph {
    let mut g = GraphBuilder::new();
    g.input("x", DataType::U32, n, ValueLifetime::Invocation);
    let sizes = [64, 64, 128, 128];
    let names = ["x", "c1", "c2", "c3", "out"];
    for step in 0..4 {
        let (from, to) = (names[step], names[step + 1]);
        let lifetime = if step == 3 {
            ValueLifetime::Output
        } else {
            ValueLifetime::Invocation
        };
        g.node(
            &format!("step{step}"),
            map(
                (from, DataType::U32),
                (to, DataType::U32),
                n,
                sizes[step],
                u32_chain_step(step),
            ),
            &[from],
            &[(to, lifetime)],
        );
    }
    g.build()
}

/// Sixteen nodes: six u32 steps, a cast to f32 (also an output), seven f32 steps, a cast
/// back to u32 and a last u32 step; workgroup sizes change along the way.
fn chain16(n: u32) -> ProgramGraph {
    let sizes = [
        64, 64, 64, 256, 256, 32, 32, 128, 128, 64, 64, 64, 256, 256, 32, 32,
    ];
    let mut g = GraphBuilder::new();
    g.input("x", DataType::U32, n, ValueLifetime::Invocation);
    let mut previous = "x".to_string();
    for (step, &workgroup) in sizes.iter().enumerate() {
        let name = if step == 15 {
            "out".to_string()
        } else {
            format!("v{step}")
        };
        let lifetime = match step {
            6 | 15 => ValueLifetime::Output,
            _ => ValueLifetime::Invocation,
        };
        let program = match step {
            0..=5 => map(
                (&previous, DataType::U32),
                (&name, DataType::U32),
                n,
                workgroup,
                u32_chain_step(step),
            ),
            6 => map(
                (&previous, DataType::U32),
                (&name, DataType::F32),
                n,
                workgroup,
                |x, _| {
                    bin(
                        BinOp::Mul,
                        cast(DataType::F32, bin(BinOp::BitAnd, x, Expr::u32(0xFFFF))),
                        Expr::f32(0.5),
                    )
                },
            ),
            7..=13 => map(
                (&previous, DataType::F32),
                (&name, DataType::F32),
                n,
                workgroup,
                f32_chain_step(step),
            ),
            14 => map(
                (&previous, DataType::F32),
                (&name, DataType::U32),
                n,
                workgroup,
                |x, _| cast(DataType::U32, bin(BinOp::Max, x, Expr::f32(0.0))),
            ),
            _ => map(
                (&previous, DataType::U32),
                (&name, DataType::U32),
                n,
                workgroup,
                |x, i| bin(BinOp::BitXor, bin(BinOp::Mul, x, Expr::u32(0x01000193)), i),
            ),
        };
        g.node(
            &format!("step{step}"),
            program,
            &[&previous],
            &[(&name, lifetime)],
        );
        previous = name;
    }
    g.build()
}

/// `a` feeds two nodes whose results meet again, with a second graph input `y`.
fn fan_out_fan_in(n: u32) -> ProgramGraph {
    let mut g = GraphBuilder::new();
    g.input("x", DataType::U32, n, ValueLifetime::Invocation);
    g.input("y", DataType::U32, n, ValueLifetime::Invocation);
    let u32s = |name| (name, DataType::U32);
    g.node(
        "spread",
        map(u32s("x"), u32s("a"), n, 64, |x, _| {
            bin(BinOp::Add, bin(BinOp::Mul, x, Expr::u32(3)), Expr::u32(1))
        }),
        &["x"],
        &[("a", ValueLifetime::Invocation)],
    );
    g.node(
        "left",
        map(u32s("a"), u32s("b"), n, 64, |a, _| {
            bin(BinOp::BitXor, a, Expr::u32(0x5555_5555))
        }),
        &["a"],
        &[("b", ValueLifetime::Invocation)],
    );
    g.node(
        "right",
        map(u32s("a"), u32s("c"), n, 128, |a, i| bin(BinOp::Add, a, i)),
        &["a"],
        &[("c", ValueLifetime::Invocation)],
    );
    g.node(
        "meet",
        zip(["b", "c", "bc"], DataType::U32, n, 64, |b, c| {
            bin(BinOp::Mul, b, c)
        }),
        &["b", "c"],
        &[("bc", ValueLifetime::Invocation)],
    );
    g.node(
        "bias",
        zip(["bc", "y", "out"], DataType::U32, n, 64, |bc, y| {
            bin(BinOp::Add, bc, y)
        }),
        &["bc", "y"],
        &[("out", ValueLifetime::Output)],
    );
    g.build()
}

/// Same workgroup size everywhere, so vyre fuses the three nodes into one group; each
/// consumer reads elements other invocations (other workgroups) produced.
fn cross_invocation(n: u32) -> ProgramGraph {
    let mut g = GraphBuilder::new();
    g.input("x", DataType::U32, n, ValueLifetime::Invocation);
    g.node(
        "produce",
        map(
            ("x", DataType::U32),
            ("t", DataType::U32),
            n,
            256,
            |x, i| bin(BinOp::Add, bin(BinOp::Mul, x, Expr::u32(7)), i),
        ),
        &["x"],
        &[("t", ValueLifetime::Invocation)],
    );
    let reversed = bin(BinOp::Sub, Expr::u32(n - 1), gid());
    g.node(
        "reverse",
        gather("t", "r", n, 256, reversed),
        &["t"],
        &[("r", ValueLifetime::Invocation)],
    );
    let rotated = bin(
        BinOp::Mod,
        bin(BinOp::Add, gid(), Expr::u32(257)),
        Expr::u32(n),
    );
    g.node(
        "rotate",
        gather("r", "out", n, 256, rotated),
        &["r"],
        &[("out", ValueLifetime::Output)],
    );
    g.build()
}

/// `state[i] = state[i] * 5 + x[i]` in place, and `out[i] = state[i] ^ i`.
fn accumulator(n: u32) -> ProgramGraph {
    let program = Program::wrapped(
        vec![
            BufferDecl::read("x", 0, DataType::U32).with_count(n),
            BufferDecl::storage("state", 1, BufferAccess::ReadWrite, DataType::U32).with_count(n),
            BufferDecl::output("out", 2, DataType::U32).with_count(n),
        ],
        [128, 1, 1],
        guarded(
            n,
            vec![
                Node::let_bind(
                    "s",
                    bin(
                        BinOp::Add,
                        bin(BinOp::Mul, Expr::load("state", gid()), Expr::u32(5)),
                        Expr::load("x", gid()),
                    ),
                ),
                Node::store("state", gid(), Expr::var("s")),
                Node::store("out", gid(), bin(BinOp::BitXor, Expr::var("s"), gid())),
            ],
        ),
    );
    let mut g = GraphBuilder::new();
    g.input("x", DataType::U32, n, ValueLifetime::Invocation);
    g.input("state", DataType::U32, n, ValueLifetime::Retained);
    g.node(
        "accumulate",
        program,
        &["x", "state"],
        &[("out", ValueLifetime::Output)],
    );
    g.build()
}

/// `out = a + b`, for the error cases.
fn adder(n: u32, a: &str, b: &str) -> ProgramGraph {
    let mut g = GraphBuilder::new();
    g.input(a, DataType::U32, n, ValueLifetime::Invocation);
    g.input(b, DataType::U32, n, ValueLifetime::Invocation);
    g.node(
        "add",
        zip([a, b, "out"], DataType::U32, n, 64, |a, b| {
            bin(BinOp::Add, a, b)
        }),
        &[a, b],
        &[("out", ValueLifetime::Output)],
    );
    g.build()
}

/// Iterations per invocation of [`spin`].
const SPIN_ITERATIONS: u32 = 1 << 22;

/// Each of `n` invocations runs a dependent multiply-add chain [`SPIN_ITERATIONS`] long.
fn spin(n: u32) -> ProgramGraph {
    spin_chain(n, SPIN_ITERATIONS, 1)
}

/// `output[i]` = `input[i]` after `iterations` steps of `h = h * 1664525 + k` (`k` the
/// step), a dependent chain each invocation runs alone: its time is `iterations` times
/// one step's latency, whatever the device's width.
fn spin_program(input: &str, output: &str, n: u32, iterations: u32) -> Program {
    Program::wrapped(
        vec![
            BufferDecl::read(input, 0, DataType::U32).with_count(n),
            BufferDecl::output(output, 1, DataType::U32).with_count(n),
        ],
        [64, 1, 1],
        guarded(
            n,
            vec![
                Node::let_bind("h", Expr::load(input, gid())),
                Node::loop_for(
                    "k",
                    Expr::u32(0),
                    Expr::u32(iterations),
                    vec![Node::assign(
                        "h",
                        bin(
                            BinOp::Add,
                            bin(BinOp::Mul, Expr::var("h"), Expr::u32(1_664_525)),
                            Expr::var("k"),
                        ),
                    )],
                ),
                Node::store(output, gid(), Expr::var("h")),
            ],
        ),
    )
}

/// `nodes` [`spin_program`] nodes in a row over `n` u32 values, `seed` in, `out` out.
fn spin_chain(n: u32, iterations: u32, nodes: u32) -> ProgramGraph {
    let mut g = GraphBuilder::new();
    g.input("seed", DataType::U32, n, ValueLifetime::Invocation);
    for node in 0..nodes {
        let from = if node == 0 {
            "seed".to_string()
        } else {
            format!("s{node}")
        };
        let (to, lifetime) = if node + 1 == nodes {
            ("out".to_string(), ValueLifetime::Output)
        } else {
            (format!("s{}", node + 1), ValueLifetime::Invocation)
        };
        g.node(
            &format!("spin{node}"),
            spin_program(&from, &to, n, iterations),
            &[&from],
            &[(&to, lifetime)],
        );
    }
    g.build()
}

/// What [`spin_chain`] computes for one seed.
fn spin_host(seed: u32, iterations: u32, nodes: u32) -> u32 {
    (0..nodes).fold(seed, |h, _| {
        (0..iterations).fold(h, |h, k| h.wrapping_mul(1_664_525).wrapping_add(k))
    })
}

// ---------------------------------------------------------------------------------------
// The fixture corpus through both routes.

/// Outcome of one fixture case on one route.
enum Outcome {
    Identical,
    BothFail,
    /// The route failed where the reference succeeded.
    Rejected(String),
    /// A real failure: bytes differ, or the route succeeded where the reference failed.
    Wrong(String),
}

/// The graph of one fixture program: `ProgramGraph::from_program`, except that buffers
/// declared without a size (count 0, sized by the bytes bound at run time) get a
/// symbolic dimension bound to the case's size, which is how a graph says "runtime-sized".
fn fixture_graph(
    id: &str,
    program: &Program,
    supplied: &BTreeMap<String, Vec<u8>>,
) -> Result<(ProgramGraph, BTreeMap<String, u64>), String> {
    let runtime_sized =
        |decl: &BufferDecl| decl.access() != BufferAccess::Workgroup && decl.count() == 0;
    if !program.buffers().iter().any(runtime_sized) {
        let graph = ProgramGraph::from_program(id, program.clone()).map_err(|e| e.to_string())?;
        return Ok((graph, BTreeMap::new()));
    }
    // The same graph as `from_program` builds, with `Symbol` shapes where the count is 0.
    let (mut graph, mut symbols) = (ProgramGraph::new(), BTreeMap::new());
    let (mut ports_in, mut ports_out) = (Vec::new(), Vec::new());
    for decl in program.buffers() {
        if decl.access() == BufferAccess::Workgroup {
            continue;
        }
        let shape = if decl.count() == 0 {
            let symbol = format!("{}_elements", decl.name());
            let bytes = supplied
                .get(decl.name())
                .ok_or_else(|| format!("runtime-sized `{}` has no bytes", decl.name()))?;
            let elements = bytes.len() / byte_len(&decl.element(), 1);
            symbols.insert(symbol.clone(), elements as u64);
            ShapeDim::Symbol(symbol)
        } else {
            ShapeDim::Known(u64::from(decl.count()))
        };
        let lifetime = if decl.is_output() || decl.access() == BufferAccess::WriteOnly {
            ValueLifetime::Output
        } else if decl.access() == BufferAccess::ReadWrite {
            ValueLifetime::Retained
        } else {
            ValueLifetime::Invocation
        };
        let contract = ValueContract {
            dtype: decl.element(),
            shape: vec![shape],
            access: decl.access(),
            lifetime,
        };
        if lifetime == ValueLifetime::Output {
            ports_out.push(GraphOutput {
                buffer: decl.name().to_string(),
                name: decl.name().to_string(),
                contract,
                retained_successor_of: None,
            });
        } else {
            let value = graph
                .add_external_value(decl.name(), contract.clone())
                .map_err(|e| e.to_string())?;
            ports_in.push(GraphInput {
                buffer: decl.name().to_string(),
                value,
                contract,
            });
        }
    }
    graph
        .add_node(id, program.clone(), ports_in, ports_out)
        .map_err(|e| e.to_string())?;
    Ok((graph, symbols))
}

/// The case's buffers by name, as the reference reads them: one per
/// `is_reference_input` buffer, or (the reference's legacy form) one per non-workgroup
/// buffer, where those of backend-allocated outputs only give sizes.
fn supplied_buffers(program: &Program, case: &[Vec<u8>]) -> BTreeMap<String, Vec<u8>> {
    let buffers: Vec<&BufferDecl> = program
        .buffers()
        .iter()
        .filter(|d| d.access() != BufferAccess::Workgroup)
        .collect();
    let logical: Vec<&BufferDecl> = buffers
        .iter()
        .copied()
        .filter(|d| vyre_reference::is_reference_input(d))
        .collect();
    let legacy = case.len() == buffers.len() && case.len() != logical.len();
    let order = if legacy { buffers } else { logical };
    order
        .into_iter()
        .zip(case)
        .map(|(decl, bytes)| (decl.name().to_string(), bytes.clone()))
        .collect()
}

/// Binds every external value of a fixture artifact: the case's bytes, or zeros for a
/// buffer the reference zero-fills itself (a backend-allocated read-write buffer). A value
/// the case does not supply stays unbound, so the route has to reject it.
fn fixture_bindings(
    artifact: &Artifact,
    program: &Program,
    supplied: &BTreeMap<String, Vec<u8>>,
) -> BindingSet {
    let mut bindings = BindingSet::new(artifact.digest());
    for resource in artifact.resources() {
        let Some(decl) = program.buffers().iter().find(|d| d.name() == resource.name) else {
            continue;
        };
        // An output's bytes are supplied only by a legacy-form case (its initializer).
        let output = resource.lifetime == vyre_megakernel::ResourceLifetime::Output;
        let bytes = if output || vyre_reference::is_reference_input(decl) {
            supplied.get(&resource.name).cloned()
        } else {
            Some(vec![0; resource.byte_count as usize])
        };
        if let Some(bytes) = bytes {
            bindings.insert(resource.value, BoundResource::Host(bytes));
        }
    }
    bindings
}

/// The reference's outputs by buffer name.
fn named_outputs(program: &Program, outputs: Vec<Vec<u8>>) -> BTreeMap<String, Vec<u8>> {
    program
        .buffers()
        .iter()
        .filter(|d| vyre_reference::is_reference_output(d))
        .map(|d| d.name().to_string())
        .zip(outputs)
        .collect()
}

/// A fixture program compiled and materialized (or why not), kept across its cases.
type Prepared = (Artifact, Result<Box<dyn ArtifactInstance>, String>);

/// One fixture case through the artifact route. Errors of vyre's own graph and artifact
/// compilation are prefixed `vyre:`; vyre-cuda's (target compiler, materializer, submit,
/// wait) must carry a `Fix:` hint.
fn artifact_case(
    materializer: &dyn ArtifactMaterializer,
    id: &str,
    program: &Program,
    case: &[Vec<u8>],
    prepared: &mut Option<Prepared>,
) -> Result<(Artifact, Completion), String> {
    let supplied = supplied_buffers(program, case);
    let (graph, symbols) =
        fixture_graph(id, program, &supplied).map_err(|e| format!("vyre: {e}"))?;
    // A graph with symbolic sizes depends on the case, so it is compiled per case.
    if !symbols.is_empty() || prepared.is_none() {
        let request = request_with_symbols(graph, symbols).map_err(|e| format!("vyre: {e}"))?;
        let artifact = vyre_megakernel::compile(&request).map_err(|e| format!("vyre: {e}"))?;
        let instance = instantiate_on(materializer, &artifact);
        *prepared = Some((artifact, instance));
    }
    let (artifact, instance) = prepared.as_ref().expect("prepared above");
    let instance = instance.as_ref().map_err(Clone::clone)?;
    let completion = run(
        instance.as_ref(),
        fixture_bindings(artifact, program, &supplied),
    )?;
    Ok((artifact.clone(), completion))
}

/// The oracle itself, without a device: on every single-node fixture graph,
/// `reference_graph` returns exactly what vyre-reference returns for the program.
#[test]
fn in_order_oracle_agrees_with_the_reference_on_fixture_graphs() {
    let mut compared = 0usize;
    for fixture in common::corpus::fixtures() {
        let Some(fixture_inputs) = fixture.inputs else {
            continue;
        };
        let program = (fixture.build)();
        for (index, case) in fixture_inputs().iter().enumerate() {
            let Ok(want) = common::gpu::reference(&program, case) else {
                continue;
            };
            let supplied = supplied_buffers(&program, case);
            let (graph, _) = fixture_graph(fixture.id, &program, &supplied).unwrap();
            let external = graph
                .values()
                .iter()
                .filter(|value| value.producer.is_none())
                .map(|value| {
                    let decl = program.buffers().iter().find(|d| d.name() == value.name);
                    let bytes = match decl {
                        Some(decl) if !vyre_reference::is_reference_input(decl) => {
                            vec![0; byte_len(&decl.element(), decl.count() as usize)]
                        }
                        _ => supplied[&value.name].clone(),
                    };
                    (value.name.clone(), bytes)
                })
                .collect();
            let got = reference_graph(&graph, &external)
                .unwrap_or_else(|e| panic!("{} #{index}: {e}", fixture.id));
            for (name, bytes) in named_outputs(&program, want) {
                assert_eq!(
                    got.get(&name),
                    Some(&bytes),
                    "{} #{index}: `{name}`",
                    fixture.id
                );
            }
            compared += 1;
        }
    }
    println!("in-order oracle = reference on {compared} fixture cases");
    assert!(compared > 100, "only {compared} fixture cases compared");
}

/// A backend of its own whose artifacts take the packed lane when they fit
/// `small_dispatch_bytes` (0: never, the resident-batch lane).
fn lane_backend(small_dispatch_bytes: usize) -> vyre_cuda::CudaBackend {
    fresh(vyre_cuda::CudaOptions {
        small_dispatch_bytes,
        ..Default::default()
    })
    .expect("a device")
}

/// One way of running artifacts and what it achieved on the fixture corpus.
struct Lane {
    name: &'static str,
    backend: vyre_cuda::CudaBackend,
    materializer: Box<dyn ArtifactMaterializer>,
    identical: usize,
    both_fail: usize,
    rejected: Vec<String>,
    wrong: Vec<String>,
}

impl Lane {
    fn new(name: &'static str, small_dispatch_bytes: usize) -> Self {
        let backend = lane_backend(small_dispatch_bytes);
        Self {
            name,
            materializer: backend.artifact_materializer(),
            backend,
            identical: 0,
            both_fail: 0,
            rejected: Vec::new(),
            wrong: Vec::new(),
        }
    }

    fn packed_submits(&self) -> u64 {
        self.backend
            .metric("vyre_cuda_artifact_packed_submits_total")
    }

    /// Records how `got` compares with the reference's `want`.
    fn record(
        &mut self,
        label: String,
        program: &Program,
        want: &Result<Vec<Vec<u8>>, String>,
        got: Result<(Artifact, Completion), String>,
    ) {
        let outcome = match (want, got) {
            (Ok(want), Ok((artifact, completion))) => {
                let oracle = named_outputs(program, want.clone());
                let problems = completion_mismatches(&artifact, &completion, &oracle);
                if problems.is_empty() {
                    Outcome::Identical
                } else {
                    Outcome::Wrong(problems.join("; "))
                }
            }
            (_, Err(error)) if !error.starts_with("vyre:") && !error.contains("Fix:") => {
                Outcome::Wrong(format!("error without a Fix: hint: {error}"))
            }
            (Err(_), Err(_)) => Outcome::BothFail,
            (Ok(_), Err(error)) => Outcome::Rejected(error),
            (Err(error), Ok(_)) => {
                Outcome::Wrong(format!("the reference fails ({error}) but the route ran"))
            }
        };
        match outcome {
            Outcome::Identical => self.identical += 1,
            Outcome::BothFail => self.both_fail += 1,
            Outcome::Rejected(error) => {
                println!("case {label} ({}): rejected: {error}", self.name);
                self.rejected.push(label);
            }
            Outcome::Wrong(problem) => {
                println!("case {label} ({}): WRONG: {problem}", self.name);
                self.wrong.push(format!("{label}: {problem}"));
            }
        }
    }
}

/// The fixture corpus through the artifact route on both lanes a submission can take: the
/// packed lane (one upload, the launches, one download; the default for artifacts that fit
/// it) and the resident-batch lane (forced with `small_dispatch_bytes = 0`).
#[test]
fn fixture_corpus_matches_the_reference_as_often_as_dispatch() {
    let Some(backend) = backend() else {
        return;
    };
    let config = DispatchConfig::default();
    let (mut cases, mut dispatch_identical, mut dispatch_both_fail) = (0usize, 0usize, 0usize);
    let mut lanes = [
        Lane::new("packed lane", 64 << 10),
        Lane::new("batch lane", 0),
    ];
    for fixture in common::corpus::fixtures() {
        let Some(fixture_inputs) = fixture.inputs else {
            continue;
        };
        let program = (fixture.build)();
        // The dispatch route rejects unsupported programs up front (gpu_primitives.rs).
        let dispatch_runs = backend.emit(&program, &config).is_ok();
        let mut prepared: [Option<Prepared>; 2] = [None, None];
        for (index, case) in fixture_inputs().iter().enumerate() {
            cases += 1;
            let want = common::gpu::reference(&program, case);
            if dispatch_runs {
                match (&want, backend.dispatch(&program, case, &config)) {
                    (Ok(want), Ok(got)) if *want == got => dispatch_identical += 1,
                    (Err(_), Err(_)) => dispatch_both_fail += 1,
                    _ => {}
                }
            }
            for (lane, prepared) in lanes.iter_mut().zip(&mut prepared) {
                let got = artifact_case(
                    lane.materializer.as_ref(),
                    fixture.id,
                    &program,
                    case,
                    prepared,
                );
                lane.record(format!("{} #{index}", fixture.id), &program, &want, got);
            }
        }
    }
    println!("fixture cases: {cases}; dispatch route: {dispatch_identical} byte-identical, {dispatch_both_fail} failing on both sides");
    for lane in &lanes {
        println!(
            "artifact route, {}: {} byte-identical, {} failing on both sides, {} rejected, {} wrong; {} packed submissions",
            lane.name,
            lane.identical,
            lane.both_fail,
            lane.rejected.len(),
            lane.wrong.len(),
            lane.packed_submits()
        );
    }
    assert!(cases > 100, "only {cases} fixture cases ran");
    for lane in &lanes {
        assert!(
            lane.wrong.is_empty(),
            "{}: {}",
            lane.name,
            lane.wrong.join("\n")
        );
        assert_eq!(
            lane.identical, dispatch_identical,
            "the artifact route ({}) is byte-identical on {} cases, the dispatch route on {dispatch_identical}",
            lane.name, lane.identical
        );
    }
    let [packed, batch] = &lanes;
    assert!(
        packed.packed_submits() as usize > cases / 2,
        "only {} of {cases} cases took the packed lane",
        packed.packed_submits()
    );
    assert_eq!(
        batch.packed_submits(),
        0,
        "the batch lane packed submissions"
    );
}

// ---------------------------------------------------------------------------------------
// Multi-node graphs against the in-order oracle.

/// Compiles `graph`, runs it with `values` through an `ArtifactSession` and compares
/// with the in-order oracle; returns the fusion-group count.
fn run_graph(what: &str, graph: ProgramGraph, values: BTreeMap<String, Vec<u8>>) -> usize {
    let request = request(graph);
    let artifact = compile(&request);
    let oracle = reference_graph(request.graph(), &values).expect("the reference runs the graph");
    let session =
        ArtifactSession::compile_with_materializer(registration(), &request, materializer())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(session.artifact().unwrap(), artifact.digest(), "{what}");
    let completion = session
        .submit_and_wait(host_bindings(&artifact, &values))
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_matches(what, &artifact, &completion, &oracle);
    let groups = artifact.fusion().len();
    println!(
        "{what}: {} nodes in {groups} fusion groups, byte-identical to the in-order reference",
        artifact.nodes().len()
    );
    groups
}

#[test]
fn four_node_chain_with_two_groups() {
    if backend().is_none() {
        return;
    }
    let n = 3000;
    let groups = run_graph("4-node chain", chain4(n), inputs([("x", u32_input(n, 1))]));
    assert!(
        groups >= 2,
        "the chain should span several fusion groups, got {groups}"
    );
}

#[test]
fn sixteen_node_u32_and_f32_chain() {
    if backend().is_none() {
        return;
    }
    let n = 5000;
    let groups = run_graph(
        "16-node chain",
        chain16(n),
        inputs([("x", u32_input(n, 2))]),
    );
    assert!(
        groups >= 4,
        "the chain should span several fusion groups, got {groups}"
    );
}

#[test]
fn fan_out_and_fan_in() {
    if backend().is_none() {
        return;
    }
    let n = 4100;
    let values = inputs([("x", u32_input(n, 3)), ("y", u32_input(n, 4))]);
    run_graph("fan-out/fan-in", fan_out_fan_in(n), values);
}

#[test]
fn consumers_reading_other_invocations_of_a_fused_producer() {
    if backend().is_none() {
        return;
    }
    let n = 8192;
    let graph = cross_invocation(n);
    // The case exists because vyre fuses these nodes: check that it still does.
    let artifact = compile(&request(cross_invocation(n)));
    assert!(
        artifact
            .fusion()
            .iter()
            .any(|group| group.members.len() > 1),
        "vyre-megakernel no longer fuses the producer with its consumer"
    );
    run_graph(
        "reversed and rotated reads over 32 workgroups",
        graph,
        inputs([("x", u32_input(n, 5))]),
    );
}

// ---------------------------------------------------------------------------------------
// Retained state.

#[test]
fn retained_state_carries_across_submissions() {
    if backend().is_none() {
        return;
    }
    let n = 2000;
    let request = request(accumulator(n));
    let artifact = compile(&request);
    let session =
        ArtifactSession::compile_with_materializer(registration(), &request, materializer())
            .expect("the accumulator materializes");
    let state = value_id(&artifact, "state");
    let initial = u32_input(n, 6);
    let retained =
        RetainedArtifactSession::new(session, BTreeMap::from([(state, initial.clone())]))
            .expect("a retained session over the only retained value");
    let mut current = initial;
    for round in 0..3 {
        let x = u32_input(n, 10 + round);
        let values = inputs([("x", x.clone()), ("state", current.clone())]);
        let oracle = reference_graph(request.graph(), &values).unwrap();
        let mut bindings = retained.bindings().unwrap();
        bindings.insert(value_id(&artifact, "x"), BoundResource::Host(x));
        let completion = retained.submit_and_wait(bindings).unwrap();
        assert_matches(
            &format!("retained round {round}"),
            &artifact,
            &completion,
            &oracle,
        );
        assert_ne!(oracle["state"], current, "the state must change each round");
        current = oracle["state"].clone();
    }
}

#[test]
fn retained_state_in_a_resident_buffer_is_updated_in_place() {
    if backend().is_none() {
        return;
    }
    let n = 2000;
    let request = request(accumulator(n));
    let artifact = compile(&request);
    let instance = instantiate(&artifact).unwrap();
    let materializer = materializer();
    let mut state = u32_input(n, 7);
    let resident = materializer.allocate_resident(state.len()).unwrap();
    materializer.upload_resident(&resident, &state).unwrap();
    for round in 0..2 {
        let x = u32_input(n, 20 + round);
        let oracle = reference_graph(
            request.graph(),
            &inputs([("x", x.clone()), ("state", state)]),
        )
        .unwrap();
        let mut bindings = host_bindings(&artifact, &inputs([("x", x)]));
        bindings.insert(
            value_id(&artifact, "state"),
            BoundResource::Resident(resident.clone()),
        );
        let completion = run(instance.as_ref(), bindings).unwrap();
        // Round 1 only matches if round 0 wrote its state into the resident buffer.
        assert_matches(
            &format!("resident state round {round}"),
            &artifact,
            &completion,
            &oracle,
        );
        state = oracle["state"].clone();
    }
    materializer.free_resident(resident).unwrap();
}

// ---------------------------------------------------------------------------------------
// Resident bindings.

#[test]
fn resident_inputs_zero_filled_uploaded_whole_and_in_parts() {
    if backend().is_none() {
        return;
    }
    let n = 4096;
    let request = request(chain4(n));
    let artifact = compile(&request);
    let instance = instantiate(&artifact).unwrap();
    let materializer = materializer();
    let x = u32_input(n, 8);
    let x_id = value_id(&artifact, "x");
    let check = |what: &str, resource: &Resource, bytes: &[u8]| {
        let oracle = reference_graph(request.graph(), &inputs([("x", bytes.to_vec())])).unwrap();
        let mut bindings = BindingSet::new(artifact.digest());
        bindings.insert(x_id, BoundResource::Resident(resource.clone()));
        let completion = run(instance.as_ref(), bindings).unwrap();
        assert_matches(what, &artifact, &completion, &oracle);
    };

    let fresh = materializer.allocate_resident(x.len()).unwrap();
    check(
        "never-uploaded resident (zero-filled)",
        &fresh,
        &vec![0; x.len()],
    );

    let whole = materializer.allocate_resident(x.len()).unwrap();
    materializer.upload_resident(&whole, &x).unwrap();
    check("uploaded resident", &whole, &x);

    let half = x.len() / 2;
    materializer
        .upload_resident_at(&fresh, 0, &x[..half])
        .unwrap();
    materializer
        .upload_resident_at(&fresh, half, &x[half..])
        .unwrap();
    check("resident uploaded in two ranges", &fresh, &x);

    // A partial overwrite of an uploaded buffer keeps the rest.
    let mut patched = x.clone();
    patched[1024..1040].copy_from_slice(&[0xAB; 16]);
    materializer
        .upload_resident_at(&whole, 1024, &[0xAB; 16])
        .unwrap();
    check("resident patched at an offset", &whole, &patched);

    materializer.free_resident(fresh).unwrap();
    materializer.free_resident(whole).unwrap();
}

#[test]
fn host_and_resident_bindings_mixed() {
    if backend().is_none() {
        return;
    }
    let n = 4096;
    let request = request(fan_out_fan_in(n));
    let artifact = compile(&request);
    let instance = instantiate(&artifact).unwrap();
    let materializer = materializer();
    let (x, y) = (u32_input(n, 9), u32_input(n, 10));
    let oracle = reference_graph(
        request.graph(),
        &inputs([("x", x.clone()), ("y", y.clone())]),
    )
    .unwrap();
    for resident_name in ["x", "y"] {
        let bytes = if resident_name == "x" { &x } else { &y };
        let host_name = if resident_name == "x" { "y" } else { "x" };
        let host_bytes = if resident_name == "x" { &y } else { &x };
        let resident = materializer.allocate_resident(bytes.len()).unwrap();
        materializer.upload_resident(&resident, bytes).unwrap();
        let mut bindings = host_bindings(&artifact, &inputs([(host_name, host_bytes.clone())]));
        bindings.insert(
            value_id(&artifact, resident_name),
            BoundResource::Resident(resident.clone()),
        );
        let completion = run(instance.as_ref(), bindings).unwrap();
        assert_matches(
            &format!("{resident_name} resident, {host_name} host"),
            &artifact,
            &completion,
            &oracle,
        );
        materializer.free_resident(resident).unwrap();
    }
}

#[test]
fn output_written_into_a_resident_buffer_feeds_another_artifact() {
    if backend().is_none() {
        return;
    }
    let n = 4096;
    let first = request(fan_out_fan_in(n));
    let second = request(chain4(n));
    let (first_artifact, second_artifact) = (compile(&first), compile(&second));
    let (first_instance, second_instance) = (
        instantiate(&first_artifact).unwrap(),
        instantiate(&second_artifact).unwrap(),
    );
    let materializer = materializer();
    let values = inputs([("x", u32_input(n, 11)), ("y", u32_input(n, 12))]);
    let first_oracle = reference_graph(first.graph(), &values).unwrap();

    // Garbage in the output buffer beforehand: the node must overwrite all of it.
    let out = materializer.allocate_resident(n as usize * 4).unwrap();
    materializer
        .upload_resident(&out, &u32_input(n, 13))
        .unwrap();
    let mut bindings = host_bindings(&first_artifact, &values);
    bindings.insert(
        value_id(&first_artifact, "out"),
        BoundResource::Resident(out.clone()),
    );
    let completion = run(first_instance.as_ref(), bindings).unwrap();
    assert_matches(
        "output bound to a resident",
        &first_artifact,
        &completion,
        &first_oracle,
    );

    // The second artifact reads the resident in place: it sees what the first wrote.
    let second_oracle = reference_graph(
        second.graph(),
        &inputs([("x", first_oracle["out"].clone())]),
    )
    .unwrap();
    let mut bindings = BindingSet::new(second_artifact.digest());
    bindings.insert(
        value_id(&second_artifact, "x"),
        BoundResource::Resident(out.clone()),
    );
    let completion = run(second_instance.as_ref(), bindings).unwrap();
    assert_matches(
        "resident written by a previous artifact",
        &second_artifact,
        &completion,
        &second_oracle,
    );
    materializer.free_resident(out).unwrap();
}

/// `out[i] = x[i] + 1` for even `i` only: the odd elements are whatever `out` starts as.
fn sparse_writer(n: u32) -> ProgramGraph {
    let program = Program::wrapped(
        vec![
            BufferDecl::read("x", 0, DataType::U32).with_count(n),
            BufferDecl::output("out", 1, DataType::U32).with_count(n),
        ],
        [64, 1, 1],
        guarded(
            n,
            vec![Node::if_then(
                bin(
                    BinOp::Eq,
                    bin(BinOp::BitAnd, gid(), Expr::u32(1)),
                    Expr::u32(0),
                ),
                vec![Node::store(
                    "out",
                    gid(),
                    bin(BinOp::Add, Expr::load("x", gid()), Expr::u32(1)),
                )],
            )],
        ),
    );
    let mut g = GraphBuilder::new();
    g.input("x", DataType::U32, n, ValueLifetime::Invocation);
    g.node("sparse", program, &["x"], &[("out", ValueLifetime::Output)]);
    g.build()
}

/// An output starts zeroed, as in vyre-reference, whatever is bound to it: host bytes
/// (the reference's legacy initializer: ignored, but no shorter than the output) or a
/// resident buffer holding earlier data.
#[test]
fn an_output_starts_zeroed_whatever_is_bound_to_it() {
    if backend().is_none() {
        return;
    }
    let n = 1000;
    let request = request(sparse_writer(n));
    let artifact = compile(&request);
    let instance = instantiate(&artifact).unwrap();
    let values = inputs([("x", u32_input(n, 21))]);
    let oracle = reference_graph(request.graph(), &values).unwrap();
    let out = value_id(&artifact, "out");
    let bytes = n as usize * 4;
    for len in [bytes, bytes + 8] {
        let mut bindings = host_bindings(&artifact, &values);
        bindings.insert(out, BoundResource::Host(vec![0xA5; len]));
        let completion = run(instance.as_ref(), bindings).unwrap();
        assert_matches("a host initializer", &artifact, &completion, &oracle);
    }
    let mut bindings = host_bindings(&artifact, &values);
    bindings.insert(out, BoundResource::Host(vec![0xA5; bytes - 4]));
    let error = instance
        .submit(bindings)
        .err()
        .expect("a short initializer");
    let text = fix_text(&error);
    assert!(text.contains("initializer"), "{text}");
    let materializer = materializer();
    let resident = materializer.allocate_resident(bytes).unwrap();
    materializer
        .upload_resident(&resident, &u32_input(n, 22))
        .unwrap();
    let mut bindings = host_bindings(&artifact, &values);
    bindings.insert(out, BoundResource::Resident(resident.clone()));
    let completion = run(instance.as_ref(), bindings).unwrap();
    assert_matches("a resident output", &artifact, &completion, &oracle);
    materializer.free_resident(resident).unwrap();
    let completion = run(instance.as_ref(), host_bindings(&artifact, &values)).unwrap();
    assert_matches(
        "nothing bound to the output",
        &artifact,
        &completion,
        &oracle,
    );
}

/// What `ProgramGraph::from_program` makes of a program with a runtime-sized input (no
/// declared count: a 0-byte value) and a buffer vyre-reference allocates itself
/// (read-write, pipeline live-out): the input takes any length, and the buffer may stay
/// unbound and starts zeroed even when bytes are bound to it, as in the reference.
#[test]
fn runtime_sized_inputs_and_reference_allocated_buffers() {
    if backend().is_none() {
        return;
    }
    let n = 64u32;
    let program = Program::wrapped(
        vec![
            BufferDecl::read("x", 0, DataType::U32),
            BufferDecl::storage("scratch", 1, BufferAccess::ReadWrite, DataType::U32)
                .with_count(n)
                .with_pipeline_live_out(true),
            BufferDecl::output("out", 2, DataType::U32).with_count(n),
        ],
        [64, 1, 1],
        guarded(
            n,
            vec![
                Node::store(
                    "scratch",
                    gid(),
                    bin(BinOp::Add, Expr::load("scratch", gid()), Expr::u32(5)),
                ),
                Node::if_then(
                    bin(BinOp::Lt, gid(), Expr::buf_len("x")),
                    vec![Node::store(
                        "out",
                        gid(),
                        bin(
                            BinOp::Add,
                            Expr::load("x", gid()),
                            Expr::load("scratch", gid()),
                        ),
                    )],
                ),
            ],
        ),
    );
    let graph = ProgramGraph::from_program("runtime_sized", program.clone()).unwrap();
    let artifact = compile(&request(graph));
    let instance = instantiate(&artifact).unwrap();
    let out = value_id(&artifact, "out");
    for (len, scratch_bound) in [(10u32, false), (64, true), (3, false), (10, true)] {
        let x = u32_input(len, u64::from(len));
        let want = common::gpu::reference(&program, std::slice::from_ref(&x)).unwrap();
        let want = named_outputs(&program, want);
        let mut bindings = BindingSet::new(artifact.digest());
        bindings.insert(value_id(&artifact, "x"), BoundResource::Host(x));
        if scratch_bound {
            bindings.insert(
                value_id(&artifact, "scratch"),
                BoundResource::Host(vec![0xA5; n as usize * 4]),
            );
        }
        let completion = run(instance.as_ref(), bindings)
            .unwrap_or_else(|e| panic!("{len} input elements: {e}"));
        assert_eq!(
            completion.outputs.get(&out),
            want.get("out"),
            "{len} input elements, scratch bound: {scratch_bound}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Asynchronous submission.

#[test]
fn submission_is_asynchronous_and_dropping_one_is_harmless() {
    if backend().is_none() {
        return;
    }
    for (lane, bytes) in [("packed lane", 64 << 10), ("batch lane", 0)] {
        let owner = lane_backend(bytes);
        asynchronous_on(lane, owner.artifact_materializer().as_ref());
    }
}

fn asynchronous_on(lane: &str, materializer: &dyn ArtifactMaterializer) {
    // Two invocations keep the reference interpreter's share of 2^22 iterations small;
    // on the device each is a dependent chain of milliseconds.
    let n = 2;
    let request = request(spin(n));
    let artifact = compile(&request);
    let instance = instantiate_on(materializer, &artifact).unwrap();
    let values = inputs([("seed", u32_input(n, 14))]);
    let oracle = reference_graph(request.graph(), &values).unwrap();

    let started = std::time::Instant::now();
    let submission = instance.submit(host_bindings(&artifact, &values)).unwrap();
    assert!(
        !submission.is_ready(),
        "{lane}: submit returned after the {SPIN_ITERATIONS}-iteration kernel finished: it blocked"
    );
    let completion = submission.wait().unwrap();
    let wall = started.elapsed();
    assert_matches(lane, &artifact, &completion, &oracle);
    let device = Duration::from_nanos(completion.device_ns.expect("device time"));
    println!("{lane}: {SPIN_ITERATIONS} iterations per invocation: {device:?} of device time, {wall:?} of wall time");
    // The kernel's dependent chain runs for milliseconds; the device time is the kernels'.
    assert!(
        device >= Duration::from_millis(1) && device <= wall,
        "{lane}: device time {device:?}, wall time {wall:?}"
    );

    // Polled to completion without wait().
    let submission = instance.submit(host_bindings(&artifact, &values)).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !submission.is_ready() {
        assert!(
            std::time::Instant::now() < deadline,
            "{lane}: is_ready() never became true"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_matches(lane, &artifact, &submission.wait().unwrap(), &oracle);

    // Dropped unwaited, twice in a row; the instance goes on working.
    for _ in 0..2 {
        drop(instance.submit(host_bindings(&artifact, &values)).unwrap());
    }
    let completion = run(instance.as_ref(), host_bindings(&artifact, &values)).unwrap();
    assert_matches(lane, &artifact, &completion, &oracle);
}

#[test]
fn several_submissions_in_flight_complete_independently() {
    if backend().is_none() {
        return;
    }
    // 256 elements fit the packed lane, 4096 do not (its four values need 80 KiB).
    for n in [256, 4096] {
        let request = request(chain4(n));
        let artifact = compile(&request);
        let instance = instantiate(&artifact).unwrap();
        let rounds: Vec<BTreeMap<String, Vec<u8>>> = (0..4)
            .map(|seed| inputs([("x", u32_input(n, 30 + seed))]))
            .collect();
        let submissions: Vec<_> = rounds
            .iter()
            .map(|values| instance.submit(host_bindings(&artifact, values)).unwrap())
            .collect();
        // Waited in reverse order of submission.
        for (values, submission) in rounds.iter().zip(submissions).rev() {
            let oracle = reference_graph(request.graph(), values).unwrap();
            assert_matches(
                &format!("in flight together, n = {n}"),
                &artifact,
                &submission.wait().unwrap(),
                &oracle,
            );
        }
    }
}

/// One warm submit+wait of a [`spin_chain`] artifact: the output checked against
/// [`spin_host`] in both workgroups, the device time checked positive and within the host's
/// wall time around submit..wait; returns the device time.
fn timed_spin(
    what: &str,
    instance: &dyn ArtifactInstance,
    artifact: &Artifact,
    values: &BTreeMap<String, Vec<u8>>,
    (n, iterations, nodes): (u32, u32, u32),
) -> Duration {
    let word =
        |bytes: &[u8], i: usize| u32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap());
    let started = std::time::Instant::now();
    let completion = run(instance, host_bindings(artifact, values)).unwrap();
    let wall = started.elapsed();
    let out = &completion.outputs[&value_id(artifact, "out")];
    for i in [0, 63, 64, n as usize - 1] {
        let want = spin_host(word(&values["seed"], i), iterations, nodes);
        assert_eq!(word(out, i), want, "{what}: out[{i}]");
    }
    let device = Duration::from_nanos(completion.device_ns.expect("a device time"));
    assert!(
        device > Duration::ZERO && device <= wall,
        "{what}: device time {device:?}, wall time {wall:?}"
    );
    device
}

/// The packed lane times a submission with the kernels' own clock stamps (read back with
/// the fault word; no CUDA event per submission): the device time is positive, within the
/// host's submit..wait wall time, grows with the work in a kernel and with the kernels of a
/// chain (the first kernel's start to the last one's end), and agrees with the timing
/// events the batch lane records around the same kernels.
#[test]
fn packed_device_time_is_the_kernels_clock_and_scales_with_their_work() {
    if backend().is_none() {
        return;
    }
    // Two workgroups of 64.
    let n = 128;
    let values = inputs([("seed", u32_input(n, 70))]);
    let (packed, batch) = (lane_backend(64 << 10), lane_backend(0));
    let counted = |owner: &vyre_cuda::CudaBackend| {
        [
            "vyre_cuda_artifact_packed_submits_total",
            "vyre_cuda_clock_timed_submits_total",
        ]
        .map(|name| owner.metric(name))
    };
    let mut stamped = Vec::new();
    for (iterations, nodes) in [(1 << 18, 1), (1 << 20, 1), (1 << 20, 3)] {
        let artifact = compile(&request(spin_chain(n, iterations, nodes)));
        // The least of three warm submissions (the first on a lane captures its graph).
        let least = |owner: &vyre_cuda::CudaBackend, lane: &str| {
            let materializer = owner.artifact_materializer();
            let instance = instantiate_on(materializer.as_ref(), &artifact).unwrap();
            let what = format!("{lane}: {nodes} kernel(s) of {iterations} iterations");
            let shape = (n, iterations, nodes);
            timed_spin(&what, instance.as_ref(), &artifact, &values, shape);
            (0..3)
                .map(|_| timed_spin(&what, instance.as_ref(), &artifact, &values, shape))
                .min()
                .unwrap()
        };
        let before = counted(&packed);
        let clock = least(&packed, "packed lane");
        let after = counted(&packed);
        assert_eq!(
            [after[0] - before[0], after[1] - before[1]],
            [4, 4],
            "every submission took the packed lane and read its device time from the clock stamps"
        );
        let events = least(&batch, "batch lane");
        assert_eq!(counted(&batch), [0, 0], "the batch lane records events");
        println!("{nodes} kernel(s) of {iterations} iterations: {clock:?} from the kernels' clock, {events:?} between events");
        // The stamps span the kernels alone; the events also the launch latency around them.
        assert!(
            clock <= events.mul_f64(1.15) + Duration::from_micros(50)
                && clock >= events.mul_f64(0.7),
            "{nodes} kernel(s) of {iterations} iterations: {clock:?} from the clock, {events:?} between events"
        );
        stamped.push(clock);
    }
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    let longer = ratio(stamped[1], stamped[0]);
    assert!(
        (2.0..=8.0).contains(&longer),
        "4x the iterations took {longer:.2}x the device time ({stamped:?})"
    );
    let chained = ratio(stamped[2], stamped[1]);
    assert!(
        (2.0..=4.5).contains(&chained),
        "3 kernels took {chained:.2}x one kernel's device time ({stamped:?})"
    );

    // A kernel of a few microseconds: a device time, within the wall time.
    let artifact = compile(&request(adder(1024, "alpha", "beta")));
    let instance = instantiate_on(packed.artifact_materializer().as_ref(), &artifact).unwrap();
    let values = inputs([
        ("alpha", u32_input(1024, 71)),
        ("beta", u32_input(1024, 72)),
    ]);
    for _ in 0..3 {
        let started = std::time::Instant::now();
        let completion = run(instance.as_ref(), host_bindings(&artifact, &values)).unwrap();
        let wall = started.elapsed();
        let device = Duration::from_nanos(completion.device_ns.expect("a device time"));
        assert!(device <= wall, "adder: device {device:?}, wall {wall:?}");
    }
}

/// `BindingSet::set_invocation_grid` replaces every node's grid (in workgroups, as
/// `DispatchConfig::grid_override`), on either lane: a smaller grid leaves the rest of the
/// output at zero.
#[test]
fn an_invocation_grid_overrides_every_node_on_both_lanes() {
    if backend().is_none() {
        return;
    }
    let n = 1024;
    let request = request(adder(n, "alpha", "beta"));
    let artifact = compile(&request);
    let values = inputs([("alpha", u32_input(n, 50)), ("beta", u32_input(n, 51))]);
    let word =
        |bytes: &[u8], i: usize| u32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap());
    // 4 workgroups of 64: the first 256 invocations.
    let want: Vec<u8> = (0..n as usize)
        .flat_map(|i| {
            let sum = match i < 256 {
                true => word(&values["alpha"], i).wrapping_add(word(&values["beta"], i)),
                false => 0,
            };
            sum.to_le_bytes()
        })
        .collect();
    for (lane, bytes) in [("packed lane", 64 << 10), ("batch lane", 0)] {
        let owner = lane_backend(bytes);
        let instance = instantiate_on(owner.artifact_materializer().as_ref(), &artifact).unwrap();
        for _ in 0..2 {
            let mut bindings = host_bindings(&artifact, &values);
            bindings.set_invocation_grid([4, 1, 1]).unwrap();
            let completion = run(instance.as_ref(), bindings).unwrap();
            let out = &completion.outputs[&value_id(&artifact, "out")];
            assert!(*out == want, "{lane}: the overridden grid's output differs");
            // Without the override, the whole output again.
            let completion = run(instance.as_ref(), host_bindings(&artifact, &values)).unwrap();
            let oracle = reference_graph(request.graph(), &values).unwrap();
            assert_matches(lane, &artifact, &completion, &oracle);
        }
    }
}

/// `quotient = a / b` in i32: vyre-reference fails on a zero divisor.
fn divider(n: u32) -> ProgramGraph {
    let mut g = GraphBuilder::new();
    g.input("a", DataType::I32, n, ValueLifetime::Invocation);
    g.input("b", DataType::I32, n, ValueLifetime::Invocation);
    g.node(
        "divide",
        zip(["a", "b", "quotient"], DataType::I32, n, 64, |a, b| {
            bin(BinOp::Div, a, b)
        }),
        &["a", "b"],
        &[("quotient", ValueLifetime::Output)],
    );
    g.build()
}

/// A kernel fault (signed division by zero, which the reference rejects) fails its own
/// submission with a `Fix:` hint, on either lane, in flight beside good submissions,
/// and poisons none of them nor any later one.
#[test]
fn a_kernel_fault_fails_only_its_own_submission_on_both_lanes() {
    if backend().is_none() {
        return;
    }
    let n = 256;
    let request = request(divider(n));
    let artifact = compile(&request);
    let mut rng = Rng::new(77);
    let values = |zero_at: Option<usize>, rng: &mut Rng| {
        let a: Vec<i32> = (0..n).map(|_| rng.next_u32() as i32).collect();
        let mut b: Vec<i32> = (0..n).map(|_| (rng.next_u32() % 1000) as i32 + 1).collect();
        if let Some(at) = zero_at {
            b[at] = 0;
        }
        let bytes = |v: &[i32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        inputs([("a", bytes(&a)), ("b", bytes(&b))])
    };
    for (lane, bytes) in [("packed lane", 64 << 10), ("batch lane", 0)] {
        let owner = lane_backend(bytes);
        let instance = instantiate_on(owner.artifact_materializer().as_ref(), &artifact).unwrap();
        let good = values(None, &mut rng);
        let bad = values(Some(n as usize / 2), &mut rng);
        assert!(reference_graph(request.graph(), &bad).is_err());
        let oracle = reference_graph(request.graph(), &good).unwrap();
        let before = instance.submit(host_bindings(&artifact, &good)).unwrap();
        let faulting = instance.submit(host_bindings(&artifact, &bad)).unwrap();
        let after = instance.submit(host_bindings(&artifact, &good)).unwrap();
        let error = faulting.wait().expect_err("a division by zero fails");
        println!("{lane}: {}", fix_text(error));
        for (what, submission) in [("before", before), ("after", after)] {
            let completion = submission.wait().unwrap();
            assert_matches(
                &format!("{lane}, {what} the fault"),
                &artifact,
                &completion,
                &oracle,
            );
        }
        let completion = run(instance.as_ref(), host_bindings(&artifact, &good)).unwrap();
        assert_matches(&format!("{lane}, later"), &artifact, &completion, &oracle);
        let packed = owner.metric("vyre_cuda_artifact_packed_submits_total");
        assert_eq!(packed > 0, bytes > 0, "{lane}: {packed} packed submissions");
    }
}

// ---------------------------------------------------------------------------------------
// The payload and its rejections.

#[test]
fn payload_format_and_determinism() {
    if backend().is_none() {
        return;
    }
    let artifact = compile(&request(chain16(1000)));
    let payload = compiler().compile(&artifact).unwrap();
    assert_eq!(payload.format().identity(), vyre_cuda::PAYLOAD_FORMAT);
    assert_eq!(payload.format().version(), 3);
    assert_eq!(compiler().format(), payload.format());
    assert_eq!(payload.neutral_artifact(), artifact.digest());
    assert_eq!(materializer().device().target_format(), payload.format());
    // Same artifact, same payload; and the same graph compiled again gives both again.
    let again = compile(&request(chain16(1000)));
    assert_eq!(again.digest(), artifact.digest());
    assert_eq!(
        compiler().compile(&again).unwrap().digest(),
        payload.digest()
    );
    assert_eq!(
        compiler().compile(&artifact).unwrap().to_bytes().unwrap(),
        payload.to_bytes().unwrap()
    );
    // A registration-level compiler built afresh agrees with the shared one.
    let fresh_compiler = registration().target_compiler().unwrap();
    assert_eq!(
        fresh_compiler.compile(&artifact).unwrap().digest(),
        payload.digest()
    );
}

/// `instance` still runs `adder` correctly.
fn assert_still_usable(
    what: &str,
    instance: &dyn ArtifactInstance,
    artifact: &Artifact,
    graph: &ProgramGraph,
) {
    let values = inputs([("alpha", u32_input(256, 40)), ("beta", u32_input(256, 41))]);
    let oracle = reference_graph(graph, &values).unwrap();
    let completion = run(instance, host_bindings(artifact, &values))
        .unwrap_or_else(|e| panic!("after {what}: {e}"));
    assert_matches(&format!("after {what}"), artifact, &completion, &oracle);
}

#[test]
fn binding_errors_leave_the_instance_usable() {
    if backend().is_none() {
        return;
    }
    let n = 256;
    let request = request(adder(n, "alpha", "beta"));
    let artifact = compile(&request);
    let instance = instantiate(&artifact).unwrap();
    let graph = request.graph();
    let good = || inputs([("alpha", u32_input(n, 40)), ("beta", u32_input(n, 41))]);
    assert_still_usable("nothing", instance.as_ref(), &artifact, graph);

    // Bindings built for another artifact.
    let other = compile(&self::request(adder(n, "alpha", "gamma")));
    assert_ne!(other.digest(), artifact.digest());
    let mut foreign = BindingSet::new(other.digest());
    for (value, resource) in host_bindings(&artifact, &good()).resources() {
        foreign.insert(*value, resource.clone());
    }
    let error = instance
        .submit(foreign)
        .err()
        .expect("bindings of another artifact");
    println!("another artifact's bindings: {}", fix_text(&error));
    assert_still_usable(
        "another artifact's bindings",
        instance.as_ref(),
        &artifact,
        graph,
    );

    // An input left unbound: the message names it.
    let missing = host_bindings(&artifact, &inputs([("alpha", u32_input(n, 40))]));
    let error = instance.submit(missing).err().expect("a missing input");
    let text = fix_text(&error);
    assert!(
        text.contains("beta"),
        "the error does not name the missing value: {text}"
    );
    assert_still_usable("a missing input", instance.as_ref(), &artifact, graph);

    // Host bytes of the wrong length, short and long.
    for len in [n as usize * 4 - 4, n as usize * 4 + 4, 0] {
        let mut values = good();
        values.insert("beta".into(), vec![7; len]);
        let error = instance
            .submit(host_bindings(&artifact, &values))
            .err()
            .unwrap_or_else(|| panic!("{len} bytes for a {}-byte value", n * 4));
        println!("{len} host bytes: {}", fix_text(&error));
        assert_still_usable(
            "a wrong-length binding",
            instance.as_ref(),
            &artifact,
            graph,
        );
    }
}

#[test]
fn resident_handle_errors_leave_the_instance_usable() {
    if backend().is_none() {
        return;
    }
    let n = 256;
    let request = request(adder(n, "alpha", "beta"));
    let artifact = compile(&request);
    let instance = instantiate(&artifact).unwrap();
    let graph = request.graph();
    let materializer = materializer();
    let beta = value_id(&artifact, "beta");
    let with_beta = |resource: Resource| {
        let mut bindings = host_bindings(&artifact, &inputs([("alpha", u32_input(n, 40))]));
        bindings.insert(beta, BoundResource::Resident(resource));
        bindings
    };

    // A handle of another backend instance.
    let other = fresh(vyre_cuda::CudaOptions::default()).expect("a second backend");
    let foreign = other.allocate_resident(n as usize * 4).unwrap();
    other.upload_resident(&foreign, &u32_input(n, 41)).unwrap();
    let error = instance
        .submit(with_beta(foreign.clone()))
        .err()
        .expect("a foreign handle");
    println!("foreign resident handle: {}", fix_text(&error));
    assert_still_usable("a foreign handle", instance.as_ref(), &artifact, graph);
    other.free_resident(foreign).unwrap();

    // Host bytes where a resident handle belongs.
    let borrowed = Resource::Borrowed(u32_input(n, 41));
    let error = instance
        .submit(with_beta(borrowed))
        .err()
        .expect("a borrowed resource");
    println!("Resource::Borrowed: {}", fix_text(&error));
    assert_still_usable("a borrowed resource", instance.as_ref(), &artifact, graph);

    // A freed handle.
    let freed = materializer.allocate_resident(n as usize * 4).unwrap();
    materializer.free_resident(freed.clone()).unwrap();
    let error = instance
        .submit(with_beta(freed.clone()))
        .err()
        .expect("a freed handle");
    println!("freed resident handle: {}", fix_text(&error));
    assert_still_usable("a freed handle", instance.as_ref(), &artifact, graph);
    let error = materializer
        .free_resident(freed)
        .expect_err("a double free");
    println!("double free: {}", fix_text(&error));

    // A resident of the wrong size.
    let small = materializer.allocate_resident(n as usize * 4 - 4).unwrap();
    let error = instance
        .submit(with_beta(small.clone()))
        .err()
        .expect("a short resident");
    println!("short resident: {}", fix_text(&error));
    assert_still_usable("a short resident", instance.as_ref(), &artifact, graph);
    materializer.free_resident(small).unwrap();
}

#[test]
fn foreign_and_damaged_payloads_are_rejected() {
    if backend().is_none() {
        return;
    }
    let n = 256;
    let request = request(adder(n, "alpha", "beta"));
    let artifact = compile(&request);
    let payload = compiler().compile(&artifact).unwrap();
    let materializer = materializer();
    let profile = payload.profile();
    let entries = payload.entries().to_vec();
    let rebuilt = |format: TargetPayloadFormat, profile: TargetProfile, bytes: Vec<u8>| {
        TargetPayload::new(&artifact, format, profile, entries.clone(), bytes)
            .expect("a well-formed payload envelope")
    };
    let format = |identity: &str, version| TargetPayloadFormat::new(identity, version).unwrap();
    let profile_with = |identity: String, generation| {
        TargetProfile::new(
            identity,
            generation,
            profile.max_workgroup_size(),
            profile.max_invocations_per_workgroup(),
            profile.max_dynamic_shared_bytes(),
            profile.subgroup_size(),
        )
        .unwrap()
    };
    let ours = payload.format().clone();
    let bytes = payload.bytes().to_vec();
    let other_artifact = compile(&self::request(adder(n, "alpha", "gamma")));
    let rejected: Vec<(&str, TargetPayload)> = vec![
        (
            "format `ptx`",
            rebuilt(format("ptx", 1), profile.clone(), bytes.clone()),
        ),
        (
            "another format version",
            rebuilt(
                format(vyre_cuda::PAYLOAD_FORMAT, ours.version() + 1),
                profile.clone(),
                bytes.clone(),
            ),
        ),
        (
            "another profile identity",
            rebuilt(
                ours.clone(),
                profile_with(
                    format!("{}-other", profile.identity()),
                    profile.generation(),
                ),
                bytes.clone(),
            ),
        ),
        (
            "another profile generation",
            rebuilt(
                ours.clone(),
                profile_with(profile.identity().to_string(), profile.generation() + 1),
                bytes.clone(),
            ),
        ),
        (
            "garbage bytes",
            rebuilt(
                ours.clone(),
                profile.clone(),
                b"not a vyre-cuda module".to_vec(),
            ),
        ),
        (
            "random bytes",
            rebuilt(ours.clone(), profile.clone(), Rng::new(42).bytes_u32(4096)),
        ),
        (
            "truncated bytes",
            rebuilt(
                ours.clone(),
                profile.clone(),
                bytes[..bytes.len() / 2].to_vec(),
            ),
        ),
        (
            "a payload of another artifact",
            compiler().compile(&other_artifact).unwrap(),
        ),
    ];
    for (what, bad) in &rejected {
        let error = materializer
            .materialize(&artifact, bad)
            .err()
            .unwrap_or_else(|| panic!("{what} was materialized"));
        println!("{what}: {}", fix_text(&error));
    }
    // The materializer still materializes the genuine payload, which runs.
    let instance = materializer.materialize(&artifact, &payload).unwrap();
    assert_still_usable(
        "rejected payloads",
        instance.as_ref(),
        &artifact,
        request.graph(),
    );
}
