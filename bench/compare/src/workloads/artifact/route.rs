//! vyre 0.7's production route, as a user of a backend registration takes it:
//! `ProgramGraph` -> `vyre_megakernel::compile` -> `Artifact` -> the registration's
//! `TargetCompiler::compile` -> `TargetPayload` -> its `ArtifactMaterializer::materialize`
//! -> `ArtifactInstance::submit(BindingSet)` -> `Submission::wait` -> `Completion`.

use crate::measure::R;
use crate::programs;
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};
use vyre_driver::{ArtifactInstance, ArtifactMaterializer, BindingSet, BoundResource, Completion};
use vyre_foundation::ir::{
    BufferAccess, DataType, GraphInput, GraphOutput, Program, ProgramGraph, ShapeDim,
    ValueContract, ValueLifetime,
};
use vyre_megakernel::{
    Artifact, ArtifactValueId, CompileRequest, Digest, ExternalFacts, SearchBudget, TargetCompiler,
    TargetPayload,
};

/// The registration id of a report engine (`None` for the floor).
pub fn registration_id(engine: &str) -> Option<&'static str> {
    match engine {
        "vyre-cuda" => Some(vyre_cuda::BACKEND_ID),
        "incumbent" => Some(vyre_driver_cuda::CUDA_BACKEND_ID),
        _ => None,
    }
}

/// A panic's text.
pub fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".into())
}

/// `f`, with a panic turned into an error naming `what`.
pub fn guarded<T>(what: &str, f: impl FnOnce() -> R<T>) -> R<T> {
    std::panic::catch_unwind(AssertUnwindSafe(f))
        .unwrap_or_else(|panic| Err(format!("{what} panicked: {}", panic_text(&*panic))))
}

/// One engine's two facets, from its registration.
pub struct Route {
    pub compiler: Box<dyn TargetCompiler>,
    pub materializer: Box<dyn ArtifactMaterializer>,
    /// Wall time of `registration.materializer()` (the device acquisition).
    pub acquire: Duration,
}

impl Route {
    /// `backend_registration(id)`, its `target_compiler()` and `materializer()` (timed).
    pub fn open(engine: &str) -> R<Self> {
        let id = registration_id(engine).ok_or_else(|| format!("{engine}: no registration"))?;
        guarded("opening the registration's facets", || {
            let registration = vyre_driver::backend::backend_registration(id)
                .map_err(|e| format!("backend_registration({id:?}): {e}"))?;
            let compiler = registration
                .target_compiler()
                .map_err(|e| format!("registration {id:?}: target_compiler(): {e}"))?;
            let started = Instant::now();
            let materializer = registration
                .materializer()
                .map_err(|e| format!("registration {id:?}: materializer(): {e}"))?;
            Ok(Self {
                compiler,
                materializer,
                acquire: started.elapsed(),
            })
        })
    }

    /// `TargetCompiler::compile`.
    pub fn compile(&self, artifact: &Artifact) -> R<TargetPayload> {
        guarded("TargetCompiler::compile", || {
            self.compiler
                .compile(artifact)
                .map_err(|e| format!("TargetCompiler::compile: {e}"))
        })
    }

    /// `ArtifactMaterializer::materialize`.
    pub fn materialize(
        &self,
        artifact: &Artifact,
        payload: &TargetPayload,
    ) -> R<Box<dyn ArtifactInstance>> {
        guarded("ArtifactMaterializer::materialize", || {
            self.materializer
                .materialize(artifact, payload)
                .map_err(|e| format!("ArtifactMaterializer::materialize: {e}"))
        })
    }
}

/// Split timing of one submission: `submit` returned after the first, `wait` after both.
pub struct Submitted {
    pub completion: Completion,
    pub submit: Duration,
    pub total: Duration,
}

/// `instance.submit(bindings)` then `wait()`, timed.
pub fn submit_wait(instance: &dyn ArtifactInstance, bindings: BindingSet) -> R<Submitted> {
    guarded("submit/wait", || {
        let started = Instant::now();
        let submission = instance
            .submit(bindings)
            .map_err(|e| format!("ArtifactInstance::submit: {e}"))?;
        let submit = started.elapsed();
        let completion = submission
            .wait()
            .map_err(|e| format!("Submission::wait: {e}"))?;
        Ok(Submitted {
            completion,
            submit,
            total: started.elapsed(),
        })
    })
}

