//! Running a loaded artifact: its kernels (loaded together, see `Core::load_shared`) over
//! a set of value buffers, node after node on one stream: on the packed lane
//! ([`packed`]) when everything fits one small-dispatch arena and the caller binds no
//! resident buffer, otherwise as one resident batch.
//!
//! Every value of the artifact has a storage slot. A submission binds each slot to the
//! caller's resident buffer or to a transient buffer of a value set the artifact keeps
//! (sets are reused by later submissions; concurrent submissions take one each), uploads
//! host bytes, zeroes the slots nodes produce and the unbound ones (the reference starts
//! every output and every buffer it allocates itself at zero), launches the nodes in order
//! and reads the requested slots back. A runtime-sized value (no declared bytes) takes the
//! length bound to it. The work is enqueued
//! by [`LoadedArtifact::submit`]; [`ArtifactFlight::finish`] waits.

mod packed;

use super::cache::LoadedKernel;
use super::dispatch::Timing;
use super::plan::{binding_order, shape_output};
use super::sequence::{Fill, Read, ResidentBatch, ResidentFlight, Step, Upload};
use super::{Core, CudaBackend, SharedKernel};
use crate::codegen::{compose_module, KernelEntries, PtxTarget};
use crate::error::CudaError;
use packed::{PackedFlight, PackedPlan};
use std::sync::{Arc, Mutex};
use vyre_foundation::ir::Program;

/// An artifact's storage slots.
pub(crate) struct ArtifactSlots {
    /// Each slot's byte length (0: runtime-sized, the length bound to it).
    pub(crate) bytes: Vec<usize>,
    /// Whether the slot holds a value the caller binds.
    pub(crate) caller: Vec<bool>,
    /// The slots every submission reads back, in order.
    pub(crate) reads: Vec<usize>,
}

/// One node of an artifact, ready to load.
pub(crate) struct ArtifactNode {
    /// The program its kernel was emitted from (after `reference_program`).
    pub(crate) program: Program,
    /// Its entries, named apart from the other nodes'.
    pub(crate) entries: KernelEntries,
    /// The storage slot of each kernel binding, in binding order (resident handle order).
    pub(crate) slots: Vec<usize>,
}

struct LoadedNode {
    program: Program,
    kernel: Arc<LoadedKernel>,
    slots: Vec<usize>,
    /// Whether the kernel stamps the device clock into its fault area
    /// (`crate::codegen::emit_timed`).
    timed: bool,
}

/// How a submission binds one storage slot.
pub(crate) enum SlotBinding<'a> {
    /// A transient buffer of the value set, uploaded with these bytes (ignored where the
    /// slot starts zeroed).
    Host(&'a [u8]),
    /// The caller's resident buffer (resident-table handle) of this many bytes, used in
    /// place.
    Resident(u64, usize),
    /// A zeroed transient buffer of the value set: only for a slot that starts zeroed
    /// (the materializer requires every other slot bound).
    Transient,
}

/// An artifact's kernels on one device, and the transient buffers its submissions use.
pub(crate) struct LoadedArtifact {
    /// Where submissions sit in a packed lane, when the artifact fits one. Declared first:
    /// its lanes' captured graphs launch `nodes`' kernels, so they go first.
    packed: Option<PackedPlan>,
    backend: CudaBackend,
    nodes: Vec<LoadedNode>,
    /// Byte length of each storage slot.
    slot_bytes: Vec<usize>,
    /// Whether the slot starts each submission zeroed: unless it holds a caller's value
    /// that a node takes as an input, vyre-reference allocates it itself, zeroed (outputs,
    /// buffers it does not take as inputs), whatever a caller binds; a caller need not
    /// bind it.
    zeroed: Vec<bool>,
    /// The part of a slot its producing node returns (`BufferDecl::output_byte_range`):
    /// what the reference returns for that value.
    returned_ranges: Vec<Option<std::ops::Range<usize>>>,
    /// The slots every submission reads back, in order.
    reads: Vec<usize>,
    idle_sets: Mutex<Vec<ValueSet>>,
}

