//! The incumbent: the published `vyre-driver-cuda 0.7.2`, built with
//! `CudaBackend::acquire()` wrapped in `CudaBackendRegistration::new` (what its registry
//! factory builds, without the registry's wrapper) and driven through its `VyreBackend`.
//!
//! What its users must pass: 0.7.2's emitter lowers `Exp`, `Log`, `Exp2`, `Log2`, `Sin`,
//! `Cos` and `Tanh` only to approximate PTX instructions and rejects a program that uses
//! one unless `DispatchConfig::ulp_budget` is positive ("ulp_budget is not positive").
//! [`Incumbent::config_for`] sets [`ULP_BUDGET`] for exactly those programs; every other
//! program gets the workload's configuration unchanged (a positive budget would also turn
//! its `InverseSqrt` and `Reciprocal` approximate).

use super::Engine;
use crate::measure::R;
use crate::programs::needs_ulp_budget;
use vyre_driver::{DispatchConfig, VyreBackend};
use vyre_foundation::ir::Program;

/// The engine's name in notes, the log and the chart.
pub const INCUMBENT: &str = "vyre-driver-cuda 0.7.2";

/// The `DispatchConfig::ulp_budget` the incumbent gets for programs with a transcendental
/// op: the smallest budget it accepts. 0.7.2 emits the same `.approx` instructions for any
/// positive budget and does not check them against it.
pub const ULP_BUDGET: u8 = 1;

/// vyre-driver-cuda 0.7.2, acquired or not.
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
                    log.push(format!(
                        "incumbent: {INCUMBENT} acquired (CudaBackendRegistration::new)"
                    ));
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

impl Incumbent {
    /// Not acquired (the emitter compiles for sm_90).
    pub fn unopened() -> Self {
        Self {
            backend: None,
            sm: 90,
        }
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

    fn config_for(&self, program: &Program, base: &DispatchConfig) -> DispatchConfig {
        let mut config = base.clone();
        if config.ulp_budget.unwrap_or(0) == 0 && needs_ulp_budget(program) {
            config.ulp_budget = Some(ULP_BUDGET);
        }
        config
    }

    fn config_needs(&self) -> Option<String> {
        Some(format!(
            "DispatchConfig::ulp_budget = Some({ULP_BUDGET}) on programs with Exp, Log, Exp2, Log2, Sin, Cos or Tanh \
             ({INCUMBENT} rejects them otherwise: \"ulp_budget is not positive\")"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`needs_ulp_budget`] picks exactly the corpus programs that the incumbent's emitter
    /// rejects for want of a ULP budget, and with [`Incumbent::config_for`]'s budget it
    /// accepts them (host only: the emitter needs no device).
    #[test]
    fn ulp_budget_goes_to_exactly_the_programs_that_need_it() {
        let incumbent = Incumbent {
            backend: None,
            sm: 90,
        };
        let base = DispatchConfig::default();
        let mut needing = Vec::new();
        for fixture in crate::workloads::corpus::corpus() {
            let program = (fixture.build)();
            let strict = incumbent.emit_ptx(&program, &base);
            let rejected = matches!(&strict, Err(e) if e.contains("ulp_budget is not positive"));
            assert_eq!(
                needs_ulp_budget(&program),
                rejected,
                "{}: {:?}",
                fixture.id,
                strict.err()
            );
            if rejected {
                let config = incumbent.config_for(&program, &base);
                assert_eq!(config.ulp_budget, Some(ULP_BUDGET));
                if let Err(e) = incumbent.emit_ptx(&program, &config) {
                    assert!(!e.contains("ulp_budget"), "{}: {e}", fixture.id);
                }
                needing.push(fixture.id);
            } else {
                assert_eq!(incumbent.config_for(&program, &base), base);
            }
        }
        println!("{} programs need a ULP budget: {needing:?}", needing.len());
        assert!(!needing.is_empty());
    }
}
