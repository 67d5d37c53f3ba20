//! The differential fuzzer shared by `tests/fuzz_*.rs` and `tests/gpu_fuzz.rs`
//! (included with `#[path = "fuzz/mod.rs"] mod fuzz;`).
//!
//! * [`arbitrary`]: arbitrary (mostly invalid) programs for the no-panic harness;
//! * [`gen`]: the seeded generator of valid, terminating, race-free Programs;
//! * [`oracle`]: vyre's validator and `vyre-reference` (forward and lane-reversed);
//! * [`check`]: what counts as a failure on the CPU and on the GPU;
//! * [`shrink`]: test-case minimisation;
//! * [`case`]: cases, the regression-file format, a pseudo-code printer;
//! * [`coverage`]: which constructs a run exercised;
//! * [`defined`]: definite assignment of a kernel's registers (a ptxas hazard gate);
//! * [`rng`], [`values`]: randomness and edge values.

#![allow(dead_code)]

pub mod arbitrary;
pub mod case;
pub mod check;
pub mod coverage;
pub mod defined;
pub mod gen;
pub mod oracle;
pub mod rng;
pub mod shrink;
pub mod values;
