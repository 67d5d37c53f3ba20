//! Asynchronous dispatch: the inputs are staged and the launches enqueued before
//! `dispatch_async` returns; the handle owns the dispatch's device memory and stream and
//! tracks completion with a CUDA event.

use super::dispatch::InFlight;
use super::metrics::Metrics;
use super::{Core, CudaBackend};
use crate::error::CudaError;
use std::sync::{Arc, Mutex};
use vyre_driver::DispatchConfig;
use vyre_foundation::ir::Program;

/// A dispatch in flight ([`CudaBackend::dispatch_async`]).
///
/// It borrows nothing from the caller: the inputs were already copied out when it was
/// created. [`is_ready`](Self::is_ready) polls an event without blocking;
/// [`wait`](Self::wait) / [`wait_into`](Self::wait_into) read the outputs back. Dropping it
/// unawaited waits for the launches first, then returns the memory to the pool, so it
/// never leaks device memory and never frees memory a running kernel uses.
pub struct CudaPendingDispatch {
    core: Arc<Core>,
    // `Mutex` only to make the handle `Sync` (as `PendingDispatch` requires); the handle is
    // used by one owner at a time.
    flight: Mutex<Option<InFlight>>,
}

impl std::fmt::Debug for CudaPendingDispatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaPendingDispatch")
            .field("ready", &self.is_ready())
            .finish()
    }
}

impl CudaPendingDispatch {
    /// True once the kernel launches have completed (never blocks).
    pub fn is_ready(&self) -> bool {
        self.flight
            .lock()
            .map(|flight| flight.as_ref().is_none_or(InFlight::is_complete))
            .unwrap_or(true)
    }

    /// Waits and returns the outputs (declaration order, like `dispatch`).
    pub fn wait(self) -> Result<Vec<Vec<u8>>, CudaError> {
        let mut outputs = Vec::new();
        self.wait_into(&mut outputs)?;
        Ok(outputs)
    }

    /// Waits and writes the outputs into `outputs`, reusing its buffers.
    pub fn wait_into(mut self, outputs: &mut Vec<Vec<u8>>) -> Result<(), CudaError> {
        let flight = self.flight.get_mut().map_err(|_| {
            CudaError::invalid_input("the pending dispatch's lock is poisoned", "dispatch again")
        })?;
        // Only `wait_into` (which consumes the handle) and `drop` take the dispatch.
        let flight = flight.take().expect("a pending dispatch is awaited once");
        let result = flight.finish(&self.core, outputs);
        if result.is_err() {
            Metrics::bump(&self.core.metrics().dispatch_errors);
        }
        result.map(|_| ()).map_err(|e| self.core.classify(e))
    }
}

impl Drop for CudaPendingDispatch {
    fn drop(&mut self) {
        let flight = match self.flight.get_mut() {
            Ok(flight) => flight.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(flight) = flight {
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
        Ok(CudaPendingDispatch {
            core: Arc::clone(core),
            flight: Mutex::new(Some(flight)),
        })
    }
}
