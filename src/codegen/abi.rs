//! The kernel's launch and argument ABI, derived from the program exactly as
//! `vyre-reference` assigns inputs and outputs.

use super::kind::{declared_bytes, element_stride};
use super::CodegenError;
use std::ops::Range;
use std::sync::Arc;
use vyre_foundation::ir::{BufferAccess, BufferDecl, DataType, Program};

/// Name of the kernel entry in every emitted module.
pub const KERNEL_ENTRY: &str = "vyre_main";

/// Name of the single-kernel form of a program split at grid-wide barriers: every segment
/// in one entry, with a software grid barrier between them. It needs every block of the
/// grid resident at once, so it must be launched cooperatively (`cuLaunchCooperativeKernel`).
pub const COOPERATIVE_ENTRY: &str = "vyre_main_coop";

/// Bytes of the zeroed area the fault-word pointer addresses: the fault word itself, then
/// the cooperative entry's grid barrier (arrival count, generation, stop flag), then the
/// clock stamps of a timed kernel ([`CLOCK_START_AT`], [`CLOCK_END_AT`]).
pub const FAULT_AREA_BYTES: usize = 32;

/// Byte offset in the fault area of a timed kernel's start stamp: the bitwise NOT of the
/// earliest `%globaltimer` (nanoseconds) at which a block of any launch sharing the area
/// started. Blocks combine their stamps with `max`, so the NOT lets the zeroed area start
/// it (no other initial value to upload) and the earliest start win.
pub const CLOCK_START_AT: usize = 16;

/// Byte offset in the fault area of a timed kernel's end stamp: the latest `%globaltimer`
/// at which a block of any launch sharing the area ended (its last invocation finished).
pub const CLOCK_END_AT: usize = 24;

// The stamps follow the fault word and the grid barrier's words (bytes 0..16), 8-byte
// aligned, inside the area.
const _: () = assert!(
    CLOCK_START_AT >= 16
        && CLOCK_END_AT >= CLOCK_START_AT + 8
        && CLOCK_START_AT % 8 == 0
        && CLOCK_END_AT % 8 == 0
        && CLOCK_END_AT + 8 <= FAULT_AREA_BYTES
);

/// The device time the clock stamps of a fault area span (see [`crate::codegen::emit_timed`]):
/// from the earliest block start to the latest block end, in nanoseconds. `None` when the
/// area is shorter than [`FAULT_AREA_BYTES`] or not stamped (no timed block ran).
#[must_use]
pub fn clock_span_ns(area: &[u8]) -> Option<u64> {
    let word = |at: usize| -> Option<u64> {
        let bytes = area.get(at..at + 8)?;
        Some(u64::from_le_bytes(bytes.try_into().ok()?))
    };
    let (start, end) = (!word(CLOCK_START_AT)?, word(CLOCK_END_AT)?);
    (start != u64::MAX && end != 0).then(|| end.saturating_sub(start))
}

/// Name of the vector entry of an elementwise program (see [`KernelAbi::vector_lanes`]).
/// Its parameters ([`KernelAbi::vector_params`]) are the scalar entry's followed by
/// `.u32 vyre_inv_base` and `.u32 vyre_inv_end`: it runs invocations
/// `vyre_inv_base .. vyre_inv_end`, `vector_lanes` consecutive ones per thread starting at
/// `vyre_inv_base + lanes * thread`.
pub const VECTOR_ENTRY: &str = "vyre_main_vec4";

/// Invocations one thread of the vector entry runs.
pub const VECTOR_LANES: u32 = 4;

