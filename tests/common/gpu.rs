//! GPU test support: one shared backend per test binary, the reference oracle, and
//! deterministic non-zero test data.
//!
//! Without a CUDA device every GPU test prints `skipped: no CUDA device` and passes.
//! Set `VYRE_CUDA_REQUIRE_GPU=1` (as the device runs do) to turn a missing device into a
//! failure instead, so a GPU run can never pass by skipping.

#![allow(dead_code)]

use std::sync::OnceLock;
use vyre_cuda::CudaBackend;
use vyre_foundation::ir::Program;

/// The shared backend, or `None` (after printing the skip line) when there is no device.
pub fn backend() -> Option<&'static CudaBackend> {
    static BACKEND: OnceLock<Result<CudaBackend, String>> = OnceLock::new();
    match BACKEND.get_or_init(|| CudaBackend::new().map_err(|e| e.to_string())) {
        Ok(backend) => Some(backend),
        Err(error) => {
            if std::env::var("VYRE_CUDA_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                panic!("VYRE_CUDA_REQUIRE_GPU=1 but no CUDA device could be opened: {error}");
            }
            println!("skipped: no CUDA device");
            None
        }
    }
}

/// `vyre-reference`'s outputs for `program`, or its error text.
pub fn reference(program: &Program, inputs: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, String> {
    reference_with_floor(program, inputs, 0)
}

/// The reference with a `dispatch_elements` floor (`reference_eval_with_dispatch`).
pub fn reference_with_floor(
    program: &Program,
    inputs: &[Vec<u8>],
    floor: u32,
) -> Result<Vec<Vec<u8>>, String> {
    use vyre_reference::value::Value;
    let values: Vec<Value> = inputs.iter().cloned().map(Value::from).collect();
    let outputs = if floor == 0 {
        vyre_reference::reference_eval(program, &values)
    } else {
        vyre_reference::reference_eval_with_dispatch(program, &values, floor)
    };
    outputs
        .map(|outs| outs.iter().map(Value::to_bytes).collect())
        .map_err(|e| e.to_string())
}

/// Deterministic xorshift generator for test data (never all zeros).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    pub fn bytes_u32(&mut self, count: usize) -> Vec<u8> {
        (0..count)
            .flat_map(|_| self.next_u32().to_le_bytes())
            .collect()
    }
}

/// Little-endian bytes of a u32 slice.
pub fn u32_bytes(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Little-endian bytes of an f32 slice.
pub fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// A second, private backend instance (for shutdown, budgets, foreign handles), or `None`
/// when there is no device (the shared [`backend`] prints the skip line).
pub fn fresh(options: vyre_cuda::CudaOptions) -> Option<CudaBackend> {
    backend()?;
    Some(CudaBackend::with_options(options).expect("a second backend on the same device"))
}

/// `BackendError`'s text, asserting it carries exactly one `Fix:` hint.
pub fn fix_text(error: impl Into<vyre_driver::BackendError>) -> String {
    let error: vyre_driver::BackendError = error.into();
    let text = error.to_string();
    assert_eq!(text.matches("Fix:").count(), 1, "not one Fix: in {text}");
    text
}

/// What [`run_fixture_corpus`] saw.
pub struct CorpusRun {
    /// Fixture cases dispatched.
    pub cases: usize,
    /// Programs the emitter rejected (not dispatched).
    pub rejected: usize,
    /// Each case whose result differs from the reference's (bytes, or success against
    /// failure).
    pub failures: Vec<String>,
}

/// The fixture corpus (every case with inputs) through `backend`, each case against
/// vyre-reference. A case on which both fail counts as matching; the backend's error must
/// then carry one `Fix:` hint.
pub fn run_fixture_corpus(backend: &CudaBackend) -> CorpusRun {
    let config = vyre_driver::DispatchConfig::default();
    let mut run = CorpusRun {
        cases: 0,
        rejected: 0,
        failures: Vec::new(),
    };
    for entry in super::corpus::fixtures() {
        let Some(inputs) = entry.inputs else {
            continue;
        };
        let program = (entry.build)();
        if backend.emit(&program, &config).is_err() {
            run.rejected += 1;
            continue;
        }
        for case in inputs() {
            run.cases += 1;
            let want = reference(&program, &case);
            match (want, backend.dispatch(&program, &case, &config)) {
                (Ok(want), Ok(got)) if want == got => {}
                (Err(_), Err(e)) => {
                    fix_text(e);
                }
                (want, got) => run.failures.push(format!(
                    "{}: reference {:?} vs backend {:?}",
                    entry.id,
                    want.map(|_| "ok"),
                    got.map(|_| "ok")
                )),
            }
        }
    }
    run
}
