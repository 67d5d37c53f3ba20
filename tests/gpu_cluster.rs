//! GPU, W = min(device count, 8) ranks (issue 19 item 6, issue 20 item 2): vyre's
//! collectives through `CudaCluster` and `CudaBackend::join`, checked byte for byte against
//! the multi-rank oracle (`common::multirank::reference_ranks`, built from vyre-reference).
//!
//! * Every op x {u32, i32, f32, f16, bf16, u64, f64} x {1, 7, 1 Mi} elements for AllReduce
//!   and ReduceScatter, and AllGather and Broadcast (roots W-1 and 0) per type and size, on
//!   an exact-mode and a native-mode cluster; where the oracle refuses a pair (a bitwise op
//!   on a float) the cluster must refuse it too. Reductions run on peer-linked clusters with
//!   both peer barriers (stream memory operations, the default, and cross-GPU events).
//! * compute -> AllReduce -> compute (and -> AllGather -> compute) programs.
//! * 1000 back-to-back resident dispatches with every rank's free memory back to baseline.
//! * The fold kernels (`collective_fold_program`) on one plain device for W = 2 ..= 8.
//! * A rank slower than the collective timeout: `CollectiveAborted`, no hang, and every later
//!   collective dispatch fails at once, while programs without collectives still run on
//!   every rank (also after an abort inside a peer fold, whose barrier waits are released). A rank that faults (a zero divisor): the dispatch
//!   fails with `KernelRuntime` naming it, its peers do not hang, the cluster goes on.
//! * W processes that `join` through the hex id (`VYRE_NCCL_ID`, `RANK`, `WORLD_SIZE`,
//!   `LOCAL_RANK`), with NCCL's default transport and with its network transport forced
//!   over loopback.
//!
//! Without a device every test prints `skipped: no CUDA device`; with a device but no NCCL
//! the multi-rank tests print `skipped: no NCCL library (...)`. `VYRE_CUDA_REQUIRE_GPU=1`
//! turns either into a failure, and `VYRE_CUDA_REQUIRE_GPUS=N` fails when W < N. The tests
//! take one process-wide lock, so they never share the GPUs even without
//! `--test-threads=1`. NCCL settings of the machine (`NCCL_NVLS_ENABLE` and every
//! multicast setting) are inherited, never overridden.

mod common;

use common::cluster::{
    all_gather, all_reduce, broadcast, difference, fold_case, is_bitwise, is_float, pipelined,
    rank_difference, rank_values, reduce_scatter, size_of, sweep_types, Values, OPS,
};
use common::multirank::reference_ranks;
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use vyre_cuda::driver::nccl::NcclUniqueId;
use vyre_cuda::{
    CollectiveReduction, CudaBackend, CudaCluster, CudaError, CudaOptions, PeerBarrierKind,
};
use vyre_driver::{DispatchConfig, VyreBackend};
use vyre_foundation::ir::{
    BinOp, BufferDecl, CollectiveOp, CommGroup, DataType, Expr, Node, Program,
};

/// Per-rank inputs (`inputs[r]` is rank r's, one per reference input buffer).
type RankInputs = Vec<Vec<Vec<u8>>>;
/// Per-rank outputs, or the oracle's error text.
type Oracle = Result<Vec<Vec<Vec<u8>>>, String>;

const SIZES: [usize; 3] = [1, 7, 1 << 20];
const MIB: u64 = 1 << 20;

/// One test on the GPUs at a time.
fn gpu_lock() -> MutexGuard<'static, ()> {
    static GPU: Mutex<()> = Mutex::new(());
    GPU.lock().unwrap_or_else(PoisonError::into_inner)
}

fn required() -> bool {
    std::env::var("VYRE_CUDA_REQUIRE_GPU").is_ok_and(|v| v == "1") || required_gpus() > 0
}

/// `VYRE_CUDA_REQUIRE_GPUS`, 0 when unset.
fn required_gpus() -> usize {
    match std::env::var("VYRE_CUDA_REQUIRE_GPUS") {
        Ok(text) => text.trim().parse().unwrap_or_else(|_| {
            panic!("VYRE_CUDA_REQUIRE_GPUS={text:?} is not a number. Fix: set it to the GPU count, e.g. 2.")
        }),
        Err(_) => 0,
    }
}

/// The visible devices, or `None` after the skip line.
fn visible_devices() -> Option<usize> {
    let visible = match vyre_cuda::driver::device_count() {
        Ok(visible) => visible,
        Err(error) => {
            assert!(
                !required(),
                "VYRE_CUDA_REQUIRE_GPU(S) is set but there is no CUDA driver: {error}"
            );
            println!("skipped: no CUDA device");
            return None;
        }
    };
    if visible == 0 {
        assert!(
            !required(),
            "VYRE_CUDA_REQUIRE_GPU(S) is set but there is no CUDA device"
        );
        println!("skipped: no CUDA device");
        return None;
    }
    Some(visible)
}

/// The ranks of this machine: devices 0 .. W.
#[derive(Clone, Debug)]
struct World {
    devices: Vec<usize>,
}

impl World {
    fn size(&self) -> usize {
        self.devices.len()
    }
}

/// W = min(device count, 8) with NCCL present, or `None` after the skip line. Prints W,
/// the GPU names and the NCCL version.
fn world() -> Option<World> {
    let visible = visible_devices()?;
    let version = match vyre_cuda::nccl_version() {
        Ok(version) => version,
        Err(error) => {
            assert!(
                !required(),
                "VYRE_CUDA_REQUIRE_GPU(S) is set and a device is present, but NCCL is not: {error}"
            );
            println!("skipped: no NCCL library ({error})");
            return None;
        }
    };
    let w = visible.min(8);
    let need = required_gpus();
    assert!(
        w >= need,
        "VYRE_CUDA_REQUIRE_GPUS={need} but only {w} GPU(s) are usable ({visible} visible)"
    );
    let names: Vec<String> = (0..w)
        .map(|ordinal| match vyre_cuda::driver::Device::open(ordinal) {
            Ok(device) => device.info().name.clone(),
            Err(error) => panic!("visible device {ordinal} does not open: {error}"),
        })
        .collect();
    println!("W = {w} ({visible} visible); GPUs {names:?}; NCCL {version}");
    Some(World {
        devices: (0..w).collect(),
    })
}

fn options(mode: CollectiveReduction, timeout: Duration) -> CudaOptions {
    let mut options = CudaOptions::from_env().expect("the VYRE_CUDA_* settings parse");
    options.collective_reduction = mode;
    options.collective_timeout = timeout;
    options
}

fn cluster(world: &World, mode: CollectiveReduction) -> CudaCluster {
    cluster_with(world, options(mode, Duration::from_secs(60)))
}

fn cluster_with(world: &World, options: CudaOptions) -> CudaCluster {
    let started = Instant::now();
    let cluster = CudaCluster::with_options(options, &world.devices)
        .unwrap_or_else(|e| panic!("a cluster on devices {:?}: {e}", world.devices));
    assert_eq!(cluster.world_size(), world.size());
    for (r, backend) in cluster.ranks().iter().enumerate() {
        assert_eq!(backend.rank_info(), Some((r, world.size())), "rank {r}");
        let dynamic: &dyn VyreBackend = backend;
        assert!(dynamic.is_distributed() && dynamic.supports_distributed_collectives());
        assert_eq!(cluster.rank(r).device_info().ordinal, world.devices[r]);
    }
    println!(
        "cluster of {} ranks up in {:?}",
        world.size(),
        started.elapsed()
    );
    cluster
}

/// Runs `work` on its own thread; a run past `limit` fails the test as a hang.
fn within<T: Send + 'static>(
    what: &str,
    limit: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (done, finished) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        let _ = done.send(work());
    });
    match finished.recv_timeout(limit) {
        Ok(value) => {
            let _ = worker.join();
            value
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => match worker.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => panic!("{what}: the worker ended without a result"),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what} did not finish within {limit:?}: it hangs")
        }
    }
}

/// The error's text, checked to carry exactly one `Fix:` hint.
fn one_fix(error: &CudaError) -> Result<String, String> {
    let text = error.to_string();
    match text.matches("Fix:").count() {
        1 => Ok(text),
        n => Err(format!("{n} `Fix:` hints in: {text}")),
    }
}

