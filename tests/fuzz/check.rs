//! What counts as a failure, on the CPU (emitter + reference) and on the GPU (backend vs
//! reference), and the predicates the shrinker keeps true.

use super::case::FuzzCase;
use super::oracle::{self, catch_quiet, Outcome, Verdict};
use vyre_cuda::codegen::{emit_ptx, CodegenError, EmittedKernel, PtxTarget};
use vyre_cuda::{CudaBackend, CudaError};
use vyre_driver::BackendError;
use vyre_foundation::ir::Node;

/// The two targets every kernel is emitted and assembled for.
pub fn targets() -> [(PtxTarget, &'static str); 2] {
    [(PtxTarget::sm80(), "sm_80"), (PtxTarget::sm90(), "sm_90")]
}

/// A finding: `kind` is stable (used to keep a shrink on the same failure), `detail`
/// says what happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub kind: String,
    pub detail: String,
}

impl Failure {
    pub fn new(kind: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            detail: detail.into(),
        }
    }
}

/// The emitter's answer for one target.
pub enum Emitted {
    Kernel(Box<EmittedKernel>),
    /// `CodegenError::Unsupported`: an honest rejection, named by its construct.
    Rejected(String),
    Failed(Failure),
}

/// First line of a panic message (panics carry locations and values that vary).
pub fn panic_key(message: &str) -> String {
    let line = message.lines().next().unwrap_or("");
    line.chars().take(120).collect()
}

/// Emit `case` for `target`, checking that it neither panics nor fails without a `Fix:`.
/// `valid`: the program passed vyre's validator, so `Invalid` errors are findings too.
pub fn emit(case: &FuzzCase, target: PtxTarget, name: &str, valid: bool) -> Emitted {
    match catch_quiet(|| emit_ptx(&case.program, case.config.workgroup_override, target)) {
        Err(p) => Emitted::Failed(Failure::new(
            format!("emitter-panic: {}", panic_key(&p)),
            format!("emit_ptx for {name} panicked: {p}"),
        )),
        Ok(Ok(kernel)) => {
            let hazard = kernel.modules().find_map(ptxas_hazard);
            match hazard {
                Some(hazard) => Emitted::Failed(Failure::new(
                    hazard.kind,
                    format!("emit_ptx for {name}: {}: {}", hazard.what, hazard.line),
                )),
                None => Emitted::Kernel(Box::new(kernel)),
            }
        }
        Ok(Err(error)) => {
            let text = BackendError::from(CudaError::from(error.clone())).to_string();
            if text.matches("Fix:").count() != 1 {
                return Emitted::Failed(Failure::new(
                    "missing-fix",
                    format!("emit_ptx for {name}: error without a Fix: hint: {text}"),
                ));
            }
            match &error {
                CodegenError::Unsupported { construct, .. } => Emitted::Rejected(construct.clone()),
                _ if valid => Emitted::Failed(Failure::new(
                    "emitter-invalid",
                    format!(
                        "emit_ptx for {name} refused a program vyre's validator accepts: {error}"
                    ),
                )),
                _ => Emitted::Rejected(format!("invalid: {error}")),
            }
        }
    }
}

/// A PTX shape that a known ptxas miscompile needs, which the emitter's workarounds keep
/// out of every kernel.
pub struct PtxasHazard {
    /// The fuzz finding's kind.
    pub kind: &'static str,
    /// What the shape is.
    pub what: &'static str,
    /// The first line with it.
    pub line: String,
}

