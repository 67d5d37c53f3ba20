//! vyre 0.7's production route on vyre-cuda, end to end: a five-kernel `ProgramGraph`
//! (scale -> add bias -> ReLU -> quantize -> atomic sum), compiled by
//! `vyre_megakernel::compile` into an artifact, turned into PTX by vyre-cuda's registered
//! target compiler, materialized on the device and run through
//! `vyre_runtime::ArtifactSession`. Every output byte is checked against vyre-reference
//! running the graph's nodes one by one, in order; then the timings are printed.
//!
//! `cargo run --release --example artifact_graph`
//! (without a CUDA device it says so and exits 0)

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vyre_driver::{BindingSet, BoundResource, Completion};
use vyre_foundation::ir::{
    BinOp, BufferAccess, BufferDecl, DataType, Expr, GraphInput, GraphOutput, GraphValueId, Node,
    Program, ProgramGraph, ShapeDim, ValueContract, ValueLifetime,
};
use vyre_megakernel::{
    ArtifactEnvelope, CompileRequest, Digest, ExternalFacts, SearchBudget, ValidatedCompileRequest,
};
use vyre_runtime::ArtifactSession;

const N: u32 = 1 << 18;
const WARM_RUNS: usize = 50;

fn bin(op: BinOp, left: Expr, right: Expr) -> Expr {
    Expr::BinOp {
        op,
        left: Box::new(left),
        right: Box::new(right),
    }
}

/// One kernel: `store(output, i, value(i))` for every `i < N`, reading `inputs`.
fn kernel(
    inputs: &[(&str, DataType)],
    output: (&str, DataType),
    workgroup: u32,
    value: Expr,
) -> Program {
    let mut buffers: Vec<BufferDecl> = inputs
        .iter()
        .enumerate()
        .map(|(binding, (name, ty))| {
            BufferDecl::read(name, binding as u32, ty.clone()).with_count(N)
        })
        .collect();
    buffers.push(BufferDecl::output(output.0, inputs.len() as u32, output.1).with_count(N));
    let i = Expr::gid_x();
    Program::wrapped(
        buffers,
        [workgroup, 1, 1],
        vec![Node::if_then(
            bin(BinOp::Lt, i.clone(), Expr::u32(N)),
            vec![Node::store(output.0, i, value)],
        )],
    )
}

fn load(buffer: &str) -> Expr {
    Expr::load(buffer, Expr::gid_x())
}

/// `total[0] += q[i]` for every `i < N`, with an atomic add.
fn atomic_sum() -> Program {
    let i = Expr::gid_x();
    Program::wrapped(
        vec![
            BufferDecl::read("q", 0, DataType::U32).with_count(N),
            BufferDecl::output("total", 1, DataType::U32).with_count(1),
        ],
        [64, 1, 1],
        vec![Node::if_then(
            bin(BinOp::Lt, i.clone(), Expr::u32(N)),
            vec![Node::let_bind(
                "previous",
                Expr::atomic_add("total", Expr::u32(0), Expr::load("q", i)),
            )],
        )],
    )
}

fn contract(
    dtype: DataType,
    count: u32,
    access: BufferAccess,
    lifetime: ValueLifetime,
) -> ValueContract {
    ValueContract {
        dtype,
        shape: vec![ShapeDim::Known(u64::from(count))],
        access,
        lifetime,
    }
}

/// Binds graph value `value` (carrying `dtype`, `N` elements) to the buffer of its name.
fn port_in(
    value: GraphValueId,
    name: &str,
    dtype: DataType,
    lifetime: ValueLifetime,
) -> GraphInput {
    GraphInput {
        buffer: name.to_string(),
        value,
        contract: contract(dtype, N, BufferAccess::ReadOnly, lifetime),
    }
}

/// Declares the buffer `name` (`count` elements) as the graph value of the same name.
fn port_out(name: &str, dtype: DataType, count: u32, lifetime: ValueLifetime) -> GraphOutput {
    GraphOutput {
        buffer: name.to_string(),
        name: name.to_string(),
        contract: contract(dtype, count, BufferAccess::ReadWrite, lifetime),
        retained_successor_of: None,
    }
}

