//! `cargo bench --bench collectives` (`bench_collectives` in the device bundle): vyre's four
//! collectives across every visible GPU, in one process, against NCCL called directly.
//!
//! For AllReduce (Sum), AllGather, ReduceScatter (Sum) and Broadcast (root 0) on f32, sizes
//! 8 B, 32 B, ... (x4) up to 1 GiB (the last size always the maximum itself), four series are
//! measured one after the other for each size:
//! * `direct`: NCCL through the driver layer (`NcclComm::init_all` on the same devices,
//!   `DeviceAlloc` buffers, one driver `Stream` per rank), nccl-tests' method: per iteration
//!   `ncclGroupStart`, the op on every rank, `ncclGroupEnd`; 5 warmups, then the iterations
//!   back to back and one wait for every stream; host wall clock / iterations. In place.
//! * `synced`: the same, waiting for every stream after each iteration: what a synchronous
//!   vyre dispatch has to do, so the like-for-like baseline for the vyre series.
//! * `exact` / `native`: the collective as a vyre program (`Program::wrapped` holding one
//!   `Node::AllReduce` etc.) run by `CudaCluster::dispatch_resident` on resident buffers of
//!   the same sizes, with `CollectiveReduction::Exact` (rank-order fold, the default) or
//!   `Native` (NCCL's own reduction); every call is synchronous.
//!
//! Size follows nccl-tests: the per-rank buffer for AllReduce and Broadcast, the whole
//! output for AllGather, the whole input for ReduceScatter. algbw = size / time; busbw =
//! algbw x 2(W-1)/W (AllReduce), x (W-1)/W (AllGather, ReduceScatter), x 1 (Broadcast).
//! Targets (issue 19): busbw >= 0.9x NCCL direct from 1 MiB up, <= 5 us added below 64 KiB.
//!
//! The exact series' peer barrier follows `VYRE_CUDA_PEER_BARRIER` (`memops`, the default,
//! `memops-each` or `events`; the line `exact cluster:` names the one used).
//! Environment: `VYRE_BENCH_MAX_BYTES` (largest size, default 1 GiB), `VYRE_BENCH_ITERS`
//! (timed iterations per series and round, default 20), `VYRE_BENCH_ROUNDS` (rounds in
//! which every series is timed in turn, default 3; a series' time is its median round),
//! `VYRE_BENCH_MIN_BYTES` (smallest size, default
//! 8 B), `VYRE_BENCH_OPS` (a comma-separated subset of `all_reduce,all_gather,
//! reduce_scatter,broadcast`), `VYRE_BENCH_OUT` (a file for JSON lines: a
//! header, one line per row or skipped size, a summary). No `NCCL_*` variable is read for
//! anything but the log, and none is set. Without a CUDA device or without NCCL it prints
//! one line saying so and exits 0; it exits 1 when a series failed.

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::Arc;
use std::time::Instant;
use vyre_cuda::driver::nccl::{NcclComm, NcclDataType, NcclGroup, NcclRedOp};
use vyre_cuda::driver::{Device, DeviceAlloc, Stream};
use vyre_cuda::{CollectiveReduction, CudaCluster, CudaDeviceBuffer, CudaOptions};
use vyre_driver::{DispatchConfig, Resource};
use vyre_foundation::ir::{BufferDecl, CollectiveOp, CommGroup, DataType, Node, Program};

const WARMUP: usize = 5;
const DEFAULT_ITERS: usize = 20;
/// Sizes from this one up drop to `LARGE_ITERS` iterations when a row would be slow.
const LARGE_BYTES: usize = 256 << 20;
const LARGE_ITERS: usize = 10;
/// A large row whose four series would take longer than this (estimated from the direct
/// warmup) runs `LARGE_ITERS` iterations instead.
const ROW_BUDGET_S: f64 = 8.0;
const MIB: usize = 1 << 20;
const TARGET_RATIO: f64 = 0.9;
const TARGET_ADDED_US: f64 = 5.0;
/// Rows at or above this size are held to the bandwidth target.
const BANDWIDTH_FROM: usize = MIB;
/// Rows below this size are held to the latency target.
const LATENCY_BELOW: usize = 64 << 10;
const F32: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Collective {
    AllReduce,
    AllGather,
    ReduceScatter,
    Broadcast,
}

const COLLECTIVES: [Collective; 4] = [
    Collective::AllReduce,
    Collective::AllGather,
    Collective::ReduceScatter,
    Collective::Broadcast,
];

/// One size of one collective: element counts per rank.
#[derive(Debug, Clone, Copy)]
struct Shape {
    /// The nccl-tests size actually measured (a multiple of 4 W where it matters).
    bytes: usize,
    /// The count argument of the NCCL call (send count for AllGather, receive count for
    /// ReduceScatter, the buffer for the others).
    count: usize,
    /// Elements of the direct (in-place) buffer per rank.
    direct: usize,
    /// Elements of vyre's buffers per rank: the one buffer, or input and output.
    vyre_in: usize,
    vyre_out: Option<usize>,
}