/// Compares a cluster result with the oracle: `Ok(line)` when they agree (equal bytes, or
/// both refuse, the line naming both errors), `Err(why)` otherwise.
fn judge(
    name: &str,
    element: usize,
    want: &Oracle,
    got: Result<Vec<Vec<Vec<u8>>>, CudaError>,
) -> Result<Option<String>, String> {
    match (want, got) {
        (Ok(want), Ok(got)) => match rank_difference(&got, want, element) {
            None => Ok(None),
            Some(why) => Err(format!("{name}: {why}")),
        },
        (Err(oracle), Err(error)) => match one_fix(&error) {
            Ok(text) => Ok(Some(format!(
                "{name}: both refuse. oracle: {oracle} | cluster: {text}"
            ))),
            Err(why) => Err(format!("{name}: {why}")),
        },
        (Ok(_), Err(error)) => Err(format!(
            "{name}: the oracle runs it, the cluster fails: {error}"
        )),
        (Err(oracle), Ok(_)) => Err(format!(
            "{name}: the oracle refuses it ({oracle}), the cluster ran it"
        )),
    }
}

fn finish(what: &str, failures: &[String]) {
    for failure in failures {
        println!("FAIL {failure}");
    }
    assert!(
        failures.is_empty(),
        "{what}: {} failure(s), first: {}",
        failures.len(),
        failures[0]
    );
}

// ---------------------------------------------------------------------------------------
// 1. Every op x type x size, both modes.

#[derive(Clone, Debug)]
enum Collective {
    AllReduce(CollectiveOp),
    ReduceScatter(CollectiveOp),
    AllGather,
    Broadcast(u32),
}

#[derive(Clone, Debug)]
struct SweepCase {
    collective: Collective,
    element: DataType,
    count: usize,
    values: Values,
    /// Check the native-mode cluster too (integers, copies, exactly representable floats).
    native: bool,
}

impl SweepCase {
    fn name(&self) -> String {
        format!(
            "{:?} {} x {} ({:?})",
            self.collective, self.element, self.count, self.values
        )
    }

    fn program(&self, world: usize) -> Program {
        let (ty, n) = (&self.element, self.count);
        match self.collective {
            Collective::AllReduce(op) => all_reduce(ty, n, op),
            Collective::ReduceScatter(op) => reduce_scatter(ty, n, world, op),
            Collective::AllGather => all_gather(ty, n, world),
            Collective::Broadcast(root) => broadcast(ty, n, root),
        }
    }

    /// Elements of rank r's one input buffer.
    fn input_count(&self, world: usize) -> usize {
        match self.collective {
            Collective::ReduceScatter(_) => world * self.count,
            _ => self.count,
        }
    }
}

fn sweep_cases(world: usize) -> Vec<SweepCase> {
    let mut cases = Vec::new();
    let roots: Vec<u32> = if world == 1 {
        vec![0]
    } else {
        vec![world as u32 - 1, 0]
    };
    for element in sweep_types() {
        for count in SIZES {
            let case = |collective, values, native| SweepCase {
                collective,
                element: element.clone(),
                count,
                values,
                native,
            };
            for op in OPS {
                for collective in [Collective::AllReduce(op), Collective::ReduceScatter(op)] {
                    if !is_float(&element) || is_bitwise(op) {
                        // Integers are exact in both modes; a bitwise op on a float must be
                        // refused in both.
                        cases.push(case(collective, Values::Bits, true));
                        continue;
                    }
                    cases.push(case(collective.clone(), Values::Bits, false));
                    cases.push(case(collective.clone(), Values::SmallInt, true));
                    if world <= 2 {
                        // One addition or comparison per element: any order is the order.
                        cases.push(case(collective, Values::Moderate, true));
                    }
                }
            }
            cases.push(case(Collective::AllGather, Values::Bits, true));
            for &root in &roots {
                cases.push(case(Collective::Broadcast(root), Values::Bits, true));
            }
        }
    }
    cases
}

#[test]
fn every_op_type_and_size_matches_the_oracle_in_both_modes() {
    let _gpu = gpu_lock();
    let Some(world) = world() else { return };
    let w = world.size();
    let exact = cluster(&world, CollectiveReduction::Exact);
    let native = cluster(&world, CollectiveReduction::Native);
    // Exact reductions of ranks linked by peer access fold from each other's memory; the
    // same cluster without the link exchanges blocks through NCCL first. Both must match.
    let mut unlinked = options(CollectiveReduction::Exact, Duration::from_secs(60));
    unlinked.collective_peer_fold = false;
    let exchange = cluster_with(&world, unlinked);
    assert!(!exchange.peer_linked());
    assert_eq!(exchange.peer_barrier(), None);
    // The same peer fold between cross-GPU event barriers instead of flag barriers.
    let mut with_events = options(CollectiveReduction::Exact, Duration::from_secs(60));
    with_events.collective_peer_barrier = PeerBarrierKind::Events;
    let events = cluster_with(&world, with_events);
    println!(
        "peer access between the ranks: {}; peer barriers {:?} (events cluster: {:?})",
        exact.peer_linked(),
        exact.peer_barrier(),
        events.peer_barrier()
    );
    if w > 1 && required() {
        // Every multi-GPU machine this suite is required on links its GPUs (NVLink) and
        // has 64-bit stream memory operations (CUDA 12 drivers on sm_70+).
        assert!(exact.peer_linked(), "the ranks' GPUs have no peer access");
        assert_eq!(
            exact.peer_barrier(),
            Some(PeerBarrierKind::MemOps),
            "the GPUs have no 64-bit stream memory operations"
        );
        assert_eq!(events.peer_barrier(), Some(PeerBarrierKind::Events));
    }
    let cases = sweep_cases(w);
    let config = DispatchConfig::default();
    let started = Instant::now();
    let (mut failures, mut checks, mut refusals) = (Vec::new(), 0usize, 0usize);
    pipelined(
        &cases,
        |index, case| {
            let program = case.program(w);
            let inputs: RankInputs = (0..w)
                .map(|r| {
                    let seed = (index * 64 + r) as u64 + 1;
                    vec![rank_values(
                        &case.element,
                        case.input_count(w),
                        case.values,
                        seed,
                    )]
                })
                .collect();
            let oracle = reference_ranks(&program, &inputs);
            (program, inputs, oracle)
        },
        |_, case, (program, inputs, oracle)| {
            let mut modes = vec![("exact", &exact), ("exact, NCCL exchange", &exchange)];
            let reduces = matches!(
                case.collective,
                Collective::AllReduce(_) | Collective::ReduceScatter(_)
            );
            if reduces && events.peer_linked() {
                // (Only reductions fold, and so only they meet the barriers.)
                modes.push(("exact, event barriers", &events));
            }
            if case.native {
                modes.push(("native", &native));
            }
            for (mode, cluster) in modes {
                let name = format!("{} [{mode}]", case.name());
                let got = cluster.dispatch(&program, &inputs, &config);
                checks += 1;
                match judge(&name, size_of(&case.element), &oracle, got) {
                    Ok(None) => {}
                    Ok(Some(line)) => {
                        refusals += 1;
                        println!("{line}");
                    }
                    Err(why) => failures.push(why),
                }
            }
        },
    );
    println!(
        "W = {w}: {} cases, {checks} cluster dispatches ({refusals} refused by both), {} failures, {:?}",
        cases.len(),
        failures.len(),
        started.elapsed()
    );
    if w > 1 {
        // (One rank folds nothing, so the oracle refuses nothing at W = 1.)
        assert!(refusals > 0, "the bitwise float pairs must be refused");
    }
    finish("op x type x size sweep", &failures);
}

// ---------------------------------------------------------------------------------------
// 2. compute -> AllReduce -> compute.

fn gid() -> Expr {
    Expr::gid_x()
}

fn bin(op: BinOp, left: Expr, right: Expr) -> Expr {
    Expr::BinOp {
        op,
        left: Box::new(left),
        right: Box::new(right),
    }
}

/// `if gid < len(buffer) { buffer[gid] = value }`.
fn update(buffer: &str, value: Expr) -> Node {
    Node::if_then(
        Expr::lt(gid(), Expr::buf_len(buffer)),
        vec![Node::store(buffer, gid(), value)],
    )
}

fn constant(ty: &DataType, value: u32) -> Expr {
    match ty {
        DataType::F32 => Expr::f32(value as f32),
        _ => Expr::u32(value),
    }
}

