//! [`RoundTripBuffer`]: page-locked host memory for one small dispatch in the fewest driver
//! calls: one host-to-device copy of a prefix of the buffer, the caller's launches, one
//! device-to-host copy into a range of the buffer, one wait.
//!
//! Both copies are truly asynchronous (pinned memory), so the buffer must not be touched
//! while they are in flight. The buffer knows when it has copies in flight (from
//! [`RoundTripBuffer::start`] until [`RoundTripBuffer::wait`]): its bytes are only reachable
//! through `&mut self` accessors that wait for them first, and dropping it waits too, so
//! safe code can never observe a copy in flight.
//!
//! A round trip can also be captured once into a CUDA graph kept with the buffer
//! ([`RoundTripBuffer::capture`]) and replayed with one driver call
//! ([`RoundTripBuffer::replay`]); the graph's copies address only this buffer and are
//! destroyed before it.

use super::{DriverError, Event, GraphExec, PinnedHostBuffer, Stream};
use cudarc::driver::sys;
use std::sync::Arc;

/// How a round trip waits for its stream.
#[derive(Debug, Clone, Copy)]
pub enum Wait<'a> {
    /// `cuStreamSynchronize` (spins or yields according to the context's flags).
    Stream,
    /// Record this event after the copies and `cuEventSynchronize` it: with an event created
    /// by [`Event::new_blocking`] the host thread sleeps instead of spinning.
    Event(&'a Event),
}

/// Where the single upload goes and where the single download comes from.
#[derive(Debug, Clone, Copy)]
pub struct Exchange {
    /// Device address that receives `buffer[..upload_len]`.
    pub upload_dst: u64,
    /// Bytes uploaded from the start of the buffer.
    pub upload_len: usize,
    /// Device address read back.
    pub download_src: u64,
    /// Offset in the buffer that receives the download.
    pub download_at: usize,
    /// Bytes downloaded.
    pub download_len: usize,
}

/// Pinned host memory used for round trips. `Send + Sync`.
#[derive(Debug)]
pub struct RoundTripBuffer {
    /// A captured round trip over this buffer (declared first: destroyed before the
    /// memory its copies address).
    captured: Option<GraphExec>,
    buffer: PinnedHostBuffer,
    /// The stream of the round trip whose copies may still be in flight.
    in_flight: Option<Arc<Stream>>,
}

impl RoundTripBuffer {
    /// Allocates and pins `bytes` of zeroed host memory.
    pub fn new(device: &Arc<super::Device>, bytes: usize) -> Result<Self, DriverError> {
        Ok(Self {
            captured: None,
            buffer: PinnedHostBuffer::new(device, bytes)?,
            in_flight: None,
        })
    }

    /// Size in bytes.
    pub fn capacity(&self) -> usize {
        self.buffer.len()
    }

    /// The bytes, once no copy is in flight (waits for an unfinished round trip first).
    pub fn bytes(&mut self) -> Result<&mut [u8], DriverError> {
        self.wait(Wait::Stream)?;
        Ok(self.buffer.as_mut_slice())
    }

    /// Uploads `self[..upload_len]` to `upload_dst`, runs `enqueue` on `stream`, downloads
    /// `download_len` bytes from `download_src` into `self[download_at..]` and waits. When
    /// this returns — `Ok` or `Err` — no copy into or out of the buffer is in flight.
    pub fn round_trip<E: From<DriverError>>(
        &mut self,
        stream: &Arc<Stream>,
        exchange: Exchange,
        enqueue: impl FnOnce(&Stream) -> Result<(), E>,
        wait: Wait<'_>,
    ) -> Result<(), E> {
        self.start(stream, exchange, enqueue)?;
        self.wait(wait).map_err(E::from)
    }

    /// Enqueues what [`Self::round_trip`] does, without waiting: the copies stay in flight
    /// until [`Self::wait`] (or an accessor, or drop) waits for them. On `Err` nothing is in
    /// flight.
    pub fn start<E: From<DriverError>>(
        &mut self,
        stream: &Arc<Stream>,
        exchange: Exchange,
        enqueue: impl FnOnce(&Stream) -> Result<(), E>,
    ) -> Result<(), E> {
        self.wait(Wait::Stream)?;
        self.check_fits(exchange)?;
        // From the first copy on, the buffer may be in use by the device.
        self.in_flight = Some(Arc::clone(stream));
        let enqueued = self.enqueue_copies(stream, exchange, enqueue);
        if enqueued.is_err() {
            self.settle();
        }
        enqueued
    }

