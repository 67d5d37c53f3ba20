//! The incumbent: the published `vyre-driver-cuda 0.6.5`, built with
//! `CudaBackend::acquire()` wrapped in `CudaBackendRegistration::new` and driven through
//! its `VyreBackend` (never through the registry).

use super::Engine;
use crate::measure::R;
use vyre_driver::{DispatchConfig, VyreBackend};
use vyre_foundation::ir::Program;

/// vyre-driver-cuda 0.6.5, acquired or not.
pub struct Incumbent {
    backend: Option<Box<dyn VyreBackend>>,
    /// The compute capability its emitter compiles for (`major * 10 + minor`).
    sm: u32,
}

impl Incumbent {
    /// Acquire the device; its emitter compiles for `sm`.
    pub fn open(sm: u32, log: &mut Vec<String>) -> Self {
        let backend: Option<Box<dyn VyreBackend>> =
            match std::panic::catch_unwind(vyre_driver_cuda::CudaBackend::acquire)
                .unwrap_or_else(|_| Err("panicked while acquiring".to_string()))
            {
                Ok(b) => {
                    log.push(
                        "incumbent: vyre-driver-cuda 0.6.5 acquired (CudaBackendRegistration::new)"
                            .into(),
                    );
                    Some(Box::new(vyre_driver_cuda::CudaBackendRegistration::new(b)))
                }
                Err(e) => {
                    log.push(format!("incumbent: cannot open the device: {e}"));
                    None
                }
            };
        Self { backend, sm }
    }
}

impl Engine for Incumbent {
    fn name(&self) -> &'static str {
        "incumbent"
    }

    fn emitter(&self) -> Result<String, String> {
        Ok(format!(
            "codegen::program_to_ptx_for_sm(.., {}) (vyre-lower + vyre-emit-ptx)",
            self.sm
        ))
    }

    fn emit_ptx(&self, program: &Program, config: &DispatchConfig) -> R<String> {
        vyre_driver_cuda::codegen::program_to_ptx_for_sm(program, config, self.sm)
    }

    /// Its emitter needs no device.
    fn device_ptx(&self, program: &Program, config: &DispatchConfig) -> Option<R<String>> {
        Some(self.emit_ptx(program, config))
    }

    fn backend(&self) -> Option<&dyn VyreBackend> {
        self.backend.as_deref()
    }
}
