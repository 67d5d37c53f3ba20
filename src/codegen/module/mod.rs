//! Assembly of the PTX module texts from the lowered entry bodies: the header and the
//! libm `.func`s every entry shares, then one `.entry` per segment and the cooperative
//! entry; the vector entry gets a module of its own. Each entry declares the parameters
//! [`KernelAbi::params`] (or [`KernelAbi::vector_params`]) lists.

mod grid_barrier;

pub(crate) use grid_barrier::segment_end_label;

use super::abi::{KernelAbi, KernelParam, VECTOR_ENTRY};
use super::clock::{self, EndRegs};
use super::libm::{self, Libm};
use super::lower::LoweredBody;
use super::target::PtxTarget;
use super::writer::{emit, PtxWriter};
use super::EMITTER_VERSION;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use vyre_foundation::ir::Program;

pub(crate) struct Bodies<'a> {
    /// One per segment (`vyre_main`, `vyre_main_1`, ...).
    pub(crate) segments: &'a [LoweredBody],
    /// The segments of the cooperative entry, or empty when it has none.
    pub(crate) cooperative: &'a [LoweredBody],
    /// The vector entry of an elementwise program.
    pub(crate) vector: Option<&'a LoweredBody>,
    /// Whether the kernel is timed (`super::clock`): the cooperative entry then stamps the
    /// clock around its segments (the other entries' bodies stamp it themselves).
    pub(crate) clock: bool,
    /// Whether the cooperative entry gets a module of its own (`Composed::cooperative_ptx`)
    /// instead of following the segment entries.
    pub(crate) cooperative_alone: bool,
}

impl Bodies<'_> {
    fn all(&self) -> impl Iterator<Item = &LoweredBody> {
        self.segments
            .iter()
            .chain(self.cooperative)
            .chain(self.vector)
    }
}

/// The composed texts of one kernel.
pub(crate) struct Composed {
    /// Header, then the segment entries and (unless `cooperative_ptx` holds it) the
    /// cooperative entry.
    pub(crate) ptx: String,
    /// Header, then the vector entry alone.
    pub(crate) vector_ptx: Option<String>,
    /// Header, then the cooperative entry alone (`Bodies::cooperative_alone`).
    pub(crate) cooperative_ptx: Option<String>,
    /// Where the entries start in `ptx`.
    pub(crate) entries_at: usize,
    /// The libm routines the entries call.
    pub(crate) libm: BTreeSet<Libm>,
}

/// The kernel's modules: the segment and cooperative entries (or each alone), and the
/// vector entry alone. Each starts with a header declaring what its entries use (the libm
/// tables of every entry), so the driver compiles each on its own.
pub(crate) fn compose(
    program: &Program,
    abi: &KernelAbi,
    target: PtxTarget,
    bodies: &Bodies<'_>,
) -> Composed {
    let libm: BTreeSet<Libm> = bodies
        .all()
        .flat_map(|b| b.libm_used.iter().copied())
        .collect();
    let digest = program.fingerprint();
    let provenance = format!(
        "program {:02x}{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
        digest[0], digest[1], digest[2], digest[3], digest[4], digest[5], digest[6], digest[7]
    );
    // The cooperative entry's segments that follow the segment entries in `ptx`, and those
    // that get a module of their own: one of the two is empty.
    let (cooperative_beside, cooperative_own) = match bodies.cooperative_alone {
        true => (&[][..], bodies.cooperative),
        false => (bodies.cooperative, &[][..]),
    };
    let main_uses = uses_of(bodies.segments.iter().chain(cooperative_beside));
    let header_for = |uses| header(target, &libm, &provenance, uses);
    let shared = match abi.shared_bytes {
        0 => String::new(),
        bytes => format!("\t.shared .align 16 .b8 vyre_shared[{bytes}];\n"),
    };
    let size: usize = bodies.all().map(|b| b.body.len() + b.prologue.len()).sum();
    let header = header_for(main_uses);
    let mut ptx = String::with_capacity(header.len() + size + 1024);
    ptx.push_str(&header);
    let entries_at = ptx.len();
    let params = param_list(abi.params());
    for (index, body) in bodies.segments.iter().enumerate() {
        let name = abi.entry_name(index as u32);
        put_entry(&mut ptx, &name, &params, abi, &shared, body);
    }
    let cooperative = Cooperative {
        params: &params,
        abi,
        shared: &shared,
        clock: bodies.clock,
    };
    if !cooperative_beside.is_empty() {
        cooperative.put(&mut ptx, cooperative_beside);
    }
    let cooperative_ptx = (!cooperative_own.is_empty()).then(|| {
        let mut text = header_for(uses_of(cooperative_own.iter()));
        cooperative.put(&mut text, cooperative_own);
        text
    });
    let vector_ptx = bodies.vector.map(|vector| {
        let mut text = header_for(uses_of(std::iter::once(vector)));
        let params = param_list(abi.vector_params());
        put_entry(&mut text, VECTOR_ENTRY, &params, abi, &shared, vector);
        text
    });
    Composed {
        ptx,
        vector_ptx,
        cooperative_ptx,
        entries_at,
        libm,
    }
}

