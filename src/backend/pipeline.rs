//! Compiled pipelines: a program with its loaded kernel, reusable from any thread.

use super::cache::LoadedKernel;
use super::metrics::Metrics;
use super::sequence::{ResidentBatch, Step};
use super::{Core, CudaBackend};
use crate::error::{CudaError, CUDA_BACKEND_ID};
use std::sync::Arc;
use vyre_driver::{DispatchConfig, Resource, TimedDispatchResult};
use vyre_foundation::ir::Program;

/// A program compiled for this device: the kernel stays loaded for the pipeline's
/// lifetime (also if the backend's module cache evicts it), so dispatching skips the
/// cache lookup. Its outputs are bit-identical to [`CudaBackend::dispatch`] (the same
/// kernel and launch plan rules). `Send + Sync`.
pub struct CudaPipeline {
    core: Arc<Core>,
    program: Arc<Program>,
    config: DispatchConfig,
    kernel: Arc<LoadedKernel>,
    id: String,
}

impl std::fmt::Debug for CudaPipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaPipeline")
            .field("id", &self.id)
            .finish()
    }
}

impl CudaPipeline {
    /// `"cuda:<kernel key hex>"`: the program digest, workgroup, PTX target and emitter
    /// version fingerprint.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The compiled program.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The kernel for `config`: the compiled one when the launch shape matches, else the
    /// backend's (cached) kernel for that shape.
    fn kernel_for(&self, config: &DispatchConfig) -> Option<Arc<LoadedKernel>> {
        let same_workgroup = config.workgroup_override == self.config.workgroup_override;
        same_workgroup.then(|| Arc::clone(&self.kernel))
    }

    /// Runs the pipeline with borrowed inputs, into `outputs`.
    pub fn dispatch_borrowed_into(
        &self,
        inputs: &[&[u8]],
        config: &DispatchConfig,
        outputs: &mut Vec<Vec<u8>>,
    ) -> Result<(), CudaError> {
        self.core
            .run(
                &self.program,
                inputs,
                config,
                self.kernel_for(config),
                false,
                outputs,
            )
            .map(|_| ())
    }

    /// Runs the pipeline with borrowed inputs.
    pub fn dispatch_borrowed(
        &self,
        inputs: &[&[u8]],
        config: &DispatchConfig,
    ) -> Result<Vec<Vec<u8>>, CudaError> {
        let mut outputs = Vec::new();
        self.dispatch_borrowed_into(inputs, config, &mut outputs)?;
        Ok(outputs)
    }

    /// Runs the pipeline with timing (see [`CudaBackend::dispatch_borrowed_timed`]).
    pub fn dispatch_borrowed_timed(
        &self,
        inputs: &[&[u8]],
        config: &DispatchConfig,
    ) -> Result<TimedDispatchResult, CudaError> {
        let mut outputs = Vec::new();
        let timing = self.core.run(
            &self.program,
            inputs,
            config,
            self.kernel_for(config),
            true,
            &mut outputs,
        )?;
        Ok(timing.into_result(outputs))
    }

    /// Runs the pipeline on resident buffers (binding order, bound in place); returns the
    /// program's outputs read back from them, in output order.
    pub fn dispatch_resident(
        &self,
        resources: &[Resource],
        config: &DispatchConfig,
    ) -> Result<Vec<Vec<u8>>, CudaError> {
        let launches = super::dispatch::check_config(config, self.core.grid_sync)?;
        let handles = super::sequence::ids(&self.core, resources)?;
        let abi = &self.kernel.abi;
        let order = super::plan::binding_order(&self.program, abi);
        // Outputs in declaration order: binding `order[k]` is bound to `handles[k]`.
        let mut reads = Vec::new();
        if handles.len() == abi.bindings.len() {
            for (index, binding) in abi.bindings.iter().enumerate() {
                if binding.role.is_returned() {
                    let position = order.iter().position(|&o| o == index).unwrap_or(0);
                    let handle = handles[position];
                    let len = self.core.resident(handle)?.len();
                    reads.push(super::Read {
                        handle,
                        offset: 0,
                        len,
                    });
                }
            }
        }
        let step = Step::configured(&self.program, &handles, config, launches);
        let mut outputs: Vec<Vec<u8>> = vec![Vec::new(); reads.len()];
        let mut slots: Vec<&mut Vec<u8>> = outputs.iter_mut().collect();
        Metrics::bump(&self.core.metrics().resident_dispatches);
        self.core.run_resident(
            &ResidentBatch {
                prefix: &[step],
                reads: &reads,
                ..ResidentBatch::default()
            },
            &mut slots,
            false,
        )?;
        super::dispatch::shape_outputs(abi, &mut outputs);
        Ok(outputs)
    }
}

impl CudaBackend {
    /// Compiles `program` for `config` (validation, PTX, module load) and returns a
    /// reusable pipeline.
    pub fn compile(
        &self,
        program: Arc<Program>,
        config: &DispatchConfig,
    ) -> Result<CudaPipeline, CudaError> {
        let core = self.core();
        core.usable()?;
        let kernel = core
            .kernel(&program, config)
            .map_err(|e| core.classify(e))?;
        Ok(CudaPipeline {
            id: format!("{CUDA_BACKEND_ID}:{}", kernel.key.hex()),
            core: Arc::clone(core),
            program,
            config: config.clone(),
            kernel,
        })
    }
}