/// The first hazard in `ptx` of the fuzz checker's gates: [`visible_sync_operand`],
/// [`nested_i32_minmax`], [`skipped_collective`], [`function_call`],
/// [`super::defined::undefined_read`].
pub fn ptxas_hazard(ptx: &str) -> Option<PtxasHazard> {
    type Gate = fn(&str) -> Option<String>;
    let gates: [(&'static str, &'static str, Gate); 9] = [
        (
            "sync-operand-visible",
            "a warp-synchronous operand ptxas can see through",
            visible_sync_operand,
        ),
        (
            "unaligned-barrier",
            "a non-.aligned workgroup barrier in an entry whose leaving lanes exit",
            unaligned_barrier,
        ),
        (
            "awaited-early-end",
            "a barrier or warp-synchronous instruction its workgroup runs after a lane branched to its segment's end",
            awaited_early_end,
        ),
        (
            "nested-i32-minmax",
            "an i32 min/max of another's result",
            nested_i32_minmax,
        ),
        (
            "skipped-collective",
            "a warp-synchronous instruction a vote-steered branch skips",
            skipped_collective,
        ),
        (
            "unanchored-collective",
            "a warp-synchronous result the next conditional branch does not steer by",
            unanchored_collective,
        ),
        (
            "constant-anchored-branch",
            "a branch predicate ptxas can fold, xor a predicate anchoring subgroup results",
            constant_anchored_branch,
        ),
        (
            "function-call",
            "a call of a .func (ptxas may clobber the caller's uniform registers)",
            function_call,
        ),
        (
            "undefined-read",
            "a register read that a path from the entry reaches unwritten",
            super::defined::undefined_read,
        ),
    ];
    gates
        .into_iter()
        .find_map(|(kind, what, gate)| gate(ptx).map(|line| PtxasHazard { kind, what, line }))
}

/// Which line defines each register, as a PTX text is read line by line.
type Definitions<'a> = std::collections::HashMap<&'a str, &'a str>;

/// A PTX line's opcode (a `@p` guard stays on it) and its comma-separated operands.
fn instruction(line: &str) -> (&str, Vec<&str>) {
    let (op, args) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    let args = args
        .trim_end_matches(';')
        .split(',')
        .map(str::trim)
        .collect();
    (op, args)
}

/// Record `line` as the definition of its destination registers (unguarded lines only:
/// a guarded one may leave the old value). `d|p` pairs define both; a `{lo, hi}` list
/// spans the first two operands.
fn define<'a>(line: &'a str, op: &str, args: &[&'a str], defs: &mut Definitions<'a>) {
    let Some(dest) = args.first().filter(|_| !op.starts_with('@')) else {
        return;
    };
    for d in dest
        .trim_matches(|c| c == '{' || c == '}')
        .split(['|', ','])
    {
        defs.insert(d.trim(), line);
    }
    if dest.starts_with('{') {
        if let Some(hi) = args.get(1) {
            defs.insert(hi.trim_end_matches('}').trim(), line);
        }
    }
}

/// The first i32 `min`/`max` with an operand another i32 `min`/`max` wrote directly.
/// ptxas (12.x, 13.0, sm_90) fuses such a chain into `VIMNMX3`, which drops a negated
/// operand (`tests/fuzz_regressions/gpu-mismatch-i32-max-of-max-of-negation-drops-negation.case`);
/// the emitter passes each result through the opaque zero first.
pub fn nested_i32_minmax(ptx: &str) -> Option<String> {
    let is_minmax = |op: &str| op == "min.s32" || op == "max.s32";
    let mut defs = Definitions::new();
    for line in ptx.lines().map(str::trim) {
        let (op, args) = instruction(line);
        let of_minmax = |a: &&str| defs.get(a).is_some_and(|d| is_minmax(instruction(d).0));
        if is_minmax(op) && args[1..].iter().any(of_minmax) {
            return Some(line.to_string());
        }
        define(line, op, &args, &mut defs);
    }
    None
}

