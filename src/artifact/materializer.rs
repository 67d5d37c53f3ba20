//! vyre-cuda's `ArtifactMaterializer`: admits a payload of its own format for the artifact
//! it names, loads every node's kernel as one module, and runs submissions asynchronously
//! (`submit` enqueues; [`Submission::wait`] reads back).

use super::compiler::{payload_format, payload_profile};
use super::node_program;
use super::payload::Payload;
use crate::backend::artifact::{
    ArtifactFlight, ArtifactNode, ArtifactSlots, LoadedArtifact, SlotBinding,
};
use crate::codegen::{reference_program, PtxTarget};
use crate::compat::BACKEND_ID;
use crate::error::CudaError;
use crate::CudaBackend;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use vyre_driver::{
    ArtifactInstance, ArtifactMaterializer, BackendError, BindingSet, BoundResource, Completion,
    Device, DeviceIdentity, Resource, Submission,
};
use vyre_megakernel::{
    Artifact, ArtifactNodeId, ArtifactValueId, Digest, ResourceLifetime, TargetPayload,
    TargetPayloadFormat, TargetProfile,
};

/// Environment variable: how many modules an artifact's kernels are split into, compiled
/// by the driver on that many threads (default 1: one module, one JIT compilation).
pub const ARTIFACT_MODULES_ENV: &str = "VYRE_CUDA_ARTIFACT_MODULES";

fn invalid(what: impl Into<String>, fix: impl Into<String>) -> BackendError {
    CudaError::invalid_input(what, fix).into()
}

/// The device a materializer loads onto.
struct CudaArtifactDevice {
    backend: CudaBackend,
    identity: DeviceIdentity,
    format: TargetPayloadFormat,
    profile: TargetProfile,
}

impl Device for CudaArtifactDevice {
    fn identity(&self) -> &DeviceIdentity {
        &self.identity
    }

    fn target_format(&self) -> &TargetPayloadFormat {
        &self.format
    }

    fn target_profile(&self) -> &TargetProfile {
        &self.profile
    }

    fn is_healthy(&self) -> bool {
        !self.backend.device_lost()
    }
}

/// The registered materializer: one `CudaBackend` (its resident table included).
pub(crate) struct CudaMaterializer {
    device: CudaArtifactDevice,
    modules: usize,
}

impl CudaBackend {
    /// An `ArtifactMaterializer` on this backend (what vyre's registration hands out is
    /// one on a backend of its own). Its artifacts use this backend's device, caches, pools
    /// and options (`CudaOptions::small_dispatch_bytes` sizes their packed lane), and its
    /// resident buffers are this backend's: a buffer from
    /// [`CudaBackend::allocate_resident`] binds to their submissions.
    pub fn artifact_materializer(&self) -> Box<dyn ArtifactMaterializer> {
        Box::new(CudaMaterializer::on(self.clone()))
    }
}

impl CudaMaterializer {
    pub(crate) fn new() -> Result<Self, CudaError> {
        Ok(Self::on(CudaBackend::new()?))
    }

