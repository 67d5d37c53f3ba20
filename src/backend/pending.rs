//! Asynchronous dispatch: the inputs are staged (or the resident buffers resolved) and the
//! launches enqueued before `dispatch_async` / `dispatch_resident_async` returns; the handle
//! owns the dispatch's device memory and stream and tracks completion with a CUDA event.

use super::dispatch::{count, InFlight, Timing};
use super::metrics::Metrics;
use super::sequence::ResidentFlight;
use super::{Core, CudaBackend};
use crate::error::CudaError;
use std::sync::{Arc, Mutex};
use vyre_driver::{DispatchConfig, Resource, TimedDispatchResult};
use vyre_foundation::ir::Program;

/// What a pending dispatch waits for. One per handle, held in place: the variants' size
/// difference costs nothing worth a heap allocation per dispatch.
#[allow(clippy::large_enum_variant)]
enum Flight {
    /// A dispatch over host inputs: its outputs are read back.
    Staged(InFlight),
    /// A dispatch over resident buffers: the results stay on the device.
    Resident(ResidentFlight),
}

impl Flight {
    fn is_complete(&self) -> bool {
        match self {
            Self::Staged(flight) => flight.is_complete(),
            Self::Resident(flight) => flight.is_complete(),
        }
    }

    fn finish(self, core: &Core, outputs: &mut Vec<Vec<u8>>) -> Result<Timing, CudaError> {
        match self {
            Self::Staged(flight) => flight.finish(core, outputs),
            Self::Resident(flight) => {
                outputs.clear();
                flight.finish(core, &mut [])
            }
        }
    }

    fn cancel(self) {
        match self {
            Self::Staged(flight) => flight.cancel(),
            Self::Resident(flight) => flight.cancel(),
        }
    }
}

/// A dispatch in flight ([`CudaBackend::dispatch_async`],
/// [`CudaBackend::dispatch_resident_async`]).
///
/// It borrows nothing from the caller: the inputs were already copied out when it was
/// created. [`is_ready`](Self::is_ready) polls an event without blocking;
/// [`wait`](Self::wait) / [`wait_into`](Self::wait_into) / [`wait_timed`](Self::wait_timed)
/// wait and read the outputs back. Dropping it unawaited waits for the launches first,
/// then returns the memory to the pool, so it never leaks device memory and never frees
/// memory a running kernel uses.
pub struct CudaPendingDispatch {
    core: Arc<Core>,
    // `Mutex` only to make the handle `Sync` (as `PendingDispatch` requires); the handle is
    // used by one owner at a time. `None` once awaited.
    flight: Mutex<Option<Flight>>,
}

impl std::fmt::Debug for CudaPendingDispatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaPendingDispatch")
            .field("ready", &self.is_ready())
            .finish()
    }
}

impl CudaPendingDispatch {
    fn new(core: &Arc<Core>, flight: Flight) -> Self {
        Self {
            core: Arc::clone(core),
            flight: Mutex::new(Some(flight)),
        }
    }

    /// True once the kernel launches have completed (never blocks).
    pub fn is_ready(&self) -> bool {
        self.flight
            .lock()
            .map(|flight| flight.as_ref().is_none_or(Flight::is_complete))
            .unwrap_or(true)
    }

    /// Waits and returns the outputs (declaration order, like `dispatch`; none for a
    /// resident dispatch, whose results stay in its buffers).
    pub fn wait(self) -> Result<Vec<Vec<u8>>, CudaError> {
        let mut outputs = Vec::new();
        self.wait_into(&mut outputs)?;
        Ok(outputs)
    }

    /// Waits and writes the outputs into `outputs`, reusing its buffers.
    pub fn wait_into(self, outputs: &mut Vec<Vec<u8>>) -> Result<(), CudaError> {
        self.finish(outputs).map(drop)
    }

    /// Waits and returns the outputs with the dispatch's times; `device_ns` is the
    /// kernels' time from CUDA events.
    pub fn wait_timed(self) -> Result<TimedDispatchResult, CudaError> {
        let mut outputs = Vec::new();
        let timing = self.finish(&mut outputs)?;
        Ok(timing.into_result(outputs))
    }

    /// The flight, taken out of the handle (`None` once taken). A poisoned lock still
    /// holds it: the handle is only ever used by its one owner.
    fn take(&mut self) -> Option<Flight> {
        match self.flight.get_mut() {
            Ok(flight) => flight.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        }
    }

    fn finish(mut self, outputs: &mut Vec<Vec<u8>>) -> Result<Timing, CudaError> {
        let Some(flight) = self.take() else {
            // Only `finish` (which consumes the handle) and `drop` take the flight.
            return Err(CudaError::invalid_input(
                "the pending dispatch was already awaited",
                "await each pending dispatch once",
            ));
        };
        let result = flight.finish(&self.core, outputs);
        count(self.core.metrics(), &result, false);
        result.map_err(|e| self.core.classify(e))
    }
}

impl Drop for CudaPendingDispatch {
    fn drop(&mut self) {
        if let Some(flight) = self.take() {
            flight.cancel();
        }
    }
}

impl CudaBackend {
    /// Start `program` without waiting for it (owned inputs).
    pub fn dispatch_async(
        &self,
        program: &Program,
        inputs: &[Vec<u8>],
        config: &DispatchConfig,
    ) -> Result<CudaPendingDispatch, CudaError> {
        let borrowed: smallvec::SmallVec<[&[u8]; 8]> = inputs.iter().map(Vec::as_slice).collect();
        self.dispatch_borrowed_async(program, &borrowed, config)
    }

    /// Start `program` without waiting for it. The returned handle does not borrow
    /// `inputs`: they are staged before this returns.
    pub fn dispatch_borrowed_async(
        &self,
        program: &Program,
        inputs: &[&[u8]],
        config: &DispatchConfig,
    ) -> Result<CudaPendingDispatch, CudaError> {
        let core = self.core();
        Metrics::bump(&core.metrics().dispatches);
        Metrics::bump(&core.metrics().async_dispatches);
        let flight = core.start(program, inputs, config).map_err(|e| {
            Metrics::bump(&core.metrics().dispatch_errors);
            core.classify(e)
        })?;
        Ok(CudaPendingDispatch::new(core, Flight::Staged(flight)))
    }

    /// Starts `program` on resident buffers (bound as by
    /// [`CudaBackend::dispatch_resident_timed`]) without waiting for it: returns once the
    /// launches are enqueued. Until the handle is awaited or dropped, the caller must not
    /// upload to, free or dispatch on the buffers; a buffer freed meanwhile stays alive
    /// until the dispatch is done.
    pub fn dispatch_resident_async(
        &self,
        program: &Program,
        resources: &[Resource],
        config: &DispatchConfig,
    ) -> Result<CudaPendingDispatch, CudaError> {
        let core = self.core();
        let flight = self.resident_step(program, resources, config, |batch| {
            Metrics::bump(&core.metrics().async_dispatches);
            core.enqueue_resident(batch, true)
                .inspect_err(|_| Metrics::bump(&core.metrics().dispatch_errors))
        })?;
        Ok(CudaPendingDispatch::new(core, Flight::Resident(flight)))
    }
}