/// `vyre_megakernel::compile` of `graph` (a validated request: no symbols, no constants,
/// a search budget that lets the fusion search run, a 64 MiB artifact bound).
pub fn neutral_compile(graph: ProgramGraph) -> R<Artifact> {
    guarded("vyre_megakernel::compile", || {
        let request = CompileRequest::new(
            graph,
            ExternalFacts::new(Digest([0; 32]), BTreeMap::new()),
            SearchBudget::new(128, 1_000_000, 0, 0, 1_000_000_000),
            64 << 20,
        )
        .validate()
        .map_err(|e| format!("CompileRequest::validate: {e}"))?;
        vyre_megakernel::compile(&request).map_err(|e| format!("vyre_megakernel::compile: {e}"))
    })
}

/// The canonical value named `name` (graph value names are the Programs' buffer names).
pub fn value(artifact: &Artifact, name: &str) -> R<ArtifactValueId> {
    artifact
        .resources()
        .iter()
        .find(|r| r.name == name)
        .map(|r| r.value)
        .ok_or_else(|| format!("the artifact has no value `{name}`"))
}

/// Host bindings of `artifact`: each `(value name, bytes)`.
pub fn host_bindings<S: AsRef<str>>(
    artifact: &Artifact,
    values: Vec<(S, Vec<u8>)>,
) -> R<BindingSet> {
    let mut bindings = BindingSet::new(artifact.digest());
    for (name, bytes) in values {
        bindings.insert(value(artifact, name.as_ref())?, BoundResource::Host(bytes));
    }
    Ok(bindings)
}

/// The bytes of output value `name` in `completion` (outputs, then retained values).
pub fn output(artifact: &Artifact, completion: &Completion, name: &str) -> R<Vec<u8>> {
    let id = value(artifact, name)?;
    completion
        .outputs
        .get(&id)
        .or_else(|| completion.retained.get(&id))
        .cloned()
        .ok_or_else(|| format!("the completion has no value `{name}`"))
}

/// The kernels of an `count`-kernel chain over `n` elements (`programs::chain_kernel`).
pub fn chain_kernels(count: usize, n: u32, salt: u32) -> Vec<Program> {
    (0..count)
        .map(|k| programs::chain_kernel(k, n, salt))
        .collect()
}

fn u32_contract(n: u32, access: BufferAccess, lifetime: ValueLifetime) -> ValueContract {
    ValueContract {
        dtype: DataType::U32,
        shape: vec![ShapeDim::Known(u64::from(n))],
        access,
        lifetime,
    }
}

/// The chain as one `ProgramGraph`, written the way `ProgramGraph::from_program` lifts a
/// Program (an output buffer is a read-write value): external input `v0`, node `k{k}`
/// reading `v{k}` and producing `v{k+1}`; the values between kernels are per-invocation
/// temporaries, the last one the output.
pub fn chain_graph(kernels: &[Program], n: u32) -> R<ProgramGraph> {
    let mut graph = ProgramGraph::new();
    let first = u32_contract(n, BufferAccess::ReadOnly, ValueLifetime::Invocation);
    let mut current = graph
        .add_external_value("v0", first)
        .map_err(|e| e.to_string())?;
    for (k, program) in kernels.iter().enumerate() {
        let last = k + 1 == kernels.len();
        let lifetime = if last {
            ValueLifetime::Output
        } else {
            ValueLifetime::Invocation
        };
        let (input, output) = (format!("v{k}"), format!("v{}", k + 1));
        let (_, outputs) = graph
            .add_node(
                format!("k{k}"),
                program.clone(),
                vec![GraphInput {
                    buffer: input,
                    value: current,
                    contract: u32_contract(n, BufferAccess::ReadOnly, ValueLifetime::Invocation),
                }],
                vec![GraphOutput {
                    buffer: output.clone(),
                    name: output,
                    contract: u32_contract(n, BufferAccess::ReadWrite, lifetime),
                    retained_successor_of: None,
                }],
            )
            .map_err(|e| format!("ProgramGraph::add_node(k{k}): {e}"))?;
        current = outputs[0];
    }
    Ok(graph)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups(kernels: &[Program]) -> usize {
        let graph = chain_graph(kernels, 1024).expect("chain graph");
        neutral_compile(graph).expect("compile").fusion().len()
    }

    /// The chains keep one fusion group (one module) per kernel, and it is the workgroup
    /// sizes that do it: the same kernels at one workgroup size fuse.
    #[test]
    fn chain_kernels_stay_separate_groups_only_through_their_workgroup_sizes() {
        for n in [1, 4, 16] {
            assert_eq!(groups(&chain_kernels(n, 1024, 0)), n);
        }
        let uniform: Vec<Program> = chain_kernels(16, 1024, 0)
            .into_iter()
            .map(|mut p| {
                p.workgroup_size = [256, 1, 1];
                p
            })
            .collect();
        let fused = groups(&uniform);
        println!("16 kernels at one workgroup size: {fused} fusion groups");
        assert!(fused < 16);
    }
}
