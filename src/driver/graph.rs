//! [`Graph`] (work captured from a stream) and [`GraphExec`] (its instantiated, replayable
//! form), both destroyed on drop.
//!
//! Capture is scoped: [`Stream::capture`] begins a thread-local capture, runs the closure
//! (which enqueues work on the stream), and always ends the capture, also when the closure
//! fails, so a stream is never left capturing.

use super::{release, Check, Device, DriverError, Stream};
use cudarc::driver::sys;
use std::sync::Arc;

/// A captured CUDA graph (`cuStreamEndCapture`). `Send + Sync`.
#[derive(Debug)]
pub struct Graph {
    device: Arc<Device>,
    raw: sys::CUgraph,
}

// SAFETY: graph handles may be used from any thread; every operation binds the context
// first and none mutates Rust-side state.
unsafe impl Send for Graph {}
// SAFETY: see `Send`.
unsafe impl Sync for Graph {}

impl Graph {
    /// Instantiates the graph for launching (`cuGraphInstantiateWithFlags`).
    pub fn instantiate(&self) -> Result<GraphExec, DriverError> {
        let mut raw: sys::CUgraphExec = std::ptr::null_mut();
        // SAFETY: `self.raw` is a live graph of the current context; `raw` is a valid out
        // pointer.
        self.device.run("cuGraphInstantiateWithFlags", || unsafe {
            sys::cuGraphInstantiateWithFlags(&mut raw, self.raw, 0)
        })?;
        Ok(GraphExec {
            device: Arc::clone(&self.device),
            raw,
        })
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: `raw` is a live graph, destroyed once; instantiated execs do not depend on
        // it.
        release(&self.device, "cuGraphDestroy", || unsafe {
            sys::cuGraphDestroy(self.raw).result()
        });
    }
}

/// An instantiated graph (`CUgraphExec`), launchable any number of times. `Send + Sync`.
///
/// The captured kernels keep the device addresses they were captured with: whoever
/// launches it must keep that memory allocated until the launches complete.
#[derive(Debug)]
pub struct GraphExec {
    device: Arc<Device>,
    raw: sys::CUgraphExec,
}

// SAFETY: as for `Graph`.
unsafe impl Send for GraphExec {}
// SAFETY: as for `Graph`.
unsafe impl Sync for GraphExec {}

impl GraphExec {
    /// Enqueues one replay of the graph on `stream` (`cuGraphLaunch`). The device memory
    /// the captured work addresses must stay allocated until the replay completes.
    pub fn launch(&self, stream: &Stream) -> Result<(), DriverError> {
        // SAFETY: both handles are live in the current context. The graph holds only kernel
        // launches whose arguments were checked at capture time (`Stream::launch`); the
        // device memory they address is the caller's to keep alive, and touches no host
        // memory.
        self.device.run("cuGraphLaunch", || unsafe {
            sys::cuGraphLaunch(self.raw, stream.raw())
        })
    }
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        // SAFETY: `raw` is a live graph exec, destroyed once. Pending launches complete.
        release(&self.device, "cuGraphExecDestroy", || unsafe {
            sys::cuGraphExecDestroy(self.raw).result()
        });
    }
}

impl Stream {
    /// Captures the work `enqueue` puts on this stream into a [`Graph`] instead of running it
    /// (thread-local capture mode: other threads keep using the driver normally).
    ///
    /// The capture always ends, also when `enqueue` fails (its error is returned and the
    /// partial graph destroyed).
    pub fn capture<E>(&self, enqueue: impl FnOnce(&Stream) -> Result<(), E>) -> Result<Graph, E>
    where
        E: From<DriverError>,
    {
        // SAFETY: `raw` is a live stream of the current context, not already capturing (the
        // capture is always ended below before this function returns).
        self.device().run("cuStreamBeginCapture_v2", || unsafe {
            sys::cuStreamBeginCapture_v2(
                self.raw(),
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        })?;
        let enqueued = enqueue(self);
        let mut raw: sys::CUgraph = std::ptr::null_mut();
        self.device().enter("cuStreamEndCapture")?;
        // SAFETY: the stream is capturing (begun above); `raw` is a valid out pointer.
        let ended =
            unsafe { sys::cuStreamEndCapture(self.raw(), &mut raw) }.check("cuStreamEndCapture");
        let graph = (!raw.is_null()).then(|| Graph {
            device: Arc::clone(self.device()),
            raw,
        });
        enqueued?;
        ended?;
        graph.ok_or_else(|| {
            E::from(DriverError::described(
                "cuStreamEndCapture",
                sys::CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                "the capture produced no graph",
            ))
        })
    }
}
