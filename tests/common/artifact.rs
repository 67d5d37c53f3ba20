//! The artifact route and its oracle.
//!
//! Route: `ProgramGraph` -> `vyre_megakernel::compile` -> vyre-cuda's registered target
//! compiler -> its materializer -> `ArtifactInstance::submit` -> `Completion`.
//!
//! Oracle ([`reference_graph`]): vyre-reference running the graph's ORIGINAL nodes one
//! by one in schedule order, never the fused program, so a fusion that changes what a
//! node reads (a consumer reading another invocation's element) shows up as a mismatch.
//!
//! Everything here that touches the route is called only after `gpu::backend()` found a
//! device; with a device, a missing target compiler or materializer is a failure.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};
use vyre_driver::backend::BackendRegistration;
use vyre_driver::{ArtifactInstance, ArtifactMaterializer, BindingSet, BoundResource, Completion};
use vyre_foundation::ir::{
    BufferAccess, BufferDecl, DataType, GraphInput, GraphOutput, GraphValueId, Program,
    ProgramGraph, ShapeDim, ValueContract, ValueLifetime,
};
use vyre_megakernel::{
    Artifact, ArtifactValueId, CompileRequest, Digest, ExternalFacts, ResourceLifetime,
    SearchBudget, TargetCompiler, ValidatedCompileRequest,
};

/// vyre-cuda's registration (`vyre_cuda::BACKEND_ID`).
pub fn registration() -> &'static BackendRegistration {
    vyre_driver::backend::backend_registration(vyre_cuda::BACKEND_ID)
        .expect("vyre-cuda is linked, so its registration is listed")
}

/// The registered target compiler, shared by the test binary.
pub fn compiler() -> &'static dyn TargetCompiler {
    static COMPILER: OnceLock<Box<dyn TargetCompiler>> = OnceLock::new();
    COMPILER
        .get_or_init(|| {
            registration()
                .target_compiler()
                .unwrap_or_else(|e| panic!("vyre-cuda registers no usable target compiler: {e}"))
        })
        .as_ref()
}

/// The registered materializer, shared by the test binary. Call it only with a device.
pub fn materializer() -> Arc<dyn ArtifactMaterializer> {
    static MATERIALIZER: OnceLock<Arc<dyn ArtifactMaterializer>> = OnceLock::new();
    MATERIALIZER
        .get_or_init(|| {
            Arc::from(registration().materializer().unwrap_or_else(|e| {
                panic!("a CUDA device is present but the materializer failed: {e}")
            }))
        })
        .clone()
}

/// A validated request with no symbolic dimensions.
pub fn request(graph: ProgramGraph) -> ValidatedCompileRequest {
    request_with_symbols(graph, BTreeMap::new()).expect("a valid graph")
}

/// A validated request binding `symbols` (runtime-sized buffers).
pub fn request_with_symbols(
    graph: ProgramGraph,
    symbols: BTreeMap<String, u64>,
) -> Result<ValidatedCompileRequest, String> {
    CompileRequest::new(
        graph,
        ExternalFacts::new(Digest([0; 32]), symbols),
        SearchBudget::new(64, 1 << 20, 0, 0, 1 << 20),
        1 << 30,
    )
    .validate()
    .map_err(|e| e.to_string())
}

/// The neutral artifact of a validated request.
pub fn compile(request: &ValidatedCompileRequest) -> Artifact {
    vyre_megakernel::compile(request).expect("vyre-megakernel compiles the graph")
}

/// Target-compile and materialize `artifact` with the registered materializer; the error
/// text of whichever step failed.
pub fn instantiate(artifact: &Artifact) -> Result<Box<dyn ArtifactInstance>, String> {
    instantiate_on(materializer().as_ref(), artifact)
}

/// [`instantiate`] with `materializer`.
pub fn instantiate_on(
    materializer: &dyn ArtifactMaterializer,
    artifact: &Artifact,
) -> Result<Box<dyn ArtifactInstance>, String> {
    let payload = compiler()
        .compile(artifact)
        .map_err(|e| format!("target compiler: {e}"))?;
    materializer
        .materialize(artifact, &payload)
        .map_err(|e| format!("materialize: {e}"))
}