/// The first `.func` or `call` line. ptxas 12.9 and 13.0 at `-O1` and above (and the 580
/// driver's JIT) compile a `.func` per caller and may let it write a uniform register the
/// caller keeps live across the call: `log2f(0)` set `UR4`, which held the kernel's zero
/// page address, to `1.0f`, and a later out-of-bounds load faulted
/// (`tests/fuzz_regressions/gpu-illegal-address-libm-call-clobbers-uniform-register.case`).
/// The emitter inlines the libm routines instead. Exempt: the device heap's system calls
/// `malloc` and `free` (`lower::async_copy`'s snapshots of run-time size), which ptxas
/// does not compile: they are calls across the ABI (`CALL.ABS.NOINC`), after which
/// ptxas keeps only what the ABI says the callee preserves.
pub fn function_call(ptx: &str) -> Option<String> {
    let heap = |line: &str| {
        line.starts_with(".extern .func (.param .b64 vyre_heap_block) malloc (")
            || line.starts_with(".extern .func free (")
            || line.starts_with("call (vyre_heap_block), malloc, (")
            || line.starts_with("call free, (")
    };
    ptx.lines()
        .map(str::trim)
        .find(|line| {
            (line.starts_with(".func") || line.starts_with("call") || line.contains(" .func "))
                && !heap(line)
        })
        .map(str::to_string)
}

/// The first warp-synchronous instruction (`redux`, `shfl`, `vote`, `match` `.sync`) inside a
/// region that a branch on a `vote.sync.any` result skips, unless the region holds an
/// atomic. ptxas 13.0 -O1 and above (and the 580 driver's JIT) guard such a `redux.sync`
/// with an unrelated predicate, so the warp reduces over no lanes
/// (`tests/fuzz_regressions/gpu-missed-error-redux-under-uniform-branch-*.case`); the step
/// machine evaluates operands without side effects every round instead.
pub fn skipped_collective(ptx: &str) -> Option<String> {
    let lines: Vec<&str> = ptx.lines().map(str::trim).collect();
    for (at, line) in lines.iter().enumerate() {
        let (op, args) = instruction(line);
        if op != "vote.sync.any.pred" {
            continue;
        }
        // The branch on it comes next, after `branch_pred`'s xor where the program has one;
        // the skipped region ends at its target or at the unconditional jump past it.
        let branch = lines[at + 1..].iter().take(3).find_map(|l| {
            let rest = l.strip_prefix("@!%p")?;
            let target = rest.split_once(" bra ")?.1.trim_end_matches(';');
            Some(target)
        });
        let Some(target) = branch.filter(|_| args.len() > 1) else {
            continue;
        };
        let end = format!("{target}:");
        let region: Vec<&str> = lines[at + 1..]
            .iter()
            .copied()
            .take_while(|l| *l != end && !l.starts_with("bra "))
            .collect();
        if region.iter().any(|l| unguarded(l).starts_with("atom.")) {
            continue;
        }
        let collective = |l: &&str| {
            let op = unguarded(l).split_whitespace().next().unwrap_or("");
            ["redux.sync", "shfl.sync", "vote.sync", "match.sync"]
                .iter()
                .any(|c| op.starts_with(c))
        };
        if let Some(found) = region.iter().find(|l| collective(l)) {
            return Some(found.to_string());
        }
    }
    None
}

/// The first warp-synchronous instruction (`vote`, `shfl`, `redux`, `match` `.sync`)
/// whose result the first conditional branch after it does not steer by, directly or
/// through what was computed from it (the path is followed through forward unconditional
/// branches, up to a loop's back edge; a libm routine's inner branches and a grid
/// barrier's own do not count).
/// ptxas 13.0 sinks such an instruction into a data-dependent branch that reads its
/// result, where the lanes that took it wait for lanes that never come
/// (`tests/fuzz_regressions/gpu-hang-vote-sunk-into-a-branch.case`); the emitter makes the
/// next branch depend on every subgroup result (`Lowerer::anchor`).
pub fn unanchored_collective(ptx: &str) -> Option<String> {
    let lines: Vec<&str> = ptx.lines().map(str::trim).collect();
    let labels: std::collections::HashMap<&str, usize> = lines
        .iter()
        .enumerate()
        .filter_map(|(at, line)| line.strip_suffix(':').map(|name| (name, at)))
        .collect();
    // Aggregated atomics combine over the lanes present (`activemask`): no lane waits.
    let present: std::collections::HashSet<&str> = lines
        .iter()
        .filter_map(|line| line.strip_prefix("activemask.b32 "))
        .map(|dest| dest.trim_end_matches(';'))
        .collect();
    lines.iter().enumerate().find_map(|(at, line)| {
        let (opcode, args) = instruction(unguarded(line));
        let collective = ["redux.sync", "shfl.sync", "vote.sync", "match.sync"]
            .iter()
            .any(|c| opcode.starts_with(c))
            && !args.last().is_some_and(|mask| present.contains(mask));
        let branch = collective.then(|| unsteered_branch(&lines, &labels, at + 1, args[0]));
        branch
            .flatten()
            .map(|branch| format!("{line} (the next branch: {branch})"))
    })
}

