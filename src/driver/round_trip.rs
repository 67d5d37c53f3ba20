//! [`RoundTripBuffer`]: page-locked host memory for one small synchronous dispatch in the
//! fewest driver calls: one host-to-device copy of a prefix of the buffer, the caller's
//! launches, one device-to-host copy into a range of the buffer, one wait.
//!
//! Both copies are truly asynchronous (pinned memory), so the buffer must not be touched
//! while they are in flight. [`RoundTripBuffer::round_trip`] enqueues and waits within one
//! call that borrows the buffer mutably, so safe code can never observe a copy in flight.

use super::{DriverError, Event, PinnedHostBuffer, Stream};
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

/// Pinned host memory used for synchronous round trips. `Send + Sync`.
#[derive(Debug)]
pub struct RoundTripBuffer {
    buffer: PinnedHostBuffer,
}

impl RoundTripBuffer {
    /// Allocates and pins `bytes` of zeroed host memory.
    pub fn new(device: &Arc<super::Device>, bytes: usize) -> Result<Self, DriverError> {
        Ok(Self {
            buffer: PinnedHostBuffer::new(device, bytes)?,
        })
    }

    /// Size in bytes.
    pub fn capacity(&self) -> usize {
        self.buffer.len()
    }

    /// The bytes (no copy is ever in flight outside [`Self::round_trip`]).
    pub fn as_slice(&self) -> &[u8] {
        self.buffer.as_slice()
    }

    /// The bytes, mutably (no copy is ever in flight outside [`Self::round_trip`]).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.buffer.as_mut_slice()
    }

    /// Uploads `self[..upload_len]` to `upload_dst`, runs `enqueue` on `stream`, downloads
    /// `download_len` bytes from `download_src` into `self[download_at..]` and waits. When
    /// this returns — `Ok` or `Err` — no copy into or out of the buffer is in flight.
    pub fn round_trip<E: From<DriverError>>(
        &mut self,
        stream: &Stream,
        exchange: Exchange,
        enqueue: impl FnOnce(&Stream) -> Result<(), E>,
        wait: Wait<'_>,
    ) -> Result<(), E> {
        let capacity = self.capacity();
        let fits = exchange.upload_len <= capacity
            && exchange
                .download_at
                .checked_add(exchange.download_len)
                .is_some_and(|end| end <= capacity);
        if !fits {
            return Err(E::from(DriverError::described(
                "RoundTripBuffer",
                sys::CUresult::CUDA_ERROR_INVALID_VALUE,
                format!(
                    "a round trip of {} bytes up and {} bytes at {} down does not fit {capacity} pinned bytes",
                    exchange.upload_len, exchange.download_len, exchange.download_at
                ),
            )));
        }
        let result = (|| -> Result<(), E> {
            // SAFETY: the range is inside the pinned buffer (checked above) and stays
            // allocated and unmodified until the copy completes: `self` is borrowed mutably
            // until this function returns, and it returns only after the stream is idle
            // (the wait below, or the synchronisation after a failure).
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
            match wait {
                Wait::Stream => stream.synchronize()?,
                Wait::Event(event) => {
                    event.record(stream)?;
                    event.synchronize()?;
                }
            }
            Ok(())
        })();
        if result.is_err() {
            // Never hand the buffer back with a copy in flight. If this fails too, the
            // context is faulted and the driver abandons the queued copies.
            if let Err(error) = stream.synchronize() {
                tracing::debug!(%error, "synchronising after a failed round trip failed");
            }
        }
        result
    }
}
