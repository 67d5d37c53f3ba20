//! Assemble many emitted kernels with few `ptxas` runs, on every core.
//!
//! The gate assembles thousands of kernels, each for two targets with two compilers, and
//! each `ptxas` process costs tens of milliseconds of its own. So kernels are merged:
//! modules of the same header are concatenated with their entries renamed (registers,
//! labels and `.shared` arrays are scoped to their entry) and the module-scope items they
//! share (the zero page, libm tables, `malloc`'s declaration) written once; a kernel whose item of some name differs from the batch's starts a
//! new batch. Identical texts are assembled once. A failing batch is bisected down to
//! its failing kernels, which are assembled alone for their own error text.

#![allow(dead_code)]

use super::ptxas::{assemble_with, cu12_ptxas, cu12_reads, ptx_target};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// One kernel to assemble: an identifier for reports and the PTX text.
#[derive(Clone)]
pub struct Kernel {
    pub id: String,
    pub ptx: String,
}

/// A kernel `ptxas` refused.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub id: String,
    /// `"cuda13"` or `"cuda12"`.
    pub compiler: &'static str,
    /// The `-arch` it was assembled for (the module's `.target`).
    pub arch: String,
    pub error: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({} {}): {}",
            self.id, self.compiler, self.arch, self.error
        )
    }
}

/// Kernels per ptxas process: large enough that process start-up is noise, small enough
/// that both cores stay busy to the end and a bisection is short.
const BATCH: usize = 120;

/// The compilers every kernel is assembled with: the pinned CUDA 13 `ptxas` and, when
/// installed, the CUDA 12 one (for the modules whose ISA it reads).
pub fn compilers(primary: &Path) -> Vec<(&'static str, PathBuf)> {
    let mut list = vec![("cuda13", primary.to_path_buf())];
    if let Some(cu12) = cu12_ptxas() {
        list.push(("cuda12", cu12));
    }
    list
}

/// Assembles every kernel for its own `.target` with every compiler of [`compilers`]
/// (the CUDA 12 one where it reads the module's ISA), batched, on all cores; returns the
/// refusals (each kernel sharing a refused text is reported).
pub fn assemble_everywhere(ptxas: &Path, kernels: &[Kernel]) -> Vec<Refusal> {
    assemble_with_each(&compilers(ptxas), kernels, &[])
}

/// [`assemble_everywhere`] for each of `archs` instead of the modules' own `.target`s
/// (an sm_80 module is also assembled for sm_90, as a newer device JITs it).
pub fn assemble_for_archs(ptxas: &Path, kernels: &[Kernel], archs: &[&str]) -> Vec<Refusal> {
    assemble_with_each(&compilers(ptxas), kernels, archs)
}

/// Every kernel with each of `compilers` (labelled as in [`compilers`]; `"cuda12"` only
/// where it reads the ISA) for each of `archs`, or for its `.target` when `archs` is
/// empty.
pub fn assemble_with_each(
    compilers: &[(&'static str, PathBuf)],
    kernels: &[Kernel],
    archs: &[&str],
) -> Vec<Refusal> {
    // Identical texts once: the first id stands for the rest until a refusal names them all.
    let mut ids_of: HashMap<&str, Vec<&str>> = HashMap::new();
    let mut unique: Vec<&Kernel> = Vec::new();
    for k in kernels {
        let ids = ids_of.entry(k.ptx.as_str()).or_default();
        if ids.is_empty() {
            unique.push(k);
        }
        ids.push(&k.id);
    }
    let (jobs, no_target) = plan(compilers, &unique, archs);
    let refused = Mutex::new(no_target);
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                while let Some(job) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let (label, path) = &compilers[job.compiler];
                    for (kernel, error) in assemble_all(path, &job.kernels, &job.arch) {
                        let ids = ids_of.get(kernel.ptx.as_str()).map_or(&[][..], |v| &v[..]);
                        refused.lock().unwrap().extend(ids.iter().map(|id| Refusal {
                            id: id.to_string(),
                            compiler: label,
                            arch: job.arch.clone(),
                            error: error.clone(),
                        }));
                    }
                }
            });
        }
    });
    refused.into_inner().unwrap()
}