    fn on(backend: CudaBackend) -> Self {
        let modules = std::env::var(ARTIFACT_MODULES_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(1)
            .max(1);
        let info = backend.device_info();
        let identity = DeviceIdentity {
            backend: BACKEND_ID,
            device: format!("{} (ordinal {})", info.name, info.ordinal),
            generation: backend.core().handles.generation(),
        };
        Self {
            device: CudaArtifactDevice {
                backend,
                identity,
                format: payload_format(),
                profile: payload_profile(),
            },
            modules,
        }
    }

    fn backend(&self) -> &CudaBackend {
        &self.device.backend
    }

    /// Checks that `payload` is ours, for `artifact`, and loadable on this device.
    fn admit(&self, artifact: &Artifact, payload: &TargetPayload) -> Result<Payload, BackendError> {
        let recompile = "compile the artifact again with vyre-cuda's registered target compiler";
        if payload.neutral_artifact() != artifact.digest() {
            return Err(invalid(
                "the target payload was compiled for another artifact",
                recompile,
            ));
        }
        if payload.format() != &self.device.format {
            return Err(invalid(
                format!(
                    "target payload format `{}` v{} is not vyre-cuda's `{}` v{}",
                    payload.format().identity(),
                    payload.format().version(),
                    self.device.format.identity(),
                    self.device.format.version()
                ),
                recompile,
            ));
        }
        if payload.profile() != &self.device.profile {
            return Err(invalid(
                "the target payload was compiled for another profile than this device's",
                recompile,
            ));
        }
        let decoded = Payload::decode(payload.bytes())
            .map_err(|why| invalid(format!("the target payload is malformed: {why}"), recompile))?;
        self.check_shape(artifact, payload, &decoded)
            .map_err(|why| {
                invalid(
                    format!("the target payload does not fit its artifact: {why}"),
                    recompile,
                )
            })?;
        self.check_target(decoded.target)?;
        Ok(decoded)
    }

    fn check_shape(
        &self,
        artifact: &Artifact,
        payload: &TargetPayload,
        decoded: &Payload,
    ) -> Result<(), String> {
        let mut nodes: Vec<u32> = decoded.nodes.iter().map(|n| n.node).collect();
        nodes.sort_unstable();
        let mut expected: Vec<u32> = artifact.nodes().iter().map(|n| n.id.0).collect();
        expected.sort_unstable();
        if nodes != expected {
            return Err(format!(
                "it has kernels for nodes {nodes:?}, the artifact has nodes {expected:?}"
            ));
        }
        if payload.entries().len() != artifact.fusion().len() {
            return Err(format!(
                "{} entry point(s) for {} fusion group(s)",
                payload.entries().len(),
                artifact.fusion().len()
            ));
        }
        let values = artifact.resources().len();
        if decoded.value_slots.len() < values
            || decoded
                .value_slots
                .iter()
                .any(|&slot| slot as usize >= decoded.value_slots.len())
        {
            return Err("its value slots do not cover the artifact's values".into());
        }
        Ok(())
    }

    fn check_target(&self, target: PtxTarget) -> Result<(), BackendError> {
        let device = self.backend().target();
        if target.sm() > device.sm() || target.isa() > device.isa() {
            return Err(invalid(
                format!(
                    "the payload's PTX is for sm_{} at ISA {}; this device and driver run sm_{} up to ISA {}",
                    target.sm(),
                    target.isa(),
                    device.sm(),
                    device.isa()
                ),
                "run it on a newer GPU or driver",
            ));
        }
        Ok(())
    }
}

impl ArtifactMaterializer for CudaMaterializer {
    fn device(&self) -> &dyn Device {
        &self.device
    }

    fn allocate_resident(&self, byte_len: usize) -> Result<Resource, BackendError> {
        Ok(self.backend().allocate_resident(byte_len)?)
    }

    fn upload_resident(&self, resource: &Resource, bytes: &[u8]) -> Result<(), BackendError> {
        Ok(self.backend().upload_resident(resource, bytes)?)
    }

    fn upload_resident_at(
        &self,
        resource: &Resource,
        offset_bytes: usize,
        bytes: &[u8],
    ) -> Result<(), BackendError> {
        Ok(self
            .backend()
            .upload_resident_at(resource, offset_bytes, bytes)?)
    }

    fn free_resident(&self, resource: Resource) -> Result<(), BackendError> {
        Ok(self.backend().free_resident(resource)?)
    }