/// Submit and wait; the error text of whichever step failed.
pub fn run(instance: &dyn ArtifactInstance, bindings: BindingSet) -> Result<Completion, String> {
    let submission = instance
        .submit(bindings)
        .map_err(|e| format!("submit: {e}"))?;
    submission.wait().map_err(|e| format!("wait: {e}"))
}

/// The artifact value of the graph value named `name`.
pub fn value_id(artifact: &Artifact, name: &str) -> ArtifactValueId {
    artifact
        .resources()
        .iter()
        .find(|r| r.name == name)
        .unwrap_or_else(|| panic!("the artifact has no value named `{name}`"))
        .value
}

/// Host bindings of `values` (graph value name -> bytes) for `artifact`.
pub fn host_bindings(artifact: &Artifact, values: &BTreeMap<String, Vec<u8>>) -> BindingSet {
    let mut bindings = BindingSet::new(artifact.digest());
    for (name, bytes) in values {
        bindings.insert(value_id(artifact, name), BoundResource::Host(bytes.clone()));
    }
    bindings
}

/// Bytes of `count` elements of `element`.
pub fn byte_len(element: &DataType, count: usize) -> usize {
    element
        .packed_size_bytes(count)
        .expect("a representable size")
        .expect("a fixed-width element")
}

/// vyre-reference running `graph`'s nodes one after another in schedule order.
///
/// `external` holds the bytes of the values no node produces, by graph value name. The
/// result maps every graph value name to its bytes after the last node ran.
///
/// Per node, the interpreter's ABI (vyre-reference 0.7.2, `execution/hashmap/mod.rs`):
/// * inputs: one `Value` per buffer with `vyre_reference::is_reference_input` (neither
///   workgroup nor backend-allocated output), in `Program::buffers` order. Each takes the
///   current bytes of the graph value its `GraphInput` binds; a buffer with no input
///   port starts zero-filled (what the reference does for allocated outputs). A
///   backend-allocated buffer is zero-filled by the reference even where a port binds it.
/// * outputs: one `Value` per buffer with `vyre_reference::is_reference_output`
///   (backend-allocated outputs and every `ReadWrite` buffer), in the same order, each
///   cut to its `output_byte_range` where one is declared. A buffer with an output port
///   defines that port's value; a `ReadWrite` buffer bound only as an input updates its
///   value in place (retained state); any other returned buffer is node-local.
pub fn reference_graph(
    graph: &ProgramGraph,
    external: &BTreeMap<String, Vec<u8>>,
) -> Result<BTreeMap<String, Vec<u8>>, String> {
    use vyre_reference::value::Value;
    let names: Vec<&str> = graph.values().iter().map(|v| v.name.as_str()).collect();
    let mut values: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for value in graph.values().iter().filter(|v| v.producer.is_none()) {
        let bytes = external
            .get(&value.name)
            .ok_or_else(|| format!("no bytes for external value `{}`", value.name))?;
        values.insert(value.name.clone(), bytes.clone());
    }
    for node_id in graph.schedule() {
        let node = &graph.nodes()[node_id.0 as usize];
        let input_value = |buffer: &str| {
            node.inputs
                .iter()
                .find(|port| port.buffer == buffer)
                .map(|port| names[port.value.0 as usize])
        };
        let mut inputs = Vec::new();
        for decl in node.program.buffers() {
            if !vyre_reference::is_reference_input(decl) {
                continue;
            }
            let bytes = match input_value(decl.name()) {
                Some(name) => values.get(name).cloned().ok_or_else(|| {
                    format!("node `{}` reads `{name}` before it exists", node.name)
                })?,
                None => vec![0; byte_len(&decl.element(), decl.count() as usize)],
            };
            inputs.push(Value::from(bytes));
        }
        let outputs = vyre_reference::reference_eval(&node.program, &inputs)
            .map_err(|e| format!("node `{}`: {e}", node.name))?;
        let returned = node
            .program
            .buffers()
            .iter()
            .filter(|decl| vyre_reference::is_reference_output(decl));
        for (decl, value) in returned.zip(outputs) {
            let port = node.output_ports.iter().find(|p| p.buffer == decl.name());
            if let Some(port) = port {
                values.insert(port.name.clone(), value.to_bytes());
            } else if let Some(name) = input_value(decl.name()) {
                values.insert(name.to_string(), value.to_bytes());
            }
        }
    }
    Ok(values)
}

