//! Offline gate over the vyre-primitives and vyre-intrinsics fixture corpora: every program either lowers to
//! PTX that `ptxas` accepts for sm_80 and sm_90 (its vector entry's module too), or is
//! rejected with a named construct.
//! Runs in CI with no GPU.

mod common;

use common::ptxas_batch::{assert_all_assemble, Kernel};

use std::collections::BTreeMap;
use vyre_cuda::codegen::{emit_ptx, PtxIsa, PtxTarget};

fn targets() -> [PtxTarget; 3] {
    [
        PtxTarget::sm80(),
        PtxTarget::sm90(),
        PtxTarget::new(90, PtxIsa::new(9, 0)).expect("sm_90 at PTX 9.0"),
    ]
}

#[test]
fn primitive_corpus_lowers_and_assembles() {
    let ptxas = common::ptxas::require_ptxas();
    let mut emitted = 0usize;
    let mut rejected: BTreeMap<String, Vec<&'static str>> = BTreeMap::new();
    let mut kernels = Vec::new();
    for entry in common::corpus::fixtures() {
        let program = (entry.build)();
        for target in targets() {
            match emit_ptx(&program, None, target) {
                Ok(kernel) => {
                    emitted += 1;
                    // The vector entry's, the checked variant's and the cooperative entry's
                    // modules too: the runtime loads them separately.
                    for ptx in kernel.modules().map(str::to_owned) {
                        kernels.push(Kernel {
                            id: format!("{} for {target}", entry.id),
                            ptx,
                        });
                    }
                }
                Err(error) => {
                    let construct = error.construct().unwrap_or("invalid").to_string();
                    let text = vyre_cuda::CudaError::from(error.clone()).to_string();
                    assert_eq!(text.matches("Fix:").count(), 1, "{text}");
                    if target == PtxTarget::sm80() {
                        rejected.entry(construct).or_default().push(entry.id);
                    }
                }
            }
        }
    }
    eprintln!("corpus: {emitted} kernels emitted across 3 targets");
    for (construct, ids) in &rejected {
        eprintln!(
            "rejected {} program(s) for {construct}: {:?}",
            ids.len(),
            &ids[..ids.len().min(4)]
        );
    }
    if let Some(ptxas) = &ptxas {
        assert_all_assemble(ptxas, &kernels);
    }
    assert!(emitted > 0, "the corpus produced no kernels");
}