/// The pipeline. Intermediate values are `Invocation` (vyre may fuse their producer and
/// consumer into one kernel); `activations` and `total` are `Output` (returned).
fn pipeline() -> ProgramGraph {
    use DataType::{F32, U32};
    use ValueLifetime::{Invocation, Output};
    let mut graph = ProgramGraph::new();
    let x = graph
        .add_external_value("x", contract(F32, N, BufferAccess::ReadOnly, Invocation))
        .unwrap();
    let bias = graph
        .add_external_value("bias", contract(F32, N, BufferAccess::ReadOnly, Invocation))
        .unwrap();

    let scale = kernel(
        &[("x", F32)],
        ("scaled", F32),
        256,
        bin(BinOp::Mul, load("x"), Expr::f32(0.75)),
    );
    let (_, scaled) = graph
        .add_node(
            "scale",
            scale,
            vec![port_in(x, "x", F32, Invocation)],
            vec![port_out("scaled", F32, N, Invocation)],
        )
        .unwrap();

    let add_bias = kernel(
        &[("scaled", F32), ("bias", F32)],
        ("biased", F32),
        256,
        bin(BinOp::Add, load("scaled"), load("bias")),
    );
    let (_, biased) = graph
        .add_node(
            "add_bias",
            add_bias,
            vec![
                port_in(scaled[0], "scaled", F32, Invocation),
                port_in(bias, "bias", F32, Invocation),
            ],
            vec![port_out("biased", F32, N, Invocation)],
        )
        .unwrap();

    let relu = kernel(
        &[("biased", F32)],
        ("activations", F32),
        256,
        bin(BinOp::Max, load("biased"), Expr::f32(0.0)),
    );
    let (_, activations) = graph
        .add_node(
            "relu",
            relu,
            vec![port_in(biased[0], "biased", F32, Invocation)],
            vec![port_out("activations", F32, N, Output)],
        )
        .unwrap();

    let to_fixed_point = Expr::Cast {
        target: U32,
        value: Box::new(bin(BinOp::Mul, load("activations"), Expr::f32(16.0))),
    };
    let quantize = kernel(&[("activations", F32)], ("q", U32), 128, to_fixed_point);
    let (_, q) = graph
        .add_node(
            "quantize",
            quantize,
            vec![port_in(activations[0], "activations", F32, Output)],
            vec![port_out("q", U32, N, Invocation)],
        )
        .unwrap();

    graph
        .add_node(
            "sum",
            atomic_sum(),
            vec![port_in(q[0], "q", U32, Invocation)],
            vec![port_out("total", U32, 1, Output)],
        )
        .unwrap();
    graph
}

/// vyre-reference running the graph's nodes one after another: each node's inputs are
/// its `is_reference_input` buffers in declaration order, its results the
/// `is_reference_output` buffers in the same order (vyre-reference 0.7.2's ABI).
fn reference_in_order(
    graph: &ProgramGraph,
    mut values: BTreeMap<String, Vec<u8>>,
) -> BTreeMap<String, Vec<u8>> {
    use vyre_reference::value::Value;
    for node in graph.nodes() {
        let buffers = node.program.buffers();
        let inputs: Vec<Value> = buffers
            .iter()
            .filter(|decl| vyre_reference::is_reference_input(decl))
            .map(|decl| {
                let port = node
                    .inputs
                    .iter()
                    .find(|p| p.buffer == decl.name())
                    .expect("an input port");
                Value::from(values[&graph.values()[port.value.0 as usize].name].clone())
            })
            .collect();
        let outputs = vyre_reference::reference_eval(&node.program, &inputs)
            .expect("the reference runs the node");
        let returned = buffers
            .iter()
            .filter(|decl| vyre_reference::is_reference_output(decl));
        for (decl, value) in returned.zip(outputs) {
            if let Some(port) = node.output_ports.iter().find(|p| p.buffer == decl.name()) {
                values.insert(port.name.clone(), value.to_bytes());
            }
        }
    }
    values
}

/// Deterministic f32 data in [-4, 4), exactly representable.
fn data(seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..N)
        .flat_map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let value = ((state >> 40) % 8192) as f32 / 1024.0 - 4.0;
            value.to_le_bytes()
        })
        .collect()
}

