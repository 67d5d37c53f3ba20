//! [`CudaOptimizerDispatcher`]: vyre-self-substrate's `OptimizerDispatcher` over a
//! [`CudaBackend`]'s resident buffers, so the self-hosted optimizer's passes run on the GPU
//! with data kept on the device between them.
//!
//! * Freed buffers go to per-size free lists and are reused (zero-filled again) by later
//!   allocations of the same size.
//! * Static uploads are content-addressed (blake3 of the cache domain and the payloads)
//!   and retained by the dispatcher, bounded by an eighth of device memory; a warm
//!   acquisition uploads nothing.
//! * Every fused method (uploads, a chain of dispatches, reads) runs on one stream with one
//!   host synchronisation.
//!
//! Errors are `DispatchError`s whose message carries the backend's `Fix:` hint.

use crate::backend::recycle::{static_key, FreeLists, StaticCache};
use crate::backend::{CudaBackend, Fill, Read, ResidentBatch, Step, Upload};
use crate::codegen::EMITTER_VERSION;
use crate::error::CudaError;
use std::sync::Mutex;
use vyre_driver::DispatchConfig;
use vyre_foundation::ir::Program;
use vyre_self_substrate::optimizer::dispatcher::{
    DispatchError, OptimizerDispatcher, ResidentDispatchStep, ResidentReadRange,
    ResidentStaticBufferSet,
};

/// The self-hosted optimizer's dispatcher on a CUDA device.
pub struct CudaOptimizerDispatcher {
    backend: CudaBackend,
    free: Mutex<FreeLists>,
    statics: Mutex<StaticCache>,
}

impl std::fmt::Debug for CudaOptimizerDispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaOptimizerDispatcher")
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

fn convert(error: CudaError) -> DispatchError {
    match error {
        CudaError::InvalidInput { .. } => DispatchError::BadInputs(error.to_string()),
        CudaError::Codegen(_)
        | CudaError::InvalidProgram { .. }
        | CudaError::UnsupportedSetting { .. }
        | CudaError::Vyre(_) => DispatchError::Rejected(error.to_string()),
        other => DispatchError::BackendError(other.to_string()),
    }
}

fn freed(handle: u64) -> DispatchError {
    convert(CudaError::invalid_input(
        format!("resident handle {handle:#x} was freed through this dispatcher"),
        "allocate a new one instead of reusing it",
    ))
}

fn poisoned() -> DispatchError {
    let error = CudaError::invalid_input(
        "a dispatcher lock is poisoned (a thread panicked while holding it)",
        "create a new dispatcher",
    );
    DispatchError::BackendError(error.to_string())
}

impl CudaOptimizerDispatcher {
    /// A dispatcher over `backend` (which it shares: the backend stays usable directly).
    #[must_use]
    pub fn new(backend: &CudaBackend) -> Self {
        let total = backend.device_info().total_memory_bytes;
        Self {
            backend: backend.clone(),
            free: Mutex::new(FreeLists::new(total / 32)),
            statics: Mutex::new(StaticCache::new(total / 8)),
        }
    }

    /// The backend this dispatcher runs on.
    #[must_use]
    pub fn backend(&self) -> &CudaBackend {
        &self.backend
    }

    /// `(idle pooled bytes, retained static bytes, retained static sets)`.
    #[must_use]
    pub fn retained(&self) -> (u64, u64, usize) {
        let idle = self.free.lock().map(|f| f.idle_bytes()).unwrap_or(0);
        let (bytes, sets) = self
            .statics
            .lock()
            .map(|s| (s.bytes(), s.len()))
            .unwrap_or((0, 0));
        (idle, bytes, sets)
    }

    /// Frees every pooled and retained buffer (also done on drop).
    pub fn release_all(&self) {
        let mut handles = self.free.lock().map(|mut f| f.drain()).unwrap_or_default();
        handles.extend(
            self.statics
                .lock()
                .map(|mut s| s.drain())
                .unwrap_or_default(),
        );
        for handle in handles {
            let _ = self.backend.core().free_resident(handle);
        }
    }

