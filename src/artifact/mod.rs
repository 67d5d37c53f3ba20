//! vyre 0.7's production route on vyre-cuda: the registered `TargetCompiler`
//! ([`compiler`], pure) and `ArtifactMaterializer` ([`materializer`], on the device), and
//! the payload format between them ([`payload`]).

pub(crate) mod compiler;
pub(crate) mod materializer;
pub(crate) mod payload;

use std::collections::BTreeMap;
use vyre_foundation::ir::Program;
use vyre_megakernel::{Artifact, ArtifactNodeId, DependencyEndpoint, DependencyKind};

/// The PTX module a vyre-cuda target payload loads: every node's kernel, written by
/// vyre-cuda's emitter (what the materializer hands the driver's JIT, with
/// [`crate::ARTIFACT_MODULES_ENV`] unset).
///
/// # Errors
/// When the payload is not a vyre-cuda payload of this version.
pub fn payload_ptx(payload: &vyre_megakernel::TargetPayload) -> Result<String, crate::CudaError> {
    let decoded = payload::Payload::decode(payload.bytes()).map_err(|why| {
        crate::CudaError::invalid_input(
            format!("not a vyre-cuda target payload: {why}"),
            "pass a payload compiled by vyre-cuda's target compiler",
        )
    })?;
    let entries: Vec<_> = decoded.nodes.iter().map(|node| &node.entries).collect();
    Ok(crate::codegen::compose_module(
        decoded.target,
        &entries,
        "an artifact",
    ))
}

/// The order the nodes run in: by the stage of their fusion group, then by id (a node's
/// inputs exist before it is added to the graph, so ids order a stage's producers first).
pub(crate) fn run_order(artifact: &Artifact) -> Vec<ArtifactNodeId> {
    let mut nodes: Vec<(u32, ArtifactNodeId)> = artifact
        .fusion()
        .iter()
        .flat_map(|group| group.members.iter().map(move |&node| (group.stage, node)))
        .collect();
    nodes.sort();
    nodes.into_iter().map(|(_, node)| node).collect()
}

/// The program of `node`, decoded from its canonical wire.
pub(crate) fn node_program(artifact: &Artifact, node: ArtifactNodeId) -> Result<Program, String> {
    let record = artifact
        .nodes()
        .iter()
        .find(|record| record.id == node)
        .ok_or_else(|| format!("the artifact has no node {}", node.0))?;
    Program::from_wire(&record.program).map_err(|error| {
        format!(
            "node {} (`{}`) does not decode: {error}",
            node.0, record.name
        )
    })
}

/// Every node's program, decoded once.
pub(crate) fn node_programs(
    artifact: &Artifact,
) -> Result<BTreeMap<ArtifactNodeId, Program>, String> {
    artifact
        .nodes()
        .iter()
        .map(|record| Ok((record.id, node_program(artifact, record.id)?)))
        .collect()
}

/// The artifact's values and the storage each one uses: its own, except a retained value's
/// successor, which is the buffer its node updated in place.
pub(crate) struct Values {
    /// Storage slot of each value, indexed by `ArtifactValueId`.
    pub(crate) slots: Vec<u32>,
    /// Byte length of each slot.
    pub(crate) slot_bytes: Vec<usize>,
}

impl Values {
    /// `programs` are the nodes' ([`node_programs`]).
    pub(crate) fn of(
        artifact: &Artifact,
        programs: &BTreeMap<ArtifactNodeId, Program>,
    ) -> Result<Self, String> {
        let count = artifact
            .resources()
            .iter()
            .map(|r| r.value.0 as usize + 1)
            .max()
            .unwrap_or(0);
        let mut slot_bytes = vec![0; count];
        for resource in artifact.resources() {
            slot_bytes[resource.value.0 as usize] = usize::try_from(resource.byte_count)
                .map_err(|_| format!("value `{}` does not fit in memory", resource.name))?;
        }
        let mut values = Self {
            slots: (0..count as u32).collect(),
            slot_bytes,
        };
        for entry in &artifact.abi().entries {
            let program = programs.get(&entry.node).ok_or_else(|| {
                format!(
                    "the ABI names node {}, which the artifact lacks",
                    entry.node.0
                )
            })?;
            for &output in &entry.outputs {
                let name = values.name(artifact, output.0);
                if program.buffers().iter().any(|b| b.name() == name) {
                    continue;
                }
                let prior = retained_prior(artifact, entry.node, output.0).ok_or_else(|| {
                    format!(
                        "value `{name}` is an output of node {} but no buffer of its program has that name; vyre's artifact route binds a node's buffers to graph values by name: name each graph value after the buffer it connects",
                        entry.node.0
                    )
                })?;
                values.slots[output.0 as usize] = values.slots[prior as usize];
            }
        }
        Ok(values)
    }

    fn name<'a>(&self, artifact: &'a Artifact, value: u32) -> &'a str {
        artifact
            .resources()
            .iter()
            .find(|r| r.value.0 == value)
            .map_or("", |r| r.name.as_str())
    }

    /// The values `node` reads or writes.
    pub(crate) fn node_values(&self, artifact: &Artifact, node: ArtifactNodeId) -> Vec<u32> {
        artifact
            .abi()
            .entries
            .iter()
            .filter(|entry| entry.node == node)
            .flat_map(|entry| entry.inputs.iter().chain(&entry.outputs))
            .map(|value| value.0)
            .collect()
    }

    /// The storage slot of `node`'s buffer `name`: that of the node's value of that name.
    pub(crate) fn slot_of_buffer(
        &self,
        artifact: &Artifact,
        node: ArtifactNodeId,
        name: &str,
    ) -> Result<u32, String> {
        self.node_values(artifact, node)
            .into_iter()
            .find(|&value| self.name(artifact, value) == name)
            .map(|value| self.slots[value as usize])
            .ok_or_else(|| {
                format!(
                    "buffer `{name}` connects to no value of that name; vyre's artifact route binds a node's buffers to graph values by name: name each graph value after the buffer it connects"
                )
            })
    }
}

/// The value a retained successor `value` (an output of `node`) replaces: the input of
/// `node` that its retained dependency edge comes from.
fn retained_prior(artifact: &Artifact, node: ArtifactNodeId, value: u32) -> Option<u32> {
    let edge = artifact.dependencies().iter().find(|edge| {
        edge.kind == DependencyKind::Retained
            && edge.value.is_some_and(|v| v.0 == value)
            && edge.to == DependencyEndpoint::Node(node)
    })?;
    match edge.from {
        DependencyEndpoint::Value(prior) => Some(prior.0),
        DependencyEndpoint::Node(producer) => {
            let produced: Vec<u32> = artifact
                .abi()
                .entries
                .iter()
                .filter(|entry| entry.node == producer)
                .flat_map(|entry| entry.outputs.iter().map(|v| v.0))
                .collect();
            let inputs = artifact
                .abi()
                .entries
                .iter()
                .find(|entry| entry.node == node)?;
            let mut candidates = inputs.inputs.iter().filter(|v| produced.contains(&v.0));
            let prior = candidates.next()?.0;
            candidates.next().is_none().then_some(prior)
        }
    }
}