/// `y = x * 2 + bias; AllReduce(y, op); z = y + 1` over `n` elements of `ty` (u32 or
/// f32), `y` a backend-allocated output or a read-write input (vyre allows one output
/// buffer, so `z` and `g` are read-write); with `gather`, then `AllGather(z -> g);
/// g = g + 3` (`g` holds W x n). Inputs per rank: x, bias (and y when read-write), zeroed
/// z (and g); returned y, z (and g).
fn compute_collective_compute(
    ty: &DataType,
    n: u32,
    op: CollectiveOp,
    y_read_write: bool,
    gather: Option<usize>,
) -> Program {
    let y = if y_read_write {
        BufferDecl::read_write("y", 2, ty.clone())
    } else {
        BufferDecl::output("y", 2, ty.clone())
    };
    let mut buffers = vec![
        BufferDecl::read("x", 0, ty.clone()).with_count(n),
        BufferDecl::read("bias", 1, ty.clone()).with_count(n),
        y.with_count(n),
        BufferDecl::read_write("z", 3, ty.clone()).with_count(n),
    ];
    let mut entry = vec![
        update(
            "y",
            Expr::add(
                Expr::mul(Expr::load("x", gid()), constant(ty, 2)),
                Expr::load("bias", gid()),
            ),
        ),
        Node::AllReduce {
            buffer: "y".into(),
            op,
            group: CommGroup::WORLD,
        },
        update("z", Expr::add(Expr::load("y", gid()), constant(ty, 1))),
    ];
    if let Some(world) = gather {
        buffers.push(BufferDecl::read_write("g", 4, ty.clone()).with_count(world as u32 * n));
        entry.push(Node::AllGather {
            input: "z".into(),
            output: "g".into(),
            group: CommGroup::WORLD,
        });
        entry.push(update(
            "g",
            Expr::add(Expr::load("g", gid()), constant(ty, 3)),
        ));
    }
    Program::wrapped(buffers, [64, 1, 1], entry)
}

