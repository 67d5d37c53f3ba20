//! vyre-cuda: this repository's `CudaBackend` (`../..`), through its direct API and its
//! `VyreBackend` implementation.

use super::Engine;
use crate::measure::R;
use vyre_cuda::codegen::PtxTarget;
use vyre_cuda::{CudaBackend, CudaOptions};
use vyre_driver::{DispatchConfig, VyreBackend};
use vyre_foundation::ir::Program;

/// vyre-cuda, opened on the device or not.
pub struct VyreCuda {
    backend: Option<CudaBackend>,
    /// The opened device's target, else sm_90 (what the emitter compiles for).
    target: PtxTarget,
}

impl VyreCuda {
    /// Open with the environment's options (`blocking_wait`: also
    /// `CudaOptions::blocking_wait`); logs the device and target.
    pub fn open(blocking_wait: bool, log: &mut Vec<String>) -> Self {
        let opened = std::panic::catch_unwind(|| {
            open_with(|options| options.blocking_wait |= blocking_wait)
        })
        .unwrap_or_else(|_| Err("panicked while opening the device".into()));
        let backend = match opened {
            Ok(b) => {
                log.push(format!(
                    "vyre-cuda: {} / {}{}",
                    b.device_info().name,
                    b.target(),
                    if blocking_wait {
                        " (CudaOptions::blocking_wait)"
                    } else {
                        ""
                    }
                ));
                Some(b)
            }
            Err(e) => {
                log.push(format!("vyre-cuda: cannot open the device: {e}"));
                None
            }
        };
        let target = backend
            .as_ref()
            .map(|o| o.target())
            .unwrap_or_else(PtxTarget::sm90);
        Self { backend, target }
    }

    /// Not opened (the emitter compiles for sm_90).
    pub fn unopened() -> Self {
        Self {
            backend: None,
            target: PtxTarget::sm90(),
        }
    }

    pub fn get(&self) -> Option<&CudaBackend> {
        self.backend.as_ref()
    }
}

/// A further vyre-cuda backend with its environment's options, adjusted by `adjust`.
pub fn open_with(adjust: impl FnOnce(&mut CudaOptions)) -> R<CudaBackend> {
    let mut options = CudaOptions::from_env().map_err(|e| e.to_string())?;
    adjust(&mut options);
    CudaBackend::with_options(options).map_err(|e| e.to_string())
}

impl Engine for VyreCuda {
    fn name(&self) -> &'static str {
        "vyre-cuda"
    }

    fn emitter(&self) -> Result<String, String> {
        Ok(format!("codegen::emit_ptx for {}", self.target))
    }

    fn emit_ptx(&self, program: &Program, config: &DispatchConfig) -> R<String> {
        vyre_cuda::codegen::emit_ptx(program, config.workgroup_override, self.target)
            .map(|k| k.ptx)
            .map_err(|e| e.to_string())
    }

    fn device_ptx(&self, program: &Program, config: &DispatchConfig) -> Option<R<String>> {
        let backend = self.backend.as_ref()?;
        Some(
            backend
                .emit(program, config)
                .map(|k| k.ptx)
                .map_err(|e| e.to_string()),
        )
    }

    fn backend(&self) -> Option<&dyn VyreBackend> {
        self.backend.as_ref().map(|b| b as &dyn VyreBackend)
    }
}
