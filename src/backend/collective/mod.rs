//! Ranks: a [`CudaBackend`] with an NCCL communicator runs vyre's collectives across GPUs.
//!
//! A rank comes from [`CudaBackend::join`] (one process or thread per GPU) or from a
//! [`CudaCluster`] (every GPU of the list in this process, driven from one thread). On a
//! rank, a program holding collectives is cut at them (`codegen::split_collectives`): the
//! segments run as ordinary kernels over the program's buffers and each collective runs
//! once per rank-dispatch between them, on the same stream (`exec.rs`). Programs without
//! collectives, and every plain backend, run exactly as on one GPU.
//!
//! Reductions are exact by default: float Sum/Min/Max, the bitwise operators and the
//! types NCCL lacks fold in rank order with a kernel our emitter builds from a vyre
//! program, so results are bit-identical for any world size; integer Sum/Min/Max use
//! NCCL's own reduction, exact in any order. [`CollectiveReduction::Native`] hands float
//! reductions to NCCL (its summation order). In a cluster whose GPUs have peer access the
//! fold reads every rank's block directly (`exec.rs`), its kernel meeting the other ranks
//! itself through flag words in each rank's memory (`codegen::PeerSync`; `barrier.rs`
//! owns the flags and epochs), or, for a fold that can fault, between barriers across the
//! ranks' streams; otherwise the blocks travel through NCCL first.

mod barrier;
mod cluster;
mod exec;

pub use barrier::{PeerBarrierKind, PEER_BARRIER_ENV};
pub use cluster::CudaCluster;

use super::{CudaBackend, CudaOptions};
use crate::codegen::{
    fold_operator, fold_program, fold_program_around, fold_program_around_in_place,
    peer_fold_program, peer_fold_program_local, RankStep,
};
use crate::driver::nccl::{NcclComm, NcclUniqueId};
use crate::error::CudaError;
use barrier::PeerBarrier;
use rustc_hash::FxHashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;
use vyre_foundation::ir::{CollectiveOp, DataType, Program};

/// Environment variable setting [`CudaOptions::collective_timeout`] in milliseconds.
pub const COLLECTIVE_TIMEOUT_ENV: &str = "VYRE_CUDA_COLLECTIVE_TIMEOUT_MS";
/// Environment variable setting [`CudaOptions::collective_reduction`]: `exact` or `native`.
pub const COLLECTIVE_REDUCTION_ENV: &str = "VYRE_CUDA_COLLECTIVE_REDUCTION";
/// Environment variable setting [`CudaOptions::collective_peer_fold`]: `1` or `0`.
pub const COLLECTIVE_PEER_FOLD_ENV: &str = "VYRE_CUDA_COLLECTIVE_PEER_FOLD";
/// Default of [`CudaOptions::collective_timeout`].
pub const DEFAULT_COLLECTIVE_TIMEOUT: Duration = Duration::from_secs(60);

/// How collective reductions over floats combine the ranks' values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CollectiveReduction {
    /// A left fold in rank order (`r0 op r1 op ... op r(W-1)`), computed exactly as vyre's
    /// reference computes it: bit-identical on any number of GPUs. Peer-linked ranks fold
    /// from each other's memory; otherwise it moves the same bytes per rank as NCCL's ring
    /// all-reduce (an all-to-all of chunks, a local fold, an all-gather).
    #[default]
    Exact,
    /// NCCL's own reduction for float Sum/Min/Max: its ring or tree order, so float sums
    /// may differ in the last bits between world sizes and from a one-GPU run.
    Native,
}

impl CollectiveReduction {
    /// Parses `VYRE_CUDA_COLLECTIVE_REDUCTION` (`exact` or `native`).
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim() {
            "exact" => Some(Self::Exact),
            "native" => Some(Self::Native),
            _ => None,
        }
    }
}

