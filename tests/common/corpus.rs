//! The public fixture corpora: every operation with a program builder in vyre's
//! `OperationRegistry` as linked here — vyre-primitives (features `inventory-registry`,
//! `all-lego`), vyre-libs (default features and `nn-linear-4bit`) and vyre-foundation's own. (vyre-intrinsics
//! 0.7.1 does not build against vyre 0.7.2 and is left out.)

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

// vyre-libs registers its operations only when it is linked.
use vyre_libs as _;
use vyre_primitives as _;

/// Every registered operation that has a program builder, sorted by id.
pub fn fixtures() -> Vec<Fixture> {
    let mut fixtures: Vec<Fixture> = vyre_foundation::operation::OperationRegistry::global()
        .iter()
        .filter_map(|e| {
            Some(Fixture {
                id: e.id,
                build: e.build?,
                inputs: e.test_inputs,
            })
        })
        .collect();
    fixtures.sort_by_key(|f| f.id);
    fixtures
}