/// A register operand without its braces, brackets or negation.
fn register(operand: &str) -> String {
    operand
        .trim_matches(|c| matches!(c, '{' | '}' | '[' | ']' | '!'))
        .trim()
        .to_string()
}

/// The first conditional branch from line `from` on (following unconditional ones) whose
/// guard does not depend on `dest`, if that is the first conditional branch.
fn unsteered_branch<'a>(
    lines: &[&'a str],
    labels: &std::collections::HashMap<&str, usize>,
    mut from: usize,
    dest: &str,
) -> Option<&'a str> {
    let mut tainted: std::collections::HashSet<String> = dest.split('|').map(register).collect();
    let mut followed = std::collections::HashSet::new();
    while let Some(&line) = lines.get(from) {
        from += 1;
        let op = unguarded(line);
        let guard = line
            .strip_prefix('@')
            .and_then(|g| g.split_whitespace().next())
            .map(register);
        if op.starts_with("exit") || op.starts_with("ret") {
            return None;
        }
        if op.starts_with("bra") || op.starts_with("brx.idx") {
            let target = op
                .split_whitespace()
                .last()
                .unwrap_or("")
                .trim_end_matches(';');
            match guard {
                // A loop's back edge: the instruction runs once per iteration, so ptxas
                // cannot sink it past the loop's test.
                None => match labels.get(target) {
                    Some(&at) if at >= from && followed.insert(at) => from = at + 1,
                    _ => return None,
                },
                Some(g) if g.starts_with("%gp") || target.starts_with("$Lv") => {}
                Some(g) => return (!tainted.contains(&g)).then_some(line),
            }
            continue;
        }
        let (_, args) = instruction(op);
        let Some(dest) = args
            .first()
            .filter(|d| d.starts_with('%') || d.starts_with('{'))
        else {
            continue;
        };
        let reads_tainted = args[1..]
            .iter()
            .map(|a| register(a))
            .chain(guard)
            .any(|s| tainted.contains(&s));
        if reads_tainted {
            tainted.extend(dest.split(['|', ',']).map(register));
        }
    }
    None
}

/// `line` without its `@p` guard.
fn unguarded(line: &str) -> &str {
    match line.strip_prefix('@') {
        Some(rest) => rest
            .split_once(char::is_whitespace)
            .map_or("", |(_, op)| op.trim_start()),
        None => line,
    }
}

/// The first non-`.aligned` workgroup barrier (`barrier.sync`, `barrier.red`) of an entry
/// whose leaving lanes exit (no cooperative segment end, no clock end block). ptxas 13.0
/// gives that form a divergent-warp fallback which deadlocks beside warp-synchronous
/// operations (`tests/fuzz_regressions/gpu-hang-4f2d46484763c667-shrunk.case`); there
/// every live lane of a warp meets at each barrier, so the emitter uses `bar`.
pub fn unaligned_barrier(ptx: &str) -> Option<String> {
    ptx.split(".entry ")
        .skip(1)
        .filter(|entry| !entry.contains("vyre_segment_end_") && !entry.contains("vyre_clock_end"))
        .flat_map(str::lines)
        .map(str::trim)
        .find(|line| unguarded(line).starts_with("barrier."))
        .map(str::to_string)
}

