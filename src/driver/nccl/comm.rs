//! [`NcclComm`]: one rank of an NCCL communicator on one device, with the collective and
//! point-to-point calls on device addresses and a [`Stream`]; [`NcclGroup`] for group
//! calls.
//!
//! NCCL's CUDA runtime works in the device's primary context, the one [`Device`] retains,
//! so device addresses from [`DeviceAlloc`](crate::driver::DeviceAlloc) are valid for it.
//! NCCL may leave another context current on the calling thread (`ncclCommInitAll` walks
//! every device of the list), so every call here makes its device current first and
//! afterwards forgets what this thread last bound ([`Device::forget_bound_context`]): the
//! next driver call of this crate binds again instead of trusting a stale cache.

use super::{library, Nccl, NcclDataType, NcclError, NcclRedOp, NcclUniqueId, RawComm};
use super::{IN_PROGRESS, SUCCESS};
use crate::driver::{Device, Stream};
use std::ffi::{c_int, c_void};
use std::marker::PhantomData;
use std::sync::Arc;

/// One rank of an NCCL communicator, on one device.
///
/// `Send` but not `Sync`: NCCL does not allow one communicator to be used from two
/// threads at once. Dropping it aborts the communicator (`ncclCommAbort`), which never
/// waits for peers, so a drop cannot hang even when a peer is gone; collectives still in
/// flight are cancelled and leave their outputs undefined. [`NcclComm::close`] is the
/// orderly end: it waits for the communicator's work and reports errors.
#[derive(Debug)]
pub struct NcclComm {
    nccl: &'static Nccl,
    raw: RawComm,
    device: Arc<Device>,
    rank: usize,
    world: usize,
}

// SAFETY: an `ncclComm_t` may be used from any thread, one thread at a time (NCCL's
// thread-safety rule); `NcclComm` is not `Sync`, so `&self` calls never run concurrently.
unsafe impl Send for NcclComm {}

/// Runs one NCCL call with `device`'s context current, then forgets this thread's bound
/// context, since NCCL may have switched it.
fn on_device<T>(device: &Device, call: impl FnOnce() -> T) -> Result<T, NcclError> {
    Device::forget_bound_context();
    device.bind()?;
    let result = call();
    Device::forget_bound_context();
    Ok(result)
}

/// `value` as a C `int`, or an [`NcclError::InvalidArgument`] naming `what`.
fn c_int_of(value: usize, what: &str) -> Result<c_int, NcclError> {
    c_int::try_from(value).map_err(|_| NcclError::InvalidArgument {
        message: format!("{what} {value} does not fit NCCL's 32-bit int"),
        fix: "use fewer ranks (NCCL takes ranks, devices and roots as C ints)",
    })
}

impl NcclComm {
    /// One communicator of `devices.len()` ranks in this process (`ncclCommInitAll`):
    /// rank `r` runs on `devices[r]`. The devices must be distinct (NCCL allows one rank
    /// per GPU).
    pub fn init_all(devices: &[Arc<Device>]) -> Result<Vec<NcclComm>, NcclError> {
        let nccl = library()?;
        let Some(first) = devices.first() else {
            return Err(NcclError::InvalidArgument {
                message: "an NCCL communicator needs at least one device".into(),
                fix: "pass one device per rank",
            });
        };
        let mut ordinals = Vec::with_capacity(devices.len());
        for device in devices {
            let ordinal = c_int_of(device.info().ordinal, "device ordinal")?;
            if ordinals.contains(&ordinal) {
                return Err(NcclError::InvalidArgument {
                    message: format!("device {ordinal} is listed twice for one communicator"),
                    fix: "list each GPU once: NCCL runs one rank per GPU",
                });
            }
            ordinals.push(ordinal);
        }
        let world = c_int_of(devices.len(), "world size")?;
        let mut raws: Vec<RawComm> = vec![std::ptr::null_mut(); devices.len()];
        // SAFETY: `raws` has room for `world` handles and `ordinals` holds `world` device
        // ordinals, as ncclCommInitAll(comms, ndev, devlist) requires; both outlive the
        // call, which is synchronous.
        let status = on_device(first, || unsafe {
            (nccl.api.comm_init_all)(raws.as_mut_ptr(), world, ordinals.as_ptr())
        })?;
        nccl.check("ncclCommInitAll", status)?;
        Ok(raws
            .into_iter()
            .zip(devices)
            .enumerate()
            .map(|(rank, (raw, device))| NcclComm {
                nccl,
                raw,
                device: Arc::clone(device),
                rank,
                world: devices.len(),
            })
            .collect())
    }