/// What a module holding the entries `bodies` uses.
fn uses_of<'b>(bodies: impl Iterator<Item = &'b LoweredBody>) -> ModuleUses {
    ModuleUses::of(bodies.flat_map(|b| [b.prologue.as_str(), b.body.as_str()]))
}

/// The module's 16 zeroed bytes, which out-of-bounds global loads read (up to a `v2.u64`)
/// instead of being predicated (`lower::memory`). Nothing writes it.
pub(crate) const ZERO_PAGE: &str = "vyre_zero_page";

/// The module's 16 bytes that the stores of speculated branches (`lower::speculate`)
/// write where the branch is not taken or the index is out of bounds: an unpredicated
/// store lets ptxas unroll the loop. Nothing reads it.
pub(crate) const STORE_SINK: &str = "vyre_store_sink";

/// What a module's header declares for its entries.
#[derive(Clone, Copy, Default)]
pub(crate) struct ModuleUses {
    /// An entry reads the zero page (its prologue takes its address).
    zero_page: bool,
    /// An entry writes the store sink (its prologue takes its address).
    store_sink: bool,
    /// An entry takes blocks of the device heap (`lower::async_copy`'s snapshots of
    /// run-time size): it calls the PTX system call `malloc`.
    heap: bool,
}

impl ModuleUses {
    /// What the entry texts `texts` (prologues and bodies) use.
    pub(crate) fn of<'t>(texts: impl IntoIterator<Item = &'t str>) -> Self {
        texts.into_iter().fold(Self::default(), |uses, text| Self {
            zero_page: uses.zero_page || text.contains(ZERO_PAGE),
            store_sink: uses.store_sink || text.contains(STORE_SINK),
            heap: uses.heap || text.contains(", malloc, ("),
        })
    }
}

/// The device heap's system calls, declared where an entry calls them.
const HEAP_DECLS: &str = ".extern .func (.param .b64 vyre_heap_block) malloc (.param .b64 vyre_heap_bytes);\n.extern .func free (.param .b64 vyre_heap_free);\n\n";

/// Provenance comment, `.version`/`.target`, the zero page when an entry reads it (an
/// unused module variable still costs the JIT time), the heap's system calls when an entry
/// calls them, and the `.const` tables of the libm routines `libm` (their code is inlined
/// into the entries).
pub(crate) fn header(
    target: PtxTarget,
    libm: &BTreeSet<Libm>,
    provenance: &str,
    uses: ModuleUses,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "//\n// Generated by vyre-cuda {} (emitter v{EMITTER_VERSION}) for {provenance}\n//",
        env!("CARGO_PKG_VERSION"),
    );
    let _ = writeln!(out, ".version {}", target.isa());
    let _ = writeln!(out, ".target sm_{}", target.sm());
    let _ = writeln!(out, ".address_size 64\n");
    if uses.zero_page {
        let _ = writeln!(out, ".global .align 16 .b8 {ZERO_PAGE}[16];\n");
    }
    if uses.store_sink {
        let _ = writeln!(out, ".global .align 16 .b8 {STORE_SINK}[16];\n");
    }
    if uses.heap {
        out.push_str(HEAP_DECLS);
    }
    out.push_str(&libm::tables_text(libm));
    out
}

