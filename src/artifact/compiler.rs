//! vyre-cuda's `TargetCompiler`: an artifact's nodes lowered by vyre-cuda's own emitter
//! into one payload. Pure and deterministic: no device, the same artifact gives the same
//! bytes.
//!
//! Each node runs as its own kernel, in the artifact's stage order, all of them in one
//! PTX module (one JIT compilation when materialized). A fusion group's nodes run back to
//! back on one stream, each over its whole grid before the next starts: the graph's
//! nodes in order, which is what vyre-reference computes. (vyre-megakernel's fusion trusts
//! declared lifetimes and would race where a node reads another invocation's element of
//! what the group wrote; separate launches cannot.)

use super::payload::{NodeKernel, Payload, FORMAT_VERSION};
use super::{node_programs, Values};
use crate::backend::{binding_order, reference_grid_for, validated};
use crate::codegen::{emit_timed, PtxTarget};
use crate::compat::PAYLOAD_FORMAT;
use std::collections::BTreeMap;
use vyre_foundation::ir::Program;
use vyre_megakernel::{
    AbiAccess, Artifact, ArtifactNodeId, ResourceLifetime, TargetCompileError, TargetCompiler,
    TargetEntryPoint, TargetPayload, TargetPayloadFormat, TargetProfile, TargetResourceAccess,
    TargetResourceBinding, TargetResourceMemory,
};

/// The PTX every payload is written for: sm_80 at PTX ISA 7.0, which every driver since
/// CUDA 11.0 loads and every GPU since the A100 runs (the driver JIT-compiles it for newer
/// ones).
pub(crate) fn payload_target() -> PtxTarget {
    PtxTarget::sm80()
}

/// The payload format: [`PAYLOAD_FORMAT`] at this byte format's version.
pub(crate) fn payload_format() -> TargetPayloadFormat {
    TargetPayloadFormat::new(PAYLOAD_FORMAT, FORMAT_VERSION).expect("a valid constant format")
}

/// What the emitter supports: sm_80 and newer, CUDA's block limits, static shared memory
/// up to 48 KiB per block (the most a block may declare statically), 32-lane warps.
pub(crate) fn payload_profile() -> TargetProfile {
    TargetProfile::new(PAYLOAD_FORMAT, 80, [1024, 1024, 64], 1024, 48 << 10, 32)
        .expect("a valid constant profile")
}

/// The registered compiler.
pub(crate) struct CudaTargetCompiler {
    format: TargetPayloadFormat,
    profile: TargetProfile,
}

impl CudaTargetCompiler {
    pub(crate) fn new() -> Self {
        Self {
            format: payload_format(),
            profile: payload_profile(),
        }
    }
}

impl TargetCompiler for CudaTargetCompiler {
    fn format(&self) -> &TargetPayloadFormat {
        &self.format
    }

    fn profile(&self) -> &TargetProfile {
        &self.profile
    }

    fn compile(&self, artifact: &Artifact) -> Result<TargetPayload, TargetCompileError> {
        let programs = node_programs(artifact).map_err(TargetCompileError::InvalidArtifact)?;
        let values =
            Values::of(artifact, &programs).map_err(TargetCompileError::InvalidArtifact)?;
        let mut kernels = Vec::with_capacity(programs.len());
        let mut grids = BTreeMap::new();
        for node in super::run_order(artifact) {
            let unsupported =
                |why: String| TargetCompileError::Unsupported(format!("node {}: {why}", node.0));
            let program = programs
                .get(&node)
                .ok_or_else(|| unsupported("the artifact lacks it".into()))?;
            let (kernel, grid) =
                compile_node(artifact, &values, node, program).map_err(unsupported)?;
            kernels.push(kernel);
            grids.insert(node, grid);
        }
        let entries = entry_points(artifact, &values, &programs, &grids)
            .map_err(TargetCompileError::InvalidArtifact)?;
        let payload = Payload {
            target: payload_target(),
            value_slots: values.slots.clone(),
            nodes: kernels,
        };
        TargetPayload::new(
            artifact,
            self.format.clone(),
            self.profile.clone(),
            entries,
            payload.encode(),
        )
        .map_err(Into::into)
    }
}