/// The rank-order fold kernel of `op` over `world` ranks of `element` as a vyre program
/// (see `codegen::fold_program`): buffers `gathered` (binding 0, read, `world * m`
/// elements) and `out` (binding 1, read-write, `m` elements). `None` for an operator
/// that has no fold.
#[must_use]
pub fn collective_fold_program(
    op: CollectiveOp,
    element: DataType,
    world: usize,
) -> Option<Program> {
    fold_operator(op).map(|binop| fold_program(binop, element, world))
}

/// A program cut at its collectives, cached per program on a rank.
pub(crate) struct Schedule {
    pub(crate) steps: Vec<RankStep>,
}

/// Which of the fold kernels (see `codegen::collective`) a collective launches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum FoldForm {
    /// Every rank's copy gathered in scratch (`fold_program`).
    Gathered,
    /// The other ranks' copies in scratch, this rank's where it lies, apart from the
    /// output (`fold_program_around`, a ReduceScatter).
    Around(usize),
    /// The other ranks' copies in scratch, this rank's in the output it is folded into
    /// (`fold_program_around_in_place`, an AllReduce).
    AroundInPlace(usize),
    /// Every rank's copy read where it lies, into this rank's output (`peer_fold_program`,
    /// a ReduceScatter).
    PeerScatter,
    /// Every rank's copy read where it lies and the fold written back to all of them, the
    /// given rank's copy holding the steps (`peer_fold_program`, an AllReduce).
    PeerInPlace(usize),
    /// As `PeerInPlace`, the fold written to the given rank's copy only (an AllReduce
    /// whose folded blocks then travel otherwise; `peer_fold_program_local`).
    PeerLocal(usize),
}

/// (operator, element, world, form) of a fold program.
type FoldKey = (u8, DataType, usize, FoldForm);

/// What a [`CudaBackend`] holds when it is a rank.
pub(crate) struct RankComm {
    /// `None` once aborted.
    comm: Mutex<Option<NcclComm>>,
    rank: usize,
    world: usize,
    timeout: Duration,
    reduction: CollectiveReduction,
    /// Why the communicator was aborted, once it was.
    aborted: Mutex<Option<String>>,
    schedules: Mutex<FxHashMap<[u8; 32], Arc<Schedule>>>,
    /// Fold programs by (operator, element, world, form), kept so the kernel cache's
    /// program memo recognises them.
    folds: Mutex<FxHashMap<FoldKey, Arc<Program>>>,
    /// Set by [`CudaCluster`] when every pair of its GPUs has peer access: this rank's half
    /// of the barrier across the ranks' streams (exact reductions then fold by reading
    /// every rank's memory directly, between such barriers).
    peer_barrier: OnceLock<PeerBarrier>,
}

impl RankComm {
    pub(crate) fn new(comm: NcclComm, options: &CudaOptions) -> Self {
        Self {
            rank: comm.rank(),
            world: comm.world_size(),
            comm: Mutex::new(Some(comm)),
            timeout: options.collective_timeout,
            reduction: options.collective_reduction,
            aborted: Mutex::new(None),
            schedules: Mutex::new(FxHashMap::default()),
            folds: Mutex::new(FxHashMap::default()),
            peer_barrier: OnceLock::new(),
        }
    }