/// Differences between `completion` and the oracle's values: every `Output` value in
/// `outputs`, every `Retained` value in `retained`, nothing else, bytes identical.
pub fn completion_mismatches(
    artifact: &Artifact,
    completion: &Completion,
    oracle: &BTreeMap<String, Vec<u8>>,
) -> Vec<String> {
    let mut problems = Vec::new();
    if completion.artifact != artifact.digest() {
        problems.push("completion names another artifact".to_string());
    }
    if completion.device_ns.is_none() {
        problems.push("completion has no device_ns".to_string());
    }
    for (lifetime, returned, what) in [
        (ResourceLifetime::Output, &completion.outputs, "outputs"),
        (ResourceLifetime::Retained, &completion.retained, "retained"),
    ] {
        let expected: BTreeSet<ArtifactValueId> = artifact
            .resources()
            .iter()
            .filter(|r| r.lifetime == lifetime)
            .map(|r| r.value)
            .collect();
        let got: BTreeSet<ArtifactValueId> = returned.keys().copied().collect();
        if got != expected {
            problems.push(format!("{what} holds {got:?}, expected {expected:?}"));
        }
        for resource in artifact
            .resources()
            .iter()
            .filter(|r| r.lifetime == lifetime)
        {
            let Some(bytes) = returned.get(&resource.value) else {
                continue; // reported with the key sets above
            };
            match oracle.get(&resource.name) {
                Some(want) if bytes != want => {
                    problems.push(describe_difference(&resource.name, bytes, want))
                }
                Some(_) => {}
                None => problems.push(format!("the oracle has no value `{}`", resource.name)),
            }
        }
    }
    problems
}

/// Panics unless `completion` matches the oracle byte for byte.
pub fn assert_matches(
    what: &str,
    artifact: &Artifact,
    completion: &Completion,
    oracle: &BTreeMap<String, Vec<u8>>,
) {
    let problems = completion_mismatches(artifact, completion, oracle);
    assert!(problems.is_empty(), "{what}:\n{}", problems.join("\n"));
}

fn describe_difference(name: &str, got: &[u8], want: &[u8]) -> String {
    if got.len() != want.len() {
        return format!("`{name}`: {} bytes, reference {}", got.len(), want.len());
    }
    let first = got.iter().zip(want).position(|(g, w)| g != w).unwrap_or(0);
    let word = first / 4 * 4;
    let end = (word + 4).min(got.len());
    format!(
        "`{name}`: first difference at byte {first}: {:02x?}, reference {:02x?}",
        &got[word..end],
        &want[word..end]
    )
}

/// Error text, asserting it carries a `Fix:` hint.
pub fn fix_text(error: impl std::fmt::Display) -> String {
    let text = error.to_string();
    assert!(text.contains("Fix:"), "error without a Fix: hint: {text}");
    text
}

/// Graphs built the way users write them: each Program names its buffers after the
/// graph values they carry, and each node is added after its producers.
#[derive(Default)]
pub struct GraphBuilder {
    graph: ProgramGraph,
    values: BTreeMap<String, GraphValueId>,
}

