//! The borrowed dispatch path: plan, stage inputs, launch, read back, check the fault
//! word, shape outputs.

use super::metrics::Metrics;
use super::plan::{shape_output, starts_zeroed, DispatchPlan};
use super::CudaBackend;
use crate::codegen::DeviceFault;
use crate::driver::{DeviceAlloc, Stream};
use crate::error::CudaError;
use std::ffi::c_void;
use vyre_driver::{BackendError, DispatchConfig};
use vyre_foundation::ir::Program;

/// Each binding starts on a 256-byte boundary inside the dispatch's device block.
const BINDING_ALIGN: usize = 256;

impl CudaBackend {
    pub(super) fn run(
        &self,
        program: &Program,
        inputs: &[&[u8]],
        config: &DispatchConfig,
        outputs: &mut Vec<Vec<u8>>,
    ) -> Result<(), CudaError> {
        let launches = check_config(config)?;
        let _shared = self.context_epoch.read();
        let kernel = self.kernel(program, config)?;
        let abi = &kernel.abi;
        let input_lens: smallvec::SmallVec<[usize; 8]> = inputs.iter().map(|i| i.len()).collect();
        let plan = DispatchPlan::new(program, abi, &input_lens, config, self.limits)?;

        // One device block holds every binding, then the fault word.
        let mut offsets: smallvec::SmallVec<[usize; 8]> = smallvec::SmallVec::new();
        let mut total = 0usize;
        for binding in &plan.bindings {
            offsets.push(total);
            total += binding.len.next_multiple_of(BINDING_ALIGN);
        }
        let fault_offset = total;
        if abi.fault_word {
            total += BINDING_ALIGN;
        }
        let block = self
            .pool
            .take(&self.device, total.max(1), &self.metrics)
            .map_err(|e| self.after_driver_error(e))?;
        let stream = match self.take_stream() {
            Ok(stream) => stream,
            Err(error) => {
                self.pool.give_back(block);
                return Err(self.after_driver_error(error));
            }
        };
        let result = self.launch_and_read(
            &block,
            &stream,
            &kernel,
            &plan,
            &offsets,
            fault_offset,
            inputs,
            launches,
            outputs,
        );
        match result {
            Ok(()) => {
                self.return_stream(stream);
                self.pool.give_back(block);
                Ok(())
            }
            Err(CudaError::Driver(error)) => {
                // The block and stream may belong to a poisoned context: drop them.
                drop(stream);
                drop(block);
                drop(_shared);
                Err(self.after_driver_error(error))
            }
            Err(other) => {
                self.return_stream(stream);
                self.pool.give_back(block);
                Err(other)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn launch_and_read(
        &self,
        block: &DeviceAlloc,
        stream: &Stream,
        kernel: &super::cache::LoadedKernel,
        plan: &DispatchPlan,
        offsets: &[usize],
        fault_offset: usize,
        inputs: &[&[u8]],
        launches: u32,
        outputs: &mut Vec<Vec<u8>>,
    ) -> Result<(), CudaError> {
        let abi = &kernel.abi;
        let base = block.ptr();
        {
            let _span = tracing::trace_span!("vyre_cuda.upload").entered();
            for ((binding, bytes), offset) in abi.bindings.iter().zip(&plan.bindings).zip(offsets) {
                let dst = base + *offset as u64;
                if let Some(input) = bytes.input {
                    stream.copy_to_device(dst, inputs[input])?;
                    Metrics::add(&self.metrics.bytes_to_device, inputs[input].len() as u64);
                } else if starts_zeroed(binding.role) {
                    stream.memset_zero(dst, bytes.len)?;
                }
            }
            if abi.fault_word {
                stream.memset_zero(base + fault_offset as u64, 4)?;
            }
        }

        // Kernel arguments: every buffer pointer, every element count, the fault word.
        let mut pointers: smallvec::SmallVec<[u64; 8]> =
            offsets.iter().map(|o| base + *o as u64).collect();
        let mut counts: smallvec::SmallVec<[u32; 8]> =
            plan.bindings.iter().map(|b| b.elements).collect();
        let mut fault_ptr = base + fault_offset as u64;
        let mut params: smallvec::SmallVec<[*mut c_void; 17]> = smallvec::SmallVec::new();
        for pointer in pointers.iter_mut() {
            params.push((pointer as *mut u64).cast());
        }
        for count in counts.iter_mut() {
            params.push((count as *mut u32).cast());
        }
        if abi.fault_word {
            params.push((&mut fault_ptr as *mut u64).cast());
        }
        {
            let _span = tracing::trace_span!("vyre_cuda.launch", grid = ?plan.grid).entered();
            // Segments (split at grid-wide barriers) run in stream order, so each sees
            // every write of the one before.
            for _ in 0..launches {
                for function in &kernel.functions {
                    // SAFETY: `params` holds one pointer per kernel parameter, in the order
                    // the emitter declared them (see `codegen::compose`, identical for every
                    // segment), each pointing at a live value of the declared width; every
                    // buffer address lies inside `block`, which outlives the launch because
                    // we synchronise before returning.
                    unsafe {
                        stream.launch(function, plan.grid, abi.workgroup_size, 0, &mut params)?;
                    }
                }
            }
        }

        let _span = tracing::trace_span!("vyre_cuda.readback").entered();
        let returned = abi.bindings.iter().filter(|b| b.role.is_returned()).count();
        outputs.truncate(returned);
        outputs.resize_with(returned, Vec::new);
        let mut slot = 0usize;
        for ((binding, bytes), offset) in abi.bindings.iter().zip(&plan.bindings).zip(offsets) {
            if !binding.role.is_returned() {
                continue;
            }
            let out = &mut outputs[slot];
            slot += 1;
            out.clear();
            out.resize(bytes.len, 0);
            stream.copy_to_host_blocking(out, base + *offset as u64)?;
            Metrics::add(&self.metrics.bytes_to_host, bytes.len as u64);
        }
        stream.synchronize()?;
        if abi.fault_word {
            let mut word = [0u8; 4];
            stream.copy_to_host_blocking(&mut word, base + fault_offset as u64)?;
            let code = u32::from_le_bytes(word);
            if code != 0 {
                Metrics::bump(&self.metrics.kernel_faults);
                outputs.clear();
                let (message, fix) = match DeviceFault::from_code(code) {
                    Some(fault) => (fault.message().to_string(), fault.fix().to_string()),
                    None => (
                        format!("the kernel reported unknown fault code {code}"),
                        "report this as a vyre-cuda bug with the program".to_string(),
                    ),
                };
                return Err(CudaError::KernelRuntime { message, fix });
            }
        }
        let mut slot = 0usize;
        for binding in &abi.bindings {
            if binding.role.is_returned() {
                shape_output(&mut outputs[slot], binding.output_byte_range.as_ref());
                slot += 1;
            }
        }
        Ok(())
    }
}

/// Reject configuration the backend cannot honour; returns how many back-to-back
/// launches `fixpoint_iterations` asks for.
fn check_config(config: &DispatchConfig) -> Result<u32, CudaError> {
    use vyre_driver::persistent::PersistentThreadMode;
    use vyre_driver::speculate::SpeculationMode;
    if config.cooperative {
        return Err(CudaError::Rejected(BackendError::UnsupportedFeature {
            name: "cooperative grid-sync launch (Fix: leave DispatchConfig::cooperative false; grid-wide barriers are split on the host by the registry wrapper)".to_string(),
            backend: crate::adapter::CUDA_BACKEND_ID.to_string(),
        }));
    }
    if config.speculation == Some(SpeculationMode::Force) {
        return Err(CudaError::Rejected(BackendError::UnsupportedFeature {
            name: "forced speculation (Fix: use SpeculationMode::Auto or Disable)".to_string(),
            backend: crate::adapter::CUDA_BACKEND_ID.to_string(),
        }));
    }
    if config.persistent_thread == Some(PersistentThreadMode::Force) {
        return Err(CudaError::Rejected(BackendError::UnsupportedFeature {
            name:
                "forced persistent-thread dispatch (Fix: use PersistentThreadMode::Auto or Disable)"
                    .to_string(),
            backend: crate::adapter::CUDA_BACKEND_ID.to_string(),
        }));
    }
    vyre_driver::resolve_fixpoint_iterations(config, crate::adapter::CUDA_BACKEND_ID)
        .map_err(CudaError::Rejected)
}