/// The first workgroup barrier or warp-synchronous instruction that the rest of a lane's
/// workgroup can run after the lane branched to its cooperative segment's end: one after
/// the branch (before the end's label), or one inside the loop that the branch follows
/// (later iterations). The lane waits at the segment's end barrier and that instruction
/// waits for it: a deadlock (`grid_programs::fault_in_a_loop_before_a_subgroup_reduction`,
/// `fault_inside_a_barrier_loop`; a lane that faults leaves its loop and ends).
pub fn awaited_early_end(ptx: &str) -> Option<String> {
    let synchronises = |line: &str| {
        let op = unguarded(line);
        op.starts_with("bar") || op.contains(".sync")
    };
    let lines: Vec<&str> = ptx.lines().map(str::trim).collect();
    let mut ended: Option<&str> = None;
    for (at, &line) in lines.iter().enumerate() {
        match ended {
            Some(end) if line.strip_suffix(':') == Some(end) => ended = None,
            Some(_) if synchronises(line) => return Some(line.to_string()),
            Some(_) => {}
            None => {
                ended = branch_target(line).filter(|t| t.starts_with("vyre_segment_end_"));
                if ended.is_some() {
                    if let Some(&sync) = loop_left(&lines[..at]).iter().find(|l| synchronises(l)) {
                        return Some(sync.to_string());
                    }
                }
            }
        }
    }
    None
}

/// The target of a (possibly guarded) `bra`.
fn branch_target(line: &str) -> Option<&str> {
    let op = unguarded(line);
    let target = op
        .strip_prefix("bra ")
        .or_else(|| op.strip_prefix("bra.uni "))?;
    Some(target.trim_end_matches(';').trim())
}

/// The loop a lane leaves when `lines` (a segment up to a branch to its end) end the way
/// the emitter ends a lane that faulted in a loop: the loop's back edge, its exit label,
/// then a guarded branch around the ending (`@!faulted bra`). Empty for any other ending.
fn loop_left<'l, 'a>(lines: &'l [&'a str]) -> &'l [&'a str] {
    let guarded_skip = |l: &&str| l.starts_with('@') && branch_target(l).is_some();
    if !lines.last().is_some_and(guarded_skip) {
        return &[];
    }
    let Some(exit) = lines.iter().rposition(|l| l.ends_with(':')) else {
        return &[];
    };
    let Some(target) = exit
        .checked_sub(1)
        .and_then(|edge| branch_target(lines[edge]))
    else {
        return &[];
    };
    let label = format!("{target}:");
    match lines[..exit - 1].iter().rposition(|l| *l == label) {
        Some(top) => &lines[top..exit - 1],
        None => &[],
    }
}

/// The first warp-synchronous instruction (`vote`, `shfl`, `redux`, `match` `.sync`) with
/// a register operand that does not come through the opaque zero (the emitter's
/// `sync_operand`). ptxas 13.0 rematerialises such an instruction whose operands it can
/// prove constant where its result is used, inside divergent code, and the warp hangs
/// (`tests/fuzz_regressions/gpu-hang-fe07102fb36b3fcd.case`): every operand must be one
/// ptxas cannot see through.
pub fn visible_sync_operand(ptx: &str) -> Option<String> {
    let mut zero = None;
    let mut defs = Definitions::new();
    for line in ptx.lines().map(str::trim) {
        let (op, args) = instruction(line);
        if args.get(1) == Some(&"%dynamic_smem_size") {
            zero = Some(args[0]);
        }
        if op.contains(".sync") && !op.starts_with("bar") {
            // Destination(s) first, the member mask last.
            let operands = &args[1..args.len().saturating_sub(1)];
            let hidden = |r: &&str| !r.starts_with('%') || through_opaque_zero(r, &defs, zero, 0);
            if !operands.iter().all(hidden) {
                return Some(line.to_string());
            }
        }
        define(line, op, &args, &mut defs);
    }
    None
}