/// One parameter of a kernel entry. [`KernelAbi::params`] lists them in declaration order;
/// the emitter declares and reads them from it and the host pushes its arguments in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelParam {
    /// `.u64 vyre_p{i}`: global address of binding `i`.
    Pointer(usize),
    /// `.u32 vyre_n{i}`: element count of binding `i`.
    Count(usize),
    /// `.u64 vyre_fault`: address of the zeroed area of [`FAULT_AREA_BYTES`].
    FaultArea,
    /// `.u32 vyre_inv_base`: first invocation the vector entry runs.
    InvocationBase,
    /// `.u32 vyre_inv_end`: end (exclusive) of the vector entry's invocation range.
    InvocationEnd,
    /// `.u64 vyre_peer_slots` (a peer-synced fold, [`PeerSync`]): device array of `world`
    /// addresses, entry `k` this rank's flag word in rank `k`'s memory.
    PeerSlots,
    /// `.u64 vyre_peer_flags`: this rank's `world` flag words (word `k` written by rank `k`).
    PeerFlags,
    /// `.u64 vyre_peer_counter`: this rank's zeroed `u32` count of finished blocks.
    PeerCounter,
    /// `.u64 vyre_peer_epoch`: the epoch the ranks meet at before the fold; they meet at the
    /// next one after it.
    PeerEpoch,
}

impl KernelParam {
    /// The parameter's PTX type (`u64` or `u32`).
    #[must_use]
    pub fn ptx_type(self) -> &'static str {
        match self {
            Self::Count(_) | Self::InvocationBase | Self::InvocationEnd => "u32",
            _ => "u64",
        }
    }

    /// The parameter's PTX name.
    #[must_use]
    pub fn name(self) -> String {
        match self {
            Self::Pointer(index) => format!("vyre_p{index}"),
            Self::Count(index) => format!("vyre_n{index}"),
            Self::FaultArea => "vyre_fault".to_string(),
            Self::InvocationBase => "vyre_inv_base".to_string(),
            Self::InvocationEnd => "vyre_inv_end".to_string(),
            Self::PeerSlots => "vyre_peer_slots".to_string(),
            Self::PeerFlags => "vyre_peer_flags".to_string(),
            Self::PeerCounter => "vyre_peer_counter".to_string(),
            Self::PeerEpoch => "vyre_peer_epoch".to_string(),
        }
    }
}

/// How a storage buffer takes part in a dispatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BindingRole {
    /// Consumes the next input slice; not returned.
    Input,
    /// Consumes the next input slice and is returned (a plain `ReadWrite` buffer).
    InputOutput,
    /// Backend-allocated: zero-initialised, takes no input, returned.
    Output,
}

impl BindingRole {
    /// Whether this buffer consumes an input slice.
    #[must_use]
    pub fn takes_input(self) -> bool {
        matches!(self, Self::Input | Self::InputOutput)
    }

    /// Whether this buffer is returned from a dispatch.
    #[must_use]
    pub fn is_returned(self) -> bool {
        matches!(self, Self::InputOutput | Self::Output)
    }
}

/// One storage buffer of the kernel, in program declaration order. Each becomes two kernel
/// parameters: a global pointer (`.u64`) and an element count (`.u32`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelBinding {
    /// Index into `Program::buffers()`.
    pub decl_index: usize,
    /// Buffer name.
    pub name: Arc<str>,
    /// Element type.
    pub element: DataType,
    /// Bytes per element.
    pub element_size: u32,
    /// Input/output role.
    pub role: BindingRole,
    /// For `Output` buffers: the zero-initialised byte size the reference allocates.
    pub output_bytes: usize,
    /// Slice of the buffer that is returned, when the declaration narrows it.
    pub output_byte_range: Option<Range<usize>>,
    /// In a program with a vector entry: the buffer is touched only through atomics with
    /// one order-independent operator whose old value is discarded (a reduction target or
    /// histogram). Its final contents do not depend on invocation order, so when the host
    /// splits the invocation range into chunks, every chunk updates the whole buffer
    /// (real base, not a chunk's virtual one).
    pub accumulated: bool,
    /// In a program with a vector entry: a read-only buffer read only at indices that are
    /// the same for every invocation of the dispatch (a scale in a one-element buffer,
    /// parameters). The vector entry reads it with ordinary bounds-checked loads, and a
    /// chunked dispatch binds the whole buffer, uploaded once, to every chunk.
    pub broadcast: bool,
    /// Elements the scalar entries read at literal indices without a bounds check (the
    /// largest such index + 1; 0: none). The host launches them only where the bound buffer
    /// holds that many elements, and [`crate::codegen::EmittedKernel::checked_ptx`] (every
    /// load checked) where it is shorter.
    pub literal_extent: u32,
}