    /// The communicator, locked for one dispatch; an error once it was aborted.
    fn lock(&self) -> Result<MutexGuard<'_, Option<NcclComm>>, CudaError> {
        let guard = self.comm.lock().map_err(|_| self.aborted_error())?;
        if guard.is_none() {
            return Err(self.aborted_error());
        }
        Ok(guard)
    }

    fn aborted_error(&self) -> CudaError {
        let cause = self
            .aborted
            .lock()
            .ok()
            .and_then(|cause| cause.clone())
            .unwrap_or_else(|| "an earlier dispatch failed".to_string());
        CudaError::CollectiveAborted {
            message: format!(
                "rank {} of {}: the communicator was aborted ({cause})",
                self.rank, self.world
            ),
        }
    }

    /// Aborts the communicator held by `guard` (dropping it aborts) and records why.
    fn abort(&self, guard: &mut Option<NcclComm>, cause: &str) {
        if let Ok(mut aborted) = self.aborted.lock() {
            aborted.get_or_insert_with(|| cause.to_string());
        }
        drop(guard.take());
    }

    /// The fold program of `op` over `world` ranks of `element` in `form`.
    fn fold(
        &self,
        op: CollectiveOp,
        element: DataType,
        world: usize,
        form: FoldForm,
    ) -> Option<Arc<Program>> {
        let key = (op as u8, element.clone(), world, form);
        let mut folds = self.folds.lock().ok()?;
        if let Some(program) = folds.get(&key) {
            return Some(Arc::clone(program));
        }
        let binop = fold_operator(op)?;
        let program = Arc::new(match form {
            FoldForm::Gathered => fold_program(binop, element, world),
            FoldForm::Around(own) => fold_program_around(binop, element, world, own),
            FoldForm::AroundInPlace(own) => {
                fold_program_around_in_place(binop, element, world, own)
            }
            FoldForm::PeerScatter => peer_fold_program(binop, element, world, None),
            FoldForm::PeerInPlace(own) => peer_fold_program(binop, element, world, Some(own)),
            FoldForm::PeerLocal(own) => peer_fold_program_local(binop, element, world, own),
        });
        folds.insert(key, Arc::clone(&program));
        Some(program)
    }

    /// This rank's half of the peer barrier, when the ranks of its cluster read each
    /// other's memory (`None` otherwise, and on a joined rank).
    fn peer_barrier(&self) -> Option<&PeerBarrier> {
        self.peer_barrier.get()
    }
}

impl CudaBackend {
    /// Rank `rank` of a communicator of `world` ranks on device `options.device`: one
    /// process (or thread) per GPU, on one host or several. Every rank calls this with the
    /// same `id`, which one of them made with [`NcclUniqueId::new`] and sent to the others
    /// (as [`NcclUniqueId::to_hex`], in an environment variable for instance); the call
    /// returns once all `world` ranks have joined.
    ///
    /// On the returned backend, `dispatch`, `dispatch_borrowed`, `dispatch_borrowed_into`
    /// and `dispatch_resident_timed` run programs holding collectives across the ranks.
    /// Every rank must make the same calls, with the same program and buffer lengths, in
    /// the same order (SPMD); a rank that does not leaves the others waiting until
    /// [`CudaOptions::collective_timeout`], when the dispatch fails with
    /// [`CudaError::CollectiveAborted`].
    pub fn join(
        options: CudaOptions,
        id: &NcclUniqueId,
        rank: usize,
        world: usize,
    ) -> Result<Self, CudaError> {
        let backend = Self::with_options(options.clone())?;
        let comm =
            NcclComm::init_rank(&backend.core.device, id, rank, world).map_err(CudaError::Nccl)?;
        backend.attach(comm, &options);
        Ok(backend)
    }

    /// `(rank, world)` of a backend with a communicator; `None` for a plain one.
    #[must_use]
    pub fn rank_info(&self) -> Option<(usize, usize)> {
        self.core.rank.get().map(|rank| (rank.rank, rank.world))
    }

    pub(crate) fn attach(&self, comm: NcclComm, options: &CudaOptions) {
        // A fresh backend: nothing can have attached a communicator before.
        let _ = self.core.rank.set(RankComm::new(comm, options));
    }
}

impl super::Core {
    /// This backend's rank, when `program` holds collectives and the backend has a
    /// communicator: such a program runs across the ranks.
    pub(crate) fn rank_for(&self, program: &Program) -> Option<&RankComm> {
        self.rank
            .get()
            .filter(|_| crate::codegen::has_collectives(program))
    }

