//! `--ptxas-time DIR,DIR,...` (no GPU): the offline stand-in for `jit_probe`'s per-module
//! JIT times (issue 18, cold compile). Times the pinned `ptxas -arch=sm_90` (the compiler
//! the driver's JIT embeds) on every module that all the directories hold (`<id>.ptx`, as
//! `--dump-ptx DIR` writes them under `DIR/corpus/{vyre_cuda,incumbent}`), interleaved: each
//! repetition runs every module of every directory once, the directories' order rotating, so
//! contention on a shared machine lands on all of them alike. A trivial module (the floor's
//! vadd) is timed in the same loop: the fixed cost of a ptxas run, reported and subtracted.
//!
//! Per module and directory it records the median CPU time of the ptxas process (user +
//! system: steadier than wall time on a loaded host) and of its wall time, the PTX's size,
//! instruction and `.func` counts, `div.rn.f32` and `call` counts, and what `ptxas -v`
//! reports (registers, spill bytes). Prints the sums and the 20 modules with the largest
//! ratio of the first directory's time to the second's (above the fixed cost), and writes
//! every number as TSV (`--ptxas-out`, default `ptxas_time.tsv`).
//!
//! Before/after an emitter change: `--dump-ptx` with each build, then
//! `--ptxas-time after/corpus/vyre_cuda,after/corpus/incumbent,before/corpus/vyre_cuda`.
//!
//! A directory named `DIR@O<n>` is `DIR` compiled at optimisation level n (`-O<n>` for
//! ptxas, whose highest is 3; `CU_JIT_OPTIMIZATION_LEVEL` n for the driver, 0..=4).
//!
//! `--jit-time` (GPU) runs the same loop with the driver's own JIT in this process instead
//! (`cuModuleLoadData` wall time, every text salted so no cache entry hits): ptxas in a child
//! process and the driver's JIT disagree on some modules (the atomics: 1.5x offline, 3x in
//! the driver), and only the driver's number is what users wait for.

use crate::engines::floor::driver::{Floor, Jit};
use crate::engines::floor::ptx;
use crate::workloads::jit_probe::salted;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// What one module's text is made of (static counts, and `ptxas -v`).
#[derive(Default, Clone)]
struct Facts {
    bytes: usize,
    insts: usize,
    funcs: usize,
    divs: usize,
    calls: usize,
    regs: u32,
    spill_bytes: u32,
}

/// One module in one directory: its facts and its timings (ms) over the repetitions.
#[derive(Default, Clone)]
struct Cell {
    facts: Facts,
    cpu: Vec<f64>,
    wall: Vec<f64>,
}

pub struct Args {
    pub ptxas: PathBuf,
    /// Time the driver's JIT (device 0) instead of `ptxas`.
    pub driver_jit: bool,
    pub dirs: Vec<PathBuf>,
    pub reps: usize,
    pub out: PathBuf,
    pub filter: Option<String>,
}

/// What compiles one module while it is timed.
enum Timer {
    /// The pinned `ptxas` in a child process: (CPU ms, wall ms).
    Ptxas(PathBuf),
    /// The driver's JIT in this process: its wall time, as both numbers.
    Driver { floor: Floor, salt: u64 },
}

impl Timer {
    fn open(args: &Args) -> Self {
        if !args.driver_jit {
            return Timer::Ptxas(args.ptxas.clone());
        }
        match Floor::open(0, 0x5100_7000, 2.0) {
            Ok(floor) => Timer::Driver {
                floor,
                salt: u64::from(std::process::id()) * 1_000_000,
            },
            Err(e) => {
                eprintln!("--jit-time: no CUDA device ({e})");
                std::process::exit(2)
            }
        }
    }

    fn describe(&self) -> String {
        match self {
            Timer::Ptxas(path) => format!(
                "ptxas -arch=sm_90 ({}), CPU ms of the ptxas process",
                path.display()
            ),
            Timer::Driver { .. } => {
                "the driver's JIT (cuModuleLoadData on device 0, salted texts), wall ms".into()
            }
        }
    }

    fn time(&mut self, file: &Path, level: Option<u32>) -> (f64, f64) {
        let (floor, salt) = match self {
            Timer::Ptxas(ptxas) => return time_ptxas(ptxas, file, level),
            Timer::Driver { floor, salt } => (floor, salt),
        };
        *salt += 1;
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let how = level.map_or(Jit::Load, Jit::Level);
        match floor.jit_time(&salted(&text, *salt), how) {
            Ok(d) => {
                let ms = d.as_secs_f64() * 1e3;
                (ms, ms)
            }
            Err(e) => {
                eprintln!("the driver's JIT failed on {}: {e}", file.display());
                (0.0, 0.0)
            }
        }
    }
}