/// Transient resident buffers, one per storage slot, freed on drop.
struct ValueSet {
    core: Arc<Core>,
    handles: Vec<u64>,
    /// Each buffer's byte length: the slot's, or for a runtime-sized slot (0 declared
    /// bytes) the length last bound to it.
    lens: Vec<usize>,
}

impl ValueSet {
    /// Makes the buffer of runtime-sized `slot` hold exactly `len` bytes (its length is
    /// the element count the kernels see).
    fn resize(&mut self, slot: usize, len: usize) -> Result<(), CudaError> {
        if self.lens[slot] == len {
            return Ok(());
        }
        let handle = self.core.allocate_resident(len.max(1))?;
        let old = std::mem::replace(&mut self.handles[slot], handle);
        let _ = self.core.free_resident(old);
        self.lens[slot] = len;
        Ok(())
    }
}

impl Drop for ValueSet {
    fn drop(&mut self) {
        for &handle in &self.handles {
            // A shut-down backend has freed them already.
            let _ = self.core.free_resident(handle);
        }
    }
}

impl CudaBackend {
    /// Loads `nodes` (run in this order) as `modules` PTX modules compiled in parallel
    /// (the nodes split evenly between them), written for `target`; `slots` describes the
    /// storage slots.
    pub(crate) fn load_artifact(
        &self,
        target: PtxTarget,
        nodes: Vec<ArtifactNode>,
        slots: ArtifactSlots,
        modules: usize,
    ) -> Result<LoadedArtifact, CudaError> {
        let ArtifactSlots {
            bytes: slot_bytes,
            caller: caller_slots,
            reads,
        } = slots;
        let core = self.core();
        core.usable()?;
        let per_module = nodes.len().div_ceil(modules.max(1)).max(1);
        let loaded = std::thread::scope(|scope| {
            let jobs: Vec<_> = nodes
                .chunks(per_module)
                .map(|chunk| scope.spawn(move || load_chunk(core, target, chunk)))
                .collect();
            jobs.into_iter()
                .map(|job| job.join().unwrap_or_else(|_| Err(jit_panicked())))
                .collect::<Result<Vec<_>, _>>()
        })?;
        let nodes: Vec<LoadedNode> = nodes
            .into_iter()
            .zip(loaded.into_iter().flatten())
            .map(|(node, kernel)| LoadedNode {
                timed: node.entries.flags.timed,
                program: node.program,
                kernel,
                slots: node.slots,
            })
            .collect();
        let mut returned_ranges = vec![None; slot_bytes.len()];
        let mut read = vec![false; slot_bytes.len()];
        for node in &nodes {
            let abi = &node.kernel.abi;
            for (&binding, &slot) in binding_order(&node.program, abi).iter().zip(&node.slots) {
                let binding = &abi.bindings[binding];
                if let Some(range) = &binding.output_byte_range {
                    returned_ranges[slot] = Some(range.clone());
                }
                read[slot] |= binding.role.takes_input();
            }
        }
        let zeroed: Vec<bool> = caller_slots
            .iter()
            .zip(&read)
            .map(|(&caller, &read)| !(caller && read))
            .collect();
        let capacity = core.small.capacity();
        let packed = PackedPlan::new(core.limits, &nodes, &slot_bytes, &zeroed, &reads, capacity)?;
        Ok(LoadedArtifact {
            backend: self.clone(),
            nodes,
            slot_bytes,
            zeroed,
            returned_ranges,
            reads,
            packed,
            idle_sets: Mutex::new(Vec::new()),
        })
    }
}

fn jit_panicked() -> CudaError {
    CudaError::invalid_input(
        "a module-loading thread panicked",
        "report this as a vyre-cuda bug with the artifact",
    )
}