/// One node's kernel and the grid the reference runs it on.
fn compile_node(
    artifact: &Artifact,
    values: &Values,
    node: ArtifactNodeId,
    program: &Program,
) -> Result<(NodeKernel, [u32; 3]), String> {
    let program = validated(program).map_err(|e| e.to_string())?;
    // Timed: a submission reads its device time from the kernels' own clock stamps.
    let emitted = emit_timed(
        &program,
        None,
        payload_target(),
        &format!("vyre_node{}", node.0),
    )
    .map_err(|e| e.to_string())?;
    let abi = &emitted.abi;
    let order = binding_order(&program, abi);
    let slots = order
        .iter()
        .map(|&index| values.slot_of_buffer(artifact, node, &abi.bindings[index].name))
        .collect::<Result<Vec<u32>, String>>()?;
    let mut lens = vec![0; abi.bindings.len()];
    for (&index, &slot) in order.iter().zip(&slots) {
        lens[index] = values.slot_bytes[slot as usize];
    }
    let grid = reference_grid_for(&program, abi, &lens).map_err(|e| e.to_string())?;
    let kernel = NodeKernel {
        node: node.0,
        slots,
        entries: emitted.entries(),
    };
    Ok((kernel, grid))
}

/// One entry point per fusion group (named `vyre_group<id>`), with the first member's
/// geometry and every value the group's nodes touch, by canonical ABI slot.
fn entry_points(
    artifact: &Artifact,
    values: &Values,
    programs: &BTreeMap<ArtifactNodeId, Program>,
    grids: &BTreeMap<ArtifactNodeId, [u32; 3]>,
) -> Result<Vec<TargetEntryPoint>, String> {
    artifact
        .fusion()
        .iter()
        .map(|group| {
            let mut members = group.members.clone();
            members.sort();
            let first = *members
                .first()
                .ok_or_else(|| format!("fusion group {} is empty", group.id.0))?;
            let grid = grids.get(&first).copied().unwrap_or([1, 1, 1]);
            let program = programs
                .get(&first)
                .ok_or_else(|| format!("fusion group {} names a missing node", group.id.0))?;
            let touched = members
                .iter()
                .flat_map(|member| values.node_values(artifact, *member))
                .collect::<std::collections::BTreeSet<_>>();
            Ok(TargetEntryPoint {
                name: format!("vyre_group{}", group.id.0),
                node: first,
                workgroup_size: program.workgroup_size(),
                grid_size: grid.map(|axis| axis.max(1)),
                dynamic_shared_bytes: 0,
                resource_bindings: touched
                    .into_iter()
                    .map(|value| resource_binding(artifact, value))
                    .collect(),
            })
        })
        .collect()
}

fn resource_binding(artifact: &Artifact, value: u32) -> TargetResourceBinding {
    let abi = artifact.abi().resources.iter().find(|r| r.value.0 == value);
    let access = abi.map_or(AbiAccess::ReadWrite, |r| r.access);
    let constant = artifact
        .resources()
        .iter()
        .any(|r| r.value.0 == value && r.lifetime == ResourceLifetime::Constant);
    TargetResourceBinding {
        resource: vyre_megakernel::ArtifactValueId(value),
        group: 0,
        slot: abi.map_or(value, |r| r.slot),
        memory: if constant || access == AbiAccess::Uniform {
            TargetResourceMemory::Constant
        } else {
            TargetResourceMemory::Global
        },
        access: match access {
            AbiAccess::ReadOnly | AbiAccess::Uniform => TargetResourceAccess::ReadOnly,
            AbiAccess::WriteOnly => TargetResourceAccess::WriteOnly,
            AbiAccess::ReadWrite => TargetResourceAccess::ReadWrite,
        },
    }
}