fn request(graph: ProgramGraph) -> ValidatedCompileRequest {
    CompileRequest::new(
        graph,
        ExternalFacts::new(Digest([0; 32]), BTreeMap::new()),
        SearchBudget::new(64, 1 << 20, 0, 0, 1 << 20),
        1 << 30,
    )
    .validate()
    .expect("a valid graph")
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Exits 1 unless every returned value equals the reference's.
fn check(
    what: &str,
    session: &ArtifactSession,
    completion: &Completion,
    oracle: &BTreeMap<String, Vec<u8>>,
) {
    for name in ["activations", "total"] {
        let id = session.resource(name).expect("a graph value");
        if completion.outputs.get(&id) != oracle.get(name) {
            eprintln!("{what}: `{name}` differs from vyre-reference");
            std::process::exit(1);
        }
    }
}

fn main() {
    match vyre_cuda::driver::device_count() {
        Ok(count) if count > 0 => {}
        Ok(_) => {
            println!("no CUDA device available: nothing to run");
            return;
        }
        Err(error) => {
            println!("no CUDA device available: nothing to run ({error})");
            return;
        }
    }
    let registration = vyre_driver::backend::backend_registration(vyre_cuda::BACKEND_ID)
        .expect("vyre-cuda is linked");

    // Graph -> neutral artifact (vyre-megakernel picks the fusion groups).
    let request = request(pipeline());
    let started = Instant::now();
    let artifact = vyre_megakernel::compile(&request).expect("the graph compiles");
    let neutral_time = started.elapsed();
    println!(
        "{} kernels in {} fusion groups:",
        artifact.nodes().len(),
        artifact.fusion().len()
    );
    for group in artifact.fusion() {
        let names: Vec<&str> = group
            .members
            .iter()
            .map(|member| artifact.nodes()[member.0 as usize].name.as_str())
            .collect();
        println!("  stage {}: {}", group.stage, names.join(" + "));
    }

    // Artifact -> PTX payload: pure, no device involved.
    let compiler = registration.target_compiler().unwrap_or_else(|e| {
        eprintln!("vyre-cuda's target compiler is unavailable: {e}");
        std::process::exit(1);
    });
    let started = Instant::now();
    let payload = compiler.compile(&artifact).unwrap_or_else(|e| {
        eprintln!("target compilation failed: {e}");
        std::process::exit(1);
    });
    let target_time = started.elapsed();
    let mut envelope = ArtifactEnvelope::new(artifact);
    envelope
        .attach_target_payload(payload)
        .expect("the payload belongs to the artifact");

    // Payload -> loaded module on the device.
    let started = Instant::now();
    let materializer: Arc<dyn vyre_driver::ArtifactMaterializer> = match registration.materializer()
    {
        Ok(materializer) => Arc::from(materializer),
        Err(error) => {
            eprintln!("a CUDA device is present but vyre-cuda's materializer failed: {error}");
            std::process::exit(1);
        }
    };
    let acquire_time = started.elapsed();
    let started = Instant::now();
    let session =
        ArtifactSession::from_envelope_with_materializer(registration, envelope, materializer)
            .unwrap_or_else(|e| {
                eprintln!("materialization failed: {e}");
                std::process::exit(1);
            });
    let materialize_time = started.elapsed();

    // Bind the inputs by graph value name and run.
    let inputs = BTreeMap::from([("x".to_string(), data(1)), ("bias".to_string(), data(2))]);
    let oracle = reference_in_order(request.graph(), inputs.clone());
    let bindings = || -> BindingSet {
        let mut bindings = session.bindings().expect("the session's artifact");
        for (name, bytes) in &inputs {
            bindings.insert(
                session.resource(name).expect("a graph input"),
                BoundResource::Host(bytes.clone()),
            );
        }
        bindings
    };
    let started = Instant::now();
    let first = session.submit_and_wait(bindings()).unwrap_or_else(|e| {
        eprintln!("submission failed: {e}");
        std::process::exit(1);
    });
    let first_time = started.elapsed();
    check("first submission", &session, &first, &oracle);

    let (mut wall, mut device) = (Vec::new(), Vec::new());
    for run in 0..WARM_RUNS {
        let set = bindings();
        let started = Instant::now();
        let completion = session.submit_and_wait(set).expect("a warm submission");
        wall.push(started.elapsed());
        device.push(Duration::from_nanos(completion.device_ns.unwrap_or(0)));
        if run + 1 == WARM_RUNS {
            check("last warm submission", &session, &completion, &oracle);
        }
    }

    let total = u32::from_le_bytes(oracle["total"][..4].try_into().expect("one u32"));
    println!("{N} elements, byte-identical to vyre-reference run node by node (sum of q: {total})");
    println!("  neutral compile (vyre-megakernel): {neutral_time:?}");
    println!("  target compile (vyre-cuda, PTX):   {target_time:?}");
    println!("  materializer acquisition:          {acquire_time:?}");
    println!("  materialize (admit + load module): {materialize_time:?}");
    println!("  first submit + wait:               {first_time:?}");
    println!(
        "  warm submit + wait, median of {WARM_RUNS}:  {:?}",
        median(wall)
    );
    println!(
        "  device time, median of {WARM_RUNS}:         {:?}",
        median(device)
    );
}
