//! [`CudaDeviceBuffer`]: a `vyre_driver::DeviceBuffer` backed by a resident buffer.

use super::{Core, CudaBackend};
use crate::compat::HandleNamespace;
use crate::error::{CudaError, CUDA_BACKEND_ID};
use std::sync::{Arc, Weak};
use vyre_driver::{DeviceBuffer, DispatchConfig, Resource};
use vyre_foundation::ir::Program;

/// A device allocation owned by one [`CudaBackend`] (a resident buffer under the hood).
///
/// Dropping it frees the memory (like [`CudaBackend::free_device_buffer`]); a buffer
/// outliving its backend frees nothing (the backend already released everything).
pub struct CudaDeviceBuffer {
    handle: u64,
    /// The namespace of `handle` (the owning backend instance's).
    namespace: HandleNamespace,
    byte_len: usize,
    label: Option<String>,
    owner: Weak<Core>,
}

impl std::fmt::Debug for CudaDeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaDeviceBuffer")
            .field("handle", &format_args!("{:#x}", self.handle))
            .field("byte_len", &self.byte_len)
            .field("label", &self.label)
            .finish()
    }
}

impl CudaDeviceBuffer {
    /// The resident handle behind the buffer.
    pub fn resource(&self) -> Resource {
        self.namespace.resource(self.handle)
    }

    /// Sets the label shown by `DeviceBuffer::debug_label`.
    pub fn set_label(&mut self, label: impl Into<String>) {
        self.label = Some(label.into());
    }
}

impl Drop for CudaDeviceBuffer {
    fn drop(&mut self) {
        if self.handle == 0 {
            return;
        }
        if let Some(core) = self.owner.upgrade() {
            // Already freed or shut down: nothing to release.
            let _ = core.free_resident(self.handle);
        }
    }
}

impl DeviceBuffer for CudaDeviceBuffer {
    fn backend_id(&self) -> &'static str {
        CUDA_BACKEND_ID
    }

    fn byte_len(&self) -> usize {
        self.byte_len
    }

    fn debug_label(&self) -> Option<&str> {
        self.label.as_deref()
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

fn foreign(index: usize, what: &str) -> CudaError {
    CudaError::invalid_input(
        format!("device buffer {index} {what}"),
        "pass only buffers allocated by this CudaBackend (allocate_device_buffer)",
    )
}

impl CudaBackend {
    /// Our `CudaDeviceBuffer` behind `buffer`, checked to belong to this backend instance.
    fn own<'b>(
        &self,
        buffer: &'b dyn DeviceBuffer,
        index: usize,
    ) -> Result<&'b CudaDeviceBuffer, CudaError> {
        vyre_driver::validate_buffer_ownership(CUDA_BACKEND_ID, [buffer])
            .map_err(CudaError::Vyre)?;
        let ours = buffer
            .as_any()
            .downcast_ref::<CudaDeviceBuffer>()
            .ok_or_else(|| {
                foreign(
                    index,
                    &format!("claims backend `{CUDA_BACKEND_ID}` but was not created by vyre-cuda"),
                )
            })?;
        if !std::ptr::eq(ours.owner.as_ptr(), Arc::as_ptr(self.core())) {
            return Err(foreign(index, "belongs to another CudaBackend instance"));
        }
        Ok(ours)
    }

    /// Allocates a zero-filled device buffer of `byte_len` bytes.
    pub fn allocate_device_buffer(&self, byte_len: usize) -> Result<CudaDeviceBuffer, CudaError> {
        let handle = self.core().allocate_resident(byte_len)?;
        Ok(CudaDeviceBuffer {
            handle,
            namespace: self.core().handles,
            byte_len,
            label: None,
            owner: Arc::downgrade(self.core()),
        })
    }

    /// Uploads exactly `buffer.byte_len()` bytes.
    pub fn upload_device_buffer(
        &self,
        buffer: &dyn DeviceBuffer,
        bytes: &[u8],
    ) -> Result<(), CudaError> {
        let ours = self.own(buffer, 0)?;
        self.upload_resident(&ours.resource(), bytes)
    }

    /// Downloads the whole buffer.
    pub fn download_device_buffer(&self, buffer: &dyn DeviceBuffer) -> Result<Vec<u8>, CudaError> {
        let ours = self.own(buffer, 0)?;
        self.download_resident(&ours.resource())
    }

    /// Frees the buffer now (dropping it does the same, ignoring errors).
    pub fn free_device_buffer(&self, buffer: Box<dyn DeviceBuffer>) -> Result<(), CudaError> {
        self.own(&*buffer, 0)?;
        let mut buffer = buffer;
        let ours = buffer
            .as_any_mut()
            .downcast_mut::<CudaDeviceBuffer>()
            .expect("checked by own()");
        let handle = std::mem::replace(&mut ours.handle, 0);
        self.core().free_resident(handle)
    }

    /// Runs `program` on device buffers: `inputs` then `outputs` form the resident handle
    /// list in binding order (see [`CudaBackend::dispatch_resident_timed`]). Results stay
    /// on the device.
    pub fn dispatch_with_device_buffers(
        &self,
        program: &Program,
        inputs: &[&dyn DeviceBuffer],
        outputs: &mut [&mut dyn DeviceBuffer],
        config: &DispatchConfig,
    ) -> Result<(), CudaError> {
        let mut resources = Vec::with_capacity(inputs.len() + outputs.len());
        for (index, buffer) in inputs
            .iter()
            .copied()
            .chain(outputs.iter().map(|b| &**b as &dyn DeviceBuffer))
            .enumerate()
        {
            resources.push(self.own(buffer, index)?.resource());
        }
        self.dispatch_resident_timed(program, &resources, config)
            .map(|_| ())
    }
}
