//! Workgroup tree reductions (vyre-primitives' `workgroup_tree`, under softmax, the norms,
//! cross entropy, mean and dot), lowered as one construct (emitters v51-v52,
//! `analysis::tree_reduction`): the levels of stride over 16 as straight-line code, those
//! of stride 16 .. 1 as shuffles in warp 0 with one barrier. Without a device: which shapes
//! take that form, and that every kernel here assembles with `ptxas` for sm_80 and sm_90.
//! With one: every shape against vyre-reference, byte for byte, over data that exposes
//! the combination order and the float conversions (NaN payloads, signed zeros,
//! subnormals, infinities, sums that round and overflow).

mod common;

use common::gpu::{backend, reference, Rng};
use common::ptxas;
use common::ptxas_batch::{assemble_everywhere, Kernel};
use vyre_cuda::codegen::{emit_ptx, PtxTarget};
use vyre_driver::DispatchConfig;
use vyre_foundation::ir::{BufferAccess, BufferDecl, DataType, Expr, Node, Program};
use vyre_primitives::reduce::workgroup_tree::{self as tree, WorkgroupReductionScope};

/// The six reductions the primitives build, by name.
const REDUCTIONS: [&str; 6] = [
    "sum_f32", "max_f32", "min_f32", "sum_u32", "max_u32", "min_u32",
];

fn is_f32(reduction: &str) -> bool {
    reduction.ends_with("f32")
}

/// The standalone program (first workgroup only) over `count` values with `tile` lanes.
fn first_workgroup(reduction: &str, count: u32, tile: u32) -> Program {
    let build = match reduction {
        "sum_f32" => tree::workgroup_sum_f32,
        "max_f32" => tree::workgroup_max_f32,
        "min_f32" => tree::workgroup_min_f32,
        "sum_u32" => tree::workgroup_sum_u32,
        "max_u32" => tree::workgroup_max_u32,
        _ => tree::workgroup_min_u32,
    };
    build("values", "out", count, tile)
}

/// Every workgroup reduces its own `tile` values into `out[workgroup]`; the scratch
/// buffer holds `scratch_count` elements (fewer than `tile` reads zeros past its end).
fn every_workgroup(reduction: &str, groups: u32, tile: u32, scratch_count: u32) -> Program {
    every_workgroup_with(reduction, groups, tile, scratch_count, true)
}

/// [`every_workgroup`], with or without the barrier between staging and the tree.
fn every_workgroup_with(
    reduction: &str,
    groups: u32,
    tile: u32,
    scratch_count: u32,
    staged_barrier: bool,
) -> Program {
    let element = if is_f32(reduction) {
        DataType::F32
    } else {
        DataType::U32
    };
    let scope = WorkgroupReductionScope::EveryWorkgroup;
    let child = match reduction {
        "sum_f32" => tree::sum_f32_child("test::tree", tile, "scratch", scope),
        "max_f32" => tree::max_f32_child("test::tree", tile, "scratch", scope),
        "min_f32" => tree::min_f32_child("test::tree", tile, "scratch", scope),
        "sum_u32" => tree::sum_u32_child("test::tree", tile, "scratch", scope),
        "max_u32" => tree::max_u32_child("test::tree", tile, "scratch", scope),
        _ => tree::min_u32_child("test::tree", tile, "scratch", scope),
    };
    let local = Expr::var("local");
    let group = Expr::WorkgroupId { axis: 0 };
    let at = Expr::add(Expr::mul(group.clone(), Expr::u32(tile)), local.clone());
    let mut entry = vec![
        Node::let_bind("local", Expr::LocalId { axis: 0 }),
        Node::store("scratch", local.clone(), Expr::load("values", at)),
    ];
    if staged_barrier {
        entry.push(Node::barrier());
    }
    entry.extend([
        child,
        Node::if_then(
            Expr::eq(local, Expr::u32(0)),
            vec![Node::store(
                "out",
                group,
                Expr::load("scratch", Expr::u32(0)),
            )],
        ),
    ]);
    Program::wrapped(
        vec![
            BufferDecl::storage("values", 0, BufferAccess::ReadOnly, element.clone())
                .with_count(groups * tile),
            BufferDecl::workgroup("scratch", scratch_count, element.clone()),
            BufferDecl::output("out", 1, element).with_count(groups),
        ],
        [tile, 1, 1],
        entry,
    )
}

/// f32 bit patterns a reduction must carry exactly: NaN payloads of both signs, signed
/// zeros, subnormals, infinities, the largest finite values, and ordinary numbers.
const SPECIAL_F32: [u32; 14] = [
    0x7FA0_0001,
    0xFFC0_0002,
    0x0000_0000,
    0x8000_0000,
    0x0000_0001,
    0x8040_0000,
    0x7F80_0000,
    0xFF80_0000,
    0x7F7F_FFFF,
    0xFF7F_FFFF,
    0x3F80_0000,
    0xBF80_0001,
    0x4B80_0001,
    0x3380_0000,
];

/// `count` values of one flavour: plain (finite, mixed magnitudes, so the order of the
/// additions shows), special (mostly the patterns above) or raw bits.
fn values(reduction: &str, count: u32, flavour: u32, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut word = || {
        let r = rng.next_u32();
        match (is_f32(reduction), flavour) {
            (true, 0) => {
                let magnitude = (r % 40) as i32 - 20;
                let sign = if r & 1 == 0 { 1.0 } else { -1.0 };
                (sign * (1.0 + (r >> 8) as f32 / 16_777_216.0) * 2f32.powi(magnitude)).to_bits()
            }
            (true, 1) if r % 4 != 0 => SPECIAL_F32[(r >> 4) as usize % SPECIAL_F32.len()],
            (false, 1) => [0, 1, u32::MAX, 0x8000_0000][(r >> 3) as usize % 4],
            _ => r,
        }
    };
    (0..count).flat_map(|_| word().to_le_bytes()).collect()
}