impl KernelBinding {
    /// Whether a chunked dispatch binds this buffer whole (an [`Self::accumulated`] or
    /// [`Self::broadcast`] buffer, which any invocation may address) rather than cut into
    /// the chunks' element ranges.
    #[must_use]
    pub fn whole(&self) -> bool {
        self.accumulated || self.broadcast
    }
}

/// Everything the host needs to launch an emitted kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelAbi {
    /// Entry point name of the first segment: [`KERNEL_ENTRY`], or the name given to
    /// [`crate::codegen::emit_named`] for a kernel that shares a module with others.
    pub entry: String,
    /// Number of entries to launch in order, on the same arguments: 1, or one per segment
    /// of a program split at top-level grid-wide barriers.
    pub segments: u32,
    /// Threads per block (the effective workgroup size).
    pub workgroup_size: [u32; 3],
    /// Storage buffers in declaration order.
    pub bindings: Vec<KernelBinding>,
    /// Static shared memory for workgroup buffers, in bytes.
    pub shared_bytes: u32,
    /// Whether the kernel takes a trailing `.u64` pointer to a zeroed area of
    /// [`FAULT_AREA_BYTES`], whose first `u32` records the first run-time error the
    /// reference would also raise.
    pub fault_word: bool,
    /// Whether the module also holds [`COOPERATIVE_ENTRY`], which runs all `segments` in one
    /// cooperative launch (always with a fault word: its grid barrier lives in that area).
    pub cooperative: bool,
    /// Invocations per thread of the module's [`VECTOR_ENTRY`], or 0 when it has none.
    /// Only elementwise programs (every global access is `buf[gid]`, a discarded
    /// order-independent atomic on an [`KernelBinding::accumulated`] buffer, or a load of a
    /// [`KernelBinding::broadcast`] buffer at an index every invocation shares) get one; the
    /// host may launch it instead of the scalar entry when every binding base is 16-byte
    /// aligned, no two bindings overlap and the grid is 1-D, and may split the
    /// invocation range into independent chunks.
    pub vector_lanes: u32,
    /// Set for a fold whose vector entry meets the other ranks itself (see [`PeerSync`]);
    /// its parameters then end with the `Peer*` ones.
    pub peer_sync: Option<PeerSync>,
}

/// A peer-synced fold (`crate::codegen::emit_peer_synced`): rank `rank` of `world` ranks
/// whose GPUs reach each other's memory. Its vector entry first meets every other rank at
/// an epoch (each block stores the epoch into its flag word in every peer's memory with
/// release semantics, then waits with acquire loads until every peer's word in its own
/// memory holds it), then folds, then meets them again at the next epoch once every block
/// of this rank has finished (the last block to finish signals and waits), so no rank
/// reads a buffer before its owner has written it or writes one while a peer still reads
/// it. A wait has no deadline, as a stream's wait on a flag has none: the host's deadline
/// aborts the dispatch and writes the epoch into every flag word, which ends every wait.
/// Replaces two barriers of stream memory operations around the fold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerSync {
    pub world: u32,
    pub rank: u32,
}

impl KernelAbi {
    /// Entry name of segment `index` (`vyre_main`, `vyre_main_1`, ...).
    #[must_use]
    pub fn entry_name(&self, index: u32) -> String {
        if index == 0 {
            self.entry.to_string()
        } else {
            format!("{}_{index}", self.entry)
        }
    }

    /// Name of the cooperative entry ([`COOPERATIVE_ENTRY`] for [`KERNEL_ENTRY`]).
    #[must_use]
    pub fn cooperative_entry_name(&self) -> String {
        format!("{}_coop", self.entry)
    }