    fn materialize(
        &self,
        artifact: &Artifact,
        payload: &TargetPayload,
    ) -> Result<Box<dyn ArtifactInstance>, BackendError> {
        let decoded = self.admit(artifact, payload)?;
        let slot_count = decoded.value_slots.len();
        let mut slot_bytes = vec![0; slot_count];
        let mut caller_slots = vec![false; slot_count];
        let mut values = BTreeMap::new();
        for resource in artifact.resources() {
            let slot = decoded.value_slots[resource.value.0 as usize] as usize;
            slot_bytes[slot] = usize::try_from(resource.byte_count).unwrap_or(usize::MAX);
            values.insert(
                resource.value,
                (slot, resource.lifetime, resource.name.clone()),
            );
        }
        let produced_values: BTreeSet<ArtifactValueId> = artifact
            .abi()
            .entries
            .iter()
            .flat_map(|entry| entry.outputs.iter().copied())
            .collect();
        // Values no node produces: the caller binds them.
        let external: Vec<ArtifactValueId> = values
            .keys()
            .filter(|value| !produced_values.contains(value))
            .copied()
            .collect();
        for value in &external {
            caller_slots[values[value].0] = true;
        }
        let returned: Arc<[(ArtifactValueId, bool)]> = values
            .iter()
            .filter_map(|(value, (_, lifetime, _))| match lifetime {
                ResourceLifetime::Output => Some((*value, false)),
                ResourceLifetime::Retained => Some((*value, true)),
                _ => None,
            })
            .collect();
        let reads = returned.iter().map(|(value, _)| values[value].0).collect();
        let nodes = decoded
            .nodes
            .into_iter()
            .map(|kernel| {
                let program = node_program(artifact, ArtifactNodeId(kernel.node))
                    .map_err(|why| invalid(why, "compile the artifact again"))?;
                let program = reference_program(&program)
                    .map_err(CudaError::from)?
                    .into_owned();
                if kernel.slots.iter().any(|&slot| slot as usize >= slot_count) {
                    return Err(invalid(
                        "a kernel binds a storage slot the payload lacks",
                        "compile the artifact again",
                    ));
                }
                Ok(ArtifactNode {
                    program,
                    entries: kernel.entries,
                    slots: kernel.slots.iter().map(|&slot| slot as usize).collect(),
                })
            })
            .collect::<Result<Vec<_>, BackendError>>()?;
        let slots = ArtifactSlots {
            bytes: slot_bytes,
            caller: caller_slots,
            reads,
        };
        let loaded = self
            .backend()
            .load_artifact(decoded.target, nodes, slots, self.modules)?;
        // The caller's values a node takes as an input: the ones a submission must bind.
        let required = external
            .into_iter()
            .filter(|value| !loaded.starts_zeroed(values[value].0))
            .collect();
        Ok(Box::new(CudaArtifactInstance {
            artifact: artifact.digest(),
            payload: payload.digest(),
            device: self.device.identity.clone(),
            backend: self.backend().clone(),
            loaded: Arc::new(loaded),
            values,
            required,
            returned,
        }))
    }
}

/// One materialized artifact.
struct CudaArtifactInstance {
    artifact: Digest,
    payload: Digest,
    device: DeviceIdentity,
    backend: CudaBackend,
    loaded: Arc<LoadedArtifact>,
    /// Each value's storage slot, lifetime and name.
    values: BTreeMap<ArtifactValueId, (usize, ResourceLifetime, String)>,
    /// The values every submission must bind (see `LoadedArtifact::starts_zeroed`).
    required: Vec<ArtifactValueId>,
    /// The Output and Retained values a completion returns (`true`: retained), in the
    /// order their slots are read.
    returned: Arc<[(ArtifactValueId, bool)]>,
}

impl CudaArtifactInstance {
    /// How `bindings` bind each storage slot; every check before any device work.
    fn slot_bindings<'b>(
        &self,
        bindings: &'b BindingSet,
    ) -> Result<Vec<SlotBinding<'b>>, BackendError> {
        let mut slots: Vec<SlotBinding<'b>> = (0..self.loaded.slot_count())
            .map(|_| SlotBinding::Transient)
            .collect();
        for (value, bound) in bindings.resources() {
            let (slot, _, name) = self.values.get(value).ok_or_else(|| {
                invalid(
                    format!("value {} is bound but the artifact has no such value", value.0),
                    "bind only the artifact's values (ArtifactSession::resource gives them by name)",
                )
            })?;
            let bytes = self.loaded.slot_bytes(*slot);
            slots[*slot] = match bound {
                // Host bytes bound to a value that starts zeroed are its initializer,
                // ignored as vyre-reference ignores them, but they must cover it.
                BoundResource::Host(host)
                    if self.loaded.starts_zeroed(*slot) && host.len() < bytes =>
                {
                    return Err(invalid(
                        format!(
                            "value `{name}` starts zeroed (an output, or a buffer no node takes as an input) and is bound to {} host byte(s) as its initializer; it has {bytes}",
                            host.len()
                        ),
                        format!("bind at least {bytes} bytes to `{name}`, or leave it unbound"),
                    ))
                }
                // A runtime-sized value (no declared bytes) takes any length, as the
                // reference's runtime-sized buffers do.
                BoundResource::Host(host)
                    if !self.loaded.starts_zeroed(*slot) && bytes > 0 && host.len() != bytes =>
                {
                    return Err(invalid(
                        format!(
                            "value `{name}` is bound to {} host byte(s); it has {bytes}",
                            host.len()
                        ),
                        format!("bind exactly {bytes} bytes to `{name}`"),
                    ))
                }
                BoundResource::Host(host) => SlotBinding::Host(host),
                BoundResource::Resident(resource) => {
                    let core = self.backend.core();
                    let handle = core.resident_id(resource)?;
                    let held = core.resident(handle)?.len();
                    if held < bytes {
                        return Err(invalid(
                            format!("value `{name}` ({bytes} bytes) is bound to a resident buffer of {held} byte(s)"),
                            format!("bind a resident buffer of at least {bytes} bytes to `{name}`"),
                        ));
                    }
                    SlotBinding::Resident(handle, if bytes == 0 { held } else { bytes })
                }
            };
        }
        if let Some(missing) = self
            .required
            .iter()
            .find(|value| !bindings.resources().contains_key(value))
        {
            let name = self
                .values
                .get(missing)
                .map_or("", |(_, _, name)| name.as_str());
            return Err(invalid(
                format!("input value `{name}` (value {}) is not bound", missing.0),
                format!("bind `{name}` (host bytes or a resident buffer) before submitting"),
            ));
        }
        Ok(slots)
    }
}