/// Rank inputs of [`compute_collective_compute`]: values for x, bias and a read-write y,
/// zeros for z (and g).
fn compute_inputs(
    ty: &DataType,
    n: usize,
    values: Values,
    y_read_write: bool,
    world: usize,
    seed: u64,
) -> RankInputs {
    let size = ty.size_bytes().expect("a fixed-size element");
    (0..world)
        .map(|r| {
            let seed = seed * 1000 + r as u64 * 3;
            let mut inputs = vec![
                rank_values(ty, n, values, seed),
                rank_values(ty, n, values, seed + 1),
            ];
            if y_read_write {
                inputs.push(rank_values(ty, n, values, seed + 2));
            }
            inputs
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|mut inputs| {
            inputs.push(vec![0; n * size]);
            inputs
        })
        .collect()
}

/// [`compute_inputs`] for a program with `gather`: a zeroed g (W x n) as well.
fn compute_inputs_for(
    ty: &DataType,
    n: usize,
    values: Values,
    y_read_write: bool,
    world: usize,
    seed: u64,
    gather: bool,
) -> RankInputs {
    let size = ty.size_bytes().expect("a fixed-size element");
    let mut inputs = compute_inputs(ty, n, values, y_read_write, world, seed);
    if gather {
        for rank in &mut inputs {
            rank.push(vec![0; world * n * size]);
        }
    }
    inputs
}

#[test]
fn compute_all_reduce_compute_matches_the_oracle() {
    let _gpu = gpu_lock();
    let Some(world) = world() else { return };
    let w = world.size();
    let exact = cluster(&world, CollectiveReduction::Exact);
    let native = cluster(&world, CollectiveReduction::Native);
    let n = 65_537u32;
    let (u32_, f32_) = (DataType::U32, DataType::F32);
    // (name, program, element, values, y read-write, check native too)
    let cases = [
        (
            "u32 sum, y output",
            compute_collective_compute(&u32_, n, CollectiveOp::Sum, false, None),
            &u32_,
            Values::Bits,
            false,
            true,
        ),
        (
            "u32 max then gather",
            compute_collective_compute(&u32_, n, CollectiveOp::Max, false, Some(w)),
            &u32_,
            Values::Bits,
            false,
            true,
        ),
        (
            "f32 sum, y read-write, specials",
            compute_collective_compute(&f32_, n, CollectiveOp::Sum, true, None),
            &f32_,
            Values::Bits,
            true,
            false,
        ),
        (
            "f32 sum, y output, small integers",
            compute_collective_compute(&f32_, n, CollectiveOp::Sum, false, None),
            &f32_,
            Values::SmallInt,
            false,
            true,
        ),
        (
            "f32 min then gather, specials",
            compute_collective_compute(&f32_, n, CollectiveOp::Min, true, Some(w)),
            &f32_,
            Values::Bits,
            true,
            false,
        ),
    ];
    let mut failures = Vec::new();
    for (seed, (name, program, element, values, y_rw, check_native)) in cases.iter().enumerate() {
        let gather = program.buffers().iter().any(|decl| decl.name() == "g");
        let inputs = compute_inputs_for(
            element,
            n as usize,
            *values,
            *y_rw,
            w,
            seed as u64 + 7,
            gather,
        );
        let want = reference_ranks(program, &inputs);
        assert!(want.is_ok(), "{name}: the oracle runs it: {want:?}");
        let mut modes = vec![("exact", &exact)];
        if *check_native {
            modes.push(("native", &native));
        }
        for (mode, cluster) in modes {
            let got = cluster.dispatch(program, &inputs, &DispatchConfig::default());
            let label = format!("{name} [{mode}]");
            match judge(&label, size_of(element), &want, got) {
                Ok(_) => println!("{label}: matches the oracle on {w} ranks"),
                Err(why) => failures.push(why),
            }
        }
    }
    finish("compute -> collective -> compute", &failures);
}

// ---------------------------------------------------------------------------------------
// 3. 1000 back-to-back resident dispatches.

/// `buf = buf + 1; AllReduce(buf, Max)` over f32 (the exact mode's send/receive-and-fold
/// path): after k dispatches every rank holds `max over ranks of the start + k`.
fn bump_then_max(n: u32) -> Program {
    Program::wrapped(
        vec![BufferDecl::read_write("buf", 0, DataType::F32).with_count(n)],
        [64, 1, 1],
        vec![
            update("buf", Expr::add(Expr::load("buf", gid()), Expr::f32(1.0))),
            Node::AllReduce {
                buffer: "buf".into(),
                op: CollectiveOp::Max,
                group: CommGroup::WORLD,
            },
        ],
    )
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// A normal f32 of rank `r`'s element `i` for the large sums.
fn large_value(r: usize, i: usize) -> f32 {
    let mixed = (i as u64)
        .wrapping_mul(2_654_435_761)
        .wrapping_add(r as u64 * 97);
    (mixed % 2000) as f32 * 0.37 - 300.0
}

/// Exact AllReduce of large buffers, past the size where ranks linked by peer access copy
/// each other's folded blocks instead of writing them from the fold kernel, with an
/// element count no world size divides: every element is the rank-order f32 sum (computed
/// here; each step is one IEEE addition of normal values, as the reference's). And an
/// exact ReduceScatter past the size where 3+ linked ranks fold from each other's memory.
/// Each with every peer barrier kind.
#[test]
fn large_exact_all_reduces_fold_in_rank_order() {
    let _gpu = gpu_lock();
    let Some(world) = world() else { return };
    let kinds = [
        PeerBarrierKind::MemOps,
        PeerBarrierKind::MemOpsEach,
        PeerBarrierKind::Events,
    ];
    for kind in kinds {
        let mut options = options(CollectiveReduction::Exact, Duration::from_secs(60));
        options.collective_peer_barrier = kind;
        let cluster = cluster_with(&world, options);
        println!(
            "peer barrier {kind:?} asked, {:?} used",
            cluster.peer_barrier()
        );
        if world.size() > 1 && required() {
            assert_eq!(cluster.peer_barrier(), Some(kind));
        }
        large_sums(&world, &cluster);
    }
}

fn large_sums(world: &World, cluster: &CudaCluster) {
    let w = world.size();
    let value = large_value;
    for n in [(1usize << 22) + 1, (128usize << 20) / 4 + 3] {
        let inputs: RankInputs = (0..w)
            .map(|r| vec![f32_bytes(&(0..n).map(|i| value(r, i)).collect::<Vec<_>>())])
            .collect();
        let want: Vec<f32> = (0..n)
            .map(|i| (1..w).fold(value(0, i), |acc, r| acc + value(r, i)))
            .collect();
        let want = f32_bytes(&want);
        let program = all_reduce(&DataType::F32, n, CollectiveOp::Sum);
        let started = Instant::now();
        let got = cluster
            .dispatch(&program, &inputs, &DispatchConfig::default())
            .unwrap_or_else(|e| panic!("AllReduce of {n} f32: {e}"));
        for (r, outputs) in got.iter().enumerate() {
            if let Some(why) = difference(&outputs[0], &want, 4) {
                panic!("AllReduce of {n} f32, rank {r}: {why}");
            }
        }
        println!(
            "AllReduce of {n} f32 on {w} ranks (peer barrier {:?}): the rank-order sum, {:?}",
            cluster.peer_barrier(),
            started.elapsed()
        );
    }
    // ReduceScatter: an input of at least 32 MiB per rank, each output block m f32.
    let m = (8usize << 20) / w + 5;
    let inputs: RankInputs = (0..w)
        .map(|r| {
            vec![f32_bytes(
                &(0..w * m).map(|i| value(r, i)).collect::<Vec<_>>(),
            )]
        })
        .collect();
    let program = reduce_scatter(&DataType::F32, m, w, CollectiveOp::Sum);
    let started = Instant::now();
    let got = cluster
        .dispatch(&program, &inputs, &DispatchConfig::default())
        .unwrap_or_else(|e| panic!("ReduceScatter of {w} x {m} f32: {e}"));
    for (r, outputs) in got.iter().enumerate() {
        let want: Vec<f32> = (0..m)
            .map(|j| (1..w).fold(value(0, r * m + j), |acc, q| acc + value(q, r * m + j)))
            .collect();
        if let Some(why) = difference(&outputs[0], &f32_bytes(&want), 4) {
            panic!("ReduceScatter of {w} x {m} f32, rank {r}: {why}");
        }
    }
    println!(
        "ReduceScatter of {w} x {m} f32 (peer barrier {:?}): the rank-order sums, {:?}",
        cluster.peer_barrier(),
        started.elapsed()
    );
}

#[test]
fn a_thousand_resident_dispatches_keep_memory_flat() {
    let _gpu = gpu_lock();
    let Some(world) = world() else { return };
    within(
        "1000 resident AllReduce dispatches",
        Duration::from_secs(400),
        move || {
            const ROUNDS: usize = 1000;
            const WARM: usize = 3;
            let w = world.size();
            let n = 1u32 << 16;
            let cluster = cluster(&world, CollectiveReduction::Exact);
            let program = bump_then_max(n);
            let config = DispatchConfig::default();
            let starts: Vec<Vec<f32>> = (0..w)
                .map(|r| {
                    (0..n as usize)
                        .map(|i| ((i * 7 + r * 13) % 1000) as f32)
                        .collect()
                })
                .collect();
            let resources: Vec<Vec<vyre_driver::Resource>> = (0..w)
                .map(|r| {
                    let backend = cluster.rank(r);
                    let buffer = backend
                        .allocate_resident(n as usize * 4)
                        .expect("a resident buffer");
                    backend
                        .upload_resident(&buffer, &f32_bytes(&starts[r]))
                        .expect("upload");
                    vec![buffer]
                })
                .collect();
            let download = |r: usize| {
                cluster
                    .rank(r)
                    .download_resident(&resources[r][0])
                    .expect("download")
            };
            let free = || -> Vec<u64> {
                (0..w)
                    .map(|r| cluster.rank(r).memory_info().expect("memory_info").0)
                    .collect()
            };
            // The first dispatch against the oracle.
            cluster
                .dispatch_resident(&program, &resources, &config)
                .expect("dispatch 1");
            let inputs: RankInputs = starts.iter().map(|s| vec![f32_bytes(s)]).collect();
            let want = reference_ranks(&program, &inputs).expect("the oracle runs it");
            for (r, want) in want.iter().enumerate() {
                if let Some(why) = difference(&download(r), &want[0], 4) {
                    panic!("dispatch 1, rank {r}: {why}");
                }
            }
            for _ in 1..WARM {
                cluster
                    .dispatch_resident(&program, &resources, &config)
                    .expect("warm-up dispatch");
            }
            let before = free();
            let started = Instant::now();
            for round in WARM..ROUNDS {
                cluster
                    .dispatch_resident(&program, &resources, &config)
                    .unwrap_or_else(|e| panic!("dispatch {}: {e}", round + 1));
            }
            let elapsed = started.elapsed();
            let after = free();
            println!(
            "{} resident dispatches on {w} ranks in {elapsed:?} ({:?} each); free MiB before {:?}, after {:?}",
            ROUNDS - WARM,
            elapsed / (ROUNDS - WARM) as u32,
            before.iter().map(|b| b / MIB).collect::<Vec<_>>(),
            after.iter().map(|a| a / MIB).collect::<Vec<_>>()
        );
            for (r, (before, after)) in before.iter().zip(&after).enumerate() {
                let lost = before.saturating_sub(*after);
                assert!(
                    lost <= 64 * MIB,
                    "rank {r}: {} MiB less free memory after {} dispatches",
                    lost / MIB,
                    ROUNDS - WARM
                );
            }
            let want: Vec<f32> = (0..n as usize)
                .map(|i| starts.iter().map(|s| s[i]).fold(f32::MIN, f32::max) + ROUNDS as f32)
                .collect();
            for r in 0..w {
                if let Some(why) = difference(&download(r), &f32_bytes(&want), 4) {
                    panic!("after {ROUNDS} dispatches, rank {r}: {why}");
                }
            }
        },
    );
}

// ---------------------------------------------------------------------------------------
// 4. Fold kernels with simulated W on one device.

#[test]
fn fold_kernels_with_simulated_world_sizes_match_the_oracle() {
    let _gpu = gpu_lock();
    let Some(backend) = common::gpu::backend() else {
        return;
    };
    struct FoldCase {
        op: CollectiveOp,
        element: DataType,
        world: usize,
        count: usize,
    }
    let mut cases = Vec::new();
    for world in 2..=8 {
        for element in sweep_types() {
            for op in OPS {
                for count in [1, 7, 4099] {
                    cases.push(FoldCase {
                        op,
                        element: element.clone(),
                        world,
                        count,
                    });
                }
            }
        }
    }
    let config = DispatchConfig::default();
    let (mut failures, mut matched, mut refused) = (Vec::new(), 0usize, 0usize);
    pipelined(
        &cases,
        |index, case| {
            let ranks: RankInputs = (0..case.world)
                .map(|r| {
                    let seed = (index * 16 + r) as u64 + 5;
                    vec![rank_values(&case.element, case.count, Values::Bits, seed)]
                })
                .collect();
            let oracle = reference_ranks(&all_reduce(&case.element, case.count, case.op), &ranks);
            let (program, inputs) = fold_case(case.op, &case.element, &ranks);
            // The fold is every rank's result: compare it as a one-rank result with rank 0's.
            let mut want = oracle.map(|ranks| vec![ranks[0].clone()]);
            let wide = matches!(case.element, DataType::U64 | DataType::I64);
            if wide && !is_bitwise(case.op) {
                // The runtime reduces these with NCCL; their fold kernels must do what the
                // reference does with them (which refuses 64-bit integer arithmetic).
                if let Err(error) = common::gpu::reference(&program, &inputs) {
                    want = Err(format!("the reference refuses the fold program: {error}"));
                }
            }
            (program, inputs, want)
        },
        |_, case, (program, inputs, want)| {
            let name = format!(
                "fold {:?} {} W = {} x {}",
                case.op, case.element, case.world, case.count
            );
            let got = backend.dispatch(&program, &inputs, &config);
            match judge(
                &name,
                size_of(&case.element),
                &want,
                got.map(|outs| vec![outs]),
            ) {
                Ok(None) => matched += 1,
                Ok(Some(_)) => refused += 1,
                Err(why) => failures.push(why),
            }
        },
    );
    println!(
        "{} fold cases: {matched} byte-identical, {refused} refused by both",
        cases.len()
    );
    // Per world and count: Sum/Min/Max over the six types but u64 and the bitwise ops over
    // the three integer types match; the bitwise ops over the four float types are refused
    // (u64 Sum/Min/Max go either way, as the reference does).
    assert!(
        matched >= 7 * 3 * (6 * 3 + 3 * 3),
        "{matched} byte-identical"
    );
    assert!(refused >= 7 * 3 * 4 * 3, "{refused} refused");
    finish("fold kernels", &failures);
}

// ---------------------------------------------------------------------------------------
// 5. The abort path.

/// `s = acc[i]; repeat iters[0] times: s = s * 1664525 + (k ^ 1013904223); acc[i] = s`
/// for the first 8 elements, then `AllReduce(acc, Sum)`: a rank given a large `iters`
/// reaches the collective long after the others. (u32 Sum is NCCL's own reduction.)
fn slow_then_all_reduce() -> Program {
    slow_then(CollectiveOp::Sum)
}

/// [`slow_then_all_reduce`] with `AllReduce(acc, op)`: `BitXor` folds (exact mode), from
/// the peers' memory between peer barriers where the ranks are linked (two of them).
fn slow_then(op: CollectiveOp) -> Program {
    let step = Expr::add(
        Expr::mul(Expr::var("s"), Expr::u32(1_664_525)),
        bin(BinOp::BitXor, Expr::var("k"), Expr::u32(1_013_904_223)),
    );
    Program::wrapped(
        vec![
            BufferDecl::read_write("acc", 0, DataType::U32).with_count(8),
            BufferDecl::read("iters", 1, DataType::U32).with_count(1),
        ],
        [64, 1, 1],
        vec![
            Node::if_then(
                Expr::lt(gid(), Expr::buf_len("acc")),
                vec![
                    Node::let_bind("s", Expr::load("acc", gid())),
                    Node::loop_for(
                        "k",
                        Expr::u32(0),
                        Expr::load("iters", Expr::u32(0)),
                        vec![Node::assign("s", step)],
                    ),
                    Node::store("acc", gid(), Expr::var("s")),
                ],
            ),
            Node::AllReduce {
                buffer: "acc".into(),
                op,
                group: CommGroup::WORLD,
            },
        ],
    )
}

/// `buf = buf + 1` over 8 u32: no collectives, so it runs on one rank alone.
fn plain_bump() -> Program {
    Program::wrapped(
        vec![BufferDecl::read_write("buf", 0, DataType::U32).with_count(8)],
        [64, 1, 1],
        vec![Node::if_then(
            Expr::lt(gid(), Expr::buf_len("buf")),
            vec![update(
                "buf",
                Expr::add(Expr::load("buf", gid()), Expr::u32(1)),
            )],
        )],
    )
}

/// After an aborted dispatch: every rank still runs a program without collectives (no
/// stream was left waiting for a peer), promptly.
fn plain_dispatches_still_run(cluster: &CudaCluster) {
    let program = plain_bump();
    let input: Vec<u32> = (0..8).map(|i| i * 3 + 1).collect();
    let want: Vec<u32> = input.iter().map(|v| v + 1).collect();
    for r in 0..cluster.world_size() {
        let started = Instant::now();
        let got = cluster
            .rank(r)
            .dispatch(&program, &[u32_bytes(&input)], &DispatchConfig::default())
            .unwrap_or_else(|e| {
                panic!("rank {r}: a program without collectives after the abort: {e}")
            });
        assert_eq!(got, vec![u32_bytes(&want)], "rank {r} after the abort");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}

fn slow_host(mut s: u32, iters: u32) -> u32 {
    for k in 0..iters {
        s = s.wrapping_mul(1_664_525).wrapping_add(k ^ 1_013_904_223);
    }
    s
}

fn u32_bytes(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Rank 0 loops `slow` times, the others not at all.
fn slow_inputs(world: usize, slow: u32) -> RankInputs {
    (0..world)
        .map(|r| {
            let acc: Vec<u32> = (0..8)
                .map(|i| (r * 100 + i) as u32 * 2_654_435_761)
                .collect();
            vec![u32_bytes(&acc), u32_bytes(&[if r == 0 { slow } else { 0 }])]
        })
        .collect()
}

#[test]
fn a_rank_past_the_collective_timeout_aborts_without_hanging() {
    let _gpu = gpu_lock();
    let Some(world) = world() else { return };
    const SLOW: u32 = 1 << 25;
    const TIMEOUT: Duration = Duration::from_millis(5);
    let program = slow_then_all_reduce();
    let config = DispatchConfig::default();
    // Control, with the default-sized timeout: the oracle at 1000 iterations, the host at
    // SLOW, and the slow segment takes far longer than TIMEOUT.
    let control = {
        let (world, program, config) = (world.clone(), program.clone(), config.clone());
        within("the control run", Duration::from_secs(120), move || {
            let w = world.size();
            let cluster = cluster(&world, CollectiveReduction::Exact);
            let inputs = slow_inputs(w, 1000);
            let want = reference_ranks(&program, &inputs).expect("the oracle runs it");
            let got = cluster
                .dispatch(&program, &inputs, &config)
                .expect("1000 iterations");
            assert_eq!(got, want, "1000 iterations on rank 0");
            let inputs = slow_inputs(w, SLOW);
            let started = Instant::now();
            let got = cluster
                .dispatch(&program, &inputs, &config)
                .expect("the slow run");
            let elapsed = started.elapsed();
            let sum: Vec<u32> = (0..8)
                .map(|i| {
                    (0..w).fold(0u32, |acc, r| {
                        let start = (r * 100 + i) as u32 * 2_654_435_761;
                        acc.wrapping_add(if r == 0 {
                            slow_host(start, SLOW)
                        } else {
                            start
                        })
                    })
                })
                .collect();
            for (r, outputs) in got.iter().enumerate() {
                assert_eq!(outputs[0], u32_bytes(&sum), "rank {r} after the slow run");
            }
            elapsed
        })
    };
    println!("control: rank 0's {SLOW} iterations then AllReduce took {control:?}");
    assert!(
        control >= TIMEOUT * 4,
        "the slow segment ({control:?}) must outlast the {TIMEOUT:?} timeout by far"
    );
    within("the aborted cluster", Duration::from_secs(120), move || {
        let w = world.size();
        let aborting = cluster_with(&world, options(CollectiveReduction::Exact, TIMEOUT));
        let started = Instant::now();
        let first = aborting.dispatch(&program, &slow_inputs(w, SLOW), &config);
        let elapsed = started.elapsed();
        match &first {
            Err(error @ CudaError::CollectiveAborted { .. }) => {
                println!("aborted after {elapsed:?}: {error}");
                one_fix(error).unwrap_or_else(|why| panic!("{why}"));
            }
            other => panic!("want CollectiveAborted, got {other:?}"),
        }
        assert!(
            elapsed < Duration::from_secs(30),
            "the abort took {elapsed:?}"
        );
        let started = Instant::now();
        let again = aborting.dispatch(&program, &slow_inputs(w, 0), &config);
        let elapsed = started.elapsed();
        assert!(
            matches!(again, Err(CudaError::CollectiveAborted { .. })),
            "a later cluster dispatch: {again:?}"
        );
        assert!(
            elapsed < Duration::from_secs(5),
            "a later dispatch took {elapsed:?}"
        );
        for (r, inputs) in slow_inputs(w, 0).iter().enumerate() {
            let started = Instant::now();
            let alone = aborting.rank(r).dispatch(&program, inputs, &config);
            assert!(
                matches!(alone, Err(CudaError::CollectiveAborted { .. })),
                "rank {r} alone after the abort: {alone:?}"
            );
            assert!(started.elapsed() < Duration::from_secs(5));
        }
        plain_dispatches_still_run(&aborting);
        let started = Instant::now();
        drop(aborting);
        println!(
            "later dispatches refused at once; the aborted cluster dropped in {:?}",
            started.elapsed()
        );
        // The same with a reduction that folds: on linked ranks the fast ones wait at the
        // peer barrier for the slow one when the dispatch is aborted.
        let aborting = cluster_with(&world, options(CollectiveReduction::Exact, TIMEOUT));
        let folded = slow_then(CollectiveOp::BitXor);
        let started = Instant::now();
        let first = aborting.dispatch(&folded, &slow_inputs(w, SLOW), &config);
        let elapsed = started.elapsed();
        assert!(
            matches!(first, Err(CudaError::CollectiveAborted { .. })),
            "a folded AllReduce past the timeout (peer barrier {:?}): {first:?}",
            aborting.peer_barrier()
        );
        assert!(
            elapsed < Duration::from_secs(30),
            "the abort took {elapsed:?}"
        );
        plain_dispatches_still_run(&aborting);
        println!(
            "a folded AllReduce (peer barrier {:?}) aborted after {elapsed:?}; every rank \
             still runs programs without collectives",
            aborting.peer_barrier()
        );
    });
}

/// `q = a / d` (i32; a zero divisor is a device-side fault, as in the reference);
/// `AllReduce(q, Sum)`; `r = q + 1`.
fn divide_then_all_reduce(n: u32) -> Program {
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::I32).with_count(n),
            BufferDecl::read("d", 1, DataType::I32).with_count(n),
            BufferDecl::output("q", 2, DataType::I32).with_count(n),
            BufferDecl::read_write("r", 3, DataType::I32).with_count(n),
        ],
        [64, 1, 1],
        vec![
            update(
                "q",
                bin(BinOp::Div, Expr::load("a", gid()), Expr::load("d", gid())),
            ),
            Node::AllReduce {
                buffer: "q".into(),
                op: CollectiveOp::Sum,
                group: CommGroup::WORLD,
            },
            update("r", Expr::add(Expr::load("q", gid()), Expr::i32(1))),
        ],
    )
}

/// Rank inputs of [`divide_then_all_reduce`]; with `fault`, the last rank divides by zero
/// at element 37.
fn divide_inputs(world: usize, n: usize, fault: bool) -> RankInputs {
    (0..world)
        .map(|r| {
            let a: Vec<i32> = (0..n)
                .map(|i| (i as i32 * 7919 + r as i32 * 104_729) % 1_000_003 - 500_000)
                .collect();
            let mut d: Vec<i32> = (0..n)
                .map(|i| (i % 13) as i32 - 6)
                .map(|v| if v == 0 { 7 } else { v })
                .collect();
            if fault && r + 1 == world {
                d[37] = 0;
            }
            let bytes = |v: &[i32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
            vec![bytes(&a), bytes(&d), vec![0; n * 4]]
        })
        .collect()
}

#[test]
fn a_faulting_rank_fails_the_dispatch_and_its_peers_do_not_hang() {
    let _gpu = gpu_lock();
    let Some(world) = world() else { return };
    within(
        "a dispatch with a faulting rank",
        Duration::from_secs(180),
        move || {
            let w = world.size();
            let n = 1000;
            let program = divide_then_all_reduce(n as u32);
            let config = DispatchConfig::default();
            let cluster = cluster(&world, CollectiveReduction::Exact);
            let faulty = divide_inputs(w, n, true);
            let oracle = reference_ranks(&program, &faulty);
            assert!(
                oracle.is_err(),
                "the reference fails on the zero divisor: {oracle:?}"
            );
            let started = Instant::now();
            let got = cluster.dispatch(&program, &faulty, &config);
            let elapsed = started.elapsed();
            match &got {
                Err(error @ CudaError::KernelRuntime { message, .. }) => {
                    println!("faulting rank {}: {error} ({elapsed:?})", w - 1);
                    assert!(
                        message.starts_with(&format!("rank {}:", w - 1)),
                        "{message}"
                    );
                    one_fix(error).unwrap_or_else(|why| panic!("{why}"));
                }
                other => panic!("want KernelRuntime naming rank {}, got {other:?}", w - 1),
            }
            assert!(
                elapsed < Duration::from_secs(30),
                "the faulting dispatch took {elapsed:?}"
            );
            // A device-side fault aborts nothing: the same cluster runs the next dispatch.
            let clean = divide_inputs(w, n, false);
            let want = reference_ranks(&program, &clean).expect("the oracle runs it");
            let got = cluster
                .dispatch(&program, &clean, &config)
                .expect("the dispatch after the fault");
            if let Some(why) = rank_difference(&got, &want, 4) {
                panic!("after the fault: {why}");
            }
        },
    );
}

// ---------------------------------------------------------------------------------------
// 6. Several processes that join through the hex id.

const CHILD_TEST: &str = "join_child";
const ID_ENV: &str = "VYRE_NCCL_ID";
const CHILD_DEADLINE: Duration = Duration::from_secs(120);

/// The programs every joined rank runs, with all ranks' inputs (derived from the rank).
fn join_cases(world: usize) -> Vec<(String, Program, usize, RankInputs)> {
    let per_rank = |ty: &DataType, count: usize, seed: u64| -> RankInputs {
        (0..world)
            .map(|r| vec![rank_values(ty, count, Values::Bits, seed * 100 + r as u64)])
            .collect()
    };
    let (u32_, f16, f32_, f64_, u64_) = (
        DataType::U32,
        DataType::F16,
        DataType::F32,
        DataType::F64,
        DataType::U64,
    );
    vec![
        (
            "AllReduce f32 sum".into(),
            all_reduce(&f32_, 262_147, CollectiveOp::Sum),
            4,
            per_rank(&f32_, 262_147, 1),
        ),
        (
            "AllReduce u64 bitxor".into(),
            all_reduce(&u64_, 777, CollectiveOp::BitXor),
            8,
            per_rank(&u64_, 777, 2),
        ),
        (
            "AllGather u32".into(),
            all_gather(&u32_, 1000, world),
            4,
            per_rank(&u32_, 1000, 3),
        ),
        (
            "ReduceScatter f16 sum".into(),
            reduce_scatter(&f16, 4099, world, CollectiveOp::Sum),
            2,
            per_rank(&f16, 4099 * world, 4),
        ),
        (
            "Broadcast f64 root W-1".into(),
            broadcast(&f64_, 1025, world as u32 - 1),
            8,
            per_rank(&f64_, 1025, 5),
        ),
        (
            "u32 compute, AllReduce max, compute, AllGather, compute".into(),
            compute_collective_compute(&u32_, 4099, CollectiveOp::Max, false, Some(world)),
            4,
            compute_inputs_for(&u32_, 4099, Values::Bits, false, world, 6, true),
        ),
    ]
}

/// Not a test on its own: the body of one joined rank, run by
/// [`joined_processes_match_the_oracle`] in a child process of this binary with
/// `VYRE_NCCL_ID`, `RANK`, `WORLD_SIZE` and `LOCAL_RANK` set. Returns at once without them.
#[test]
fn join_child() {
    let Ok(hex) = std::env::var(ID_ENV) else {
        return;
    };
    let number = |name: &str| -> usize {
        let text =
            std::env::var(name).unwrap_or_else(|_| panic!("{ID_ENV} is set but {name} is not"));
        text.parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a number"))
    };
    let (rank, world, local) = (number("RANK"), number("WORLD_SIZE"), number("LOCAL_RANK"));
    let id = NcclUniqueId::from_hex(&hex).expect("the parent's hex id");
    let mut options = options(CollectiveReduction::Exact, Duration::from_secs(30));
    options.device = local;
    let started = Instant::now();
    let backend = CudaBackend::join(options, &id, rank, world).expect("join the world");
    println!(
        "join rank {rank}/{world}: joined on device {local} in {:?}",
        started.elapsed()
    );
    assert_eq!(backend.rank_info(), Some((rank, world)));
    let dynamic: &dyn VyreBackend = &backend;
    assert!(dynamic.is_distributed() && dynamic.supports_distributed_collectives());
    println!(
        "join rank {rank}/{world}: NCCL_NVLS_ENABLE={}",
        std::env::var("NCCL_NVLS_ENABLE").unwrap_or_else(|_| "<unset>".into())
    );
    let cases = join_cases(world);
    for (name, program, element, inputs) in &cases {
        let want = reference_ranks(program, inputs).expect("the oracle runs it");
        let got = backend
            .dispatch(program, &inputs[rank], &DispatchConfig::default())
            .unwrap_or_else(|e| panic!("rank {rank}, {name}: {e}"));
        assert_eq!(got.len(), want[rank].len(), "rank {rank}, {name}: outputs");
        for (index, (got, want)) in got.iter().zip(&want[rank]).enumerate() {
            if let Some(why) = difference(got, want, *element) {
                panic!("rank {rank}, {name}, output {index}: {why}");
            }
        }
    }
    println!(
        "join rank {rank}/{world} ok: {} programs match the oracle",
        cases.len()
    );
}

/// Runs W children of this binary that join one world; `Err` names what went wrong.
fn run_joined(world: usize, transport: &[(&str, &str)]) -> Result<Duration, String> {
    use std::io::Read;
    use std::process::{Command, Stdio};
    for (key, _) in transport {
        assert!(
            !key.contains("NVLS") && !key.contains("MULTICAST"),
            "the test must not override {key}"
        );
    }
    let id = NcclUniqueId::new().map_err(|e| format!("ncclGetUniqueId: {e}"))?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let started = Instant::now();
    let mut children = Vec::new();
    for rank in 0..world {
        let mut command = Command::new(&exe);
        command
            .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
            .env(ID_ENV, id.to_hex())
            .env("RANK", rank.to_string())
            .env("WORLD_SIZE", world.to_string())
            .env("LOCAL_RANK", rank.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (key, value) in transport {
            command.env(key, value);
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("spawn rank {rank}: {e}"))?;
        // Each pipe drained on its own thread, so a full one never stalls the child.
        let mut stdout = child.stdout.take().expect("piped stdout");
        let mut stderr = child.stderr.take().expect("piped stderr");
        let errors = std::thread::spawn(move || {
            let mut err = String::new();
            let _ = stderr.read_to_string(&mut err);
            err
        });
        let reader = std::thread::spawn(move || {
            let mut out = String::new();
            let _ = stdout.read_to_string(&mut out);
            (out, errors.join().unwrap_or_default())
        });
        children.push((child, reader));
    }
    let mut statuses = vec![None; world];
    while statuses.iter().any(Option::is_none) && started.elapsed() < CHILD_DEADLINE {
        for (rank, (child, _)) in children.iter_mut().enumerate() {
            if statuses[rank].is_none() {
                statuses[rank] = child.try_wait().map_err(|e| e.to_string())?;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let elapsed = started.elapsed();
    let hung: Vec<usize> = (0..world).filter(|&r| statuses[r].is_none()).collect();
    for &rank in &hung {
        let _ = children[rank].0.kill();
        let _ = children[rank].0.wait();
    }
    let parent_nvls = std::env::var("NCCL_NVLS_ENABLE").unwrap_or_else(|_| "<unset>".into());
    let mut problems = Vec::new();
    for (rank, (_, reader)) in children.into_iter().enumerate() {
        let (out, err) = reader.join().unwrap_or_default();
        let tail = |text: &str| {
            text.lines()
                .rev()
                .take(30)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n")
        };
        let ok_line = format!("join rank {rank}/{world} ok:");
        let nvls_line = format!("join rank {rank}/{world}: NCCL_NVLS_ENABLE={parent_nvls}");
        for line in out.lines().filter(|l| l.starts_with("join rank")) {
            println!("  {line}");
        }
        let why = if hung.contains(&rank) {
            Some(format!("killed after {CHILD_DEADLINE:?}"))
        } else if !statuses[rank].is_some_and(|s| s.success()) {
            Some(format!("exited with {:?}", statuses[rank]))
        } else if !out.contains(&ok_line) {
            Some("exited 0 without its result line".into())
        } else if !out.contains(&nvls_line) {
            Some(format!(
                "saw another NCCL_NVLS_ENABLE than the parent's ({parent_nvls})"
            ))
        } else {
            None
        };
        if let Some(why) = why {
            problems.push(format!(
                "rank {rank}: {why}\n--- stdout\n{}\n--- stderr\n{}",
                tail(&out),
                tail(&err)
            ));
        }
    }
    if problems.is_empty() {
        Ok(elapsed)
    } else {
        Err(problems.join("\n"))
    }
}

#[test]
fn joined_processes_match_the_oracle() {
    let _gpu = gpu_lock();
    let Some(world) = world() else { return };
    let w = world.size();
    let transports: [(&str, &[(&str, &str)]); 2] = [
        ("NCCL's default transport", &[]),
        (
            "the network transport over loopback",
            &[
                ("NCCL_P2P_DISABLE", "1"),
                ("NCCL_SHM_DISABLE", "1"),
                ("NCCL_SOCKET_IFNAME", "lo"),
            ],
        ),
    ];
    let mut failures = Vec::new();
    for (name, transport) in transports {
        match run_joined(w, transport) {
            Ok(elapsed) => println!(
                "{w} joined processes, {name}: every rank matches the oracle ({elapsed:?})"
            ),
            Err(why) => failures.push(format!("{name}: {why}")),
        }
    }
    finish("joined processes", &failures);
}

// ---------------------------------------------------------------------------------------
// On the CPU: the premises the GPU tests rely on.

/// The value of a 16-bit float (`f16`: 5 exponent bits, `bf16`: 8) as f64.
fn half_value(bits: u16, bf16: bool) -> f64 {
    if bf16 {
        return f64::from(f32::from_bits(u32::from(bits) << 16));
    }
    let sign = if bits >> 15 == 1 { -1.0 } else { 1.0 };
    let (exp, man) = (i32::from((bits >> 10) & 0x1f), f64::from(bits & 0x3ff));
    sign * match exp {
        0 => man * 2f64.powi(-24),
        31 if man == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        _ => (1.0 + man / 1024.0) * 2f64.powi(exp - 15),
    }
}

fn float_values(ty: &DataType, bytes: &[u8]) -> Vec<f64> {
    bytes
        .chunks_exact(size_of(ty))
        .map(|c| match ty {
            DataType::F16 => half_value(u16::from_le_bytes([c[0], c[1]]), false),
            DataType::BF16 => half_value(u16::from_le_bytes([c[0], c[1]]), true),
            DataType::F32 => f64::from(f32::from_le_bytes(c.try_into().unwrap())),
            _ => f64::from_le_bytes(c.try_into().unwrap()),
        })
        .collect()
}

#[test]
fn the_inputs_and_programs_do_what_the_gpu_tests_assume() {
    for ty in sweep_types().iter().filter(|ty| is_float(ty)) {
        // Small integers: -15 ..= 15, zero as +0, so every fold of <= 8 ranks is exact.
        let small = rank_values(ty, 4096, Values::SmallInt, 9);
        let values = float_values(ty, &small);
        assert!(values
            .iter()
            .all(|v| v.fract() == 0.0 && (-15.0..=15.0).contains(v)));
        assert!(values.iter().any(|v| *v < 0.0) && values.contains(&15.0));
        let negative_zero = float_values(ty, &small)
            .iter()
            .zip(small.chunks_exact(size_of(ty)))
            .any(|(v, c)| *v == 0.0 && c.iter().any(|&b| b != 0));
        assert!(!negative_zero, "{ty}: no -0 among the small integers");
        // Moderate: normal, finite, 2^-4 ..= 2^5.
        let moderate = float_values(ty, &rank_values(ty, 4096, Values::Moderate, 9));
        assert!(moderate
            .iter()
            .all(|v| v.is_finite() && (0.0625..32.0).contains(&v.abs())));
        // Bits: NaN, infinity, zero and subnormal all occur even in 12 elements.
        let bits = float_values(ty, &rank_values(ty, 12, Values::Bits, 4));
        assert!(bits.iter().any(|v| v.is_nan()), "{ty}");
        assert!(bits.iter().any(|v| v.is_infinite()), "{ty}");
        assert!(bits.contains(&0.0), "{ty}");
        let smallest_normal = match ty {
            DataType::F16 => 2f64.powi(-14),
            DataType::BF16 | DataType::F32 => 2f64.powi(-126),
            _ => f64::MIN_POSITIVE,
        };
        assert!(
            bits.iter().any(|v| *v != 0.0 && v.abs() < smallest_normal),
            "{ty}: a subnormal"
        );
    }
    // Ranks get different data.
    assert_ne!(
        rank_values(&DataType::U32, 7, Values::Bits, 1),
        rank_values(&DataType::U32, 7, Values::Bits, 2)
    );
    // The oracle refuses exactly the bitwise ops over floats (W = 2).
    for case in sweep_cases(2).iter().filter(|c| c.count == 7) {
        let inputs: RankInputs = (0..2)
            .map(|r| {
                vec![rank_values(
                    &case.element,
                    case.input_count(2),
                    case.values,
                    r + 1,
                )]
            })
            .collect();
        let refused = reference_ranks(&case.program(2), &inputs).is_err();
        let bitwise_float = is_float(&case.element)
            && matches!(
                case.collective,
                Collective::AllReduce(op) | Collective::ReduceScatter(op) if is_bitwise(op)
            );
        assert_eq!(refused, bitwise_float, "{}", case.name());
    }
    // The slow program's host model, and its rank-0-only slowness.
    let program = slow_then_all_reduce();
    let inputs = slow_inputs(3, 1000);
    let want = reference_ranks(&program, &inputs).expect("the oracle runs it");
    let sum: Vec<u32> = (0..8)
        .map(|i| {
            (0..3).fold(0u32, |acc, r| {
                let start = (r * 100 + i) as u32 * 2_654_435_761;
                acc.wrapping_add(if r == 0 {
                    slow_host(start, 1000)
                } else {
                    start
                })
            })
        })
        .collect();
    assert!(want.iter().all(|rank| rank[0] == u32_bytes(&sum)));
    // The faulting rank fails in the oracle; the clean inputs run.
    let program = divide_then_all_reduce(1000);
    assert!(reference_ranks(&program, &divide_inputs(3, 1000, true)).is_err());
    assert!(reference_ranks(&program, &divide_inputs(3, 1000, false)).is_ok());
    // The compute programs run in the oracle.
    for (ty, y_rw, gather) in [(DataType::U32, false, Some(3)), (DataType::F32, true, None)] {
        let program = compute_collective_compute(&ty, 100, CollectiveOp::Max, y_rw, gather);
        let inputs = compute_inputs_for(&ty, 100, Values::Bits, y_rw, 3, 1, gather.is_some());
        let outputs = reference_ranks(&program, &inputs).expect("the oracle runs it");
        assert_eq!(outputs[0].len(), 2 + usize::from(gather.is_some()));
    }
}

/// Every refusal comes before anything is enqueued, with one `Fix:`, where the oracle
/// refuses too, and leaves the cluster usable: AllGather/ReduceScatter shapes, a Broadcast
/// root past W, ranks binding different lengths, a collective inside `If`, a group other
/// than WORLD, two output buffers. Paths that run one rank's kernel alone (pipelines,
/// asynchronous dispatch) refuse programs with collectives on a rank; a plain backend runs
/// them with the reference's one-rank lowering.
#[test]
fn refusals_come_first_and_leave_the_cluster_usable() {
    let _gpu = gpu_lock();
    let Some(world) = world() else { return };
    let w = world.size();
    let cluster = cluster(&world, CollectiveReduction::Exact);
    let u32_ = DataType::U32;
    let words = |n: usize, seed: u64| rank_values(&u32_, n, Values::Bits, seed);
    let same = |inputs: Vec<Vec<u8>>| -> RankInputs { (0..w).map(|_| inputs.clone()).collect() };
    let all_gather_wrong = Program::wrapped(
        vec![
            BufferDecl::read("src", 0, u32_.clone()).with_count(8),
            BufferDecl::read_write("out", 1, u32_.clone()).with_count(8 * w as u32 + 1),
        ],
        [64, 1, 1],
        vec![Node::AllGather {
            input: "src".into(),
            output: "out".into(),
            group: CommGroup::WORLD,
        }],
    );
    let reduce_scatter_wrong = Program::wrapped(
        vec![
            BufferDecl::read("src", 0, u32_.clone()).with_count(8 * w as u32 + 1),
            BufferDecl::read_write("out", 1, u32_.clone()).with_count(8),
        ],
        [64, 1, 1],
        vec![Node::ReduceScatter {
            input: "src".into(),
            output: "out".into(),
            op: CollectiveOp::Sum,
            group: CommGroup::WORLD,
        }],
    );
    let nested = Program::wrapped(
        vec![BufferDecl::read_write("buf", 0, u32_.clone()).with_count(8)],
        [64, 1, 1],
        vec![Node::if_then(
            Expr::bool(true),
            vec![Node::AllReduce {
                buffer: "buf".into(),
                op: CollectiveOp::Sum,
                group: CommGroup::WORLD,
            }],
        )],
    );
    let grouped = Program::wrapped(
        vec![BufferDecl::read_write("buf", 0, u32_.clone()).with_count(8)],
        [64, 1, 1],
        vec![Node::AllReduce {
            buffer: "buf".into(),
            op: CollectiveOp::Sum,
            group: CommGroup(1),
        }],
    );
    let two_outputs = Program::wrapped(
        vec![
            BufferDecl::read_write("buf", 0, u32_.clone()).with_count(8),
            BufferDecl::output("a", 1, u32_.clone()).with_count(8),
            BufferDecl::output("b", 2, u32_.clone()).with_count(8),
        ],
        [64, 1, 1],
        vec![
            update("a", Expr::u32(1)),
            Node::AllReduce {
                buffer: "buf".into(),
                op: CollectiveOp::Sum,
                group: CommGroup::WORLD,
            },
            update("b", Expr::u32(2)),
        ],
    );
    let uneven: RankInputs = (0..w).map(|r| vec![words(8 + r, r as u64)]).collect();
    let cases: Vec<(&str, Program, RankInputs, &str)> = vec![
        (
            "AllGather output not W x input",
            all_gather_wrong,
            same(vec![words(8, 1), words(8 * w + 1, 2)]),
            "W x the input",
        ),
        (
            "ReduceScatter input not W x output",
            reduce_scatter_wrong,
            same(vec![words(8 * w + 1, 3), words(8, 4)]),
            "W x the output",
        ),
        (
            "Broadcast root W",
            broadcast(&u32_, 8, w as u32),
            same(vec![words(8, 5)]),
            "root",
        ),
        (
            "collective inside If",
            nested,
            same(vec![words(8, 6)]),
            "If or Loop",
        ),
        (
            "CommGroup(1)",
            grouped,
            same(vec![words(8, 7)]),
            "CommGroup(1)",
        ),
        (
            "two output buffers",
            two_outputs,
            same(vec![words(8, 8)]),
            "V022",
        ),
    ];
    let mut cases = cases;
    if w > 1 {
        cases.push((
            "ranks binding different lengths",
            all_reduce(&u32_, 8, CollectiveOp::Sum),
            uneven,
            "rank",
        ));
    }
    let valid = all_reduce(&u32_, 1000, CollectiveOp::Sum);
    let valid_inputs: RankInputs = (0..w).map(|r| vec![words(1000, 100 + r as u64)]).collect();
    let want = reference_ranks(&valid, &valid_inputs).expect("the oracle runs it");
    let mut failures = Vec::new();
    for (name, program, inputs, words_in_message) in &cases {
        let oracle = reference_ranks(program, inputs);
        let started = Instant::now();
        let got = cluster.dispatch(program, inputs, &DispatchConfig::default());
        match (&oracle, &got) {
            (Err(_), Err(error)) => match one_fix(error) {
                Ok(text) if text.contains(words_in_message) => {
                    println!("{name}: refused in {:?}: {text}", started.elapsed())
                }
                Ok(text) => failures.push(format!(
                    "{name}: the message lacks `{words_in_message}`: {text}"
                )),
                Err(why) => failures.push(format!("{name}: {why}")),
            },
            _ => failures.push(format!(
                "{name}: want both to refuse, oracle {:?}, cluster {:?}",
                oracle.as_ref().err(),
                got.as_ref().err()
            )),
        }
        // Nothing was enqueued, so nothing was aborted: the cluster still runs.
        match cluster.dispatch(&valid, &valid_inputs, &DispatchConfig::default()) {
            Ok(outputs) if outputs == want => {}
            Ok(_) => failures.push(format!(
                "{name}: the next valid dispatch differs from the oracle"
            )),
            Err(error) => failures.push(format!("{name}: the next valid dispatch fails: {error}")),
        }
    }
    // One rank's kernel alone would compute the one-GPU result: refused on a rank.
    let rank = cluster.rank(0);
    let compiled = rank.compile(
        std::sync::Arc::new(valid.clone()),
        &DispatchConfig::default(),
    );
    match compiled {
        Err(error) => {
            let text = one_fix(&error).unwrap_or_else(|why| panic!("compile: {why}"));
            assert!(text.contains("collectives"), "{text}");
        }
        Ok(_) => failures.push("a rank compiled a pipeline of a program with collectives".into()),
    }
    // A plain backend on the same GPU runs the reference's one-rank lowering.
    let plain =
        CudaBackend::with_options(options(CollectiveReduction::Exact, Duration::from_secs(60)))
            .expect("a plain backend");
    assert_eq!(plain.rank_info(), None);
    let one = vec![words(1000, 9)];
    let single = vyre_reference::reference_eval(
        &valid,
        &[vyre_reference::value::Value::from(one[0].clone())],
    )
    .expect("the reference runs it")
    .into_iter()
    .map(|value| value.to_bytes())
    .collect::<Vec<_>>();
    assert_eq!(
        plain
            .dispatch(&valid, &one, &DispatchConfig::default())
            .expect("one-rank lowering"),
        single
    );
    finish("refusals", &failures);
}
