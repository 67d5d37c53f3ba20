//! Several kernels in one PTX module. The driver JIT-compiles a whole module per load and
//! each load has a fixed cost of milliseconds, so an artifact's kernels are loaded as one
//! module: each kernel's entries are named apart ([`super::emit_named`]), the module
//! header (and the libm tables every kernel reads) is written once.

use super::abi::{layout, KernelAbi};
use super::libm::Libm;
use super::module::{header, ModuleUses};
use super::{CodegenError, PtxTarget};
use std::collections::BTreeSet;
use vyre_foundation::ir::Program;

/// What lowering adds to a kernel's [`KernelAbi`] beyond its buffer layout: enough to
/// rebuild the ABI from the program without lowering it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AbiFlags {
    /// [`KernelAbi::segments`].
    pub segments: u32,
    /// Whether the kernel records faults or keeps a grid barrier in its fault area
    /// ([`super::EmittedKernel::reports_faults`]); [`KernelAbi::fault_word`] is this or
    /// [`Self::timed`].
    pub fault_word: bool,
    /// [`KernelAbi::cooperative`].
    pub cooperative: bool,
    /// [`KernelAbi::vector_lanes`].
    pub vector_lanes: u32,
    /// Whether the entries stamp the device clock into the fault area
    /// ([`super::emit_timed`]).
    pub timed: bool,
    /// [`super::KernelBinding::accumulated`] of each binding, in order.
    pub accumulated: Vec<bool>,
    /// [`super::KernelBinding::broadcast`] of each binding, in order.
    pub broadcast: Vec<bool>,
}

/// One kernel's `.entry` texts without a module header, and what they need from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelEntries {
    /// Name of the first segment's entry ([`KernelAbi::entry`]).
    pub entry: String,
    /// See [`AbiFlags`].
    pub flags: AbiFlags,
    /// The `.entry` definitions.
    pub text: String,
    /// The vector entry's own module, when the kernel has one.
    pub vector_ptx: Option<String>,
    libm: BTreeSet<Libm>,
}

impl KernelEntries {
    pub(crate) fn new(
        abi: &KernelAbi,
        timed: bool,
        reports_faults: bool,
        text: String,
        libm: BTreeSet<Libm>,
        vector_ptx: Option<String>,
    ) -> Self {
        Self {
            entry: abi.entry.clone(),
            flags: AbiFlags {
                segments: abi.segments,
                fault_word: reports_faults,
                cooperative: abi.cooperative,
                vector_lanes: abi.vector_lanes,
                timed,
                accumulated: abi.bindings.iter().map(|b| b.accumulated).collect(),
                broadcast: abi.bindings.iter().map(|b| b.broadcast).collect(),
            },
            text,
            vector_ptx,
            libm,
        }
    }

    /// Rebuilds entries recorded as parts (a target payload); `libm` names the routines
    /// by symbol.
    pub fn from_parts(
        entry: String,
        flags: AbiFlags,
        text: String,
        libm: &[String],
        vector_ptx: Option<String>,
    ) -> Result<Self, CodegenError> {
        let libm = libm
            .iter()
            .map(|symbol| {
                Libm::from_symbol(symbol).ok_or_else(|| {
                    CodegenError::invalid(
                        format!("`{symbol}` is not a libm routine of this emitter"),
                        "recompile the payload with this vyre-cuda version",
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            entry,
            flags,
            text,
            vector_ptx,
            libm,
        })
    }

    /// Whether the kernel may be launched with a null fault area: it is timed and writes
    /// its area only to stamp the clock (no faults, no grid barrier); a null area skips the
    /// stamps.
    #[must_use]
    pub fn fault_area_optional(&self) -> bool {
        self.flags.timed && !self.flags.fault_word
    }

    /// The symbols of the libm routines the entries call.
    #[must_use]
    pub fn libm_symbols(&self) -> Vec<&'static str> {
        self.libm.iter().map(|f| f.symbol()).collect()
    }

    /// The kernel's ABI: `program`'s buffer layout (the program emitted, after
    /// [`super::reference_program`]) with these entries' name and flags.
    pub fn abi(&self, program: &Program, workgroup: [u32; 3]) -> Result<KernelAbi, CodegenError> {
        let (mut abi, _) = layout(program, workgroup)?;
        let bindings = abi.bindings.len();
        if bindings != self.flags.accumulated.len()
            || bindings != self.flags.broadcast.len()
            || self.flags.segments == 0
        {
            return Err(CodegenError::invalid(
                format!(
                    "kernel `{}` records {} binding(s) and {} segment(s); its program has {} binding(s)",
                    self.entry,
                    self.flags.accumulated.len(),
                    self.flags.segments,
                    abi.bindings.len()
                ),
                "recompile the payload from the artifact it was built for",
            ));
        }
        abi.entry.clone_from(&self.entry);
        abi.segments = self.flags.segments;
        // A timed kernel's stamps live in the fault area: it always takes one.
        abi.fault_word = self.flags.fault_word || self.flags.timed;
        abi.cooperative = self.flags.cooperative;
        abi.vector_lanes = self.flags.vector_lanes;
        let flags = self.flags.accumulated.iter().zip(&self.flags.broadcast);
        for (binding, (&accumulated, &broadcast)) in abi.bindings.iter_mut().zip(flags) {
            binding.accumulated = accumulated;
            binding.broadcast = broadcast;
        }
        Ok(abi)
    }
}

/// One module holding every kernel's entries (their names must differ), after one header
/// for `target` with each libm routine any kernel calls; `provenance` goes in its comment.
#[must_use]
pub fn compose_module(target: PtxTarget, kernels: &[&KernelEntries], provenance: &str) -> String {
    let libm: BTreeSet<Libm> = kernels
        .iter()
        .flat_map(|k| k.libm.iter().copied())
        .collect();
    let uses = ModuleUses::of(kernels.iter().map(|k| k.text.as_str()));
    let mut ptx = header(target, &libm, provenance, uses);
    for kernel in kernels {
        ptx.push_str(&kernel.text);
    }
    ptx
}