/// One module holding `chunk`'s kernels, loaded; its kernels in `chunk`'s order.
fn load_chunk(
    core: &Core,
    target: PtxTarget,
    chunk: &[ArtifactNode],
) -> Result<Vec<Arc<LoadedKernel>>, CudaError> {
    let entries: Vec<&KernelEntries> = chunk.iter().map(|node| &node.entries).collect();
    let ptx = compose_module(target, &entries, "an artifact");
    let kernels = chunk
        .iter()
        .map(|node| {
            let workgroup = node.program.workgroup_size();
            let abi = node.entries.abi(&node.program, workgroup)?;
            let mut identity = blake3::Hasher::new();
            identity.update(node.entries.text.as_bytes());
            identity.update(&target.sm().to_le_bytes());
            Ok(SharedKernel {
                key: super::cache::KernelKey::of_code(identity.finalize().as_bytes()),
                abi,
                vector_ptx: node.entries.vector_ptx.clone(),
                fault_area_optional: node.entries.fault_area_optional(),
            })
        })
        .collect::<Result<Vec<_>, CudaError>>()?;
    core.load_shared(&ptx, kernels)
}

impl LoadedArtifact {
    /// Number of storage slots.
    pub(crate) fn slot_count(&self) -> usize {
        self.slot_bytes.len()
    }

    /// Byte length of storage slot `slot`.
    pub(crate) fn slot_bytes(&self, slot: usize) -> usize {
        self.slot_bytes[slot]
    }

    /// Whether `slot` starts each submission zeroed (see `zeroed`).
    pub(crate) fn starts_zeroed(&self, slot: usize) -> bool {
        self.zeroed[slot]
    }