impl Collective {
    fn name(self) -> &'static str {
        match self {
            Self::AllReduce => "all_reduce",
            Self::AllGather => "all_gather",
            Self::ReduceScatter => "reduce_scatter",
            Self::Broadcast => "broadcast",
        }
    }

    /// nccl-tests' busbw / algbw.
    fn bus_factor(self, world: usize) -> f64 {
        let w = world as f64;
        match self {
            Self::AllReduce => 2.0 * (w - 1.0) / w,
            Self::AllGather | Self::ReduceScatter => (w - 1.0) / w,
            Self::Broadcast => 1.0,
        }
    }

    /// The shape for nccl-tests size `bytes`, or `None` when a rank would get no element.
    fn shape(self, bytes: usize, world: usize) -> Option<Shape> {
        match self {
            Self::AllReduce | Self::Broadcast => {
                let count = bytes / F32;
                (count > 0).then_some(Shape {
                    bytes: count * F32,
                    count,
                    direct: count,
                    vyre_in: count,
                    vyre_out: None,
                })
            }
            Self::AllGather | Self::ReduceScatter => {
                let per_rank = bytes / F32 / world;
                let total = per_rank * world;
                let (vyre_in, vyre_out) = if self == Self::AllGather {
                    (per_rank, total)
                } else {
                    (total, per_rank)
                };
                (per_rank > 0).then_some(Shape {
                    bytes: total * F32,
                    count: per_rank,
                    direct: total,
                    vyre_in,
                    vyre_out: Some(vyre_out),
                })
            }
        }
    }

    /// `Program{ <collective> }` on f32 buffers of `shape`.
    fn program(self, shape: &Shape) -> Program {
        let count = |n: usize| u32::try_from(n).expect("at most 2^32 elements per buffer");
        let (buffers, node) = match self {
            Self::AllReduce | Self::Broadcast => {
                let buffers =
                    vec![BufferDecl::read_write("x", 0, DataType::F32)
                        .with_count(count(shape.vyre_in))];
                let node = if self == Self::AllReduce {
                    Node::AllReduce {
                        buffer: "x".into(),
                        op: CollectiveOp::Sum,
                        group: CommGroup::WORLD,
                    }
                } else {
                    Node::Broadcast {
                        buffer: "x".into(),
                        root: 0,
                        group: CommGroup::WORLD,
                    }
                };
                (buffers, node)
            }
            Self::AllGather | Self::ReduceScatter => {
                let out = shape.vyre_out.unwrap_or(0);
                let buffers = vec![
                    BufferDecl::read("input", 0, DataType::F32).with_count(count(shape.vyre_in)),
                    BufferDecl::read_write("output", 1, DataType::F32).with_count(count(out)),
                ];
                let node = if self == Self::AllGather {
                    Node::AllGather {
                        input: "input".into(),
                        output: "output".into(),
                        group: CommGroup::WORLD,
                    }
                } else {
                    Node::ReduceScatter {
                        input: "input".into(),
                        output: "output".into(),
                        op: CollectiveOp::Sum,
                        group: CommGroup::WORLD,
                    }
                };
                (buffers, node)
            }
        };
        Program::wrapped(buffers, [64, 1, 1], vec![node])
    }
}

/// The four series of a row, in measuring order.
const SERIES: [&str; 4] = ["direct", "synced", "exact", "native"];
/// The vyre series and the baselines they are compared with.
const MODES: [usize; 2] = [2, 3];
const BASELINES: [usize; 2] = [0, 1];

/// NCCL called directly: the driver-level communicators and one stream per rank.
struct Direct {
    comms: Vec<NcclComm>,
    streams: Vec<Stream>,
}

impl Direct {
    /// One group of the op on every rank; `buffers[r]` is rank r's in-place buffer.
    fn enqueue(
        &self,
        collective: Collective,
        shape: &Shape,
        buffers: &[DeviceAlloc],
    ) -> Result<(), String> {
        let group = NcclGroup::start(&self.comms).map_err(|e| e.to_string())?;
        for ((comm, stream), buffer) in self.comms.iter().zip(&self.streams).zip(buffers) {
            let (base, dtype) = (buffer.ptr(), NcclDataType::Float32);
            let own_block = base + (comm.rank() * shape.count * F32) as u64;
            match collective {
                Collective::AllReduce => {
                    comm.all_reduce(base, base, shape.count, dtype, NcclRedOp::Sum, stream)
                }
                Collective::AllGather => {
                    comm.all_gather(own_block, base, shape.count, dtype, stream)
                }
                Collective::ReduceScatter => {
                    comm.reduce_scatter(base, own_block, shape.count, dtype, NcclRedOp::Sum, stream)
                }
                Collective::Broadcast => comm.broadcast(base, base, shape.count, dtype, 0, stream),
            }
            .map_err(|e| e.to_string())?;
        }
        group.end().map_err(|e| e.to_string())
    }