/// Up to [`BATCH`] kernels for one compiler and `-arch`.
struct Job<'a> {
    compiler: usize,
    arch: String,
    kernels: Vec<&'a Kernel>,
}

/// The jobs of [`assemble_with_each`], and a refusal for each kernel without a `.target`
/// where `archs` is empty.
fn plan<'a>(
    compilers: &[(&'static str, PathBuf)],
    unique: &[&'a Kernel],
    archs: &[&str],
) -> (Vec<Job<'a>>, Vec<Refusal>) {
    let mut jobs = Vec::new();
    let mut no_target = Vec::new();
    for (c, (label, _)) in compilers.iter().enumerate() {
        let mut by_arch: Vec<(String, Vec<&Kernel>)> = Vec::new();
        for &k in unique {
            if *label == "cuda12" && !cu12_reads(&k.ptx) {
                continue;
            }
            let own: Vec<String> = match archs {
                [] => ptx_target(&k.ptx).into_iter().collect(),
                archs => archs.iter().map(|a| a.to_string()).collect(),
            };
            if own.is_empty() && c == 0 {
                no_target.push(Refusal {
                    id: k.id.clone(),
                    compiler: label,
                    arch: String::new(),
                    error: "the PTX has no `.target sm_NN` directive".into(),
                });
            }
            for arch in own {
                match by_arch.iter_mut().find(|(a, _)| *a == arch) {
                    Some((_, list)) => list.push(k),
                    None => by_arch.push((arch, vec![k])),
                }
            }
        }
        for (arch, list) in by_arch {
            jobs.extend(list.chunks(BATCH).map(|batch| Job {
                compiler: c,
                arch: arch.clone(),
                kernels: batch.to_vec(),
            }));
        }
    }
    (jobs, no_target)
}

/// [`assemble_everywhere`], failing the test with every refusal.
pub fn assert_all_assemble(ptxas: &Path, kernels: &[Kernel]) {
    let refused = assemble_everywhere(ptxas, kernels);
    assert!(
        refused.is_empty(),
        "{} of {} kernels failed ptxas:\n{}",
        refused.len(),
        kernels.len(),
        refused
            .iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Assemble `kernels` for `arch` with `ptxas` in as few modules as their items allow;
/// returns the kernels that fail, each with its error.
fn assemble_all<'a>(ptxas: &Path, kernels: &[&'a Kernel], arch: &str) -> Vec<(&'a Kernel, String)> {
    let mut failures = Vec::new();
    let mut batches: Vec<Batch> = Vec::new();
    for &k in kernels {
        let Some(module) = Module::parse(&k.ptx) else {
            if let Err(e) = assemble_with(ptxas, &k.ptx, arch) {
                failures.push((k, e));
            }
            continue;
        };
        match batches.iter_mut().find(|b| b.admits(&module)) {
            Some(b) => b.add(k, module),
            None => {
                let mut b = Batch::default();
                b.add(k, module);
                batches.push(b);
            }
        }
    }
    for b in &batches {
        bisect(ptxas, &b.members, arch, &mut failures);
    }
    failures
}

fn bisect<'a>(
    ptxas: &Path,
    members: &[(&'a Kernel, Module)],
    arch: &str,
    failures: &mut Vec<(&'a Kernel, String)>,
) {
    match members {
        [] => {}
        [(k, _)] => {
            if let Err(e) = assemble_with(ptxas, &k.ptx, arch) {
                failures.push((k, e));
            }
        }
        _ => {
            if assemble_with(ptxas, &combine(members), arch).is_ok() {
                return;
            }
            let (a, b) = members.split_at(members.len() / 2);
            bisect(ptxas, a, arch, failures);
            bisect(ptxas, b, arch, failures);
        }
    }
}

/// Kernels that can share one module: one header, and at most one text per item name.
#[derive(Default)]
struct Batch<'a> {
    members: Vec<(&'a Kernel, Module<'a>)>,
    items: HashMap<&'a str, &'a str>,
}

impl<'a> Batch<'a> {
    fn admits(&self, module: &Module<'a>) -> bool {
        let Some((_, first)) = self.members.first() else {
            return true;
        };
        first.header == module.header
            && module
                .shared
                .iter()
                .all(|(name, text)| self.items.get(name).is_none_or(|t| t == text))
    }

    fn add(&mut self, kernel: &'a Kernel, module: Module<'a>) {
        for &(name, text) in &module.shared {
            self.items.insert(name, text);
        }
        self.members.push((kernel, module));
    }
}

/// The header, the module-scope items (by name) and the entries of a module.
struct Module<'a> {
    header: &'a str,
    shared: Vec<(&'a str, &'a str)>,
    entries: Vec<(&'a str, &'a str)>,
}

impl<'a> Module<'a> {
    fn parse(ptx: &'a str) -> Option<Self> {
        let at = ptx.find(".address_size")?;
        let end = ptx[at..].find('\n').map_or(ptx.len(), |e| at + e + 1);
        let mut module = Module {
            header: &ptx[..end],
            shared: Vec::new(),
            entries: Vec::new(),
        };
        for item in top_level_items(&ptx[end..])? {
            let head = &item[..item.find(['{', '=', ';']).unwrap_or(item.len())];
            let name = item_name(head)?;
            if head.contains(".entry") {
                module.entries.push((name, item));
            } else {
                module.shared.push((name, item));
            }
        }
        (!module.entries.is_empty()).then_some(module)
    }
}

/// The module's top-level items: declarations up to their `;`, functions up to the `}`
/// closing their body. `None` for text this splitter does not follow (an unbalanced brace).
fn top_level_items(text: &str) -> Option<Vec<&str>> {
    let bytes = text.as_bytes();
    let mut items = Vec::new();
    let (mut start, mut depth, mut i) = (None::<usize>, 0usize, 0);
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'/' && bytes.get(i + 1) == Some(&b'/') {
            i = text[i..].find('\n').map_or(bytes.len(), |e| i + e);
            continue;
        }
        if start.is_none() {
            if !c.is_ascii_whitespace() {
                start = Some(i);
            } else {
                i += 1;
                continue;
            }
        }
        let s = start.unwrap_or(i);
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth = depth.checked_sub(1)?;
                // A function's body ends it; an initializer's `}` is followed by its `;`.
                if depth == 0 && !text[s..i].split('{').next().unwrap_or("").contains('=') {
                    items.push(&text[s..=i]);
                    start = None;
                }
            }
            b';' if depth == 0 => {
                items.push(&text[s..=i]);
                start = None;
            }
            _ => {}
        }
        i += 1;
    }
    (depth == 0 && start.is_none()).then_some(items)
}