impl ArtifactInstance for CudaArtifactInstance {
    fn artifact(&self) -> Digest {
        self.artifact
    }

    fn payload(&self) -> Digest {
        self.payload
    }

    fn device(&self) -> &DeviceIdentity {
        &self.device
    }

    fn submit(&self, bindings: BindingSet) -> Result<Box<dyn Submission>, BackendError> {
        if bindings.artifact() != self.artifact {
            return Err(invalid(
                "the bindings were built for another artifact",
                "build the BindingSet from this instance's artifact digest",
            ));
        }
        let slots = self.slot_bindings(&bindings)?;
        let flight = self.loaded.submit(&slots, bindings.invocation_grid())?;
        Ok(Box::new(CudaSubmission {
            artifact: self.artifact,
            flight: Mutex::new(Some(flight)),
            returned: Arc::clone(&self.returned),
        }))
    }
}

/// One enqueued submission.
struct CudaSubmission {
    artifact: Digest,
    flight: Mutex<Option<ArtifactFlight>>,
    /// The values read back, in read order, and whether each is retained.
    returned: Arc<[(ArtifactValueId, bool)]>,
}

impl Submission for CudaSubmission {
    fn is_ready(&self) -> bool {
        self.flight.lock().map_or(true, |flight| {
            flight.as_ref().is_none_or(ArtifactFlight::is_complete)
        })
    }

    fn wait(self: Box<Self>) -> Result<Completion, BackendError> {
        let flight = self
            .flight
            .lock()
            .ok()
            .and_then(|mut f| f.take())
            .ok_or_else(|| {
                invalid(
                    "the submission was already waited for",
                    "wait for each submission once",
                )
            })?;
        let (bytes, timing) = flight.finish()?;
        let mut completion = Completion {
            artifact: self.artifact,
            outputs: BTreeMap::new(),
            retained: BTreeMap::new(),
            device_ns: timing.device_ns,
        };
        for ((value, retained), bytes) in self.returned.iter().zip(bytes) {
            match retained {
                true => completion.retained.insert(*value, bytes),
                false => completion.outputs.insert(*value, bytes),
            };
        }
        Ok(completion)
    }
}