    fn synchronize(&self) -> Result<(), String> {
        for stream in &self.streams {
            stream.synchronize().map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Microseconds per iteration: `iterations` groups back to back and one wait
    /// (nccl-tests), or a wait after each group (`synced`).
    fn time(
        &self,
        collective: Collective,
        shape: &Shape,
        buffers: &[DeviceAlloc],
        iterations: usize,
        synced: bool,
    ) -> Result<f64, String> {
        let started = Instant::now();
        for _ in 0..iterations {
            self.enqueue(collective, shape, buffers)?;
            if synced {
                self.synchronize()?;
            }
        }
        self.synchronize()?;
        Ok(started.elapsed().as_secs_f64() * 1e6 / iterations as f64)
    }
}

/// Whether the vyre series run every iteration as its own synchronous dispatch
/// (`VYRE_BENCH_VYRE_SYNCED=1`) instead of one dispatch with
/// `DispatchConfig::fixpoint_iterations = iterations` (the program run that many times back
/// to back, one wait at the end: nccl-tests' method, the default).
fn vyre_synced() -> bool {
    std::env::var("VYRE_BENCH_VYRE_SYNCED").is_ok_and(|v| v == "1")
}

/// Microseconds per run of `program` through `dispatch_resident`: `iterations` runs back
/// to back in one dispatch, or (see [`vyre_synced`]) one synchronous dispatch each.
fn time_vyre(
    cluster: &CudaCluster,
    program: &Program,
    resources: &[Vec<Resource>],
    iterations: usize,
) -> Result<f64, String> {
    let (calls, config) = if vyre_synced() {
        (iterations, DispatchConfig::default())
    } else {
        let mut config = DispatchConfig::default();
        config.fixpoint_iterations = Some(iterations as u32);
        (1, config)
    };
    let started = Instant::now();
    for _ in 0..calls {
        cluster
            .dispatch_resident(program, resources, &config)
            .map_err(|e| e.to_string())?;
    }
    Ok(started.elapsed().as_secs_f64() * 1e6 / iterations as f64)
}

/// Rank r's resident buffers of `shape` on `cluster`, in binding order.
fn vyre_buffers(
    cluster: &CudaCluster,
    shape: &Shape,
) -> Result<Vec<Vec<CudaDeviceBuffer>>, String> {
    (0..cluster.world_size())
        .map(|r| {
            let rank = cluster.rank(r);
            std::iter::once(shape.vyre_in)
                .chain(shape.vyre_out)
                .map(|n| {
                    rank.allocate_device_buffer(n * F32)
                        .map_err(|e| e.to_string())
                })
                .collect()
        })
        .collect()
}

fn resources(buffers: &[Vec<CudaDeviceBuffer>]) -> Vec<Vec<Resource>> {
    buffers
        .iter()
        .map(|rank| rank.iter().map(CudaDeviceBuffer::resource).collect())
        .collect()
}

/// One measured row.
struct Row {
    collective: Collective,
    shape: Shape,
    iterations: usize,
    /// Microseconds per iteration for each of `SERIES`, or the error.
    us: [Result<f64, String>; 4],
}

impl Row {
    fn us(&self, series: usize) -> Option<f64> {
        self.us[series].as_ref().ok().copied()
    }

    fn algbw(&self, series: usize) -> Option<f64> {
        self.us(series)
            .map(|us| self.shape.bytes as f64 / (us * 1e-6) / 1e9)
    }

    fn busbw(&self, series: usize, world: usize) -> Option<f64> {
        (world > 1).then_some(())?;
        self.algbw(series)
            .map(|bw| bw * self.collective.bus_factor(world))
    }

    /// busbw (algbw for W = 1) of `mode` over that of `baseline`: baseline time / mode time.
    fn ratio(&self, mode: usize, baseline: usize) -> Option<f64> {
        Some(self.us(baseline)? / self.us(mode)?)
    }

    /// Microseconds `mode` takes beyond `baseline`.
    fn added(&self, mode: usize, baseline: usize) -> Option<f64> {
        Some(self.us(mode)? - self.us(baseline)?)
    }
}

fn env_usize(name: &str) -> Option<usize> {
    let text = std::env::var(name).ok()?;
    match text.trim().parse::<usize>() {
        Ok(value) if value > 0 => Some(value),
        _ => {
            eprintln!("{name}={text:?} is not a positive integer; ignored");
            None
        }
    }
}

/// 8, 32, 128, ... (x4) below `max`, then `max`.
fn sizes(max: usize) -> Vec<usize> {
    let mut sizes: Vec<usize> = std::iter::successors(Some(8usize), |s| s.checked_mul(4))
        .take_while(|&s| s < max)
        .collect();
    sizes.push(max);
    sizes
}

/// `YYYY-MM-DD HH:MM:SS UTC` from the system clock (civil-from-days, H. Hinnant).
fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

fn json_str(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_num(value: Option<f64>) -> String {
    match value {
        Some(v) if v.is_finite() => format!("{v:.4}"),
        _ => "null".into(),
    }
}

/// The JSON-lines sink (`$VYRE_BENCH_OUT`), if any.
struct Sink(Option<std::fs::File>);

impl Sink {
    fn open() -> Self {
        let Some(path) = std::env::var_os("VYRE_BENCH_OUT").filter(|p| !p.is_empty()) else {
            return Self(None);
        };
        match std::fs::File::create(&path) {
            Ok(file) => Self(Some(file)),
            Err(error) => {
                eprintln!("cannot write VYRE_BENCH_OUT={path:?}: {error}; no JSON lines");
                Self(None)
            }
        }
    }

    fn line(&mut self, json: &str) {
        if let Some(file) = &mut self.0 {
            if let Err(error) = writeln!(file, "{json}") {
                eprintln!("writing VYRE_BENCH_OUT failed: {error}; no more JSON lines");
                self.0 = None;
            }
        }
    }
}

fn fmt_opt(value: Option<f64>, width: usize, decimals: usize) -> String {
    match value {
        Some(v) => format!("{v:>width$.decimals$}"),
        None => format!("{:>width$}", "n/a"),
    }
}

fn human(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= MIB && b % MIB == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// The header: printed, and returned as its JSON line.
fn header(devices: &[Arc<Device>], nccl: &str, iters_env: Option<usize>, max: usize) -> String {
    let world = devices.len();
    let date = utc_now();
    println!("vyre-cuda collectives benchmark, {date}");
    let names: Vec<String> = devices
        .iter()
        .map(|d| format!("{}: {}", d.info().ordinal, d.info().name))
        .collect();
    println!("GPUs (W = {world}): {}", names.join(", "));
    println!("NCCL {nccl}");
    let mut nccl_env: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k.starts_with("NCCL_"))
        .collect();
    nccl_env.sort();
    if nccl_env.is_empty() {
        println!("NCCL_* environment: none set (this benchmark sets none)");
    } else {
        println!("NCCL_* environment (as inherited; this benchmark sets none):");
        for (k, v) in &nccl_env {
            println!("  {k}={v}");
        }
    }
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    if let Some(visible) = &visible {
        println!("CUDA_VISIBLE_DEVICES={visible}");
    }
    let topology = std::process::Command::new("nvidia-smi")
        .args(["topo", "-m"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim_end().to_string());
    match &topology {
        Some(text) => println!("nvidia-smi topo -m:\n{text}"),
        None => println!("nvidia-smi topo -m: not available"),
    }
    let iterations = match iters_env {
        Some(n) => format!("{n} timed iterations per series (VYRE_BENCH_ITERS), {WARMUP} warmups"),
        None => format!(
            "{DEFAULT_ITERS} timed iterations per series, {WARMUP} warmups; sizes >= {} run \
             {LARGE_ITERS} iterations when a row would take more than {ROW_BUDGET_S} s \
             (the row's `it` column)",
            human(LARGE_BYTES)
        ),
    };
    println!(
        "{iterations}; every series timed in turn, {} rounds, median round (VYRE_BENCH_ROUNDS); \
         sizes 8 B .. {} (x4), f32, in place",
        rounds(),
        human(max)
    );
    println!(
        "series: direct = NCCL direct, nccl-tests method (grouped op on every rank, iterations \
         back to back, one wait for all streams at the end); synced = NCCL direct waiting for \
         every stream after each iteration (like-for-like with a synchronous vyre dispatch); \
         exact / native = CudaCluster::dispatch_resident of the collective as a vyre program, \
         CollectiveReduction::Exact / ::Native"
    );
    println!(
        "vyre series: {}",
        if vyre_synced() {
            "one synchronous dispatch_resident per iteration (VYRE_BENCH_VYRE_SYNCED=1): compare with `synced`"
        } else {
            "one dispatch_resident with fixpoint_iterations = iterations (the program back to back, one wait): compare with `direct`"
        }
    );
    println!(
        "size = nccl-tests' size (per-rank buffer for all_reduce/broadcast, total output for \
         all_gather, total input for reduce_scatter); algbw = size/time; busbw = algbw x \
         2(W-1)/W all_reduce, (W-1)/W all_gather/reduce_scatter, 1 broadcast"
    );
    if world == 1 {
        println!(
            "W = 1: busbw is not defined (factor 0); busbw columns show n/a and the ratios are \
             algbw ratios (= time ratios)"
        );
    }
    println!(
        "ratio = vyre busbw / NCCL busbw (= NCCL time / vyre time) against direct (/d) and \
         synced (/s); added = vyre time - NCCL time in us (-d against direct, -s against synced)"
    );
    let env_json: Vec<String> = nccl_env
        .iter()
        .map(|(k, v)| format!("{}:{}", json_str(k), json_str(v)))
        .collect();
    format!(
        "{{\"type\":\"header\",\"date\":{},\"world\":{world},\"gpus\":[{}],\"nccl\":{},\
         \"nccl_env\":{{{}}},\"cuda_visible_devices\":{},\"topology\":{},\"warmup\":{WARMUP},\
         \"iterations\":{},\"rounds\":{},\"max_bytes\":{max}}}",
        json_str(&date),
        devices
            .iter()
            .map(|d| json_str(&d.info().name))
            .collect::<Vec<_>>()
            .join(","),
        json_str(nccl),
        env_json.join(","),
        visible.as_deref().map_or("null".into(), json_str),
        topology.as_deref().map_or("null".into(), json_str),
        json_str(&iterations),
        rounds(),
    )
}

fn table_head() {
    println!(
        "\n{:<14} {:>10} {:>3} | {:>10} {:>10} {:>10} {:>10} | {:>8} {:>8} {:>8} {:>8} | {:>8} \
         {:>8} {:>8} {:>8} | {:>6} {:>6} {:>6} {:>6} | {:>8} {:>8} {:>8} {:>8}",
        "collective",
        "bytes",
        "it",
        "direct us",
        "synced us",
        "exact us",
        "native us",
        "alg d",
        "alg s",
        "alg ex",
        "alg nat",
        "bus d",
        "bus s",
        "bus ex",
        "bus nat",
        "ex/d",
        "ex/s",
        "nat/d",
        "nat/s",
        "+ex-d",
        "+ex-s",
        "+nat-d",
        "+nat-s",
    );
}

fn print_row(row: &Row, world: usize) {
    let mut line = format!(
        "{:<14} {:>10} {:>3} |",
        row.collective.name(),
        row.shape.bytes,
        row.iterations
    );
    for s in 0..4 {
        line += &format!(" {}", fmt_opt(row.us(s), 10, 1));
    }
    line += " |";
    for s in 0..4 {
        line += &format!(" {}", fmt_opt(row.algbw(s), 8, 2));
    }
    line += " |";
    for s in 0..4 {
        line += &format!(" {}", fmt_opt(row.busbw(s, world), 8, 2));
    }
    line += " |";
    for mode in MODES {
        for baseline in BASELINES {
            line += &format!(" {}", fmt_opt(row.ratio(mode, baseline), 6, 3));
        }
    }
    line += " |";
    for mode in MODES {
        for baseline in BASELINES {
            line += &format!(" {}", fmt_opt(row.added(mode, baseline), 8, 1));
        }
    }
    println!("{line}");
    for (series, result) in SERIES.iter().zip(&row.us) {
        if let Err(error) = result {
            println!("    {series} failed: {error}");
        }
    }
}

fn row_json(row: &Row, world: usize) -> String {
    let per_series = |f: &dyn Fn(usize) -> Option<f64>| {
        SERIES
            .iter()
            .enumerate()
            .map(|(s, name)| format!("\"{name}\":{}", json_num(f(s))))
            .collect::<Vec<_>>()
            .join(",")
    };
    let per_pair = |f: &dyn Fn(usize, usize) -> Option<f64>| {
        let mut pairs = Vec::new();
        for mode in MODES {
            for baseline in BASELINES {
                let key = format!("{}_vs_{}", SERIES[mode], SERIES[baseline]);
                pairs.push(format!("\"{key}\":{}", json_num(f(mode, baseline))));
            }
        }
        pairs.join(",")
    };
    let errors: Vec<String> = SERIES
        .iter()
        .zip(&row.us)
        .filter_map(|(name, r)| {
            r.as_ref()
                .err()
                .map(|e| format!("\"{name}\":{}", json_str(e)))
        })
        .collect();
    format!(
        "{{\"type\":\"row\",\"collective\":\"{}\",\"bytes\":{},\"count\":{},\"world\":{world},\
         \"iterations\":{},\"us\":{{{}}},\"algbw_gbs\":{{{}}},\"busbw_gbs\":{{{}}},\
         \"ratio\":{{{}}},\"added_us\":{{{}}},\"errors\":{{{}}}}}",
        row.collective.name(),
        row.shape.bytes,
        row.shape.count,
        row.iterations,
        per_series(&|s| row.us(s)),
        per_series(&|s| row.algbw(s)),
        per_series(&|s| row.busbw(s, world)),
        per_pair(&|m, b| row.ratio(m, b)),
        per_pair(&|m, b| row.added(m, b)),
        errors.join(","),
    )
}

/// The smallest `value` of `rows` (or the largest, `max`), with its row's name.
fn extreme(rows: &[&Row], value: impl Fn(&Row) -> Option<f64>, max: bool) -> Option<(f64, String)> {
    rows.iter()
        .filter_map(|r| {
            let name = format!("{} {}", r.collective.name(), human(r.shape.bytes));
            value(r).map(|v| (v, name))
        })
        .reduce(|a, b| if (b.0 > a.0) == max { b } else { a })
}

/// Rows of `rows` where `mode` or `baseline` failed: a target is not met while any did.
fn unmeasured(rows: &[&Row], mode: usize, baseline: usize) -> usize {
    rows.iter()
        .filter(|r| r.us(mode).is_none() || r.us(baseline).is_none())
        .count()
}

/// One target of the summary: its extreme value over the rows it covers.
struct Check {
    name: &'static str,
    what: String,
    found: Option<(f64, String)>,
    /// Rows of the range without a measurement (a failed series).
    unmeasured: usize,
    met: fn(f64) -> bool,
    decimals: usize,
    unit: &'static str,
}

impl Check {
    /// Prints the verdict line; returns the JSON fields.
    fn report(&self, label: &str) -> String {
        let met = self
            .found
            .as_ref()
            .map(|(v, _)| (self.met)(*v) && self.unmeasured == 0);
        let failed = match self.unmeasured {
            0 => String::new(),
            n => format!(" ({n} row(s) failed)"),
        };
        match (&self.found, met) {
            (Some((v, at)), Some(met)) => println!(
                "  {label}: {} {v:.prec$}{} at {at}: {}{failed}",
                self.what,
                self.unit,
                if met { "MET" } else { "MISSED" },
                prec = self.decimals
            ),
            _ => println!("  {label}: {}: no measured row{failed}", self.what),
        }
        let name = self.name;
        format!(
            "\"{name}\":{},\"{name}_at\":{},\"{name}_met\":{},\"{name}_failed_rows\":{}",
            json_num(self.found.as_ref().map(|v| v.0)),
            self.found
                .as_ref()
                .map_or("null".into(), |v| json_str(&v.1)),
            met.map_or("null".into(), |m| m.to_string()),
            self.unmeasured
        )
    }
}

/// Prints the target summary; returns its JSON line.
fn summary(rows: &[Row]) -> String {
    let large: Vec<&Row> = rows
        .iter()
        .filter(|r| r.shape.bytes >= BANDWIDTH_FROM)
        .collect();
    let small: Vec<&Row> = rows
        .iter()
        .filter(|r| r.shape.bytes < LATENCY_BELOW)
        .collect();
    println!(
        "\nsummary (targets: busbw ratio >= {TARGET_RATIO} for sizes >= {}, added latency <= \
         {TARGET_ADDED_US} us for sizes < {}; the issue's target compares with `direct`, \
         nccl-tests' method; `synced` is the like-for-like synchronous baseline)",
        human(BANDWIDTH_FROM),
        human(LATENCY_BELOW)
    );
    let mut json = Vec::new();
    for mode in MODES {
        for baseline in BASELINES {
            let key = format!("{}_vs_{}", SERIES[mode], SERIES[baseline]);
            let label = format!("{:<6} vs {:<6}", SERIES[mode], SERIES[baseline]);
            let checks = [
                Check {
                    name: "min_ratio",
                    what: format!("min busbw ratio (sizes >= {})", human(BANDWIDTH_FROM)),
                    found: extreme(&large, |r| r.ratio(mode, baseline), false),
                    unmeasured: unmeasured(&large, mode, baseline),
                    met: |v| v >= TARGET_RATIO,
                    decimals: 3,
                    unit: "",
                },
                Check {
                    name: "max_added_us",
                    what: format!("max added latency (sizes < {})", human(LATENCY_BELOW)),
                    found: extreme(&small, |r| r.added(mode, baseline), true),
                    unmeasured: unmeasured(&small, mode, baseline),
                    met: |v| v <= TARGET_ADDED_US,
                    decimals: 1,
                    unit: " us",
                },
            ];
            let parts: Vec<String> = checks.iter().map(|check| check.report(&label)).collect();
            json.push(format!("\"{key}\":{{{}}}", parts.join(",")));
        }
    }
    // Per collective, against the nccl-tests baseline: where a miss comes from.
    for collective in COLLECTIVES {
        let mut line = format!("  {:<14}", collective.name());
        for mode in MODES {
            let ratio = extreme(
                &large,
                |r| (r.collective == collective).then(|| r.ratio(mode, 0))?,
                false,
            );
            let added = extreme(
                &small,
                |r| (r.collective == collective).then(|| r.added(mode, 0))?,
                true,
            );
            let _ = write!(
                line,
                "  {}: min ratio/d {} max added-d {} us",
                SERIES[mode],
                fmt_opt(ratio.map(|v| v.0), 6, 3),
                fmt_opt(added.map(|v| v.0), 7, 1)
            );
        }
        println!("{line}");
    }
    format!(
        "{{\"type\":\"summary\",\"target_ratio\":{TARGET_RATIO},\"ratio_from_bytes\":\
         {BANDWIDTH_FROM},\"target_added_us\":{TARGET_ADDED_US},\"added_below_bytes\":\
         {LATENCY_BELOW},{}}}",
        json.join(",")
    )
}

/// Bytes per GPU one row needs at most: the direct buffer, the buffers of both clusters,
/// room for the exact mode's scratch (a gathered copy of the largest buffer and its
/// chunks), and NCCL's and the allocator's slack.
fn bytes_needed(shape: &Shape) -> u64 {
    let vyre = (shape.vyre_in + shape.vyre_out.unwrap_or(0)) * F32;
    let largest = shape.vyre_in.max(shape.vyre_out.unwrap_or(0)) * F32;
    (shape.direct * F32 + 2 * vyre + 2 * largest + (512 << 20)) as u64
}

/// Why a row cannot run on these GPUs, if it cannot.
fn no_room(devices: &[Arc<Device>], shape: &Shape) -> Option<String> {
    let need = bytes_needed(shape);
    for device in devices {
        match device.memory_info() {
            Ok((free, _)) if free < need => {
                return Some(format!(
                    "needs about {:.2} GiB per GPU, GPU {} has {:.2} GiB free",
                    need as f64 / (1u64 << 30) as f64,
                    device.info().ordinal,
                    free as f64 / (1u64 << 30) as f64
                ))
            }
            Ok(_) => {}
            Err(error) => return Some(format!("cuMemGetInfo failed: {error}")),
        }
    }
    None
}

struct Bench {
    devices: Vec<Arc<Device>>,
    direct: Direct,
    clusters: [CudaCluster; 2],
    iters_env: Option<usize>,
}

impl Bench {
    /// Measures one row; `Err` for a size that cannot be set up (skipped, not failed).
    fn row(&self, collective: Collective, shape: Shape) -> Result<Row, String> {
        let world = self.devices.len();
        let mut direct_buffers = Vec::with_capacity(world);
        for (device, stream) in self.devices.iter().zip(&self.direct.streams) {
            let buffer = DeviceAlloc::new(device, shape.direct * F32)
                .map_err(|e| format!("allocating the direct buffers: {e}"))?;
            stream
                .memset_zero(buffer.ptr(), buffer.len())
                .map_err(|e| format!("clearing the direct buffers: {e}"))?;
            direct_buffers.push(buffer);
        }
        self.direct.synchronize()?;
        let exact_buffers = vyre_buffers(&self.clusters[0], &shape)
            .map_err(|e| format!("allocating the exact cluster's buffers: {e}"))?;
        let native_buffers = vyre_buffers(&self.clusters[1], &shape)
            .map_err(|e| format!("allocating the native cluster's buffers: {e}"))?;
        let program = collective.program(&shape);

        // Warm the direct path and estimate the row's cost.
        let warm = self
            .direct
            .time(collective, &shape, &direct_buffers, WARMUP, false);
        let iterations = match (self.iters_env, &warm) {
            (Some(n), _) => n,
            (None, Ok(us))
                if shape.bytes >= LARGE_BYTES
                    && us * 1e-6 * (4 * (DEFAULT_ITERS + WARMUP)) as f64 > ROW_BUDGET_S =>
            {
                LARGE_ITERS
            }
            (None, _) => DEFAULT_ITERS,
        };
        let (exact, native) = (resources(&exact_buffers), resources(&native_buffers));
        let series = |s: usize, iterations: usize| match s {
            0 | 1 => self
                .direct
                .time(collective, &shape, &direct_buffers, iterations, s == 1),
            2 => time_vyre(&self.clusters[0], &program, &exact, iterations),
            _ => time_vyre(&self.clusters[1], &program, &native, iterations),
        };
        // Warm every series, then time them in turn, round after round (every series under
        // the same conditions), and keep each one's median round.
        let mut us: [Result<Vec<f64>, String>; 4] = std::array::from_fn(|s| {
            let warmed = if s == 0 {
                warm.clone()
            } else {
                series(s, WARMUP)
            };
            warmed.map(|_| Vec::new())
        });
        for _ in 0..rounds() {
            for (s, samples) in us.iter_mut().enumerate() {
                if let Ok(taken) = samples {
                    match series(s, iterations) {
                        Ok(sample) => taken.push(sample),
                        Err(error) => *samples = Err(error),
                    }
                }
            }
        }
        Ok(Row {
            collective,
            shape,
            iterations,
            us: us.map(|samples| samples.map(median)),
        })
    }
}

/// Rounds per row (`VYRE_BENCH_ROUNDS`, default 3): each series' time is its median round.
fn rounds() -> usize {
    env_usize("VYRE_BENCH_ROUNDS").unwrap_or(3).max(1)
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn main() {
    let world = match vyre_cuda::driver::device_count() {
        Ok(0) => {
            println!("skipped: no CUDA device (the driver reports none)");
            return;
        }
        Ok(count) => count,
        Err(error) => {
            println!("skipped: no CUDA device ({error})");
            return;
        }
    };
    let nccl = match vyre_cuda::nccl_version() {
        Ok(version) => version.to_string(),
        Err(error) => {
            println!("skipped: no NCCL ({error})");
            return;
        }
    };
    let devices: Vec<Arc<Device>> = match (0..world).map(Device::open).collect() {
        Ok(devices) => devices,
        Err(error) => {
            println!("FAIL: opening the CUDA devices: {error}");
            std::process::exit(1);
        }
    };
    let max = env_usize("VYRE_BENCH_MAX_BYTES").unwrap_or(1 << 30);
    let iters_env = env_usize("VYRE_BENCH_ITERS");
    let mut sink = Sink::open();
    sink.line(&header(&devices, &nccl, iters_env, max));

    let ordinals: Vec<usize> = (0..world).collect();
    let setup = || -> Result<Bench, String> {
        let comms = NcclComm::init_all(&devices).map_err(|e| format!("ncclCommInitAll: {e}"))?;
        let streams = devices
            .iter()
            .map(Stream::new)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("creating the streams: {e}"))?;
        let cluster = |reduction: CollectiveReduction| {
            let options = CudaOptions {
                collective_reduction: reduction,
                ..CudaOptions::from_env().map_err(|e| e.to_string())?
            };
            CudaCluster::with_options(options, &ordinals)
                .map_err(|e| format!("CudaCluster ({reduction:?}): {e}"))
        };
        Ok(Bench {
            devices: devices.clone(),
            direct: Direct { comms, streams },
            clusters: [
                cluster(CollectiveReduction::Exact)?,
                cluster(CollectiveReduction::Native)?,
            ],
            iters_env,
        })
    };
    let bench = match setup() {
        Ok(bench) => bench,
        Err(error) => {
            println!("FAIL: {error}");
            std::process::exit(1);
        }
    };
    let exact = &bench.clusters[0];
    println!(
        "exact cluster: peer-linked {}, peer barrier {:?} ({}={})",
        exact.peer_linked(),
        exact.peer_barrier(),
        vyre_cuda::PEER_BARRIER_ENV,
        std::env::var(vyre_cuda::PEER_BARRIER_ENV).unwrap_or_else(|_| "unset".into())
    );

    let started = Instant::now();
    let mut rows = Vec::new();
    let mut failed = false;
    let min = env_usize("VYRE_BENCH_MIN_BYTES").unwrap_or(0);
    let ops = std::env::var("VYRE_BENCH_OPS").unwrap_or_default();
    let wanted = |c: &Collective| ops.is_empty() || ops.split(',').any(|o| o.trim() == c.name());
    for collective in COLLECTIVES.into_iter().filter(wanted) {
        table_head();
        for bytes in sizes(max).into_iter().filter(|&b| b >= min) {
            let Some(shape) = collective.shape(bytes, world) else {
                println!(
                    "{:<14} {bytes:>10} skipped: fewer than one f32 per rank",
                    collective.name()
                );
                continue;
            };
            let skipped = no_room(&devices, &shape).map_or_else(
                || match bench.row(collective, shape) {
                    Ok(row) => {
                        print_row(&row, world);
                        sink.line(&row_json(&row, world));
                        failed |= row.us.iter().any(Result::is_err);
                        rows.push(row);
                        None
                    }
                    Err(why) => Some(why),
                },
                Some,
            );
            if let Some(why) = skipped {
                println!(
                    "{:<14} {:>10} skipped: {why}",
                    collective.name(),
                    shape.bytes
                );
                sink.line(&format!(
                    "{{\"type\":\"skip\",\"collective\":\"{}\",\"bytes\":{},\"reason\":{}}}",
                    collective.name(),
                    shape.bytes,
                    json_str(&why)
                ));
            }
        }
    }
    println!(
        "\nmeasured {} rows in {:.1} s",
        rows.len(),
        started.elapsed().as_secs_f64()
    );
    sink.line(&summary(&rows));
    if failed {
        println!("FAIL: at least one series failed (see the rows above)");
        std::process::exit(1);
    }
}