/// The name an item declares: its last identifier outside `(...)` and `[...]` (directives
/// such as `.reqntid` and numbers are not names).
fn item_name(head: &str) -> Option<&str> {
    let mut depth = 0i32;
    let mut name = None;
    let mut token_start = None;
    for (i, c) in head
        .char_indices()
        .chain(std::iter::once((head.len(), ' ')))
    {
        let ident = c.is_ascii_alphanumeric() || c == '_' || c == '$' || c == '.';
        if ident && depth == 0 {
            token_start.get_or_insert(i);
            continue;
        }
        if let Some(s) = token_start.take() {
            if !head[s..i].starts_with(|c: char| c == '.' || c.is_ascii_digit()) {
                name = Some(&head[s..i]);
            }
        }
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            _ => {}
        }
    }
    name
}

/// One module of `members`: the first header, each shared item once, every entry
/// renamed by its member's index.
fn combine(members: &[(&Kernel, Module)]) -> String {
    let mut out = String::from(members[0].1.header);
    let mut written: HashSet<&str> = HashSet::new();
    for (_, module) in members {
        for (name, text) in &module.shared {
            if written.insert(name) {
                out.push_str(text);
                out.push('\n');
            }
        }
    }
    for (i, (_, module)) in members.iter().enumerate() {
        for (name, text) in &module.entries {
            let renamed = format!("{name}_k{i}");
            out.push_str(&text.replacen(&format!(" {name}("), &format!(" {renamed}("), 1));
            out.push('\n');
        }
    }
    out
}