    /// Refuses a program holding collectives on a path that runs one rank's kernel alone
    /// (pipelines, sequences, asynchronous dispatch): there it would silently compute the
    /// one-GPU result.
    pub(crate) fn refuse_collectives_here(&self, program: &Program) -> Result<(), CudaError> {
        match self.rank_for(program) {
            None => Ok(()),
            Some(_) => Err(CudaError::invalid_input(
                "this program holds collectives, which run across ranks only through \
                 dispatch, dispatch_borrowed(_into) and dispatch_resident_timed",
                "dispatch it with one of those (or with CudaCluster::dispatch / \
                 dispatch_resident); pipelines, sequences and asynchronous dispatch run one \
                 rank's kernel alone",
            )),
        }
    }
}

/// A host-bound dispatch of `program` on this one rank (a joined backend, or one rank
/// of a cluster dispatched on its own: its peers must make the matching call).
pub(crate) fn run_host(
    core: &super::Core,
    program: &Program,
    inputs: &[&[u8]],
    config: &vyre_driver::DispatchConfig,
    outputs: &mut Vec<Vec<u8>>,
) -> Result<super::dispatch::Timing, CudaError> {
    let mut all = vec![std::mem::take(outputs)];
    let result = exec::run(
        &[core],
        program,
        &[exec::Bound::Host(inputs)],
        config,
        &mut all,
    );
    *outputs = all.pop().unwrap_or_default();
    result.map(|mut timings| timings.remove(0))
}

/// A resident dispatch of `program` on this one rank (see [`run_host`]).
pub(crate) fn run_resident(
    core: &super::Core,
    program: &Program,
    resources: &[vyre_driver::Resource],
    config: &vyre_driver::DispatchConfig,
) -> Result<super::dispatch::Timing, CudaError> {
    let bound = [exec::Bound::Resident(resources)];
    exec::run(&[core], program, &bound, config, &mut []).map(|mut timings| timings.remove(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::fold_program;
    use vyre_foundation::ir::BinOp;

    #[test]
    fn reduction_modes_parse_and_default_to_exact() {
        assert_eq!(
            CollectiveReduction::parse("exact"),
            Some(CollectiveReduction::Exact)
        );
        assert_eq!(
            CollectiveReduction::parse(" native "),
            Some(CollectiveReduction::Native)
        );
        assert_eq!(CollectiveReduction::parse("fast"), None);
        let options = CudaOptions::default();
        assert_eq!(options.collective_reduction, CollectiveReduction::Exact);
        assert_eq!(options.collective_timeout, DEFAULT_COLLECTIVE_TIMEOUT);
    }

    #[test]
    fn an_aborted_dispatch_says_what_and_how_once() {
        let error = CudaError::CollectiveAborted {
            message: "the dispatch did not complete within 5 ms".into(),
        };
        let text = error.to_string();
        assert!(text.contains("aborted") && text.contains("5 ms"), "{text}");
        assert_eq!(text.matches("Fix:").count(), 1, "{text}");
        let backend: vyre_driver::BackendError = error.into();
        assert_eq!(backend.to_string().matches("Fix:").count(), 1, "{backend}");
    }

    #[test]
    fn every_reduction_has_a_fold_and_the_fold_program_validates() {
        for op in [
            CollectiveOp::Sum,
            CollectiveOp::Min,
            CollectiveOp::Max,
            CollectiveOp::BitAnd,
            CollectiveOp::BitOr,
            CollectiveOp::BitXor,
        ] {
            let program = collective_fold_program(op, DataType::U32, 4).expect("a fold");
            let prepared = crate::backend::validated(&program);
            assert!(prepared.is_ok(), "{op:?}: {:?}", prepared.err());
        }
        // World 1 copies; world 3 stores three times (each step rounds like the reference's).
        let stores = |world| {
            let program = fold_program(BinOp::Add, DataType::F32, world);
            let mut count = 0;
            crate::codegen::visit::for_each_node(program.entry(), &mut |node| {
                count += usize::from(matches!(node, vyre_foundation::ir::Node::Store { .. }));
            });
            count
        };
        assert_eq!((stores(1), stores(2), stores(3)), (1, 1, 2));
    }
}