    /// Captures what [`Self::start`] enqueues (`enqueue` runs on the capturing stream)
    /// into a graph kept with the buffer, replacing an earlier one; nothing runs.
    pub fn capture<E: From<DriverError>>(
        &mut self,
        stream: &Arc<Stream>,
        exchange: Exchange,
        enqueue: impl FnOnce(&Stream) -> Result<(), E>,
    ) -> Result<(), E> {
        self.wait(Wait::Stream)?;
        self.check_fits(exchange)?;
        self.captured = None;
        let graph =
            stream.capture(|capturing| self.enqueue_copies(capturing, exchange, enqueue))?;
        self.captured = Some(graph.instantiate()?);
        Ok(())
    }

    /// Whether a captured round trip is kept (see [`Self::capture`]).
    pub fn is_captured(&self) -> bool {
        self.captured.is_some()
    }

    /// Enqueues the captured round trip on `stream` (one `cuGraphLaunch`), without
    /// waiting, as [`Self::start`] does. On `Err` nothing is in flight.
    pub fn replay(&mut self, stream: &Arc<Stream>) -> Result<(), DriverError> {
        self.wait(Wait::Stream)?;
        let Some(graph) = &self.captured else {
            return Err(DriverError::described(
                "RoundTripBuffer",
                sys::CUresult::CUDA_ERROR_INVALID_VALUE,
                "no round trip was captured over this buffer".to_string(),
            ));
        };
        // From the launch on, the graph's copies may use the buffer.
        self.in_flight = Some(Arc::clone(stream));
        let launched = graph.launch(stream);
        if launched.is_err() {
            self.settle();
        }
        launched
    }

    /// The upload, `enqueue` and the download on `stream` (running or capturing).
    fn enqueue_copies<E: From<DriverError>>(
        &mut self,
        stream: &Stream,
        exchange: Exchange,
        enqueue: impl FnOnce(&Stream) -> Result<(), E>,
    ) -> Result<(), E> {
        // SAFETY: the range is inside the pinned buffer (the callers check it fits) and
        // stays allocated and unmodified until the copy completes: running, `in_flight` is
        // set, so every access and the drop wait for the stream first; captured, the copy
        // runs only in replays, which set `in_flight` too, and the graph is destroyed
        // before the buffer.
        unsafe {
            stream.copy_to_device_async_raw(
                exchange.upload_dst,
                self.buffer.as_ptr(),
                exchange.upload_len,
            )?;
        }
        enqueue(stream)?;
        // SAFETY: as above, for the destination range of the download.
        unsafe {
            stream.copy_to_host_async(
                self.buffer.as_mut_ptr().add(exchange.download_at),
                exchange.download_len,
                exchange.download_src,
            )?;
        }
        Ok(())
    }

    /// Whether the round trip in flight (if any) has completed (non-blocking).
    pub fn is_idle(&self) -> Result<bool, DriverError> {
        self.in_flight
            .as_ref()
            .map_or(Ok(true), |stream| stream.query_idle())
    }

    /// Waits for the round trip in flight (nothing when there is none). When this returns —
    /// `Ok` or `Err` — no copy into or out of the buffer is in flight.
    pub fn wait(&mut self, wait: Wait<'_>) -> Result<(), DriverError> {
        let Some(stream) = &self.in_flight else {
            return Ok(());
        };
        let waited = match wait {
            Wait::Stream => stream.synchronize(),
            Wait::Event(event) => event.record(stream).and_then(|()| event.synchronize()),
        };
        match waited {
            Ok(()) => self.in_flight = None,
            Err(_) => self.settle(),
        }
        waited
    }

    fn check_fits(&self, exchange: Exchange) -> Result<(), DriverError> {
        let capacity = self.capacity();
        let fits = exchange.upload_len <= capacity
            && exchange
                .download_at
                .checked_add(exchange.download_len)
                .is_some_and(|end| end <= capacity);
        if fits {
            return Ok(());
        }
        Err(DriverError::described(
            "RoundTripBuffer",
            sys::CUresult::CUDA_ERROR_INVALID_VALUE,
            format!(
                "a round trip of {} bytes up and {} bytes at {} down does not fit {capacity} pinned bytes",
                exchange.upload_len, exchange.download_len, exchange.download_at
            ),
        ))
    }

    /// Never leaves a copy in flight: synchronises the stream. If this fails too, the
    /// context is faulted and the driver abandons the queued copies.
    fn settle(&mut self) {
        if let Some(stream) = self.in_flight.take() {
            if let Err(error) = stream.synchronize() {
                tracing::debug!(%error, "synchronising a round trip's stream failed");
            }
        }
    }
}

impl Drop for RoundTripBuffer {
    fn drop(&mut self) {
        // The pinned memory is freed after this (field drop): no copy may target it then.
        self.settle();
    }
}