fn param_list(params: impl Iterator<Item = KernelParam>) -> String {
    params
        .map(|param| format!("\t.param .{} {}", param.ptx_type(), param.name()))
        .collect::<Vec<_>>()
        .join(",\n")
}

fn put_entry_head(out: &mut String, name: &str, params: &str, abi: &KernelAbi) {
    let [x, y, z] = abi.workgroup_size;
    let _ = writeln!(out, ".visible .entry {name}(\n{params}\n)");
    let _ = writeln!(out, ".reqntid {x}, {y}, {z}\n{{");
}

fn put_entry(
    out: &mut String,
    name: &str,
    params: &str,
    abi: &KernelAbi,
    shared: &str,
    body: &LoweredBody,
) {
    put_entry_head(out, name, params, abi);
    out.push_str(&body.decls);
    out.push_str(shared);
    out.push_str(&body.prologue);
    out.push_str(&body.body);
    out.push_str("}\n\n");
}

/// Registers of the cooperative entry's clock stamps, declared at entry scope beside the
/// grid barrier's (segments declare theirs in nested scopes), and the arrival count.
const CLOCK_DECLS: &str = "\t.reg .pred %vcp<1>;\n\t.reg .b32 %vcr<3>;\n\t.reg .b64 %vcrd<2>;\n";

/// The cooperative entry's head: its parameters, workgroup memory and whether it is timed.
struct Cooperative<'a> {
    params: &'a str,
    abi: &'a KernelAbi,
    shared: &'a str,
    clock: bool,
}

impl Cooperative<'_> {
    /// Every segment in one entry, a software grid barrier between consecutive ones; a
    /// timed kernel stamps the block's start after the barrier's prologue (its leader and
    /// fault area) and its end where every invocation finishes.
    fn put(&self, out: &mut String, segments: &[LoweredBody]) {
        let abi = self.abi;
        put_entry_head(out, &abi.cooperative_entry_name(), self.params, abi);
        out.push_str(grid_barrier::BARRIER_DECLS);
        if self.clock {
            out.push_str(CLOCK_DECLS);
            out.push_str(clock::ARRIVED_DECL);
        }
        out.push_str(self.shared);
        grid_barrier::barrier_prologue(out);
        if self.clock {
            let mut w = PtxWriter::default();
            clock::put_start(&mut w, grid_barrier::LEADER, grid_barrier::AREA, "%vcrd0");
            emit!(w, "barrier.sync 0");
            out.push_str(&w.into_body());
        }
        let done = "vyre_grid_done";
        for (index, body) in segments.iter().enumerate() {
            // Each segment in its own scope: its registers and labels are its own.
            out.push_str("\t{\n");
            out.push_str(&body.decls);
            out.push_str(&body.prologue);
            out.push_str(&body.body);
            out.push_str("\t}\n");
            let _ = writeln!(out, "{}:", segment_end_label(index));
            if index + 1 < segments.len() {
                grid_barrier::barrier(out, index, done);
            }
        }
        let _ = writeln!(out, "{done}:");
        if self.clock {
            let mut w = PtxWriter::default();
            let regs = EndRegs {
                words: ["%vcr0", "%vcr1", "%vcr2"],
                pred: "%vcp0",
                time: "%vcrd1",
            };
            let threads = abi.threads_per_workgroup();
            clock::put_end(&mut w, threads, grid_barrier::AREA, &regs, "ret");
            out.push_str(&w.into_body());
        } else {
            out.push_str("\tret;\n");
        }
        out.push_str("}\n\n");
    }
}
