//! CPU: the public fold kernels (`vyre_cuda::collective_fold_program`) run on
//! vyre-reference with a simulated gathered buffer of W = 2 ..= 8 ranks and match the
//! multi-rank oracle (`common::multirank::reference_ranks`, which folds in rank order) byte
//! for byte, for every op and element type, random bits with NaNs, infinities, subnormals
//! and signed zeros included. Where the oracle refuses a pair (a bitwise op on a float),
//! the reference refuses the fold program too. The programs have the documented buffers
//! (binding 0 `gathered`, read; binding 1 `out`, read-write; both of the element type).
//! U64/I64: the oracle folds them on the host because the reference refuses 64-bit
//! integer arithmetic (V084). The runtime folds their bitwise ops as u32 words (checked
//! here, against the oracle's 64-bit fold) and hands Sum/Min/Max to NCCL, so those fold
//! programs are only required to do what the reference does with them.

mod common;

use common::cluster::{
    all_reduce, difference, fold_case, is_bitwise, pipelined, rank_values, size_of, Values, OPS,
};
use common::gpu::reference;
use common::multirank::reference_ranks;
use vyre_cuda::collective_fold_program;
use vyre_foundation::ir::{BufferAccess, CollectiveOp, DataType};

fn fold_types() -> Vec<DataType> {
    vec![
        DataType::U32,
        DataType::I32,
        DataType::F32,
        DataType::F16,
        DataType::BF16,
        DataType::F64,
        DataType::U64,
        DataType::I64,
    ]
}

#[test]
fn fold_programs_have_the_documented_buffers() {
    for element in fold_types() {
        for op in OPS {
            for world in [2, 8] {
                let program = collective_fold_program(op, element.clone(), world).expect("a fold");
                let buffers = program.buffers();
                let name = format!("{op:?} {element} W = {world}");
                assert_eq!(buffers.len(), 2, "{name}: {buffers:?}");
                let (gathered, out) = (&buffers[0], &buffers[1]);
                assert_eq!(
                    (gathered.name(), gathered.binding()),
                    ("gathered", 0),
                    "{name}"
                );
                assert_eq!((out.name(), out.binding()), ("out", 1), "{name}");
                assert_eq!(gathered.access(), BufferAccess::ReadOnly, "{name}");
                assert_eq!(out.access(), BufferAccess::ReadWrite, "{name}");
                assert_eq!(gathered.element(), element, "{name}");
                assert_eq!(out.element(), element, "{name}");
            }
        }
    }
}

#[test]
fn fold_programs_on_the_reference_match_the_oracle() {
    struct Case {
        op: CollectiveOp,
        element: DataType,
        world: usize,
        count: usize,
    }
    let mut cases = Vec::new();
    for world in 2..=8 {
        for element in fold_types() {
            for op in OPS {
                for count in [1, 7, 130] {
                    cases.push(Case {
                        op,
                        element: element.clone(),
                        world,
                        count,
                    });
                }
            }
        }
    }
    let (mut matched, mut wide_matched, mut refused, mut host_only) = (0, 0, 0, 0);
    let mut failures = Vec::new();
    pipelined(
        &cases,
        |index, case| {
            let ranks: Vec<Vec<Vec<u8>>> = (0..case.world)
                .map(|r| {
                    let seed = (index * 16 + r) as u64 + 3;
                    vec![rank_values(&case.element, case.count, Values::Bits, seed)]
                })
                .collect();
            let oracle = reference_ranks(&all_reduce(&case.element, case.count, case.op), &ranks);
            let (program, inputs) = fold_case(case.op, &case.element, &ranks);
            (oracle, reference(&program, &inputs))
        },
        |_, case, (oracle, folded)| {
            let name = format!(
                "{:?} {} W = {} x {}",
                case.op, case.element, case.world, case.count
            );
            let wide = matches!(case.element, DataType::U64 | DataType::I64);
            let native = wide && !is_bitwise(case.op);
            match (oracle, folded) {
                (Ok(want), Ok(got)) => {
                    if got.len() != 1 {
                        failures.push(format!("{name}: {} outputs, want 1 (out)", got.len()));
                    } else if let Some(why) =
                        difference(&got[0], &want[0][0], size_of(&case.element))
                    {
                        failures.push(format!("{name}: {why}"));
                    } else if native {
                        wide_matched += 1;
                    } else {
                        matched += 1;
                    }
                }
                (Err(_), Err(_)) => refused += 1,
                (Ok(_), Err(_)) if native => host_only += 1,
                (Ok(_), Err(error)) => failures.push(format!(
                    "{name}: the oracle folds it, the reference refuses the fold program: {error}"
                )),
                (Err(oracle), Ok(_)) => failures.push(format!(
                    "{name}: the oracle refuses it ({oracle}), the fold program runs"
                )),
            }
        },
    );
    println!(
        "{} cases: {matched} byte-identical, {refused} refused by both; 64-bit Sum/Min/Max (NCCL's in the runtime): {wide_matched} byte-identical, {host_only} the reference cannot run",
        cases.len()
    );
    for failure in &failures {
        println!("FAIL {failure}");
    }
    assert!(failures.is_empty(), "{} failures", failures.len());
    // Per world and count: every op over the six other types but the bitwise ops over the
    // four float types, and the bitwise ops over u64 and i64.
    assert_eq!(matched, 7 * 3 * (6 * 6 - 4 * 3 + 2 * 3), "pairs compared");
    assert_eq!(refused, 7 * 3 * 4 * 3, "bitwise ops on the 4 float types");
}

/// The fold is a left fold in rank order, visible in f32: `((3 + 2) + 1e8) + 4` rounds to
/// 100000016, which no other order or tree gives (tests/multirank_oracle.rs proves it).
#[test]
fn the_f32_sum_fold_is_left_to_right_in_rank_order() {
    let values = [3.0f32, 2.0, 1e8, 4.0];
    let gathered: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let program = collective_fold_program(CollectiveOp::Sum, DataType::F32, 4).expect("a fold");
    let got = reference(&program, &[gathered.clone(), vec![0; 4]]).expect("the reference runs it");
    assert_eq!(got, vec![100_000_016f32.to_le_bytes().to_vec()]);
    let reversed: Vec<u8> = values.iter().rev().flat_map(|v| v.to_le_bytes()).collect();
    let got = reference(&program, &[reversed, vec![0; 4]]).expect("the reference runs it");
    assert_ne!(got, vec![100_000_016f32.to_le_bytes().to_vec()]);
    // Two elements per rank: element i folds gathered[i], gathered[m + i], ...
    let two = [1.0f32, 10.0, 2.0, 20.0, 4.0, 40.0];
    let gathered: Vec<u8> = two.iter().flat_map(|v| v.to_le_bytes()).collect();
    let program = collective_fold_program(CollectiveOp::Max, DataType::F32, 3).expect("a fold");
    let got = reference(&program, &[gathered, vec![0; 8]]).expect("the reference runs it");
    let want: Vec<u8> = [4.0f32, 40.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(got, vec![want]);
}