    /// Number of input slices a dispatch takes.
    #[must_use]
    pub fn input_count(&self) -> usize {
        self.bindings
            .iter()
            .filter(|b| b.role.takes_input())
            .count()
    }

    /// Number of buffers a dispatch returns.
    #[must_use]
    pub fn output_count(&self) -> usize {
        self.bindings
            .iter()
            .filter(|b| b.role.is_returned())
            .count()
    }

    /// Invocations per workgroup.
    #[must_use]
    pub fn threads_per_workgroup(&self) -> u32 {
        self.workgroup_size.iter().product()
    }

    /// The parameters of every entry but the vector one, in order: each binding's pointer,
    /// each binding's element count, then the fault area when the kernel has one.
    pub fn params(&self) -> impl Iterator<Item = KernelParam> {
        let bindings = self.bindings.len();
        (0..bindings)
            .map(KernelParam::Pointer)
            .chain((0..bindings).map(KernelParam::Count))
            .chain(self.fault_word.then_some(KernelParam::FaultArea))
    }

    /// The parameters of the [`VECTOR_ENTRY`]: [`Self::params`], then its invocation range.
    pub fn vector_params(&self) -> impl Iterator<Item = KernelParam> {
        let peer = [
            KernelParam::PeerSlots,
            KernelParam::PeerFlags,
            KernelParam::PeerCounter,
            KernelParam::PeerEpoch,
        ];
        self.params()
            .chain([KernelParam::InvocationBase, KernelParam::InvocationEnd])
            .chain(
                peer.into_iter()
                    .take(if self.peer_sync.is_some() { 4 } else { 0 }),
            )
    }
}

/// A workgroup (shared-memory) buffer of the kernel.
#[derive(Debug, Clone)]
pub(crate) struct SharedBuffer {
    /// Index into `Program::buffers()`.
    pub(crate) decl_index: usize,
    pub(crate) element: DataType,
    /// Elements that can be addressed: the declared count, or for 4-bit elements the
    /// bytes the reference allocates (one element a byte in loads and stores).
    pub(crate) count: u32,
    pub(crate) offset: u32,
}

/// Classify the program's buffers the way the reference does.
pub(crate) fn layout(
    program: &Program,
    workgroup_size: [u32; 3],
) -> Result<(KernelAbi, Vec<SharedBuffer>), CodegenError> {
    let mut bindings = Vec::new();
    let mut shared = Vec::new();
    let mut shared_bytes: u64 = 0;
    for (decl_index, decl) in program.buffers().iter().enumerate() {
        let element_size = element_size(decl)?;
        if decl.access() == BufferAccess::Workgroup {
            shared.push(shared_buffer(
                decl_index,
                decl,
                element_size,
                &mut shared_bytes,
            )?);
        } else {
            bindings.push(binding(decl_index, decl, element_size));
        }
    }
    let shared_bytes = shared_bytes.next_multiple_of(16);
    let shared_bytes = u32::try_from(shared_bytes).map_err(|_| shared_too_large(shared_bytes))?;
    Ok((
        KernelAbi {
            entry: KERNEL_ENTRY.to_string(),
            segments: 1,
            workgroup_size,
            bindings,
            shared_bytes,
            fault_word: false,
            cooperative: false,
            vector_lanes: 0,
            peer_sync: None,
        },
        shared,
    ))
}

fn element_size(decl: &BufferDecl) -> Result<u32, CodegenError> {
    let element = decl.element();
    if let Some(stride) = element_stride(&element) {
        return Ok(stride);
    }
    let use_instead =
        "use u8/i8/u16/i16/f16/bf16/f8/4-bit/u32/i32/f32/bool/u64/i64/f64/handle/vec2<u32>/vec4<u32>/bytes elements, or vectors and arrays of them";
    if element.size_bytes().is_none() {
        return Err(CodegenError::unsupported(
            format!("buffer of unsized element type {element}"),
            format!(
                "buffer `{}` has no fixed element size, which vyre-reference refuses as well",
                decl.name()
            ),
            use_instead,
        ));
    }
    // What is left has no bits (a vector of no lanes): the reference counts a buffer by
    // its element's bit width, and divides by zero.
    Err(CodegenError::unsupported(
        format!("buffer element type {element}"),
        format!(
            "buffer `{}` has an element of no bits, which vyre-reference cannot count",
            decl.name()
        ),
        use_instead,
    ))
}

