//! The command line: usage text, options, parsing.

use std::path::PathBuf;
use std::time::Duration;

pub const USAGE: &str = "\
vyre-compare: floor vs vyre-driver-cuda 0.7.2 vs vyre-cuda, on one GPU

  cargo run --release -- [options]

  --json PATH        write the results as JSON (default: compare.json)
  --svg PATH         render the ratio chart as SVG
  --markdown PATH    write the table and the target table as markdown
  --only a,b,...     run only these workloads (ids or prefixes: tiny, warm, cold, emit,
                     vadd, saxpy, resident, sequence, reduce, corpus, diag)
  --quick            fewer samples and sizes (a smoke run, not for reporting)
  --deadline-s S     skip the workloads that would start after S seconds (default 480)
  --blocking-sync    set CU_CTX_SCHED_BLOCKING_SYNC on the primary context first (waits
                     sleep instead of spinning: CPU-time experiments; not for the table)
  --ours-blocking-wait
                     open vyre-cuda with CudaOptions::blocking_wait (its small-dispatch and
                     sequence waits sleep on blocking-sync events; the context is untouched)
  --staging-sweep    also time vyre-cuda on the vadd and reduce rows with other staging chunk
                     sizes and copy-thread counts (extra keys sweep.*; tuning, not the table)
  --only jit_probe   (run only when named) driver JIT time per method (load, O0, linker) on
                     the floor's, the incumbent's and vyre-cuda's PTX, vadd and the corpus
  --only artifact    the artifact route (issue 16): artifact_submit, artifact_cold,
                     artifact_corpus, artifact_chain; each engine runs in fresh processes of
                     this binary (cold parts: CUDA_CACHE_DISABLE=1, empty HOME); with only
                     artifact workloads selected this process opens no engine
  --artifact-child PART --engine ENGINE --child-out FILE
                     (internal) one artifact part for one engine, its outcomes as JSON
  --render JSON      no GPU: read a results file, print the tables, write --svg/--markdown
  --dump-ptx DIR     no GPU: write the floor's PTX (for ptxas) and both backends' corpus
                     modules (DIR/corpus/{vyre_cuda,incumbent}/<id>.ptx) and exit
  --ptxas-time DIR,DIR[,DIR...]
                     no GPU: time the pinned ptxas (sm_90) on every <id>.ptx the directories
                     share, interleaved; ratios are the first directory's over the second's
                     (the offline stand-in for jit_probe's per-module JIT times)
    --ptxas PATH     the ptxas to time (default: $VYRE_CUDA_PTXAS, else
                     ../../.tools/cuda-nvcc/nvidia/cu13/bin/ptxas)
    --reps N         repetitions per module and directory (default 5)
    --ptxas-out FILE every module's numbers as TSV (default ptxas_time.tsv)
    --ptxas-filter S only the modules whose file name contains S
  --jit-time DIR,DIR[,DIR...]
                     GPU: the same interleaved table, timed by the driver's JIT in this process
                     (cuModuleLoadData wall time on device 0, each text salted with an unused
                     `.global` so no cache entry hits; run with CUDA_CACHE_DISABLE=1); takes
                     --reps, --ptxas-out and --ptxas-filter
";

pub struct Opts {
    pub json: PathBuf,
    pub svg: Option<PathBuf>,
    pub markdown: Option<PathBuf>,
    pub only: Option<Vec<String>>,
    pub quick: bool,
    pub render: Option<PathBuf>,
    pub dump_ptx: Option<PathBuf>,
    /// `--ptxas-time` and its options.
    pub ptxas_time: Option<crate::ptxas_time::Args>,
    pub deadline: Duration,
    pub blocking_sync: bool,
    pub ours_blocking_wait: bool,
    pub staging_sweep: bool,
    /// `--artifact-child PART`: run one artifact part in this process and exit.
    pub artifact_child: Option<String>,
    /// `--engine`: the engine of `--artifact-child`.
    pub engine: Option<String>,
    /// `--child-out`: where `--artifact-child` writes its outcomes.
    pub child_out: Option<PathBuf>,
}

pub fn parse_opts() -> Opts {
    let mut opts = Opts {
        json: PathBuf::from("compare.json"),
        svg: None,
        markdown: None,
        only: None,
        quick: false,
        render: None,
        dump_ptx: None,
        ptxas_time: None,
        deadline: Duration::from_secs(480),
        blocking_sync: false,
        ours_blocking_wait: false,
        staging_sweep: false,
        artifact_child: None,
        engine: None,
        child_out: None,
    };
    let mut ptxas_dirs: Option<Vec<PathBuf>> = None;
    let mut driver_jit = false;
    let mut ptxas = std::env::var_os("VYRE_CUDA_PTXAS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("../../.tools/cuda-nvcc/nvidia/cu13/bin/ptxas"));
    let mut reps = 5usize;
    let mut ptxas_out = PathBuf::from("ptxas_time.tsv");
    let mut ptxas_filter = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next().unwrap_or_else(|| {
                eprintln!("{name} needs a value\n{USAGE}");
                std::process::exit(2)
            })
        };
        match arg.as_str() {
            "--json" => opts.json = value("--json").into(),
            "--svg" => opts.svg = Some(value("--svg").into()),
            "--markdown" => opts.markdown = Some(value("--markdown").into()),
            "--only" => opts.only = Some(value("--only").split(',').map(str::to_string).collect()),
            "--quick" => opts.quick = true,
            "--blocking-sync" => opts.blocking_sync = true,
            "--ours-blocking-wait" => opts.ours_blocking_wait = true,
            "--staging-sweep" => opts.staging_sweep = true,
            "--render" => opts.render = Some(value("--render").into()),
            "--dump-ptx" => opts.dump_ptx = Some(value("--dump-ptx").into()),
            "--ptxas-time" => {
                ptxas_dirs = Some(
                    value("--ptxas-time")
                        .split(',')
                        .map(PathBuf::from)
                        .collect(),
                )
            }
            "--jit-time" => {
                driver_jit = true;
                ptxas_dirs = Some(value("--jit-time").split(',').map(PathBuf::from).collect())
            }
            "--ptxas" => ptxas = value("--ptxas").into(),
            "--ptxas-out" => ptxas_out = value("--ptxas-out").into(),
            "--ptxas-filter" => ptxas_filter = Some(value("--ptxas-filter")),
            "--reps" => {
                let v = value("--reps");
                reps = v.parse().unwrap_or_else(|_| {
                    eprintln!("--reps {v}: not a count");
                    std::process::exit(2)
                })
            }
            "--artifact-child" => opts.artifact_child = Some(value("--artifact-child")),
            "--engine" => opts.engine = Some(value("--engine")),
            "--child-out" => opts.child_out = Some(value("--child-out").into()),
            "--deadline-s" => {
                let v = value("--deadline-s");
                opts.deadline = Duration::from_secs(v.parse().unwrap_or_else(|_| {
                    eprintln!("--deadline-s {v}: not a number of seconds");
                    std::process::exit(2)
                }))
            }
            "-h" | "--help" => {
                print!("{USAGE}");
                std::process::exit(0)
            }
            other => {
                eprintln!("unknown argument {other}\n{USAGE}");
                std::process::exit(2)
            }
        }
    }
    opts.ptxas_time = ptxas_dirs.map(|dirs| crate::ptxas_time::Args {
        ptxas,
        driver_jit,
        dirs,
        reps: reps.max(1),
        out: ptxas_out,
        filter: ptxas_filter,
    });
    opts
}