    fn check_live(&self, handles: impl IntoIterator<Item = u64>) -> Result<(), DispatchError> {
        let free = self.free.lock().map_err(|_| poisoned())?;
        for handle in handles {
            if free.contains(handle) {
                return Err(freed(handle));
            }
        }
        Ok(())
    }

    fn batch(
        &self,
        fills: &[(u64, usize, u8)],
        uploads: &[(u64, &[u8])],
        steps: &[ResidentDispatchStep<'_>],
        reads: &[Read],
        outputs: &mut Vec<Vec<u8>>,
    ) -> Result<(), DispatchError> {
        self.check_live(
            fills
                .iter()
                .map(|f| f.0)
                .chain(uploads.iter().map(|u| u.0))
                .chain(steps.iter().flat_map(|s| s.handle_ids.iter().copied()))
                .chain(reads.iter().map(|r| r.handle)),
        )?;
        let fills: Vec<Fill> = fills
            .iter()
            .map(|&(handle, len, value)| Fill {
                handle,
                offset: 0,
                len,
                value,
            })
            .collect();
        let uploads: Vec<Upload<'_>> = uploads
            .iter()
            .map(|&(handle, bytes)| Upload {
                handle,
                offset: 0,
                bytes,
                whole: false,
            })
            .collect();
        let steps: Vec<Step<'_>> = steps
            .iter()
            .map(|step| Step {
                grid_override: step.grid_override,
                ..Step::new(step.program, step.handle_ids)
            })
            .collect();
        outputs.truncate(reads.len());
        outputs.resize_with(reads.len(), Vec::new);
        let mut slots: Vec<&mut Vec<u8>> = outputs.iter_mut().collect();
        self.backend
            .core()
            .run_resident(
                &ResidentBatch {
                    fills: &fills,
                    uploads: &uploads,
                    prefix: &steps,
                    reads,
                    ..ResidentBatch::default()
                },
                &mut slots,
                false,
            )
            .map(|_| ())
            .map_err(convert)
    }

    fn whole_reads(&self, handles: &[u64]) -> Result<Vec<Read>, DispatchError> {
        handles
            .iter()
            .map(|&handle| {
                let len = self.backend.core().resident(handle).map_err(convert)?.len();
                Ok(Read {
                    handle,
                    offset: 0,
                    len,
                })
            })
            .collect()
    }

    fn range_reads(ranges: &[ResidentReadRange]) -> Vec<Read> {
        ranges
            .iter()
            .map(|r| Read {
                handle: r.handle_id,
                offset: r.byte_offset,
                len: r.byte_len,
            })
            .collect()
    }
}

impl Drop for CudaOptimizerDispatcher {
    fn drop(&mut self) {
        self.release_all();
    }
}

impl OptimizerDispatcher for CudaOptimizerDispatcher {
    fn dispatch(
        &self,
        program: &Program,
        inputs: &[Vec<u8>],
        grid_override: Option<[u32; 3]>,
    ) -> Result<Vec<Vec<u8>>, DispatchError> {
        let mut config = DispatchConfig::default();
        config.grid_override = grid_override;
        self.backend
            .dispatch(program, inputs, &config)
            .map_err(convert)
    }

    fn supports_persistent(&self) -> bool {
        true
    }

    fn device_feature_cache_key(&self) -> u64 {
        (u64::from(self.backend.target().sm()) << 32) | u64::from(EMITTER_VERSION)
    }

    fn alloc_resident(&self, byte_len: usize) -> Result<u64, DispatchError> {
        Ok(self.alloc_resident_many(&[byte_len])?.remove(0))
    }

    fn alloc_resident_many(&self, byte_lens: &[usize]) -> Result<Vec<u64>, DispatchError> {
        let mut handles = Vec::with_capacity(byte_lens.len());
        let mut recycled = Vec::new();
        for &len in byte_lens {
            let pooled = self.free.lock().ok().and_then(|mut f| f.take(len));
            match pooled {
                Some(handle) => {
                    recycled.push((handle, len, 0));
                    handles.push(handle);
                }
                None => match self.backend.core().allocate_resident(len) {
                    Ok(handle) => handles.push(handle),
                    Err(error) => {
                        for handle in handles {
                            let _ = self.free_resident(handle);
                        }
                        return Err(convert(error));
                    }
                },
            }
        }
        // Recycled buffers are zero-filled again, like fresh ones (one synchronisation).
        if !recycled.is_empty() {
            if let Err(error) = self.batch(&recycled, &[], &[], &[], &mut Vec::new()) {
                for handle in handles {
                    let _ = self.backend.core().free_resident(handle);
                }
                return Err(error);
            }
        }
        Ok(handles)
    }

