//! The floor: the CUDA driver API called directly with hand-written PTX and pinned memory
//! (`driver`, `ptx`). It runs no vyre Programs: each workload that has a floor calls its
//! hand-written kernels through [`FloorEngine::device`].

pub mod driver;
pub mod norm_ptx;
pub mod ptx;
pub mod scan_ptx;

use super::Engine;
use crate::measure::R;
use crate::programs::{ALPHA, SALT};
use driver::{DeviceFacts, Floor};
use vyre_driver::{DispatchConfig, VyreBackend};
use vyre_foundation::ir::Program;

/// The floor, opened on device 0 or not.
pub struct FloorEngine {
    floor: Option<Floor>,
}

impl FloorEngine {
    /// Retain device 0's primary context and JIT the hand-written module; logs the device.
    pub fn open(log: &mut Vec<String>) -> Self {
        let floor = std::panic::catch_unwind(|| Floor::open(0, SALT, ALPHA))
            .unwrap_or_else(|_| Err("panicked while opening the device".into()));
        let floor = match floor {
            Ok(f) => {
                log.push(format!("device: {:?}", f.facts));
                Some(f)
            }
            Err(e) => {
                log.push(format!("floor: cannot open the device: {e}"));
                None
            }
        };
        Self { floor }
    }

    /// Not opened.
    pub fn unopened() -> Self {
        Self { floor: None }
    }

    pub fn get(&self) -> Option<&Floor> {
        self.floor.as_ref()
    }

    /// The opened floor, or why a row has none.
    pub fn device(&self) -> R<&Floor> {
        self.floor
            .as_ref()
            .ok_or_else(|| "the floor could not open the device".to_string())
    }

    pub fn facts(&self) -> Option<&DeviceFacts> {
        self.floor.as_ref().map(|f| &f.facts)
    }

    /// The device's compute capability as `major * 10 + minor`.
    pub fn sm(&self) -> Option<u32> {
        self.facts().map(|f| {
            let (a, b) = f.compute_capability;
            (a * 10 + b) as u32
        })
    }
}

impl Engine for FloorEngine {
    fn name(&self) -> &'static str {
        "floor"
    }

    fn emitter(&self) -> Result<String, String> {
        Err("hand-written PTX: no emitter".into())
    }

    fn emit_ptx(&self, _program: &Program, _config: &DispatchConfig) -> R<String> {
        self.emitter()
    }

    fn device_ptx(&self, _program: &Program, _config: &DispatchConfig) -> Option<R<String>> {
        None
    }

    fn backend(&self) -> Option<&dyn VyreBackend> {
        None
    }
}