pub fn run(args: &Args) {
    let (dirs, levels): (Vec<PathBuf>, Vec<Option<u32>>) =
        args.dirs.iter().map(|d| split_level(d)).unzip();
    let names = common_modules(&dirs, args.filter.as_deref());
    if names.is_empty() || dirs.len() < 2 {
        eprintln!("--ptxas-time: need two or more directories holding the same <id>.ptx files");
        std::process::exit(2)
    }
    let trivial = std::env::temp_dir().join(format!("ptxas_time_{}.ptx", std::process::id()));
    let _ = std::fs::write(&trivial, ptx::cold_module(9, 0, 12345));
    let mut cells: Vec<Vec<Cell>> = names
        .iter()
        .map(|name| {
            dirs.iter()
                .map(|dir| Cell {
                    facts: facts(&args.ptxas, &dir.join(name)),
                    ..Cell::default()
                })
                .collect()
        })
        .collect();
    let mut timer = Timer::open(args);
    let mut fixed = Cell::default();
    let n = dirs.len();
    for rep in 0..args.reps {
        let (cpu, wall) = timer.time(&trivial, None);
        fixed.cpu.push(cpu);
        fixed.wall.push(wall);
        for (name, row) in names.iter().zip(&mut cells) {
            for k in 0..n {
                let d = (k + rep) % n;
                let (cpu, wall) = timer.time(&dirs[d].join(name), levels[d]);
                row[d].cpu.push(cpu);
                row[d].wall.push(wall);
            }
        }
        eprintln!("ptxas-time: repetition {} of {} done", rep + 1, args.reps);
    }
    let _ = std::fs::remove_file(&trivial);
    report(args, &timer.describe(), &names, &cells, &fixed);
}

fn report(args: &Args, timer: &str, names: &[String], cells: &[Vec<Cell>], fixed: &Cell) {
    let fixed_cpu = median(&fixed.cpu);
    let labels: Vec<String> = args.dirs.iter().map(|d| label(d)).collect();
    let mut tsv = String::from("module");
    for l in &labels {
        for col in [
            "cpu_ms", "wall_ms", "bytes", "insts", "funcs", "div_rn", "calls", "regs", "spill",
        ] {
            tsv.push_str(&format!("\t{l}.{col}"));
        }
    }
    tsv.push('\n');
    let mut sums = vec![(0.0, 0.0); labels.len()];
    // (ratio above the fixed cost, module, first's cpu, second's cpu)
    let mut ratios = Vec::new();
    for (name, row) in names.iter().zip(cells) {
        tsv.push_str(name.trim_end_matches(".ptx"));
        for (k, cell) in row.iter().enumerate() {
            let (cpu, wall) = (median(&cell.cpu), median(&cell.wall));
            sums[k].0 += cpu;
            sums[k].1 += wall;
            let f = &cell.facts;
            tsv.push_str(&format!(
                "\t{cpu:.2}\t{wall:.2}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                f.bytes, f.insts, f.funcs, f.divs, f.calls, f.regs, f.spill_bytes
            ));
        }
        tsv.push('\n');
        let (a, b) = (median(&row[0].cpu), median(&row[1].cpu));
        ratios.push((
            (a - fixed_cpu).max(0.1) / (b - fixed_cpu).max(0.1),
            a / b,
            name.trim_end_matches(".ptx").replace("__", "::"),
            a,
            b,
        ));
    }
    if let Err(e) = std::fs::write(&args.out, tsv) {
        eprintln!("writing {}: {e}", args.out.display());
    }
    println!(
        "{timer}: {} modules, median of {} runs each",
        names.len(),
        args.reps
    );
    println!(
        "fixed cost (trivial vadd module): {fixed_cpu:.1} ms CPU, {:.1} ms wall",
        median(&fixed.wall)
    );
    let m = names.len() as f64;
    for (l, (cpu, wall)) in labels.iter().zip(&sums) {
        println!(
            "{l:>28}: sum {cpu:8.0} ms CPU ({:8.0} above the fixed cost), {wall:8.0} ms wall",
            cpu - m * fixed_cpu
        );
    }
    let (a, b) = (sums[0].0, sums[1].0);
    println!(
        "{} / {}: {:.3}x the sum, {:.3}x above the fixed cost; {} modules over 2x, {} over 2x above the fixed cost",
        labels[0],
        labels[1],
        a / b,
        (a - m * fixed_cpu) / (b - m * fixed_cpu),
        ratios.iter().filter(|r| r.1 > 2.0).count(),
        ratios.iter().filter(|r| r.0 > 2.0).count(),
    );
    ratios.sort_by(|x, y| y.1.total_cmp(&x.1));
    println!(
        "\n| module | {} ms | {} ms | ratio | above fixed |",
        labels[0], labels[1]
    );
    println!("|---|---:|---:|---:|---:|");
    for (above, ratio, id, a, b) in ratios.iter().take(20) {
        println!("| {id} | {a:.1} | {b:.1} | {ratio:.2}x | {above:.2}x |");
    }
    println!("\nwrote {}", args.out.display());
}