    fn upload_resident(&self, handle: u64, bytes: &[u8]) -> Result<(), DispatchError> {
        self.upload_resident_many(&[(handle, bytes)])
    }

    fn upload_resident_many(&self, uploads: &[(u64, &[u8])]) -> Result<(), DispatchError> {
        self.batch(&[], uploads, &[], &[], &mut Vec::new())
    }

    fn acquire_resident_static_uploads(
        &self,
        cache_domain: u64,
        payloads: &[&[u8]],
    ) -> Result<ResidentStaticBufferSet, DispatchError> {
        let key = static_key(cache_domain, payloads);
        if let Some(handles) = self.statics.lock().ok().and_then(|mut s| s.acquire(&key)) {
            return Ok(ResidentStaticBufferSet {
                handles,
                cache_hit: true,
                retained_by_dispatcher: true,
            });
        }
        let lens: Vec<usize> = payloads.iter().map(|p| p.len()).collect();
        let handles = self.alloc_resident_many(&lens)?;
        let uploads: Vec<(u64, &[u8])> = handles
            .iter()
            .copied()
            .zip(payloads.iter().copied())
            .collect();
        if let Err(error) = self.upload_resident_many(&uploads) {
            for handle in handles {
                let _ = self.free_resident(handle);
            }
            return Err(error);
        }
        let bytes: u64 = lens.iter().map(|&l| l as u64).sum();
        let mut statics = self.statics.lock().map_err(|_| poisoned())?;
        let retained = statics.fits(bytes);
        if retained {
            let evicted = statics.insert(key, handles.clone(), bytes);
            drop(statics);
            for handle in evicted.into_iter().flatten() {
                let _ = self.backend.core().free_resident(handle);
            }
        }
        Ok(ResidentStaticBufferSet {
            handles,
            cache_hit: false,
            retained_by_dispatcher: retained,
        })
    }

    fn release_resident_static_uploads(
        &self,
        set: ResidentStaticBufferSet,
    ) -> Result<(), DispatchError> {
        let cached = self
            .statics
            .lock()
            .map(|mut s| s.release(&set.handles))
            .unwrap_or(false);
        if set.retained_by_dispatcher && cached {
            return Ok(());
        }
        for handle in set.handles {
            self.free_resident(handle)?;
        }
        Ok(())
    }

    fn read_resident(&self, handle: u64) -> Result<Vec<u8>, DispatchError> {
        Ok(self.read_resident_many(&[handle])?.remove(0))
    }

    fn read_resident_many(&self, handles: &[u64]) -> Result<Vec<Vec<u8>>, DispatchError> {
        let reads = self.whole_reads(handles)?;
        let mut outputs = Vec::new();
        self.batch(&[], &[], &[], &reads, &mut outputs)?;
        Ok(outputs)
    }

    fn read_resident_ranges_into(
        &self,
        ranges: &[ResidentReadRange],
        outputs: &mut Vec<Vec<u8>>,
    ) -> Result<(), DispatchError> {
        self.batch(&[], &[], &[], &Self::range_reads(ranges), outputs)
    }

    fn free_resident(&self, handle: u64) -> Result<(), DispatchError> {
        self.check_live([handle])?;
        let len = self.backend.core().resident(handle).map_err(convert)?.len();
        let overflow = self
            .free
            .lock()
            .map(|mut f| f.put(len, handle))
            .unwrap_or(Some(handle));
        if let Some(handle) = overflow {
            self.backend.core().free_resident(handle).map_err(convert)?;
        }
        Ok(())
    }

