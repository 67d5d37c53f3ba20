//! The public fixture corpora: every `OpEntry` of vyre-primitives (features
//! `inventory-registry`, `all-lego`) and vyre-intrinsics (default features `all`,
//! `subgroup-ops`), as one list.

#![allow(dead_code)]

use vyre_foundation::ir::Program;

/// Fixture inputs: cases x input buffers x bytes.
pub type FixtureInputs = fn() -> Vec<Vec<Vec<u8>>>;

/// One corpus entry.
pub struct Fixture {
    pub id: &'static str,
    pub build: fn() -> Program,
    /// Cases x input buffers, when the entry ships inputs.
    pub inputs: Option<FixtureInputs>,
}

/// Every entry of both corpora.
pub fn fixtures() -> Vec<Fixture> {
    let primitives = vyre_primitives::harness::all_entries().map(|e| Fixture {
        id: e.id,
        build: e.build,
        inputs: e.test_inputs,
    });
    let intrinsics = vyre_intrinsics::harness::all_entries().map(|e| Fixture {
        id: e.id,
        build: e.build,
        inputs: e.test_inputs,
    });
    primitives.chain(intrinsics).collect()
}
