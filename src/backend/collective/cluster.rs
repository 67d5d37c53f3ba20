//! [`CudaCluster`]: every GPU of a list as the ranks of one communicator, in this process.

use super::barrier::PeerBarrier;
use super::exec::{self, Bound};
use super::PeerBarrierKind;
use crate::backend::{CudaBackend, CudaOptions, PoolKind};
use crate::driver::nccl::NcclComm;
use crate::error::CudaError;
use std::sync::Arc;
use vyre_driver::{DispatchConfig, Resource};
use vyre_foundation::ir::Program;

/// Several GPUs of this process as the ranks `0..W` of one NCCL communicator
/// (`ncclCommInitAll`): rank `r` is a [`CudaBackend`] on `devices[r]`.
///
/// [`CudaCluster::dispatch`] runs one program on every rank (SPMD) from the calling
/// thread: each rank's kernels on its own stream, the collectives as NCCL group calls over
/// all ranks, the way `nccl-tests -g N` drives several GPUs. Each rank is also an ordinary
/// backend ([`CudaCluster::rank`]) for work without collectives, resident buffers
/// included.
#[derive(Debug)]
pub struct CudaCluster {
    ranks: Vec<CudaBackend>,
}

impl CudaCluster {
    /// The GPUs `devices` (ordinals, distinct) with [`CudaOptions::from_env`].
    pub fn new(devices: &[usize]) -> Result<Self, CudaError> {
        Self::with_options(CudaOptions::from_env()?, devices)
    }

    /// Every visible GPU, in ordinal order.
    pub fn all_visible() -> Result<Self, CudaError> {
        let count = crate::driver::device_count()?;
        Self::new(&(0..count).collect::<Vec<_>>())
    }