    fn dispatch_resident(
        &self,
        program: &Program,
        handles: &[u64],
        grid_override: Option<[u32; 3]>,
    ) -> Result<(), DispatchError> {
        self.dispatch_resident_sequence(&[ResidentDispatchStep {
            program,
            handle_ids: handles,
            grid_override,
        }])
    }

    fn dispatch_resident_sequence(
        &self,
        steps: &[ResidentDispatchStep<'_>],
    ) -> Result<(), DispatchError> {
        self.batch(&[], &[], steps, &[], &mut Vec::new())
    }

    fn dispatch_resident_sequence_read_many(
        &self,
        steps: &[ResidentDispatchStep<'_>],
        read_handles: &[u64],
    ) -> Result<Vec<Vec<u8>>, DispatchError> {
        self.upload_resident_many_sequence_read_many(&[], steps, read_handles)
    }

    fn dispatch_resident_sequence_read_ranges(
        &self,
        steps: &[ResidentDispatchStep<'_>],
        read_ranges: &[ResidentReadRange],
    ) -> Result<Vec<Vec<u8>>, DispatchError> {
        self.upload_resident_many_sequence_read_ranges(&[], steps, read_ranges)
    }

    fn upload_resident_many_sequence_read_many(
        &self,
        uploads: &[(u64, &[u8])],
        steps: &[ResidentDispatchStep<'_>],
        read_handles: &[u64],
    ) -> Result<Vec<Vec<u8>>, DispatchError> {
        let mut outputs = Vec::new();
        let reads = self.whole_reads(read_handles)?;
        self.batch(&[], uploads, steps, &reads, &mut outputs)?;
        Ok(outputs)
    }

    fn upload_resident_many_sequence_read_ranges(
        &self,
        uploads: &[(u64, &[u8])],
        steps: &[ResidentDispatchStep<'_>],
        read_ranges: &[ResidentReadRange],
    ) -> Result<Vec<Vec<u8>>, DispatchError> {
        let mut outputs = Vec::new();
        let reads = Self::range_reads(read_ranges);
        self.batch(&[], uploads, steps, &reads, &mut outputs)?;
        Ok(outputs)
    }

    fn upload_resident_many_sequence_read_many_into(
        &self,
        uploads: &[(u64, &[u8])],
        steps: &[ResidentDispatchStep<'_>],
        read_handles: &[u64],
        outputs: &mut Vec<Vec<u8>>,
    ) -> Result<(), DispatchError> {
        let reads = self.whole_reads(read_handles)?;
        self.batch(&[], uploads, steps, &reads, outputs)
    }

    // `clear_upload_resident_many_sequence_read_many_into` keeps the trait's default, which
    // turns the clears into zero fills for the method below.
    fn fill_upload_resident_many_sequence_read_many_into(
        &self,
        fills: &[(u64, usize, u8)],
        uploads: &[(u64, &[u8])],
        steps: &[ResidentDispatchStep<'_>],
        read_handles: &[u64],
        outputs: &mut Vec<Vec<u8>>,
    ) -> Result<(), DispatchError> {
        let reads = self.whole_reads(read_handles)?;
        self.batch(fills, uploads, steps, &reads, outputs)
    }

    fn fill_upload_resident_many_sequence_read_ranges_into(
        &self,
        fills: &[(u64, usize, u8)],
        uploads: &[(u64, &[u8])],
        steps: &[ResidentDispatchStep<'_>],
        read_ranges: &[ResidentReadRange],
        outputs: &mut Vec<Vec<u8>>,
    ) -> Result<(), DispatchError> {
        let reads = Self::range_reads(read_ranges);
        self.batch(fills, uploads, steps, &reads, outputs)
    }

    fn upload_resident_many_sequence_read_ranges_into(
        &self,
        uploads: &[(u64, &[u8])],
        steps: &[ResidentDispatchStep<'_>],
        read_ranges: &[ResidentReadRange],
        outputs: &mut Vec<Vec<u8>>,
    ) -> Result<(), DispatchError> {
        let reads = Self::range_reads(read_ranges);
        self.batch(&[], uploads, steps, &reads, outputs)
    }
}