    /// Enqueues one run: `bindings[slot]` binds each storage slot, `grid` overrides every
    /// node's grid. Returns once the work is enqueued (host bytes have been copied).
    pub(crate) fn submit(
        self: &Arc<Self>,
        bindings: &[SlotBinding<'_>],
        grid: Option<[u32; 3]>,
    ) -> Result<ArtifactFlight, CudaError> {
        let work = match &self.packed {
            Some(plan) if packed::fits(bindings) => {
                Work::Packed(self.submit_packed(plan, bindings, grid)?)
            }
            _ => self.submit_batch(bindings, grid)?,
        };
        Ok(ArtifactFlight {
            artifact: Arc::clone(self),
            work: Some(work),
        })
    }

    /// [`Self::submit`] as one resident batch over a value set.
    fn submit_batch(
        &self,
        bindings: &[SlotBinding<'_>],
        grid: Option<[u32; 3]>,
    ) -> Result<Work, CudaError> {
        let mut set = self.take_set()?;
        let mut handles = Vec::with_capacity(bindings.len());
        let mut lens = Vec::with_capacity(bindings.len());
        let mut uploads = Vec::new();
        let mut fills = Vec::new();
        for (slot, binding) in bindings.iter().enumerate() {
            let (handle, len) = match *binding {
                SlotBinding::Resident(handle, len) => (handle, len),
                SlotBinding::Host(bytes) if self.slot_bytes[slot] == 0 => {
                    if let Err(error) = set.resize(slot, bytes.len()) {
                        self.return_set(set);
                        return Err(error);
                    }
                    (set.handles[slot], bytes.len())
                }
                _ => (set.handles[slot], self.slot_bytes[slot]),
            };
            match binding {
                // A resident buffer too: the value is the node's, not the buffer's past.
                _ if self.zeroed[slot] && len > 0 => fills.push(Fill {
                    handle,
                    offset: 0,
                    len,
                    value: 0,
                }),
                SlotBinding::Host(bytes) if !bytes.is_empty() && !self.zeroed[slot] => uploads
                    .push(Upload {
                        handle,
                        offset: 0,
                        bytes,
                        whole: true,
                    }),
                _ => {}
            }
            handles.push(handle);
            lens.push(len);
        }
        let node_handles: Vec<Vec<u64>> = self
            .nodes
            .iter()
            .map(|node| node.slots.iter().map(|&slot| handles[slot]).collect())
            .collect();
        let steps: Vec<Step<'_>> = self
            .nodes
            .iter()
            .zip(&node_handles)
            .map(|(node, handles)| Step {
                grid_override: grid,
                kernel: Some(&node.kernel),
                ..Step::new(&node.program, handles)
            })
            .collect();
        let read_ranges: Vec<Read> = self
            .reads
            .iter()
            .map(|&slot| Read {
                handle: handles[slot],
                offset: 0,
                len: lens[slot],
            })
            .collect();
        let batch = ResidentBatch {
            fills: &fills,
            uploads: &uploads,
            prefix: &steps,
            reads: &read_ranges,
            ..ResidentBatch::default()
        };
        let flight = self.backend.core().enqueue_resident(&batch, true);
        let flight = match flight {
            Ok(flight) => flight,
            Err(error) => {
                self.return_set(set);
                return Err(error);
            }
        };
        Ok(Work::Batch(flight, set))
    }

    /// An idle value set, or a new one (zero-filled, so the first use needs no fill).
    fn take_set(&self) -> Result<ValueSet, CudaError> {
        if let Some(set) = self.idle_sets.lock().ok().and_then(|mut sets| sets.pop()) {
            return Ok(set);
        }
        let core = Arc::clone(self.backend.core());
        let mut set = ValueSet {
            core: Arc::clone(&core),
            handles: Vec::with_capacity(self.slot_bytes.len()),
            lens: self.slot_bytes.clone(),
        };
        for &bytes in &self.slot_bytes {
            // A value of no bytes still needs an address; nothing reads or writes it.
            set.handles.push(core.allocate_resident(bytes.max(1))?);
        }
        Ok(set)
    }

    fn return_set(&self, set: ValueSet) {
        if let Ok(mut sets) = self.idle_sets.lock() {
            sets.push(set);
        }
    }
}

/// One enqueued artifact run; dropping it unfinished waits for the work.
pub(crate) struct ArtifactFlight {
    artifact: Arc<LoadedArtifact>,
    /// `None` once waited for.
    work: Option<Work>,
}

enum Work {
    Packed(PackedFlight),
    /// A resident batch over a value set (back to the artifact when done).
    Batch(ResidentFlight, ValueSet),
}

fn waited_twice() -> CudaError {
    CudaError::invalid_input(
        "the artifact submission was already waited for",
        "wait for each submission once",
    )
}

impl ArtifactFlight {
    /// Whether the work has completed (non-blocking).
    pub(crate) fn is_complete(&self) -> bool {
        match &self.work {
            None => true,
            Some(Work::Packed(flight)) => flight.is_complete(),
            Some(Work::Batch(flight, _)) => flight.is_complete(),
        }
    }

    /// Waits, reads the slots back (in the artifact's `reads` order) and checks the
    /// kernels' fault words; the timing's device time covers the kernels.
    pub(crate) fn finish(mut self) -> Result<(Vec<Vec<u8>>, Timing), CudaError> {
        let artifact = &self.artifact;
        match self.work.take().ok_or_else(waited_twice)? {
            Work::Packed(flight) => flight.finish(artifact),
            Work::Batch(flight, set) => artifact.finish_batch(flight, set),
        }
    }
}

impl LoadedArtifact {
    fn finish_batch(
        &self,
        flight: ResidentFlight,
        set: ValueSet,
    ) -> Result<(Vec<Vec<u8>>, Timing), CudaError> {
        let mut outputs = vec![Vec::new(); self.reads.len()];
        let mut slots: Vec<&mut Vec<u8>> = outputs.iter_mut().collect();
        let timing = flight.finish(self.backend.core(), &mut slots);
        self.return_set(set);
        let timing = timing?;
        for (bytes, &slot) in outputs.iter_mut().zip(&self.reads) {
            shape_output(bytes, self.returned_ranges[slot].as_ref());
        }
        Ok((outputs, timing))
    }
}

impl Drop for ArtifactFlight {
    fn drop(&mut self) {
        // A packed flight waits in its own drop.
        if let Some(Work::Batch(flight, set)) = self.work.take() {
            flight.cancel();
            self.artifact.return_set(set);
        }
    }
}