/// Tiles covering no level, levels only in warp 0, partial warps, non-powers of two,
/// and levels above the warp.
const TILES: [u32; 14] = [1, 2, 3, 4, 5, 16, 24, 32, 33, 48, 64, 100, 256, 1024];

struct Case {
    name: String,
    program: Program,
    inputs: Vec<Vec<u8>>,
    /// Whether the levels 16 .. 1 should run as shuffles.
    warp_form: bool,
}

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for reduction in REDUCTIONS {
        for (t, tile) in TILES.into_iter().enumerate() {
            let count = 3 * tile + 5;
            let program = first_workgroup(reduction, count, tile);
            let out = vec![0; 4];
            for flavour in 0..3 {
                let seed = (t as u64) << 8 | flavour as u64;
                cases.push(Case {
                    name: format!("{reduction} first workgroup, tile {tile}, flavour {flavour}"),
                    program: program.clone(),
                    inputs: vec![values(reduction, count, flavour, seed), out.clone()],
                    warp_form: tile > 1,
                });
            }
            let groups = 5;
            for scratch_count in [tile, (tile * 2 / 3).max(1)] {
                let program = every_workgroup(reduction, groups, tile, scratch_count);
                for flavour in 0..3 {
                    let seed = (t as u64) << 8 | 0x80 | flavour as u64;
                    cases.push(Case {
                        name: format!(
                            "{reduction} every workgroup, tile {tile}, scratch {scratch_count}, \
                             flavour {flavour}"
                        ),
                        program: program.clone(),
                        inputs: vec![
                            values(reduction, groups * tile, flavour, seed),
                            vec![0; groups as usize * 4],
                        ],
                        warp_form: tile > 1,
                    });
                }
            }
        }
    }
    cases
}

fn shuffles(program: &Program, target: PtxTarget) -> usize {
    let kernel = emit_ptx(program, None, target).expect("the emitter lowers every tree");
    kernel.ptx.matches("shfl.sync.down.b32").count()
}

#[test]
fn the_last_levels_of_one_dimensional_trees_run_as_shuffles() {
    for case in cases().iter().step_by(3) {
        // One shuffle per level of stride 16 .. 1 the tile has.
        let tile = case.program.workgroup_size()[0];
        let levels = (tile.next_power_of_two() / 2).min(16);
        let want = if case.warp_form {
            levels.trailing_zeros() as usize + 1
        } else {
            0
        };
        assert_eq!(
            shuffles(&case.program, PtxTarget::sm90()),
            want,
            "{}",
            case.name
        );
    }
    // Not in a two-dimensional workgroup: the second row's lanes run the levels too.
    let mut flat = first_workgroup("sum_f32", 100, 64);
    flat = Program::wrapped(flat.buffers().to_vec(), [64, 2, 1], flat.entry().to_vec());
    assert_eq!(shuffles(&flat, PtxTarget::sm90()), 0);
    // Without a barrier before the first level, that level stays (its reads may race
    // with the staging stores); the next one follows a barrier.
    let unsynchronised = every_workgroup_with("sum_f32", 2, 32, 32, false);
    assert_eq!(shuffles(&unsynchronised, PtxTarget::sm90()), 4);
    // Nor in a program that may return lanes: a returned lane cannot hand its element on.
    let returning = every_workgroup("sum_f32", 2, 64, 64);
    let mut entry = vec![Node::if_then(
        Expr::gt(Expr::LocalId { axis: 0 }, Expr::u32(1 << 20)),
        vec![Node::Return],
    )];
    entry.extend(returning.entry().iter().cloned());
    let returning = Program::wrapped(returning.buffers().to_vec(), [64, 1, 1], entry);
    assert_eq!(shuffles(&returning, PtxTarget::sm90()), 0);
}

#[test]
fn every_tree_kernel_assembles() {
    let Some(ptxas) = ptxas::require_ptxas() else {
        return;
    };
    let mut kernels = Vec::new();
    for case in cases().iter().step_by(3) {
        for target in [PtxTarget::sm80(), PtxTarget::sm90()] {
            let kernel = emit_ptx(&case.program, None, target).expect("emits");
            kernels.push(Kernel {
                id: format!("{} (sm_{})", case.name, target.sm()),
                ptx: kernel.ptx,
            });
        }
    }
    let refused = assemble_everywhere(&ptxas, &kernels);
    assert!(refused.is_empty(), "{refused:#?}");
}

#[test]
fn every_tree_matches_the_reference() {
    let Some(backend) = backend() else { return };
    let config = DispatchConfig::default();
    let cases = cases();
    let mut failures = Vec::new();
    for case in &cases {
        let want = reference(&case.program, &case.inputs).expect("the reference runs it");
        match backend.dispatch(&case.program, &case.inputs, &config) {
            Ok(got) if got == want => {}
            Ok(got) => failures.push(format!("{}: got {got:?}, want {want:?}", case.name)),
            Err(error) => failures.push(format!("{}: {error}", case.name)),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {}:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    println!(
        "workgroup trees: {} cases byte-identical to vyre-reference",
        cases.len()
    );
}