/// Place a workgroup buffer at the next 16-byte boundary of `vyre_shared`.
fn shared_buffer(
    decl_index: usize,
    decl: &BufferDecl,
    element_size: u32,
    shared_bytes: &mut u64,
) -> Result<SharedBuffer, CodegenError> {
    // The reference allocates the declared (packed) size: `count` bytes of a bytes
    // buffer, two 4-bit elements a byte; `count` is then the elements that can be addressed.
    let element = decl.element();
    let bytes = declared_bytes(&element, decl.count(), element_size);
    *shared_bytes = shared_bytes.next_multiple_of(16);
    let offset = u32::try_from(*shared_bytes).map_err(|_| shared_too_large(*shared_bytes))?;
    *shared_bytes += bytes;
    Ok(SharedBuffer {
        decl_index,
        element,
        count: u32::try_from(bytes / u64::from(element_size)).unwrap_or(u32::MAX),
        offset,
    })
}

/// The reference's role of a (non-workgroup) buffer.
pub(crate) fn role(decl: &BufferDecl) -> BindingRole {
    if decl.is_backend_allocated_output() {
        BindingRole::Output
    } else if decl.access() == BufferAccess::ReadWrite {
        BindingRole::InputOutput
    } else {
        BindingRole::Input
    }
}

fn binding(decl_index: usize, decl: &BufferDecl, element_size: u32) -> KernelBinding {
    let role = role(decl);
    let output_bytes = if role == BindingRole::Output {
        declared_bytes(&decl.element(), decl.count(), element_size) as usize
    } else {
        0
    };
    KernelBinding {
        decl_index,
        name: Arc::from(decl.name()),
        element: decl.element(),
        element_size,
        role,
        output_bytes,
        output_byte_range: decl.output_byte_range(),
        accumulated: false,
        broadcast: false,
        literal_extent: 0,
    }
}

fn shared_too_large(bytes: u64) -> CodegenError {
    CodegenError::invalid(
        format!("workgroup buffers need {bytes} bytes of shared memory"),
        "shrink the workgroup buffers",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fault area after blocks stamped `starts` and `ends` the way the kernels do.
    fn stamped(starts: &[u64], ends: &[u64]) -> [u8; FAULT_AREA_BYTES] {
        let mut area = [0u8; FAULT_AREA_BYTES];
        let start = starts.iter().map(|t| !t).max().unwrap_or(0);
        let end = ends.iter().copied().max().unwrap_or(0);
        area[CLOCK_START_AT..CLOCK_START_AT + 8].copy_from_slice(&start.to_le_bytes());
        area[CLOCK_END_AT..CLOCK_END_AT + 8].copy_from_slice(&end.to_le_bytes());
        area
    }

    #[test]
    fn the_clock_span_runs_from_the_earliest_start_to_the_latest_end() {
        let area = stamped(&[5_000, 1_000, 3_000], &[4_000, 9_500, 2_000]);
        assert_eq!(clock_span_ns(&area), Some(8_500));
    }

    #[test]
    fn an_unstamped_or_short_area_has_no_span() {
        assert_eq!(clock_span_ns(&[0u8; FAULT_AREA_BYTES]), None);
        assert_eq!(clock_span_ns(&stamped(&[7], &[])), None);
        assert_eq!(clock_span_ns(&stamped(&[], &[7])), None);
        assert_eq!(
            clock_span_ns(&stamped(&[7], &[9])[..CLOCK_END_AT + 4]),
            None
        );
        // An end stamped before the start (clocks of different blocks) is no time, not a
        // wrapped one.
        assert_eq!(clock_span_ns(&stamped(&[10], &[9])), Some(0));
    }
}
