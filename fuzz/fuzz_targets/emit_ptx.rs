//! `cargo +nightly fuzz run emit_ptx`: no input Program makes `emit_ptx` panic.
//!
//! The first input byte picks a source, the rest is the script every choice of that source
//! is drawn from (`Rng::scripted`), so libFuzzer's coverage feedback steers the shared
//! generators of `tests/fuzz/` (one owner; included here by path):
//! * valid programs from the differential fuzzer's generator (`gen.rs`);
//! * untyped random trees over every IR variant and element type (`arbitrary.rs`),
//!   mostly rejected by vyre's validator;
//! * valid programs with targeted breakages;
//! * vyre wire encodings with byte edits, and the raw script itself as a wire encoding.
//!
//! Each program is emitted for every target the backend uses, with its dispatch config;
//! errors are fine, a panic aborts with the program printed. Panics inside vyre's own
//! decoder or validator (vyre-foundation, not ours) are skipped.

#![no_main]

#[path = "../../tests/fuzz/arbitrary.rs"]
#[allow(dead_code)]
mod arbitrary;
#[path = "../../tests/fuzz/case.rs"]
#[allow(dead_code)]
mod case;
#[path = "../../tests/fuzz/gen.rs"]
#[allow(dead_code)]
mod gen;
#[path = "../../tests/fuzz/oracle.rs"]
#[allow(dead_code)]
mod oracle;
#[path = "../../tests/fuzz/rng.rs"]
#[allow(dead_code)]
mod rng;
#[path = "../../tests/fuzz/values.rs"]
#[allow(dead_code)]
mod values;

use arbitrary::{mutated_program_from, random_program_from, wire_bytes_from, Arbitrary};
use gen::{generate_from, GenConfig};
use libfuzzer_sys::fuzz_target;
use rng::Rng;
use std::panic::{catch_unwind, AssertUnwindSafe};
use vyre_cuda::codegen::{emit_ptx, PtxIsa, PtxTarget};
use vyre_driver::DispatchConfig;
use vyre_foundation::ir::Program;

/// The targets the backend emits for (as in `tests/fuzz_emitter_nopanic.rs`).
fn targets() -> Vec<PtxTarget> {
    let mut targets = vec![PtxTarget::sm80(), PtxTarget::sm90()];
    targets.extend(PtxTarget::new(90, PtxIsa::new(9, 0)));
    targets.extend(PtxTarget::new(70, PtxIsa::new(6, 4)));
    targets
}

/// The program for this input, or `None` where vyre itself could not build one.
fn program(data: &[u8]) -> Option<Arbitrary> {
    let (&selector, script) = data.split_first()?;
    let rng = Rng::scripted(script);
    // vyre's decoder and validator may panic on broken input; that is not the emitter's.
    oracle::catch(|| match selector % 5 {
        0 => Some(Arbitrary {
            program: generate_from(rng, 0, &GenConfig::default()).case.program,
            config: DispatchConfig::default(),
            origin: "generated",
        }),
        1 => Some(random_program_from(rng)),
        2 => Some(mutated_program_from(rng)),
        3 => wire(&wire_bytes_from(rng)),
        _ => wire(script),
    })
    .ok()
    .flatten()
}

fn wire(bytes: &[u8]) -> Option<Arbitrary> {
    Some(Arbitrary {
        program: Program::from_wire(bytes).ok()?,
        config: DispatchConfig::default(),
        origin: "wire",
    })
}

fuzz_target!(|data: &[u8]| {
    let Some(arbitrary) = program(data) else {
        return;
    };
    for target in targets() {
        let emitted = catch_unwind(AssertUnwindSafe(|| {
            emit_ptx(&arbitrary.program, arbitrary.config.workgroup_override, target)
        }));
        if emitted.is_err() {
            eprintln!(
                "emit_ptx panicked for {target} on a {} program:\n{:#?}\nconfig: {:?}",
                arbitrary.origin, arbitrary.program, arbitrary.config
            );
            std::process::abort();
        }
    }
});