/// The first `xor.pred` of a predicate ptxas can prove constant with one anchoring
/// subgroup results (`and.pred`/`setp.*.and` onto the hidden `opaque zero == 16`,
/// `Lowerer::anchor`). ptxas 12.9-13.0 (sm_90) compile a branch steering by `true xor
/// (hidden && result)` whose taken side ends the kernel into an exit of the wrong polarity
/// (`tests/fuzz_regressions/gpu-error-constant-branch-after-a-ballot-takes-the-other-side.case`);
/// `Lowerer::hide_constant` passes such a constant through the opaque zero first.
pub fn constant_anchored_branch(ptx: &str) -> Option<String> {
    // A register written more than once (a flag set in a branch) is no constant.
    let mut written = std::collections::HashMap::<&str, u32>::new();
    for line in ptx.lines().map(str::trim) {
        // A guarded write counts too.
        let line = unguarded(line);
        let (op, args) = instruction(line);
        let mut once = Definitions::new();
        define(line, op, &args, &mut once);
        for reg in once.into_keys() {
            *written.entry(reg).or_default() += 1;
        }
    }
    let mut defs = Definitions::new();
    for line in ptx.lines().map(str::trim) {
        let (op, args) = instruction(line);
        if op == "xor.pred" && args.len() == 3 {
            let (left, right) = (args[1], args[2]);
            let anchored = |r: &str| {
                defs.get(r).is_some_and(|def| {
                    def.starts_with("and.pred") || def.starts_with("setp.ne.and.")
                })
            };
            let constant = |r: &str| is_folded_constant(r, &defs, &written, 0);
            let flagged =
                (constant(left) && anchored(right)) || (constant(right) && anchored(left));
            if flagged {
                return Some(line.to_string());
            }
        }
        define(line, op, &args, &mut defs);
    }
    None
}

/// Whether ptxas can prove `operand` constant: an immediate, or a register written once
/// (`written`), by a `mov`, `setp`, `selp` or `not`/`and`/`or`/`xor` of predicates that
/// reads constants alone (special registers such as `%dynamic_smem_size`, the opaque
/// zero, are not).
fn is_folded_constant(
    operand: &str,
    defs: &Definitions<'_>,
    written: &std::collections::HashMap<&str, u32>,
    depth: u32,
) -> bool {
    if !operand.starts_with('%') {
        return !operand.is_empty();
    }
    let (Some(def), Some(1)) = (defs.get(operand), written.get(operand)) else {
        return false;
    };
    let (op, args) = instruction(def);
    let folds = [
        "mov.", "setp.", "selp.", "not.pred", "and.pred", "or.pred", "xor.pred",
    ];
    depth < 6
        && folds.iter().any(|f| op.starts_with(f))
        && args[1..]
            .iter()
            .all(|a| *a != operand && is_folded_constant(a, defs, written, depth + 1))
}

/// Whether `reg` was defined through the opaque zero: directly, by widening it, or as a
/// word of a value that was.
fn through_opaque_zero(reg: &str, defs: &Definitions<'_>, zero: Option<&str>, depth: u32) -> bool {
    let (Some(zero), Some(def)) = (zero, defs.get(reg)) else {
        return false;
    };
    if depth > 3 {
        return false;
    }
    let (op, args) = instruction(def);
    let args: Vec<&str> = args
        .iter()
        .map(|a| a.trim_matches(|c| c == '{' || c == '}'))
        .collect();
    args[1..].contains(&zero)
        || ((op == "or.b64" || def.starts_with("mov.b64 {"))
            && args[1..].iter().any(|a| {
                a.starts_with('%')
                    && *a != reg
                    && through_opaque_zero(a, defs, Some(zero), depth + 1)
            }))
}

/// The modules the runtime may load for an emitted kernel (`EmittedKernel::modules`).
pub fn loaded_modules(kernel: &EmittedKernel) -> Vec<String> {
    kernel.modules().map(str::to_owned).collect()
}

/// The outcome of a GPU dispatch.
pub enum GpuVerdict {
    Pass,
    /// The backend refused the program with an `Unsupported` codegen error.
    Rejected(String),
    Fail(Failure),
}