    /// The GPUs `devices` with `options` (its `device` is replaced by each ordinal).
    pub fn with_options(options: CudaOptions, devices: &[usize]) -> Result<Self, CudaError> {
        if devices.is_empty() {
            return Err(CudaError::invalid_input(
                "a cluster of no devices",
                "list at least one device ordinal",
            ));
        }
        let ranks = devices
            .iter()
            .map(|&device| {
                CudaBackend::with_options(CudaOptions {
                    device,
                    ..options.clone()
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let handles: Vec<_> = ranks.iter().map(|r| Arc::clone(&r.core.device)).collect();
        let comms = NcclComm::init_all(&handles).map_err(CudaError::Nccl)?;
        for (rank, comm) in ranks.iter().zip(comms) {
            rank.attach(comm, &options);
        }
        if options.collective_peer_fold && options.pool == PoolKind::SizeClasses {
            link_peers(&ranks, options.collective_peer_barrier)?;
        }
        Ok(Self { ranks })
    }

    /// Number of ranks.
    #[must_use]
    pub fn world_size(&self) -> usize {
        self.ranks.len()
    }

    /// Whether exact reductions read the ranks' memory directly: every pair of GPUs has
    /// peer access and [`CudaOptions::collective_peer_fold`] is on (with the size-class
    /// pool). Otherwise they exchange blocks through NCCL first; the bits are the same.
    #[must_use]
    pub fn peer_linked(&self) -> bool {
        self.ranks.len() > 1
            && (self.ranks.iter()).all(|r| {
                r.core
                    .rank
                    .get()
                    .is_some_and(|c| c.peer_barrier().is_some())
            })
    }

    /// The barrier the ranks' streams wait at around the folds of exact reductions when
    /// [`CudaCluster::peer_linked`]: [`CudaOptions::collective_peer_barrier`], or
    /// [`PeerBarrierKind::Events`] where a GPU lacks 64-bit stream memory operations.
    /// `None` when the ranks are not linked.
    #[must_use]
    pub fn peer_barrier(&self) -> Option<PeerBarrierKind> {
        if !self.peer_linked() {
            return None;
        }
        let rank = self.ranks[0].core.rank.get()?;
        rank.peer_barrier().map(PeerBarrier::kind)
    }

    /// Rank `r`'s backend.
    ///
    /// # Panics
    /// If `r` is not below [`CudaCluster::world_size`].
    #[must_use]
    pub fn rank(&self, r: usize) -> &CudaBackend {
        &self.ranks[r]
    }

    /// Every rank's backend, in rank order.
    #[must_use]
    pub fn ranks(&self) -> &[CudaBackend] {
        &self.ranks
    }

    /// Runs `program` on every rank: `inputs[r]` are rank `r`'s inputs (as
    /// [`CudaBackend::dispatch_borrowed`] takes them), and the result's `[r]` its outputs.
    /// A device-side fault on any rank fails the call, naming the rank.
    pub fn dispatch<I: AsRef<[u8]>>(
        &self,
        program: &Program,
        inputs: &[Vec<I>],
        config: &DispatchConfig,
    ) -> Result<Vec<Vec<Vec<u8>>>, CudaError> {
        self.check_ranks(inputs.len(), "input lists")?;
        let borrowed: Vec<Vec<&[u8]>> = inputs
            .iter()
            .map(|rank| rank.iter().map(AsRef::as_ref).collect())
            .collect();
        let bound: Vec<Bound<'_>> = borrowed.iter().map(|i| Bound::Host(i)).collect();
        let mut outputs = vec![Vec::new(); self.ranks.len()];
        exec::run(&self.cores(), program, &bound, config, &mut outputs)?;
        Ok(outputs)
    }

    /// Runs `program` on every rank over resident buffers: `resources[r]` are rank `r`'s
    /// buffers in binding order, as [`CudaBackend::dispatch_resident_timed`] takes them
    /// (each allocated on that rank). The results stay in them.
    pub fn dispatch_resident(
        &self,
        program: &Program,
        resources: &[Vec<Resource>],
        config: &DispatchConfig,
    ) -> Result<(), CudaError> {
        self.check_ranks(resources.len(), "resource lists")?;
        let bound: Vec<Bound<'_>> = resources.iter().map(|r| Bound::Resident(r)).collect();
        exec::run(&self.cores(), program, &bound, config, &mut []).map(|_| ())
    }

    fn cores(&self) -> Vec<&crate::backend::Core> {
        self.ranks.iter().map(|rank| &**rank.core()).collect()
    }

    fn check_ranks(&self, given: usize, what: &str) -> Result<(), CudaError> {
        if given == self.ranks.len() {
            return Ok(());
        }
        Err(CudaError::invalid_input(
            format!(
                "{given} {what} for a cluster of {} rank(s)",
                self.ranks.len()
            ),
            format!("pass one of the {what} per rank, in rank order"),
        ))
    }
}

/// Enables peer access between every pair of the ranks' GPUs and gives each rank its half
/// of the peer barrier (`kind`, or events where a GPU lacks stream memory operations), so
/// that exact reductions read the ranks' memory directly. Leaves the
/// ranks on the NCCL exchange when any pair cannot reach the other. (Transient memory must
/// come from `cuMemAlloc` for peers to reach it: the size-class pool, which the caller
/// checked; the stream-ordered pool's memory is not mapped for peers.)
fn link_peers(ranks: &[CudaBackend], kind: PeerBarrierKind) -> Result<(), CudaError> {
    if ranks.len() < 2 {
        return Ok(());
    }
    for rank in ranks {
        for peer in ranks.iter().filter(|peer| !std::ptr::eq(*peer, rank)) {
            let device = &rank.core.device;
            let linked = device
                .enable_peer_access(&peer.core.device)
                .map_err(|e| rank.core.driver_error(e))?;
            if !linked {
                tracing::info!(
                    from = device.info().ordinal,
                    to = peer.core.device.info().ordinal,
                    "no peer access between these GPUs: exact reductions exchange blocks through NCCL"
                );
                return Ok(());
            }
        }
    }
    let devices: Vec<_> = ranks.iter().map(|r| Arc::clone(&r.core.device)).collect();
    let barriers = PeerBarrier::link(&devices, kind)
        .map_err(|(index, error)| ranks[index].core.driver_error(error))?;
    for (rank, barrier) in ranks.iter().zip(barriers) {
        if let Some(comm) = rank.core.rank.get() {
            let _ = comm.peer_barrier.set(barrier);
        }
    }
    Ok(())
}