    /// Rank `rank` of a communicator of `world` ranks, on `device` (`ncclCommInitRank`).
    /// Every rank calls this with the same `id` (made by one of them with
    /// [`NcclUniqueId::new`]); the call returns once all `world` ranks have joined.
    pub fn init_rank(
        device: &Arc<Device>,
        id: &NcclUniqueId,
        rank: usize,
        world: usize,
    ) -> Result<NcclComm, NcclError> {
        let nccl = library()?;
        if rank >= world {
            return Err(NcclError::InvalidArgument {
                message: format!("rank {rank} of a communicator of {world} rank(s)"),
                fix: "give each process a rank below the world size",
            });
        }
        let (c_rank, c_world) = (c_int_of(rank, "rank")?, c_int_of(world, "world size")?);
        let mut raw: RawComm = std::ptr::null_mut();
        // SAFETY: `raw` is a live out-handle and `id` a 128-byte ncclUniqueId passed by
        // value, as ncclCommInitRank(comm, nranks, commId, rank) takes it. NCCL uses the
        // current device, which `on_device` makes `device`.
        let status = on_device(device, || unsafe {
            (nccl.api.comm_init_rank)(&mut raw, c_world, *id, c_rank)
        })?;
        nccl.check("ncclCommInitRank", status)?;
        Ok(NcclComm {
            nccl,
            raw,
            device: Arc::clone(device),
            rank,
            world,
        })
    }