/// A short, stable-ish description of an error for classification.
fn error_class(error: &CudaError) -> &'static str {
    match error {
        CudaError::Codegen(_) => "codegen",
        CudaError::Driver(e) if e.is_sticky() => "driver-sticky",
        CudaError::Driver(_) => "driver",
        CudaError::InvalidInput { .. } => "invalid-input",
        CudaError::InvalidProgram { .. } | CudaError::Vyre(_) => "rejected",
        CudaError::UnsupportedSetting { .. } => "unsupported-setting",
        CudaError::KernelRuntime { .. } => "kernel-runtime",
        CudaError::OutOfMemory { .. } => "out-of-memory",
        CudaError::JitHelper { .. } => "jit-helper",
        CudaError::ShutDown => "shut-down",
        CudaError::DeviceLost { .. } => "device-lost",
        CudaError::Nccl(_) => "nccl",
        CudaError::CollectiveAborted { .. } => "collective-aborted",
    }
}

/// Whether a failed dispatch poisoned the device for the rest of the process.
pub fn is_sticky(error: &CudaError) -> bool {
    matches!(error, CudaError::DeviceLost { .. })
        || matches!(error, CudaError::Driver(e) if e.is_sticky())
}

/// The backend's outputs or error for `case` (a panic becomes an error text).
pub fn dispatch(
    backend: &CudaBackend,
    case: &FuzzCase,
) -> Result<Result<Vec<Vec<u8>>, CudaError>, String> {
    catch_quiet(|| backend.dispatch(&case.program, &case.inputs, &case.config))
}

/// Compare the backend with the reference verdict.
pub fn gpu_check(backend: &CudaBackend, case: &FuzzCase, verdict: &Verdict) -> GpuVerdict {
    let got = match dispatch(backend, case) {
        Err(p) => {
            return GpuVerdict::Fail(Failure::new(
                format!("backend-panic: {}", panic_key(&p)),
                format!("CudaBackend::dispatch panicked: {p}"),
            ))
        }
        Ok(got) => got,
    };
    match (&verdict.outcome, got) {
        (Outcome::Ok(want), Ok(got)) if *want == got => GpuVerdict::Pass,
        (Outcome::Ok(want), Ok(got)) => GpuVerdict::Fail(Failure::new(
            "mismatch",
            oracle::first_difference(&case.program, want, &got),
        )),
        (Outcome::Ok(_), Err(CudaError::Codegen(CodegenError::Unsupported { construct, .. }))) => {
            GpuVerdict::Rejected(construct)
        }
        (Outcome::Ok(_), Err(error)) => GpuVerdict::Fail(Failure::new(
            format!("gpu-error: {}", error_class(&error)),
            format!("the reference succeeds but the backend fails: {error}"),
        )),
        (Outcome::Err(_), Err(error)) => {
            let text = BackendError::from(error.clone()).to_string();
            if text.matches("Fix:").count() == 1 {
                GpuVerdict::Pass
            } else {
                GpuVerdict::Fail(Failure::new(
                    "missing-fix",
                    format!("backend error without a Fix: hint: {text}"),
                ))
            }
        }
        (Outcome::Err(reference), Ok(_)) => GpuVerdict::Fail(Failure::new(
            "missed-error",
            format!("the reference fails ({reference}) but the backend returns outputs"),
        )),
        (Outcome::Panic(p), _) => GpuVerdict::Fail(Failure::new(
            format!("reference-panic: {}", panic_key(p)),
            format!("vyre-reference panicked: {p}"),
        )),
    }
}

/// The shrink predicate for GPU findings: still valid, still lane-order independent,
/// still failing with the same kind.
pub fn gpu_still_fails<'b>(
    backend: &'b CudaBackend,
    kind: &str,
) -> impl FnMut(&FuzzCase) -> bool + 'b {
    let kind = kind.to_string();
    move |case| {
        if oracle::validate(&case.program).is_err() {
            return false;
        }
        let verdict = oracle::judge(case);
        if verdict.lane_order_dependent {
            return false;
        }
        matches!(gpu_check(backend, case, &verdict), GpuVerdict::Fail(f) if f.kind == kind)
    }
}