impl GraphBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// An external value: a graph input (`Invocation`, read-only) or retained state
    /// (`Retained`, read-write).
    pub fn input(&mut self, name: &str, dtype: DataType, count: u32, lifetime: ValueLifetime) {
        let access = if lifetime == ValueLifetime::Retained {
            BufferAccess::ReadWrite
        } else {
            BufferAccess::ReadOnly
        };
        let contract = ValueContract {
            dtype,
            shape: vec![ShapeDim::Known(u64::from(count))],
            access,
            lifetime,
        };
        let id = self
            .graph
            .add_external_value(name, contract)
            .expect("a fresh value name");
        self.values.insert(name.to_string(), id);
    }

    /// A node reading the values `inputs` and producing `outputs` (value, lifetime), each
    /// through the buffer of the same name in `program`.
    pub fn node(
        &mut self,
        name: &str,
        program: Program,
        inputs: &[&str],
        outputs: &[(&str, ValueLifetime)],
    ) {
        let decl = |buffer: &str| -> BufferDecl {
            program
                .buffers()
                .iter()
                .find(|d| d.name() == buffer)
                .unwrap_or_else(|| panic!("node `{name}` has no buffer `{buffer}`"))
                .clone()
        };
        let ports_in = inputs
            .iter()
            .map(|value| {
                let id = self.values[*value];
                let mut contract = self.graph.values()[id.0 as usize].contract.clone();
                contract.access = decl(value).access();
                GraphInput {
                    buffer: value.to_string(),
                    value: id,
                    contract,
                }
            })
            .collect();
        let ports_out = outputs
            .iter()
            .map(|(value, lifetime)| {
                let d = decl(value);
                GraphOutput {
                    buffer: value.to_string(),
                    name: value.to_string(),
                    contract: ValueContract {
                        dtype: d.element(),
                        shape: vec![ShapeDim::Known(u64::from(d.count()))],
                        access: d.access(),
                        lifetime: *lifetime,
                    },
                    retained_successor_of: None,
                }
            })
            .collect();
        let (_, ids) = self
            .graph
            .add_node(name, program, ports_in, ports_out)
            .unwrap_or_else(|e| panic!("node `{name}`: {e}"));
        for ((value, _), id) in outputs.iter().zip(ids) {
            self.values.insert(value.to_string(), id);
        }
    }

    pub fn build(self) -> ProgramGraph {
        self.graph
    }
}

/// `dst[i] = src[n-1-i] * 3 + k` for `i < n`, stored `stores` times (a long kernel whose
/// result is the one-store kernel's): each node reads another invocation's element of
/// its input, which a fused group without a grid barrier would race on.
pub fn reverse_scale(src: &str, dst: &str, n: u32, k: u32, workgroup: u32, stores: u32) -> Program {
    use vyre_foundation::ir::{Expr, Node};
    let i = Expr::InvocationId { axis: 0 };
    let value = Expr::add(
        Expr::mul(
            Expr::load(src, Expr::sub(Expr::u32(n - 1), i.clone())),
            Expr::u32(3),
        ),
        Expr::u32(k),
    );
    let store = Node::store(dst, i.clone(), value);
    let body = if stores > 1 {
        vec![Node::loop_for(
            "j",
            Expr::u32(0),
            Expr::u32(stores),
            vec![store],
        )]
    } else {
        vec![store]
    };
    Program::wrapped(
        vec![
            BufferDecl::storage(src, 0, BufferAccess::ReadOnly, DataType::U32).with_count(n),
            BufferDecl::output(dst, 1, DataType::U32).with_count(n),
        ],
        [workgroup, 1, 1],
        vec![Node::if_then(Expr::lt(i, Expr::u32(n)), body)],
    )
}

/// A chain of `len` [`reverse_scale`] nodes over `n` u32 elements, value `v0` in and
/// `v<len>` out, with its node programs in order. Workgroup sizes alternate (128, 64), so
/// vyre's fusion keeps several groups.
pub fn reverse_chain(len: u32, n: u32, stores: u32) -> (ProgramGraph, Vec<Program>) {
    let mut graph = GraphBuilder::new();
    graph.input("v0", DataType::U32, n, ValueLifetime::Invocation);
    let mut programs = Vec::new();
    for k in 1..=len {
        let (src, dst) = (format!("v{}", k - 1), format!("v{k}"));
        let lifetime = if k == len {
            ValueLifetime::Output
        } else {
            ValueLifetime::Invocation
        };
        let workgroup = if k % 2 == 0 { 64 } else { 128 };
        let program = reverse_scale(&src, &dst, n, k, workgroup, stores);
        programs.push(program.clone());
        graph.node(&format!("node{k}"), program, &[&src], &[(&dst, lifetime)]);
    }
    (graph.build(), programs)
}