    /// This rank's index.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn world_size(&self) -> usize {
        self.world
    }

    /// The device this rank runs on.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// Asks NCCL for one of the communicator's integer properties.
    fn query(
        &self,
        call: &'static str,
        get: unsafe extern "C" fn(RawComm, *mut c_int) -> c_int,
    ) -> Result<usize, NcclError> {
        let mut value: c_int = 0;
        // SAFETY: `raw` is a live communicator and `value` a live out-int.
        let status = on_device(&self.device, || unsafe { get(self.raw, &mut value) })?;
        self.nccl.check(call, status)?;
        Ok(usize::try_from(value).unwrap_or(usize::MAX))
    }

    /// The number of ranks as NCCL reports it (`ncclCommCount`).
    pub fn count(&self) -> Result<usize, NcclError> {
        self.query("ncclCommCount", self.nccl.api.comm_count)
    }

    /// The CUDA device ordinal as NCCL reports it (`ncclCommCuDevice`).
    pub fn cu_device(&self) -> Result<usize, NcclError> {
        self.query("ncclCommCuDevice", self.nccl.api.comm_cu_device)
    }

    /// This rank as NCCL reports it (`ncclCommUserRank`).
    pub fn user_rank(&self) -> Result<usize, NcclError> {
        self.query("ncclCommUserRank", self.nccl.api.comm_user_rank)
    }

    /// Polls for an error raised asynchronously by the communicator's operations
    /// (`ncclCommGetAsyncError`): `Ok` while healthy (or still initialising), the error
    /// otherwise. After an error, abort: drop the communicator on every rank.
    pub fn poll_async_error(&self) -> Result<(), NcclError> {
        let mut state = SUCCESS;
        // SAFETY: `raw` is a live communicator and `state` a live out-result.
        let status = on_device(&self.device, || unsafe {
            (self.nccl.api.comm_get_async_error)(self.raw, &mut state)
        })?;
        self.nccl.check("ncclCommGetAsyncError", status)?;
        match state {
            SUCCESS | IN_PROGRESS => Ok(()),
            failed => Err(self.nccl.error("an asynchronous NCCL operation", failed)),
        }
    }

    /// Checks that `stream` belongs to this rank's device and that `peer` (a root or a
    /// peer rank, if any) is a rank; NCCL would fail or hang on either.
    fn check_call(&self, stream: &Stream, peer: Option<usize>) -> Result<c_int, NcclError> {
        let (mine, theirs) = (self.device.info().ordinal, stream.device().info().ordinal);
        if mine != theirs {
            return Err(NcclError::InvalidArgument {
                message: format!("a stream of device {theirs} for the NCCL rank on device {mine}"),
                fix: "enqueue each rank's NCCL calls on a stream of that rank's device",
            });
        }
        match peer {
            Some(peer) if peer >= self.world => Err(NcclError::InvalidArgument {
                message: format!(
                    "rank {peer} named in a communicator of {} rank(s)",
                    self.world
                ),
                fix: "name a root or peer below the world size",
            }),
            Some(peer) => c_int_of(peer, "rank"),
            None => Ok(0),
        }
    }

    /// Enqueues one NCCL call on this rank's device and checks its result.
    fn enqueue(&self, call: &'static str, op: impl FnOnce() -> c_int) -> Result<(), NcclError> {
        let status = on_device(&self.device, op)?;
        self.nccl.check(call, status)
    }

    /// `recv[i] = op over ranks of send[i]` for `count` elements of `dtype`, enqueued on
    /// `stream`. `send == recv` is the in-place form.
    ///
    /// The addresses are device memory of this rank's device holding at least `count`
    /// elements each, left untouched until the stream has run the call (as for
    /// [`Stream::copy_to_device`], a bad address is the device's fault, not host memory's).
    pub fn all_reduce(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: NcclDataType,
        op: NcclRedOp,
        stream: &Stream,
    ) -> Result<(), NcclError> {
        self.check_call(stream, None)?;
        // SAFETY: nccl.h's ncclAllReduce(sendbuff, recvbuff, count, datatype, op, comm,
        // stream) on a live communicator and stream; the device ranges are the caller's
        // contract above and NCCL only reads and writes them on the device.
        self.enqueue("ncclAllReduce", || unsafe {
            (self.nccl.api.all_reduce)(
                send as *const c_void,
                recv as *mut c_void,
                count,
                dtype as c_int,
                op as c_int,
                self.raw,
                stream.raw(),
            )
        })
    }

    /// `recv[r * send_count + i] = send of rank r [i]`: `recv` holds `world * send_count`
    /// elements. In place when `send` is `recv + rank * send_count` elements. Same address
    /// contract as [`NcclComm::all_reduce`].
    pub fn all_gather(
        &self,
        send: u64,
        recv: u64,
        send_count: usize,
        dtype: NcclDataType,
        stream: &Stream,
    ) -> Result<(), NcclError> {
        self.check_call(stream, None)?;
        // SAFETY: nccl.h's ncclAllGather(sendbuff, recvbuff, sendcount, datatype, comm,
        // stream); see `all_reduce`.
        self.enqueue("ncclAllGather", || unsafe {
            (self.nccl.api.all_gather)(
                send as *const c_void,
                recv as *mut c_void,
                send_count,
                dtype as c_int,
                self.raw,
                stream.raw(),
            )
        })
    }

    /// `recv[i] = op over ranks r of send of r [rank * recv_count + i]`: `send` holds
    /// `world * recv_count` elements. Same address contract as [`NcclComm::all_reduce`].
    pub fn reduce_scatter(
        &self,
        send: u64,
        recv: u64,
        recv_count: usize,
        dtype: NcclDataType,
        op: NcclRedOp,
        stream: &Stream,
    ) -> Result<(), NcclError> {
        self.check_call(stream, None)?;
        // SAFETY: nccl.h's ncclReduceScatter(sendbuff, recvbuff, recvcount, datatype, op,
        // comm, stream); see `all_reduce`.
        self.enqueue("ncclReduceScatter", || unsafe {
            (self.nccl.api.reduce_scatter)(
                send as *const c_void,
                recv as *mut c_void,
                recv_count,
                dtype as c_int,
                op as c_int,
                self.raw,
                stream.raw(),
            )
        })
    }

    /// `recv = send of rank root`, `count` elements (`send` is read on the root only).
    /// Same address contract as [`NcclComm::all_reduce`].
    pub fn broadcast(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: NcclDataType,
        root: usize,
        stream: &Stream,
    ) -> Result<(), NcclError> {
        let root = self.check_call(stream, Some(root))?;
        // SAFETY: nccl.h's ncclBroadcast(sendbuff, recvbuff, count, datatype, root, comm,
        // stream); see `all_reduce`.
        self.enqueue("ncclBroadcast", || unsafe {
            (self.nccl.api.broadcast)(
                send as *const c_void,
                recv as *mut c_void,
                count,
                dtype as c_int,
                root,
                self.raw,
                stream.raw(),
            )
        })
    }

    /// Sends `count` elements at `send` to rank `peer`, which must post the matching
    /// [`NcclComm::recv`]; pair them inside an [`NcclGroup`] when one thread drives both
    /// sides. Same address contract as [`NcclComm::all_reduce`].
    pub fn send(
        &self,
        send: u64,
        count: usize,
        dtype: NcclDataType,
        peer: usize,
        stream: &Stream,
    ) -> Result<(), NcclError> {
        let peer = self.check_call(stream, Some(peer))?;
        // SAFETY: nccl.h's ncclSend(sendbuff, count, datatype, peer, comm, stream); see
        // `all_reduce`.
        self.enqueue("ncclSend", || unsafe {
            (self.nccl.api.send)(
                send as *const c_void,
                count,
                dtype as c_int,
                peer,
                self.raw,
                stream.raw(),
            )
        })
    }

    /// Receives `count` elements from rank `peer` into `recv`. Same address contract as
    /// [`NcclComm::all_reduce`].
    pub fn recv(
        &self,
        recv: u64,
        count: usize,
        dtype: NcclDataType,
        peer: usize,
        stream: &Stream,
    ) -> Result<(), NcclError> {
        let peer = self.check_call(stream, Some(peer))?;
        // SAFETY: nccl.h's ncclRecv(recvbuff, count, datatype, peer, comm, stream); see
        // `all_reduce`.
        self.enqueue("ncclRecv", || unsafe {
            (self.nccl.api.recv)(
                recv as *mut c_void,
                count,
                dtype as c_int,
                peer,
                self.raw,
                stream.raw(),
            )
        })
    }

    /// Ends the communicator in order: waits for its outstanding operations
    /// (`ncclCommFinalize`), then frees it (`ncclCommDestroy`). Unlike dropping it, this
    /// waits for the peers, and reports errors; if finalizing fails, the communicator is
    /// aborted instead.
    pub fn close(mut self) -> Result<(), NcclError> {
        let (nccl, raw) = (self.nccl, self.raw);
        // `Drop` sees a null handle and leaves it alone: it is ended here, exactly once.
        self.raw = std::ptr::null_mut();
        // SAFETY: `raw` is a live communicator, finalized once.
        let finalized = on_device(&self.device, || unsafe { (nccl.api.comm_finalize)(raw) })
            .and_then(|status| nccl.check("ncclCommFinalize", status));
        if let Err(error) = finalized {
            abort(nccl, raw, &self.device);
            return Err(error);
        }
        // SAFETY: `raw` is a live, finalized communicator, destroyed once; whatever
        // ncclCommDestroy returns, the handle is not used again.
        let status =
            best_effort_on_device(&self.device, || unsafe { (nccl.api.comm_destroy)(raw) });
        nccl.check("ncclCommDestroy", status)
    }
}