/// All CPU-side findings for `case`: emitter panics, `Fix:`-less errors, `Invalid`
/// errors on valid programs, reference panics. Kernels that emitted are returned for
/// assembly, per target.
pub fn cpu_check(
    case: &FuzzCase,
    valid: bool,
) -> (Vec<Failure>, Vec<Option<Vec<String>>>, Vec<String>) {
    let mut failures = Vec::new();
    let mut kernels = Vec::new();
    let mut rejected = Vec::new();
    let mut converged = false;
    for (target, name) in targets() {
        match emit(case, target, name, valid) {
            Emitted::Kernel(k) => {
                converged |= k.step_machine_segments == 0;
                kernels.push(Some(loaded_modules(&k)));
            }
            Emitted::Rejected(construct) => {
                rejected.push(construct);
                kernels.push(None);
            }
            Emitted::Failed(f) => {
                failures.push(f);
                kernels.push(None);
            }
        }
    }
    if valid && converged {
        failures.extend(missed_timing_error(case));
    }
    (failures, kernels, rejected)
}

/// A converged kernel (no step machine) for a valid program without `Return` on which the
/// reference fails to read a variable: only a subgroup operand read from a lane at another
/// step does that (a lane that has not bound it yet, or has closed its scope;
/// `analysis::lockstep`), and such a program must run as a step machine, which checks
/// every lane's bindings where the reference reads them (`lower::steps`), as its converged
/// kernel would run where the reference fails. (With `Return`, a returned lane that never
/// bound the variable fails the converged kernel too.)
fn missed_timing_error(case: &FuzzCase) -> Option<Failure> {
    fn returns(nodes: &[Node]) -> bool {
        nodes.iter().any(|node| match node {
            Node::Return => true,
            Node::If {
                then, otherwise, ..
            } => returns(then) || returns(otherwise),
            Node::Loop { body, .. } | Node::Block(body) => returns(body),
            Node::Region { body, .. } => returns(body),
            _ => false,
        })
    }
    let subgroups = super::coverage::unlowered_constructs(&case.program).contains("subgroup:any");
    if !subgroups || returns(case.program.entry()) {
        return None;
    }
    match oracle::reference(case) {
        Outcome::Err(error) if error.contains("undeclared variable") => Some(Failure::new(
            "missed-timing-error",
            format!("a kernel was emitted, but the reference reads a lane at another step and fails: {error}"),
        )),
        _ => None,
    }
}

/// The shrink predicate for CPU findings of `kind` (`ptxas-sm_NN` kinds assemble).
pub fn cpu_still_fails(
    kind: &str,
    ptxas: Option<std::path::PathBuf>,
    require_valid: bool,
) -> impl FnMut(&FuzzCase) -> bool {
    let kind = kind.to_string();
    move |case| {
        let valid = oracle::validate(&case.program).is_ok();
        if require_valid && !valid {
            return false;
        }
        if let Some(rest) = kind.strip_prefix("ptxas-") {
            // `ptxas-sm_90` (CUDA 13) or `ptxas-sm_90-cuda12`.
            let (arch, cu12) = match rest.strip_suffix("-cuda12") {
                Some(arch) => (arch, true),
                None => (rest, false),
            };
            let compiler = if cu12 {
                crate::common::ptxas::cu12_ptxas()
            } else {
                ptxas.clone()
            };
            let index = targets().iter().position(|(_, n)| *n == arch).unwrap_or(1);
            let (target, name) = targets()[index];
            return match (emit(case, target, name, valid), compiler) {
                (Emitted::Kernel(k), Some(p)) => loaded_modules(&k)
                    .iter()
                    .any(|m| crate::common::ptxas::assemble_with(&p, m, arch).is_err()),
                _ => false,
            };
        }
        if kind.starts_with("reference-panic") {
            return matches!(oracle::reference(case), Outcome::Panic(p) if format!("reference-panic: {}", panic_key(&p)) == kind);
        }
        let (failures, _, _) = cpu_check(case, valid);
        failures.iter().any(|f| f.kind == kind)
    }
}