/// `DIR@O<n>` as (`DIR`, Some(n)); any other path as itself with the default level.
fn split_level(spec: &Path) -> (PathBuf, Option<u32>) {
    let text = spec.to_string_lossy();
    match text
        .rsplit_once("@O")
        .map(|(dir, n)| (dir, n.parse::<u32>()))
    {
        Some((dir, Ok(level))) => (PathBuf::from(dir), Some(level)),
        _ => (spec.to_path_buf(), None),
    }
}

/// A directory's name in the table: its last two components (`vyre_cuda` under `after/corpus`
/// is `corpus/vyre_cuda`; the caller picks distinct names).
fn label(dir: &Path) -> String {
    let parts: Vec<String> = dir
        .components()
        .rev()
        .take(3)
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    parts.into_iter().rev().collect::<Vec<_>>().join("/")
}

/// The `.ptx` file names every directory holds, sorted; those containing `filter` when set.
fn common_modules(dirs: &[PathBuf], filter: Option<&str>) -> Vec<String> {
    let list = |dir: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.ends_with(".ptx"))
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    let Some(first) = dirs.first() else {
        return Vec::new();
    };
    list(first)
        .into_iter()
        .filter(|n| filter.is_none_or(|f| n.contains(f)))
        .filter(|n| dirs[1..].iter().all(|d| d.join(n).is_file()))
        .collect()
}

/// Children's CPU time so far (user + system), ms.
fn children_cpu_ms() -> f64 {
    // SAFETY: getrusage writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    ms(usage.ru_utime) + ms(usage.ru_stime)
}

/// One `ptxas -arch=sm_90 [-O<level>] -o /dev/null file`: (CPU ms, wall ms).
fn time_ptxas(ptxas: &Path, file: &Path, level: Option<u32>) -> (f64, f64) {
    let before = children_cpu_ms();
    let started = Instant::now();
    let status = Command::new(ptxas)
        .args(["-arch=sm_90", "-o", "/dev/null"])
        .args(level.map(|l| format!("-O{}", l.min(3))))
        .arg(file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let wall = started.elapsed().as_secs_f64() * 1e3;
    if !matches!(status, Ok(s) if s.success()) {
        eprintln!("ptxas failed on {}: {status:?}", file.display());
    }
    (children_cpu_ms() - before, wall)
}

/// The module's static counts and `ptxas -v`'s registers and spills (the largest over its
/// entries and functions).
fn facts(ptxas: &Path, file: &Path) -> Facts {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut f = Facts {
        bytes: text.len(),
        ..Facts::default()
    };
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with(".func") || t.starts_with(".visible .func") {
            f.funcs += 1;
        }
        if t.ends_with(';') && !t.starts_with('.') && !t.starts_with("//") {
            f.insts += 1;
        }
        f.divs += usize::from(t.contains("div.rn.f32") || t.contains("div.rn.f64"));
        f.calls += usize::from(t.starts_with("call"));
    }
    if let Ok(out) = Command::new(ptxas)
        .args(["-arch=sm_90", "-v", "-o", "/dev/null"])
        .arg(file)
        .output()
    {
        let log = String::from_utf8_lossy(&out.stderr);
        for line in log.lines() {
            if let Some(n) = number_before(line, " registers") {
                f.regs = f.regs.max(n);
            }
            let spills = number_before(line, " bytes spill stores").unwrap_or(0)
                + number_before(line, " bytes spill loads").unwrap_or(0);
            f.spill_bytes = f.spill_bytes.max(spills);
        }
    }
    f
}

/// The integer just before `marker` in `line`.
fn number_before(line: &str, marker: &str) -> Option<u32> {
    let at = line.find(marker)?;
    line[..at].split_whitespace().last()?.parse().ok()
}

fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_names_its_level_after_at_o() {
        let split = |s: &str| split_level(Path::new(s));
        assert_eq!(split("ptx/v45@O1"), (PathBuf::from("ptx/v45"), Some(1)));
        assert_eq!(split("a/b@O0"), (PathBuf::from("a/b"), Some(0)));
        assert_eq!(split("ptx/v45"), (PathBuf::from("ptx/v45"), None));
        assert_eq!(split("ptx/v45@Ox"), (PathBuf::from("ptx/v45@Ox"), None));
    }
}