/// Runs `call` (one NCCL call that frees a communicator) with `device`'s context current
/// if it can be made so, and runs it anyway if not: NCCL selects the communicator's device
/// itself, and a communicator left alive would keep its peers waiting.
fn best_effort_on_device<T>(device: &Device, call: impl FnOnce() -> T) -> T {
    Device::forget_bound_context();
    if let Err(error) = device.bind() {
        tracing::warn!(%error, "ending an NCCL communicator without its context current");
    }
    let result = call();
    Device::forget_bound_context();
    result
}

/// `ncclCommAbort`, logging a failure (from `Drop`, never raised).
fn abort(nccl: &Nccl, raw: RawComm, device: &Device) {
    // SAFETY: `raw` is a live communicator that is not used again after this call.
    let status = best_effort_on_device(device, || unsafe { (nccl.api.comm_abort)(raw) });
    if let Err(error) = nccl.check("ncclCommAbort", status) {
        tracing::warn!(%error, "aborting an NCCL communicator failed");
    }
}

impl Drop for NcclComm {
    fn drop(&mut self) {
        if !self.raw.is_null() {
            abort(self.nccl, self.raw, &self.device);
        }
    }
}

/// An NCCL group (`ncclGroupStart` .. `ncclGroupEnd`) on this thread: calls made while it
/// is open are launched together at [`NcclGroup::end`]. One thread driving several ranks
/// must group their calls, or the first call waits for the others forever.
///
/// It borrows the communicators it groups, so none can be dropped while it is open, and
/// it stays on the thread that opened it (NCCL's group state is per thread). Dropping it
/// without [`NcclGroup::end`] ends it too, logging a failure.
#[derive(Debug)]
pub struct NcclGroup<'c> {
    nccl: &'static Nccl,
    open: bool,
    _comms: PhantomData<&'c [NcclComm]>,
    _thread: PhantomData<*const ()>,
}

impl<'c> NcclGroup<'c> {
    /// Opens a group for calls on `comms` (`ncclGroupStart`).
    pub fn start(comms: &'c [NcclComm]) -> Result<Self, NcclError> {
        let nccl = match comms.first() {
            Some(comm) => comm.nccl,
            None => library()?,
        };
        // SAFETY: ncclGroupStart() takes no arguments and only marks this thread's state.
        nccl.check("ncclGroupStart", unsafe { (nccl.api.group_start)() })?;
        Ok(Self {
            nccl,
            open: true,
            _comms: PhantomData,
            _thread: PhantomData,
        })
    }

    /// Closes the group (`ncclGroupEnd`), launching its calls.
    pub fn end(mut self) -> Result<(), NcclError> {
        self.open = false;
        self.finish()
    }

    fn finish(&self) -> Result<(), NcclError> {
        // SAFETY: ncclGroupEnd() closes the group this guard opened on this thread (the
        // guard is not `Send`); it may switch the current device, so the bind cache is
        // forgotten after it.
        let status = unsafe { (self.nccl.api.group_end)() };
        Device::forget_bound_context();
        self.nccl.check("ncclGroupEnd", status)
    }
}

impl Drop for NcclGroup<'_> {
    fn drop(&mut self) {
        if self.open {
            if let Err(error) = self.finish() {
                tracing::warn!(%error, "ending an NCCL group failed");
            }
        }
    }
}
